"""The `lane-vectors.jsonl` sidecar: derived embeddings of the association lanes (C21).

The line format is `vectors.jsonl`'s, with `id` = `<memory id>#<lane>` and `text_hash` the hash of
that lane's text: a vector counts only while its memory is live with the same lane text, and only
when it comes from the model whose content vectors the bank holds (a query's lane vectors are
embedded by that model; two models' vectors are never compared). Derived data: appends are not
fsynced, a damaged or stale line is dropped and its lane re-embedded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING

from memory_worker.core.lanes import LANES
from memory_worker.core.models import Memory
from memory_worker.storage.vectors import VectorAppends, VectorRecord, load_vectors, text_hash

if TYPE_CHECKING:  # (a one-shot save imports this module, never the search package)
    from memory_worker.search.lanes import LaneIndexes

__all__ = ["LANE_VECTORS_FILE", "LaneVectors", "lane_carriers"]

LANE_VECTORS_FILE = "lane-vectors.jsonl"

Key = tuple[str, str]  # (lane, memory id)
_LANE_TEXTS = tuple(attrgetter(lane) for lane in LANES)


def lane_carriers(records: Collection[Memory]) -> list[Memory]:
    """The records with a lane text (any of `LANES`), in their order. Most carry none: the
    check runs from C (`filter` by attribute) and only a bank where some do takes a Python pass
    (a boot of 100k records once spent half a second calling `_lane_text` twice on each)."""
    carrying = {id(m) for text_of in _LANE_TEXTS for m in filter(text_of, records)}
    return [m for m in records if id(m) in carrying] if carrying else []


def _lane_text(memory: Memory | None, lane: str) -> str | None:
    if memory is None or not memory.live or lane not in LANES:
        return None
    text: str | None = getattr(memory, lane)
    return text or None


class LaneVectors:
    """Which lane texts have a vector of which model, and which still need one."""

    def __init__(self, path: Path, lanes: LaneIndexes, appends: VectorAppends) -> None:
        self.path = path
        self.lanes = lanes
        self._appends = appends  # the bank's: an erasure waits for them
        self._models: dict[Key, str] = {}
        self._pending: dict[Key, None] = {}

    def load(self, lanes: LaneIndexes, memories: Mapping[str, Memory], *, read: bool = True) -> int:
        """Start over on `lanes` (boot, a rewrite): keep the sidecar's current vectors, queue the
        rest; returns how many lines were unreadable. `read=False`: the sidecar could not be
        read (`StorageError` from a first call), so every lane text is queued."""
        self.lanes = lanes
        self._models = {}
        records, skipped = load_vectors(self.path / LANE_VECTORS_FILE) if read else ({}, 0)
        for record in records.values():
            memory_id, _, lane = record.id.rpartition("#")
            text = _lane_text(memories.get(memory_id), lane)
            if text is None or record.text_hash != text_hash(text):
                continue
            if lanes.set_vector(lane, memory_id, record.vector):
                self._models[(lane, memory_id)] = record.model
        carrying = lane_carriers(memories.values())
        self._pending = {
            (lane, m.id): None
            for m in carrying
            for lane in LANES
            if _lane_text(m, lane) and (lane, m.id) not in self._models
        }
        return skipped

    def changed(self, record: Memory) -> None:
        """`record`'s lanes were (re)indexed or dropped: their old vectors are gone with them."""
        for lane in LANES:
            key = (lane, record.id)
            self._models.pop(key, None)
            if _lane_text(record, lane):
                self._pending[key] = None
            else:
                self._pending.pop(key, None)

    def take_over(self, model: str, memories: Mapping[str, Memory]) -> None:
        """`model` holds the bank's content vectors now: another model's lane vectors leave."""
        if all(m == model for m in self._models.values()):
            return
        self._reset(memories)

    def _reset(self, memories: Mapping[str, Memory]) -> None:
        self.lanes.reset_vectors()
        self._models = {}
        self._pending = {
            (lane, m.id): None for m in memories.values() for lane in LANES if _lane_text(m, lane)
        }

    def pending(
        self, memories: Mapping[str, Memory], limit: int, lanes: Collection[str] = LANES
    ) -> list[tuple[str, Memory]]:
        """Up to `limit` texts of `lanes` lacking a vector, as (lane, memory)."""
        out = []
        wanted = (key for key in self._pending if key[0] in lanes)
        for lane, memory_id in list(islice(wanted, limit)):
            memory = memories.get(memory_id)
            if _lane_text(memory, lane) is None:
                self._pending.pop((lane, memory_id), None)
                continue
            assert memory is not None
            out.append((lane, memory))
        return out

    def ready(self, model: str, lanes: Collection[str] = LANES) -> bool:
        """Whether a query's vectors of `lanes` from `model` may be compared here: every text of
        those lanes has its vector, all of `model`."""
        return not any(key[0] in lanes for key in self._pending) and all(
            m == model for (lane, _), m in self._models.items() if lane in lanes
        )

    async def store(
        self,
        model: str,
        items: Sequence[tuple[str, Memory, list[float]]],
        memories: Mapping[str, Memory],
    ) -> int:
        """Keep the vectors whose lane text is still current; returns how many."""
        kept: list[VectorRecord] = []
        for lane, memory, vector in items:
            current = memories.get(memory.id)
            text = _lane_text(current, lane)
            if current is None or text is None or text != getattr(memory, lane):
                continue  # edited or retired meanwhile: its change queued it again
            width = self.lanes.vector_width(lane)
            if width and width != len(vector):
                self._reset(memories)  # the model answers with another width: start over
            if self.lanes.set_vector(lane, memory.id, vector):
                self._models[(lane, memory.id)] = model
                self._pending.pop((lane, memory.id), None)
                kept.append(
                    VectorRecord(
                        f"{memory.id}#{lane}", model, current.revision, text_hash(text), vector
                    )
                )
        if kept:
            await self._appends.append(self.path / LANE_VECTORS_FILE, kept)
        return len(kept)
