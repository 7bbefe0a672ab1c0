"""Subjects (C19): who a memory is about, and subject scoping keeping one person's memories out of
another's turns — through recall, preview, list, tags, get, the hook and extraction. The texts are
adversarial on purpose: the same words, similar sentences and shared entities for Ana and Bruno."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemoryNotFound,
    SiblingUnavailable,
)
from memory_worker.storage.store import Store

from .fakes import FakeEmbedder, FixedClock
from .test_extractor import Rig, add
from .test_pregenerate import Hooked, appended

AGENT = Caller.for_agent("bus", session_id="s1")
PERSON = Caller.human("cli")

# The same words, similar sentences, shared entities: nothing but the subject tells them apart.
ANA = [
    ("The user likes spicy food.", ["user"]),
    ("The user's sister lives in Lisbon and works as a nurse.", ["lisbon"]),
    ("The user is allergic to peanuts.", ["user"]),
]
BRUNO = [
    ("The user likes spicy food.", ["user"]),
    ("The user's brother lives in Lisbon and works as a teacher.", ["lisbon"]),
    ("The user is allergic to shellfish.", ["user"]),
]
GENERAL = "The office in Lisbon closes at 18:00 on Fridays."


async def call(
    service: MemoryService, function_id: str, caller: Caller = AGENT, **payload: Any
) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, caller)


async def _people(service: MemoryService, *, scoping: bool = True) -> dict[str, set[str]]:
    await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=scoping)
    ids: dict[str, set[str]] = {"ana": set(), "bruno": set(), "general": set()}
    for who, facts in (("ana", ANA), ("bruno", BRUNO)):
        for text, entities in facts:
            saved = await call(
                service, "memory::save", PERSON, text=text, entities=entities, subject=who
            )
            ids[who].add(saved["memory"]["id"])
    general = await call(service, "memory::save", PERSON, text=GENERAL, entities=["lisbon"])
    ids["general"].add(general["memory"]["id"])
    return ids


QUERIES = [
    "what food does the user like?",
    "who lives in Lisbon?",
    "what is the user allergic to?",
    "tell me about the user's family in Lisbon",
    "spicy food peanuts shellfish nurse teacher sister brother",
]


class TestSaving:
    async def test_the_same_words_about_two_people_are_two_memories(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service)
        assert len(ids["ana"] | ids["bruno"]) == 6
        again = await call(
            service, "memory::save", PERSON, text="the user likes  SPICY food.", subject="ana"
        )
        assert not again["created"] and again["memory"]["id"] in ids["ana"]  # Ana's reinforced

    async def test_a_subject_can_be_moved_or_cleared_by_update(
        self, service: MemoryService
    ) -> None:
        saved = await call(service, "memory::save", PERSON, text="Likes tea.", subject="ana")
        moved = await call(
            service, "memory::update", PERSON, id=saved["memory"]["id"], subject="bruno"
        )
        assert moved["memory"]["subject"] == "bruno"
        cleared = await call(
            service, "memory::update", PERSON, id=saved["memory"]["id"], subject=""
        )
        assert "subject" not in cleared["memory"]

    async def test_moving_onto_a_subject_that_holds_the_same_text_is_a_conflict(
        self, service: MemoryService
    ) -> None:
        first = await call(service, "memory::save", PERSON, text="Likes tea.", subject="ana")
        await call(service, "memory::save", PERSON, text="Likes tea.", subject="bruno")
        with pytest.raises(Conflict, match="duplicates"):
            await call(service, "memory::update", PERSON, id=first["memory"]["id"], subject="bruno")

    async def test_moving_a_memory_onto_a_full_subject_is_refused_and_changes_nothing(
        self, service: MemoryService
    ) -> None:
        """An edit never retires another memory to make room: past `max_per_subject` it is a
        conflict, and the subject keeps its cap (saves evict one at a time, never back under)."""
        create = {"name": "main", "subject_scoping": True, "max_per_subject": 2}
        await call(service, "memory::bank::create", PERSON, **create)
        for text in ("Ana likes cello.", "Ana likes opera."):
            await call(service, "memory::save", PERSON, text=text, subject="ana")
        general = (await call(service, "memory::save", PERSON, text=GENERAL))["memory"]
        with pytest.raises(Conflict, match="max_per_subject is 2"):
            await call(service, "memory::update", PERSON, id=general["id"], subject="ana")
        kept = (await call(service, "memory::get", PERSON, id=general["id"]))["memory"]
        assert "subject" not in kept and kept["revision"] == general["revision"]
        await call(service, "memory::update", PERSON, id=general["id"], subject="bruno")  # room
        stats = await call(service, "memory::stats", PERSON, bank="main")
        assert stats["by_subject"] == {"ana": 2, "bruno": 1}

    async def test_an_overlong_subject_is_invalid_input_and_saves_nothing(
        self, service: MemoryService
    ) -> None:
        with pytest.raises(InvalidInput, match="subject must be at most 128"):
            await call(service, "memory::save", PERSON, text="Likes tea.", subject="a" * 129)
        assert (await call(service, "memory::list", PERSON))["total"] == 0


class TestScopedRecall:
    @pytest.mark.parametrize("query", QUERIES)
    async def test_recall_for_one_person_never_returns_the_others(
        self, service: MemoryService, query: str
    ) -> None:
        ids = await _people(service)
        for me, other in (("ana", "bruno"), ("bruno", "ana")):
            got = await call(service, "memory::recall", query=query, subject=me, limit=20)
            seen = {m["memory"]["id"] for m in got["memories"]}
            assert not seen & ids[other], f"{other}'s memories reached {me}: {query}"
            assert seen <= ids[me] | ids["general"]

    async def test_recall_for_one_person_finds_their_own_and_the_general_pool(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service)
        got = await call(service, "memory::recall", query="who lives in Lisbon?", subject="ana")
        seen = {m["memory"]["id"] for m in got["memories"]}
        assert seen & ids["ana"] and seen & ids["general"]

    async def test_a_call_with_no_speaker_sees_general_memories_only(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service)
        for query in QUERIES:
            got = await call(service, "memory::recall", query=query, limit=20)
            assert {m["memory"]["id"] for m in got["memories"]} <= ids["general"]

    async def test_with_scoping_off_subjects_are_recorded_but_ignored(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service, scoping=False)
        got = await call(service, "memory::recall", query="allergic", subject="ana", limit=20)
        seen = {m["memory"]["id"] for m in got["memories"]}
        assert seen & ids["bruno"] and seen & ids["ana"]

    async def test_list_tags_and_get_are_scoped_too(self, service: MemoryService) -> None:
        ids = await _people(service)
        await call(
            service, "memory::save", PERSON, text="Ana plays cello.", tags="music", subject="ana"
        )
        listed = await call(service, "memory::list", subject="bruno")
        assert {m["id"] for m in listed["memories"]} == ids["bruno"] | ids["general"]
        assert (await call(service, "memory::tags", subject="bruno"))["tags"] == []
        with pytest.raises(MemoryNotFound):
            await call(service, "memory::get", id=sorted(ids["ana"])[0], subject="bruno")
        # A person's own view of the bank (no subject named) sees everyone.
        everything = await call(service, "memory::list", PERSON)
        assert everything["total"] == 8

    async def test_history_is_scoped_like_get(self, service: MemoryService) -> None:
        """Every revision's text is a read of the memory: an agent that may not `get` another
        person's memory may not read its history either."""
        ids = await _people(service)
        anas = sorted(ids["ana"])[0]
        with pytest.raises(MemoryNotFound):
            await call(service, "memory::history", id=anas)
        [general] = ids["general"]
        assert len((await call(service, "memory::history", id=general))["revisions"]) == 1
        assert len((await call(service, "memory::history", PERSON, id=anas))["revisions"]) == 1

    async def test_scoping_can_be_switched_on_later(self, service: MemoryService) -> None:
        ids = await _people(service, scoping=False)
        await call(service, "memory::bank::configure", PERSON, name="main", subject_scoping=True)
        got = await call(service, "memory::recall", query="allergic", subject="ana", limit=20)
        assert not {m["memory"]["id"] for m in got["memories"]} & ids["bruno"]


class TestScopedInjection:
    async def test_preview_for_bruno_carries_nothing_of_ana_floor_included(
        self, service: MemoryService
    ) -> None:
        await _people(service)
        for query in (*QUERIES, "hello there"):  # "hello": no match, the ambient floor fills in
            preview = await call(service, "memory::preview", PERSON, query=query, subject="bruno")
            shown = " ".join(m["memory"]["text"] for m in preview["memories"])
            assert "sister" not in shown and "peanuts" not in shown
            assert "sister" not in (preview.get("message") or "")
            assert all(m["memory"].get("subject") in (None, "bruno") for m in preview["memories"])

    async def test_the_hook_injects_only_the_speakers_memories(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service)
        hooked = Hooked(service)
        hooked.sessions.add("s1")
        reply = await hooked.step(
            "s1",
            "what is the user allergic to? and the family?",
            metadata={"memory_subject": "bruno"},
        )
        assert reply is not None
        injected = set(reply["annotations"]["memory_ids"])
        assert injected and not injected & ids["ana"]
        assert reply["annotations"]["memory_subject"] == "bruno"
        text = " ".join(appended(reply))
        assert "shellfish" in text and "peanuts" not in text

    async def test_the_hook_reads_the_speaker_from_the_session_when_the_turn_names_none(
        self, service: MemoryService
    ) -> None:
        ids = await _people(service)
        hooked = Hooked(service)
        hooked.sessions.add("s2")
        hooked.sessions.metas["s2"]["metadata"]["memory_subject"] = "ana"
        reply = await hooked.step("s2", "what is the user allergic to?")
        assert reply is not None
        injected = set(reply["annotations"]["memory_ids"])
        assert injected & ids["ana"] and not injected & ids["bruno"]

    async def test_a_failed_session_lookup_means_no_speaker_never_someone_else(
        self, service: MemoryService
    ) -> None:
        await _people(service)
        hooked = Hooked(service)
        assert await hooked.resolver.subject("s3", None) is None
        hooked.sessions.fail = True
        assert await hooked.resolver.subject("s3", {}) is None
        assert await hooked.resolver.subject("s3", {"memory_subject": " ana "}) == "ana"

    async def test_a_speaker_named_by_a_number_is_that_person_not_nobody(
        self, service: MemoryService
    ) -> None:
        """A user id is often a number: `memory_subject: 12345` was read as nobody, so the
        hook showed them none of their memories and what was learned in their turns became
        general — every other person's to see. A door's `subject=12345` already means "12345"."""
        ids = await _people(service)
        mine = await call(
            service, "memory::save", PERSON, text="The user is allergic to kiwi.", subject=12345
        )
        hooked = Hooked(service)
        hooked.sessions.add("s4")
        reply = await hooked.step(
            "s4", "what is the user allergic to?", metadata={"memory_subject": 12345}
        )
        assert reply is not None
        assert reply["annotations"]["memory_subject"] == "12345"
        injected = set(reply["annotations"]["memory_ids"])
        assert mine["memory"]["id"] in injected and not injected & (ids["ana"] | ids["bruno"])
        assert await hooked.resolver.subject("s4", {"memory_subject": True}) is None


async def test_an_import_takes_a_subject_named_by_a_number_as_a_save_does(
    service: MemoryService,
) -> None:
    """`memory::save` with `subject: 12345` is about "12345"; an import of the same record was
    refused (`subject: Input should be a valid string`): a file another tool wrote with numeric
    user ids could not be brought in."""
    saved = await call(
        service, "memory::save", PERSON, bank="main", text="Likes kiwi.", subject=12345
    )
    records = [
        {"text": "Plays the cello.", "subject": 12345},
        {"text": 20261207, "tags": [2024], "entities": [7], "subject": 12345},  # as save takes
    ]
    out = await call(service, "memory::import", PERSON, bank="main", records=records)
    assert out["imported"] == 2
    listed = await call(service, "memory::list", PERSON, bank="main", subject="12345")
    subjects = {m["subject"] for m in listed["memories"]}
    assert subjects == {saved["memory"]["subject"]} == {"12345"} and listed["total"] == 3
    [numeric] = [m for m in listed["memories"] if m["text"] == "20261207"]
    assert (numeric["tags"], numeric["entities"]) == (["2024"], ["7"])


class TestExtraction:
    async def test_extraction_writes_about_the_speaker_and_shows_the_model_only_theirs(
        self, service: MemoryService
    ) -> None:
        await _people(service)
        rig = Rig(service)
        rig.chat.say(
            "user",
            "I am allergic to peanuts, I love hiking in Sintra, and the cafeteria opens at 8:00.",
        )
        rig.model.replies.append(
            json.dumps(
                {
                    "memories": [
                        add("The user loves hiking in Sintra.", category="preference"),
                        add("The cafeteria opens at 8:00.", about="general", category="made-up"),
                    ]
                }
            )
        )
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="bruno"), "main")
        known = rig.model.sent[0].split("NEW MESSAGES")[0]
        assert "shellfish" in known  # Bruno's own memory is shown…
        assert "peanuts" not in known and "sister" not in known  # …Ana's never, in Bruno's turn
        listed = await call(service, "memory::list", PERSON)
        by_text = {m["text"]: m for m in listed["memories"]}
        hiking = by_text["The user loves hiking in Sintra."]
        assert hiking["subject"] == "bruno" and hiking["category"] == "preference"
        cafeteria = by_text["The cafeteria opens at 8:00."]
        assert "subject" not in cafeteria and cafeteria["category"] == "fact"  # unknown → fact

    async def test_a_general_fact_carries_none_of_the_speakers_words(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """The window and message a fact came from are stored as its lanes. On a general fact
        from Bruno's turn they were his words: handed with it to Ana's agent, and kept on disk
        after Bruno's erasure. His own fact keeps them (they go with it)."""
        await _people(service)
        rig = Rig(service)
        said = "I am allergic to peanuts since my surgery, and the cafeteria opens at 8:00."
        rig.chat.say("user", said)
        reply = {
            "memories": [
                add("The cafeteria opens at 8:00.", about="general", intention="eat early"),
                add("The user had surgery.", entities=["user"]),
            ]
        }
        rig.model.replies.append(json.dumps(reply))
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="bruno"), "main")
        listed = await call(service, "memory::list", PERSON)
        by_text = {m["text"]: m for m in listed["memories"]}
        own = by_text["The user had surgery."]
        assert own["subject"] == "bruno" and own["context"] == said == own["intention"]
        seen = await _in_turn(
            service, "memory::recall", "ana", query="when does the cafeteria open"
        )
        [cafeteria] = [m["memory"] for m in seen["memories"] if "cafeteria" in m["memory"]["text"]]
        assert "context" not in cafeteria and "intention" not in cafeteria
        await call(
            service, "memory::forget-subject", PERSON, subject="bruno", confirm="destructive"
        )
        files = [p for p in data_dir.rglob("*") if p.is_file()]
        assert not [p for p in files if b"surgery" in p.read_bytes()]

    async def test_a_speakers_standing_instruction_is_theirs_not_the_banks_rule(
        self, service: MemoryService
    ) -> None:
        """The `learned` rule reaches every turn of the bank: Ana's "never mention my divorce"
        became Bruno's system prompt too. In a subject-scoped bank it is kept as a preference
        about her; without a speaker it is the bank's rule."""
        await _people(service)
        rig = Rig(service)
        rule = "Never mention the user's divorce."
        rig.chat.say("user", "Please never bring up my divorce again.")
        rig.model.replies.append(json.dumps({"memories": [], "rules": [rule]}))
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="ana"), "main")
        rules = await call(service, "memory::rule::list", PERSON, bank="main")
        assert rules["rules"] == []
        preview = await call(service, "memory::preview", PERSON, query="hi", subject="bruno")
        assert "divorce" not in preview["system_prompt_section"]
        listed = await call(service, "memory::list", PERSON, subject="ana", category="preference")
        kept = [m for m in listed["memories"] if m["text"] == rule]
        assert kept and kept[0]["subject"] == "ana"
        rig.chat.say("user", "Always answer in Portuguese, everyone here reads it.")
        rig.model.replies.append(json.dumps({"memories": [], "rules": ["Answer in Portuguese."]}))
        await rig.extractor.extract(ExtractJob(session_id="s1"), "main")  # nobody speaking
        rules = await call(service, "memory::rule::list", PERSON, bank="main")
        assert "Answer in Portuguese." in rules["rules"][0]["content"]

    async def test_a_fact_about_the_speaker_the_model_calls_general_stays_theirs(
        self, service: MemoryService
    ) -> None:
        """A small model marks `"about": "general"` on a fact about the person speaking: written
        general, Bruno's allergy was in every other person's recall."""
        await _people(service)
        rig = Rig(service)
        rig.chat.say("user", "I'm allergic to kiwi, and my sister Rita lives in Faro.")
        facts = [
            add("The user is allergic to kiwi.", about="general"),
            add("My sister Rita lives in Faro.", about="general"),
        ]
        rig.model.replies.append(json.dumps({"memories": facts}))
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="bruno"), "main")
        seen_by_ana = await call(service, "memory::list", subject="ana", limit=100)
        texts = {m["text"] for m in seen_by_ana["memories"]}
        assert "The user is allergic to kiwi." not in texts
        assert "My sister Rita lives in Faro." not in texts
        seen_by_bruno = await call(service, "memory::list", subject="bruno", limit=100)
        assert "The user is allergic to kiwi." in {m["text"] for m in seen_by_bruno["memories"]}

    async def test_a_speakers_instruction_kept_as_a_memory_counts_toward_the_per_turn_cap(
        self, service: MemoryService
    ) -> None:
        """`max_memories_per_turn` is what one pass may write: a standing instruction kept as
        the speaker's preference is a memory too (at 0, a scoped bank still got three a turn)."""
        await _people(service)
        service.settings = Settings(max_memories_per_turn=1)
        rig = Rig(service)
        rig.chat.say("user", "I adopted a cat named Miso. Never mention my divorce, and no emojis.")
        rules = ["Never mention the user's divorce.", "Never use emojis."]
        reply = {"memories": [add("The user adopted a cat named Miso.")], "rules": rules}
        rig.model.replies.append(json.dumps(reply))
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="ana"), "main")
        listed = await call(service, "memory::list", PERSON, subject="ana", limit=100)
        new = {m["text"] for m in listed["memories"]} - {text for text, _ in ANA} - {GENERAL}
        assert new == {"The user adopted a cat named Miso."}


@given(
    subjects=st.lists(st.sampled_from(["ana", "bruno", "caio", None]), min_size=1, max_size=12),
    asker=st.sampled_from(["ana", "bruno", "caio", "dora", None]),
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_property_a_scoped_read_never_shows_another_subject(
    service: MemoryService, subjects: list[str | None], asker: str | None
) -> None:
    await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
    for i, who in enumerate(subjects):
        await call(
            service, "memory::save", PERSON, text=f"The user likes colour {i % 3}.", subject=who
        )
    got = await call(
        service, "memory::recall", query="what colour does the user like", subject=asker, limit=50
    )
    listed = await call(service, "memory::list", subject=asker, limit=500)
    for memory in [m["memory"] for m in got["memories"]] + listed["memories"]:
        assert memory.get("subject") in (None, asker)
    for bank in service.store.names():  # hypothesis reuses the fixture: start each example empty
        await service.store.trash(bank, service.clock())


class TestConsolidation:
    async def test_the_same_words_about_two_people_are_never_merged(
        self, service: MemoryService
    ) -> None:
        from memory_worker.adapters.consolidate.clients import InProcessClient
        from memory_worker.consolidate.config import ConsolidateSettings
        from memory_worker.consolidate.runner import Consolidator

        await call(service, "memory::bank::create", PERSON, name="main")  # scoping off: all seen
        ana = await call(service, "memory::save", PERSON, text="The user likes tea.", subject="ana")
        bruno = await call(
            service, "memory::save", PERSON, text="the user likes tea", subject="bruno"
        )
        twin = await call(
            service, "memory::save", PERSON, text="The user likes tea!", subject="ana"
        )
        report = await Consolidator(InProcessClient(service)).run(
            ConsolidateSettings(), bank="main"
        )
        assert report.banks[0].merged == 1  # Ana's two restatements, nothing of Bruno's
        live = {m["id"] for m in (await call(service, "memory::list", PERSON))["memories"]}
        assert (
            bruno["memory"]["id"] in live
            and len(live & {ana["memory"]["id"], twin["memory"]["id"]}) == 1
        )

    async def test_an_automatic_supersede_across_subjects_is_refused(
        self, service: MemoryService
    ) -> None:
        ana = await call(service, "memory::save", PERSON, text="Likes tea.", subject="ana")
        bruno = await call(service, "memory::save", PERSON, text="Likes coffee.", subject="bruno")
        payload = {"id": ana["memory"]["id"], "superseded_by": bruno["memory"]["id"]}
        with pytest.raises(Conflict, match="different subjects"):
            await catalog.call(
                service, "memory::supersede", payload, Caller.internal("consolidate")
            )
        await catalog.call(service, "memory::supersede", payload, PERSON)  # a person may


class TestExtractionOnKnownMemories:
    """A pass acts on the memory it was shown, in that memory's own scope (second review)."""

    async def test_a_restated_general_memory_is_reinforced_not_copied_for_the_speaker(
        self, service: MemoryService
    ) -> None:
        await _people(service)
        rig = Rig(service)
        rig.chat.say("user", "Reminder: the office in Lisbon closes at 18:00 on Fridays.")

        def restate(sent: str) -> str:
            ref = next(line.split(":")[0] for line in sent.splitlines() if GENERAL in line)
            return json.dumps({"memories": [{"op": "restate", "ref": ref}, add(GENERAL)]})

        rig.model.replies.append(restate)
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="bruno"), "main")
        listed = await call(service, "memory::list", PERSON, limit=100)
        same = [m for m in listed["memories"] if m["text"] == GENERAL]
        assert len(same) == 1 and "subject" not in same[0]
        assert same[0]["corroboration"] == 1

    async def test_a_correction_of_a_general_memory_stays_general(
        self, service: MemoryService
    ) -> None:
        await _people(service)
        rig = Rig(service)
        rig.chat.say("user", "Heads up: the office in Lisbon now closes at 17:00 on Fridays.")
        new = "The office in Lisbon closes at 17:00 on Fridays."

        def correct(sent: str) -> str:
            ref = next(line.split(":")[0] for line in sent.splitlines() if GENERAL in line)
            item = {"op": "correct", "ref": ref, "text": new, "reason": "new hours"}
            return json.dumps({"memories": [item]})

        rig.model.replies.append(correct)
        await rig.extractor.extract(ExtractJob(session_id="s1", subject="bruno"), "main")
        seen_by_ana = await call(service, "memory::list", subject="ana", limit=100)
        assert new in {m["text"] for m in seen_by_ana["memories"]}


class _Speaker:
    """The bus resolver's speaker lookup, for one session's speaker."""

    def __init__(self, speaker: str | None) -> None:
        self.speaker = speaker

    async def subject(
        self, session_id: str, turn_metadata: object = None, *, strict: bool = False
    ) -> str | None:
        return self.speaker


class _LookupFails:
    """The bus resolver when session-manager fails: nobody for a read, raised for a write."""

    async def subject(
        self, session_id: str, turn_metadata: object = None, *, strict: bool = False
    ) -> str | None:
        if strict:
            raise SiblingUnavailable("session::get failed (TIMEOUT)")
        return None


async def _in_turn(
    service: MemoryService,
    function_id: str,
    speaker: str | _LookupFails | None,
    **payload: Any,
) -> dict[str, Any]:
    """A public bus call made by an agent inside a turn whose speaker is `speaker`, as the
    engine worker makes it (payload and caller from `turn_call`)."""
    from memory_worker.adapters.bus import worker

    metadata = {"session_id": "s1", "turn_id": "t1"}
    spec = catalog.find(function_id)
    resolver = speaker if isinstance(speaker, _LookupFails) else _Speaker(speaker)
    data, caller = await worker.turn_call(spec, payload, metadata, resolver)  # type: ignore[arg-type]
    return await catalog.call(service, function_id, data, caller)


class TestAgentsInATurn:
    async def test_a_save_whose_speaker_could_not_be_looked_up_is_refused_not_general(
        self, service: MemoryService
    ) -> None:
        """A failed session lookup made the speaker nobody: fine for a read (general memories
        only), but an agent's save in that turn was written general, in every person's recall
        of a bank partitioned by person. It is `sibling_unavailable` now (the agent retries)."""
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        general = (await call(service, "memory::save", PERSON, text=GENERAL))["memory"]
        with pytest.raises(SiblingUnavailable):
            await _in_turn(service, "memory::save", _LookupFails(), text="The user is pregnant.")
        listed = await call(service, "memory::list", PERSON, limit=100)
        assert [m["id"] for m in listed["memories"]] == [general["id"]]
        seen = await _in_turn(service, "memory::recall", _LookupFails(), query="office Lisbon")
        assert [m["memory"]["id"] for m in seen["memories"]] == [general["id"]]

    async def test_an_update_without_subject_leaves_the_memorys_own(
        self, service: MemoryService
    ) -> None:
        """An omitted `subject` means unchanged: an agent's edit of a general memory in Bruno's
        turn made it Bruno's, out of every other person's sight."""
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        general = (await call(service, "memory::save", PERSON, text=GENERAL))["memory"]
        edited = await _in_turn(service, "memory::update", "bruno", id=general["id"], tags=["x"])
        assert "subject" not in edited["memory"]
        seen = await _in_turn(service, "memory::recall", "ana", query="office Lisbon Fridays")
        assert [m["memory"]["id"] for m in seen["memories"]] == [general["id"]]
        saved = await _in_turn(service, "memory::save", "bruno", text="The user plays chess.")
        assert saved["memory"]["subject"] == "bruno"  # a save without one is about the speaker

    @pytest.mark.parametrize(
        ("function_id", "change"),
        [
            ("memory::update", {"tags": ["leaked"]}),
            ("memory::update", {"subject": ""}),
            ("memory::delete", {}),
            ("memory::pin", {"pinned": True}),
            ("memory::history", {}),
        ],
    )
    async def test_another_persons_memory_is_not_there_for_a_change_by_id(
        self, service: MemoryService, function_id: str, change: dict[str, Any]
    ) -> None:
        """`memory::get` already said `memory_not_found`; an update, delete or pin of the same id
        changed Ana's memory from Bruno's turn and handed it back, text and all."""
        ids = await _people(service)
        bank = service.store.get("main")
        ana = sorted(ids["ana"])[0]
        before = bank.latest(ana)
        with pytest.raises(MemoryNotFound):
            await _in_turn(service, function_id, "bruno", id=ana, **change)
        with pytest.raises(MemoryNotFound):  # nobody speaking: general memories only
            await _in_turn(service, function_id, None, id=ana, **change)
        assert bank.latest(ana) == before
        # The speaker's own and the general pool stay theirs to change.
        own = await _in_turn(service, function_id, "ana", id=ana, **change)
        assert own.get("memory", own).get("id", ana) == ana
        general = sorted(ids["general"])[0]
        await _in_turn(service, function_id, "bruno", id=general, **change)

    @pytest.mark.parametrize("speaker", [None, "member:42"])
    async def test_a_read_naming_someone_by_the_seed_pair_sees_the_speakers_scope(
        self, service: MemoryService, speaker: str | None
    ) -> None:
        """An agent's read in a turn sees what the speaker may see whatever subject it names;
        named by `subject_type`/`subject_id` instead of `subject`, the pair became the subject
        after the turn's scope was set: with nobody speaking, another person's memories came
        back, and in someone's turn the read was refused as naming two subjects."""
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        theirs = await call(
            service,
            "memory::save",
            PERSON,
            text="The user is allergic to kiwi.",
            subject="member:7",
        )
        pair = {"subject_type": "member", "subject_id": "7"}
        for function_id, ask in (
            ("memory::recall", {"query": "allergic kiwi"}),
            ("memory::list", {}),
        ):
            seen = await _in_turn(service, function_id, speaker, **ask, **pair)
            ids = {m.get("memory", m)["id"] for m in seen["memories"]}
            assert theirs["memory"]["id"] not in ids, function_id

    async def test_an_agents_export_holds_no_other_persons_memory(
        self, service: MemoryService
    ) -> None:
        """`memory::history` hid another person's memory from an agent; `memory::export` (read
        only, an operator may approve it) handed over every person's, every revision."""
        ids = await _people(service)
        moved = sorted(ids["ana"])[0]  # once Ana's, general now: its old revision names her
        await call(service, "memory::update", PERSON, id=moved, subject="")
        for speaker, mine in (("bruno", ids["bruno"]), (None, set())):
            out = await _in_turn(service, "memory::export", speaker, bank="main")
            exported = {r["id"] for r in out["records"]}
            assert exported == ids["general"] | mine, speaker
            assert all(r.get("subject") in (None, speaker) for r in out["records"])
        agent = await call(service, "memory::export", AGENT, bank="main")  # MCP: no turn
        assert {r["id"] for r in agent["records"]} == ids["general"]
        whole = await call(service, "memory::export", PERSON, bank="main")
        assert len({r["id"] for r in whole["records"]}) == 7

    async def test_an_agents_stats_count_no_other_person(self, service: MemoryService) -> None:
        """`memory::stats` named every person the bank knows of, with their counts, to an agent
        in anyone's turn; it counts what the agent may see, as `memory::list`'s total does."""
        await _people(service)
        out = await _in_turn(service, "memory::stats", "bruno", bank="main")
        assert out["by_subject"] == {"bruno": 3} and out["general"] == 1 and out["memories"] == 4
        nobody = await _in_turn(service, "memory::stats", None, bank="main")
        assert nobody["by_subject"] == {} and nobody["memories"] == 1
        whole = await call(service, "memory::stats", PERSON, bank="main")
        assert whole["by_subject"] == {"ana": 3, "bruno": 3} and whole["memories"] == 7

    async def test_an_agents_bank_get_and_list_count_no_other_person(
        self, service: MemoryService
    ) -> None:
        """`memory::bank::get`/`list` told an agent in Bruno's turn the whole bank's counts (7
        memories, 2 subjects) where its `memory::stats` said 4: how many people the bank knows
        of, and how much about them. They count what the agent may see, as stats does."""
        ids = await _people(service)
        await call(service, "memory::pin", PERSON, id=min(ids["ana"]), pinned=True)  # Ana's
        reads = (("memory::bank::get", {"name": "main"}), ("memory::bank::list", {}))
        for function_id, payload in reads:
            for speaker, memories, subjects in (("bruno", 4, 1), (None, 1, 0)):
                out = await _in_turn(service, function_id, speaker, **payload)
                [info] = [out["bank"]] if "bank" in out else out["banks"]
                assert (info["memories"], info["subjects"]) == (memories, subjects), speaker
                stats = await _in_turn(service, "memory::stats", speaker, bank="main")
                assert info["pinned"] == stats["pinned"], speaker
            mcp = await call(service, function_id, AGENT, **payload)  # no turn: general only
            [info] = [mcp["bank"]] if "bank" in mcp else mcp["banks"]
            assert (info["memories"], info["subjects"]) == (1, 0)
            whole = await call(service, function_id, PERSON, **payload)
            [info] = [whole["bank"]] if "bank" in whole else whole["banks"]
            assert (info["memories"], info["pinned"], info["subjects"]) == (7, 1, 2)

    async def test_an_agents_save_names_no_other_persons_memory_it_evicted(
        self, service: MemoryService
    ) -> None:
        """Ana new to a full bank: her save evicts the bank's first to go, one of Bruno's. The
        agent's answer named it in `evicted` (an id is the fingerprint of his text); it names
        only what the agent may see, while a person's save still names every one."""
        create = {"name": "main", "subject_scoping": True, "max_memories": 3}
        await call(service, "memory::bank::create", PERSON, **create)
        bruno = [
            (await call(service, "memory::save", PERSON, text=t, subject="bruno"))["memory"]["id"]
            for t, _ in BRUNO
        ]
        saved = await _in_turn(service, "memory::save", "ana", text="Ana plays the cello.")
        assert saved["memory"]["subject"] == "ana" and "evicted" not in saved
        listed = await call(service, "memory::list", PERSON, bank="main")
        assert len({m["id"] for m in listed["memories"]} & set(bruno)) == 2  # one did go
        by_person = await call(service, "memory::save", PERSON, text="Bruno sings.", subject="ana")
        assert len(by_person["evicted"]) == 1

    async def test_an_agents_stats_leave_the_expiry_report_to_whoever_counts_all(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """An agent's stats lists its speaker's expired memories without taking the report: a
        person's (or consolidation's) next stats still lists every one the reaper retired."""
        create = {"name": "main", "subject_scoping": True, "retention": {"context": 1}}
        await call(service, "memory::bank::create", PERSON, **create)
        ids = {}
        for who in ("ana", "bruno"):
            saved = await call(
                service, "memory::save", PERSON, bank="main", text=f"{who} is in Lisbon today.",
                category="context", subject=who,
            )  # fmt: skip
            ids[who] = saved["memory"]["id"]
        clock.advance_days(1)
        clock.advance(1)  # older than its one-day TTL (seed 004: "older than")
        out = await _in_turn(service, "memory::stats", "bruno", bank="main")
        assert out["expired"] == [ids["bruno"]]
        whole = await call(service, "memory::stats", PERSON, bank="main")
        assert sorted(whole["expired"]) == sorted(ids.values())

    async def test_a_write_in_a_turn_is_about_its_speaker_or_no_one(
        self, service: MemoryService
    ) -> None:
        """Seed 004: writes classify a memory as the current interlocutor's or general. An
        agent in Bruno's turn saving "about ana" evicted Ana's memories at her cap (a chatty
        interlocutor evicting another person's), and a re-save of her text handed her record
        back; moving a memory onto Ana did the same."""
        create = {"name": "main", "subject_scoping": True, "max_per_subject": 2}
        await call(service, "memory::bank::create", PERSON, **create)
        ana = [
            (await call(service, "memory::save", PERSON, text=t, subject="ana"))["memory"]["id"]
            for t in ("Ana likes cello.", "Ana likes opera.")
        ]
        with pytest.raises(Forbidden):
            await _in_turn(service, "memory::save", "bruno", text="Ana likes jazz.", subject="ana")
        with pytest.raises(Forbidden):
            await _in_turn(service, "memory::save", "bruno", text="Ana likes cello.", subject="ana")
        general = (await call(service, "memory::save", PERSON, text=GENERAL))["memory"]["id"]
        with pytest.raises(Forbidden):
            await _in_turn(service, "memory::update", "bruno", id=general, subject="ana")
        listed = await call(service, "memory::list", PERSON, subject="ana")
        assert {m["id"] for m in listed["memories"]} == {*ana, general}
        # Their own, or general, is theirs to write.
        await _in_turn(service, "memory::save", "bruno", text="Bruno likes chess.", subject="bruno")
        await _in_turn(service, "memory::save", "bruno", text="The office has a piano.", subject="")
        await _in_turn(service, "memory::update", "bruno", id=general, subject="bruno")


class TestSpellings:
    """One person whatever the case they are typed in: "Ana", "ana" and "ANA" are one subject
    for recall's scope, the caps, the right to be forgotten and the counts (Unicode casefold on
    top of NFC). Forgetting "ana" used to leave every memory about "Ana" in place and report
    success. The spelling a memory was saved with is kept as given."""

    async def _spelled(self, service: MemoryService) -> dict[str, str]:
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        ids = {}
        for who, text in (
            ("Ana", "The user is allergic to peanuts."),
            ("ANA", "The user's sister is a nurse in Lisbon."),
            ("ana", "The user plays the cello."),
            ("Bob", "The user is allergic to shellfish."),
            ("STRASSE", "The user lives on a long street."),
        ):
            saved = await call(service, "memory::save", PERSON, text=text, subject=who)
            assert saved["memory"]["subject"] == who  # stored as given
            ids[who] = saved["memory"]["id"]
        return ids

    async def test_scoped_recall_list_and_get_find_every_spelling_of_the_speaker(
        self, service: MemoryService
    ) -> None:
        ids = await self._spelled(service)
        got = await call(service, "memory::recall", query="allergic peanuts", subject="ana")
        seen = {m["memory"]["id"] for m in got["memories"]}
        assert ids["Ana"] in seen and ids["Bob"] not in seen
        listed = await call(service, "memory::list", subject="aNa", limit=50)
        assert {m["id"] for m in listed["memories"]} == {ids["Ana"], ids["ANA"], ids["ana"]}
        assert (await call(service, "memory::get", id=ids["ANA"], subject="ana"))["memory"]
        straße = await call(service, "memory::list", subject="straße")  # casefold, not lower
        assert [m["id"] for m in straße["memories"]] == [ids["STRASSE"]]

    async def test_the_same_text_in_another_case_of_the_subject_is_the_same_memory(
        self, service: MemoryService
    ) -> None:
        ids = await self._spelled(service)
        again = await call(
            service, "memory::save", PERSON, text="The user plays the cello.", subject="ANA"
        )
        assert not again["created"] and again["memory"]["id"] == ids["ana"]

    async def test_stats_count_one_row_per_person(self, service: MemoryService) -> None:
        await self._spelled(service)
        stats = await call(service, "memory::stats", PERSON, bank="main")
        assert len(stats["by_subject"]) == 3 and sum(stats["by_subject"].values()) == 5
        [(ana, three)] = [(k, n) for k, n in stats["by_subject"].items() if k.lower() == "ana"]
        assert three == 3 and ana in ("Ana", "ANA", "ana")
        shown = await call(service, "memory::bank::get", PERSON, name="main")
        assert shown["bank"]["subjects"] == 3

    async def test_the_per_subject_cap_counts_every_spelling_together(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        create = {"name": "main", "subject_scoping": True, "max_per_subject": 2}
        await call(service, "memory::bank::create", PERSON, **create)
        first = await call(service, "memory::save", PERSON, text="Ana likes cello.", subject="Ana")
        clock.advance(10)
        await call(service, "memory::save", PERSON, text="Ana likes opera.", subject="ana")
        clock.advance(10)
        third = await call(service, "memory::save", PERSON, text="Ana likes jazz.", subject="ANA")
        assert third["evicted"] == [first["memory"]["id"]]
        listed = await call(service, "memory::list", PERSON, limit=50)
        assert listed["total"] == 2
        general = (await call(service, "memory::save", PERSON, text=GENERAL))["memory"]
        with pytest.raises(Conflict, match="max_per_subject is 2"):
            await call(service, "memory::update", PERSON, id=general["id"], subject="aNA")

    async def test_forgetting_one_spelling_erases_every_spelling(
        self, service: MemoryService
    ) -> None:
        ids = await self._spelled(service)
        out = await call(
            service, "memory::forget-subject", PERSON, subject="ana", confirm="destructive"
        )
        assert sorted(out["erased"]) == sorted([ids["Ana"], ids["ANA"], ids["ana"]])
        listed = await call(service, "memory::list", PERSON, include_superseded=True, limit=50)
        assert {m["id"] for m in listed["memories"]} == {ids["Bob"], ids["STRASSE"]}

    async def test_an_agents_view_in_a_turn_matches_its_speaker_in_any_case(
        self, service: MemoryService
    ) -> None:
        ids = await self._spelled(service)
        out = await _in_turn(service, "memory::stats", "ANA", bank="main")
        assert sum(out["by_subject"].values()) == 3 and out["memories"] == 3
        hist = await _in_turn(service, "memory::history", "aNa", id=ids["Ana"])
        assert len(hist["revisions"]) == 1
        edited = await _in_turn(service, "memory::update", "ana", id=ids["ANA"], tags=["x"])
        assert edited["memory"]["subject"] == "ANA"
        exported = await _in_turn(service, "memory::export", "Ana", bank="main")
        assert {r["id"] for r in exported["records"]} == {ids["Ana"], ids["ANA"], ids["ana"]}

    @pytest.mark.parametrize("snapshot", [False, True])
    async def test_all_of_it_holds_after_a_restart(
        self,
        service: MemoryService,
        monkeypatch: pytest.MonkeyPatch,
        data_dir: Path,
        snapshot: bool,
    ) -> None:
        from memory_worker.storage import bank as bank_module
        from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE

        if snapshot:  # the close writes the index and records snapshots the boot then reads
            monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 1)
        ids = await self._spelled(service)
        await service.store.reload()
        if snapshot:
            assert (data_dir / "main" / SNAPSHOT_FILE).is_file()
            assert (data_dir / "main" / RECORDS_FILE).is_file()
        await service.store.reload()  # a boot from what the first one left
        listed = await call(service, "memory::list", subject="ANA", limit=50)
        assert {m["id"] for m in listed["memories"]} == {ids["Ana"], ids["ANA"], ids["ana"]}
        got = await call(service, "memory::recall", query="allergic", subject="aNA")
        seen = {m["memory"]["id"] for m in got["memories"]}
        assert ids["Ana"] in seen and ids["Bob"] not in seen
        stats = await call(service, "memory::stats", PERSON, bank="main")
        assert len(stats["by_subject"]) == 3
        out = await call(
            service, "memory::forget-subject", PERSON, subject="aNa", confirm="destructive"
        )
        assert len(out["erased"]) == 3


class TestInvisibleCharacters:
    """A name copied with an invisible character along (a zero-width space or joiner, a
    byte-order mark, a soft hyphen: Unicode format characters, category Cf) is the same person:
    "Ana\u200b" was someone else than "Ana" for the scope, the caps, the counts and forget."""

    SPELLINGS = ("Ana", "Ana\u200b", "\ufeffAna", "A\u00adna", "Ana\u200d", "\u2060ana")

    async def _saved(self, service: MemoryService, **settings: Any) -> dict[str, str]:
        create = {"name": "main", "subject_scoping": True, **settings}
        await call(service, "memory::bank::create", PERSON, **create)
        ids = {}
        for n, who in enumerate((*self.SPELLINGS, "Bob")):
            text = f"The user keeps notebook number {n} on the shelf."
            ids[who] = (await call(service, "memory::save", PERSON, text=text, subject=who))[
                "memory"
            ]["id"]
        return ids

    async def test_every_spelling_is_one_person_for_scope_counts_and_forget(
        self, service: MemoryService
    ) -> None:
        ids = await self._saved(service)
        anas = {ids[who] for who in self.SPELLINGS}
        stats = await call(service, "memory::stats", PERSON, bank="main")
        assert sorted(stats["by_subject"].values()) == [1, len(self.SPELLINGS)]
        shown = await call(service, "memory::bank::get", PERSON, name="main")
        assert shown["bank"]["subjects"] == 2
        listed = await call(service, "memory::list", PERSON, subject="Ana\u200b", limit=50)
        assert {m["id"] for m in listed["memories"]} == anas
        got = await _in_turn(service, "memory::recall", "\ufeffana", query="notebook shelf")
        seen = {m["memory"]["id"] for m in got["memories"]}
        assert seen == anas
        again = await call(
            service, "memory::save", PERSON,
            text="The user keeps notebook number 0 on the shelf.", subject="ANA\u200b",
        )  # fmt: skip
        assert not again["created"] and again["memory"]["id"] == ids["Ana"]
        out = await call(
            service, "memory::forget-subject", PERSON, subject="Ana\u2060", confirm="destructive"
        )
        assert set(out["erased"]) == anas

    async def test_the_per_subject_cap_counts_them_together(self, service: MemoryService) -> None:
        ids = await self._saved(service, max_per_subject=len(self.SPELLINGS))
        saved = await call(
            service, "memory::save", PERSON, text="Ana reads at night.", subject="\u200bAna"
        )
        assert saved.get("evicted") and saved["evicted"][0] in {ids[w] for w in self.SPELLINGS}

    async def test_invisible_characters_at_a_names_edges_are_not_stored(
        self, service: MemoryService
    ) -> None:
        """Nothing at an edge is shaped by a joiner or a mark: the name is stored as it shows."""
        ids = await self._saved(service)
        for who in ("Ana\u200b", "\ufeffAna", "\u2060ana"):
            got = await call(service, "memory::get", PERSON, id=ids[who])
            assert got["memory"]["subject"] == who.strip("\u200b\ufeff\u2060")
        blank = await call(
            service, "memory::save", PERSON, text="The office opens at nine.", subject="\u200b"
        )
        assert blank["memory"].get("subject") is None  # no one: a general memory, as "" is


class TestSeedPair:
    """Seed 004 names who a memory is about by `subject_type` and `subject_id`. Dropped with
    other unknown keys, a save meant for one person landed in the general pool (seen by everyone
    in a scoped bank) and a scoped recall saw no one's memories."""

    async def test_the_pair_is_the_subject_type_colon_id(self, service: MemoryService) -> None:
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        pair = {"subject_type": "member", "subject_id": 42}
        saved = await call(
            service, "memory::save", PERSON, text="The user is allergic to kiwi.", **pair
        )
        assert saved["memory"]["subject"] == "member:42"
        mine = await call(service, "memory::recall", PERSON, query="allergic kiwi", **pair)
        assert [h["memory"]["id"] for h in mine["memories"]] == [saved["memory"]["id"]]
        other = {"subject_type": "member", "subject_id": "7"}
        theirs = await call(service, "memory::recall", PERSON, query="allergic kiwi", **other)
        assert theirs["memories"] == []
        same = await call(
            service, "memory::save", PERSON, text="The user likes tea.", subject="member:42", **pair
        )
        assert same["memory"]["subject"] == "member:42"
        gone = await call(service, "memory::forget-subject", PERSON, confirm="destructive", **pair)
        assert len(gone["erased"]) == 2

    async def test_a_subject_naming_the_pair_in_another_case_is_no_clash(
        self, service: MemoryService
    ) -> None:
        """Subjects compare caselessly everywhere: `subject` "Member:42" beside the pair
        member/42 names the same person (it was refused as "different subjects")."""
        await call(service, "memory::bank::create", PERSON, name="main", subject_scoping=True)
        pair = {"subject_type": "member", "subject_id": 42}
        saved = await call(
            service,
            "memory::save",
            PERSON,
            text="The user likes tea.",
            subject=" Member:42",
            **pair,
        )
        assert saved["memory"]["subject"] == "member:42"

    @pytest.mark.parametrize(
        "fields",
        [
            {"subject_type": "member"},
            {"subject_id": "42"},
            {"subject_type": "member", "subject_id": "42", "subject": "member:7"},
            {"subject_type": True, "subject_id": "42"},
            {"subject_type": "member", "subject_id": {"n": 42}},
            {"subject_type": "member", "subject_id": " "},  # was the person "member: "
            {"subject_type": "", "subject_id": ""},  # was the person ":"
        ],
    )
    async def test_half_a_pair_or_a_clash_is_refused_and_saves_nothing(
        self, service: MemoryService, fields: dict[str, Any]
    ) -> None:
        with pytest.raises(InvalidInput, match="subject"):
            await call(
                service, "memory::save", PERSON, text="The user is allergic to kiwi.", **fields
            )
        listed = await call(service, "memory::list", PERSON)
        assert listed["memories"] == []

    async def test_an_imported_records_pair_is_its_subject(self, service: MemoryService) -> None:
        """`memory-worker import` takes a record's `subject`; seed 004's pair was dropped with
        the other unknown keys: the person's memories came in as general ones (everyone's, in a
        scoped bank), and their `forget-subject` then erased none of them."""
        records = [
            {"text": "The user is allergic to kiwi.", "subject_type": "member", "subject_id": 42}
        ]
        out = await call(service, "memory::import", PERSON, bank="main", records=records)
        assert out["imported"] == 1
        [memory] = (await call(service, "memory::list", PERSON, bank="main"))["memories"]
        assert memory["subject"] == "member:42"
        with pytest.raises(InvalidInput, match="record 1: subject: subject_type and subject_id"):
            await call(
                service,
                "memory::import",
                PERSON,
                bank="main",
                records=[{"text": "The user likes tea.", "subject_type": "member"}],
            )
        assert (await call(service, "memory::list", PERSON, bank="main"))["total"] == 1


async def test_the_owners_recall_shows_two_peoples_same_words_as_two_facts(
    store: Store, clock: FixedClock
) -> None:
    """The same words about Ana and about Bruno are two memories: the owner's view of the bank
    (no subject) recalls both, never one as a restatement of the other (with vectors, the near-
    duplicate demotion dropped one: asking who likes spicy food told of one person only)."""
    service = MemoryService(store, Settings(), clock=clock, embedder=FakeEmbedder())
    await _people(service)
    await service.settle()
    recalled = await call(service, "memory::recall", PERSON, query="spicy food")
    assert recalled["retrieval"] == "bm25-entity-semantic"
    texts = [(hit["memory"]["text"], hit["memory"].get("subject")) for hit in recalled["memories"]]
    assert ("The user likes spicy food.", "ana") in texts, texts
    assert ("The user likes spicy food.", "bruno") in texts, texts


@pytest.mark.parametrize(
    ("function_id", "change"),
    [
        ("memory::update", {"tags": ["leaked"]}),
        ("memory::update", {"subject": ""}),
        ("memory::delete", {}),
        ("memory::pin", {"pinned": True}),
    ],
)
async def test_an_mcp_agent_naming_no_one_changes_no_persons_memory_by_id(
    service: MemoryService, function_id: str, change: dict[str, Any]
) -> None:
    """An agent outside a turn (MCP, REST as an agent) that names no subject sees general
    memories only: `memory::get` says Ana's is not there, and so does a change of it by id (an
    update made it general, visible to everyone, and handed its text back; a delete erased it
    from her turns)."""
    ids = await _people(service)
    mcp = Caller.for_agent("mcp")
    ana = sorted(ids["ana"])[0]
    before = service.store.get("main").latest(ana)
    with pytest.raises(MemoryNotFound):
        await call(service, "memory::get", mcp, id=ana)
    with pytest.raises(MemoryNotFound):
        await call(service, function_id, mcp, id=ana, **change)
    assert service.store.get("main").latest(ana) == before
    general = sorted(ids["general"])[0]  # the general pool stays the agent's to change
    await call(service, function_id, mcp, id=general, **change)
