"""Retention (C20): which memories their category's TTL has expired. Pure.

A bank's `retention` maps a category to days (`{context: 30}`); a memory of that category whose
fact was last stated longer ago than that has expired (restating it renews it). Seed 004 says
"older than the TTL": one exactly the TTL old, to the millisecond, is still kept. Categories
without an entry never expire, a memory saved without a category counts as a fact, and pinned
memories and lessons never expire (a person pinned the one; the other is authored, not remembered).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from memory_worker.core.models import Memory

__all__ = [
    "DAY_MS",
    "EXPIRED",
    "expired",
    "kind_of",
    "may_have_expired",
    "past_ttl",
]

DAY_MS = 86_400_000
EXPIRED = "expired"


def kind_of(memory: Memory) -> str:
    """A memory's category; one saved without any counts as a fact."""
    return memory.category or "fact"


def past_ttl(memory: Memory, retention: Mapping[str, int], now_ms: int) -> bool:
    """Whether `memory`'s record is past its category's TTL at `now_ms` (live or not: a reader
    asks of a record whether it was still live then)."""
    if memory.pinned:
        return False
    days = retention.get(kind_of(memory))
    return days is not None and now_ms - memory.last_stated_at > days * DAY_MS


def expired(memories: Iterable[Memory], retention: Mapping[str, int], now_ms: int) -> list[Memory]:
    """The live memories past their category's TTL at `now_ms`, oldest first."""
    if not retention:
        return []
    out = [m for m in memories if m.live and past_ttl(m, retention, now_ms)]
    out.sort(key=lambda m: (m.last_stated_at, m.id))
    return out


def may_have_expired(oldest: Mapping[str, int], retention: Mapping[str, int], now_ms: int) -> bool:
    """Whether a memory whose category's oldest statement is in `oldest` (per category, as
    `LexicalIndex.oldest_stated` gives it) is past its TTL at `now_ms` (`past_ttl` of each
    category's oldest)."""
    return any(
        kind in oldest and now_ms - oldest[kind] > days * DAY_MS for kind, days in retention.items()
    )
