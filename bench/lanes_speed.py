#!/usr/bin/env python3
"""Recall latency with the association lanes (C21) at 10k memories: `rank()` p50/p99 with no lane
asked, with the context and intention lanes asked lexically, and with lane vectors as well.

The corpus is bench/recall_speed.py's (Zipf sentences, 300 people); each memory also carries a
`context` (a window of 4-6 such sentences, as extraction writes one) and an `intention` (one
sentence). Each query asks with a window of 4-6 sentences and a goal sentence, weights
content 0.6 / context 0.2 / intention 0.2. "vectors": every memory, context and intention holds a
random unit vector of 384 dimensions (e5-small's width) and the query its three, so the cost of
the semantic arms is measured without a model's time.

    nice -n 19 .venv/bin/python bench/lanes_speed.py [--size 10000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from recall_speed import (  # noqa: E402
    HOLDER,
    NOW_MS,
    Corpus,
    FixedClock,
    pct,
    timed,
)
from runinfo import commit, machine  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.core.lanes import goal_text, window_text  # noqa: E402
from memory_worker.search.lanes import LANES, LaneQuery  # noqa: E402
from memory_worker.search.ranking import RecallQuery, rank  # noqa: E402
from memory_worker.search.scoring import LaneWeights  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

BANK = "bench"
DIM = 384
WEIGHTS = LaneWeights(content=0.6, context=0.2, intention=0.2)


def sentence(corpus: Corpus, low: int, high: int) -> str:
    return " ".join(corpus._sentence(low, high))


def window(corpus: Corpus) -> str | None:
    return window_text(sentence(corpus, 8, 25) for _ in range(int(corpus.rng.integers(4, 7))))


def unit(rng: np.random.Generator) -> tuple[float, ...]:
    v = rng.standard_normal(DIM)
    return tuple((v / np.linalg.norm(v)).tolist())


async def main(args: argparse.Namespace) -> list[str]:
    started = (commit(), " ".join(f"{x:.2f}" for x in os.getloadavg()))
    corpus = Corpus()
    rows = corpus.memories(args.size)
    for row in rows:
        row["context"] = window(corpus)
        row["intention"] = goal_text(sentence(corpus, 6, 14))
    queries = corpus.queries(args.queries)
    asked = [(q, window(corpus), goal_text(sentence(corpus, 6, 14))) for q in queries]
    rng = np.random.default_rng(7)
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lanes-speed-") as tmp:
        store = Store.open(Path(tmp), holder=HOLDER)
        service = MemoryService(store, Settings(), clock=FixedClock(NOW_MS))
        await service.import_records(BANK, rows)
        bank = store.get(BANK)
        settings = service.settings
        by_text = {q: (ctx, goal) for q, ctx, goal in asked}
        vectors: dict[str, tuple[tuple[float, ...], ...]] = {}

        def ranker(with_lanes: bool, with_vectors: bool) -> Any:
            def run(q: str) -> Any:
                ctx, goal = by_text[q]
                lanes = LaneQuery()
                vector = None
                if with_vectors:
                    vector, cv, iv = vectors[q]
                    lanes = LaneQuery(ctx, goal, cv, iv) if with_lanes else lanes
                elif with_lanes:
                    lanes = LaneQuery(ctx, goal)
                query = RecallQuery(
                    text=q,
                    limit=10,
                    now_ms=NOW_MS,
                    half_life_days=settings.decay_half_life_days,
                    vector=vector,
                    lanes=lanes,
                    lane_weights=WEIGHTS,
                )
                return rank(bank.memories, bank.index, query, bank.lanes)

            return run

        for name, lanes_on in (("lexical, no lane asked", False), ("lexical, lanes asked", True)):
            samples = timed(ranker(lanes_on, False), queries)
            out[name] = (pct(samples, 0.5), pct(samples, 0.99))
        for memory_id in list(bank.memories):
            bank.index.set_vector(memory_id, unit(rng))
            for lane in LANES:
                bank.lanes.set_vector(lane, memory_id, unit(rng))
        vectors = {q: (unit(rng), unit(rng), unit(rng)) for q in queries}
        for name, lanes_on in (("vectors, no lane asked", False), ("vectors, lanes asked", True)):
            samples = timed(ranker(lanes_on, True), queries)
            out[name] = (pct(samples, 0.5), pct(samples, 0.99))
        await store.close()
    command = shlex.join(["python", "bench/lanes_speed.py", *sys.argv[1:]])
    lines = [
        f"- command: `{command}`",
        f"- taken at commit `{started[0]}` on {machine()}; load average at start {started[1]}",
        "",
        f"| {args.size} memories, {args.queries} queries | rank() p50 ms | rank() p99 ms |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {p50:.2f} | {p99:.2f} |" for name, (p50, p99) in out.items()]
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    configure_logging("warning")
    for line in asyncio.run(main(parser.parse_args())):
        print(line)
