"""The local embedding models, chosen by name: the one place that maps a name to a loader.

`embedding_model` (settings) names one of `LOCAL_MODELS` (or an alias); empty means the default.
Each loader returns a `ports.Embedder` whose `model` is the base name plus a digest of its files,
so a changed model re-embeds what was stored. Loading is lazy: nothing is imported until asked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from memory_worker.adapters.e5_embedder import E5_MODEL, E5Embedder
from memory_worker.adapters.local_embedder import DEFAULT_MODEL as MINILM_MODEL
from memory_worker.adapters.local_embedder import EmbedderUnavailable, LocalEmbedder
from memory_worker.app.ports import Embedder, QueryEmbedder
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.search.ranking import DUPLICATE_COSINE
from memory_worker.storage.logger import get_logger

__all__ = [
    "ALIASES",
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODELS",
    "EmbedderUnavailable",
    "LazyEmbedder",
    "UnavailableEmbedder",
    "load_local",
    "resolve_local",
]

log = get_logger(__name__)

# The default is the English+Portuguese e5 (docs/BENCHMARKS.md, "Embedders": it ranks Portuguese
# questions as well as English ones; MiniLM is English-only).
DEFAULT_LOCAL_MODEL = E5_MODEL
LOCAL_MODELS: dict[str, Callable[[], Embedder]] = {
    E5_MODEL: E5Embedder.load,
    MINILM_MODEL: LocalEmbedder.default,
}
ALIASES = {
    "e5": E5_MODEL,
    "multilingual-e5-small": E5_MODEL,
    "minilm": MINILM_MODEL,
    "all-minilm-l6-v2": MINILM_MODEL,
    "sentence-transformers/all-minilm-l6-v2": MINILM_MODEL,
}


def resolve_local(name: str) -> str:
    """The base name of a local model: empty → the default; an alias or a full model name (with
    its digest suffix) → its base name.

    Raises:
        EmbedderUnavailable: no local model has that name (the message lists the known ones).
    """
    wanted = name.strip().lower()
    if not wanted:
        return DEFAULT_LOCAL_MODEL
    if wanted in ALIASES:
        return ALIASES[wanted]
    for base in LOCAL_MODELS:
        if wanted == base or wanted.startswith(base + "-"):
            return base
    known = ", ".join([*LOCAL_MODELS, *ALIASES])
    raise EmbedderUnavailable(
        f"embedding_model {name.strip()!r} is not a model the local embedder has (it has: "
        f"{known}). Set embedding_model to one of them (empty = the default), or serve under "
        "an engine with router::embed for other models"
    )


def load_local(name: str = "") -> Embedder:
    """Load the local model `name` (see `resolve_local`).

    Raises:
        EmbedderUnavailable: unknown name, or its package is missing or does not load.
    """
    return LOCAL_MODELS[resolve_local(name)]()


class LazyEmbedder:
    """A local model loaded on first use: a one-shot CLI command that never embeds (a save, a
    list) never pays for it, and one that does (a recall over embedded memories) loads it then.
    A model that fails to load is reported once as `SiblingUnavailable` and never retried."""

    def __init__(self, name: str = "") -> None:
        self._name = resolve_local(name)
        self._loaded: Embedder | None = None
        self._failed: str | None = None
        self._lock = threading.Lock()

    def _embedder(self) -> Embedder:
        with self._lock:
            if self._loaded is None and self._failed is None:
                try:
                    self._loaded = LOCAL_MODELS[self._name]()
                except EmbedderUnavailable as exc:
                    self._failed = str(exc)
                    log.warning(
                        "embedder_unavailable", detail=self._failed, retrieval="bm25-entity"
                    )
            if self._loaded is None:
                raise SiblingUnavailable(f"local embedder {self._name}: {self._failed}")
            return self._loaded

    @property
    def base_model(self) -> str:
        """The model's base name, without its build (`model` is this and the build's digests):
        a recall's catch-up re-embeds an older build's vectors (`EmbeddingWork.left_to_another`)."""
        return self._name

    @property
    def duplicate_cosine(self) -> float:
        """The loaded model's paraphrase threshold (asked only after a query was embedded)."""
        return float(getattr(self._loaded, "duplicate_cosine", DUPLICATE_COSINE))

    @property
    def model(self) -> str:
        """The loaded model's name (loading it); the base name when it does not load."""
        try:
            return self._embedder().model
        except SiblingUnavailable:
            return self._name

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        embedder = await asyncio.to_thread(self._embedder)
        return await embedder.embed(texts)

    async def embed_query(self, text: str) -> list[float]:
        embedder = await asyncio.to_thread(self._embedder)
        if isinstance(embedder, QueryEmbedder):
            return await embedder.embed_query(text)
        return (await embedder.embed([text]))[0]


class UnavailableEmbedder:
    """Stands in for a local model that cannot run (a name it does not have, say): recall runs
    without the semantic arm, the vectors of the model in use before stay where they are (this
    one never stores any), and `memory::doctor` shows `reason`."""

    def __init__(self, wanted: str, reason: str) -> None:
        self._model = f"unavailable:{wanted.strip() or DEFAULT_LOCAL_MODEL}"
        self.reason = reason

    @property
    def model(self) -> str:
        return self._model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise SiblingUnavailable(self.reason)

    def __repr__(self) -> str:
        return f"UnavailableEmbedder(model={self._model!r})"
