"""Ranking a bank's memories for a query: candidate selection, filters, and the fused score.

Pure over the bank's records and index. Filters (tag, time travel with `as_of`, history) apply
BEFORE ranking and truncation, so a tag-scoped recall is never starved by other tags' hits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from .index import LexicalIndex
from .models import Memory
from .scoring import fused_score
from .text import terms

__all__ = ["Hit", "RecallMode", "RecallQuery", "document_terms", "rank", "top_memories"]


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


@dataclass(frozen=True, slots=True)
class Hit:
    memory: Memory
    score: float


def document_terms(memory: Memory) -> list[str]:
    """What the index sees of a memory: its text and its entity handles (tags are not ranked)."""
    out = terms(memory.text)
    for entity in memory.entities:
        out.extend(terms(entity))
    return out


def _eligible(memory: Memory, query: RecallQuery) -> bool:
    if query.tag is not None and query.tag not in memory.tags:
        return False
    if query.as_of is not None:
        if memory.created_at > query.as_of:
            return False
        return query.include_superseded or memory.live_at(query.as_of)
    return query.include_superseded or memory.live


def _entity_hits(memory: Memory, query_terms: set[str]) -> int:
    hits: set[str] = set()
    for entity in memory.entities:
        hits.update(term for term in terms(entity) if term in query_terms)
    return len(hits)


def rank(memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery) -> list[Hit]:
    """The top `limit` memories for `query.text`, best first; ties go to the newest statement."""
    if query.mode is RecallMode.SEMANTIC or query.limit <= 0:
        return []
    query_terms = terms(query.text)
    if not query_terms:
        return []
    restricted = query.tag is not None or query.as_of is not None
    lexical: dict[str, float] = {}
    for memory_id, score in index.scores(query_terms).items():
        if not restricted or _eligible(memories[memory_id], query):
            lexical[memory_id] = score
    if query.include_superseded or query.as_of is not None:
        # The index holds live records only; history and time travel also score the retired ones.
        for memory in memories.values():
            if memory.id not in index and _eligible(memory, query):
                score = index.score_document(query_terms, document_terms(memory))
                if score > 0:
                    lexical[memory.id] = score
    now_ms = query.as_of if query.as_of is not None else query.now_ms
    wanted = set(query_terms)
    hits: list[Hit] = []
    for memory_id, bm25 in lexical.items():
        memory = memories[memory_id]
        if query.mode is RecallMode.LEXICAL:
            score = bm25
        else:
            score = fused_score(
                bm25,
                entity_hits=_entity_hits(memory, wanted),
                corroboration=memory.corroboration,
                pinned=memory.pinned,
                age_ms=now_ms - memory.last_stated_at,
                half_life_days=query.half_life_days,
            )
        hits.append(Hit(memory, score))
    hits.sort(key=lambda hit: (-hit.score, -hit.memory.last_stated_at, hit.memory.id))
    return hits[: query.limit]


def top_memories(memories: Iterable[Memory], limit: int) -> list[Memory]:
    """The bank's standing memories with no query: pinned, then most corroborated, then newest."""
    live = [memory for memory in memories if memory.live]
    live.sort(key=lambda m: (not m.pinned, -m.corroboration, -m.last_stated_at, m.id))
    return live[:limit]
