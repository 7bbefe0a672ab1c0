"""`LexicalIndex` cross-checked against a naive BM25 written here, and against `rank_bm25`.

The naive scorer is the textbook Okapi formula with the index's constants and idf
`ln((N - df + 0.5) / (df + 0.5) + 1)`; repeated query terms count again. Corpora are small and
random (hypothesis), so every posting-list shortcut in the index is checked against brute force.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from memory_worker.search.index import BM25_B, BM25_K1, IndexedDoc, LexicalIndex

VOCABULARY = ("tea", "coffee", "ana", "berlin", "rust", "python", "blog", "iii", "用户", "café")

terms_of = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12)
corpora = st.dictionaries(
    st.sampled_from([f"d{i}" for i in range(12)]), terms_of, min_size=1, max_size=12
)
queries = st.lists(st.sampled_from((*VOCABULARY, "absent")), min_size=1, max_size=6)


def naive_bm25(query: list[str], doc: list[str], corpus: list[list[str]]) -> float:
    """Okapi BM25 of `doc` for `query` with `corpus` (the doc need not belong to it) as the
    statistics: N documents, their mean length, and each term's document frequency."""
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    tf = Counter(doc)
    score = 0.0
    for term in query:  # a repeated query term counts again
        if not tf[term]:
            continue
        df = sum(1 for d in corpus if term in d)
        idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * len(doc) / avgdl)
        score += idf * tf[term] * (BM25_K1 + 1.0) / (tf[term] + norm)
    return score


def naive_scores(query: list[str], corpus: dict[str, list[str]]) -> dict[str, float]:
    docs = list(corpus.values())
    return {
        doc_id: naive_bm25(query, doc, docs)
        for doc_id, doc in corpus.items()
        if any(term in doc for term in query)
    }


def build(corpus: dict[str, list[str]]) -> LexicalIndex:
    index = LexicalIndex()
    for doc_id, doc in corpus.items():
        index.add(doc_id, doc)
    return index


def assert_scores_close(got: dict[str, float], want: dict[str, float]) -> None:
    assert got.keys() == want.keys()
    for doc_id, score in want.items():
        assert math.isclose(got[doc_id], score, rel_tol=1e-9), (doc_id, got[doc_id], score)


def test_constants_are_okapi_k1_and_the_tuned_b_the_index_documents() -> None:
    assert (BM25_K1, BM25_B) == (1.2, 0.2)


@settings(max_examples=200, deadline=None)
@given(corpus=corpora, query=queries)
def test_scores_match_a_naive_bm25(corpus: dict[str, list[str]], query: list[str]) -> None:
    assert_scores_close(build(corpus).scores(query), naive_scores(query, corpus))


def test_repeated_query_terms_count_again() -> None:
    index = build({"a": ["tea", "coffee"], "b": ["rust"], "c": ["python"]})
    once = index.scores(["tea"])["a"]
    assert math.isclose(index.scores(["tea", "tea"])["a"], 2 * once, rel_tol=1e-12)


@settings(max_examples=80, deadline=None)
@given(corpus=corpora, query=queries, data=st.data())
def test_allowed_restricts_scores_without_changing_them(
    corpus: dict[str, list[str]], query: list[str], data: st.DataObject
) -> None:
    allowed = data.draw(st.sets(st.sampled_from(sorted(corpus))), label="allowed")
    full = build(corpus).scores(query)
    restricted = build(corpus).scores(query, allowed=set(allowed))
    assert restricted == {doc_id: s for doc_id, s in full.items() if doc_id in allowed}


@settings(max_examples=80, deadline=None)
@given(corpus=corpora, order=st.randoms(use_true_random=False))
def test_add_then_remove_of_every_document_leaves_the_index_empty(
    corpus: dict[str, list[str]], order: random.Random
) -> None:
    index = build(corpus)
    ids = sorted(corpus)
    order.shuffle(ids)
    for doc_id in ids:
        index.remove(doc_id)
        index.remove(doc_id)  # removing twice is a no-op
    assert len(index) == 0
    assert all(doc_id not in index for doc_id in corpus)
    assert all(index.document_frequency(term) == 0 for term in VOCABULARY)
    assert index.scores(list(VOCABULARY)) == {}
    # No stale length survives: a re-added document scores exactly as in a fresh index.
    first = ids[0]
    index.add(first, corpus[first])
    fresh = build({first: corpus[first]})
    assert index.scores(list(VOCABULARY)) == fresh.scores(list(VOCABULARY))


@settings(max_examples=80, deadline=None)
@given(corpus=corpora, replacement=terms_of, query=queries, data=st.data())
def test_re_adding_a_document_replaces_it(
    corpus: dict[str, list[str]], replacement: list[str], query: list[str], data: st.DataObject
) -> None:
    doc_id = data.draw(st.sampled_from(sorted(corpus)), label="doc_id")
    index = build(corpus)
    index.add(doc_id, replacement)
    expected = {**corpus, doc_id: replacement}
    assert len(index) == len(expected)
    for term in VOCABULARY:
        assert index.document_frequency(term) == sum(term in d for d in expected.values())
    assert_scores_close(index.scores(query), naive_scores(query, expected))


@settings(max_examples=80, deadline=None)
@given(
    corpus=corpora,
    doc=st.lists(st.sampled_from((*VOCABULARY, "absent")), max_size=12),
    query=queries,
)
def test_score_document_uses_the_live_corpus_statistics(
    corpus: dict[str, list[str]], doc: list[str], query: list[str]
) -> None:
    # A retired record in a history view: scored against the live corpus without joining it.
    index = build(corpus)
    got = index.score_document(query, doc)
    assert math.isclose(got, naive_bm25(query, doc, list(corpus.values())), rel_tol=1e-9)
    assert len(index) == len(corpus)  # scoring did not index it


def test_score_document_on_an_empty_index_is_finite() -> None:
    assert LexicalIndex().score_document(["tea"], ["tea", "coffee"]) > 0.0
    assert LexicalIndex().score_document(["tea"], []) == 0.0


def test_empty_index_scores_nothing() -> None:
    assert LexicalIndex().scores(["tea"]) == {}


# --- rank_bm25 -------------------------------------------------------------------------------
# rank_bm25.BM25Okapi differs from the index in idf only: ln((N - df + 0.5) / (df + 0.5)), which
# is zero or negative for terms in half the corpus or more, and negative values are replaced by
# epsilon × the mean idf. Comparing whole rankings across the two formulas is meaningless for
# multi-term queries (the per-term weights differ). What IS comparable, exactly: the per-term
# saturation part `tf·(k1+1)/(tf + k1·(1-b+b·dl/avgdl))`, which is identical with the same k1
# and b. So (1) per term, our score / our idf must equal theirs / their idf for every document,
# and (2) for a single-term query whose rank_bm25 idf is positive the full ranking must agree.

RANK_CORPUS = {
    "d0": ["tea", "berlin", "ana"],
    "d1": ["tea", "tea", "rust"],
    "d2": ["python", "blog", "iii", "rust", "coffee"],
    "d3": ["coffee", "coffee", "ana", "ana", "ana"],
    "d4": ["blog", "iii"],
    "d5": ["rust", "python", "python", "tea", "berlin", "blog", "café"],
    "d6": ["用户", "coffee"],
}


def _rank_bm25(corpus: dict[str, list[str]]) -> BM25Okapi:
    return BM25Okapi(list(corpus.values()), k1=BM25_K1, b=BM25_B)


def _our_idf(index: LexicalIndex, term: str, n: int) -> float:
    df = index.document_frequency(term)
    return math.log((n - df + 0.5) / (df + 0.5) + 1.0)


@pytest.mark.parametrize("term", sorted({t for doc in RANK_CORPUS.values() for t in doc}))
def test_per_term_saturation_matches_rank_bm25(term: str) -> None:
    index, theirs = build(RANK_CORPUS), _rank_bm25(RANK_CORPUS)
    their_idf = theirs.idf[term]
    if their_idf == 0.0:
        pytest.skip("rank_bm25 weighs a term in exactly half the corpus by 0")
    ours = index.scores([term])
    their_scores = dict(zip(RANK_CORPUS, theirs.get_scores([term]), strict=True))
    our_idf = _our_idf(index, term, len(RANK_CORPUS))
    for doc_id, doc in RANK_CORPUS.items():
        if term in doc:
            assert math.isclose(
                ours[doc_id] / our_idf, their_scores[doc_id] / their_idf, rel_tol=1e-9
            )
        else:
            assert doc_id not in ours and their_scores[doc_id] == 0.0


@pytest.mark.parametrize("term", ["tea", "coffee", "ana", "rust", "python", "blog", "iii"])
def test_single_term_rankings_agree_with_rank_bm25_when_its_idf_is_positive(term: str) -> None:
    index, theirs = build(RANK_CORPUS), _rank_bm25(RANK_CORPUS)
    assert theirs.idf[term] > 0.0  # every term here is in fewer than half the documents
    ours = index.scores([term])
    their_scores = dict(zip(RANK_CORPUS, theirs.get_scores([term]), strict=True))
    ranked_ours = sorted(ours, key=lambda d: (-ours[d], d))
    ranked_theirs = sorted(
        (d for d in RANK_CORPUS if their_scores[d] > 0), key=lambda d: (-their_scores[d], d)
    )
    assert ranked_ours == ranked_theirs


@pytest.mark.parametrize(
    "query", [["tea", "rust"], ["coffee", "ana"], ["python", "blog", "iii"], ["tea", "tea", "ana"]]
)
def test_multi_term_scores_are_rank_bm25_terms_reweighted_by_our_idf(query: list[str]) -> None:
    index, theirs = build(RANK_CORPUS), _rank_bm25(RANK_CORPUS)
    n = len(RANK_CORPUS)
    expected = dict.fromkeys(RANK_CORPUS, 0.0)
    for term in query:
        assert theirs.idf[term] != 0.0
        weight = _our_idf(index, term, n) / theirs.idf[term]
        for doc_id, score in zip(RANK_CORPUS, theirs.get_scores([term]), strict=True):
            expected[doc_id] += weight * float(score)
    ours = index.scores(query)
    assert_scores_close(ours, {d: s for d, s in expected.items() if s > 0})
    # And where the top document is well separated under both formulas, it is the same one.
    their_total = dict(zip(RANK_CORPUS, theirs.get_scores(query), strict=True))
    our_top = sorted(ours.values(), reverse=True)
    their_top = sorted(their_total.values(), reverse=True)
    if our_top[0] > 1.5 * our_top[1] and their_top[0] > 1.5 * their_top[1]:
        assert max(ours, key=ours.__getitem__) == max(their_total, key=their_total.__getitem__)


# --- weighted queries, query weight, pseudo-relevance feedback, entity specificity ------------


def _small_index() -> LexicalIndex:
    index = LexicalIndex()
    docs = {
        "d0": (["pottery", "class", "clay", "user"], {"user"}),
        "d1": (["clay", "bowl", "kiln", "user"], {"user", "pipoca"}),
        "d2": (["swim", "kids", "lake", "user"], {"user"}),
        "d3": (["camp", "lake", "kids", "user"], {"user"}),
    }
    for doc_id, (doc_terms, entities) in docs.items():
        index.add_doc(IndexedDoc(doc_id, doc_terms, entity_terms=frozenset(entities)))
    return index


def test_weighted_scores_are_bm25_with_a_weight_per_query_term() -> None:
    index = _small_index()
    plain = index.scores(["clay", "kids"])
    found = index.weighted({"clay": 1.0, "kids": 0.5})
    pairs = zip(found.slots.tolist(), found.bm25.tolist(), strict=True)
    weighted = {index.doc_id(slot): bm25 for slot, bm25 in pairs}
    assert weighted["d0"] == pytest.approx(plain["d0"])  # clay only
    assert weighted["d2"] == pytest.approx(plain["d2"] / 2)  # kids only, at half weight


def test_query_weight_is_the_idf_sum_counting_absent_terms_in_full() -> None:
    index = _small_index()
    assert index.query_weight({"clay": 1.0}) == pytest.approx(math.log((4 - 2 + 0.5) / 2.5 + 1))
    absent = index.query_weight({"zebra": 1.0})
    assert absent == pytest.approx(math.log((4 + 0.5) / 0.5 + 1))
    assert index.query_weight({"user": 1.0}) < 0.2  # on every document: tells nothing


def test_expansion_lends_the_first_hits_shared_terms_and_skips_the_query_and_one_offs() -> None:
    index = _small_index()
    first = [index._slot_of["d2"]]  # "swim kids lake user"
    extra = index.expansion(first, exclude={"swim"}, limit=5)
    assert set(extra) == {"kids", "lake", "user"}  # "swim" is the query's own word
    assert max(extra.values()) == 1.0 and extra["user"] < extra["kids"]


def test_an_entity_on_every_memory_weighs_nothing_and_a_rare_one_a_lot() -> None:
    index = _small_index()
    slots = np.arange(4)
    assert index.entity_hits(["user"], slots).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert index.entity_hits(["pipoca"], slots).tolist() == [0.0, 0.75, 0.0, 0.0]


def _state(index: LexicalIndex, query: list[str]) -> tuple[object, ...]:
    """Everything a query can observe of an index: exact scores by id, entity hits, the second
    hop's terms (their order breaks ties), statistics per term."""
    found = index.lexical(query)
    slots = found.slots
    by_id = {
        index.doc_id(s): float(b) for s, b in zip(slots.tolist(), found.bm25.tolist(), strict=True)
    }
    hits = dict(
        zip((index.doc_id(s) for s in slots.tolist()), index.entity_hits(query, slots), strict=True)
    )
    return (
        by_id,
        {k: float(v) for k, v in hits.items()},
        list(index.expansion(slots.tolist(), set(query), 5).items()),
        {t: index.document_frequency(t) for t in VOCABULARY},
        index.query_weight(Counter(query)),
        len(index),
        {  # who each subject's scope holds (the codes may be numbered otherwise)
            subject: sorted(
                index.doc_id(slot)
                for slot in np.flatnonzero(
                    index.in_scope(subject) & index._alive[: index.in_scope(subject).size]
                ).tolist()
            )
            for subject in (None, "s0", "s1")
        },
    )


edits = st.lists(
    st.tuples(st.sampled_from([f"d{i}" for i in range(12)]), st.none() | terms_of), max_size=20
)


@settings(max_examples=150, deadline=None)
@given(corpora, edits, queries)
def test_a_bulk_load_answers_exactly_as_documents_added_one_by_one(
    corpus: dict[str, list[str]], later: list[tuple[str, list[str] | None]], query: list[str]
) -> None:
    """`add_many` into an empty index (the boot path, built in numpy) against `add_doc` one at a
    time (the save path): equal answers, bit for bit, before and after the same edits and a
    compaction (a None edit removes the doc)."""

    def doc(doc_id: str, terms: list[str]) -> IndexedDoc:
        subject = None if len(terms) % 3 == 0 else f"s{len(terms) % 2}"  # scoping survives too
        return IndexedDoc(
            doc_id,
            terms,
            entity_terms=frozenset(terms[:2]),
            corroboration=len(terms),
            subject=subject,
        )

    bulk, single = LexicalIndex(), LexicalIndex()
    bulk.add_many(doc(d, t) for d, t in corpus.items())
    for d, t in corpus.items():
        single.add_doc(doc(d, t))
    assert _state(bulk, query) == _state(single, query)
    for index in (bulk, single):
        for doc_id, terms in later:
            if terms is None:
                index.remove(doc_id)
            else:
                index.add_doc(doc(doc_id, terms))
    assert _state(bulk, query) == _state(single, query)
    bulk._compact()
    assert _state(bulk, query) == _state(single, query)
    # The snapshot's round trip: the analysis of the live docs, loaded into an empty index, is
    # the index a bulk load of those docs (in that order) builds.
    final = dict(corpus)
    for doc_id, terms in later:
        if terms is None:
            final.pop(doc_id, None)
        else:
            final.pop(doc_id, None)
            final[doc_id] = terms
    order = [doc_id for doc_id in final if doc_id in single]
    restored, reference = LexicalIndex(), LexicalIndex()
    reference.add_many(doc(d, final[d]) for d in order)
    docs = [doc(d, final[d]) for d in order]
    restored.load_analysis(
        order,
        single.analysis_of(order),
        corroboration=[d.corroboration for d in docs],
        pinned=[d.pinned for d in docs],
        stated_at=[d.stated_at for d in docs],
        created_at=[d.created_at for d in docs],
        tags=[d.tags for d in docs],
        subjects=[d.subject for d in docs],
    )
    assert _state(restored, query) == _state(reference, query)


def test_vectors_are_float32_rows_holding_what_float16_rows_held() -> None:
    """Recall multiplies the rows in place (no per-query conversion), and each stored value is
    rounded as float16 storage rounded it, so every cosine is what it was; an index that keeps
    full precision (the association lanes) stores the values as given."""
    rng = np.random.default_rng(5)
    rounded, full = LexicalIndex(), LexicalIndex(half_precision=False)
    given_vectors = {f"d{i}": rng.standard_normal(8).tolist() for i in range(40)}
    for index in (rounded, full):
        for doc_id, vector in given_vectors.items():
            index.add(doc_id, ["tea"])
            assert index.set_vector(doc_id, vector)
    as_float32 = np.asarray(list(given_vectors.values()), np.float32)
    assert rounded.vectors.dtype == full.vectors.dtype == np.float32
    assert np.array_equal(rounded.vectors[:40], as_float32.astype(np.float16).astype(np.float32))
    assert np.array_equal(full.vectors[:40], as_float32)
    query = rng.standard_normal(8).tolist()
    q = np.asarray(query, np.float32)
    q /= np.linalg.norm(q)
    held_as_float16 = as_float32.astype(np.float16)
    expected = (np.asarray(held_as_float16, np.float32) @ q).astype(np.float64)
    assert np.array_equal(rounded.cosine(query), expected)


@pytest.mark.parametrize("bound", [1, 7, 1 << 16, (1 << 16) + 1, 3 << 20, (1 << 32) + 5])
def test_the_postings_order_is_numpys_stable_argsort_at_every_key_width(bound: int) -> None:
    # Postings are laid out by a radix sort of 16-bit halves (`_stable_order`): it must be the one
    # permutation a stable sort gives, or a term's postings leave ascending slot order.
    from memory_worker.search.index import _stable_order

    rng = np.random.default_rng(bound)
    keys = rng.integers(0, bound, 20_000, dtype=np.int64)
    keys[:50] = bound - 1  # the widest key, and many ties
    expected = np.argsort(keys, kind="stable")
    assert np.array_equal(_stable_order(keys, bound), expected)
    assert _stable_order(keys[:0], bound).size == 0


def _bm25_state(index: LexicalIndex, queries: list[list[str]]) -> list[dict[str, float]]:
    return [index.scores(query) for query in queries] + [
        index.scores(query)
        for query in queries  # the second time from the per-corpus caches
    ]


@pytest.mark.parametrize("repeats", [3, 255, 256, 70_000])
def test_narrow_postings_score_as_float64_ones_even_past_a_tf_of_255(repeats: int) -> None:
    """The base keeps slots as int32 and tfs in the narrowest unsigned dtype that holds the
    largest (one tf of 256 widens them all to uint16, one past 65,535 to uint32); BM25 reads
    them back as float64. A bulk load (narrow base) answers bit for bit what the same documents
    added one by one (appended float64 postings, never narrowed) answer, and so does the index
    after its compaction narrows them."""
    docs = {
        "loud": ["tea"] * repeats + ["ana"],
        "calm": ["tea", "coffee", "ana"],
        "other": ["coffee", "berlin"] * 2,
    }
    queries = [["tea"], ["tea", "ana", "tea"], ["coffee", "berlin", "absent"], ["ana"]]
    bulk, single = LexicalIndex(), LexicalIndex()
    bulk.add_many(IndexedDoc(d, t) for d, t in docs.items())
    for d, t in docs.items():
        single.add_doc(IndexedDoc(d, t))
    expected = _bm25_state(single, queries)
    assert _bm25_state(bulk, queries) == expected
    # The expansion reads the forward pairs (narrowed the same way) and a second pass's weights.
    assert bulk.expansion([0, 1], {"tea"}, 3) == single.expansion([0, 1], {"tea"}, 3)
    wanted = np.uint8 if repeats <= 255 else np.uint16 if repeats <= 65_535 else np.uint32
    assert bulk._postings._tfs.dtype == wanted
    assert bulk._postings._slots.dtype == np.int32
    # naive Okapi confirms the loud document's tf counted in full
    corpus = list(docs.values())
    assert bulk.scores(["tea"])["loud"] == pytest.approx(
        naive_bm25(["tea"], docs["loud"], corpus), rel=1e-12
    )
    single._compact()  # its appended postings merged into a narrow base
    assert single._postings._tfs.dtype == wanted
    assert _bm25_state(single, queries) == expected


def test_narrow_keeps_every_count_exact_at_every_width() -> None:
    from memory_worker.search.index import _narrow

    for top, dtype in [
        (0, np.uint8),
        (255, np.uint8),
        (256, np.uint16),
        (65_535, np.uint16),
        (65_536, np.uint32),
        ((1 << 32) - 1, np.uint32),
        (1 << 40, np.uint64),  # a damaged snapshot's absurd count still loads, exactly
    ]:
        values = np.array([1, 2, top], np.int64)
        narrow = _narrow(values)
        assert narrow.dtype == dtype
        assert narrow.astype(np.int64).tolist() == values.tolist()
    assert _narrow(np.empty(0, np.int64)).dtype == np.uint8


def test_the_boost_bound_follows_every_column_and_slot_change() -> None:
    """`boost_columns` (recall's bound on any memory's boosts) is kept between queries: a pin, a
    re-corroboration, a new memory and a removal must each be seen by the next read."""

    def fresh(index: LexicalIndex) -> tuple[float, bool]:
        n = index.slot_count
        return max(float(index.corroboration[:n].max()), 0.0), bool(index.pinned[:n].any())

    index = LexicalIndex()
    index.add_doc(IndexedDoc("a", ["tea"], corroboration=1))
    index.add_doc(IndexedDoc("b", ["coffee"], corroboration=2))
    assert index.boost_columns() == fresh(index) == (2.0, False)
    index.lexical(["tea"])  # a query in between keeps the query cache the bound lives in
    index.update_columns(IndexedDoc("a", ["tea"], corroboration=1, pinned=True))
    assert index.boost_columns() == fresh(index) == (2.0, True)
    index.update_columns(IndexedDoc("b", ["coffee"], corroboration=7))
    assert index.boost_columns() == fresh(index) == (7.0, True)
    index.add_doc(IndexedDoc("c", ["tea"], corroboration=9))
    assert index.boost_columns() == fresh(index) == (9.0, True)
    index.remove("a")  # a dead slot keeps its columns until compaction, as the bound reads them
    assert index.boost_columns() == fresh(index)


class _Reversed(frozenset[str]):
    """A set of entity terms that iterates the other way round, as a frozenset of the same
    strings may in a process with another hash seed."""

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(super().__iter__(), reverse=True))


@pytest.mark.parametrize("bulk", [True, False])
def test_the_analysis_does_not_depend_on_the_order_entity_terms_iterate_in(bulk: bool) -> None:
    """`analysis_of` (what `.index.npz` holds) of the same documents added the same way is the
    same whatever order each one's entity-term set iterates in."""
    entities = ["ana", "porto", "rui", "zelda", "bees"]
    analyses = []
    for kind in (frozenset, _Reversed):
        docs = [
            IndexedDoc(f"d{i}", [*entities[i:], "note"], entity_terms=kind(entities[i:]))
            for i in range(4)
        ]
        index = LexicalIndex()
        if bulk:
            index.add_many(docs)
        else:
            for doc in docs:
                index.add_doc(doc)
        analyses.append(index.analysis_of([doc.doc_id for doc in docs]))
    first, second = analyses
    assert first.vocab == second.vocab
    assert first.entity_counts.tolist() == second.entity_counts.tolist() == [5, 4, 3, 2]
    assert first.entity_terms.tolist() == second.entity_terms.tolist()
