#!/usr/bin/env python3
"""How soon a standalone server answers after it starts, on a data dir of many banks: the real
`memory-worker serve --standalone` in a fresh process, wall time from its spawn to its readiness
line ("serving on"), to its first answered `memory::recall` naming one bank, and to every bank
replayed (its `banks_booted` log line; a tree that replays every bank before it serves has them
all at its readiness line).

Every tree given (this one, and `--before DIR`: e.g. `git archive <commit> | tar -x -C DIR`) runs
on its own copy of one seeded data dir (a tree's snapshots name the digest of its own code, so
each copy is booted once by its own tree before the timed rounds), interleaved round by round so
load drifting on a shared machine falls on both alike.

    nice -n 19 .venv/bin/python bench/server_start.py [--before DIR] [--banks 100]
        [--memories 10000] [--rounds 5]

Prints a markdown table and exits 0; the data dirs are temp dirs, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from oneshot import BANK, _env, _seed  # noqa: E402  # one seeding, one process environment
from runinfo import load_average, run_header  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402

READY = b"memory-worker serving on "
BOOTED = b"banks_booted"
TIMEOUT_S = 600.0


def _recall(url: str, bank: str) -> None:
    """One `memory::recall` over HTTP (a blocking client: run in a thread)."""
    import urllib.request

    body = json.dumps({"bank": bank, "query": "the tea garden"}).encode()
    req = urllib.request.Request(
        f"{url}/memory/recall", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as answer:
        assert answer.status == 200 and json.loads(answer.read())["memories"]


async def _line_with(stream: asyncio.StreamReader, marker: bytes) -> bytes:
    while line := await stream.readline():
        if marker in line:
            return line
    raise RuntimeError(f"the server's output ended before {marker!r}")


def _boots_after_serving(tree: Path) -> bool:
    """Whether this tree's server replays its banks after it serves (and logs when it is done)."""
    return BOOTED.decode() in (tree / "memory_worker" / "app" / "retention.py").read_text()


async def _start(tree: Path, data_dir: Path, bank: str) -> dict[str, float]:
    """Seconds from spawn to: ready, first answer, every bank replayed."""
    started = time.perf_counter()
    serve = ["-m", "memory_worker", "serve", "--standalone", "--port", "0"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *serve,
        "--data-dir",
        str(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tree),
        cwd="/",
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        booted = asyncio.create_task(_line_with(proc.stderr, BOOTED))
        line = await asyncio.wait_for(_line_with(proc.stdout, READY), TIMEOUT_S)
        ready = time.perf_counter() - started
        url = line.decode().removeprefix(READY.decode()).strip()
        await asyncio.to_thread(_recall, url, bank)
        answered = time.perf_counter() - started
        every = ready  # a tree that replays every bank before it serves
        if _boots_after_serving(tree):
            await asyncio.wait_for(booted, TIMEOUT_S)
            every = time.perf_counter() - started
        return {"ready": ready, "answered": answered, "every": every}
    finally:
        proc.terminate()
        await proc.wait()
        booted.cancel()


async def main(args: argparse.Namespace) -> list[str]:
    trees = {"after": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    load_before = load_average()
    tmp = Path(tempfile.mkdtemp(prefix="server-start-"))
    bank = f"b{args.banks // 2:03d}"
    try:
        seed = tmp / "seed"
        await _seed(seed, args.memories)
        many = tmp / "many"
        for i in range(args.banks):  # one bank's files copied, as bench/oneshot.py does
            shutil.copytree(seed / BANK, many / f"b{i:03d}")
        dirs = {}
        for name, tree in trees.items():
            dirs[name] = tmp / name
            shutil.copytree(many, dirs[name])
            await _start(tree, dirs[name], bank)  # writes this tree's own snapshots
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for round_no in range(args.rounds):
            order = list(trees) if round_no % 2 == 0 else list(reversed(trees))
            for name in order:
                samples[name].append(await _start(trees[name], dirs[name], bank))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [
        *run_header("bench/server_start.py", load_before),
        f"- {args.banks} banks × {args.memories:,} memories; the recall names `{bank}`; "
        f"MEMORY_EMBEDDER=none; bytecode caches on; median of {args.rounds} interleaved rounds "
        "after each tree's own first boot",
        "",
        "| tree | serving s | first recall answered s | every bank replayed s |",
        "|---|---:|---:|---:|",
    ]
    for name in trees:
        rows = samples[name]
        cells = [statistics.median(r[key] for r in rows) for key in ("ready", "answered", "every")]
        lines.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another tree to run the same server from")
    parser.add_argument("--banks", type=int, default=100)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    configure_logging("warning")
    for line in asyncio.run(main(parser.parse_args())):
        print(line)
