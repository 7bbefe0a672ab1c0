"""Recall quality after consolidation: the golden persona bank, merged as memory-consolidate
would merge it, scored with each expectation carried from a retired memory to its survivor.

The decisions are recorded in `golden/recall/consolidation.json` (one dry-run pass of
memory-consolidate's writing tiers with the defaults, on the default local embedder), so the gate
replays exactly what was reviewed; `tests/test_recall_consolidated.py` checks that the recording is
still what memory-consolidate decides and that replaying it never makes hybrid recall worse.
`python -m tests.recall_consolidated [--what-if-dup-of]` prints hybrid before and after (and the
bound: every labelled duplicate pair merged, as a confirming judge would).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from memory_worker.adapters.consolidate.clients import InProcessClient
from memory_worker.adapters.embedders import DEFAULT_LOCAL_MODEL
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.consolidate.config import ConsolidateSettings
from memory_worker.consolidate.runner import Consolidator

from . import recall_quality as rq
from .recorded_vectors import keep

__all__ = [
    "CONSOLIDATION",
    "Decision",
    "carry",
    "decide",
    "load_decisions",
    "render_decisions",
    "replay",
    "run",
]

CONSOLIDATION = rq.GOLDEN_DIR / "consolidation.json"
REASON = "recall-quality: replay of a recorded memory-consolidate decision"


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
        "(a dry run with the defaults on the default local embedder). Replayed by "
        "tests/recall_consolidated.py; re-record with UPDATE_GOLDENS=recall.",
        "settings": ConsolidateSettings().model_dump(include={"semantic_threshold"}),
        "embedder": embedder,
        "decisions": [
            {"winner": d.winner, "losers": list(d.losers), "tier": d.tier, "why": d.why}
            for d in decisions
        ],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


async def decide(service: MemoryService, ids: Mapping[str, str]) -> list[Decision]:
    """The merges memory-consolidate would make on the golden bank now (one dry-run pass)."""
    key_of = {memory_id: key for key, memory_id in ids.items()}
    consolidator = Consolidator(InProcessClient(service), clock=service.clock)
    report = await consolidator.run(ConsolidateSettings(), bank=rq.BANK, dry_run=True)
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
                    "bank": rq.BANK,
                    "id": ids[loser],
                    "superseded_by": ids[decision.winner],
                    "reinforce": True,
                    "reason": REASON,
                },
            )
            carried[loser] = decision.winner
    return carried


def carry(golden: rq.Golden, carried: Mapping[str, str]) -> dict[str, str]:
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


async def run(
    data_root: Path,
    decisions: Sequence[Decision] | None = None,
    golden: rq.Golden | None = None,
) -> dict[str, Any]:
    """Hybrid recall on the default embedder before and after replaying `decisions` (default:
    the recorded ones), each on its own bank: `{"hybrid": …, "hybrid-consolidated": …,
    "merged": …}` (seed 000's third recall-quality mode)."""
    golden = golden or rq.load()
    decisions = load_decisions() if decisions is None else decisions
    embedder = rq.gate_embedder(DEFAULT_LOCAL_MODEL)
    out: dict[str, Any] = {}
    for name in ("hybrid", "hybrid-consolidated"):
        async with rq.open_service(data_root / name, golden.as_of_ms, embedder) as service:
            ids = await rq.build_bank(service, golden)
            carried = await replay(service, decisions, ids) if name == "hybrid-consolidated" else {}
            out[name] = await rq.evaluate(
                service, "hybrid", golden, ids, embedder.model, fact_of=carry(golden, carried)
            )
            if carried:
                out["merged"] = dict(sorted(carried.items()))
    keep(embedder)
    return out


def _line(label: str, result: Mapping[str, Any]) -> str:
    overall = result["overall"]
    rates = ", ".join(f"{m} {overall[m]:.3f}" for m in rq.RATE_METRICS)
    counts = ", ".join(f"{m} {overall[m]}" for m in rq.COUNT_METRICS)
    return f"{label:<28} {rates}, {counts}"


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    golden = rq.load()
    with tempfile.TemporaryDirectory(prefix="recall-consolidated-") as tmp:
        result = asyncio.run(run(Path(tmp) / "recorded", golden=golden))
        lines = [
            _line("hybrid", result["hybrid"]),
            _line("hybrid-consolidated", result["hybrid-consolidated"]),
            "merged: "
            + (", ".join(f"{a}->{b}" for a, b in result.get("merged", {}).items()) or "none"),
        ]
        if "--what-if-dup-of" in sys.argv[1:]:
            labelled = [
                Decision(m.dup_of, (m.key,), "dup_of", "labelled duplicate")
                for m in golden.memories
                if m.dup_of is not None
            ]
            bound = asyncio.run(run(Path(tmp) / "what-if", labelled, golden))
            lines.append(_line("every dup_of pair merged", bound["hybrid-consolidated"]))
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
