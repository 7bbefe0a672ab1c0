"""Ranking a bank's memories for a query: candidate selection, filters, and the fused score.

Filters (tag, time travel with `as_of`, history) apply BEFORE ranking and truncation, so a
tag-scoped recall is never starved by other tags' hits. Live memories are ranked in numpy over the
index's columns; retired ones (history views, `as_of`) are few and scored one by one.

Past 500 lines on purpose: `candidates()` and `order()` are one recall pipeline (arms, second
hop, lanes, filters, fusion, cutoff) whose steps read each other's arrays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from memory_worker.core.models import Hit, Memory
from memory_worker.core.retention import kind_of
from memory_worker.core.temporal import asks_when, recency_policy, states_time
from memory_worker.core.text import terms
from memory_worker.search.index import Candidates, Floats, IndexedDoc, Ints, LexicalIndex
from memory_worker.search.lanes import LANE_POOL, NO_LANES, LaneIndexes, LaneQuery
from memory_worker.search.scoring import (
    DEFAULT_FUSION,
    DEFAULT_LANE_WEIGHTS,
    Arms,
    Fusion,
    LaneWeights,
    Recency,
    fused_scores,
    lexical_relevance,
    semantic_relevance,
)

__all__ = [
    "DUPLICATE_COSINE",
    "Pool",
    "RecallMode",
    "RecallQuery",
    "candidates",
    "document_terms",
    "in_scope",
    "indexed",
    "kind_of",
    "order",
    "rank",
    "top_memories",
]

_TIE_MARGIN = 8  # extra candidates taken past `limit` so exact ties are broken by the sort key
RELEVANCE_CUTOFF = 0.25  # fraction of the best hybrid score a memory needs to be returned
ARM_TOP = 3  # a memory either arm alone ranks this high is never cut…
ARM_EVIDENCE = 0.2  # …when the lexical arm found this much of the question's weight in it,
ARM_EVIDENCE_SHARE = 0.5  # or half of what its best match holds…
ARM_EVIDENCE_MIN = 0.05  # …when that is more than a common word's worth (in a tiny bank too)
# Two memories this close restate one fact, for an embedder that does not say its own threshold
# (`duplicate_cosine`). High on purpose: a model whose cosines crowd into a narrow band would
# otherwise see every memory of a topic as a restatement of the best one (MiniLM says 0.75).
DUPLICATE_COSINE = 0.97
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
    # Subject scoping (a bank with `subject_scoping` on): only general memories and `subject`'s
    # own are candidates — filtered before any arm or the second hop looks at them.
    scoped: bool = False
    subject: str | None = None
    category: str | None = None  # only this kind (`fact` includes memories saved without one)
    vector: tuple[float, ...] | None = None  # the query's embedding, when an embedder answered
    duplicate_cosine: float = DUPLICATE_COSINE  # the embedder's paraphrase threshold
    fusion: Fusion = DEFAULT_FUSION
    lanes: LaneQuery = NO_LANES  # the situation asked about (hybrid recall only)
    lane_weights: LaneWeights = DEFAULT_LANE_WEIGHTS  # the bank's `association_weights`
    threshold: float = 0.0  # the bank's `relevance_threshold` on the blended similarity


@lru_cache(maxsize=8192)
def _entity_terms(entity: str) -> tuple[str, ...]:
    # Entities repeat across a bank (the same few people and projects): analysed once each.
    return tuple(terms(entity))


def document_terms(memory: Memory) -> list[str]:
    """What the index sees of a memory: its text and its entity handles (tags are not ranked)."""
    out = terms(memory.text)
    for entity in memory.entities:
        out.extend(_entity_terms(entity))
    return out


def indexed(memory: Memory, *, with_terms: bool = True) -> IndexedDoc:
    entity_terms = frozenset(term for entity in memory.entities for term in _entity_terms(entity))
    return IndexedDoc(
        doc_id=memory.id,
        terms=document_terms(memory) if with_terms else [],
        entity_terms=entity_terms,
        tags=memory.tags,
        corroboration=memory.corroboration,
        pinned=memory.pinned,
        stated_at=memory.last_stated_at,
        created_at=memory.created_at,
        dated=states_time(memory.text),
        subject=memory.subject,
    )


def in_scope(memory: Memory, query: RecallQuery) -> bool:
    """Whether a scoped query may see `memory`: a general memory, or one about its subject."""
    return not query.scoped or memory.subject is None or memory.subject == query.subject


def _eligible(memory: Memory, query: RecallQuery) -> bool:
    if query.tag is not None and query.tag not in memory.tags:
        return False
    if query.category is not None and kind_of(memory) != query.category:
        return False
    if not in_scope(memory, query):
        return False
    if query.as_of is not None:
        if memory.created_at > query.as_of:
            return False
        return query.include_superseded or memory.live_at(query.as_of)
    return query.include_superseded or memory.live


@dataclass(slots=True)
class Pool:
    """The candidates of one query: live slots (index order) then retired memories, with every
    signal ranking reads, aligned."""

    source: Mapping[str, Memory]  # the bank's memories, by id
    index: LexicalIndex | None
    retired: list[Memory]  # the retired candidates, in order, after every live one
    slots: Ints  # index slot per live candidate; -1 for a retired one
    bm25: Floats
    cosine: Floats  # 0 where no vector (retired, not yet embedded, no semantic arm)
    entity_hits: Floats
    corroboration: Floats
    pinned: npt.NDArray[np.bool_]
    stated_at: Floats
    dated: npt.NDArray[np.bool_]
    semantic: Floats | None = None  # per-query semantic relevance in [0, 1]; None: no arm ran
    query_weight: float = 0.0  # `LexicalIndex.query_weight` of the query (expansion included)
    lanes: dict[str, Floats] = field(default_factory=dict)  # asked lane → relevance in [0, 1]

    def __len__(self) -> int:
        return int(self.slots.size)

    def memory(self, i: int) -> Memory:
        """Candidate `i`, resolved only when it is returned (a pool holds thousands)."""
        slot = int(self.slots[i])
        if slot >= 0 and self.index is not None:
            return self.source[self.index.doc_id(slot)]
        return self.retired[i - (len(self) - len(self.retired))]


_NO_SLOTS = np.empty(0, np.int64)
_NO_FLOATS = np.empty(0, np.float64)
_NO_BOOLS = np.empty(0, bool)
_EMPTY = Pool(
    {}, None, [], _NO_SLOTS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_BOOLS,
    _NO_FLOATS, _NO_BOOLS,
)  # fmt: skip


def _live_pool(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
    cosines: Floats | None,
    scope: npt.NDArray[np.bool_] | None,
    lanes: Mapping[str, Floats],
) -> tuple[Pool, Floats | None]:
    if query.mode is RecallMode.HYBRID and query.fusion.expand_docs > 0:
        slots, bm25, cosines = _expand(index, query, query_terms, cosines, scope)
        if cosines is not None and scope is not None:  # the hop's pull reached every slot
            cosines = np.where(scope[: cosines.size], cosines, 0.0)
    else:
        found = index.lexical(query_terms)
        slots, bm25 = found.slots, found.bm25
    if cosines is not None:
        if query.mode is RecallMode.SEMANTIC:
            slots = np.flatnonzero(cosines > 0)
            bm25 = np.zeros(slots.size, np.float64)
        else:  # hybrid: the lexical hits plus the semantically closest memories
            near = _top(cosines, SEMANTIC_POOL)
            merged = np.union1d(slots, near)
            lexical = np.zeros(merged.size, np.float64)
            lexical[np.searchsorted(merged, slots)] = bm25
            slots, bm25 = merged, lexical
    if lanes:  # the memories formed in the most similar situation, whatever their text says
        near = np.unique(
            np.concatenate([_top(r * index.alive[: r.size], LANE_POOL) for r in lanes.values()])
        )
        merged = np.union1d(slots, near)
        lexical = np.zeros(merged.size, np.float64)
        lexical[np.searchsorted(merged, slots)] = bm25
        slots, bm25 = merged, lexical
    keep = np.ones(slots.size, bool)
    if scope is not None:
        keep &= scope[slots]
    if query.tag is not None:
        keep &= np.isin(slots, index.tagged(query.tag))
    if query.as_of is not None:
        keep &= index.created_at[slots] <= query.as_of
    if query.category is not None:
        wanted = query.category
        keep &= np.fromiter(
            (kind_of(memories[index.doc_id(int(s))]) == wanted for s in slots), bool, slots.size
        )
    slots, bm25 = slots[keep], bm25[keep]
    pool = Pool(
        source=memories,
        index=index,
        retired=[],
        slots=slots,
        bm25=bm25,
        cosine=cosines[slots] if cosines is not None else np.zeros(slots.size, np.float64),
        entity_hits=index.entity_hits(query_terms, slots),
        corroboration=index.corroboration[slots],
        pinned=index.pinned[slots],
        stated_at=index.stated_at[slots],
        dated=index.dated[slots],
        lanes={lane: relevance[slots] for lane, relevance in lanes.items()},
    )
    return pool, cosines


def _top(values: Floats, k: int) -> Ints:
    """Indices of the `k` largest positive values."""
    positive = np.flatnonzero(values > 0)
    if positive.size > k:
        positive = positive[np.argpartition(-values[positive], k - 1)[:k]]
    return positive


def _expand(
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
    cosines: Floats | None,
    scope: npt.NDArray[np.bool_] | None = None,
) -> tuple[Ints, Floats, Floats | None]:
    """A second hop (pseudo-relevance feedback): the best first hits of each arm lend their most
    telling terms to a second lexical pass (weighted `expand_weight` against the query's own), and
    their vectors pull the query vector toward them (`expand_vector`). Questions whose answer is
    spread over several memories ("what activities does she do?") find the ones that share no
    word with the question but several with its first answers. One per-slot array holds both
    passes, so the hop costs a second BM25 accumulation and nothing more."""
    fusion = query.fusion
    weights = Counter(query_terms)
    acc = index.accumulate(weights)
    found = index.matching(acc) if acc is not None else None
    if found is not None and scope is not None:  # out-of-scope hits lend the hop nothing
        found = Candidates(found.slots[scope[found.slots]], found.bm25[scope[found.slots]])
    first = found.slots[_top(found.bm25, fusion.expand_docs)] if found is not None else _NO_SLOTS
    if cosines is not None:
        first = np.union1d(first, _top(cosines, fusion.expand_docs))
    if first.size and fusion.expand_vector > 0 and cosines is not None:
        # float32 rows in place (no copy of the matrix per query)
        pulled = index.vectors[: cosines.size] @ index.vectors[first].mean(axis=0)
        pulled[~index.has_vector[: cosines.size]] = 0.0
        cosines = cosines + fusion.expand_vector * pulled.astype(np.float64)
    extra = index.expansion(first.tolist(), set(query_terms), fusion.expand_terms)
    if extra and fusion.expand_weight > 0 and acc is not None:
        # In relevance terms: the second pass counts `expand_weight` of the question's own words.
        scale = fusion.expand_weight * index.query_weight(weights)
        scale /= max(index.query_weight(extra), 1e-9)
        acc = index.accumulate({term: w * scale for term, w in extra.items()}, into=acc)
    if acc is None:
        return _NO_SLOTS, _NO_FLOATS, cosines
    merged = index.matching(acc)
    return merged.slots, merged.bm25, cosines


def _with_retired(
    pool: Pool,
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
) -> Pool:
    """The index holds live records only; history and time travel also score the retired ones
    (few: they are scored one by one, lexically)."""
    wanted = set(query_terms)
    extra: list[tuple[Memory, float, float, bool]] = []
    for memory in memories.values():
        if memory.id in index or not _eligible(memory, query):
            continue
        bm25 = index.score_document(query_terms, document_terms(memory))
        if bm25 <= 0:
            continue
        doc = indexed(memory, with_terms=False)
        extra.append((memory, bm25, float(len(doc.entity_terms & wanted)), doc.dated))
    if not extra:
        return pool
    n = len(extra)
    return Pool(
        source=pool.source,
        index=pool.index,
        retired=pool.retired + [m for m, _, _, _ in extra],
        slots=np.concatenate((pool.slots, np.full(n, -1, np.int64))),
        bm25=np.concatenate((pool.bm25, np.asarray([b for _, b, _, _ in extra]))),
        cosine=np.concatenate((pool.cosine, np.zeros(n))),
        entity_hits=np.concatenate((pool.entity_hits, np.asarray([e for _, _, e, _ in extra]))),
        corroboration=np.concatenate(
            (pool.corroboration, np.asarray([float(m.corroboration) for m, _, _, _ in extra]))
        ),
        pinned=np.concatenate((pool.pinned, np.asarray([m.pinned for m, _, _, _ in extra]))),
        stated_at=np.concatenate(
            (pool.stated_at, np.asarray([float(m.last_stated_at) for m, _, _, _ in extra]))
        ),
        dated=np.concatenate((pool.dated, np.asarray([d for _, _, _, d in extra], bool))),
        lanes={lane: np.concatenate((r, np.zeros(n))) for lane, r in pool.lanes.items()},
    )


def _semantic_reference(
    index: LexicalIndex, cosines: Floats, quantile: float
) -> tuple[float, float]:
    """(reference, best) cosine of the query over the bank's embedded memories: the reference is
    the `quantile` of them all (what an unrelated memory scores with this model), best the top."""
    embedded = cosines[index.has_vector[: cosines.size] & index.alive[: cosines.size]]
    if embedded.size == 0:
        return 0.0, 0.0
    k = min(int(quantile * (embedded.size - 1)), embedded.size - 1)
    reference = float(np.partition(embedded, k)[k])
    return reference, float(embedded.max())


def _scores(pool: Pool, query: RecallQuery, semantic: Floats | None) -> Floats:
    now_ms = query.as_of if query.as_of is not None else query.now_ms
    lanes, content_off = _lane_arms(pool, query)
    arms = Arms(
        bm25=pool.bm25,
        query_weight=pool.query_weight,
        entity_hits=pool.entity_hits,
        corroboration=pool.corroboration,
        pinned=pool.pinned,
        age_ms=now_ms - pool.stated_at,
        semantic=semantic,
        dated=pool.dated if asks_when(query.text) else None,
        lanes=lanes,
        content_off=content_off,
    )
    policy = Recency(recency_policy(query.text))
    return fused_scores(
        arms, half_life_days=query.half_life_days, policy=policy, fusion=query.fusion
    )


def _lane_shares(pool: Pool, query: RecallQuery) -> dict[str, float]:
    """The normalised weights of content and of the lanes this recall asks and the bank holds."""
    return query.lane_weights.shares(tuple(lane for lane in pool.lanes))


def _lane_arms(pool: Pool, query: RecallQuery) -> tuple[tuple[tuple[float, Floats], ...], bool]:
    shares = _lane_shares(pool, query)
    content = shares.get("content", 0.0)
    lanes = tuple(
        (shares[lane] / content if content > 0.0 else shares[lane], relevance)
        for lane, relevance in pool.lanes.items()
        if lane in shares
    )
    return lanes, content <= 0.0


def _blended(pool: Pool, query: RecallQuery, semantic: Floats | None) -> Floats:
    """Seed 004's blended similarity in [0, 1], what `relevance_threshold` is compared with:
    content's similarity (the stronger of its arms, capped at 1) and each asked lane's, by their
    normalised weights. Boosts and recency are ranking, not similarity: they are left out."""
    content = lexical_relevance(pool.bm25, pool.query_weight)
    if semantic is not None:
        content = np.maximum(content, semantic)
    shares = _lane_shares(pool, query)
    blended: Floats = shares.get("content", 0.0) * np.clip(content, 0.0, 1.0)
    for lane, relevance in pool.lanes.items():
        blended = blended + shares.get(lane, 0.0) * relevance
    return blended


def _keep(
    scores: Floats, pool: Pool, semantic: Floats | None, fusion: Fusion
) -> npt.NDArray[np.bool_]:
    """The relevance cutoff: weak matches (one common word) are noise next to a strong hit, and a
    memory neither arm finds relevant at all (`min_relevance`) is never recalled. But a memory
    either arm alone ranks in its top `ARM_TOP` on real evidence (a fifth of the question's
    words or half its best match's, or closer than the bank's unrelated reference) is always
    kept: the fusion may not undo what an arm is sure of."""
    lexical = lexical_relevance(pool.bm25, pool.query_weight)
    relevance = lexical + (semantic if semantic is not None else 0.0)
    keep = (scores >= RELEVANCE_CUTOFF * float(scores.max())) & (relevance >= fusion.min_relevance)
    best = float(lexical.max()) if lexical.size else 0.0
    # Long queries (extraction asks with a whole chat message) dilute every match: there, half of
    # the best match is real evidence too; a pool of common-word matches only is not.
    evident = (lexical >= ARM_EVIDENCE) | (
        (lexical >= ARM_EVIDENCE_SHARE * best) & (lexical >= ARM_EVIDENCE_MIN)
    )
    keep |= _top_mask(pool.bm25, ARM_TOP) & evident
    if semantic is not None:
        keep |= _top_mask(semantic, ARM_TOP) & (semantic > 0.0)
    return keep


def _top_mask(values: Floats, k: int) -> npt.NDArray[np.bool_]:
    """Which of `values` are among the `k` largest positive ones (a partition, not a sort)."""
    mask = np.zeros(values.size, bool)
    mask[_top(values, k)] = True
    return mask


def _lane_relevance(
    lanes: LaneIndexes | None, index: LexicalIndex, query: RecallQuery
) -> dict[str, Floats]:
    """Per asked lane with weight and holders, its relevance of every slot (hybrid only)."""
    if lanes is None or query.mode is not RecallMode.HYBRID:
        return {}
    out: dict[str, Floats] = {}
    for lane in query.lanes.asked:
        if float(getattr(query.lane_weights, lane)) <= 0.0:
            continue
        relevance = lanes.relevance(lane, query.lanes, index)
        if relevance is not None and relevance.any():
            out[lane] = relevance
    return out


def candidates(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    lanes: LaneIndexes | None = None,
) -> Pool:
    """What may be recalled for `query`, with every signal ranking reads: the lexical hits, the
    semantically closest memories (hybrid) or every embedded one (semantic), the memories formed
    in the most similar situation (asked lanes), the retired records history and `as_of` ask
    for, filtered by tag and time before anything is ranked."""
    semantic_ready = query.vector is not None and query.mode is not RecallMode.LEXICAL
    query_terms = terms(query.text)
    if query.limit <= 0 or (query.mode is RecallMode.SEMANTIC and not semantic_ready):
        return _EMPTY
    lane_relevance = _lane_relevance(lanes, index, query)
    if not query_terms and not semantic_ready and not lane_relevance:
        return _EMPTY
    cosines = index.cosine(query.vector) if semantic_ready and query.vector else None
    scope = index.in_scope(query.subject) if query.scoped else None
    if cosines is not None and scope is not None:
        # Out of scope is "not similar": the semantic pool and the hop's vector pull skip it.
        cosines = np.where(scope[: cosines.size], cosines, 0.0)
    if scope is not None:  # the lanes never bring in a memory out of the speaker's scope
        lane_relevance = {
            lane: np.where(scope[: r.size], r, 0.0) for lane, r in lane_relevance.items()
        }
    pool, cosines = _live_pool(memories, index, query, query_terms, cosines, scope, lane_relevance)
    history = query.include_superseded or query.as_of is not None
    if history and query.mode is not RecallMode.SEMANTIC:
        pool = _with_retired(pool, memories, index, query, query_terms)
    if cosines is not None:
        reference, best = _semantic_reference(index, cosines, query.fusion.semantic_reference)
        pool.semantic = semantic_relevance(pool.cosine, reference, best)
    pool.query_weight = index.query_weight(Counter(query_terms))
    return pool


def order(pool: Pool, index: LexicalIndex, query: RecallQuery) -> list[Hit]:
    """The top `limit` of `pool`, best first; ties go to the newest statement."""
    if not len(pool):
        return []
    semantic = pool.semantic
    if query.mode is RecallMode.LEXICAL:
        scores = pool.bm25
    elif query.mode is RecallMode.SEMANTIC:
        scores = pool.cosine
    else:
        scores = _scores(pool, query, semantic)
    chosen = np.arange(scores.size)
    if query.mode is RecallMode.HYBRID:
        keep = _keep(scores, pool, semantic, query.fusion)
        if query.threshold > 0.0:
            keep &= _blended(pool, query, semantic) >= query.threshold
        chosen = chosen[keep]
    take = min(chosen.size, query.limit + _TIE_MARGIN)
    if take < chosen.size:
        chosen = chosen[np.argpartition(-scores[chosen], take - 1)[:take]]
    final = scores[chosen]
    if query.mode is RecallMode.HYBRID and semantic is not None and final.size:
        final, demoted = _demote_near_duplicates(
            index, pool.slots[chosen], final, query.duplicate_cosine, query.fusion.duplicate
        )
        # A restatement pushed under the cutoff leaves: its better twin already carries the fact.
        kept = ~demoted | (final >= RELEVANCE_CUTOFF * float(final.max()))
        chosen, final = chosen[kept], final[kept]
    hits = [
        Hit(pool.memory(i), score) for i, score in zip(chosen.tolist(), final.tolist(), strict=True)
    ]
    hits.sort(key=lambda hit: (-hit.score, -hit.memory.last_stated_at, hit.memory.id))
    return hits[: query.limit]


def rank(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    lanes: LaneIndexes | None = None,
) -> list[Hit]:
    """The top `limit` memories for `query.text`, best first; ties go to the newest statement."""
    return order(candidates(memories, index, query, lanes), index, query)


def _demote_near_duplicates(
    index: LexicalIndex, slots: Ints, scores: Floats, threshold: float, penalty: float
) -> tuple[Floats, npt.NDArray[np.bool_]]:
    """A memory that restates a better-ranked one (embedding cosine ≥ `threshold`) is scored down
    by `penalty`, so it does not take a second slot of a small injection. Returns the scores and
    which were demoted."""
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    out = scores.copy()
    demoted = np.zeros(scores.size, bool)
    live = slots >= 0
    safe = np.where(live, slots, 0)
    vectors = index.vectors[safe]  # the chosen few rows (a copy: fancy indexing), float32
    has = index.has_vector[safe] & live
    for i in order.tolist():
        if has[i] and kept and float(np.max(vectors[kept] @ vectors[i])) >= threshold:
            out[i] = scores[i] * penalty
            demoted[i] = True
        elif has[i]:
            kept.append(i)
    return out, demoted


def top_memories(memories: Iterable[Memory], limit: int) -> list[Memory]:
    """The bank's standing memories with no query: pinned, then most corroborated, then newest."""
    live = [memory for memory in memories if memory.live]
    live.sort(key=lambda m: (not m.pinned, -m.corroboration, -m.last_stated_at, m.id))
    return live[:limit]
