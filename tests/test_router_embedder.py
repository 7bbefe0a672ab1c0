"""`router::embed` as the semantic arm: what the router answers is checked before a vector
reaches the index (a NaN stored there poisons the bank's running mean for good)."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest

from memory_worker.adapters.bus.siblings import BusCall, RouterEmbedder
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable


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
