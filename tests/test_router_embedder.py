"""`router::embed` as the semantic arm: what the router answers is checked before a vector
reaches the index (a NaN stored there poisons the bank's running mean for good)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from memory_worker.adapters.bus.siblings import BusCall, RouterEmbedder
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.search.index import IndexedDoc, LexicalIndex
from memory_worker.storage.vectors import VECTORS_FILE, VectorRecord, load_vectors


class _Router:
    def __init__(self, embeddings: Any) -> None:
        self.embeddings = embeddings
        self.calls = 0

    async def __call__(self, function_id: str, payload: dict[str, Any], timeout_ms: int) -> Any:
        self.calls += 1
        return {"provider": "fake", "model": "fake-embed", "embeddings": self.embeddings}


def _embedder(router: _Router) -> RouterEmbedder:
    return RouterEmbedder(cast(BusCall, router), Settings)


async def test_well_formed_embeddings_come_back_as_floats() -> None:
    router = _Router([[1, 0.5], [0, -2]])
    assert await _embedder(router).embed(["a", "b"]) == [[1.0, 0.5], [0.0, -2.0]]


@pytest.mark.parametrize(
    "embeddings",
    [
        [[math.nan, 1.0], [0.0, 1.0]],  # a NaN (Python's JSON reader accepts the literal)
        [[math.inf, 1.0], [0.0, 1.0]],
        [[1.0, 2.0], [1.0]],  # two lengths
        [[], [1.0]],
        [["1.0", 2.0], [0.0, 1.0]],  # a string is not a coordinate
        [[True, 2.0], [0.0, 1.0]],
        [{"v": [1.0]}, [0.0, 1.0]],
        # Finite here, infinite as the index stores them (float32, each value rounded as
        # float16): the same poison as a NaN.
        [[1e39, 1.0], [0.0, 1.0]],
        [[70_000.0, 1.0], [0.0, 1.0]],
        [[10**400, 1.0], [0.0, 1.0]],  # an integer past any float: raised OverflowError
    ],
)
async def test_a_malformed_embedding_is_refused_and_the_router_rested(embeddings: Any) -> None:
    router = _Router(embeddings)
    embedder = _embedder(router)
    with pytest.raises(SiblingUnavailable, match="malformed embeddings"):
        await embedder.embed(["a", "b"])
    # Like any failed call: recall runs lexical for a while instead of asking at every save.
    with pytest.raises(SiblingUnavailable, match="failed recently"):
        await embedder.embed(["a", "b"])
    assert router.calls == 1


async def test_an_accepted_embedding_stays_finite_in_the_index() -> None:
    # Coordinates as large as the index keeps: a router passing lengths through (~2000) is fine.
    router = _Router([[65_504.0, -1000.0], [0.0, 2016.8]])
    vectors = await _embedder(router).embed(["a", "b"])
    index = LexicalIndex()
    index.add_many([IndexedDoc(doc_id="a", terms=["a"]), IndexedDoc(doc_id="b", terms=["b"])])
    for doc_id, vector in zip(("a", "b"), vectors, strict=True):
        assert index.set_vector(doc_id, vector)
    assert np.isfinite(index.vectors[:2]).all()
    assert np.isfinite(index.vector_norm2[:2]).all()


@pytest.mark.parametrize(
    "line",
    [
        # What an earlier router reply left in a sidecar (stored as this worker writes them).
        VectorRecord("fpnan", "router:default", 0, "h", [math.nan, 1.0]).to_line(),
        VectorRecord("fpinf", "router:default", 0, "h", [math.inf, 1.0]).to_line(),
        VectorRecord("fpbig", "router:default", 0, "h", [70_000.0, 1.0]).to_line(),
        # A Rust worker's line: finite as float32, infinite once rounded as the index stores it.
        b'{"id":"fprust","model":"","revision":0,"v":[70000.0,1.0]}\n',
    ],
    ids=["nan", "infinity", "past-float16", "rust-past-float16"],
)
def test_a_sidecar_vector_the_index_cannot_hold_finite_is_a_damaged_line(
    tmp_path: Path, line: bytes
) -> None:
    # Read back at every load, it poisoned the running mean again each time: now dropped as
    # damage (doctor says so) and its memory embedded anew.
    good = VectorRecord("fpgood", "router:default", 0, "h", [0.5, 1.0]).to_line()
    (tmp_path / VECTORS_FILE).write_bytes(good + line)
    records, skipped = load_vectors(tmp_path / VECTORS_FILE)
    assert list(records) == ["fpgood"]
    assert skipped == 1


def test_the_coordinate_bound_is_float16s_largest_finite_value() -> None:
    # The bound is written out (no numpy where a one-shot save imports it); the index rounds
    # each stored coordinate as float16, so the two must agree.
    import numpy as np

    from memory_worker.core.coordinates import MAX_COORDINATE

    assert float(np.finfo(np.float16).max) == MAX_COORDINATE
