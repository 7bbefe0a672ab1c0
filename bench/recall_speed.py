#!/usr/bin/env python3
"""Recall, save, boot and RAM costs at 1k, 10k and 100k memories, against BM25Okapi, in one run.

The corpus is synthetic but shaped like real notes: sentences of 8-25 words drawn with a Zipf
distribution from a vocabulary of a few thousand words (the most frequent ranks are English
function words, as in real text), 60% of them naming one of 300 people, who is also the memory's
entity; stated over the last year. 200 queries of 3-8 words come from the same distribution (30%
name a person). For each size it measures:

- recall p50/p99 in-process: `memory_worker.recall.rank()` on the bank (fused scorer, no
  embedder) and `memory::recall` through the catalog (validation and wire encoding included);
- `rank_bm25.BM25Okapi.get_scores` p50/p99 on the same tokens our index holds, and the ratio;
- save p50/p99 (`memory::save`, fsynced, one at a time) and saves/s with 32 concurrent writers,
  in a bank with no `max_memories` cap (no save evicts, at any size);
- boot (replay + index) of the log written by `import_records`, in a fresh process, and the RSS
  that boot adds per memory (read from /proc/self/status VmRSS), with and without the text.

    .venv/bin/python bench/recall_speed.py [--sizes 1000,10000,100000] [--json OUT]

Prints a markdown table and exits 0. The data dir is a temp dir on the default temp filesystem
(set TMPDIR to measure another disk); it is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rank_bm25 import BM25Okapi  # noqa: E402
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
from memory_worker.app.catalog import call  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.core.text import terms  # noqa: E402
from memory_worker.search import ranking as recall_module  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

BANK = "bench"
SEED = 20240601
NOW_MS = 1_760_000_000_000  # a fixed "now" so every run ranks the same corpus the same way
DAY_MS = 86_400_000
VOCABULARY = 4000
PEOPLE = 300
QUERIES = 200
SAVES = 200
WRITERS = 32
SAVES_PER_WRITER = 100
BOOT_RUNS = 3
IMPORT_CHUNK = 20_000
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/recall_speed.py"}

# The bars of SPEC §4 this script reports against.
BAR_RECALL_P50_MS = {10_000: 0.5, 100_000: 5.0}
BAR_SPEEDUP = 20.0
BAR_SAVE_P50_MS = 1.0
BAR_SAVES_PER_S = 5000.0
BAR_BOOT_100K_S = 2.0
BAR_BYTES_PER_MEMORY = 2048.0

FUNCTION_WORDS = (
    "the of and to a in is i that it for was on you with my he as have be at but not this "
    "we they are so had his her from or one all by an would there what about out up if"
).split()


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# --- the synthetic corpus --------------------------------------------------------------------


def _words(rng: np.random.Generator, count: int, syllables: tuple[int, int]) -> list[str]:
    onsets = "b c d f g h j k l m n p r s t v w z br ch cl dr fl gr pl pr sh st th tr".split()
    vowels = "a e i o u ai ea io ou".split()
    codas = ["", "", "", "n", "r", "s", "l", "m", "t", "nd", "st"]
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        parts = [
            str(rng.choice(onsets)) + str(rng.choice(vowels))
            for _ in range(int(rng.integers(syllables[0], syllables[1] + 1)))
        ]
        word = "".join(parts) + str(rng.choice(codas))
        if word not in seen and word not in FUNCTION_WORDS:
            seen.add(word)
            out.append(word)
    return out


class Corpus:
    """Deterministic Zipf-distributed sentences and queries."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = np.random.default_rng(seed)
        content = _words(self.rng, VOCABULARY - len(FUNCTION_WORDS), (1, 3))
        # Function words take the top ranks, as they do in real text; the rest follow.
        self.vocab = np.array(FUNCTION_WORDS + content)
        ranks = np.arange(1, len(self.vocab) + 1, dtype=np.float64)
        weights = 1.0 / (ranks + 2.7) ** 1.05  # Zipf-Mandelbrot
        self.cdf = np.cumsum(weights / weights.sum())
        self.people = [w.capitalize() for w in _words(self.rng, PEOPLE, (2, 2))]

    def _sentence(self, low: int, high: int) -> list[str]:
        n = int(self.rng.integers(low, high + 1))
        picks = np.searchsorted(self.cdf, self.rng.random(n) * self.cdf[-1], side="right")
        return list(self.vocab[np.minimum(picks, len(self.vocab) - 1)])

    def memories(self, count: int) -> list[dict[str, Any]]:
        rows = []
        for _ in range(count):
            words = self._sentence(8, 25)
            entities: list[str] = []
            if self.rng.random() < 0.6:
                person = self.people[int(self.rng.zipf(1.3)) % PEOPLE]
                words.insert(int(self.rng.integers(0, 3)), person)
                entities = [person.lower()]
            created = NOW_MS - int(self.rng.integers(0, 365 * DAY_MS))
            rows.append(
                {
                    "text": " ".join(words).capitalize() + ".",
                    "entities": entities,
                    "created_at": created,
                    "confidence": "extracted",
                }
            )
        return rows

    def queries(self, count: int) -> list[str]:
        out = []
        for _ in range(count):
            words = self._sentence(3, 8)
            if self.rng.random() < 0.3:
                words[int(self.rng.integers(0, len(words)))] = self.people[
                    int(self.rng.zipf(1.3)) % PEOPLE
                ]
            out.append(" ".join(words))
        return out


# --- helpers ---------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def vm_rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def timed(fn: Callable[[str], Any], queries: list[str], warm: int = 20) -> list[float]:
    """Milliseconds of `fn` on each query, after `warm` of them as a warm-up (bench/growth.py
    times its peers with this too)."""
    for q in queries[:warm]:
        fn(q)
    gc.collect()
    out = []
    for q in queries:
        started = time.perf_counter_ns()
        fn(q)
        out.append((time.perf_counter_ns() - started) / 1e6)
    return out


async def timed_async(fn: Callable[[str], Awaitable[Any]], queries: list[str]) -> list[float]:
    for q in queries[:20]:
        await fn(q)
    gc.collect()
    out = []
    for q in queries:
        started = time.perf_counter_ns()
        await fn(q)
        out.append((time.perf_counter_ns() - started) / 1e6)
    return out


def boot_probe(data_dir: Path) -> None:
    """Child-process entry: open the store cold and print boot time and RSS as JSON."""
    gc.collect()
    before = vm_rss_kb()
    started = time.perf_counter()
    store = Store.open(data_dir, holder=HOLDER)
    boot_s = time.perf_counter() - started
    gc.collect()
    after = vm_rss_kb()
    bank = store.get(BANK)
    text_bytes = sum(len(m.text.encode("utf-8")) for m in bank.memories.values())
    print(
        json.dumps(
            {
                "boot_s": boot_s,
                "rss_before_kb": before,
                "rss_after_kb": after,
                "memories": len(bank.memories),
                "text_bytes": text_bytes,
            }
        )
    )
    asyncio.run(store.close())


def run_boot_probe(data_dir: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--boot-probe", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith('{"boot_s"'))
    return dict(json.loads(line))


def make_rank(bank: Any, settings: Settings) -> tuple[Callable[[str], Any] | None, str]:
    """`rank()` on the bank directly, built for whatever signature is there; None and why if the
    signature is one this script does not know."""
    known = {f.name for f in fields(recall_module.RecallQuery)}
    wanted = {"limit": 10, "now_ms": NOW_MS, "half_life_days": settings.decay_half_life_days}
    params = list(inspect.signature(recall_module.rank).parameters.values())
    required = [
        p
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) != 3:
        return None, f"rank{inspect.signature(recall_module.rank)} is not (memories, index, query)"

    def run(q: str) -> Any:
        query = recall_module.RecallQuery(text=q, **{k: v for k, v in wanted.items() if k in known})
        return recall_module.rank(bank.memories, bank.index, query)

    try:
        run("probe")
    except Exception as exc:
        return None, f"rank() failed: {type(exc).__name__}: {exc}"
    return run, ""


def bm25_latency(tokenized: list[list[str]], queries: list[str]) -> tuple[float, list[float]]:
    """Build time of `BM25Okapi` over `tokenized`, and `get_scores` latencies for `queries`."""
    started = time.perf_counter()
    bm25 = BM25Okapi(tokenized)
    build_s = time.perf_counter() - started
    return build_s, timed(lambda q: bm25.get_scores(terms(q)), queries)


# --- one size --------------------------------------------------------------------------------


async def measure(size: int, corpus: Corpus, queries: list[str], root: Path) -> dict[str, Any]:
    data_dir = root / f"n{size}"
    rows = corpus.memories(size)
    # The bank holds every memory it is given (as growth.py's and gc_pauses.py's): at the default
    # cap (10,000) every save timed at 10k and 100k would evict one memory too, and the save
    # column would compare an eviction there with a plain save at 1k (full_bank.py and
    # saves_ab.py measure saves at the cap).
    settings = Settings(max_memories=0)
    out: dict[str, Any] = {"memories": size, "notes": []}

    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, settings, clock=FixedClock(NOW_MS))
    started = time.perf_counter()
    for start in range(0, size, IMPORT_CHUNK):
        await service.import_records(BANK, rows[start : start + IMPORT_CHUNK])
    out["import_s"] = time.perf_counter() - started
    await store.close()
    del rows, store, service
    gc.collect()

    probes = [run_boot_probe(data_dir) for _ in range(BOOT_RUNS)]
    out["boot_s"] = statistics.median(p["boot_s"] for p in probes)
    first = probes[0]
    delta = (first["rss_after_kb"] - first["rss_before_kb"]) * 1024
    out["rss_bytes_per_memory"] = delta / size
    out["text_bytes_per_memory"] = first["text_bytes"] / size
    out["rss_bytes_per_memory_beyond_text"] = (delta - first["text_bytes"]) / size

    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, settings, clock=FixedClock(NOW_MS))
    bank = store.get(BANK)

    ranker, why = make_rank(bank, settings)
    if ranker is not None:
        samples = timed(ranker, queries)
        out["rank_p50_ms"], out["rank_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)
    else:
        out["notes"].append(f"rank() skipped: {why}")

    async def via_catalog(q: str) -> Any:
        return await call(service, "memory::recall", {"bank": BANK, "query": q, "limit": 10})

    samples = await timed_async(via_catalog, queries)
    out["recall_p50_ms"], out["recall_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)

    doc_terms = getattr(recall_module, "document_terms", None)
    if doc_terms is None:
        tokenized = [terms(m.text) for m in bank.memories.values()]
    else:
        tokenized = [doc_terms(m) for m in bank.memories.values()]
    out["bm25_build_s"], samples = bm25_latency(tokenized, queries)
    del tokenized
    gc.collect()
    out["bm25_p50_ms"], out["bm25_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)
    ours = out.get("rank_p50_ms", out["recall_p50_ms"])
    out["speedup"] = out["bm25_p50_ms"] / ours if ours else float("inf")

    fresh = corpus.memories(SAVES + WRITERS * SAVES_PER_WRITER)
    serial, parallel = fresh[:SAVES], fresh[SAVES:]

    async def save(row: dict[str, Any]) -> None:
        await call(
            service,
            "memory::save",
            {"bank": BANK, "text": row["text"], "entities": row["entities"]},
        )

    await save(corpus.memories(1)[0])  # warm-up
    latencies = []
    for row in serial:
        started_ns = time.perf_counter_ns()
        await save(row)
        latencies.append((time.perf_counter_ns() - started_ns) / 1e6)
    out["save_p50_ms"], out["save_p99_ms"] = pct(latencies, 0.5), pct(latencies, 0.99)

    async def writer(chunk: list[dict[str, Any]]) -> None:
        for row in chunk:
            await save(row)

    chunks = [parallel[i::WRITERS] for i in range(WRITERS)]
    started = time.perf_counter()
    await asyncio.gather(*(writer(c) for c in chunks))
    out["saves_per_s_32"] = len(parallel) / (time.perf_counter() - started)

    await store.close()
    shutil.rmtree(data_dir, ignore_errors=True)
    return out


# --- report ----------------------------------------------------------------------------------


def _ok(flag: bool) -> str:
    return "ok" if flag else "MISS"


def report(results: list[dict[str, Any]]) -> str:
    head = [
        "memories",
        "rank() p50/p99 ms",
        "memory::recall p50/p99 ms",
        "BM25Okapi p50/p99 ms",
        "speedup (p50)",
        "save p50/p99 ms",
        "saves/s (32 writers)",
        "boot s",
        "RSS B/memory (beyond text)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for r in results:
        rank_cell = (
            f"{r['rank_p50_ms']:.3f} / {r['rank_p99_ms']:.3f}" if "rank_p50_ms" in r else "n/a"
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{r['memories']:,}",
                    rank_cell,
                    f"{r['recall_p50_ms']:.3f} / {r['recall_p99_ms']:.3f}",
                    f"{r['bm25_p50_ms']:.2f} / {r['bm25_p99_ms']:.2f}",
                    f"{r['speedup']:.1f}×",
                    f"{r['save_p50_ms']:.3f} / {r['save_p99_ms']:.3f}",
                    f"{r['saves_per_s_32']:,.0f}",
                    f"{r['boot_s']:.3f}",
                    f"{r['rss_bytes_per_memory']:,.0f} "
                    f"({r['rss_bytes_per_memory_beyond_text']:,.0f})",
                ]
            )
            + " |"
        )
    checks = []
    by_size = {r["memories"]: r for r in results}
    for size, bar in BAR_RECALL_P50_MS.items():
        if size in by_size:
            got = by_size[size].get("rank_p50_ms", by_size[size]["recall_p50_ms"])
            checks.append(f"recall p50 at {size:,} ≤ {bar} ms: {got:.3f} ms {_ok(got <= bar)}")
    for r in results:
        if r["memories"] in BAR_RECALL_P50_MS:  # the bar goes with the sizes the latency bars name
            checks.append(
                f"speedup over BM25Okapi at {r['memories']:,} ≥ {BAR_SPEEDUP:.0f}×: "
                f"{r['speedup']:.1f}× {_ok(r['speedup'] >= BAR_SPEEDUP)}"
            )
    worst_save = max(r["save_p50_ms"] for r in results)
    checks.append(
        f"save p50 ≤ {BAR_SAVE_P50_MS} ms at every size: worst {worst_save:.3f} ms "
        f"{_ok(worst_save <= BAR_SAVE_P50_MS)}"
    )
    worst_rate = min(r["saves_per_s_32"] for r in results)
    checks.append(
        f"≥ {BAR_SAVES_PER_S:,.0f} saves/s with {WRITERS} writers: worst "
        f"{worst_rate:,.0f}/s {_ok(worst_rate >= BAR_SAVES_PER_S)}"
    )
    if 100_000 in by_size:
        r = by_size[100_000]
        checks.append(
            f"boot of 100k ≤ {BAR_BOOT_100K_S} s: {r['boot_s']:.3f} s "
            f"{_ok(r['boot_s'] <= BAR_BOOT_100K_S)}"
        )
        extra = r["rss_bytes_per_memory_beyond_text"]
        checks.append(
            f"RAM beyond text at 100k ≤ {BAR_BYTES_PER_MEMORY:,.0f} B/memory: "
            f"{extra:,.0f} B {_ok(extra <= BAR_BYTES_PER_MEMORY)}"
        )
    notes = [n for r in results for n in r["notes"]]
    return "\n".join(
        [*lines, "", "SPEC §4 bars:", *(f"- {c}" for c in checks), *(f"- note: {n}" for n in notes)]
    )


async def main_async(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    corpus = Corpus()
    queries = corpus.queries(args.queries)
    root = Path(tempfile.mkdtemp(prefix="recall-speed-"))
    meta = {
        "command": shlex.join(["python", "bench/recall_speed.py", *sys.argv[1:]]),
        "commit": commit(),
        "source": source_digest(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "data_dir": f"{root.parent} ({_fs_type(root)})",
        "queries": len(queries),
        "load_before": load_average(),
    }
    print(f"recall speed: sizes {', '.join(f'{s:,}' for s in sizes)}, {len(queries)} queries")
    results = []
    try:
        for size in sizes:
            started = time.perf_counter()
            results.append(await measure(size, corpus, queries, root))
            print(
                f"  {size:,} memories measured in {time.perf_counter() - started:.1f} s", flush=True
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta["load_after"] = load_average()
    body = "\n".join(
        [
            f"- command: `{meta['command']}`",
            f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
            f"`{meta['source']}`",
            f"- machine: {meta['machine']}; data dir on {meta['data_dir']}",
            f"- load average before {meta['load_before']}, after {meta['load_after']} "
            "(other work on the machine skews timings)",
            f"- {len(queries)} queries per size; recall is the fused scorer without an embedder",
            "",
            report(results),
        ]
    )
    print()
    print(body)
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8"
        )
        print(f"\nwrote {args.json}")
    if args.write_doc:
        write_doc(args.write_doc, "recall-speed", body)
        print(f"updated the recall-speed section of {args.write_doc}")
    return 0


def _fs_type(path: Path) -> str:
    """The filesystem type under `path` (from /proc/mounts): fsync on tmpfs costs nothing."""
    best, kind = "", "unknown filesystem"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help="comma-separated bank sizes (default 1000,10000,100000)",
    )
    parser.add_argument("--queries", type=int, default=QUERIES, help="queries per size (200)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    add_write_doc_option(parser, "recall-speed")
    parser.add_argument("--boot-probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "recall-speed")
    configure_logging("warning")  # the store's info lines would bury the table
    if args.boot_probe:
        boot_probe(args.boot_probe)
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
