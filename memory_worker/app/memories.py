"""Memory CRUD: save (fingerprinted, reinforcing), get, list, update, delete, pin, supersede, tags.

Every write validates and redacts the whole request first, decides with a pure transition against
the bank's latest records, commits with no await in between, and only then emits its event."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from memory_worker.app.base import (
    capped_labels,
    clean_line,
    clean_short,
    clean_subject,
    redaction_reason,
)
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.retention import RetentionUseCases
from memory_worker.app.wire import (
    DeleteRequest,
    GetRequest,
    GetResponse,
    HistoryRequest,
    HistoryResponse,
    ListRequest,
    ListResponse,
    MemoryResponse,
    PinRequest,
    SaveRequest,
    SaveResponse,
    SupersedeRequest,
    SupersedeResponse,
    TagCount,
    TagsRequest,
    TagsResponse,
    UpdateRequest,
)
from memory_worker.core import lessons, transitions
from memory_worker.core.bank_settings import BankSettings
from memory_worker.core.capacity import EVICTED, Cap, evictable, excess, victims
from memory_worker.core.errors import Conflict, InvalidInput, MemoryNotFound
from memory_worker.core.models import Anchors, ItemEvent, Memory, Provenance
from memory_worker.core.retention import kind_of, past_ttl
from memory_worker.core.subjects import in_scope, same_subject
from memory_worker.storage.bank import Bank
from memory_worker.storage.eviction import first_to_go
from memory_worker.storage.logger import get_logger

__all__ = ["MemoryUseCases"]

log = get_logger(__name__)

LIST_DEFAULT_LIMIT = 50
LIST_MAX_LIMIT = 500
MAX_SESSION_ID_CHARS = 256


class MemoryUseCases(RetentionUseCases):
    """Memory use cases."""

    async def save(self, req: SaveRequest, caller: Caller = SYSTEM) -> SaveResponse:
        """The caller says how the text arrived: a person or an agent states it, extraction reads
        it from a conversation (a re-save keeps the higher of the two), and where it came from
        (its session, entry and agent). An automatic caller never touches a pinned or retired
        memory: that is decided here, in the same step as the write."""
        name = self._name(req.bank)
        text, text_labels = transitions.prepare_text(req.text)
        entities, entity_labels = capped_labels(req.entities, "entities")
        tags, tag_labels = capped_labels(req.tags, "tags")
        session_id, session_labels = clean_line(req.session_id, "session_id", MAX_SESSION_ID_CHARS)
        subject, subject_labels = clean_subject(req.subject)
        window, goal = _situation(req, subject, caller, self._erased_at(name, subject))
        card, card_labels = lessons.prepare_card(
            req.category,
            req.title,
            req.recommendation,
            req.anchors.model_dump() if req.anchors is not None else None,
            req.evidence,
        )
        context, context_labels = transitions.prepare_lane(window, "context")
        intention, intention_labels = transitions.prepare_lane(goal, "intention")
        labels = (
            *text_labels,
            *entity_labels,
            *tag_labels,
            *card_labels,
            *session_labels,
            *subject_labels,
            *context_labels,
            *intention_labels,
        )
        caller_session = clean_short(caller.session_id, "session_id", MAX_SESSION_ID_CHARS)
        source = _provenance(session_id or caller_session, caller)
        async with self._writing_into(name, caller) as bank:
            self.check_speaker(bank, subject, caller)
            self._check_not_erased_since(name, subject, caller)
            # What is past its TTL goes first, as expired: it must not take a live memory's
            # place at the cap, nor be renewed by this save as if it were still known.
            await self._reaped_for(bank, anywhere=True)
            # Decide and commit with no await in between: concurrent saves see each other's records.
            existing = bank.match_text(text, subject)
            if existing is not None:
                _check_untouched(bank, existing, caller)
            fresh = transitions.new_memory(
                existing.id if existing else bank.new_id(text),
                text,
                entities=entities,
                tags=tags,
                pinned=req.pinned,
                confidence=caller.confidence,
                source=source,
                category=card.category,
                title=card.title,
                recommendation=card.recommendation,
                anchors=card.anchors,
                evidence=card.evidence,
                context=context,
                intention=intention,
                subject=subject,
                now_ms=self.clock(),
            )
            record, event, created = transitions.save(existing, fresh)
            evicted = self._evictions(bank, record, caller) if created else []
            await bank.commit([record, *evicted])
        self._embed_soon(bank)
        if existing is not None:  # a re-save unions the labels: warned of as a request's own cut
            _warn_union_cut(existing, fresh)
        self._emit_item(event, name, record, redaction_reason(labels))
        for gone in evicted:
            self._emit_item(ItemEvent.DELETED, name, gone, EVICTED)
        # A person new to a full scoped bank evicts the bank's first to go, maybe another
        # person's: an agent is told only of what it may see (an id fingerprints the text).
        shown = [gone.id for gone in evicted if not self.hidden_from(bank, gone, caller)]
        return SaveResponse(
            memory=record, created=created, redacted=sorted(set(labels)), evicted=shown or None
        )

    def _erased_at(self, name: str, subject: str | None) -> int | None:
        """When `subject` was last erased from bank `name` (ms); None: never, or general."""
        return None if subject is None else self.store.erasures.erased_at(name, subject)

    def _check_not_erased_since(self, name: str, subject: str | None, caller: Caller) -> None:
        """Refuse a save about a subject erased after what it was read from (`Caller.read_at`:
        an extraction job queued, or dead-lettered and retried, before `memory::forget-subject`
        ran): the erasure wins, nothing they said before it comes back."""
        if caller.read_at is None or subject is None:
            return
        erased_at = self.store.erasures.erased_at(name, subject)
        if erased_at is not None and caller.read_at <= erased_at:
            # Not named: logged, the refusal would write the erased person's name down again.
            raise Conflict(
                f"the subject of this memory was erased from bank {name} after it was said; "
                "nothing was written"
            )

    def _evictions(self, bank: Bank, record: Memory, caller: Caller) -> list[Memory]:
        """Tombstones (reason `evicted`) for what `record` displaces at the bank's caps: its
        subject's own rows past max_per_subject (subject scoping on), then its scope's rows past
        max_memories (the subject's, else the general pool; the whole bank with scoping off).
        Counted from the index first, so a bank under its caps pays no scan. Writes still in
        flight count as done: concurrent saves into a full bank must each evict their own
        victim, not all the same one (which left the bank over its cap)."""
        settings = self.bank_settings(bank)
        if settings.subject_scoping:
            chosen = self._scoped_victims(bank, record, settings)
        else:
            chosen = _unscoped_victims(bank, record, settings)
        if not chosen:
            return []  # under its caps: no clock read, no log line
        if bank.log_edited():
            # A hand edit not read yet may have pinned the one chosen (RAM cannot tell): this
            # save goes one over the cap instead, and the next one, after the reload, evicts.
            log.warning("eviction_deferred", bank=bank.name, reason="log edited by hand")
            return []
        now_ms = self.clock()
        out = []
        for victim in chosen:
            current = bank.latest(victim.id) or victim  # a revision in flight (a pin) counts
            if current.pinned:
                continue
            if bank.being_erased(current):
                # A forget-subject under way is taking it out, which makes the room: retiring it
                # here made this unrelated save a `conflict` naming the person being erased.
                continue
            gone = transitions.tombstone(current, now_ms=now_ms, reason=EVICTED)
            if gone is not None:
                out.append(gone)
        if out:
            log.info("memories_evicted", bank=bank.name, n=len(out), by=caller.describe())
        return out

    def _scoped_victims(self, bank: Bank, record: Memory, settings: BankSettings) -> list[Memory]:
        """`victims` for a bank partitioned by subject: its caps counted from the index and the
        writes in flight, its candidates found over the index's columns (`first_to_go`): the
        subject's own rows first, the whole bank's only for max_memories when they hold nothing
        evictable (a person new to a full bank)."""
        subject = record.subject
        per_subject = subject is not None and settings.max_per_subject > 0
        if not per_subject and settings.max_memories <= 0:
            return []  # no cap applies: nothing to count
        flying = {m.id: m for m in bank.in_flight() if m.id != record.id}

        def mine(memory: Memory) -> bool:
            return same_subject(memory.subject, subject)

        total = bank.live_count() + _in_flight_change(bank, flying.values(), lambda _: True)
        held = _subject_rows(bank, subject, flying.values())
        caps = []
        at_own_cap = per_subject and held + 1 > settings.max_per_subject
        if at_own_cap:
            caps.append(Cap("max_per_subject", settings.max_per_subject, held))
        if 0 < settings.max_memories < total + 1:
            # Room in a full bank comes from the new memory's own scope, never another person's:
            # its scope may hold what the others leave of the cap.
            others = total - held
            caps.append(
                Cap("max_memories", settings.max_memories - others, held, settings.max_memories)
            )
        need = excess(caps)
        if need <= 0:
            return []
        candidates = first_to_go(
            bank.index,
            bank.memories,
            bank.access,
            subject=subject,
            scoped=True,
            exclude=flying.keys(),
            k=need,
            evictable=evictable,
        )
        candidates += [m for m in flying.values() if m.live and mine(m)]

        def bank_wide() -> list[Memory]:
            # Only asked when the scope had nothing evictable: the bank's own first evictable
            # memories (the saves in flight counted as they are), no scan per save.
            return bank.first_evictable(need, skip=(record.id,))

        # A subject at its own cap pays from its own rows only; the bank's cap alone may fall
        # back to the whole bank when this scope has nothing to give.
        fallback = None if at_own_cap else bank_wide
        return victims(caps, candidates, bank.seen, fallback)

    def _check_room(self, bank: Bank, existing: Memory, subject: str) -> None:
        """Moving `existing` to `subject` must not take them past `max_per_subject` (subject
        scoping on): refused (`conflict`), never made room for by evicting one of theirs, since
        an edit does not retire another memory."""
        settings = self.bank_settings(bank)
        if not settings.subject_scoping or settings.max_per_subject <= 0:
            return
        flying = [m for m in bank.in_flight() if m.id != existing.id]
        held = _subject_rows(bank, subject, flying)
        if held + 1 > settings.max_per_subject:
            raise Conflict(
                f"{subject} already has {held} memories and max_per_subject is "
                f"{settings.max_per_subject}: delete one of theirs or raise the cap; nothing "
                "was changed"
            )

    async def get(self, req: GetRequest, caller: Caller = SYSTEM) -> GetResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        # The subject is checked before the lookup: a bad one is `invalid_input` whatever the bank
        # holds, never `memory_not_found` only because the id is unknown.
        scoped, subject = self.scope_of(bank, req.subject, caller)
        if bank is None:
            raise MemoryNotFound(f"{req.id} in bank {name}")
        record = self._record(bank, req.id)
        if scoped and record.subject is not None and not same_subject(record.subject, subject):
            raise MemoryNotFound(f"{req.id} in bank {name}")  # another person's: not there
        if await self._reaped_for(bank, record, reading=True):
            record = self._record(bank, req.id)  # retired: as list and recall already treat it
        return GetResponse(memory=with_access(bank, record))

    async def history(self, req: HistoryRequest, caller: Caller = SYSTEM) -> HistoryResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        revisions = await bank.revisions({req.id}) if bank is not None else []
        scoped, subject = self.scope_of(bank, caller.speaker if caller.in_turn else None, caller)
        # As `get`: in a bank partitioned by subject, another person's memory is not there for
        # an agent (inside a turn: another than its speaker's), and neither is any revision it
        # had while it was about someone else.
        if scoped and any(not in_scope(r.subject, subject) for r in revisions):
            revisions = []
        if not revisions:
            raise MemoryNotFound(f"{req.id} in bank {name}")
        return HistoryResponse(bank=name, id=req.id, revisions=revisions)

    async def list_memories(self, req: ListRequest, caller: Caller = SYSTEM) -> ListResponse:
        bank = self._readable(self._name(req.bank))
        limit = min(req.limit if req.limit is not None else LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT)
        offset = req.offset or 0
        # The filters are checked before anything is read: a bad one is `invalid_input` in the
        # default bank before its first write too, as `recall` and `tags` answer it.
        tag = transitions.prepare_label(req.tag)
        category = lessons.prepare_category(req.category)
        scoped, subject = self.scope_of(bank, req.subject, caller)
        if bank is None:
            return ListResponse(memories=[], total=0)
        # The bank keeps its listing order (and each filtered listing) until its next write: a
        # page costs what it returns, not a sort of the bank per page (issue 12).
        history = bool(req.include_superseded)
        rows = bank.newest_first(history=history)
        if tag is not None or category is not None or scoped:
            order = rows
            rows = bank.listing(
                ("list", history, tag, category, scoped, subject),
                lambda: [
                    m
                    for m in order
                    if (tag is None or tag in m.tags)
                    and (category is None or kind_of(m) == category)
                    and (not scoped or in_scope(m.subject, subject))
                ],
            )
        # Past its TTL is gone, reaped or not (a history listing shows every record as it is).
        # The index's columns tell first whether any live memory is: mostly none is.
        from memory_worker.search.ranking import expired_slots  # (read when retention is set)

        retention, now_ms = self.bank_settings(bank).retention, self.clock()
        if retention and not history and expired_slots(bank.index, retention, now_ms).size:
            kept = [m for m in rows if not past_ttl(m, retention, now_ms)]
            if len(kept) < len(rows):
                self._reap_soon(bank)
                rows = kept
        page = [with_access(bank, m) for m in rows[offset : offset + limit]]
        return ListResponse(memories=page, total=len(rows))

    async def update(self, req: UpdateRequest, caller: Caller = SYSTEM) -> MemoryResponse:
        card_given = any(
            v is not None for v in (req.title, req.recommendation, req.anchors, req.evidence)
        )
        plain = (
            req.text, req.entities, req.tags, req.pinned, req.subject, req.category, req.context,
            req.intention,
        )  # fmt: skip
        if all(v is None for v in plain) and not card_given:
            raise InvalidInput(
                "update needs at least one of text, entities, tags, pinned, subject, category, "
                "context, intention, "
                "title, recommendation, anchors, evidence"
            )
        name = self._name(req.bank)
        text, labels = (None, ()) if req.text is None else transitions.prepare_text(req.text)
        entities, tags = None, None
        if req.entities is not None:
            entities, entity_labels = capped_labels(req.entities, "entities")
            labels = (*labels, *entity_labels)
        if req.tags is not None:
            tags, tag_labels = capped_labels(req.tags, "tags")
            labels = (*labels, *tag_labels)
        title, recommendation, anchors, evidence, card_labels = _card_update(req)
        context, context_labels = transitions.prepare_lane(req.context, "context")
        intention, intention_labels = transitions.prepare_lane(req.intention, "intention")
        # A blank lane removes it, as "" does a subject (it was a silent no-op: a stored window
        # could not be taken off a memory short of deleting it).
        context = "" if context is None and req.context is not None else context
        intention = "" if intention is None and req.intention is not None else intention
        # "" makes the memory general again: a subject is cleared, never left half-set. What was
        # redacted from it is named like any other field's (a save names it too).
        subject, subject_labels = clean_subject(req.subject)
        subject = subject or ("" if req.subject is not None else None)
        labels = (*labels, *card_labels, *context_labels, *intention_labels, *subject_labels)
        category = None if req.category is None else lessons.prepare_category(req.category)
        bank, existing = await self._existing_now(name, req.id, caller)
        transitions.check_revision(existing, req.expected_revision)
        _check_untouched(bank, existing, caller)
        # A lesson's own category named again (a record written back whole) changes nothing.
        was_lesson = existing.category == lessons.LESSON
        if category == lessons.LESSON and not was_lesson:
            raise InvalidInput("a memory becomes a lesson by memory::save with its card fields")
        if category is not None and category != lessons.LESSON and was_lesson:
            raise InvalidInput(f"memory {existing.id} is a lesson: its category stays lesson")
        if card_given and existing.category != lessons.LESSON:
            raise InvalidInput(
                f"memory {existing.id} is not a lesson: title, recommendation, anchors and "
                "evidence are lesson fields"
            )
        new_subject = existing.subject if subject is None else (subject or None)
        # Another spelling of the same person ("ana" for "Ana") is kept as typed but moves
        # nothing: no speaker check, and no room to find under their cap (they already hold it).
        moved = not same_subject(new_subject, existing.subject)
        if moved:
            self.check_speaker(bank, new_subject, caller)
        if moved and new_subject is not None and existing.live:
            self._check_room(bank, existing, new_subject)
        if (text is not None or subject is not None) and existing.live:
            twin = bank.match_text(text if text is not None else existing.text, new_subject)
            if twin is not None and twin.id != existing.id and twin.live:
                raise Conflict(
                    f"the new text duplicates memory {twin.id}; supersede one with the other"
                )
        record = transitions.update(
            existing,
            now_ms=self.clock(),
            text=text,
            entities=entities,
            tags=tags,
            pinned=req.pinned,
            title=title,
            recommendation=recommendation,
            anchors=anchors,
            evidence=evidence,
            context=context,
            intention=intention,
            subject=subject,
            category=category,
        )
        if record is None:
            return MemoryResponse(memory=existing, redacted=sorted(set(labels)))
        await bank.commit([record])
        self._embed_soon(bank)
        self._emit_item(ItemEvent.UPDATED, name, record, redaction_reason(labels), existing)
        return MemoryResponse(memory=record, redacted=sorted(set(labels)))

    async def delete(self, req: DeleteRequest, caller: Caller = SYSTEM) -> MemoryResponse:
        def deleting(existing: Memory, now_ms: int) -> Memory | None:
            return transitions.tombstone(existing, now_ms=now_ms)

        return await self._change(
            req.bank, req.id, req.expected_revision, ItemEvent.DELETED, deleting, caller
        )

    async def pin(self, req: PinRequest, caller: Caller = SYSTEM) -> MemoryResponse:
        def pinning(existing: Memory, now_ms: int) -> Memory | None:
            return transitions.pin(existing, req.pinned, now_ms=now_ms)

        return await self._change(
            req.bank, req.id, req.expected_revision, ItemEvent.UPDATED, pinning, caller
        )

    async def _change(
        self,
        bank_name: str | None,
        memory_id: str,
        expected_revision: int | None,
        event: ItemEvent,
        transition: Callable[[Memory, int], Memory | None],
        caller: Caller,
    ) -> MemoryResponse:
        """One record's change by a pure transition (None: nothing to change), guarded by the
        caller's revision, committed with no await after the decision, then announced."""
        name = self._name(bank_name)
        bank, existing = await self._existing_now(name, memory_id, caller)
        transitions.check_revision(existing, expected_revision)
        _check_untouched(bank, existing, caller)
        record = transition(existing, self.clock())
        if record is None:
            return MemoryResponse(memory=existing)
        await bank.commit([record])
        self._emit_item(event, name, record, None)
        return MemoryResponse(memory=record)

    async def supersede(self, req: SupersedeRequest, caller: Caller = SYSTEM) -> SupersedeResponse:
        name = self._name(req.bank)
        reason = transitions.prepare_reason(req.reason)
        # Either one past its TTL is retired first (the reap covers the whole bank), as every
        # change by id finds it.
        bank, target = await self._existing_now(name, req.id, caller)
        transitions.check_revision(target, req.expected_revision)

        winner = bank.latest(req.superseded_by)
        if winner is None or self.hidden_from(bank, winner, caller):
            raise MemoryNotFound(f"superseded_by {req.superseded_by} in bank {name}")
        # The winner as it is now, not as the caller listed it: merging into a memory that was
        # edited meanwhile would retire the target into a fact it no longer states.
        transitions.check_revision(winner, req.expected_winner_revision)
        if caller.automatic and not same_subject(winner.subject, target.subject):
            # Consolidation or a correction must never fold one person's memory into another's.
            raise Conflict(
                f"memory {target.id} and {winner.id} are about different subjects; "
                f"{caller.via} never merges them"
            )
        if caller.automatic and lessons.card_key(target) != lessons.card_key(winner):
            # A lesson is delivered by its anchors: folded into a plain memory or another card,
            # it would silently stop reaching the tool calls it was written for.
            raise Conflict(
                f"memory {target.id} and {winner.id} carry different lesson cards; "
                f"{caller.via} never merges them"
            )
        if caller.automatic:
            _check_log_read(bank, caller)
        retired, absorbed = transitions.supersede(
            target, winner, reinforce_winner=req.reinforce, now_ms=self.clock()
        )
        await bank.commit([retired] if absorbed is None else [retired, absorbed])
        if absorbed is not None and same_subject(winner.subject, target.subject):
            _warn_union_cut(winner, target)  # its labels were unioned (`transitions.supersede`)
        if absorbed is not None:
            # Its uses too: eviction at a cap goes by accesses, and the survivor stands for both.
            bank.access.absorb(target.id, absorbed.id)
            # What it took over needs vectors, as a save's does: entities it gained re-index it
            # (its content vector dropped: out of semantic recall), a lane it gained has none
            # (the bank's lanes compared by words alone). Nothing else would start the embedder.
            self._embed_soon(bank)
        self._emit_item(ItemEvent.SUPERSEDED, name, retired, reason)
        if absorbed is not None:
            self._emit_item(ItemEvent.UPDATED, name, absorbed, reason)
        return SupersedeResponse(memory=retired, reinforced=absorbed is not None)

    async def tags(self, req: TagsRequest, caller: Caller = SYSTEM) -> TagsResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        counts: Counter[str] = Counter()
        scoped, subject = self.scope_of(bank, req.subject, caller)
        if bank is not None:
            # What `list` shows: a memory past its TTL is gone, reaped or not.
            retention, now_ms, expired = self.bank_settings(bank).retention, self.clock(), False
            for memory in bank.memories.values():
                if memory.live and not (scoped and not in_scope(memory.subject, subject)):
                    if retention and past_ttl(memory, retention, now_ms):
                        expired = True
                        continue
                    counts.update(memory.tags)
            if expired:
                self._reap_soon(bank)
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return TagsResponse(bank=name, tags=[TagCount(tag=t, count=c) for t, c in ordered])


def _check_untouched(bank: Bank, existing: Memory, caller: Caller) -> None:
    """An automatic path (consolidation, extraction) never changes a pinned or a retired memory:
    only a person's or an agent's explicit call does. The bus believes a claimed `via` from
    anyone, so this is what keeps the claim harmless. Nor while the log holds a hand edit RAM
    has not read (`_check_log_read`): the memory may be pinned there."""
    if caller.automatic and (existing.pinned or not existing.live):
        state = "pinned" if existing.pinned else "retired"
        raise Conflict(f"memory {existing.id} is {state}: {caller.via} never touches it")
    if caller.automatic:
        _check_log_read(bank, caller)


def _check_log_read(bank: Bank, caller: Caller) -> None:
    """Refuse an automatic change while `memories.jsonl` holds an edit by hand that RAM has not
    read yet (`Bank.log_edited`: the watcher's debounce, or no watcher until `memory::reload`).
    A person may have pinned the memory there: our record, one revision up as theirs and
    written after it, won at replay, and the pin was gone for good. Extraction skips the write,
    consolidation plans again at its next pass, both after the reload."""
    if bank.log_edited():
        raise Conflict(
            f"bank {bank.name}'s memories.jsonl was edited by hand since it was read; "
            f"{caller.via} changes nothing there until a reload picks the edit up"
        )


def _situation(
    req: SaveRequest, subject: str | None, caller: Caller, erased_at: int | None
) -> tuple[str | None, str | None]:
    """The lanes a save stores: the request's, else, for an agent's save inside a turn, the
    turn's window and goal (`Caller.window`/`goal`), as extraction stores a fact's — only on a
    memory about the person speaking (or a general one when nobody is known to be): on a
    general memory the speaker's words would reach every other person's recall and outlive
    their erasure. Nor when that person was erased at or after the hook read them
    (`Caller.situation_at`, `erased_at`): their words from before it. A lane given blank stays
    off."""
    context, intention = req.context, req.intention
    read_at = caller.situation_at
    if read_at is not None and erased_at is not None and read_at <= erased_at:
        return context, intention
    if caller.in_turn and same_subject(subject, clean_subject(caller.speaker)[0]):
        context = caller.window if context is None else context
        intention = caller.goal if intention is None else intention
    return context, intention


def _warn_union_cut(kept: Memory, merged: Memory) -> None:
    """`labels_capped` for what unioning `merged`'s entities and tags into `kept`'s left out at
    the cap, as `capped_labels` warns of a request's own list: how many, never which."""
    for field in ("entities", "tags"):
        if dropped := transitions.union_dropped(getattr(kept, field), getattr(merged, field)):
            log.warning("labels_capped", field=field, kept=transitions.MAX_LABELS, dropped=dropped)


def _provenance(session_id: str | None, caller: Caller) -> Provenance | None:
    """Where a saved memory came from: the session it was said in, the transcript entry and the
    agent when the caller knows them."""
    fields = {
        "session_id": session_id,
        "entry_id": clean_short(caller.entry_id, "source.entry_id", MAX_SESSION_ID_CHARS),
        "agent": clean_short(caller.agent, "source.agent", MAX_SESSION_ID_CHARS),
    }
    if not any(fields.values()):
        return None
    return Provenance(**fields)


def _card_update(
    req: UpdateRequest,
) -> tuple[str | None, str | None, Anchors | None, tuple[str, ...] | None, list[str]]:
    """The lesson fields an update replaces (None: unchanged), checked, and their labels."""
    labels: list[str] = []
    title = recommendation = None
    if req.title is not None:
        title, found = lessons.prepare_title(req.title)
        labels += found
    if req.recommendation is not None:
        recommendation, found = lessons.prepare_recommendation(req.recommendation)
        labels += found
    anchors = None if req.anchors is None else lessons.anchors_from(req.anchors.model_dump())
    evidence = None
    if req.evidence is not None:
        evidence, found = lessons.prepare_evidence(req.evidence)
        labels += found
    return title, recommendation, anchors, evidence, labels


def _durable_live(bank: Bank, memory_id: str) -> int:
    durable = bank.get(memory_id)
    return int(durable is not None and durable.live)


def _unscoped_victims(bank: Bank, record: Memory, settings: BankSettings) -> list[Memory]:
    """`victims` of the one cap of a bank not partitioned by subject (max_memories over the whole
    bank), counted and chosen from what the bank keeps (`decided_live_count`,
    `first_evictable`: the records in flight included, `record`'s own left out) instead of a scan
    of every row."""
    if settings.max_memories <= 0:
        return []
    live = bank.decided_live_count(leaving_out=record.id)
    if live + 1 <= settings.max_memories:
        return []
    held = live - _durable_live(bank, record.id)
    caps = [Cap("max_memories", settings.max_memories, held)]
    need = excess(caps)
    if need <= 0:
        return []
    candidates = bank.first_evictable(need, skip=(record.id,))
    return victims(caps, candidates, bank.seen)


def with_access(bank: Bank, memory: Memory) -> Memory:
    """`memory` with its access counts from the sidecar (they are never in the log)."""
    seen = bank.access.get(memory.id)
    if seen is None:
        return memory
    return memory.model_copy(update={"access_count": seen.count, "last_accessed_at": seen.last_ms})


def _in_flight_change(
    bank: Bank, flying: Iterable[Memory], counted: Callable[[Memory], bool]
) -> int:
    """Live rows of a scope the writes in flight (`flying`) add, or take away."""
    delta = 0
    for memory in flying:
        before = bank.get(memory.id)
        delta += memory.live and counted(memory)
        delta -= before is not None and before.live and counted(before)
    return delta


def _subject_rows(bank: Bank, subject: str | None, flying: Iterable[Memory]) -> int:
    """`subject`'s live rows, counted from the index and the writes in flight."""
    return bank.index.subject_count(subject) + _in_flight_change(
        bank, flying, lambda memory: same_subject(memory.subject, subject)
    )
