#!/usr/bin/env python3
"""Before/after of durable saves through `catalog.call`, two source trees interleaved round by
round in fresh processes on copies of the same bank, beside SQLite's WAL insert with
`synchronous=FULL` in the same run.

A shared machine's load (and its disk's fsync latency) drifts by 2-3× within minutes, so every
cell is its own fresh process on its own copy of the data dir, the old tree's and the new one's
run back to back (the order flips every round), and the tables report medians over the rounds.
The cells: a single save's p50 (saves one at a time, each acknowledged after its fsync), and
saves/s with 1, 8 and 32 concurrent writers (`--writers`), every writer saving new texts until the
total is done, with the process's CPU time per save (less noisy than the wall clock here).

    git archive <old-commit> | tar -x -C /tmp/before
    nice -n 19 .venv/bin/python bench/saves_ab.py --before /tmp/before [--rounds 3]

The bank is LoCoMo's turns as in `bench/growth.py`: `--size` memories written once by this tree's
`import_records` (the log format is the same in both), measured twice: with the default
`max_memories` (10,000: a bank of 10k is full, every save evicts one) and with the cap off
(`max_memories: 0`, nothing evicted). SQLite: an FTS5 table holding the same texts, one INSERT +
COMMIT per save.

`--identity` runs, with each tree, the same requests (sequential and 32 concurrent: texts with
secrets, entities, tags, lanes, subjects, lessons, re-saves, bad requests, saves into a full bank)
on copies of one data dir with a fixed clock, and compares every answer, every event (without its
random id) and the log byte for byte (a multi-record write's random batch nonce, and so its lines'
CRCs, blanked).

`--callgrind` counts instead of timing: each tree's instructions a save under valgrind's
callgrind, one save at a time and with 32 writers, cap off, as (count after N2 saves - count
after N1) / (N2 - N1) so the boot and the close cancel out (`--dir /dev/shm`: no disk in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
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
import asyncio, gc, json, statistics, sys, time
from pathlib import Path
from memory_worker.adapters.logs import configure_logging
configure_logging('warning')
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store
data_dir, texts_file, cap, writers, total = sys.argv[1:6]
texts = iter(json.loads(Path(texts_file).read_text()))
store = Store.open(Path(data_dir), holder={'pid': 0, 'kind': 'bench'})
service = MemoryService(store, Settings(max_memories=int(cap)), clock=lambda: 1_760_000_000_000)
caller = Caller.human('bench')
async def save():
    await call(service, 'memory::save', {'bank': 'bench', 'text': next(texts)}, caller)
async def main():
    out = {}
    await call(service, 'memory::recall', {'bank': 'bench', 'query': 'warm up'}, caller)
    for _ in range(20):
        await save()
    gc.collect()
    if writers == 'single':
        samples = []
        for _ in range(int(total)):
            started = time.perf_counter_ns()
            await save()
            samples.append((time.perf_counter_ns() - started) / 1e6)
        out['p50_ms'] = statistics.median(samples)
    else:
        w = int(writers)
        each = int(total) // w
        async def writer():
            for _ in range(each):
                await save()
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(w)))
        out['per_s'] = w * each / (time.perf_counter() - started)
        out['cpu_ms'] = (time.process_time() - cpu) * 1000 / (w * each)
    await service.close()
    await store.close()
    print(json.dumps(out))
asyncio.run(main())
"""

IDENTITY = r"""
import asyncio, hashlib, json, re, sys
from pathlib import Path
from memory_worker.adapters.logs import configure_logging
configure_logging('warning')
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import WorkerError
from memory_worker.storage.store import Store
data_dir, requests_file = sys.argv[1:3]
requests = json.loads(Path(requests_file).read_text())
class Clock:
    now = 1_760_000_000_000
    def __call__(self):
        return self.now
class Emitter:
    def __init__(self):
        self.events = []
    def emit(self, kind, payload):
        self.events.append([kind, {k: v for k, v in payload.items() if k != 'event_id'}])
clock, emitter = Clock(), Emitter()
store = Store.open(Path(data_dir), holder={'pid': 0, 'kind': 'bench'})
service = MemoryService(store, Settings(), emitter=emitter, clock=clock)
from memory_worker.core.confidence import Confidence
callers = {'human': Caller.human('bench'),
           'agent': Caller.for_agent('mcp', session_id='s-1', agent='claude'),
           'extraction': Caller.internal('extraction', session_id='s-2', entry_id='e-9',
                                         confidence=Confidence.EXTRACTED)}
async def one(step):
    try:
        got = await call(service, step['fn'], step['payload'], callers[step.get('caller', 'human')])
        return {'ok': got}
    except WorkerError as exc:
        return {'error': str(exc)}
async def main():
    answers = []
    for step in requests:
        clock.now += 7
        if isinstance(step, list):  # concurrent
            answers.append(await asyncio.gather(*(one(s) for s in step)))
        else:
            answers.append(await one(step))
    await service.close()
    await store.close()
    nonce = re.compile(rb'"batch":"[0-9a-f]+:')
    crc = re.compile(rb'("batch":"-:[^"]*".*"crc":")[0-9a-f]{8}"')
    logs = {}
    for path in sorted(Path(data_dir).glob('*/memories.jsonl')):
        data = crc.sub(rb'\1-"', nonce.sub(b'"batch":"-:', path.read_bytes()))
        logs[path.parent.name] = data.decode()
    print(json.dumps({'answers': answers, 'events': emitter.events, 'logs': logs}))
asyncio.run(main())
"""

_ORDER = (("before", 0), ("after", 1))


def run(tree: Path, code: str, args: list[str], wrap: list[str] | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [*(wrap or []), sys.executable, "-c", code, *args],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def sqlite_p50(root: Path, texts: list[str], fresh: list[str], n: int) -> float:
    path = root / "fts.db"
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(text)")
    db.execute("BEGIN")
    db.executemany("INSERT INTO docs(text) VALUES (?)", ((t,) for t in texts))
    db.execute("COMMIT")
    samples = []
    for text in fresh[:n]:
        started = time.perf_counter_ns()
        db.execute("BEGIN")
        db.execute("INSERT INTO docs(text) VALUES (?)", (text,))
        db.execute("COMMIT")
        samples.append((time.perf_counter_ns() - started) / 1e6)
    db.close()
    return statistics.median(samples)


def identity_requests(docs: list[str]) -> list[Any]:
    """Every kind of save the public call takes, one at a time and concurrently."""
    key = "sk-" + "Ab3xY9" * 8
    steps: list[Any] = [
        {"fn": "memory::bank::create", "payload": {"name": "small", "max_memories": 40}},
    ]

    def save(text: str, bank: str = "bench", **extra: Any) -> dict[str, Any]:
        return {"fn": "memory::save", "payload": {"bank": bank, "text": text, **extra}}

    for i, text in enumerate(docs[:60]):
        extra: dict[str, Any] = {}
        if i % 5 == 0:
            extra["entities"] = ["Ana", f"Porto {i}", "ana"]
        if i % 7 == 0:
            extra["tags"] = ["Travel", "food"]
        if i % 11 == 0:
            extra["context"] = f"talking about trips  {i}"
            extra["intention"] = "plan a trip"
        if i % 13 == 0:
            extra["pinned"] = True
        if i % 3 == 0:
            extra["subject"] = "ana" if i % 2 else "bruno"
        steps.append(save(text, **extra))
        steps.append(save(text.upper(), bank="small", **extra))
    steps += [
        save(f"The deploy key is {key} for prod."),
        save(f"My token: {key}", tags=[key]),
        save("  The user   likes  GREEN tea.  "),
        save("the user likes green tea."),
        {**save("the user likes green tea."), "caller": "agent"},
        {**save("An extracted fact about tea."), "caller": "extraction"},
        {**save(docs[13]), "caller": "extraction"},  # pinned: refused
        save("x"),
        save("a" * 3000),
        save(
            "Lesson text about retries.",
            category="lesson",
            title="Retry with backoff",
            recommendation="Use exponential backoff on 429.",
            anchors={"files": ["src/net/retry.py"], "identifiers": ["retry_with_backoff"]},
            evidence=["saw 429 storms"],
        ),
        save("Valid text", bank="Bad Name"),
        save(docs[0]),  # a re-save of a bank's memory
    ]
    steps.append([save(t, bank="small") for t in docs[60:100]])  # a full small bank, 40 at once
    steps.append([save(t) for t in docs[100:132]])  # 32 writers into the full 10k bank
    steps.append([save(t) for t in docs[100:116]] + [save(t) for t in docs[132:148]])
    steps.append({"fn": "memory::recall", "payload": {"bank": "bench", "query": "green tea"}})
    steps += [save(t, bank="small") for t in docs[148:170]]
    return steps


# (kind, N1, N2): a save's instructions are (count after N2 saves - count after N1) / (N2 - N1),
# so the boot, the warm-up and the close cancel out; 32 writers' counts are multiples of 32.
_COUNTED = (("single", 200, 1000), ("32", 256, 2304))


def instructions(before: Path, after: Path, root: Path, base: Path, fresh: list[str]) -> bool:
    """`--callgrind`: instructions a save under valgrind's callgrind, cap off, one process per
    tree and count (the wall clock of a shared machine swings 2-3x; this does not)."""
    if shutil.which("valgrind") is None:
        print("--callgrind needs valgrind on PATH")
        return False
    at = 0
    got: dict[tuple[str, str], float] = {}
    for kind, n1, n2 in _COUNTED:
        for label, tree in (("before", before), ("after", after)):
            counts = []
            for n in (n1, n2):
                copy, texts, out = root / "copy", root / "texts.json", root / "callgrind.out"
                shutil.copytree(base, copy)
                texts.write_text(json.dumps(fresh[at : at + n + 20]))
                at += n + 20
                wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
                run(tree, PROBE, [str(copy), str(texts), "0", kind, str(n)], wrap)
                totals = [x for x in out.read_text().splitlines() if x.startswith("totals:")]
                counts.append(int(totals[0].split()[1]))
                shutil.rmtree(copy)
                out.unlink()
            got[(kind, label)] = (counts[1] - counts[0]) / (n2 - n1)
            print(f"callgrind {kind} {label}: {counts} -> {got[(kind, label)]:,.0f}", flush=True)
    print()
    print("| instructions a save (cap off) | before | after | change |")
    print("|---|---:|---:|---:|")
    for kind, n1, n2 in _COUNTED:
        was, now = got[(kind, "before")], got[(kind, "after")]
        name = "one save at a time" if kind == "single" else f"{kind} writers"
        print(
            f"| {name} ({n2:,} - {n1:,} saves) | {was / 1e6:.3f} M | {now / 1e6:.3f} M | "
            f"{100 * (now - was) / was:+.1f}% |"
        )
    return True


def identity(
    args: argparse.Namespace, before: Path, after: Path, root: Path, base: Path, docs: list[str]
) -> bool:
    requests = root / "requests.json"
    requests.write_text(json.dumps(identity_requests(docs)))
    got = {}
    for label, tree in (("before", before), ("after", after)):
        copy = root / f"identity-{label}"
        shutil.copytree(base, copy)
        got[label] = run(tree, IDENTITY, [str(copy), str(requests)])
        shutil.rmtree(copy)
    same = True
    for part in ("answers", "events", "logs"):
        equal = got["before"][part] == got["after"][part]
        same &= equal
        size = len(json.dumps(got["after"][part]))
        print(f"identity {part}: {'same' if equal else 'DIFFERENT'} ({size:,} bytes of JSON)")
    lines = sum(log.count("\n") for log in got["after"]["logs"].values())
    print(
        f"identity: {len(got['after']['answers'])} steps, {len(got['after']['events'])} events, "
        f"{lines:,} log lines"
    )
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--after", type=Path, default=ROOT, help="the new source tree")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--total", type=int, default=3200, help="saves per writer count")
    parser.add_argument("--full-total", type=int, default=640, help="the same, full bank")
    parser.add_argument("--single", type=int, default=200, help="one-at-a-time saves timed")
    parser.add_argument("--caps", default="10000,0", help="max_memories settings measured")
    parser.add_argument("--identity", action="store_true", help="compare the trees' bytes")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the data dirs live (default $TMPDIR; /dev/shm: tmpfs, an fsync costs nothing, "
        "so the rates are what the Python path allows)",
    )
    parser.add_argument("--skip-time", action="store_true")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instead of the timed cells: each tree's instructions a save under valgrind's "
        "callgrind (1 writer and 32, cap off; use with --dir /dev/shm)",
    )
    args = parser.parse_args()
    configure_logging("warning")
    before, after = args.before.resolve(), args.after.resolve()
    turns, _ = growth.locomo()
    writers = [int(w) for w in args.writers.split(",")]
    caps = [int(c) for c in args.caps.split(",")]
    per_round = (args.single + args.total * len(writers) + 20 * (1 + len(writers))) * len(caps)
    docs = growth.documents(turns, args.size + per_round * 2 * args.rounds + 200)
    with tempfile.TemporaryDirectory(prefix="saves-ab-", dir=args.dir) as tmp:
        root = Path(tmp)
        base = root / "base"
        asyncio.run(growth.build_ours(base, docs[: args.size]))
        fresh = docs[args.size :]
        ok = True
        if args.identity:
            ok = identity(args, before, after, root, base, fresh)
        if args.callgrind:
            ok = instructions(before, after, root, base, fresh) and ok
        if args.skip_time or args.callgrind:
            return 0 if ok else 1
        load_before = load_average()
        started = datetime.now(UTC)
        kinds = ["single", *map(str, writers)]
        results: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
        sqlite: list[float] = []
        at = 0
        for r in range(args.rounds):
            order = _ORDER if r % 2 == 0 else _ORDER[::-1]
            for cap in caps:
                for kind in kinds:
                    n = args.single if kind == "single" else args.total
                    if cap and cap <= args.size and kind != "single":
                        n = min(n, args.full_total)
                    for label, _ in order:
                        tree = before if label == "before" else after
                        copy = root / "copy"
                        shutil.copytree(base, copy)
                        texts = root / "texts.json"
                        texts.write_text(json.dumps(fresh[at : at + n + 20]))
                        at += n + 20
                        got = run(tree, PROBE, [str(copy), str(texts), str(cap), kind, str(n)])
                        shutil.rmtree(copy)
                        results.setdefault((cap, kind, label), []).append(got)
                        print(f"round {r} cap {cap} {kind} {label}: {json.dumps(got)}", flush=True)
            sqlite.append(sqlite_p50(root, docs[: args.size], fresh, args.single))
            print(f"round {r} sqlite p50 {sqlite[-1]:.3f} ms", flush=True)
        print()
        print(f"- command: `python bench/saves_ab.py {' '.join(sys.argv[1:])}`")
        print(f"- taken: {started:%Y-%m-%d %H:%M} UTC; after = commit `{commit()}`")
        print(f"- machine: {machine()}; data dirs in {root.parent}")
        print(f"- load average before {load_before}, after {load_average()}")
        print(
            f"- {args.size:,} memories (LoCoMo turns), {args.rounds} rounds, medians of the "
            f"rounds; each cell a fresh process; {args.total:,} saves per writer count "
            f"({args.full_total:,} into the full bank), {args.single} single saves"
        )
        print()
        head = " | ".join(f"saves/s, {w} writer{'s' if w > 1 else ''}" for w in writers)
        cpu = " | ".join(f"CPU ms/save, {w}" for w in writers)
        print(f"| max_memories | tree | single save p50 ms | {head} | {cpu} |")
        print("|---|---|---:|" + "---:|" * 2 * len(writers))

        def med(cap: int, kind: str, label: str, key: str) -> float:
            return statistics.median(x[key] for x in results[(cap, kind, label)])

        for cap in caps:
            for label, _ in _ORDER:
                rates = " | ".join(f"{med(cap, str(w), label, 'per_s'):,.0f}" for w in writers)
                cpus = " | ".join(f"{med(cap, str(w), label, 'cpu_ms'):.3f}" for w in writers)
                full = cap and cap <= args.size
                name = f"{cap:,} (full)" if full else (f"{cap:,}" if cap else "0 (off)")
                single = med(cap, "single", label, "p50_ms")
                print(f"| {name} | {label} | {single:.3f} | {rates} | {cpus} |")
        print()
        print(
            f"SQLite WAL synchronous=FULL insert + commit p50: {statistics.median(sqlite):.3f} ms "
            f"(rounds: {', '.join(f'{x:.3f}' for x in sqlite)})"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
