"""Capacity: which memories a new one evicts when its scope is full (seed 004, C20). Pure.

At a cap, a new memory evicts the least-accessed, oldest memories of its own scope — a subject's
own rows when subject scoping is on and it is about someone, else the general pool (or the whole
bank with scoping off) — so a chatty person never evicts another's memories. Pinned memories and
lessons (authored cards) are never evicted; when nothing else is left, the save is refused rather
than letting a cap be silently exceeded or something pinned be lost.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from memory_worker.core.errors import Conflict
from memory_worker.core.models import Memory

__all__ = ["EVICTED", "Cap", "eviction_order", "victims"]

EVICTED = "evicted"


@dataclass(frozen=True, slots=True)
class Cap:
    """One limit the new memory is under: `rows` are the live memories of its scope (without the
    new one), `limit` how many that scope may hold with it (0 or less: none can), `name` the
    setting (for the refusal). An unlimited setting makes no cap at all."""

    name: str
    limit: int
    rows: Sequence[Memory]
    setting: int | None = None  # the configured value, when `limit` is what is left of it


def eviction_order(
    rows: Iterable[Memory],
    access: Callable[[str], tuple[int, int] | None],
    first: int | None = None,
) -> list[Memory]:
    """Evictable rows, first to go first: fewest accesses, then least recently accessed (never
    accessed counts as longest ago), then oldest, then id (a stable order). `first`: only that
    many of them (a selection in one pass, not a sort of the whole scope: a full bank pays this
    on every save)."""

    def key(memory: Memory) -> tuple[int, int, int, str]:
        seen = access(memory.id)
        count, last = seen if seen is not None else (0, 0)
        return count, last, memory.created_at, memory.id

    evictable = [m for m in rows if m.live and not m.pinned and m.category != "lesson"]
    if first is not None:
        return heapq.nsmallest(first, evictable, key=key)
    return sorted(evictable, key=key)


def victims(caps: Sequence[Cap], access: Callable[[str], tuple[int, int] | None]) -> list[Memory]:
    """What must go so the new memory fits every cap; `Conflict` when a cap cannot be met
    without touching a pinned memory or a lesson (nothing is saved or evicted then)."""
    chosen: dict[str, Memory] = {}
    for cap in caps:
        excess = len(cap.rows) + 1 - cap.limit
        excess -= sum(1 for m in cap.rows if m.id in chosen)  # already going for another cap
        if excess <= 0:
            continue
        order = eviction_order(cap.rows, access, first=excess + len(chosen))
        order = [m for m in order if m.id not in chosen]
        if len(order) < excess:
            shown = cap.limit if cap.setting is None else cap.setting
            raise Conflict(
                f"{cap.name} ({shown}) is reached and what is left to evict in this scope is "
                "pinned or a lesson; unpin something, delete something, or raise the cap"
            )
        chosen.update((m.id, m) for m in order[:excess])
    return list(chosen.values())
