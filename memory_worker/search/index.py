"""In-RAM lexical index: BM25 (Okapi) postings and per-document ranking columns, in numpy.

Documents live in slots. Postings are a compacted CSR base plus small per-term appends, so `add` and
`remove` are O(terms of the document) and never rebuild on a save; a removed slot is only masked
dead, and the whole index is compacted once dead slots outnumber live ones (amortized O(1)). Each
document's own (term, tf) pairs are kept the same way, by slot (a CSR base plus the documents added
since), rather than as Python tuples per document: a bulk load builds both in numpy, and a memory
costs a few dozen bytes of arrays instead of a few hundred of objects.
It knows documents as ids, term lists and a few numeric columns; ranking policy lives in `scoring`.
Only live memories are indexed. numpy values never leave `index`/`scoring`/`recall`.

Past 500 lines on purpose: postings, the forward pairs, the columns and the bulk load share one
slot numbering and one compaction; they change together or the index answers wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from memory_worker.core.categories import CATEGORY_CODES, category_code
from memory_worker.core.categories import CODE_OF as _CODE_OF
from memory_worker.core.subjects import subject_key

__all__ = [
    "BM25_B",
    "BM25_K1",
    "Analysis",
    "Candidates",
    "Floats",
    "IndexedDoc",
    "Ints",
    "LexicalIndex",
    "analyze",
    "category_code",
    "combine",
    "unit_row",
]

BM25_K1 = 1.2
# Length normalisation, weaker than Okapi's 0.75 (chosen for web pages, where length is often
# padding): a memory is one statement, and a longer one mostly says more, not the same at
# length. Chosen on the tuning halves only (`bench/tune_recall.py --bm25`, k1 0.7-2.0 and
# b 0-0.9): LoCoMo 0-4 recall@10 0.698 → 0.716 with e5 and 0.674 → 0.690 without, golden
# tuning MRR 0.846 → 0.858 with hit@3 unchanged; every b ≤ 0.4 beat 0.75, k1 mattered less.
# b = 0 was higher still, but the golden set moved only at exactly 0 (ties between matches of
# equal length broken otherwise), so not that. docs/BENCHMARKS.md has both halves.
BM25_B = 0.2
_MIN_CAPACITY = 1024  # dead slots tolerated before a compaction, on top of twice the live ones
_INITIAL_CAPACITY = 16  # columns start small and double: an empty bank costs about 1 KB, not 36
_MERGE_MIN = 4096  # appended postings are merged into the CSR base past this (or 1/4 of it)
_KEPT_MIN = 16_384  # floats of kept first-pass BM25 scores any bank may hold (128 KB)
_KEPT_PER_SLOT = 8  # and past that, this many per slot (64 bytes a memory)
# The bank's mean vector, for `centered_cosine`, counts this many zero vectors too: a bank of one
# memory would otherwise be centred onto itself (every difference zero). Small on purpose: on
# LoCoMo the mean of 20 memories already carries the whole gain of centring.
CENTER_PRIOR = 4.0
# A memory whose words point to no time has the told span [max, min): it overlaps nothing.
_TOLD_NONE = (np.iinfo(np.int32).max, np.iinfo(np.int32).min)


def unit_row(vector: Sequence[float] | npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float32]:
    """`vector` as a float32 unit row (a copy: the caller's array is never scaled)."""
    row = np.array(vector, np.float32)
    row /= max(float(np.linalg.norm(row)), 1e-12)
    return row


def _told_columns(docs: Sequence[IndexedDoc]) -> tuple[npt.NDArray[np.int32], ...]:
    spans = [_TOLD_NONE if doc.told is None else doc.told for doc in docs]
    return (
        np.fromiter((start for start, _ in spans), np.int32, len(spans)),
        np.fromiter((end for _, end in spans), np.int32, len(spans)),
    )


_NO_SUM = np.zeros(0, np.float64)  # shared by every index without vectors; never written
_NO_NORMS = np.zeros(0, np.float32)  # the same for `vector_norm2`

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


_NO_INTS: Ints = np.empty(0, np.int64)


_CATEGORY_NAMES = {code: name for name, code in CATEGORY_CODES.items()}


def _code(codes: dict[str, int], name: str | None) -> int:
    """`name`'s small integer code in `codes` (new names get the next one); 0 for None."""
    if name is None:
        return 0
    code = codes.get(name)
    if code is None:
        code = codes[name] = len(codes) + 1
    return code


@dataclass(frozen=True, slots=True)
class IndexedDoc:
    """What the index keeps of a memory: terms to match and the columns ranking reads."""

    doc_id: str
    terms: list[str]
    entity_terms: frozenset[str] = frozenset()
    tags: tuple[str, ...] = ()
    corroboration: int = 0
    pinned: bool = False
    stated_at: int = 0
    created_at: int = 0
    dated: bool = False  # the text states a date or a time (`core.temporal.states_time`)
    # The time its own words point to from when it was stated ("last month": `core.temporal.
    # told_span`), as [start, end) whole days since the epoch; None: none.
    told: tuple[int, int] | None = None
    subject: str | None = None  # who the memory is about; None: a general memory
    session: str | None = None  # the conversation it was saved from (`source.session_id`)
    category: str | None = None  # its kind (`category_code`); None: a fact


@dataclass(frozen=True, slots=True)
class Candidates:
    """Live documents matching a query: slots and their BM25, aligned."""

    slots: Ints
    bm25: Floats


@dataclass(frozen=True, slots=True)
class Analysis:
    """What indexing computes of each document beyond its ranking columns — the analyzer's terms,
    the costly part — for documents in a given order. Term ids index `vocab`; each document's
    (term, tf) pairs are in the order its terms first occur."""

    vocab: list[str]
    pair_counts: Ints  # (term, tf) pairs per document
    pair_terms: Ints
    pair_tfs: Ints
    lengths: Ints  # terms per document, repeats included (BM25's document length)
    entity_counts: Ints  # entity terms per document
    entity_terms: Ints
    dated: npt.NDArray[np.bool_]
    # Each document's told span in days ([start, end); `_TOLD_NONE` when none): read from its
    # text and when it was stated, the part of indexing a dated memory pays most for.
    told_start: npt.NDArray[np.int32]
    told_end: npt.NDArray[np.int32]


def _stable_order(keys: Ints, bound: int) -> Ints:
    """`np.argsort(keys, kind="stable")` for keys in [0, bound): the same permutation (a stable
    sort has only one), by numpy's radix sort of 16-bit keys — one pass when every key fits in
    16 bits, two (low half, then high) below 2^32 — instead of a merge sort of int64 keys (a
    boot's postings of 100k memories spent ~0.15 s there)."""
    if bound <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if bound > 1 << 32:
        return np.argsort(keys, kind="stable")
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    high = (keys[low] >> 16).astype(np.uint16)
    return low[np.argsort(high, kind="stable")]


def _narrow(values: npt.NDArray[Any]) -> npt.NDArray[np.unsignedinteger[Any]]:
    """Non-negative integral `values` in the narrowest of uint8, uint16, uint32, uint64 that holds
    them all (a tf is a count; a float one is integral): a single large count widens the whole
    array, so every value stays exact."""
    top = int(values.max()) if values.size else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype, copy=False)
    return values.astype(np.uint64, copy=False)


def _slot_dtype(bound: int) -> type[np.signedinteger[Any]]:
    """int32 for slot numbers below 2^31 (every bank this side of two billion memories): half
    the RAM of int64 postings, and numpy indexes with either."""
    return np.int32 if bound < 1 << 31 else np.int64


def analyze(docs: Sequence[IndexedDoc]) -> Analysis:
    """The analysis of `docs` in that order (a bulk load's): a dict walk over the distinct terms,
    then numpy, no Python work per term occurrence."""
    n = len(docs)
    told_start, told_end = _told_columns(docs)
    term_lists = [doc.terms for doc in docs]
    lengths = np.fromiter(map(len, term_lists), np.int64, n)
    flat = list(chain.from_iterable(term_lists))
    entity_lists = [doc.entity_terms for doc in docs]
    entity_flat = list(chain.from_iterable(entity_lists))
    vocab: dict[str, int] = {}
    for term in chain(flat, entity_flat):
        if term not in vocab:
            vocab[term] = len(vocab)
    n_terms = len(vocab)
    tid = np.fromiter(map(vocab.__getitem__, flat), np.int64, len(flat))
    # (doc, term) pairs with their tf, each doc's in the order its terms first occur (what
    # `Counter(doc.terms)` yields): unique keys, put back in order of first position.
    keys = np.repeat(np.arange(n, dtype=np.int64), lengths) * n_terms + tid
    unique, first, tf = np.unique(keys, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    pair_doc, pair_term = np.divmod(unique[order], n_terms)
    return Analysis(
        vocab=list(vocab),
        pair_counts=np.bincount(pair_doc, minlength=n).astype(np.int64),
        pair_terms=pair_term,
        pair_tfs=tf[order].astype(np.int64),
        lengths=lengths,
        entity_counts=np.fromiter(map(len, entity_lists), np.int64, n),
        entity_terms=np.fromiter(map(vocab.__getitem__, entity_flat), np.int64),
        dated=np.fromiter((doc.dated for doc in docs), bool, n),
        told_start=told_start,
        told_end=told_end,
    )


def combine(base: Analysis, extra: Analysis, rows: Sequence[int]) -> Analysis:
    """The analysis of documents picked from two: `rows[i]` < len(base's documents) is base's
    document of that number, any other is extra's document `rows[i] - len(base's)`; extra's
    terms are numbered in base's vocabulary (its new terms appended). What analysing the picked
    documents afresh gives, up to the numbering of terms."""
    picks = np.asarray(rows, np.int64)
    number = {term: term_id for term_id, term in enumerate(base.vocab)}
    vocab = list(base.vocab)
    remap = np.empty(len(extra.vocab), np.int64)
    for j, term in enumerate(extra.vocab):
        term_id = number.get(term)
        if term_id is None:
            term_id = number[term] = len(vocab)
            vocab.append(term)
        remap[j] = term_id
    pair_counts, (pair_terms, pair_tfs) = _take_rows(
        np.concatenate((base.pair_counts, extra.pair_counts)),
        (
            np.concatenate((base.pair_terms, remap[extra.pair_terms])),
            np.concatenate((base.pair_tfs, extra.pair_tfs)),
        ),
        picks,
    )
    entity_counts, (entity_terms,) = _take_rows(
        np.concatenate((base.entity_counts, extra.entity_counts)),
        (np.concatenate((base.entity_terms, remap[extra.entity_terms])),),
        picks,
    )
    return Analysis(
        vocab=vocab,
        pair_counts=pair_counts,
        pair_terms=pair_terms,
        pair_tfs=pair_tfs,
        lengths=np.concatenate((base.lengths, extra.lengths))[picks],
        entity_counts=entity_counts,
        entity_terms=entity_terms,
        dated=np.concatenate((base.dated, extra.dated))[picks],
        told_start=np.concatenate((base.told_start, extra.told_start))[picks],
        told_end=np.concatenate((base.told_end, extra.told_end))[picks],
    )


def _take_rows(
    counts: Ints, columns: tuple[Ints, ...], rows: Ints
) -> tuple[Ints, tuple[Ints, ...]]:
    """Rows `rows` of ragged columns (row r holds `counts[r]` values of each), in that order."""
    offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    picked = counts[rows]
    total = int(picked.sum())
    ends = np.cumsum(picked)
    at = np.repeat(offsets[rows] - (ends - picked), picked) + np.arange(total, dtype=np.int64)
    return picked, tuple(column[at] for column in columns)


class _Postings:
    """term id → (slots, term frequencies): a CSR base plus per-term appended lists.

    The base keeps slots as int32 (`_slot_dtype`) and tfs, which are counts, in the narrowest
    unsigned dtype that holds the largest (`_narrow`: uint8 unless one document repeats a term
    256 times): 5 bytes a posting instead of 16 (at 100k memories, ~13 postings each, ~140
    bytes a memory). `get` hands them out as they are; readers compute in float64 (`_float_tfs`),
    and every narrow value converts back exactly."""

    def __init__(self) -> None:
        self._offsets: Ints = np.zeros(1, np.int64)
        self._slots: npt.NDArray[np.signedinteger[Any]] = np.empty(0, np.int32)
        self._tfs: npt.NDArray[np.unsignedinteger[Any]] = np.empty(0, np.uint8)
        self._delta: dict[int, tuple[list[int], list[int]]] = {}
        # cache, dropped on append: a term's base and appended postings as one int64/float64 pair
        self._delta_arrays: dict[int, tuple[Ints, Floats]] = {}
        self.delta_size = 0

    @property
    def base_size(self) -> int:
        return int(self._slots.size)

    def append(self, term_id: int, slot: int, tf: int) -> None:
        entry = self._delta.get(term_id)
        if entry is None:
            entry = self._delta[term_id] = ([], [])
        entry[0].append(slot)
        entry[1].append(tf)
        self.delta_size += 1
        self._delta_arrays.pop(term_id, None)

    def append_doc(self, slot: int, term_ids: Sequence[int], tfs: Sequence[int]) -> None:
        """`append` of each of one document's terms (one call, not one a term)."""
        delta, arrays = self._delta, self._delta_arrays
        for term_id, tf in zip(term_ids, tfs, strict=True):
            entry = delta.get(term_id)
            if entry is None:
                delta[term_id] = ([slot], [tf])
            else:
                entry[0].append(slot)
                entry[1].append(tf)
            arrays.pop(term_id, None)
        self.delta_size += len(term_ids)

    def get(
        self, term_id: int
    ) -> tuple[npt.NDArray[np.signedinteger[Any]], npt.NDArray[np.number[Any]]]:
        """The term's slots (ascending within the base, then the appended ones) and their tfs,
        each in whatever integer or float dtype holds them (see the class docstring)."""
        if term_id + 1 < self._offsets.size:
            # Both bounds in one slice's `tolist` (two scalar reads and `int`s cost twice that).
            start, end = self._offsets[term_id : term_id + 2].tolist()
            slots, tfs = self._slots[start:end], self._tfs[start:end]
        else:
            slots, tfs = self._slots[:0], self._tfs[:0]
        entry = self._delta.get(term_id)
        if entry is not None:
            cached = self._delta_arrays.get(term_id)
            if cached is None:
                cached = (
                    np.concatenate((slots, np.asarray(entry[0], np.int64)), dtype=np.int64),
                    np.concatenate((tfs, np.asarray(entry[1], np.float64)), dtype=np.float64),
                )
                self._delta_arrays[term_id] = cached
            return cached
        return slots, tfs

    def slots(self, term_id: int) -> npt.NDArray[np.signedinteger[Any]]:
        return self.get(term_id)[0]

    def triples(self) -> tuple[Ints, Ints, Ints]:
        """Every posting as (term ids, slots, tfs), base and appended, as int64."""
        counts = np.diff(self._offsets)
        term_ids = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        extra_terms = [t for t, (slots, _) in self._delta.items() for _ in slots]
        extra_slots = [s for slots, _ in self._delta.values() for s in slots]
        extra_tfs = [f for _, tfs in self._delta.values() for f in tfs]
        return (
            np.concatenate((term_ids, np.asarray(extra_terms, np.int64))),
            np.concatenate((self._slots, np.asarray(extra_slots, np.int64)), dtype=np.int64),
            np.concatenate((self._tfs, np.asarray(extra_tfs, np.int64)), dtype=np.int64),
        )

    def rebuild(
        self,
        term_ids: Ints,
        slots: npt.NDArray[np.integer[Any]],
        tfs: npt.NDArray[np.unsignedinteger[Any]] | Ints,
        n_terms: int,
    ) -> None:
        """The base of postings (term_ids[i], slots[i], tfs[i]); tfs are integral counts ≥ 0."""
        order = _stable_order(term_ids, n_terms)
        counts = np.bincount(term_ids, minlength=n_terms)
        self._offsets = np.concatenate((np.zeros(1, np.int64), np.cumsum(counts)))
        bound = int(slots.max()) + 1 if slots.size else 0
        self._slots = slots.astype(_slot_dtype(bound), copy=False)[order]
        self._tfs = _narrow(tfs)[order]
        self._delta = {}
        self._delta_arrays = {}
        self.delta_size = 0


def _float_tfs(tfs: npt.NDArray[np.number[Any]]) -> Floats:
    """Postings' tfs as float64 (what BM25 computes in); a float64 array is handed back as is."""
    return tfs.astype(np.float64, copy=False)


class _Forward:
    """slot → that document's (term id, tf) pairs in the order its terms first occur (ranking's
    second hop breaks ties by that order): a CSR base over the slots of the last compaction plus
    the documents recorded since, one pair of tuples each."""

    def __init__(self) -> None:
        self._offsets: Ints = np.zeros(1, np.int64)
        # Each in the narrowest unsigned dtype its values fit (`_narrow`): term ids and tfs are
        # read back as ints (`tolist`, `astype`), so the width changes no value, only RAM (at
        # 100k memories, ~13 pairs each: 104 bytes a memory as int32, 39 as uint16 + uint8).
        self._terms: npt.NDArray[np.unsignedinteger[Any]] = np.empty(0, np.uint8)
        self._tfs: npt.NDArray[np.unsignedinteger[Any]] = np.empty(0, np.uint8)
        self._extra: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def append(self, slot: int, term_ids: tuple[int, ...], tfs: tuple[int, ...]) -> None:
        """A document recorded since the last compaction: its pairs as their two columns."""
        self._extra[slot] = (term_ids, tfs)

    def term_ids(self, slot: int) -> Sequence[int]:
        extra = self._extra.get(slot)
        if extra is not None:
            return extra[0]
        if slot + 1 < self._offsets.size:
            return list(self._terms[self._offsets[slot] : self._offsets[slot + 1]].tolist())
        return ()

    def columns(self, slot: int) -> tuple[Sequence[int], Sequence[int]]:
        """`pairs` as (term ids, tfs), without a tuple per pair."""
        extra = self._extra.get(slot)
        if extra is not None:
            return extra
        if 0 <= slot < self._offsets.size - 1:  # (a negative slice would be no pair of bounds)
            start, end = self._offsets[slot : slot + 2].tolist()
            return self._terms[start:end].tolist(), self._tfs[start:end].tolist()
        return (), ()

    def pairs(self, slot: int) -> list[tuple[int, int]]:
        extra = self._extra.get(slot)
        if extra is not None:
            return list(zip(*extra, strict=True))
        if slot + 1 < self._offsets.size:
            start, end = int(self._offsets[slot]), int(self._offsets[slot + 1])
            return list(
                zip(self._terms[start:end].tolist(), self._tfs[start:end].tolist(), strict=True)
            )
        return []

    def gather(self, slots: Ints) -> tuple[Ints, Ints, Ints]:
        """The pairs of `slots`, in that order: (pairs per slot, term ids, tfs), one multi-slice
        gather over the base and the later documents laid end to end."""
        base_n = self._offsets.size - 1
        later = list(self._extra)
        later_sizes = [len(self._extra[slot][0]) for slot in later]
        span = max(base_n, max(later, default=-1) + 1)
        start_of = np.zeros(span, np.int64)
        size_of = np.zeros(span, np.int64)
        start_of[:base_n] = self._offsets[:-1]
        size_of[:base_n] = np.diff(self._offsets)
        if later:
            later_at = np.cumsum([0, *later_sizes[:-1]], dtype=np.int64)
            start_of[later] = int(self._offsets[-1]) + later_at
            size_of[later] = later_sizes
        all_terms = np.concatenate(
            (self._terms, [t for slot in later for t in self._extra[slot][0]])
        ).astype(np.int64)
        all_tfs = np.concatenate(
            (self._tfs, [f for slot in later for f in self._extra[slot][1]])
        ).astype(np.int64)
        counts = size_of[slots]
        total = int(counts.sum())
        before = np.cumsum(counts) - counts
        positions = np.repeat(start_of[slots] - before, counts) + np.arange(total, dtype=np.int64)
        return counts, all_terms[positions], all_tfs[positions]

    def rebuild(
        self, counts: Ints, term_ids: Ints, tfs: npt.NDArray[np.unsignedinteger[Any]] | Ints
    ) -> None:
        """Slots 0..len(counts)-1 hold `counts[i]` pairs each, laid out in slot order."""
        self._offsets = np.concatenate((np.zeros(1, np.int64), np.cumsum(counts)))
        self._terms = _narrow(term_ids)
        self._tfs = _narrow(tfs)
        self._extra = {}


class _QueryCache:
    """Per corpus version (`norms` is that version's normalisation array): idf by document
    frequency and a first pass's scores of each queried term's postings by weight."""

    __slots__ = ("boosts", "idf", "n_docs", "norms", "scored", "size")

    def __init__(self, norms: Floats, n_docs: int) -> None:
        self.norms = norms
        self.n_docs = n_docs
        self.idf: dict[int, float] = {}
        # (term, weight) → its postings' slots and BM25 (the corpus changes: a new cache)
        self.scored: dict[tuple[int, float], tuple[npt.NDArray[np.signedinteger[Any]], Floats]] = {}
        self.size = 0  # floats held in `scored`
        self.boosts: tuple[float, bool] | None = None  # `LexicalIndex.boost_columns`, once read


class _Sessions:
    """Each slot's session as a small int in a column (0: saved outside any session, or dead).
    A session's memories are found by one compare over the column (~45 µs at 100k slots) rather
    than kept in per-session sets, which cost ~150 B a memory of a transcript bank."""

    __slots__ = ("codes", "column")

    def __init__(self, capacity: int) -> None:
        self.codes: dict[str, int] = {}
        self.column: npt.NDArray[np.int32] = np.zeros(capacity, np.int32)


class LexicalIndex:
    # A class default, not set per instance until a vector is stored: one more attribute in every
    # index's __dict__ cost an empty bank ~1.3 KB (tests/test_dos.py).
    vector_norm2: npt.NDArray[np.float32] = _NO_NORMS
    # Made by the first query (a bank never queried carries none), replaced when the corpus moves.
    _cache: _QueryCache | None = None
    # Made by the first memory saved in a session (an empty bank's indexes carry none: three
    # attributes per index took an empty bank past 12 KB, tests/test_dos.py).
    _sessions: _Sessions | None = None
    # Per slot, its memory's `category_code`; made by the first memory of another kind than a
    # fact (an empty bank's indexes, and the lanes', carry none: every slot a fact).
    _categories: npt.NDArray[np.int8] | None = None

    def __init__(self, half_precision: bool = True) -> None:
        # Embeddings are held as one contiguous float32 matrix, the dtype BLAS multiplies: every
        # semantic recall compares the query with every row, and numpy's float16 → float32 cast
        # (scalar code) cost 4-5× the product itself (~15 ms of a ~19 ms cosine pass at 10k
        # rows of 384). float32 costs 4 bytes per dimension (1.5 KB per memory at 384), twice
        # what float16 rows took. `half_precision` rounds each stored value as float16 storage
        # did, so every cosine, and every recall figure taken with float16 rows, stays
        # bit-for-bit the same; the association lanes never rounded theirs.
        self._half_precision = half_precision
        self._vocab: dict[str, int] = {}
        self._terms: list[str] = []  # term id → term
        self._df: list[int] = []  # live documents per term id
        self._slot_of: dict[str, int] = {}
        self._ids: list[str] = []  # slot → doc id (dead slots keep theirs until compaction)
        self._forward = _Forward()  # slot → its (term id, tf) pairs, in first-occurrence order
        # Only docs with tags have an entry (most have none: no dict entry per memory).
        self._doc_tags: dict[str, tuple[str, ...]] = {}
        self._tags: dict[str, set[int]] = {}
        # Subjects as small ints in a column (0: general), so scoping a query is one vector compare.
        self._subject_codes: dict[str, int] = {}
        self._total_length = 0
        self._postings = _Postings()
        self._entities = _Postings()
        self._dim = 0  # embedding width, fixed by the first vector stored
        self._version = 0  # bumped by every change of slots or lengths
        self._norm_key = -1
        self._norm_cache: Floats = np.empty(0, np.float64)
        # Sum and count of the live slots' vectors (as stored), kept on every vector change, so
        # the bank's mean is there for each query without a pass over the matrix.
        # The live vectors' sum, then their count, in one array (one attribute: an empty bank's
        # indexes stay small); the shared empty one until the width is known, never written.
        self._vector_sum: Floats = _NO_SUM
        # The same for the vectors scaled to unit length, then how many are not zero: the
        # typical pair's cosine (`typical_cosine`) whatever lengths an embedder returns.
        self._unit_sum: Floats = _NO_SUM
        self._allocate(_INITIAL_CAPACITY)

    def _allocate(self, capacity: int) -> None:
        self._capacity = capacity
        self.vectors: npt.NDArray[np.float32] = np.zeros((capacity, self._dim), np.float32)
        self.has_vector = np.zeros(capacity, bool)
        if self._dim:  # |stored vector|² per slot (the class's shared empty one until then)
            self.vector_norm2 = np.zeros(capacity, np.float32)
        self._alive = np.zeros(capacity, bool)
        self._length = np.zeros(capacity, np.float64)
        self.corroboration = np.zeros(capacity, np.float64)
        self.pinned = np.zeros(capacity, bool)
        self.stated_at = np.zeros(capacity, np.float64)
        self.created_at = np.zeros(capacity, np.float64)
        self.dated = np.zeros(capacity, bool)
        self._told_start = np.zeros(capacity, np.int32)
        self._told_end = np.zeros(capacity, np.int32)
        self.subject = np.zeros(capacity, np.int64)
        if self._categories is not None:
            self._categories = np.zeros(capacity, np.int8)
        if self._sessions is not None:
            self._sessions.column = np.zeros(capacity, np.int32)

    def _grow(self) -> None:
        n = len(self._ids)
        if n < self._alive.size:
            return
        columns = self._columns()
        self._allocate(self._alive.size * 2)
        for new, old in zip(self._columns(), columns, strict=True):
            new[:n] = old[:n]

    def _columns(self) -> tuple[npt.NDArray[Any], ...]:
        return (
            self._alive, self._length, self.corroboration, self.pinned, self.stated_at,
            self.created_at, self.dated, self._told_start, self._told_end, self.has_vector,
            self.vectors, self.subject,
        ) + ((self.vector_norm2,) if self._dim else ()) + (
            (self._categories,) if self._categories is not None else ()
        ) + (
            (self._sessions.column,) if self._sessions is not None else ()
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slot_of

    # --- maintenance -----------------------------------------------------------------------------

    def add(self, doc_id: str, terms: list[str]) -> None:
        """Index a bare document (tests, tools); memories come in through `add_doc`."""
        self.add_doc(IndexedDoc(doc_id, terms))

    def add_doc(self, doc: IndexedDoc) -> None:
        """Index `doc`, replacing an earlier version of it."""
        self._add(doc)
        self._maybe_merge()

    def add_many(self, docs: Iterable[IndexedDoc]) -> None:
        """Bulk load (boot): record every doc, then build the CSR bases once (no appends). Into an
        empty index the terms are counted in one pass and every array is built in numpy."""
        batch = list(docs)
        if self._ids or len({doc.doc_id for doc in batch}) != len(batch):
            for doc in batch:
                self._record(doc)
            self._compact()
            return
        self._load(batch)

    def _load(self, docs: list[IndexedDoc]) -> None:
        """`add_many` of distinct docs into an empty index: the arrays `_record` then `_compact`
        would leave, with no Python work per term occurrence (`analyze`, then numpy). Term ids
        may be numbered otherwise than one by one would; nothing observable depends on their
        numbering."""
        self.load_analysis(
            [doc.doc_id for doc in docs],
            analyze(docs),
            corroboration=[doc.corroboration for doc in docs],
            pinned=[doc.pinned for doc in docs],
            stated_at=[doc.stated_at for doc in docs],
            created_at=[doc.created_at for doc in docs],
            tags=[doc.tags for doc in docs],
            subjects=[doc.subject for doc in docs],
            sessions=[doc.session for doc in docs],
            categories=[doc.category for doc in docs],
        )

    def load_analysis(
        self,
        doc_ids: list[str],
        analysis: Analysis,
        *,
        corroboration: Sequence[int],
        pinned: Sequence[bool],
        stated_at: Sequence[int],
        created_at: Sequence[int],
        tags: Sequence[tuple[str, ...]],
        subjects: Sequence[str | None],
        sessions: Sequence[str | None] | None = None,
        categories: Sequence[str | None] | None = None,
    ) -> None:
        """Fill an empty index with distinct `doc_ids` (slots in that order) from their analysis
        (`analysis_of`, or a bulk load's) and their ranking columns, all in numpy."""
        if self._ids:
            raise ValueError("load_analysis needs an empty index")
        self._version += 1
        n = len(doc_ids)
        self._vector_sum = np.zeros(self._dim + 1, np.float64) if self._dim else _NO_SUM
        self._unit_sum = np.zeros(self._dim + 1, np.float64) if self._dim else _NO_SUM
        self._terms = list(analysis.vocab)
        self._vocab = {term: term_id for term_id, term in enumerate(self._terms)}
        n_terms = len(self._terms)
        self._allocate(max(_INITIAL_CAPACITY, 2 * n))
        self._ids = list(doc_ids)
        self._slot_of = dict(zip(self._ids, range(n), strict=True))
        self._df = np.bincount(analysis.pair_terms, minlength=n_terms).tolist()
        self._total_length = int(analysis.lengths.sum())
        self._alive[:n] = True
        self._length[:n] = analysis.lengths
        self.corroboration[:n] = corroboration
        self.pinned[:n] = pinned
        self.stated_at[:n] = stated_at
        self.created_at[:n] = created_at
        self.dated[:n] = analysis.dated
        self._told_start[:n] = analysis.told_start
        self._told_end[:n] = analysis.told_end
        # Only the few memories with a subject or tags cost a Python step (`compress` skips the
        # rest in C); codes are given in slot order, as one by one would.
        if len(subjects) != n or len(tags) != n:
            raise ValueError("load_analysis: one subject and one tags tuple per document")
        for slot in compress(range(n), map(is_not, subjects, repeat(None))):
            self.subject[slot] = self._subject_code(subjects[slot])
        if sessions is not None:
            if len(sessions) != n:
                raise ValueError("load_analysis: one session per document")
            for slot in compress(range(n), map(is_not, sessions, repeat(None))):
                self._set_session(slot, sessions[slot])
        if categories is not None:
            self._load_categories(categories, n)
        for slot in compress(range(n), tags):
            labels = tags[slot]
            self._doc_tags[self._ids[slot]] = labels
            for tag in labels:
                self._tags.setdefault(tag, set()).add(slot)
        # Made narrow once (slots as the postings keep them, tfs as both keep them): no second
        # pass over a boot's million pairs to narrow them.
        slots = np.repeat(np.arange(n, dtype=_slot_dtype(n)), analysis.pair_counts)
        tfs = _narrow(analysis.pair_tfs)
        self._forward.rebuild(analysis.pair_counts, analysis.pair_terms, tfs)
        self._postings.rebuild(analysis.pair_terms, slots, tfs, n_terms)
        entity_slots = np.repeat(np.arange(n, dtype=np.int64), analysis.entity_counts)
        self._entities.rebuild(
            analysis.entity_terms, entity_slots, np.ones(entity_slots.size, np.int64), n_terms
        )

    def analysis_of(self, doc_ids: Sequence[str]) -> Analysis:
        """The analysis of the live `doc_ids`, in that order: what `load_analysis` takes back (a
        snapshot of the costly part of indexing). Raises KeyError for an id not indexed."""
        slots = np.fromiter(map(self._slot_of.__getitem__, doc_ids), np.int64, len(doc_ids))
        counts, term_ids, tfs = self._forward.gather(slots)
        position = np.full(len(self._ids), -1, np.int64)
        position[slots] = np.arange(slots.size, dtype=np.int64)
        entity_terms, entity_slots, _ = self._entities.triples()
        keep = position[entity_slots] >= 0
        entity_terms, owner = entity_terms[keep], position[entity_slots[keep]]
        # Each document's entity terms by term id, not as appended: they were appended in the
        # order a frozenset iterates, which the process's hash seed picks, so the snapshot of
        # one history differed between processes (harmless: a set either way, loaded alike).
        by_owner = np.lexsort((entity_terms, owner))
        return Analysis(
            vocab=list(self._terms),
            pair_counts=counts,
            pair_terms=term_ids,
            pair_tfs=tfs.astype(np.int64),
            lengths=self._length[slots].astype(np.int64),
            entity_counts=np.bincount(owner, minlength=slots.size).astype(np.int64),
            entity_terms=entity_terms[by_owner],
            dated=self.dated[slots].copy(),
            told_start=self._told_start[slots],
            told_end=self._told_end[slots],
        )

    def _term_id(self, term: str) -> int:
        term_id = self._vocab.get(term)
        if term_id is None:
            term_id = self._vocab[term] = len(self._df)
            self._df.append(0)
            self._terms.append(term)
        return term_id

    def _add(self, doc: IndexedDoc) -> None:
        slot, term_ids, tfs, entities = self._record(doc)
        self._postings.append_doc(slot, term_ids, tfs)
        if entities:
            self._entities.append_doc(slot, entities, (1,) * len(entities))

    def _record(
        self, doc: IndexedDoc
    ) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Give `doc` a fresh slot and count its terms; postings are the caller's business.
        Returns the slot, its terms' ids and tfs (in the order they first occur) and its entity
        terms' ids."""
        self._version += 1
        if doc.doc_id in self._slot_of:
            self.remove(doc.doc_id)
        self._grow()
        slot = len(self._ids)
        self._ids.append(doc.doc_id)
        self._slot_of[doc.doc_id] = slot
        vocab, df = self._vocab, self._df
        counts = Counter(doc.terms)
        found: list[int] = []
        for term in counts:
            term_id = vocab.get(term)
            if term_id is None:
                term_id = self._term_id(term)
            df[term_id] += 1
            found.append(term_id)
        term_ids, tfs = tuple(found), tuple(counts.values())
        entities = tuple(self._term_id(term) for term in doc.entity_terms)
        self._forward.append(slot, term_ids, tfs)
        self._total_length += len(doc.terms)
        self._alive[slot] = True
        self._length[slot] = len(doc.terms)
        self._set_columns(doc.doc_id, slot, doc)
        return slot, term_ids, tfs, entities

    def _set_columns(self, doc_id: str, slot: int, doc: IndexedDoc) -> None:
        if self._cache is not None:
            self._cache.boosts = None  # a column changed: `boost_columns` reads them again
        self.corroboration[slot] = doc.corroboration
        self.pinned[slot] = doc.pinned
        self.stated_at[slot] = doc.stated_at
        self.created_at[slot] = doc.created_at
        self.dated[slot] = doc.dated
        self._told_start[slot], self._told_end[slot] = doc.told or _TOLD_NONE
        self.subject[slot] = self._subject_code(doc.subject)
        self._set_category(slot, doc.category)
        self._set_session(slot, doc.session)
        for tag in self._doc_tags.get(doc_id, ()):
            self._tags[tag].discard(slot)
        if doc.tags:
            self._doc_tags[doc_id] = doc.tags
        else:
            self._doc_tags.pop(doc_id, None)
        for tag in doc.tags:
            self._tags.setdefault(tag, set()).add(slot)

    def update_columns(self, doc: IndexedDoc) -> None:
        """A reinforcement, pin or tag change: same terms, new ranking columns; no re-indexing."""
        slot = self._slot_of[doc.doc_id]
        self._set_columns(doc.doc_id, slot, doc)

    def remove(self, doc_id: str) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is None:
            return
        self._version += 1
        if self.has_vector[slot]:
            self._count_vector(slot, -1)
        self._alive[slot] = False
        self._total_length -= int(self._length[slot])
        for term_id in self._forward.term_ids(slot):
            self._df[term_id] -= 1
        for tag in self._doc_tags.pop(doc_id, ()):
            self._tags[tag].discard(slot)
        self._set_session(slot, None)
        if len(self._ids) > 2 * len(self._slot_of) + _MIN_CAPACITY:
            self._compact()

    def _maybe_merge(self) -> None:
        pending = self._postings.delta_size + self._entities.delta_size
        if pending > max(_MERGE_MIN, self._postings.base_size // 4):
            self._compact()

    def _compact(self) -> None:
        """Renumber live docs into dense slots and rebuild both CSR bases (dead slots dropped)."""
        self._version += 1
        live = list(self._slot_of.items())
        old_columns = self._columns()
        old_slots = np.asarray([slot for _, slot in live], np.int64)
        n_old = len(self._ids)
        self._allocate(max(_INITIAL_CAPACITY, 2 * len(live)))
        n = len(live)
        for new, old in zip(self._columns(), old_columns, strict=True):
            new[:n] = old[old_slots]
        self._ids = [doc_id for doc_id, _ in live]
        self._slot_of = {doc_id: slot for slot, doc_id in enumerate(self._ids)}
        self._tags = {}
        for doc_id, slot in self._slot_of.items():
            for tag in self._doc_tags.get(doc_id, ()):
                self._tags.setdefault(tag, set()).add(slot)
        # Live slots keep their order (`_slot_of` is in slot order), so old → new is monotonic and
        # every term's postings stay in ascending slot order, as a fresh bulk load lays them.
        remap = np.full(n_old + 1, -1, np.int64)
        remap[old_slots] = np.arange(n, dtype=np.int64)
        counts, term_ids, tfs = self._forward.gather(old_slots)
        n_terms = len(self._df)
        slots = np.repeat(np.arange(n, dtype=_slot_dtype(n)), counts)
        narrow_tfs = _narrow(tfs)
        self._forward.rebuild(counts, term_ids, narrow_tfs)
        self._postings.rebuild(term_ids, slots, narrow_tfs, n_terms)
        entity_terms, entity_slots, _ = self._entities.triples()
        kept = remap[entity_slots] >= 0
        self._entities.rebuild(
            entity_terms[kept], remap[entity_slots[kept]],
            np.ones(int(kept.sum()), np.int64), n_terms,
        )  # fmt: skip

    def set_vector(self, doc_id: str, vector: Sequence[float]) -> bool:
        """Store the embedding of a live doc; False when the doc is gone or the width differs."""
        slot = self._slot_of.get(doc_id)
        if slot is None:
            return False
        if self._dim == 0:
            self._dim = len(vector)
            self.vectors = np.zeros((self._capacity, self._dim), np.float32)
            self.vector_norm2 = np.zeros(self._capacity, np.float32)
            self._vector_sum = np.zeros(self._dim + 1, np.float64)
            self._unit_sum = np.zeros(self._dim + 1, np.float64)
        if len(vector) != self._dim:
            return False
        if self.has_vector[slot]:
            self._count_vector(slot, -1)
        row = np.asarray(vector, np.float32)
        # via float32 first, as the float16 rows were filled: no double rounding differs
        self.vectors[slot] = row.astype(np.float16) if self._half_precision else row
        stored = self.vectors[slot]
        self.vector_norm2[slot] = float(stored @ stored)
        self.has_vector[slot] = True
        self._count_vector(slot, 1)
        return True

    def _count_vector(self, slot: int, sign: int) -> None:
        """Add (1) or take back (-1) a live slot's stored vector in the running mean."""
        row = self.vectors[slot].astype(np.float64)
        self._vector_sum[:-1] += sign * row
        self._vector_sum[-1] += sign
        length = math.sqrt(float(row @ row))
        if length > 0.0:  # a zero vector has no direction: no cosine with anything
            self._unit_sum[:-1] += (sign / length) * row
            self._unit_sum[-1] += sign

    @property
    def alive(self) -> npt.NDArray[np.bool_]:
        """Per slot: holds a live document (dead slots wait for compaction)."""
        return self._alive

    @property
    def version(self) -> int:
        """Bumped whenever slots or lengths change (what a slot-aligned cache is keyed on)."""
        return self._version

    def boost_columns(self) -> tuple[float, bool]:
        """The largest corroboration of the slots in use (dead ones too; 0 at least) and whether
        one is pinned: what bounds every memory's boosts, which ranking reads each recall. Two
        passes over every slot, made again only when a slot or its columns changed (kept with
        the query cache, which a change of slots replaces)."""
        cache = self._query_cache()
        if cache.boosts is None:
            n = len(self._ids)
            most = max(float(self.corroboration[:n].max()), 0.0) if n else 0.0
            cache.boosts = (most, bool(self.pinned[:n].any()))
        return cache.boosts

    @property
    def slot_count(self) -> int:
        """Slots in use, dead ones included (the length of every per-slot array ranking reads)."""
        return len(self._ids)

    def told_days(self, slots: Ints) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """The told span of the memory at each live slot (`IndexedDoc.told`), as [start, end)
        whole days since the epoch; a memory whose words point to no time has an empty one."""
        return self._told_start[slots], self._told_end[slots]

    def slot_ids(self) -> list[str]:
        """The doc id of every slot (dead slots keep theirs until compaction); do not mutate."""
        return self._ids

    def slot(self, doc_id: str) -> int:
        """The live slot of `doc_id`, or -1."""
        return self._slot_of.get(doc_id, -1)

    @property
    def vector_width(self) -> int:
        return self._dim

    def all_embedded(self) -> bool:
        """Whether every live doc has a vector (kept as a running count: no pass over slots)."""
        embedded = int(self._vector_sum[-1]) if self._vector_sum.size else 0
        return embedded == len(self._slot_of)

    def reset_vectors(self) -> None:
        """Forget every embedding (a model of another width replaces them)."""
        self._dim = 0
        self.vectors = np.zeros((self._capacity, 0), np.float32)
        self.has_vector[:] = False
        self.vector_norm2 = _NO_NORMS
        self._vector_sum = _NO_SUM
        self._unit_sum = _NO_SUM

    def clear_vector(self, doc_id: str) -> None:
        """Forget one doc's embedding (it came from a model no longer in use)."""
        slot = self._slot_of.get(doc_id)
        if slot is not None and self.has_vector[slot]:
            self._count_vector(slot, -1)
            self.has_vector[slot] = False

    def has_vector_for(self, doc_id: str) -> bool:
        slot = self._slot_of.get(doc_id)
        return slot is not None and bool(self.has_vector[slot])

    def cosine(self, query: Sequence[float]) -> Floats:
        """Cosine of `query` with every slot's embedding (unit vectors); 0 where there is none."""
        n = len(self._ids)
        if self._dim == 0 or len(query) != self._dim or n == 0:
            return np.zeros(n, np.float64)
        q = unit_row(query)
        # A view of the first n rows (C-contiguous): BLAS reads the matrix in place, no copy.
        sims = (self.vectors[:n] @ q).astype(np.float64)
        sims[~(self.has_vector[:n] & self._alive[:n])] = 0.0
        return sims

    def vector_mean(self) -> Floats:
        """The mean of the live embeddings, shrunk toward zero by `CENTER_PRIOR` empty ones."""
        if self._dim == 0:
            return np.zeros(0, np.float64)
        mean: Floats = self._vector_sum[:-1] / (self._vector_sum[-1] + CENTER_PRIOR)
        return mean

    def typical_cosine(self) -> float | None:
        """The mean cosine between two of the live embeddings: what two memories that say
        unrelated things score with this model, read off the running sum of the embeddings at
        unit length (|Σu|² = n + Σ over ordered pairs of u·w), so an embedder that does not
        normalise (`router::embed`) reads the same. None under two (non-zero) embeddings."""
        if self._dim == 0:
            return None
        n = float(self._unit_sum[-1])
        if n < 2.0:
            return None
        total = self._unit_sum[:-1]
        return (float(total @ total) - n) / (n * (n - 1.0))

    def centered_cosine(
        self, query: Sequence[float], strength: float = 1.0, centre: Floats | None = None
    ) -> Floats:
        """Cosine of `query` with every slot's embedding after `strength` × the bank's mean
        vector (`vector_mean`, or the caller's `centre`) is taken out of both, mapped from
        [-1, 1] onto [0, 1]; 0 where there is none. `strength` 0 is plain cosine (rescaled), 1
        full centring.

        Why: a sentence model's vectors share one large common direction (multilingual-e5's
        LoCoMo turns have a mean vector of norm ~0.92), so every cosine crowds into a narrow
        band and a short generic memory ("Bye! Have fun!") is near every query. Taking the
        shared part out ranks by what a memory says that the bank's others do not: semantic
        recall@10 on LoCoMo 0.552 → 0.602 (tuning half), 0.491 → 0.578 (report half),
        docs/BENCHMARKS.md "The semantic arm". 0.5 is as close as the average memory; a memory
        whose plain cosine is ≤ 0 gets 0, as one with no vector."""
        n = len(self._ids)
        if self._dim == 0 or len(query) != self._dim or n == 0:
            return np.zeros(n, np.float64)
        q = unit_row(query)
        mean = (strength * (self.vector_mean() if centre is None else centre)).astype(np.float32)
        shifted = q - mean
        # (d − m)·(q − m) = d·(q − m) − m·(q − m), and |d − m|² = |d|² − 2 d·m + |m|²: one
        # pass over the matrix gives both products (and the plain cosine d·q).
        both = self.vectors[:n] @ np.stack((shifted, mean, q), axis=1)  # in place, no copy
        dot = both[:, 0].astype(np.float64) - float(mean @ shifted)
        norm2 = self.vector_norm2[:n].astype(np.float64) - 2.0 * both[:, 1] + float(mean @ mean)
        scale = np.sqrt(np.maximum(norm2, 1e-12)) * max(float(np.linalg.norm(shifted)), 1e-12)
        sims: Floats = 0.5 * (1.0 + np.clip(dot / scale, -1.0, 1.0))
        # A memory the plain cosine puts at or past orthogonal is not similar at all, however the
        # bank's mean leans (as `cosine`'s candidates are its positive values).
        sims[~(self.has_vector[:n] & self._alive[:n]) | (both[:, 2] <= 0.0)] = 0.0
        return sims

    # --- queries ---------------------------------------------------------------------------------

    def document_frequency(self, term: str) -> int:
        term_id = self._vocab.get(term)
        return 0 if term_id is None else self._df[term_id]

    def _idf(self, df: int) -> float:
        n_docs = len(self._slot_of)
        return math.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)

    def _query_cache(self) -> _QueryCache:
        """What queries reuse until the corpus changes (a new version: new norms, new cache)."""
        cache = self._cache
        norms = self._norms()
        if cache is None or cache.norms is not norms or cache.n_docs != len(self._slot_of):
            cache = self._cache = _QueryCache(norms, len(self._slot_of))
        return cache

    def _term_idf(self, df: int) -> float:
        """`_idf`, memoised by document frequency for the current corpus: a query asks for
        dozens (its terms, the second hop's, each first hit's), mostly of a few df values."""
        memo = self._query_cache().idf
        idf = memo.get(df)
        if idf is None:
            idf = memo[df] = self._idf(df)
        return idf

    def _avgdl(self) -> float:
        return max(self._total_length / max(len(self._slot_of), 1), 1.0)

    def lexical(self, query_terms: list[str]) -> Candidates:
        """BM25 of every live document matching at least one query term (a repeated query term
        counts again)."""
        return self.weighted(Counter(query_terms))

    def weighted(self, weights: Mapping[str, float]) -> Candidates:
        """BM25 with a weight per query term (an expanded query's added terms weigh less)."""
        acc = self.accumulate(weights)
        if acc is None:
            return Candidates(np.empty(0, np.int64), np.empty(0, np.float64))
        return self.matching(acc)

    def accumulate(self, weights: Mapping[str, float], into: Floats | None = None) -> Floats | None:
        """Weighted BM25 added into a per-slot array (`into`, or a new one); None when no term
        matches anything and there was no array to add to.

        Every term's postings are laid end to end and scored in one pass, each posting
        `weight * tf * (k1 + 1) / (tf + norm)` as a term at a time computed it; then added per
        slot in the terms' order (one bincount into a new array, one `add.at` into `into`), so
        each slot gets the same floats, summed in the same order, to the last bit."""
        # A first pass's weights (a query's term counts × idf) recur query after query, its
        # postings' scores are kept; a second pass's weights are the query's own.
        found = self._postings_of(weights, keep=into is None)
        if found is None:
            return into
        slots, values = found
        if into is not None:
            np.add.at(into, slots, values)
            return into
        acc = np.bincount(slots, weights=values, minlength=len(self._ids))
        return acc.astype(np.float64, copy=False)

    def _postings_of(
        self, weights: Mapping[str, float], *, keep: bool = False
    ) -> tuple[Ints, Floats] | None:
        """The matching terms' postings end to end (in `weights`' order) and each one's weighted
        BM25, `weight * tf * (k1 + 1) / (tf + norm)`; None when no term matches. `keep`: each
        term's scores are kept (and reused) for its weight until the corpus changes (a first
        pass: a query's term counts × idf recur query after query). A second pass (the second
        hop's terms, weighted per query: nothing to reuse) gathers every term's norms in one go
        and keeps nothing: kept per term it took ~60% of the cache's room and cleared it every
        few queries, first-pass scores and all."""
        if not self._slot_of:
            return None
        vocab, df = self._vocab, self._df
        cache = self._query_cache()
        idf_of, scored = cache.idf, cache.scored
        slot_parts: list[npt.NDArray[np.signedinteger[Any]]] = []
        tf_parts: list[npt.NDArray[np.number[Any]]] = []
        value_parts: list[Floats] = []
        term_weights: list[float] = []
        for term, count in weights.items():
            term_id = vocab.get(term)
            if term_id is None or count <= 0:
                continue
            term_df = df[term_id]
            if term_df == 0:
                continue
            idf = idf_of.get(term_df)
            weight = count * (idf if idf is not None else self._term_idf(term_df))
            if keep:
                # Kept with the postings' slots (a view of the base, or the appended term's
                # array the postings keep anyway): a kept term's postings are not looked up.
                kept = scored.get((term_id, weight))
                if kept is None:
                    slots, tfs = self._postings.get(term_id)
                    floats = _float_tfs(tfs)
                    den = floats + cache.norms[slots.astype(np.int64)]  # a gather by intp
                    values = weight * floats * (BM25_K1 + 1.0) / den
                    self._make_room(cache)
                    kept = scored[(term_id, weight)] = (slots, values)
                    cache.size += values.size
                slot_parts.append(kept[0])
                value_parts.append(kept[1])
            else:
                slots, tfs = self._postings.get(term_id)
                slot_parts.append(slots)
                tf_parts.append(tfs)
                term_weights.append(weight)
        if not slot_parts:
            return None
        # Slots as int64 in one contiguous cast: `bincount` and `add.at` index with intp, and
        # handed int32 they convert it on a slower path (~2x the cast's cost at 30k postings).
        all_slots = np.concatenate(slot_parts, dtype=np.int64)
        if keep:
            return all_slots, np.concatenate(value_parts)
        all_tfs = np.concatenate(tf_parts, dtype=np.float64)  # narrow counts, back exactly
        # `weight * tf * (k1 + 1) / (tf + norm)` in place, each step on the same floats in the
        # same order (a sum's two sides swapped are the same float): no temporary arrays.
        den = cache.norms.take(all_slots)
        den += all_tfs
        # The array's own `repeat`: `np.repeat` of a list goes through Python wrappers (~2 us).
        # float64 whatever the weights' type: the products below land in this array.
        sizes = [part.size for part in slot_parts]
        found: Floats = np.array(term_weights, np.float64).repeat(sizes)
        found *= all_tfs
        found *= BM25_K1 + 1.0
        found /= den
        return all_slots, found

    def _make_room(self, cache: _QueryCache) -> None:
        """Room for one more term's floats in `cache`: when full it starts over with the terms
        asked from now on."""
        if cache.size > max(_KEPT_MIN, _KEPT_PER_SLOT * len(self._ids)):
            cache.scored.clear()
            cache.size = 0

    def matching(self, acc: Floats) -> Candidates:
        """The live slots of a per-slot score array that scored above 0."""
        # `nonzero()[0]`: `np.flatnonzero` of a 1-D mask without its Python wrappers (~1.5 us).
        if len(self._slot_of) == len(self._ids):  # no dead slot: every slot is alive
            slots = (acc > 0).nonzero()[0]
        else:
            slots = ((acc > 0) & self._alive[: acc.size]).nonzero()[0]
        # `take`: the same gather as `acc[slots]` without fancy indexing's general path (30,000
        # matches of 100,000 slots: ~19 against ~27 us; 3,000 of 10,000: ~2.2 against ~2.9).
        return Candidates(slots, acc.take(slots))

    def query_weight(self, weights: Mapping[str, float]) -> float:
        """What a document of average length holding each query term once would score: the sum
        of the terms' idf (a term no memory has counts at its full idf). BM25 over this says how
        much of the question a memory matched, on a scale that does not grow with its length."""
        total = 0.0
        vocab, dfs = self._vocab, self._df
        memo = self._query_cache().idf
        for term, count in weights.items():
            term_id = vocab.get(term)
            df = 0 if term_id is None else dfs[term_id]
            idf = memo.get(df)
            total += count * (idf if idf is not None else self._term_idf(df))
        return total

    def expansion(self, slots: Sequence[int], exclude: set[str], limit: int) -> dict[str, float]:
        """The `limit` most telling terms of the documents in `slots` (pseudo-relevance feedback):
        each term's idf times its share of each document, summed, over terms not in `exclude`
        and found in more than one document of the bank (a typo or a one-off name adds nothing).
        Weights are scaled so the best term weighs 1."""
        return self._expansion(slots, exclude, limit)[0]

    def settled_expansion(
        self, slots: Sequence[int], exclude: set[str], limit: int
    ) -> dict[str, float] | None:
        """`expansion`, or None when the order of `slots` could change which terms it takes:
        equal weights (to 1e-12) on both sides of the `limit` cut, where the order the terms
        were gathered in breaks the tie, unless every tied term comes from one and the same
        document (then that document's own order breaks it, whatever the order of `slots`).
        Otherwise any order of `slots` takes the same terms, with the same weights up to the last
        bits of their sums."""
        extra, tied = self._expansion(slots, exclude, limit)
        return None if tied else extra

    def _expansion(
        self, slots: Sequence[int], exclude: set[str], limit: int
    ) -> tuple[dict[str, float], bool]:
        n_docs = len(self._slot_of)
        if not slots or n_docs == 0:
            return {}, False
        names, dfs = self._terms, self._df
        memo = self._query_cache().idf
        columns = self._forward.columns
        gathered: dict[int, float] = {}
        known = gathered.get
        # One Python step per (term, tf) pair, so as few operations in it as there can be: which
        # document a term came from is asked only on a tie at the cut (`_sources`).
        for slot in slots:
            term_ids, tfs = columns(slot)
            length = max(sum(tfs), 1)
            for term_id, tf in zip(term_ids, tfs, strict=True):
                df = dfs[term_id]
                if df > 1:
                    idf = memo.get(df)
                    if idf is None:
                        idf = self._term_idf(df)
                    share = tf / length * idf
                    total = known(term_id)
                    gathered[term_id] = share if total is None else total + share
        # The query's own words left out (a pop each: the others keep their sums and order),
        # then sorted (stable: ties keep the order they were gathered in), then cut: what
        # sorting all, filtering and cutting gave.
        vocab = self._vocab
        for term in exclude:
            excluded = vocab.get(term)
            if excluded is not None:
                gathered.pop(excluded, None)
        # Heaviest first, ties in gathered order: `reverse` keeps a sort stable, and comparing
        # the weights themselves spares a Python key call per term (weights are finite, > 0).
        ranked = sorted(gathered.items(), key=itemgetter(1), reverse=True)
        best = ranked[:limit]
        tied = 0 < limit < len(ranked) and ranked[limit][1] >= ranked[limit - 1][1] * (1 - 1e-12)
        if tied:
            cut = ranked[limit - 1][1]
            source = self._sources(slots)
            near = {source[t] for t, w in ranked if abs(w - cut) <= cut * 1e-12}
            tied = len(near) != 1 or -1 in near
        if not best:
            return {}, tied
        top = best[0][1]
        return {names[term_id]: weight / top for term_id, weight in best}, tied

    def _sources(self, slots: Sequence[int]) -> dict[int, int]:
        """term id → the one document of `slots` it came from, -1: several (asked only on a tie
        at the expansion's cut)."""
        source: dict[int, int] = {}
        for slot in slots:
            for term_id in self._forward.columns(slot)[0]:
                source[term_id] = -1 if term_id in source else slot
        return source

    def _norms(self) -> Floats:
        """Per-slot BM25 length normalisation, recomputed only when the corpus changed."""
        key = self._version
        if self._norm_key != key:
            avgdl = self._avgdl()
            lengths = self._length[: len(self._ids)]
            self._norm_cache = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / avgdl)
            self._norm_key = key
        return self._norm_cache

    def entity_hits(self, query_terms: list[str], slots: Ints) -> Floats:
        """For each slot, how many distinct query terms name one of its entities, each weighted
        by the share of the bank that does NOT carry that entity: naming the person every memory
        is about (`user`) tells nothing, naming one of two speakers halves the field, naming
        Pipoca picks a handful."""
        hits = self.entity_tally(query_terms)
        if hits is None:  # most queries name no entity: skip the per-slot tally
            return np.zeros(slots.size, np.float64)
        return hits[slots]

    def entity_tally(self, query_terms: list[str]) -> Floats | None:
        """`entity_hits` of every slot (None when the query names no entity at all), for a
        caller that reads it at a few slots only."""
        named: list[tuple[Ints, float]] = []
        n_docs = max(len(self._slot_of), 1)
        for term in set(query_terms):
            term_id = self._vocab.get(term)
            if term_id is not None:
                entity_slots = self._entities.slots(term_id)
                if entity_slots.size:  # most query terms name no entity: no cast of nothing
                    entity_slots = entity_slots.astype(np.int64)  # index by intp
                    entity_slots = entity_slots[self._alive[entity_slots]]
                    weight = 1.0 - entity_slots.size / n_docs
                    named.append((entity_slots, weight))
        if not named:
            return None
        hits = np.zeros(len(self._ids), np.float64)
        for entity_slots, weight in named:
            hits[entity_slots] += weight
        return hits

    def _subject_code(self, subject: str | None) -> int:
        # Coded by `subject_key`: every spelling of one person ("Ana", "ana") is one code, so
        # scoping, the caps and eviction see one person. Derived at every load from the records'
        # stored subjects, never kept in a snapshot.
        return _code(self._subject_codes, None if subject is None else subject_key(subject))

    def _known_subject(self, subject: str) -> int | None:
        return self._subject_codes.get(subject_key(subject))

    def _load_categories(self, categories: Sequence[str | None], n: int) -> None:
        """The first `n` slots' categories in one C loop over their codes (extracted memories all
        name theirs: a Python step per memory cost ~27 ms per 100,000 at boot); the column is
        made only when one is of another kind than a fact, as one by one would."""
        if len(categories) != n:
            raise ValueError("load_analysis: one category per document")
        codes = np.fromiter(map(_CODE_OF.__getitem__, categories), np.int8, count=n)
        if self._categories is None and not codes.any():
            return
        if self._categories is None:
            self._categories = np.zeros(self._capacity, np.int8)
        self._categories[:n] = codes

    def _set_category(self, slot: int, category: str | None) -> None:
        code = category_code(category)
        if self._categories is None:
            if code == 0:
                return
            self._categories = np.zeros(self._capacity, np.int8)
        self._categories[slot] = code

    @property
    def category(self) -> npt.NDArray[np.int8]:
        """Per slot: its memory's `category_code` (retention's expiry reads it)."""
        if self._categories is None:
            return np.zeros(self._capacity, np.int8)
        return self._categories

    def _set_session(self, slot: int, session: str | None) -> None:
        sessions = self._sessions
        if sessions is None:
            if session is None:
                return
            sessions = self._sessions = _Sessions(self._capacity)
        sessions.column[slot] = _code(sessions.codes, session)

    @property
    def has_sessions(self) -> bool:
        """Whether any memory of the index was saved in a session (its column exists)."""
        return self._sessions is not None

    def session_codes(self, slots: Ints) -> Ints | None:
        """Per slot of `slots`: its session as a small int (0: none, or a retired record's
        negative slot: see `session_code`); None when no memory of the index was saved in a
        session."""
        sessions = self._sessions
        if sessions is None:
            return None
        return np.where(slots >= 0, sessions.column[np.maximum(slots, 0)], 0)

    def session_code(self, session: str) -> int:
        """`session`'s small int in `session_codes` (0: no memory of the index was saved in it)."""
        return 0 if self._sessions is None else self._sessions.codes.get(session, 0)

    def session_neighbours(self, slot: int, *, before: int, after: int) -> Ints:
        """The live slots saved in `slot`'s session just before it (up to `before`, nearest
        last) and just after it (up to `after`, nearest first), in the order they were saved
        (creation time, then slot); empty for a memory saved outside any session."""
        sessions = self._sessions
        code = 0 if sessions is None else int(sessions.column[slot])
        if sessions is None or code == 0 or before + after <= 0:
            return _NO_INTS
        # `nonzero()[0]`: `np.flatnonzero` without its Python wrappers (each recall asks this
        # for every question among its best hits: `ranking._with_context`).
        same = (sessions.column[: len(self._ids)] == code).nonzero()[0]  # live ones only
        ordered = same[np.lexsort((same, self.created_at[same]))]
        found = (ordered == slot).nonzero()[0]
        if not found.size:  # a dead slot has no place in its session any more
            return _NO_INTS
        at = int(found[0])
        return np.concatenate((ordered[max(0, at - before) : at], ordered[at + 1 : at + 1 + after]))

    def in_scope(self, subject: str | None) -> npt.NDArray[np.bool_]:
        """Per slot (every slot so far): whether it is a general memory or `subject`'s own. A
        subject the index never saw matches general memories only."""
        codes = self.subject[: len(self._ids)]
        mask: npt.NDArray[np.bool_] = codes == 0
        code = self._known_subject(subject) if subject is not None else None
        if code is not None:
            mask |= codes == code
        return mask

    def about(self, subject: str | None) -> npt.NDArray[np.bool_]:
        """Per slot (every slot so far): whether it is about `subject`, in any spelling (None:
        whether it is a general memory). A subject the index never saw matches nothing."""
        codes = self.subject[: len(self._ids)]
        code = self._known_subject(subject) if subject is not None else 0
        if code is None:
            return np.zeros(codes.size, bool)
        mask: npt.NDArray[np.bool_] = codes == code
        return mask

    def subjects_about(self, leaving_out: Ints | None = None) -> int:
        """How many subjects the live documents (but the slots `leaving_out`) are about, each
        once whatever its spellings (general ones not counted): one pass over the column."""
        n = len(self._ids)
        codes = self.subject[:n]
        keep = self._alive[:n] & (codes != 0)
        if leaving_out is not None and leaving_out.size:
            keep[leaving_out] = False
        # Codes are small integers (0: no one): a bincount, not `np.unique`, whose first call
        # imports numpy.ma (~16 ms of a one-shot command's close).
        return int(np.count_nonzero(np.bincount(codes[keep])))

    def pinned_live(self) -> int:
        """How many live documents are pinned."""
        n = len(self._ids)
        return int(np.count_nonzero(self.pinned[:n] & self._alive[:n]))

    def oldest_stated(self) -> dict[str, int]:
        """Per category, when its oldest live document that may expire (not pinned) was last
        stated, from the columns retention reads (`search.ranking._past_ttl`): what a bank's
        counts keep so a listing can tell whether one has passed its TTL since
        (`core.retention.may_have_expired`)."""
        n = len(self._ids)
        keep = self._alive[:n] & ~self.pinned[:n]
        codes, stated = self.category[:n][keep], self.stated_at[:n][keep]
        present = np.flatnonzero(np.bincount(codes.astype(np.int64))).tolist() if codes.size else []
        return {
            _CATEGORY_NAMES[code]: int(stated[codes == code].min())
            for code in present
            if code in _CATEGORY_NAMES
        }

    def subject_count(self, subject: str | None) -> int:
        """Live documents about `subject` (None: general ones)."""
        n = len(self._ids)
        code = self._known_subject(subject) if subject is not None else 0
        if code is None:
            return 0
        return int(np.count_nonzero((self.subject[:n] == code) & self._alive[:n]))

    def tagged(self, tag: str) -> Ints:
        """Live slots carrying `tag`."""
        return np.fromiter(sorted(self._tags.get(tag, ())), np.int64)

    def doc_id(self, slot: int) -> str:
        return self._ids[slot]

    def scores(self, query_terms: list[str], allowed: set[str] | None = None) -> dict[str, float]:
        """BM25 by doc id (tests and diagnostics; ranking uses `lexical`)."""
        found = self.lexical(query_terms)
        out = {
            self._ids[slot]: float(score)
            for slot, score in zip(found.slots.tolist(), found.bm25.tolist(), strict=True)
        }
        return out if allowed is None else {k: v for k, v in out.items() if k in allowed}

    def score_document(self, query_terms: list[str], doc_terms: list[str]) -> float:
        """BM25 of a document that is not indexed (a retired record in a history view), against
        the live corpus statistics."""
        avgdl = self._avgdl()
        counts = Counter(doc_terms)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(doc_terms) / avgdl)
        score = 0.0
        for term in query_terms:
            tf = counts.get(term)
            if tf:
                idf = self._idf(self.document_frequency(term))
                score += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return score
