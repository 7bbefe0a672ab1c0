"""The log rewrite primitive and `memory-worker compact`: a pure plan, a crash-safe replacement.

A rewrite writes the new log beside the old, checks that it replays to what the plan's records
replay to, fsyncs, renames it over the old one and fsyncs the folder. Killed at any moment, the
bank reads back as the old log or the new one, never anything else; commits made while it runs
land in the new log; a log it cannot fully read is refused rather than silently shortened.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import time
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
from pathlib import Path
from unittest.mock import ANY

import pytest

from memory_worker.app import catalog
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.compaction import DAY_MS, compaction_plan
from memory_worker.core.errors import Conflict, StorageError
from memory_worker.core.models import Confidence, Memory
from memory_worker.storage import files, log
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter


def _record(memory_id: str, revision: int, updated_at: int, **extra: object) -> Memory:
    return Memory(
        id=memory_id,
        text=f"memory {memory_id} at revision {revision}",
        confidence=Confidence.STATED,
        created_at=0,
        updated_at=updated_at,
        revision=revision,
        **extra,  # type: ignore[arg-type]
    )


class TestCompactionPlan:
    def test_keeps_each_latest_record_and_the_recent_revisions_in_log_order(self) -> None:
        records = [
            _record("a", 0, 10),
            _record("b", 0, 20),
            _record("a", 1, 30),  # what `a` said at the horizon: kept though superseded
            _record("a", 2, 200),  # after the horizon: kept though superseded
            _record("a", 3, 210),
            _record("b", 1, 40, invalid_at=40),  # b's tombstone: its latest record
        ]
        kept = compaction_plan(records, horizon_ms=100)
        assert [(r.id, r.revision) for r in kept] == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
        assert log.replayed(kept) == log.replayed(records)

    def test_a_tie_keeps_the_later_line_as_replay_does(self) -> None:
        first, second = _record("a", 4, 10), _record("a", 4, 11)
        kept = compaction_plan([first, second], horizon_ms=1_000)
        assert kept == [second]
        assert log.replayed(kept) == log.replayed([first, second])

    def test_what_each_memory_said_at_the_horizon_is_kept(self) -> None:
        """Every moment within the horizon can still be told (`memory::recall` with `as_of`,
        `memory::history`): the revision current at the horizon, though written before it and
        superseded since, stays; only what was superseded before the horizon goes."""
        records = [
            _record("a", 0, 10),
            _record("a", 1, 30),  # what `a` said from 30 to 200, the horizon (100) included
            _record("a", 2, 200),
            _record("b", 0, 20),  # b unchanged since: its latest record
        ]
        kept = compaction_plan(records, horizon_ms=100)
        assert [(r.id, r.revision) for r in kept] == [("a", 1), ("a", 2), ("b", 0)]

    @pytest.mark.parametrize("seed", range(20))
    def test_replay_of_the_plan_always_equals_replay_of_the_log(self, seed: int) -> None:
        rng = random.Random(seed)
        records = [
            _record(rng.choice("abcdef"), rng.randint(0, 6), rng.randint(0, 1_000))
            for _ in range(rng.randint(0, 60))
        ]
        kept = compaction_plan(records, horizon_ms=rng.randint(0, 1_200))
        assert log.replayed(kept) == log.replayed(records)
        assert len(kept) <= len(records)


async def _fill(service: MemoryService, clock: FixedClock, edits: int) -> list[str]:
    ids = []
    for n in range(5):
        result = await catalog.call(service, "memory::save", {"text": f"The user owns item {n}"})
        ids.append(result["memory"]["id"])
    for n in range(edits):
        clock.advance(DAY_MS)
        await catalog.call(service, "memory::update", {"id": ids[n % 5], "tags": [f"t{n}"]})
    await catalog.call(service, "memory::delete", {"id": ids[4]})
    return ids


class TestRewrite:
    async def test_compact_drops_old_revisions_and_changes_no_answer(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        ids = await _fill(service, clock, edits=20)
        before = {i: (await catalog.call(service, "memory::get", {"id": i}))["memory"] for i in ids}
        listing = await catalog.call(service, "memory::list", {"include_superseded": True})
        report = await service.compact("main", horizon_days=3)
        assert report.lines_before == 26 and report.lines_after < report.lines_before
        assert report.bytes_after < report.bytes_before
        after = {i: (await catalog.call(service, "memory::get", {"id": i}))["memory"] for i in ids}
        assert after == before
        assert await catalog.call(service, "memory::list", {"include_superseded": True}) == listing
        history = await catalog.call(service, "memory::history", {"id": ids[0]})
        assert [r["revision"] for r in history["revisions"]][-1] == before[ids[0]]["revision"]
        assert len(history["revisions"]) < before[ids[0]]["revision"] + 1
        compacted = {"event_type": "compacted", "bank": "main", "event_id": ANY}
        assert emitter.of(BANK_CHANGED)[-1] == compacted
        # The new log is what a restart reads, and it holds no leftovers.
        assert [p.name for p in (data_dir / "main").iterdir() if ".replacing" in p.name] == []
        memories, damage = log.replay(data_dir / "main" / "memories.jsonl")
        assert damage == [] and {m.id: m.to_wire() for m in memories.values()} == after

    async def test_a_hand_edit_the_compaction_reads_first_is_announced_as_a_reload_would(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        """A compaction reads the log as it is on disk, a hand edit the watcher has not picked up
        yet included, and makes it RAM's: after it the watcher sees nothing to reload. Lines a
        person removed were a memory gone with only `compacted` (documented as "no memory
        changed"), and subscribers (the console, memory-consolidate's report) kept it."""
        kept = await catalog.call(service, "memory::save", {"text": "The user likes tea."})
        gone = await catalog.call(service, "memory::save", {"text": "The user is 40."})
        path = data_dir / "main" / "memories.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(line for line in lines if b"is 40" not in line))
        emitter.clear()
        await catalog.call(service, "memory::compact", {"bank": "main", "horizon_days": 0})
        items = [
            (e["event_type"], e["memory"]["id"], e.get("reason")) for e in emitter.of(ITEM_CHANGED)
        ]
        assert items == [("deleted", gone["memory"]["id"], "edited by hand")]
        assert [e["event_type"] for e in emitter.of(BANK_CHANGED)] == ["compacted"]
        emitter.clear()
        assert await service.reload_bank("main") == "unchanged"  # announced once
        await catalog.call(service, "memory::compact", {"bank": "main", "horizon_days": 0})
        assert emitter.of(ITEM_CHANGED) == []
        assert (await catalog.call(service, "memory::list", {}))["memories"][0]["id"] == (
            kept["memory"]["id"]
        )

    async def test_recall_as_of_a_moment_within_the_horizon_answers_what_was_said_then(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """`horizon_days: 30` keeps the last 30 days of history: a question `as_of` 20 days ago
        is answered with what the memory said then, not with an edit made 10 days ago (the
        revision it replaced, written 100 days ago, was dropped)."""
        saved = await catalog.call(service, "memory::save", {"text": "The user lives in Porto."})
        memory_id = saved["memory"]["id"]
        clock.advance(100 * DAY_MS)
        await catalog.call(
            service, "memory::update", {"id": memory_id, "text": "The user lives in Moscow."}
        )
        clock.advance(10 * DAY_MS)
        query = {"query": "where does the user live", "as_of": clock() - 20 * DAY_MS}
        before = await catalog.call(service, "memory::recall", query)
        assert [m["memory"]["text"] for m in before["memories"]] == ["The user lives in Porto."]
        await service.compact("main", horizon_days=30)
        after = await catalog.call(service, "memory::recall", query)
        assert [m["memory"]["text"] for m in after["memories"]] == ["The user lives in Porto."]
        history = await catalog.call(service, "memory::history", {"id": memory_id})
        assert [r["revision"] for r in history["revisions"]] == [0, 1]

    async def test_commits_made_during_a_rewrite_land_in_the_new_log(
        self,
        service: MemoryService,
        clock: FixedClock,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        await _fill(service, clock, edits=10)
        bank = service.store.get("main")
        reading = asyncio.Event()
        release = asyncio.Event()
        loop = asyncio.get_running_loop()
        original = Bank._rewrite_file

        def slow(self: Bank, *args: object) -> object:
            loop.call_soon_threadsafe(reading.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
            return original(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(Bank, "_rewrite_file", slow)
        rewrite = asyncio.create_task(service.compact("main", horizon_days=0))
        await reading.wait()
        saves = [
            asyncio.create_task(
                catalog.call(service, "memory::save", {"text": f"Saved during it, number {n}"})
            )
            for n in range(8)
        ]
        await asyncio.sleep(0)  # every save has staged its record and is waiting on the rewrite
        assert not any(s.done() for s in saves)
        release.set()
        await rewrite
        acknowledged = [(await s)["memory"]["id"] for s in saves]
        memories, damage = log.replay(data_dir / "main" / "memories.jsonl")
        assert damage == [] and set(acknowledged) <= set(memories)
        assert all(bank.get(i) is not None for i in acknowledged)

    async def test_a_log_with_damaged_lines_is_refused_and_left_alone(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        await _fill(service, clock, edits=3)
        path = data_dir / "main" / "memories.jsonl"
        with path.open("ab") as handle:
            handle.write(b'{"this is": "not a memory"}\n')
        await service.reload_bank("main")
        before = path.read_bytes()
        with pytest.raises(Conflict, match="damaged line"):
            await service.compact("main", horizon_days=0)
        assert path.read_bytes() == before

    async def test_dropping_damage_is_explicit_and_reported(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        await _fill(service, clock, edits=3)
        path = data_dir / "main" / "memories.jsonl"
        with path.open("ab") as handle:
            handle.write(b"garbage\n")
        await service.reload_bank("main")
        bank = service.store.get("main")
        result = await bank.rewrite(lambda records: records, drop_damaged=True)
        assert result.damaged_dropped == 1 and b"garbage" not in path.read_bytes()
        assert [d for d in bank.damage if d.file == "memories.jsonl"] == []

    async def test_a_failed_self_check_or_rename_leaves_the_old_log_and_no_temp_file(
        self,
        service: MemoryService,
        clock: FixedClock,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        await _fill(service, clock, edits=5)
        path = data_dir / "main" / "memories.jsonl"
        before = path.read_bytes()
        bank = service.store.get("main")

        def torn(records: object) -> Iterator[bytes]:  # a line that does not read back
            yield b'{"id": "x"\n'

        monkeypatch.setattr("memory_worker.storage.bank.lines_of", torn)
        with pytest.raises(StorageError, match="did not read back as planned"):
            await bank.rewrite(lambda records: records)
        monkeypatch.undo()

        def refuse(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", refuse)
        with pytest.raises(StorageError, match="No space left"):
            await bank.rewrite(lambda records: records[-1:])
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []
        assert (await catalog.call(service, "memory::save", {"text": "still writable"}))["created"]

    async def test_a_folder_sync_failing_after_the_rename_is_reported_with_ram_on_the_new_log(
        self,
        service: MemoryService,
        clock: FixedClock,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        ids = await _fill(service, clock, edits=5)
        bank = service.store.get("main")

        def failing_sync(path: Path) -> None:
            raise StorageError(f"cannot sync directory {path}: Input/output error")

        monkeypatch.setattr(files, "fsync_dir", failing_sync)
        with pytest.raises(files.UnsyncedChange):
            await bank.rewrite(lambda records: [r for r in records if r.id != ids[1]])
        monkeypatch.undo()
        assert bank.get(ids[1]) is None  # RAM follows the file now in place
        assert any("rewritten" in w.change for w in service.store.durability.recent())

    async def test_a_leftover_temp_file_is_removed_when_the_bank_loads(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        await _fill(service, clock, edits=2)
        leftover = data_dir / "main" / ".memories.jsonl.0123456789ab.replacing"
        leftover.write_bytes(b"half a rewrite")
        await service.store.close()
        store = Store.open(data_dir, holder=HOLDER)
        try:
            assert not leftover.exists()
            assert store.get("main").live_count() == 4
        finally:
            await store.close()


# --- killed at random moments ----------------------------------------------------------------

KILLS = 200
LOG_RECORDS = 1_200


def _compact_child(data_dir: str) -> None:
    from memory_worker.adapters.cli import main

    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the report it prints is not what this test reads
    os._exit(main(["compact", "--bank", "main", "--horizon-days", "0", "--data-dir", data_dir]))


@pytest.fixture(name="forkserver", scope="module")
def _forkserver() -> ForkServerContext:
    """Children forked from a clean single-threaded server that already imported the worker: a
    compaction starts in milliseconds, so hundreds of kills fit in the suite."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["memory_worker.adapters.cli"])
    return context


def _seed_log(path: Path) -> None:
    rng = random.Random(7)
    records: list[Memory] = []
    revisions: dict[str, int] = {}
    for n in range(LOG_RECORDS):
        memory_id = f"fp{rng.randrange(300):016x}"
        revision = revisions.get(memory_id, -1) + 1
        revisions[memory_id] = revision
        gone = rng.random() < 0.05
        records.append(
            _record(memory_id, revision, 1_000 + n, invalid_at=1_000 + n if gone else None)
        )
    path.parent.mkdir(parents=True)
    (path.parent / "rules").mkdir()
    (path.parent / "bank.yaml").write_text("description: ''\n")
    path.write_bytes(b"".join(log.lines_of(records)))


@pytest.mark.timeout(900)  # ~20 s alone; far longer on a machine busy with other work
def test_compaction_killed_at_random_moments_leaves_the_old_log_or_the_new(
    tmp_path: Path, forkserver: ForkServerContext
) -> None:
    data_dir = tmp_path / "data"
    path = data_dir / "main" / "memories.jsonl"
    _seed_log(path)
    old = path.read_bytes()
    served = log.replay(path)[0]

    # One uninterrupted run: the new log, and how long a run takes.
    started = time.monotonic()
    child = forkserver.Process(target=_compact_child, args=(str(data_dir),))
    child.start()
    child.join(60)
    duration = time.monotonic() - started
    assert child.exitcode == 0
    new = path.read_bytes()
    assert new != old and log.replay(path)[0] == served

    rng = random.Random(11)
    outcomes = {"old": 0, "new": 0}
    for _ in range(KILLS):
        path.write_bytes(old)
        child = forkserver.Process(target=_compact_child, args=(str(data_dir),))
        child.start()
        time.sleep(rng.uniform(0, duration * 1.2))  # the kill moment: anywhere in the run
        child.kill()
        child.join(10)
        now = path.read_bytes()
        assert now in (old, new), "a killed compaction left a log that is neither old nor new"
        outcomes["old" if now == old else "new"] += 1
        memories, damage = log.replay(path)
        assert damage == [] and memories == served
    # Both outcomes happened: the kills really landed before and after the rename.
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes
    store = Store.open(data_dir, holder=HOLDER)  # the next open clears what the kills left
    try:
        assert [p.name for p in path.parent.iterdir() if p.name.endswith(".replacing")] == []
    finally:
        asyncio.run(store.close())
