"""What the save path keeps to go faster must answer exactly what it replaced: the bank's kept
eviction order picks the victims a scan of every row picked (with access counts, pins, deletes,
concurrent saves and a reload changing it), and concurrent saves leave the log, RAM and events
that the same saves one at a time leave."""

from __future__ import annotations

import asyncio
import errno
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.capacity import EvictionQueue, Key, evictable
from memory_worker.core.config import Settings
from memory_worker.core.models import Memory
from memory_worker.storage import bank as bank_module
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

from .fakes import FixedClock, RecordingEmitter

PERSON = Caller.human("cli")
HOLDER = {"pid": os.getpid(), "kind": "test", "command": "pytest"}
_NONCE = re.compile(rb'"batch":"[0-9a-f]+:')
_BATCH_CRC = re.compile(rb'("batch":"-:[^"]*".*"crc":")[0-9a-f]{8}"')


def _comparable(log: bytes) -> bytes:
    """A log with each batch's random nonce, and so its lines' CRCs, blanked."""
    return _BATCH_CRC.sub(rb'\1-"', _NONCE.sub(b'"batch":"-:', log))


async def _call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, PERSON)


async def _full_bank_story(service: MemoryService, clock: FixedClock) -> list[Any]:
    """Saves into a bank at its cap, with recalls (access counts), a pin, a delete, a re-save,
    a resurrection, 20 concurrent saves and a reload in between; every answer kept."""
    answers: list[Any] = []
    await _call(service, "memory::bank::create", name="main", max_memories=12)
    for i in range(15):
        clock.advance(10)
        answers.append(await _call(service, "memory::save", text=f"The user likes fruit {i}."))
    first_id = answers[0]["memory"]["id"]
    for query in ("fruit 5", "fruit 7", "fruit 5", "fruit 9"):
        clock.advance(5)
        answers.append(await _call(service, "memory::recall", query=query, limit=2))
    some = answers[5]["memory"]["id"]
    answers.append(await _call(service, "memory::pin", id=some, pinned=True))
    other = answers[8]["memory"]["id"]
    answers.append(await _call(service, "memory::delete", id=other))
    clock.advance(10)
    answers.append(await _call(service, "memory::save", text="The user likes fruit 14."))
    answers.append(await _call(service, "memory::save", text="The user likes fruit 0."))
    answers.append(await _call(service, "memory::get", id=first_id))
    clock.advance(10)
    answers += await asyncio.gather(
        *(_call(service, "memory::save", text=f"The user reads book {i}.") for i in range(20))
    )
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    os.fsync = failing_fsync  # a group whose fsync fails: its evictions never happened
    try:
        answers += await asyncio.gather(
            *(_call(service, "memory::save", text=f"The user lost note {i}.") for i in range(5)),
            return_exceptions=True,
        )
    finally:
        os.fsync = real_fsync
    answers[-5:] = [type(a).__name__ if isinstance(a, BaseException) else a for a in answers[-5:]]
    clock.advance(10)
    answers += await asyncio.gather(
        *(_call(service, "memory::save", text=f"The user writes poem {i}.") for i in range(6))
    )
    await service.store.reload()  # access counts reloaded: the kept order starts over
    for query in ("book 3", "book 17"):
        clock.advance(5)
        answers.append(await _call(service, "memory::recall", query=query, limit=3))
    for i in range(6):
        clock.advance(10)
        answers.append(await _call(service, "memory::save", text=f"The user visits city {i}."))
    answers.append(await _call(service, "memory::list", limit=500))
    return answers


async def _story(data_dir: Path) -> tuple[list[Any], bytes, list[Any]]:
    store = Store.open(data_dir, holder=HOLDER)
    emitter = RecordingEmitter()
    clock = FixedClock()
    service = MemoryService(store, Settings(), emitter=emitter, clock=clock)
    try:
        answers = await _full_bank_story(service, clock)
        live = sorted(m.id for m in store.get("main").memories.values() if m.live)
    finally:
        await store.close()
    log = _comparable((data_dir / "main" / "memories.jsonl").read_bytes())
    events = [(kind, {k: v for k, v in e.items() if k != "event_id"}) for kind, e in emitter.events]
    return [*answers, live], log, events  # an event's id is random


async def test_a_full_bank_evicts_what_a_scan_of_every_row_evicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    picked: list[int] = []
    first_evictable = Bank.first_evictable

    def spy(bank: Bank, n: int, skip: Any = ()) -> list[Memory]:
        chosen = first_evictable(bank, n, skip)
        picked.append(len(chosen))
        return chosen

    with monkeypatch.context() as patched:
        patched.setattr(Bank, "first_evictable", spy)
        kept = await _story(tmp_path / "kept")
    assert len([n for n in picked if n]) >= 25  # the kept order chose (no scan fallback)

    def scan(bank: Bank, n: int, skip: Any = ()) -> list[Memory]:
        """Every evictable latest record: the policy sorts the whole bank itself."""
        latest = {**bank.memories, **{m.id: m for m in bank.in_flight()}}
        return [m for m in latest.values() if evictable(m) and m.id not in skip]

    with monkeypatch.context() as patched:
        patched.setattr(Bank, "first_evictable", scan)
        scanned = await _story(tmp_path / "scanned")
    assert kept[0].count("StorageError") == 5  # the group whose fsync failed
    assert kept[0] == scanned[0]
    assert kept[1] == scanned[1]  # the log, byte for byte (batch nonces and CRCs aside)
    assert kept[2] == scanned[2]
    assert kept[1].count(b'"invalid_reason":"evicted"') >= 25

    # Without the kept order at all: every ask answered over the index's columns, as a
    # one-shot command's save is (`ONE_OFF_EVICTIONS`).
    with monkeypatch.context() as patched:
        patched.setattr(bank_module, "ONE_OFF_EVICTIONS", 10**9)
        patched.setattr(EvictionQueue, "__init__", _never_built)
        once = await _story(tmp_path / "once")
    assert once == scanned


def _never_built(*_: Any) -> None:
    raise AssertionError("the kept eviction order was built")


@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("set"), st.integers(0, 20), st.integers(0, 3), st.integers(0, 5)),
            st.tuples(st.just("drop"), st.integers(0, 20), st.just(0), st.just(0)),
            st.tuples(st.just("first"), st.integers(0, 25), st.integers(0, 20), st.just(0)),
        ),
        max_size=60,
    )
)
@settings(max_examples=200, deadline=None)
def test_the_kept_eviction_order_is_the_sorted_order_after_any_changes(
    ops: list[tuple[str, int, int, int]],
) -> None:
    current: dict[str, Key] = {f"m{i}": (0, 0, i, f"m{i}") for i in range(0, 20, 3)}
    queue = EvictionQueue(dict(current))
    for op, a, b, c in ops:
        memory_id = f"m{a}"
        if op == "set":
            key = (b, c, a % 4, memory_id)
            current[memory_id] = key
            queue.set(memory_id, key)
        elif op == "drop":
            current.pop(memory_id, None)
            queue.set(memory_id, None)
        else:
            skip = {f"m{i}" for i in range(b, b + 4)}
            expected = [k[3] for k in sorted(current.values()) if k[3] not in skip][:a]
            assert queue.first(a, skip) == expected
        assert len(queue) == len(current)


async def _saves(data_dir: Path, texts: list[str], *, together: bool) -> tuple[Any, ...]:
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=FixedClock())
    try:
        await _call(service, "memory::bank::create", name="main", max_memories=30)
        requests = [
            {"text": text, "entities": ["Ana"] if i % 4 == 0 else [], "tags": [f"t{i % 3}"]}
            for i, text in enumerate(texts)
        ]
        if together:
            answers = await asyncio.gather(*(_call(service, "memory::save", **r) for r in requests))
        else:
            answers = [await _call(service, "memory::save", **r) for r in requests]
        bank = store.get("main")
        memories = dict(bank.memories)
        found = [
            await _call(service, "memory::recall", query=q, limit=5)
            for q in ("fruit", "Ana book", "city 3")
        ]
    finally:
        await store.close()
    log = _comparable((data_dir / "main" / "memories.jsonl").read_bytes())
    return list(answers), memories, found, log


async def test_concurrent_saves_leave_the_log_ram_and_answers_of_the_same_saves_in_turn(
    tmp_path: Path,
) -> None:
    texts = [f"The user likes fruit {i % 25}." for i in range(40)]  # re-saves among them
    texts += [f"Ana reads book {i} in city {i % 5}." for i in range(20)]  # past the cap of 30
    one_by_one = await _saves(tmp_path / "seq", texts, together=False)
    grouped = await _saves(tmp_path / "group", texts, together=True)
    assert grouped[0] == one_by_one[0]
    assert grouped[1] == one_by_one[1]
    assert grouped[2] == one_by_one[2]
    assert grouped[3] == one_by_one[3]
    assert one_by_one[3].count(b'"invalid_reason":"evicted"') > 0


async def test_writes_landing_leave_the_staged_records_and_live_count_a_full_restage_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unstage = Bank._unstage
    checked: list[bool] = []

    def checking(bank: Bank, landed: dict[str, Memory], added: dict[str, int]) -> None:
        unstage(bank, landed, added)
        pendings = (*bank._queue, *bank._held)
        expected = {r.id: (r, n) for p in pendings for r, n in zip(p.records, p.norms, strict=True)}
        live = sum(bank._live_added(record) for record, _ in expected.values())
        checked.append(bank._staged == expected and bank._staged_live == live)

    monkeypatch.setattr(Bank, "_unstage", checking)
    store = Store.open(tmp_path / "data", holder=HOLDER)
    service = MemoryService(store, Settings(), clock=FixedClock())
    try:
        await _call(service, "memory::bank::create", name="main", max_memories=12)
        first = [await _call(service, "memory::save", text=f"Old fact {i}.") for i in range(8)]
        calls = [_call(service, "memory::save", text=f"New fact {i % 6}.") for i in range(18)]
        calls += [_call(service, "memory::delete", id=m["memory"]["id"]) for m in first[:3]]
        calls += [_call(service, "memory::save", text=f"Old fact {i}.") for i in range(6)]
        await asyncio.gather(*calls)
        bank = store.get("main")
        assert bank.in_flight() == []
        assert bank.decided_live_count() == bank.live_count() == 12
    finally:
        await store.close()
    assert len(checked) >= 2 and all(checked)
