"""Can recall tell a restatement from a near fact by its vectors? (issue 13: duplicate pollution)

Duplicate pollution is a golden query whose top 10 holds both members of a `dup_of` pair (one
fact said twice: a paraphrase, or an English memory and its Portuguese translation). Recall could
fold the second copy out of its answer only if it could tell such a pair from a near fact (another
allergen, date or pet: a different fact that must stay). This measures the signals a detector
would use, on three sources:

1. the golden persona, with the e5 vectors the gates rank (`golden/vectors/e5.npz`): each
   labelled pair's cosine against the closest pair of the same kind (same language, or across
   languages) that is not one, and the hub-corrected cosine (CSLS, below);
2. `bench/fixtures/restatements/crosslingual.json`: hand-written English/Portuguese translations
   and near facts across the two languages, embedded by the live e5 (skipped with a note when it
   does not load), among the golden persona's memories as the rest of a bank: what each rule
   would fold at each threshold — translations, near facts, and any other cross-lingual pair;
3. `bench/fixtures/dedup/` (memory-consolidate's labelled pairs, same language): the same rules
   on same-language restatements and near facts;

and, on the golden set, what recall's figures would be if a perfect detector folded the
lower-ranked copy of every labelled pair (or of the translation pair only) out of the answer: the
ceiling of anything a detector could win.

CSLS (cross-domain similarity local scaling, Conneau et al. 2018, used to match translations
between embedding spaces): 2·cos(x, y) − r(x) − r(y), r the mean cosine of a text's `--k` nearest
neighbours in the other language, so a "hub" close to everything across the language gap scores
lower. Anchors: the numbers and names (capitalised past a sentence's first word) a translation
keeps as they are. Prints markdown and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from runinfo import commit, load_average, machine  # noqa: E402

from memory_worker.adapters.embedders import (  # noqa: E402
    DEFAULT_LOCAL_MODEL,
    EmbedderUnavailable,
    load_local,
)
from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app import catalog  # noqa: E402
from memory_worker.core.text import language, tokenize  # noqa: E402
from tests import recall_quality as rq  # noqa: E402

CROSSLINGUAL = ROOT / "bench" / "fixtures" / "restatements" / "crosslingual.json"
DEDUP = sorted(glob.glob(str(ROOT / "bench" / "fixtures" / "dedup" / "*.json")))
COSINES = (0.88, 0.90, 0.92, 0.94, 0.95, 0.96)
CSLS_CUTS = (0.0, 0.02, 0.04, 0.06, 0.08)
Floats = npt.NDArray[np.float64]
_WORD = re.compile(r"[\w+:.-]+")


def lang_of(text: str) -> str:
    return language(tokenize(text))


def anchors(text: str) -> frozenset[str]:
    """Numbers and names: what a translation keeps as it is (a sentence's first word is
    capitalised in any language, so it is not taken for a name)."""
    out: set[str] = set()
    for n, word in enumerate(_WORD.findall(text)):
        word = word.strip(".")
        if any(c.isdigit() for c in word) or (n > 0 and word[:1].isupper()):
            out.add(word.lower())
    return frozenset(out)


def unit(rows: Any) -> Floats:
    matrix = np.asarray(rows, dtype=np.float64)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def csls(cos: Floats, langs: Sequence[str], k: int) -> Floats:
    """Every pair's CSLS across languages (`k` nearest in the other language)."""
    other = np.array(langs)[None, :] != np.array(langs)[:, None]
    near = np.where(other, cos, -np.inf)
    r = np.sort(near, axis=1)[:, ::-1][:, :k].mean(axis=1)
    out: Floats = 2 * cos - r[:, None] - r[None, :]
    return out


# --- 1. the golden persona ---------------------------------------------------------------------


def golden_pairs(k: int) -> list[str]:
    golden = rq.load()
    recording = rq.recorded(DEFAULT_LOCAL_MODEL)
    live = [m for m in golden.memories if m.superseded_by is None and m.text in recording.texts]
    keys = [m.key for m in live]
    langs = [lang_of(m.text) for m in live]
    cos = unit([recording.texts[m.text] for m in live])
    cos = cos @ cos.T
    scaled = csls(cos, langs, k)
    dup = {frozenset((m.key, m.dup_of)) for m in live if m.dup_of is not None}
    rows: list[tuple[float, float, str, str, bool, bool]] = []
    for i in range(len(live)):
        for j in range(i + 1, len(live)):
            rows.append(
                (
                    float(cos[i, j]),
                    float(scaled[i, j]),
                    keys[i],
                    keys[j],
                    frozenset((keys[i], keys[j])) in dup,
                    langs[i] != langs[j],
                )
            )
    lines = [
        f"{len(live)} live memories with a recorded vector ({langs.count('pt')} Portuguese), "
        f"{len(dup)} labelled pairs; vectors: {recording.model}",
        "",
        "| pair | languages | cosine | pairs of its kind above it | closest pair of its kind "
        f"that is not one | CSLS k={k} (cross-lingual) | cross-lingual pairs above it by CSLS |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for c, s, a, b, is_dup, cross in sorted(rows, reverse=True):
        if not is_dup:
            continue
        kind = [r for r in rows if r[5] == cross]
        above = sum(1 for r in kind if r[0] > c)
        nearest = max((r for r in kind if not r[4]), key=lambda r: r[0])
        ls = f"{langs[keys.index(a)]}/{langs[keys.index(b)]}"
        csls_cells = "— | —"
        if cross:
            over = sum(1 for r in kind if r[1] > s)
            csls_cells = f"{s:.3f} | {over}"
        lines.append(
            f"| {a} / {b} | {ls} | {c:.3f} | {above} of {len(kind)} | "
            f"{nearest[2]} / {nearest[3]} {nearest[0]:.3f} | {csls_cells} |"
        )
    return lines


# --- 2. and 3. labelled pairs ------------------------------------------------------------------


def fold_table(
    title: str,
    pairs: Sequence[tuple[str, str, bool]],
    vectors: dict[str, Any],
    background: Sequence[str],
    k: int,
    cross_only: bool,
    known: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """What each rule folds of `pairs` (a, b, dup) at each cut; with `cross_only`, also how many
    other cross-lingual pairs of the whole pool (the pairs' texts and `background`, less the
    `known` restatements among them) it folds."""
    texts = list(dict.fromkeys([*(t for a, b, _ in pairs for t in (a, b)), *background]))
    at = {text: n for n, text in enumerate(texts)}
    langs = [lang_of(text) for text in texts]
    cos = unit([vectors[text] for text in texts])
    cos = cos @ cos.T
    scaled = csls(cos, langs, k) if cross_only else None
    labelled = {frozenset((at[a], at[b])) for a, b, _ in pairs}
    labelled |= {frozenset((at[a], at[b])) for a, b in known if a in at and b in at}
    others = [
        (i, j)
        for i in range(len(texts))
        for j in range(i + 1, len(texts))
        if langs[i] != langs[j] and frozenset((i, j)) not in labelled
    ]
    n_dup = sum(1 for *_, d in pairs if d)
    head = f"| rule | cut | restatements folded (of {n_dup}) | near facts folded (of "
    head += f"{len(pairs) - n_dup}) |"
    lines = [
        f"**{title}**",
        "",
        head + (" other cross-lingual pairs folded |" if cross_only else ""),
    ]
    lines.append("|---|---:|---:|---:|" + ("---:|" if cross_only else ""))

    def row(name: str, cut: float, score: Floats, anchored: bool) -> None:
        def folds(i: int, j: int) -> bool:
            if score[i, j] < cut:
                return False
            if not anchored:
                return True
            ai, aj = anchors(texts[i]), anchors(texts[j])
            return bool(ai) and ai == aj

        dup = sum(1 for a, b, d in pairs if d and folds(at[a], at[b]))
        near = sum(1 for a, b, d in pairs if not d and folds(at[a], at[b]))
        cells = f"| {name} | {cut:.2f} | {dup} | {near} |"
        if cross_only:
            cells += f" {sum(1 for i, j in others if folds(i, j))} |"
        lines.append(cells)

    for cut in COSINES:
        row("cosine", cut, cos, anchored=False)
    for cut in COSINES[1:5]:
        row("cosine + the same anchors", cut, cos, anchored=True)
    if scaled is not None:
        for cut in CSLS_CUTS:
            row(f"CSLS k={k}", cut, scaled, anchored=False)
    return lines


def crosslingual_pairs() -> list[tuple[str, str, bool]]:
    rows = json.loads(CROSSLINGUAL.read_text(encoding="utf-8"))["pairs"]
    return [(row["en"], row["pt"], bool(row["dup"])) for row in rows]


def dedup_pairs() -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    for path in DEDUP:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))["pairs"]
        out += [(row["a"], row["b"], bool(row["dup"])) for row in rows]
    return out


async def embedded(texts: Sequence[str]) -> dict[str, Any] | None:
    try:
        model = load_local(DEFAULT_LOCAL_MODEL)
    except EmbedderUnavailable:
        return None
    unique = list(dict.fromkeys(texts))
    return dict(zip(unique, await model.embed(unique), strict=True))


# --- 4. the ceiling: a perfect detector on the golden set --------------------------------------


async def ceiling() -> list[str]:
    golden = rq.load()
    facts = golden.facts()
    by_key = golden.by_key()
    members = {m.key for m in golden.memories if m.dup_of} | {
        m.dup_of for m in golden.memories if m.dup_of
    }
    cross = {
        key
        for key in members
        if any(
            facts[o] == facts[key] and lang_of(by_key[o].text) != lang_of(by_key[key].text)
            for o in members
        )
    }
    variants: dict[str, set[str]] = {
        "as served": set(),
        "a perfect detector folds every labelled pair": members,
        "a perfect detector folds the translation pair only": cross,
    }
    scores: dict[str, list[rq.QueryScore]] = {name: [] for name in variants}
    embedder = rq.gate_embedder(DEFAULT_LOCAL_MODEL)
    with tempfile.TemporaryDirectory(prefix="restatements-") as tmp:
        async with rq.open_service(Path(tmp), golden.as_of_ms, embedder) as service:
            ids = await rq.build_bank(service, golden)
            key_of = {memory_id: key for key, memory_id in ids.items()}
            for query in golden.queries:
                # Limit 30 so a fold refills the answer from below; its first 10 are exactly the
                # limit-10 answer (checked when this was written).
                result = await catalog.call(
                    service,
                    "memory::recall",
                    {"bank": rq.BANK, "query": query.query, "limit": 30, "mode": "hybrid"},
                )
                ranked = [key_of.get(hit["memory"]["id"]) for hit in result["memories"]]
                for name, fold in variants.items():
                    seen: set[str] = set()
                    kept: list[str | None] = []
                    for key in ranked:
                        if key in fold and facts[key] in seen:
                            continue  # the lower copy of a fact already in the answer
                        if key in fold:
                            seen.add(facts[key])
                        kept.append(key)
                    scores[name].append(rq.score_query(golden, query, kept[: rq.LIMIT]))
    lines = [
        "| hybrid+e5 | half | hit@1 | hit@3 | mrr@10 | recall@10 | traps | pollution |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in scores.items():
        for half in ("tuning", "report"):
            agg = rq._aggregate(s for s in rows if s.query.half == half)
            lines.append(
                f"| {name} | {half} | {agg['hit@1']:.3f} | {agg['hit@3']:.3f} | "
                f"{agg['mrr@10']:.3f} | {agg['recall@10']:.3f} | {agg['traps']} | "
                f"{agg['duplicate_pollution']} |"
            )
    return lines


async def main_async(args: argparse.Namespace) -> int:
    load = load_average()
    cross, same = crosslingual_pairs(), dedup_pairs()
    golden = rq.load()
    persona = [m.text for m in golden.memories if m.superseded_by is None]
    by_key = golden.by_key()
    known = [(m.text, by_key[m.dup_of].text) for m in golden.memories if m.dup_of is not None]
    vectors = await embedded([*(t for a, b, _ in [*cross, *same] for t in (a, b)), *persona])
    lines = [
        f"- command: `python bench/restatements.py{' --k ' + str(args.k) if args.k != 3 else ''}`",
        f"- commit `{commit()}`; machine: {machine()}; load average at start {load}",
        "",
        "**1. The golden persona** (the gates' recorded e5 vectors)",
        "",
        *golden_pairs(args.k),
        "",
    ]
    if vectors is None:
        lines += ["(the live e5 does not load: tables 2 and 3 skipped)", ""]
    else:
        lines += fold_table(
            f"2. Across languages: `{CROSSLINGUAL.relative_to(ROOT)}` (live e5), the golden "
            "persona as the rest of the bank (its own labelled pairs are not counted as other "
            "pairs)",
            cross,
            vectors,
            persona,
            args.k,
            cross_only=True,
            known=known,
        )
        lines += [""]
        lines += fold_table(
            "3. Same language: `bench/fixtures/dedup/` (live e5)",
            same,
            vectors,
            [],
            args.k,
            cross_only=False,
        )
        lines += [""]
    lines += ["**4. The ceiling on the golden set**", "", *await ceiling()]
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=3, help="CSLS neighbourhood (default 3)")
    args = parser.parse_args()
    configure_logging("warning")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
