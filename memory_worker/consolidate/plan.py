"""The consolidation plan: which memories of one bank state the same fact, and what may be merged.

Pure and deterministic — the same rows always give the same plan, in the same order:
- **exact**: equal `normalize()` keys (case, spacing, sentence punctuation) — writable;
- **reorder**: the same words in another order — report-only (word order can flip meaning);
- **semantic**: pairs the embedder puts at or above the threshold — writable only when every pair
  of the group is that close AND `text.disagreement()` finds nothing load-bearing that differs,
  else report-only with the reason. One differing word is never a duplicate, in any tier.

The survivor of a group is pinned first, then the most corroborated, then the oldest (it carries
the provenance), then the smallest id. A pinned member that is not the survivor is skipped, never
retired.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from memory_worker.consolidate.text import REORDERED, disagreement, normalize, reorder_key
from memory_worker.core.subjects import subject_key

__all__ = [
    "MAX_SEMANTIC_GROUP",
    "Group",
    "Row",
    "Tier",
    "plan_exact",
    "plan_semantic",
    "reason",
    "survivor_order",
]

MAX_SEMANTIC_GROUP = 6  # a larger cluster of near-duplicates is a topic, not one fact: report it


class Tier(StrEnum):
    EXACT = "exact"
    REORDER = "reorder"
    SEMANTIC = "semantic"
    LLM = "llm"


@dataclass(frozen=True, slots=True)
class Row:
    """The fields of a live memory the plan reads (from `memory::list`)."""

    id: str
    text: str
    pinned: bool = False
    corroboration: int = 0
    created_at: int = 0
    revision: int = 0
    subject: str | None = None  # who it is about: memories about different people never merge
    # Its category (none counts as a fact): a fact merged into a `context` memory would expire
    # with the context's retention, a preference into a fact would stop being one.
    category: str = "fact"
    # A lesson's card (title, recommendation, anchors, evidence) as one string, None for any
    # other memory: a lesson merged into a plain memory or another card would stop reaching its
    # tool calls.
    card: str | None = None

    @classmethod
    def from_wire(cls, raw: Any) -> Row:
        """A `Memory` as `memory::list` returns it; ValueError for anything that is not one."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"not a memory object: {raw!r:.80}")
        memory_id, text = raw.get("id"), raw.get("text")
        if not isinstance(memory_id, str) or not memory_id or not isinstance(text, str):
            raise ValueError(f"memory without id or text: {raw!r:.80}")
        numbers = {}
        for field in ("corroboration", "created_at", "revision"):
            value = raw.get(field, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"memory {memory_id}: {field} is not a count: {value!r}")
            numbers[field] = value
        subject, category = raw.get("subject"), raw.get("category")
        card = None
        if category == "lesson":
            # Its evidence too: a merge does not carry the retired card's over to the survivor
            # (where it was learned would be told no more), and a re-save refuses another one.
            fields = [
                raw.get("title"),
                raw.get("recommendation"),
                raw.get("anchors"),
                raw.get("evidence"),
            ]
            card = json.dumps(fields, sort_keys=True, default=str)
        return cls(
            id=memory_id,
            text=text,
            pinned=raw.get("pinned") is True,
            subject=subject if isinstance(subject, str) else None,
            category=category if isinstance(category, str) and category else "fact",
            card=card,
            **numbers,
        )

    @property
    def kind(self) -> tuple[str | None, str, str | None]:
        """Who it is about, its category and which card it carries: only rows of one kind ever
        merge (a subject in any case is one person's)."""
        who = None if self.subject is None else subject_key(self.subject)
        return who, self.category, self.card


@dataclass(frozen=True, slots=True)
class Group:
    """Members that state one fact: the survivor, the members it would retire, the pinned members
    it may not retire, whether the tier may write, and why (the rule that fired or the guard that
    stopped it). `judgeable`: a report-only group the LLM tier may be asked about — the same
    words in another order (roles may swap) or a pair the embedder did not place close enough.
    What a guard found (a number, a date, a name or a negation differs, one text says more) is
    what the judge's prompt says never to merge: offered, it could only let a weak model retire
    a correction."""

    tier: Tier
    winner: Row
    losers: tuple[Row, ...]
    skipped_pinned: tuple[Row, ...]
    writable: bool
    why: str
    score: float | None = None  # the lowest cosine in a semantic group
    judgeable: bool = False

    @property
    def members(self) -> tuple[Row, ...]:
        return (self.winner, *self.losers, *self.skipped_pinned)


def survivor_order(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (not r.pinned, -r.corroboration, r.created_at, r.id))


def _group(
    tier: Tier,
    members: Iterable[Row],
    *,
    writable: bool,
    why: str,
    score: float | None = None,
    judgeable: bool = False,
) -> Group | None:
    ordered = survivor_order(members)
    if len(ordered) < 2:
        return None
    winner, rest = ordered[0], ordered[1:]
    losers = tuple(r for r in rest if not r.pinned)
    skipped = tuple(r for r in rest if r.pinned)
    return Group(tier, winner, losers, skipped, writable, why, score, judgeable)


def plan_exact(rows: Sequence[Row]) -> list[Group]:
    """Exact duplicates (writable) and reorders of what is left (report-only), in a stable order:
    by the survivor's id."""
    # The same words about two people are two facts (subjects), a fact is not a passing context
    # (categories), and a lesson's card is not a plain memory's: grouped per kind.
    by_key: dict[tuple[tuple[str | None, str, str | None], str], list[Row]] = defaultdict(list)
    for row in rows:
        by_key[(row.kind, normalize(row.text))].append(row)
    groups: list[Group] = []
    singles: list[Row] = []
    for members in by_key.values():
        if len(members) > 1:
            group = _group(
                Tier.EXACT, members, writable=True, why="the same words after normalisation"
            )
            if group is not None:
                groups.append(group)
        else:
            singles.extend(members)
    by_bag: dict[tuple[tuple[str | None, str, str | None], tuple[str, ...]], list[Row]] = (
        defaultdict(list)
    )
    for row in singles:
        by_bag[(row.kind, reorder_key(row.text))].append(row)
    for members in by_bag.values():
        if len(members) > 1:
            group = _group(
                Tier.REORDER,
                members,
                writable=False,
                why="the same words in another order (order can change the meaning)",
                judgeable=True,
            )
            if group is not None:
                groups.append(group)
    groups.sort(key=lambda g: (g.tier != Tier.EXACT, g.winner.id))
    return groups


class _Components:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, key: str) -> str:
        root = self.parent.setdefault(key, key)
        while root != self.parent[root]:
            root = self.parent[root]
        while self.parent[key] != root:
            self.parent[key], key = root, self.parent[key]
        return root

    def union(self, a: str, b: str) -> None:
        root_a, root_b = self.find(a), self.find(b)
        if root_a != root_b:
            self.parent[max(root_a, root_b)] = min(root_a, root_b)


def plan_semantic(
    rows: Sequence[Row], neighbours: Mapping[str, Mapping[str, float]], threshold: float
) -> list[Group]:
    """Near-duplicate groups from `neighbours` (row id → {other id: cosine}, both directions as
    recall answered them). Pairs below `threshold` are ignored; a group is writable only when every
    pair of members is at or above it and agrees on what carries the fact."""
    by_id = {row.id: row for row in rows}
    cosine: dict[frozenset[str], float] = {}
    for source, found in neighbours.items():
        for other, score in found.items():
            same_kind = (
                source in by_id and other in by_id and by_id[source].kind == by_id[other].kind
            )
            if source != other and same_kind and score >= threshold:
                pair = frozenset((source, other))
                cosine[pair] = max(score, cosine.get(pair, 0.0))
    components = _Components()
    for pair in cosine:
        components.union(*sorted(pair))
    clusters: dict[str, list[Row]] = defaultdict(list)
    for member in {m for pair in cosine for m in pair}:
        clusters[components.find(member)].append(by_id[member])
    groups: list[Group] = []
    for members in clusters.values():
        group = _semantic_group(members, cosine, threshold)
        if group is not None:
            groups.append(group)
    groups.sort(key=lambda g: g.winner.id)
    return groups


def _semantic_group(
    members: list[Row], cosine: Mapping[frozenset[str], float], threshold: float
) -> Group | None:
    ordered = sorted(members, key=lambda r: r.id)
    pairs = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :]]
    known = [cosine.get(frozenset((a.id, b.id))) for a, b in pairs]
    lowest = min((score for score in known if score is not None), default=None)
    why: str | None = None
    judgeable = False
    if len(members) > MAX_SEMANTIC_GROUP:
        why = f"{len(members)} memories are too many to be one fact"
    else:
        # Every pair's guards, not the first finding's: a reorder (or a missing cosine) in one
        # pair must not get the judge offered a group another pair of which states two facts.
        found = [f for a, b in pairs if (f := disagreement(a.text, b.text)) is not None]
        judgeable = all(f in REORDERED for f in found)
        if any(score is None for score in known):
            why = f"not every pair is at cosine ≥ {threshold:.2f}"
        elif found:
            why = found[0]
    if why is None:
        agreed = (
            f"every pair at cosine ≥ {threshold:.2f}; numbers, dates, names, family and tense "
            "words, negations and polarity agree"
        )
        return _group(Tier.SEMANTIC, members, writable=True, why=agreed, score=lowest)
    return _group(
        Tier.SEMANTIC, members, writable=False, why=why, score=lowest, judgeable=judgeable
    )


def reason(group: Group) -> str:
    """The `reason` a merge carries on its `memory::item-changed` events: the rule that fired."""
    detail = group.why if group.score is None else f"lowest cosine {group.score:.3f}; {group.why}"
    return f"memory-consolidate: {group.tier} duplicate ({detail})"
