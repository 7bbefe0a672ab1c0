#!/usr/bin/env python3
"""Association lanes (C21) on LoCoMo: recall with the context lane off and on, by half.

Turn level, as bench/locomo.py: every dialogue turn is a memory. Its stored `context` is what
extraction would have written for it — the conversation window it was formed in (the turn and the
turns before it in its session, `core.lanes.window_text`, the newest 1000 characters). Each
question (categories 1-4, `as_of` the conversation's end, limit 10) is asked through
`memory::recall` with a `context` window of one of two kinds:

- `last`: the conversation's last session, its closing window — what the hook would pass when the
  question is asked at the end of the conversation (the realistic case);
- `evidence`: the closing window of the session that holds the question's first evidence turn —
  "the window of the question's session", an ORACLE: it tells the lane where the answer lies.

LoCoMo has no goals, so the intention lane is not measured here (it is by tests/test_lanes.py).
Weights are the bank's `association_weights` (content, context); tuned on conversations 0-4 and
reported on 5-9 like the other recall figures.

    nice -n 19 .venv/bin/python bench/lanes.py [--systems S,…] [--conversations 0,5]

With a model, the context lane's weight makes the bank embed every stored window as its own vector
(the lane's semantic half); on a loaded 2-core machine that is about a second a window.

The data is read in place and never copied here; e5 vectors come from the bench embedding cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from locomo import (  # noqa: E402
    CATEGORIES,
    DEFAULT_DATA,
    HALVES,
    LIMIT,
    Conversation,
    _memory_id,
    _settle,
    load,
    mean,
    open_service,
    row,
    score,
)
from runinfo import commit, machine  # noqa: E402

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.catalog import call  # noqa: E402
from memory_worker.core.lanes import window_text  # noqa: E402

WINDOW_TURNS = 12  # what one extraction pass reads (`extraction_window`'s default)
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5)  # the context lane's weight; content gets 1 - it
_SESSION = re.compile(r"D(\d+):")


def session_of(dia_id: str) -> int:
    match = _SESSION.match(dia_id)
    return int(match.group(1)) if match else -1


def stored_contexts(conv: Conversation) -> dict[str, str | None]:
    """Per turn: the window it was formed in (itself and the session's turns before it)."""
    out: dict[str, str | None] = {}
    by_session: dict[int, list[str]] = defaultdict(list)
    for doc in conv.turns:
        seen = by_session[session_of(doc.key)]
        seen.append(doc.text)
        out[doc.key] = window_text(seen[-WINDOW_TURNS:])
    return out


def closing_windows(conv: Conversation) -> dict[int, str | None]:
    """Per session: its closing window (the last turns, as the hook would pass them)."""
    by_session: dict[int, list[str]] = defaultdict(list)
    for doc in conv.turns:
        by_session[session_of(doc.key)].append(doc.text)
    return {n: window_text(texts[-WINDOW_TURNS:]) for n, texts in by_session.items()}


class Bank:
    """One service and bank per (system, conversation), queried at every weight."""

    def __init__(self, root: Path, name: str, embedder: Any) -> None:
        self.clock, self.store, self.service = open_service(root / name, embedder)

    async def fill(self, bank: str, conv: Conversation) -> dict[str, str]:
        contexts = stored_contexts(conv)
        self.clock.now_ms = conv.as_of
        # locomo.py's own record (its session included: ranking reads a question's answers from
        # the memories saved after it in its session), plus the window the turn was formed in.
        rows = [row(bank, _memory_id(d.key), d) | {"context": contexts[d.key]} for d in conv.turns]
        await self.service.import_records(bank, rows)
        await _settle(self.service)
        return {_memory_id(d.key): d.key for d in conv.turns}

    async def configure(self, bank: str, context_weight: float) -> None:
        weights = {"content": round(1.0 - context_weight, 6), "context": context_weight}
        await call(
            self.service, "memory::bank::configure", {"name": bank, "association_weights": weights}
        )
        await _settle(self.service)  # a lane that gained a weight is embedded now (with a model)

    async def ask(self, bank: str, question: str, context: str | None, as_of: int) -> list[str]:
        payload: dict[str, Any] = {"bank": bank, "query": question, "limit": LIMIT, "as_of": as_of}
        if context:
            payload["context"] = context
        result = await call(self.service, "memory::recall", payload)
        return [row["memory"]["id"] for row in result["memories"]]


async def run(args: argparse.Namespace) -> list[str]:
    args.started = (commit(), " ".join(f"{x:.2f}" for x in os.getloadavg()))
    convs = load(args.data)
    systems: list[tuple[str, Any]] = []
    for name in args.systems.split(","):
        if name == "bm25-entity":
            systems.append((name, None))
        elif name.startswith("hybrid+"):
            from embed_cache import cached

            from memory_worker.adapters.embedders import ALIASES, load_local

            systems.append((name, cached(load_local(ALIASES[name.split("+", 1)[1]]))))
        else:
            raise SystemExit(f"unknown system {name!r}")
    root = Path(tempfile.mkdtemp(prefix="lanes-bench-"))
    # (system, mode, weight) → [(conversation, category, metrics)]
    rows: dict[tuple[str, str, float], list[tuple[int, int, dict[str, float]]]] = defaultdict(list)
    seconds: dict[tuple[str, str, float], float] = defaultdict(float)
    try:
        for system, embedder in systems:
            for position, conv in enumerate(convs):
                if args.conversations and position not in args.conversations:
                    continue
                holder = Bank(root, f"{system}-{position}", embedder)
                bank = f"c{position}"
                keys = await holder.fill(bank, conv)
                windows = closing_windows(conv)
                last = windows[max(windows)]
                for weight in WEIGHTS:
                    await holder.configure(bank, weight)
                    for q in conv.questions:
                        relevant = {d.key for d in conv.turns if d.evidence & q.evidence}
                        if not relevant:
                            continue
                        first = min(q.evidence, key=lambda k: (session_of(k), k))
                        asked = {"last": last, "evidence": windows.get(session_of(first))}
                        for mode in ("last", "evidence") if weight else ("off",):
                            started = time.perf_counter()
                            ranked = await holder.ask(
                                bank, q.text, asked.get(mode) if weight else None, conv.as_of
                            )
                            seconds[(system, mode, weight)] += time.perf_counter() - started
                            metrics = score([keys[i] for i in ranked], relevant)
                            rows[(system, mode, weight)].append((position, q.category, metrics))
                await holder.store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return render(args, rows, seconds)


def render(
    args: argparse.Namespace,
    rows: dict[tuple[str, str, float], list[tuple[int, int, dict[str, float]]]],
    seconds: dict[tuple[str, str, float], float],
) -> list[str]:
    command = shlex.join(["python", "bench/lanes.py", *sys.argv[1:]])
    out = [
        f"- command: `{command}`",
        f"- taken at commit `{args.started[0]}` on {machine()}; load average at start "
        + args.started[1],
        "",
        "| system | context window | weights (content/context) | half | n | recall@5 | "
        "recall@10 | mrr@10 | ndcg@10 | ms/query |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (system, mode, weight), found in sorted(rows.items()):
        ms = 1000 * seconds[(system, mode, weight)] / max(len(found), 1)
        for half, members in HALVES.items():
            picked = [m for i, _, m in found if i in members]
            block = mean(picked)
            out.append(
                f"| {system} | {mode} | {1 - weight:.1f}/{weight:.1f} | {half} | {len(picked)} | "
                f"{block['recall@5']:.3f} | {block['recall@10']:.3f} | {block['mrr@10']:.3f} | "
                f"{block['ndcg@10']:.3f} | {ms:.1f} |"
            )
    out += ["", "Per category, report half 5-9, recall@10:", ""]
    out.append(
        "| system | context window | weights | "
        + " | ".join(f"cat {c} ({label})" for c, label in CATEGORIES.items())
        + " |"
    )
    out.append("|---|---|---|" + "---|" * len(CATEGORIES))
    for (system, mode, weight), found in sorted(rows.items()):
        cells = []
        for c in CATEGORIES:
            picked = [m for i, k, m in found if k == c and i in HALVES["report 5-9"]]
            cells.append(f"{mean(picked)['recall@10']:.3f}")
        out.append(
            f"| {system} | {mode} | {1 - weight:.1f}/{weight:.1f} | " + " | ".join(cells) + " |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--systems", default="bm25-entity,hybrid+e5")
    parser.add_argument(
        "--conversations",
        type=lambda raw: {int(x) for x in raw.split(",")},
        default=set(),
        help="only these conversations, e.g. 0,5 (embedding 600 windows each is slow on a CPU)",
    )
    args = parser.parse_args()
    configure_logging("warning")
    for line in asyncio.run(run(args)):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
