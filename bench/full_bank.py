#!/usr/bin/env python3
"""What a save costs in a bank at its `max_memories` cap, where every new memory evicts one.

Each tree (this one, and `--before DIR`: e.g. `git archive <commit> | tar -x -C DIR`) runs in a
fresh process of its own (`PYTHONPATH=<tree>`), rounds interleaved so load drifting on a shared
machine falls on both alike. A round: a bank capped at `--memories`, filled to the cap with
LoCoMo's turns (past its 5,882, the halves of two turns joined: growth.py's corpus) stated over
a year, 300 recalls so access counts exist, then 200 durable saves one at a time through
`catalog.call` (each evicting one memory) and 32 concurrent writers of 20 saves each.

    nice -n 19 .venv/bin/python bench/full_bank.py [--before DIR] [--memories 10000] [--rounds 3]
        [--scoped]

`--scoped`: the bank has `subject_scoping` on, 80% of its memories about one of 97 people and
every save about one of them, so each save evicts from its own person's memories.

Prints a markdown table (medians over rounds) and exits 0; the data dirs are temp dirs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START_MS = 1_793_491_200_000
YEAR_MS = 365 * 86_400_000
SAVES, WRITERS, PER_WRITER, RECALLS = 200, 32, 20, 300


async def child(corpus: list[str], memories: int, scoped: bool) -> dict[str, Any]:
    """One round in this process, on the tree first on the path (nothing of bench/ imported:
    growth.py would put this tree first)."""
    from memory_worker.app.caller import Caller
    from memory_worker.app.catalog import call
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings
    from memory_worker.storage.store import Store

    caller = Caller.human("bench")
    now = [START_MS]
    rng = random.Random(3)
    rows: list[dict[str, Any]] = [
        {"text": t, "created_at": START_MS - rng.randrange(YEAR_MS)} for t in corpus
    ]
    if scoped:
        for n, row in enumerate(rows):
            if n % 5:
                row["subject"] = f"person{n % 97}"
    with tempfile.TemporaryDirectory() as tmp:
        holder = {"pid": os.getpid(), "kind": "bench", "command": "bench/full_bank.py"}
        store = Store.open(Path(tmp), holder=holder)
        service = MemoryService(store, Settings(), clock=lambda: now[0])
        create = {"name": "main", "max_memories": memories, "subject_scoping": scoped}
        await call(service, "memory::bank::create", create)
        for start in range(0, memories, 2000):
            await service.import_records("main", rows[start : min(start + 2000, memories)])
        for row in rows[:RECALLS]:
            await call(service, "memory::recall", {"bank": "main", "query": row["text"][:40]})
        fresh = iter(corpus[memories:])

        async def save() -> None:
            now[0] += 1
            payload = {"bank": "main", "text": next(fresh)}
            if scoped:
                payload["subject"] = f"person{now[0] % 97}"
            await call(service, "memory::save", payload, caller)

        samples = []
        for _ in range(SAVES):
            started = time.perf_counter()
            await save()
            samples.append(time.perf_counter() - started)

        async def writer() -> None:
            for _ in range(PER_WRITER):
                await save()

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        elapsed = time.perf_counter() - started
        bank = store.get("main")
        assert bank is not None and bank.live_count() == memories, "the cap did not hold"
        await service.close()
        await store.close()
    return {
        "save_p50_ms": statistics.median(samples) * 1000,
        "save_p99_ms": sorted(samples)[int(0.99 * (len(samples) - 1))] * 1000,
        "saves_per_s": WRITERS * PER_WRITER / elapsed,
    }


def run_tree(tree: Path, corpus: Path, memories: int, scoped: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(corpus), "--memories", str(memories)]
        + (["--scoped"] if scoped else []),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another tree to run the same rounds from")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scoped", action="store_true", help="subject scoping on")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # the corpus file
    args = parser.parse_args()
    if args.child:
        import logging

        import structlog

        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
        corpus = json.loads(args.child.read_text(encoding="utf-8"))
        print(json.dumps(asyncio.run(child(corpus, args.memories, args.scoped))))
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    from growth import documents, locomo
    from runinfo import commit, load_average, machine

    turns, _ = locomo()
    corpus_file = Path(tempfile.mkstemp(prefix="full-bank-", suffix=".json")[1])
    texts = documents(turns, args.memories + SAVES + WRITERS * PER_WRITER)
    corpus_file.write_text(json.dumps(texts), encoding="utf-8")

    trees = [("this tree", ROOT)] + ([("before", args.before)] if args.before else [])
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    print(f"- command: `{' '.join(['python', 'bench/full_bank.py', *sys.argv[1:]])}`")
    print(f"- commit `{commit()}`; {machine()}; load average before {load_average()}")
    for n in range(args.rounds):
        order = trees if n % 2 == 0 else trees[::-1]
        for name, tree in order:
            results[name].append(run_tree(tree, corpus_file, args.memories, args.scoped))
    scope = ", subject scoping on" if args.scoped else ""
    corpus_file.unlink()
    print(f"- load average after {load_average()}; {args.memories:,} memories at the cap{scope}")
    print()
    print("| tree | save p50 ms | save p99 ms | saves/s, 32 writers |")
    print("|---|---:|---:|---:|")
    for name, rounds in results.items():
        p50 = statistics.median(r["save_p50_ms"] for r in rounds)
        p99 = statistics.median(r["save_p99_ms"] for r in rounds)
        rate = statistics.median(r["saves_per_s"] for r in rounds)
        print(f"| {name} | {p50:.2f} | {p99:.2f} | {rate:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
