"""Retention (C20): per-category TTL days; the reaper (boot sweep and `memory::stats`) retires
expired memories as tombstones with reason `expired`, never a pinned one, each announced; they stay
in history. Time only moves through the fake clock."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.retention import DAY_MS, expired
from memory_worker.core.transitions import new_memory

from .fakes import FixedClock, RecordingEmitter

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
        clock.advance_days(1)
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

    async def test_restating_a_memory_renews_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = await _bank(service)
        clock.advance_days(20)
        await call(service, "memory::save", text="The user is debugging a flaky test today.")
        clock.advance_days(20)
        assert (await call(service, "memory::stats"))["expired"] == []
        clock.advance_days(10)
        assert (await call(service, "memory::stats"))["expired"] == [ids["context"]]

    async def test_a_memory_saved_again_after_expiring_is_not_marked_expired_any_more(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        ids = await _bank(service)
        clock.advance_days(30)
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
        m.id for m, (age, pinned) in zip(memories, ages, strict=True) if age >= ttl and not pinned
    }
    assert expired(memories, {}, now) == [] and expired(memories, {"fact": 1}, now) == []


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
