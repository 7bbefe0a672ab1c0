"""Lesson delivery: a tool call matched against a bank's resident lesson index, minus what the
conversation was already given, packed in the budget, recorded as delivered.

An id/revision reaches a conversation at most once (seed 002): a new revision of a lesson may be
delivered again, a new conversation gets it again. Delivered means recorded: a card the ledger
could not keep is not handed out (it stays eligible), and a ledger that cannot say what a
conversation has means nothing new is handed out — the same rule as a failed session lookup in the
hook. The same conversation and step asked again (a retried step) gets the same cards again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_worker.app.base import clean_short
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.ledger import CACHE_CONVERSATIONS, MAX_CONVERSATION_CHARS, ConversationLedger
from memory_worker.app.ports import KeyValue
from memory_worker.app.wire import LessonCard, LessonsMatchRequest, LessonsMatchResponse
from memory_worker.core.errors import InvalidInput, SiblingUnavailable
from memory_worker.core.lessons import lesson_key, render_lessons
from memory_worker.core.models import Memory
from memory_worker.storage.deliveries import MAX_KEYS_PER_CONVERSATION
from memory_worker.storage.logger import get_logger

__all__ = [
    "DELIVERIES_SCOPE",
    "Delivery",
    "KeyValueDeliveries",
    "LessonUseCases",
    "Matched",
    "ToolCall",
]

log = get_logger(__name__)

DELIVERIES_SCOPE = "memory_lessons"  # state-worker scope: conversation id → {lesson key: step}
MAX_TOOL_CHARS = 256


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as an agent issued it."""

    tool: str
    arguments: Mapping[str, Any]
    cwd: str | None = None
    workspace_root: str | None = None


@dataclass(frozen=True, slots=True)
class Matched:
    memory: Memory
    score: int
    anchor: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one match handed out, and why the rest was not."""

    bank: str
    cards: list[Matched]
    message: str | None
    matched: int
    already_delivered: int
    withheld: int
    paths: list[str] = field(default_factory=list)


class KeyValueDeliveries:
    """The `Deliveries` port on the state worker (engine mode), behind an LRU: a restart or a
    compaction of the conversation changes nothing it was given."""

    def __init__(self, kv: KeyValue, *, cache_size: int = CACHE_CONVERSATIONS) -> None:
        self._kv = kv
        self._cache: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._cache_size = cache_size

    def __repr__(self) -> str:
        return f"<KeyValueDeliveries cached={len(self._cache)}>"

    def _remember(self, conversation: str, delivered: dict[str, str]) -> None:
        self._cache[conversation] = delivered
        self._cache.move_to_end(conversation)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def delivered(self, conversation: str) -> dict[str, str]:
        cached = self._cache.get(conversation)
        if cached is not None:
            self._cache.move_to_end(conversation)
            return dict(cached)
        try:
            raw = await self._kv.get(DELIVERIES_SCOPE, conversation)
        except Exception as exc:
            raise SiblingUnavailable(f"state::get of lesson deliveries failed: {exc}") from exc
        if isinstance(raw, dict) and "value" in raw and "delivered" not in raw:
            raw = raw["value"]  # older state workers wrap the stored value
        found = raw.get("delivered") if isinstance(raw, dict) else None
        delivered = (
            {str(k): v for k, v in found.items() if isinstance(v, str)}
            if isinstance(found, dict)
            else {}
        )
        self._remember(conversation, delivered)
        return dict(delivered)

    async def record(self, conversation: str, delivered: Mapping[str, str]) -> None:
        kept = dict(delivered)
        if len(kept) > MAX_KEYS_PER_CONVERSATION:
            kept = dict(list(kept.items())[-MAX_KEYS_PER_CONVERSATION:])
        try:
            await self._kv.set(DELIVERIES_SCOPE, conversation, {"delivered": kept})
        except Exception as exc:
            raise SiblingUnavailable(f"state::set of lesson deliveries failed: {exc}") from exc
        self._remember(conversation, kept)

    async def forget(self, conversation: str) -> None:
        self._cache.pop(conversation, None)
        try:
            await self._kv.delete(DELIVERIES_SCOPE, conversation)
        except Exception as exc:
            log.warning(
                "lesson_deliveries_delete_failed", conversation=conversation, error=str(exc)
            )


class LessonUseCases(ConversationLedger):
    """`memory::lessons::match` and the deliveries behind it."""

    async def lessons_match(
        self, req: LessonsMatchRequest, caller: Caller = SYSTEM
    ) -> LessonsMatchResponse:
        from memory_worker.search.toolcall import is_absolute

        name = self._name(req.bank)
        if caller.via == "hook" and not self.settings.inject_lessons:
            # A coding agent's PreToolUse hook, with the cards turned off as for the harness's
            # turns (`inject_lessons`); an agent or a person asking still gets them.
            return LessonsMatchResponse(
                bank=name,
                cards=[],
                message=None,
                matched=0,
                already_delivered=0,
                withheld=0,
                paths=[],
            )
        conversation = clean_short(req.conversation, "conversation", MAX_CONVERSATION_CHARS)
        step = clean_short(req.step, "step", MAX_CONVERSATION_CHARS)
        tool = clean_short(req.tool, "tool", MAX_TOOL_CHARS) or ""
        root = req.workspace_root
        if root is not None and root.strip() and not is_absolute(root):
            # Absolute paths are read against it: one that is not absolute (`~/repo`, which only
            # the client could expand) was dropped unseen, and no absolute path matched.
            raise InvalidInput(f"workspace_root must be an absolute path, got {root!r}")
        call = ToolCall(tool, req.arguments, req.cwd, req.workspace_root)
        delivery = await self.deliver_lessons(
            name,
            [call],
            conversation=conversation,
            step=step,
            caller=caller,
            max_chars=req.max_chars,
        )
        return LessonsMatchResponse(
            bank=delivery.bank,
            cards=[
                LessonCard(
                    id=m.memory.id,
                    revision=m.memory.revision,
                    title=m.memory.title or "",
                    recommendation=m.memory.recommendation or "",
                    score=m.score,
                    matched=m.anchor,
                )
                for m in delivery.cards
            ],
            message=delivery.message,
            matched=delivery.matched,
            already_delivered=delivery.already_delivered,
            withheld=delivery.withheld,
            paths=delivery.paths,
        )

    def match_calls(
        self, name: str, calls: Sequence[ToolCall], caller: Caller = SYSTEM
    ) -> tuple[list[Matched], list[str]]:
        """Every card the calls match (each at its best score over all of them), score
        descending then id, and the root-relative paths read from the calls. In a bank
        partitioned by subject, a lesson about someone reaches a person's view of the whole bank
        only: a conversation's speaker is not known here, so it gets general lessons."""
        from memory_worker.search.lessons import explain
        from memory_worker.search.toolcall import signals

        bank = self._readable(name)
        best: dict[str, Matched] = {}
        paths: dict[str, None] = {}
        if bank is None or not len(bank.lessons):
            return [], []
        scoped, _ = self.scope_of(bank, None, caller)
        for call in calls:
            found = signals(
                call.tool, call.arguments, cwd=call.cwd, workspace_root=call.workspace_root
            )
            paths.update(dict.fromkeys(found.paths))
            for lesson_id, score in bank.lessons.match(found):
                memory = bank.get(lesson_id)
                if memory is None or memory.anchors is None or (scoped and memory.subject):
                    continue
                if lesson_id not in best or score > best[lesson_id].score:
                    best[lesson_id] = Matched(memory, score, explain(memory.anchors, found, score))
        ranked = sorted(best.values(), key=lambda m: (-m.score, m.memory.id))
        return ranked, list(paths)

    async def deliver_lessons(
        self,
        name: str,
        calls: Sequence[ToolCall],
        *,
        conversation: str | None = None,
        step: str | None = None,
        caller: Caller = SYSTEM,
        max_chars: int | None = None,
        for_step: bool = False,
    ) -> Delivery:
        """The cards `calls` earn in bank `name`, within `lesson_hook_tokens` (one tool call),
        or `lesson_injection_tokens` (`for_step`: a step of a turn, seed 002's two budgets), and
        `max_chars` characters; with a `conversation`, minus the ones it was given (except at
        this same `step`), recorded."""
        matched, paths = self.match_calls(name, calls, caller)
        settings = self.settings
        budget = settings.lesson_injection_tokens if for_step else settings.lesson_hook_tokens
        if conversation is None:
            block = render_lessons(name, [m.memory for m in matched], budget, max_chars)
            return self._delivery(name, matched, block.included, block.message, 0, paths)
        async with self._delivering(conversation):
            ledger = self.deliveries
            delivered = await ledger.delivered(conversation) if matched else {}
            fresh = [
                m
                for m in matched
                if (given := delivered.get(lesson_key(name, m.memory))) is None
                or (step is not None and given == step)
            ]
            block = render_lessons(name, [m.memory for m in fresh], budget, max_chars)
            new = {
                lesson_key(name, memory): step or ""
                for memory in block.included
                if lesson_key(name, memory) not in delivered
            }
            if new:
                await ledger.record(conversation, {**delivered, **new})
        return self._delivery(
            name, fresh, block.included, block.message, len(matched) - len(fresh), paths
        )

    @staticmethod
    def _delivery(
        name: str,
        eligible: list[Matched],
        included: list[Memory],
        message: str | None,
        already: int,
        paths: list[str],
    ) -> Delivery:
        kept = {memory.id for memory in included}
        cards = [m for m in eligible if m.memory.id in kept]
        return Delivery(
            bank=name,
            cards=cards,
            message=message,
            matched=len(eligible) + already,
            already_delivered=already,
            withheld=len(eligible) - len(cards),
            paths=paths,
        )
