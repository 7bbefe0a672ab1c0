"""The recall-quality gate (SPEC C17): fresh metrics on the golden set against the snapshot.

`golden/recall_quality.json` holds hit@1/3, MRR@10, nDCG@10, recall@10, traps and duplicate
pollution per system (lexical, bm25-entity, semantic and hybrid with each local embedder),
category, language and half (`tests/recall_quality.py` computes them). Two kinds of check:
absolute floors (the SPEC §4 bars on the default hybrid, and floors for the other systems), and
"no worse than the snapshot": a rate that drops by more than 0.02, a trap / pollution count that
grows, or a query trapped or polluted by name that was not before, fails. An embedder that does not
load, or is not the one the snapshot ran with, fails (a missing model must not pass as "skipped").
The gates rank each local model's recorded vectors, the same on every CPU; the live model is
checked against them (`tests/recorded_vectors.py` says why).
`UPDATE_GOLDENS=recall` re-baselines after an intended change. The golden set is checked against
its own spec first, so a typo in a key cannot quietly make a query unanswerable.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest

from memory_worker.adapters.embedders import LOCAL_MODELS, EmbedderUnavailable, load_local

from . import recall_quality as rq
from .goldens import updating
from .recorded_vectors import RERECORD, embed_query

UPDATE = updating("recall")
REBASELINE = "UPDATE_GOLDENS=recall .venv/bin/python -m pytest tests/test_recall_quality.py"
DAY_MS = 86_400_000

MIN_MEMORIES = 76
MIN_QUERIES = 62
MIN_PORTUGUESE = 20
MIN_SUPERSEDED = 6
MIN_DUP_PAIRS = 4


@pytest.fixture(name="golden", scope="module")
def _golden() -> rq.Golden:
    return rq.load()


@pytest.fixture(name="fresh", scope="module")
def _fresh(golden: rq.Golden, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return asyncio.run(rq.run(tmp_path_factory.mktemp("recall-quality"), golden))


@pytest.fixture(name="stored", scope="module")
def _stored(fresh: dict[str, Any]) -> dict[str, Any]:
    if UPDATE:
        rq.SNAPSHOT.write_text(rq.render_snapshot(fresh), encoding="utf-8")
        return fresh
    if not rq.SNAPSHOT.is_file():
        pytest.fail(f"{rq.SNAPSHOT.name} is missing: create it with `{REBASELINE}` and review it")
    stored: dict[str, Any] = json.loads(rq.SNAPSHOT.read_text(encoding="utf-8"))
    return stored


# --- the golden set meets its own spec -------------------------------------------------------


def test_golden_set_is_big_enough(golden: rq.Golden) -> None:
    langs = Counter(query.lang for query in golden.queries)
    categories = Counter(query.category for query in golden.queries)
    assert len(golden.memories) >= MIN_MEMORIES, len(golden.memories)
    assert len(golden.queries) >= MIN_QUERIES, len(golden.queries)
    assert langs["pt"] >= MIN_PORTUGUESE, langs
    assert set(langs) == set(rq.LANGUAGES), langs
    assert set(categories) == set(rq.CATEGORIES), categories
    superseded = [m for m in golden.memories if m.superseded_by is not None]
    duplicates = [m for m in golden.memories if m.dup_of is not None]
    assert len(superseded) >= MIN_SUPERSEDED, [m.key for m in superseded]
    assert len(duplicates) >= MIN_DUP_PAIRS, [m.key for m in duplicates]


def test_keys_ids_and_texts_are_unique(golden: rq.Golden) -> None:
    keys = Counter(m.key for m in golden.memories)
    texts = Counter(m.id for m in golden.memories)  # the fingerprint: text up to case/space
    queries = Counter(q.id for q in golden.queries)
    assert not [k for k, n in keys.items() if n > 1], "duplicate memory keys"
    assert not [t for t, n in texts.items() if n > 1], "two memories share a text"
    assert not [q for q, n in queries.items() if n > 1], "duplicate query ids"


def test_memories_are_well_formed(golden: rq.Golden) -> None:
    as_of = golden.as_of_ms
    problems = []
    for m in golden.memories:
        created = rq.iso_ms(m.created_at)
        if not as_of - 2 * 366 * DAY_MS <= created < as_of:
            problems.append(f"{m.key}: created_at {m.created_at} is not in the two years before")
        if len(m.tags) > 2:
            problems.append(f"{m.key}: more than 2 tags")
        if any(e != e.lower() or not e.strip() for e in m.entities):
            problems.append(f"{m.key}: entities must be lowercase handles")
        if not m.text.strip() or "\n" in m.text:
            problems.append(f"{m.key}: text must be one non-empty line")
    assert not problems, "\n".join(problems)


def test_links_point_at_existing_memories(golden: rq.Golden) -> None:
    by_key = golden.by_key()
    problems = []
    for m in golden.memories:
        for field in ("superseded_by", "outdated_by", "dup_of"):
            target = getattr(m, field)
            if target is not None and target not in by_key:
                problems.append(f"{m.key}.{field} -> unknown {target!r}")
    for q in golden.queries:
        for key in [*q.relevant, *q.trap]:
            if key not in by_key:
                problems.append(f"{q.id}: unknown key {key!r}")
    assert not problems, "\n".join(problems)


def test_updates_point_forward_at_live_successors(golden: rq.Golden) -> None:
    """A superseded or outdated fact has a later, live successor; duplicates are both live."""
    by_key = golden.by_key()
    problems = []
    for m in golden.memories:
        for field in ("superseded_by", "outdated_by"):
            target = getattr(m, field)
            if target is None:
                continue
            successor = by_key[target]
            if successor.superseded_by is not None:
                problems.append(f"{m.key}.{field} -> {target}, which is itself superseded")
            if rq.iso_ms(successor.created_at) <= rq.iso_ms(m.created_at):
                problems.append(f"{m.key}.{field} -> {target}, which is not newer")
        if m.dup_of is not None:
            twin = by_key[m.dup_of]
            if m.superseded_by is not None or twin.superseded_by is not None:
                problems.append(f"{m.key} dup_of {twin.key}: both members must be live")
            if twin.dup_of is not None:
                problems.append(f"{m.key} dup_of {twin.key}, itself a duplicate: use the head")
    assert not problems, "\n".join(problems)


def test_queries_are_well_formed(golden: rq.Golden) -> None:
    by_key = golden.by_key()
    problems = []
    for q in golden.queries:
        if q.lang not in rq.LANGUAGES or q.category not in rq.CATEGORIES:
            problems.append(f"{q.id}: lang {q.lang!r} / category {q.category!r}")
        if not q.relevant:
            problems.append(f"{q.id}: no relevant memory")
        if any(grade not in (1, 2, 3) for grade in q.relevant.values()):
            problems.append(f"{q.id}: grades are 1..3")
        retired = [k for k in q.relevant if k in by_key and by_key[k].superseded_by is not None]
        if retired:
            problems.append(f"{q.id}: a superseded memory cannot be relevant: {retired}")
        relevant_facts = {golden.canonical(k) for k in q.relevant if k in by_key}
        if any(golden.canonical(k) in relevant_facts for k in q.trap if k in by_key):
            problems.append(f"{q.id}: a trap is also relevant")
        if q.category == "temporal-update":
            stale = [
                k
                for k in q.trap
                if k in by_key
                and (by_key[k].superseded_by is not None or by_key[k].outdated_by is not None)
            ]
            if not stale:
                problems.append(f"{q.id}: temporal-update needs the stale fact as a trap")
    assert not problems, "\n".join(problems)


def test_import_keeps_history_and_links(golden: rq.Golden) -> None:
    """Superseded rows retire at their successor's date and point at its id; the rest are live."""
    rows = {row["id"]: row for row in rq.import_rows(golden)}
    by_key = golden.by_key()
    for m in golden.memories:
        row = rows[m.id]
        if m.superseded_by is None:
            assert row.get("invalid_at") is None, m.key
        else:
            successor = by_key[m.superseded_by]
            assert row["superseded_by"] == successor.id, m.key
            assert row["invalid_at"] == rq.iso_ms(successor.created_at), m.key


# --- the metric arithmetic -------------------------------------------------------------------


def _tiny() -> rq.Golden:
    def memory(key: str, dup_of: str | None = None) -> rq.GoldenMemory:
        return rq.GoldenMemory(
            key=key,
            text=f"fact {key}",
            entities=(),
            tags=(),
            created_at="2026-01-01",
            dup_of=dup_of,
        )

    memories = (memory("a"), memory("b"), memory("c"), memory("old"), memory("a2", dup_of="a"))
    query = rq.GoldenQuery(
        id="q", query="?", lang="en", category="lexical", relevant={"a": 3, "b": 1}, trap=("old",)
    )
    return rq.Golden("2026-11-01", memories, (query,), "tiny")


def test_metrics_count_a_duplicate_pair_once_and_grade_gains() -> None:
    golden = _tiny()
    (query,) = golden.queries
    score = rq.score_query(golden, query, ["c", "a2", "a", "b"])
    metrics = score.metrics()
    assert score.first_rank == 2
    assert metrics["hit@1"] == 0.0 and metrics["hit@3"] == 1.0 and metrics["mrr@10"] == 0.5
    assert metrics["recall@10"] == 1.0
    dcg = 3 / 1.584962500721156 + 1 / 2.321928094887362  # a2 at 2 (a at 3 earns nothing), b at 4
    idcg = 3 / 1.0 + 1 / 1.584962500721156
    assert metrics["ndcg@10"] == pytest.approx(dcg / idcg)
    assert score.polluted and not score.trapped


def test_a_trap_counts_above_the_first_relevant_or_when_none_is_found() -> None:
    golden = _tiny()
    (query,) = golden.queries
    assert rq.score_query(golden, query, ["old", "b"]).trapped
    assert not rq.score_query(golden, query, ["b", "old"]).trapped
    missed = rq.score_query(golden, query, ["c", "old"])
    assert missed.trapped and missed.first_rank is None and missed.metrics()["ndcg@10"] == 0.0
    assert not rq.score_query(golden, query, ["c"]).trapped


# --- the gate --------------------------------------------------------------------------------


def test_snapshot_is_canonical_json(stored: dict[str, Any]) -> None:
    text = rq.SNAPSHOT.read_text(encoding="utf-8")
    assert text == rq.render_snapshot(json.loads(text)), (
        f"{rq.SNAPSHOT.name} is not indent-2 sorted-key JSON; re-baseline with `{REBASELINE}`"
    )


def test_snapshot_is_of_this_golden_set(stored: dict[str, Any], golden: rq.Golden) -> None:
    assert stored["golden"]["digest"] == golden.digest, (
        f"golden/recall/ changed since {rq.SNAPSHOT.name} was taken: re-baseline with "
        f"`{REBASELINE}` and review the diff"
    )


SYSTEM_NAMES = [system.name for system in rq.SYSTEMS]

# Absolute floors, whatever the snapshot says, on the whole set and on each half. A rate floor is
# a minimum, a count floor a maximum. They sit a little under what each system measured when the
# snapshot was taken (docs/BENCHMARKS.md), so a slide is caught even after a careless re-baseline.
FLOORS: dict[str, dict[str, float]] = {
    # The centred semantic arm (search.index.centered_cosine) raised e5's hit@3 0.790 → 0.827 and
    # MRR 0.737 → 0.772 for one more polluted query, and trapped one more MiniLM query. The
    # cross-lingual alignment of e5's vectors (adapters.e5_embedder) raised hit@3 0.827 → 0.901
    # for two more polluted queries: Portuguese questions about the dog now find both of its
    # English restatements.
    rq.DEFAULT_SYSTEM: {"hit@3": 0.88, "traps": 2, "duplicate_pollution": 15},
    "hybrid+minilm": {"hit@3": 0.70, "traps": 5, "duplicate_pollution": 19},
    "bm25-entity": {"hit@3": 0.54},
    "lexical": {"hit@3": 0.58},
}
# SPEC §4's bars for the default hybrid, not reached yet (test_spec_bars_for_the_default_hybrid).
SPEC_BARS = {"hit@3": 0.90, "traps": 0, "duplicate_pollution": 0}
LANGUAGE_GAP = 0.05  # SPEC §4: Portuguese hit@3 within this of English's


def _system(fresh: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = fresh["systems"][name]
    if "error" in result:
        pytest.fail(
            f"{name}: the embedder did not load ({result['error']}); `./scripts/test` installs "
            "every local model, so this is a broken install, not a reason to skip",
            pytrace=False,
        )
    return result


@pytest.mark.parametrize("name", SYSTEM_NAMES)
def test_recall_quality_does_not_regress(
    name: str, stored: dict[str, Any], fresh: dict[str, Any], golden: rq.Golden
) -> None:
    assert stored["golden"]["digest"] == golden.digest, "see test_snapshot_is_of_this_golden_set"
    new = _system(fresh, name)
    old = stored.get("systems", {}).get(name)
    assert old is not None and "error" not in old, (
        f"{name} is not in {rq.SNAPSHOT.name}: re-baseline with `{REBASELINE}`"
    )
    assert old["embedder"] == new["embedder"], (
        f"{name}: the snapshot ran with embedder {old['embedder']!r}, this run has "
        f"{new['embedder']!r}; a changed model is re-baselined on purpose with `{REBASELINE}`"
    )
    diff = rq.compare(old, new)
    if diff.regressions:
        lines = [
            f"recall quality regressed for {name} (retrieval {old['retrieval']!r} -> "
            f"{new['retrieval']!r}):",
            *(f"  {line}" for line in diff.regressions),
        ]
        if diff.lost_ground:
            lines.append("queries that lost ground: " + "; ".join(diff.lost_ground))
        lines.append(
            f"If the change is intended, re-baseline with `{REBASELINE}` and review the diff "
            "(`.venv/bin/python -m tests.recall_quality` prints the tables)."
        )
        pytest.fail("\n".join(lines), pytrace=False)
    if diff.improvements:
        print(
            f"\nrecall quality improved for {name}: "
            + "; ".join(diff.improvements)
            + f"\nconsider re-baselining with `{REBASELINE}` so the gate holds the gain"
        )


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_absolute_floors(name: str, fresh: dict[str, Any]) -> None:
    result = _system(fresh, name)
    problems = []
    for block_name, block in (("overall", result["overall"]), *result["by_half"].items()):
        for metric, floor in FLOORS[name].items():
            value = block[metric]
            if metric in rq.COUNT_METRICS and value > floor:
                named = result["trapped"] if metric == "traps" else result["polluted"]
                problems.append(f"{block_name} {metric} {value} > {floor:g} ({', '.join(named)})")
            elif metric in rq.RATE_METRICS and value < floor:
                problems.append(f"{block_name} {metric} {value:.3f} < {floor:.2f}")
    assert not problems, f"{name}: " + "; ".join(problems)


def _spec_misses(fresh: dict[str, Any]) -> list[str]:
    result = _system(fresh, rq.DEFAULT_SYSTEM)
    misses = []
    overall = result["overall"]
    if overall["hit@3"] < SPEC_BARS["hit@3"]:
        misses.append(f"hit@3 {overall['hit@3']:.3f} < {SPEC_BARS['hit@3']}")
    if result["trapped"]:
        misses.append(f"trapped: {', '.join(result['trapped'])}")
    if result["polluted"]:
        misses.append(f"duplicate pollution: {', '.join(result['polluted'])}")
    languages = result["by_language"]
    gap = languages["en"]["hit@3"] - languages["pt"]["hit@3"]
    if gap > LANGUAGE_GAP:
        misses.append(
            f"Portuguese hit@3 {languages['pt']['hit@3']:.3f} trails English "
            f"{languages['en']['hit@3']:.3f} by {gap:.3f} > {LANGUAGE_GAP}"
        )
    return misses


@pytest.mark.xfail(
    strict=True,
    reason="SPEC §4 golden bars (hit@3 ≥ 0.90, traps 0, pollution 0, PT within 0.05 of EN) are not "
    "all reached: the default hybrid reaches hit@3 0.91, Portuguese 0.93 (English 0.90) and traps "
    "none, but pollutes 14 (docs/BENCHMARKS.md); strict, so reaching them turns this red until "
    "the mark goes",
)
def test_spec_bars_for_the_default_hybrid(fresh: dict[str, Any]) -> None:
    misses = _spec_misses(fresh)
    assert not misses, f"{rq.DEFAULT_SYSTEM}: " + "; ".join(misses)


def _arm_losses(fresh: dict[str, Any]) -> list[str]:
    problems = []
    for system in rq.SYSTEMS:
        if system.mode != "hybrid" or system.model is None:
            continue
        hybrid = _system(fresh, system.name)
        arms = [
            _system(fresh, "lexical"),
            _system(fresh, system.name.replace("hybrid", "semantic")),
        ]
        for section, names in (("by_category", rq.CATEGORIES), ("by_language", rq.LANGUAGES)):
            for group in names:
                best = max(arm[section][group]["recall@10"] for arm in arms)
                got = hybrid[section][group]["recall@10"]
                if got < best - 0.01:
                    problems.append(f"{system.name} {group}: recall@10 {got:.3f} < {best:.3f}")
    return problems


@pytest.mark.xfail(
    strict=True,
    reason="on the golden set the arms are measured without a cutoff (lexical and semantic mode "
    "rank every memory) and the hybrid with one: its shorter lists lose recall@10 in identity "
    "(0.65 against the semantic arm's 0.76), where the arm's lower places still hold weak relevant "
    "memories",
)
def test_hybrid_is_no_worse_than_its_arms(fresh: dict[str, Any]) -> None:
    """SPEC §4: the fusion never loses to its own arms (by more than one query in a hundred)."""
    problems = _arm_losses(fresh)
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize(
    "group",
    # Portuguese was an expected failure (the hybrid one query of 29 under its plain-cosine arm)
    # until the named-entity rule (`Fusion.unnamed`) closed the gap.
    ["overall", "en", "pt"],
)
def test_hybrid_beats_its_arms_at_the_top(fresh: dict[str, Any], group: str) -> None:
    """What the cutoff cannot excuse: the default hybrid's hit@3 is no worse than either arm's
    (− 0.01), overall and per language."""
    hybrid = _system(fresh, rq.DEFAULT_SYSTEM)
    arms = [
        _system(fresh, "lexical"),
        _system(fresh, rq.DEFAULT_SYSTEM.replace("hybrid", "semantic")),
    ]

    def hit3(result: dict[str, Any]) -> float:
        block = result["overall"] if group == "overall" else result["by_language"][group]
        return float(block["hit@3"])

    best = max(hit3(arm) for arm in arms)
    assert hit3(hybrid) >= best - 0.01, f"{group}: {hit3(hybrid):.3f} < {best:.3f}"


def test_every_system_ran_what_it_says(fresh: dict[str, Any]) -> None:
    """A hybrid with a model must have fused the semantic arm on every query (a slow or failing
    embedder would quietly measure `bm25-entity` under the model's name)."""
    expected = {"lexical": "lexical", "semantic": "semantic"}
    for system in rq.SYSTEMS:
        result = _system(fresh, system.name)
        wanted = expected.get(system.mode) or (
            "bm25-entity-semantic" if system.model else "bm25-entity"
        )
        assert result["retrieval"] == wanted, (system.name, result["retrieval"])


def test_the_report_renders(fresh: dict[str, Any]) -> None:
    table = rq.render_table(fresh)
    assert "overall" in table and "cat:temporal-update" in table and "lang:pt" in table


# Two CPU makers give one text vectors at cosine ~0.9999 (tests/recorded_vectors.py); the bar
# leaves room for a maker not yet seen. Another model, another alignment or another text gives far
# less than this.
RECORDED_COSINE = 0.995


@pytest.mark.parametrize("model", LOCAL_MODELS)
def test_the_recorded_vectors_are_what_each_model_gives_here(model: str) -> None:
    """The gates rank recorded vectors, so the live model must still give them on this machine:
    the same model name and duplicate cosine, and every query and text within CPU noise. A model
    that does not load fails here (`./scripts/test` installs every local model)."""
    recording = rq.recorded(model)
    try:
        live = load_local(model)
    except EmbedderUnavailable as exc:
        pytest.fail(f"{model} did not load ({exc}): a broken install, not a reason to skip")
    assert live.model == recording.model, (
        f"the vectors were recorded with {recording.model}, the live model is {live.model}: "
        f"re-record with `{RERECORD}`"
    )
    assert getattr(live, "duplicate_cosine", None) == recording.duplicate_cosine

    async def embed_all() -> tuple[list[list[float]], list[list[float]]]:
        queries = [await embed_query(live, text) for text in recording.queries]
        return queries, await live.embed(list(recording.texts))

    live_queries, live_texts = asyncio.run(embed_all())
    for kind, table, vectors in (
        ("query", recording.queries, live_queries),
        ("text", recording.texts, live_texts),
    ):
        stored = np.array(list(table.values()), dtype=np.float64)
        fresh = np.array(vectors, dtype=np.float64)
        cosines = (stored * fresh).sum(axis=1) / (
            np.linalg.norm(stored, axis=1) * np.linalg.norm(fresh, axis=1)
        )
        worst = int(np.argmin(cosines))
        assert cosines[worst] >= RECORDED_COSINE, (
            f"{model} now embeds the {kind} {list(table)[worst][:60]!r} at cosine "
            f"{cosines[worst]:.4f} to its recording: re-record with `{RERECORD}`"
        )
