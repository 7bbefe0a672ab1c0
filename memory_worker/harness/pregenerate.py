"""The harness `pre-generate` hook: rules into the system prompt once, memories once per turn.

Append-only by construction (prompt caches and the transcript stay valid):
- The first step of a session freezes the memory section into its system prompt; every later
  step sends that same section verbatim, whatever changed since (it is kept in `SessionState`, so
  a worker restart changes nothing either).
- When the section the session should have differs from the one it currently sees, ONE user
  message `<memory update="rules">` carrying the new section is appended. What the session
  currently sees is read from the window the step sends: its newest update block, else the frozen
  section. A retried or redelivered step sends the same window, so it gets the same update; later
  steps see the update in their window and get nothing more; a compaction that dropped the update
  gets it again.
- On a turn's first step (`step == 0`) up to `recall_limit` memories arrive as one appended
  `<memory bank=…>` message, minus those the window already carries.
- On its later steps, the tool calls the window shows since its newest user message are matched
  against the bank's lessons, and the cards this session was not given yet arrive as one appended
  `<memory lessons=…>` message (each lesson revision once per session, kept in the state worker;
  a retried step gets the same cards).

It never denies and never fails a turn: a failed session lookup keeps what the session already has
(nothing new), and the whole computation runs under `HOOK_BUDGET_S`, past which the same
keep-what-you-have reply is sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from memory_worker.app.embedding import query_deadline
from memory_worker.app.lessons import ToolCall
from memory_worker.app.seams import HookEnvelope
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.core.injection import (
    RULES_UPDATE_TAG,
    carried_texts,
    message_text,
    render_rules_update,
)
from memory_worker.core.lanes import goal_text, window_text
from memory_worker.harness.selection import BankResolver, Outcome, Resolution, parent_of
from memory_worker.harness.sessions import SessionRecord, SessionState
from memory_worker.search.lanes import LaneQuery
from memory_worker.storage.logger import get_logger

__all__ = ["HOOK_BUDGET_S", "PreGenerate", "TurnSituations", "step_calls", "user_message"]

log = get_logger(__name__)

HOOK_BUDGET_S = 2.5  # under the binding's 3 s timeout: our own fail-open comes first
# Of the budget, what is kept after the query embedding for the rest of the step (recall, the
# reply): a slow embedder after a slow session lookup leaves a lexical recall, not nothing.
AFTER_QUERY_S = 0.5
MEMORY_PREFIX = "<memory "  # our own injected blocks: never a query, never extracted
MAX_STEP_CALLS = 32  # the newest tool calls a step matches: a long turn costs no more than this
# Content blocks that carry a tool call: the harness's own, and the shapes providers pass through.
_CALL_BLOCKS = frozenset({"function_call", "tool_call", "tool_use", "toolCall"})
_RESULT_BLOCKS = frozenset({"tool_result", "function_result", "toolResult"})


def user_message(text: str, now_ms: int) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": now_ms}


def _query(messages: list[Any]) -> str:
    """The newest user message that is not one of our own `<memory …>` blocks."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = message_text(message).strip()
            if text and not text.startswith(MEMORY_PREFIX):
                return text
    return ""


WINDOW_MESSAGES = 12  # the recent window the context lane compares (cut to its length anyway)


def _lanes(messages: list[Any], query: str) -> LaneQuery:
    """The turn's situation for the association lanes: the recent window (user and assistant
    lines, never our own memory blocks) and the latest user message as its goal — written as
    extraction writes a memory's, so the two compare."""
    texts = []
    for message in messages[-WINDOW_MESSAGES:]:
        if isinstance(message, dict) and message.get("role") in ("user", "assistant"):
            text = message_text(message).strip()
            if text and not text.startswith(MEMORY_PREFIX):
                texts.append(text)
    return LaneQuery(context=window_text(texts), intention=goal_text(query))


class TurnSituations:
    """Each recent turn's situation as its hook last read it (the window and the person's latest
    message, `_lanes`), for an agent's own save in that turn: stored with it as extraction
    stores a fact's lanes (seed 004: conscious writes flow through the same pipeline,
    association capture included). The newest `size` turns, in RAM only: a save in a turn this
    process never hooked is stored without them, as before."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._turns: OrderedDict[tuple[str, str], tuple[LaneQuery, int]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<TurnSituations turns={len(self._turns)}>"

    def note(self, session_id: str, turn_id: str, lanes: LaneQuery, at_ms: int) -> None:
        """`lanes` as read at `at_ms`: a save about a person erased since stores neither."""
        # Also as the session's latest (turn ""): a call whose metadata names no turn is made
        # in the session's newest one.
        for key in ((session_id, turn_id), (session_id, "")):
            self._turns[key] = (lanes, at_ms)
            self._turns.move_to_end(key)
        while len(self._turns) > 2 * self._size:
            self._turns.popitem(last=False)

    def of(self, session_id: str | None, turn_id: str | None) -> tuple[LaneQuery, int] | None:
        """The turn's situation and when it was read (ms); with no `turn_id`, the session's
        newest turn's."""
        if not session_id:
            return None
        return self._turns.get((session_id, turn_id or ""))


def _call_of(block: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    name = block.get("function_id") or block.get("name")
    arguments = block.get("arguments", block.get("input"))
    if isinstance(arguments, str):  # some providers pass the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # past the decoder's nesting limit: not a call
            return None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    return name, arguments


def _results_only(content: Any) -> bool:
    """Whether a user message carries tool results and nothing else: Anthropic's shape (whose
    calls are `tool_use` blocks) returns each step's results that way, where the harness gives
    them their own role."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(block, dict) and block.get("type") in _RESULT_BLOCKS for block in content
        )
    )


def step_calls(messages: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the window shows since its newest user message (function results are their
    own role, or a user message of result blocks only, which is passed over; our own `<memory>`
    blocks are user messages, so calls a step already matched and appended lessons for are behind
    one): `(tool, arguments)`, oldest first, the newest `MAX_STEP_CALLS`."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            if _results_only(content):
                continue  # a step's results in a provider's user message, not a new question
            break
        if role != "assistant" or not isinstance(content, list):
            continue
        for block in reversed(content):
            if isinstance(block, dict) and block.get("type") in _CALL_BLOCKS:
                call = _call_of(block)
                if call is not None:
                    calls.append(call)
        if len(calls) >= MAX_STEP_CALLS:
            break
    return calls[:MAX_STEP_CALLS][::-1]


def _workspace(metadata: Any) -> tuple[str | None, str | None]:
    """`(cwd, workspace_root)` from the turn metadata, when the harness or the caller puts them
    there: what absolute paths in tool calls are relative to."""
    if not isinstance(metadata, dict):
        return None, None
    cwd, root = metadata.get("cwd"), metadata.get("workspace_root")
    return (cwd if isinstance(cwd, str) else None), (root if isinstance(root, str) else None)


def _shown_update(messages: list[Any]) -> str | None:
    """The newest rules update the window carries, verbatim (None when it carries none)."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue  # ours are user messages; an assistant quoting one changes nothing
        text = message_text(message).strip()
        if text.startswith(RULES_UPDATE_TAG):
            return text
    return None


def _update_due(section: str, record: SessionRecord, messages: list[Any]) -> bool:
    shown = _shown_update(messages)
    if shown is not None:
        return shown != render_rules_update(section).strip()
    return section.strip() != (record.system or "").strip()


@dataclass
class _Reply:
    system_prompt: str | None = None
    append: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"decision": "continue"}
        if self.system_prompt is not None or self.append:
            reply["mutations"] = {"append_messages": self.append}
            if self.system_prompt is not None:
                reply["mutations"]["system_prompt"] = self.system_prompt
        if self.annotations:
            reply["annotations"] = self.annotations
        return reply


class PreGenerate:
    def __init__(
        self,
        service: MemoryService,
        resolver: BankResolver,
        state: SessionState,
        *,
        budget_s: float = HOOK_BUDGET_S,
        situations: TurnSituations | None = None,
    ) -> None:
        """`situations`: where each turn's window and goal are kept for the agent's own saves
        in it (the engine worker's, shared with its bus calls); None keeps none."""
        self._service = service
        self._resolver = resolver
        self._state = state
        self._budget_s = budget_s
        self._situations = situations

    async def run(self, payload: object) -> dict[str, Any] | None:
        """The hook reply for one envelope: `None` (continue unchanged) or `{decision:"continue",
        mutations?, annotations?}`."""
        try:
            env = HookEnvelope.model_validate(payload if isinstance(payload, dict) else {})
        except ValidationError as exc:
            log.warning("hook_envelope_invalid", error=str(exc).splitlines()[0])
            return None
        session_id = env.session_id or ""
        if not session_id:
            return None
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._budget_s):
                with query_deadline(time.monotonic() + self._budget_s - AFTER_QUERY_S):
                    reply = await self._run(env, session_id)
        except TimeoutError:
            log.warning("hook_over_budget", session_id=session_id, budget_s=self._budget_s)
            reply = self._keep_told(env, session_id)
        except Exception:  # a turn never fails on memory: keep the prefix the session has
            log.exception("hook_failed", session_id=session_id)
            reply = self._keep_told(env, session_id)
        log.debug(
            "hook",
            session_id=session_id,
            turn_id=env.turn_id,
            step=env.step,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        return None if reply is None else reply.to_wire()

    def _keep_told(self, env: HookEnvelope, session_id: str) -> _Reply | None:
        """Nothing new, the frozen section kept. From RAM only: this path runs when something
        already failed or ran out of time, so it must not wait on anything."""
        record = self._state.cached(session_id)
        if record is None or not record.system:
            return None
        return _Reply(system_prompt=env.base_prompt + record.system)

    async def _record(self, session_id: str) -> tuple[SessionRecord | None, bool]:
        """(the record, whether it may be written back). When the state worker cannot say, the
        step works on a scratch record that is never persisted: writing it would replace the
        section the session really has."""
        try:
            return await self._state.get(session_id), True
        except SiblingUnavailable:
            return SessionRecord(), False

    async def _resolve(
        self, env: HookEnvelope, session_id: str
    ) -> tuple[SessionRecord | None, bool, Resolution]:
        """The session's record (and whether it may be persisted) and the turn's bank. A later
        step of a known turn keeps the bank fixed at its first step; a session this process has
        not seen reads its record from the state worker WHILE the session-manager is asked (two
        round trips in parallel)."""
        parent = parent_of(env.parent)
        record, persist = self._state.cached(session_id), True
        resolution: Resolution | None = None
        if record is None:
            fetched = asyncio.create_task(self._record(session_id))
            try:
                resolution = await self._resolver.resolve(session_id, env.metadata, parent)
            except BaseException:
                fetched.cancel()
                raise
            record, persist = await fetched
        known = record.turn_bank(env.turn_id) if record and env.turn_id else None
        if known is not None:
            return record, persist, self._resolver.recorded(known)
        if resolution is None:
            resolution = await self._resolver.resolve(session_id, env.metadata, parent)
        return record, persist, resolution

    async def _run(self, env: HookEnvelope, session_id: str) -> _Reply | None:
        settings = self._service.settings
        changed = False
        # The turn's situation, read once: kept for the agent's saves, and recall's lanes.
        situation: LaneQuery | None = None
        if self._situations is not None and env.turn_id:
            # Each step: the window as it stands when the model may call a memory tool next.
            situation = _lanes(env.messages, _query(env.messages))
            self._situations.note(session_id, env.turn_id, situation, self._service.clock())
        if not settings.inject_rules and not settings.inject_memories:
            record, _ = await self._record(session_id)
            if record is None or record.system is None:
                return None  # never told anything: nothing to withdraw
            return self._deliver(env, record, "", _Reply())
        record, persist, resolution = await self._resolve(env, session_id)
        if resolution.outcome is Outcome.LOOKUP_FAILED:
            log.warning(
                "hook_session_lookup_failed", session_id=session_id, error=resolution.source
            )
            if record is None and persist:
                # A session's first step (the state worker knows none), told nothing: its
                # prompt holds no section from now on, so a later step sends the rules as an
                # update message; frozen then, they changed the prefix of a running session.
                self._state.put(session_id, SessionRecord(system=""))
            return self._keep_told(env, session_id)
        if record is None:
            record, changed = SessionRecord(), True
        if env.turn_id:
            turn_bank = resolution.bank if resolution.has_memory else None
            changed |= record.remember_turn(env.turn_id, turn_bank)
        reply = _Reply()
        if not resolution.has_memory:
            log.info("hook_no_memory", session_id=session_id, reason=resolution.source)
            section = ""
        else:
            bank = resolution.bank
            assert bank is not None
            reply.annotations["memory_bank"] = bank
            section = await self._section_and_memories(env, bank, reply, situation)
            if resolution.exists and (env.step or 0) > 0 and self._service.settings.inject_lessons:
                await self._lessons(env, session_id, bank, reply)
        first_sight = record.system is None
        delivered = self._deliver(env, record, section, reply)
        if (changed or first_sight) and persist:
            self._state.put(session_id, record, urgent=first_sight)
        return delivered

    async def _section_and_memories(
        self, env: HookEnvelope, bank: str, reply: _Reply, situation: LaneQuery | None
    ) -> str:
        """What `service.injection` gives (the one function `memory::preview` shows, missing
        and deleted banks included), into the reply. `situation`: the turn's lanes when `_run`
        already read them (`_lanes` of the same messages and query)."""
        settings = self._service.settings
        first_step = (env.step or 0) == 0
        recall = first_step and settings.inject_memories
        query = _query(env.messages) if recall else ""
        subject = (
            await self._resolver.subject(env.session_id or "", env.metadata) if recall else None
        )
        plan = await self._service.injection(
            bank,
            query,
            # Scanning the window for our blocks only pays when memories are handed out.
            carried=carried_texts(env.messages) if recall else frozenset(),
            recall=recall,
            lanes=(situation if situation is not None else _lanes(env.messages, query))
            if recall
            else None,
            subject=subject,
            count_access=True,
        )
        if subject is not None:
            reply.annotations["memory_subject"] = subject
        if plan.section:
            reply.annotations["memory_rules"] = plan.rules
        if plan.rules_truncated:
            reply.annotations["memory_rules_truncated"] = True
            log.warning("rules_truncated", bank=bank, max_rule_chars=settings.max_rule_chars)
        if plan.message is not None:
            reply.append.append(user_message(plan.message, self._service.clock()))
            reply.annotations["memory_recalled"] = len(plan.memories)
            reply.annotations["memory_ids"] = [hit.memory.id for hit in plan.memories]
        if plan.retrieval != "none" and first_step:
            reply.annotations["memory_retrieval"] = plan.retrieval
        return plan.section

    async def _lessons(self, env: HookEnvelope, session_id: str, bank: str, reply: _Reply) -> None:
        """The lesson cards this step's tool calls earn, as one appended message. Fail-open: a
        ledger that cannot answer, or anything else, adds nothing (the cards stay eligible)."""
        found = step_calls(env.messages)
        if not found:
            return
        cwd, root = _workspace(env.metadata)
        calls = [ToolCall(tool, arguments, cwd, root) for tool, arguments in found]
        # What a retry of this step is known by. Without a turn id every turn numbers its steps
        # from 0 again: step 1 of a later turn was this one's retry, and got its cards again. A
        # retry sends the same window; a later turn's is longer.
        step = (
            f"{env.turn_id}:{env.step or 0}"
            if env.turn_id
            else f":{env.step or 0}:{len(env.messages)}"
        )
        try:
            delivery = await self._service.deliver_lessons(
                bank, calls, conversation=session_id, step=step, for_step=True
            )
        except SiblingUnavailable as exc:
            log.warning("hook_lessons_unavailable", session_id=session_id, error=str(exc))
            return
        except Exception:
            log.exception("hook_lessons_failed", session_id=session_id)
            return
        if delivery.message is not None:
            reply.append.append(user_message(delivery.message, self._service.clock()))
            reply.annotations["memory_lessons"] = [m.memory.id for m in delivery.cards]

    def _deliver(
        self, env: HookEnvelope, record: SessionRecord, section: str, reply: _Reply
    ) -> _Reply | None:
        """Freeze the section at the session's first sight; afterwards send the frozen one and, when
        the session should see something else, one update message (before any memories)."""
        if record.system is None:
            record.system = section
        elif _update_due(section, record, env.messages):
            update = user_message(render_rules_update(section), self._service.clock())
            reply.append.insert(0, update)
            reply.annotations["memory_rules_updated"] = True
        if record.system:
            reply.system_prompt = env.base_prompt + record.system
        if reply.system_prompt is None and not reply.append and not reply.annotations:
            return None
        return reply
