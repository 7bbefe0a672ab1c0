#!/usr/bin/env python3
"""Before/after on one machine under the same load: cold boot, RAM and the one-shot CLI of two
source trees, interleaved round by round on the same data.

A shared machine's load drifts by 2-3× within minutes, so figures from two runs taken at different
times cannot be compared. This script alternates the trees in every round (before, after, after
without its derived snapshots) on copies of the same data dir (each tree keeps its own derived
files), and reports medians.

    git archive <old-commit> | tar -x -C /tmp/before
    nice -n 19 .venv/bin/python bench/boot_ab.py --before /tmp/before [--sizes 10000,100000]

The data is LoCoMo's turns as in `bench/growth.py`, written once by this tree's `import_records`
(the log format is the same in both). Boot = a fresh process opens the data dir and answers one
`memory::recall`; RSS is what that adds, minus the text, per memory. The CLI rows run
`python -m memory_worker trigger …` with each tree first on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import growth  # noqa: E402
from runinfo import commit, load_average, machine  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402

PROBE = """
import asyncio, gc, json, sys, time
from pathlib import Path
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
from memory_worker.adapters.logs import configure_logging
configure_logging('warning')
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store
gc.collect()
before = rss()
started = time.perf_counter()
store = Store.open(Path(sys.argv[1]), holder={'pid': 0, 'kind': 'bench'})
service = MemoryService(store, Settings(), clock=lambda: 1_760_000_000_000)
async def first():
    await call(service, 'memory::recall', {'bank': 'bench', 'query': sys.argv[2]},
               Caller.human('bench'))
asyncio.run(first())
boot = time.perf_counter() - started
gc.collect()
bank = store.get('bench')
text = sum(len(m.text.encode()) for m in bank.memories.values())
print(json.dumps({'boot_s': boot, 'rss_kb': rss() - before, 'n': len(bank.memories),
                  'text': text}))
asyncio.run(store.close())
"""


def probe(tree: Path, data_dir: Path, query: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(data_dir), query],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def cli(tree: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "MEMORY_EMBEDDER": "none"}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "memory_worker", "trigger", *args],
        env=env,
        cwd=tree,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - started


def cli_table(
    args: argparse.Namespace, before: Path, after: Path, root: Path, turns: list[str]
) -> list[str]:
    """The one-shot CLI rows: `args.banks` banks of `args.per_bank` memories, each tree its own
    copy of the data dir."""
    data = root / "cli"
    asyncio.run(growth.build_ours(data, growth.documents(turns, args.per_bank, 13)))
    for i in range(args.banks):
        shutil.copytree(data / growth.BANK, data / f"b{i:03d}")
    shutil.rmtree(data / growth.BANK)
    # As for boots: each tree its own copy, its derived files left by one untimed save.
    dirs = {"before": root / "cli-before", "after": data}
    shutil.copytree(data, dirs["before"])
    # One of the banks just made (a name past them would time a save creating a new bank).
    bank = f"bank=b{args.banks // 2:03d}"
    for label, tree in (("before", before), ("after", after)):
        warm = ["memory::save", bank, f"text=an A/B warm-up {label}"]
        cli(tree, [*warm, "--data-dir", str(dirs[label])])
    empty = root / "empty"
    empty.mkdir()
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.cli_rounds):
        for label, tree in (("before", before), ("after", after)):
            save = ["memory::save", bank, f"text=an A/B note {label} {r}"]
            own = str(dirs[label])
            for what, call_args in (
                ("save", [*save, "--data-dir", own]),
                ("bank::list", ["memory::bank::list", "--data-dir", own]),
                ("save, empty data dir", [*save, "--data-dir", str(empty)]),
            ):
                times.setdefault((what, label), []).append(cli(tree, call_args))
                print(f"  cli {what} {label}: {times[(what, label)][-1]:.3f} s", flush=True)
    cli_rows = [
        f"| {what} | {statistics.median(times[(what, 'before')]):.3f} | "
        f"{statistics.median(times[(what, 'after')]):.3f} |"
        for what in ("save", "bank::list", "save, empty data dir")
    ]
    return cli_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--banks", type=int, default=100)
    parser.add_argument("--per-bank", type=int, default=10_000)
    parser.add_argument(
        "--cli-rounds",
        type=int,
        default=3,
        help="rounds of the CLI rows (the old tree replays "
        "every bank per call: at 100 × 10k a round of it takes minutes); 0, or --banks 0, "
        "times boots only",
    )
    args = parser.parse_args()
    configure_logging("warning")
    before, after = args.before.resolve(), ROOT
    turns, questions = growth.locomo()
    query = questions[0]
    root = Path(tempfile.mkdtemp(prefix="boot-ab-"))
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    rows: list[str] = []
    try:
        for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
            data = root / f"n{n}"
            asyncio.run(growth.build_ours(data, growth.documents(turns, n)))
            # Each tree boots its own copy of the same log: a tree's close leaves derived files
            # for its own code, which the other tree would otherwise have to rebuild every round.
            old = root / f"n{n}-before"
            shutil.copytree(data, old)
            for name in growth.DERIVED:
                (old / growth.BANK / name).unlink(missing_ok=True)
            probe(before, old, query)  # leaves the old tree's own derived files
            seen: dict[str, list[dict[str, Any]]] = {"before": [], "after": [], "rebuild": []}
            for _ in range(args.rounds):
                seen["before"].append(probe(before, old, query))
                seen["after"].append(probe(after, data, query))  # its close keeps the snapshots
                for name in growth.DERIVED:
                    (data / growth.BANK / name).unlink(missing_ok=True)
                seen["rebuild"].append(probe(after, data, query))
            for label, runs in seen.items():
                boot = statistics.median(r["boot_s"] for r in runs)
                ram = statistics.median((r["rss_kb"] * 1024 - r["text"]) / n for r in runs)
                rows.append(f"| {n:,} | {label} | {boot:.3f} | {ram:,.0f} |")
                print(rows[-1], flush=True)
            shutil.rmtree(data)
            shutil.rmtree(old)
        cli_rows = (
            cli_table(args, before, after, root, turns) if args.banks and args.cli_rounds else []
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = shlex.join(["python", "bench/boot_ab.py", *sys.argv[1:]])
    print(
        "\n".join(
            [
                f"- command: `{command}`",
                f"- taken: {started_at} at commit `{commit()}` (after) against `{before}` (before)",
                f"- machine: {machine()}; load average before {load_before}, after "
                f"{load_average()} (shared: read each row against its neighbours)",
                "",
                "| memories | tree | boot to first recall s (median) | RSS B/memory beyond text |",
                "|---:|---|---:|---:|",
                *rows,
            ]
        )
    )
    if cli_rows:
        print(
            "\n".join(
                [
                    "",
                    f"One-shot CLI, {args.banks} banks × {args.per_bank:,} memories, whole "
                    f"process, median of {args.cli_rounds}:",
                    "",
                    "| command | before s | after s |",
                    "|---|---:|---:|",
                    *cli_rows,
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
