"""The fused score over normalised arms: values in, values out (no bank, no disk)."""

from __future__ import annotations

import numpy as np
import pytest

from memory_worker.search.scoring import (
    DAY_MS,
    Arms,
    Fusion,
    FusionMethod,
    Recency,
    fused_scores,
    lexical_relevance,
    rank_order,
    recency,
    semantic_relevance,
)


def _arms(bm25: list[float], semantic: list[float] | None = None, **columns: list[float]) -> Arms:
    n = len(bm25)
    return Arms(
        bm25=np.asarray(bm25, np.float64),
        query_weight=4.0,
        entity_hits=np.asarray(columns.get("entity_hits", [0.0] * n)),
        corroboration=np.asarray(columns.get("corroboration", [0.0] * n)),
        pinned=np.asarray(columns.get("pinned", [0.0] * n), bool),
        age_ms=np.asarray(columns.get("age_ms", [0.0] * n)),
        semantic=None if semantic is None else np.asarray(semantic, np.float64),
    )


def test_lexical_relevance_is_bm25_over_the_query_weight_not_over_the_best_match() -> None:
    """A memory matching only a common word stays near 0 even when nothing matches better."""
    assert lexical_relevance(np.asarray([0.1, 0.05]), 4.0).tolist() == [0.025, 0.0125]
    assert lexical_relevance(np.asarray([1.0]), 0.0).tolist() == [0.0]


def test_semantic_relevance_runs_from_the_reference_to_the_best_cosine() -> None:
    cosine = np.asarray([0.9, 0.85, 0.8, 0.7])
    assert semantic_relevance(cosine, 0.8, 0.9).tolist() == pytest.approx([1.0, 0.5, 0.0, 0.0])
    assert semantic_relevance(cosine, 0.9, 0.9).tolist() == [1.0, 0.0, 0.0, 0.0]


def test_rank_order_is_one_based_and_never_ranks_a_zero() -> None:
    assert rank_order(np.asarray([0.2, 0.9, 0.0])).tolist() == [2.0, 1.0, float("inf")]


def test_score_fusion_adds_the_normalised_arms_and_the_boosts() -> None:
    fusion = Fusion(lexical=1.0, semantic=0.5, entity=0.1, pinned=0.2, default_floor=1.0)
    arms = _arms([4.0, 0.0], [0.0, 1.0], entity_hits=[1.0, 0.0], pinned=[0.0, 1.0])
    scores = fused_scores(arms, half_life_days=60, policy=Recency.DEFAULT, fusion=fusion)
    assert scores.tolist() == pytest.approx([1.1, 0.7])


def test_rrf_counts_ranks_not_scale() -> None:
    fusion = Fusion(
        method=FusionMethod.RRF, rrf_k=10, semantic=1, entity=0, corroboration=0, pinned=0
    )
    arms = _arms([400.0, 1.0, 0.0], [0.0, 1.0, 0.5])
    scores = fused_scores(arms, half_life_days=60, policy=Recency.PAST, fusion=fusion)
    # lexical ranks 1, 2, -; semantic ranks -, 1, 2
    expected = [10 / 11, 10 / 12 + 10 / 11, 10 / 12]
    assert scores.tolist() == pytest.approx(expected, rel=1e-5)


def test_recency_policy_decides_how_much_age_counts() -> None:
    age = np.asarray([0.0, 365.0 * DAY_MS])
    fusion = Fusion(current_floor=0.5, default_floor=0.7, past_floor=1.0)
    arms = _arms([4.0, 4.0], age_ms=age.tolist())
    current = fused_scores(arms, half_life_days=60, policy=Recency.CURRENT, fusion=fusion)
    past = fused_scores(arms, half_life_days=60, policy=Recency.PAST, fusion=fusion)
    assert current[1] / current[0] == pytest.approx(0.5 * 2 ** (-365 / 3650), rel=1e-6)
    assert past[0] > past[1] > 0.999 * past[0]  # no decay, only a tie-break toward the newer


def test_recency_never_falls_below_its_floor_and_keeps_ordering_old_statements() -> None:
    ages = np.asarray([0.0, 60.0, 400.0, 800.0]) * DAY_MS
    decay = recency(ages, 60.0, floor=0.7)
    assert decay[0] == 1.0 and decay[1] == pytest.approx(0.7, rel=0.05)
    assert decay[2] > decay[3] >= 0.7 * 2 ** (-800 / 3650)
