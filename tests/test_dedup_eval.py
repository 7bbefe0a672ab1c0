"""The dedup eval as a gate (`bench/dedup_eval.py`): the labelled pairs meet their own spec, and the
tiers that write never merge a pair that is not a duplicate.

The whole set runs through the pure plan with the local embedder's cosines (seconds); a sample also
runs end to end through the bench's own path (a memory worker in process, one dry-run pass, the
semantic tier through `memory::recall`), and both must agree on it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memory_worker.adapters.embedders import load_local
from memory_worker.consolidate.plan import Row, Tier, plan_exact, plan_semantic

ROOT = Path(__file__).resolve().parent.parent
MIN_PAIRS = 200
THRESHOLD = 0.92


def _load_eval() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dedup_eval", ROOT / "bench" / "dedup_eval.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ev = _load_eval()


@pytest.fixture(name="pairs", scope="module")
def _pairs() -> list[Any]:
    loaded: list[Any] = ev.load_pairs()
    return loaded


@pytest.fixture(name="embedder", scope="module")
def _embedder() -> Any:
    # The default local model (what a fresh install serves, a core dependency): never skipped.
    return load_local()


def test_the_pairs_meet_their_spec(pairs: list[Any]) -> None:
    main = [p for p in pairs if p.set == "pairs"]
    assert len(main) >= MIN_PAIRS
    categories = Counter(p.category for p in main)
    for needed in ("dup-exact", "dup-restated", "changed-number", "changed-date", "role-swap",
                   "negation"):  # fmt: skip
        assert categories[needed] >= 10, categories
    assert Counter(p.lang for p in main)["pt"] >= 50
    assert all(p.dup == p.category.startswith("dup") for p in pairs)
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)


def _tier(pair: Any, cosine: float | None) -> str | None:
    rows = [Row("a", pair.a, created_at=1), Row("b", pair.b, created_at=2)]
    groups = plan_exact(rows)
    if not groups and cosine is not None:
        groups = plan_semantic(rows, {"a": {"b": cosine}}, THRESHOLD)
    for group in groups:
        if group.tier is Tier.SEMANTIC and not group.writable:
            return "semantic-guarded"
        return str(group.tier)
    return None


def test_the_deterministic_tiers_write_only_true_duplicates(pairs: list[Any]) -> None:
    outcomes = [ev.Outcome(p, _tier(p, None), None, None) for p in pairs]
    rows = ev.metrics(outcomes)
    assert rows["exact"]["precision"] == 1.0 and rows["exact"]["false"] == 0
    assert all(o.tier == "exact" for o in outcomes if o.pair.category == "dup-exact")
    swaps = [o for o in outcomes if o.pair.category == "role-swap"]
    assert all(o.tier in ("reorder", None) for o in swaps)  # report-only, never written


def test_the_semantic_tier_writes_only_true_duplicates(pairs: list[Any], embedder: Any) -> None:
    cosines = ev.path_cosines(embedder, pairs)  # as memory-consolidate's recalls see them
    outcomes = [ev.Outcome(p, _tier(p, cosines[p.id]), None, cosines[p.id]) for p in pairs]
    rows = ev.metrics(outcomes)
    false = [o.pair.id for o in outcomes if o.tier in ev.WRITING_TIERS and not o.pair.dup]
    assert false == [], f"a writing tier merged pairs that are not duplicates: {false}"
    assert rows["all writing tiers"]["precision"] == 1.0
    assert rows["semantic"]["true"] >= 10  # the tier is not a no-op


async def test_the_end_to_end_path_agrees_with_the_plan(
    pairs: list[Any], embedder: Any, tmp_path: Path
) -> None:
    sample = [p for i, p in enumerate(pairs) if i % 12 == 0]
    outcomes = await ev.evaluate(sample, tmp_path / "data", embedder=embedder)
    for outcome in outcomes:
        assert outcome.cosine is not None
        if abs(outcome.cosine - THRESHOLD) < 1e-4:
            continue  # stored vectors are float32: a pair on the threshold may fall either way
        assert outcome.tier == _tier(outcome.pair, outcome.cosine), outcome.pair.id
