"""Which durable memories of a full scope can go first, found over the index's columns.

A bank at its cap evicts on every save, and the eviction order (`core.capacity.eviction_key`:
fewest accesses, least recently accessed, least recently stated, id) used to be computed by
building a key for every memory of the scope in Python: ~36 ms a save at 10,000 memories, so 32
writers into a full bank managed ~40 saves/s. Here the index's columns (alive, pinned, subject,
stated_at) and the access counts, laid out by slot, are partitioned in numpy, and only the few
memories that can be among the first `k` are handed to the pure policy, which decides exactly as
it would over all.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memory_worker.core.models import Memory
from memory_worker.storage.access import AccessStats

if TYPE_CHECKING:  # (a one-shot save imports this module, never the search package)
    from memory_worker.search.index import Ints, LexicalIndex

__all__ = ["first_to_go"]


def first_to_go(
    index: LexicalIndex,
    memories: Mapping[str, Memory],
    access: AccessStats,
    *,
    subject: str | None,
    scoped: bool,
    exclude: Collection[str],
    k: int,
    evictable: Callable[[Memory], bool],
) -> list[Memory]:
    """At least the first `k` evictable durable memories of the scope in eviction order (those
    tied with the `k`-th on access count, last access and last statement cut by id, as the
    policy would), or all of them when there are fewer. The scope is
    `subject`'s own memories (None: the general ones) when `scoped`, else the whole bank; ids in
    `exclude` (revisions still in flight, which the caller counts itself) are left out. In no
    particular order: `core.capacity.victims` orders them."""
    n = index.slot_count
    if k <= 0 or n == 0:
        return []
    mask = index.alive[:n] & ~index.pinned[:n]
    if scoped:
        mask &= index.about(subject)
    for memory_id in exclude:
        slot = index.slot(memory_id)
        if slot >= 0:
            mask[slot] = False
    slots = np.flatnonzero(mask)
    if not slots.size:
        return []
    count = np.zeros(n, np.int64)
    last = np.zeros(n, np.int64)
    slot_of = index.slot
    seen = np.array(
        [(slot_of(memory_id), n, at) for memory_id, (n, at) in access.items()], np.int64
    ).reshape(-1, 3)
    seen = seen[seen[:, 0] >= 0]  # counts of memories no longer live
    count[seen[:, 0]], last[seen[:, 0]] = seen[:, 1], seen[:, 2]
    keys = (count[slots], last[slots], index.stated_at[slots])

    def by_id(rows: Ints, wanted: int) -> Ints:
        # The policy's last key: a cut through memories alike on every column goes by id (an
        # import with no dates makes thousands alike; keying each in Python cost ~50 ms a save).
        ids = [index.doc_id(int(s)) for s in slots[rows]]
        return rows[heapq.nsmallest(wanted, range(len(ids)), key=ids.__getitem__)]

    want = k
    while True:
        chosen = _smallest(keys, want, by_id)
        found = [memories[index.doc_id(int(s))] for s in slots[chosen]]
        kept = [m for m in found if evictable(m)]
        # A lesson, which the columns cannot tell, may have taken a place: look further.
        if len(kept) >= k or chosen.size == slots.size:
            return kept
        want *= 2


def _smallest(
    keys: tuple[npt.NDArray[Any], ...],
    k: int,
    tie_break: Callable[[Ints, int], Ints] | None = None,
) -> Ints:
    """Positions of the `k` rows smallest by `keys` (compared in order, the first deciding),
    and of every row tied with the `k`-th on all of them (or, with `tie_break`, the ones of
    those it puts first, as many as the `k` still want): what a sort would put first, found
    with one partition per key instead of a sort (a full lexsort cost ~2.7 ms at 10,000)."""
    rows = np.arange(keys[0].size)
    taken: list[Ints] = []
    for key in keys:
        if k >= rows.size:
            break
        values = key[rows]
        kth = np.partition(values, k - 1)[k - 1]
        below = rows[values < kth]
        taken.append(below)
        k -= below.size  # fewer than k are below the k-th: some of its ties are still wanted
        rows = rows[values == kth]
    if tie_break is not None and k < rows.size:
        rows = tie_break(rows, k)
    taken.append(rows)
    return np.concatenate(taken)
