#!/usr/bin/env python3
"""Recall over a partly embedded bank: is the semantic arm worth running when some memories have
no vector yet? (`storage.bank.SEMANTIC_COVERAGE`.)

A process that does not embed its writes (a one-shot command, MCP over stdio) leaves memories
without a vector until a recall or a server catches them up; memories in flight in a server are
the same. Their lexical and entity scores still count, their semantic term is 0. This loads every
LoCoMo conversation as `bench/tune_recall.py` does (turn level, vectors from the disk cache), then
takes the vectors off a growing share of each bank's memories — its NEWEST turns (what a process
that does not embed leaves behind) or a random choice — and ranks every question with the
default hybrid fusion, beside the lexical ranking (no semantic arm: what recall ran before the
coverage rule) on the same banks.

    .venv/bin/python bench/partial_vectors.py [--embedder e5] [--shares 0,0.05,0.1,0.2,0.3,0.5]

Tuning half (conversations 0-4), report half (5-9) and all; recall@10 over categories 1-4.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import tune_recall  # noqa: E402
from embed_cache import cached  # noqa: E402
from locomo import DEFAULT_DATA, load  # noqa: E402

from memory_worker.adapters.embedders import load_local  # noqa: E402
from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.search.ranking import RecallMode  # noqa: E402
from memory_worker.search.scoring import Fusion  # noqa: E402

HALVES = (("tuning 0-4", tune_recall.TUNING), ("report 5-9", tune_recall.REPORT))


def _orders(loaded: list[tune_recall.Loaded], how: str) -> list[list[str]]:
    """Per bank, its live memory ids in the order their vectors are taken off."""
    out = []
    for item in loaded:
        ids = [i for i, m in item.bank.memories.items() if m.live]
        ids.sort(key=lambda i: item.bank.memories[i].created_at, reverse=True)  # newest first
        if how == "random":
            random.Random(7).shuffle(ids)
        out.append(ids)
    return out


def _scores(loaded: list[tune_recall.Loaded], mode: RecallMode, semantic: bool) -> list[str]:
    tune_recall._POOLS.clear()  # the pools depend on which vectors are there
    cells = []
    for _, indices in (*HALVES, ("all", range(len(loaded)))):
        recall = tune_recall.evaluate(loaded, indices, mode, Fusion(), semantic)
        cells.append(f"{recall['all']:.3f}")
    return cells


async def main_async(args: argparse.Namespace) -> None:
    embedder = cached(load_local(args.embedder))
    shares = [float(s) for s in args.shares.split(",")]
    with tempfile.TemporaryDirectory(prefix="partial-vectors-") as tmp:
        loaded = await tune_recall._load(load(args.data), embedder, Path(tmp))
        lexical = _scores(loaded, RecallMode.HYBRID, False)
        print("| memories without a vector | which | hybrid tuning | hybrid report | hybrid all |")
        print("|---|---|---:|---:|---:|")
        print(f"| (no semantic arm) | — | {' | '.join(lexical)} |")
        kept = [
            {i: item.bank.index.vectors[item.bank.index.slot(i)].astype("float32") for i in ids}
            for item, ids in zip(loaded, _orders(loaded, "newest"), strict=True)
        ]
        for how in ("newest", "random"):
            orders = _orders(loaded, how)
            taken = [0] * len(loaded)
            for share in shares:  # growing: each step takes off more of the same order
                for n, (item, ids) in enumerate(zip(loaded, orders, strict=True)):
                    upto = round(share * len(ids))
                    for memory_id in ids[taken[n] : upto]:
                        item.bank.index.clear_vector(memory_id)
                    taken[n] = max(taken[n], upto)
                cells = _scores(loaded, RecallMode.HYBRID, True)
                print(f"| {share:.0%} | {how} | {' | '.join(cells)} |")
                sys.stdout.flush()
            for item, vectors in zip(loaded, kept, strict=True):  # the next order: all again
                for memory_id, vector in vectors.items():
                    item.bank.index.set_vector(memory_id, vector.tolist())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--embedder", default="e5", help="local model (default e5)")
    parser.add_argument("--shares", default="0,0.05,0.1,0.2,0.3,0.5")
    args = parser.parse_args()
    configure_logging("warning")
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
