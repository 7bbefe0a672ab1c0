"""The fused recall score: two arms (lexical BM25, semantic cosine) on one scale, plus boosts.

Each arm is first turned into a per-query relevance around [0, 1] — BM25 over what a memory holding
every query word once would score, cosine between the bank's "unrelated" reference and the query's
best cosine — so neither arm's raw
scale (BM25 grows with query length; a model's cosines crowd into its own band) decides the
mix. The relevances are fused (a weighted sum, or reciprocal-rank fusion), entity, corroboration
and pin boosts are added, and the sum is decayed by recency under a policy the question's shape
picks. Pure arithmetic over aligned numpy arrays; the weights are named so a tuning change is one
reviewed line (the figures behind them: docs/BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

__all__ = [
    "DAY_MS",
    "DEFAULT_FUSION",
    "DEFAULT_LANE_WEIGHTS",
    "LONG_HALF_LIFE_DAYS",
    "Arms",
    "Fusion",
    "FusionMethod",
    "LaneWeights",
    "Recency",
    "fused_scores",
    "kth_value",
    "lexical_relevance",
    "rank_order",
    "recency",
    "semantic_relevance",
]

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

DAY_MS = 86_400_000
LONG_HALF_LIFE_DAYS = 3650.0  # past the floor, age still orders otherwise-equal statements


class FusionMethod(StrEnum):
    SCORE = "score"  # weighted sum of the normalised arms
    RRF = "rrf"  # reciprocal-rank fusion: Σ weight / (k + rank in the arm)


class Recency(StrEnum):
    """How much the age of a statement counts, by what the question asks."""

    CURRENT = "current"  # "where do I live now?": the newest statement of a fact should win
    DEFAULT = "default"  # no cue: age only breaks ties (LoCoMo asks about every session alike)
    PAST = "past"  # "when did I…", "last year": an old statement is as good as a new one


@dataclass(frozen=True, slots=True)
class Fusion:
    """The weights of the fused score (tuned on LoCoMo conversations 0-4 and the golden tuning
    queries; docs/BENCHMARKS.md has the side-by-side runs)."""

    method: FusionMethod = FusionMethod.SCORE
    lexical: float = 1.0  # weight of the lexical relevance (1.0 ≈ every query word, once)
    semantic: float = 1.0  # weight of the semantic relevance (1.0 = the query's best cosine)
    semantic_reference: float = 0.5  # the quantile of the bank's cosines that counts as unrelated
    # How much of the bank's mean vector the semantic arm takes out of the query and every memory
    # before comparing them (`LexicalIndex.centered_cosine`; 0: plain cosine, 1: all of it).
    # Chosen with `semantic` on the tuning halves: the best LoCoMo 0-4 recall@10 among settings
    # that leave the golden tuning queries no worse on hit@3, MRR and traps (full centring at
    # 0.75 scored 0.722 on LoCoMo but trapped two more golden queries; BENCHMARKS has the grid).
    center: float = 0.75
    # When the query names an entity (a person, a project), the centre moves from the bank's
    # mean toward the mean of the memories carrying it, by `entity_center` × the entity's
    # specificity (the share of the bank NOT carrying it), at most all the way
    # (`ranking._centre`). Every memory that names "Ana" shares Ana's direction, so a bare "Ana:
    # Thanks!" sat near every question about Ana; the entity boost already counts the name, and
    # the arm then ranks what is said about her. An entity on half the bank or less moves it all
    # the way; the bank's owner (`user`, on nearly every memory) hardly moves it. 0: off. Chosen
    # on LoCoMo 0-4 and the golden tuning queries (`bench/tune_recall.py --grid
    # 'entity_center=…'`; docs/BENCHMARKS.md): 0 / 1 / 2 / 3 gave recall@10 0.730 / 0.733 /
    # 0.738 / 0.738, and 3 lost a golden tuning query at hit@3.
    entity_center: float = 2.0
    # How much of the question form the arm takes out of the query (`ranking._question_form`):
    # the direction from the bank's stated memories' mean vector to its questions' ("What did you
    # make of it?"). A question's embedding leans toward stored questions by form alone,
    # and what answers it is a statement. Only in a bank holding both (a transcript; extracted
    # facts ask nothing, and their bank is untouched). 0: off, 1: all of it. Chosen on LoCoMo 0-4
    # (`bench/tune_recall.py --grid 'question_form=…'`): 0 / 0.5 / 1 gave recall@10 0.738 / 0.743
    # / 0.747, category 1 0.483 / 0.503 / 0.505; the golden persona asks nothing.
    question_form: float = 1.0
    rrf_k: float = 10.0  # RRF's rank offset: small, because only the top ~10 matter here
    entity: float = 0.6  # per query term naming one of the memory's entities (× its specificity)
    # × the score of a returned memory carrying none of the entities the query names
    # (`ranking._unnamed_demoted`): a question about Nate is answered by memories about Nate
    # (LoCoMo: 97% of category-1 evidence turns are the named speaker's own), and the entity
    # boost adds the same to all of them however weakly each matches. 1: off. Chosen on LoCoMo
    # 0-4 (`bench/tune_recall.py --grid 'unnamed=…'`, docs/BENCHMARKS.md "Memories of the
    # named entity"): 1 / 0.95 / 0.9 / 0.85 / 0.8 gave category 1 0.520 / 0.524 / 0.528 / 0.528
    # / 0.533, and 0.8 cost category 4 (0.886 → 0.882); the golden tuning queries gained a hit.
    unnamed: float = 0.9
    corroboration: float = 0.03  # × ln(1 + times re-observed): diminishing returns
    pinned: float = 0.07  # a bonus, not a trump: pinned memories still decay
    # Lexical + semantic relevance a memory needs at all. Off: a long query (extraction asks with a
    # whole chat message) matches a real memory with a small share of its words, and on the
    # golden tuning queries 0.05 changed nothing but one pollution.
    min_relevance: float = 0.0
    duplicate: float = 0.2  # × the score of a restatement of a better hit
    # × the score of another's fact when the question asks about the speaker alone ("what foods
    # am I allergic to?" and "Marta is allergic to cats.": `ranking._others_demoted`). 1: off.
    # Chosen on the golden tuning queries (docs/BENCHMARKS.md "The speaker's own facts"): 1 /
    # 0.9 / 0.75 / 0.6 / 0.5 gave hybrid+e5 tuning traps 1 / 1 / 0 / 0 / 0 and hybrid+minilm 3 /
    # 3 / 2 / 1 / 1; the mildest of the best. LoCoMo asks nothing in the first person: unmoved.
    others: float = 0.6
    dated: float = 0.2  # a memory stating a date or time, when the question asks "when"
    # A memory stated within the stretch of time the question names ("in January 2022", "on 1
    # May", "last month": `core.temporal.named_span`), widened by `span_before_days` before it
    # and `span_after_days` after it, or — with `span_told` — whose own relative words point
    # into it from when it was stated ("we went to a convention last month", said in April, for
    # "in March": `core.temporal.told_span`): an event is mostly told after it happened. 0: off.
    # Chosen on LoCoMo 0-4 (`bench/tune_recall.py --grid 'in_span=…;span_after_days=…;
    # span_before_days=…;span_told=…'`, docs/BENCHMARKS.md "Dates in questions"): in_span 0 /
    # 0.3 / 0.5 / 1 gave recall@10 with e5 0.771 / 0.787 / 0.798 / 0.791 (3 days after, 1
    # before; before 0 cost category 3 without an embedder); the told span then took category 2
    # 0.927 → 0.932 (0.889 → 0.899 without an embedder) and let the margin after shrink to a
    # day. No category fell; the golden queries name no time and are untouched.
    # `span_told` is off by default: it reads each dated memory's text at query time, and a
    # question naming a time over a big bank paid for thousands of them (recall p99 at 100k
    # memories 3.2 → 72 ms, `bench/recall_ab.py`); without it, LoCoMo 0-4 gave 0.803 against
    # 0.804 (0.755 against 0.758 without an embedder). Its place is an index column, read once.
    in_span: float = 0.5
    span_before_days: float = 1.0
    span_after_days: float = 1.0
    span_told: bool = True
    expand_docs: int = 4  # second hop: first hits per arm lending terms (0: no second hop)
    expand_terms: int = 10  # terms taken from them
    expand_weight: float = 0.5  # their BM25 against the query's own
    # How far their mean vector pulls the query's (in centred-cosine terms). Off: 0.2 gave LoCoMo
    # 0-4 recall@10 0.698 → 0.707 and golden tuning MRR 0.767 → 0.770, but it costs a second pass
    # over the vectors (rank() with vectors ~2x) and the golden gate's report half fell (hit@3
    # 0.821 → 0.795): a gain on the tuned half only.
    expand_vector: float = 0.0
    # A list question's answer type ("countries" of "What European countries has Maria been
    # to?", `core.text.answer_type`), embedded alone (`RecallQuery.type_vector`), takes this
    # share of the query vector: the answers name instances ("Spain", "England"), which sit
    # nearer the kind than the whole question does. 0: off. Chosen on LoCoMo 0-4
    # (`bench/tune_recall.py --grid 'answer_type=…'`, docs/BENCHMARKS.md "Answer types").
    answer_type: float = 0.5
    # Conversational context: a hit among the best `context_anchors` that asks a question lends
    # `context` × its score to the `context_span` memories saved after it in its session: the
    # answer to "what got you into running?" is the turn after it ("my kids wanted a hobby"),
    # sharing no word with the query. 0: off. Stated facts ask nothing, so a bank of them is
    # untouched. Chosen on LoCoMo 0-4 (`bench/tune_recall.py --grid 'context=…'`).
    context: float = 0.6
    context_anchors: int = 5
    context_span: int = 2
    # Session support: among the best `session_pool` hits, a memory gains `session` × the best
    # score of another hit of its session, when the better of the two has `session_strong` of the
    # best score (`ranking._session_supported`): a conversation that answers the question in
    # several turns outranks a lone match elsewhere. Memories saved outside any session are
    # untouched, and a session's own order never changes. 0: off. Chosen on LoCoMo 0-4
    # (`bench/tune_recall.py --grid 'session=…;session_strong=…'`; docs/BENCHMARKS.md "Stop 38").
    session: float = 0.15
    session_strong: float = 0.85
    session_pool: int = 40
    # A question about the present (`Recency.CURRENT`): an older hit stating the same fact as a
    # newer one is scored just under it (`ranking._newest_statements_first`). Past the
    # half-life the decay alone barely orders two statements of one fact (their ratio at the
    # floor is ~0.9), so an old one whose words match the question better still won ("the
    # user's favourite TV series is Succession." over a newer "right now the user's favourite
    # series is Severance." for "what's my favourite tv show these days?"). The same fact: the
    # same subject and people, vectors at least `same_fact` of the way from an unrelated pair's
    # cosine (the bank's typical pair's, or the pair's mean with the other hits when higher) to
    # a restatement's (the embedder's `duplicate_cosine`), and the newer a strong hit too
    # (`same_fact_strong` of the older's score, as `session_strong`). 0: off. Half way is set by
    # argument: the tuning halves cannot choose it (golden `tu-15`, `tu-14`'s twin, is right
    # either way; LoCoMo asks 8 questions about the present and none moves); docs/BENCHMARKS.md
    # "The newest statement of a fact" has the grid and a held-out household.
    same_fact: float = 0.5
    same_fact_strong: float = 0.85
    # Where the recency decay stops, per question shape (1.0: no decay at all).
    current_floor: float = 0.5
    default_floor: float = 1.0
    past_floor: float = 1.0

    def floor(self, policy: Recency) -> float:
        if policy is Recency.CURRENT:
            return self.current_floor
        return self.past_floor if policy is Recency.PAST else self.default_floor


DEFAULT_FUSION = Fusion()


@dataclass(frozen=True, slots=True)
class LaneWeights:
    """Seed 004's `association_weights`: how much each lane counts, normalised over the lanes a
    recall actually asks (a recall with no window and no goal is content alone, exactly as
    without lanes). Defaults and their measurement: docs/BENCHMARKS.md "Association lanes"."""

    content: float = 1.0
    context: float = 0.0
    intention: float = 0.0

    def shares(self, asked: tuple[str, ...]) -> dict[str, float]:
        """The normalised weight of content and of each asked lane (they sum to 1; all-zero
        weights fall back to content alone)."""
        raw = {"content": max(self.content, 0.0)}
        raw.update({lane: max(float(getattr(self, lane)), 0.0) for lane in asked})
        total = sum(raw.values())
        if total <= 0.0:
            return {"content": 1.0}
        return {lane: weight / total for lane, weight in raw.items() if weight > 0.0}


DEFAULT_LANE_WEIGHTS = LaneWeights()


@dataclass(frozen=True, slots=True)
class Arms:
    """What ranking knows of each candidate, as aligned arrays (one element per candidate)."""

    bm25: Floats
    query_weight: float  # `LexicalIndex.query_weight` of the query's terms
    # None: the query names no entity (every hit 0: adding 0.0 to a score changes no bit of it,
    # so the array is neither made nor added)
    entity_hits: Floats | None
    corroboration: Floats
    pinned: Bools
    age_ms: Floats
    semantic: Floats | None = None  # relevance in [0, 1] (`semantic_relevance`); None: no arm
    dated: Bools | None = None  # the memory states a date or a time of day
    in_span: Bools | None = None  # stated within the time the question names; None: it names none
    # Per asked lane: its share relative to content's (`LaneWeights.shares`) and its relevance
    # in [0, 1]; content's share 0 (a purely situational recall) is marked by `content_off`.
    lanes: tuple[tuple[float, Floats], ...] = ()
    content_off: bool = False


def recency(age_ms: Floats, half_life_days: float, floor: float = 0.7) -> Floats:
    """Decay by age since the fact was last stated: the half-life down to `floor`, then a much
    slower slope, so between two old statements of one fact the newer still wins."""
    age_days = np.maximum(age_ms, 0.0) / DAY_MS
    if floor >= 1.0:
        # No decay, but a vanishing tie-break toward the newer statement of equal relevance (the
        # half-life's curve is not computed: it is unused here, and this is most questions).
        tie: Floats = 1.0 - 1e-6 * (1.0 - np.exp2(age_days / -LONG_HALF_LIFE_DAYS))
        return tie
    fast: Floats = np.exp2(age_days / -max(half_life_days, 1e-9))
    slow: Floats = floor * np.exp2(age_days / -LONG_HALF_LIFE_DAYS)
    return np.maximum(fast, slow)


# Sizes where `kth_value` asks numpy's introselect rather than its SIMD quickselect: measured on
# the benchmark machine (AMD EPYC, AVX-512, numpy 2.4), introselect took a third of the time from
# a few hundred values to ~30,000 (2,600: ~8 against ~24 us; 10,000: ~22 against ~85), and was no
# quicker below or, at some sizes, past that.
_INTROSELECT_SIZES = range(256, 32_769)


def kth_value(values: Floats, kth: int) -> float:
    """`np.partition(values, kth)[kth]`, the value `kth` would hold in sorted order: one value
    whichever algorithm finds it. numpy 2 hands a single `kth` to its SIMD quickselect and a
    sequence of them to introselect; a big pool's cut (`ranking._contenders`) or an arm's
    reference spent most of its partition there (`_INTROSELECT_SIZES`)."""
    # The array's own `partition` on a copy: what `np.partition` runs, without its Python
    # wrappers (dispatch, `asanyarray`: ~1 us of each of a recall's two to five calls).
    part = values.copy()
    part.partition((kth, kth) if values.size in _INTROSELECT_SIZES else kth)
    return float(part[kth])


def lexical_relevance(bm25: Floats, query_weight: float) -> Floats:
    """BM25 over the query's own weight (`LexicalIndex.query_weight`): about 1.0 for a memory of
    average length holding every query word, near 0 for one matching only a common word — even
    when that is the best match there is (normalising by the best match would make it 1.0)."""
    if query_weight <= 0.0:
        return np.zeros(bm25.size, np.float64)
    relevance: Floats = bm25 / query_weight
    return relevance


def semantic_relevance(cosine: Floats, reference: float, best: float) -> Floats:
    """Cosine rescaled so the query's "unrelated" reference is 0 and its best match 1."""
    span = best - reference
    if span <= 1e-9:  # one memory, or all alike: the best are relevant when at all close
        flat: Floats = ((cosine >= best) & (best > 0.0)).astype(np.float64)
        return flat
    relevance: Floats = np.clip((cosine - reference) / span, 0.0, 1.0)
    return relevance


def rank_order(values: Floats) -> Floats:
    """1-based rank of each value, best (largest) first; zeros rank last (never "found")."""
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(values.size, np.float64)
    ranks[order] = np.arange(1, values.size + 1, dtype=np.float64)
    ranks[values <= 0.0] = np.inf
    return ranks


def fused_scores(
    arms: Arms, *, half_life_days: float, policy: Recency, fusion: Fusion = DEFAULT_FUSION
) -> Floats:
    lexical = lexical_relevance(arms.bm25, arms.query_weight)
    if fusion.method is FusionMethod.RRF:
        base = fusion.lexical * fusion.rrf_k / (fusion.rrf_k + rank_order(lexical))
        if arms.semantic is not None:
            base = base + fusion.semantic * fusion.rrf_k / (
                fusion.rrf_k + rank_order(arms.semantic)
            )
    else:
        base = fusion.lexical * lexical
        if arms.semantic is not None:
            base = base + fusion.semantic * arms.semantic
    if arms.lanes:
        # Relative to content's share, so content keeps its scale against the boosts below.
        base = np.zeros(base.size, np.float64) if arms.content_off else base
        for share, relevance in arms.lanes:
            base = base + share * relevance
    if arms.entity_hits is not None:
        base = base + fusion.entity * arms.entity_hits
    base = base + fusion.corroboration * np.log1p(arms.corroboration) + fusion.pinned * arms.pinned
    if fusion.dated and arms.dated is not None:
        base = base + fusion.dated * arms.dated
    if fusion.in_span and arms.in_span is not None:
        base = base + fusion.in_span * arms.in_span
    decay = recency(arms.age_ms, half_life_days, fusion.floor(policy))
    scored: Floats = base * decay
    return scored
