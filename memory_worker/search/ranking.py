"""Ranking a bank's memories for a query: candidate selection, filters, and the fused score.

Filters (tag, time travel with `as_of`, history, retention) apply BEFORE ranking and truncation,
so a tag-scoped recall is never starved by other tags' hits, nor a result list shortened by
memories past their TTL that the reaper has not retired yet. Live memories are ranked in numpy
over the index's columns; retired ones (history views, `as_of`) are few and scored one by one.

Past 500 lines on purpose: `candidates()` and `order()` are one recall pipeline (arms, second
hop, lanes, filters, fusion, cutoff) whose steps read each other's arrays.
"""

from __future__ import annotations

import heapq
import itertools
import math
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from memory_worker.core.models import Hit, Memory
from memory_worker.core.retention import DAY_MS, kind_of, past_ttl
from memory_worker.core.subjects import (
    about_someone_else,
    asks_about_speaker,
    asks_how,
    same_subject,
)
from memory_worker.core.temporal import (
    asks_when,
    named_span,
    recency_policy,
    states_time,
    told_span,
)
from memory_worker.core.text import USER_ENTITY, asks, normalize, terms
from memory_worker.search.index import (
    CENTER_PRIOR,
    Candidates,
    Floats,
    IndexedDoc,
    Ints,
    LexicalIndex,
    category_code,
    unit_row,
)
from memory_worker.search.lanes import LANE_POOL, NO_LANES, LaneIndexes, LaneQuery
from memory_worker.search.modes import RecallMode
from memory_worker.search.scoring import (
    DEFAULT_FUSION,
    DEFAULT_LANE_WEIGHTS,
    Arms,
    Fusion,
    FusionMethod,
    LaneWeights,
    Recency,
    fused_scores,
    kth_value,
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
    "expired_slots",
    "history_records",
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
CONTEXT_CEILING = 0.999  # of the question's score: what a memory it raises may reach at most
SEMANTIC_POOL = 100  # semantically closest memories added to the lexical candidates in hybrid mode


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
    # A list question's answer type embedded alone (`core.text.answer_type`), blended into
    # `vector` by `Fusion.answer_type` (hybrid only); None: not a list question, or no embedder.
    type_vector: tuple[float, ...] | None = None
    duplicate_cosine: float = DUPLICATE_COSINE  # the embedder's paraphrase threshold
    fusion: Fusion = DEFAULT_FUSION
    lanes: LaneQuery = NO_LANES  # the situation asked about (hybrid recall only)
    lane_weights: LaneWeights = DEFAULT_LANE_WEIGHTS  # the bank's `association_weights`
    threshold: float = 0.0  # the bank's `relevance_threshold` on the blended similarity
    # With `as_of`: the memories whose record now says otherwise than it did then (edited since,
    # or retired then and brought back since), each as its log had it then: ranked from that
    # record (as a retired one is), never from the index's newer text.
    as_it_was: Mapping[str, Memory] | None = None
    # The bank's category TTLs (days): a memory past its TTL at the query's time (`as_of`, else
    # `now_ms`) is no candidate, whether or not the reaper has retired it yet (pinned ones never
    # expire). None or empty: nothing expires, and nothing is checked.
    retention: Mapping[str, int] | None = None
    # `mode=semantic`'s history view (`include_superseded`, `as_of`): the embeddings of the
    # records `history_records` yields, by id — the index holds live vectors only, and a record
    # as it read then is not its live vector's text. None: retired records are not ranked (the
    # hybrid and lexical arms score them by their words instead).
    history_vectors: Mapping[str, npt.NDArray[np.float32]] | None = None


@lru_cache(maxsize=8192)
def _entity_terms(entity: str) -> tuple[str, ...]:
    # Entities repeat across a bank (the same few people and projects): analysed once each.
    return tuple(terms(entity))


# The question's shape, read once per text: ranking asks it for every batch of rows it scores.
@lru_cache(maxsize=1024)
def _asks_when(text: str) -> bool:
    return asks_when(text)


@lru_cache(maxsize=1024)
def _asks_about_speaker(text: str) -> bool:
    return asks_about_speaker(text)


@lru_cache(maxsize=1024)
def _asks_how(text: str) -> bool:
    return asks_how(text)


@lru_cache(maxsize=1024)
def _named_span(text: str, day: int) -> tuple[int, int] | None:
    # By day: `named_span` reads only the date of now, so a day's recalls share one parse.
    return named_span(text, day * DAY_MS)


Window = tuple[float, float]


def _span_window(query: RecallQuery) -> tuple[Window, Window | None] | None:
    """The [start, end) stated-at window a memory must fall in for the `in_span` boost (the time
    the question names, `core.temporal.named_span`, widened by the fusion's margins) and the
    named time itself, which a memory's own relative words may point into (None: not read);
    None when the boost is off or the question names no time."""
    fusion = query.fusion
    if not fusion.in_span:
        return None
    now_ms = query.as_of if query.as_of is not None else query.now_ms
    span = _named_span(query.text, now_ms // DAY_MS)
    if span is None:
        return None
    window = (
        span[0] - fusion.span_before_days * DAY_MS,
        span[1] + fusion.span_after_days * DAY_MS,
    )
    return window, ((float(span[0]), float(span[1])) if fusion.span_told else None)


# The furthest a memory's own words are read to point from when it was stated ("last year",
# "next year", a date within a half year either way).
TOLD_REACH_DAYS = 400


@lru_cache(maxsize=8192)
def _told(text: str, stated_ms: int) -> tuple[int, int] | None:
    return told_span(text, stated_ms)


def _told_days(text: str, stated_ms: int) -> tuple[int, int] | None:
    """`told_span` in whole days since the epoch (`core.temporal` counts in UTC days)."""
    span = told_span(text, stated_ms)
    return None if span is None else (span[0] // DAY_MS, -(-span[1] // DAY_MS))


def _in_span(
    pool: Pool,
    spans: tuple[Window, Window | None] | None,
    rows: Ints | None = None,
    bound: bool = False,
    slots: Ints | None = None,
    stated: Floats | None = None,
) -> npt.NDArray[np.bool_] | None:
    """Which candidates at `rows` (None: every one) were stated within the window of `spans`
    (`_span_window`) or, when it carries the named time itself, whose own relative words point
    into that ("last month", said in April, for "in March"); `bound`: an upper bound of this
    that reads no text, for `_contenders` (a retired record in reach counts). `slots`,
    `stated`: the candidates' index slots and `stated_at`, when the caller has them."""
    if spans is None:
        return None
    window, told = spans
    if stated is None:
        stated = pool.signal("stated_at", rows, slots)
    inside: npt.NDArray[np.bool_] = (stated >= window[0]) & (stated < window[1])
    if told is None:
        return inside
    # Only a dated text stated within a year or so of the named time can point into it.
    reach: npt.NDArray[np.bool_] = (
        ~inside
        & pool.signal("dated", rows, slots)
        & (stated >= told[0] - TOLD_REACH_DAYS * DAY_MS)
        & (stated < told[1] + TOLD_REACH_DAYS * DAY_MS)
    )
    where = reach.nonzero()[0]
    if not where.size:
        return inside
    if slots is None:
        slots = pool.slots if rows is None else pool.slots[rows]
    reached = slots[where]
    live = reached >= 0 if pool.index is not None else np.zeros(where.size, bool)
    if live.any():
        assert pool.index is not None
        # A live memory's told span is a column of the index, read from its text when indexed:
        # read here, a question naming a time over a big bank paid for thousands of texts
        # (recall p99 at 100k memories 3 → 72 ms).
        start, end = pool.index.told_days(reached[live])
        inside[where[live]] = (start.astype(np.float64) * DAY_MS < told[1]) & (
            end.astype(np.float64) * DAY_MS > told[0]
        )
    for at in where[~live].tolist():  # retired records (history, `as_of`): few, read each time
        if bound:
            inside[at] = True
            continue
        position = at if rows is None else int(rows[at])
        span = _told(pool.memory(position).text, int(stated[at]))
        inside[at] = span is not None and span[0] < told[1] and span[1] > told[0]
    return inside


@lru_cache(maxsize=1024)
def _policy(text: str) -> Recency:
    return Recency(recency_policy(text))


# Whether a memory's text asks something, read for the best hits of every hybrid recall.
_asks = lru_cache(maxsize=8192)(asks)


def document_terms(memory: Memory) -> list[str]:
    """What the index sees of a memory: its text and its entity handles (tags are not ranked)."""
    out = terms(memory.text)
    for entity in memory.entities:
        out.extend(_entity_terms(entity))
    return out


def indexed(memory: Memory, *, with_terms: bool = True, with_told: bool = True) -> IndexedDoc:
    """What the index keeps of `memory`; `with_terms`/`with_told` False: its terms / the time
    its words point to are not read (a column update keeps the terms; a retired record scored
    one by one needs neither)."""
    # Most memories name no entity: no generator to build and run for nothing (every save's).
    dated = states_time(memory.text)
    entity_terms = (
        frozenset(term for entity in memory.entities for term in _entity_terms(entity))
        if memory.entities
        else frozenset()
    )
    return IndexedDoc(
        doc_id=memory.id,
        terms=document_terms(memory) if with_terms else [],
        entity_terms=entity_terms,
        tags=memory.tags,
        corroboration=memory.corroboration,
        pinned=memory.pinned,
        stated_at=memory.last_stated_at,
        created_at=memory.created_at,
        dated=dated,
        told=_told_days(memory.text, memory.last_stated_at) if dated and with_told else None,
        subject=memory.subject,
        session=memory.source.session_id if memory.source is not None else None,
        category=memory.category,
    )


def in_scope(memory: Memory, query: RecallQuery) -> bool:
    """Whether a scoped query may see `memory`: a general memory, or one about its subject."""
    return not query.scoped or memory.subject is None or same_subject(memory.subject, query.subject)


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
        if query.include_superseded:
            return True
        # Live then: not retired by then, nor past its TTL then (a reap lands after the expiry).
        expired = bool(query.retention) and past_ttl(memory, query.retention or {}, query.as_of)
        return memory.live_at(query.as_of) and not expired
    return query.include_superseded or memory.live


@dataclass(slots=True)
class Pool:
    """The candidates of one query: live slots (index order) then retired memories, with every
    signal ranking reads, aligned. A live-only pool leaves the per-memory columns (`entity_hits`
    … `dated`) None and `signal` reads them from the index at the rows ranking asks for: a big
    bank's query has tens of thousands of candidates, of which only the contenders are scored."""

    source: Mapping[str, Memory]  # the bank's memories, by id
    index: LexicalIndex | None
    retired: list[Memory]  # the retired candidates, in order, after every live one
    slots: Ints  # index slot per live candidate; -1 for a retired one
    bm25: Floats
    cosine: Floats  # 0 where no vector (retired, not yet embedded, no semantic arm)
    entity_hits: Floats | None
    corroboration: Floats | None
    pinned: npt.NDArray[np.bool_] | None
    stated_at: Floats | None
    dated: npt.NDArray[np.bool_] | None
    semantic: Floats | None = None  # per-query semantic relevance in [0, 1]; None: no arm ran
    # The semantic arm on an absolute scale (`_similarity`), for `relevance_threshold` only; None:
    # no threshold, or no arm.
    similarity: Floats | None = None
    # The question's own words' BM25 where the second hop added its lent words to `bm25`, for
    # `relevance_threshold` only (lent words are ranking evidence, not similarity to the
    # question); None: `bm25` is the question's own (no hop, or no threshold).
    own_bm25: Floats | None = None
    query_weight: float = 0.0  # `LexicalIndex.query_weight` of the query (expansion included)
    lanes: dict[str, Floats] = field(default_factory=dict)  # asked lane → relevance in [0, 1]
    # Per index slot, the entity tally (`LexicalIndex.entity_tally`); None: the query names none.
    entity_tally: Floats | None = None
    tops: dict[str, Ints] = field(default_factory=dict)  # `_arm_top`'s, once computed
    # Whether live memories past their TTL now were left out: the reaper has not retired them.
    expired: bool = False
    # The question asks about the speaker and names no one else (`_others_demoted`).
    speaker_only: bool = False
    # Per index slot, the tally of the entities the question is about (`_unnamed_demoted`):
    # `entity_tally`, but without the user for a procedure question ("how do I…").
    named_tally: Floats | None = None
    _best_bm25: float | None = field(default=None, init=False, repr=False)  # `best_bm25`

    def __len__(self) -> int:
        return int(self.slots.size)

    def best_bm25(self) -> float:
        """The largest bm25 of the pool (which is not empty), read once: the contenders' start
        and the cutoff's best lexical relevance both ask (a pass over tens of thousands of
        candidates at 100k memories)."""
        best = self._best_bm25
        if best is None:
            best = self._best_bm25 = float(_max(self.bm25))
        return best

    def memory(self, i: int) -> Memory:
        """Candidate `i`, resolved only when it is returned (a pool holds thousands)."""
        slot = int(self.slots[i])
        if slot >= 0 and self.index is not None:
            return self.source[self.index.doc_id(slot)]
        return self.retired[i - (len(self) - len(self.retired))]

    def memories(self, rows: Ints | Sequence[int]) -> list[Memory]:
        """`memory` of each candidate at `rows` (the few returned), their slots read in one go.
        Ranking hands its array of positions: a list made of it was converted back first."""
        slots = self.slots[rows].tolist()
        if self.index is not None and not self.retired:  # every candidate live
            ids, source = self.index.slot_ids(), self.source
            return [source[ids[slot]] for slot in slots]
        positions = rows.tolist() if isinstance(rows, np.ndarray) else list(rows)
        if self.index is None:
            return [self.memory(i) for i in positions]
        ids, source = self.index.slot_ids(), self.source
        return [
            source[ids[slot]] if slot >= 0 else self.memory(i)
            for i, slot in zip(positions, slots, strict=True)
        ]

    def signal(
        self, name: str, rows: Ints | None = None, slots: Ints | None = None
    ) -> npt.NDArray[Any]:
        """Per-memory signal `name` (`entity_hits`, `corroboration`, `pinned`, `stated_at`,
        `dated`) of the candidates at `rows` (None: every one), in that order. `slots`: their
        index slots, when the caller read them already (`_scores` reads four signals or more)."""
        stored: npt.NDArray[Any] | None = getattr(self, name)
        if stored is not None:
            return stored if rows is None else stored[rows]
        if slots is None:
            slots = self.slots if rows is None else self.slots[rows]
        if name == "entity_hits":
            tally = self.entity_tally
            return np.zeros(slots.size, np.float64) if tally is None else tally[slots]
        assert self.index is not None  # a pool without an index stores every signal
        column: npt.NDArray[Any] = getattr(self.index, name)
        # The whole pool's (thousands of slots): `take`, quicker than fancy indexing there and
        # the same values; a few rows' (`_scores`): indexing, quicker for a few dozen.
        return column.take(slots) if rows is None else column[slots]


# Hot paths write `(mask).nonzero()[0]` for `np.flatnonzero(mask)`: the same indices of a 1-D
# mask, without its Python wrappers (ravel, dispatch: ~1.5 us a call, ~7 calls a recall).
_max = np.maximum.reduce  # `values.max()` of a 1-D array without its Python wrapper (~0.7 us)
_NO_SLOTS = np.empty(0, np.int64)
_NO_FLOATS = np.empty(0, np.float64)
_NO_BOOLS = np.empty(0, bool)
_EMPTY = Pool(
    {}, None, [], _NO_SLOTS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_BOOLS,
    _NO_FLOATS, _NO_BOOLS,
)  # fmt: skip
_SIGNALS = ("entity_hits", "corroboration", "pinned", "stated_at", "dated")


def _live_pool(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
    cosines: Floats | None,
    scope: npt.NDArray[np.bool_] | None,
    lanes: Mapping[str, Floats],
    tally: Floats | None,
    weights: Counter[str],
    query_weight: float,
) -> tuple[Pool, Floats | None]:
    """`weights`: the query's terms counted; `query_weight`: theirs (`LexicalIndex.query_weight`),
    computed once a recall (the second hop scales its lent words by it, the pool keeps it)."""
    own: Floats | None = None
    if query.mode is RecallMode.HYBRID and query.fusion.expand_docs > 0:
        slots, bm25, cosines, own = _expand(
            index, query, query_terms, cosines, scope, weights, query_weight
        )
        if cosines is not None and scope is not None:  # the hop's pull reached every slot
            cosines = np.where(scope[: cosines.size], cosines, 0.0)
    else:
        found = index.weighted(weights)
        slots, bm25 = found.slots, found.bm25
    if cosines is not None:
        if query.mode is RecallMode.SEMANTIC:
            slots = np.flatnonzero(cosines > 0)
            bm25 = np.zeros(slots.size, np.float64)
        else:  # hybrid: the lexical hits plus the semantically closest memories
            near = _top_set(cosines, SEMANTIC_POOL)
            merged = _union(slots, near)
            bm25 = _spread(merged, slots, bm25)
            own = None if own is None else _spread(merged, slots, own)
            slots = merged
    if lanes:  # the memories formed in the most similar situation, whatever their text says
        near = _union(*[_top_set(r * index.alive[: r.size], LANE_POOL) for r in lanes.values()])
        merged = _union(slots, near)
        bm25 = _spread(merged, slots, bm25)
        own = None if own is None else _spread(merged, slots, own)
        slots = merged
    keep = _filtered(memories, index, query, slots, scope)
    if keep is not None:
        slots, bm25 = slots[keep], bm25[keep]
        own = None if own is None else own[keep]
    pool = Pool(
        source=memories,
        index=index,
        retired=[],
        slots=slots,
        bm25=bm25,
        cosine=cosines[slots] if cosines is not None else np.zeros(slots.size, np.float64),
        entity_hits=None,
        corroboration=None,
        pinned=None,
        stated_at=None,
        dated=None,
        lanes={lane: relevance[slots] for lane, relevance in lanes.items()},
        entity_tally=tally,
        own_bm25=own,
        query_weight=query_weight,
    )
    return pool, cosines


def _union(*parts: Ints) -> Ints:
    """`np.union1d` of `parts` (their distinct values, ascending), by a stable sort (timsort,
    which merges the ascending runs candidates come in) and a compare with the next value.
    numpy 2's `unique` hashes the values, then sorts what it kept: a hybrid recall's 3,000
    lexical hits and semantic pool took ~280 us that way on the benchmark machine (30,000:
    ~4 ms), ~8 us this way (~60 us)."""
    merged = np.concatenate(parts)
    merged.sort(kind="stable")
    keep = np.empty(merged.size, bool)
    keep[:1] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    found: Ints = merged[keep]
    return found


def _spread(merged: Ints, slots: Ints, values: Floats) -> Floats:
    """`values` of `slots` laid out over `merged` (a sorted superset of them), 0 elsewhere."""
    out = np.zeros(merged.size, np.float64)
    out[np.searchsorted(merged, slots)] = values
    return out


def _filtered(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    slots: Ints,
    scope: npt.NDArray[np.bool_] | None,
) -> npt.NDArray[np.bool_] | None:
    """Which live `slots` pass the query's filters (scope, tag, `as_of`, category); None when
    the query has none (every slot passes)."""
    filtered = scope is not None or query.tag is not None or query.as_of is not None
    if not filtered and query.category is None:
        return None
    keep = np.ones(slots.size, bool)
    if scope is not None:
        keep &= scope[slots]
    if query.tag is not None:
        # A mask over the slots, read at `slots`: what `np.isin` answers (~21 us for 3,000
        # slots with numpy 2 on the benchmark machine, ~3 this way).
        tagged = np.zeros(index.slot_count, bool)
        tagged[index.tagged(query.tag)] = True
        keep &= tagged[slots]
    if query.as_of is not None:
        keep &= index.created_at[slots] <= query.as_of
    if query.category is not None:
        wanted = query.category
        keep &= np.fromiter(
            (kind_of(memories[index.doc_id(int(s))]) == wanted for s in slots),
            bool,
            slots.size,
        )
    return keep


def _past_ttl(
    index: LexicalIndex, retention: Mapping[str, int], at_ms: int, slots: Ints | None = None
) -> npt.NDArray[np.bool_]:
    """Which live `slots` (None: every slot) hold a memory past its category's TTL at `at_ms`:
    `core.retention.past_ttl` over the index's columns (category, pin, stated at)."""
    n = index.slot_count
    if slots is None:
        alive, pinned = index.alive[:n], index.pinned[:n]
        stated_at, category = index.stated_at[:n], index.category[:n]
    else:
        alive, pinned = index.alive[slots], index.pinned[slots]
        stated_at, category = index.stated_at[slots], index.category[slots]
    past = np.zeros(stated_at.size, bool)
    for kind, days in retention.items():  # a TTL or two: a compare per kind beats a gather
        past |= (category == category_code(kind)) & (stated_at < at_ms - days * DAY_MS)
    past &= alive
    past &= ~pinned
    return past


def expired_slots(index: LexicalIndex, retention: Mapping[str, int], at_ms: int) -> Ints:
    """The live slots whose memory is past its category's TTL at `at_ms` (none, with nothing
    computed, without retention)."""
    n = index.slot_count
    if not retention or not n:
        return _NO_SLOTS
    # Nothing stated before the shortest TTL ago: nothing expired (one pass, no gather).
    if float(index.stated_at[:n].min()) >= at_ms - min(retention.values()) * DAY_MS:
        return _NO_SLOTS
    return np.flatnonzero(_past_ttl(index, retention, at_ms))


def _expired_slots(index: LexicalIndex, query: RecallQuery) -> Ints:
    """`expired_slots` at the query's time (none for a history read, which shows retired
    records too)."""
    if not query.retention or query.include_superseded:
        return _NO_SLOTS
    at = query.as_of if query.as_of is not None else query.now_ms
    return expired_slots(index, query.retention, at)


def _top(values: Floats, k: int) -> Ints:
    """Indices of the `k` largest positive values."""
    positive = (values > 0).nonzero()[0]
    if positive.size > k:
        positive = positive[(-values[positive]).argpartition(k - 1)[:k]]
    return positive


def _top_matched(values: Floats, k: int) -> Ints:
    """`_top` of values that are all positive (a `LexicalIndex.matching`'s bm25): the same
    partition of the same array, without looking for the positive ones first (a compare, a
    `nonzero` and a copy of ~20,000 matches at 100k memories, on a tie among the first hits)."""
    if values.size > k:
        found: Ints = (-values).argpartition(k - 1)[:k]
        return found
    return np.arange(values.size)


_HIGH_MIN = 2048  # values past which `_top_untied` may look at the high ones alone
_HIGH_SHARE = 0.5  # of the best bm25: the high values (a handful of a big bank's matches)


def _top_set(values: Floats, k: int, share: float = 0.0) -> Ints:
    """`_top` as a set (ascending indices), for callers that use it as one. A partition of the
    values finds the k-th and (k+1)-th largest; when they differ the set is exactly the values
    at or above the k-th (numpy's argpartition, which `_top` runs, takes several times as long
    on a big pool). On a tie there the set is whatever `_top`'s partition picks: it runs."""
    found = _top_untied(values, k, share)
    return found if found is not None else np.sort(_top(values, k))


def _top_untied(values: Floats, k: int, share: float = 0.0) -> Ints | None:
    """`_top_set` when no tie at the k-th value leaves the choice to a partition, else None.

    `share` > 0 (for bm25, whose best few stand far above the bulk): a big array's values at or
    above `share` of its best are looked at alone when more than `k` and at most an eighth of
    them: the k-th and (k+1)-th largest are among them, and so is every value at or above the
    k-th, so the set (and a tie) is the same (at 100k memories, a partition of ~30,000 matches
    took ~200 us; this ~40)."""
    n = values.size
    if n <= k:
        return (values > 0).nonzero()[0]
    if share > 0.0:
        narrowed = _high_top(values, k, share)
        if narrowed is not None:  # else none was found there, or a tie: the whole array says
            return narrowed
    bounds = values.copy()  # `np.partition` without its wrappers (as `kth_value`)
    bounds.partition((n - k - 1, n - k))
    kth, after = float(bounds[n - k]), float(bounds[n - k - 1])
    if kth <= 0.0:  # fewer than k positive values: every one of them
        return (values > 0).nonzero()[0]
    return (values >= kth).nonzero()[0] if kth > after else None


def _high_top(values: Floats, k: int, share: float) -> Ints | None:
    """`_top_untied` of a big array from its values at or above `share` of the best alone, when
    they are more than `k` and at most an eighth of it and no tie sits at the cut; else None."""
    high = _high_rows(values, k, share)
    if high is None:
        return None
    within = _top_untied(values[high], k)
    return None if within is None else high[within]


def _high_rows(values: Floats, k: int, share: float) -> Ints | None:
    """The positions (ascending) of a big array's values at or above `share` of its best when
    they are more than `k` and at most an eighth of it, else None. They hold the `k` + 1 largest
    values and every value equal to the k-th: a tie at the k-th place is there whole."""
    n = values.size
    if n <= _HIGH_MIN:
        return None
    best = float(_max(values))
    if best <= 0.0:
        return None
    high = (values >= share * best).nonzero()[0]
    return high if k < high.size <= n // 8 else None


def _first_found(
    index: LexicalIndex, acc: Floats, scope: npt.NDArray[np.bool_] | None
) -> Candidates:
    """The first pass's hits in scope (out-of-scope hits lend the hop nothing)."""
    found = index.matching(acc)
    if scope is not None:
        found = Candidates(found.slots[scope[found.slots]], found.bm25[scope[found.slots]])
    return found


def _first_hits(
    index: LexicalIndex, acc: Floats, scope: npt.NDArray[np.bool_] | None, k: int
) -> tuple[Ints, Candidates | None]:
    """The second hop's first hits as a set (ascending slots): the `k` best of the first pass
    (`acc`), as `_top_set` of its matches in scope takes them; and the matches, when they were
    needed (None: not computed)."""
    tied = False  # the high values of `acc` tie at the k-th place
    if scope is None and len(index) == index.slot_count:
        # Every slot alive and in scope: a slot is its place in `acc`, whose high values give
        # the first hits' set without `matching` (a pass over every slot and a gather).
        high = _high_rows(acc, k, _HIGH_SHARE)
        if high is not None:
            within = _top_untied(acc[high], k)
            if within is not None:
                return high[within], None
            tied = True
    found = _first_found(index, acc, scope)
    # A partition: several times quicker than `_top`'s argpartition on a big bank. A tie among
    # the high values is the matches' tie too (they hold every value at or above it): straight
    # to `_top`, where `_top_set` would find it again first (~1 query of 3 at 100k on LoCoMo,
    # ~0.1 ms each).
    if tied:
        return found.slots[np.sort(_top_matched(found.bm25, k))], found
    return found.slots[_top_set(found.bm25, k, _HIGH_SHARE)], found


def _expand(
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
    cosines: Floats | None,
    scope: npt.NDArray[np.bool_] | None = None,
    weights: Counter[str] | None = None,
    query_weight: float | None = None,
) -> tuple[Ints, Floats, Floats | None, Floats | None]:
    """A second hop (pseudo-relevance feedback): the best first hits of each arm lend their most
    telling terms to a second lexical pass (weighted `expand_weight` against the query's own), and
    their vectors pull the query vector toward them (`expand_vector`, a second centred pass
    over the matrix: it doubles the semantic arm's arithmetic). Questions whose answer is
    spread over several memories ("what activities does she do?") find the ones that share no
    word with the question but several with its first answers. One per-slot array holds both
    passes, so the lexical hop costs a second BM25 accumulation and nothing more; with a
    relevance threshold, a copy of the first pass is kept for it (the fourth value, per
    candidate; None without)."""
    fusion = query.fusion
    # The query's terms counted and their weight, when the caller has them already (a recall
    # computes them once for the hop and the pool).
    weights = Counter(query_terms) if weights is None else weights
    query_weight = index.query_weight(weights) if query_weight is None else query_weight
    acc = index.accumulate(weights)
    found: Candidates | None = None
    first: Ints | None = None
    if acc is not None:
        first, found = _first_hits(index, acc, scope, fusion.expand_docs)
    extra: dict[str, float] | None = None
    exclude = set(query_terms)
    if first is None or acc is None:
        first = _NO_SLOTS
    elif cosines is None:
        # Their order only breaks ties between expansion terms, so when one sits at the cut,
        # the first hits are taken in `_top`'s order, as ever.
        extra = index.settled_expansion(first.tolist(), exclude, fusion.expand_terms)
        if extra is None:
            found = found if found is not None else _first_found(index, acc, scope)
            first = found.slots[_top_matched(found.bm25, fusion.expand_docs)]
    if cosines is not None:
        first = _union(first, _top_set(cosines, fusion.expand_docs))
    if first.size and fusion.expand_vector > 0 and cosines is not None:
        # The first hits' mean vector, compared as the query is (centred, on the same scale).
        toward = index.vectors[first].mean(axis=0).tolist()
        pulled = index.centered_cosine(toward, fusion.center)[: cosines.size]
        cosines = cosines + fusion.expand_vector * pulled
    if extra is None:
        extra = index.expansion(first.tolist(), exclude, fusion.expand_terms)
    own: Floats | None = None
    if extra and fusion.expand_weight > 0 and acc is not None:
        if query.threshold > 0.0:
            own = acc.copy()  # the question's own words, before the lent ones are added in
        # In relevance terms: the second pass counts `expand_weight` of the question's own words.
        scale = fusion.expand_weight * query_weight
        scale /= max(index.query_weight(extra), 1e-9)
        acc = index.accumulate({term: w * scale for term, w in extra.items()}, into=acc)
    if acc is None:
        return _NO_SLOTS, _NO_FLOATS, cosines, None
    merged = index.matching(acc)
    return merged.slots, merged.bm25, cosines, None if own is None else own[merged.slots]


def history_records(
    memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery
) -> Iterator[Memory]:
    """The records history and time travel rank beside the live index (`include_superseded`,
    `as_of`): the retired ones the query admits, and each memory changed since `as_of` as its
    log had it then."""
    then = query.as_it_was or {}
    for memory in memories.values():
        if memory.id in then:
            memory = then[memory.id]
        elif memory.id in index:
            continue
        if _eligible(memory, query):
            yield memory


def _with_retired(
    pool: Pool,
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    query_terms: list[str],
) -> Pool:
    """The index holds live records only; history and time travel also score the retired ones
    (few: they are scored one by one, lexically; `mode=semantic` by the cosine of their
    `history_vectors`)."""
    wanted = set(query_terms)
    vectors = query.history_vectors if query.mode is RecallMode.SEMANTIC else None
    asked = unit_row(query.vector) if vectors is not None and query.vector else None
    extra: list[tuple[Memory, float, float, bool]] = []
    cosines: list[float] = []
    for memory in history_records(memories, index, query):
        if asked is not None and vectors is not None:
            vector = vectors.get(memory.id)
            if vector is None or vector.size != asked.size:
                continue  # no vector of the query's model: the arm cannot rank it
            cosine = float(unit_row(vector) @ asked)
            if cosine <= 0.0:
                continue  # not similar at all, as a live vector at 0 or under (`candidates`)
            bm25 = 0.0
        else:
            bm25 = index.score_document(query_terms, document_terms(memory))
            if bm25 <= 0:
                continue
            cosine = 0.0
        doc = indexed(memory, with_terms=False, with_told=False)
        extra.append((memory, bm25, float(len(doc.entity_terms & wanted)), doc.dated))
        cosines.append(cosine)
    if not extra:
        return pool
    n = len(extra)
    entity_hits, corroboration, pinned, stated_at, dated = (pool.signal(name) for name in _SIGNALS)
    return Pool(
        source=pool.source,
        index=pool.index,
        retired=pool.retired + [m for m, _, _, _ in extra],
        slots=np.concatenate((pool.slots, np.full(n, -1, np.int64))),
        bm25=np.concatenate((pool.bm25, np.asarray([b for _, b, _, _ in extra]))),
        own_bm25=None
        if pool.own_bm25 is None
        else np.concatenate((pool.own_bm25, np.asarray([b for _, b, _, _ in extra]))),
        cosine=np.concatenate((pool.cosine, np.asarray(cosines, np.float64))),
        entity_hits=np.concatenate((entity_hits, np.asarray([e for _, _, e, _ in extra]))),
        corroboration=np.concatenate(
            (corroboration, np.asarray([float(m.corroboration) for m, _, _, _ in extra]))
        ),
        pinned=np.concatenate((pinned, np.asarray([m.pinned for m, _, _, _ in extra]))),
        stated_at=np.concatenate(
            (stated_at, np.asarray([float(m.last_stated_at) for m, _, _, _ in extra]))
        ),
        dated=np.concatenate((dated, np.asarray([d for _, _, _, d in extra], bool))),
        lanes={lane: np.concatenate((r, np.zeros(n))) for lane, r in pool.lanes.items()},
        # Per live slot, as before (`_unnamed_demoted` reads it; the column above scores).
        entity_tally=pool.entity_tally,
    )


def _row_sum(index: LexicalIndex, rows: npt.NDArray[np.bool_], count: int) -> Floats:
    """The sum of the vectors at `rows` (a mask over the first slots; `count` of them set): a
    few rows are gathered, a big share of the bank is one product over every row (BLAS) rather
    than a copy of most of the matrix."""
    if 4 * count < rows.size:
        gathered: Floats = index.vectors[np.flatnonzero(rows)].sum(axis=0, dtype=np.float64)
        return gathered
    total: Floats = (rows.astype(np.float32) @ index.vectors[: rows.size]).astype(np.float64)
    return total


ENTITY_CENTRE_PRIOR = 8.0  # an entity of this many memories moves the centre half as far


def _centre(index: LexicalIndex, tally: Floats | None, strength: float) -> Floats | None:
    """The centre of the hybrid's semantic arm when the query names an entity (None: the bank's
    mean, `LexicalIndex.vector_mean`). Every memory about Ana shares Ana's direction, so with the
    bank's centre a bare "Ana: Thanks!" is near every question about her; the entity boost
    already counts the name, and with the mean of the memories carrying it as the centre this
    arm ranks what is said about her. The centre moves from the bank's mean toward theirs by
    `strength` × their entity specificity (`tally`: 1 - the share of the bank carrying it), at
    most all the way, and less for an entity of a few memories (`ENTITY_CENTRE_PRIOR`): the
    bank's owner (`user`, on nearly every memory) and a one-off name hardly move it. One
    matrix-vector product (a gather for a small entity), only for a query that names one."""
    if tally is None or strength <= 0.0 or index.vector_width == 0:
        return None
    n = min(tally.size, index.slot_count)
    carrying = (tally[:n] > 0.0) & index.has_vector[:n] & index.alive[:n]
    count = int(np.count_nonzero(carrying))
    if count == 0:
        return None
    bank = index.vector_mean()
    # Shrunk as `vector_mean` is, so an entity on every memory has the bank's very mean.
    own = _row_sum(index, carrying, count) / (count + CENTER_PRIOR)
    specificity = float(tally[:n][carrying].mean())
    share = min(strength * specificity, 1.0) * count / (count + ENTITY_CENTRE_PRIOR)
    centre: Floats = bank + share * (own - bank)
    return centre


QUESTION_FORM_MIN = 8  # embedded questions and statements a bank needs for the direction


@dataclass(slots=True)
class _Form:
    """What `_question_form` knows of one index: which slots ask something (read once per slot:
    a slot's text never changes, a new text takes a new slot) and the direction last computed."""

    ids: list[str]  # the index's slot ids the flags were read for (a compaction replaces them)
    asking: npt.NDArray[np.bool_]
    key: tuple[int, bytes] | None = None  # (version, mean vector) the direction is for
    direction: Floats | None = None


_FORMS: weakref.WeakKeyDictionary[LexicalIndex, _Form] = weakref.WeakKeyDictionary()


def _question_form(memories: Mapping[str, Memory], index: LexicalIndex) -> Floats | None:
    """The unit direction from the mean vector of the bank's embedded statements to that of its
    embedded questions (`core.text.asks`), or None when it holds fewer than `QUESTION_FORM_MIN`
    of either (a bank of extracted facts asks nothing). Each slot's text is read once (the
    first recall of a process reads them all: ~10 ms at 10k memories on a busy 2-core box);
    the direction (one sum over the questions' rows) is computed again only when the bank's
    slots or vectors changed (its version and mean vector are the key). Only for an embedded
    hybrid query: nothing here runs without an embedder."""
    ids, n = index.slot_ids(), index.slot_count
    form = _FORMS.get(index)
    if form is None or form.ids is not ids or form.asking.size > n:
        form = _FORMS[index] = _Form(ids, np.zeros(0, bool))
    done = form.asking.size
    if done < n:
        get = memories.get
        texts = [getattr(get(doc_id), "text", "") for doc_id in ids[done:n]]
        flags = np.fromiter(map(asks, texts), bool, n - done)
        form.asking = np.concatenate((form.asking, flags))
    key = (index.version, index.vector_mean().tobytes())
    if form.key == key:
        return form.direction
    embedded = index.has_vector[:n] & index.alive[:n]
    asking = form.asking & embedded
    stating = embedded & ~form.asking
    questions, statements = int(asking.sum()), int(stating.sum())
    direction: Floats | None = None
    if min(questions, statements) >= QUESTION_FORM_MIN:
        asked = _row_sum(index, asking, questions)
        # Every live vector's sum is the running mean's numerator: the statements' is the rest.
        every = index.vector_mean() * (questions + statements + CENTER_PRIOR)
        towards = asked / questions - (every - asked) / statements
        norm = float(np.linalg.norm(towards))
        direction = towards / norm if norm > 1e-9 else None
    form.key, form.direction = key, direction
    return direction


def _without_form(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    vector: tuple[float, ...],
    strength: float,
) -> tuple[float, ...]:
    """The query's vector with `strength` of its question form taken out (`_question_form`);
    as it was when the bank has no such direction or the width differs."""
    if strength <= 0.0 or len(vector) != index.vector_width:
        return vector
    direction = _question_form(memories, index)
    if direction is None:
        return vector
    q = np.asarray(vector, np.float64)
    return tuple((q - strength * float(q @ direction) * direction).tolist())


def _semantic_reference(
    index: LexicalIndex, cosines: Floats, quantile: float
) -> tuple[float, float]:
    """(reference, best) cosine of the query over the bank's embedded memories: the reference is
    the `quantile` of them all (what an unrelated memory scores with this model), best the top."""
    # Similar at all (> 0): a memory the arm says nothing about does not lower the reference.
    embedded = cosines[
        index.has_vector[: cosines.size] & index.alive[: cosines.size] & (cosines > 0)
    ]
    if embedded.size == 0:
        return 0.0, 0.0
    k = min(int(quantile * (embedded.size - 1)), embedded.size - 1)
    reference = kth_value(embedded, k)
    return reference, float(embedded.max())


def _scores(
    pool: Pool, query: RecallQuery, semantic: Floats | None, rows: Ints | None = None
) -> Floats:
    """The fused score of the candidates at `rows` (None: every one), in that order. Every step
    is elementwise (the score method; RRF ranks over the whole pool and gets every row), so a
    row scores the same floats whichever others are scored with it."""
    now_ms = query.as_of if query.as_of is not None else query.now_ms
    lanes, content_off = _lane_arms(pool, query, rows)
    # A query that names no entity scores 0 on that boost for every memory: no array of zeros
    # (a live-only pool without a tally; a pool with retired records stores its own column).
    named = pool.entity_hits is not None or pool.entity_tally is not None
    # The candidates' index slots, read once for every signal below (a gather each otherwise).
    slots = pool.slots if rows is None else pool.slots[rows]
    stated = pool.signal("stated_at", rows, slots)
    arms = Arms(
        bm25=pool.bm25 if rows is None else pool.bm25[rows],
        query_weight=pool.query_weight,
        entity_hits=pool.signal("entity_hits", rows, slots) if named else None,
        corroboration=pool.signal("corroboration", rows, slots),
        pinned=pool.signal("pinned", rows, slots),
        age_ms=now_ms - stated,
        semantic=semantic if semantic is None or rows is None else semantic[rows],
        dated=pool.signal("dated", rows, slots) if _asks_when(query.text) else None,
        in_span=_in_span(pool, _span_window(query), rows, slots=slots, stated=stated),
        lanes=lanes,
        content_off=content_off,
    )
    policy = _policy(query.text)
    return fused_scores(
        arms, half_life_days=query.half_life_days, policy=policy, fusion=query.fusion
    )


def _lane_shares(pool: Pool, query: RecallQuery) -> dict[str, float]:
    """The normalised weights of content and of the lanes this recall asks and the bank holds."""
    return query.lane_weights.shares(tuple(lane for lane in pool.lanes))


def _lane_arms(
    pool: Pool, query: RecallQuery, rows: Ints | None = None
) -> tuple[tuple[tuple[float, Floats], ...], bool]:
    if not pool.lanes:  # content alone: its share is 1 whatever the weights (`shares`)
        return (), False
    shares = _lane_shares(pool, query)
    content = shares.get("content", 0.0)
    lanes = tuple(
        (
            shares[lane] / content if content > 0.0 else shares[lane],
            relevance if rows is None else relevance[rows],
        )
        for lane, relevance in pool.lanes.items()
        if lane in shares
    )
    return lanes, content <= 0.0


def _blended(
    pool: Pool, query: RecallQuery, semantic: Floats | None, rows: Ints | None = None
) -> Floats:
    """Seed 004's blended similarity in [0, 1], what `relevance_threshold` is compared with:
    content's similarity (the stronger of its arms, capped at 1) and each asked lane's, by their
    normalised weights. Boosts and recency are ranking, not similarity: they are left out.
    Of the candidates at `rows` (None: every one)."""
    # The question's own words only: a memory sharing none with it is not similar to it because
    # the second hop lent it the best hit's words ("Lisbon" → "The user works as a nurse").
    bm25 = pool.bm25 if pool.own_bm25 is None else pool.own_bm25
    content = lexical_relevance(bm25 if rows is None else bm25[rows], pool.query_weight)
    # The arm's absolute similarity (`_similarity`), not its relevance to the best match.
    similarity = pool.similarity if pool.similarity is not None else semantic
    if similarity is not None:
        content = np.maximum(content, similarity if rows is None else similarity[rows])
    # Seed 004: a threshold of 1 is "exact match only". BM25 over the question's weight is 1 or
    # more for any memory no longer than the bank's average holding every question word ("chess"
    # of "Rui plays chess."), and keeps a longer one below 1 even when the question is its text
    # word for word: short of 1 for every memory, then 1 for the one whose text is the question.
    # No threshold below 1 tells the difference.
    content = np.minimum(content, _SHORT_OF_EXACT)
    content = np.maximum(content, _verbatim(pool, query, content, rows))
    shares = _lane_shares(pool, query)
    blended: Floats = shares.get("content", 0.0) * np.clip(content, 0.0, 1.0)
    for lane, relevance in pool.lanes.items():
        blended = blended + shares.get(lane, 0.0) * (relevance if rows is None else relevance[rows])
    return blended


_SHORT_OF_EXACT = float(np.nextafter(1.0, 0.0))  # the most similar a memory is but its text


def _verbatim(pool: Pool, query: RecallQuery, content: Floats, rows: Ints | None) -> Floats:
    """1.0 for each candidate (at `rows`; None: all) whose text is the query's (`normalize`d),
    0 otherwise. Only those some words matched and the threshold would drop are read."""
    out: Floats = np.zeros(content.size, np.float64)
    wanted = normalize(query.text)
    positions = np.arange(content.size) if rows is None else rows
    for k in np.flatnonzero((content > 0.0) & (content < query.threshold)).tolist():
        text = pool.memory(int(positions[k])).text
        # Spaces collapse, but lowercase may lengthen ("İ" is two characters): at most twice.
        if 2 * len(text) >= len(wanted) and normalize(text) == wanted:
            out[k] = 1.0
    return out


def _keep(
    scores: Floats, pool: Pool, semantic: Floats | None, fusion: Fusion, rows: Ints | None = None
) -> npt.NDArray[np.bool_]:
    """The relevance cutoff: weak matches (one common word) are noise next to a strong hit, and a
    memory neither arm finds relevant at all (`min_relevance`) is never recalled. But a memory
    either arm alone ranks in its top `ARM_TOP` on real evidence (a fifth of the question's
    words or half its best match's, or closer than the bank's unrelated reference) is always
    kept: the fusion may not undo what an arm is sure of.

    `scores` are those of the candidates at `rows` (None: every one); `rows` must hold the
    pool's best score and each arm's top `ARM_TOP` (`_contenders` sees to it)."""
    bm25 = pool.bm25 if rows is None else pool.bm25[rows]
    lexical = lexical_relevance(bm25, pool.query_weight)
    arm = semantic if semantic is None or rows is None else semantic[rows]
    keep = scores >= RELEVANCE_CUTOFF * float(_max(scores))
    if not _no_minimum(pool, fusion, semantic):
        keep &= lexical + (arm if arm is not None else 0.0) >= fusion.min_relevance
    # The best lexical relevance of the whole pool: bm25 over a positive weight is monotonic, so
    # the quotient of the best bm25 is the best quotient, to the last bit.
    best = _best_lexical(pool) if lexical.size else 0.0
    # Long queries (extraction asks with a whole chat message) dilute every match: there, half of
    # the best match is real evidence too; a pool of common-word matches only is not.
    evident = (lexical >= ARM_EVIDENCE) | (
        (lexical >= ARM_EVIDENCE_SHARE * best) & (lexical >= ARM_EVIDENCE_MIN)
    )
    keep |= _top_mask(pool, "bm25", rows) & evident
    if semantic is not None and arm is not None:
        keep |= _top_mask(pool, "semantic", rows) & (arm > 0.0)
    return keep


def _no_minimum(pool: Pool, fusion: Fusion, semantic: Floats | None) -> bool:
    """Whether every candidate passes `min_relevance` whatever its arms: a lexical-only pool's
    relevance is bm25 (≥ 0) over a positive weight, never under a minimum of 0 or less (the
    default), so the comparison is skipped (with a semantic arm it is made)."""
    return fusion.min_relevance <= 0.0 and semantic is None and pool.query_weight > 0.0


def _best_lexical(pool: Pool) -> float:
    if pool.query_weight <= 0.0 or not pool.bm25.size:
        return 0.0
    return pool.best_bm25() / pool.query_weight


def _top_mask(pool: Pool, arm: str, rows: Ints | None = None) -> npt.NDArray[np.bool_]:
    """Which candidates (at `rows`; None: all) are among the `ARM_TOP` best of `arm` (bm25 or
    semantic) over the whole pool (a partition, not a sort). `rows` ascending and distinct, as
    `_contenders` gives them: each top position is looked up among them (a mask over the whole
    pool was a pass over tens of thousands of candidates at 100k memories for three)."""
    top = _arm_top(pool, arm)
    if rows is None:
        mask = np.zeros(len(pool), bool)
        mask[top] = True
        return mask
    mask = np.zeros(rows.size, bool)
    if rows.size:
        at = np.minimum(np.searchsorted(rows, top), rows.size - 1)
        mask[at[rows[at] == top]] = True
    return mask


def _lane_relevance(
    lanes: LaneIndexes | None,
    index: LexicalIndex,
    query: RecallQuery,
    scope: npt.NDArray[np.bool_] | None,
) -> dict[str, Floats]:
    """Per asked lane with weight and holders, its relevance of every slot (hybrid only), scaled
    over the memories `scope` admits (None: all) as the content arms are. A lane that finds
    nothing still counts, at 0 for every memory: the blend (and the threshold on it) must not
    change because another memory's stored context happens to share a word with the window."""
    if lanes is None or query.mode is not RecallMode.HYBRID:
        return {}
    out: dict[str, Floats] = {}
    for lane in query.lanes.asked:
        if float(getattr(query.lane_weights, lane)) <= 0.0:
            continue
        relevance = lanes.relevance(lane, query.lanes, index, scope)
        if relevance is not None:
            out[lane] = relevance
    return out


def _admitted(
    memories: Mapping[str, Memory], index: LexicalIndex, query: RecallQuery, expired: Ints
) -> npt.NDArray[np.bool_] | None:
    """Per slot: whether the query's subject scope, tag, category and `as_of` admit it (a memory
    changed since `as_of` is ranked from its record then instead) and it is not one of the
    `expired` slots (`_expired_slots`); None when they admit every slot. The arms, the semantic
    pool and the second hop only look at these, so a memory outside the filter never lends its
    words to the ones inside (a tag-, category-scoped or time-travel recall returned memories
    the question shares nothing with, because another tag's or category's memory, or one saved
    later, matched it)."""
    mask = index.in_scope(query.subject) if query.scoped else None
    count = index.slot_count
    if query.tag is not None:
        tagged = np.zeros(count, bool)
        tagged[index.tagged(query.tag)] = True
        mask = tagged if mask is None else mask & tagged
    if query.category is not None:
        kind = _of_kind(memories, index, query.category)
        mask = kind if mask is None else mask & kind
    if query.as_of is not None:
        then = index.created_at[:count] <= query.as_of
        if not then.all():  # every memory older: nothing to leave out (the hop's fast path stays)
            mask = then if mask is None else mask & then
    if query.as_it_was:  # their text now is not what they said then: ranked from their record
        slots = [index.slot(memory_id) for memory_id in query.as_it_was]
        since = np.ones(count, bool)
        since[[slot for slot in slots if slot >= 0]] = False
        mask = since if mask is None else mask & since
    if expired.size:
        unexpired = np.ones(count, bool)
        unexpired[expired] = False
        mask = unexpired if mask is None else mask & unexpired
    return mask


def _of_kind(
    memories: Mapping[str, Memory], index: LexicalIndex, wanted: str
) -> npt.NDArray[np.bool_]:
    """Per slot: whether its memory is of category `wanted`. A pass over the bank in Python: the
    index keeps no category column, and a category-scoped recall is an explicit caller's ask,
    never the hook's per-turn one."""
    kind = np.zeros(index.slot_count, bool)
    slots = [index.slot(i) for i, memory in memories.items() if kind_of(memory) == wanted]
    kind[[slot for slot in slots if slot >= 0]] = True
    return kind


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
    query_terms = terms(query.text, lambda term: index.document_frequency(term) > 0)
    if query.limit <= 0 or (query.mode is RecallMode.SEMANTIC and not semantic_ready):
        return _EMPTY
    expired = _expired_slots(index, query)
    scope = _admitted(memories, index, query, expired)
    lane_relevance = _lane_relevance(lanes, index, query, scope)
    if not query_terms and not semantic_ready and not lane_relevance:
        return _EMPTY
    cosines = None
    tally = index.entity_tally(query_terms)
    if semantic_ready and query.vector:
        # The hybrid's arm ranks by what sets a memory apart from the bank's others (centred
        # cosine); `mode=semantic` stays plain cosine, the score its callers threshold on.
        if query.mode is RecallMode.HYBRID:
            vector = _with_answer_type(query.vector, query.type_vector, query.fusion.answer_type)
            vector = _without_form(memories, index, vector, query.fusion.question_form)
            centre = _centre(index, tally, query.fusion.entity_center)
            cosines = index.centered_cosine(vector, query.fusion.center, centre)
        else:
            cosines = index.cosine(query.vector)
    if cosines is not None and scope is not None:
        # Out of scope is "not similar": the semantic pool and the hop's vector pull skip it.
        cosines = np.where(scope[: cosines.size], cosines, 0.0)
    if scope is not None:  # the lanes never bring in a memory out of the speaker's scope
        lane_relevance = {
            lane: np.where(scope[: r.size], r, 0.0) for lane, r in lane_relevance.items()
        }
    weights = Counter(query_terms)
    query_weight = index.query_weight(weights)
    pool, cosines = _live_pool(
        memories, index, query, query_terms, cosines, scope, lane_relevance, tally, weights,
        query_weight,
    )  # fmt: skip
    history = query.include_superseded or query.as_of is not None
    if history and (query.mode is not RecallMode.SEMANTIC or query.history_vectors is not None):
        pool = _with_retired(pool, memories, index, query, query_terms)
        pool.query_weight = query_weight  # a pool with retired records is a new one
    if cosines is not None:
        reference, best = _semantic_reference(index, cosines, query.fusion.semantic_reference)
        pool.semantic = semantic_relevance(pool.cosine, reference, best)
        if query.mode is RecallMode.HYBRID and not index.all_embedded():
            _stand_in_for_missing_vectors(pool, index)
        if query.threshold > 0.0:
            pool.similarity = _similarity(pool, index, reference)
    pool.expired = bool(expired.size) and query.as_of is None
    _who_is_asked(pool, index, query, query_terms)
    return pool


def _who_is_asked(
    pool: Pool, index: LexicalIndex, query: RecallQuery, query_terms: list[str]
) -> None:
    """Set `pool.speaker_only` (`_others_demoted`) and `pool.named_tally` (`_unnamed_demoted`):
    whom the question is about."""
    others = [term for term in query_terms if term != USER_ENTITY]
    if query.mode is RecallMode.HYBRID and query.fusion.others < 1.0 and len(pool):
        pool.speaker_only = _asks_about_speaker(query.text) and index.entity_tally(others) is None
    pool.named_tally = pool.entity_tally
    if pool.named_tally is not None and USER_ENTITY in query_terms and _asks_how(query.text):
        # "How do I run the tests?" names the user by its "I", but the answer is a procedure,
        # rarely tagged with them: the project's memories are not scored down beside the user's.
        pool.named_tally = index.entity_tally(others) if others else None


def _with_answer_type(
    vector: tuple[float, ...], kind: tuple[float, ...] | None, share: float
) -> tuple[float, ...]:
    """`vector` with `share` of it given to the answer type's (`Fusion.answer_type`): a list
    question's answers name instances of the kind it asks for and rarely its other words. The
    same vector without a type, a share of 0, or a type of another length (another model)."""
    if kind is None or share <= 0.0 or len(kind) != len(vector):
        return vector
    blended = (1.0 - share) * np.asarray(vector, np.float64) + share * np.asarray(kind, np.float64)
    return tuple(blended.tolist())


def _stand_in_for_missing_vectors(pool: Pool, index: LexicalIndex) -> None:
    """A live candidate with no vector yet (saved by a process that does not embed, or in
    flight) takes its lexical relevance as its semantic one: as if the arm agreed with the
    words. At 0 — "unrelated" — every such memory lost up to the whole semantic weight to its
    embedded peers: on LoCoMo, with the newest 10% of turns unembedded, the hybrid fell below
    recall without the arm (`bench/partial_vectors.py`)."""
    assert pool.semantic is not None
    live = pool.slots[: pool.slots.size - len(pool.retired)]
    missing = np.flatnonzero(~index.has_vector[live])
    if missing.size:
        lexical = lexical_relevance(pool.bm25[missing], pool.query_weight)
        pool.semantic[missing] = np.clip(lexical, 0.0, 1.0)


def _similarity(pool: Pool, index: LexicalIndex, reference: float) -> Floats:
    """The semantic arm's similarity on an absolute scale, what `relevance_threshold` compares
    (seed 004: "0 = return everything, 1 = exact match only"): the query's unrelated reference
    0, a memory that embeds as the query does 1. The arm's relevance is scaled to the query's
    best match instead, which every query has: the best match of a question about nothing in
    the bank passed any threshold. A memory without a vector keeps its stand-in."""
    assert pool.semantic is not None
    span = 1.0 - reference
    if span <= 1e-9:
        similarity: Floats = (pool.cosine >= 1.0).astype(np.float64)
    else:
        similarity = np.clip((pool.cosine - reference) / span, 0.0, 1.0)
    live = pool.slots[: pool.slots.size - len(pool.retired)]
    missing = np.flatnonzero(~index.has_vector[live])
    similarity[missing] = pool.semantic[missing]
    return similarity


_PRUNE_MIN = 256  # pools up to this many candidates are scored whole
_UPPER_SLACK = 1e-9  # relative: the bound's floats are summed otherwise than the score's
# Of the best bound: where the contenders search starts (any share is exact), each tried in turn
# while the candidates at or above it are too many (`_start`).
_START_SHARES = (0.3, 0.5, 0.7)


def _prunable(pool: Pool, fusion: Fusion, m: int) -> bool:
    """Whether `_contenders`' bound holds (the score method, every weight non-negative, live
    memories only, no lane) and the pool is big enough for it to pay."""
    return not (
        fusion.method is not FusionMethod.SCORE
        or pool.lanes
        or pool.retired
        or len(pool) <= max(_PRUNE_MIN, 2 * m)
        or pool.query_weight <= 0.0
        or min(fusion.lexical, fusion.semantic, fusion.entity, fusion.corroboration) < 0.0
        or min(fusion.pinned, fusion.dated, fusion.in_span) < 0.0
    )


def _contenders(
    pool: Pool, query: RecallQuery, semantic: Floats | None, reach: int
) -> tuple[Ints, Floats] | None:
    """The candidates that may be returned and their fused scores, without scoring a big pool
    whole (None: score every candidate). Exact, not a heuristic: recency's decay is at most 1 and
    every term of the score is non-negative, so a candidate's score is at most its arms' part
    (lexical, semantic, entity) plus the largest boosts any candidate has. The `4 × k` best by
    that part are scored; then every candidate whose bound reaches the k-th best score among
    them (k = limit + the tie margin, counting only candidates the per-memory filters pass) is
    scored too. Whatever is left scores below k candidates that pass every filter and is never
    returned, nor the pool's best: the cutoff and the top-k see what they saw over the whole
    pool. `reach`: how many the caller orders (the query's limit, or more). Returns (positions in
    the pool, ascending; their scores)."""
    fusion = query.fusion
    k = reach + _TIE_MARGIN
    m = 4 * k
    if not _prunable(pool, fusion, m):
        return None
    index = pool.index
    assert index is not None  # a live-only pool
    # The boosts' bound: the bank's most corroborated memory's and a pin (whole columns read in
    # order: the candidates' own would be a gather, slower), and each candidate's date boosts
    # when the question asks "when" or names a time (the only times the score counts them).
    most, pinned = index.boost_columns()
    boosts = fusion.corroboration * float(np.log1p(most))
    boosts += fusion.pinned * float(pinned)
    dates = _date_bound(pool, query)
    bm25, weight = pool.bm25, pool.query_weight
    # `key` orders the candidates by their bound and `reaching(score)` is where the bound
    # reaches `score`. With the lexical arm alone (no vector, no entity named, no date asked:
    # most queries) the bound grows with bm25, so bm25 itself is the key: no array is made.
    monotone = (
        semantic is None and pool.entity_tally is None and dates is None and fusion.lexical > 0
    )
    inside = False  # whether the arms' top sets are known to lie in `start`
    if monotone:
        key = bm25
        # Start from the candidates within 30% (or 50, 70%) of the best bm25 when they are a
        # handful (on LoCoMo at 100k: 50-1,300 of ~30,000), else from the `m` best (`_start`);
        # the top three are among them either way, found in that small set.
        start, start_at = _start(bm25, pool.best_bm25(), 2 * k, 16 * m, m)
        if "bm25" not in pool.tops:  # the start holds more than ARM_TOP: the top are in it
            values = bm25[start]
            within = _top_untied(values, ARM_TOP)
            # A tie at the last place is in the start whole (every bm25 at or above the start's
            # threshold is): broken there, not by five passes over the whole pool (~13% of
            # queries at 100k on LoCoMo, ~30,000 matches each).
            top = start[within] if within is not None else _top_tied(pool, values, ARM_TOP, start)
            if top.size == ARM_TOP:
                pool.tops["bm25"] = top
                inside = True  # the only top set (no semantic arm here), taken from the start

        def reaching(score: float) -> float:
            # (lexical × bm25 / weight + boosts)(1 + slack) ≥ score, solved for bm25 (a shade
            # low: a bound may take in more, never less).
            lowest = (score / (1.0 + _UPPER_SLACK) - boosts) * weight / fusion.lexical
            return lowest * (1.0 - _UPPER_SLACK)

    else:
        # Summed in place, in the order and with the operands a sum of new arrays had (the same
        # floats): at 100k memories each new array of ~30,000 candidates cost ~40 us.
        key = lexical_relevance(bm25, weight)  # a new array
        key *= fusion.lexical
        key += boosts
        if semantic is not None:
            key += fusion.semantic * semantic
        if pool.entity_tally is not None:
            key += fusion.entity * pool.signal("entity_hits")
        if dates is not None:
            key += dates
        key *= 1.0 + _UPPER_SLACK
        # As above: the candidates whose bound is within a share of the best when a handful,
        # else the `m` best (a partition of every candidate: ~300 us at 100k).
        start, start_at = _start(key, float(_max(key)), 2 * k, 16 * m, m)

        def reaching(score: float) -> float:
            return score

    # Where to start: any rows do (the loop below adds what the bound says is missing); the
    # `m` best by the bound usually hold the top k.
    # `start` is ascending and unique (nonzero): with the tops inside, the union is itself.
    rows = start if inside else _with_tops(pool, start, semantic)
    return _closed(pool, query, semantic, rows, key, reaching, start_at, k)


def _start(key: Floats, best: float, low: int, high: int, m: int) -> tuple[Ints, float]:
    """Where `_contenders` starts: the candidates whose `key` is at or above a share of the
    `best` (`_START_SHARES`, the first that leaves `low` to `high` of them), else the `m` best
    (a partition of every candidate); and that threshold. Past a few hundred at 30% (a question
    that asks "when" or names a time, whose date boosts lift thousands; a common word's many
    matches), a higher share is one compare over the pool where the partition was several: on
    LoCoMo at 100k memories, a third of the questions partitioned ~20,000 candidates (~100 us),
    a sixth with this."""
    for share in _START_SHARES:
        start_at = share * best
        start: Ints = (key >= start_at).nonzero()[0]
        if start.size < low:  # a higher share leaves fewer still
            break
        if start.size <= high:
            return start, start_at
    start_at = kth_value(key, key.size - m)
    return (key >= start_at).nonzero()[0], start_at


def _date_bound(pool: Pool, query: RecallQuery) -> Floats | None:
    """Each candidate's date boosts, as `_scores` counts them: `dated` when the question asks
    "when", `in_span` when it names a time; None when neither (most questions)."""
    fusion = query.fusion
    bound: Floats | None = None
    if fusion.dated and _asks_when(query.text):
        bound = fusion.dated * pool.signal("dated")
    in_span = _in_span(pool, _span_window(query), bound=True)
    if in_span is not None:
        extra: Floats = in_span.astype(np.float64)
        extra *= fusion.in_span  # in place, as `_contenders` sums the bound
        if bound is None:
            return extra
        bound += extra
    return bound


def _with_tops(pool: Pool, start: Ints, semantic: Floats | None) -> Ints:
    """`start` with each arm's top set (`_arm_top`) added, ascending."""
    tops = [_arm_top(pool, "bm25")]
    if semantic is not None:
        tops.append(_arm_top(pool, "semantic"))
    return _union(start, *tops)


def _closed(
    pool: Pool,
    query: RecallQuery,
    semantic: Floats | None,
    rows: Ints,
    key: Floats,
    reaching: Callable[[float], float],
    covered: float,
    k: int,
) -> tuple[Ints, Floats] | None:
    """`rows` scored, grown until no candidate outside them has a bound (`key` ≥
    `reaching(score)`) that reaches the k-th best passing score or the cutoff. `covered`: every
    candidate whose `key` is at least this is in `rows` (the start's threshold); `k`: how many
    best passing scores must be settled."""
    scores = _scores(pool, query, semantic, rows)
    while True:
        passes = _passes(pool, query, semantic, rows)
        passing = scores if passes is None else scores[passes]
        if passing.size < k:
            return None
        kth = kth_value(passing, passing.size - k)
        # Under the cutoff (a quarter of the best score, which is at least the best here) only
        # the arms' top ranks are kept, and those are scored already.
        floor = max(kth, RELEVANCE_CUTOFF * float(_max(scores)))
        lowest = reaching(floor)
        if lowest >= covered:
            # What the bound lets reach lies within the start, scored already (most queries):
            # no pass over every candidate's key to find nothing missing.
            return rows, scores
        reach = (key >= lowest).nonzero()[0]
        at = np.minimum(np.searchsorted(rows, reach), rows.size - 1)
        missing = reach[rows[at] != reach]
        if not missing.size:
            return rows, scores
        covered = lowest  # every key at or above it is among the rows now
        rows = np.concatenate((rows, missing))
        scores = np.concatenate((scores, _scores(pool, query, semantic, missing)))
        ordered = np.argsort(rows, kind="stable")
        rows, scores = rows[ordered], scores[ordered]


def _arm_top(pool: Pool, arm: str) -> Ints:
    """`_top_set` of the pool's bm25 or semantic relevance at `ARM_TOP`, computed once a pool."""
    found = pool.tops.get(arm)
    if found is None:
        values = pool.bm25 if arm == "bm25" else pool.semantic
        assert values is not None
        # bm25's best few stand far above the bulk: looked at alone (`_high_rows`), a tie at
        # the last place included, when they are few.
        high = _high_rows(values, ARM_TOP, _HIGH_SHARE) if arm == "bm25" else None
        if high is not None:
            within = _top_untied(values[high], ARM_TOP)
            if within is not None:
                found = high[within]
            else:
                found = _top_tied(pool, values[high], ARM_TOP, high)
        else:
            found = _top_untied(values, ARM_TOP)
            if found is None:
                found = _top_tied(pool, values, ARM_TOP)
        pool.tops[arm] = found
    return found


def _top_tied(pool: Pool, values: Floats, k: int, rows: Ints | None = None) -> Ints:
    """The `k` best of `values` when several tie at the k-th, as `_top_by_order` takes them.
    `rows`: the pool positions `values` are of, ascending, holding every value at or above the
    k-th of the whole pool (None: `values` is the whole pool's); returns pool positions,
    ascending."""
    found = np.sort(_top_by_order(pool, rows, values, k))
    return found if rows is None else rows[found]


def _passes(
    pool: Pool, query: RecallQuery, semantic: Floats | None, rows: Ints
) -> npt.NDArray[np.bool_] | None:
    """The per-memory filters of `_keep` and the threshold, at `rows` (the cutoff and the arms'
    top ranks are the pool's, not a memory's); None when every one passes (`_no_minimum`, no
    threshold: most recalls)."""
    passes: npt.NDArray[np.bool_] | None = None
    if not _no_minimum(pool, query.fusion, semantic):
        lexical = lexical_relevance(pool.bm25[rows], pool.query_weight)
        relevance = lexical + (semantic[rows] if semantic is not None else 0.0)
        passes = relevance >= query.fusion.min_relevance
    if query.threshold > 0.0:
        close = _blended(pool, query, semantic, rows) >= query.threshold
        passes = close if passes is None else passes & close
    return passes


def order(pool: Pool, index: LexicalIndex, query: RecallQuery) -> list[Hit]:
    """The top `limit` of `pool`, best first; ties go to the newest statement."""
    if not len(pool):
        return []
    semantic = pool.semantic
    supported = (
        query.mode is RecallMode.HYBRID and query.fusion.session > 0.0 and index.has_sessions
    )
    chosen: Ints
    if query.mode is not RecallMode.HYBRID:
        # One raw arm (plain BM25, or the cosine), scored as it is; the bank's threshold is
        # seed 004's in every mode: the same blended similarity, from the arm this mode ran.
        scores = pool.bm25 if query.mode is RecallMode.LEXICAL else pool.cosine
        chosen = np.arange(len(pool))
        if query.threshold > 0.0:
            close = _blended(pool, query, semantic) >= query.threshold
            chosen, scores = chosen[close], scores[close]
    else:
        # Session support reorders the best `session_pool` (`_session_supported`): that many are
        # scored exactly, as the top `limit` are otherwise.
        reach = max(query.limit, query.fusion.session_pool) if supported else query.limit
        # A big pool scores its contenders only (`_contenders`); `scores` is then theirs, aligned
        # with `chosen`, as the whole pool's are with every position.
        contenders = _contenders(pool, query, semantic, reach)
        scored: Ints | None = None
        if contenders is not None:
            chosen, scores = contenders
            scored = chosen
        else:
            chosen, scores = np.arange(len(pool)), _scores(pool, query, semantic)
        keep = _keep(scores, pool, semantic, query.fusion, scored)
        if query.threshold > 0.0:
            keep &= _blended(pool, query, semantic, scored) >= query.threshold
        chosen, scores = chosen[keep], scores[keep]
        if supported:
            scores = _session_supported(pool, index, chosen, scores, query.fusion)
    # The best `limit` (+ the margin), a tie at the last place broken as the sort below breaks it.
    at = _top_by_order(pool, chosen, scores, query.limit + _TIE_MARGIN)
    chosen, scores = chosen[at], scores[at]
    final = scores
    if query.mode is RecallMode.HYBRID and semantic is not None and final.size:
        final, demoted = _demote_near_duplicates(
            index,
            pool.slots[chosen],
            final,
            query.duplicate_cosine,
            query.fusion.duplicate,
            [memory.subject for memory in pool.memories(chosen)],
        )
        # A restatement pushed under the cutoff leaves: its better twin already carries the fact.
        kept = ~demoted | (final >= RELEVANCE_CUTOFF * float(final.max()))
        chosen, final = chosen[kept], final[kept]
    if pool.speaker_only and final.size:
        final = _others_demoted(pool, chosen, final, query.fusion.others)
    if (
        query.mode is RecallMode.HYBRID
        and semantic is not None
        and query.fusion.same_fact > 0.0
        and final.size > 1
        and _policy(query.text) is Recency.CURRENT
    ):
        final = _newest_statements_first(pool, index, chosen, final, query)
    hits = [
        Hit(memory, score)
        for memory, score in zip(pool.memories(chosen), final.tolist(), strict=True)
    ]
    if query.mode is RecallMode.HYBRID and query.fusion.context > 0:
        hits = _with_context(hits, index, query, pool.source)
    if query.mode is RecallMode.HYBRID and query.fusion.unnamed != 1.0 and not pool.speaker_only:
        hits = _unnamed_demoted(hits, index, pool.named_tally, query.fusion.unnamed)
    _sort_hits(hits)
    return hits[: query.limit]


def _unnamed_demoted(
    hits: list[Hit], index: LexicalIndex, tally: Floats | None, factor: float
) -> list[Hit]:
    """`hits` with the score of each live memory carrying entities, none of them one the query
    names, times `factor` (`Fusion.unnamed`); the same list when it names none. "What pets does
    Nate have?": nearly every turn that answers it is Nate's own, and the entity boost lifts
    every one of his alike, so the other speaker's "Aww, Nate, your turtles!" kept its place above
    them on its words. Last, on the returned hits only, like `_others_demoted`: earlier, the
    other speaker's question ("what got you into running?") lost the anchor place it lends its
    answer from (`_with_context`). A retired record (history, `as_of`) has no slot to read: as
    it was."""
    if tally is None:
        return hits
    out = []
    for hit in hits:
        slot = index.slot(hit.memory.id)
        # A memory tagged with no one says nothing of whom it is about (saved by hand, imported
        # untagged): "Pipoca's vet is Dr. Silva." is not another's memory of Pipoca.
        unnamed = slot >= 0 and tally[slot] <= 0.0 and bool(hit.memory.entities)
        out.append(Hit(hit.memory, hit.score * factor) if unnamed else hit)
    return out


def _session_supported(
    pool: Pool, index: LexicalIndex, chosen: Ints, scores: Floats, fusion: Fusion
) -> Floats:
    """`scores` (of the pool's `chosen`) with `Fusion.session`'s support added to the best
    `session_pool` (+ the tie margin) of them; the rest keep theirs (a recall asking for more
    than those still gets its `limit`). A memory gains `session` × the best score among the
    other hits of its session there, when the better of the two is a strong hit (at least
    `session_strong` of the recall's best score): a conversation that answers the question in
    several turns rises over a lone match elsewhere, and two weak hits lend each other nothing.
    Within a session the order stays: the better of two members gains at least the other's
    score, the other at most the better's, so a gap a − b is at least (a − b)(1 − session)."""
    if scores.size < 2:
        return scores
    at = _top_by_order(pool, chosen, scores, fusion.session_pool + _TIE_MARGIN)
    codes = _session_codes(pool, index, chosen[at])
    if codes is None:
        return scores
    # Python floats (the same IEEE doubles, without a numpy scalar per operation): ~40 hits.
    values, sessions = scores[at].tolist(), codes.tolist()
    # Only a session holding a strong hit lends anything (the gate): usually one or two of the
    # ~20 among the best, so the others cost no more work. The best hit is among `at`.
    strong = fusion.session_strong * max(values)
    lending = {code for code, value in zip(sessions, values, strict=True) if value >= strong}
    lending.discard(0)
    if not lending:
        return scores
    groups: dict[int, list[int]] = {}
    for j, code in enumerate(sessions):
        if code in lending:
            groups.setdefault(code, []).append(j)
    supported = list(values)
    for members in groups.values():
        if len(members) > 1:
            _lend(values, supported, members, fusion.session)
    out = scores.copy()
    out[at] = supported
    return out


def _sort_hits(hits: list[Hit]) -> None:
    """`hits` best first, ties to the newest statement, then by id. Distinct scores (most
    recalls) decide alone: sorted by score with a C key, the same order the whole key gives,
    without a Python call per hit (~18 a recall: the limit and the tie margin); on a tie, or a
    NaN (no order to trust), by the whole key."""
    scores = [hit.score for hit in hits]
    if len(set(scores)) == len(scores) and not math.isnan(sum(scores)):
        hits.sort(key=_SCORE, reverse=True)
    else:
        hits.sort(key=lambda hit: (-hit.score, -hit.memory.last_stated_at, hit.memory.id))


def _lend(values: list[float], out: list[float], members: list[int], session: float) -> None:
    """Into `out`: the support of one session's `members` (indices into `values`), the best of
    which is a strong hit (so every member passes the gate: the better of any two is it)."""
    ranked = sorted(members, key=values.__getitem__, reverse=True)
    first, second = values[ranked[0]], values[ranked[1]]
    out[ranked[0]] += session * second
    for before, i in itertools.pairwise(ranked):
        out[i] += session * first
        # Rounding (or `session` 1) can close a gap of an ulp or so into a tie, which the final
        # order would break by recency, maybe the other way: the lower one stays just under the
        # one before it, and a tie stays one.
        if values[i] == values[before]:
            out[i] = out[before]
        elif out[i] >= out[before]:
            out[i] = math.nextafter(out[before], -math.inf)


def _session_codes(pool: Pool, index: LexicalIndex, rows: Ints) -> Ints | None:
    """The session of each candidate at `rows` as a small int (0: none; `session_codes`), a
    retired record's too: history and `as_of` rank it as a turn of its session, as it was when
    live (a session no live memory was saved in gets a code under 0). None: no sessions."""
    slots = pool.slots[rows]
    codes = index.session_codes(slots)
    retired = (slots < 0).nonzero()[0]
    if codes is None or not retired.size:
        return codes
    unknown: dict[str, int] = {}
    for j, record in zip(retired.tolist(), pool.memories(rows[retired]), strict=True):
        name = record.source.session_id if record.source is not None else None
        if name:
            codes[j] = index.session_code(name) or unknown.setdefault(name, -1 - len(unknown))
    return codes


def _top_by_order(pool: Pool, chosen: Ints | None, scores: Floats, take: int) -> Ints:
    """Indices (into `scores`, of the pool's `chosen`; None: `scores` is the whole pool's) of the
    `take` best, a tie at the last place broken as the final sort breaks it (newest statement,
    then id): never by position, which differs between a pool scored whole and its contenders,
    and with the order memories were indexed in (after a restart, an import)."""
    if take >= scores.size:
        return np.arange(scores.size)
    kth = kth_value(scores, scores.size - take)
    above = (scores > kth).nonzero()[0]
    tied = (scores == kth).nonzero()[0]
    need = take - above.size
    if tied.size > need:  # more tie at the last place than it has room for (rare)
        stated = pool.signal("stated_at", tied if chosen is None else chosen[tied])
        last = stated[np.argpartition(-stated, need - 1)[need - 1]]  # the need-th newest
        newer, level = tied[stated > last], tied[stated == last]
        if newer.size + level.size > need:  # the newest tie too: by id
            # The few smallest ids, read from the index's slots (no memory looked up) and not
            # sorted whole: a bank of look-alikes can tie thousands here.
            ids = _ids(pool, level if chosen is None else chosen[level])
            first = heapq.nsmallest(need - newer.size, zip(ids, range(len(ids)), strict=True))
            level = level[[j for _, j in first]]
        tied = np.concatenate((newer, level))
    return np.concatenate((above, tied))


def _ids(pool: Pool, rows: Ints) -> list[str]:
    """The ids of the candidates at `rows`: a live one's from its index slot, a retired
    record's from the record."""
    positions = rows.tolist()
    if pool.index is None:
        return [pool.memory(i).id for i in positions]
    ids = pool.index.slot_ids()
    slots = pool.slots[rows].tolist()
    if not pool.retired:  # every slot live: one C-level pass
        return list(map(ids.__getitem__, slots))
    return [
        ids[slot] if slot >= 0 else pool.memory(i).id
        for i, slot in zip(positions, slots, strict=True)
    ]


def rank(
    memories: Mapping[str, Memory],
    index: LexicalIndex,
    query: RecallQuery,
    lanes: LaneIndexes | None = None,
) -> list[Hit]:
    """The top `limit` memories for `query.text`, best first; ties go to the newest statement."""
    return order(candidates(memories, index, query, lanes), index, query)


_SCORE = attrgetter("score")


def _with_context(
    hits: list[Hit], index: LexicalIndex, query: RecallQuery, memories: Mapping[str, Memory]
) -> list[Hit]:
    """`hits` with the answers to the questions among them raised (`Fusion.context`): a hit of
    the best `context_anchors` that asks something ("what got you into running?") lends
    `context` × its score to each of the `context_span` memories saved after it in its session,
    which join the hits if they were not ones (unless the bank sets a relevance threshold), up to
    just under the question's own score. Only memories the query's filters admit; not a
    restatement of the question (by vector, when both have one: those stay demoted)."""
    fusion = query.fusion
    # Best first, ties in hit order (`reverse` keeps a sort stable; the key is C, no lambda).
    ranked = sorted(hits, key=_SCORE, reverse=True)[: fusion.context_anchors]
    asking = [hit for hit in ranked if _asks(hit.memory.text)]
    if not asking:
        return hits
    scope = index.in_scope(query.subject) if query.scoped else None
    at = {hit.memory.id: n for n, hit in enumerate(hits)}
    out = list(hits)
    for anchor in asking:
        slot = index.slot(anchor.memory.id)
        if slot < 0:  # a retired record (history, `as_of`) has no place in a session
            continue
        after = index.session_neighbours(slot, before=0, after=fusion.context_span)
        keep = _filtered(memories, index, query, after, scope)
        if keep is not None:
            after = after[keep]
        if query.retention and not query.include_superseded and after.size:
            then = query.as_of if query.as_of is not None else query.now_ms
            after = after[~_past_ttl(index, query.retention, then, after)]
        gain = fusion.context * anchor.score
        # Found through the question, an answer ranks just under it, never above: on LoCoMo 0-4
        # uncapped raises cost recall@1 (0.383 → 0.357) for the same recall@10.
        ceiling = CONTEXT_CEILING * anchor.score
        for s in after.tolist():
            if _restates(index, slot, s, query.duplicate_cosine):
                continue
            doc_id = index.doc_id(s)
            n = at.get(doc_id)
            if n is None and query.threshold > 0.0:
                continue  # the bank's relevance threshold cut it or never saw it: it stays out
            if n is None:
                at[doc_id] = len(out)
                out.append(Hit(memories[doc_id], min(gain, ceiling)))
            elif out[n].score < ceiling:
                out[n] = Hit(out[n].memory, min(out[n].score + gain, ceiling))
    return out


def _restates(index: LexicalIndex, slot: int, other: int, threshold: float) -> bool:
    """Whether `other`'s vector is within the paraphrase cosine of `slot`'s (False without both)."""
    if not (index.has_vector[slot] and index.has_vector[other]):
        return False
    a = index.vectors[slot].astype(np.float64)
    b = index.vectors[other].astype(np.float64)
    return float(a @ b) >= threshold * float(np.linalg.norm(a) * np.linalg.norm(b))


def _demote_near_duplicates(
    index: LexicalIndex,
    slots: Ints,
    scores: Floats,
    threshold: float,
    penalty: float,
    subjects: list[str | None],
) -> tuple[Floats, npt.NDArray[np.bool_]]:
    """A memory that restates a better-ranked one of the same subject (embedding cosine ≥
    `threshold`) is scored down by `penalty`, so it does not take a second slot of a small
    injection. The same words about another person are another fact, not a restatement (the
    owner's view of a bank holds everyone's). Returns the scores and which were demoted."""
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    out = scores.copy()
    demoted = np.zeros(scores.size, bool)
    live = slots >= 0
    safe = np.where(live, slots, 0)
    vectors = index.vectors[safe]  # the chosen few rows (a copy: fancy indexing), float32
    has = index.has_vector[safe] & live
    for i in order.tolist():
        same = [j for j in kept if same_subject(subjects[j], subjects[i])]
        if has[i] and same and float(np.max(vectors[same] @ vectors[i])) >= threshold:
            out[i] = scores[i] * penalty
            demoted[i] = True
        elif has[i]:
            kept.append(i)
    return out, demoted


def _newest_statements_first(
    pool: Pool, index: LexicalIndex, chosen: Ints, scores: Floats, query: RecallQuery
) -> Floats:
    """`scores` of the `chosen` hits of a question about the present, each hit scored just
    under the lowest newer hit that states the same fact (as that one ends, so a chain of
    three statements keeps its order), when it outranked it: "the newest
    statement of a fact should win" (`Recency.CURRENT`). The same fact (`Fusion.same_fact`):
    both of one subject and naming the same people (entity sets that meet, or a side naming
    none: "Marta's favourite series…" is not the user's), their vectors at least `same_fact`
    of the way from an unrelated pair's cosine (the bank's typical pair's, or the pair's mean
    with the other hits when higher) to a restatement's, and the newer a strong
    hit (`same_fact_strong` of the older's score), so a weak near neighbour never takes the
    place of the answer. The gates read the scores as they came; a hit only ever goes down,
    to just under a newer one, so the newest of the fact's statements comes first and the
    older ones follow it (a tie among them breaks, as every tie, toward the newer)."""
    fusion = query.fusion
    slots = pool.slots[chosen]
    live = slots >= 0  # a retired record (history, `as_of`) has no vector here
    rows = (live & index.has_vector[np.where(live, slots, 0)]).nonzero()[0]
    typical = index.typical_cosine()
    if rows.size < 2 or typical is None or query.duplicate_cosine <= typical:
        return scores
    stated = pool.signal("stated_at", chosen[rows]).astype(np.float64)
    values = scores[rows]
    # [a, b]: `a` older than `b` and above it, `b` a strong hit (no vector read yet).
    pairs = (
        (stated[:, None] < stated[None, :])
        & (values[:, None] > values[None, :])
        & (fusion.same_fact_strong * values[:, None] <= values[None, :])
    )
    if not pairs.any():
        return scores
    vectors = index.vectors[slots[rows]].astype(np.float64)
    cosines = vectors @ vectors.T
    norms = np.sqrt(np.maximum(cosines.diagonal(), 1e-24))
    cosines /= norms[:, None] * norms[None, :]
    # Unrelated is the bank's typical pair, or, when higher, the pair's mean cosine with the
    # other hits: a model that sets a language or a topic apart (MiniLM reads every Portuguese
    # memory as near every other) would otherwise see each pair of its hits there as one fact.
    # The same fact stands out from the hits around it too.
    k = rows.size
    unrelated = np.full((k, k), typical)
    if k > 2:
        others = cosines.sum(axis=1) - cosines.diagonal()
        around = (others[:, None] + others[None, :] - 2.0 * cosines) / (2.0 * (k - 2))
        unrelated = np.maximum(unrelated, around)
    bar = unrelated + fusion.same_fact * (query.duplicate_cosine - unrelated)
    pairs &= (cosines >= bar) & (unrelated < query.duplicate_cosine)  # and their vectors close
    older, newer = pairs.nonzero()
    if not older.size:
        return scores
    newer_of: dict[int, list[int]] = {}
    for a, b in zip(older.tolist(), newer.tolist(), strict=True):
        first, second = pool.memories(chosen[rows[[a, b]]])  # the few pairs found, read alone
        if not same_subject(first.subject, second.subject):
            continue
        mine = {entity.casefold() for entity in first.entities}
        if mine and second.entities and mine.isdisjoint(e.casefold() for e in second.entities):
            continue
        newer_of.setdefault(a, []).append(b)
    # Newest first, each under its newer statements' scores as they end (not as they came): in
    # a chain A < B < C where A and C do not pair (C too weak beside A, or too far), B goes
    # under C, and A must follow B there, not stay over both at B's old score.
    out = scores.copy()
    for a in sorted(newer_of, key=lambda row: -stated[row]):
        under = min(float(out[rows[b]]) for b in newer_of[a])  # each b newer: already final
        out[rows[a]] = min(float(out[rows[a]]), math.nextafter(under, -math.inf))
    return out


def _others_demoted(pool: Pool, chosen: Ints, scores: Floats, factor: float) -> Floats:
    """`scores` of the `chosen` hits, those of another's fact times `factor`: the question asks
    about the speaker alone ("what foods am I allergic to?"), and a general memory that names
    someone or something else and not the user ("Marta is allergic to cats.",
    `core.subjects.about_someone_else`) cannot answer it, however well its words match. A memory
    with a subject is someone's own (scoped banks: possibly the speaker's) and stays."""
    others = [
        memory.subject is None and about_someone_else(memory.text, memory.entities)
        for memory in pool.memories(chosen)
    ]
    if not any(others):
        return scores
    out: Floats = np.where(np.asarray(others, bool), scores * factor, scores)
    return out


def top_memories(memories: Iterable[Memory], limit: int) -> list[Memory]:
    """The bank's standing memories with no query: pinned, then most corroborated, then newest."""
    live = [memory for memory in memories if memory.live]
    live.sort(key=lambda m: (not m.pinned, -m.corroboration, -m.last_stated_at, m.id))
    return live[:limit]
