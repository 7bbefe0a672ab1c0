#!/usr/bin/env python3
"""A full bank's first eviction, both ways, in one process: the kept eviction order built (what
every full bank's first save did, and what a bank that keeps saving still does from its third
ask) against the one-off answer over the index's columns (`Bank.first_evictable`'s first asks,
what a one-shot save uses), on one bank of `--memories` memories, imported at one instant (all
alike on every column: an undated import) and again with distinct statement times. Also numpy's
BLAS, one thread against a thread per core, for the product a semantic recall does (a
`--memories` × 384 float32 matrix by a vector), idle and with one core kept busy.

    nice -n 5 .venv/bin/python bench/first_eviction.py [--memories 10000] [--repeat 21]

Prints markdown tables and exits 0; the data dir is a temp dir, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from oneshot import _seed  # noqa: E402
from runinfo import load_average, run_header  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.storage.bank import Bank  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

_BLAS_PROBE = """
import statistics, sys, time
import numpy as np
n, repeat = int(sys.argv[1]), int(sys.argv[2])
matrix = np.random.rand(n, 384).astype(np.float32)
vector = np.random.rand(384).astype(np.float32)
times = []
for _ in range(repeat):
    start = time.perf_counter()
    matrix @ vector
    times.append(time.perf_counter() - start)
times.sort()
print(" / ".join(f"{times[int(q * (len(times) - 1))] * 1000:.2f}" for q in (0.5, 0.9, 0.99)))
"""


def _first(bank: Bank, *, built: bool, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        bank._eviction = None  # the order dropped, as in a new process
        bank._evictions_asked = 99 if built else 0  # past the one-off asks: the order is built
        start = time.perf_counter()
        bank.first_evictable(1, ("-",))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def _evictions(root: Path, n: int, repeat: int) -> list[str]:
    await _seed(root, n)
    store = Store.open(root, holder={"pid": os.getpid(), "kind": "bench"})
    try:
        bank = store.get("main")
        built = _first(bank, built=True, repeat=repeat)
        alike = _first(bank, built=False, repeat=repeat)
        rows = [
            ("the kept order built (every first save before)", built),
            (f"one-off, {n:,} memories alike (an undated import)", alike),
        ]
        slots = bank.index.slot_count
        bank.index.stated_at[:slots] = np.arange(slots) + 10**12  # distinct statement times
        rows.append(("one-off, distinct statement times", _first(bank, built=False, repeat=repeat)))
    finally:
        await store.close()
    return ["| path | p50 ms |", "|---|---:|", *(f"| {name} | {ms:.2f} |" for name, ms in rows)]


def _blas(n: int, repeat: int) -> list[str]:
    out = ["| BLAS threads | idle p50 / p90 / p99 ms | one core busy p50 / p90 / p99 ms |"]
    out.append("|---|---|---|")
    for label, threads in (("one", "1"), ("a thread per core (numpy's default)", None)):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if threads is not None:
            env["OPENBLAS_NUM_THREADS"] = threads
        cells = []
        for busy in (False, True):
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _BLAS_PROBE, str(n), str(repeat * 10)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                cells.append(done.stdout.strip())
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
        out.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    configure_logging("warning")
    before = load_average()
    with tempfile.TemporaryDirectory(prefix="first-eviction-") as tmp:
        evictions = asyncio.run(_evictions(Path(tmp) / "data", args.memories, args.repeat))
    blas = _blas(args.memories, args.repeat)
    for line in [*run_header("bench/first_eviction.py", before), "", *evictions, "", *blas]:
        print(line)


if __name__ == "__main__":
    main()
