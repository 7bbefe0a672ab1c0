"""Capacity: which memories a new one evicts when its scope is full (seed 004, C20). Pure.

At a cap, a new memory evicts the least-accessed, oldest memories of its own scope — a subject's
own rows when subject scoping is on and it is about someone, else the general pool (or the whole
bank with scoping off) — so a chatty person never evicts another's memories. Only at the bank's
own cap (max_memories), when that scope has nothing to evict (a person new to the bank), does the
room come from the whole bank's order; a subject's cap never reaches past its own rows. Pinned
memories and lessons (authored cards) are never evicted; when nothing else is left, the save is
refused rather than letting a cap be silently exceeded or something pinned be lost.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass

from memory_worker.core.errors import Conflict
from memory_worker.core.models import Memory

__all__ = [
    "EVICTED",
    "PER_SAVE",
    "Cap",
    "EvictionQueue",
    "Key",
    "evictable",
    "eviction_key",
    "eviction_order",
    "excess",
    "victims",
]

EVICTED = "evicted"
PER_SAVE = 1  # a save adds one memory: it retires at most one for room (`excess`)

Key = tuple[int, int, int, str]  # accesses, last access, last stated, id: smallest goes first


@dataclass(frozen=True, slots=True)
class Cap:
    """One limit the new memory is under, over its own scope: `held` is how many live memories
    that scope holds now (without the new one), `limit` how many it may hold with it (0 or less:
    none can), `name` the setting (for the refusal). An unlimited setting makes no cap at all."""

    name: str
    limit: int
    held: int
    setting: int | None = None  # the configured value, when `limit` is what is left of it


def eviction_order(
    rows: Iterable[Memory],
    access: Callable[[str], tuple[int, int] | None],
    first: int | None = None,
) -> list[Memory]:
    """Evictable rows, first to go first: fewest accesses, then least recently accessed (never
    accessed counts as longest ago), then least recently stated, then id (a stable order).
    `first`: only that many of them (a selection in one pass, not a sort of the whole scope: a
    full bank pays this on every save)."""

    def key(memory: Memory) -> Key:
        return eviction_key(memory, access(memory.id))

    candidates = [m for m in rows if evictable(m)]
    if first is not None:
        return heapq.nsmallest(first, candidates, key=key)
    return sorted(candidates, key=key)


def evictable(memory: Memory) -> bool:
    """Whether a cap may take `memory`: live, not pinned, not a lesson."""
    return memory.live and not memory.pinned and memory.category != "lesson"


def eviction_key(memory: Memory, seen: tuple[int, int] | None) -> Key:
    """Where `memory` stands in `eviction_order`, given its (accesses, last access) or None.
    "Oldest" is the fact's last statement, as for retention: a memory the person just said
    again is not the stale one, whenever it was first saved."""
    count, last = seen if seen is not None else (0, 0)
    return count, last, memory.last_stated_at, memory.id


class EvictionQueue:
    """The evictable memories of a bank in `eviction_order`, kept one change at a time, so a full
    bank finds its next victims without looking at every row (a scan cost ~2 ms a save per 1,000
    memories). A binary heap of keys; a key that is no longer its id's current one is stale and
    skipped (a change pushes the new key; the heap is rebuilt when stale keys outnumber the
    current ones). `first` walks the heap in key order without popping, so nothing it skips (a
    record in flight) is lost."""

    def __init__(self, keys: dict[str, Key]) -> None:
        self._keys = keys  # id → its current key (evictable ids only)
        self._heap = list(keys.values())
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._keys)

    def set(self, memory_id: str, key: Key | None) -> None:
        """`memory_id`'s key now (None: not evictable any more)."""
        old = self._keys.get(memory_id)
        if key == old:
            return
        if key is None:
            del self._keys[memory_id]
        else:
            self._keys[memory_id] = key
            heapq.heappush(self._heap, key)
        if len(self._heap) > 2 * len(self._keys) + 1024:
            self._heap = list(self._keys.values())
            heapq.heapify(self._heap)

    def first(self, n: int, skip: Container[str] = ()) -> list[str]:
        """The ids of the first `n` evictable memories in eviction order, leaving out `skip`."""
        heap, keys = self._heap, self._keys
        while heap and keys.get(heap[0][3]) != heap[0]:
            heapq.heappop(heap)  # stale at the top: gone for good
        out: list[str] = []
        if n <= 0 or not heap:
            return out
        taken: set[str] = set()
        frontier = [(heap[0], 0)]
        size = len(heap)
        while frontier and len(out) < n:
            key, at = heapq.heappop(frontier)
            memory_id = key[3]
            if keys.get(memory_id) == key and memory_id not in skip and memory_id not in taken:
                taken.add(memory_id)
                out.append(memory_id)
            for child in (2 * at + 1, 2 * at + 2):
                if child < size:
                    heapq.heappush(frontier, (heap[child], child))
        return out


def excess(caps: Sequence[Cap]) -> int:
    """How many memories of the scope the new one displaces: one when it reaches a cap, none
    under every cap. A scope already past a cap (an import is not held to the caps, and a cap
    can be lowered) is not cut back by a save, which then takes one and so keeps it from
    growing: a save never destroys more than it adds (a save into a 100,000-memory import at
    the default cap of 10,000 would otherwise retire 90,001 memories in one write)."""
    over = max((cap.held + 1 - cap.limit for cap in caps), default=0)
    return min(over, PER_SAVE)


def victims(
    caps: Sequence[Cap],
    candidates: Iterable[Memory],
    access: Callable[[str], tuple[int, int] | None],
    bank_wide: Callable[[], Iterable[Memory]] | None = None,
) -> list[Memory]:
    """What must go so the new memory fits every cap: the first `excess(caps)` of its scope in
    eviction order. Every cap counts that one scope (the new memory's own: a chatty person never
    evicts another's memories). `candidates` are the scope's rows: all of them, or at least
    every evictable one that can come first (what a kept order or a bulk selection finds).
    `bank_wide`: where the room comes from when the scope has nothing evictable, given only
    when the one cap reached is the bank's own (max_memories): a person the bank knows nothing
    of yet (or a general memory in an empty pool) has no row to pay with, and refusing them
    left a full bank never able to learn about anyone new (seed 004: at max_memories the
    least-accessed oldest memory is evicted). A subject's own cap never reaches past its rows.
    `Conflict` when a cap cannot be met without touching a pinned memory or a lesson (nothing is
    saved or evicted then), naming the first cap reached."""
    need = excess(caps)
    if need <= 0:
        return []
    order = eviction_order(candidates, access, first=need)
    where = "this scope"
    if len(order) < need and bank_wide is not None:
        order, where = eviction_order(bank_wide(), access, first=need), "the bank"
    if len(order) < need:
        cap = next(cap for cap in caps if cap.held + 1 > cap.limit)
        shown = cap.limit if cap.setting is None else cap.setting
        raise Conflict(
            f"{cap.name} ({shown}) is reached and what is left to evict in {where} is "
            "pinned or a lesson; unpin something, delete something, or raise the cap"
        )
    return order
