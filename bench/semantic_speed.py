#!/usr/bin/env python3
"""What the semantic arm costs per recall: `rank()` p50/p99 lexical and hybrid (every memory
holding an embedding) at 10k and 100k memories, for this tree and optionally another one, side by
side in one run.

Each tree runs in a process of its own (`PYTHONPATH=<tree>`, so its own code is imported), which
builds the bank once — bench/recall_speed.py's corpus, the same rows for every tree, and a seeded
random unit vector of 384 dimensions (e5-small's width) per memory and per query, so the arm's
arithmetic is timed without a model — and then answers rounds of queries on command. Rounds
alternate between the trees, so load drifting on a shared machine falls on each alike. Also
reports what the bank's vectors take in RAM (the index's embedding matrix).

    nice -n 19 .venv/bin/python bench/semantic_speed.py [--before DIR] [--sizes 10000,100000]

`--before DIR`: another tree, e.g. `git archive <commit> | tar -x -C DIR`. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DIM = 384
QUERY_SEED = 11
VECTOR_SEED = 7


# --- the child: one tree's bank ----------------------------------------------------------------


def child(rows_path: Path, queries_path: Path) -> None:
    """Build the bank from the rows with this process's `memory_worker`, then answer commands
    `<mode> <first> <count>` on stdin with the milliseconds of each query, one JSON line each."""
    import gc

    import numpy as np

    from memory_worker.adapters.logs import configure_logging
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings
    from memory_worker.search.ranking import RecallMode, RecallQuery, rank
    from memory_worker.storage.store import Store

    configure_logging("warning")
    rows = json.loads(rows_path.read_text())
    queries: list[str] = json.loads(queries_path.read_text())
    now_ms = 1_760_000_000_000

    def unit(rng: np.random.Generator) -> tuple[float, ...]:
        v = rng.standard_normal(DIM)
        return tuple((v / np.linalg.norm(v)).tolist())

    async def build(tmp: Path) -> Any:
        store = Store.open(tmp, holder={"pid": os.getpid(), "kind": "cli"})
        service = MemoryService(store, Settings())
        await service.import_records("bench", rows)
        bank = store.get("bench")
        rng = np.random.default_rng(VECTOR_SEED)
        for memory_id in sorted(bank.memories):
            bank.index.set_vector(memory_id, unit(rng))
        return store, service, bank

    with tempfile.TemporaryDirectory(prefix="semantic-speed-") as tmp:
        _store, service, bank = asyncio.run(build(Path(tmp)))
        rng = np.random.default_rng(QUERY_SEED)
        vectors = [unit(rng) for _ in queries]
        settings = service.settings
        matrix = bank.index.vectors
        print(
            json.dumps(
                {"ready": len(bank.memories), "dtype": str(matrix.dtype), "bytes": matrix.nbytes}
            ),
            flush=True,
        )
        for line in sys.stdin:
            mode, first, count = line.split()
            out = []
            gc.collect()
            for i in range(int(first), int(first) + int(count)):
                query = RecallQuery(
                    text=queries[i % len(queries)],
                    limit=10,
                    now_ms=now_ms,
                    half_life_days=settings.decay_half_life_days,
                    vector=vectors[i % len(queries)] if mode == "hybrid" else None,
                    mode=RecallMode.HYBRID,
                )
                started = time.perf_counter_ns()
                rank(bank.memories, bank.index, query)
                out.append((time.perf_counter_ns() - started) / 1e6)
            print(json.dumps(out), flush=True)


# --- the parent --------------------------------------------------------------------------------


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Tree:
    def __init__(self, name: str, path: Path, rows: Path, queries: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(path)}
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", str(rows), str(queries)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/",  # not this tree's root: PYTHONPATH decides which code is imported
        )
        self.ready: dict[str, Any] = {}

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        self.ready = json.loads(self.proc.stdout.readline())

    def run(self, mode: str, first: int, count: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{mode} {first} {count}\n")
        self.proc.stdin.flush()
        return list(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(size: int, trees: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    from recall_speed import Corpus  # the corpus generator only (it imports this tree's code)

    corpus = Corpus()
    rows = corpus.memories(size)
    queries = corpus.queries(args.queries)
    with tempfile.TemporaryDirectory(prefix="semantic-rows-") as tmp:
        rows_path, queries_path = Path(tmp) / "rows.json", Path(tmp) / "queries.json"
        rows_path.write_text(json.dumps(rows))
        queries_path.write_text(json.dumps(queries))
        running = {name: Tree(name, path, rows_path, queries_path) for name, path in trees.items()}
        try:
            for tree in running.values():
                tree.wait_ready()
            samples: dict[tuple[str, str], list[float]] = {}
            per_round = max(1, args.queries // args.rounds)
            for mode in ("lexical", "hybrid"):
                for tree in running.values():
                    tree.run(mode, 0, min(20, args.queries))  # warm-up
                for r in range(args.rounds):
                    for tree in running.values():
                        got = tree.run(mode, r * per_round, per_round)
                        samples.setdefault((tree.name, mode), []).extend(got)
        finally:
            for tree in running.values():
                tree.close()
    return {
        "size": size,
        "rows": {
            name: {
                "dtype": running[name].ready["dtype"],
                "bytes": running[name].ready["bytes"],
                **{
                    mode: (
                        _pct(samples[(name, mode)], 0.5),
                        _pct(samples[(name, mode)], 0.99),
                    )
                    for mode in ("lexical", "hybrid")
                },
            }
            for name in trees
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another tree, measured in the same run")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    from runinfo import commit, load_average, machine

    trees = {"after": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    load_before = load_average()
    results = [measure(int(s), trees, args) for s in args.sizes.split(",")]
    command = shlex.join(["python", "bench/semantic_speed.py", *sys.argv[1:]])
    print(f"- command: `{command}`")
    print(f"- taken: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit `{commit()}`")
    print(f"- machine: {machine()}")
    print(f"- load average before {load_before}, after {load_average()} (a shared machine)")
    print(f"- {args.queries} queries per mode, in {args.rounds} rounds alternating between trees")
    print()
    print(
        "| memories | tree | rank() lexical p50 / p99 ms | rank() hybrid p50 / p99 ms "
        "| hybrid − lexical p50 ms | embedding matrix |"
    )
    print("|---:|---|---:|---:|---:|---|")
    for result in results:
        for name, row in result["rows"].items():
            lex, hyb = row["lexical"], row["hybrid"]
            print(
                f"| {result['size']:,} | {name} | {lex[0]:.3f} / {lex[1]:.2f} "
                f"| {hyb[0]:.3f} / {hyb[1]:.2f} | {statistics.fmean([hyb[0] - lex[0]]):.2f} "
                f"| {row['dtype']}, {row['bytes'] / 1e6:,.1f} MB |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
