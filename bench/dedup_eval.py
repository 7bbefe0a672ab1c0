"""Dedup eval of memory-consolidate's tiers on hand-labelled memory pairs.

`bench/fixtures/dedup/pairs.json` holds 209 pairs written by hand, in English and Portuguese: true
duplicates (punctuation variants, restatements, clause reorders) and pairs that must never merge
(a changed number or date, roles swapped, a negation, one changed word, one text saying more);
`heldout.json` (32), `heldout2.json` (28) and `heldout3.json` (24) were each written after a
change to the guards and never used to tune them (the report shows the sets apart;
docs/BENCHMARKS.md says what each held-out set found). Each pair is saved into a bank of its own
in an in-process memory worker (with the local embedder when the `embed` extra is installed), and
ONE dry-run pass of the real `Consolidator` (through the catalog, as every transport) says what
each tier would do with it:

- `exact` (writes): the same words after normalisation;
- `reorder` (report-only): the same words in another order;
- `semantic` (writes): cosine ≥ the threshold AND the guards agree;
- `semantic-guarded` (report-only): cosine ≥ the threshold, stopped by a guard.

Precision is over the pairs a tier fired on, recall over all duplicate pairs. The tiers that write
must have precision 1.00 (`tests/test_dedup_eval.py` holds them to it). The LLM tier needs a model
and is not measured here. Prints markdown and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.consolidate.clients import InProcessClient  # noqa: E402
from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app import catalog  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.consolidate.config import ConsolidateSettings  # noqa: E402
from memory_worker.consolidate.runner import Consolidator  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

__all__ = [
    "FIXTURES",
    "TIERS",
    "WRITING_TIERS",
    "Outcome",
    "evaluate",
    "load_pairs",
    "metrics",
    "path_cosines",
]

FIXTURES = (
    ROOT / "bench" / "fixtures" / "dedup" / "pairs.json",
    ROOT / "bench" / "fixtures" / "dedup" / "heldout.json",
    ROOT / "bench" / "fixtures" / "dedup" / "heldout2.json",
    ROOT / "bench" / "fixtures" / "dedup" / "heldout3.json",
)
DOC_KEY = "dedup"
TIERS = ("exact", "reorder", "semantic", "semantic-guarded")
WRITING_TIERS = ("exact", "semantic")
HOLDER = {"pid": 0, "kind": "bench", "command": "dedup_eval"}
START_MS = 1_793_491_200_000
BANDS = ((0.92, "≥ 0.92"), (0.85, "0.85–0.92"), (-1.0, "< 0.85"))


@dataclass(frozen=True)
class Pair:
    id: str
    category: str
    lang: str
    dup: bool
    a: str
    b: str
    set: str = "pairs"  # the fixture file it came from


@dataclass(frozen=True)
class Outcome:
    pair: Pair
    tier: str | None  # which tier fired, or None
    why: str | None
    cosine: float | None


def load_pairs(paths: Sequence[Path] = FIXTURES) -> list[Pair]:
    pairs = [
        Pair(**row, set=path.stem)
        for path in paths
        for row in json.loads(path.read_text(encoding="utf-8"))["pairs"]
    ]
    ids = Counter(p.id for p in pairs)
    if any(n > 1 for n in ids.values()):
        raise ValueError(f"duplicate pair ids: {[i for i, n in ids.items() if n > 1]}")
    return pairs


def _embedder() -> tuple[Any, str]:
    try:
        from memory_worker.adapters.embedders import load_local

        embedder = load_local()  # the default local model: what a fresh install serves
    except Exception as exc:  # a model that does not load: the semantic tiers are then skipped
        return None, f"no embedder ({type(exc).__name__}: {exc}); semantic tiers not measured"
    return embedder, str(getattr(embedder, "model", "local"))


def _cosine(u: Sequence[float], v: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(u, v, strict=True))
    nu = sum(x * x for x in u) ** 0.5
    nv = sum(y * y for y in v) ** 0.5
    return dot / (nu * nv) if nu and nv else 0.0


def path_cosines(embedder: Any, pairs: Sequence[Pair]) -> dict[str, float]:
    """Each pair's cosine as the semantic tier sees it: memory-consolidate recalls each text as a
    query (`memory::recall` mode semantic) against the other's stored vector, and keeps the
    larger of the two directions. A model with a query form (e5's `query: `) embeds the query
    side with it, so this is not the two stored vectors' cosine."""
    texts = [t for p in pairs for t in (p.a, p.b)]
    stored = embedder.embed_sync(texts)
    as_query = getattr(embedder, "embed_query_sync", None)
    queries = [as_query(t) for t in texts] if as_query is not None else stored
    out: dict[str, float] = {}
    for i, pair in enumerate(pairs):
        a, b = 2 * i, 2 * i + 1
        out[pair.id] = max(_cosine(queries[a], stored[b]), _cosine(queries[b], stored[a]))
    return out


async def evaluate(
    pairs: Sequence[Pair], data_dir: Path, *, embedder: Any = None, threshold: float = 0.92
) -> list[Outcome]:
    """One bank per pair, one dry-run pass over all of them; what fired for each pair."""
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=lambda: START_MS, embedder=embedder)
    try:
        bank_of: dict[str, Pair] = {}
        for index, pair in enumerate(pairs):
            bank = f"p{index:03d}"
            bank_of[bank] = pair
            ids = set()
            for text in (pair.a, pair.b):
                saved = await catalog.call(service, "memory::save", {"bank": bank, "text": text})
                ids.add(saved["memory"]["id"])
            if len(ids) != 2:
                raise ValueError(f"{pair.id}: both texts have one fingerprint (case/space only)")
        await service.settle()
        cosines = path_cosines(embedder, pairs) if embedder is not None else {}
        settings = ConsolidateSettings(semantic_threshold=threshold)
        report = await Consolidator(InProcessClient(service)).run(settings, dry_run=True)
    finally:
        await service.close()
        await store.close()
    outcomes: list[Outcome] = []
    for bank in report.banks:
        pair = bank_of[bank.bank]
        if bank.errors:
            raise RuntimeError(f"{pair.id}: {bank.errors}")
        tier, why = None, None
        for group in bank.groups:
            tier = (
                group.tier
                if group.action == "planned" or group.tier != "semantic"
                else ("semantic-guarded")
            )
            why = group.why
        outcomes.append(Outcome(pair, tier, why, cosines.get(pair.id)))
    return outcomes


def metrics(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float | int]]:
    dups = sum(o.pair.dup for o in outcomes)
    rows: dict[str, dict[str, float | int]] = {}
    groups: dict[str, tuple[str, ...]] = {
        **{tier: (tier,) for tier in TIERS},
        "all writing tiers": WRITING_TIERS,
        "any proposal": TIERS,
    }
    for name, tiers in groups.items():
        fired = [o for o in outcomes if o.tier in tiers]
        true = sum(o.pair.dup for o in fired)
        rows[name] = {
            "fired": len(fired),
            "true": true,
            "false": len(fired) - true,
            "precision": round(true / len(fired), 4) if fired else 1.0,
            "recall": round(true / dups, 4) if dups else 0.0,
        }
    return rows


def _table(outcomes: Sequence[Outcome], semantic: bool) -> list[str]:
    rows = metrics(outcomes)
    writes = {"exact": "yes", "semantic": "yes", "all writing tiers": "yes"}
    lines = [
        "| tier | writes | fired | true dups | false | precision | recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        skipped = not semantic and name.startswith("semantic")
        lines.append(
            f"| {name} | {writes.get(name, 'no')} | {row['fired']} | {row['true']} | "
            f"{row['false']} | {'n/a' if skipped else format(row['precision'], '.2f')} | "
            f"{'n/a' if skipped else format(row['recall'], '.2f')} |"
        )
    lines.append("| llm | yes (off by default) | — | — | — | not measured (needs a model) | — |")
    return lines


def _by_category(outcomes: Sequence[Outcome]) -> list[str]:
    categories = sorted(
        {o.pair.category for o in outcomes}, key=lambda c: (not c.startswith("dup"), c)
    )
    lines = [
        "| category | dup | n (en/pt) | " + " | ".join(TIERS) + " | nothing |",
        "|---|---|---|" + "---|" * (len(TIERS) + 1),
    ]
    for category in categories:
        rows = [o for o in outcomes if o.pair.category == category]
        langs = Counter(o.pair.lang for o in rows)
        fired = Counter(o.tier for o in rows)
        lines.append(
            f"| {category} | {'yes' if rows[0].pair.dup else 'no'} | {len(rows)} "
            f"({langs['en']}/{langs['pt']}) | "
            + " | ".join(str(fired[t]) for t in TIERS)
            + f" | {fired[None]} |"
        )
    return lines


def _by_set(outcomes: Sequence[Outcome]) -> list[str]:
    lines = [
        "| set | pairs | duplicates | merged by a writing tier | false merges | precision "
        "| recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in sorted({o.pair.set for o in outcomes}, key=lambda n: (n != "pairs", n)):
        row = metrics([o for o in outcomes if o.pair.set == name])["all writing tiers"]
        inside = [o for o in outcomes if o.pair.set == name]
        lines.append(
            f"| {name} | {len(inside)} | {sum(o.pair.dup for o in inside)} | {row['fired']} | "
            f"{row['false']} | {row['precision']:.2f} | {row['recall']:.2f} |"
        )
    return lines


def _bands(outcomes: Sequence[Outcome]) -> list[str]:
    lines = ["| cosine | true dups | not dups |", "|---|---|---|"]
    for floor, label in BANDS:
        upper = min((f for f, _ in BANDS if f > floor), default=2.0)
        inside = [o for o in outcomes if o.cosine is not None and floor <= o.cosine < upper]
        dup = sum(o.pair.dup for o in inside)
        lines.append(f"| {label} | {dup} | {len(inside) - dup} |")
    return lines


async def main_async(args: argparse.Namespace) -> int:
    pairs = load_pairs(args.pairs)
    embedder, note = (None, "--no-embedder") if args.no_embedder else _embedder()
    with tempfile.TemporaryDirectory(prefix="dedup-eval-") as tmp:
        outcomes = await evaluate(pairs, Path(tmp), embedder=embedder, threshold=args.threshold)
    lines: list[str] = []
    langs = Counter(p.lang for p in pairs)
    lines.append(f"- command: `{shlex.join(['python', 'bench/dedup_eval.py', *sys.argv[1:]])}`")
    lines.append(
        f"- taken: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} at commit `{commit()}`, "
        f"memory_worker source sha256 `{source_digest()}`"
    )
    lines.append(f"- machine: {machine()}; load average at start {load_average()}")
    lines.append(
        f"- data: `bench/fixtures/dedup/` (pairs, heldout, heldout2, heldout3), {len(pairs)} pairs "
        f"({langs['en']} English, "
        f"{langs['pt']} Portuguese), {sum(p.dup for p in pairs)} of them duplicates; semantic "
        f"threshold {args.threshold}; embedder: {note}"
    )
    lines += ["", "### precision and recall per tier", "", *_table(outcomes, embedder is not None)]
    lines += ["", "### the writing tiers on each set", "", *_by_set(outcomes)]
    lines += ["", "### what fired, per category", "", *_by_category(outcomes)]
    if embedder is not None:
        lines += ["", "### cosine of each pair (the embedder alone)", "", *_bands(outcomes)]
    false_writes = [o for o in outcomes if o.tier in WRITING_TIERS and not o.pair.dup]
    lines += ["", f"False merges by a writing tier: {len(false_writes)}"]
    lines += [f"- {o.pair.id}: {o.pair.a!r} / {o.pair.b!r}" for o in false_writes]
    text = "\n".join(lines)
    print(text)
    if args.json:
        out = {"metrics": metrics(outcomes), "outcomes": [
            {**asdict(o.pair), "tier": o.tier, "why": o.why, "cosine": o.cosine} for o in outcomes
        ]}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    if args.write_doc:
        write_doc(args.write_doc, DOC_KEY, text)
        print(f"updated the {DOC_KEY} section of {args.write_doc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairs", type=Path, nargs="+", default=list(FIXTURES), help="labelled pairs files"
    )
    parser.add_argument("--threshold", type=float, default=0.92, help="semantic_threshold")
    parser.add_argument("--no-embedder", action="store_true", help="deterministic tiers only")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every outcome")
    add_write_doc_option(parser, DOC_KEY)
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, DOC_KEY)
    configure_logging("warning")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
