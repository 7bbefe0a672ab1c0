"""The `vectors.jsonl` sidecar: derived embeddings of a bank's memories.

One line per embedding: `{"id", "model", "revision", "text_hash", "v"}` with `v` the float32 vector
in base64. Derived data, so appends are not fsynced and a damaged or stale line is simply dropped:
a vector counts only while its memory is live with the same text (`text_hash`), and it is replaced
when the configured model changes. Replay is last-wins by id.

The public Rust worker wrote the same file as `{"id", "model", "revision", "v"}` with `v` a JSON
array and no text hash; its `model` is the `embedding_model` it asked `router::embed` for ("" =
the router's default). Such a line is read as what it is — a vector of `router_model(model)`,
current while its memory is at the same revision (the Rust worker's own rule) — so a data dir it
leaves behind is neither damage nor a whole bank to embed again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memory_worker.core.coordinates import MAX_COORDINATE
from memory_worker.storage import files

__all__ = [
    "VECTORS_FILE",
    "VectorAppends",
    "VectorRecord",
    "append_vectors",
    "load_vectors",
    "router_model",
    "text_hash",
]

VECTORS_FILE = "vectors.jsonl"


def router_model(embedding_model: str) -> str:
    """The model name of vectors `router::embed` made for the configured `embedding_model` (""
    asks the router's default): what the engine-mode embedder stamps, and what a Rust worker's
    line (which names the configured model alone) is read as."""
    return f"router:{embedding_model or 'default'}"


def text_hash(text: str) -> str:
    """A short content hash (C speed) that tells whether a vector still matches its memory."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class VectorRecord:
    id: str
    model: str
    revision: int
    text_hash: str | None  # None: a Rust worker's line, current only at the same `revision`
    vector: list[float]

    def to_line(self) -> bytes:
        packed = base64.b64encode(np.asarray(self.vector, np.float32).tobytes()).decode()
        row = {
            "id": self.id,
            "model": self.model,
            "revision": self.revision,
            "text_hash": self.text_hash,
            "v": packed,
        }
        return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> VectorRecord | None:
    try:
        row = json.loads(line)
        if isinstance(row["v"], list):
            return _rust(row)
        vector = np.frombuffer(base64.b64decode(row["v"], validate=True), np.float32)
        if not _storable(vector):
            return None
        return VectorRecord(
            id=str(row["id"]),
            model=str(row["model"]),
            revision=int(row["revision"]),
            text_hash=str(row["text_hash"]),
            vector=vector.tolist(),
        )
    # OverflowError: an integer too large for a float in `v` (400 digits), or `revision: 1e999`
    # (inf) — a damaged line, dropped, not a bank that fails to load.
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError, binascii.Error):
        return None


def _storable(vector: npt.NDArray[np.float32]) -> bool:
    """Whether the index holds `vector` finite (`MAX_COORDINATE`; a NaN fails the comparison):
    a NaN or an infinity (an earlier `router::embed` reply stored one) read back at every load
    poisoned the bank's running mean again each time. Such a line is damage, its memory
    embedded anew."""
    return bool((np.abs(vector) <= MAX_COORDINATE).all())


def _rust(row: dict[str, object]) -> VectorRecord | None:
    """A line the Rust worker wrote (see the module's docstring); None when it is not one."""
    memory_id, model, revision, values = row["id"], row["model"], row.get("revision", 0), row["v"]
    if not (isinstance(memory_id, str) and isinstance(model, str) and type(revision) is int):
        return None
    if not isinstance(values, list) or not values:
        return None
    vector = np.asarray(values, np.float32)  # one C pass: a string raises, a null is NaN
    if vector.ndim != 1 or not _storable(vector):
        return None
    return VectorRecord(memory_id, router_model(model), revision, None, vector.tolist())


def load_vectors(path: Path, within: Path | None = None) -> tuple[dict[str, VectorRecord], int]:
    """Last-wins records by id, and how many lines were unreadable. A last line with no newline
    that does not read is an append a kill cut short (`append_unsynced` cuts it off at the next
    one): never whole, so not damage, as the log's own interrupted write is not. Its memory
    lacks a vector, so it is embedded again all the same."""
    out: dict[str, VectorRecord] = {}
    skipped = 0
    for _, line, complete in files.iter_lines(path, within=within):
        record = _decode(line)
        if record is None:
            skipped += 1 if complete else 0
        else:
            out[record.id] = record
    return out, skipped


class VectorAppends:
    """A bank's sidecar appends (`vectors.jsonl`, `lane-vectors.jsonl`) running now, each in its
    worker thread. Each checked its memory was live before it started: an erasure waits for
    those (`settled`) before it rewrites the sidecars, or a vector of a memory it erased, landing
    after the rewrite, stayed on disk for good."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()

    async def append(
        self, path: Path, records: Iterable[VectorRecord], within: Path | None = None
    ) -> None:
        """`append_vectors` in a worker thread, tracked until its thread is done (a caller that
        is cancelled stops waiting, not the write)."""
        task = asyncio.create_task(asyncio.to_thread(append_vectors, path, records, within))
        self._running.add(task)
        task.add_done_callback(self._done)
        await asyncio.shield(task)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            task.exception()  # seen by the caller if it still waits; never "never retrieved"

    async def settled(self) -> None:
        """Wait for the appends running now (not those started meanwhile: they checked later)."""
        if self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


def append_vectors(path: Path, records: Iterable[VectorRecord], within: Path | None = None) -> None:
    data = b"".join(record.to_line() for record in records)
    files.append_unsynced(path, data, within=within)
