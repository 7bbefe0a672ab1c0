"""Association lanes (C21): `context` and `intention` captured at store time (explicit saves,
imports, extraction), redacted and length-checked like text, indexed per lane, and blended into
recall by the bank's weights — a memory found only through the situation it was formed in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app.catalog import call
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import InvalidInput
from memory_worker.core.lanes import EMBED_CHARS, embedding_text, goal_text, window_text
from memory_worker.core.models import Confidence, Memory
from memory_worker.core.transitions import MAX_LANE_CHARS
from memory_worker.harness.extractor import Extractor
from memory_worker.harness.pregenerate import _lanes
from memory_worker.search.index import LexicalIndex
from memory_worker.search.lanes import LaneIndexes, LaneQuery
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import LaneWeights
from memory_worker.storage.lane_vectors import LANE_VECTORS_FILE

from .fakes import FakeEmbedder, FakeKeyValue
from .test_extractor import Model, Transcript

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
NOW = 1_772_445_600_000


def memory(
    mid: str, text: str, *, context: str | None = None, intention: str | None = None
) -> Memory:
    return Memory(
        id=mid,
        text=text,
        confidence=Confidence.STATED,
        created_at=NOW,
        updated_at=NOW,
        context=context,
        intention=intention,
    )


def bank_of(*memories: Memory) -> tuple[dict[str, Memory], LexicalIndex, LaneIndexes]:
    index, lanes = LexicalIndex(), LaneIndexes()
    for m in memories:
        index.add_doc(indexed(m))
        lanes.add(m)
    return {m.id: m for m in memories}, index, lanes


def query(text: str, **extra: Any) -> RecallQuery:
    return RecallQuery(text=text, limit=5, now_ms=NOW, half_life_days=30.0, **extra)


FORMED = [
    memory("m1", "Sofia prefers the window seat", context="booking flights to Rome for the trip"),
    memory("m2", "The budget is three thousand euros", context="planning the kitchen renovation"),
    memory("m3", "Bruno plays the cello on weekends", context="talking about music lessons"),
]
for n in range(4, 12):  # filler so BM25 and the cutoff see a real bank
    FORMED.append(memory(f"m{n}", f"Unrelated note number {n} about gardening"))


class TestRanking:
    def test_a_memory_is_found_by_its_context_alone(self) -> None:
        memories, index, lanes = bank_of(*FORMED)
        asked = LaneQuery(context="we are booking flights to Rome next month")
        weights = LaneWeights(content=0.7, context=0.3)
        hits = rank(
            memories, index, query("what did she want?", lanes=asked, lane_weights=weights), lanes
        )
        assert hits and hits[0].memory.id == "m1"  # shares no word with the query itself
        # Without the lane (no window, or a zero weight) nothing connects the question to it.
        assert not rank(memories, index, query("what did she want?"), lanes)
        off = query("what did she want?", lanes=asked, lane_weights=LaneWeights())
        assert not rank(memories, index, off, lanes)

    def test_no_lanes_asked_scores_exactly_as_content_alone(self) -> None:
        memories, index, lanes = bank_of(*FORMED)
        weights = LaneWeights(content=0.5, context=0.3, intention=0.2)
        plain = rank(memories, index, query("cello weekends"), lanes)
        weighted = rank(memories, index, query("cello weekends", lane_weights=weights), lanes)
        assert [(h.memory.id, h.score) for h in plain] == [(h.memory.id, h.score) for h in weighted]

    def test_the_lane_reorders_between_equal_texts(self) -> None:
        a = memory("a", "The meeting is on Tuesday", context="project alpha standup notes")
        b = memory("b", "The meeting is on Tuesday too", context="family dinner planning")
        memories, index, lanes = bank_of(a, b, *FORMED[3:])
        weights = LaneWeights(content=0.8, intention=0.0, context=0.2)
        for window, first in (("the family dinner", "b"), ("alpha standup", "a")):
            asked = LaneQuery(context=window)
            hits = rank(
                memories,
                index,
                query("when is the meeting", lanes=asked, lane_weights=weights),
                lanes,
            )
            assert hits[0].memory.id == first

    def test_intention_lane(self) -> None:
        a = memory("a", "Use the staging database", intention="deploying the billing service")
        b = memory("b", "Use the staging bucket", intention="writing a blog post")
        memories, index, lanes = bank_of(a, b, *FORMED[3:])
        asked = LaneQuery(intention="help me deploy billing")
        weights = LaneWeights(content=0.6, intention=0.4)
        hits = rank(memories, index, query("use staging", lanes=asked, lane_weights=weights), lanes)
        assert hits[0].memory.id == "a"

    def test_relevance_threshold_drops_weak_blends(self) -> None:
        memories, index, lanes = bank_of(*FORMED)
        loose = rank(memories, index, query("cello gardening"), lanes)
        strict = rank(memories, index, query("cello gardening", threshold=0.9), lanes)
        assert len(strict) < len(loose)
        assert all(h.memory.id in {x.memory.id for x in loose} for h in strict)
        assert not rank(memories, index, query("cello gardening", threshold=1.01), lanes)

    def test_a_window_that_matches_no_stored_context_still_weighs_in_the_threshold(
        self,
    ) -> None:
        """Seed 004: score = content·sim + context·sim(window, stored context). A memory's blend
        is its own: whether ANOTHER memory's context shares a word with the window must not
        decide whether this one passes the threshold."""
        memories, index, lanes = bank_of(*FORMED)
        weights = LaneWeights(content=0.5, context=0.5)

        def recalled(window: str) -> list[str]:
            asked = LaneQuery(context=window)
            q = query("cello weekends", lanes=asked, lane_weights=weights, threshold=0.6)
            return [h.memory.id for h in rank(memories, index, q, lanes)]

        # The cello memory's own context (music lessons) matches neither window: its blend is
        # 0.5 × content + 0.5 × 0, under 0.6 both times.
        assert recalled("a lecture on quantum physics") == []
        assert recalled("a lecture on quantum physics and the kitchen renovation") == []

    def test_another_persons_context_does_not_decide_a_scoped_recall(self) -> None:
        """Subject scoping: a memory about Bruno never lends a scoped recall for Ana anything,
        its stored context included. The lane's relevance was scaled to its best match over the
        whole bank, so Bruno's context matching the window better pushed Ana's own memory under
        the threshold (found without his memory, lost with it); a general memory, another tag
        or an expired one likewise."""
        ana = memory("ana", "Ana prefers the aisle seat", context="a trip to Rome").model_copy(
            update={"subject": "Ana"}
        )
        bruno = memory(
            "bruno", "Bruno prefers the window", context="booking flights to Rome for the trip"
        ).model_copy(update={"subject": "Bruno"})
        weights = LaneWeights(content=0.5, context=0.5)
        asked = LaneQuery(context="we are booking flights to Rome for the trip")

        def recalled(*memories: Memory) -> list[str]:
            held, index, lanes = bank_of(*memories, *FORMED[3:])
            q = query(
                "what does she like?",
                lanes=asked,
                lane_weights=weights,
                threshold=0.4,
                scoped=True,
                subject="Ana",
            )
            return [h.memory.id for h in rank(held, index, q, lanes)]

        assert recalled(ana) == ["ana"]
        assert recalled(ana, bruno) == ["ana"]

    def test_lanes_follow_edits_and_deletes(self) -> None:
        lanes = LaneIndexes()
        m = memory("x", "Some fact here", context="first situation")
        lanes.add(m)
        assert lanes.count("context") == 1 and lanes.count("intention") == 0
        lanes.add(m.model_copy(update={"context": None, "intention": "a goal"}))
        assert lanes.count("context") == 0 and lanes.count("intention") == 1
        lanes.remove("x")
        assert lanes.count("intention") == 0

    def test_weights_are_normalised_over_the_asked_lanes(self) -> None:
        weights = LaneWeights(content=2.0, context=1.0, intention=1.0)
        assert weights.shares(("context",)) == pytest.approx({"content": 2 / 3, "context": 1 / 3})
        assert weights.shares(()) == {"content": 1.0}
        assert LaneWeights(content=0.0).shares(()) == {"content": 1.0}


class TestLaneTexts:
    def test_window_keeps_the_newest_messages(self) -> None:
        text = window_text(["a" * 900, "the middle message", "the newest message"], limit=100)
        assert text is not None and len(text) <= 100
        assert text.endswith("the middle message the newest message")
        assert window_text([" ", ""]) is None

    def test_only_the_newest_part_of_a_window_is_embedded(self) -> None:
        window = " ".join(f"word{n}" for n in range(300))
        part = embedding_text(window)
        assert len(part) <= EMBED_CHARS and window.endswith(part) and part.startswith("word")
        assert embedding_text("short window") == "short window"

    def test_goal_is_cut(self) -> None:
        goal = goal_text("x " * 400)
        assert goal is not None and len(goal) <= MAX_LANE_CHARS["intention"]

    def test_the_hook_window_skips_our_own_blocks(self) -> None:
        messages = [
            {"role": "user", "content": [{"type": "text", "text": "planning the trip to Rome"}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "<memory bank=x>noise</memory>"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Sure, which dates?"}]},
            {"role": "user", "content": [{"type": "text", "text": "book the window seat"}]},
        ]
        lanes = _lanes(messages, "book the window seat")
        assert lanes.context == "planning the trip to Rome Sure, which dates? book the window seat"
        assert lanes.intention == "book the window seat"


class TestCapture:
    async def test_save_keeps_lanes_redacted(self, service: MemoryService) -> None:
        result = await call(
            service,
            "memory::save",
            {
                "bank": "main",
                "text": "The user flies on Friday",
                "context": f"talking about travel, key {SECRET}",
                "intention": "book a flight",
            },
        )
        stored = result["memory"]
        assert SECRET not in json.dumps(result)
        assert stored["context"] == "talking about travel, key [REDACTED:openai-key]"
        assert stored["intention"] == "book a flight"
        assert result["redacted"] == ["openai-key"]

    async def test_overlong_lane_is_refused_and_changes_nothing(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        with pytest.raises(InvalidInput, match=r"^invalid_input: context must be at most 1000"):
            await call(
                service,
                "memory::save",
                {"bank": "main", "text": "The user flies on Friday", "context": "x" * 1001},
            )
        listed = await call(service, "memory::list", {"bank": "main"})
        assert listed["total"] == 0

    async def test_update_replaces_a_lane_and_recall_uses_it(self, service: MemoryService) -> None:
        saved = await call(service, "memory::save", {"bank": "main", "text": "The code is 4512"})
        mid = saved["memory"]["id"]
        updated = await call(
            service, "memory::update", {"bank": "main", "id": mid, "intention": "open the garage"}
        )
        assert updated["memory"]["intention"] == "open the garage"
        assert updated["memory"]["text"] == "The code is 4512"
        bank = service.store.find("main")
        assert bank is not None and bank.lanes.count("intention") == 1

    async def test_an_empty_lane_in_an_update_removes_it(self, service: MemoryService) -> None:
        """As `subject: ""` makes a memory general: a stored window (a private conversation) can
        be taken off a memory without deleting it, and recall stops finding it by that window."""
        body = {"bank": "main", "text": "The code is 4512", "context": "fixing the garage door"}
        mid = (await call(service, "memory::save", body))["memory"]["id"]
        ask = {"bank": "main", "query": "", "context": "the garage door again"}
        weights = {"content": 0.5, "context": 0.5}
        await call(
            service, "memory::bank::configure", {"name": "main", "association_weights": weights}
        )
        assert [
            m["memory"]["id"] for m in (await call(service, "memory::recall", ask))["memories"]
        ] == [mid]
        updated = await call(service, "memory::update", {"bank": "main", "id": mid, "context": ""})
        assert "context" not in updated["memory"] and updated["memory"]["revision"] == 1
        bank = service.store.find("main")
        assert bank is not None and bank.lanes.count("context") == 0
        assert (await call(service, "memory::recall", ask))["memories"] == []

    async def test_a_lane_of_invisible_characters_is_no_lane(self, service: MemoryService) -> None:
        """As a text or a subject of only a zero-width space is blank: a lane of one was stored
        (an empty-looking window every recall compared), and an update with one did not remove
        the lane it looked like clearing."""
        body = {
            "bank": "main",
            "text": "The code is 4512",
            "context": "\u200b",
            "intention": "\ufeff ",
        }
        saved = (await call(service, "memory::save", body))["memory"]
        assert "context" not in saved and "intention" not in saved
        body = {"bank": "main", "text": "The gate code is 1234", "context": "fixing the gate"}
        mid = (await call(service, "memory::save", body))["memory"]["id"]
        change = {"bank": "main", "id": mid, "context": "\u200b\u2060"}
        assert "context" not in (await call(service, "memory::update", change))["memory"]

    async def test_a_recall_window_of_invisible_characters_asks_no_lane(
        self, service: MemoryService
    ) -> None:
        """A blank window is no lane; one of a zero-width space was asked as one, which found
        nothing and so took the context's share out of every memory's blend: under a threshold
        the question's own memory, asked word for word, was dropped."""
        settings = {"association_weights": {"content": 0.5, "context": 0.5}}
        await call(
            service,
            "memory::bank::create",
            {"name": "main", "relevance_threshold": 0.6, **settings},
        )
        await call(service, "memory::save", {"bank": "main", "text": "The user likes tea."})
        body = {"bank": "main", "text": "The user likes figs.", "context": "market day"}
        await call(service, "memory::save", body)
        for window in ("   ", "\u200b", "\ufeff \u2060"):
            ask = {"bank": "main", "query": "The user likes tea.", "context": window}
            found = await call(service, "memory::recall", ask)
            assert [m["memory"]["text"] for m in found["memories"]] == ["The user likes tea."]

    async def test_lanes_survive_a_reload(self, service: MemoryService, data_dir: Path) -> None:
        from memory_worker.storage.bank import Bank

        await call(
            service,
            "memory::save",
            {"bank": "main", "text": "The user flies on Friday", "context": "travel talk"},
        )
        bank = service.store.find("main")
        assert bank is not None
        await bank.drain()
        again = Bank.load("main", bank.path)
        assert again.lanes.count("context") == 1
        again.close()

    async def test_recall_takes_context_and_intention(self, service: MemoryService) -> None:
        result = await call(
            service,
            "memory::recall",
            {"bank": "main", "query": "anything", "context": "a window", "intention": "a goal"},
        )
        assert result["memories"] == []

    async def test_extraction_writes_both_lanes(self, service: MemoryService) -> None:
        chat, model = Transcript(size=10), Model()
        extractor = Extractor(service, chat, model, FakeKeyValue())
        chat.say("user", "We are planning the kitchen renovation this spring.")
        chat.say("assistant", "Great, what is the budget?")
        chat.say("user", "Our budget is three thousand euros, and I hate grey tiles.")
        model.replies.append(
            json.dumps(
                {
                    "memories": [
                        {"op": "add", "text": "The user's renovation budget is 3000 euros."},
                        {
                            "op": "add",
                            "text": "The user dislikes grey tiles.",
                            "intention": "choosing kitchen tiles",
                        },
                    ]
                }
            )
        )
        await extractor.extract(ExtractJob(session_id="s1"), "main")
        listed = await call(service, "memory::list", {"bank": "main"})
        by_text = {m["text"]: m for m in listed["memories"]}
        budget = by_text["The user's renovation budget is 3000 euros."]
        assert budget["context"].startswith("We are planning the kitchen renovation")
        assert budget["context"].endswith("I hate grey tiles.")
        # no intention from the model: the person's message the fact came from
        assert budget["intention"] == "Our budget is three thousand euros, and I hate grey tiles."
        assert by_text["The user dislikes grey tiles."]["intention"] == "choosing kitchen tiles"

    async def test_an_agents_save_in_a_turn_is_captured_with_the_turns_situation(
        self, service: MemoryService
    ) -> None:
        """Seed 004: conscious writes flow through the same pipeline as subconscious ones,
        association capture included. An agent's `memory::save` inside a turn was stored with
        no context and no intention (only extraction's facts had them): now the turn's window
        and the person's message, as the hook read them, unless the call gives its own. Not on
        a general memory in a known speaker's turn: their words would reach everyone."""
        from memory_worker.adapters.bus import worker
        from memory_worker.app import catalog
        from memory_worker.harness.pregenerate import PreGenerate, TurnSituations

        from .test_pregenerate import Hooked

        hooked, situations = Hooked(service), TurnSituations()
        hooked.hook = PreGenerate(service, hooked.resolver, hooked.state, situations=situations)
        hooked.sessions.add("s1")
        hooked.sessions.metas["s1"]["metadata"]["memory_subject"] = "ana"
        hooked.windows["s1"] = [
            {"role": "user", "content": "We are planning the kitchen renovation."},
            {"role": "assistant", "content": "What is the budget?"},
        ]
        await hooked.step("s1", "Remember that our budget is 3000 euros.", turn="t1")

        async def save(turn: str | None = "t1", **payload: Any) -> dict[str, Any]:
            spec, metadata = catalog.find("memory::save"), {"session_id": "s1", "turn_id": turn}
            data, caller = await worker.turn_call(
                spec, {"bank": "main", **payload}, metadata, hooked.resolver, situations
            )
            return (await call(service, "memory::save", data, caller))["memory"]

        saved = await save(text="The user's budget is 3000 euros.")
        assert saved["subject"] == "ana"
        assert saved["context"] == (
            "We are planning the kitchen renovation. What is the budget? "
            "Remember that our budget is 3000 euros."
        )
        assert saved["intention"] == "Remember that our budget is 3000 euros."
        unnamed = await save(turn=None, text="The user renovates in spring.")  # its newest turn
        assert (unnamed["context"], unnamed["intention"]) == (saved["context"], saved["intention"])
        elsewhere = await save(turn="t9", text="The user paints walls.")  # a turn never hooked
        assert "context" not in elsewhere and "intention" not in elsewhere
        own = await save(text="The user owns a drill.", context="tools", intention="")
        assert own["context"] == "tools" and "intention" not in own  # the call's own lanes win
        general = await save(text="Tiles cost 20 euros a box.", subject="")
        assert "context" not in general and "intention" not in general

    async def test_a_save_after_the_speakers_erasure_carries_none_of_the_turns_words(
        self, service: MemoryService
    ) -> None:
        """`memory::forget-subject` wins over what was read before it. The turn's window and
        message, read by the hook before Ana's erasure, were still stored as the lanes of her
        agent's next save in that turn: her erased words on disk again. A later hook's reading
        (after the erasure) is hers to keep."""
        from memory_worker.adapters.bus import worker
        from memory_worker.app import catalog
        from memory_worker.harness.pregenerate import PreGenerate, TurnSituations

        from .test_pregenerate import Hooked

        hooked, situations = Hooked(service), TurnSituations()
        hooked.hook = PreGenerate(service, hooked.resolver, hooked.state, situations=situations)
        hooked.sessions.add("s1")
        hooked.sessions.metas["s1"]["metadata"]["memory_subject"] = "ana"
        await hooked.step("s1", "I was diagnosed with asthma last week.", turn="t1")
        await call(
            service,
            "memory::forget-subject",
            {"bank": "main", "subject": "ana", "confirm": "destructive"},
        )

        async def save(text: str, turn: str) -> dict[str, Any]:
            spec, metadata = catalog.find("memory::save"), {"session_id": "s1", "turn_id": turn}
            data, caller = await worker.turn_call(
                spec, {"bank": "main", "text": text}, metadata, hooked.resolver, situations
            )
            return (await call(service, "memory::save", data, caller))["memory"]

        saved = await save("The user likes green tea.", "t1")
        assert saved["subject"] == "ana"
        assert "context" not in saved and "intention" not in saved
        service.clock.advance(1000)  # type: ignore[attr-defined]
        await hooked.step("s1", "Now I drink green tea every day.", turn="t2")
        later = await save("The user drinks tea daily.", "t2")
        assert later["intention"] == "Now I drink green tea every day."


class TestLaneVectors:
    async def _service(
        self, store: Any, clock: Any, weights: dict[str, float] | None = None
    ) -> tuple[MemoryService, FakeEmbedder]:
        """A service with an embedder over bank `main`, weighted so both lanes count (lane
        vectors are only made for lanes the bank weights)."""
        embedder = FakeEmbedder()
        service = MemoryService(store, Settings(), clock=clock, embedder=embedder)
        chosen = weights or {"content": 0.6, "context": 0.2, "intention": 0.2}
        await call(service, "memory::bank::create", {"name": "main", "association_weights": chosen})
        return service, embedder

    async def test_only_weighted_lanes_are_embedded(self, store: Any, clock: Any) -> None:
        service, embedder = await self._service(store, clock, {"content": 1.0})
        body = {"bank": "main", "text": "The vet is Dr Silva", "context": "my puppy was sick"}
        await call(service, "memory::save", body)
        await service.settle()
        assert ["my puppy was sick"] not in embedder.calls  # no weight: never compared, never paid
        await call(
            service,
            "memory::bank::configure",
            {"name": "main", "association_weights": {"content": 0.8, "context": 0.2}},
        )
        await service.settle()
        assert ["my puppy was sick"] in embedder.calls
        bank = service.store.get("main")
        assert bank.lane_vectors.ready(embedder.model, ("context",))

    async def test_lanes_are_embedded_persisted_and_reloaded(
        self, store: Any, clock: Any, data_dir: Path
    ) -> None:
        service, embedder = await self._service(store, clock)
        for text, context in (
            ("The vet visit is on Monday", "my puppy was sick"),
            ("The deadline is Friday", None),
        ):
            body: dict[str, Any] = {"bank": "main", "text": text}
            if context:
                body["context"] = context
            await call(service, "memory::save", body)
        await service.settle()
        bank = service.store.find("main")
        assert bank is not None and bank.lane_vectors.ready(embedder.model)
        assert ["my puppy was sick"] in embedder.calls  # the lane, as its own vector
        lines = (bank.path / LANE_VECTORS_FILE).read_text().splitlines()
        assert [json.loads(line)["id"].rpartition("#")[2] for line in lines] == ["context"]
        await bank.drain()
        from memory_worker.storage.bank import Bank

        again = Bank.load("main", bank.path)
        assert again.lane_vectors.ready(embedder.model)  # nothing to re-embed
        assert again.lanes.indexes["context"].has_vector_for(
            json.loads(lines[0])["id"].split("#")[0]
        )
        again.close()

    async def test_a_lane_edit_re_embeds_it(self, store: Any, clock: Any) -> None:
        service, embedder = await self._service(store, clock)
        saved = await call(
            service,
            "memory::save",
            {"bank": "main", "text": "The vet is Dr Silva", "context": "my puppy"},
        )
        await service.settle()
        mid = saved["memory"]["id"]
        await call(
            service, "memory::update", {"bank": "main", "id": mid, "context": "the company offsite"}
        )
        bank = service.store.find("main")
        # (Whether the new lane is embedded yet when the update answers is the loop's timing: a
        # write runs to its end in a task of its own, and the fake embedder answers at once.)
        await service.settle()
        assert bank is not None and bank.lane_vectors.ready(embedder.model)
        assert embedder.calls[-1] == ["the company offsite"]

    async def test_a_text_edit_keeps_the_lane_vectors(self, store: Any, clock: Any) -> None:
        """Seed 004: an update re-embeds the content; the association vectors are preserved
        unless explicitly changed. A text edit dropped both lanes' vectors: the bank's lanes
        compared by words alone until the unchanged window and goal were embedded again."""
        service, embedder = await self._service(store, clock)
        body = {"text": "The vet is Dr Silva", "context": "my puppy", "intention": "find a vet"}
        saved = await call(service, "memory::save", {"bank": "main", **body})
        await service.settle()
        bank = service.store.get("main")
        before = len(embedder.calls)
        mid = saved["memory"]["id"]
        await call(service, "memory::update", {"bank": "main", "id": mid, "text": "Dr Costa"})
        assert bank.lane_vectors.ready(embedder.model)  # still comparable, before any embedding
        await service.settle()
        assert embedder.calls[before:] == [["Dr Costa"]]  # the content alone
        assert bank.lanes.indexes["context"].has_vector_for(mid)

    async def test_a_merge_embeds_the_lane_the_survivor_absorbed(
        self, store: Any, clock: Any
    ) -> None:
        """A merge (consolidation's `supersede` with `reinforce`) gives a survivor without a
        context the retired duplicate's: that lane must be embedded like a saved one, or the
        bank's lanes (`ready` needs every lane text embedded) run lexically until a later write
        happens to start the embedder."""
        service, embedder = await self._service(store, clock)
        plain = await call(service, "memory::save", {"bank": "main", "text": "The vet is Dr Silva"})
        clock.advance(1000)
        placed = await call(
            service,
            "memory::save",
            {"bank": "main", "text": "Dr Silva is the vet", "context": "my puppy was sick"},
        )
        await service.settle()
        bank = service.store.get("main")
        assert bank.lane_vectors.ready(embedder.model)
        merged = await call(
            service,
            "memory::supersede",
            {
                "bank": "main",
                "id": placed["memory"]["id"],
                "superseded_by": plain["memory"]["id"],
                "reinforce": True,
            },
        )
        assert merged["reinforced"]
        await service.settle()
        assert bank.lane_vectors.ready(embedder.model)
        assert bank.lanes.indexes["context"].has_vector_for(plain["memory"]["id"])

    async def test_the_window_finds_a_memory_by_meaning(self, store: Any, clock: Any) -> None:
        """No word of the query or the window is in the memory or its stored context: only the
        context lane's vectors (pet ~ puppy ~ dog) connect them."""
        service, embedder = await self._service(store, clock)
        await call(
            service,
            "memory::save",
            {"bank": "main", "text": "Appointment moved to Monday", "context": "my puppy Pipoca"},
        )
        # Fillers whose texts and contexts share no fake-embedding axis with the query or window.
        fillers = (
            "Receipt for fuel",
            "Ticket for parking",
            "Reminder on invoices",
            "Bill for water",
        )
        for text, context in zip(
            fillers, ("office rent", "office lease", "office chairs", "office plants"), strict=True
        ):
            await call(service, "memory::save", {"bank": "main", "text": text, "context": context})
        await service.settle()
        await call(
            service,
            "memory::bank::configure",
            {"name": "main", "association_weights": {"content": 0.6, "context": 0.4}},
        )
        body = {"bank": "main", "query": "when is it?", "context": "we talked about the dog"}
        found = await call(service, "memory::recall", body)
        assert [m["memory"]["text"] for m in found["memories"]][:1] == [
            "Appointment moved to Monday"
        ]
        assert ["we talked about the dog"] in embedder.calls  # the window embedded like a lane
        plain = await call(service, "memory::recall", {"bank": "main", "query": "when is it?"})
        assert "Appointment moved to Monday" not in [m["memory"]["text"] for m in plain["memories"]]

    async def test_no_lane_weight_costs_no_embedding(self, store: Any, clock: Any) -> None:
        service, embedder = await self._service(store, clock, {"content": 1.0})
        await call(
            service,
            "memory::save",
            {"bank": "main", "text": "Appointment moved to Monday", "context": "my puppy"},
        )
        await service.settle()
        before = len(embedder.calls)
        await call(
            service,
            "memory::recall",
            {"bank": "main", "query": "appointment", "context": "the dog"},
        )
        assert all(call_ != ["the dog"] for call_ in embedder.calls[before:])


class TestBankSettings:
    async def test_preview_asks_the_lanes_as_the_hook_does(self, service: MemoryService) -> None:
        await call(
            service,
            "memory::bank::create",
            {"name": "trip", "association_weights": {"content": 0.7, "context": 0.3}},
        )
        for m in FORMED:
            body = {"bank": "trip", "text": m.text, "context": m.context}
            await call(service, "memory::save", {k: v for k, v in body.items() if v})
        ask = {"bank": "trip", "query": "what did she want?"}
        plain = await call(service, "memory::preview", ask)
        shown = await call(
            service, "memory::preview", {**ask, "context": "booking flights to Rome"}
        )
        first = [m for m in shown["memories"] if m["score"] > 0]
        assert [m["memory"]["text"] for m in first][:1] == [FORMED[0].text]
        assert not [m for m in plain["memories"] if m["score"] > 0]  # only the ambient floor

    """The lanes through the public surface: the bank's own weights and threshold."""

    async def test_a_scoped_recall_is_not_decided_by_another_persons_context(
        self, service: MemoryService
    ) -> None:
        settings = {
            "subject_scoping": True,
            "association_weights": {"content": 0.5, "context": 0.5},
            "relevance_threshold": 0.4,
        }
        await call(service, "memory::bank::create", {"name": "team", **settings})
        ana = {"text": "Ana prefers the aisle seat", "context": "a trip to Rome", "subject": "Ana"}
        await call(service, "memory::save", {"bank": "team", **ana})
        ask = {
            "bank": "team",
            "query": "what does she like?",
            "context": "we are booking flights to Rome for the trip",
            "subject": "Ana",
        }
        alone = await call(service, "memory::recall", ask)
        bruno = {
            "text": "Bruno prefers the window",
            "context": "booking flights to Rome for the trip",
            "subject": "Bruno",
        }
        await call(service, "memory::save", {"bank": "team", **bruno})
        beside = await call(service, "memory::recall", ask)
        assert [h["memory"]["text"] for h in alone["memories"]] == [ana["text"]]
        assert [h["memory"]["text"] for h in beside["memories"]] == [ana["text"]]

    async def test_weights_that_do_not_sum_to_1_are_normalised_not_refused(
        self, service: MemoryService
    ) -> None:
        """Seed 004: "Weights are normalized if they don't sum to 1". A weight above 1 was
        refused (`{content: 2, context: 1}`, `{content: 60, context: 30, intention: 10}`):
        they are relative, and rank as their normalised blend."""
        relative = {"content": 60, "context": 30, "intention": 10}
        normal = {"content": 0.6, "context": 0.3, "intention": 0.1}
        for name, weights in (("relative", relative), ("normal", normal)):
            await call(
                service, "memory::bank::create", {"name": name, "association_weights": weights}
            )
            for m in FORMED:
                body = {"bank": name, "text": m.text, "context": m.context}
                await call(service, "memory::save", {k: v for k, v in body.items() if v})
        ask = {"query": "what did she want?", "context": "booking flights to Rome"}
        got = {
            name: [
                (h["memory"]["text"], round(h["score"], 9))
                for h in (await call(service, "memory::recall", {"bank": name, **ask}))["memories"]
            ]
            for name in ("relative", "normal")
        }
        assert got["relative"] == got["normal"] and got["normal"]
        configured = await call(
            service,
            "memory::bank::configure",
            {"name": "normal", "association_weights": {"content": 2, "context": 1}},
        )
        assert configured["bank"]["settings"]["association_weights"]["content"] == 2

    async def test_weights_and_threshold_come_from_the_bank(self, service: MemoryService) -> None:
        await call(service, "memory::bank::create", {"name": "trip"})
        for m in FORMED:
            body = {"bank": "trip", "text": m.text, "context": m.context}
            await call(service, "memory::save", {k: v for k, v in body.items() if v})
        ask = {"bank": "trip", "query": "what did she want?", "context": "booking flights to Rome"}
        assert (await call(service, "memory::recall", ask))["memories"] == []  # default: content
        await call(
            service,
            "memory::bank::configure",
            {"name": "trip", "association_weights": {"content": 0.7, "context": 0.3}},
        )
        found = await call(service, "memory::recall", ask)
        assert [m["memory"]["text"] for m in found["memories"]][:1] == [FORMED[0].text]
        # The blended similarity of a context-only match is the lane's share (0.3): a threshold
        # above it drops the memory, one below keeps it.
        for threshold, kept in ((0.35, False), (0.25, True)):
            await call(
                service,
                "memory::bank::configure",
                {"name": "trip", "relevance_threshold": threshold},
            )
            texts = [
                m["memory"]["text"]
                for m in (await call(service, "memory::recall", ask))["memories"]
            ]
            assert (FORMED[0].text in texts) is kept


async def test_the_threshold_compares_the_questions_own_words_not_the_second_hops(
    service: MemoryService,
) -> None:
    """The second hop lends the best hit's words ("user") to memories that share none with the
    question: ranking evidence, not similarity. Counted in the blended similarity, "The user
    works as a nurse at night." was 0.5 similar to "Lisbon" and passed seed 004's 0.4."""
    await call(service, "memory::bank::create", {"name": "b", "relevance_threshold": 0.4})
    texts = [
        "The user lives in Lisbon, Portugal.",
        "The user has a dog named Rex.",
        "The user works as a nurse at night.",
        "Lisbon has many hills and trams.",
    ]
    for text in texts:
        await call(service, "memory::save", {"bank": "b", "text": text})
    found = await call(service, "memory::recall", {"bank": "b", "query": "Lisbon"})
    assert {m["memory"]["text"] for m in found["memories"]} == {texts[0], texts[3]}
    await call(service, "memory::bank::configure", {"name": "b", "relevance_threshold": 0})
    found = await call(service, "memory::recall", {"bank": "b", "query": "Lisbon"})
    assert len(found["memories"]) == 4  # without a threshold the hop still ranks them in


async def _exact_only_bank(service: MemoryService, long: str) -> None:
    """Bank `b` at `relevance_threshold` 1 (seed 004: exact match only), holding `long` and three
    short memories."""
    await call(service, "memory::bank::create", {"name": "b", "relevance_threshold": 1})
    for text in (long, "The user likes tea.", "Ana lives in Porto.", "Rui plays chess."):
        await call(service, "memory::save", {"bank": "b", "text": text})


async def test_a_threshold_of_1_keeps_a_memory_asked_word_for_word(service: MemoryService) -> None:
    """Seed 004: `relevance_threshold` 1 = exact match only. Without an embedder the content
    similarity is BM25 over the query's weight, which a memory longer than the bank's average
    keeps below 1 even when the question is its text: a long memory could never be recalled."""
    long = (
        "The user works at Acme as a senior backend engineer, mostly on billing systems and "
        "on the payments team led by Maria."
    )
    await _exact_only_bank(service, long)
    found = await call(service, "memory::recall", {"bank": "b", "query": long})
    assert [m["memory"]["text"] for m in found["memories"]] == [long]
    half = "The user works at Acme as a senior backend engineer"
    assert (await call(service, "memory::recall", {"bank": "b", "query": half}))["memories"] == []


async def test_a_threshold_of_1_keeps_no_memory_only_holding_the_question(
    service: MemoryService,
) -> None:
    """Seed 004: `relevance_threshold` 1 = exact match only. A memory no longer than the bank's
    average that holds every word of the question scored BM25 similarity 1: "chess" alone, or
    half of a short memory, was an exact match of it, where half of a long one was not."""
    long = "The user works at Acme as a senior backend engineer on the payments team."
    await _exact_only_bank(service, long)
    for partial in ("chess", "Rui plays", "Ana Porto", "likes tea"):
        found = await call(service, "memory::recall", {"bank": "b", "query": partial})
        assert found["memories"] == [], partial
    for exact in ("Rui plays chess.", "rui  PLAYS chess."):
        found = await call(service, "memory::recall", {"bank": "b", "query": exact})
        assert [m["memory"]["text"] for m in found["memories"]] == ["Rui plays chess."], exact
    below = {"name": "b", "relevance_threshold": 0.99}
    await call(service, "memory::bank::configure", below)
    found = await call(service, "memory::recall", {"bank": "b", "query": "Rui plays"})
    assert [m["memory"]["text"] for m in found["memories"]] == ["Rui plays chess."]


async def test_a_threshold_of_1_keeps_a_text_whose_lowercase_is_longer(
    service: MemoryService,
) -> None:
    """A memory asked word for word is similarity 1, found by its lowercase form; the check
    skipped any text shorter than the question's lowercase, and "İ" lowercases to two
    characters: a memory about İstanbul or İzmir, asked as it was saved, was dropped."""
    long = (
        "The user flies from İstanbul to İzmir every spring for the İzmir trade fair, and "
        "always takes the ferry back along the coast with the İstanbul team."
    )
    await _exact_only_bank(service, long)
    found = await call(service, "memory::recall", {"bank": "b", "query": long})
    assert [m["memory"]["text"] for m in found["memories"]] == [long]


async def test_forget_subject_erases_their_lane_vectors(service: MemoryService) -> None:
    await call(service, "memory::bank::create", {"name": "main", "subject_scoping": True})
    ana = await call(
        service,
        "memory::save",
        {
            "bank": "main",
            "text": "Ana hides a key under the mat",
            "context": "talking about Ana's house",
            "subject": "ana",
        },
    )
    other = await call(
        service,
        "memory::save",
        {"bank": "main", "text": "The office opens at 9", "context": "work talk"},
    )
    bank = service.store.get("main")
    items = [(lane, m, [1.0, 0.0]) for lane, m in bank.lane_vectors.pending(bank.memories, 10)]
    assert await bank.lane_vectors.store("test-model", items, bank.memories) == 2
    path = bank.path / LANE_VECTORS_FILE
    assert ana["memory"]["id"] in path.read_text()
    await call(
        service,
        "memory::forget-subject",
        {"bank": "main", "subject": "ana", "confirm": "destructive"},
    )
    text = path.read_text()
    assert ana["memory"]["id"] not in text and other["memory"]["id"] in text


def test_lane_carriers_are_the_records_with_a_lane_text_in_their_order() -> None:
    from memory_worker.core.models import Confidence, Memory
    from memory_worker.storage.lane_vectors import lane_carriers

    def rec(i: int, **lanes: str) -> Memory:
        return Memory(id=f"fp{i}", text=f"t{i}", confidence=Confidence.STATED, created_at=1,
                      updated_at=1, **lanes)  # fmt: skip

    records = [rec(0), rec(1, intention="plan"), rec(2, context=""), rec(3, context="chat"),
               rec(4, context="a", intention="b"), rec(5)]  # fmt: skip
    assert [m.id for m in lane_carriers(records)] == ["fp1", "fp3", "fp4"]
    assert lane_carriers([rec(0), rec(2, context="")]) == []


async def test_the_threshold_holds_in_lexical_mode_as_in_hybrid(service: MemoryService) -> None:
    """Seed 004: results below `relevance_threshold` are dropped, whatever arm ranked them.
    `mode: lexical` (one raw arm, plain BM25) ignored the bank's threshold: at 1 (exact match
    only) "chess" still came back with "Rui plays chess.", which hybrid recall drops."""
    long = "The user works at Acme as a senior backend engineer on the payments team."
    await _exact_only_bank(service, long)
    for mode in ("hybrid", "lexical"):
        ask = {"bank": "b", "query": "chess", "mode": mode}
        assert (await call(service, "memory::recall", ask))["memories"] == [], mode
        ask["query"] = "Rui plays chess."
        found = await call(service, "memory::recall", ask)
        assert [m["memory"]["text"] for m in found["memories"]] == ["Rui plays chess."], mode
        assert found["memories"][0]["score"] > 0.0  # still the arm's raw score
