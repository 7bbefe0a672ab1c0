"""The optional LLM tier: what it is asked, how its answer is read, how a promotion lands.

One `router::complete` per bank: the report-only groups it may judge (reorders, semantic groups
not every pair of which the embedder placed close enough) to confirm, and the memories restated
often enough to be promoted into the `learned` rule. The reply is read leniently (the first `{`
to the last `}`), but trusted narrowly: a merge is accepted only for a group index it was
offered, a promotion only for an offered id (once), and a reply that does not parse means the
tier is skipped with nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from memory_worker.consolidate.plan import Group, Row
from memory_worker.consolidate.text import normalize
from memory_worker.core.injection import LEARNED_RULE

__all__ = [
    "LEARNED_HEADER",
    "LEARNED_RULE",
    "MAX_GROUPS_OFFERED",
    "MAX_PROMOTIONS_OFFERED",
    "Verdict",
    "merge_learned",
    "parse_reply",
    "render_request",
    "system_prompt",
]

LEARNED_HEADER = (
    "# Learned\n"
    "Standing instructions captured from conversations. Edit or delete freely: extraction only "
    "appends lines it has not seen.\n"
)
MAX_GROUPS_OFFERED = 20  # one call per bank: a bounded prompt, the rest waits for the next pass
MAX_PROMOTIONS_OFFERED = 20
MIN_RULE_CHARS = 3
MAX_RULE_CHARS = 300
PROMPT = "judge-v1.md"


def system_prompt() -> str:
    return (
        resources.files("memory_worker.consolidate")
        .joinpath("prompts", PROMPT)
        .read_text(encoding="utf-8")
    )


def render_request(groups: Sequence[Group], candidates: Sequence[Row]) -> str:
    """The user message: the groups by index (survivor first) and the promotion candidates."""
    payload = {
        "groups": [
            {"index": i, "texts": [m.text for m in (g.winner, *g.losers)]}
            for i, g in enumerate(groups)
        ],
        "promotion_candidates": [
            {"id": row.id, "text": row.text, "times_observed": row.corroboration + 1}
            for row in candidates
        ],
    }
    return json.dumps(payload, ensure_ascii=False, indent=1)


@dataclass(frozen=True, slots=True)
class Verdict:
    merge_groups: tuple[int, ...]
    promotions: tuple[tuple[str, str], ...]  # (memory id, rule line)
    ignored: int  # answers about groups or ids that were not offered, or lines out of bounds


def _object(reply: str) -> dict[str, Any]:
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("the reply holds no JSON object")
    try:
        value = json.loads(reply[start : end + 1])
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the reply is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("the reply is not a JSON object")
    return value


def _list(value: dict[str, Any], key: str) -> list[Any]:
    raw = value.get(key, [])
    if not isinstance(raw, list):
        raise ValueError(f"{key} is not a list")
    return raw


def parse_reply(reply: str, offered_groups: int, offered_ids: set[str]) -> Verdict:
    """Raises ValueError when the reply's shape is wrong; unknown indexes and ids are dropped."""
    value = _object(reply)
    ignored = 0
    merges: list[int] = []
    for index in _list(value, "merge_groups"):
        valid = isinstance(index, int) and not isinstance(index, bool)
        if valid and 0 <= index < offered_groups and index not in merges:
            merges.append(index)
        else:
            ignored += 1
    promotions: list[tuple[str, str]] = []
    promoted: set[str] = set()
    for item in _list(value, "promotions"):
        memory_id = item.get("id") if isinstance(item, dict) else None
        rule = item.get("rule") if isinstance(item, dict) else None
        # A string first: an id given as a list or an object is unhashable, and looking it up
        # raised a TypeError that ended the whole pass, not this tier.
        if not isinstance(memory_id, str) or memory_id not in offered_ids:
            ignored += 1
            continue
        # One rule per offered memory, the first that reads: more items for one id (a looping
        # model, or one steered by the memory's own text) made as many lines of `learned`.
        if memory_id in promoted:
            ignored += 1
            continue
        if not isinstance(rule, str):
            ignored += 1
            continue
        line = " ".join(rule.split())
        if not MIN_RULE_CHARS <= len(line) <= MAX_RULE_CHARS:
            ignored += 1
            continue
        promoted.add(memory_id)
        promotions.append((memory_id, line))
    return Verdict(tuple(merges), tuple(promotions), ignored)


def merge_learned(existing: str, lines: Sequence[str]) -> tuple[str | None, int]:
    """The `learned` rule with the new lines appended as `- <line>`, and how many were new. A line
    already there up to case and punctuation (hand edits included) is not added twice."""
    seen = {normalize(line[2:]) for line in existing.splitlines() if line.startswith("- ")}
    new: list[str] = []
    for line in lines:
        key = normalize(line)
        if key and key not in seen:
            seen.add(key)
            new.append(f"- {line}")
    if not new:
        return None, 0
    base = existing.rstrip() + "\n" if existing.strip() else LEARNED_HEADER
    return base + "\n".join(new) + "\n", len(new)
