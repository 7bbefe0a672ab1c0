#!/usr/bin/env python3
"""How every cost grows with the bank: 1k → 10k → 100k memories (1M with `--large`), beside the
engines a user would pick instead, on one real-text corpus, in one run.

The corpus is LoCoMo's dialogue turns (`speaker: text`, read in place from
`../shared/datasets/locomo/locomo10.json`, never copied). Past its 5,882 turns, each further
document is the first half of one turn joined to the second half of another (a seeded pick), so
every document is real words at a real turn's length and the texts stay distinct. Queries are
LoCoMo's questions (categories 1–4), the same for every engine.

Ours, per size:
- import: `import_records` of the whole bank (one write, one fsync per chunk);
- boot: a fresh process opens the data dir and answers its first `memory::recall` (replay and index
  included, whether they are built at open or on first use); median of 3 cold processes (1 at 1M);
  RSS that adds per memory, minus the UTF-8 text; then the same with the derived snapshots
  (`.index.npz`, `.records.npz`) deleted before each process (full replay and indexing);
- recall p50/p99: `catalog.call(service, "memory::recall", …)` (validation and encoding included),
  no embedder;
- save p50: `memory::save` through `catalog.call`, durable (fsynced), one at a time, into a bank
  with no cap (`max_memories: 0`: at the default 10,000 every save at 10k and past it would also
  evict one memory, which a peer's insert never does);
- saves/s: 32 concurrent writers through `catalog.call`, 100 saves each.

Peers on the same documents and queries (bench-only dependencies: the `bench` extra):
- SQLite FTS5 (stdlib): WAL with `synchronous=FULL`; a save is one INSERT + COMMIT; search is
  `MATCH` of the query's words OR-ed, `ORDER BY rank LIMIT 10`; open = a new connection + first
  query;
- tantivy: one text field, default tokenizer; search = parse + top 10; open = `Index.open` + first
  query;
- bm25s: English stopwords, `retrieve(k=10)` of one query at a time; no persistence (rebuild);
- rank_bm25 `BM25Okapi.get_scores` + top 10, at 10k documents and fewer (it scans every document).

The one-shot CLI: a data dir of `--banks` banks sharing `--cli-total` memories (1M with `--large`),
then `memory-worker trigger memory::save` into one of them and `memory::bank::list`, wall time of
the whole process, median of 5; and the same save into an empty data dir (the interpreter and import
floor).

    .venv/bin/pip install -e '.[bench]'
    nice -n 19 .venv/bin/python bench/growth.py [--sizes 1000,10000,100000] [--large] [--json OUT]

Prints markdown tables and exits 0. Temp data lives under $TMPDIR and is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import shlex
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
sys.path.insert(0, str(ROOT))

from recall_speed import pct, timed, timed_async, vm_rss_kb  # noqa: E402  # one timing loop
from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.caller import Caller  # noqa: E402
from memory_worker.app.catalog import call  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

_DATA_PATH = ("shared", "datasets", "locomo", "locomo10.json")
# ../shared beside the repo; a git worktree one level deeper finds it further up (bench/locomo.py).
LOCOMO = next(
    (p.joinpath(*_DATA_PATH) for p in ROOT.parents if p.joinpath(*_DATA_PATH).is_file()),
    Path(os.environ.get("LOCOMO_JSON", "/work/shared/datasets/locomo/locomo10.json")),
)
BANK = "bench"
DERIVED = (SNAPSHOT_FILE, RECORDS_FILE)  # what a boot may use instead of replaying, never needs
SEED = 12
NOW_MS = 1_760_000_000_000
QUERIES = 200
SAVES = 200
WRITERS = 32
SAVES_PER_WRITER = 100
IMPORT_CHUNK = 20_000
CLI_RUNS = 5
CALLER = Caller.human("bench")
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/growth.py"}
_SESSION = re.compile(r"session_\d+")
_WORD = re.compile(r"\w+")

# The bank holds every memory it is given, as a user holding a 100k bank would have configured it
# (the default cap of 10,000 would make every save at 10k and past it evict one memory, a cost the
# peers' inserts never pay; bench/saves_ab.py and bench/full_bank.py measure saves at the cap).
SETTINGS = Settings(max_memories=0)

BAR_BOOT_S = {100_000: 1.0, 1_000_000: 10.0}
BAR_BYTES_BEYOND_TEXT = 1024.0
BAR_SAVES_PER_S = 10_000.0
BAR_RECALL_P50_MS = {10_000: 0.2, 100_000: 1.0}
BAR_CLI_S = 0.3


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# --- corpus ------------------------------------------------------------------------------------


def locomo() -> tuple[list[str], list[str]]:
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    turns: list[str] = []
    questions: list[str] = []
    for sample in data:
        for key, session in sample["conversation"].items():
            if _SESSION.fullmatch(key):
                turns.extend(f"{t['speaker']}: {t['text']}" for t in session if t.get("text"))
        questions.extend(str(qa["question"]) for qa in sample["qa"] if qa.get("category") != 5)
    return turns, questions


def documents(turns: list[str], count: int, seed: int = SEED) -> list[str]:
    """`count` distinct documents: the turns, then halves of two turns joined."""
    out = list(dict.fromkeys(turns))[:count]
    seen = set(out)
    rng = random.Random(seed)
    split = [t.split() for t in turns]
    while len(out) < count:
        a, b = rng.choice(split), rng.choice(split)
        text = " ".join(a[: max(1, len(a) // 2)] + b[len(b) // 2 :])
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def rows_of(texts: list[str]) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    return [
        {
            "text": text,
            "confidence": "extracted",
            "created_at": NOW_MS - rng.randrange(365 * 86_400_000),
        }
        for text in texts
    ]


# --- helpers -----------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


# --- ours --------------------------------------------------------------------------------------


def boot_probe(data_dir: Path, query: str) -> None:
    """Child-process entry: open the data dir cold, answer one recall, print the costs as JSON."""
    gc.collect()
    before = vm_rss_kb()
    started = time.perf_counter()
    store = Store.open(data_dir, holder=HOLDER)
    opened = time.perf_counter() - started
    service = MemoryService(store, SETTINGS, clock=FixedClock(NOW_MS))

    async def first() -> None:
        await call(service, "memory::recall", {"bank": BANK, "query": query}, CALLER)

    asyncio.run(first())
    first_query = time.perf_counter() - started
    gc.collect()
    after = vm_rss_kb()
    bank = store.get(BANK)
    text_bytes = sum(len(m.text.encode("utf-8")) for m in bank.memories.values())
    print(
        json.dumps(
            {
                "open_s": opened,
                "boot_s": first_query,
                "rss_kb": after - before,
                "memories": len(bank.memories),
                "text_bytes": text_bytes,
            }
        )
    )
    asyncio.run(store.close())


def run_probe(data_dir: Path, query: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--boot-probe", str(data_dir), "--probe-query", query],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(next(x for x in proc.stdout.splitlines() if x.startswith('{"open_s"'))))


async def build_ours(data_dir: Path, texts: list[str]) -> float:
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, SETTINGS, clock=FixedClock(NOW_MS))
    rows = rows_of(texts)
    started = time.perf_counter()
    for start in range(0, len(rows), IMPORT_CHUNK):
        await service.import_records(BANK, rows[start : start + IMPORT_CHUNK])
    elapsed = time.perf_counter() - started
    await store.close()
    return elapsed


async def measure_ours(data_dir: Path, queries: list[str], fresh: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, SETTINGS, clock=FixedClock(NOW_MS))

    async def recall(q: str) -> Any:
        payload = {"bank": BANK, "query": q, "limit": 10}
        return await call(service, "memory::recall", payload, CALLER)

    samples = await timed_async(recall, queries)
    out["recall_p50_ms"], out["recall_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)

    texts = iter(fresh)

    async def save(_: str) -> None:
        await call(service, "memory::save", {"bank": BANK, "text": next(texts)}, CALLER)

    samples = await timed_async(save, [""] * SAVES)
    out["save_p50_ms"], out["save_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)

    async def writer() -> None:
        for _ in range(SAVES_PER_WRITER):
            await save("")

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    out["saves_per_s"] = WRITERS * SAVES_PER_WRITER / (time.perf_counter() - started)
    await service.close()
    await store.close()
    return out


# --- peers -------------------------------------------------------------------------------------


def fts_query(text: str) -> str:
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words(text))) or '""'


def measure_sqlite(root: Path, texts: list[str], queries: list[str], fresh: list[str]) -> dict:
    path = root / "fts.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(text)")
    started = time.perf_counter()
    db.execute("BEGIN")
    db.executemany("INSERT INTO docs(text) VALUES (?)", ((t,) for t in texts))
    db.execute("COMMIT")
    out: dict[str, Any] = {"build_s": time.perf_counter() - started}
    search = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 10"
    samples = timed(lambda q: db.execute(search, (fts_query(q),)).fetchall(), queries)
    out["recall_p50_ms"] = pct(samples, 0.5)
    it = iter(fresh)

    def save(_: str) -> None:
        db.execute("BEGIN")
        db.execute("INSERT INTO docs(text) VALUES (?)", (next(it),))
        db.execute("COMMIT")

    out["save_p50_ms"] = pct(timed(save, [""] * SAVES), 0.5)
    db.close()
    started = time.perf_counter()
    again = sqlite3.connect(path, isolation_level=None)
    again.execute(search, (fts_query(queries[0]),)).fetchall()
    out["open_s"] = time.perf_counter() - started
    again.close()
    return out


def measure_tantivy(root: Path, texts: list[str], queries: list[str]) -> dict[str, Any]:
    try:
        import tantivy
    except ImportError:
        return {"missing": "tantivy"}
    path = root / "tantivy"
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False)
    schema = builder.build()
    started = time.perf_counter()
    index = tantivy.Index(schema, path=str(path))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for text in texts:
        writer.add_document(tantivy.Document(text=text))
    writer.commit()
    writer.wait_merging_threads()
    out: dict[str, Any] = {"build_s": time.perf_counter() - started}
    index.reload()
    searcher = index.searcher()

    def search(q: str) -> Any:
        return searcher.search(index.parse_query(" ".join(words(q)) or "x", ["text"]), 10).hits

    out["recall_p50_ms"] = pct(timed(search, queries), 0.5)
    started = time.perf_counter()
    reopened = tantivy.Index.open(str(path))
    reopened.searcher().search(reopened.parse_query(" ".join(words(queries[0])), ["text"]), 10)
    out["open_s"] = time.perf_counter() - started
    return out


def measure_bm25s(texts: list[str], queries: list[str]) -> dict[str, Any]:
    try:
        import bm25s
    except ImportError:
        return {"missing": "bm25s"}
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    out: dict[str, Any] = {"build_s": time.perf_counter() - started}

    def search(q: str) -> Any:
        tokens = bm25s.tokenize([q], stopwords="en", show_progress=False)
        return retriever.retrieve(tokens, k=10, show_progress=False)

    out["recall_p50_ms"] = pct(timed(search, queries), 0.5)
    return out


def measure_rank_bm25(texts: list[str], queries: list[str]) -> dict[str, Any]:
    try:
        import numpy as np
        from rank_bm25 import BM25Okapi
    except ImportError:
        return {"missing": "rank_bm25"}
    if len(texts) > 10_000:
        return {"skipped": "scans every document per query"}
    started = time.perf_counter()
    model = BM25Okapi([words(t) for t in texts])
    out: dict[str, Any] = {"build_s": time.perf_counter() - started}
    out["recall_p50_ms"] = pct(
        timed(lambda q: np.argpartition(-model.get_scores(words(q)), 10)[:10], queries[:50], 5),
        0.5,
    )
    return out


# --- the one-shot CLI --------------------------------------------------------------------------


async def measure_cli(root: Path, turns: list[str], banks: int, total: int) -> dict[str, Any]:
    """A data dir of `banks` banks of `total // banks` memories each (one bank imported, its files
    copied), then whole-process wall times of one-shot commands."""
    data_dir = root / "cli"
    per_bank = total // banks
    await build_ours(data_dir, documents(turns, per_bank, SEED + 1))
    source = data_dir / BANK
    for i in range(banks):
        shutil.copytree(source, data_dir / f"b{i:03d}")
    shutil.rmtree(source)
    exe = str(Path(sys.executable).with_name("memory-worker"))
    # Bytecode caches written and used, as an installed package has them (pip compiles at
    # install): with PYTHONDONTWRITEBYTECODE set (this sandbox sets it) every process compiles
    # the package's sources again, a cost of the checkout, not of the command.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["MEMORY_EMBEDDER"] = "none"

    def wall(args: list[str]) -> float:
        runs = []
        for n in range(CLI_RUNS):
            started = time.perf_counter()
            subprocess.run(
                [exe, "trigger", *[a.replace("{n}", str(n)) for a in args]],
                env=env,
                check=True,
                capture_output=True,
            )
            runs.append(time.perf_counter() - started)
        return statistics.median(runs)

    empty = root / "empty"
    empty.mkdir()
    # One of the banks just made (a name past them would time a save creating a new bank).
    save = ["memory::save", f"bank=b{banks // 2:03d}", "text=the bench saved note {n}"]
    return {
        "banks": banks,
        "per_bank": per_bank,
        "save_s": wall([*save, "--data-dir", str(data_dir)]),
        "list_s": wall(["memory::bank::list", "--data-dir", str(data_dir)]),
        "empty_s": wall([*save, "--data-dir", str(empty)]),
    }


# --- report ------------------------------------------------------------------------------------


def _ms(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def report(results: list[dict[str, Any]], cli: dict[str, Any] | None) -> str:
    lines = [
        "### ours, by size",
        "",
        "| memories | import s | boot to first recall s (open s) | same, snapshot deleted s | "
        "RSS B/memory beyond text | "
        "recall p50 / p99 ms | save p50 / p99 ms | saves/s, 32 writers |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        o = r["ours"]
        lines.append(
            f"| {r['n']:,} | {o['import_s']:.2f} | {o['boot_s']:.3f} ({o['open_s']:.3f}) | "
            f"{o.get('rebuild_s', float('nan')):.3f} | "
            f"{o['bytes_beyond_text']:,.0f} | "
            f"{o['recall_p50_ms']:.3f} / {o['recall_p99_ms']:.2f} | "
            f"{o['save_p50_ms']:.3f} / {o['save_p99_ms']:.2f} | {o['saves_per_s']:,.0f} |"
        )
    lines += [
        "",
        "### side by side (same documents, same queries, same run)",
        "",
        "| memories | recall p50 ms: ours / tantivy / bm25s / FTS5 / rank_bm25 | "
        "save p50 ms: ours / FTS5 | restart to first query s: ours / tantivy / FTS5 | "
        "build s: ours / tantivy / bm25s / FTS5 |",
        "|---:|---|---|---|---|",
    ]
    for r in results:
        o, t, b, s, k = r["ours"], r["tantivy"], r["bm25s"], r["sqlite"], r["rank_bm25"]
        lines.append(
            f"| {r['n']:,} | {o['recall_p50_ms']:.3f} / {_ms(t.get('recall_p50_ms'), 3)} / "
            f"{_ms(b.get('recall_p50_ms'), 3)} / {_ms(s.get('recall_p50_ms'), 3)} / "
            f"{_ms(k.get('recall_p50_ms'))} | {o['save_p50_ms']:.3f} / {s['save_p50_ms']:.3f} | "
            f"{o['boot_s']:.3f} / {_ms(t.get('open_s'), 4)} / {_ms(s.get('open_s'), 4)} | "
            f"{o['import_s']:.2f} / {_ms(t.get('build_s'))} / {_ms(b.get('build_s'))} / "
            f"{_ms(s.get('build_s'))} |"
        )
    if cli is not None:
        lines += [
            "",
            "### one-shot CLI (whole process, median of 5)",
            "",
            "| data dir | `trigger memory::save` s | `trigger memory::bank::list` s | "
            "`memory::save` into an empty data dir s |",
            "|---|---:|---:|---:|",
            f"| {cli['banks']} banks × {cli['per_bank']:,} memories | {cli['save_s']:.3f} | "
            f"{cli['list_s']:.3f} | {cli['empty_s']:.3f} |",
        ]
    return "\n".join([*lines, "", "Bars (issue 12):", *bars(results, cli)])


def bars(results: list[dict[str, Any]], cli: dict[str, Any] | None) -> list[str]:
    lines: list[str] = []
    by_n = {r["n"]: r for r in results}
    for n, bar in BAR_BOOT_S.items():
        if n in by_n:
            got = by_n[n]["ours"]["boot_s"]
            lines.append(f"- boot {n:,} ≤ {bar} s: {got:.2f} s {'ok' if got <= bar else 'MISS'}")
    for n in (100_000, 1_000_000):
        if n in by_n:
            got = by_n[n]["ours"]["bytes_beyond_text"]
            ok = "ok" if got <= BAR_BYTES_BEYOND_TEXT else "MISS"
            lines.append(f"- RAM beyond text at {n:,} ≤ 1,024 B/memory: {got:,.0f} B {ok}")
    if results:
        worst = min(r["ours"]["saves_per_s"] for r in results)
        ok = "ok" if worst >= BAR_SAVES_PER_S else "MISS"
        lines.append(f"- ≥ 10,000 saves/s with 32 writers: worst {worst:,.0f}/s {ok}")
    for r in results:
        ours, theirs = r["ours"]["save_p50_ms"], r["sqlite"]["save_p50_ms"]
        ok = "ok" if ours <= theirs else "MISS"
        lines.append(
            f"- single save ≤ SQLite WAL FULL at {r['n']:,}: {ours:.3f} vs {theirs:.3f} ms {ok}"
        )
    for r in results:
        got = r["ours"]["recall_p50_ms"]
        bar = BAR_RECALL_P50_MS.get(r["n"])
        tantivy = r["tantivy"].get("recall_p50_ms")
        parts = []
        if bar is not None:
            parts.append(f"≤ {bar} ms {'ok' if got <= bar else 'MISS'}")
        if tantivy is not None:
            parts.append(f"vs tantivy {tantivy:.3f} ms {'ok' if got <= tantivy else 'MISS'}")
        lines.append(f"- recall p50 at {r['n']:,}: {got:.3f} ms, " + ", ".join(parts))
    if cli is not None:
        ok = "ok" if cli["save_s"] <= BAR_CLI_S else "MISS"
        total = cli["banks"] * cli["per_bank"]
        lines.append(
            f"- one-shot save on {total:,} memories in {cli['banks']} banks ≤ 0.3 s: "
            f"{cli['save_s']:.3f} s {ok}"
        )
    return lines


# --- main --------------------------------------------------------------------------------------


async def measure_size(
    root: Path, n: int, turns: list[str], queries: list[str], boots: int
) -> dict[str, Any]:
    texts = documents(turns, n)
    fresh = [f"{t} (again {i})" for i, t in enumerate(documents(turns, 4000, SEED + 7))]
    work = root / f"n{n}"
    work.mkdir()
    ours: dict[str, Any] = {"import_s": await build_ours(work / "ours", texts)}
    gc.collect()
    probes = [run_probe(work / "ours", queries[0]) for _ in range(boots)]
    snapshot = work / "ours" / BANK / SNAPSHOT_FILE
    rebuilds = []
    for _ in range(boots):  # the same boot without the derived snapshots: replay + full indexing
        for name in DERIVED:
            (work / "ours" / BANK / name).unlink(missing_ok=True)
        rebuilds.append(run_probe(work / "ours", queries[0])["boot_s"])
    ours["rebuild_s"] = statistics.median(rebuilds)
    ours["snapshot"] = snapshot.is_file()
    ours["boot_s"] = statistics.median(p["boot_s"] for p in probes)
    ours["open_s"] = statistics.median(p["open_s"] for p in probes)
    ours["bytes_beyond_text"] = (probes[0]["rss_kb"] * 1024 - probes[0]["text_bytes"]) / n
    ours.update(await measure_ours(work / "ours", queries, fresh))
    shutil.rmtree(work / "ours")
    result = {
        "n": n,
        "ours": ours,
        "sqlite": measure_sqlite(work, texts, queries, fresh),
        "tantivy": measure_tantivy(work, texts, queries),
        "bm25s": measure_bm25s(texts, queries),
        "rank_bm25": measure_rank_bm25(texts, queries),
    }
    shutil.rmtree(work)
    return result


async def main_async(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.large and 1_000_000 not in sizes:
        sizes.append(1_000_000)
    turns, questions = locomo()
    queries = random.Random(SEED).sample(questions, min(args.queries, len(questions)))
    root = Path(tempfile.mkdtemp(prefix="growth-"))
    meta = {
        "command": shlex.join(["python", "bench/growth.py", *sys.argv[1:]]),
        "commit": commit(),
        "source": source_digest(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_before": load_average(),
    }
    print(f"growth: sizes {', '.join(f'{s:,}' for s in sizes)}, {len(queries)} queries", flush=True)
    results = []
    cli = None
    try:
        for n in sizes:
            started = time.perf_counter()
            results.append(await measure_size(root, n, turns, queries, 1 if n >= 1e6 else 3))
            print(f"  {n:,} measured in {time.perf_counter() - started:.1f} s", flush=True)
        if args.banks:
            total = 1_000_000 if args.large else args.cli_total
            cli = await measure_cli(root, turns, args.banks, total)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta["load_after"] = load_average()
    body = "\n".join(
        [
            f"- command: `{meta['command']}`",
            f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
            f"`{meta['source']}`",
            f"- machine: {meta['machine']}; data on {root.parent}",
            f"- load average before {meta['load_before']}, after {meta['load_after']} "
            "(a shared machine: other work skews timings; read ratios within the run)",
            f"- corpus: LoCoMo turns (+ joined halves past 5,882), {len(queries)} LoCoMo questions",
            "",
            report(results, cli),
        ]
    )
    print()
    print(body)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results, "cli": cli}, indent=2))
    if args.write_doc:
        write_doc(args.write_doc, "growth", body)
        print(f"updated the growth section of {args.write_doc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--large", action="store_true", help="also 1M, and 1M for the CLI row")
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--banks", type=int, default=100, help="CLI data dir banks (0: skip)")
    parser.add_argument("--cli-total", type=int, default=100_000, help="memories across them")
    parser.add_argument("--json", type=Path)
    add_write_doc_option(parser, "growth")
    parser.add_argument("--boot-probe", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--probe-query", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "growth")
    configure_logging("warning")
    if args.boot_probe:
        boot_probe(args.boot_probe, args.probe_query)
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
