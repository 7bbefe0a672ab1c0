"""A disk cache of embeddings for benchmarks: a rerun over the same corpus embeds nothing.

`CachedEmbedder(inner)` answers `embed` / `embed_query` from `~/.cache/memory-worker/embeddings/`
(or `$MEMORY_BENCH_CACHE`), keyed by the model name (which carries a digest of the model's files)
and sha1 of the text; misses go to `inner` and are appended to one binary file per model and kind
(20-byte key + float32 vector per record), so an interrupted warm-up keeps what it computed. The
cache lives outside the repo: it holds vectors of benchmark data we must not copy in.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CACHE_DIR", "CachedEmbedder", "CachedQueryEmbedder", "cached"]

CACHE_DIR = Path(
    os.environ.get("MEMORY_BENCH_CACHE", Path.home() / ".cache" / "memory-worker" / "embeddings")
)
CHUNK = 64  # texts per call to the inner embedder (and per append)


def _key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()


class _Table:
    """One model's vectors of one kind (passages or queries), in RAM and appended to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[bytes, list[float]] = {}
        self.dim = 0
        if path.is_file():
            self.dim = int(path.suffix.lstrip(".d"))
            raw = path.read_bytes()
            width = 20 + 4 * self.dim
            whole = len(raw) - len(raw) % width  # a torn last record is dropped
            rows = np.frombuffer(raw[:whole], np.uint8).reshape(-1, width)
            for row in rows:
                self.vectors[row[:20].tobytes()] = np.frombuffer(
                    row[20:].tobytes(), np.float32
                ).tolist()

    def add(self, keys: Sequence[bytes], vectors: Sequence[Sequence[float]]) -> None:
        if not keys:
            return
        if not self.dim:
            self.dim = len(vectors[0])
            self.path = self.path.with_suffix(f".d{self.dim}")
        blob = b"".join(
            key + np.asarray(vector, np.float32).tobytes()
            for key, vector in zip(keys, vectors, strict=True)
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as file:
            file.write(blob)
        for key, vector in zip(keys, vectors, strict=True):
            self.vectors[key] = list(vector)


def _table(model: str, kind: str) -> _Table:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for found in CACHE_DIR.glob(f"{model}.{kind}.d*"):
        return _Table(found)
    return _Table(CACHE_DIR / f"{model}.{kind}.d0")


class CachedEmbedder:
    """An `Embedder` (and `QueryEmbedder` when `inner` is one) answering from the disk cache."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._passages = _table(inner.model, "passage")
        self._queries = _table(inner.model, "query") if hasattr(inner, "embed_query") else None
        self.misses = 0

    @property
    def model(self) -> str:
        return str(self.inner.model)

    @property
    def duplicate_cosine(self) -> float:
        """The wrapped model's paraphrase threshold: the service reads it off its embedder."""
        return float(getattr(self.inner, "duplicate_cosine", 0.97))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._lookup(self._passages, list(texts), query=False)

    async def _lookup(self, table: _Table, texts: list[str], *, query: bool) -> list[list[float]]:
        keys = [_key(text) for text in texts]
        missing = sorted({i for i, key in enumerate(keys) if key not in table.vectors})
        for start in range(0, len(missing), CHUNK):
            part = missing[start : start + CHUNK]
            batch = [texts[i] for i in part]
            if query:
                vectors = [await self.inner.embed_query(text) for text in batch]
            else:
                vectors = await self.inner.embed(batch)
            table.add([keys[i] for i in part], vectors)
            self.misses += len(part)
        return [table.vectors[key] for key in keys]


class CachedQueryEmbedder(CachedEmbedder):
    """The same cache for a model that embeds queries apart (e5)."""

    async def embed_query(self, text: str) -> list[float]:
        assert self._queries is not None
        return (await self._lookup(self._queries, [text], query=True))[0]


def cached(inner: Any) -> CachedEmbedder:
    """The right cache wrapper for `inner`: query-aware when `inner` embeds queries apart."""
    return CachedQueryEmbedder(inner) if hasattr(inner, "embed_query") else CachedEmbedder(inner)
