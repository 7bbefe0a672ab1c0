#!/usr/bin/env python3
"""What Python's cyclic garbage collector costs a long-lived worker holding a big bank: each of its
passes stops every caller while it walks the objects of the generations it collects, and a bank's
records are hundreds of thousands of them.

One bank of `--size` memories (LoCoMo turns, as `bench/growth.py` builds it) is seeded once.
Then, per round and per tree (this checkout, and `--before DIR`: e.g. `git archive <commit> |
tar -x -C DIR`), a fresh process (`PYTHONPATH=<tree>`) opens a fresh copy of it, answers its first
`memory::recall` (boot, as growth.py times it; from the snapshots that tree's own code wrote, in
a warm-up probe on its own copy of the seed), then serves `--recalls` recalls and 32 concurrent
writers' saves in turns, through `catalog.call`, no embedder. A `gc.callbacks` hook installed
before the store opens times every collector pass, per generation: during the boot and first
recall, and during the work after it. Rounds interleave the trees, so load drifting on a shared
machine falls on both alike.

    nice -n 19 .venv/bin/python bench/gc_pauses.py [--before DIR] [--size 100000] [--rounds 3]

Prints a markdown table and exits 0; the data lives in a temp dir, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Nothing of `memory_worker` is imported at the top: a probe process must take it from the tree on
# its PYTHONPATH. The parent imports `growth` (which puts this checkout first) only to seed.

WRITERS = 32
SAVES_PER_WRITER = 50
TURNS = 4  # rounds of recalls then concurrent saves within one process


def probe(data_dir: Path, work: Path, warm_only: bool = False) -> dict[str, Any]:
    """Child-process entry (the tree under test on PYTHONPATH): the timings as JSON. `work`: the
    queries and the texts to save, written by the parent; `warm_only`: boot, answer, close."""
    from memory_worker.app.caller import Caller
    from memory_worker.app.catalog import call
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings
    from memory_worker.storage.store import Store

    given = json.loads(work.read_text(encoding="utf-8"))
    queries, fresh = given["queries"], iter(given["texts"])
    bank, caller = given["bank"], Caller.human("bench")
    passes: dict[str, list[list[float]]] = {"boot": [[], [], []], "work": [[], [], []]}
    phase = ["boot"]
    started: list[float] = [0.0]

    def timed(stage: str, info: dict[str, int]) -> None:
        if stage == "start":
            started[0] = time.perf_counter()
        else:
            passes[phase[0]][info["generation"]].append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)

    async def run() -> dict[str, Any]:
        begun = time.perf_counter()
        store = Store.open(data_dir, holder={"pid": os.getpid(), "kind": "bench"})
        service = MemoryService(store, Settings(max_memories=0), clock=lambda: given["now_ms"])

        async def recall(query: str) -> float:
            at = time.perf_counter()
            await call(service, "memory::recall", {"bank": bank, "query": query}, caller)
            return time.perf_counter() - at

        async def writer() -> None:
            for _ in range(SAVES_PER_WRITER):
                await call(service, "memory::save", {"bank": bank, "text": next(fresh)}, caller)

        await recall(queries[0])
        boot_s = time.perf_counter() - begun
        if warm_only:  # a warm-up: the close below writes this tree's snapshots
            await service.close()
            await store.close()
            return {"boot_s": boot_s}
        phase[0] = "work"
        samples: list[float] = []
        work_started = time.perf_counter()
        for _ in range(TURNS):
            samples += [await recall(q) for q in queries]
            await asyncio.gather(*(writer() for _ in range(WRITERS)))
        work_s = time.perf_counter() - work_started
        await service.close()
        await store.close()
        samples.sort()
        return {
            "boot_s": boot_s,
            "work_s": work_s,
            "recall_p50_ms": samples[len(samples) // 2] * 1e3,
            "recall_p99_ms": samples[int(len(samples) * 0.99)] * 1e3,
            "recall_max_ms": samples[-1] * 1e3,
        }

    out = asyncio.run(run())
    gc.callbacks.remove(timed)
    if warm_only:
        return out
    for name, gens in passes.items():
        for gen, times in enumerate(gens):
            out[f"{name}_gen{gen}_n"] = len(times)
            out[f"{name}_gen{gen}_ms"] = sum(times) * 1e3
            out[f"{name}_gen{gen}_max_ms"] = max(times, default=0.0) * 1e3
    return out


def run_probe(
    tree: Path, seed: Path, scratch: Path, work: Path, *, warm_up: bool = False
) -> dict[str, Any]:
    """One probe process of `tree` on a fresh copy of `seed` (`warm_up`: on `seed`
    itself, which boots, answers one recall and closes, leaving the snapshots that tree's code
    writes)."""
    copy = seed if warm_up else scratch / "copy"
    if not warm_up:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(seed, copy)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": str(tree), "MEMORY_EMBEDDER": "none"}
    proc = subprocess.run(
        [sys.executable, __file__, "--probe", str(copy), "--work", str(work)]
        + (["--warm-only"] if warm_up else []),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd="/",
    )
    if not warm_up:
        shutil.rmtree(copy)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def report(
    args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]], meta: dict[str, str]
) -> str:
    before = f" --before {args.before}" if args.before else ""
    taken = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"- command: `python bench/gc_pauses.py{before} --size {args.size} --rounds {args.rounds}"
        f" --recalls {args.recalls}`",
        f"- taken: {taken} at commit `{meta['commit']}`",
        f"- machine: {meta['machine']}; load average at end {meta['load']}",
        f"- one bank of {args.size:,} memories; per process: boot and first recall, then "
        f"{TURNS} turns of {args.recalls} recalls and {WRITERS} writers × {SAVES_PER_WRITER} "
        f"saves; median of {args.rounds} interleaved rounds (pass counts: the median round's)",
        "",
        "| tree | boot to first recall s | its collector passes (gen 0/1/2) | their ms | "
        "work: passes (gen 0/1/2) | their ms, longest | recall p50 / p99 / max ms |",
        "|---|---:|---|---:|---|---:|---|",
    ]
    for tree, results in rows.items():

        def med(key: str, results: list[dict[str, Any]] = results) -> float:
            return float(statistics.median(r[key] for r in results))

        mid = sorted(results, key=lambda r: r["boot_s"])[len(results) // 2]
        boot_n = "/".join(str(mid[f"boot_gen{g}_n"]) for g in range(3))
        boot_ms = sum(mid[f"boot_gen{g}_ms"] for g in range(3))
        work_n = "/".join(str(mid[f"work_gen{g}_n"]) for g in range(3))
        work_ms = sum(mid[f"work_gen{g}_ms"] for g in range(3))
        longest = max(mid[f"work_gen{g}_max_ms"] for g in range(3))
        lines.append(
            f"| {tree} | {med('boot_s'):.3f} | {boot_n} | {boot_ms:.0f} | {work_n} | "
            f"{work_ms:.0f}, {longest:.0f} | {med('recall_p50_ms'):.3f} / "
            f"{med('recall_p99_ms'):.2f} / {max(r['recall_max_ms'] for r in results):.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a second tree to run side by side")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recalls", type=int, default=400)
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.probe, args.work, args.warm_only)))
        return 0
    import growth  # the corpus and the seeding, as bench/growth.py measures them
    from runinfo import commit, load_average, machine

    from memory_worker.adapters.logs import configure_logging

    configure_logging("warning")
    trees = {"this tree": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    with tempfile.TemporaryDirectory(prefix="gc-pauses-") as tmp:
        scratch = Path(tmp)
        seed = scratch / "seed"
        turns, questions = growth.locomo()
        texts = growth.documents(turns, args.size + WRITERS * SAVES_PER_WRITER * TURNS)
        asyncio.run(growth.build_ours(seed, texts[: args.size]))
        work = scratch / "work.json"
        given = {
            "bank": growth.BANK,
            "now_ms": growth.NOW_MS,
            "queries": questions[: args.recalls],
            "texts": texts[args.size :],
        }
        work.write_text(json.dumps(given), encoding="utf-8")
        # Snapshots name the digest of the code that wrote them: booted from another tree's,
        # a tree would replay the whole log. Each tree warms its own copy of the seed once (a
        # boot in place, whose close writes that tree's snapshots), and boots from it after.
        seeds = {name: scratch / f"seed-{n}" for n, name in enumerate(trees)}
        for name, tree in trees.items():
            shutil.copytree(seed, seeds[name])
            run_probe(tree, seeds[name], scratch, work, warm_up=True)
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                rows[name].append(run_probe(tree, seeds[name], scratch, work))
        meta = {"commit": commit(), "machine": machine(), "load": load_average()}
    print(report(args, rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
