"""The one table of public functions: id, description, request/response models, service method.

It drives the CLI, the golden schemas, the README table and (later) bus registration, so a function
cannot exist in one surface and be missing from another. `call()` is the single place a raw payload
becomes a validated request: validation errors become `invalid_input` here, for every adapter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from memory_worker.app import wire
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput
from memory_worker.core.payload import check_depth
from memory_worker.core.text import collapse_whitespace

__all__ = ["CATALOG", "FunctionSpec", "call", "find", "json_schema"]


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    id: str
    description: str
    request: type[wire.Request]
    response: type[wire.Response]
    method: Callable[[MemoryService, Any], Awaitable[wire.Response]]
    internal: bool = False

    @property
    def http_path(self) -> str:
        """`memory::rule::set` → `memory/rule/set`, as the iii http triggers name it."""
        return self.id.replace("::", "/")


def _spec(
    function_id: str,
    description: str,
    request: type[wire.Request],
    response: type[wire.Response],
    method: Callable[[MemoryService, Any], Awaitable[wire.Response]],
) -> FunctionSpec:
    return FunctionSpec(function_id, description, request, response, method)


CATALOG: tuple[FunctionSpec, ...] = (
    _spec(
        "memory::bank::create",
        "Create a named memory bank: an isolated scope of rules and memories, e.g. one per project "
        "or persona. Idempotent; sessions select it via metadata `memory_bank`.",
        wire.BankCreateRequest,
        wire.BankCreateResponse,
        MemoryService.bank_create,
    ),
    _spec(
        "memory::bank::list",
        "List every memory bank with memory/rule/pin counts.",
        wire.BankListRequest,
        wire.BankListResponse,
        MemoryService.bank_list,
    ),
    _spec(
        "memory::bank::delete",
        "Delete a memory bank: the folder moves to the store's .trash, recoverable by hand.",
        wire.BankDeleteRequest,
        wire.BankDeleteResponse,
        MemoryService.bank_delete,
    ),
    _spec(
        "memory::save",
        "Save one memory explicitly. Content-fingerprinted: re-saving the same text reinforces the "
        "existing memory instead of duplicating it. Use when the user says `remember this`.",
        wire.SaveRequest,
        wire.SaveResponse,
        MemoryService.save,
    ),
    _spec(
        "memory::get",
        "Fetch one memory by id, including superseded/tombstoned records.",
        wire.GetRequest,
        wire.GetResponse,
        MemoryService.get,
    ),
    _spec(
        "memory::list",
        "List a bank's memories page by page, newest first. `include_superseded` shows history "
        "too.",
        wire.ListRequest,
        wire.ListResponse,
        MemoryService.list_memories,
    ),
    _spec(
        "memory::update",
        "Revise a memory's text, entities, or pin flag in place (same id, bumped revision; the "
        "prior revision stays in the on-disk log).",
        wire.UpdateRequest,
        wire.MemoryResponse,
        MemoryService.update,
    ),
    _spec(
        "memory::delete",
        "Delete a memory (tombstone: sets invalid_at). It leaves recall immediately but stays on "
        "disk, readable with include_superseded.",
        wire.DeleteRequest,
        wire.MemoryResponse,
        MemoryService.delete,
    ),
    _spec(
        "memory::pin",
        "Pin or unpin a memory. Pinned memories rank higher in recall and are untouchable by every "
        "automatic path.",
        wire.PinRequest,
        wire.MemoryResponse,
        MemoryService.pin,
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
    ),
    _spec(
        "memory::tags",
        "List the tags across a bank's live memories with usage counts, most used first — the "
        "filter source for tag-scoped list/recall.",
        wire.TagsRequest,
        wire.TagsResponse,
        MemoryService.tags,
    ),
    _spec(
        "memory::recall",
        "Search a bank's memories relevant to a query (BM25 + entities + corroboration + recency; "
        "no LLM). The same scorer the pre-generate hook uses — call it to preview an injection. "
        "mode lexical/semantic returns one raw arm (plain BM25, or cosine).",
        wire.RecallRequest,
        wire.RecallResponse,
        MemoryService.recall,
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
    ),
    _spec(
        "memory::rule::list",
        "List a bank's rules (markdown, injected whole into the system prompt on every turn). "
        "Stored as plain files under the bank's rules/ folder; editing them by hand is equivalent.",
        wire.RuleListRequest,
        wire.RuleListResponse,
        MemoryService.rule_list,
    ),
    _spec(
        "memory::rule::set",
        "Create or replace one rule (atomic write; empty content removes it). Rules are plain "
        "markdown files under the bank's rules/ folder.",
        wire.RuleSetRequest,
        wire.RuleSetResponse,
        MemoryService.rule_set,
    ),
    _spec(
        "memory::doctor",
        "Self-test memory end to end: data-dir writability, a scratch-bank write/read/trash "
        "roundtrip, and sibling reachability (router, session-manager). Reports degraded states "
        "explicitly, not a bare process-up health.",
        wire.DoctorRequest,
        wire.DoctorResponse,
        MemoryService.doctor,
    ),
    _spec(
        "memory::reload",
        "Drop all in-RAM state and reload every bank from disk — the recovery hatch after editing "
        "bank files by hand.",
        wire.ReloadRequest,
        wire.ReloadResponse,
        MemoryService.reload,
    ),
)

_BY_ID: dict[str, FunctionSpec] = {spec.id: spec for spec in CATALOG}


def find(function_id: str) -> FunctionSpec:
    spec = _BY_ID.get(function_id)
    if spec is None:
        raise InvalidInput(f"unknown function {function_id!r}; known: {', '.join(_BY_ID)}")
    return spec


def _describe(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(part) for part in err["loc"]) or "payload"
        problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems)


async def call(service: MemoryService, function_id: str, payload: object) -> dict[str, Any]:
    """Validate `payload` for `function_id`, run it, and return the wire-shaped result."""
    spec = find(function_id)
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    check_depth(payload)  # before validation, which recurses
    try:
        request = spec.request.model_validate(payload)
    except ValidationError as exc:
        raise InvalidInput(_describe(exc)) from None
    response = await spec.method(service, request)
    return response.to_wire()


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
