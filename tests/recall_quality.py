"""Recall-quality eval (SPEC C17): a golden persona bank, real-chat queries, ranking metrics.

`golden/recall/persona.json` is one person as an agent's extraction would have stored him over
two years; `golden/recall/queries.json` asks about him in English and Portuguese. Every query runs
through the public `memory::recall` (limit 10) with the clock frozen at the persona's `as_of`, and
is scored with hit@1/3, MRR@10, nDCG@10 (graded, log2 discount, ideal-ordering normaliser),
recall@10, traps and duplicate pollution — overall, per category and per language. A `dup_of` pair
is one fact: the second member found earns nothing (and both in the top 10 is pollution).

A third mode, `hybrid-consolidated`, first replays the decisions memory-consolidate makes on the
persona bank (recorded in `golden/recall/consolidation.json`: every merge its writing tiers would
make, as `memory::supersede {reinforce: true}`), then scores hybrid recall with each expectation
carried from a retired memory to its survivor — consolidation must not make recall worse.

`python -m tests.recall_quality` prints the modes side by side (`--what-if-dup-of` adds the bound:
every labelled duplicate pair merged); the gate is `tests/test_recall_quality.py` against the
snapshot `golden/recall_quality.json`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
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

from memory_worker.adapters.consolidate.clients import InProcessClient
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.consolidate.config import ConsolidateSettings
from memory_worker.consolidate.runner import Consolidator
from memory_worker.core.config import Settings
from memory_worker.core.text import fingerprint
from memory_worker.storage.store import Store

from .fakes import FixedClock

__all__ = [
    "CATEGORIES",
    "CONSOLIDATION",
    "COUNT_METRICS",
    "GOLDEN_DIR",
    "LIMIT",
    "MODES",
    "RATE_METRICS",
    "SNAPSHOT",
    "TOLERANCE",
    "Comparison",
    "Decision",
    "Golden",
    "GoldenMemory",
    "GoldenQuery",
    "build_bank",
    "carry",
    "compare",
    "decide",
    "describe_embedder",
    "evaluate",
    "golden_digest",
    "load",
    "load_decisions",
    "local_embedder",
    "open_service",
    "render_snapshot",
    "render_table",
    "replay",
    "run",
]

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "golden" / "recall"
SNAPSHOT = ROOT / "golden" / "recall_quality.json"
CONSOLIDATION = GOLDEN_DIR / "consolidation.json"
BANK = "golden"
LIMIT = 10
MODES = ("lexical", "hybrid", "hybrid-consolidated")
SHORT = {"lexical": "lex", "hybrid": "hyb", "hybrid-consolidated": "h+c"}
CONSOLIDATED_REASON = "recall-quality: replay of a recorded memory-consolidate decision"
CATEGORIES = (
    "lexical",
    "paraphrase",
    "identity",
    "temporal-update",
    "dated-event",
    "durable-old",
)
LANGUAGES = ("en", "pt")
RATE_METRICS = ("hit@1", "hit@3", "mrr@10", "ndcg@10", "recall@10")
COUNT_METRICS = ("traps", "duplicate_pollution")  # numbers of queries; lower is better
HOLDER = {"pid": os.getpid(), "kind": "test", "command": "recall-quality"}


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


def local_embedder() -> tuple[object | None, str]:
    """The offline embedder when `memory_worker.adapters.local_embedder` exists and its model
    loads; else None and why not (hybrid then runs without a semantic arm)."""
    try:  # imported by name: the module is optional, and newer than this runner
        module = importlib.import_module("memory_worker.adapters.local_embedder")
    except ImportError as exc:
        return None, f"memory_worker.adapters.local_embedder is not importable ({exc})"
    try:
        return module.LocalEmbedder.default(), "loaded"
    except Exception as exc:  # a missing model or extra is an environment fact, not a failure
        return None, f"LocalEmbedder.default() failed: {type(exc).__name__}: {exc}"


def describe_embedder(embedder: object | None) -> str | None:
    """A stable name for the snapshot: the model's name when the embedder exposes one."""
    if embedder is None:
        return None
    for attribute in ("model_name", "model_id", "name", "model"):
        value = getattr(embedder, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(embedder).__name__


def _accepts_embedder() -> bool:
    return "embedder" in inspect.signature(MemoryService.__init__).parameters


@asynccontextmanager
async def open_service(
    data_dir: Path, as_of_ms: int, embedder: object | None = None
) -> AsyncIterator[MemoryService]:
    """A store on `data_dir` and a service whose clock is frozen at `as_of_ms`. The embedder is
    passed only when `MemoryService` takes one (an older service simply runs without it)."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        kwargs: dict[str, Any] = {"clock": FixedClock(as_of_ms)}
        if embedder is not None and _accepts_embedder():
            kwargs["embedder"] = embedder
        yield MemoryService(store, Settings(), **kwargs)
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


# --- consolidation ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """One merge memory-consolidate makes on the persona bank, by golden keys."""

    winner: str
    losers: tuple[str, ...]
    tier: str
    why: str


def load_decisions(path: Path = CONSOLIDATION) -> list[Decision]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [
        Decision(row["winner"], tuple(row["losers"]), row["tier"], row["why"])
        for row in raw["decisions"]
    ]


def render_decisions(decisions: Sequence[Decision], embedder: str | None) -> str:
    body = {
        "description": "What memory-consolidate's writing tiers merge in the golden persona bank "
        "(a dry run with the defaults; the semantic tier needs the local embedder). Replayed by "
        "the hybrid-consolidated mode of tests/recall_quality.py; re-record with UPDATE_GOLDENS=1.",
        "settings": ConsolidateSettings().model_dump(include={"semantic_threshold"}),
        "embedder": embedder,
        "decisions": [
            {"winner": d.winner, "losers": list(d.losers), "tier": d.tier, "why": d.why}
            for d in decisions
        ],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


async def decide(service: MemoryService, ids: Mapping[str, str]) -> list[Decision]:
    """The merges memory-consolidate would make on bank `golden` now (one dry-run pass)."""
    key_of = {memory_id: key for key, memory_id in ids.items()}
    consolidator = Consolidator(InProcessClient(service), clock=service.clock)
    report = await consolidator.run(ConsolidateSettings(), bank=BANK, dry_run=True)
    [bank] = report.banks
    if bank.errors:
        raise AssertionError(f"memory-consolidate failed on the golden bank: {bank.errors}")
    return [
        Decision(
            key_of[group.winner_id],
            tuple(key_of[loser] for loser in group.loser_ids),
            group.tier,
            group.why,
        )
        for group in bank.groups
        if group.action == "planned"
    ]


async def replay(
    service: MemoryService, decisions: Sequence[Decision], ids: Mapping[str, str]
) -> dict[str, str]:
    """Apply the decisions as memory-consolidate does; returns retired key -> survivor key."""
    carried: dict[str, str] = {}
    for decision in decisions:
        for loser in decision.losers:
            await catalog.call(
                service,
                "memory::supersede",
                {
                    "bank": BANK,
                    "id": ids[loser],
                    "superseded_by": ids[decision.winner],
                    "reinforce": True,
                    "reason": CONSOLIDATED_REASON,
                },
            )
            carried[loser] = decision.winner
    return carried


def carry(golden: Golden, carried: Mapping[str, str]) -> dict[str, str]:
    """Every key -> the fact it stands for, after the merges: a retired memory's expectations
    belong to its survivor (followed through chains), then `dup_of` collapses as before."""
    facts = golden.facts()
    out: dict[str, str] = {}
    for key in facts:
        target, seen = key, {key}
        while target in carried:
            target = carried[target]
            if target in seen:
                raise ValueError(f"consolidation cycle through {target!r}")
            seen.add(target)
        out[key] = facts.get(target, target)
    return out


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
    `fact_of` (default `golden.facts()`) maps every key to the fact it stands for."""
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
    carried: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every query through `memory::recall` in `mode` on a bank `build_bank` filled; a plain,
    rounded dict (the snapshot's shape). The caller decides whether the service has an
    embedder and names it in `embedder`. `hybrid-consolidated` ranks in hybrid mode and scores
    with the expectations `carried` to the survivors of the merges `replay` made."""
    golden = golden or load()
    if service.clock() != golden.as_of_ms:
        raise ValueError(
            f"evaluate needs the service clock frozen at {golden.as_of} ({golden.as_of_ms} ms), "
            f"got {service.clock()}"
        )
    ids = ids or {memory.key: memory.id for memory in golden.memories}
    key_of = {memory_id: key for key, memory_id in ids.items()}
    fact_of = carry(golden, carried or {})
    recall_mode = "hybrid" if mode == "hybrid-consolidated" else mode
    retrievals: set[str] = set()
    scores: list[QueryScore] = []
    for query in golden.queries:
        result = await catalog.call(
            service,
            "memory::recall",
            {"bank": BANK, "query": query.query, "limit": LIMIT, "mode": recall_mode},
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
        "first_relevant_rank": {s.query.id: s.first_rank for s in scores},
        "trapped": [s.query.id for s in scores if s.trapped],
        "polluted": [s.query.id for s in scores if s.polluted],
    }


async def run(data_root: Path, golden: Golden | None = None) -> dict[str, Any]:
    """Both modes, each on its own fresh bank: lexical on a plain service, hybrid on one built
    with the local embedder when it loads. The whole snapshot."""
    golden = golden or load()
    if _accepts_embedder():
        embedder, why = local_embedder()
    else:
        embedder, why = None, "MemoryService takes no embedder= yet (none loaded)"
    results: dict[str, Any] = {}
    for mode in MODES:
        use = embedder if mode != "lexical" else None
        async with open_service(data_root / mode, golden.as_of_ms, use) as service:
            ids = await build_bank(service, golden)
            carried: dict[str, str] = {}
            if mode == "hybrid-consolidated":
                carried = await replay(service, load_decisions(), ids)
            results[mode] = await evaluate(
                service, mode, golden, ids, embedder=describe_embedder(use), carried=carried
            )
            if mode == "hybrid-consolidated":
                results[mode]["merged"] = dict(sorted(carried.items()))
    results["hybrid"]["embedder_note"] = why
    results["hybrid-consolidated"]["embedder_note"] = why
    return {
        "golden": {
            "digest": golden.digest,
            "as_of": golden.as_of,
            "memories": len(golden.memories),
            "queries": len(golden.queries),
            "limit": LIMIT,
        },
        "modes": results,
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
    """One mode's fresh metrics against its snapshot: overall and per category, every rate may
    drop at most `TOLERANCE`, and the trap / duplicate-pollution counts may not grow."""
    regressions: list[str] = []
    improvements: list[str] = []
    blocks = [("overall", stored["overall"], fresh["overall"])]
    blocks += [
        (f"category {name}", stored["by_category"].get(name), fresh["by_category"][name])
        for name in CATEGORIES
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
    return Comparison(regressions, improvements, _lost_ground(stored, fresh))


def _lost_ground(stored: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    lost: list[str] = []
    old_ranks = stored.get("first_relevant_rank", {})
    for qid, rank in fresh["first_relevant_rank"].items():
        before = old_ranks.get(qid)
        if before is not None and (rank is None or rank > before):
            lost.append(f"{qid} {before}->{rank if rank is not None else '-'}")
    for kind in ("trapped", "polluted"):
        added = sorted(set(fresh[kind]) - set(stored.get(kind, ())))
        if added:
            lost.append(f"newly {kind}: {', '.join(added)}")
    return lost


# --- report ----------------------------------------------------------------------------------


def render_table(snapshot: Mapping[str, Any]) -> str:
    """Group × metric, the modes side by side, then the trapped and polluted queries."""
    modes = snapshot["modes"]
    shown = [mode for mode in MODES if mode in modes]
    width = 10 * len(shown) - 1
    metrics = (*RATE_METRICS, *COUNT_METRICS)
    groups: list[tuple[str, str, str | None]] = [("overall", "overall", None)]
    groups += [(f"cat:{c}", "by_category", c) for c in CATEGORIES]
    groups += [(f"lang:{lang}", "by_language", lang) for lang in LANGUAGES]

    def cell(mode: str, section: str, name: str | None, metric: str) -> str:
        block = modes[mode][section] if name is None else modes[mode][section][name]
        value = block[metric]
        return f"{value:d}" if metric in COUNT_METRICS else f"{value:.3f}"

    header = f"{'group':<22}{'n':>4}  " + "  ".join(f"{m:>{width}}" for m in metrics)
    labels = " ".join(f"{SHORT.get(mode, mode):>9}" for mode in shown)
    sub = f"{'':<22}{'':>4}  " + "  ".join(labels for _ in metrics)
    lines = [
        f"recall quality: {snapshot['golden']['memories']} memories, "
        f"{snapshot['golden']['queries']} queries, as of {snapshot['golden']['as_of']}, "
        f"top {snapshot['golden']['limit']}",
        "retrieval: "
        + "; ".join(
            f"{mode}={modes[mode]['retrieval']} (embedder: {modes[mode]['embedder']})"
            for mode in shown
        ),
        f"hybrid embedder: {modes['hybrid'].get('embedder_note', '')}",
        "",
        header,
        sub,
    ]
    for label, section, name in groups:
        block = modes["lexical"][section] if name is None else modes["lexical"][section][name]
        row = f"{label:<22}{block['queries']:>4}  " + "  ".join(
            " ".join(f"{cell(mode, section, name, m):>9}" for mode in shown) for m in metrics
        )
        lines.append(row)
    lines.append("")
    if "hybrid-consolidated" in modes:
        merged = modes["hybrid-consolidated"].get("merged", {})
        lines.append(
            "hybrid-consolidated: merges replayed: "
            + (", ".join(f"{loser}->{winner}" for loser, winner in merged.items()) or "none")
        )
    for mode in shown:
        ranks = modes[mode]["first_relevant_rank"]
        missed = [qid for qid, rank in ranks.items() if rank != 1]
        lines.append(f"{mode}: not at rank 1 ({len(missed)}): " + _ranks(ranks, missed))
        lines.append(f"{mode}: trapped: {', '.join(modes[mode]['trapped']) or '-'}")
        lines.append(f"{mode}: duplicate pollution: {', '.join(modes[mode]['polluted']) or '-'}")
    return "\n".join(lines)


def _ranks(ranks: Mapping[str, int | None], ids: Sequence[str]) -> str:
    return ", ".join(f"{qid}@{ranks[qid] if ranks[qid] is not None else '-'}" for qid in ids)


async def what_if_dup_of(data_root: Path, golden: Golden | None = None) -> dict[str, Any]:
    """The bound: hybrid recall after merging every labelled duplicate pair into its head (as a
    confirming judge would), scored with the expectations carried."""
    golden = golden or load()
    embedder, _why = local_embedder() if _accepts_embedder() else (None, "")
    decisions = [
        Decision(m.dup_of, (m.key,), "dup_of", "labelled duplicate")
        for m in golden.memories
        if m.dup_of is not None
    ]
    async with open_service(data_root, golden.as_of_ms, embedder) as service:
        ids = await build_bank(service, golden)
        carried = await replay(service, decisions, ids)
        return await evaluate(
            service,
            "hybrid-consolidated",
            golden,
            ids,
            embedder=describe_embedder(embedder),
            carried=carried,
        )


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="recall-quality-") as tmp:
        snapshot = asyncio.run(run(Path(tmp)))
        bound = (
            asyncio.run(what_if_dup_of(Path(tmp) / "what-if"))
            if "--what-if-dup-of" in sys.argv[1:]
            else None
        )
    out = [render_table(snapshot)]
    if bound is not None:
        overall = bound["overall"]
        out.append(
            "\nwhat if every dup_of pair were merged (hybrid, expectations carried): "
            + ", ".join(f"{m} {overall[m]:.4f}" for m in RATE_METRICS)
            + ", "
            + ", ".join(f"{m} {overall[m]}" for m in COUNT_METRICS)
        )
    if SNAPSHOT.is_file():
        stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        same_set = stored.get("golden", {}).get("digest") == snapshot["golden"]["digest"]
        if not same_set:
            out.append(f"\n{SNAPSHOT.name}: taken on a different golden set; not compared")
        for mode in MODES if same_set else ():
            if mode not in stored["modes"]:
                out.append(f"\n{SNAPSHOT.name} has no {mode} mode yet; not compared")
                continue
            diff = compare(stored["modes"][mode], snapshot["modes"][mode])
            out.append(f"\nvs {SNAPSHOT.name} ({mode}):")
            out += [f"  worse  {line}" for line in diff.regressions]
            out += [f"  better {line}" for line in diff.improvements]
            out += [f"  lost   {line}" for line in diff.lost_ground]
            if not (diff.regressions or diff.improvements or diff.lost_ground):
                out.append("  unchanged")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
