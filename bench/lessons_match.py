#!/usr/bin/env python3
"""Lesson matching cost at 10,000 lessons / 50,000 anchors (issue 18 bar: match p50 ≤ 0.2 ms).

A deterministic synthetic repository (folders of depth 1-4 from a code-ish vocabulary, files with
extensions, compound identifiers in snake/camel/SCREAMING case, a few thousand topic words) holds
10,000 lessons of exactly 5 anchors each (file 35%, folder 20%, identifier 25%, keyword group of
2-4 terms 20%). 2,000 tool calls in the shapes coding agents send — Read, Edit (a few hundred
bytes of code), Write (2-4 KB of code), Bash (`cd dir && …`, `git diff -- file`, `grep -rn name
dir`), Grep, Glob, Codex apply_patch — half of them touching anchored files or names. It reports:

- build: incremental `LessonIndex.add` of every lesson, and a remove + re-add churn;
- match p50/p90/p99/max per call shape and overall, split into reading the call (`signals`) and
  the index lookups (`LessonIndex.match`), with the mean number of cards matched;
- baselines on the same calls: a linear scan over every lesson's anchors (no index); and, for the
  keyword groups alone (the only part that is not a plain exact lookup), ours (each group under one
  rare term, plain dicts) against every term's postings counted with a dict, and with numpy (CSR
  postings + `bincount`);
- the index's RAM (tracemalloc) per anchor;
- `memory::lessons::match` through the catalog (validation, bank, budget packing, wire) on a bank
  holding the same lessons (imported, as `memory-worker import` does).

    .venv/bin/python bench/lessons_match.py [--lessons 10000] [--calls 2000] [--json OUT]
        [--write-doc]

Prints a markdown table and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.core.lessons import prepare_anchors  # noqa: E402
from memory_worker.core.models import Anchors  # noqa: E402
from memory_worker.core.text import STOPWORDS  # noqa: E402
from memory_worker.search.lessons import (  # noqa: E402
    FILE_SCORE,
    FOLDER_SCORE,
    GROUP_SCORE,
    IDENTIFIER_SCORE,
    LessonIndex,
)
from memory_worker.search.toolcall import Signals, signals  # noqa: E402

SEED = 20260518
WORKSPACE = "/home/dev/repo"
BAR_P50_MS = 0.2
ANCHORS_PER_LESSON = 5
KIND_WEIGHTS = {"files": 0.35, "folders": 0.20, "identifiers": 0.25, "groups": 0.20}
BASELINE_CALLS = 200  # the linear scan is slow: a sample of the calls is enough

_COMPONENTS = (
    "svc api internal pkg cmd proto web src lib handlers models store auth billing users orders "
    "search index queue worker client server config infra deploy scripts tools tests fixtures "
    "migrations schema gen vendor ui components hooks pages utils core app payments ledger"
).split()
_EXTENSIONS = ("go", "py", "ts", "tsx", "rs", "proto", "sql", "yaml", "md", "json", "sh", "toml")
_SYLLABLES = (
    "ka ro mi te lo va ni su de pa re to ma li no be ra si ve du ga ke zo fi ta mo lu ne hi"
).split()


class Corpus:
    """The synthetic repository, its lessons and the tool calls, all from one seed."""

    def __init__(self, lessons: int, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.words = self._words(3000)
        self.folders = self._folders(5000)
        # Lessons anchor specific folders, not `svc` or `src`: two components or more.
        self.deep_folders = [f for f in self.folders if "/" in f]
        self.files = [
            f"{self.rng.choice(self.folders)}/{self._name('_')}.{self.rng.choice(_EXTENSIONS)}"
            for _ in range(100_000)
        ]
        self.identifiers = [self._identifier() for _ in range(200_000)]
        self.lessons = [self._lesson() for _ in range(lessons)]

    def _words(self, n: int) -> list[str]:
        out: set[str] = set()
        while len(out) < n:
            word = "".join(self.rng.choices(_SYLLABLES, k=self.rng.randint(2, 4)))
            if word not in STOPWORDS:
                out.add(word)
        return sorted(out)

    def _word(self) -> str:
        # Skewed: density ∝ 1/sqrt(rank), so the commonest term is in ~2% of the draws.
        return self.words[int(len(self.words) * self.rng.random() ** 2)]

    def _name(self, sep: str) -> str:
        return sep.join(self.rng.choice(self.words) for _ in range(self.rng.randint(1, 3)))

    def _folders(self, n: int) -> list[str]:
        out: set[str] = set()
        while len(out) < n:
            depth = self.rng.randint(1, 4)
            parts = [self.rng.choice(_COMPONENTS) for _ in range(depth - 1)]
            out.add("/".join([*parts, self.rng.choice(_COMPONENTS + self.words[:200])]))
        return sorted(out)

    def _identifier(self) -> str:
        parts = [self.rng.choice(self.words) for _ in range(self.rng.randint(2, 4))]
        style = self.rng.random()
        if style < 0.45:
            return "_".join(parts)
        if style < 0.8:
            return parts[0] + "".join(p.capitalize() for p in parts[1:])
        return "_".join(parts).upper()

    def _lesson(self) -> Anchors:
        kinds: dict[str, list[Any]] = {k: [] for k in KIND_WEIGHTS}
        while sum(len(v) for v in kinds.values()) < ANCHORS_PER_LESSON:
            kind = self.rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
            if kind == "files":
                value: Any = self.rng.choice(self.files)
            elif kind == "folders":
                value = self.rng.choice(self.deep_folders)
            elif kind == "identifiers":
                value = self.rng.choice(self.identifiers)
            else:
                value = sorted({self._word() for _ in range(self.rng.randint(2, 4))})
                if len(value) < 2:
                    continue
            if value not in kinds[kind]:
                kinds[kind].append(value)
        return prepare_anchors(
            kinds["files"], kinds["folders"], kinds["identifiers"], kinds["groups"]
        )

    # --- tool calls ------------------------------------------------------------------------------

    def _pick_file(self, anchored: bool) -> str:
        if anchored:
            lesson = self.rng.choice(self.lessons)
            if lesson.files:
                return self.rng.choice(lesson.files)
            if lesson.folders:
                return f"{self.rng.choice(lesson.folders)}/{self._name('_')}.go"
        return self.rng.choice(self.files)

    def _pick_identifier(self, anchored: bool) -> str:
        if anchored:
            lesson = self.rng.choice(self.lessons)
            if lesson.identifiers:
                return self.rng.choice(lesson.identifiers)
            if lesson.keyword_groups:
                return "_".join(self.rng.choice(lesson.keyword_groups))
        return self.rng.choice(self.identifiers)

    def _code(self, size: int, anchored: bool) -> str:
        lines: list[str] = []
        while sum(len(line) + 1 for line in lines) < size:
            name = self._pick_identifier(anchored and self.rng.random() < 0.1)
            other = self.rng.choice(self.identifiers)
            lines.append(f"    {name} = {other}({self.rng.choice(self.words)}, {len(lines)})")
        return "\n".join(lines)

    def call(self) -> tuple[str, str, dict[str, Any]]:
        """`(shape, tool, arguments)` of one tool call; about half touch an anchored name."""
        anchored = self.rng.random() < 0.5
        shape = self.rng.choice(
            [
                *("read", "read", "edit", "write", "bash-cd", "bash-git", "bash-grep"),
                *("grep", "glob", "apply_patch"),
            ]
        )
        file = self._pick_file(anchored)
        folder = file.rsplit("/", 1)[0]
        if shape == "read":
            return shape, "Read", {"file_path": f"{WORKSPACE}/{file}"}
        if shape == "edit":
            return (
                shape,
                "Edit",
                {
                    "file_path": f"{WORKSPACE}/{file}",
                    "old_string": self._code(self.rng.randint(100, 400), anchored),
                    "new_string": self._code(self.rng.randint(100, 400), anchored),
                },
            )
        if shape == "write":
            return (
                shape,
                "Write",
                {
                    "file_path": f"{WORKSPACE}/{file}",
                    "content": self._code(self.rng.randint(2000, 4000), anchored),
                },
            )
        if shape == "bash-cd":
            return shape, "Bash", {"command": f"cd {folder} && make test", "description": "tests"}
        if shape == "bash-git":
            return shape, "Bash", {"command": f"git diff --stat -- {shlex.quote(file)} | head"}
        if shape == "bash-grep":
            ident = self._pick_identifier(anchored)
            return shape, "Bash", {"command": f"grep -rn {ident} {folder} | head -20"}
        if shape == "grep":
            ident = self._pick_identifier(anchored)
            return shape, "Grep", {"pattern": ident, "path": f"{WORKSPACE}/{folder}"}
        if shape == "glob":
            return shape, "Glob", {"pattern": "**/*.go", "path": f"{WORKSPACE}/{folder}"}
        other = self._pick_file(False)
        patch = (
            f"*** Begin Patch\n*** Update File: {WORKSPACE}/{file}\n@@\n"
            f"+{self._code(200, anchored)}\n*** Add File: {other}\n+x\n*** End Patch"
        )
        return shape, "apply_patch", {"command": patch}


# --- baselines -------------------------------------------------------------------------------


def linear_match(lessons: list[tuple[str, Anchors]], found: Signals) -> list[tuple[str, int]]:
    """No index: every lesson's anchors checked against the call."""
    paths = set(found.paths)
    folders = {p for path in found.paths for p in _prefixes(path)}
    out: list[tuple[str, int]] = []
    for lesson_id, anchors in lessons:
        score = 0
        if paths.intersection(anchors.files):
            score = FILE_SCORE
        elif folders.intersection(anchors.folders):
            score = FOLDER_SCORE
        elif found.identifiers.intersection(anchors.identifiers):
            score = IDENTIFIER_SCORE
        elif any(found.words.issuperset(group) for group in anchors.keyword_groups):
            score = GROUP_SCORE
        if score:
            out.append((lesson_id, score))
    return sorted(out, key=lambda item: (-item[1], item[0]))


def _prefixes(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]


class EveryTermGroups:
    """Keyword groups filed under EVERY term, matched by counting hits per group (dicts)."""

    def __init__(self, lessons: list[tuple[str, Anchors]]) -> None:
        self.postings: dict[str, list[int]] = {}
        self.groups: list[tuple[str, int]] = []  # group number → (lesson id, size)
        for lesson_id, anchors in lessons:
            for group in anchors.keyword_groups:
                number = len(self.groups)
                self.groups.append((lesson_id, len(group)))
                for term in group:
                    self.postings.setdefault(term, []).append(number)

    def match(self, words: frozenset[str]) -> set[str]:
        hits: Counter[int] = Counter()
        for word in words:
            hits.update(self.postings.get(word, ()))
        return {self.groups[g][0] for g, n in hits.items() if n == self.groups[g][1]}


class NumpyGroups:
    """The same postings as CSR arrays; a call's hits counted with `np.bincount`."""

    def __init__(self, lessons: list[tuple[str, Anchors]]) -> None:
        import numpy as np

        self.np = np
        every = EveryTermGroups(lessons)
        self.term_ids = {term: n for n, term in enumerate(every.postings)}
        lists = list(every.postings.values())
        self.offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum([len(x) for x in lists])
        self.flat = np.fromiter((g for x in lists for g in x), dtype=np.int32)
        self.sizes = np.array([size for _, size in every.groups], dtype=np.int32)
        self.owner = [lesson_id for lesson_id, _ in every.groups]

    def match(self, words: frozenset[str]) -> set[str]:
        np = self.np
        ids = [self.term_ids[w] for w in words if w in self.term_ids]
        if not ids:
            return set()
        hits = np.concatenate([self.flat[self.offsets[i] : self.offsets[i + 1]] for i in ids])
        counts = np.bincount(hits, minlength=len(self.sizes))
        return {self.owner[g] for g in np.flatnonzero(counts == self.sizes)}


# --- measuring -------------------------------------------------------------------------------


def _percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {"p50": statistics.median(ms), "p90": q[89], "p99": q[98], "max": ms[-1]}


def _time(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(corpus: Corpus, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    ids = [f"fp{n:016x}" for n in range(len(corpus.lessons))]
    pairs = list(zip(ids, corpus.lessons, strict=True))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    index = LessonIndex()
    started = time.perf_counter()
    for lesson_id, anchors in pairs:
        index.add(lesson_id, anchors)
    build_s = time.perf_counter() - started
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    index_bytes = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    churn = pairs[:1000]
    started = time.perf_counter()
    for lesson_id, anchors in churn:
        index.remove(lesson_id)
        index.add(lesson_id, anchors)
    churn_us = (time.perf_counter() - started) / len(churn) * 1e6

    read = [
        signals(tool, arguments, cwd=WORKSPACE, workspace_root=WORKSPACE)
        for _, tool, arguments in calls
    ]
    for found in read[:200]:  # warm caches (split_words, dicts) the way a running bank has them
        index.match(found)
    total: list[float] = []
    read_s: list[float] = []
    match_s: list[float] = []
    by_shape: dict[str, list[float]] = {}
    matched: list[int] = []
    for (shape, tool, arguments), found in zip(calls, read, strict=True):
        t_read = _time(
            lambda t=tool, a=arguments: signals(t, a, cwd=WORKSPACE, workspace_root=WORKSPACE)
        )
        t_match = _time(lambda f=found: index.match(f))
        read_s.append(t_read)
        match_s.append(t_match)
        total.append(t_read + t_match)
        by_shape.setdefault(shape, []).append(t_read + t_match)
        matched.append(len(index.match(found)))

    sample = read[:BASELINE_CALLS]
    linear = [_time(lambda f=f: linear_match(pairs, f)) for f in sample]
    mismatches = sum(linear_match(pairs, f) != index.match(f) for f in sample)
    groups_only = LessonIndex()
    for lesson_id, anchors in pairs:
        if anchors.keyword_groups:
            groups_only.add(lesson_id, Anchors(keyword_groups=anchors.keyword_groups))
    every_term = EveryTermGroups(pairs)
    numpy_groups = NumpyGroups(pairs)
    words_only = [Signals(words=f.words) for f in read]
    disagree = sum(
        {i for i, _ in groups_only.match(w)} != every_term.match(w.words)
        or every_term.match(w.words) != numpy_groups.match(w.words)
        for w in words_only
    )
    ours_groups = [_time(lambda w=w: groups_only.match(w)) for w in words_only]
    dict_groups = [_time(lambda w=w: every_term.match(w.words)) for w in words_only]
    np_groups = [_time(lambda w=w: numpy_groups.match(w.words)) for w in words_only]
    return {
        "lessons": len(index),
        "anchors": index.anchor_count,
        "build_s": build_s,
        "add_us": build_s / len(pairs) * 1e6,
        "churn_us": churn_us,
        "index_bytes": index_bytes,
        "total": _percentiles(total),
        "read": _percentiles(read_s),
        "match": _percentiles(match_s),
        "by_shape": {
            shape: {"n": len(samples), **_percentiles(samples)}
            for shape, samples in sorted(by_shape.items())
        },
        "matched_mean": statistics.fmean(matched),
        "calls_matching": sum(1 for n in matched if n) / len(matched),
        "linear": _percentiles(linear),
        "linear_mismatches": mismatches,
        "groups_ours": _percentiles(ours_groups),
        "groups_every_term_dict": _percentiles(dict_groups),
        "groups_np": _percentiles(np_groups),
        "groups_disagree": disagree,
    }


async def measure_catalog(
    corpus: Corpus, calls: list[tuple[str, str, dict[str, Any]]]
) -> dict[str, Any] | None:
    """`memory::lessons::match` through the catalog on a real bank holding the same lessons."""
    from memory_worker.app import catalog

    if not any(spec.id == "memory::lessons::match" for spec in catalog.CATALOG):
        return None
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings
    from memory_worker.storage.store import Store

    data = Path(tempfile.mkdtemp(prefix="lessons-bench-"))
    try:
        store = Store.open(data, holder={"pid": 0, "kind": "bench", "command": "lessons_match"})
        service = MemoryService(store, Settings())
        started = time.perf_counter()
        rows = [
            {
                "text": f"Lesson number {n} about {anchors.model_dump_json()}",
                "category": "lesson",
                "title": f"Lesson {n}",
                "recommendation": f"Recommendation {n}: do the right thing here.",
                "anchors": anchors.model_dump(),
            }
            for n, anchors in enumerate(corpus.lessons)
        ]
        await service.import_records("bench", rows)  # validated like saves, one fsync
        save_s = time.perf_counter() - started
        samples: list[float] = []
        for _, tool, arguments in calls:
            payload = {
                "bank": "bench",
                "tool": tool,
                "arguments": arguments,
                "cwd": WORKSPACE,
                "workspace_root": WORKSPACE,
            }
            started = time.perf_counter()
            await catalog.call(service, "memory::lessons::match", payload)
            samples.append(time.perf_counter() - started)
        await store.close()
        return {"save_s": save_s, "call": _percentiles(samples)}
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _row(name: str, p: dict[str, float], extra: str = "") -> str:
    return f"| {name} | {p['p50']:.4f} | {p['p90']:.4f} | {p['p99']:.4f} | {p['max']:.3f} |{extra}"


def report(r: dict[str, Any], via_catalog: dict[str, Any] | None, n_calls: int) -> str:
    lines = [
        f"{r['lessons']:,} lessons, {r['anchors']:,} anchors; {n_calls:,} calls, "
        f"{r['calls_matching']:.0%} of them match at least one card "
        f"(mean {r['matched_mean']:.1f} cards per call)",
        "",
        "| what | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|",
        _row("**match (read the call + index lookups)**", r["total"]),
        _row("read the call (`signals`)", r["read"]),
        _row("index lookups (`LessonIndex.match`)", r["match"]),
    ]
    for shape, p in r["by_shape"].items():
        lines.append(_row(f"match: {shape} (n={p['n']})", p))
    lines += [
        _row(f"baseline: linear scan, no index ({BASELINE_CALLS} calls)", r["linear"]),
        _row("groups only: ours, one rare term per group (dicts)", r["groups_ours"]),
        _row("groups only: every term's postings counted (dicts)", r["groups_every_term_dict"]),
        _row("groups only: every term's postings, numpy CSR + bincount", r["groups_np"]),
    ]
    if via_catalog is not None:
        lines.append(_row("`memory::lessons::match` through the catalog", via_catalog["call"]))
    lines += [
        "",
        f"- build: {r['build_s']:.2f} s for every lesson ({r['add_us']:.1f} µs per add); "
        f"remove + re-add {r['churn_us']:.1f} µs per lesson",
        f"- index RAM (tracemalloc): {r['index_bytes'] / 1e6:.1f} MB, "
        f"{r['index_bytes'] / max(r['anchors'], 1):.0f} B per anchor",
        f"- the linear scan and the index agree on {BASELINE_CALLS - r['linear_mismatches']}"
        f"/{BASELINE_CALLS} calls; the three group matchers agree on "
        f"{n_calls - r['groups_disagree']}/{n_calls}",
    ]
    if via_catalog is not None:
        lines.append(
            f"- the catalog row's bank was filled by importing the {r['lessons']:,} lessons "
            f"(`memory-worker import`'s path) in {via_catalog['save_s']:.1f} s"
        )
    ok = r["total"]["p50"] <= BAR_P50_MS
    lines += [
        "",
        f"Bar (issue 18): match p50 ≤ {BAR_P50_MS} ms with 10,000 lessons / 50,000 anchors: "
        f"{r['total']['p50']:.4f} ms {'ok' if ok else 'MISS'}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-catalog", action="store_true", help="skip the catalog row")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    add_write_doc_option(parser, "lessons-match")
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "lessons-match")
    from memory_worker.adapters.logs import configure_logging

    configure_logging("warning")
    meta = {
        "command": shlex.join(["python", "bench/lessons_match.py", *sys.argv[1:]]),
        "commit": commit(),
        "source": source_digest(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_before": load_average(),
    }
    corpus = Corpus(args.lessons, args.seed)
    calls = [corpus.call() for _ in range(args.calls)]
    results = measure(corpus, calls)
    via_catalog = None if args.no_catalog else asyncio.run(measure_catalog(corpus, calls))
    meta["load_after"] = load_average()
    body = "\n".join(
        [
            f"- command: `{meta['command']}`",
            f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
            f"`{meta['source']}`",
            f"- machine: {meta['machine']}",
            f"- load average before {meta['load_before']}, after {meta['load_after']} "
            "(other work on the machine skews timings)",
            "",
            report(results, via_catalog, len(calls)),
        ]
    )
    print(body)
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "results": results, "catalog": via_catalog}, indent=2) + "\n",
            encoding="utf-8",
        )
    if args.write_doc:
        write_doc(args.write_doc, "lessons-match", body)
        print(f"updated the lessons-match section of {args.write_doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
