"""The injected text: the system-prompt memory section and the recalled-memories message.

Pure and deterministic: the same bank, rules, memories and day give the same text, byte for byte.
Budgets count characters (never bytes), and every cut lands on a character boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .models import Memory, Rule
from .recall import Hit

__all__ = [
    "AMBIENT_FLOOR",
    "CHARS_PER_TOKEN",
    "MemoryBlock",
    "RulesSection",
    "ambient_header",
    "apply_floor",
    "render_memories",
    "render_section",
]

CHARS_PER_TOKEN = 4
AMBIENT_FLOOR = 3  # identity questions and session openers recall little lexically
MIN_TRUNCATED_RULE_CHARS = 200  # below this a cut rule is noise: omit it whole instead


def ambient_header(bank: str) -> str:
    # Always present: without it models claim they "cannot remember" or "cannot save to memory".
    return (
        f"\n\n# Memory — bank: {bank}\n"
        "You have persistent memory across conversations. Durable facts, preferences and standing "
        "instructions are captured automatically after each turn, and the ones relevant to the "
        "current message are provided to you in a <memory> block when they exist. When the user "
        "asks you to remember something, acknowledge it: it is saved without any tool call. Treat "
        "the rules below as standing instructions.\n"
    )


@dataclass(frozen=True, slots=True)
class RulesSection:
    text: str
    rules: int
    truncated: bool


def render_section(bank: str, rules: list[Rule], max_rule_chars: int) -> RulesSection:
    """Ambient header plus rules in name order within `max_rule_chars` (content characters only).

    A rule that does not fit is cut with a visible marker when enough budget remains, else omitted
    with a marker; after the first cut every later rule is omitted.
    """
    parts = [ambient_header(bank)]
    budget = max_rule_chars
    included = 0
    truncated = False
    for rule in sorted(rules, key=lambda r: r.name):
        content = rule.content.strip()
        if not content:
            continue
        if not truncated and len(content) <= budget:
            parts.append(f"\n## {rule.name}\n{content}\n")
            budget -= len(content)
            included += 1
        elif not truncated and budget > MIN_TRUNCATED_RULE_CHARS:
            parts.append(
                f"\n## {rule.name}\n{content[:budget].rstrip()}\n"
                f"[rule truncated: over the {max_rule_chars} char injection budget — trim it in "
                "the memory page]\n"
            )
            budget = 0
            included += 1
            truncated = True
        else:
            parts.append(f"\n## {rule.name} [omitted: over the injection budget]\n")
            truncated = True
    return RulesSection("".join(parts), included, truncated)


def apply_floor(hits: list[Hit], top: list[Memory], floor: int) -> list[Hit]:
    """Pad `hits` to `floor` with standing memories (score 0.0), skipping ones already present."""
    out = list(hits)
    seen = {hit.memory.id for hit in hits}
    for memory in top:
        if len(out) >= floor:
            break
        if memory.id not in seen:
            out.append(Hit(memory, 0.0))
            seen.add(memory.id)
    return out


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    message: str | None
    included: list[Hit]


def render_memories(bank: str, hits: list[Hit], budget_tokens: int, now_ms: int) -> MemoryBlock:
    """The `<memory>` message: each memory with its last-updated day, within the token budget.

    Packing skips a memory too large for what is left and keeps trying smaller ones after it.
    """
    budget = budget_tokens * CHARS_PER_TOKEN
    lines: list[str] = []
    included: list[Hit] = []
    for hit in hits:
        line = f"- [{_day(hit.memory.updated_at)}] {hit.memory.text}"
        if len(line) > budget:
            continue
        budget -= len(line)
        lines.append(line)
        included.append(hit)
    if not lines:
        return MemoryBlock(None, [])
    body = "\n".join(lines)
    message = (
        f'<memory bank="{bank}" recalled="{_day(now_ms)}">\n'
        "Memories recalled automatically from earlier conversations, each with the day it was last "
        "updated. They may be outdated: verify anything surprising before relying on it.\n"
        f"{body}\n</memory>"
    )
    return MemoryBlock(message, included)
