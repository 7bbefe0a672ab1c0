"""The memory functions as an MCP server (the official `mcp` SDK, its low-level `Server`): over
stdio (`memory-worker mcp`) and as streamable HTTP at `/mcp` and `/mcp/<bank>` on the standalone
server.

- Tools come from the catalog, nothing is written twice: by default the functions agents may call
  (`spec.agents`), with `--tools approval` also those an operator approves per use. Each tool's
  name is its REST path with `_` (`memory::save` → `memory_save`: MCP names allow no `:`), its
  description and input/output schemas the catalog's (the golden schemas' source; a schema's
  definitions written out where they are used: some clients resolve no `$ref`), its
  read-only / destructive / idempotent annotations the catalog's hints.
- Models guess argument names: `q` or `text` for `query`, `memory_id` for `id`, `k` for
  `limit`, camelCase for snake_case, … (`ALIASES`) are read as the real field when that field was
  not given and the guess is not itself a field of the request. An optional argument sent as
  `null` where its schema admits none is left unset (clients over function-calling frameworks
  send every optional argument they did not fill as `null`).
- Every call is `catalog.call` through a door (`adapters.doors`) on behalf of an agent
  (`Caller.for_agent("mcp")`). A failure is a tool error (`isError`) whose text is our
  `code: message`, with no structured content (it would have to fit the tool's output schema).
- A pinned bank (`--bank`, `/mcp/<bank>`) leaves the field naming the bank (`bank`, or `name` for
  the `bank::*` tools: `Request.bank_field`) out of the schemas and fills it in; a call naming
  another bank is refused (`invalid_input`), never served from the other bank, and the tools that
  name no bank but look at all of them (`bank::list`, `doctor`) are not offered. Its tool list
  follows the bank's `conscious_access`: none at `none`, the read-only tools at `read`.
- A request holding a lone surrogate escape (`"\\ud800"`), which the SDK cannot decode, is
  answered here as every door answers such text: `invalid_input` (a tool error for a tool call).
  Over stdio, lines the SDK drops unanswered (not JSON, not JSON-RPC) get JSON-RPC's errors.
- A request whose id is not one (`null`, `true`, `1.5`: JSON-RPC ids are strings or integers)
  is JSON-RPC's Invalid Request (`-32600`, `id: null`), over stdio and HTTP: the SDK read it as a
  notification and answered nothing, so the client waited for good. So is any JSON that is no
  JSON-RPC message (a bare value, an object without `jsonrpc`, an empty array): over HTTP the SDK
  said `-32602` with pydantic's report, the client's input echoed in it (`_refusal`).
- A JSON-RPC batch (an array of messages), which the SDK reads as none, is served where the
  version admits one: 2025-03-26 made receiving batches a MUST (2024-11-05 is plain JSON-RPC 2.0,
  batches included), 2025-06-18 took them out. Each message is answered as it would be alone, the
  answers sent together as one array (nothing for notifications only); over stdio the version is
  the session's, over HTTP the `MCP-Protocol-Version` header's (none: 2025-03-26, as the spec
  says). Under a later version a batch is an Invalid Request.
- Over stdio the end of stdin waits for the requests already read to be answered (the SDK
  cancelled them): a client that closes stdin after its last request still gets its answers.
- HTTP runs stateless with JSON responses (every POST is answered on its own, nothing is kept per
  client: no `Mcp-Session-Id` is given, one sent is not looked at; the GET stream of server-sent
  messages and the DELETE that ends a session are 405, as there are neither): it sits behind the
  standalone server's own access checks like every other route.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import io
import json
import re
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as types
import pydantic
from aiohttp import web
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.message import SessionMessage

from memory_worker.adapters.doors import Door
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import FunctionSpec, Policy
from memory_worker.core.errors import InvalidInput, WorkerError
from memory_worker.core.names import check_name
from memory_worker.storage.logger import get_logger

__all__ = [
    "ALIASES",
    "MAX_BATCH_MESSAGES",
    "SERVER_NAME",
    "McpHttp",
    "McpTools",
    "build_server",
    "serve_stdio",
    "tool_name",
]

log = get_logger(__name__)

SERVER_NAME = "memory-worker"
INSTRUCTIONS = (
    "Durable memory across sessions. Recall before answering questions about the user, their "
    "projects or past decisions (memory_recall); save a self-contained fact when the user asks "
    "you to remember something or states a lasting preference (memory_save). Facts about the "
    'person read "The user …".'
)
# Argument names models reach for, by the field they mean (only where unambiguous).
ALIASES: dict[str, tuple[str, ...]] = {
    "query": ("q", "text", "search", "question", "prompt", "message", "query_text"),
    "text": ("content", "memory", "fact", "note", "value"),
    "id": ("memory_id", "mid", "key"),
    "limit": ("k", "top_k", "n", "max_results", "count", "size"),
    "tags": ("tag", "labels", "label"),
    # The filter of list and recall, one tag: `tags` as save names it was dropped unread.
    "tag": ("tags", "label", "labels"),
    "entities": ("entity",),
    "bank": ("bank_name", "namespace", "memory_bank"),
    "pinned": ("pin",),
    "superseded_by": ("by", "winner"),
}
_GUESSES = frozenset(alias for aliases in ALIASES.values() for alias in aliases)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STATE_BANK = "memory_bank"  # the ASGI scope state key the HTTP route sets for `/mcp/<bank>`
_STATE_CALLER = "memory_caller"

DoorFor = Callable[[Caller], AbstractAsyncContextManager[Door]]


def tool_name(spec: FunctionSpec) -> str:
    return spec.http_path.replace("/", "_")


def _offered(tools: str) -> tuple[FunctionSpec, ...]:
    if tools == "agents":
        return tuple(spec for spec in catalog.CATALOG if spec.agents)
    if tools == "approval":
        allowed = (Policy.AGENTS, Policy.APPROVAL)
        return tuple(spec for spec in catalog.CATALOG if spec.policy in allowed)
    raise InvalidInput(f"tools must be agents or approval, not {tools!r}")


def _inlined(node: Any, definitions: Mapping[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """`node` with each `{"$ref": "#/definitions/X"}` replaced by X itself (its sibling keys
    kept). MCP clients that never resolve a reference (GitHub Copilot CLI, LM Studio, …) could
    neither build nor check an argument typed by one. A recursive model keeps its reference."""
    if isinstance(node, list):
        return [_inlined(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    name = ref.removeprefix("#/definitions/") if isinstance(ref, str) else None
    if name is not None and name in definitions and name not in seen:
        rest = {k: _inlined(v, definitions, seen) for k, v in node.items() if k != "$ref"}
        return {**_inlined(definitions[name], definitions, (*seen, name)), **rest}
    return {k: _inlined(v, definitions, seen) for k, v in node.items()}


def _self_contained(model: Any) -> dict[str, Any]:
    """`model`'s catalog schema with its definitions written out where they are used."""
    schema = catalog.json_schema(model)
    definitions = schema.pop("definitions", None)
    if definitions:
        schema = _inlined(schema, definitions)
        if "$ref" in json.dumps(schema):  # a recursive model: its references need their targets
            schema["definitions"] = definitions
    return schema


def _schema(spec: FunctionSpec, model: Any, *, pinned: bool) -> dict[str, Any]:
    schema = _self_contained(model)
    named = spec.request.bank_field
    if pinned and named in schema.get("properties", {}):
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k != named}
        if "required" in schema:
            schema["required"] = [k for k in schema["required"] if k != named]
    return schema


def _serves(spec: FunctionSpec, pinned: str | None) -> bool:
    """Whether a tool is offered where `pinned` is the one bank served: only those that name
    their bank (which is then filled in), never one that looks at every bank."""
    return pinned is None or spec.request.bank_field in spec.request.model_fields


def _title(spec: FunctionSpec) -> str:
    return spec.id.removeprefix("memory::").replace("::", " ").replace("-", " ").capitalize()


def _tool(spec: FunctionSpec, *, pinned: bool) -> types.Tool:
    hints = spec.hints
    return types.Tool(
        name=tool_name(spec),
        title=_title(spec),
        description=spec.description,
        input_schema=_schema(spec, spec.request, pinned=pinned),
        # Written out too: a client that checks results against it resolves no `$ref` either.
        output_schema=_self_contained(spec.response),
        annotations=types.ToolAnnotations(
            title=_title(spec),
            read_only_hint=hints.read_only,
            # The spec reads destructive/idempotent only when a tool is not read-only.
            destructive_hint=None if hints.read_only else hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=False,  # a bank on this machine, nothing beyond it
        ),
    )


def _admits_null(schema: Mapping[str, Any]) -> bool:
    """Whether a property's schema admits `null` (one with no type at all, or a reference, is
    taken to: its null is passed on)."""
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    branches = [s for key in ("anyOf", "oneOf") for s in schema.get(key, ())]
    if kind is None and not branches and "enum" not in schema:
        return True
    return None in schema.get("enum", ()) or any(_admits_null(s) for s in branches)


@functools.cache
def _null_is_unset(request: type[pydantic.BaseModel]) -> frozenset[str]:
    """The optional fields whose advertised schema admits no null (a required one's null is
    refused as every door refuses it)."""
    schema = _self_contained(request)
    required = set(schema.get("required", ()))
    return frozenset(
        name
        for name, prop in schema.get("properties", {}).items()
        if name not in required and not _admits_null(prop)
    )


@functools.cache
def _flags(request: type[pydantic.BaseModel]) -> frozenset[str]:
    """The fields whose advertised schema is a boolean (or a boolean or null)."""
    schema = _self_contained(request)
    return frozenset(
        name
        for name, prop in schema.get("properties", {}).items()
        if ({prop.get("type")} | {s.get("type") for s in prop.get("anyOf", ())}) - {None, "null"}
        == {"boolean"}
    )


# A flag a model wrote as text: a client that shows a nullable field (`anyOf` boolean or null) to
# the model as a string (Codex's schema lowering), or a framework filling parameters with text,
# sends `"true"`. Only JSON's two words: `"yes"` or `1` stays refused, as at every door.
_FLAG_WORDS = {"true": True, "false": False}


def forgiving(spec: FunctionSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` with the names models guess read as the request's own fields, a flag written
    as the text `"true"`/`"false"` read as that flag, and a `null` an optional field's schema
    does not admit read as the argument left unset: clients over function-calling frameworks
    (CrewAI's, LangChain's adapters) send every optional argument they did not fill as `null`,
    and every such call was refused."""
    fields = set(spec.request.model_fields)
    unset = _null_is_unset(spec.request)
    flags = _flags(spec.request)
    args: dict[str, Any] = {}
    for key, value in arguments.items():
        name = key if key in fields else _CAMEL.sub("_", key).lower()
        if value is None and (name in unset or (name not in fields and name in _GUESSES)):
            continue
        args[name] = value
    for field, aliases in ALIASES.items():
        if field not in fields or field in args:
            continue
        for alias in aliases:
            if alias in args and alias not in fields:
                args[field] = args.pop(alias)
                break
    for name in flags & args.keys():  # after the aliases: `pin: "true"` is a flag too
        if isinstance(args[name], str):
            args[name] = _FLAG_WORDS.get(args[name].strip().lower(), args[name])
    return args


def _ok(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
    )


def _failed(err: WorkerError) -> types.CallToolResult:
    # Text alone, no `structuredContent`: a client checks any structured content against the
    # tool's `outputSchema`, an error's too (the TypeScript SDK's: Claude Code, the Inspector),
    # and `{"error": …}` fits none, so it threw a schema mismatch in place of our `code: message`.
    return types.CallToolResult(content=[types.TextContent(text=str(err))], is_error=True)


class McpTools:
    """The tool list and the tool calls, over doors opened per call (`door_for(caller)`)."""

    def __init__(self, door_for: DoorFor, *, tools: str = "agents", bank: str | None = None):
        self._door_for = door_for
        self.specs = _offered(tools)
        self._by_name = {tool_name(spec): spec for spec in self.specs}
        self.bank = check_name(bank, "bank") if bank else None
        self.calls = 0
        # The tools as listed, for an endpoint with a pinned bank (True) and without: the
        # catalog's schemas do not change while the server runs, and building them all took
        # ~75 ms, paid by every `tools/list` (each stateless HTTP client session asks).
        self._listed: dict[bool, list[types.Tool]] = {}

    def __repr__(self) -> str:
        return f"<McpTools tools={len(self.specs)} bank={self.bank!r} calls={self.calls}>"

    def list(self, *, bank: str | None = None) -> list[types.Tool]:
        pinned = (bank or self.bank) is not None
        listed = self._listed.get(pinned)
        if listed is None:
            # `_serves` asks only whether a bank is pinned, not which.
            chosen = bank or self.bank
            listed = [_tool(spec, pinned=pinned) for spec in self.specs if _serves(spec, chosen)]
            self._listed[pinned] = listed
        return list(listed)

    async def offered(
        self, *, bank: str | None = None, caller: Caller | None = None
    ) -> Sequence[types.Tool]:
        """`list`, held to a pinned bank's `conscious_access` (seed 004: `none` gives the agent
        no memory tools, `read` the ones that change nothing). Asked of the bank itself; when it
        cannot say (not made yet, unreachable) every tool is listed — each call is held to the
        level anyway."""
        tools = self.list(bank=bank)
        pinned = bank or self.bank
        if pinned is None:
            return tools
        try:
            async with self._door_for(caller or Caller.for_agent("mcp")) as door:
                found = await door.call("memory::bank::get", {"name": pinned})
            level = found["bank"]["settings"]["conscious_access"]
        except WorkerError as err:
            if err.code != "forbidden":
                return tools
            level = "none"  # the bank refuses the agent even a look at itself
        except (KeyError, TypeError):
            return tools
        if level == "none":
            return []
        if level == "read":
            return [t for t in tools if t.annotations is not None and t.annotations.read_only_hint]
        return tools

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        bank: str | None = None,
        caller: Caller | None = None,
    ) -> types.CallToolResult:
        self.calls += 1
        try:
            spec = self._by_name.get(name)
            if spec is None:
                # The tools `tools/list` gives this endpoint (a pinned bank's level holds them),
                # not the catalog's: a name offered here must not be refused in turn.
                offered = await self.offered(bank=bank, caller=caller)
                names = ", ".join(tool.name for tool in offered) or "none"
                raise InvalidInput(f"unknown tool {name!r}; tools: {names}")
            payload = forgiving(spec, arguments or {})
            pinned = bank or self.bank
            if not _serves(spec, pinned):
                raise InvalidInput(f"this MCP endpoint serves bank {pinned} only: no {name}")
            named = spec.request.bank_field
            if pinned is not None:
                given = payload.get(named)
                if isinstance(given, int) and not isinstance(given, bool):
                    given = str(given)  # bank 2024 sent as a number names it, as everywhere
                if given not in (None, "", pinned):
                    raise InvalidInput(f"this MCP endpoint serves bank {pinned} only, not {given}")
                payload[named] = pinned
            async with self._door_for(caller or Caller.for_agent("mcp")) as door:
                result = await door.call(spec.id, payload)
        except WorkerError as err:
            log.info("mcp_tool_failed", tool=name, error=str(err))
            return _failed(err)
        except Exception:
            # Not one of ours (a bug, an unmapped OS error): still the tool's failure, coded as
            # REST codes it (`internal`, no detail leaked), never a JSON-RPC protocol error.
            incident = uuid.uuid4().hex[:12]
            log.exception("mcp_tool_crashed", tool=name, incident=incident)
            return _failed(
                WorkerError(f"unexpected error (incident {incident}); the details are in the log")
            )
        return _ok(result)


def _request_state(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, Any]:
    request = ctx.request
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    return state if isinstance(state, dict) else {}


def build_server(tools: McpTools, *, version: str = "") -> Server[Any]:
    """The low-level MCP server over `tools`; over HTTP the route's pinned bank and caller
    arrive in the request's ASGI state."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        state = _request_state(ctx)
        offered = await tools.offered(bank=state.get(_STATE_BANK), caller=state.get(_STATE_CALLER))
        return types.ListToolsResult(tools=list(offered))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        state = _request_state(ctx)
        return await tools.call(
            params.name,
            params.arguments,
            bank=state.get(_STATE_BANK),
            caller=state.get(_STATE_CALLER),
        )

    return Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _has_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _rpc_error(request_id: Any, code: int, message: str) -> SessionMessage:
    error = types.ErrorData(code=code, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


_NOT_JSON_RPC = "Invalid request: not a JSON-RPC message"


def _refusal(body: bytes) -> bytes:
    """The SDK's 400 answer `body` as it was, unless it refused a message that is JSON but no
    JSON-RPC message (no `jsonrpc`, neither a method nor a result, params that are not an
    object): its `-32602 Validation error: …` held pydantic's report, the client's own input
    echoed in it. That one is JSON-RPC's Invalid Request, as stdio answers it."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    error = answer.get("error") if isinstance(answer, dict) else None
    if (
        not isinstance(error, dict)
        or error.get("code") != types.INVALID_PARAMS
        or not str(error.get("message", "")).startswith("Validation error:")
    ):
        return body
    invalid = _rpc_error(None, types.INVALID_REQUEST, _NOT_JSON_RPC).message
    return json.dumps(invalid.model_dump(by_alias=True, mode="json", exclude_unset=True)).encode()


def _undecodable_answer(exc: Exception) -> SessionMessage | None:
    """The answer to a stdio line the SDK could not decode (it hands the transport's exception
    over and answers nothing, so the client waits for good), or None when none is due.

    A lone surrogate escape (`"\\ud800"`: a JavaScript string cut inside an emoji) is valid JSON
    text the SDK's decoder refuses: the request is answered `invalid_input`, as every other door
    answers such text, a tool call as a tool error. Other lines are answered as JSON-RPC 2.0
    says: a parse error, or an invalid request, with the request's id when it can be read (null
    when not); a notification is never answered."""
    if not isinstance(exc, pydantic.ValidationError):
        return None
    invalid = next((e for e in exc.errors() if e["type"] == "json_invalid"), None)
    line = invalid["input"] if invalid is not None else None
    if invalid is None or not isinstance(line, (str, bytes)):  # JSON, but not JSON-RPC
        log.info("mcp_stdio_invalid_request", error=str(exc.errors()[0]["msg"])[:200])
        return _rpc_error(None, types.INVALID_REQUEST, _NOT_JSON_RPC)
    # The decoder's own words, as the SDK answers a parse error over HTTP.
    error = f"Parse error: {invalid.get('ctx', {}).get('error') or invalid['msg']}"[:300]
    try:
        message = json.loads(line)  # Python's decoder reads a lone surrogate escape as one
    except (ValueError, RecursionError):
        message = None
    if not isinstance(message, dict):
        log.info("mcp_stdio_unparsable", size=len(line), error=error)
        return _rpc_error(None, types.PARSE_ERROR, error)
    if "id" not in message:
        return None  # a notification: never answered
    if not _has_surrogate(message):  # a number past the decoder's range, NaN: not our JSON
        log.info("mcp_stdio_unparsable", size=len(line), error=error)
        return _rpc_error(_request_id(message), types.PARSE_ERROR, error)
    return SessionMessage(_surrogate_answer(message))


def _valid_id(given: Any) -> bool:
    """Whether `given` is a request id: a string or an integer (MCP forbids null, JSON-RPC 2.0
    a boolean, and a number with a fraction is none the SDK reads)."""
    return isinstance(given, (int, str)) and not isinstance(given, bool)


def _bad_id_request(message: Any) -> bool:
    """Whether `message` is a request (it has a method and an id) whose id is not one: the SDK
    takes it for a notification (no answer is ever due), JSON-RPC for an Invalid Request."""
    return (
        isinstance(message, dict)
        and "method" in message
        and "id" in message
        and not _valid_id(message["id"])
    )


def _bad_id_answer(message: Mapping[str, Any]) -> SessionMessage:
    log.info("mcp_request_bad_id", method=str(message.get("method"))[:64])
    return _rpc_error(
        None, types.INVALID_REQUEST, "Invalid request: the id must be a string or an integer"
    )


def _request_id(message: Mapping[str, Any]) -> Any:
    """The id to answer `message` with: JSON-RPC's null id for an id that is not one, or that
    holds a lone surrogate itself (it has no UTF-8 form to echo back)."""
    given = message.get("id")
    return given if _valid_id(given) and not _has_surrogate(given) else None


def _surrogate_answer(message: Mapping[str, Any]) -> types.JSONRPCResponse | types.JSONRPCError:
    """The answer to a request holding a lone surrogate (`message`, as Python's decoder read
    it): `invalid_input`, a tool error for a tool call, a JSON-RPC error otherwise."""
    request_id = _request_id(message)
    err = InvalidInput("the request contains invalid Unicode (a lone surrogate)")
    log.info("mcp_request_undecodable", method=str(message.get("method"))[:64], error=str(err))
    if message.get("method") == "tools/call" and request_id is not None:
        result = _failed(err).model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    error = types.ErrorData(code=types.INVALID_PARAMS, message=str(err))
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def _surrogate_request(body: bytes) -> dict[str, Any] | None:
    """The request an HTTP `body` holds when it holds a lone surrogate escape (which the SDK's
    decoder refuses as a parse error), else None."""
    if b"\\u" not in body:  # no escape at all: the common case costs one scan
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, dict) and "id" in message and _has_surrogate(message):
        return message
    return None


# A body is decoded here only when an `"id"` key's value is not plainly a string or an integer
# (or a `\\u` escape may spell the key): the SDK decodes every body, a call should not pay twice.
_ODD_ID = re.compile(rb'"id"\s*:\s*(?!"|-?[0-9]+\s*[,}])')


def _bad_id_body(body: bytes) -> dict[str, Any] | None:
    """The request an HTTP `body` holds when its id is not one (`_bad_id_request`), else None."""
    if b"\\u" not in body and _ODD_ID.search(body) is None:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return message if _bad_id_request(message) else None


class _Unowned(io.TextIOWrapper):
    """Text over sys.stdin's buffer that leaves the buffer open when it is closed (or collected):
    the buffer is sys.stdin's, not the transport's."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class _Recorded(anyio.AsyncFile[str]):
    """stdin as the SDK reads it (UTF-8, undecodable bytes replaced), each line it reads also
    put in `lines`: the SDK hands over one message (or exception) per line, in order, so
    `_Answering` takes the line of each message off the front and can tell a notification from a
    request the SDK read as one (its id not being an id)."""

    def __init__(self, lines: collections.deque[str]) -> None:
        super().__init__(_Unowned(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        self.lines = lines

    async def readline(self) -> str:
        line = await super().readline()
        if line:  # "" is the end of the stream, which the SDK reads as no message
            self.lines.append(line)
        return line


def _notification_answer(line: str) -> SessionMessage | None:
    """The answer to a line the SDK read as a notification, or None when it is one: a request
    whose id is not one (`null`, `true`, `1.5`) is an Invalid Request."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return _bad_id_answer(message) if _bad_id_request(message) else None


# How long the end of stdin waits for the requests still being served (`_Answering._drain`).
STDIN_DRAIN_S = 60.0


def _id_key(request_id: Any) -> Any:
    """A request id as the SDK correlates it (a cancellation's `"7"` is request 7)."""
    if isinstance(request_id, str):
        with contextlib.suppress(ValueError):
            return int(request_id)
    return request_id


class _Watched:
    """The stdio transport's write stream, telling `answered` the id of each answer sent, each
    item first through `outgoing` (what to write for it: None holds it back)."""

    def __init__(
        self,
        inner: Any,
        answered: Callable[[Any], None],
        outgoing: Callable[[Any], Any] = lambda item: item,
    ) -> None:
        self._inner = inner
        self._answered = answered
        self._outgoing = outgoing

    async def send(self, item: Any) -> None:
        try:
            out = self._outgoing(item)
            if out is not None:
                await self._inner.send(out)
        finally:  # sent, or never to be: nothing more to wait for
            message = getattr(item, "message", None)
            if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                self._answered(message.id)

    def __getattr__(self, name: str) -> Any:  # the rest of the stream as it is
        return getattr(self._inner, name)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# The versions whose sessions may send a batch: 2025-03-26 made receiving one a MUST (and
# 2024-11-05 is JSON-RPC 2.0's, batches included); 2025-06-18 took them out.
_BATCH_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})
# The most messages a batch may hold: clients batch a handful, and each message costs a request's
# work (~0.5 ms for a ping), so a 1 MiB body of `[1,1,…]` held the server for minutes.
MAX_BATCH_MESSAGES = 256
_TOO_LONG = f"Invalid request: a batch holds at most {MAX_BATCH_MESSAGES} messages"
_Answer = types.JSONRPCResponse | types.JSONRPCError


class _BatchAnswer(pydantic.RootModel[list[_Answer]]):
    """A batch's answers as one message: the stdio writer writes its `model_dump_json`."""


class _Batch:
    """A batch line's answers in its order, written as one line once each of its requests has
    its own (`answer`); a request cancelled by the client takes no place (`drop`)."""

    def __init__(self) -> None:
        self.answers: list[_Answer | None] = []
        self._pending: dict[Any, int] = {}

    def ready(self, answer: _Answer) -> None:
        self.answers.append(answer)

    def expect(self, request_id: Any) -> None:
        self._pending[_id_key(request_id)] = len(self.answers)
        self.answers.append(None)

    def holds(self, request_id: Any) -> bool:
        return _id_key(request_id) in self._pending

    def answer(self, answer: _Answer) -> None:
        self.answers[self._pending.pop(_id_key(answer.id))] = answer

    def drop(self, request_id: Any) -> None:
        self._pending.pop(_id_key(request_id), None)

    @property
    def done(self) -> bool:
        return not self._pending

    def line(self) -> SessionMessage | None:
        """The batch's answer once it is `done`, None before (or with nothing to say)."""
        if self._pending:
            return None
        answers = [a for a in self.answers if a is not None]
        # Not one JSON-RPC message but a list of them: the writer only dumps it.
        return SessionMessage(_BatchAnswer(answers)) if answers else None  # type: ignore[arg-type]


def _batch_messages(elements: list[Any]) -> tuple[list[SessionMessage], _Batch]:
    """A batch's elements read as the SDK reads a line each, the messages to pass on, and the
    batch expecting their requests' answers (an element answered here is already in it)."""
    batch, passed = _Batch(), []
    for element in elements:
        text = json.dumps(element)  # ASCII: a lone surrogate stays the escape the SDK refuses
        try:
            message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except pydantic.ValidationError as exc:
            answer = _undecodable_answer(exc)
            if answer is not None:
                batch.ready(answer.message)  # type: ignore[arg-type]
            continue
        if isinstance(message, types.JSONRPCNotification):
            invalid = _notification_answer(text)
            if invalid is not None:
                batch.ready(invalid.message)  # type: ignore[arg-type]
                continue
        elif isinstance(message, types.JSONRPCRequest):
            batch.expect(message.id)
        passed.append(SessionMessage(message))
    return passed, batch


class _Answering:
    """The stdio transport's read stream, answering itself the lines the SDK could not decode
    (`_undecodable_answer`) or read as a notification though they are requests with an id that
    is not one (`_notification_answer`, given the lines read: `_Recorded`), and passing
    everything else on as it came.

    The end of stdin is passed on only once every request passed on was answered (`writer`
    sees the answers) or cancelled by the client, for at most `drain_s`: the SDK cancels the
    calls still in flight when its read stream ends, so a client that closed stdin after its
    last request (a pipe) had its saves dropped and read `Connection closed`."""

    def __init__(
        self,
        inner: Any,
        write: Any,
        lines: collections.deque[str] | None = None,
        *,
        drain_s: float = STDIN_DRAIN_S,
    ):
        self._inner = inner
        self._write = write
        self._lines = lines
        self._drain_s = drain_s
        self._unanswered: set[Any] = set()
        self._settled = anyio.Event()
        self.writer = _Watched(write, self._answered, self._outgoing)
        self.version: str | None = None  # the protocol version the session negotiated
        self._initializing: set[Any] = set()
        self._queued: collections.deque[SessionMessage] = collections.deque()  # a batch's
        self._batches: list[_Batch] = []

    def _answered(self, request_id: Any) -> None:
        self._unanswered.discard(_id_key(request_id))
        self._settled.set()

    def _track(self, item: Any) -> SessionMessage | None:
        """Note a request passed on; a batch's answer when a cancellation completes it."""
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, types.JSONRPCRequest):
            self._unanswered.add(_id_key(message.id))
            if message.method == "initialize":
                self._initializing.add(_id_key(message.id))
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
        ):  # a request the client cancelled is never answered
            cancelled = message.params.get("requestId")
            if isinstance(cancelled, (int, str)):  # (anything else names no request)
                self._answered(cancelled)
                batch = next((b for b in self._batches if b.holds(cancelled)), None)
                if batch is not None:
                    batch.drop(cancelled)
                    return self._settle(batch)
        return None

    def _settle(self, batch: _Batch) -> SessionMessage | None:
        """The line to write for `batch` once it is done (it is then forgotten), else None."""
        if not batch.done:
            return None
        self._batches.remove(batch)
        return batch.line()

    def _outgoing(self, item: Any) -> Any:
        """What to write for `item`: the answer to a batch's request is held until the batch's
        last (its line is then written); the answer to `initialize` says the version."""
        message = getattr(item, "message", None)
        if not isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            return item
        if _id_key(message.id) in self._initializing and isinstance(message, types.JSONRPCResponse):
            self._initializing.discard(_id_key(message.id))
            version = message.result.get("protocolVersion")
            self.version = version if isinstance(version, str) else None
        batch = next((b for b in self._batches if b.holds(message.id)), None)
        if batch is None:
            return item
        batch.answer(message)
        return self._settle(batch)

    def _batch(self, line: str | None) -> list[Any] | None:
        """The elements of a batch `line` holds, in a session whose version admits batches."""
        if self.version not in _BATCH_VERSIONS or line is None or line.lstrip()[:1] != "[":
            return None
        try:
            elements = json.loads(line)
        except (ValueError, RecursionError):
            return None
        return elements if isinstance(elements, list) and elements else None

    async def _drain(self) -> None:
        with anyio.move_on_after(self._drain_s):
            while self._unanswered:
                self._settled = anyio.Event()
                await self._settled.wait()

    def _answer(self, item: Any, line: str | None) -> SessionMessage | None:
        if isinstance(item, Exception):
            return _undecodable_answer(item)
        if line is not None and isinstance(item, SessionMessage):
            notification = isinstance(item.message, types.JSONRPCNotification)
            return _notification_answer(line) if notification else None
        return None

    @property
    def last_context(self) -> Any:  # the sender's context the SDK restores per message
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            if self._queued:  # a batch's messages, passed on one by one
                return await self._pass(self._queued.popleft())
            try:
                item = await self._inner.receive()
            except anyio.EndOfStream:
                await self._drain()
                raise
            line = self._lines.popleft() if self._lines else None
            elements = self._batch(line) if isinstance(item, Exception) else None
            answer: SessionMessage | None
            if elements is not None and len(elements) > MAX_BATCH_MESSAGES:
                answer = _rpc_error(None, types.INVALID_REQUEST, _TOO_LONG)
            elif elements is not None:  # (the SDK reads one message a line: a batch is none)
                passed, batch = _batch_messages(elements)
                self._queued.extend(passed)
                self._batches.append(batch)
                answer = self._settle(batch)
            else:
                answer = self._answer(item, line)
                if answer is None:
                    return await self._pass(item)
            if answer is not None:
                await self._write.send(answer)

    async def _pass(self, item: Any) -> Any:
        settled = self._track(item)
        if settled is not None:  # a cancellation left a batch nothing more to wait for
            await self._write.send(settled)
        return item

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def serve_stdio(tools: McpTools, *, version: str = "") -> int:
    """MCP over this process's stdin/stdout until the client closes it."""
    server = build_server(tools, version=version)
    # stdin read here (as the SDK reads it) to keep each line: the SDK then leaves fd 0 as it
    # is rather than pointing it at the null device, which nothing in this process reads.
    lines: collections.deque[str] = collections.deque()
    async with stdio_server(stdin=_Recorded(lines)) as (read, write):
        answering = _Answering(read, write, lines)
        await server.run(answering, answering.writer, server.create_initialization_options())
    return 0


# --- streamable HTTP on the standalone server ---------------------------------------------------


class McpHttp:
    """`/mcp` and `/mcp/<bank>` on the aiohttp server: the SDK's streamable-HTTP session manager
    (stateless, JSON answers) driven through a small ASGI bridge. `start()` / `close()` own the
    manager's task (it must enter and leave its task group in one task)."""

    def __init__(self, tools: McpTools, *, version: str = "") -> None:
        self.tools = tools
        self._manager = StreamableHTTPSessionManager(
            app=build_server(tools, version=version), json_response=True, stateless=True
        )
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="memory-mcp-http")
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait({self._task, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._task.done():
            self._task.result()  # it failed to start: raise why

    async def _run(self) -> None:
        async with self._manager.run():
            self._ready.set()
            await self._stop.wait()

    async def close(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def handle(
        self, request: web.Request, *, bank: str | None, caller: Caller
    ) -> web.StreamResponse:
        if self._task is None or not self._ready.is_set():
            raise web.HTTPServiceUnavailable(reason="the MCP endpoint is not running")
        if request.method != "POST":
            # GET: the stream a client opens for the server's own messages: stateless, there are
            # none, and the SDK's stream never ended, holding the server's stop. DELETE: a client
            # ending its session, and there are none either. 405 is the spec's "no stream here" /
            # "no session termination", which clients (the TypeScript and Python SDKs) take in
            # stride. The SDK's own 405s carried no `Allow`, or named GET and DELETE.
            raise web.HTTPMethodNotAllowed(request.method, ["POST"])
        state = {_STATE_BANK: check_name(bank, "bank") if bank else None, _STATE_CALLER: caller}
        body = await request.read()
        batch = _batch(body, request.headers.get(_VERSION_HEADER))
        if batch is not None:
            return await self._batch(request, batch, state)
        early = _early_answer(body)
        if early is not None:
            status, answer = early
            return web.Response(status=status, body=answer, content_type="application/json")
        return await _asgi(self._manager.handle_request, request, state)

    async def _batch(
        self, request: web.Request, batch: list[Any], state: dict[str, Any]
    ) -> web.StreamResponse:
        """A JSON-RPC batch (2025-03-26): each message answered as it would be alone, in order
        (one after the other: a save then a recall of it behaves as sent), the answers as one
        JSON array, or a bare 202 when there are none (notifications only). A refusal of the
        request itself (its `Accept`, the transport's limits) refuses the whole batch."""
        if len(batch) > MAX_BATCH_MESSAGES:
            invalid = _rpc_error(None, types.INVALID_REQUEST, _TOO_LONG).message
            dumped = invalid.model_dump(by_alias=True, mode="json", exclude_unset=True)
            return web.json_response(dumped, status=400)
        answers: list[bytes] = []
        for message in batch:
            # ASCII: a lone surrogate stays the escape `_early_answer` looks for.
            body = json.dumps(message).encode()
            early = _early_answer(body)
            if early is None:
                sent, receive = _Captured(), _Body(body)
                try:
                    await self._manager.handle_request(_scope(request, state), receive, sent.send)
                finally:
                    receive.close()
                early = sent.status, sent.body()
            status, answer = early
            if status not in (200, 202, 400):
                return web.Response(status=status, body=answer, content_type="application/json")
            if answer:
                answers.append(answer)
        if not answers:
            return web.Response(status=202)
        return web.Response(body=b"[" + b",".join(answers) + b"]", content_type="application/json")


_VERSION_HEADER = "MCP-Protocol-Version"
# A request with no version header is one of 2025-03-26, as the spec (2025-06-18) says to read
# it: that version had no header, and a stateless server has no session to ask.
_UNSAID_VERSION = "2025-03-26"


def _batch(body: bytes, version: str | None) -> list[Any] | None:
    """The messages of a JSON-RPC batch `body` holds when its version admits batches, else None
    (an empty array, or a batch under a later version, is answered Invalid Request as before)."""
    if (version or _UNSAID_VERSION) not in _BATCH_VERSIONS or body.lstrip()[:1] != b"[":
        return None
    try:
        messages = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the transport's own parse error
    return messages if isinstance(messages, list) and messages else None


def _early_answer(body: bytes) -> tuple[int, bytes] | None:
    """The status and answer for a message the SDK would misread (a lone surrogate escape, an
    id that is not one), answered here as stdio and REST answer it; None for the rest."""
    surrogate = _surrogate_request(body)
    if surrogate is not None:
        answer = _surrogate_answer(surrogate)
        status = 200 if isinstance(answer, types.JSONRPCResponse) else 400
        dumped = answer.model_dump(by_alias=True, mode="json", exclude_unset=True)  # `id: null`
        return status, json.dumps(dumped).encode()
    bad_id = _bad_id_body(body)
    if bad_id is not None:  # the SDK took it for a notification: a 202, no answer
        invalid = _bad_id_answer(bad_id).message
        dumped = invalid.model_dump(by_alias=True, mode="json", exclude_unset=True)
        return 400, json.dumps(dumped).encode()
    return None


class _Body:
    """An ASGI `receive` handing over `body` whole, then waiting until `close()` (the end of the
    request) to say the client left."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self._closed = asyncio.Event()

    async def __call__(self) -> dict[str, Any]:
        body, self._body = self._body, None
        if body is not None:
            return {"type": "http.request", "body": body, "more_body": False}
        await self._closed.wait()
        return {"type": "http.disconnect"}

    def close(self) -> None:
        self._closed.set()


class _Captured:
    """An ASGI app's answer kept whole (a batch's element): its status and body, a 400 read by
    `_refusal` as a lone request's is."""

    def __init__(self) -> None:
        self.status = 500
        self._body = bytearray()

    async def send(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self._body.extend(message.get("body", b""))

    def body(self) -> bytes:
        body = bytes(self._body)
        return _refusal(body) if self.status == 400 else body


def _scope(request: web.Request, state: dict[str, Any]) -> dict[str, Any]:
    """The ASGI scope of an aiohttp request, `state` in it."""
    # The bytes that were sent: aiohttp decodes a header as UTF-8 with surrogateescape, so that
    # is its inverse (Latin-1 failed, a 500, on any other character).
    headers = [
        (k.lower().encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
        for k, v in request.headers.items()
        if k.lower() != "accept" or v.strip()
    ]
    if not any(k == b"accept" for k, _ in headers):
        # No `Accept` is HTTP's "any media type" (RFC 9110, 12.5.1), and clients in the wild
        # (scripts, proxies, plain HTTP libraries) send none; the SDK refused them 406.
        headers.append((b"accept", b"*/*"))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode(),
        "query_string": request.query_string.encode(),
        "root_path": "",
        "headers": headers,
        "client": request.transport.get_extra_info("peername") if request.transport else None,
        "server": None,
        "state": state,
    }


async def _asgi(app: Any, request: web.Request, state: dict[str, Any]) -> web.StreamResponse:
    """One aiohttp request through an ASGI app: the body is read whole (bounded by the server's
    body cap), the answer is streamed back as the app sends it."""
    receive = _Body(await request.read())
    relay = _Relay(request)
    try:
        await app(_scope(request, state), receive, relay.send)
    finally:
        receive.close()
    if relay.response is None:
        raise web.HTTPInternalServerError(reason="the MCP transport sent no response")
    return relay.response


class _Relay:
    """The ASGI app's answer streamed to aiohttp as it is sent; a 400 (a small error body) is
    held until its body is read whole: `_refusal` may answer it anew."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None
        self._held: Mapping[str, Any] | None = None
        self._held_body = bytearray()

    async def _start(self, message: Mapping[str, Any], length: int | None = None) -> None:
        response = self.response = web.StreamResponse(status=message["status"])
        for key, value in message.get("headers", ()):
            name = key.decode("latin-1")
            if length is not None and name.lower() == "content-length":
                value = str(length).encode()
            response.headers.add(name, value.decode("latin-1"))
        await response.prepare(self._request)

    async def send(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            if message["status"] == 400:
                self._held = message
            else:
                await self._start(message)
            return
        if message["type"] != "http.response.body":
            return
        body: bytes = message.get("body", b"")
        last = not message.get("more_body", False)
        if self._held is not None:
            self._held_body.extend(body)
            if not last:
                return
            body = _refusal(bytes(self._held_body))
            await self._start(self._held, len(body))
            self._held = None
        if self.response is not None:
            await self.response.write(body)
            if last:
                await self.response.write_eof()
