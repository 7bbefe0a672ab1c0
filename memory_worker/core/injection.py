"""The injected text: the system-prompt memory section and the recalled-memories message.

Pure and deterministic: the same bank, rules, memories and day give the same text, byte for byte.
The rules budget counts characters, and every cut lands on a character boundary; the memory
block's token budget counts UTF-8 bytes (as the lesson cards' does), about what each script costs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memory_worker.core.models import Hit, Memory, Rule, local_datetime
from memory_worker.core.text import collapse_whitespace, normalize

__all__ = [
    "AMBIENT_FLOOR",
    "BYTES_PER_TOKEN",
    "LEARNED_RULE",
    "RULES_UPDATE_TAG",
    "MemoryBlock",
    "RulesSection",
    "ambient_header",
    "apply_floor",
    "carried_memories",
    "carried_texts",
    "fit_section",
    "is_carried",
    "message_text",
    "render_memories",
    "render_rules_update",
    "render_section",
]

# A token is about four ASCII characters, one CJK character (3 bytes), under one emoji (4 bytes):
# bytes track that; characters would hand a Chinese or emoji-laden bank four times its budget.
BYTES_PER_TOKEN = 4
AMBIENT_FLOOR = 3  # identity questions and session openers recall little lexically
# The rule extraction appends standing instructions heard in chat to (C10). It comes after every
# rule a person wrote: only ever growing, in name order it used up the budget of the ones after
# it ("style", "tone"), which were then omitted from every session.
LEARNED_RULE = "learned"
_HOOK_LIMIT = "over this agent's hook context limit"  # what `fit_section` cuts at
MIN_TRUNCATED_RULE_CHARS = 200  # below this a cut rule is noise: omit it whole instead


def ambient_header(bank: str, rules_follow: bool = True, *, captured: bool = True) -> str:
    # Always present: without it models claim they "cannot remember" or "cannot save to memory".
    # "The rules below" only when some follow: pointing at nothing invites the model to invent.
    rules = " Treat the rules below as standing instructions." if rules_follow else ""
    if not captured:
        # No turn reaches an extraction model (extraction off, or no endpoint without an
        # engine): promising "saved without any tool call" lost every "remember this".
        return (
            f"\n\n# Memory — bank: {bank}\n"
            "You have persistent memory across conversations: the memories relevant to the "
            "current message are provided to you in a <memory> block when they exist. Nothing "
            "is captured automatically here: when the user asks you to remember something, save "
            "it with the memory save tool (memory::save) and say so; without that tool, tell the "
            f"user it was not saved.{rules}\n"
        )
    return (
        f"\n\n# Memory — bank: {bank}\n"
        "You have persistent memory across conversations. Durable facts, preferences and standing "
        "instructions are captured automatically after each turn, and the ones relevant to the "
        "current message are provided to you in a <memory> block when they exist. When the user "
        "asks you to remember something, acknowledge it: it is saved without any tool call."
        f"{rules}\n"
    )


@dataclass(frozen=True, slots=True)
class RulesSection:
    text: str
    rules: int
    truncated: bool


def render_section(
    bank: str,
    rules: list[Rule],
    max_rule_chars: int,
    *,
    captured: bool = True,
    limit: str | None = None,
) -> RulesSection:
    """Ambient header plus rules in name order, `learned` last, within `max_rule_chars` (content
    characters only).

    A rule that does not fit is cut with a visible marker when enough budget remains, else omitted
    with a marker; after the first cut every later rule is omitted. The header's "treat the rules
    below as standing instructions" is there only when some rule's text is. `limit`: what a cut
    rule's marker names as the limit it ran over (default: the `max_rule_chars` budget).
    """
    over = limit or (
        f"over the {max_rule_chars} char injection budget — trim it in the memory page"
    )
    parts: list[str] = []
    budget = max_rule_chars
    included = 0
    truncated = False
    for rule in sorted(rules, key=lambda r: (r.name == LEARNED_RULE, r.name)):
        content = rule.content.strip()
        if not content:
            continue
        if not truncated and len(content) <= budget:
            parts.append(f"\n## {rule.name}\n{content}\n")
            budget -= len(content)
            included += 1
        elif not truncated and budget > MIN_TRUNCATED_RULE_CHARS:
            parts.append(
                f"\n## {rule.name}\n{content[:budget].rstrip()}\n[rule truncated: {over}]\n"
            )
            budget = 0
            included += 1
            truncated = True
        else:
            parts.append(f"\n## {rule.name} [omitted: over the injection budget]\n")
            truncated = True
    header = ambient_header(bank, included > 0, captured=captured)
    return RulesSection(header + "".join(parts), included, truncated)


def fit_section(
    bank: str, rules: list[Rule], max_rule_chars: int, max_chars: int, *, captured: bool = True
) -> RulesSection:
    """`render_section` within `max_chars` characters in all (a coding agent's cap on a hook's
    context): the rules' budget is lowered by what the section runs over until it fits, so rules
    are cut and omitted with their markers as over `max_rule_chars`; a header and markers alone
    longer than that are cut at the cap, saying so."""
    section = render_section(bank, rules, max_rule_chars, captured=captured)
    budget = max_rule_chars
    while len(section.text) > max_chars and budget > 0:
        budget = max(0, budget - (len(section.text) - max_chars))
        # The cut is the cap's, not a budget of `budget` characters no setting holds.
        section = render_section(bank, rules, budget, captured=captured, limit=_HOOK_LIMIT)
    if len(section.text) <= max_chars:
        return section
    marker = f"\n[memory section cut: {_HOOK_LIMIT}]\n"
    text = section.text[: max(0, max_chars - len(marker))] + marker
    return RulesSection(text[:max_chars], section.rules, True)


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


RULES_UPDATE_TAG = '<memory update="rules">'


def render_rules_update(section: str) -> str:
    """The one appended message that tells a running session its rules changed; its system prompt
    stays byte-for-byte what it was (prompt caches and the append-only prefix survive). An empty
    `section` tells the session that no memory section applies any more (memory turned off, or
    its bank became unusable)."""
    if not section.strip():
        return (
            f"{RULES_UPDATE_TAG}\n"
            "No memory section applies to this conversation any more: disregard the memory section "
            "of the system prompt and any earlier memory update.\n</memory>"
        )
    return (
        f"{RULES_UPDATE_TAG}\n"
        "The memory rules for this conversation changed. This block replaces the memory section of "
        "the system prompt and any earlier memory update.\n"
        f"{section.strip()}\n</memory>"
    )


# Greedy: a block is one whole message, and a memory may itself mention `</memory>` (a note about
# this very system): the block ends at the message's last closing tag, not at the memory's.
_BLOCK = re.compile(r'<memory bank="[^"]*"[^>]*>(.*)</memory>', re.S)
_LINE = re.compile(r"^- \[\d{4}-\d{2}-\d{2}\] (.*)$", re.M)


def message_text(message: object) -> str:
    """The text of a transcript message: a plain string, or its text parts joined by newlines."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def carried_texts(messages: Iterable[object]) -> frozenset[str]:
    """Normalized texts of the memories that `<memory>` blocks already in the window carry, so a
    turn is not handed the same memory twice (a block compaction dropped no longer counts)."""
    out: set[str] = set()
    for message in messages:
        for block in _BLOCK.findall(message_text(message)):
            out.update(normalize(line) for line in _LINE.findall(block))
    return frozenset(out)


def carried_memories(memories: Iterable[Memory]) -> frozenset[str]:
    """`carried_texts` for memories known to be in the window already (a conversation's ledger
    says it was handed them), in the form `is_carried` compares."""
    return frozenset(normalize(collapse_whitespace(memory.text)) for memory in memories)


def is_carried(memory: Memory, carried: frozenset[str]) -> bool:
    """Whether the window already holds `memory` in one of our blocks (`carried_texts`)."""
    return bool(carried) and normalize(collapse_whitespace(memory.text)) in carried


def _day(ms: int) -> str:
    return local_datetime(ms).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    message: str | None
    included: list[Hit]


def render_memories(
    bank: str,
    hits: list[Hit],
    budget_tokens: int,
    now_ms: int,
    carried: frozenset[str] = frozenset(),
    max_chars: int | None = None,
) -> MemoryBlock:
    """The `<memory>` message: each memory with its last-updated day, within the token budget,
    minus the memories the window already carries (`carried_texts`); with `max_chars`, the whole
    message within that many characters too (a coding agent's cap on a hook's context).

    Packing skips a memory too large for what is left and keeps trying smaller ones after it.
    """
    budget = budget_tokens * BYTES_PER_TOKEN
    head = (
        f'<memory bank="{bank}" recalled="{_day(now_ms)}">\n'
        "Memories recalled automatically from earlier conversations, each with the day it was last "
        "updated. They may be outdated: verify anything surprising before relying on it.\n"
    )
    tail = "\n</memory>"
    room = None if max_chars is None else max_chars - len(head) - len(tail) + 1  # no first "\n"
    lines: list[str] = []
    included: list[Hit] = []
    for hit in hits:
        if is_carried(hit.memory, carried):
            continue
        text = collapse_whitespace(hit.memory.text)  # one memory, one line
        line = f"- [{_day(hit.memory.updated_at)}] {text}"
        size = len(line.encode("utf-8", "surrogatepass"))
        if size > budget or (room is not None and len(line) + 1 > room):
            continue
        budget -= size
        if room is not None:
            room -= len(line) + 1
        lines.append(line)
        included.append(hit)
    if not lines:
        return MemoryBlock(None, [])
    return MemoryBlock(head + "\n".join(lines) + tail, included)
