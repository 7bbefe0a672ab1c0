"""The fused recall score: BM25 plus entity, corroboration and pin boosts, decayed by recency.

Pure arithmetic over floats; the weights are named so a tuning change is one reviewed line.
"""

from __future__ import annotations

import math

__all__ = [
    "CORROBORATION_WEIGHT",
    "DAY_MS",
    "ENTITY_WEIGHT",
    "PINNED_BONUS",
    "RECENCY_FLOOR",
    "fused_score",
    "recency",
]

DAY_MS = 86_400_000
ENTITY_WEIGHT = 0.6  # per query term that names one of the memory's entities
CORROBORATION_WEIGHT = 0.3  # × ln(1 + times re-observed): diminishing returns
PINNED_BONUS = 0.75  # a bonus, not a trump: pinned memories still decay
RECENCY_FLOOR = 0.35  # old-but-relevant memories stay reachable


def recency(age_ms: int, half_life_days: float) -> float:
    """Exponential decay by age since the fact was last stated, never below the floor."""
    age_days = max(age_ms, 0) / DAY_MS
    return max(math.pow(0.5, age_days / max(half_life_days, 1e-9)), RECENCY_FLOOR)


def fused_score(
    bm25: float,
    *,
    entity_hits: int,
    corroboration: int,
    pinned: bool,
    age_ms: int,
    half_life_days: float,
) -> float:
    base = (
        bm25
        + ENTITY_WEIGHT * entity_hits
        + CORROBORATION_WEIGHT * math.log1p(corroboration)
        + (PINNED_BONUS if pinned else 0.0)
    )
    return base * recency(age_ms, half_life_days)
