"""Retention (C20): per-category TTL days; the reaper (boot sweep and `memory::stats`) retires
expired memories as tombstones with reason `expired`, never a pinned one, each announced; they stay
in history. Time only moves through the fake clock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.retention import DAY_MS, expired
from memory_worker.core.transitions import new_memory

from .fakes import FixedClock, RecordingEmitter
from .holds import hold_log_syncs

PERSON = Caller.human("cli")


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, PERSON)


async def _bank(service: MemoryService) -> dict[str, str]:
    await call(service, "memory::bank::create", name="main", retention={"context": 30})
    ids = {}
    for key, text, extra in (
        ("context", "The user is debugging a flaky test today.", {"category": "context"}),
        ("pinned", "The user is on call this week.", {"category": "context", "pinned": True}),
        ("fact", "The user was born in Porto.", {"category": "fact"}),
        ("plain", "The user likes green tea.", {}),
    ):
        ids[key] = (await call(service, "memory::save", text=text, **extra))["memory"]["id"]
    return ids


class TestReaper:
    async def test_stats_of_the_default_bank_before_its_first_write_is_empty(
        self, service: MemoryService
    ) -> None:
        stats = await call(service, "memory::stats")
        assert (stats["memories"], stats["expired"], stats["by_category"]) == (0, [], {})

    async def test_stats_expires_only_old_unpinned_memories_of_a_category_with_a_ttl(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        ids = await _bank(service)
        clock.advance_days(29)
        assert (await call(service, "memory::stats"))["expired"] == []
        clock.advance(DAY_MS + 1)  # older than its 30-day TTL
        emitter.clear()
        stats = await call(service, "memory::stats")
        assert stats["expired"] == [ids["context"]]
        assert stats["by_category"] == {"context": 1, "fact": 2}  # no category counts as fact
        assert stats["memories"] == 3 and stats["retention"] == {"context": 30}
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert gone["invalid_reason"] == "expired"
        events = emitter.of(ITEM_CHANGED)
        assert [(e["event_type"], e["memory"]["id"], e["reason"]) for e in events] == [
            ("deleted", ids["context"], "expired")
        ]
        history = await call(service, "memory::history", id=ids["context"])
        assert len(history["revisions"]) == 2  # it stays in history until a compaction
        assert (await call(service, "memory::stats"))["expired"] == []  # once

    async def test_an_agents_stats_leaves_the_expired_report_to_its_owner(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """Seed 004 lets a `read` agent call stats; what the reaper retired is reported once, to
        whoever counts for the bank (a person, consolidation): an agent's look does not take it."""
        ids = await _bank(service)
        clock.advance(30 * DAY_MS + 1)
        agent = Caller.for_agent("mcp")
        seen = await catalog.call(service, "memory::stats", {}, agent)
        assert seen["expired"] == [ids["context"]] and seen["memories"] == 3
        assert (await catalog.call(service, "memory::stats", {}, agent))["expired"] == [
            ids["context"]
        ]
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]
        assert (await call(service, "memory::stats"))["expired"] == []

    async def test_restating_a_memory_renews_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await _bank(service)
        clock.advance_days(20)
        await call(service, "memory::save", text="The user is debugging a flaky test today.")
        clock.advance_days(20)
        assert (await call(service, "memory::stats"))["expired"] == []
        clock.advance(10 * DAY_MS + 1)
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]

    async def test_a_memory_saved_again_after_expiring_is_not_marked_expired_any_more(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        ids = await _bank(service)
        clock.advance(30 * DAY_MS + 1)
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]
        text = "The user is debugging a flaky test today."
        back = await call(service, "memory::save", text=text, category="context")
        assert back["created"] and "invalid_reason" not in back["memory"]
        emitter.clear()
        deleted = await call(service, "memory::delete", id=ids["context"])
        # A person's delete: not reported as an expiry (the console's badge reads this field).
        assert "invalid_reason" not in deleted["memory"]
        assert [e.get("reason") for e in emitter.of(ITEM_CHANGED)] == [None]
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert "invalid_reason" not in gone

    async def test_the_boot_reaps_every_bank(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await _bank(service)
        clock.advance_days(31)
        assert await service.boot_banks() == 1
        listed = await call(service, "memory::list")
        assert ids["context"] not in {m["id"] for m in listed["memories"]}
        assert ids["pinned"] in {m["id"] for m in listed["memories"]}

    async def test_retention_set_later_by_configure_applies_at_the_next_sweep(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await call(service, "memory::bank::create", name="main")
        saved = await call(service, "memory::save", text="Likes tea.", category="preference")
        clock.advance_days(3)
        assert await service.boot_banks() == 0
        await call(service, "memory::bank::configure", name="main", retention={"preference": 2})
        assert (await call(service, "memory::stats"))["expired"] == [saved["memory"]["id"]]


@given(
    ages=st.lists(st.tuples(st.integers(0, 100), st.booleans()), max_size=20),
    ttl=st.integers(1, 60),
)
def test_property_expiry_is_exactly_the_old_unpinned_ones(
    ages: list[tuple[int, bool]], ttl: int
) -> None:
    now = 1_000 * DAY_MS
    memories = [
        new_memory(
            f"fp{i:016x}", f"m{i}", category="context", pinned=pinned, now_ms=now - age * DAY_MS
        )
        for i, (age, pinned) in enumerate(ages)
    ]
    due = {m.id for m in expired(memories, {"context": ttl}, now)}
    assert due == {
        m.id for m, (age, pinned) in zip(memories, ages, strict=True) if age > ttl and not pinned
    }
    assert expired(memories, {}, now) == [] and expired(memories, {"fact": 1}, now) == []


class TestOlderThanTheTtl:
    """Seed 004: "memories older than the TTL are removed". A memory exactly the TTL old, to the
    millisecond, is not older than it: every read keeps it and the reaper leaves it; one
    millisecond later it is gone everywhere (it expired at age >= TTL)."""

    TEXT = "The user is debugging a flaky parser test."

    async def _seen(self, service: MemoryService, memory_id: str) -> dict[str, Any]:
        recalled = {
            mode: [
                h["memory"]["id"]
                for h in (await call(service, "memory::recall", query=self.TEXT, mode=mode))[
                    "memories"
                ]
            ]
            for mode in ("lexical", "hybrid")
        }
        listed = await call(service, "memory::list")
        got = (await call(service, "memory::get", id=memory_id))["memory"]
        return {
            "recalled": {mode: memory_id in ids for mode, ids in recalled.items()},
            "listed": memory_id in {m["id"] for m in listed["memories"]},
            "total": listed["total"],
            "counted": (await call(service, "memory::bank::get", name="main"))["bank"]["memories"],
            "retired": got.get("invalid_reason"),
        }

    async def test_a_memory_exactly_the_ttl_old_is_kept_and_one_ms_later_is_gone(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        saved = await call(service, "memory::save", text=self.TEXT, category="context")
        memory_id, stated = saved["memory"]["id"], clock()
        await service.settle()
        clock.advance(DAY_MS)  # exactly one day old: not older than its one-day TTL
        kept = {"recalled": {"lexical": True, "hybrid": True}, "listed": True, "total": 1}
        assert await self._seen(service, memory_id) == {**kept, "counted": 1, "retired": None}
        assert (await call(service, "memory::stats"))["expired"] == []
        at_ttl = await call(service, "memory::recall", query=self.TEXT, as_of=stated + DAY_MS)
        assert [h["memory"]["id"] for h in at_ttl["memories"]] == [memory_id]
        clock.advance(1)
        await service.settle()
        gone = {"recalled": {"lexical": False, "hybrid": False}, "listed": False, "total": 0}
        assert await self._seen(service, memory_id) == {**gone, "counted": 0, "retired": "expired"}
        assert (await call(service, "memory::stats"))["expired"] == [memory_id]

    def test_the_pure_checks_agree_at_the_boundary(self) -> None:
        """`past_ttl` (one record), `may_have_expired` (a counts file's oldest statement) and the
        index's columns (`expired_slots`) draw the line at the same millisecond."""
        from memory_worker.core.retention import may_have_expired, past_ttl
        from memory_worker.search.index import LexicalIndex
        from memory_worker.search.ranking import expired_slots, indexed

        now = 1_000 * DAY_MS
        memory = new_memory("fp0000000000000001", "m", category="context", now_ms=now)
        index = LexicalIndex()
        index.add_doc(indexed(memory))
        for at, past in ((now + DAY_MS, False), (now + DAY_MS + 1, True)):
            assert past_ttl(memory, {"context": 1}, at) is past
            assert may_have_expired({"context": now}, {"context": 1}, at) is past
            assert expired_slots(index, {"context": 1}, at).size == int(past)


class TestScheduledByConsolidation:
    async def test_a_consolidation_pass_runs_the_reaper_first_and_reports_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        from memory_worker.adapters.consolidate.clients import InProcessClient
        from memory_worker.consolidate.config import ConsolidateSettings
        from memory_worker.consolidate.runner import Consolidator

        ids = await _bank(service)
        clock.advance_days(31)
        consolidator = Consolidator(InProcessClient(service), clock=clock)
        dry = await consolidator.run(ConsolidateSettings(), bank="main", dry_run=True)
        assert dry.banks[0].expired == 0  # a dry run changes nothing
        report = await consolidator.run(ConsolidateSettings(), bank="main")
        assert report.banks[0].expired == 1 and report.banks[0].errors == []
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert gone["invalid_reason"] == "expired"


class TestExpiredOnRead:
    """A memory past its TTL stops surfacing when it expires, not at the next stats call or
    restart: recall (every mode), preview and list leave it out at once, the read has it reaped
    in the background (announced as every expiry is), and time travel still sees it before."""

    @staticmethod
    async def _bank(service: MemoryService, clock: FixedClock) -> dict[str, str]:
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        ids = {}
        for key, text, extra in (
            ("context", "The user is debugging a flaky parser test.", {"category": "context"}),
            (
                "pinned",
                "The user is on call for the parser.",
                {"category": "context", "pinned": True},
            ),
            ("fact", "The user wrote the parser in Rust.", {"category": "fact"}),
            ("recent", "The user fixed a flaky parser test before.", {"category": "context"}),
        ):
            if key == "recent":
                clock.advance_days(0.5)
            ids[key] = (await call(service, "memory::save", text=text, **extra))["memory"]["id"]
        await service.settle()
        # One ms on: a memory a test's whole days age to its TTL is older than it, not equal.
        clock.advance(1)
        return ids

    @staticmethod
    def _ids(response: dict[str, Any]) -> list[str]:
        return [m["memory"]["id"] if "memory" in m else m["id"] for m in response["memories"]]

    async def test_recall_preview_and_list_leave_it_out_before_any_stats_call(
        self, store: Any, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        from memory_worker.core.config import Settings

        from .fakes import FakeEmbedder

        service = MemoryService(
            store, Settings(), emitter=emitter, clock=clock, embedder=FakeEmbedder()
        )
        ids = await self._bank(service, clock)
        clock.advance_days(1)  # 1.5 days and 1 day (and a ms) old
        query = "flaky parser test"
        for ask in (
            {"mode": "lexical"},
            {"mode": "hybrid"},
            {"mode": "semantic"},
            {"mode": "hybrid", "context": "debugging a flaky parser test", "intention": "debug"},
        ):
            found = self._ids(await call(service, "memory::recall", query=query, **ask))
            assert ids["context"] not in found, ask
            assert ids["recent"] not in found, ask  # one day and a ms: past its TTL too
        found = self._ids(await call(service, "memory::recall", query="parser", limit=10))
        assert set(found) == {ids["pinned"], ids["fact"]}  # pinned never expires; facts have none
        preview = await call(service, "memory::preview", query=query)
        assert not {ids["context"], ids["recent"]} & set(self._ids(preview))
        assert ids["context"] not in (preview["message"] or "")
        listed = await call(service, "memory::list")
        assert set(self._ids(listed)) == {ids["pinned"], ids["fact"]} and listed["total"] == 2

    async def test_a_get_of_an_expired_memory_has_it_reaped(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        """A look-up by id that meets an expired memory has the bank reaped (before it answers:
        it shows the memory retired): the memory was listed by nobody else, and stayed live on
        record until the next stats call."""
        ids = await self._bank(service, clock)
        clock.advance_days(1)
        emitter.clear()
        seen = await call(service, "memory::get", id=ids["fact"])
        assert seen["memory"]["id"] == ids["fact"]
        await service.settle()
        assert emitter.of(ITEM_CHANGED) == []  # nothing expired was met
        await call(service, "memory::get", id=ids["context"])
        await service.settle()
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert gone["invalid_reason"] == "expired"
        assert {p["memory"]["id"] for p in emitter.of(ITEM_CHANGED)} == {
            ids["context"],
            ids["recent"],
        }

    async def test_a_get_whose_caller_gives_up_mid_reap_still_announces_the_expiries(
        self,
        service: MemoryService,
        clock: FixedClock,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A get (a read: it runs in its caller's task) that meets an expired memory reaps the
        bank; its caller gives up (a client gone, a timeout) while the tombstones' fsync runs.
        They land all the same, so each is announced and reported by the next stats call, as
        every expiry is: none is retired in silence."""
        ids = await self._bank(service, clock)
        clock.advance_days(1)
        emitter.clear()
        entered, release = hold_log_syncs(monkeypatch, service.store.get("main"))
        got = asyncio.create_task(call(service, "memory::get", id=ids["context"]))
        assert await asyncio.to_thread(entered.wait, 10)  # the reap's tombstones are written
        got.cancel()
        with pytest.raises(asyncio.CancelledError):
            await got
        release.set()
        await service.settle()
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert gone["invalid_reason"] == "expired"  # landed though its caller left
        expired_ids = {ids["context"], ids["recent"]}
        events = emitter.of(ITEM_CHANGED)
        assert {(e["event_type"], e["memory"]["id"], e["reason"]) for e in events} == {
            ("deleted", memory_id, "expired") for memory_id in expired_ids
        }
        assert set((await call(service, "memory::stats"))["expired"]) == expired_ids

    async def test_a_settle_cancelled_while_a_background_reap_writes_leaves_it_running(
        self,
        service: MemoryService,
        clock: FixedClock,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A list leaves an expired memory out and has the bank reaped in the background;
        `settle` (or `close`) waits for that reap, and that wait cancelled must not cancel the
        reap mid-commit: its tombstones land all the same, so they are announced."""
        ids = await self._bank(service, clock)
        clock.advance_days(1)
        emitter.clear()
        entered, release = hold_log_syncs(monkeypatch, service.store.get("main"))
        await call(service, "memory::list")
        assert await asyncio.to_thread(entered.wait, 10)  # the reap's tombstones are written
        settling = asyncio.create_task(service.settle())
        await asyncio.sleep(0)  # it waits for the reap
        settling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await settling
        release.set()
        await service.store.get("main").drain()
        await service.settle()
        events = emitter.of(ITEM_CHANGED)
        assert {(e["event_type"], e["memory"]["id"], e["reason"]) for e in events} == {
            ("deleted", memory_id, "expired") for memory_id in (ids["context"], ids["recent"])
        }

    async def test_a_result_list_is_not_shortened_by_expired_memories(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)  # only the first context memory is past its TTL
        found = self._ids(
            await call(service, "memory::recall", query="debugging flaky parser test", limit=1)
        )
        assert found == [ids["recent"]]

    async def test_the_read_has_it_reaped_in_the_background_and_announced(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)
        emitter.clear()
        await call(service, "memory::recall", query="flaky parser test")
        await service.settle()  # the reap the recall scheduled (no sleep: it is awaited)
        events = emitter.of(ITEM_CHANGED)
        assert [(e["event_type"], e["memory"]["id"], e["reason"]) for e in events] == [
            ("deleted", ids["context"], "expired")
        ]
        gone = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert gone["invalid_reason"] == "expired"
        stats = await call(service, "memory::stats")  # reports it (not retiring it again)
        assert stats["expired"] == [ids["context"]] and len(emitter.of(ITEM_CHANGED)) == 1

    async def test_stats_still_reports_what_a_read_had_reaped_since_the_last_stats(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """The reaper's report (`expired`, what consolidation counts) is not lost to the reap a
        read asked for: the next stats call lists it, once."""
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)
        await call(service, "memory::recall", query="flaky parser test")
        await service.settle()
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]
        assert (await call(service, "memory::stats"))["expired"] == []
        clock.advance_days(0.5)  # the other one expires: a save retires it before it lands
        await call(service, "memory::save", text="The user likes the parser tests now.")
        assert (await call(service, "memory::stats"))["expired"] == [ids["recent"]]

    async def test_stats_right_after_a_read_reports_what_the_reads_reap_is_retiring(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """A stats call while the reap a read asked for is still writing waits for it: it
        found the tombstones in flight, retired nothing, and reported nothing (the expiry went
        to the stats call after, a consolidation pass later)."""
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)
        await call(service, "memory::list")  # leaves it out, has it reaped in the background
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]

    async def test_a_reload_of_the_bank_keeps_what_the_reaper_retired_for_the_next_stats(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        """A hand edit of a rule (the watcher reloads the bank) or `memory::reload` replaces the
        bank in RAM, not what the reaper retired in it: the next stats call still lists it, so
        the consolidation sibling's count misses none (it listed nothing)."""
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)
        await call(service, "memory::recall", query="flaky parser test")
        await service.settle()
        (data_dir / "main" / "rules").mkdir(exist_ok=True)
        (data_dir / "main" / "rules" / "style.md").write_text("Answer briefly.\n")
        assert await service.reload_bank("main") == "reloaded"
        await call(service, "memory::reload")
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]
        assert (await call(service, "memory::stats"))["expired"] == []

    async def test_time_travel_sees_it_while_it_was_live(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        saved = clock.now_ms
        ids = await self._bank(service, clock)
        clock.advance_days(0.5)
        query = "debugging flaky parser test"
        for _ in range(2):  # before the reap, and after it
            before = await call(service, "memory::recall", query=query, as_of=saved + DAY_MS // 2)
            assert ids["context"] in self._ids(before)
            after = await call(service, "memory::recall", query=query, as_of=saved + DAY_MS + 1)
            assert ids["context"] not in self._ids(after)
            await service.settle()

    async def test_time_travel_after_a_late_reap_sees_it_until_its_expiry_only(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        saved = clock.now_ms
        ids = await self._bank(service, clock)
        clock.advance_days(2.5)  # reaped 3 days after it was saved, 2 days after it expired
        assert ids["context"] in (await call(service, "memory::stats"))["expired"]
        query = "debugging flaky parser test"
        before = await call(service, "memory::recall", query=query, as_of=saved + DAY_MS // 2)
        assert ids["context"] in self._ids(before)
        after = await call(service, "memory::recall", query=query, as_of=saved + 2 * DAY_MS)
        assert ids["context"] not in self._ids(after)  # expired then, though retired later

    async def test_the_ambient_floor_never_hands_an_expired_memory(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await self._bank(service, clock)
        clock.advance_days(1)
        preview = await call(service, "memory::preview", query="hello there")
        shown = set(self._ids(preview))
        assert shown and not {ids["context"], ids["recent"]} & shown

    async def test_tags_count_no_expired_memory(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        await call(service, "memory::save", text="Debugging the parser.", category="context",
                   tags=["parser", "today"])  # fmt: skip
        await call(service, "memory::save", text="The parser is in Rust.", tags=["parser"])
        clock.advance(DAY_MS + 1)  # older than its one-day TTL
        tags = (await call(service, "memory::tags"))["tags"]
        assert tags == [{"tag": "parser", "count": 1}]

    async def test_a_memory_recategorised_into_a_ttl_expires_by_its_new_category(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await self._bank(service, clock)
        await call(service, "memory::update", id=ids["fact"], category="context")
        clock.advance_days(1)
        found = self._ids(await call(service, "memory::recall", query="parser rust"))
        assert ids["fact"] not in found and ids["pinned"] in found

    async def test_a_deleted_bank_is_not_kept_in_ram_by_its_expiry_report(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """What the reaper retired waits for the bank's next stats call; held with the bank
        object itself, a bank deleted (or reloaded) meanwhile stayed in RAM, all its memories
        and index, for as long as the worker ran."""
        import gc
        import weakref

        await self._bank(service, clock)
        clock.advance_days(0.5)
        await call(service, "memory::recall", query="flaky parser test")
        await service.settle()  # the read's reap landed: its report waits for stats
        gone = weakref.ref(service.store.get("main"))
        await call(service, "memory::bank::delete", name="main")
        gc.collect()
        assert gone() is None


class TestExpiredAtTheCap:
    async def test_a_save_into_a_full_bank_retires_the_expired_before_evicting_a_live_one(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        """A memory past its TTL still counted toward `max_memories`: the save evicted a live
        memory (the least used) and the expired one lived on until the next sweep."""
        await call(
            service, "memory::bank::create", name="main", max_memories=2, retention={"context": 1}
        )
        old = await call(service, "memory::save", text="Debugging the parser.", category="context")
        for _ in range(3):  # used often: the eviction order would keep it over the fact
            await call(service, "memory::recall", query="debugging the parser")
        fact = await call(service, "memory::save", text="The parser is written in Rust.")
        clock.advance(DAY_MS + 1)  # older than its one-day TTL
        emitter.clear()
        new = await call(service, "memory::save", text="The user lives in Porto.")
        assert new["created"] and new.get("evicted") is None
        listed = {m["id"] for m in (await call(service, "memory::list"))["memories"]}
        assert listed == {fact["memory"]["id"], new["memory"]["id"]}
        events = [(e["memory"]["id"], e.get("reason")) for e in emitter.of(ITEM_CHANGED)]
        assert (old["memory"]["id"], "expired") in events
        assert (fact["memory"]["id"], "evicted") not in events


async def test_an_expired_answer_is_not_raised_in_by_its_question(
    service: MemoryService, clock: FixedClock
) -> None:
    """The context raise (an answer saved after a recalled question in its session) admits only
    what the query's filters admit: an answer past its TTL stays out."""
    await call(service, "memory::bank::create", name="main", retention={"context": 1})
    asked = await call(
        service, "memory::save", text="What got you into trail running?", session_id="s1"
    )
    answer = await call(
        service,
        "memory::save",
        text="My sister took me along one weekend.",
        category="context",
        session_id="s1",
    )
    found = await call(service, "memory::recall", query="what got you into trail running")
    ids = [m["memory"]["id"] for m in found["memories"]]
    assert ids[:2] == [asked["memory"]["id"], answer["memory"]["id"]]  # raised in by its question
    clock.advance(DAY_MS + 1)  # older than its one-day TTL
    found = await call(service, "memory::recall", query="what got you into trail running")
    assert [m["memory"]["id"] for m in found["memories"]] == [asked["memory"]["id"]]


async def test_an_import_of_a_text_whose_memory_is_past_its_ttl_brings_it_back(
    service: MemoryService, clock: FixedClock
) -> None:
    """The import took the expired, not yet reaped, memory for one the bank holds live and
    left the record out (`imported: 0`); the next read reaped it, and the fact the person
    had just imported was gone: a save of the same text retires the expired one first."""
    await call(service, "memory::bank::create", name="main", retention={"context": 2})
    text = "The user is moving house."
    await call(service, "memory::save", text=text, category="context")
    clock.advance_days(3)
    records = [{"text": text, "category": "context"}]
    report = await call(service, "memory::import", bank="main", records=records)
    assert (report["imported"], report["live"]) == (1, 1)
    listed = [m["text"] for m in (await call(service, "memory::list"))["memories"]]
    assert listed == [text]


async def test_an_import_counts_no_record_past_its_ttl_as_live(
    service: MemoryService, clock: FixedClock
) -> None:
    """An exported context from long ago, imported into a bank that keeps context a day, is gone
    the moment it lands (no read shows it): the report counted it `live`."""
    await call(service, "memory::bank::create", name="main", retention={"context": 1})
    old = clock() - 5 * DAY_MS
    records = [
        {"text": "The user was packing boxes.", "category": "context", "created_at": old},
        {"text": "The user was born in Porto.", "category": "fact", "created_at": old},
    ]
    report = await call(service, "memory::import", bank="main", records=records)
    assert (report["imported"], report["live"]) == (2, 1)
    listed = [m["text"] for m in (await call(service, "memory::list"))["memories"]]
    assert listed == ["The user was born in Porto."]


class TestPastItsTtlIsGone:
    """A memory past its TTL is gone the moment its TTL runs out, reaped or not: the bank's
    counts leave it out, and a change by id finds it retired (as `memory::get` shows it), never
    live — a pin or an edit kept an expired memory alive for good."""

    @staticmethod
    async def _expiring(service: MemoryService, clock: FixedClock) -> dict[str, str]:
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        ids = {}
        for key, text, extra in (
            ("context", "Ana is debugging the parser today.", {"subject": "Ana"}),
            ("pinned", "Rui is on call this week.", {"subject": "Rui", "pinned": True}),
            ("fact", "Bea wrote the parser in Rust.", {"subject": "Bea", "category": "fact"}),
        ):
            extra = {"category": "context", **extra}
            ids[key] = (await call(service, "memory::save", text=text, **extra))["memory"]["id"]
        clock.advance(DAY_MS + 1)  # older than its one-day TTL
        return ids

    async def test_bank_get_and_list_count_no_memory_past_its_ttl(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await self._expiring(service, clock)
        shown = (await call(service, "memory::bank::get", name="main"))["bank"]
        assert (shown["memories"], shown["pinned"], shown["subjects"]) == (2, 1, 2)
        [listed] = (await call(service, "memory::bank::list"))["banks"]
        assert listed == shown
        stats = await call(service, "memory::stats")  # the reaper agrees
        assert stats["memories"] == 2 and len(stats["by_subject"]) == 2

    async def test_a_change_by_id_finds_it_retired_as_get_shows_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        from memory_worker.core.errors import Conflict

        ids = await self._expiring(service, clock)
        for function, change in (
            ("memory::pin", {"pinned": True}),
            ("memory::pin", {"pinned": False}),
            ("memory::update", {"tags": ["kept"]}),
            ("memory::update", {"text": "Ana is still debugging the parser today."}),
        ):
            try:
                await call(service, function, id=ids["context"], **change)
            except Conflict as exc:
                assert "retired" in str(exc)
            else:
                raise AssertionError(f"{function} {change} changed an expired memory")
        got = (await call(service, "memory::get", id=ids["context"]))["memory"]
        assert got.get("invalid_reason") == "expired"
        deleted = (await call(service, "memory::delete", id=ids["context"]))["memory"]
        assert deleted.get("invalid_reason") == "expired" and deleted.get("invalid_at")
        listed = await call(service, "memory::list")
        assert ids["context"] not in {m["id"] for m in listed["memories"]}

    async def test_an_expired_memory_is_no_winner_to_supersede_into(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        from memory_worker.core.errors import Conflict

        ids = await self._expiring(service, clock)
        try:
            await call(service, "memory::supersede", id=ids["fact"], superseded_by=ids["context"])
        except Conflict as exc:
            assert "not live" in str(exc)
        else:
            raise AssertionError("a live memory was retired into an expired one")
        assert (await call(service, "memory::get", id=ids["fact"]))["memory"].get(
            "invalid_at"
        ) is None


async def test_retention_keys_differing_only_in_case_are_refused_not_collapsed(
    service: MemoryService,
) -> None:
    """Categories compare caselessly (`Context` is `context`): two entries for one category
    kept whichever came last, silently."""
    from memory_worker.core.errors import InvalidInput

    for function, payload in (
        ("memory::bank::create", {"name": "main", "retention": {"Context": 1, "context": 30}}),
        ("memory::bank::configure", {"name": "main", "retention": {"fact": 5, " FACT": 9}}),
    ):
        if function == "memory::bank::configure":
            await call(service, "memory::bank::create", name="main")
        try:
            await call(service, function, **payload)
        except InvalidInput as exc:
            assert all(repr(key) in str(exc) for key in payload["retention"]), str(exc)
        else:
            raise AssertionError(f"{function} kept one of {payload['retention']}")
    shown = await call(service, "memory::bank::get", name="main")
    assert shown["bank"]["settings"]["retention"] == {}


async def test_a_get_answers_a_memory_past_its_ttl_as_expired(
    service: MemoryService, clock: FixedClock
) -> None:
    """What `list` and recall leave out is not shown live by id either: the look-up answers it
    retired (`expired`), as it reads after the reap the read had run anyway."""
    await call(service, "memory::bank::create", name="main", retention={"context": 1})
    saved = await call(service, "memory::save", text="Debugging the parser.", category="context")
    clock.advance(DAY_MS + 1)  # older than its one-day TTL
    got = (await call(service, "memory::get", id=saved["memory"]["id"]))["memory"]
    assert got.get("invalid_reason") == "expired" and got.get("invalid_at")


async def test_a_memory_moved_to_a_person_is_not_refused_for_their_expired_ones(
    service: MemoryService, clock: FixedClock
) -> None:
    """A change by id reaps first, as a save does: a person whose only memory is past its TTL
    has room under max_per_subject, and moving a memory onto them was refused (`conflict`)."""
    create = {"name": "main", "subject_scoping": True, "max_per_subject": 1}
    await call(service, "memory::bank::create", retention={"context": 1}, **create)
    await call(service, "memory::save", text="Ana is debugging the parser.", category="context",
               subject="Ana")  # fmt: skip
    general = await call(service, "memory::save", text="The office opens at nine.")
    clock.advance(DAY_MS + 1)  # older than its one-day TTL
    moved = await call(service, "memory::update", id=general["memory"]["id"], subject="Ana")
    assert moved["memory"]["subject"] == "Ana"
    stats = await call(service, "memory::stats", subject="Ana")
    assert stats["by_subject"] == {"Ana": 1}


async def test_an_erasure_under_way_keeps_no_one_elses_write_from_reaping(
    service: MemoryService, clock: FixedClock
) -> None:
    """While forget-subject erases Ana, a write about her is refused (`conflict`); the reap a
    save or stats runs first retired her expired memory in the same write as everyone else's,
    so a save about Bob, and stats, failed with that `conflict` until the erasure ended."""
    await call(service, "memory::bank::create", name="main", retention={"context": 1})
    ana = await call(service, "memory::save", text="Ana is debugging the parser.",
                     category="context", subject="Ana")  # fmt: skip
    bob = await call(service, "memory::save", text="Bob is on call today.", category="context",
                     subject="Bob")  # fmt: skip
    clock.advance(DAY_MS + 1)  # older than its one-day TTL
    bank = service.store.get("main")
    with bank.erasing("Ana", [ana["memory"]["id"]]):
        saved = await call(service, "memory::save", text="Bob plays chess.", subject="Bob")
        stats = await call(service, "memory::stats")
    assert saved["created"] and stats["expired"] == [bob["memory"]["id"]]
