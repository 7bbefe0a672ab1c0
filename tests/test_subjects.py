"""Subjects (C19): who a memory is about, and subject scoping keeping one person's memories out of
another's turns — through recall, preview, list, tags, get, the hook and extraction. The texts are
adversarial on purpose: the same words, similar sentences and shared entities for Ana and Bruno."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import Conflict, InvalidInput, MemoryNotFound

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
