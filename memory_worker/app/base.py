"""What every use case of `MemoryService` shares: the store, the settings snapshot, the event
emitter, the clock, the bank a call names, and the write path's bank creation."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import weakref
from collections import OrderedDict, deque
from collections.abc import Awaitable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from memory_worker.app.caller import SYSTEM, Caller, CallerKind
from memory_worker.app.ports import (
    BANK_CHANGED,
    ITEM_CHANGED,
    Clock,
    Deliveries,
    Embedder,
    Emitter,
    HealthProbe,
    NullEmitter,
    system_clock,
)
from memory_worker.core import transitions
from memory_worker.core.bank_settings import (
    BankOverrides,
    BankSettings,
    effective,
    settings_revision,
)
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    BankNotFound,
    Forbidden,
    InvalidInput,
    MemoryNotFound,
    StorageError,
)
from memory_worker.core.models import BankEvent, BankInfo, ItemEvent, Memory
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.core.retention import EXPIRED, may_have_expired, past_ttl
from memory_worker.core.subjects import in_scope, normalize_subject, same_subject
from memory_worker.storage.bank import Bank, BankSummary
from memory_worker.storage.logger import get_logger
from memory_worker.storage.store import Store

__all__ = [
    "HAND_EDIT_REASON",
    "MAX_DESCRIPTION_CHARS",
    "MAX_SUBJECT_CHARS",
    "PREVIOUS_SUBJECT",
    "QUERY_EMBED_TIMEOUT_S",
    "ServiceBase",
    "capped_labels",
    "clean_line",
    "clean_short",
    "clean_subject",
    "erased_event_id",
    "event_id",
    "hand_changes",
    "item_event",
    "left_view",
    "redaction_reason",
]

log = get_logger(__name__)

ERASURE_REASON = "forget-subject"  # the `reason` of every `erased` event
HAND_EDIT_REASON = "edited by hand"  # a change read from the files, not made by a call
MAX_DESCRIPTION_CHARS = 500
MAX_SUBJECT_CHARS = 128  # a handle or an id, not a description of the person


def event_id() -> str:
    """A fresh identity for one change event: delivery is at-least-once (a failed fan-out is
    retried), so a subscriber dedupes on it. Random, not derived from the change: a bank
    deleted and created again replays the same ids and revisions.

    What `uuid.uuid4().hex` gives (16 random bytes, the version-4 and RFC 4122 variant bits set),
    without building a `UUID` object: every write's event paid ~3 µs more for it."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant RFC 4122
    return raw.hex()


def erased_event_id(key: str | None, memory_id: str) -> str:
    """The `event_id` of the `erased` event of `memory_id` by the erasure whose key is `key`:
    the same each time it is announced (at-least-once across a kill: `storage.erasure`'s
    outbox), so a subscriber dedupes a repeat as any retried delivery. Shaped as `event_id`'s
    (32 hex digits, version-4 bits); random for an erasure without a key (an intent written
    before keys were)."""
    if key is None:
        return event_id()
    raw = bytearray(hashlib.sha256(f"{key}\0{memory_id}".encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def item_event(event: ItemEvent, bank: str, memory: Memory, reason: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"event_type": str(event), "bank": bank, "memory": memory.to_wire()}
    if reason:
        payload["reason"] = reason
    payload["event_id"] = event_id()
    return payload


def hand_changes(
    before: Mapping[str, Memory], after: Mapping[str, Memory]
) -> list[tuple[ItemEvent, Memory]]:
    """What a hand edit of `memories.jsonl` changed, memory by memory, as the events of any other
    change: `created` / `updated` for one live now, `superseded` / `deleted` for one live before
    and not now (a line removed by hand: its last record, as it was)."""
    out: list[tuple[ItemEvent, Memory]] = []
    for memory_id, now in after.items():
        event = transitions.change_event(before.get(memory_id), now)
        if event is not None:
            out.append((event, now))
    out.extend(
        (ItemEvent.DELETED, was)
        for memory_id, was in before.items()
        if was.live and memory_id not in after
    )
    return out


PREVIOUS_SUBJECT = "previous_subject"  # on an `updated` event that moved the memory


def left_view(payload: dict[str, Any]) -> dict[str, Any] | None:
    """For an item event that moved its memory to another subject (`previous_subject`: whom it
    was about; None: no one, the general pool): what the views it left hear instead — a `moved`
    event with its id and the subject it was about, no text (it is someone else's now). None
    for any other event."""
    if PREVIOUS_SUBJECT not in payload or not isinstance(payload.get("memory"), dict):
        return None
    previous, memory_id = payload[PREVIOUS_SUBJECT], payload["memory"].get("id")
    memory: dict[str, Any] = {"id": memory_id}
    notice: dict[str, Any] = {"event_type": str(ItemEvent.MOVED), "bank": payload.get("bank")}
    notice["id"] = memory_id
    if isinstance(previous, str):
        notice["subject"] = memory["subject"] = previous  # as an erasure's: their views hear it
    notice["memory"] = memory
    notice["event_id"] = event_id()
    return notice


def capped_labels(values: Sequence[str], field: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Entities or tags as stored and the redactions made in them (`prepare_labels`): the first
    `MAX_LABELS` distinct kept, as seed 000 caps them, with a warning naming how many distinct
    values were left out (never their text: one may be a secret)."""
    labels = transitions.prepare_labels(values, field)
    if labels.dropped:
        log.warning("labels_capped", field=field, kept=len(labels.values), dropped=labels.dropped)
    return labels.values, labels.redacted


def redaction_reason(labels: Iterable[str]) -> str | None:
    distinct = sorted(set(labels))
    return f"redacted: {', '.join(distinct)}" if distinct else None


def clean_short(raw: str | None, field: str, limit: int) -> str | None:
    """A one-line label (description, session id): redacted, whitespace collapsed, bounded."""
    return clean_line(raw, field, limit)[0]


def clean_subject(raw: str | None) -> tuple[str | None, tuple[str, ...]]:
    """A subject a call names, as stored and compared (`clean_line`, then NFC): every door and
    path cleans it alike, so a save, a scoped read and forget-subject mean the same person."""
    subject, labels = clean_line(raw, "subject", MAX_SUBJECT_CHARS)
    # A name of invisible characters only is no one, as a blank one is.
    return (None if subject is None else normalize_subject(subject) or None), labels


def clean_line(raw: str | None, field: str, limit: int) -> tuple[str | None, tuple[str, ...]]:
    """`clean_short`, and the labels of the secrets it redacted (for the answer's `redacted`)."""
    if raw is None:
        return None, ()
    transitions.check_unicode(raw, field)
    if len(raw) > 4 * limit:  # bounded before any work: redaction only shortens so much
        raise InvalidInput(f"{field} must be at most {limit} characters")
    cleaned, labels = transitions.redact_line(raw)
    if len(cleaned) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters")
    return cleaned or None, labels


_T = TypeVar("_T")


def _outcome_taken(task: asyncio.Future[Any]) -> None:
    """A call's outcome taken, so one whose caller gave up is no "exception never retrieved"
    (its caller got its cancellation; an error of the call itself is a plain failed call)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("call_failed_after_its_caller_left", error=str(exc))


QUERY_EMBED_TIMEOUT_S = 2.0  # inside the hook's budget: a slow embedder costs the turn nothing
_BANK_SETTINGS_KEPT = 1024  # banks whose effective settings are kept (a bound, not a tuning)


class _WritingInto:
    """`ServiceBase._writing_into`'s context: written as a class, not with
    `contextlib.asynccontextmanager`, whose generator, its two steps and their wrappers cost
    ~3.5 us of every save."""

    __slots__ = ("_bank", "_caller", "_created", "_name", "_service")

    def __init__(self, service: ServiceBase, name: str, caller: Caller) -> None:
        self._service, self._name, self._caller = service, name, caller
        self._created = False
        self._bank: Bank | None = None

    async def __aenter__(self) -> Bank:
        service, name = self._service, self._name
        if service.store.find(name) is None:
            service._new_name(name, "bank")
        revive = not self._caller.automatic or name == service.settings.default_bank
        self._bank, self._created = await service.store.ensure(
            name, revive=revive, limit=service.settings.max_banks, for_a_write=True
        )
        return self._bank

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        service, name = self._service, self._name
        if kind is not None:
            if self._created:
                await service.store.discard_if_empty(name)
            return  # the write's own error (or cancellation) goes on
        # Landed: the bank stays, even if the call that made it (maybe another) fails or dies,
        # and is announced once, by this call if no other did (its creator may have failed).
        await service.store.settle_creation(name)
        service._announce_created(self._bank)


class ServiceBase:
    """State and helpers every use case shares: the store, the settings snapshot, events, time."""

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        *,
        emitter: Emitter | None = None,
        clock: Clock = system_clock,
        embedder: Embedder | None = None,
        siblings: HealthProbe | None = None,
        embed_writes: bool = True,
        catch_up_s: float = 0.0,
        deliveries: Deliveries | None = None,
        engine_less: bool = False,
    ) -> None:
        """`deliveries`: where lesson deliveries are kept (the state worker under an engine);
        None keeps them in the data dir. `engine_less`: no `router::complete` to extract with
        (the standalone server, the CLI): only a configured `extraction_endpoint` captures."""
        self.engine_less = engine_less
        self.store = store
        self.deliveries_port = deliveries
        self.siblings = siblings
        self.settings = settings or Settings()
        self.emitter: Emitter = emitter or NullEmitter()
        self.clock = clock
        self.embedder = embedder
        # False for one-shot CLI commands: they embed queries over vectors a server made, never a
        # bank's backlog (a long import would pay for every memory before the command exits).
        self.embed_writes = embed_writes
        # For one that does not (embed_writes False): how long a recall may spend embedding what
        # its bank lacks before its query (`EmbeddingWork._catch_up`); 0 never, and then a query
        # is embedded only over a bank that holds vectors of its model.
        self.catch_up_s = catch_up_s
        # Inside the hook's budget: a slow embedder costs the turn nothing (recall runs lexical).
        # Evaluations that must measure the semantic arm on a loaded machine raise it.
        self.query_embed_timeout_s = QUERY_EMBED_TIMEOUT_S
        self._embedding: dict[str, asyncio.Task[None]] = {}
        # List questions' answer types as embedded, by model (`EmbeddingWork._question_vectors`):
        # a few hundred kinds ("countries", "books") recur, each asked again is not re-embedded.
        self._kind_vectors: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        # Retired records' vectors, by model and text hash (`EmbeddingWork._history_vectors`):
        # the index holds live vectors only. Emptied by every `memory::forget-subject`.
        self._history_cache: OrderedDict[tuple[str, str], npt.NDArray[np.float32]] = OrderedDict()
        self._reaping: dict[str, asyncio.Task[None]] = {}  # retention's reaps a read asked for
        # Per bank, what the reaper retired since its last `memory::stats` (which reports them),
        # with a weak reference to the bank it was retired in: a bank deleted or reloaded since
        # is not kept in RAM by its report (which went with it).
        self._expired_since: dict[str, tuple[weakref.ref[Bank], deque[Memory]]] = {}
        self._scratch_taken: set[str] = set()  # doctor runs in flight each own their scratch bank
        self._last_embed_failure: tuple[str, str] | None = None
        self._bank_settings: dict[str, tuple[Settings, BankOverrides, BankSettings]] = {}
        self._finishing: set[asyncio.Future[Any]] = set()  # calls run on past a caller gone

    def __repr__(self) -> str:
        return f"<MemoryService store={self.store!r} default_bank={self.settings.default_bank!r}>"

    # --- helpers ---------------------------------------------------------------------------------

    async def ready_bank(self, requested: str | None, *, writing: bool = False) -> None:
        """Replay the bank a call names (the default bank when None) in a worker thread when a
        lazy store has not yet: the use case would otherwise replay it on the loop when it finds
        it, and every other call would wait as long (seconds for a big bank). `writing`: a call
        that may change the bank first waits for a reload that has it frozen (`Store.settled`);
        a read goes on with the frozen bank's RAM meanwhile."""
        name = requested or self.settings.default_bank
        if self.store.is_pending(name):
            await self.store.replay(name)
        if writing:
            await self.store.settled(name)

    def finished(self, work: Awaitable[_T]) -> Awaitable[_T]:
        """`work`, a call that may write, run to its end even when its caller stops waiting (an
        MCP client's cancellation, the engine giving up on a handler): its commit lands anyway
        (shielded), so what follows it (the change event, the embedding) must run too, or a
        memory was saved that no subscriber, console or embedder ever heard of. The caller
        still gets its cancellation at once; `settle` and `close` wait for such calls."""
        task = asyncio.ensure_future(work)
        self._finishing.add(task)
        # What `asyncio.shield(task)` gives its caller, told by the one done callback below:
        # shield's own two callbacks and their turns of the loop cost ~3 us of every write.
        told: asyncio.Future[_T] = task.get_loop().create_future()
        task.add_done_callback(functools.partial(self._call_over, told))
        return told

    def _call_over(self, told: asyncio.Future[Any], task: asyncio.Future[Any]) -> None:
        """A call `finished` ran leaves `_finishing`, its outcome taken and passed on to its
        caller (`told`) unless the caller gave up: one done callback, as each is a turn of the
        loop and every write pays it."""
        self._finishing.discard(task)
        _outcome_taken(task)
        if told.done():
            return  # cancelled: its caller stopped waiting
        if task.cancelled():
            told.cancel()
        elif (exc := task.exception()) is not None:
            told.set_exception(exc)
        else:
            told.set_result(task.result())

    async def _calls_done(self) -> None:
        """Wait for the calls `finished` runs on past their callers."""
        while running := [task for task in self._finishing if not task.done()]:
            # `wait`, not `gather`: a gather cancelled (a hook past its budget while its door
            # closes) cancels what it waits for, and a call cut so mid-commit had its write
            # land with no event and the bank it made unannounced. Outcomes: `_call_over`.
            await asyncio.wait(running)

    def _name(self, requested: str | None) -> str:
        return check_name(requested or self.settings.default_bank, "bank")

    def _new_name(self, requested: str, what: str) -> str:
        """A bank or rule name that is about to become a folder or file name: checked, and
        refused when it is shaped like a secret (a token pasted as a name would sit on disk, in
        listings and in every event)."""
        name = check_name(requested, what)
        found = redact(name).labels
        if found:
            raise InvalidInput(
                f"{what} looks like a secret ({', '.join(found)}); choose another name"
            )
        return name

    def _readable(self, name: str) -> Bank | None:
        """The bank to read; None for the default bank before its first write."""
        try:
            return self.store.get(name)
        except BankNotFound:
            if name == self.settings.default_bank:
                return None
            raise

    def captures_turns(self) -> bool:
        """Whether a finished turn reaches an extraction model: what the memory section promises
        the agent ("saved without any tool call"). Under an engine the router is there to ask;
        without one, only a configured `extraction_endpoint` is."""
        settings = self.settings
        return settings.extraction_enabled and (
            not self.engine_less or bool(settings.extraction_endpoint)
        )

    def was_deleted(self, name: str) -> bool:
        """A bank deleted since boot (the default bank never counts: it materializes on use)."""
        return name != self.settings.default_bank and self.store.was_deleted(name)

    def _record(self, bank: Bank, memory_id: str) -> Memory:
        record = bank.latest(memory_id)
        if record is None:
            raise MemoryNotFound(f"{memory_id} in bank {bank.name}")
        return record

    def _existing(self, name: str, memory_id: str, caller: Caller = SYSTEM) -> tuple[Bank, Memory]:
        """The bank and the record a mutation targets; the default bank before its first write
        holds no memories (memory_not_found), any other missing bank is bank_not_found. For an
        agent's call inside a turn, another person's memory in a bank partitioned by subject is
        not there either, as for `memory::get`: it would otherwise be changed, and handed back
        whole, from someone else's conversation."""
        bank = self._readable(name)
        if bank is None:
            raise MemoryNotFound(f"{memory_id} in bank {name}")
        record = self._record(bank, memory_id)
        if self.hidden_from(bank, record, caller):
            raise MemoryNotFound(f"{memory_id} in bank {name}")
        return bank, record

    def check_speaker(self, bank: Bank, subject: str | None, caller: Caller) -> None:
        """An agent's write inside a turn makes a memory about the person speaking in it or a
        general one (seed 004: "subject = the current interlocutor"), never about someone
        else: it would evict that person's memories at their cap, or hand one of theirs back
        as the match of its text."""
        if self._someone_else(bank, subject, caller):
            raise Forbidden(
                f"inside this turn a memory is about {caller.speaker or 'no one'} or general; "
                f"not about {subject}"
            )

    def hidden_from(self, bank: Bank, record: Memory, caller: Caller) -> bool:
        """Whether `record` is another person's than the speaker of the turn `caller` acts in.
        An agent outside a turn (MCP, REST as an agent) names no one: as for its `memory::get`
        without a subject, every person's memory is hidden, the general pool is not."""
        if caller.kind is CallerKind.AGENT and not caller.in_turn:
            return record.subject is not None and self.bank_settings(bank).subject_scoping
        return self._someone_else(bank, record.subject, caller)

    def _someone_else(self, bank: Bank, subject: str | None, caller: Caller) -> bool:
        return (
            caller.kind is CallerKind.AGENT
            and caller.in_turn
            and subject is not None
            and not same_subject(subject, clean_subject(caller.speaker)[0])
            and self.bank_settings(bank).subject_scoping
        )

    def _writing_into(self, name: str, caller: Caller = SYSTEM) -> _WritingInto:
        """The bank a write goes into, created when missing. A bank this call created is announced
        once the write landed, and removed again when it did not: a failed call changes nothing.
        An automatic caller never brings a deleted bank back (the default bank excepted: it
        materializes on first use)."""
        return _WritingInto(self, name, caller)

    def _announce_created(self, bank: Bank | None) -> None:
        """`created` for `bank` if a call made it and none announced it yet: the first call that
        lands in it (or is told it exists) does, whether it made it or not; a creator whose own
        write failed left it to them."""
        if bank is not None and bank.unannounced:
            bank.unannounced = False
            self._emit_bank(BankEvent.CREATED, bank.name)

    def _emit_bank(self, event: BankEvent, name: str) -> None:
        payload = {"event_type": str(event), "bank": name, "event_id": event_id()}
        self.emitter.emit(BANK_CHANGED, payload)

    def bank_settings(self, bank: Bank) -> BankSettings:
        """What `bank` runs with: its `bank.yaml` choices over the configured defaults. Kept per
        bank while neither the settings nor the bank's overrides were replaced (both are frozen
        models: a change is a new object): every recall asks twice, and building them was a
        tenth of a small bank's recall."""
        settings, overrides = self.settings, bank.overrides
        cached = self._bank_settings.get(bank.name)
        if cached is not None and cached[0] is settings and cached[1] is overrides:
            return cached[2]
        chosen = effective(settings.bank_defaults(), overrides)
        if len(self._bank_settings) >= _BANK_SETTINGS_KEPT:
            self._bank_settings.clear()
        self._bank_settings[bank.name] = (settings, overrides, chosen)
        return chosen

    def scope_of(
        self, bank: Bank | None, subject: str | None, caller: Caller
    ) -> tuple[bool, str | None]:
        """`(scoped, subject)` of a read of `bank` for `subject`: scoped when the bank partitions
        by subject, unless a person (or consolidation, which keeps the whole bank) asks with no
        subject. An agent or another internal path that names no subject sees general memories
        only."""
        subject = clean_subject(subject)[0]
        if bank is None or not self.bank_settings(bank).subject_scoping:
            return False, subject
        if subject is None and caller.reads_whole_bank:
            return False, None
        return True, subject

    def live_in_view(self, bank: Bank, scoped: bool, subject: str | None) -> list[Memory]:
        """The live memories a read of `bank` counts (`scope_of`'s answer): within `subject`'s
        scope when `scoped`, and none past its TTL, reaped or not."""
        retention, now_ms = self.bank_settings(bank).retention, self.clock()
        return [
            m
            for m in bank.memories.values()
            if m.live
            and (not scoped or in_scope(m.subject, subject))
            and not (retention and past_ttl(m, retention, now_ms))
        ]

    def _info(self, bank: Bank | BankSummary) -> BankInfo:
        summary = self._summary(bank) if isinstance(bank, Bank) else bank
        return BankInfo(
            name=summary.name,
            description=summary.description,
            memories=summary.live,
            pinned=summary.pinned,
            rules=summary.rules,
            subjects=summary.subjects,
            settings=effective(self.settings.bank_defaults(), summary.overrides),
            settings_revision=settings_revision(summary.description, summary.overrides),
        )

    def _summary(self, bank: Bank) -> BankSummary:
        """`bank`'s summary as its reads see it: a memory past its TTL is gone, reaped or not
        (nothing is computed for a bank without retention, one pass over the index's columns
        for one with it)."""
        from memory_worker.search.ranking import expired_slots

        retention = self.bank_settings(bank).retention
        gone = expired_slots(bank.index, retention, self.clock())
        if not gone.size:
            return bank.summary()
        return bank.summary(expired=gone)

    def _counts_hold(self, summary: BankSummary) -> bool:
        """Whether a bank's summary from its counts file (`Bank.peek`) still holds: none of its
        memories can have passed its TTL since (else its bank is replayed and counted)."""
        retention = effective(self.settings.bank_defaults(), summary.overrides).retention
        if not retention:
            return True
        return summary.stated is not None and not may_have_expired(
            summary.stated, retention, self.clock()
        )

    def _carry_expired_report(self, name: str, old: Bank | None, new: Bank | None) -> None:
        """A reload replaces a bank's object, not its history: what the reaper retired in `old`
        stays listed for the next `memory::stats` of `new` (dropped with the old object, the
        consolidation sibling's count missed it), as far as the reloaded log still holds it
        retired as expired (a hand edit may have brought one back or taken it out)."""
        since = self._expired_since.get(name)
        if since is None or old is None or new is None or new is old or since[0]() is not old:
            return
        kept = [
            m
            for m in since[1]
            if (now := new.get(m.id)) is not None and not now.live and now.invalid_reason == EXPIRED
        ]
        self._expired_since[name] = (weakref.ref(new), deque(kept, maxlen=since[1].maxlen))

    def _emit_erased(self, bank: str, memory_id: str, subject: str, key: str | None) -> None:
        """One memory erased by `memory::forget-subject`: its id and whom it was about, no text
        (which is gone). `key`: the erasure's (`storage.erasure.write_intent`); the event's id
        derives from it, so an event announced again after a kill (the outbox) repeats its id."""
        self.emitter.emit(
            ITEM_CHANGED,
            {
                "event_type": str(ItemEvent.ERASED),
                "bank": bank,
                "id": memory_id,
                "subject": subject,  # who it was about (an id): their live views hear it
                # Seed 000's payload always has `memory`: a subscriber reading its id works
                # here too, and finds no text, which is gone.
                "memory": {"id": memory_id, "subject": subject},
                "reason": ERASURE_REASON,
                "event_id": erased_event_id(key, memory_id),
            },
        )

    async def _announce_late_erasures(self, bank: Bank) -> set[str]:
        """Announce what an erasure a crash or a refusing disk interrupted erased later (as
        `bank` loaded, or as it was deleted), or what one erased before its process died
        unannounced (the outbox, `storage.erasure.unannounced`): the call that started it
        failed, so nobody was told. As the call would have; returns those ids. Out of the
        outbox once sent (a failure there is logged: sent again at the next load, same ids)."""
        erased = bank.take_unannounced_erasures()
        if not erased:
            return set()
        self._erased_from_ledger(bank.name, set(erased))
        for memory_id, (subject, key) in sorted(erased.items()):
            self._emit_erased(bank.name, memory_id, subject, key)
        try:
            await asyncio.to_thread(bank.announced, erased)
        except StorageError as exc:
            log.warning("erasure_outbox_not_cleared", bank=bank.name, error=str(exc))
        return set(erased)

    async def _finish_erasures_in_trash(self, bank: str | None = None) -> None:
        """Finish and announce the erasures in deleted banks' trashed copies a kill interrupted
        (`storage.erasure.trash_intents`; at boot), or those of `bank` (just deleted):
        `ForgetUseCases`."""

    async def reload_bank(self, name: str) -> str:
        """Pick up a hand edit of bank `name`'s folder and announce what it changed, as the
        data-dir watcher does: `BankUseCases`."""
        raise NotImplementedError

    def _erased_from_ledger(self, bank: str, ids: set[str]) -> None:
        """Memories `ids` of `bank` were erased by a load (`storage.erasure.resume`, which takes
        them out of the ledger's files): out of this process's copy too (`ConversationLedger`)."""

    async def _announce_adopted(
        self,
        name: str,
        adopted: tuple[dict[str, Memory], dict[str, Memory]] | None,
        *,
        besides: Collection[str] = (),
    ) -> None:
        """Announce what a rewrite of bank `name`'s log made RAM show that it did not before
        (`Bank.take_adopted`): a hand edit the rewrite read before the watcher did, which no
        reload announces after it, as a reload would have. `besides`: ids the rewrite's own
        caller announces (an erasure's)."""
        if adopted is None:
            return
        before, after = adopted
        for event, memory in await asyncio.to_thread(hand_changes, before, after):
            if memory.id not in besides:
                self._emit_item(event, name, memory, HAND_EDIT_REASON, before.get(memory.id))

    def _emit_item(
        self,
        event: ItemEvent,
        bank: str,
        memory: Memory,
        reason: str | None,
        previous: Memory | None = None,
    ) -> None:
        """`previous`: the memory's revision before this change. When the change gave it another
        subject, the views it left hear of it too (`left_view`): the event is the new one's."""
        payload = item_event(event, bank, memory, reason)
        if previous is not None and not same_subject(previous.subject, memory.subject):
            payload[PREVIOUS_SUBJECT] = previous.subject
        self.emitter.emit(ITEM_CHANGED, payload)
