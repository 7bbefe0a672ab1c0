#!/usr/bin/env python3
"""What a one-shot `memory-worker` process costs before it does anything: the CLI forwarded to
the standalone server holding the data dir, a coding agent's UserPromptSubmit hook (a new process
per prompt, forwarded and local), and a local one-shot save on a data dir nobody holds; whole
process, wall and CPU (user + system), and how many modules it imported (`python -X importtime`).

Every tree given (this one, and `--before DIR`: e.g. `git archive <commit> | tar -x -C DIR`) runs
the same commands, interleaved round by round, so load drifting on a shared machine falls on both
alike. Each tree writes its own copy of the local data dirs (copied from one seed): a tree's close
leaves snapshots only its own code may use (they name the digest of the code that made them), so
on shared data dirs each tree would rebuild what the other wrote, and neither row would show what
its own closes leave for its next boot. The forwarded rows share the one server. Each process
runs as `python -m memory_worker` with `PYTHONPATH=<tree>` from a neutral working directory, so
the tree's code is what is imported.

    nice -n 19 .venv/bin/python bench/oneshot.py [--before DIR] [--memories 2000] [--rounds 7]

Prints a markdown table and exits 0; the data dirs are temp dirs, removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
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

from runinfo import load_average, run_header  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.adapters.standalone import StandaloneServer  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

BANK = "main"
WORDS = "tea garden kiln glaze mug shop deploy friday river bicycle oolong fig plum lisbon".split()
PROMPT = {
    "session_id": "bench",
    "transcript_path": "/dev/null",
    "cwd": "/tmp",
    "hook_event_name": "UserPromptSubmit",
    "prompt": "what about the tea garden",
}
WATCHED = ("numpy", "pydantic", "memory_worker.app.service", "memory_worker.app.wire")


def _row(i: int) -> dict[str, object]:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6)]
    return {"text": f"The user note {i}: " + " ".join(words), "entities": ["user"]}


async def _seed(root: Path, n: int) -> None:
    store = Store.open(root, holder={"pid": os.getpid(), "kind": "cli"})
    service = MemoryService(store, Settings())
    await service.import_records(BANK, [_row(i) for i in range(n)])
    await service.close()
    await store.close()


def _env(tree: Path) -> dict[str, str]:
    isolated = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL", "MEMORY_TOKEN")
    # Bytecode caches written and used, as an installed package has them (pip compiles at
    # install): without them every process compiles the package's sources again, a cost of
    # this checkout, not of the command.
    isolated += ("PYTHONDONTWRITEBYTECODE",)
    env = {k: v for k, v in os.environ.items() if k not in isolated}
    return env | {"PYTHONPATH": str(tree), "MEMORY_EMBEDDER": "none"}


async def _run(
    tree: Path, args: list[str], stdin: bytes | None = None, *, importtime: bool = False
) -> tuple[float, float, bytes, bytes]:
    """(wall s, CPU s, stdout, stderr) of one `python -m memory_worker ARGS` process."""
    flags = ["-X", "importtime"] if importtime else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *flags,
        "-m",
        "memory_worker",
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tree),
        cwd="/",
    )
    out, err = await proc.communicate(stdin)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{args} exited {proc.returncode}: {err.decode()[-2000:]}")
    return wall, cpu, out, err


def _scenarios(
    held: Path, free: Path, many: Path | None, banks: int
) -> dict[str, tuple[list[str], bytes | None, bytes]]:
    # (`free` and `many` are a tree's own copies: see the module docstring.)
    """name → (arguments, stdin, what stdout must contain)."""
    save = ["trigger", "memory::save", "text=a note from the one-shot bench"]
    out = {
        "`trigger memory::recall`, forwarded": (
            ["trigger", "memory::recall", "--data-dir", str(held), f"bank={BANK}", "query=tea"],
            None,
            b'"memories"',
        ),
        "`hook user-prompt-submit`, forwarded": (
            ["hook", "user-prompt-submit", "--data-dir", str(held)],
            json.dumps(PROMPT).encode(),
            b"additionalContext",
        ),
        "`hook user-prompt-submit`, local (nobody holds the dir)": (
            ["hook", "user-prompt-submit", "--data-dir", str(free)],
            json.dumps(PROMPT).encode(),
            b"additionalContext",
        ),
        "`trigger memory::save`, local (nobody holds the dir)": (
            [*save, "--data-dir", str(free), f"bank={BANK}"],
            None,
            b'"id"',
        ),
    }
    if many is not None:
        out[f"`trigger memory::save` into one of {banks} banks, local"] = (
            [*save, "--data-dir", str(many), f"bank=b{banks // 2:03d}"],
            None,
            b'"id"',
        )
    return out


def _modules(stderr: bytes) -> tuple[int, list[str]]:
    names = [
        line.split("|")[-1].strip()
        for line in stderr.decode(errors="replace").splitlines()
        if line.startswith("import time:") and "|" in line and "imported package" not in line
    ]
    names = [n for n in names if n != "imported package"]
    return len(names), [w for w in WATCHED if w in names]


Key = tuple[str, str]  # (tree, scenario)


async def _measure(
    trees: dict[str, Path],
    scenarios: dict[str, dict[str, tuple[list[str], bytes | None, bytes]]],
    rounds: int,
) -> tuple[dict[Key, list[tuple[float, float]]], dict[Key, int], dict[Key, tuple[int, list[str]]]]:
    """(wall, CPU) samples, how many runs answered, and (modules, watched ones) per row;
    `scenarios` by tree (each its own data dirs)."""
    samples: dict[Key, list[tuple[float, float]]] = {}
    imports: dict[Key, tuple[int, list[str]]] = {}
    answered: dict[Key, int] = {}
    for tree_name, tree in trees.items():  # once each, for the import counts
        for name, (argv, stdin, _) in scenarios[tree_name].items():
            *_, err = await _run(tree, argv, stdin, importtime=True)
            imports[(tree_name, name)] = _modules(err)
    for text in ("warm", *range(rounds)):
        for tree_name, tree in trees.items():
            for name, (argv, stdin, expect) in scenarios[tree_name].items():
                wall, cpu, out, _ = await _run(tree, argv, stdin)
                if text == "warm":
                    continue
                samples.setdefault((tree_name, name), []).append((wall, cpu))
                # A hook is fail-open: past its 3 s budget it answers nothing (exit 0).
                if expect in out:
                    answered[(tree_name, name)] = answered.get((tree_name, name), 0) + 1
    return samples, answered, imports


async def main(args: argparse.Namespace) -> list[str]:
    trees = {"after": ROOT}
    if args.before:
        trees = {"before": args.before.resolve(), **trees}
    load_before = load_average()
    tmp = Path(tempfile.mkdtemp(prefix="oneshot-"))
    try:
        held, free = tmp / "held", tmp / "free"
        await _seed(held, args.memories)
        await _seed(free, args.memories)
        many = None
        if args.banks > 1:  # one bank's files copied: what a lazy open must not replay
            many = tmp / "many"
            for i in range(args.banks):
                shutil.copytree(free / BANK, many / f"b{i:03d}")
        server = StandaloneServer(Settings(), held, port=0)
        await server.start()
        scenarios = {}
        for tree_name in trees:
            own = tmp / tree_name
            shutil.copytree(free, own / "free")
            if many is not None:
                shutil.copytree(many, own / "many")
            scenarios[tree_name] = _scenarios(
                held, own / "free", None if many is None else own / "many", args.banks
            )
        try:
            samples, answered, imports = await _measure(trees, scenarios, args.rounds)
        finally:
            await server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [
        *run_header("bench/oneshot.py", load_before),
        f"- bank `{BANK}` of {args.memories:,} memories in each data dir (and {args.banks} such "
        "banks in the last row's); MEMORY_EMBEDDER=none; "
        f"bytecode caches on; median of {args.rounds} interleaved rounds after a warm-up round",
        "",
        "| command | tree | wall ms | CPU ms | answered | modules imported | of "
        + ", ".join(f"`{w}`" for w in WATCHED)
        + " |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name in scenarios["after"]:
        for tree_name in trees:
            rows = samples[(tree_name, name)]
            wall = statistics.median(w for w, _ in rows) * 1000
            cpu = statistics.median(c for _, c in rows) * 1000
            count, watched = imports[(tree_name, name)]
            lines.append(
                f"| {name} | {tree_name} | {wall:,.0f} | {cpu:,.0f} | "
                f"{answered.get((tree_name, name), 0)}/{len(rows)} | {count} | "
                f"{', '.join(watched) or 'none'} |"
            )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another tree to run the same commands from")
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--banks", type=int, default=100, help="banks of --memories each for the last row (0: none)"
    )
    configure_logging("warning")
    for line in asyncio.run(main(parser.parse_args())):
        print(line)
