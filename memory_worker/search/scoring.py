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
    "LONG_HALF_LIFE_DAYS",
    "PINNED_BONUS",
    "RECENCY_FLOOR",
    "SEMANTIC_FLOOR",
    "SEMANTIC_WEIGHT",
    "fused_scores",
    "recency",
]

Floats = npt.NDArray[np.float64]

DAY_MS = 86_400_000
ENTITY_WEIGHT = 1.2  # per query term naming one of its entities (golden + LoCoMo tuned)
CORROBORATION_WEIGHT = 0.3  # × ln(1 + times re-observed): diminishing returns
PINNED_BONUS = 0.75  # a bonus, not a trump: pinned memories still decay
RECENCY_FLOOR = 0.7  # old-but-relevant memories stay reachable (LoCoMo: 0.35 cost 5 points)
LONG_HALF_LIFE_DAYS = 3650.0  # past the floor, age still orders otherwise-equal statements
SEMANTIC_FLOOR = 0.25  # cosine below this is noise for sentence embeddings of short facts
SEMANTIC_WEIGHT = 6.0  # full weight at cosine 1.0; decayed with the rest, unlike the reference


def recency(age_ms: Floats, half_life_days: float) -> Floats:
    """Decay by age since the fact was last stated: the configured half-life down to the floor,
    then a much slower slope, so between two old statements of one fact the newer still wins."""
    age_days = np.maximum(age_ms, 0.0) / DAY_MS
    fast: Floats = np.exp2(age_days / -max(half_life_days, 1e-9))
    slow: Floats = RECENCY_FLOOR * np.exp2(age_days / -LONG_HALF_LIFE_DAYS)
    return np.maximum(fast, slow)


def fused_scores(
    bm25: Floats,
    *,
    entity_hits: Floats,
    corroboration: Floats,
    pinned: npt.NDArray[np.bool_],
    age_ms: Floats,
    half_life_days: float,
    semantic: Floats | None = None,
) -> Floats:
    base = (
        bm25
        + ENTITY_WEIGHT * entity_hits
        + CORROBORATION_WEIGHT * np.log1p(corroboration)
        + PINNED_BONUS * pinned
    )
    if semantic is not None:
        closeness = np.clip((semantic - SEMANTIC_FLOOR) / (1.0 - SEMANTIC_FLOOR), 0.0, 1.0)
        base = base + SEMANTIC_WEIGHT * closeness
    scored: Floats = base * recency(age_ms, half_life_days)
    return scored
