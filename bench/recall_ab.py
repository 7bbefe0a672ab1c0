#!/usr/bin/env python3
"""`memory::recall` before/after on one machine under the same load: identity of every answer,
then p50/p99 of two source trees interleaved round by round, with tantivy beside them.

Recall's speed work must not change a single answer. `identity` runs `bench/recall_probe.py dump`
on each tree (the golden persona bank in every mode and filter, with and without an embedder, and
a LoCoMo bank through saves, re-saves, deletes, pins and updates) and compares the wire answers:
the same ids in the same order, the same fields, scores equal to 1e-9 relative. `time` alternates
the trees by blocks of 20 queries (a warm `recall_probe.py serve` process each, which goes
first alternating) with tantivy's search (`bench/growth.py`'s peer) on the same documents and
queries, and prints p50/p99 over every query of every round.

    git archive <old-commit> | tar -x -C /tmp/before
    nice -n 19 .venv/bin/python bench/recall_ab.py --before /tmp/before [--sizes 10000,100000]
        [--rounds 3] [--skip-identity] [--identity-size 10000]

The data is LoCoMo's turns as in `bench/growth.py`, written once by this tree's `import_records`;
each tree reads its own copy (a close leaves derived files for that tree's code).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import growth  # noqa: E402
from recall_speed import pct  # noqa: E402
from runinfo import commit, load_average, machine  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402

PROBE = ROOT / "bench" / "recall_probe.py"
SCORE_TOLERANCE = 1e-9
BLOCK = 20  # queries each tree answers back to back before the other's turn


def run_probe(tree: Path, what: str, data_dir: Path, corpus: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(PROBE), what, str(data_dir), str(corpus)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"recall_probe {what} on {tree} failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Where two answers differ: any field or order, or a score past `SCORE_TOLERANCE`."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return [f"{where}: keys {sorted(old)} != {sorted(new)}"]
        return [d for k in old for d in differences(old[k], new[k], f"{where}.{k}")]
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: {len(old)} items != {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in
                differences(a, b, f"{where}[{i}]")]  # fmt: skip
    scores = isinstance(old, float) and isinstance(new, float) and where.endswith(".score")
    if scores and math.isclose(old, new, rel_tol=SCORE_TOLERANCE, abs_tol=1e-12):
        return []
    return [] if old == new else [f"{where}: {old!r} != {new!r}"]


def answers(result: Any) -> int:
    if isinstance(result, dict):
        return 1 if "retrieval" in result else sum(answers(v) for v in result.values())
    if isinstance(result, list):
        return sum(answers(v) for v in result)
    return 0


def max_score_gap(old: Any, new: Any) -> float:
    if isinstance(old, dict) and isinstance(new, dict):
        gaps = [max_score_gap(old[k], new[k]) for k in old if k in new]
        if isinstance(old.get("score"), float) and isinstance(new.get("score"), float):
            a, b = old["score"], new["score"]
            gaps.append(abs(a - b) / max(abs(a), 1e-300))
        return max(gaps, default=0.0)
    if isinstance(old, list) and isinstance(new, list):
        return max((max_score_gap(a, b) for a, b in zip(old, new, strict=False)), default=0.0)
    return 0.0


def identity(
    before: Path,
    after: Path,
    copies: dict[str, Path],
    root: Path,
    corpus: Path,
    n: int,
    notes: list[str],
) -> list[str]:
    """Both trees' answers on copies of the same bank; their differences, noted in `notes`."""
    got = {}
    for name, tree in (("before", before), ("after", after)):
        scratch = root / f"id-{name}"
        shutil.copytree(copies[name], scratch)
        got[name] = run_probe(tree, "dump", scratch, corpus)
        shutil.rmtree(scratch)
    found = differences(got["before"], got["after"])
    gap = max_score_gap(got["before"], got["after"])
    notes.append(
        f"identity at {n:,} memories + the golden bank: {answers(got['after']):,} "
        f"answers, {len(found)} differences, largest relative score gap {gap:.1e}"
    )
    notes.extend(f"  {d}" for d in found[:20])
    return found


def timings(
    before: Path,
    after: Path,
    copies: dict[str, Path],
    root: Path,
    corpus: Path,
    texts: list[str],
    queries: list[str],
    rounds: int,
) -> dict[str, list[float]]:
    """Milliseconds per query of each tree and of tantivy, interleaved by blocks of `BLOCK`
    queries (each tree a warm `recall_probe.py serve` process; which tree goes first
    alternates), `rounds` passes over the queries: a load swing on this shared machine hits all
    three alike, and each block runs back to back as `bench/growth.py` times it."""
    procs = {}
    for name, tree in (("before", before), ("after", after)):
        procs[name] = subprocess.Popen(
            [sys.executable, str(PROBE), "serve", str(copies[name]), str(corpus)],
            env={**os.environ, "PYTHONPATH": str(tree)},
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    seen: dict[str, list[float]] = {"before": [], "after": [], "tantivy": []}
    try:
        for proc in procs.values():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("recall_probe serve did not start")
        search = tantivy_search(root, texts, queries[:20])
        blocks = range(0, len(queries), BLOCK)
        for round_ in range(rounds):
            for b, start in enumerate(blocks):
                end = start + BLOCK
                order = ("before", "after") if (b + round_) % 2 == 0 else ("after", "before")
                for name in order:
                    proc = procs[name]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(f"{start} {end}\n")
                    proc.stdin.flush()
                    seen[name].extend(json.loads(proc.stdout.readline()))
                if search is not None:
                    for q in queries[start:end]:
                        started = time.perf_counter_ns()
                        search(q)
                        seen["tantivy"].append((time.perf_counter_ns() - started) / 1e6)
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=120)
    return seen


def tantivy_search(root: Path, texts: list[str], warm: list[str]) -> Callable[[str], Any] | None:
    """`bench/growth.py`'s tantivy peer: one text field, default tokenizer, parse + top 10."""
    try:
        import tantivy
    except ImportError:
        return None
    path = root / "tantivy-work"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False)
    index = tantivy.Index(builder.build(), path=str(path))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for text in texts:
        writer.add_document(tantivy.Document(text=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()

    def search(q: str) -> Any:
        words = " ".join(growth.words(q)) or "x"
        return searcher.search(index.parse_query(words, ["text"]), 10).hits

    for q in warm:
        search(q)
    return search


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--after", type=Path, default=ROOT, help="the new tree (this one)")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--identity-size", type=int, default=10_000)
    parser.add_argument("--skip-identity", action="store_true")
    parser.add_argument("--skip-time", action="store_true")
    args = parser.parse_args()
    configure_logging("warning")
    before, after = args.before.resolve(), args.after.resolve()
    turns, questions = growth.locomo()
    queries = random.Random(growth.SEED).sample(questions, growth.QUERIES)
    fresh = growth.documents(turns, 200, growth.SEED + 7)
    root = Path(tempfile.mkdtemp(prefix="recall-ab-"))
    corpus = root / "corpus.json"
    corpus.write_text(json.dumps({"queries": queries, "fresh": fresh}), encoding="utf-8")
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    status = 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    timed_sizes = list(sizes)
    if not args.skip_identity and args.identity_size not in sizes:
        sizes.insert(0, args.identity_size)
    lines: list[str] = []  # the timing table's rows
    notes: list[str] = []  # the identity check
    try:
        for n in sizes:
            texts = growth.documents(turns, n)
            data = root / f"n{n}"
            asyncio.run(growth.build_ours(data, texts))
            copies = {}
            for name in ("before", "after"):
                copies[name] = root / f"n{n}-{name}"
                shutil.copytree(data, copies[name])
            if not args.skip_identity and n == args.identity_size:
                found = identity(before, after, copies, root, corpus, n, notes)
                status |= bool(found)
            if args.skip_time or n not in timed_sizes:
                continue
            seen = timings(before, after, copies, root, corpus, texts, queries, args.rounds)
            row = [f"| {n:,}"]
            for name in ("before", "after", "tantivy"):
                got = seen[name]
                row.append(f"{pct(got, 0.5):.3f} / {pct(got, 0.99):.2f}" if got else "—")
            lines.append(" | ".join(row) + " |")
            for name in ("before", "after"):
                shutil.rmtree(copies[name])
            shutil.rmtree(data)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"command: {shlex.join(['python', 'bench/recall_ab.py', *sys.argv[1:]])}")
    print(f"after: {commit()} · {machine()} · {started_at}")
    print(f"load average before / after: {load_before} / {load_average()}")
    for note in notes:
        print(note)
    print()
    print("| memories | before p50 / p99 ms | after p50 / p99 ms | tantivy p50 / p99 ms |")
    print("|---:|---:|---:|---:|")
    for line in lines:
        print(line)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
