"""Recall-quality eval (SPEC C17): a golden persona bank, real-chat queries, ranking metrics.

`golden/recall/persona.json` is one person as an agent's extraction would have stored him over
two years; `golden/recall/queries.json` asks about him in English and Portuguese. Every query runs
through the public `memory::recall` (limit 10) with the clock frozen at the persona's `as_of`, and
is scored with hit@1/3, MRR@10, nDCG@10 (graded, log2 discount, ideal-ordering normaliser),
recall@10, traps and duplicate pollution — overall, per category and per language. A `dup_of` pair
is one fact: the second member found earns nothing (and both in the top 10 is pollution).

Every system runs on its own fresh bank, side by side in one run: `lexical` (plain BM25),
`bm25-entity` (the fused ranking without an embedder: what a one-shot CLI without the model or a
server without one serves), and `semantic+<model>` / `hybrid+<model>` for each local embedding
model. The queries are split into a tuning half (ids listed in `queries.json`) and a report half;
metrics are given for both. `python -m tests.recall_quality` prints the tables; the gate is
`tests/test_recall_quality.py` against the snapshot `golden/recall_quality.json`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memory_worker.adapters.embedders import (
    ALIASES,
    DEFAULT_LOCAL_MODEL,
    LOCAL_MODELS,
    EmbedderUnavailable,
    load_local,
)
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.text import fingerprint
from memory_worker.storage.store import Store

from .fakes import FixedClock
from .recorded_vectors import (
    Recorder,
    Recording,
    ReplayEmbedder,
    keep,
    load_recording,
    recording_path,
    rerecording,
)

__all__ = [
    "CATEGORIES",
    "COUNT_METRICS",
    "DEFAULT_SYSTEM",
    "GOLDEN_DIR",
    "HALVES",
    "LIMIT",
    "RATE_METRICS",
    "SNAPSHOT",
    "SYSTEMS",
    "TOLERANCE",
    "Comparison",
    "Golden",
    "GoldenMemory",
    "GoldenQuery",
    "System",
    "build_bank",
    "compare",
    "evaluate",
    "gate_embedder",
    "golden_digest",
    "load",
    "open_service",
    "recorded",
    "render_snapshot",
    "render_table",
    "run",
]

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "golden" / "recall"
SNAPSHOT = ROOT / "golden" / "recall_quality.json"
BANK = "golden"
LIMIT = 10
CATEGORIES = (
    "lexical",
    "paraphrase",
    "identity",
    "temporal-update",
    "dated-event",
    "durable-old",
)
LANGUAGES = ("en", "pt")
HALVES = ("tuning", "report")
RATE_METRICS = ("hit@1", "hit@3", "mrr@10", "ndcg@10", "recall@10")
COUNT_METRICS = ("traps", "duplicate_pollution")  # numbers of queries; lower is better
HOLDER = {"pid": os.getpid(), "kind": "test", "command": "recall-quality"}
EVAL_EMBED_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class System:
    """One way of recalling, measured on its own bank: a `memory::recall` mode and the local
    embedding model the service has (None: no embedder)."""

    name: str
    mode: str
    model: str | None = None


def _short(model: str) -> str:
    """`e5`, `minilm`: the shortest alias of a local model, for table columns."""
    return min((alias for alias, base in ALIASES.items() if base == model), key=len, default=model)


SYSTEMS: tuple[System, ...] = (
    System("lexical", "lexical"),
    System("bm25-entity", "hybrid"),
    *(
        System(f"{mode}+{_short(model)}", mode, model)
        for model in LOCAL_MODELS
        for mode in ("semantic", "hybrid")
    ),
)
DEFAULT_SYSTEM = f"hybrid+{_short(DEFAULT_LOCAL_MODEL)}"  # what `./scripts/run` serves


def gate_embedder(model: str) -> ReplayEmbedder:
    """What the gates rank with for the local model `model`: its recorded vectors (why:
    `tests/recorded_vectors.py`), or with `UPDATE_GOLDENS=vectors` the live model, recording.

    Raises:
        EmbedderUnavailable: re-recording, and the model does not load.
    """
    if not rerecording():
        return ReplayEmbedder(recorded(model))
    if model not in _RECORDERS:  # one per run, shared by both gates
        _RECORDERS[model] = Recorder(load_local(model), recording_path(_short(model)))
    return _RECORDERS[model]


def recorded(model: str) -> Recording:
    """The vectors the gates rank for the local model `model`.

    Raises:
        NotRecorded: there is no recording (the message says how to make one).
    """
    return load_recording(recording_path(_short(model)))


_RECORDERS: dict[str, Recorder] = {}


# --- the golden set --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoldenMemory:
    key: str
    text: str
    entities: tuple[str, ...]
    tags: tuple[str, ...]
    created_at: str
    pinned: bool = False
    corroboration: int = 0
    superseded_by: str | None = None  # retired at its successor's created_at
    outdated_by: str | None = None  # a newer live statement never linked to it: both stay live
    dup_of: str | None = None  # a live paraphrase of that memory

    @property
    def id(self) -> str:
        """The id the bank would assign (content fingerprint), given explicitly on import."""
        return fingerprint(self.text)


@dataclass(frozen=True, slots=True)
class GoldenQuery:
    id: str
    query: str
    lang: str
    category: str
    relevant: Mapping[str, int]  # key -> grade 1..3
    trap: tuple[str, ...] = ()
    half: str = "report"  # "tuning": fusion weights may be chosen on it; "report": never


@dataclass(frozen=True, slots=True)
class Golden:
    as_of: str
    memories: tuple[GoldenMemory, ...]
    queries: tuple[GoldenQuery, ...]
    digest: str

    @property
    def as_of_ms(self) -> int:
        return iso_ms(self.as_of)

    def by_key(self) -> dict[str, GoldenMemory]:
        return {memory.key: memory for memory in self.memories}

    def canonical(self, key: str) -> str:
        """The fact a key stands for: a `dup_of` chain collapses onto its first member."""
        return self.facts().get(key, key)

    def facts(self) -> dict[str, str]:
        """Every key -> the fact it stands for (itself, or the head of its `dup_of` chain)."""
        by_key = self.by_key()
        out: dict[str, str] = {}
        for start in by_key:
            key, seen = start, {start}
            while (memory := by_key.get(key)) is not None and memory.dup_of is not None:
                key = memory.dup_of
                if key in seen:
                    raise ValueError(f"dup_of cycle through {key!r}")
                seen.add(key)
            out[start] = key
        return out


def iso_ms(date: str) -> int:
    """`2026-11-01` or a full ISO timestamp (UTC when no offset) → epoch ms."""
    parsed = datetime.fromisoformat(date)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def _relevant(raw: object) -> dict[str, int]:
    if isinstance(raw, Mapping):
        return {str(key): int(grade) for key, grade in raw.items()}
    if isinstance(raw, list):
        return {str(key): 1 for key in raw}
    raise ValueError(f"relevant must be a list of keys or an object key -> grade, got {raw!r}")


def golden_digest(directory: Path = GOLDEN_DIR) -> str:
    """sha256 over the golden files' parsed content (layout-insensitive): a snapshot is only
    comparable with a run over the same set."""
    h = hashlib.sha256()
    for name in ("persona.json", "queries.json"):
        content = json.loads((directory / name).read_text(encoding="utf-8"))
        h.update(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()[:16]


def load(directory: Path = GOLDEN_DIR) -> Golden:
    persona = json.loads((directory / "persona.json").read_text(encoding="utf-8"))
    queries = json.loads((directory / "queries.json").read_text(encoding="utf-8"))
    tuning = frozenset(queries.get("tuning", ()))
    memories = tuple(
        GoldenMemory(
            key=row["key"],
            text=row["text"],
            entities=tuple(row.get("entities", ())),
            tags=tuple(row.get("tags", ())),
            created_at=row["created_at"],
            pinned=bool(row.get("pinned", False)),
            corroboration=int(row.get("corroboration", 0)),
            superseded_by=row.get("superseded_by"),
            outdated_by=row.get("outdated_by"),
            dup_of=row.get("dup_of"),
        )
        for row in persona["memories"]
    )
    asked = tuple(
        GoldenQuery(
            id=row["id"],
            query=row["query"],
            lang=row["lang"],
            category=row["category"],
            relevant=_relevant(row["relevant"]),
            trap=tuple(row.get("trap", ())),
            half="tuning" if row["id"] in tuning else "report",
        )
        for row in queries["queries"]
    )
    return Golden(persona["as_of"], memories, asked, golden_digest(directory))


def import_rows(golden: Golden) -> list[dict[str, Any]]:
    """The persona as `memory-worker import` records: ids by fingerprint, dates in epoch ms, a
    superseded memory retired at its successor's date and pointing at its id."""
    by_key = golden.by_key()
    rows: list[dict[str, Any]] = []
    for memory in golden.memories:
        created = iso_ms(memory.created_at)
        row: dict[str, Any] = {
            "id": memory.id,
            "text": memory.text,
            "entities": list(memory.entities),
            "tags": list(memory.tags),
            "pinned": memory.pinned,
            "corroboration": memory.corroboration,
            "created_at": created,
            "updated_at": created,
            "stated_at": created,
        }
        if memory.superseded_by is not None:
            successor = by_key[memory.superseded_by]
            retired = iso_ms(successor.created_at)
            row.update(invalid_at=retired, updated_at=retired, superseded_by=successor.id)
        rows.append(row)
    return rows


# --- the service under test ------------------------------------------------------------------


@asynccontextmanager
async def open_service(
    data_dir: Path, as_of_ms: int, embedder: object | None = None
) -> AsyncIterator[MemoryService]:
    """A store on `data_dir` and a service whose clock is frozen at `as_of_ms`."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        kwargs: dict[str, Any] = {"clock": FixedClock(as_of_ms)}
        if embedder is not None:
            kwargs["embedder"] = embedder
        service = MemoryService(store, Settings(), **kwargs)
        # The gate measures the semantic arm, not how busy the machine is: a query embedding that
        # is slow under load must not quietly turn a hybrid run into a lexical one.
        service.query_embed_timeout_s = EVAL_EMBED_TIMEOUT_S
        yield service
    finally:
        await store.close()


async def build_bank(service: MemoryService, golden: Golden | None = None) -> dict[str, str]:
    """Import the persona into bank `golden`; returns key -> memory id, checked against
    `memory::list include_superseded` so a silently dropped or renamed record fails loudly."""
    golden = golden or load()
    report = await service.import_records(BANK, import_rows(golden))
    await service.settle()  # vectors are computed in the background; rank only once they exist
    if report.redacted:
        raise AssertionError(f"{report.redacted} golden memories were redacted on import")
    listed = await catalog.call(
        service, "memory::list", {"bank": BANK, "include_superseded": True, "limit": 500}
    )
    stored = {row["id"]: row for row in listed["memories"]}
    ids = {memory.key: memory.id for memory in golden.memories}
    missing = sorted(key for key, memory_id in ids.items() if memory_id not in stored)
    if missing:
        raise AssertionError(f"golden memories missing after import: {missing}")
    return ids


# --- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryScore:
    query: GoldenQuery
    ranked: tuple[str | None, ...]  # keys of the top `LIMIT`, None for an unknown id
    first_rank: int | None
    ndcg: float
    recall: float
    trapped: bool
    polluted: bool

    def metrics(self) -> dict[str, float]:
        rank = self.first_rank
        return {
            "hit@1": float(rank == 1),
            "hit@3": float(rank is not None and rank <= 3),
            "mrr@10": 1.0 / rank if rank is not None else 0.0,
            "ndcg@10": self.ndcg,
            "recall@10": self.recall,
            "traps": float(self.trapped),
            "duplicate_pollution": float(self.polluted),
        }


def score_query(
    golden: Golden,
    query: GoldenQuery,
    ranked: Sequence[str | None],
    fact_of: Mapping[str, str] | None = None,
) -> QueryScore:
    """Graded relevance over facts: each dup pair counts once, at its best-ranked member.
    `fact_of` (default `golden.facts()`) maps every key to the fact it stands for (after a
    consolidation, a retired memory's expectations belong to its survivor)."""
    top = tuple(ranked[:LIMIT])
    fact_of = golden.facts() if fact_of is None else fact_of
    relevant: dict[str, int] = {}
    for key, grade in query.relevant.items():
        fact = fact_of.get(key, key)
        relevant[fact] = max(grade, relevant.get(fact, 0))
    traps = {fact_of.get(key, key) for key in query.trap}
    facts = [fact_of.get(key, key) if key is not None else None for key in top]

    credited: set[str] = set()
    dcg = 0.0
    first_rank: int | None = None
    for position, found in enumerate(facts, start=1):
        if found in relevant and found not in credited:
            credited.add(found)
            dcg += relevant[found] / math.log2(position + 1)
            if first_rank is None:
                first_rank = position
    ideal = sorted(relevant.values(), reverse=True)[:LIMIT]
    idcg = sum(grade / math.log2(position + 1) for position, grade in enumerate(ideal, start=1))

    cutoff = (first_rank - 1) if first_rank is not None else len(facts)
    trapped = any(fact in traps for fact in facts[:cutoff])

    dup_facts = {fact_of[m.key] for m in golden.memories if m.dup_of is not None}
    counted = [fact for fact in facts if fact in dup_facts]
    polluted = len(counted) != len(set(counted))
    return QueryScore(
        query=query,
        ranked=top,
        first_rank=first_rank,
        ndcg=dcg / idcg if idcg else 0.0,
        recall=len(credited) / len(relevant) if relevant else 0.0,
        trapped=trapped,
        polluted=polluted,
    )


def _aggregate(scores: Iterable[QueryScore]) -> dict[str, float | int]:
    rows = [score.metrics() for score in scores]
    out: dict[str, float | int] = {"queries": len(rows)}
    for metric in RATE_METRICS:
        out[metric] = round(sum(row[metric] for row in rows) / len(rows), 4) if rows else 0.0
    for metric in COUNT_METRICS:
        out[metric] = int(sum(row[metric] for row in rows))
    return out


async def evaluate(
    service: MemoryService,
    mode: str,
    golden: Golden | None = None,
    ids: Mapping[str, str] | None = None,
    embedder: str | None = None,
    fact_of: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every query through `memory::recall` in `mode` on a bank `build_bank` filled; a plain,
    rounded dict (the snapshot's shape). `embedder` names the service's model (None: none);
    `fact_of` is passed to `score_query`."""
    golden = golden or load()
    if service.clock() != golden.as_of_ms:
        raise ValueError(
            f"evaluate needs the service clock frozen at {golden.as_of} ({golden.as_of_ms} ms), "
            f"got {service.clock()}"
        )
    ids = ids or {memory.key: memory.id for memory in golden.memories}
    key_of = {memory_id: key for key, memory_id in ids.items()}
    retrievals: set[str] = set()
    scores: list[QueryScore] = []
    for query in golden.queries:
        result = await catalog.call(
            service,
            "memory::recall",
            {"bank": BANK, "query": query.query, "limit": LIMIT, "mode": mode},
        )
        retrievals.add(result["retrieval"])
        ranked = [key_of.get(hit["memory"]["id"]) for hit in result["memories"]]
        scores.append(score_query(golden, query, ranked, fact_of))
    return {
        "mode": mode,
        "embedder": embedder,
        "retrieval": ",".join(sorted(retrievals)),
        "overall": _aggregate(scores),
        "by_category": {
            category: _aggregate(s for s in scores if s.query.category == category)
            for category in CATEGORIES
        },
        "by_language": {
            lang: _aggregate(s for s in scores if s.query.lang == lang) for lang in LANGUAGES
        },
        "by_half": {half: _aggregate(s for s in scores if s.query.half == half) for half in HALVES},
        "first_relevant_rank": {s.query.id: s.first_rank for s in scores},
        "trapped": [s.query.id for s in scores if s.trapped],
        "polluted": [s.query.id for s in scores if s.polluted],
    }


async def run(data_root: Path, golden: Golden | None = None) -> dict[str, Any]:
    """Every system of `SYSTEMS`, side by side: one fresh bank per embedder (none, then each
    local model), every mode of that embedder on it. A model that does not load is recorded
    with why (`error`), so the gate can fail on it. The whole snapshot."""
    golden = golden or load()
    results: dict[str, Any] = {}
    models: list[str | None] = [None, *LOCAL_MODELS]
    for model in models:
        systems = [system for system in SYSTEMS if system.model == model]
        embedder: Any = None
        if model is not None:
            try:
                embedder = gate_embedder(model)
            except EmbedderUnavailable as exc:
                for system in systems:
                    results[system.name] = {"mode": system.mode, "error": str(exc)}
                continue
        name = embedder.model if embedder is not None else None
        async with open_service(data_root / (model or "none"), golden.as_of_ms, embedder) as svc:
            ids = await build_bank(svc, golden)
            for system in systems:
                results[system.name] = await evaluate(svc, system.mode, golden, ids, name)
        keep(embedder)
    return {
        "golden": {
            "digest": golden.digest,
            "as_of": golden.as_of,
            "memories": len(golden.memories),
            "queries": len(golden.queries),
            "tuning_queries": sum(1 for q in golden.queries if q.half == "tuning"),
            "limit": LIMIT,
        },
        "systems": results,
    }


# --- snapshot and comparison ------------------------------------------------------------------

TOLERANCE = 0.02  # a rate may drop this much (about one query in a category) before it fails


def render_snapshot(snapshot: Mapping[str, Any]) -> str:
    """The committed form: indent 2, sorted keys, one trailing newline."""
    return json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@dataclass(frozen=True, slots=True)
class Comparison:
    regressions: list[str]
    improvements: list[str]
    lost_ground: list[str]  # queries whose first relevant memory ranks worse (context only)


def compare(stored: Mapping[str, Any], fresh: Mapping[str, Any]) -> Comparison:
    """One system's fresh metrics against its snapshot: overall, per category, language and half,
    every rate may drop at most `TOLERANCE`; the trap / duplicate-pollution counts may not grow,
    and a query trapped or polluted now that was not before is a regression by name (a new trap
    cannot hide behind a fixed one)."""
    regressions: list[str] = []
    improvements: list[str] = []
    blocks = [("overall", stored["overall"], fresh["overall"])]
    for section, label, names in (
        ("by_category", "category", CATEGORIES),
        ("by_language", "language", LANGUAGES),
        ("by_half", "half", HALVES),
    ):
        blocks += [
            (f"{label} {name}", stored.get(section, {}).get(name), fresh[section][name])
            for name in names
        ]
    for label, old, new in blocks:
        if old is None:
            regressions.append(f"{label}: not in the snapshot")
            continue
        for metric in RATE_METRICS:
            delta = new[metric] - old[metric]
            line = f"{label} {metric}: {old[metric]:.4f} -> {new[metric]:.4f}"
            if delta < -TOLERANCE - 1e-9:
                regressions.append(line)
            elif delta > 1e-9:
                improvements.append(line)
        for metric in COUNT_METRICS:
            line = f"{label} {metric}: {old[metric]} -> {new[metric]}"
            if new[metric] > old[metric]:
                regressions.append(line)
            elif new[metric] < old[metric]:
                improvements.append(line)
    named_regressions, named_improvements = _named_changes(stored, fresh)
    regressions += named_regressions
    improvements += named_improvements
    return Comparison(regressions, improvements, _lost_ground(stored, fresh))


def _named_changes(
    stored: Mapping[str, Any], fresh: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """Queries trapped or polluted now and not before (regressions), and the other way round."""
    worse: list[str] = []
    better: list[str] = []
    for kind in ("trapped", "polluted"):
        added = sorted(set(fresh[kind]) - set(stored.get(kind, ())))
        if added:
            worse.append(f"newly {kind}: {', '.join(added)}")
        fixed = sorted(set(stored.get(kind, ())) - set(fresh[kind]))
        if fixed:
            better.append(f"no longer {kind}: {', '.join(fixed)}")
    return worse, better


def _lost_ground(stored: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    lost: list[str] = []
    old_ranks = stored.get("first_relevant_rank", {})
    for qid, rank in fresh["first_relevant_rank"].items():
        before = old_ranks.get(qid)
        if before is not None and (rank is None or rank > before):
            lost.append(f"{qid} {before}->{rank if rank is not None else '-'}")
    return lost


# --- report ----------------------------------------------------------------------------------


def render_table(snapshot: Mapping[str, Any]) -> str:
    """One markdown table per metric: a row per group (overall, category, language, half), a
    column per system; then each system's traps, pollution and the queries it misses at rank 1."""
    systems = {n: r for n, r in snapshot["systems"].items() if "error" not in r}
    names = list(systems)
    groups: list[tuple[str, str, str | None]] = [("overall", "overall", None)]
    groups += [(f"cat:{c}", "by_category", c) for c in CATEGORIES]
    groups += [(f"lang:{lang}", "by_language", lang) for lang in LANGUAGES]
    groups += [(f"half:{half}", "by_half", half) for half in HALVES]
    golden = snapshot["golden"]
    lines = [
        f"recall quality: {golden['memories']} memories, {golden['queries']} queries "
        f"({golden.get('tuning_queries', 0)} tuning), as of {golden['as_of']}, "
        f"top {golden['limit']}",
        "",
    ]
    for name, result in snapshot["systems"].items():
        what = (
            result.get("error") or f"retrieval {result['retrieval']}, embedder {result['embedder']}"
        )
        lines.append(f"- {name}: {what}")
    for metric in (*RATE_METRICS, *COUNT_METRICS):
        lines += ["", f"{metric}:", "", "| group | n | " + " | ".join(names) + " |"]
        lines.append("|---|---:|" + "---:|" * len(names))
        for label, section, key in groups:
            blocks = [r[section] if key is None else r[section][key] for r in systems.values()]
            cells = [
                f"{b[metric]:d}" if metric in COUNT_METRICS else f"{b[metric]:.3f}" for b in blocks
            ]
            count = blocks[0]["queries"] if blocks else 0
            lines.append(f"| {label} | {count} | " + " | ".join(cells) + " |")
    lines.append("")
    for name, result in systems.items():
        ranks = result["first_relevant_rank"]
        missed = [qid for qid, rank in ranks.items() if rank != 1]
        lines.append(f"- {name}: not at rank 1 ({len(missed)}): " + _ranks(ranks, missed))
        lines.append(f"- {name}: trapped: {', '.join(result['trapped']) or '-'}")
        lines.append(f"- {name}: duplicate pollution: {', '.join(result['polluted']) or '-'}")
    return "\n".join(lines)


def _ranks(ranks: Mapping[str, int | None], ids: Sequence[str]) -> str:
    return ", ".join(f"{qid}@{ranks[qid] if ranks[qid] is not None else '-'}" for qid in ids)


BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
DOC_REGION = ("<!-- golden:begin -->", "<!-- golden:end -->")


def write_doc(snapshot: Mapping[str, Any], command: str) -> None:
    """Replace the golden region of docs/BENCHMARKS.md with this run's tables."""
    begin, end = DOC_REGION
    text = BENCHMARKS.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{BENCHMARKS} has no {begin} ... {end} region")
    taken = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    body = f"- command: `{command}`\n- taken: {taken}; load average {load}\n\n"
    body += render_table(snapshot)
    BENCHMARKS.write_text(f"{text[:i]}{begin}\n{body}\n{text[j:]}", encoding="utf-8")


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="recall-quality-") as tmp:
        snapshot = asyncio.run(run(Path(tmp)))
    if "--write-doc" in sys.argv[1:]:
        write_doc(snapshot, "python -m tests.recall_quality --write-doc")
    out = [render_table(snapshot)]
    if SNAPSHOT.is_file():
        stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        same_set = stored.get("golden", {}).get("digest") == snapshot["golden"]["digest"]
        if not same_set:
            out.append(f"\n{SNAPSHOT.name}: taken on a different golden set; not compared")
        for name, fresh in snapshot["systems"].items() if same_set else ():
            old = stored.get("systems", {}).get(name)
            if old is None or "error" in old or "error" in fresh:
                continue
            diff = compare(old, fresh)
            out.append(f"\nvs {SNAPSHOT.name} ({name}):")
            out += [f"  worse  {line}" for line in diff.regressions]
            out += [f"  better {line}" for line in diff.improvements]
            out += [f"  lost   {line}" for line in diff.lost_ground]
            if not (diff.regressions or diff.improvements or diff.lost_ground):
                out.append("  unchanged")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
