"""Compaction: which log records a rewrite keeps.

Every memory keeps its latest record — what replay serves: its current revision, or its
tombstone — and every record written after the horizon; only older superseded revisions go. The
kept records stay in log order, so replay of the compacted log equals replay of the full one.
"""

from __future__ import annotations

from memory_worker.core.models import Memory

__all__ = ["DAY_MS", "compaction_plan"]

DAY_MS = 86_400_000


def compaction_plan(records: list[Memory], *, horizon_ms: int) -> list[Memory]:
    """`records` (in log order) minus the superseded revisions last written before `horizon_ms`."""
    winner: dict[str, int] = {}
    for index, record in enumerate(records):
        best = winner.get(record.id)
        if best is None or record.revision >= records[best].revision:  # replay's rule
            winner[record.id] = index
    return [
        record
        for index, record in enumerate(records)
        if winner[record.id] == index or record.updated_at >= horizon_ms
    ]
