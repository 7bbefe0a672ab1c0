#!/usr/bin/env python3
"""The semantic arm alone on LoCoMo (turn level, categories 1-4, recall@10): plain cosine against
the centred cosine the hybrid fuses (`LexicalIndex.centered_cosine`), per model and half.

Each conversation's turns and questions are embedded exactly as the worker embeds them (e5:
`passage: ` / `query: `), through the disk cache of `bench/embed_cache.py`, and every turn is
ranked by its similarity to the question, nothing else (no lexical arm, no boosts). `--variants`
adds diagnostics of the e5 arm on the tuning half: queries embedded with the `passage: ` prefix
too (is the asymmetric prefix pulling its weight?). Prints a markdown table and exits 0.

    nice -n 19 .venv/bin/python bench/semantic_arm.py [--variants]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from embed_cache import cached  # noqa: E402
from locomo import CATEGORIES, DEFAULT_DATA, Conversation, load  # noqa: E402
from runinfo import commit, machine  # noqa: E402

from memory_worker.adapters.embedders import load_local  # noqa: E402
from memory_worker.search.index import LexicalIndex  # noqa: E402

HALVES = {"tuning 0-4": range(5), "report 5-9": range(5, 10), "all 0-9": range(10)}


class PassageQueries:
    """e5 with its queries embedded as passages (a diagnostic: the prefix e5 was not trained on)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = f"{inner.model}-queries-as-passages"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.inner.embed_sync, texts)


def recall_rows(
    convs: list[Conversation], embedder: Any, center: float | None, members: range
) -> dict[int, list[float]]:
    """Per category, recall@10 of each question: turns ranked by (centred) cosine alone."""
    loop = asyncio.new_event_loop()
    per: dict[int, list[float]] = {c: [] for c in CATEGORIES}
    try:
        for i in members:
            conv = convs[i]
            vectors = loop.run_until_complete(embedder.embed([d.text for d in conv.turns]))
            index = LexicalIndex(half_precision=False)
            for d, vector in zip(conv.turns, vectors, strict=True):
                index.add(d.key, ["x"])
                index.set_vector(d.key, vector)
            for q in conv.questions:
                relevant = {d.key for d in conv.turns if d.evidence & q.evidence}
                if not relevant:
                    continue
                if hasattr(embedder, "embed_query"):
                    vector = loop.run_until_complete(embedder.embed_query(q.text))
                else:
                    vector = loop.run_until_complete(embedder.embed([q.text]))[0]
                sims = (
                    index.cosine(vector)
                    if center is None
                    else index.centered_cosine(vector, center)
                )
                top = np.argsort(-sims, kind="stable")[:10]
                found = {index.slot_ids()[int(s)] for s in top}
                per[q.category].append(len(relevant & found) / len(relevant))
    finally:
        loop.close()
    return per


def cells(per: dict[int, list[float]]) -> str:
    every = [x for v in per.values() for x in v]
    out = [f"{sum(v) / len(v):.3f}" if v else "-" for v in per.values()]
    return f"{len(every)} | " + " | ".join(out) + f" | {sum(every) / len(every):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--variants", action="store_true", help="also the e5 prefix diagnostic")
    args = parser.parse_args()
    convs = load(args.data)
    print(f"- command: `python bench/semantic_arm.py{' --variants' if args.variants else ''}`")
    print(f"- taken at commit `{commit()}` on {machine()}")
    print()
    print("| model | similarity | half | n | cat 1 | cat 2 | cat 3 | cat 4 | all |")
    print("|---|---|---|---|---|---|---|---|---|")
    for short in ("e5", "minilm"):
        embedder = cached(load_local(short))
        for label, center in (("plain cosine", None), ("centred 1.0", 1.0), ("centred 0.75", 0.75)):
            for half, members in HALVES.items():
                rows = recall_rows(convs, embedder, center, members)
                print(f"| {short} | {label} | {half} | {cells(rows)} |", flush=True)
    if args.variants:
        inner = load_local("e5")
        swapped = cached(PassageQueries(inner))
        rows = recall_rows(convs, swapped, None, HALVES["tuning 0-4"])
        print(f"| e5, queries as `passage: ` | plain cosine | tuning 0-4 | {cells(rows)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
