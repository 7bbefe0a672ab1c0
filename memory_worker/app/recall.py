"""Recall and injection: the scorer the hook uses; `memory::preview` runs the hook's own code."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memory_worker.app.access import AccessLevel
from memory_worker.app.base import clean_short, clean_subject
from memory_worker.app.caller import SYSTEM, Caller, CallerKind
from memory_worker.app.ledger import MAX_CONVERSATION_CHARS, ConversationLedger
from memory_worker.app.retention import RetentionUseCases
from memory_worker.app.wire import (
    PreviewMemory,
    PreviewRequest,
    PreviewResponse,
    RecallRequest,
    RecallResponse,
)
from memory_worker.core import transitions
from memory_worker.core.injection import (
    AMBIENT_FLOOR,
    RulesSection,
    apply_floor,
    carried_memories,
    fit_section,
    is_carried,
    render_memories,
    render_section,
)
from memory_worker.core.lanes import goal_text, window_text
from memory_worker.core.lessons import LESSON, is_lesson, lesson_key, prepare_category
from memory_worker.core.models import Hit, Memory, Rule
from memory_worker.core.retention import past_ttl
from memory_worker.core.subjects import in_scope
from memory_worker.search.modes import RecallMode
from memory_worker.storage.bank import Bank
from memory_worker.storage.logger import get_logger

# The ranking (numpy's columns) is imported where a recall runs: every process that opens a data
# dir imports this module (the service is one class), and a one-shot save never ranks.
if TYPE_CHECKING:
    from memory_worker.search.lanes import LaneQuery
    from memory_worker.search.ranking import RecallQuery
    from memory_worker.search.scoring import LaneWeights

__all__ = ["Injection", "RecallUseCases"]

log = get_logger(__name__)

RECALL_MAX_LIMIT = 100
# Standing memories the ambient floor may reach past its own count, for the ones the window
# already carries (a session's first turns hand the top ones; later identity questions get more).
FLOOR_LOOKAHEAD = 6


def _retrieval(mode: RecallMode, embedded: bool) -> str:
    """The name of the retrieval that actually ran: degradation is explicit, never silent."""
    if mode is RecallMode.LEXICAL:
        return "lexical"
    if mode is RecallMode.SEMANTIC:
        return "semantic" if embedded else "semantic-unavailable"
    return "bm25-entity-semantic" if embedded else "bm25-entity"


@dataclass(frozen=True, slots=True)
class Injection:
    """What a turn on `query` would be given: the hook and `memory::preview` both build this."""

    bank: str
    section: str
    rules: int
    rules_truncated: bool
    memories: list[Hit]
    message: str | None
    retrieval: str

    @classmethod
    def only_section(cls, bank: str, section: str = "") -> Injection:
        """No memories; `section` "" means no memory section at all."""
        return cls(bank, section, 0, False, [], None, "none")


class RecallUseCases(RetentionUseCases, ConversationLedger):
    """Recall use cases."""

    def _duplicate_cosine(self, vector: tuple[float, ...] | None) -> float:
        """How close two memories embed when one restates the other: each model has its own band
        (an embedder may say, as `duplicate_cosine`; else MiniLM's measured threshold)."""
        from memory_worker.search.ranking import DUPLICATE_COSINE

        if vector is None:
            return DUPLICATE_COSINE  # unused: without a query vector nothing is compared
        return float(getattr(self.embedder, "duplicate_cosine", DUPLICATE_COSINE))

    def _rank(self, bank: Bank | None, query: RecallQuery) -> list[Hit]:
        """`query` ranked over `bank`, under its retention: what is past its TTL is left out,
        and the bank reaped soon after when something was (`RetentionUseCases._reap_soon`)."""
        from memory_worker.search.ranking import candidates, order

        if bank is None:
            return []
        query = self._under_retention(bank, query)
        pool = candidates(bank.memories, bank.index, query, bank.lanes)
        if pool.expired:
            self._reap_soon(bank)
        return order(pool, bank.index, query)

    def _under_retention(self, bank: Bank, query: RecallQuery) -> RecallQuery:
        """`query` with the bank's category TTLs, unless it names its own."""
        retention = self.bank_settings(bank).retention
        if retention and query.retention is None:
            query = dataclasses.replace(query, retention=retention)
        return query

    async def _with_history_vectors(self, bank: Bank, query: RecallQuery) -> RecallQuery:
        """A semantic history view (`include_superseded`, `as_of`) with the vectors of the
        records it ranks beside the live index (`history_records`); without its query vector
        (`semantic-unavailable`, nothing ranked) when they cannot be embedded: the live vectors
        alone answered another question than the one asked."""
        from memory_worker.search.ranking import history_records

        records = list(
            history_records(bank.memories, bank.index, self._under_retention(bank, query))
        )
        vectors = await self._history_vectors(records)
        if vectors is None:
            return dataclasses.replace(query, vector=None)
        return dataclasses.replace(query, history_vectors=vectors)

    def _lane_policy(self, bank: Bank | None) -> tuple[LaneWeights, float]:
        """The bank's `association_weights` and `relevance_threshold` (its bank.yaml over the
        configured defaults)."""
        from memory_worker.search.scoring import LaneWeights

        chosen = self.bank_settings(bank) if bank is not None else self.settings.bank_defaults()
        weights = chosen.association_weights
        return (
            LaneWeights(weights.content, weights.context, weights.intention),
            chosen.relevance_threshold,
        )

    def rank_in(self, bank: Bank, query: RecallQuery) -> list[Hit]:
        """The recall scorer over one loaded bank (extraction shows the model what it holds)."""
        return self._rank(bank, query)

    async def recall(self, req: RecallRequest, caller: Caller = SYSTEM) -> RecallResponse:
        from memory_worker.search.lanes import LaneQuery
        from memory_worker.search.ranking import RecallQuery

        name = self._name(req.bank)
        bank = self._readable(name)
        limit = req.limit if req.limit is not None else self.settings.recall_limit
        vector = None
        scoped, subject = self.scope_of(bank, req.subject, caller)
        category = prepare_category(req.category)
        kind = None
        if req.mode is RecallMode.HYBRID:
            vector, kind = await self._question_vectors(req.query, bank)
        elif req.mode is not RecallMode.LEXICAL:
            vector = await self._query_vector(req.query, bank)
        weights, threshold = self._lane_policy(bank)
        if caller.automatic and req.mode is not RecallMode.HYBRID:
            # Consolidation's neighbour search (seed 000: the raw arms are for callers that fuse
            # arms themselves) holds pairs to its own `semantic_threshold`; the bank's threshold
            # is what recall shows agents and the hook, and at 0.95 it hid every near-duplicate.
            threshold = 0.0
        lanes = LaneQuery(context=req.context, intention=req.intention)
        if vector is not None and req.mode is RecallMode.HYBRID:
            lanes = await self._lane_vectors(lanes, bank, weights)
        as_it_was = None
        if bank is not None and req.as_of is not None:
            as_it_was = await _as_it_was(bank, req.as_of)
        query = RecallQuery(
            text=req.query,
            limit=min(limit, RECALL_MAX_LIMIT),
            now_ms=self.clock(),
            half_life_days=self.settings.decay_half_life_days,
            mode=req.mode,
            tag=transitions.prepare_label(req.tag),
            include_superseded=bool(req.include_superseded),
            as_of=req.as_of,
            scoped=scoped,
            subject=subject,
            category=category,
            vector=vector,
            type_vector=kind,
            duplicate_cosine=self._duplicate_cosine(vector),
            lanes=lanes,
            lane_weights=weights,
            threshold=threshold,
            as_it_was=as_it_was,
        )
        history = query.include_superseded or query.as_of is not None
        if bank is not None and vector is not None and history and req.mode is RecallMode.SEMANTIC:
            query = await self._with_history_vectors(bank, query)
            vector = query.vector
        hits = self._rank(bank, query)
        if bank is not None and self._counts_access(bank, caller):
            # A look at history is no use of what is retired: a superseded record counted
            # looked still in use.
            bank.access.bump((h.memory.id for h in hits if h.memory.live), query.now_ms)
        # Validated in one call, the hits as plain dicts: pydantic builds each `ScoredMemory` in
        # its core, not through a Python `__init__` apiece (half the cost of building them).
        return RecallResponse.model_validate(
            {
                "bank": name,
                "memories": [{"memory": h.memory, "score": h.score} for h in hits],
                "retrieval": _retrieval(req.mode, vector is not None),
            }
        )

    def _counts_access(self, bank: Bank, caller: Caller) -> bool:
        """Whether a recall counts as a use of what it returns (eviction's order): a person's
        does, an agent's only where it may write — at `read` its looks must change nothing, and
        counts decide what a full bank evicts next —, the worker's own looks (extraction,
        consolidation, internal calls) never."""
        if caller.kind is CallerKind.AGENT:
            level = AccessLevel(self.bank_settings(bank).conscious_access)
            return level is AccessLevel.READ_WRITE
        return caller.kind is CallerKind.HUMAN

    async def injection(
        self,
        name: str,
        query: str,
        *,
        carried: frozenset[str] = frozenset(),
        recall: bool = True,
        lanes: LaneQuery | None = None,
        subject: str | None = None,
        count_access: bool = False,
        max_chars: int | None = None,
    ) -> Injection:
        """The rules section and recalled-memory message a turn on `query` gets: the hook sends
        exactly this, and `memory::preview` shows it. `carried`: memory texts the window already
        holds (not handed twice); `recall=False` for a step that only needs the section;
        `lanes`: the turn's window and goal (the hook's), for the association lanes.
        `subject`: who is speaking (with the bank's subject_scoping on, general memories and theirs
        only, the ambient floor included; None: general memories only); `count_access`: a real
        turn (not a preview) counts as an access of what it was handed. `max_chars`: the section
        and the message each within that many characters (a coding agent's hook cap).

        A bank that does not exist gets the ambient header alone while extraction is on (the
        turn's extraction creates it) and nothing while it is off; a deleted bank other than the
        default gets nothing (it is never brought back); with both `inject_*` off, nothing."""
        from memory_worker.search.lanes import LaneQuery
        from memory_worker.search.ranking import RecallQuery

        settings = self.settings
        if not settings.inject_rules and not settings.inject_memories:
            return Injection.only_section(name)
        await self.ready_bank(name)
        bank = self.store.find(name)
        if bank is None:
            if self.was_deleted(name) or not settings.extraction_enabled:
                return Injection.only_section(name)
            return Injection.only_section(name, self._section(name, [], 0, max_chars).text)
        rules = bank.rules() if bank is not None and settings.inject_rules else []
        section = self._section(name, rules, settings.max_rule_chars, max_chars)
        if not settings.inject_memories or not recall:
            return Injection(name, section.text, section.rules, section.truncated, [], None, "none")
        scoped, subject = self.scope_of(bank, subject, SYSTEM)
        vector, kind = await self._question_vectors(query, bank)
        now_ms = self.clock()
        # Lessons reach a turn through the tool calls they are anchored to, once per
        # conversation (`memory::lessons::match`), never as ambient recall: rank past them.
        lessons = len(bank.lessons) if bank is not None else 0
        weights, threshold = self._lane_policy(bank)
        if lanes is not None and vector is not None:
            lanes = await self._lane_vectors(lanes, bank, weights)
        # Ranked past what the window already carries: those make way for the next memories
        # instead of taking a turn's places (`recall_limit` counts what the turn is handed).
        carried_ahead = min(len(carried), RECALL_MAX_LIMIT)
        hits = self._rank(
            bank,
            RecallQuery(
                text=query,
                limit=settings.recall_limit + lessons + carried_ahead,
                now_ms=now_ms,
                half_life_days=settings.decay_half_life_days,
                scoped=scoped,
                subject=subject,
                vector=vector,
                type_vector=kind,
                duplicate_cosine=self._duplicate_cosine(vector),
                lanes=lanes if lanes is not None else LaneQuery(),
                lane_weights=weights,
                threshold=threshold,
            ),
        )
        hits = [h for h in hits if not is_lesson(h.memory) and not is_carried(h.memory, carried)]
        hits = hits[: settings.recall_limit]
        floor = min(AMBIENT_FLOOR, settings.recall_limit)
        if len(hits) < floor:
            # A fixed lookahead, not one per window: the bank keeps one standing list cached.
            standing = self._standing(bank, floor + lessons + FLOOR_LOOKAHEAD, scoped, subject)
            fresh = [m for m in standing if not is_carried(m, carried)]
            hits = apply_floor(hits, fresh, floor)
        block = render_memories(
            name, hits, settings.recall_budget_tokens, now_ms, carried, max_chars=max_chars
        )
        if count_access:
            bank.access.bump((hit.memory.id for hit in block.included), now_ms)
        return Injection(
            name,
            section.text,
            section.rules,
            section.truncated,
            block.included,
            block.message,
            _retrieval(RecallMode.HYBRID, vector is not None),
        )

    def _section(
        self, name: str, rules: list[Rule], max_rule_chars: int, max_chars: int | None
    ) -> RulesSection:
        captured = self.captures_turns()
        if max_chars is None:
            return render_section(name, rules, max_rule_chars, captured=captured)
        return fit_section(name, rules, max_rule_chars, max_chars, captured=captured)

    def _standing(self, bank: Bank, limit: int, scoped: bool, subject: str | None) -> list[Memory]:
        """The ambient floor's memories: the bank's cached standing set, or, scoped, the same
        order over general memories and the subject's own (sorted per call: a speaker's floor
        must never be filled from another person's memories)."""
        from memory_worker.search.ranking import top_memories

        if not scoped:
            standing = bank.standing(limit)
        else:
            mine = (m for m in bank.memories.values() if in_scope(m.subject, subject))
            standing = top_memories(mine, limit)
        retention, now_ms = self.bank_settings(bank).retention, self.clock()
        if retention and any(past_ttl(m, retention, now_ms) for m in standing):
            self._reap_soon(bank)  # not handed meanwhile (the floor may be short one turn)
            standing = [m for m in standing if not past_ttl(m, retention, now_ms)]
        return [m for m in standing if not is_lesson(m)]

    async def preview(self, req: PreviewRequest, caller: Caller = SYSTEM) -> PreviewResponse:
        # The speaker is checked first: a bad one is `invalid_input` before the default bank's
        # first write too (the injection only reads it once the bank exists).
        from memory_worker.search.lanes import LaneQuery

        clean_subject(req.subject)
        # The lanes as the hook would ask them: the window (else the message alone) and the goal.
        lanes = LaneQuery(
            context=window_text([req.context or req.query]), intention=goal_text(req.query)
        )
        name = self._name(req.bank)
        conversation = clean_short(req.conversation, "conversation", MAX_CONVERSATION_CHARS)
        if conversation is None:
            plan = await self.injection(
                name, req.query, subject=req.subject, lanes=lanes, max_chars=req.max_chars
            )
        else:
            async with self._delivering(conversation):
                ledger = self.deliveries
                delivered = await ledger.delivered(conversation)
                if req.fresh:
                    # The memories it was handed are handed anew; its lesson cards are not (seed
                    # 002: a compaction does not reset their once per conversation).
                    cards = self._lesson_cards(name, delivered)
                    if not cards:
                        await ledger.forget(conversation)
                    elif len(cards) < len(delivered):
                        await ledger.record(conversation, cards)
                    delivered = cards
                plan = await self.injection(
                    name,
                    req.query,
                    subject=req.subject,
                    lanes=lanes,
                    carried=self._handed(name, delivered),
                    max_chars=req.max_chars,
                )
                new = {lesson_key(name, h.memory): "" for h in plan.memories}
                if new.keys() - delivered.keys():
                    await ledger.record(conversation, {**delivered, **new})
        return PreviewResponse(
            bank=plan.bank,
            system_prompt_section=plan.section,
            rules=plan.rules,
            rules_truncated=plan.rules_truncated,
            memories=[PreviewMemory(memory=h.memory, score=h.score) for h in plan.memories],
            message=plan.message,
            retrieval=plan.retrieval,
        )

    def _lesson_cards(self, name: str, delivered: Mapping[str, str]) -> dict[str, str]:
        """What a conversation was handed (`delivered`: its ledger) less bank `name`'s memories
        that are not lessons (the ones this preview hands). Another bank's keys, and a key whose
        memory is gone, are kept: only `name`'s memories are handed here."""
        bank = self.store.find(name)
        prefix = f"{name}/"
        kept: dict[str, str] = {}
        for key, step in delivered.items():
            if bank is not None and key.startswith(prefix):
                memory = bank.get(key[len(prefix) :].rpartition("@")[0])
                if memory is not None and memory.category != LESSON:
                    continue
            kept[key] = step
        return kept

    def _handed(self, name: str, delivered: Mapping[str, str]) -> frozenset[str]:
        """The texts of bank `name`'s memories a conversation was handed at their current
        revision (`delivered`: its ledger), as a window carrying them would show them: those are
        not handed again; a memory changed since is."""
        bank = self.store.find(name)
        if bank is None or not delivered:
            return frozenset()
        prefix = f"{name}/"
        handed = []
        for key in delivered:
            if not key.startswith(prefix):
                continue
            memory_id, _, _ = key[len(prefix) :].rpartition("@")
            memory = bank.get(memory_id)
            if memory is not None and lesson_key(name, memory) == key:
                handed.append(memory)
        return carried_memories(handed)


async def _as_it_was(bank: Bank, as_of: int) -> dict[str, Memory] | None:
    """The memories whose record now says otherwise than it did at `as_of` — its text edited
    since, retired since, or retired then and brought back since — each as the log had it then;
    None when there are none. Only a memory revised after `as_of` can differ, so a bank with none
    reads nothing more; the others' records then come from the log (RAM keeps only the latest)."""
    revised = {
        m.id: m
        for m in bank.memories.values()
        if m.revision > 0 and m.created_at <= as_of < m.updated_at
    }
    if not revised:
        return None
    then: dict[str, Memory] = {}
    for record in await bank.revisions(revised.keys()):
        if record.updated_at <= as_of:
            seen = then.get(record.id)
            if seen is None or record.revision >= seen.revision:
                then[record.id] = record
    # One retired since is ranked from its record then whatever changed: it has no place in the
    # index (no vector to lose), and its tombstone carries the tags, pin and counts written later.
    changed = {
        memory_id: record
        for memory_id, record in then.items()
        if not revised[memory_id].live
        or (record.text, record.live_at(as_of))
        != (revised[memory_id].text, revised[memory_id].live_at(as_of))
    }
    return changed or None
