#!/usr/bin/env python3
"""Child of `bench/recall_ab.py`: runs `memory::recall` on ONE source tree (the one first on
PYTHONPATH, the working directory) and prints JSON: every answer (`dump`) or timings (`time`).

It imports nothing of bench/ (growth.py puts its own tree first on sys.path): the corpus and the
queries come from a JSON file the parent wrote. `dump` answers, through `catalog.call`:
- the golden persona bank (`golden/recall`), every query in each mode, with a limit of 3, 10 and
  100, with history (`include_superseded`, `as_of`), a tag and a category; once without an
  embedder and once with the tests' deterministic `FakeEmbedder` (the semantic arm, near-duplicate
  demotion and the vector paths of the second hop);
- a copy of the LoCoMo bank: the queries, then writes (saves of new texts and of texts it holds,
  deletes, pins, updates), then the queries again (every write must reach the next recall).

    PYTHONPATH=<tree> python bench/recall_probe.py dump|time|serve <data dir> <corpus.json>
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.getcwd())  # the tree under test (its tests/ package too)

from memory_worker.adapters.logs import configure_logging
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

BANK = "bench"
NOW_MS = 1_760_000_000_000
CALLER = Caller.human("bench")
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/recall_probe.py"}


async def _answers(
    service: MemoryService, bank: str, queries: list[str], variants: list[dict[str, Any]]
) -> list[Any]:
    out: list[Any] = []
    for variant in variants:
        for q in queries:
            payload = {"bank": bank, "query": q, **variant}
            try:
                out.append(await call(service, "memory::recall", payload, CALLER))
            except Exception as exc:  # an error is an answer too; both trees must agree on it
                out.append({"error": f"{type(exc).__name__}: {exc}"})
    return out


async def golden(root: Path) -> dict[str, Any]:
    from tests import recall_quality as rq
    from tests.fakes import FakeEmbedder

    data = rq.load()
    texts = [q.query for q in data.queries]
    out: dict[str, Any] = {}
    mid = data.as_of_ms - 200 * 86_400_000
    variants: list[dict[str, Any]] = [
        {"limit": 10},
        {"limit": 3},
        {"limit": 100},
        {"limit": 10, "mode": "lexical"},
        {"limit": 10, "mode": "semantic"},
        {"limit": 10, "include_superseded": True},
        {"limit": 10, "as_of": mid},
        {"limit": 10, "as_of": mid, "include_superseded": True},
        {"limit": 10, "tag": "identity"},
        {"limit": 10, "category": "fact"},
    ]
    for name, embedder in (("none", None), ("fake", FakeEmbedder())):
        async with rq.open_service(root / name, data.as_of_ms, embedder) as service:
            await rq.build_bank(service, data)
            out[name] = await _answers(service, rq.BANK, texts, variants)
    return out


async def locomo(data_dir: Path, corpus: dict[str, Any]) -> dict[str, Any]:
    queries: list[str] = corpus["queries"]
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=lambda: NOW_MS)
    out: dict[str, Any] = {}
    try:
        variants: list[dict[str, Any]] = [{"limit": 10}]
        out["before_writes"] = await _answers(service, BANK, queries, variants)
        out["other_modes"] = await _answers(
            service, BANK, queries[:50], [{"limit": 100}, {"limit": 1}, {"mode": "lexical"}]
        )
        hits = [r["memories"] for r in out["before_writes"] if r.get("memories")]
        writes: list[Any] = []
        for i, text in enumerate(corpus["fresh"]):
            # New texts holding the queries' words, and re-saves (corroboration) of found ones.
            writes.append(await call(service, "memory::save", {"bank": BANK, "text": text}))
            if i < len(hits):
                found = hits[i][0]["memory"]
                again = {"bank": BANK, "text": found["text"]}
                writes.append(await call(service, "memory::save", again))
        for i, found in enumerate(hits[:60]):
            memory = found[-1]["memory"]
            if i % 3 == 0:
                req = {"bank": BANK, "id": memory["id"]}
                fid = "memory::delete"
            elif i % 3 == 1:
                req = {"bank": BANK, "id": memory["id"], "pinned": True}
                fid = "memory::pin"
            else:
                req = {"bank": BANK, "id": memory["id"], "text": memory["text"] + " (revised)"}
                fid = "memory::update"
            try:
                writes.append(await call(service, fid, req))
            except Exception as exc:  # the same memory twice: both trees must agree
                writes.append({"error": f"{type(exc).__name__}: {exc}"})
            if i % 10 == 0:  # a recall between writes: caches must follow every change
                writes.append(await _answers(service, BANK, queries[i : i + 3], [{"limit": 10}]))
        out["writes"] = writes
        out["after_writes"] = await _answers(service, BANK, queries, [{"limit": 10}])
    finally:
        await service.close()
        await store.close()
    return out


async def timing(data_dir: Path, corpus: dict[str, Any]) -> dict[str, Any]:
    queries: list[str] = corpus["queries"]
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=lambda: NOW_MS)
    try:

        async def recall(q: str) -> Any:
            payload = {"bank": BANK, "query": q, "limit": 10}
            return await call(service, "memory::recall", payload, CALLER)

        for q in queries[:20]:  # warm-up, as bench/recall_speed.timed_async
            await recall(q)
        samples = []
        for q in queries:
            started = time.perf_counter_ns()
            await recall(q)
            samples.append((time.perf_counter_ns() - started) / 1e6)
    finally:
        await service.close()
        await store.close()
    return {"samples_ms": samples}


async def serve(data_dir: Path, corpus: dict[str, Any]) -> None:
    """Time the queries `start` to `end` of each line of stdin back to back, answering their
    milliseconds as a JSON list: the parent interleaves two trees block by block, so a load
    swing hits both while each block runs warm, as a server answering a stream of recalls."""
    queries: list[str] = corpus["queries"]
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=lambda: NOW_MS)
    try:
        for q in queries[:20]:  # warm-up, as bench/recall_speed.timed_async
            await call(service, "memory::recall", {"bank": BANK, "query": q, "limit": 10}, CALLER)
        print("ready", flush=True)
        for line in sys.stdin:
            start, end = (int(part) for part in line.split())
            samples = []
            for q in queries[start:end]:
                payload = {"bank": BANK, "query": q, "limit": 10}
                started = time.perf_counter_ns()
                await call(service, "memory::recall", payload, CALLER)
                samples.append((time.perf_counter_ns() - started) / 1e6)
            print(json.dumps(samples), flush=True)
    finally:
        await service.close()
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("dump", "time", "serve"))
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("corpus", type=Path, help="the JSON file bench/recall_ab.py wrote")
    args = parser.parse_args()
    configure_logging("warning")
    what, data_dir, corpus_path = args.what, args.data_dir, args.corpus
    corpus = json.loads(corpus_path.read_text(encoding="utf-8"))
    if what == "serve":
        asyncio.run(serve(data_dir, corpus))
        return 0
    if what == "time":
        result = asyncio.run(timing(data_dir, corpus))
    else:
        with tempfile.TemporaryDirectory(prefix="recall-probe-") as tmp:
            result = {
                "golden": asyncio.run(golden(Path(tmp))),
                "locomo": asyncio.run(locomo(data_dir, corpus)),
            }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
