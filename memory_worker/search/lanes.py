"""Association lanes (C21): what a memory was formed in (`context`) and for (`intention`).

Each lane is its own `LexicalIndex` over the lane's text (BM25 postings and, when an embedder
answered, the lane's own vectors), holding only the memories that carry that lane. Ranking reads a
lane as a per-slot relevance in [0, 1] aligned with the main index's slots, so lane evidence joins
the fused score like an arm, and the lane's best matches join the candidates: a memory whose text
shares nothing with the query is still found by the situation it was formed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memory_worker.core.lanes import LANES
from memory_worker.core.models import Memory
from memory_worker.core.text import terms
from memory_worker.core.transitions import BLANK
from memory_worker.search.index import Floats, IndexedDoc, Ints, LexicalIndex
from memory_worker.search.scoring import kth_value, semantic_relevance

__all__ = ["LANES", "LANE_POOL", "NO_LANES", "LaneIndexes", "LaneQuery"]

LANE_POOL = 50  # a lane's closest memories added to the candidates (like the semantic pool)
LANE_SEMANTIC_REFERENCE = 0.5  # the quantile of a lane's cosines that counts as unrelated
# The window's most specific terms a lane is asked with: a window holds a hundred words, most of
# them common, and every one would walk its whole posting list (measured: bench/lanes_speed.py).
LANE_QUERY_TERMS = 16


@dataclass(frozen=True, slots=True)
class LaneQuery:
    """The recall's situation: the conversation window and the turn's goal, and their vectors
    when the query was embedded (None: that lane is not asked, or is lexical only)."""

    context: str | None = None
    intention: str | None = None
    context_vector: tuple[float, ...] | None = None
    intention_vector: tuple[float, ...] | None = None

    def text(self, lane: str) -> str | None:
        value: str | None = self.context if lane == "context" else self.intention
        # Blank as a stored lane is (`prepare_lane`): a window of only a zero-width space asked
        # a lane that found nothing, and took its share out of every memory's blend.
        return value if value and value.strip(BLANK) else None

    def vector(self, lane: str) -> tuple[float, ...] | None:
        return self.context_vector if lane == "context" else self.intention_vector

    @property
    def asked(self) -> tuple[str, ...]:
        return tuple(lane for lane in LANES if self.text(lane) is not None)


NO_LANES = LaneQuery()


def _specific(index: LexicalIndex, words: list[str]) -> Counter[str]:
    """The `LANE_QUERY_TERMS` rarest of `words` the lane holds at all (ties: the first said)."""
    counts = Counter(words)
    held = [(index.document_frequency(term), at, term) for at, term in enumerate(counts)]
    kept = sorted(item for item in held if item[0] > 0)[:LANE_QUERY_TERMS]
    return Counter({term: counts[term] for _, _, term in kept})


class LaneIndexes:
    """One index per lane, kept in step with the bank's records (`Bank._apply`)."""

    def __init__(self) -> None:
        # A lane's index exists once a memory carries that lane: a bank without lanes (most of
        # them; thousands may be open) pays nothing for them.
        self.indexes: dict[str, LexicalIndex] = {}
        # main slot → lane slot (-1: none), rebuilt when either index's slots moved.
        self._aligned: dict[str, tuple[tuple[int, int, int, int], Ints]] = {}

    def _index(self, lane: str) -> LexicalIndex:
        index = self.indexes.get(lane)
        if index is None:
            # Full float32 values: lane vectors were never rounded to float16 (their figures
            # were taken so).
            index = self.indexes[lane] = LexicalIndex(half_precision=False)
        return index

    def add(self, memory: Memory) -> None:
        """Index `memory`'s lanes (a live record); a lane it no longer carries is dropped."""
        for lane in LANES:
            text: str | None = getattr(memory, lane)
            if text:
                self._index(lane).add_doc(IndexedDoc(memory.id, terms(text)))
            elif lane in self.indexes:
                self.indexes[lane].remove(memory.id)

    def add_many(self, memories: Iterable[Memory]) -> None:
        """Bulk load (boot, rewrite): the live records' lanes, bases built once per lane."""
        rows = list(memories)
        for lane in LANES:
            docs = [IndexedDoc(m.id, terms(text)) for m in rows if (text := getattr(m, lane))]
            if docs:
                self._index(lane).add_many(docs)

    def remove(self, memory_id: str) -> None:
        for index in self.indexes.values():
            index.remove(memory_id)

    def count(self, lane: str) -> int:
        index = self.indexes.get(lane)
        return 0 if index is None else len(index)

    def vector_width(self, lane: str) -> int:
        index = self.indexes.get(lane)
        return 0 if index is None else index.vector_width

    def set_vector(self, lane: str, memory_id: str, vector: Sequence[float]) -> bool:
        index = self.indexes.get(lane)
        return index is not None and index.set_vector(memory_id, vector)

    def reset_vectors(self) -> None:
        for index in self.indexes.values():
            index.reset_vectors()

    def _alignment(self, lane: str, main: LexicalIndex) -> Ints:
        index = self.indexes[lane]
        key = (id(main), main.version, main.slot_count, index.version)
        cached = self._aligned.get(lane)
        if cached is not None and cached[0] == key:
            return cached[1]
        n = main.slot_count
        ids = main.slot_ids()
        aligned = np.fromiter((index.slot(ids[s]) for s in range(n)), np.int64, n)
        self._aligned[lane] = (key, aligned)
        return aligned

    def relevance(
        self,
        lane: str,
        query: LaneQuery,
        main: LexicalIndex,
        admitted: npt.NDArray[np.bool_] | None = None,
    ) -> Floats | None:
        """The lane's relevance of every main-index slot in [0, 1], or None when the query does
        not ask this lane or no memory carries it. Lexically, BM25 over the lane's best match:
        a conversation window is long, so its share of any one stored context is small — what
        matters is which memories were formed in the most similar situation. With vectors, the
        lane's cosines rescaled like the content arm's, and the two averaged. `admitted` (per
        main slot; None: all): the memories the recall may see — only they set the best match
        and the reference, so another person's stored context (or another tag's, an expired
        one's) never scales down the relevance of the ones in scope."""
        text = query.text(lane)
        index = self.indexes.get(lane)
        if text is None or index is None or len(index) == 0:
            return None
        aligned = self._alignment(lane, main)
        alive = index.alive[: index.slot_count].copy()
        if admitted is not None:
            seen = np.zeros(index.slot_count, bool)
            inside = (aligned >= 0) & admitted[: aligned.size]
            seen[aligned[inside]] = True
            alive &= seen
        lexical = np.zeros(index.slot_count, np.float64)
        acc = index.accumulate(_specific(index, terms(text)))
        if acc is not None:
            acc = np.where(alive[: acc.size], acc, 0.0)
            best = float(acc.max()) if acc.size else 0.0
            if best > 0.0:
                lexical[: acc.size] = acc / best
        per_lane = lexical
        vector = query.vector(lane)
        if vector is not None and index.vector_width == len(vector):
            cosine = index.cosine(vector)
            embedded = cosine[index.has_vector[: cosine.size] & alive[: cosine.size]]
            if embedded.size:
                k = min(int(LANE_SEMANTIC_REFERENCE * (embedded.size - 1)), embedded.size - 1)
                reference = kth_value(embedded, k)
                semantic = semantic_relevance(cosine, reference, float(embedded.max()))
                per_lane = (lexical + semantic) / 2.0
        out = np.zeros(main.slot_count, np.float64)
        found = aligned >= 0
        out[found] = per_lane[aligned[found]]
        return out
