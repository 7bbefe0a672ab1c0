"""Retention (C20): which memories their category's TTL has expired. Pure.

A bank's `retention` maps a category to days (`{context: 30}`); a memory of that category whose
fact was last stated longer ago than that has expired (restating it renews it). Categories without
an entry never expire, a memory saved without a category counts as a fact, and pinned memories and
lessons never expire (a person pinned the one; the other is authored, not remembered).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from memory_worker.core.models import Memory

__all__ = ["DAY_MS", "EXPIRED", "expired", "kind_of"]

DAY_MS = 86_400_000
EXPIRED = "expired"


def kind_of(memory: Memory) -> str:
    """A memory's category; one saved without any counts as a fact."""
    return memory.category or "fact"


def expired(memories: Iterable[Memory], retention: Mapping[str, int], now_ms: int) -> list[Memory]:
    """The live memories past their category's TTL at `now_ms`, oldest first."""
    if not retention:
        return []
    out = [
        m
        for m in memories
        if m.live
        and not m.pinned
        and (days := retention.get(kind_of(m))) is not None
        and now_ms - m.last_stated_at >= days * DAY_MS
    ]
    out.sort(key=lambda m: (m.last_stated_at, m.id))
    return out
