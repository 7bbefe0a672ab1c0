#!/usr/bin/env python3
"""Association lanes (C21) on the golden set: hit@3 by half with the lanes off and on.

The golden persona (golden/recall/) was written before lanes existed: its memories carry no
`context` or `intention`. "On" asks every query the way the hook does — the window (here the one
message) as `context`, the latest user message as `intention` — on a bank weighted
content 0.6 / context 0.2 / intention 0.2. With nothing stored in the lanes the ranking must be the
same as "off": this run checks that turning lanes on costs an old bank nothing.

    nice -n 19 .venv/bin/python bench/lanes_golden.py
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory_worker.adapters.embedders import DEFAULT_LOCAL_MODEL, load_local  # noqa: E402
from memory_worker.app import catalog  # noqa: E402
from tests.recall_quality import (  # noqa: E402
    BANK,
    HALVES,
    LIMIT,
    _aggregate,
    build_bank,
    load,
    open_service,
    score_query,
)

ON = {"content": 0.6, "context": 0.2, "intention": 0.2}


async def measure(service: Any, golden: Any, ids: dict[str, str], lanes: bool) -> dict[str, Any]:
    key_of = {memory_id: key for key, memory_id in ids.items()}
    scores = []
    for query in golden.queries:
        payload: dict[str, Any] = {"bank": BANK, "query": query.query, "limit": LIMIT}
        if lanes:
            payload |= {"context": query.query, "intention": query.query}
        result = await catalog.call(service, "memory::recall", payload)
        ranked = [key_of.get(hit["memory"]["id"]) for hit in result["memories"]]
        scores.append(score_query(golden, query, ranked))
    return {half: _aggregate(s for s in scores if s.query.half == half) for half in HALVES}


async def main() -> None:
    golden = load()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lanes-golden-") as tmp:
        for name, embedder in (
            ("bm25-entity", None),
            ("hybrid+e5", load_local(DEFAULT_LOCAL_MODEL)),
        ):
            async with open_service(Path(tmp) / name, golden.as_of_ms, embedder) as service:
                ids = await build_bank(service, golden)
                off = await measure(service, golden, ids, lanes=False)
                await catalog.call(
                    service, "memory::bank::configure", {"name": BANK, "association_weights": ON}
                )
                on = await measure(service, golden, ids, lanes=True)
            for half in HALVES:
                a, b = off[half], on[half]
                rows.append(
                    f"| {name} | {half} | {a['queries']} | {a['hit@3']:.3f} | {b['hit@3']:.3f} | "
                    f"{a['mrr@10']:.3f} | {b['mrr@10']:.3f} |"
                )
    print("| system | half | n | hit@3 off | hit@3 on | mrr@10 off | mrr@10 on |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    # No options: `--help` says so instead of running the whole benchmark (and loading e5).
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    asyncio.run(main())
