"""Consolidation never makes recall worse: memory-consolidate's recorded decisions on the golden
persona bank are still what it decides, and replaying them keeps every hybrid figure (SPEC C18)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memory_worker.adapters.embedders import DEFAULT_LOCAL_MODEL

from . import recall_consolidated as rc
from . import recall_quality as rq
from .goldens import updating
from .recorded_vectors import keep
from .test_recall_quality import _tiny

UPDATE = updating("recall")
REBASELINE = "UPDATE_GOLDENS=recall .venv/bin/python -m pytest tests/test_recall_consolidated.py"


@pytest.fixture(name="golden", scope="module")
def _golden() -> rq.Golden:
    return rq.load()


@pytest.fixture(name="decided", scope="module")
def _decided(golden: rq.Golden, tmp_path_factory: pytest.TempPathFactory) -> list[rc.Decision]:
    """What memory-consolidate decides on the persona bank now, with the default embedder (its
    semantic tier needs it); with UPDATE_GOLDENS=recall it is recorded for the replay."""
    embedder = rq.gate_embedder(DEFAULT_LOCAL_MODEL)

    async def decide() -> list[rc.Decision]:
        root = tmp_path_factory.mktemp("consolidation")
        async with rq.open_service(root, golden.as_of_ms, embedder) as service:
            return await rc.decide(service, await rq.build_bank(service, golden))

    decisions = asyncio.run(decide())
    keep(embedder)
    if UPDATE:
        text = rc.render_decisions(decisions, embedder.model)
        rc.CONSOLIDATION.write_text(text, encoding="utf-8")
    return decisions


def test_the_recorded_consolidation_is_what_memory_consolidate_decides(
    decided: list[rc.Decision],
) -> None:
    recorded = rc.load_decisions()
    assert recorded == decided, (
        f"memory-consolidate now decides {decided}, {rc.CONSOLIDATION.name} holds {recorded}: "
        f"re-record with `{REBASELINE}` and review the diff"
    )


def test_consolidation_does_not_make_recall_worse(
    decided: list[rc.Decision], golden: rq.Golden, tmp_path_factory: pytest.TempPathFactory
) -> None:
    result: dict[str, Any] = asyncio.run(
        rc.run(tmp_path_factory.mktemp("consolidated"), rc.load_decisions(), golden)
    )
    diff = rq.compare(result["hybrid"], result["hybrid-consolidated"])
    assert not diff.regressions, diff.regressions


def test_a_replayed_merge_carries_expectations_to_the_survivor() -> None:
    golden = _tiny()
    (query,) = golden.queries
    fact_of = rc.carry(golden, {"b": "c"})  # memory-consolidate retired b into c
    score = rq.score_query(golden, query, ["c", "a"], fact_of)
    assert score.first_rank == 1 and score.metrics()["recall@10"] == 1.0
    assert rc.carry(golden, {"a2": "c"})["a2"] == "c"  # a merge outranks the dup label
    assert rq.score_query(golden, query, ["c", "a"]).first_rank == 2  # without the carry
    with pytest.raises(ValueError, match="cycle"):
        rc.carry(golden, {"b": "c", "c": "b"})
