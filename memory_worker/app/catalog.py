"""The one table of public functions: id, description, request/response models, the use case that
serves it, who may call it and how it behaves.

It drives the CLI, REST, the bus registration, MCP, the golden schemas, the README table and
`iii-permissions.yaml`, so a function cannot exist in one surface and be missing from another, and
its policy is written once. `call()` is THE entry of every call, from every adapter and internal
path, carrying who is calling: a raw payload becomes a validated request here (validation errors
become `invalid_input`), so access and audit have one place to live.

Past 500 lines on purpose: the catalog is the single source of every function's metadata — its
description, policy, hints, request and response — and the one call entry; split, the table
would no longer be one place to read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

from memory_worker.app import functions, wire
from memory_worker.app.access import check_access
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput, validation_problem
from memory_worker.core.payload import check_depth
from memory_worker.core.text import collapse_whitespace

__all__ = [
    "CATALOG",
    "CONFIRM_HEADER",
    "SEAMS",
    "FunctionSpec",
    "Hints",
    "Policy",
    "SeamSpec",
    "call",
    "find",
    "json_schema",
    "render_permissions",
    "request_of",
    "respond",
    "with_confirm",
]

Method = Callable[[MemoryService, Any, Caller], Awaitable[wire.Response]]


class Policy(StrEnum):
    """Who may call a function: what `iii-permissions.yaml` says of it."""

    AGENTS = "agents"  # allowed to agents (the seed's agent set)
    APPROVAL = "approval"  # not listed: each use by an agent needs an operator's approval
    HUMANS = "humans"  # denied to agents: a human-owned surface (console, REST, CLI)
    INTERNAL = "internal"  # denied to agents: a seam the harness or a sibling drives


@dataclass(frozen=True, slots=True)
class Hints:
    """How a call behaves, for clients that decide whether to ask first (MCP tool annotations)."""

    read_only: bool = False  # changes nothing
    destructive: bool = False  # may retire, replace or trash what exists (recoverable or not)
    idempotent: bool = False  # the same call twice leaves the same state as once


READ = Hints(read_only=True, idempotent=True)
WRITE = Hints()
IDEMPOTENT_WRITE = Hints(idempotent=True)
DESTRUCTIVE = Hints(destructive=True)
IDEMPOTENT_DESTRUCTIVE = Hints(destructive=True, idempotent=True)


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    id: str
    description: str
    request: type[wire.Request]
    response: type[wire.Response]
    method: Method
    policy: Policy
    hints: Hints
    internal: bool = False

    @property
    def http_path(self) -> str:
        """`memory::rule::set` → `memory/rule/set`, as the iii http triggers name it."""
        return functions.http_path(self.id)

    @property
    def agents(self) -> bool:
        """Whether agents are allowed to call it without asking."""
        return self.policy is Policy.AGENTS


def _spec(
    function_id: str,
    description: str,
    request: type[wire.Request],
    response: type[wire.Response],
    method: Method,
    policy: Policy,
    hints: Hints,
) -> FunctionSpec:
    return FunctionSpec(function_id, description, request, response, method, policy, hints)


CATALOG: tuple[FunctionSpec, ...] = (
    _spec(
        "memory::bank::create",
        "Create a named memory bank: an isolated scope of rules and memories, e.g. one per project "
        "or persona. Idempotent; sessions select it via metadata `memory_bank`.",
        wire.BankCreateRequest,
        wire.BankCreateResponse,
        MemoryService.bank_create,
        Policy.HUMANS,
        IDEMPOTENT_WRITE,
    ),
    _spec(
        "memory::bank::list",
        "List every memory bank with memory/rule/pin counts.",
        wire.BankListRequest,
        wire.BankListResponse,
        MemoryService.bank_list,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::bank::get",
        "Show one memory bank: its counts and its effective settings (subject scoping, capacity, "
        "retention, recall blend and threshold, access, scope).",
        wire.BankGetRequest,
        wire.BankGetResponse,
        MemoryService.bank_get,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::bank::configure",
        "Change a bank's settings, kept in its bank.yaml: subject_scoping, max_memories, "
        "max_per_subject, retention (per-category TTL days), association_weights, "
        "relevance_threshold, conscious_access, scope, description. A field given sets it, one "
        "given as null returns it to the configured default, one omitted stays. Lower caps evict "
        "at the next save and a retention entry expires old memories of its category (pinned "
        "ones never), each recorded with an event.",
        wire.BankConfigureRequest,
        wire.BankConfigureResponse,
        MemoryService.bank_configure,
        Policy.HUMANS,
        IDEMPOTENT_DESTRUCTIVE,
    ),
    _spec(
        "memory::bank::delete",
        "Delete a memory bank: the folder moves to the store's .trash, recoverable by hand.",
        wire.BankDeleteRequest,
        wire.BankDeleteResponse,
        MemoryService.bank_delete,
        Policy.HUMANS,
        DESTRUCTIVE,
    ),
    _spec(
        "memory::save",
        "Save one memory explicitly. Content-fingerprinted: re-saving the same text reinforces the "
        "existing memory instead of duplicating it. Use when the user says `remember this`.",
        wire.SaveRequest,
        wire.SaveResponse,
        MemoryService.save,
        Policy.AGENTS,
        WRITE,
    ),
    _spec(
        "memory::get",
        "Fetch one memory by id, including superseded/tombstoned records.",
        wire.GetRequest,
        wire.GetResponse,
        MemoryService.get,
        Policy.AGENTS,
        READ,
    ),
    _spec(
        "memory::history",
        "Every revision of one memory as the on-disk log holds it, oldest first: its edits, pins, "
        "reinforcements and its tombstone — what changed, when, and what it said before.",
        wire.HistoryRequest,
        wire.HistoryResponse,
        MemoryService.history,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::list",
        "List a bank's memories page by page, newest first. `include_superseded` shows history "
        "too.",
        wire.ListRequest,
        wire.ListResponse,
        MemoryService.list_memories,
        Policy.AGENTS,
        READ,
    ),
    _spec(
        "memory::update",
        "Revise a memory's text, entities, or pin flag in place (same id, bumped revision; the "
        "prior revision stays in the on-disk log).",
        wire.UpdateRequest,
        wire.MemoryResponse,
        MemoryService.update,
        Policy.AGENTS,
        IDEMPOTENT_DESTRUCTIVE,
    ),
    _spec(
        "memory::delete",
        "Delete a memory (tombstone: sets invalid_at). It leaves recall immediately but stays on "
        "disk, readable with include_superseded.",
        wire.DeleteRequest,
        wire.MemoryResponse,
        MemoryService.delete,
        Policy.AGENTS,
        IDEMPOTENT_DESTRUCTIVE,
    ),
    _spec(
        "memory::pin",
        "Pin or unpin a memory. Pinned memories rank higher in recall and are untouchable by every "
        "automatic path.",
        wire.PinRequest,
        wire.MemoryResponse,
        MemoryService.pin,
        Policy.AGENTS,
        IDEMPOTENT_WRITE,
    ),
    _spec(
        "memory::supersede",
        "Retire one memory in favor of another: tombstone with a superseded_by pointer, never a "
        "plain delete. The consolidation seam; pinned memories cannot be superseded. reinforce "
        "makes it a merge (the non-pinned survivor absorbs the retired record's observations); "
        "reason is carried on the item-changed events.",
        wire.SupersedeRequest,
        wire.SupersedeResponse,
        MemoryService.supersede,
        Policy.HUMANS,
        DESTRUCTIVE,
    ),
    _spec(
        "memory::forget-subject",
        "Erase ALL memories about one subject (the right to be forgotten): every revision in the "
        "log, their vectors and the bank's trashed copies, all or nothing. Destructive and "
        'irreversible: requires confirm: "destructive" (REST: the X-Confirm: destructive '
        "header); refused while one of them is pinned. General memories are untouched; one "
        "`erased` event per id, without text.",
        wire.ForgetSubjectRequest,
        wire.ForgetSubjectResponse,
        MemoryService.forget_subject,
        Policy.HUMANS,
        IDEMPOTENT_DESTRUCTIVE,
    ),
    _spec(
        "memory::stats",
        "Memory store statistics and maintenance: live counts by category and subject, the "
        "bank's capacity and retention, and it runs the retention reaper — memories older than "
        "their category's TTL are retired (tombstones, reason `expired`, never a pinned one) and "
        "listed in expired. The consolidation sibling calls it on its schedule.",
        wire.StatsRequest,
        wire.StatsResponse,
        MemoryService.stats,
        Policy.APPROVAL,
        DESTRUCTIVE,  # the reaper retires expired memories (recoverable tombstones)
    ),
    _spec(
        "memory::tags",
        "List the tags across a bank's live memories with usage counts, most used first — the "
        "filter source for tag-scoped list/recall.",
        wire.TagsRequest,
        wire.TagsResponse,
        MemoryService.tags,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::recall",
        "Search a bank's memories relevant to a query (BM25 + entities + corroboration + recency; "
        "no LLM). The same scorer the pre-generate hook uses — call it to preview an injection. "
        "mode lexical/semantic returns one raw arm (plain BM25, or cosine).",
        wire.RecallRequest,
        wire.RecallResponse,
        MemoryService.recall,
        Policy.AGENTS,
        READ,
    ),
    _spec(
        "memory::preview",
        "Preview the memory injection for a hypothetical chat message: the exact system-prompt "
        "memory section a new session gets (rules, budgets, truncation markers; running sessions "
        "receive changes as an appended update), the memories the turn would be handed (post "
        "ambient floor and token budget), and the appended message verbatim. Runs the "
        "pre-generate hook's own code.",
        wire.PreviewRequest,
        wire.PreviewResponse,
        MemoryService.preview,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::lessons::match",
        "Match one coding-agent tool call (its tool name, arguments, working directory) against "
        "the bank's lesson cards — anchored to root-relative files, folders, whole identifiers "
        "and keyword groups; deterministic, no LLM — and return the cards that fit "
        "`lesson_hook_tokens`, best match first. With `conversation`, each lesson revision "
        "is delivered once in it. Call it before a tool runs (a PreToolUse hook).",
        wire.LessonsMatchRequest,
        wire.LessonsMatchResponse,
        MemoryService.lessons_match,
        # Not in the seed's agent set: the hooks deliver the cards themselves; an agent asking
        # for another conversation's lessons is an operator's call.
        Policy.APPROVAL,
        WRITE,  # records what a conversation was given (nothing else changes)
    ),
    _spec(
        "memory::rule::list",
        "List a bank's rules (markdown, injected whole into the system prompt on every turn). "
        "Stored as plain files under the bank's rules/ folder; editing them by hand is equivalent.",
        wire.RuleListRequest,
        wire.RuleListResponse,
        MemoryService.rule_list,
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::rule::set",
        "Create or replace one rule (atomic write; empty content removes it). Rules are plain "
        "markdown files under the bank's rules/ folder.",
        wire.RuleSetRequest,
        wire.RuleSetResponse,
        MemoryService.rule_set,
        Policy.HUMANS,
        IDEMPOTENT_DESTRUCTIVE,
    ),
    _spec(
        "memory::doctor",
        "Self-test memory end to end: data-dir writability, a scratch-bank write/read/trash "
        "roundtrip, and sibling reachability (router, session-manager). Reports degraded states "
        "explicitly, not a bare process-up health.",
        wire.DoctorRequest,
        wire.DoctorResponse,
        MemoryService.doctor,
        Policy.APPROVAL,
        IDEMPOTENT_WRITE,
    ),
    _spec(
        "memory::import",
        "Bulk import of whole memory records, history included (the format memory::export "
        "writes): validated first — one bad record rejects the import and nothing is written — "
        "then appended as one write with one fsync. For migrations between systems and banks.",
        wire.ImportRequest,
        wire.ImportResponse,
        MemoryService.import_memories,
        Policy.HUMANS,
        WRITE,
    ),
    _spec(
        "memory::export",
        "Every record of a bank's log in log order — every revision of every memory, "
        "tombstones included — in the format memory::import reads back: a whole bank, history "
        "and all, to move or back up.",
        wire.ExportRequest,
        wire.ExportResponse,
        MemoryService.export,
        # A whole bank's history at once: an operator's call for an agent, like memory::history.
        Policy.APPROVAL,
        READ,
    ),
    _spec(
        "memory::compact",
        "Rewrite a bank's log without the revisions superseded before the horizon "
        "(crash-safe: written beside the old log, checked, renamed in). Every memory keeps its "
        "latest revision or tombstone, so recall, list and get answer the same, and what it said "
        "at the horizon, so recall as_of a moment since does too; memory::history gets shorter. "
        "A log with damaged lines is refused.",
        wire.CompactRequest,
        wire.CompactResponse,
        MemoryService.compact_bank,
        Policy.HUMANS,
        IDEMPOTENT_DESTRUCTIVE,  # old revisions are gone for good; a second run drops nothing
    ),
    _spec(
        "memory::reload",
        "Drop all in-RAM state and reload every bank from disk — the recovery hatch after editing "
        "bank files by hand.",
        wire.ReloadRequest,
        wire.ReloadResponse,
        MemoryService.reload,
        Policy.HUMANS,
        IDEMPOTENT_WRITE,
    ),
)

_BY_ID: dict[str, FunctionSpec] = {spec.id: spec for spec in CATALOG}


@dataclass(frozen=True, slots=True)
class SeamSpec:
    """An internal function: invoked by the harness, the queue, a sibling or the console, never
    by `call()` (its handler is the harness's or an adapter's); denied to agents."""

    id: str
    description: str
    request: type[BaseModel]
    response: type[BaseModel]
    trace_hidden: bool = False

    @property
    def policy(self) -> Policy:
        return Policy.INTERNAL

    @property
    def internal(self) -> bool:
        return True

    @property
    def hints(self) -> Hints:
        return Hints()  # never offered as a tool: how a caller should treat it does not arise


HOOK = "memory::hook::pre-generate"
TURN_COMPLETED = "memory::on-turn-completed"
EXTRACT_JOB = "memory::extract-job"
SESSION_DELETED = "memory::on-session-deleted"
SESSION_META_UPDATED = "memory::on-session-meta-updated"
CONFIG_CHANGE = "memory::on-config-change"
UI_CONTENT = "memory::ui-content"
UI_SETTINGS = "memory::ui-settings"
HTTP = "memory::http"

# The internal seams, made at first use (`_seams`; `SEAMS` outside this module): their models
# (`app.seams`, ~4 ms of CPU to import) are the bus's and the harness's, and a one-shot CLI call,
# which imports this module for `call`, never uses them.
SEAMS: tuple[SeamSpec, ...]  # (bound by `__getattr__` below at its first read)


@cache
def _seams() -> tuple[SeamSpec, ...]:
    from memory_worker.app import seams

    return (
        SeamSpec(
            HOOK,
            "Internal: harness pre-generate hook — injects the session bank's rules into the "
            "system prompt and recalled memories as one appended message. Never denies.",
            seams.HookEnvelope,
            seams.HookResponse,
        ),
        SeamSpec(
            TURN_COMPLETED,
            "Internal: harness turn-completed handler — enqueues one durable extraction job (a "
            "single router::complete call) for the finished turn; inline fallback without a queue.",
            seams.TurnCompleted,
            seams.Ack,
        ),
        SeamSpec(
            EXTRACT_JOB,
            "Internal: queue-delivered extraction job — errors propagate so the queue retries and "
            "dead-letters instead of losing the pass.",
            seams.ExtractJob,
            seams.Ack,
        ),
        SeamSpec(
            SESSION_DELETED,
            "Internal: session::deleted handler — drops the session's extraction cursor.",
            seams.SessionDeleted,
            seams.Ack,
            trace_hidden=True,
        ),
        SeamSpec(
            SESSION_META_UPDATED,
            "Internal: session::meta-updated handler — forgets the cached session metadata, so a "
            "changed memory_bank applies from the session's next turn.",
            seams.SessionDeleted,
            seams.Ack,
            trace_hidden=True,
        ),
        SeamSpec(
            CONFIG_CHANGE,
            "Internal: hot-reload memory from the authoritative configuration when it changes — "
            "reopens the store on a data_dir change and swaps the per-call tuning snapshot "
            "otherwise.",
            seams.ConfigChanged,
            seams.ConfigAck,
            trace_hidden=True,
        ),
        SeamSpec(
            UI_CONTENT,
            "Serve the memory worker's injected console UI assets (content function for its "
            "console:script / console:style / console:module triggers).",
            seams.UiContentInput,
            seams.UiContentResult,
        ),
        SeamSpec(
            UI_SETTINGS,
            "Internal: the console page's settings panel — every configuration field with its "
            "description and effective value. Read-only: the configuration worker owns the entry.",
            seams.UiSettingsInput,
            seams.UiSettingsResult,
            trace_hidden=True,
        ),
        SeamSpec(
            HTTP,
            "Internal: REST adapter for the http worker — POST /memory/<function path> with the "
            "JSON payload; answers the result, or {error: {code, message}} with a fitting status.",
            seams.HttpEnvelope,
            seams.HttpReply,
        ),
    )


def __getattr__(name: str) -> Any:
    if name == "SEAMS":
        globals()["SEAMS"] = found = _seams()
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def find(function_id: str) -> FunctionSpec:
    spec = _BY_ID.get(function_id)
    if spec is None:
        raise InvalidInput(f"unknown function {function_id!r}; known: {', '.join(_BY_ID)}")
    return spec


def _describe(exc: ValidationError) -> str:
    return "; ".join(validation_problem(err, "payload") for err in exc.errors()[:5])


CONFIRM_HEADER = "X-Confirm"


def with_confirm(spec: FunctionSpec, payload: object, header: str | None) -> object:
    """A REST request's `X-Confirm` header as the request's `confirm` (the seed's way of saying
    "yes, destroy"); the header wins over a body field. Other functions ignore it."""
    if header is None or "confirm" not in spec.request.model_fields:
        return payload
    body = dict(payload) if isinstance(payload, Mapping) else {}
    return {**body, "confirm": header}


def check_size(request: type[wire.Request], payload: Mapping[str, Any]) -> None:
    """`check_depth` with the call's own budget: `MAX_VALUES` for the whole payload, or, for a
    request with `values_per_item`, for the rest of it and for each of those items (an export
    of a thousand memories imports back in one call; the standalone server's body cap still
    bounds what one request may carry)."""
    items = payload.get(request.values_per_item) if request.values_per_item else None
    if not isinstance(items, list):
        check_depth(payload)
        return
    check_depth({k: v for k, v in payload.items() if k != request.values_per_item})
    for item in items:
        check_depth(item, f"each of {request.values_per_item}")


def request_of(spec: FunctionSpec, payload: object) -> wire.Request:
    """`payload` validated as `spec`'s request (an already built request passes as it is)."""
    # Decoded JSON, what every adapter hands (a plain dict, never a request), skips the checks
    # of what else it could be: `isinstance` against the model's ABC-based metaclass and against
    # `Mapping` cost ~2 us of a recall's validation.
    if type(payload) is not dict:
        if isinstance(payload, spec.request):
            return payload
        if payload is None:
            payload = {}
        if not isinstance(payload, Mapping):
            raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    check_size(spec.request, payload)  # before validation, which recurses
    try:
        # `model_validate` without pydantic's Python wrapper (its keyword arguments cost ~0.7
        # µs of every call).
        request: wire.Request = spec.request.__pydantic_validator__.validate_python(payload)
        return request
    except ValidationError as exc:
        raise InvalidInput(_describe(exc)) from None


async def call(
    service: MemoryService, function_id: str, payload: object, caller: Caller = SYSTEM
) -> dict[str, Any]:
    """Validate `payload` for `function_id`, run it on behalf of `caller`, and return the
    wire-shaped result. Every adapter and internal path calls through here."""
    return (await respond(service, function_id, payload, caller)).to_wire()


async def respond(
    service: MemoryService, function_id: str, payload: object, caller: Caller = SYSTEM
) -> wire.Response:
    """`call()` with the response model instead of its wire dict (for internal callers)."""
    spec = find(function_id)
    request = request_of(spec, payload)
    named = spec.request.bank_field
    if named in spec.request.model_fields:  # its replay, if any, off the loop (`ready_bank`)
        await service.ready_bank(getattr(request, named, None), writing=not spec.hints.read_only)
    # Access levels are decided here, once, before any use case can change anything.
    check_access(
        service,
        spec.id,
        request,
        request.only_looks(spec.hints.read_only),
        caller,
        human_only=spec.policy is Policy.HUMANS,
    )
    if spec.hints.read_only or spec.id in _GO_WITH_THEIR_CALLER:
        return await spec.method(service, request, caller)
    # A write runs to its end though its caller stops waiting: its commit lands regardless, and
    # its change event and embedding must follow it.
    return await service.finished(spec.method(service, request, caller))


# Writes of what the answer alone carries, announced to no one: a caller that gave up (a hook
# past its budget) takes them with it. Run on, a lesson match would record as delivered the
# cards its hook never printed, and hold the hook's process past its budget to do so.
_GO_WITH_THEIR_CALLER = frozenset({"memory::lessons::match", "memory::doctor"})


_POLICY_NOTES: dict[Policy, str] = {
    Policy.INTERNAL: (
        "Internal seams: the harness invokes the hook, the queue delivers extraction jobs, "
        "session-manager, the configuration worker and the http worker drive the rest, and the "
        "console fetches the page assets. Never agent-callable (memory::http reaches every "
        "function: an agent allowed it would bypass this whole list)."
    ),
    Policy.HUMANS: (
        "Human-owned surfaces (console, REST, CLI): creating, configuring or trashing banks, "
        "forgetting a subject, rewriting the always-injected rules, retiring one memory for "
        "another (the consolidation seam), bulk imports, compacting a log and reloading from disk "
        "are a person's decisions, not an agent's."
    ),
    Policy.AGENTS: (
        "The agent set of the seed: recall and the memory CRUD. Every write is fingerprinted, "
        "redacted and recoverable (revisions and tombstones stay in the log)."
    ),
    Policy.APPROVAL: (
        "Not listed, so each use by an agent needs an operator's approval: read-only views the "
        "seed does not grant (bank names and counts, tags, rules, history, the injection dry "
        "run, a bank's whole export — each can show another bank than the agent's own) and "
        "doctor (it writes and trashes a scratch bank, and probes siblings)."
    ),
}


def render_permissions(specs: Sequence[FunctionSpec | SeamSpec] | None = None) -> str:
    """`iii-permissions.yaml` as the catalog decides it: denies first (first match wins), then
    the agent set; functions needing approval are named in a comment, not listed. `specs`:
    every public function and seam unless given."""
    every: Sequence[FunctionSpec | SeamSpec] = (*CATALOG, *_seams()) if specs is None else specs
    by_policy: dict[Policy, list[str]] = {policy: [] for policy in Policy}
    for spec in every:
        by_policy[spec.policy].append(spec.id)
    lines = [
        "# Agent permissions for the memory worker (first match wins).",
        "#   bare string     → allow",
        "#   '!function_id'  → deny (quoted: a bare `!` is YAML tag syntax)",
        "#   no match        → needs approval",
        "# Generated from the function catalog (`memory-worker permissions`); a test keeps this",
        "# file equal to what the catalog says. Change a function's policy there, not here.",
        "version: 1",
        "",
        "rules:",
    ]
    for policy, prefix in ((Policy.INTERNAL, "!"), (Policy.HUMANS, "!"), (Policy.AGENTS, "")):
        lines.extend(_comment(_POLICY_NOTES[policy]))
        lines.extend(
            f"  - '{prefix}{fid}'" if prefix else f"  - {fid}" for fid in by_policy[policy]
        )
    lines.extend(_comment(_POLICY_NOTES[Policy.APPROVAL]))
    lines.extend(f"  #   {fid}" for fid in by_policy[Policy.APPROVAL])
    return "\n".join(lines) + "\n"


def _comment(text: str, width: int = 96) -> list[str]:
    out, line = [], "  #"
    for word in text.split():
        if len(line) + 1 + len(word) > width:
            out.append(line)
            line = "  #"
        line += " " + word
    return [*out, line]


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Draft-07 style schema (`definitions`, `#/definitions/…`), as the published reference."""
    schema = model.model_json_schema(ref_template="#/definitions/{model}")
    if "$defs" in schema:
        schema["definitions"] = schema.pop("$defs")
    return {"$schema": "http://json-schema.org/draft-07/schema#", **_one_line(schema)}


def _one_line(node: Any) -> Any:
    """Descriptions come from wrapped docstrings; publish each on one line."""
    if isinstance(node, dict):
        return {
            key: collapse_whitespace(value)
            if key == "description" and isinstance(value, str)
            else _one_line(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_one_line(item) for item in node]
    return node
