"""The bulk eviction selection (`storage.eviction.first_to_go`) hands the pure policy
(`core.capacity.victims`) candidates that make it decide exactly as it would over every memory of
the scope: the same victims in the same order, the same refusals. Banks with ties on creation
time and access, pins, lessons, subjects and retired memories."""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.capacity import Cap, evictable, eviction_order, victims
from memory_worker.core.errors import Conflict
from memory_worker.core.models import Memory
from memory_worker.storage.bank import Bank
from memory_worker.storage.eviction import _smallest, first_to_go

from .fakes import FixedClock

SUBJECTS = (None, "ana", "bruno")
_banks = itertools.count()

row = st.fixed_dictionaries(
    {
        "subject": st.sampled_from((None, None, "ana", "bruno")),
        "created": st.integers(0, 3),  # few instants: many ties on creation time
        "pinned": st.booleans(),
        "lesson": st.integers(0, 2).map(lambda n: n == 0),
        "edited": st.booleans(),  # re-indexed later: slot order no longer follows the ids
        "recalled": st.integers(0, 2),  # how many recalls name it
        "retired": st.integers(0, 7).map(lambda n: n == 0),
    }
)


def _access(bank: Bank) -> Any:
    def seen(memory_id: str) -> tuple[int, int] | None:
        found = bank.access.get(memory_id)
        return None if found is None else (found.count, found.last_ms)

    return seen


async def _fill(
    service: MemoryService, clock: FixedClock, name: str, rows: list[dict[str, Any]]
) -> Bank:
    await catalog.call(service, "memory::bank::create", {"name": name, "subject_scoping": True})
    bank = service.store.get(name)
    assert bank is not None
    for n, spec in enumerate(rows):
        payload: dict[str, Any] = {"bank": name, "text": f"note number {n} of the bank"}
        if spec["lesson"]:
            payload |= {
                "category": "lesson",
                "title": f"Lesson {n}",
                "recommendation": f"Do step {n} first.",
                "anchors": {"files": [f"src/file{n}.py"]},
            }
        if spec["subject"] is not None:
            payload["subject"] = spec["subject"]
        if spec["pinned"]:
            payload["pinned"] = True
        clock.now_ms = FixedClock.START_MS + spec["created"]
        saved = (await catalog.call(service, "memory::save", payload))["memory"]
        if spec["recalled"]:  # two instants of last access: ties again
            bank.access.bump([saved["id"]], 5_000 + n % 2)
        if spec["recalled"] == 2:
            bank.access.bump([saved["id"]], 6_000)
        if spec["retired"]:
            await catalog.call(service, "memory::delete", {"bank": name, "id": saved["id"]})
        spec["id"] = saved["id"]
    for n, spec in enumerate(rows):
        if spec["edited"] and not spec["retired"]:
            text = f"note number {n} of the bank, edited"
            await catalog.call(
                service, "memory::update", {"bank": name, "id": spec["id"], "text": text}
            )
    return bank


def _fast(
    bank: Bank,
    k: int,
    *,
    subject: str | None = None,
    scoped: bool = False,
    exclude: Collection[str] = (),
) -> list[Memory]:
    """`first_to_go` over `bank`'s durable state with the policy's own `evictable`."""
    return first_to_go(
        bank.index,
        bank.memories,
        bank.access,
        subject=subject,
        scoped=scoped,
        exclude=exclude,
        k=k,
        evictable=evictable,
    )


def _first(candidates: list[Memory], bank: Bank, k: int) -> list[str]:
    return [m.id for m in eviction_order(candidates, _access(bank), first=k)]


def _decide(caps: list[Cap], candidates: list[Memory], bank: Bank) -> list[str] | str:
    try:
        return [m.id for m in victims(caps, candidates, _access(bank))]
    except Conflict as exc:
        return f"conflict: {exc}"


@given(
    rows=st.lists(row, min_size=4, max_size=30),
    subject=st.sampled_from(SUBJECTS),
    scoped=st.booleans(),
    need=st.integers(1, 12),
)
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_bulk_candidates_decide_as_every_memory_of_the_scope_would(
    service: MemoryService,
    clock: FixedClock,
    rows: list[dict[str, Any]],
    subject: str | None,
    scoped: bool,
    need: int,
) -> None:
    bank = await _fill(service, clock, f"b{next(_banks)}", rows)
    scope = [m for m in bank.memories.values() if m.live and (not scoped or m.subject == subject)]
    caps = [Cap("max_memories", len(scope) + 1 - need, len(scope))]
    fast = _fast(bank, need, subject=subject, scoped=scoped)
    assert all(evictable(m) and m in scope for m in fast)
    assert _first(fast, bank, need) == _first(scope, bank, need)
    assert _decide(caps, fast, bank) == _decide(caps, scope, bank)


async def test_an_excluded_memory_is_left_to_the_caller(
    service: MemoryService, clock: FixedClock
) -> None:
    """A revision still in flight is the caller's to count: the durable one is not a candidate."""
    plain = {"subject": None, "created": 0, "pinned": False, "lesson": False, "edited": False}
    bank = await _fill(service, clock, "main", [plain | {"recalled": 0, "retired": False}] * 3)
    ids = sorted(bank.memories)
    found = _fast(bank, 3, exclude={ids[0]})
    assert sorted(m.id for m in found) == ids[1:]


@pytest.mark.parametrize("k", [0, -1])
async def test_nothing_to_evict_selects_nothing(
    service: MemoryService, clock: FixedClock, k: int
) -> None:
    bank = await _fill(service, clock, "main", [])
    found = _fast(bank, k)
    assert found == []


async def test_ties_on_the_cut_go_by_id_as_the_policy_would(
    service: MemoryService, clock: FixedClock
) -> None:
    """Six memories alike on access and creation time, re-indexed out of id order: which two go
    is the policy's id tie-break over all six, not the index's slot order (and no more than
    those two are handed to it: an import with no dates makes thousands alike)."""
    alike = {"subject": None, "created": 0, "pinned": False, "lesson": False, "recalled": 0}
    rows = [alike | {"retired": False, "edited": n % 2 == 0} for n in range(6)]
    bank = await _fill(service, clock, "main", rows)
    scope = [m for m in bank.memories.values() if m.live]
    fast = _fast(bank, 2)
    assert len(fast) == 2
    assert _first(fast, bank, 2) == _first(scope, bank, 2) == sorted(m.id for m in scope)[:2]


async def test_lessons_first_in_line_make_it_look_further(
    service: MemoryService, clock: FixedClock
) -> None:
    """The columns cannot tell a lesson: when the oldest memories are lessons, the selection
    goes past them until it has as many evictable ones as asked."""
    rows = [
        {"subject": None, "created": n, "pinned": False, "lesson": n < 3, "recalled": 0}
        | {"retired": False, "edited": False}
        for n in range(6)
    ]
    bank = await _fill(service, clock, "main", rows)
    fast = _fast(bank, 2)
    assert len(fast) >= 2 and all(m.category != "lesson" for m in fast)


@given(
    keys=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), min_size=1),
    k=st.integers(1, 40),
)
def test_the_partitions_find_what_a_sort_puts_first(
    keys: list[tuple[int, int, int]], k: int
) -> None:
    """`_smallest` = the first k of a lexicographic sort, plus every row tied with the k-th."""
    columns = tuple(np.array(column, np.int64) for column in zip(*keys, strict=True))
    found = set(_smallest(columns, k).tolist())
    ranked = sorted(range(len(keys)), key=keys.__getitem__)
    if k >= len(keys):
        assert found == set(ranked)
        return
    edge = keys[ranked[k - 1]]
    assert found == {i for i in ranked if keys[i] <= edge}
