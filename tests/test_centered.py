"""The hybrid's semantic arm ranks by centred cosine: the bank's mean vector taken out of both the
query and every memory, so a model whose vectors share one big direction (e5: mean of norm ~0.9)
does not rank a generic memory near every query above the one that says what was asked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import CENTER_PRIOR, IndexedDoc, LexicalIndex
from memory_worker.search.ranking import RecallMode, RecallQuery, indexed, rank

DIM = 16


def _unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _basis(i: int) -> np.ndarray:
    e = np.zeros(DIM)
    e[i] = 1.0
    return e


def _expected_mean(index: LexicalIndex) -> np.ndarray:
    n = index.slot_count
    live = index.has_vector[:n] & index.alive[:n]
    total = index.vectors[:n][live].astype(np.float64).sum(axis=0)
    return total / (int(live.sum()) + CENTER_PRIOR)


# (op, doc number): add a doc, give it a vector, clear its vector, remove it, reset every vector
OPS = st.lists(
    st.tuples(st.sampled_from(["add", "vector", "clear", "remove", "reset"]), st.integers(0, 5)),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(OPS, st.integers(0, 2**31 - 1))
def test_the_running_mean_is_the_mean_of_the_live_vectors_after_any_changes(
    ops: list[tuple[str, int]], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    index = LexicalIndex()
    for op, n in ops:
        doc = f"d{n}"
        if op == "add":
            index.add_doc(IndexedDoc(doc, ["word", doc]))
        elif op == "vector":
            index.set_vector(doc, _unit(rng.normal(size=DIM)))
        elif op == "clear":
            index.clear_vector(doc)
        elif op == "remove":
            index.remove(doc)
        else:
            index.reset_vectors()
        if index.vector_width:
            np.testing.assert_allclose(index.vector_mean(), _expected_mean(index), atol=1e-9)


def test_centred_cosine_is_the_cosine_after_taking_out_the_mean() -> None:
    rng = np.random.default_rng(7)
    index = LexicalIndex()
    docs = [f"d{i}" for i in range(30)]
    for doc in docs:
        index.add_doc(IndexedDoc(doc, ["w"]))
        index.set_vector(doc, _unit(rng.normal(size=DIM) + 3.0 * _basis(0)))
    index.add_doc(IndexedDoc("bare", ["w"]))  # no vector: 0, as `cosine` says
    query = _unit(rng.normal(size=DIM) + 3.0 * _basis(0))
    mean = _expected_mean(index)
    got = index.centered_cosine(query)
    for doc in docs:
        d = index.vectors[index.slot(doc)].astype(np.float64) - mean
        q = np.asarray(query, np.float64) - mean
        want = 0.5 * (1.0 + d @ q / (np.linalg.norm(d) * np.linalg.norm(q)))
        assert got[index.slot(doc)] == pytest.approx(want, abs=1e-5)
    assert got[index.slot("bare")] == 0.0


def test_a_bank_of_one_memory_still_has_a_similarity() -> None:
    index = LexicalIndex()
    index.add_doc(IndexedDoc("only", ["w"]))
    index.set_vector("only", _unit(_basis(0) + _basis(1)))
    sims = index.centered_cosine(_unit(_basis(0) + 0.5 * _basis(1)))
    assert 0.5 < float(sims[0]) <= 1.0


def test_hybrid_ranks_the_specific_memory_above_a_generic_one_every_query_is_near() -> None:
    """Ten memories share a big common direction and each has its own topic; one generic memory is
    the common direction alone. A query about topic 1 is closer to the generic memory by plain
    cosine (0.90 vs 0.89), so an uncentred arm ranked it first; centred, topic 1's memory wins."""
    common = _basis(0)
    index = LexicalIndex()
    memories = {}
    for i in range(1, 12):
        mid = f"topic{i}" if i <= 10 else "generic"
        memories[mid] = Memory(
            id=mid, text=f"note {mid}", confidence=Confidence.STATED, created_at=1, updated_at=1
        )
        index.add_doc(indexed(memories[mid]))
        index.set_vector(mid, _unit(0.6 * common + 0.8 * _basis(i) if i <= 10 else common))
    query_vector = _unit(0.9 * common + 0.436 * _basis(1))
    raw = index.cosine(query_vector)
    assert raw[index.slot("generic")] > raw[index.slot("topic1")]  # the trap is real
    query = RecallQuery(
        text="zzz", limit=3, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(query_vector),
    )  # fmt: skip
    hits = rank(memories, index, query)
    assert hits[0].memory.id == "topic1"


def test_a_memory_at_or_past_orthogonal_to_the_query_is_not_similar() -> None:
    index = LexicalIndex()
    for i in range(1, 6):
        index.add_doc(IndexedDoc(f"d{i}", ["w"]))
        index.set_vector(f"d{i}", _unit(_basis(i)))
    index.add_doc(IndexedDoc("opposite", ["w"]))
    index.set_vector("opposite", _unit(-_basis(1) - _basis(2)))
    sims = index.centered_cosine(_unit(_basis(1) + 0.2 * _basis(2)))
    assert sims[index.slot("d1")] > 0.5
    # d3…d5 are orthogonal to the query and `opposite` points away: centring alone would give
    # them a similarity above 0, and a bank with nothing related would still "match".
    assert [float(sims[index.slot(d)]) for d in ("d3", "d4", "d5", "opposite")] == [0.0] * 4
