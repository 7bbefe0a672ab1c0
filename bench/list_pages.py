#!/usr/bin/env python3
"""`memory::list` paging before/after on one machine in one run (issue 12: "fast at every size").

The consolidation pass, the console and REST read a bank 500 memories a page; every page sorted
the whole bank, so one pass over 50k memories was quadratic. For each bank size this prints, per
tree, p50 ms of one page (limit 500) at offset 0, the middle and the end; the first page after a
write landed (what the order's upkeep costs); and a whole pass by pages of 500, quiet and with a
save landing between every two pages (a hook writing while a pass reads).

`--identity` first runs the same script on each tree: a seeded bank (history, ties on
`updated_at`, tags, categories, subjects, pins), subject scoping and a TTL on, then saves,
reinforcements, updates, deletes, pins, supersedes and TTL expiry, with random listings between
them (tag, category, subject, history, offset, limit; a person and an agent), and compares every
answer: the same ids in the same order, the same total, the same fields (a digest of each page).

    git archive <old-commit> | tar -x -C /tmp/before
    nice -n 10 .venv/bin/python bench/list_pages.py --before /tmp/before [--after .]
        [--sizes 10000,50000] [--rounds 3] [--identity] [--identity-size 3000]

Each cell runs in a fresh process on its own copy of one bank seeded by the `--after` tree
(`import_records`); the trees alternate round by round. Everything the bank holds is in RAM
before a page is timed (its boot is not counted); `catalog.call` answers, as a bus call would.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BANK = "main"
PAGE = 500
NOW_MS = 1_790_000_000_000
DAY_MS = 86_400_000
WORDS = ("tea", "cat", "oslo", "chess", "rust", "piano", "kayak", "bread", "jazz", "moss")
TAGS = ("red", "blue", "green", "work", "home")
CATEGORIES = (None, "fact", "preference", "context", "procedure")
PEOPLE = tuple(f"Person{i}" for i in range(20))


# --- the parent -------------------------------------------------------------------------------


def _probe(tree: Path, *args: str) -> Any:
    """One child on `tree` (first on PYTHONPATH, its working directory); its last stdout line."""
    env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_DATA_DIR", "MEMORY_CONFIG")}
    env |= {"PYTHONPATH": str(tree), "MEMORY_EMBEDDER": "none"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "probe", *args],
        env=env, cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"probe {args[0]} on {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _identity(before: Path, after: Path, root: Path, n: int) -> list[str]:
    """Both trees' answers to the same script on copies of one seeded bank; their differences."""
    seeded = root / "identity"
    _probe(after, "seed", str(seeded), str(n))
    got = {}
    for name, tree in (("before", before), ("after", after)):
        copy = root / f"identity-{name}"
        shutil.copytree(seeded, copy)
        got[name] = _probe(tree, "dump", str(copy))
        shutil.rmtree(copy)
    shutil.rmtree(seeded)
    old, new = got["before"]["answers"], got["after"]["answers"]
    found = [f"answers: {len(old)} before, {len(new)} after"] if len(old) != len(new) else []
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            shown = [(got[0][:3], got[1]) for got in (a["got"], b["got"])]
            found.append(f"answer {i}: {a['ask']} before {shown[0]} after {shown[1]} (ids, total)")
    print(
        f"identity at {n:,} seeded memories: {len(new):,} listings compared "
        f"({got['after']['rows']:,} rows; {got['after']['expired']} read while memories past "
        f"a TTL were unreaped), {len(found)} differences"
    )
    for line in found[:20]:
        print(f"  {line}")
    return found


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _shown(key: str, ms: float) -> str:
    return f"{ms / 1e3:,.2f} s" if key.startswith("pass") else f"{ms:,.2f} ms"


CELLS = (
    ("page_first", "page at offset 0"),
    ("page_middle", "page at the middle"),
    ("page_end", "last page"),
    ("after_write", "first page after a write"),
    ("pass", "whole pass (pages of 500)"),
    ("pass_writes", "pass, a save between pages"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--after", type=Path, default=ROOT, help="the new tree (this one)")
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--identity", action="store_true", help="compare every answer first")
    parser.add_argument("--identity-size", type=int, default=3000)
    parser.add_argument("--skip-time", action="store_true")
    args = parser.parse_args()
    before, after = args.before.resolve(), args.after.resolve()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"command: {shlex.join(['python', 'bench/list_pages.py', *sys.argv[1:]])}")
    print(f"taken: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs")
    root = Path(tempfile.mkdtemp(prefix="list-pages-"))
    status = 0
    table: list[str] = []
    try:
        if args.identity:
            status |= bool(_identity(before, after, root, args.identity_size))
        for n in [] if args.skip_time else [int(s) for s in args.sizes.split(",") if s.strip()]:
            seeded = root / f"n{n}"
            _probe(after, "seed", str(seeded), str(n))
            runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
            for r in range(args.rounds):
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for name in order:
                    copy = root / f"n{n}-{name}"
                    shutil.copytree(seeded, copy)
                    tree = before if name == "before" else after
                    runs[name].append(_probe(tree, "time", str(copy), str(r)))
                    shutil.rmtree(copy)
            shutil.rmtree(seeded)
            live = int(runs["after"][0]["live"])
            for key, label in CELLS:
                old, new = _median(runs["before"], key), _median(runs["after"], key)
                table.append(
                    f"| {n:,} ({live:,} live) | {label} | {_shown(key, old)} | "
                    f"{_shown(key, new)} | {old / max(new, 1e-9):,.0f}× |"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average before / after: {load_before} / "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))  # fmt: skip
    if table:
        print(f"medians of {args.rounds} rounds (each a fresh process per tree, alternating)")
        print()
        print("| memories | what | before | after | speed-up |")
        print("|---|---|---:|---:|---:|")
        print("\n".join(table))
    return status


# --- the child: one tree, first on PYTHONPATH -------------------------------------------------


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def _seed_rows(n: int) -> list[dict[str, Any]]:
    """`n` records as an old bank holds them: statement times with ties (three per ms, in no
    order), tags, categories, subjects, a few pins, one in ten retired (history)."""
    rng = random.Random(12)
    times = [NOW_MS - DAY_MS + i // 3 for i in range(n)]
    rng.shuffle(times)
    rows = []
    for i, at in enumerate(times):
        words = " ".join(rng.choice(WORDS) for _ in range(5))
        row: dict[str, Any] = {
            "text": f"The user note {i}: {words}",
            "tags": rng.sample(TAGS, rng.randint(0, 2)),
            "created_at": at - rng.randint(0, 1000),
            "updated_at": at,
            "pinned": rng.random() < 0.02,
        }
        if (category := rng.choice(CATEGORIES)) is not None:
            row["category"] = category
        if rng.random() < 0.4:
            row["subject"] = rng.choice(PEOPLE)
        if rng.random() < 0.1 and not row["pinned"]:
            row["invalid_at"] = at
        rows.append(row)
    return rows


async def _open(data_dir: Path, clock: _Clock | None = None) -> tuple[Any, Any]:
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings
    from memory_worker.storage.store import Store

    store = Store.open(data_dir, holder={"pid": os.getpid(), "kind": "bench"})
    service = MemoryService(store, Settings(), clock=clock) if clock else MemoryService(
        store, Settings()
    )  # fmt: skip
    return store, service


async def _seed(data_dir: Path, n: int) -> dict[str, Any]:
    store, service = await _open(data_dir, _Clock(NOW_MS))
    await service.import_records(BANK, _seed_rows(n))
    await service.close()
    await store.close()
    return {"seeded": n}


async def _time(data_dir: Path, round_: int) -> dict[str, Any]:
    from memory_worker.app.caller import Caller
    from memory_worker.app.catalog import call

    person = Caller.human("bench")
    store, service = await _open(data_dir)

    async def page(offset: int) -> tuple[float, dict[str, Any]]:
        payload = {"bank": BANK, "limit": PAGE, "offset": offset}
        started = time.perf_counter()
        got = await call(service, "memory::list", payload, person)
        return (time.perf_counter() - started) * 1e3, got

    _, first = await page(0)  # boots the bank (and builds a kept order): not timed
    total = first["total"]
    out: dict[str, Any] = {"live": total}
    for key, offset in (
        ("page_first", 0),
        ("page_middle", total // 2),
        ("page_end", max(0, total - PAGE)),
    ):
        out[key] = statistics.median([(await page(offset))[0] for _ in range(7)])
    saved = 0

    async def save() -> None:
        nonlocal saved
        saved += 1
        text = f"A note saved while paging, round {round_} number {saved}"
        await call(service, "memory::save", {"bank": BANK, "text": text}, person)

    after_write = []
    for _ in range(7):
        await save()
        after_write.append((await page(total // 2))[0])
    out["after_write"] = statistics.median(after_write)
    for key, writes in (("pass", False), ("pass_writes", True)):
        spent, offset = 0.0, 0
        while True:
            ms, got = await page(offset)
            spent += ms
            offset += len(got["memories"])
            if not got["memories"] or offset >= got["total"]:
                break
            if writes:
                await save()
        out[key] = spent
    await service.close()
    await store.close()
    return out


async def _write(service: Any, store: Any, rng: random.Random, caller: Any) -> None:
    """One write of a random kind (a refused one is an answer both trees give alike)."""
    from memory_worker.app.catalog import call
    from memory_worker.core.errors import WorkerError

    records = list(store.find(BANK).memories.values())
    live = sorted(m.id for m in records if m.live)
    unpinned = sorted(m.id for m in records if m.live and not m.pinned)
    kind = rng.random()
    payload: dict[str, Any] = {"bank": BANK}
    if kind < 0.45:
        payload["text"] = f"The user likes {rng.choice(WORDS)} and {rng.choice(WORDS)}"
        payload["tags"] = rng.sample(TAGS, rng.randint(0, 2))
        payload["pinned"] = rng.random() < 0.05
        if (category := rng.choice(CATEGORIES)) is not None:
            payload["category"] = category
        if rng.random() < 0.4:
            payload["subject"] = rng.choice(PEOPLE[:4])
        function = "memory::save"
    elif kind < 0.6:
        payload |= {"id": rng.choice(live), "tags": rng.sample(TAGS, 1)}
        function = "memory::update"
    elif kind < 0.75:
        payload, function = payload | {"id": rng.choice(unpinned)}, "memory::delete"
    elif kind < 0.85:
        payload |= {"id": rng.choice(live), "pinned": rng.random() < 0.5}
        function = "memory::pin"
    else:
        old = rng.choice(unpinned)
        payload |= {"id": old, "superseded_by": rng.choice([i for i in live if i != old])}
        function = "memory::supersede"
    with contextlib.suppress(WorkerError):  # one past its TTL is retired first
        await call(service, function, payload, caller)


def _ask(rng: random.Random, size: int) -> dict[str, Any]:
    """A random listing: offset, limit, and maybe a tag, category, subject, history."""
    ask: dict[str, Any] = {
        "bank": BANK,
        "offset": rng.choice((0, rng.randint(0, size), max(0, size - 20))),
        "limit": rng.choice((0, 1, 7, 50, 500)),
    }
    if rng.random() < 0.3:
        ask["tag"] = rng.choice(TAGS)
    if rng.random() < 0.3:
        ask["category"] = rng.choice(("fact", "preference", "context", "procedure"))
    if rng.random() < 0.3:
        ask["subject"] = rng.choice((*PEOPLE[:4], PEOPLE[0].upper()))
    if rng.random() < 0.2:
        ask["include_superseded"] = True
    return ask


async def _dump(data_dir: Path) -> dict[str, Any]:
    """Every answer of a seeded script of writes and listings (see the module's docstring)."""
    from memory_worker.app.caller import Caller
    from memory_worker.app.catalog import call
    from memory_worker.core.retention import past_ttl

    clock = _Clock(NOW_MS)
    store, service = await _open(data_dir, clock)
    person, agent = Caller.human("bench"), Caller.for_agent("bench", session_id="s1")
    rng = random.Random(5)
    await call(
        service, "memory::bank::configure",
        {"name": BANK, "subject_scoping": True, "retention": {"context": 2}}, person,
    )  # fmt: skip
    answers: list[dict[str, Any]] = []
    rows = expired = 0
    for step in range(300):
        clock.now_ms += rng.choice((0, 0, 1, 2))  # 0: ties on `updated_at`, ordered by id
        await _write(service, store, rng, person)
        if step % 30 == 29:
            clock.now_ms += DAY_MS  # `context` memories pass their TTL, unreaped yet
        for _ in range(rng.randint(1, 5)):
            await service.settle()  # a reap a read asked for lands before the next read
            bank = store.find(BANK)
            ask, caller = _ask(rng, len(bank.memories)), rng.choice((person, agent))
            retention = service.bank_settings(bank).retention
            expired += any(
                m.live and past_ttl(m, retention, clock.now_ms) for m in bank.memories.values()
            )
            got = await call(service, "memory::list", ask, caller)
            rows += len(got["memories"])
            digest = hashlib.sha256(json.dumps(got, sort_keys=True).encode()).hexdigest()
            answers.append({
                "ask": {**ask, "caller": caller.kind.value},
                "got": [[m["id"] for m in got["memories"]], got["total"], digest],
            })  # fmt: skip
    await service.close()
    await store.close()
    return {"answers": answers, "rows": rows, "expired": expired}


def probe(argv: list[str]) -> None:
    import asyncio

    sys.path.insert(0, os.getcwd())  # the tree under test
    from memory_worker.adapters.logs import configure_logging

    configure_logging("error")
    what, data_dir, *rest = argv
    if what == "seed":
        result = asyncio.run(_seed(Path(data_dir), int(rest[0])))
    elif what == "time":
        result = asyncio.run(_time(Path(data_dir), int(rest[0])))
    elif what == "dump":
        result = asyncio.run(_dump(Path(data_dir)))
    else:
        raise SystemExit(f"unknown probe {what}")
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        probe(sys.argv[2:])
    else:
        raise SystemExit(main())
