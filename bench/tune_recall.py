#!/usr/bin/env python3
"""Choose the fusion weights honestly: a grid over `search.scoring.Fusion` on LoCoMo's tuning half.

Loads every LoCoMo conversation into a real bank once (turn level, as `bench/locomo.py` does),
with vectors from the disk cache (`bench/embed_cache.py`), then ranks every question with
`search.ranking.rank()` directly under each candidate `Fusion` — no service round trip, so a
grid of dozens of settings takes minutes. By default only the TUNING half (conversations 0-4) is
scored; `--report` adds the report half (5-9) and the full set for the settings given, which is
what BENCHMARKS quotes after the choice was made.

    .venv/bin/python bench/tune_recall.py --embedder e5 --grid 'semantic=0.5,1,2' [--report]

`--as-requests` asks each list question as a request ("Can you tell me what activities does
Melanie partake in?"), as agents often ask. `--bm25 '1.2:0.75,1.2:0.2'` repeats everything
for each BM25 (k1, b), patched into `search.index` (module constants, read at query time) with
every cached norm and pool dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from embed_cache import cached  # noqa: E402
from locomo import CATEGORIES, DEFAULT_DATA, HOLDER, Conversation, load, row, score  # noqa: E402

from memory_worker.adapters.embedders import load_local  # noqa: E402
from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.ports import QueryEmbedder  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.text import answer_type  # noqa: E402
from memory_worker.search import index as bm25  # noqa: E402
from memory_worker.search.ranking import RecallMode, RecallQuery, candidates, order  # noqa: E402
from memory_worker.search.scoring import Fusion, FusionMethod  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

TUNING = range(5)
REPORT = range(5, 10)
HALF_LIFE_DAYS = 60.0


@dataclasses.dataclass
class Loaded:
    conv: Conversation
    bank: Any
    keys: dict[str, str]  # memory id -> dia_id
    vectors: list[tuple[float, ...] | None]  # per question
    duplicate_cosine: float  # the embedder's paraphrase threshold, as the service passes it
    # Per question, its answer type embedded alone (`core.text.answer_type`), as recall does.
    types: list[tuple[float, ...] | None] = dataclasses.field(default_factory=list)


async def _query_vectors(
    embedder: Any, texts: list[str]
) -> tuple[list[tuple[float, ...] | None], list[tuple[float, ...] | None]]:
    """Each question's vector and its answer type's (None: no embedder, or no list question),
    embedded as the service embeds a query."""

    async def one(text: str) -> tuple[float, ...]:
        if isinstance(embedder, QueryEmbedder):
            return tuple(await embedder.embed_query(text))
        return tuple((await embedder.embed([text]))[0])

    vectors: list[tuple[float, ...] | None] = []
    types: list[tuple[float, ...] | None] = []
    for text in texts:
        kind = answer_type(text)
        vectors.append(None if embedder is None else await one(text))
        types.append(None if embedder is None or kind is None else await one(kind))
    return vectors, types


async def _load(convs: list[Conversation], embedder: Any, root: Path) -> list[Loaded]:
    store = Store.open(root, holder=HOLDER)
    service = MemoryService(store, embedder=embedder)
    out = []
    for conv in convs:
        name = conv.sample_id.lower()
        rows = [row(name, f"fp{i:016x}", d) for i, d in enumerate(conv.turns)]
        await service.import_records(name, rows)
        await service.settle()
        vectors, types = await _query_vectors(embedder, [q.text for q in conv.questions])
        keys = {f"fp{i:016x}": d.key for i, d in enumerate(conv.turns)}
        duplicate = float(getattr(getattr(embedder, "inner", None), "duplicate_cosine", 0.75))
        out.append(Loaded(conv, store.get(name), keys, vectors, duplicate, types))
    return out


_POOLS: dict[tuple[Any, ...], Any] = {}


def evaluate(
    loaded: list[Loaded],
    indices: range | list[int],
    mode: RecallMode,
    fusion: Fusion,
    semantic: bool,
    threshold: float = 0.0,
) -> dict[str, float]:
    """recall@10 per category over `indices`. Each question's candidate pool (lexical hits,
    cosines, columns) does not depend on the weights, so it is computed once per question and
    reused by every setting of the grid; the ordering is `ranking.order`, as `rank` runs it."""
    per: dict[int, list[float]] = {c: [] for c in CATEGORIES}
    for i in indices:
        item = loaded[i]
        for n, (q, vector, kind) in enumerate(
            zip(item.conv.questions, item.vectors, item.types, strict=True)
        ):
            relevant = {d.key for d in item.conv.turns if d.evidence & q.evidence}
            if not relevant:
                continue
            query = RecallQuery(
                text=q.text,
                limit=10,
                now_ms=item.conv.as_of,
                half_life_days=HALF_LIFE_DAYS,
                mode=mode,
                as_of=item.conv.as_of,
                vector=vector if semantic else None,
                type_vector=kind if semantic else None,
                fusion=fusion,
                duplicate_cosine=item.duplicate_cosine,
                threshold=threshold,
            )
            # Everything `candidates` reads of the weights (the rest only orders the pool).
            key = (
                i, n, str(mode), semantic, fusion.semantic_reference, fusion.center,
                fusion.entity_center, fusion.question_form, fusion.answer_type,
                fusion.expand_docs, fusion.expand_terms, fusion.expand_weight, fusion.expand_vector,
                threshold,
            )  # fmt: skip
            pool = _POOLS.get(key)
            if pool is None:
                pool = _POOLS[key] = candidates(item.bank.memories, item.bank.index, query)
            hits = order(pool, item.bank.index, query)
            ranked = [item.keys[h.memory.id] for h in hits]
            per[q.category].append(score(ranked, relevant)["recall@10"])
    out = {str(c): sum(v) / len(v) for c, v in per.items() if v}
    every = [x for v in per.values() for x in v]
    out["all"] = sum(every) / len(every)
    return out


@dataclasses.dataclass
class GoldenLoaded:
    golden: Any
    bank: Any
    key_of: dict[str, str]  # memory id -> persona key
    vectors: list[tuple[float, ...] | None]
    duplicate_cosine: float
    types: list[tuple[float, ...] | None]  # per query, its answer type's vector (`_load`)


async def _load_golden(embedder: Any, root: Path) -> GoldenLoaded:
    from tests import recall_quality as rq

    golden = rq.load()
    async with rq.open_service(root, golden.as_of_ms, embedder) as service:
        ids = await rq.build_bank(service, golden)
        vectors, types = await _query_vectors(embedder, [q.query for q in golden.queries])
        bank = service.store.get(rq.BANK)
        duplicate = float(getattr(getattr(embedder, "inner", None), "duplicate_cosine", 0.75))
        key_of = {v: k for k, v in ids.items()}
        return GoldenLoaded(golden, bank, key_of, vectors, duplicate, types)


def evaluate_golden(
    item: GoldenLoaded, half: str, mode: RecallMode, fusion: Fusion, semantic: bool
) -> dict[str, Any]:
    """hit@3 per language, MRR, traps and pollution over the golden queries of `half`."""
    from tests import recall_quality as rq

    scores = []
    for q, vector, kind in zip(item.golden.queries, item.vectors, item.types, strict=True):
        if half != "all" and q.half != half:
            continue
        query = RecallQuery(
            text=q.query,
            limit=10,
            now_ms=item.golden.as_of_ms,
            half_life_days=HALF_LIFE_DAYS,
            mode=mode,
            vector=vector if semantic else None,
            type_vector=kind if semantic else None,
            fusion=fusion,
            duplicate_cosine=item.duplicate_cosine,
        )
        hits = order(candidates(item.bank.memories, item.bank.index, query), item.bank.index, query)
        ranked = [item.key_of.get(h.memory.id) for h in hits]
        scores.append(rq.score_query(item.golden, q, ranked))
    out: dict[str, Any] = {}
    for lang in ("en", "pt"):
        rows = [s.metrics() for s in scores if s.query.lang == lang]
        out[lang] = sum(r["hit@3"] for r in rows) / max(len(rows), 1)
    rows = [s.metrics() for s in scores]
    out["all"] = sum(r["hit@3"] for r in rows) / max(len(rows), 1)
    out["mrr"] = sum(r["mrr@10"] for r in rows) / max(len(rows), 1)
    out["traps"] = [s.query.id for s in scores if s.trapped]
    out["polluted"] = [s.query.id for s in scores if s.polluted]
    out["missed"] = [s.query.id for s in scores if not s.metrics()["hit@3"]]
    return out


def _golden_row(label: str, r: dict[str, Any]) -> str:
    return (
        f"| {label} | {r['en']:.3f} | {r['pt']:.3f} | {r['all']:.3f} | {r['mrr']:.3f} | "
        f"{','.join(r['traps']) or '-'} | {','.join(r['polluted']) or '-'} | "
        f"{','.join(r['missed']) or '-'} |"
    )


async def golden_main(args: argparse.Namespace, embedder: Any, root: Path) -> None:
    item = await _load_golden(embedder, root / "golden")
    halves = ["tuning", *(("report", "all") if args.report else ())]
    print("| system | hit@3 en | hit@3 pt | hit@3 | mrr | traps | polluted | missed@3 |")
    print("|---|---|---|---|---|---|---|---|")
    for setting, half in itertools.product(_bm25_settings(args.bm25), halves):
        half_label = _use_bm25(setting, [item.bank]) + half
        lexical = evaluate_golden(item, half, RecallMode.LEXICAL, Fusion(), False)
        print(_golden_row(f"{half_label} lexical", lexical))
        if embedder is not None:
            sem = evaluate_golden(item, half, RecallMode.SEMANTIC, Fusion(), True)
            print(_golden_row(f"{half_label} semantic", sem))
        for overrides in _grid(args.grid):
            fusion = dataclasses.replace(Fusion(), **overrides)
            label = ",".join(f"{k}={v}" for k, v in overrides.items()) or "default"
            r = evaluate_golden(item, half, RecallMode.HYBRID, fusion, False)
            print(_golden_row(f"{half_label} no-embed {label}", r))
            if embedder is not None:
                r = evaluate_golden(item, half, RecallMode.HYBRID, fusion, True)
                print(_golden_row(f"{half_label} +{args.embedder} {label}", r))
            sys.stdout.flush()


def _bm25_settings(spec: str) -> list[tuple[float, float] | None]:
    """Each `k1:b` of `--bm25`, or [None]: the index's own constants."""
    if not spec:
        return [None]
    return [(float(k1), float(b)) for k1, b in (part.split(":") for part in spec.split(","))]


def _use_bm25(setting: tuple[float, float] | None, banks: list[Any]) -> str:
    """Patch the BM25 constants in, drop what was computed with the old ones; a label prefix."""
    if setting is None:
        return ""
    bm25.BM25_K1, bm25.BM25_B = setting
    for bank in banks:
        bank.index._norm_key = None  # the per-slot length norms are cached by corpus version
    _POOLS.clear()
    return f"k1={setting[0]:g},b={setting[1]:g} "


def _grid(spec: str) -> list[dict[str, Any]]:
    if not spec:
        return [{}]
    axes = []
    for part in spec.split(";"):
        name, _, values = part.partition("=")
        field = next(f for f in dataclasses.fields(Fusion) if f.name == name.strip())
        kind = FusionMethod if field.name == "method" else type(field.default)
        if kind is bool:  # bool("0") is True: a switch is spelled 0/1 or false/true
            parsed = [v.strip().lower() in ("1", "true", "yes") for v in values.split(",")]
        else:
            parsed = [kind(v) for v in values.split(",")]
        axes.append([(field.name, v) for v in parsed])
    return [dict(combo) for combo in itertools.product(*axes)]


def _row(label: str, result: dict[str, float]) -> str:
    cells = [f"{result.get(k, float('nan')):.3f}" for k in ("1", "2", "3", "4", "all")]
    return f"| {label} | " + " | ".join(cells) + " |"


async def main_async(args: argparse.Namespace) -> int:
    convs = load(args.data)
    embedder = cached(load_local(args.embedder)) if args.embedder != "none" else None
    with tempfile.TemporaryDirectory(prefix="tune-recall-") as tmp:
        if args.golden:
            await golden_main(args, embedder, Path(tmp))
            return 0
        if args.as_requests:
            convs = [_as_requests(conv) for conv in convs]
        # Without --report only the tuning half is even loaded (embedded): nothing else is seen.
        loaded = await _load(convs if args.report else convs[: len(TUNING)], embedder, Path(tmp))
        halves: list[tuple[str, range | list[int]]] = [("tune 0-4", TUNING)]
        if args.report:
            halves += [("report 5-9", REPORT), ("all 0-9", range(len(loaded)))]
        print("| system | cat 1 | cat 2 | cat 3 | cat 4 | all |\n|---|---|---|---|---|---|")
        banks = [item.bank for item in loaded]
        for setting, (name, indices) in itertools.product(_bm25_settings(args.bm25), halves):
            half = _use_bm25(setting, banks) + name
            print(
                _row(
                    f"{half} lexical",
                    evaluate(loaded, indices, RecallMode.LEXICAL, Fusion(), False),
                )
            )
            if embedder is not None:
                sem = evaluate(loaded, indices, RecallMode.SEMANTIC, Fusion(), True)
                print(_row(f"{half} semantic", sem))
            for overrides in _grid(args.grid):
                fusion = dataclasses.replace(Fusion(), **overrides)
                label = ",".join(f"{k}={v}" for k, v in overrides.items()) or "default"
                if args.threshold:
                    label += f" threshold={args.threshold:g}"
                if not args.embedded_only:
                    no_embed = evaluate(
                        loaded, indices, RecallMode.HYBRID, fusion, False, args.threshold
                    )
                    print(_row(f"{half} hybrid-no-embed {label}", no_embed))
                if embedder is not None:
                    with_embed = evaluate(
                        loaded, indices, RecallMode.HYBRID, fusion, True, args.threshold
                    )
                    print(_row(f"{half} hybrid+{args.embedder} {label}", with_embed))
                sys.stdout.flush()
    return 0


def _as_requests(conv: Conversation) -> Conversation:
    """`conv` with each list question (`core.text.answer_type`) asked as an agent often asks
    it, as a request: "Can you tell me what activities does Melanie partake in?"."""
    asked = [
        dataclasses.replace(q, text=f"Can you tell me {q.text[0].lower()}{q.text[1:]}")
        if answer_type(q.text) is not None
        else q
        for q in conv.questions
    ]
    return dataclasses.replace(conv, questions=asked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--embedder", default="e5", help="e5, minilm or none")
    parser.add_argument("--grid", default="", help="'field=v1,v2;field2=v3' over Fusion")
    parser.add_argument("--report", action="store_true", help="also score the report half")
    parser.add_argument("--golden", action="store_true", help="the golden set instead of LoCoMo")
    parser.add_argument("--bm25", default="", help="'k1:b,k1:b': BM25 constants to compare")
    parser.add_argument(
        "--threshold", type=float, default=0.0, help="a bank's relevance_threshold (LoCoMo rows)"
    )
    parser.add_argument(
        "--embedded-only", action="store_true", help="skip the hybrid-without-embedder rows"
    )
    parser.add_argument(
        "--as-requests",
        action="store_true",
        help="ask LoCoMo's list questions as requests ('Can you tell me what …')",
    )
    args = parser.parse_args()
    configure_logging("warning")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
