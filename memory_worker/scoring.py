"""The fused recall score: BM25 plus entity, corroboration and pin boosts, decayed by recency.

Pure arithmetic over aligned numpy arrays (one element per candidate); the weights are named so a
tuning change is one reviewed line.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "CORROBORATION_WEIGHT",
    "DAY_MS",
    "ENTITY_WEIGHT",
    "PINNED_BONUS",
    "RECENCY_FLOOR",
    "fused_scores",
    "recency",
]

Floats = npt.NDArray[np.float64]

DAY_MS = 86_400_000
ENTITY_WEIGHT = 0.6  # per query term that names one of the memory's entities
CORROBORATION_WEIGHT = 0.3  # × ln(1 + times re-observed): diminishing returns
PINNED_BONUS = 0.75  # a bonus, not a trump: pinned memories still decay
RECENCY_FLOOR = 0.35  # old-but-relevant memories stay reachable


def recency(age_ms: Floats, half_life_days: float) -> Floats:
    """Exponential decay by age since the fact was last stated, never below the floor."""
    age_days = np.maximum(age_ms, 0.0) / DAY_MS
    decay: Floats = np.power(0.5, age_days / max(half_life_days, 1e-9))
    return np.maximum(decay, RECENCY_FLOOR)


def fused_scores(
    bm25: Floats,
    *,
    entity_hits: Floats,
    corroboration: Floats,
    pinned: npt.NDArray[np.bool_],
    age_ms: Floats,
    half_life_days: float,
) -> Floats:
    base = (
        bm25
        + ENTITY_WEIGHT * entity_hits
        + CORROBORATION_WEIGHT * np.log1p(corroboration)
        + PINNED_BONUS * pinned
    )
    scored: Floats = base * recency(age_ms, half_life_days)
    return scored
