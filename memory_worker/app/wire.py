"""Request and response models of every public function: the wire contract.

Requests accept payloads as `iii trigger k=v` builds them: unknown keys are ignored (the engine adds
`_caller_worker_id`), numbers and booleans given for text become text, and a string or a number
given for a list becomes a list (`tags=blog` → `["blog"]`, `tags=a,b` → `["a", "b"]`, `tags=2024`
→ `["2024"]`, the text of a JSON list → that list); a flag is JSON's true or false only
(`Flag`). Responses are dumped without null fields. Field names, defaults and descriptions follow
the published API reference.

Past 500 lines on purpose: every public request and response model in one place, in the
catalog's order, so the wire contract (what the golden schemas pin) reads as one document.
"""

# No `from __future__ import annotations` here: pydantic would evaluate every field's annotation
# string (a compile and an eval each) when the module loads, ~4 ms of every one-shot CLI call.
import contextlib
import functools
import math
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictInt,
    model_validator,
)

from memory_worker.core import payload
from memory_worker.core.bank_settings import AssociationWeights, ConsciousAccess, Scope
from memory_worker.core.errors import InvalidInput
from memory_worker.core.models import MAX_INT, MAX_TIME_MS, BankInfo, Memory, Rule
from memory_worker.core.subjects import same_subject
from memory_worker.search.modes import RecallMode

__all__ = [
    "AnchorsInput",
    "BankConfigureRequest",
    "BankConfigureResponse",
    "BankCreateRequest",
    "BankCreateResponse",
    "BankDeleteRequest",
    "BankDeleteResponse",
    "BankGetRequest",
    "BankGetResponse",
    "BankListRequest",
    "BankListResponse",
    "BankSettingsFields",
    "Checked",
    "CompactRequest",
    "CompactResponse",
    "DeleteRequest",
    "DoctorCheck",
    "DoctorRequest",
    "DoctorResponse",
    "ExportRequest",
    "ExportResponse",
    "Flag",
    "ForgetSubjectRequest",
    "ForgetSubjectResponse",
    "GetRequest",
    "GetResponse",
    "HistoryRequest",
    "HistoryResponse",
    "ImportRequest",
    "ImportResponse",
    "ImportRule",
    "LessonCard",
    "LessonsMatchRequest",
    "LessonsMatchResponse",
    "ListRequest",
    "ListResponse",
    "MemoryResponse",
    "PinRequest",
    "PreviewMemory",
    "PreviewRequest",
    "PreviewResponse",
    "RecallRequest",
    "RecallResponse",
    "ReloadRequest",
    "ReloadResponse",
    "Request",
    "Response",
    "RuleListRequest",
    "RuleListResponse",
    "RuleSetRequest",
    "RuleSetResponse",
    "SaveRequest",
    "SaveResponse",
    "ScoredMemory",
    "StatsRequest",
    "StatsResponse",
    "SupersedeRequest",
    "SupersedeResponse",
    "TagCount",
    "TagsRequest",
    "TagsResponse",
]


def _scalar_to_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and Infinity are not text (nor JSON)")
    if isinstance(value, int | float):
        return str(value)
    return value


_MAX_LISTED = 1000  # `tags=a,b,…`: more parts than this is an attack, refused before splitting


def _json_list(value: str) -> list[Any] | None:
    """The list `value` is the JSON text of, else None (text to read otherwise). A model fills
    a list parameter with a string, as a client that shows it a nullable list as a string asks:
    split at its commas, it made the tags `["x"` and `"y"]`."""
    if value.lstrip().startswith("[") and value.rstrip().endswith("]"):
        with contextlib.suppress(InvalidInput):
            decoded = payload.loads(value, "list")
            if isinstance(decoded, list):
                if len(decoded) > _MAX_LISTED:
                    raise ValueError(f"at most {_MAX_LISTED} values")
                return decoded
    return None


def _text_to_list(value: Any) -> Any:
    if isinstance(value, str):
        # A JSON list's text is that list; other text is split as before.
        listed = _json_list(value)
        if listed is not None:
            return listed
        if value.count(",") >= _MAX_LISTED:
            raise ValueError(f"at most {_MAX_LISTED} comma-separated values")
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, bool | int | float):
        # `tags=2024` as `iii trigger` decodes it: one value, as text (like `text=42`).
        return [_scalar_to_text(value)]
    return value


def _blank_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def _words_to_list(value: Any) -> Any:
    if isinstance(value, str):
        # A group as a JSON list's text (`'["helm", "tabs"]'`) is that list, as at `_text_to_list`:
        # split at its spaces, its terms `["helm",` and `"tabs"]` were refused as no words.
        listed = _json_list(value)
        if listed is not None:
            return listed
        return [part for part in value.replace(",", " ").split() if part]
    return value


def _text_to_groups(value: Any) -> Any:
    """Keyword groups given as a JSON list's text are that list (other text is left for the
    field's own check to refuse)."""
    if isinstance(value, str):
        listed = _json_list(value)
        return value if listed is None else listed
    return value


def _json_object(value: Any) -> Any:
    """A JSON object given as its text (OpenAI's `function.arguments`, a model filling an object
    parameter with a string) is that object; decoded within the payload bounds, and anything
    else left for the field's own check to refuse."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            decoded = payload.loads(value, "arguments")
        except InvalidInput:
            return value
        return decoded if isinstance(decoded, dict) else value
    return value


Text = Annotated[str, BeforeValidator(_scalar_to_text)]
TextList = Annotated[list[Text], BeforeValidator(_text_to_list)]
# A number is a name too (`bank=2024`), as it is for `memory::bank::create name=2024`.
BankName = Annotated[str | None, BeforeValidator(_scalar_to_text), BeforeValidator(_blank_to_none)]
# A request's flag is JSON's true or false only (seed 000 types them `boolean`): pydantic's lax mode
# read `pinned: "yes"` and `1` as true and `"no"` as false. `iii trigger pinned=true` decodes the
# value as JSON, so the command line still says true.
Flag = Annotated[bool, Strict()]
# A keyword group: a list of terms, or one string of them ("bedrock region" / "bedrock,region").
Group = Annotated[list[Text], BeforeValidator(_words_to_list)]

_CONTEXT = (
    "Association lane (C21): the conversation the memory was formed in, a short summary or the "
    "recent window (at most 1000 characters; redacted like text). Recall finds it by the "
    "situation as well as by what it says."
)
_INTENTION = (
    "Association lane (C21): what the person was trying to do when it came up (at most 300 "
    "characters; redacted like text)."
)
_BANK = "Bank; omitted: the calling session's bank, else the configured default."
_FOR_SUBJECT = (
    "Who the call is for (the person speaking, a stable id such as a handle). With the bank's "
    "subject_scoping on, only general memories and this subject's own are seen; omitted: general "
    "memories only (a person's own call — CLI, REST, console — sees every subject). With "
    "subject_scoping off it is ignored."
)


def _for_subject() -> Any:
    return Field(default=None, description=_FOR_SUBJECT)


_EXPECTED = (
    "Optimistic concurrency: the revision the caller last read. When the memory has moved on "
    "since, the call fails with `conflict: stale revision …` and changes nothing; omitted: no "
    "check."
)


def _expected_revision() -> Any:
    return Field(default=None, ge=0, le=MAX_INT, description=_EXPECTED)


# Every model is built (its core schema, validator and serializer) on first use, not at import:
# a one-shot CLI call uses a handful of the ~80 and would otherwise pay for building them all.
_DEFERRED = ConfigDict(defer_build=True)


class Checked(BaseModel):
    """What a caller writes, read by the rules every request follows: a number is not true or
    false, and seed 004's `subject_type`/`subject_id` pair is the `subject`. A request, and a
    record of `memory::import` (which takes `subject` and numbers as a save does)."""

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """`limit=true` (as `iii trigger` decodes it) names no number: pydantic would read it as
        1. A number field given true or false is refused (a model-level check: the fields keep
        their JSON schema)."""
        if isinstance(data, dict):
            for name in _number_fields(cls):
                if isinstance(data.get(name), bool):
                    raise ValueError(f"{name}: must be a number, not true or false")
        return data

    @model_validator(mode="before")
    @classmethod
    def _subject_pair(cls, data: Any) -> Any:
        """Seed 004 names who a memory is about by `subject_type` and `subject_id`; this worker
        by `subject`. The pair is read as the subject `<type>:<id>` rather than dropped with
        other unknown keys: dropped, a save meant for one person landed in the general pool,
        seen by everyone in a scoped bank. Half a pair, or a pair and a `subject` naming another,
        is refused (seed 004's `MEMORY_SUBJECT_INCOMPLETE`)."""
        if not isinstance(data, dict) or "subject" not in cls.model_fields:
            return data
        kind, ident = data.get("subject_type"), data.get("subject_id")
        if kind is None and ident is None:
            return data
        if kind is None or ident is None:
            raise ValueError("subject: subject_type and subject_id must be provided together")
        parts = []
        for name, value in (("subject_type", kind), ("subject_id", ident)):
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ValueError(f"subject: {name} must be a string or a whole number")
            if not str(value).strip():  # a blank half names no one: "member:" is nobody's
                raise ValueError("subject: subject_type and subject_id must be provided together")
            parts.append(str(value))
        named = ":".join(parts)
        given = data.get("subject")
        # Compared as subjects are everywhere (caseless, NFC, trimmed as `clean_subject` does):
        # "Member:42" beside member/42 is the same person, not a clash.
        if given is not None and not (
            isinstance(given, str) and same_subject(given.strip(), named.strip())
        ):
            raise ValueError(
                f"subject: {data['subject']!r} and subject_type/subject_id ({named!r}) name "
                "different subjects"
            )
        return {**data, "subject": named}


class Request(Checked):
    model_config = ConfigDict(extra="ignore", frozen=True, **_DEFERRED)
    # The field naming the bank the call works on, if the request has it (the default bank when
    # it is omitted): the catalog replays that bank off the loop first (`ready_bank`).
    bank_field: ClassVar[str] = "bank"
    # A list field whose items are each held to `payload.MAX_VALUES` instead of the whole call
    # (`catalog.check_size`): an import carries as many records as the file it came from.
    values_per_item: ClassVar[str | None] = None

    def only_looks(self, read_only: bool) -> bool:
        """Whether this call changes nothing, given the catalog's hint for its function
        (`read_only`): an access level's finer answer for a request whose fields decide it."""
        return read_only


@functools.cache
def _number_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` that hold a number (`int`, `float`, or either `| None`): a float is
    no more a flag than an int (`relevance_threshold=true` would read as 1.0)."""
    return tuple(
        name
        for name, field in model.model_fields.items()
        if field.annotation in (int, float) or field.annotation in (int | None, float | None)
    )


class Response(BaseModel):
    model_config = ConfigDict(frozen=True, **_DEFERRED)

    def to_wire(self) -> dict[str, Any]:
        # `model_dump(mode="json", exclude_none=True)` without pydantic's Python wrapper around
        # the serializer (~4 us of a recall's ~20 us serializing ten memories).
        wired: dict[str, Any] = self.__pydantic_serializer__.to_python(
            self, mode="json", exclude_none=True
        )
        return wired


# --- banks -----------------------------------------------------------------------------------


class BankSettingsFields(Request):
    """The per-bank settings a request may choose; omitted: the configured default."""

    subject_scoping: Flag | None = Field(
        default=None,
        description="Partition memories by who they are about: recall, injection, list, tags and "
        "preview for a subject surface general memories plus that subject's own.",
    )
    max_memories: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Live memories kept (0 = unlimited); at the cap a new memory evicts the "
        "least-accessed, oldest non-pinned one (recorded, an event).",
    )
    max_per_subject: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Per-subject cap with subject_scoping on (0 = unlimited).",
    )
    retention: dict[str, StrictInt] | None = Field(
        default=None,
        description="Per-category TTL in days, e.g. `{context: 30}`; categories without an entry "
        "never expire. Replaces the whole mapping.",
    )
    association_weights: AssociationWeights | None = Field(
        default=None, description="Recall's content / context / intention blend weights."
    )
    relevance_threshold: float | None = Field(
        default=None, ge=0, le=1, description="Minimum blended similarity for recall (0 to 1)."
    )
    conscious_access: ConsciousAccess | None = Field(
        default=None, description="Memory tools agents get: none, read, read_write."
    )
    scope: Scope | None = Field(
        default=None, description="Declared sharing intent: private or shared."
    )


class BankCreateRequest(BankSettingsFields):
    bank_field: ClassVar[str] = "name"
    name: Text = Field(
        description="Bank name, `[a-z0-9][a-z0-9_-]{0,63}` (it becomes a folder name)."
    )
    description: Text | None = Field(
        default=None, description="Human description shown in listings and the console."
    )


class BankCreateResponse(Response):
    bank: BankInfo
    created: bool = Field(description="False when the bank already existed (create is idempotent).")
    redacted: list[str] = Field(
        default_factory=list,
        description="Labels of secrets redacted from the description before it was stored.",
    )


class BankListRequest(Request):
    pass


class BankListResponse(Response):
    banks: list[BankInfo]


class BankGetRequest(Request):
    bank_field: ClassVar[str] = "name"
    name: Text = Field(description="The bank to show.")


class BankGetResponse(Response):
    bank: BankInfo


class BankConfigureRequest(BankSettingsFields):
    bank_field: ClassVar[str] = "name"
    name: Text = Field(description="The bank to configure (it must exist).")
    description: Text | None = Field(
        default=None, description="A new human description; omitted: unchanged."
    )
    expected_settings_revision: Text | None = Field(
        default=None,
        description="The bank's `settings_revision` as the caller last read it: the change "
        "applies only if the description and settings are still what that read showed "
        "(`conflict` otherwise, nothing changed). Omitted: no check.",
    )


class BankConfigureResponse(Response):
    bank: BankInfo = Field(description="The bank with its settings after the change.")
    changed: list[str] = Field(
        description="The settings whose effective value changed (empty: the call changed nothing)."
    )
    redacted: list[str] = Field(
        default_factory=list,
        description="Labels of secrets redacted from the description before it was stored.",
    )


class BankDeleteRequest(Request):
    bank_field: ClassVar[str] = "name"
    name: Text


class BankDeleteResponse(Response):
    ok: bool
    trashed_to: str = Field(
        description="Where the bank folder was moved (under the store's `.trash/`)."
    )


# --- memories --------------------------------------------------------------------------------


class AnchorsInput(BaseModel):
    """A lesson's anchors as a request gives them; checked and normalized at admission. Unknown
    keys are refused (a misspelt `file` would silently anchor nothing)."""

    model_config = ConfigDict(extra="forbid", frozen=True, **_DEFERRED)

    files: TextList = Field(
        default_factory=list,
        description="Root-relative files (`proto/user.proto`): the strongest anchor (score 1000).",
    )
    folders: TextList = Field(
        default_factory=list,
        description="Root-relative folders (`proto`): any path inside one matches (score 800).",
    )
    identifiers: TextList = Field(
        default_factory=list,
        description="Whole compound names (`configure_bedrock`, `CLAUDE_CODE_USE_BEDROCK`), "
        "case-sensitive (score 700).",
    )
    keyword_groups: Annotated[list[Group], BeforeValidator(_text_to_groups)] = Field(
        default_factory=list,
        description="Groups of 2-4 specific terms that must ALL appear in a tool call (score "
        "500); a single broad word never matches.",
    )


# A lesson's anchors, or their JSON text (a model filling the object parameter with a string).
Anchors = Annotated[AnchorsInput | None, BeforeValidator(_json_object)]


class SaveRequest(Request):
    bank: BankName = Field(
        default=None,
        description="Target bank; omitted: the calling session's bank, else the configured "
        "default.",
    )
    text: Text = Field(description="The memory, one self-contained sentence.")
    # The seed's schema states these defaults (`[]`); a factory's default is left out of the
    # published schema, so it is written there by hand.
    entities: TextList = Field(
        default_factory=list,
        description="Entity handles (people/projects/tools) used as a retrieval signal.",
        json_schema_extra={"default": []},
    )
    tags: TextList = Field(
        default_factory=list,
        description="Topical labels for filtering within the bank (organization, not ranking).",
        json_schema_extra={"default": []},
    )
    pinned: Flag = False
    session_id: Text | None = Field(
        default=None, description="Provenance session, when saved on behalf of a conversation."
    )
    subject: Text | None = Field(
        default=None,
        description="Who the memory is about (a stable id such as a person's handle); omitted: a "
        "general memory. The same text about another subject is another memory.",
    )
    category: Text | None = Field(
        default=None,
        description="fact, preference, procedure, context, correction or lesson. A `lesson` needs "
        "`title`, `recommendation` and `anchors`, and is delivered by `memory::lessons::match` "
        "(not by per-turn recall).",
    )
    title: Text | None = Field(
        default=None,
        description="A lesson's title, one line of at most 96 UTF-8 bytes: with the "
        "recommendation, the card a model is shown.",
    )
    recommendation: Text | None = Field(
        default=None,
        description="A lesson's advice, at most 640 UTF-8 bytes. Name files and identifiers, not "
        "line numbers (they go stale; keep positions in `evidence`).",
    )
    anchors: Anchors = Field(
        default=None, description="The files, folders, identifiers and keyword groups it is about."
    )
    evidence: TextList = Field(
        default_factory=list,
        description="A lesson's evidence pointers (commit, file:line, session entry): stored, "
        "never injected.",
    )
    context: Text | None = Field(default=None, description=_CONTEXT)
    intention: Text | None = Field(default=None, description=_INTENTION)


class SaveResponse(Response):
    memory: Memory
    created: bool = Field(
        description="False when the text fingerprint matched an existing memory (it was "
        "reinforced instead)."
    )
    redacted: list[str] = Field(
        default_factory=list,
        description="Labels of secrets redacted from the input before it was stored (never the "
        "values).",
    )
    evicted: list[str] | None = Field(
        default=None,
        description="Ids of the memories this save evicted at the bank's capacity (each "
        "tombstoned with `invalid_reason: evicted`, kept in its history). Absent when none.",
    )


class GetRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text
    subject: Text | None = _for_subject()


class GetResponse(Response):
    memory: Memory


class ListRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    include_superseded: Flag | None = Field(
        default=None, description="Include superseded/tombstoned records (the history view)."
    )
    limit: int | None = Field(
        default=None, ge=0, le=MAX_INT, description="Page size, default 50, max 500."
    )
    offset: int | None = Field(default=None, ge=0, le=MAX_INT)
    tag: Text | None = Field(default=None, description="Only memories carrying this tag.")
    category: Text | None = Field(
        default=None,
        description="Only memories of this category (`lesson` lists the lessons; `fact` includes "
        "memories saved without one).",
    )
    subject: Text | None = _for_subject()


class ListResponse(Response):
    memories: list[Memory]
    total: int = Field(ge=0, le=MAX_INT)


class UpdateRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text
    text: Text | None = None
    entities: TextList | None = None
    tags: TextList | None = Field(
        default=None, description="Replace the tag set (empty list clears)."
    )
    pinned: Flag | None = None
    subject: Text | None = Field(
        default=None,
        description="Who the memory is about from now on; an empty string makes it general; "
        "omitted: unchanged.",
    )
    category: Text | None = Field(
        default=None,
        description="A new category (fact, preference, procedure, context, correction); omitted: "
        "unchanged. A lesson stays a lesson.",
    )
    expected_revision: int | None = _expected_revision()
    title: Text | None = Field(default=None, description="A lesson's new title.")
    recommendation: Text | None = Field(default=None, description="A lesson's new recommendation.")
    anchors: Anchors = Field(
        default=None, description="A lesson's new anchors (replace the old ones whole)."
    )
    evidence: TextList | None = Field(
        default=None, description="A lesson's evidence pointers (replace; empty list clears)."
    )
    context: Text | None = Field(default=None, description=_CONTEXT + " Replaces the old one.")
    intention: Text | None = Field(default=None, description=_INTENTION + " Replaces the old one.")


class MemoryResponse(Response):
    """Shared response for update/delete/pin."""

    memory: Memory
    redacted: list[str] = Field(
        default_factory=list,
        description="Labels of secrets redacted from an update's input (never the values).",
    )


class DeleteRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text
    expected_revision: int | None = _expected_revision()


class PinRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text
    pinned: Flag
    expected_revision: int | None = _expected_revision()


class SupersedeRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text = Field(description="Memory to retire.")
    superseded_by: Text = Field(description="Live memory that replaces it.")
    reason: Text | None = Field(
        default=None,
        description="Why — carried on the `memory::item-changed` events this call emits (not "
        "persisted on the record). Trimmed, capped at 500 chars.",
    )
    reinforce: Flag = Field(
        default=False,
        description="Merge semantics: the survivor absorbs the retired record's observations "
        "(corroboration += retired + 1) in the same call. A pinned survivor is never written. "
        "Default false (a state change: the new record replaces the old, nothing to absorb).",
    )
    expected_revision: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Optimistic concurrency on the memory to retire (`id`): the revision the "
        "caller last read; when it has moved on, the call fails with `conflict: stale revision "
        "…` and changes nothing. Omitted: no check.",
    )
    expected_winner_revision: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="The same check on the memory that replaces it (`superseded_by`): a merge "
        "planned on what the survivor said is refused with `conflict: stale revision …` once "
        "the survivor was edited, and changes nothing. Omitted: no check.",
    )


class SupersedeResponse(Response):
    memory: Memory = Field(description="The retired record.")
    reinforced: bool = Field(
        description="True when the survivor was reinforced (`reinforce` asked and the survivor is "
        "not pinned)."
    )


class HistoryRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    id: Text = Field(description="The memory whose revisions to return.")


class HistoryResponse(Response):
    bank: str
    id: str
    revisions: list[Memory] = Field(
        description="Every revision of the memory as the log holds it, oldest first: edits, pins, "
        "reinforcements, the tombstone of a delete or a supersede (a compaction may have dropped "
        "old superseded revisions)."
    )


class ForgetSubjectRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    subject: Text = Field(description="Who to forget: every memory about this subject is erased.")
    confirm: Text | None = Field(
        default=None,
        description='Must be "destructive": the erasure cannot be undone (REST: the `X-Confirm: '
        "destructive` header).",
    )


class ForgetSubjectResponse(Response):
    bank: str
    subject: str
    erased: list[str] = Field(
        description="Ids of the memories erased: every revision, vector and trashed copy is gone."
    )
    trash_copies: int = Field(
        ge=0, le=MAX_INT, description="Trashed copies of the bank that held memories about them."
    )
    damaged_dropped: int = Field(
        ge=0,
        le=MAX_INT,
        description="Unreadable log lines dropped with them (what cannot be read cannot be shown "
        "not to be theirs).",
    )


class StatsRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)

    def only_looks(self, read_only: bool) -> bool:
        """Seed 004: "stats | Auth: Read". Its reaper retires only memories past their TTL,
        which every read already hides (and reaps): a `read` agent may count the bank."""
        return True


class StatsResponse(Response):
    bank: str
    memories: int = Field(ge=0, le=MAX_INT, description="Live memories after the reaper ran.")
    pinned: int = Field(ge=0, le=MAX_INT)
    by_category: dict[str, int] = Field(
        description="Live memories per category (`fact` includes those saved without one)."
    )
    by_subject: dict[str, int] = Field(description="Live memories per subject.")
    general: int = Field(ge=0, le=MAX_INT, description="Live memories about no one in particular.")
    max_memories: int = Field(ge=0, le=MAX_INT, description="The bank's cap (0 = unlimited).")
    max_per_subject: int = Field(
        ge=0, le=MAX_INT, description="The per-subject cap with scoping on (0 = unlimited)."
    )
    retention: dict[str, int] = Field(description="TTL days per category (absent: never).")
    expired: list[str] = Field(
        description="Ids the retention reaper retired since the bank's last stats call: this "
        "call's sweep, and what reads, saves or the boot retired meanwhile (tombstones with "
        "invalid_reason `expired`)."
    )


class TagsRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    subject: Text | None = _for_subject()


class TagCount(Response):
    tag: str
    count: int = Field(ge=0, le=MAX_INT)


class TagsResponse(Response):
    bank: str
    tags: list[TagCount]


# --- recall and preview ----------------------------------------------------------------------


class RecallRequest(Request):
    bank: BankName = Field(
        default=None,
        description="Bank to search; omitted: the calling session's bank, else the configured "
        "default.",
    )
    query: Text
    limit: int | None = Field(
        default=None,
        ge=0,
        le=MAX_INT,
        description="Max memories returned (default: the configured recall_limit).",
    )
    mode: RecallMode = Field(
        default=RecallMode.HYBRID,
        description="`hybrid` (default) is the fused scorer the hook uses. `lexical` and "
        "`semantic` return ONE raw arm (plain BM25, or cosine as the score) for callers that fuse "
        "arms themselves — consolidation interleaves both so a near-duplicate is never buried by "
        "the fused rank.",
    )
    tag: Text | None = Field(default=None, description="Only rank memories carrying this tag.")
    category: Text | None = Field(
        default=None,
        description="Only rank memories of this category (`fact` includes memories saved "
        "without one).",
    )
    subject: Text | None = _for_subject()
    include_superseded: Flag | None = Field(
        default=None, description="Also rank superseded/tombstoned records (the history view)."
    )
    as_of: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TIME_MS,
        description="Epoch ms: rank as if now were then, over the memories that were live then "
        "(created before it, not yet invalid at it).",
    )
    context: Text | None = Field(
        default=None,
        description="The current conversation window (hybrid only): compared with each "
        "memory's stored `context`, weighted by the bank's `association_weights`.",
    )
    intention: Text | None = Field(
        default=None,
        description="The current turn's goal (hybrid only): compared with each memory's stored "
        "`intention`, weighted by the bank's `association_weights`.",
    )


class ScoredMemory(Response):
    memory: Memory
    score: float


class RecallResponse(Response):
    bank: str
    memories: list[ScoredMemory]
    retrieval: str = Field(
        description="Retrieval mode actually used — degradation is explicit, never silent. "
        "`hybrid`: `bm25-entity`, or `bm25-entity-semantic` when the query was embedded through "
        "`router::embed`. `lexical`: `lexical`. `semantic`: `semantic`, or `semantic-unavailable` "
        '(empty result — NOT "no matches") when the query could not be embedded.'
    )


class PreviewRequest(Request):
    bank: BankName = Field(
        default=None,
        description="Bank to preview; omitted: the calling session's bank, else the configured "
        "default.",
    )
    query: Text = Field(
        description="The hypothetical user message (what someone would type in chat)."
    )
    subject: Text | None = Field(
        default=None,
        description="Who would be speaking (the turn's `memory_subject`): with subject_scoping on, "
        "the preview shows what a turn of theirs gets; omitted: a turn with no known speaker "
        "(general memories only).",
    )
    context: Text | None = Field(
        default=None,
        description="The conversation window the turn would be in, for the association lanes "
        "(the hook passes the recent messages); omitted: the message alone, as on a "
        "conversation's first turn. The message is the turn's goal (`intention`), as in the hook.",
    )
    conversation: Text | None = Field(
        default=None,
        description="The conversation this turn is in (a coding agent's hook passes its session "
        "id): memories already handed to it at their current revision are left out of "
        "`message`, as a turn's window that still holds them would, and the ones handed now are "
        "recorded. Omitted: a dry run that records nothing.",
    )
    fresh: Flag = Field(
        default=False,
        description="With `conversation`: its context was just reset (a compaction, a /clear), so "
        "the memories it was handed before are forgotten first (its lesson cards are not: a "
        "compaction does not reset their once per conversation).",
    )
    max_chars: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT,
        description="The most characters `system_prompt_section` and `message` may each hold, "
        "within the configured budgets (a coding agent's hook: Claude Code shows the model only "
        "a preview of a hook's context past 10,000 characters). What does not fit is left out "
        "as over those budgets, and is not recorded as handed.",
    )

    def only_looks(self, read_only: bool) -> bool:
        """With a conversation, what it is handed is recorded: more than `read` allows."""
        return read_only and not (self.conversation or "").strip()


class PreviewMemory(Response):
    memory: Memory
    score: float = Field(description="Recall score; 0.0 for memories added by the ambient floor.")


class PreviewResponse(Response):
    bank: str
    system_prompt_section: str = Field(
        description="The memory section appended to the system prompt (ambient header + rules), "
        "exactly as injected — truncation markers included."
    )
    rules: int = Field(
        ge=0,
        le=MAX_INT,
        description="Rules included, and whether any were cut by `max_rule_chars`.",
    )
    rules_truncated: bool
    memories: list[PreviewMemory] = Field(
        description="Memories the turn would be handed, post ambient floor and token budget, in "
        "injection order."
    )
    message: str | None = Field(
        default=None,
        description="The appended `<memory>` message body, verbatim; absent when no memory fits "
        "the budget.",
    )
    retrieval: str = Field(
        description="Retrieval mode that ran (`bm25-entity` or `bm25-entity-semantic`; `none` when "
        "memories are not injected)."
    )


# --- lessons ---------------------------------------------------------------------------------


class LessonsMatchRequest(Request):
    bank: BankName = Field(default=None, description=_BANK)
    tool: Text = Field(
        description="The tool's name as the agent calls it (`Read`, `Bash`, `shell::fs::read`)."
    )
    arguments: Annotated[dict[str, Any], BeforeValidator(_json_object)] = Field(
        default_factory=dict,
        description="The tool call's arguments as the agent sent them (`file_path`, `path`, "
        "`command`, `pattern`, …); paths, shell commands, patches and text are read from them.",
    )
    cwd: Text | None = Field(
        default=None,
        description="The tool's working directory (absolute, or relative to the workspace root).",
    )
    workspace_root: Text | None = Field(
        default=None,
        description="Absolute path anchors are relative to; omitted: `cwd`.",
    )
    conversation: Text | None = Field(
        default=None,
        description="Deliver each lesson revision once in this conversation (a session id): cards "
        "already delivered are left out and the new ones are recorded. Omitted: nothing is "
        "recorded and every matching card is returned.",
    )
    step: Text | None = Field(
        default=None,
        description="The step (or tool call id) this delivery belongs to: the same conversation "
        "and step asked again (a retry) gets the same cards again.",
    )
    max_chars: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT,
        description="The most characters `message` may hold, within `lesson_hook_tokens` "
        "(a coding agent's hook: Claude Code shows the model only a preview of a hook's context "
        "past 10,000 characters). A card that does not fit stays eligible, as over that budget.",
    )

    def only_looks(self, read_only: bool) -> bool:
        """Without a conversation nothing is recorded: a match that `read` allows."""
        return read_only or not (self.conversation or "").strip()


class LessonCard(Response):
    id: str
    revision: int = Field(ge=0, le=MAX_INT)
    title: str
    recommendation: str
    score: int = Field(
        ge=0, le=MAX_INT, description="1000 file, 800 folder, 700 identifier, 500 keyword group."
    )
    matched: str = Field(description="The anchor that matched, e.g. `file proto/user.proto`.")


class LessonsMatchResponse(Response):
    bank: str
    cards: list[LessonCard] = Field(
        description="The cards delivered now: score descending, then id, complete cards within "
        "`lesson_hook_tokens`."
    )
    message: str | None = Field(
        default=None,
        description="The `<memory lessons=…>` text carrying them, verbatim; absent when no card.",
    )
    matched: int = Field(ge=0, le=MAX_INT, description="Cards the call matched at all.")
    already_delivered: int = Field(
        ge=0, le=MAX_INT, description="Matched cards this conversation was already given."
    )
    withheld: int = Field(
        ge=0,
        le=MAX_INT,
        description="Matched, undelivered cards that did not fit the budget: still eligible.",
    )
    paths: list[str] = Field(
        description="The root-relative paths read from the call (what it was matched on)."
    )


# --- rules -----------------------------------------------------------------------------------


class RuleListRequest(Request):
    bank: BankName = Field(
        default=None,
        description="Bank whose rules to list; omitted: the calling session's bank, else the "
        "configured default.",
    )


class RuleListResponse(Response):
    bank: str
    rules: list[Rule]


class RuleSetRequest(Request):
    bank: BankName = Field(
        default=None,
        description="Bank to write into; omitted: the calling session's bank, else the configured "
        "default. Created on first use.",
    )
    name: Text = Field(
        description="Rule name, `[a-z0-9][a-z0-9_-]{0,63}` (it becomes `<name>.md`)."
    )
    content: Text = Field(description="Markdown content. Empty removes the rule.")
    expected_revision: str | None = Field(
        default=None,
        description="Optimistic concurrency: the rule's `revision` as the caller last read it "
        "(`memory::rule::list`), or an empty string for a rule that must not exist yet. When the "
        "file says otherwise — another writer, or a hand edit — the call fails with `conflict: "
        "stale revision …` and changes nothing. Omitted: no check.",
    )


class RuleSetResponse(Response):
    ok: bool
    exists: bool = Field(description="False when the empty content removed the rule.")
    revision: str | None = Field(
        default=None, description="The rule's revision after the write (absent once removed)."
    )
    redacted: list[str] = Field(
        default_factory=list,
        description="Labels of secrets redacted from the content before it was written.",
    )


# --- operations ------------------------------------------------------------------------------


class DoctorRequest(Request):
    pass


class DoctorCheck(Response):
    name: str
    ok: bool
    detail: str
    required: bool = Field(
        default=False, description="Whether this check counts toward `ok` (else advisory)."
    )


class DoctorResponse(Response):
    ok: bool = Field(
        description="True only when every REQUIRED check passed (sibling reachability is reported "
        "but advisory)."
    )
    checks: list[DoctorCheck]


class ReloadRequest(Request):
    pass


class ReloadResponse(Response):
    ok: bool
    banks: int = Field(ge=0, le=MAX_INT)


# --- moving records ---------------------------------------------------------------------------


class ImportRule(BaseModel):
    """One rule carried by an export (its other fields, revision and time, are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Text
    content: Text


class ImportRequest(Request):
    values_per_item: ClassVar[str | None] = "records"
    bank: Text = Field(description="Bank to import into (created when missing).")
    records: list[dict[str, Any]] = Field(
        description="Whole memory records, history included, as `memory::export` writes them "
        "(`text`; optional `id`, `entities`, `tags`, `pinned`, `confidence`, `corroboration`, "
        "`source`, `created_at`/`updated_at`/`stated_at`/`invalid_at` in epoch ms, "
        "`superseded_by`, `revision`, lesson fields). Every record is validated first: one bad "
        "record rejects the import and nothing is written."
    )
    dry_run: Flag = Field(
        default=False,
        description="Validate every record and write nothing (a client sending an import in "
        "several requests checks them all first).",
    )
    # What an export carries besides the records (all optional: an import of records alone, an
    # older export's, is unchanged). Checked with the records, before anything is written.
    description: Text | None = Field(
        default=None,
        description="The bank's description, as memory::export writes it: given to the bank when "
        "this import creates it; a bank that exists keeps its own (`kept_settings`).",
    )
    settings: dict[str, Any] | None = Field(
        default=None,
        description="The settings the bank chose (its bank.yaml: subject_scoping, max_memories, "
        "conscious_access, …), as memory::export writes them: the bank is created with them; "
        "a bank that exists keeps its own (`kept_settings` names those that differ).",
    )
    rules: list[ImportRule] | None = Field(
        default=None,
        description="The bank's rules ({name, content}), as memory::export writes them: each one "
        "the bank lacks is written; one it holds with other content is left as it is "
        "(`kept_rules`), never overwritten.",
    )


class ImportResponse(Response):
    bank: str
    imported: int = Field(ge=0, le=MAX_INT, description="Records written (one write, one fsync).")
    live: int = Field(
        ge=0, le=MAX_INT, description="Of those, the ones now live (latest revision, not retired)."
    )
    redacted: int = Field(
        ge=0, le=MAX_INT, description="Records in which a secret was replaced by a marker."
    )
    rules_written: list[str] | None = Field(
        default=None, description="The carried rules this import wrote (the bank lacked them)."
    )
    kept_rules: list[str] | None = Field(
        default=None,
        description="Carried rules the bank already holds with other content: left as they were.",
    )
    kept_settings: list[str] | None = Field(
        default=None,
        description="Carried settings (and `description`) the existing bank has otherwise: its "
        "own were kept. Change them with memory::bank::configure.",
    )


class ExportRequest(Request):
    bank: BankName = Field(
        default=None, description="Bank to export; omitted: the configured default."
    )


class ExportResponse(Response):
    bank: str
    records: list[Memory] = Field(
        description="Every record of the bank's log in log order — every revision of every "
        "memory, tombstones included — in the format `memory::import` reads back."
    )
    # A bank moves with its rules and settings: `memory::import` takes these three back.
    description: str | None = Field(default=None, description="The bank's description.")
    settings: dict[str, Any] | None = Field(
        default=None,
        description="The settings the bank chose (its bank.yaml); the others follow the "
        "configuration, on the importing side too.",
    )
    rules: list[Rule] | None = Field(default=None, description="The bank's rules, every one.")


class CompactRequest(Request):
    bank: Text = Field(description="Bank whose log to compact.")
    horizon_days: float = Field(
        default=30.0,
        ge=0,
        le=36_500,
        description="Keep every revision written within this many days; 0 keeps only the latest "
        "revision (or tombstone) of each memory.",
    )


class CompactResponse(Response):
    bank: str
    lines_before: int = Field(ge=0, le=MAX_INT)
    lines_after: int = Field(ge=0, le=MAX_INT)
    bytes_before: int = Field(ge=0, le=MAX_INT)
    bytes_after: int = Field(ge=0, le=MAX_INT)
    damaged_dropped: int = Field(
        ge=0, le=MAX_INT, description="Unreadable lines not carried over (never, unless asked)."
    )
