"""Persisted and returned records.

`Memory` is serialized whole as one `memories.jsonl` line; replay is last-wins by id and
revision. Fields for later capabilities (categories, subjects, association lanes, anchors,
retention, access stats) are optional and omitted from the line when unset, so old logs keep
loading and new ones stay compact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memory_worker.core.bank_settings import BankSettings
from memory_worker.core.confidence import Confidence

__all__ = [
    "MAX_INT",
    "MAX_TIME_MS",
    "Anchors",
    "BankEvent",
    "BankInfo",
    "Confidence",
    "Hit",
    "ItemEvent",
    "Memory",
    "Provenance",
    "Rule",
    "local_datetime",
    "utc_datetime",
]


class ItemEvent(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    SUPERSEDED = "superseded"
    DELETED = "deleted"
    ERASED = "erased"  # forget-subject destroyed it: the event carries its id, never its text
    # It left a subject's view (an update or import gave it another subject): told to that subject's
    # bindings only, with its id and that subject, never its text (it is someone else's now).
    MOVED = "moved"


class BankEvent(StrEnum):
    CREATED = "created"
    TRASHED = "trashed"
    RULES_CHANGED = "rules-changed"
    COMPACTED = "compacted"  # old superseded revisions left its log (no memory changed)
    CONFIGURED = "configured"  # its description or settings changed (memory::bank::configure)


_RECORD = ConfigDict(frozen=True, extra="ignore")
# Built on first use: a one-shot save of a bank with no rule file, listing no bank, uses neither
# `Rule` nor `BankInfo` (a memory is read on every boot: `Memory` and its parts are built at once).
_DEFERRED = ConfigDict(frozen=True, extra="ignore", defer_build=True)
MAX_INT = 2**63 - 1  # timestamps and counters are u64 on the wire; Python ints are unbounded
# 9999-12-31T23:59:59.999Z, the last instant a date can be shown for: every timestamp a caller gives
# is bounded by it (records already on disk keep loading up to MAX_INT; rendering clamps them).
MAX_TIME_MS = 253_402_300_799_999


def utc_datetime(ms: int) -> datetime:
    """`ms` since the epoch as an aware UTC datetime, clamped to what a datetime can hold: a record
    written before timestamps were bounded must not fail a prompt or a listing that shows it."""
    return datetime.fromtimestamp(min(max(ms, 0), MAX_TIME_MS) / 1000, tz=UTC)


def local_datetime(ms: int) -> datetime:
    """`ms` in the process's local time zone (`TZ`, else the system's), daylight saving per
    instant: what a prompt shows the model is the person's own day and hour. In UTC, 22:30 in
    São Paulo is already tomorrow: "yesterday" said then was resolved a day late, and a memory
    saved that evening was shown dated tomorrow. Past what a local date can hold (the last
    instants of year 9999 east of Greenwich), the UTC one."""
    at = utc_datetime(ms)
    try:
        return at.astimezone()
    except (OverflowError, ValueError):
        return at


class Provenance(BaseModel):
    """Where a memory came from. Every extracted memory points back into session-manager; nothing in
    memory duplicates the transcript store."""

    model_config = _RECORD

    session_id: str | None = None
    entry_id: str | None = None
    agent: str | None = None


class Anchors(BaseModel):
    """What a lesson is about, as literals a tool call can name: root-relative files and folders,
    whole identifiers, and groups of 2-4 specific keywords that must all appear. Normalized at
    admission (`core.lessons.prepare_anchors`)."""

    model_config = _RECORD

    files: tuple[str, ...] = Field(
        default=(), description="Root-relative files (`proto/user.proto`); an exact path match."
    )
    folders: tuple[str, ...] = Field(
        default=(),
        description="Root-relative folders (`proto`); a path inside one matches, component by "
        "component (`proto2/x` is not inside `proto`).",
    )
    identifiers: tuple[str, ...] = Field(
        default=(),
        description="Whole names (`configure_bedrock`, `CLAUDE_CODE_USE_BEDROCK`), matched exactly "
        "and case-sensitively; single words are refused as too broad.",
    )
    keyword_groups: tuple[tuple[str, ...], ...] = Field(
        default=(),
        description="Groups of 2-4 specific lowercase terms, all required; a call's words come "
        "from its text and from splitting its identifiers into snake/camel words.",
    )

    def count(self) -> int:
        return (
            len(self.files) + len(self.folders) + len(self.identifiers) + len(self.keyword_groups)
        )


class Memory(BaseModel):
    """One memory item. Serialized whole as a `memories.jsonl` line; replay is last-wins by
    `id`, so an update appends a full record with a bumped `revision` and a delete appends a
    tombstoned record (`invalid_at` set) — history is never destroyed, only superseded."""

    model_config = _RECORD

    id: str = Field(
        description="Content fingerprint (`fp` + FNV-1a of the normalized text), so "
        "re-ingesting the same source reinforces instead of duplicating."
    )
    text: str
    entities: tuple[str, ...] = Field(
        default=(), description="Entity handles used as an exact-match retrieval signal."
    )
    tags: tuple[str, ...] = Field(
        default=(),
        description='Topical labels for filtering WITHIN a bank ("iii", "workers", "billing") — '
        "organization, not ranking. Normalized lowercase, capped like entities. Old records "
        "without the field load as untagged.",
    )
    confidence: Confidence
    corroboration: int = Field(
        default=0,
        ge=0,
        le=MAX_INT,
        description="Times this memory was independently re-observed. Boosts recall rank.",
    )
    pinned: bool = Field(
        default=False,
        description="Pinned memories are never touched by any automatic path (consolidation, "
        "decay); only an explicit `memory::pin`/`memory::update` changes them.",
    )
    source: Provenance | None = None
    created_at: int = Field(ge=0, le=MAX_INT, description="Milliseconds since epoch.")
    updated_at: int = Field(ge=0, le=MAX_INT)
    stated_at: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="When the fact was last STATED (created, re-observed, text edited). Unlike "
        '`updated_at`, pin/tag/entity edits never bump it, so consolidation can order "which '
        'statement is current" by it. Legacy records load as None.',
    )
    invalid_at: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Set when the memory stopped being true (superseded or deleted). The record "
        "stays on disk and remains queryable with `include_superseded: true`.",
    )
    superseded_by: str | None = Field(
        default=None, description="Memory id that replaced this one, when superseded by content."
    )
    invalid_reason: str | None = Field(
        default=None,
        description="Why an automatic path retired it: `evicted` (the bank was at its capacity) "
        "or `expired` (its category's retention). Absent for deletes and supersedes.",
    )
    revision: int = Field(
        default=0,
        ge=0,
        le=MAX_INT,
        description="Bumped on every appended revision of this id; replay keeps the highest.",
    )
    # Room for the capabilities that build on this record (C19–C23); unset means "not used".
    category: str | None = Field(
        default=None,
        description="fact, preference, procedure, context, correction or lesson (optional). A "
        "`lesson` carries `title`, `recommendation` and `anchors` and is delivered by "
        "`memory::lessons::match`, not by per-turn recall.",
    )
    subject: str | None = Field(
        default=None, description="The person this memory is about, for per-subject scoping."
    )
    context: str | None = Field(default=None, description="Conversation context at capture time.")
    intention: str | None = Field(default=None, description="What the agent was trying to do.")
    title: str | None = Field(
        default=None,
        description="A lesson's title, at most 96 UTF-8 bytes (the card's first line).",
    )
    recommendation: str | None = Field(
        default=None,
        description="A lesson's recommendation, at most 640 UTF-8 bytes: with the title, all a "
        "model is shown.",
    )
    anchors: Anchors | None = Field(
        default=None, description="Files, folders, identifiers or keyword groups it applies to."
    )
    evidence: tuple[str, ...] | None = Field(
        default=None,
        description="A lesson's evidence pointers (commit, file:line, session entry): kept with "
        "the record, never injected.",
    )
    expires_at: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Retention deadline, epoch ms."
    )
    access_count: int | None = Field(default=None, ge=0, le=MAX_INT, description="Times recalled.")
    last_accessed_at: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Last recall, epoch ms."
    )

    @property
    def live(self) -> bool:
        return self.invalid_at is None

    def live_at(self, at_ms: int) -> bool:
        """Whether the memory existed and was still true at `at_ms`."""
        return self.created_at <= at_ms and (self.invalid_at is None or self.invalid_at > at_ms)

    @property
    def last_stated_at(self) -> int:
        """When the fact was last stated; legacy records fall back to `updated_at`."""
        return self.stated_at if self.stated_at is not None else self.updated_at

    def to_line(self) -> bytes:
        """The record as one JSONL line (no trailing newline); unset optional fields are omitted."""
        # `model_dump_json(exclude_none=True).encode()` without pydantic's Python wrapper and
        # the bytes' round trip through a str (every save encodes its record).
        line: bytes = self.__pydantic_serializer__.to_json(self, exclude_none=True)
        return line

    def to_wire(self) -> dict[str, object]:
        # `model_dump(mode="json", exclude_none=True)` without its Python wrapper (every save's
        # change event holds one), as `app.wire.Response.to_wire` does.
        wired: dict[str, object] = self.__pydantic_serializer__.to_python(
            self, mode="json", exclude_none=True
        )
        return wired


def _share_instance_keys(model: type[BaseModel]) -> None:
    """Enter `model`'s field names, in field order, into the class's shared instance-dict keys,
    before any instance exists: a dict made from them holds a record's values in ~280 bytes
    instead of ~830 (`storage.log.shared_fields` keeps replayed records so). CPython stops
    adding names to that table once a few dozen instances were created without it, so this
    runs at import."""
    prototype = object.__new__(model)
    for name in model.model_fields:
        object.__setattr__(prototype, name, None)


_share_instance_keys(Memory)


class Rule(BaseModel):
    """One markdown rule: always injected whole into the system prompt for sessions using its bank.
    Stored as `rules/<name>.md` — open it in any editor."""

    model_config = _DEFERRED

    name: str
    content: str
    updated_at: int = Field(ge=0, le=MAX_INT, description="Milliseconds since epoch (file mtime).")
    revision: str = Field(
        default="",
        description="16 hex digits of the SHA-256 of the file's bytes: changes with every write, "
        "hand edits included. Pass it back as `expected_revision` to `memory::rule::set`.",
    )


class BankInfo(BaseModel):
    """Summary row for `memory::bank::list` and the console page."""

    model_config = _DEFERRED

    name: str
    description: str = ""
    memories: int = Field(ge=0, le=MAX_INT, description="Live memory (memory) count.")
    pinned: int = Field(ge=0, le=MAX_INT)
    rules: int = Field(ge=0, le=MAX_INT, description="Rule (always-injected markdown) count.")
    subjects: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Distinct subjects among live memories."
    )
    settings: BankSettings | None = Field(
        default=None,
        description="The bank's effective settings: what its bank.yaml chose (memory::bank::create "
        "or memory::bank::configure), the configured defaults for the rest.",
    )
    settings_revision: str | None = Field(
        default=None,
        description="An opaque tag of the bank's description and chosen settings (bank.yaml); "
        "it changes whenever they do, hand edits included. Give it to memory::bank::configure "
        "as `expected_settings_revision` so a change made since is not silently overwritten.",
    )


@dataclass(frozen=True, slots=True)
class Hit:
    """A memory as ranked for a query: recall's answer and what injection renders."""

    memory: Memory
    score: float
