"""Ranking a bank's memories for a query: candidate selection, filters, and the fused score.

Filters (tag, time travel with `as_of`, history) apply BEFORE ranking and truncation, so a
tag-scoped recall is never starved by other tags' hits. Live memories are ranked in numpy over the
index's columns; retired ones (history views, `as_of`) are few and scored one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from memory_worker.core.models import Hit, Memory
from memory_worker.core.text import terms
from memory_worker.search.index import Floats, IndexedDoc, Ints, LexicalIndex
from memory_worker.search.scoring import SEMANTIC_FLOOR, fused_scores

__all__ = [
    "RecallMode",
    "RecallQuery",
    "document_terms",
    "indexed",
    "rank",
    "top_memories",
]

_TIE_MARGIN = 8  # extra candidates taken past `limit` so exact ties are broken by the sort key
RELEVANCE_CUTOFF = 0.25  # fraction of the best hybrid score a memory needs to be returned
DUPLICATE_COSINE = 0.75  # paraphrases of one fact embed this close (MiniLM: 0.77-0.88 measured)
DUPLICATE_PENALTY = 0.5
SEMANTIC_POOL = 100  # semantically closest memories added to the lexical candidates in hybrid mode


class RecallMode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    SEMANTIC = "semantic"


@dataclass(frozen=True, slots=True)
class RecallQuery:
    text: str
    limit: int
    now_ms: int
    half_life_days: float
    mode: RecallMode = RecallMode.HYBRID
    tag: str | None = None
    include_superseded: bool = False
    as_of: int | None = None
    vector: tuple[float, ...] | None = None  # the query's embedding, when an embedder answered


def document_terms(memory: Memory) -> list[str]:
    """What the index sees of a memory: its text and its entity handles (tags are not ranked)."""
    out = terms(memory.text)
    for entity in memory.entities:
        out.extend(terms(entity))
    return out


def indexed(memory: Memory, *, with_terms: bool = True) -> IndexedDoc:
    entity_terms = frozenset(term for entity in memory.entities for term in terms(entity))
    return IndexedDoc(
        doc_id=memory.id,
        terms=document_terms(memory) if with_terms else [],
        entity_terms=entity_terms,
        tags=memory.tags,
        corroboration=memory.corroboration,
        pinned=memory.pinned,
        stated_at=memory.last_stated_at,
        created_at=memory.created_at,
    )


def _eligible(memory: Memory, query: RecallQuery) -> bool:
    if query.tag is not None and query.tag not in memory.tags:
        return False
    if query.as_of is not None:
        if memory.created_at > query.as_of:
            return False
        return query.include_superseded or memory.live_at(query.as_of)
    return query.include_superseded or memory.live


def _live_hits(
    memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery, query_terms: list[str]
) -> list[Hit]:
    found = index.lexical(query_terms)
    slots, bm25 = found.slots, found.bm25
    semantic = np.zeros(slots.size, np.float64)
    if query.vector is not None and query.mode is not RecallMode.LEXICAL:
        cosines = index.cosine(query.vector)
        if query.mode is RecallMode.SEMANTIC:
            slots = np.flatnonzero(cosines > 0)
            bm25 = np.zeros(slots.size, np.float64)
        else:  # hybrid: the lexical hits plus the semantically closest memories
            pool = np.flatnonzero(cosines > SEMANTIC_FLOOR)
            if pool.size > SEMANTIC_POOL:
                pool = pool[np.argpartition(-cosines[pool], SEMANTIC_POOL - 1)[:SEMANTIC_POOL]]
            merged = np.union1d(slots, pool)
            lexical = np.zeros(merged.size, np.float64)
            lexical[np.searchsorted(merged, slots)] = bm25
            slots, bm25 = merged, lexical
        semantic = cosines[slots]
    keep = np.ones(slots.size, bool)
    if query.tag is not None:
        keep &= np.isin(slots, index.tagged(query.tag))
    if query.as_of is not None:
        keep &= index.created_at[slots] <= query.as_of
    slots, bm25, semantic = slots[keep], bm25[keep], semantic[keep]
    if query.mode is RecallMode.LEXICAL:
        scores = bm25
    elif query.mode is RecallMode.SEMANTIC:
        scores = semantic
    else:
        now_ms = query.as_of if query.as_of is not None else query.now_ms
        scores = fused_scores(
            bm25,
            entity_hits=index.entity_hits(query_terms, slots),
            corroboration=index.corroboration[slots],
            pinned=index.pinned[slots],
            age_ms=now_ms - index.stated_at[slots],
            half_life_days=query.half_life_days,
            semantic=semantic,
        )
    if query.mode is RecallMode.HYBRID and scores.size:
        # Weak matches (one common word) are noise next to a strong hit: leave them out.
        keep = scores >= RELEVANCE_CUTOFF * float(scores.max())
        slots, scores = slots[keep], scores[keep]
    take = min(scores.size, query.limit + _TIE_MARGIN)
    if take < scores.size:
        best = np.argpartition(-scores, take - 1)[:take]
        slots, scores = slots[best], scores[best]
    if query.mode is RecallMode.HYBRID and query.vector is not None:
        scores = _demote_near_duplicates(index, slots, scores)
    return [
        Hit(memories[index.doc_id(slot)], score)
        for slot, score in zip(slots.tolist(), scores.tolist(), strict=True)
    ]


def _demote_near_duplicates(index: LexicalIndex, slots: Ints, scores: Floats) -> Floats:
    """A memory that restates a better-ranked one (embedding cosine ≥ DUPLICATE_COSINE) drops in
    rank: it stays recallable, but no longer takes a second slot of a small injection."""
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    out = scores.copy()
    vectors = index.vectors[slots].astype(np.float32)
    has = index.has_vector[slots]
    for i in order.tolist():
        if has[i] and kept and float(np.max(vectors[kept] @ vectors[i])) >= DUPLICATE_COSINE:
            out[i] = scores[i] * DUPLICATE_PENALTY
        elif has[i]:
            kept.append(i)
    return out


def _retired_hits(
    memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery, query_terms: list[str]
) -> list[Hit]:
    """The index holds live records only; history and time travel also score the retired ones."""
    hits: list[Hit] = []
    wanted = set(query_terms)
    now_ms = query.as_of if query.as_of is not None else query.now_ms
    for memory in memories.values():
        if memory.id in index or not _eligible(memory, query):
            continue
        bm25 = index.score_document(query_terms, document_terms(memory))
        if bm25 <= 0:
            continue
        if query.mode is RecallMode.LEXICAL:
            hits.append(Hit(memory, bm25))
            continue
        doc = indexed(memory, with_terms=False)
        score = fused_scores(
            np.asarray([bm25]),
            entity_hits=np.asarray([float(len(doc.entity_terms & wanted))]),
            corroboration=np.asarray([float(memory.corroboration)]),
            pinned=np.asarray([memory.pinned]),
            age_ms=np.asarray([float(now_ms - memory.last_stated_at)]),
            half_life_days=query.half_life_days,
        )
        hits.append(Hit(memory, float(score[0])))
    return hits


def rank(memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery) -> list[Hit]:
    """The top `limit` memories for `query.text`, best first; ties go to the newest statement."""
    semantic_ready = query.vector is not None and query.mode is not RecallMode.LEXICAL
    if query.limit <= 0 or (query.mode is RecallMode.SEMANTIC and not semantic_ready):
        return []
    query_terms = terms(query.text)
    if not query_terms and not semantic_ready:
        return []
    hits = _live_hits(memories, index, query, query_terms)
    history = query.include_superseded or query.as_of is not None
    if history and query.mode is not RecallMode.SEMANTIC:
        hits.extend(_retired_hits(memories, index, query, query_terms))
    hits.sort(key=lambda hit: (-hit.score, -hit.memory.last_stated_at, hit.memory.id))
    return hits[: query.limit]


def top_memories(memories: Iterable[Memory], limit: int) -> list[Memory]:
    """The bank's standing memories with no query: pinned, then most corroborated, then newest."""
    live = [memory for memory in memories if memory.live]
    live.sort(key=lambda m: (not m.pinned, -m.corroboration, -m.last_stated_at, m.id))
    return live[:limit]
