#!/usr/bin/env python3
"""Recall latency with subject scoping on against the same bank without it, side by side.

Two banks in one store hold the same 10,000 synthetic memories (`recall_speed.Corpus`), 80% of
them about one of 100 subjects (the rest general); one bank has `subject_scoping` on. Each query
runs against both, alternating which goes first, with a subject drawn per query, so the load of
the machine falls on both sides alike. It times `rank()` on the bank (the scorer alone) and
`memory::recall` through the catalog (validation, the scope decision, the access sidecar's append
and wire encoding included), and reports medians (p50) and p99. The bar (issue 16): scoped p50
within 10% of unscoped p50.

    nice -n 19 .venv/bin/python bench/subject_scoping.py [--memories 10000] [--subjects 100]
        [--queries 400] [--write-doc] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recall_speed import NOW_MS, Corpus, FixedClock, pct  # noqa: E402
from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.caller import Caller  # noqa: E402
from memory_worker.app.catalog import call  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.search.ranking import RecallQuery, rank  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/subject_scoping.py"}
SUBJECT_SHARE = 0.8
BAR_RATIO = 1.10
AGENT = Caller.for_agent("bench", session_id="bench")  # scoped like a turn's own calls


def _rows(
    corpus: Corpus, size: int, subjects: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    rows = corpus.memories(size)
    for row in rows:
        if rng.random() < SUBJECT_SHARE:
            row["subject"] = f"person-{int(rng.integers(0, subjects)):03d}"
    return rows


def _time_ms(fn: Any) -> float:
    started = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - started) / 1e6


async def _atime_ms(coro: Any) -> float:
    started = time.perf_counter_ns()
    await coro
    return (time.perf_counter_ns() - started) / 1e6


async def measure(size: int, subjects: int, queries: int, root: Path) -> dict[str, Any]:
    corpus = Corpus()
    rng = np.random.default_rng(7)
    rows = _rows(corpus, size, subjects, rng)
    asked = corpus.queries(queries)
    speakers = [f"person-{int(rng.integers(0, subjects)):03d}" for _ in asked]
    store = Store.open(root / "data", holder=HOLDER)
    service = MemoryService(store, Settings(), clock=FixedClock(NOW_MS))
    try:
        await call(service, "memory::bank::create", {"name": "flat"})
        await call(service, "memory::bank::create", {"name": "scoped", "subject_scoping": True})
        await service.import_records("flat", rows)
        await service.import_records("scoped", rows)
        flat, scoped = store.get("flat"), store.get("scoped")

        def query(text: str, subject: str, on: bool) -> RecallQuery:
            return RecallQuery(
                text=text, limit=6, now_ms=NOW_MS, half_life_days=60.0, scoped=on, subject=subject
            )

        samples: dict[str, list[float]] = {
            k: [] for k in ("rank_off", "rank_on", "call_off", "call_on")
        }
        for text, subject in zip(asked[:20], speakers[:20], strict=True):  # warm-up
            rank(flat.memories, flat.index, query(text, subject, False))
            rank(scoped.memories, scoped.index, query(text, subject, True))
        gc.collect()
        for i, (text, subject) in enumerate(zip(asked, speakers, strict=True)):
            sides = [("off", flat, False), ("on", scoped, True)]
            if i % 2:
                sides.reverse()
            for side, bank, on in sides:
                q = query(text, subject, on)
                samples[f"rank_{side}"].append(
                    _time_ms(lambda b=bank, q=q: rank(b.memories, b.index, q))
                )
            for side, bank, _ in sides:
                payload = {"bank": bank.name, "query": text, "subject": subject}
                samples[f"call_{side}"].append(
                    await _atime_ms(call(service, "memory::recall", payload, AGENT))
                )
        leaks = 0
        for text, subject in zip(asked, speakers, strict=True):
            hits = rank(scoped.memories, scoped.index, query(text, subject, True))
            leaks += sum(1 for h in hits if h.memory.subject not in (None, subject))
    finally:
        await store.close()
    out: dict[str, Any] = {
        "memories": size,
        "subjects": subjects,
        "queries": queries,
        "leaks": leaks,
    }
    for key, values in samples.items():
        out[f"{key}_p50"] = statistics.median(values)
        out[f"{key}_p99"] = pct(values, 0.99)
    out["rank_ratio"] = out["rank_on_p50"] / out["rank_off_p50"]
    out["call_ratio"] = out["call_on_p50"] / out["call_off_p50"]
    return out


def render(result: dict[str, Any], argv: list[str], before: str, after: str) -> str:
    r = result
    lines = [
        f"- command: `{' '.join(['python', 'bench/subject_scoping.py', *map(shlex.quote, argv)])}`"
        " (under `nice -n 19`)",
        f"- taken: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit `{commit()}`, memory_worker "
        f"source sha256 `{source_digest()}`",
        f"- machine: {machine()}",
        f"- load average before {before}, after {after} (other work on the machine skews timings)",
        f"- {r['memories']:,} memories, {int(SUBJECT_SHARE * 100)}% about one of {r['subjects']} "
        f"subjects; {r['queries']} queries, each for a random subject, run against both banks "
        "alternately; no embedder",
        "",
        "| path | scoping off p50 / p99 ms | scoping on p50 / p99 ms | on / off (p50) |",
        "|---|---:|---:|---:|",
        f"| `rank()` | {r['rank_off_p50']:.3f} / {r['rank_off_p99']:.3f} | "
        f"{r['rank_on_p50']:.3f} / {r['rank_on_p99']:.3f} | {r['rank_ratio']:.2f}× |",
        f"| `memory::recall` | {r['call_off_p50']:.3f} / {r['call_off_p99']:.3f} | "
        f"{r['call_on_p50']:.3f} / {r['call_on_p99']:.3f} | {r['call_ratio']:.2f}× |",
        "",
        f"Bar (scoped p50 within {int((BAR_RATIO - 1) * 100)}% of unscoped): `rank()` "
        f"{r['rank_ratio']:.2f}× {'ok' if r['rank_ratio'] <= BAR_RATIO else 'MISS'}, "
        f"`memory::recall` {r['call_ratio']:.2f}× "
        f"{'ok' if r['call_ratio'] <= BAR_RATIO else 'MISS'}. Scoped hits about another "
        f"subject: {r['leaks']}.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--subjects", type=int, default=100)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--json", type=Path)
    add_write_doc_option(parser, "subject-scoping")
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "subject-scoping")
    configure_logging("warning")
    before = load_average()
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        result = asyncio.run(measure(args.memories, args.subjects, args.queries, Path(tmp)))
    body = render(result, sys.argv[1:], before, load_average())
    print(body)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.write_doc:
        write_doc(args.write_doc, "subject-scoping", body)
        print(f"updated the subject-scoping section of {args.write_doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
