"""Compaction: which log records a rewrite keeps.

Every memory keeps its latest record — what replay serves: its current revision, or its
tombstone — every record written after the horizon, and the record it had at the horizon (what
it said from then until its next record: a question `as_of` a moment within the horizon, or its
history, still finds it); only revisions superseded before the horizon go. The kept records stay
in log order, so replay of the compacted log equals replay of the full one.
"""

from __future__ import annotations

from memory_worker.core.models import Memory

__all__ = ["DAY_MS", "compaction_plan"]

DAY_MS = 86_400_000


def compaction_plan(records: list[Memory], *, horizon_ms: int) -> list[Memory]:
    """`records` (in log order) minus the revisions superseded before `horizon_ms`."""
    winner: dict[str, int] = {}
    at_horizon: dict[str, int] = {}  # each memory's record as replay had it at the horizon
    for index, record in enumerate(records):
        best = winner.get(record.id)
        if best is None or record.revision >= records[best].revision:  # replay's rule
            winner[record.id] = index
        if record.updated_at <= horizon_ms:
            then = at_horizon.get(record.id)
            if then is None or record.revision >= records[then].revision:
                at_horizon[record.id] = index
    return [
        record
        for index, record in enumerate(records)
        if winner[record.id] == index
        or at_horizon.get(record.id) == index
        or record.updated_at >= horizon_ms
    ]
