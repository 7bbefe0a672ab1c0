#!/usr/bin/env python3
"""Recall quality on LoCoMo: plain BM25Okapi against our lexical and hybrid recall, in one run.

Each LoCoMo conversation is one bank. Turn level: every dialogue turn is a memory
("Speaker: text", plus "[shares <caption>]" for a shared photo), the speaker is its entity and
the session's date-time its `created_at`. Observation level: the file's generated `observation`
facts are the memories instead. Every question of categories 1-4 (5 is adversarial, skipped) is
asked with `as_of` = the last session's time + 1 ms and limit 10; the relevant memories are the
question's `evidence` turns (observation level: the observations whose evidence overlaps them).

    .venv/bin/python bench/locomo.py [--data PATH] [--limit-conversations N] [--json OUT]

The data is read in place (CC BY-NC 4.0, see SOURCE.md beside it) and never copied here. Prints
markdown tables and exits 0. The `ours-hybrid+embed` column needs the local embedder
(`memory_worker.adapters.local_embedder.LocalEmbedder.default()` and
`MemoryService(embedder=...)`); when either is missing it is skipped with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import inspect
import json
import math
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rank_bm25 import BM25Okapi  # noqa: E402
from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.catalog import call  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

_DATA_PATH = ("shared", "datasets", "locomo", "locomo10.json")
# ../shared beside the repo; a git worktree one level deeper finds it further up.
DEFAULT_DATA = next(
    (p.joinpath(*_DATA_PATH) for p in ROOT.parents if p.joinpath(*_DATA_PATH).is_file()),
    ROOT.parent.joinpath(*_DATA_PATH),
)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Weights were chosen on conversations 0-4 (bench/tune_recall.py); 5-9 were never tuned on.
HALVES = {"tuning 0-4": range(5), "report 5-9": range(5, 10), "all 0-9": range(10)}
KS = (1, 5, 10)
LIMIT = 10
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/locomo.py"}
_DIA = re.compile(r"D:?(\d+):(\d+)")
_SESSION = re.compile(r"session_(\d+)")
_WORD = re.compile(r"\w+")


# --- the data --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    key: str  # dia_id for a turn, "O<session>:<speaker>:<n>" for an observation
    text: str
    speaker: str
    created_at: int
    evidence: frozenset[str]  # the dia_ids this doc stands for
    session: str = ""  # "session_<n>": the conversation session it was said in


def row(bank: str, memory_id: str, doc: Doc) -> dict[str, Any]:
    """`doc` as a `memory::import` record: a turn saved from its session, as a transcript import
    or a capture would save it (the session is what ranking reads conversational context from)."""
    return {
        "id": memory_id,
        "text": doc.text,
        "entities": [doc.speaker.lower()],
        "created_at": doc.created_at,
        "confidence": "extracted",
        "source": {"session_id": f"{bank}/{doc.session}"},
    }


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(slots=True)
class Conversation:
    sample_id: str
    as_of: int
    turns: list[Doc] = field(default_factory=list)
    observations: list[Doc] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def parse_when(raw: str) -> int:
    """LoCoMo's "1:56 pm on 8 May, 2023" as epoch ms (UTC; only the order and gaps matter)."""
    stamp = datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def dia_ids(raw: object) -> set[str]:
    """Evidence as a set of `D<s>:<t>`: lists, "D8:6; D9:17", "D9:1 D4:4" and "D:11:26" occur."""
    if isinstance(raw, list):
        return set().union(*(dia_ids(item) for item in raw)) if raw else set()
    return {f"D{s}:{t}" for s, t in _DIA.findall(str(raw))}


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares {caption}]"
    return text


def load(path: Path) -> list[Conversation]:
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)) and conv[k])
        when = {n: parse_when(conv[f"session_{n}_date_time"]) for n in sessions}
        item = Conversation(sample["sample_id"], max(when.values()) + 1)
        for n in sessions:
            for turn in conv[f"session_{n}"]:
                item.turns.append(
                    Doc(
                        turn["dia_id"],
                        turn_text(turn),
                        turn["speaker"],
                        when[n],
                        frozenset({turn["dia_id"]}),
                        f"session_{n}",
                    )
                )
        for key, per_speaker in sample.get("observation", {}).items():
            n = int(re.search(r"session_(\d+)", key).group(1))  # type: ignore[union-attr]
            if n not in when:
                continue
            for speaker, facts in per_speaker.items():
                for i, (fact, evidence) in enumerate(facts):
                    item.observations.append(
                        Doc(
                            f"O{n}:{speaker}:{i}",
                            str(fact),
                            speaker,
                            when[n],
                            frozenset(dia_ids(evidence)),
                            f"session_{n}",
                        )
                    )
        for qa in sample["qa"]:
            if qa.get("category") in CATEGORIES:
                item.questions.append(
                    Question(
                        str(qa["question"]), qa["category"], frozenset(dia_ids(qa["evidence"]))
                    )
                )
        out.append(item)
    return out


# --- metrics ---------------------------------------------------------------------------------


def score(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    top = list(ranked[:LIMIT])
    out = {f"recall@{k}": len(relevant.intersection(top[:k])) / len(relevant) for k in KS}
    first = next((i for i, key in enumerate(top) if key in relevant), None)
    out["mrr@10"] = 0.0 if first is None else 1.0 / (first + 1)
    dcg = sum(1.0 / math.log2(i + 2) for i, key in enumerate(top) if key in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), LIMIT)))
    out["ndcg@10"] = dcg / ideal
    return out


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {m: (sum(r[m] for r in rows) / len(rows) if rows else float("nan")) for m in METRICS}


# --- the systems -----------------------------------------------------------------------------


class FixedClock:
    """A clock that says what it is told: the bank's 'now' is the conversation's end."""

    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


class System:
    name: str
    note: str = ""

    async def index(self, bank: str, docs: list[Doc], as_of: int) -> None:
        raise NotImplementedError

    async def query(self, bank: str, question: str, as_of: int) -> list[str]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def split_tokens(text: str) -> list[str]:
    return text.lower().split()


def word_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class PlainBM25(System):
    """`rank_bm25.BM25Okapi` over the same texts, every doc of the bank ranked. `bm25okapi`
    tokenizes with `str.lower().split()` (punctuation stays glued: "mel!" != "mel");
    `bm25okapi-words` with `\\w+` runs of the lowercased text, no stopwords, no stemming."""

    def __init__(self, name: str, tokenize: Callable[[str], list[str]]) -> None:
        self.name = name
        self.tokenize = tokenize
        self._banks: dict[str, tuple[BM25Okapi, list[str]]] = {}

    async def index(self, bank: str, docs: list[Doc], as_of: int) -> None:
        corpus = [self.tokenize(d.text) for d in docs]
        self._banks[bank] = (BM25Okapi(corpus), [d.key for d in docs])

    async def query(self, bank: str, question: str, as_of: int) -> list[str]:
        model, keys = self._banks[bank]
        scores = model.get_scores(self.tokenize(question))
        order = sorted(range(len(keys)), key=lambda i: -scores[i])  # stable: ties keep doc order
        return [keys[i] for i in order[:LIMIT]]


def open_service(data: Path, embedder: Any = None) -> tuple[FixedClock, Store, MemoryService]:
    """A MemoryService on its own data dir and fixed clock, with `embedder` when one is given."""
    clock = FixedClock()
    store = Store.open(data, holder=HOLDER)
    kwargs: dict[str, Any] = {"clock": clock}
    if embedder is not None:
        kwargs["embedder"] = embedder
    service = MemoryService(store, **kwargs)
    # Measure the semantic arm, not the machine's load: a slow query embedding must not
    # quietly run lexical (query embedding time is reported on its own).
    service.query_embed_timeout_s = 120.0
    return clock, store, service


class Ours(System):
    """`memory::recall` through the catalog, on one MemoryService with its own temp data dir."""

    def __init__(self, name: str, mode: str | None, root: Path, embedder: Any = None) -> None:
        self.name = name
        self.mode = mode
        self.clock, self.store, self.service = open_service(root / name, embedder)
        self._keys: dict[str, dict[str, str]] = {}
        self.retrieval: set[str] = set()

    async def index(self, bank: str, docs: list[Doc], as_of: int) -> None:
        self.clock.now_ms = as_of
        ids = {_memory_id(d.key): d.key for d in docs}
        rows = [row(bank, _memory_id(d.key), d) for d in docs]
        await self.service.import_records(bank, rows)
        await _settle(self.service)
        self._keys[bank] = ids

    async def query(self, bank: str, question: str, as_of: int) -> list[str]:
        self.clock.now_ms = as_of
        payload: dict[str, Any] = {"bank": bank, "query": question, "limit": LIMIT, "as_of": as_of}
        if self.mode is not None:
            payload["mode"] = self.mode
        result = await call(self.service, "memory::recall", payload)
        self.retrieval.add(str(result.get("retrieval")))
        keys = self._keys[bank]
        return [keys[row["memory"]["id"]] for row in result["memories"]]

    async def close(self) -> None:
        await self.store.close()


class CentredArm(Ours):
    """The hybrid's own semantic arm alone: the bank's memories by `centered_cosine` at the
    default `Fusion.center` (what `mode=semantic`, plain cosine, is not), so the arms check
    compares the hybrid with the arm it actually fuses."""

    def __init__(self, name: str, root: Path, embedder: Any) -> None:
        super().__init__(name, "semantic", root, embedder)
        self.embedder = embedder

    async def query(self, bank: str, question: str, as_of: int) -> list[str]:
        from memory_worker.search.scoring import DEFAULT_FUSION

        vector = await self.embedder.embed_query(question)
        index = self.store.get(bank).index
        sims = index.centered_cosine(vector, DEFAULT_FUSION.center)
        ids = index.slot_ids()
        top = sorted(range(len(ids)), key=lambda i: -sims[i])[:LIMIT]
        keys = self._keys[bank]
        self.retrieval.add("centred-cosine")
        return [keys[ids[i]] for i in top if sims[i] > 0]


def _memory_id(key: str) -> str:
    return "fp" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


SETTLE_METHODS = ("settle", "embed_pending", "flush_embeddings", "wait_embedded", "wait_idle")


async def _settle(service: MemoryService) -> None:
    """Wait for background embedding an import may have started, when the service offers a
    no-argument way to (one of SETTLE_METHODS); otherwise recall sees what import left."""
    for name in SETTLE_METHODS:
        method = getattr(service, name, None)
        if callable(method) and not any(
            p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            for p in inspect.signature(method).parameters.values()
        ):
            result = method()
            if inspect.isawaitable(result):
                await result
            return


def local_embedders() -> tuple[list[tuple[str, Any]], list[str]]:
    """Every local model as (short name, cached embedder), and a note per model that failed."""
    from embed_cache import cached

    from memory_worker.adapters.embedders import ALIASES, LOCAL_MODELS, load_local

    out: list[tuple[str, Any]] = []
    notes: list[str] = []
    for model in LOCAL_MODELS:
        short = min((a for a, b in ALIASES.items() if b == model), key=len, default=model)
        try:
            out.append((short, cached(load_local(model))))
        except Exception as exc:  # a missing extra: report it, run the rest
            notes.append(f"{short} skipped: {type(exc).__name__}: {exc}")
    return out, notes


# --- the run ---------------------------------------------------------------------------------


LEVELS = ("turn", "observation")


async def run_level(
    level: str, convs: list[Conversation], systems: list[System]
) -> tuple[dict[str, Any], dict[str, float]]:
    per: dict[str, list[tuple[int, int, dict[str, float]]]] = {s.name: [] for s in systems}
    seconds = {s.name: 0.0 for s in systems}
    skipped = 0
    failed: dict[str, str] = {}
    for position, conv in enumerate(convs):
        docs = conv.turns if level == "turn" else conv.observations
        bank = f"{conv.sample_id}-{level[:3]}"
        for system in systems:
            if system.name not in failed:
                try:
                    await system.index(bank, docs, conv.as_of)
                except Exception as exc:
                    failed[system.name] = f"{type(exc).__name__}: {exc}"
        for q in conv.questions:
            relevant = {d.key for d in docs if d.evidence & q.evidence}
            if not relevant:
                skipped += 1
                continue
            for system in systems:
                if system.name in failed:
                    continue
                started = time.perf_counter()
                try:
                    ranked = await system.query(bank, q.text, conv.as_of)
                except Exception as exc:
                    failed[system.name] = f"{type(exc).__name__}: {exc}"
                    continue
                seconds[system.name] += time.perf_counter() - started
                per[system.name].append((position, q.category, score(ranked, relevant)))
    results: dict[str, Any] = {"skipped_questions": skipped, "failed": failed, "systems": {}}
    for system in systems:
        if system.name in failed:
            continue
        rows = per[system.name]
        results["systems"][system.name] = {
            "questions": len(rows),
            "ms_per_query": 1000 * seconds[system.name] / max(len(rows), 1),
            **_summary([(c, r) for _, c, r in rows]),
            "halves": {
                half: _summary([(c, r) for i, c, r in rows if i in members])
                for half, members in HALVES.items()
            },
        }
    return results, seconds


def _summary(rows: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    return {
        "overall": mean([r for _, r in rows]),
        "per_category": {
            str(c): {
                "questions": sum(1 for k, _ in rows if k == c),
                **mean([r for k, r in rows if k == c]),
            }
            for c in CATEGORIES
        },
    }


def table(rows: list[tuple[str, dict[str, Any]]], first: str, extra: Sequence[str] = ()) -> str:
    head = [first, "n", *METRICS, *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for label, r in rows:
        cells = [label, str(r["questions"]), *(f"{r[m]:.3f}" for m in METRICS)]
        cells += [f"{r[e]:.2f}" for e in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(level: str, results: dict[str, Any]) -> str:
    systems = results["systems"]
    out = [f"### {level} level, categories 1-4", ""]
    out.append(
        table(
            [
                (n, {**s["overall"], "questions": s["questions"], "ms/query": s["ms_per_query"]})
                for n, s in systems.items()
            ],
            "system",
            ("ms/query",),
        )
    )
    if results["skipped_questions"]:
        out.append(
            f"\n({results['skipped_questions']} questions skipped: no {level} carries "
            "their evidence)"
        )
    for name, why in results["failed"].items():
        out.append(f"\n({name} failed and is left out: {why})")
    for c, label in CATEGORIES.items():
        out += ["", f"#### {level} level, category {c} ({label})", ""]
        out.append(table([(n, s["per_category"][str(c)]) for n, s in systems.items()], "system"))
    out += ["", f"#### {level} level, recall@10 by half (weights tuned on 0-4 only)", ""]
    head = ["system", "half", "n", *(f"cat {c}" for c in CATEGORIES), "all"]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for half in HALVES:
        for name, system in systems.items():
            block = system["halves"][half]
            cells = [f"{block['per_category'][str(c)]['recall@10']:.3f}" for c in CATEGORIES]
            n = sum(block["per_category"][str(c)]["questions"] for c in CATEGORIES)
            out.append(
                f"| {name} | {half} | {n} | "
                + " | ".join(cells)
                + f" | {block['overall']['recall@10']:.3f} |"
            )
    out += ["", *arms_check(systems)]
    return "\n".join(out)


def arms_check(systems: dict[str, Any]) -> list[str]:
    """SPEC §4: every hybrid ≥ each of its arms − 0.01, per category and half (recall@10)."""
    lines = ["Hybrid against its own arms (recall@10, every category and half; bar: ≥ arm − 0.01):"]
    pairs = [("ours-bm25-entity", ["ours-lexical"])]
    pairs += [
        (name, ["ours-lexical", name.replace("hybrid", "semantic")])
        for name in systems
        if name.startswith("ours-hybrid+")
    ]
    pairs += [
        (name, [name.replace("ours-hybrid", "arm-centred")])
        for name in systems
        if name.startswith("ours-hybrid+") and name.replace("ours-hybrid", "arm-centred") in systems
    ]
    for hybrid, arms in pairs:
        if hybrid not in systems or any(arm not in systems for arm in arms):
            continue
        worst = None
        for half in HALVES:
            for c in [*map(str, CATEGORIES), "all"]:

                def value(name: str, half: str = half, c: str = c) -> float:
                    block = systems[name]["halves"][half]
                    return float(
                        (block["overall"] if c == "all" else block["per_category"][c])["recall@10"]
                    )

                margin = value(hybrid) - max(value(arm) for arm in arms)
                if worst is None or margin < worst[0]:
                    worst = (margin, half, c)
        assert worst is not None
        verdict = "ok" if worst[0] >= -0.01 - 1e-9 else "MISS"
        where = "all categories" if worst[2] == "all" else f"category {worst[2]}"
        lines.append(
            f"- {hybrid} vs {' / '.join(arms)}: smallest margin {worst[0]:+.3f} "
            f"({worst[1]}, {where}) {verdict}"
        )
    return lines


async def main_async(args: argparse.Namespace) -> int:
    data = args.data
    convs = load(data)
    if args.limit_conversations:
        convs = convs[: args.limit_conversations]
    embedders, notes = local_embedders()
    root = Path(tempfile.mkdtemp(prefix="locomo-bench-"))
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    systems: list[System] = [
        PlainBM25("bm25okapi", split_tokens),
        PlainBM25("bm25okapi-words", word_tokens),
    ]
    try:
        systems += [Ours("ours-lexical", "lexical", root), Ours("ours-bm25-entity", None, root)]
        for short, embedder in embedders:
            systems.append(Ours(f"ours-semantic+{short}", "semantic", root, embedder))
            if hasattr(embedder, "embed_query"):
                systems.append(CentredArm(f"arm-centred+{short}", root, embedder))
            systems.append(Ours(f"ours-hybrid+{short}", None, root, embedder))
            notes.append(f"{short} is the local embedder {embedder.model} (vectors cached on disk)")
        meta = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit(),
            "source": source_digest(),
            "command": shlex.join(["python", "bench/locomo.py", *sys.argv[1:]]),
            "machine": machine(),
            "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "data": str(data),
            "data_sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "conversations": len(convs),
            "notes": notes,
        }
        emit(f"- command: `{meta['command']}`")
        emit(
            f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
            f"`{meta['source']}`"
        )
        emit(f"- machine: {meta['machine']}; load average at start {meta['load_average']}")
        emit(
            f"- data: {data.name} sha256 `{meta['data_sha256'][:16]}…`, {len(convs)} "
            f"conversation(s), {sum(len(c.questions) for c in convs)} questions of categories "
            f"1-4, {sum(len(c.turns) for c in convs)} turns, "
            f"{sum(len(c.observations) for c in convs)} observations"
        )
        for note in notes:
            emit(f"- note: {note}")
        levels = {}
        for level in args.levels.split(","):
            results, _ = await run_level(level, convs, systems)
            levels[level] = results
            emit()
            emit(report(level, results))
        retrieval = {s.name: sorted(s.retrieval) for s in systems if isinstance(s, Ours)}
        emit(
            "\n`retrieval` reported by memory::recall: "
            + "; ".join(f"{n}: {', '.join(r) or '-'}" for n, r in retrieval.items())
        )
    finally:
        for s in systems:
            with contextlib.suppress(Exception):
                await s.close()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "retrieval": retrieval, "levels": levels}, indent=2) + "\n",
            encoding="utf-8",
        )
        print(f"\nwrote {args.json}")
    if args.write_doc:
        write_doc(args.write_doc, "locomo", "\n".join(lines))
        print(f"updated the locomo section of {args.write_doc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="path to locomo10.json (default: ../shared/datasets/locomo/)",
    )
    parser.add_argument(
        "--limit-conversations",
        type=int,
        default=0,
        metavar="N",
        help="only the first N conversations (a quick run)",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--levels", default=",".join(LEVELS), help="turn, observation or both (default both)"
    )
    add_write_doc_option(parser, "locomo")
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "locomo")
    configure_logging("warning")  # the store's info lines would bury the tables
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
