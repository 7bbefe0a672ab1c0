"""Every function this worker registers on the bus, with its description and schemas.

The public ones come from the one `catalog.CATALOG` (same ids, descriptions and draft-07 schemas as
`golden/schemas/`); the internal ones (hook, pipeline, config, REST adapter) are marked
`{"internal": true}` so consoles and `iii-permissions.yaml` keep them away from agents.

Handlers run on the SDK's event loop; the service lives on ours. `Bridge` hops each call over (the
service stays single-loop), and turns failures into bus errors whose message starts with the stable
code (`invalid_input: …`): Python handlers can only send `invocation_failed`, so callers match on
the prefix. A bug is logged with its traceback under an incident id and answered `internal: …`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from iii.iii import III
from pydantic import ValidationError

from memory_worker.adapters import access
from memory_worker.adapters.doors import CALLER_HEADER, decode_caller
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.seams import HttpEnvelope
from memory_worker.core.errors import HTTP_STATUS, InvalidInput, WorkerError
from memory_worker.storage.logger import get_logger

__all__ = [
    "HTTP_FUNCTION",
    "INTERNAL",
    "UI_CONTENT",
    "UI_SETTINGS",
    "Bridge",
    "header",
    "http_body",
    "http_reply",
    "page_refusal",
]

log = get_logger(__name__)

Handler = Callable[[Any, Any], Awaitable[Any]]
HTTP_FUNCTION = catalog.HTTP
UI_CONTENT = catalog.UI_CONTENT
UI_SETTINGS = catalog.UI_SETTINGS


class Bridge:
    """Runs coroutines of the service's loop on behalf of SDK handlers."""

    def __init__(self, loop: asyncio.AbstractEventLoop, worker: str = "memory worker") -> None:
        """`worker`: whose log a bug's incident id points to."""
        self.loop = loop
        self.worker = worker

    def handler(self, function_id: str, work: Handler) -> Callable[..., Awaitable[Any]]:
        async def handle(data: Any, metadata: Any = None) -> Any:
            future = asyncio.run_coroutine_threadsafe(
                self._guarded(function_id, work, data, metadata), self.loop
            )
            return await asyncio.wrap_future(future)

        return handle

    async def _guarded(self, function_id: str, work: Handler, data: Any, metadata: Any) -> Any:
        try:
            return await work(data, metadata)
        except WorkerError:
            raise
        except Exception as exc:
            incident = uuid.uuid4().hex[:12]
            log.exception("handler_failed", function_id=function_id, incident=incident)
            raise RuntimeError(
                f"internal: unexpected error in {function_id} (incident {incident}); the details "
                f"are in the {self.worker}'s log"
            ) from exc


# Every internal function, with its models, from the one catalog.
INTERNAL = catalog.SEAMS


def register(
    client: III,
    spec_id: str,
    handler: Callable[..., Awaitable[Any]],
    *,
    description: str,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    internal: bool,
    trace_hidden: bool = False,
) -> None:
    metadata: dict[str, Any] = {"internal": True} if internal else {}
    if trace_hidden:
        metadata["trace_hidden"] = True
    client.register_function(
        spec_id,
        handler,
        description=description,
        metadata=metadata or None,
        request_format=request,
        response_format=response,
    )


def register_public(
    client: III, bridge: Bridge, call: Callable[[catalog.FunctionSpec, Any, Any], Awaitable[Any]]
) -> None:
    for spec in catalog.CATALOG:

        def work(data: Any, metadata: Any, spec: catalog.FunctionSpec = spec) -> Awaitable[Any]:
            return call(spec, data, metadata)

        register(
            client,
            spec.id,
            bridge.handler(spec.id, work),
            description=spec.description,
            request=catalog.json_schema(spec.request),
            response=catalog.json_schema(spec.response),
            internal=spec.internal,
        )


def register_internal(client: III, bridge: Bridge, handlers: dict[str, Handler]) -> None:
    for spec in INTERNAL:
        register(
            client,
            spec.id,
            bridge.handler(spec.id, handlers[spec.id]),
            description=spec.description,
            request=catalog.json_schema(spec.request),
            response=catalog.json_schema(spec.response),
            internal=True,
            trace_hidden=spec.trace_hidden,
        )


def http_path_of(envelope: HttpEnvelope) -> str:
    path = envelope.path or (envelope.trigger or {}).get("path") or ""
    return str(path).strip("/")


def _header(envelope: HttpEnvelope, name: str) -> str | None:
    """A request header from the http worker's envelope (names are case-insensitive)."""
    headers = envelope.headers or (envelope.trigger or {}).get("headers") or {}
    if not isinstance(headers, dict):
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name:
            # A repeated header may arrive as its list of values: the first counts, as aiohttp
            # reads it (read as absent, a page's `Origin` sent twice went unchecked).
            if isinstance(value, list) and value:
                value = value[0]
            return value if isinstance(value, str) else None
    return None


def header(envelope: HttpEnvelope, name: str) -> str | None:
    """One request header of an http worker envelope, by name in any case."""
    return _header(envelope, name.lower())


def http_body(envelope: HttpEnvelope) -> Any:
    """The request body from the http worker's envelope (`{}` when none was sent).

    The engine's http worker parses a body only when its `Content-Type` says
    `application/json` and it parses; any other arrives as `null` (its bytes go to the
    `request_body` channel only). Read as `{}`, `curl -d` (a form content type) ran the call
    with every default (listed the default bank instead of the one named): a body that was sent
    (`Content-Length` or chunked) but did not arrive is refused, saying why."""
    if envelope.body is not None:
        return envelope.body
    length = _header(envelope, "content-length")
    sent = _header(envelope, "transfer-encoding") is not None or (
        length is not None and length.strip() not in ("", "0")
    )
    if not sent:
        return {}
    kind = _header(envelope, "content-type")
    # The engine's test is case-sensitive (`content_type.contains("application/json")`):
    # `Application/JSON`'s valid JSON arrives as `null` too, and is no fault of the body's.
    if kind is not None and "application/json" in kind:
        raise InvalidInput("the request body is not valid JSON (or is `null`)")
    if kind is not None and "application/json" in kind.lower():
        raise InvalidInput(
            f"the request body was sent as {kind}; the engine's http worker reads only a "
            "Content-Type that says application/json in lower case: send it with "
            "Content-Type: application/json"
        )
    raise InvalidInput(
        f"the request body was sent as {kind or 'no Content-Type'}; the engine's http worker "
        "passes on only JSON: send it with Content-Type: application/json"
    )


def page_refusal(
    envelope: HttpEnvelope, allowed_hosts: Iterable[str] = ()
) -> dict[str, Any] | None:
    """The http worker's reply refusing a request a web page sent (`access.browser_refusal`:
    the engine's listener is reachable from every page the user visits), else None."""
    sent = {
        name: value
        for name in ("Host", "Origin", "Sec-Fetch-Site")
        if (value := _header(envelope, name.lower())) is not None
    }
    refusal = access.browser_refusal(sent, allowed_hosts)
    if refusal is None:
        return None
    error = {"code": refusal.code, "message": refusal.message}
    return {"status_code": refusal.status, "body": {"error": error}}


async def http_reply(
    envelope_raw: Any,
    call: Callable[[catalog.FunctionSpec, Any, Caller], Awaitable[dict[str, Any]]],
    default: Caller,
    *,
    allowed_hosts: Iterable[str] = (),
) -> dict[str, Any]:
    """One REST request from the http worker: `{status_code, body}` either way. Who it speaks
    for is `default` (a person), unless its `Memory-Caller` header narrows that as on the
    standalone server (an agent's claim, believed from anyone: `doors.decode_caller`). A request
    a web page sent is refused first, as the standalone server's gate refuses it
    (`access.browser_refusal`; `allowed_hosts`: the names a page may reach it under)."""
    try:
        try:
            raw = envelope_raw if isinstance(envelope_raw, dict) else {}
            envelope = HttpEnvelope.model_validate(raw)
        except ValidationError as exc:  # not what the http worker sends: the caller's mistake
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise InvalidInput(f"http envelope: {where}: {problem['msg']}") from None
        refused = page_refusal(envelope, allowed_hosts)
        if refused is not None:
            return refused
        path = http_path_of(envelope)
        spec = next((s for s in catalog.CATALOG if s.http_path == path), None)
        if spec is None:
            raise InvalidInput(f"no memory function at /{path}; e.g. /memory/save, /memory/recall")
        claim = _header(envelope, CALLER_HEADER.lower())
        caller = decode_caller(claim, trusted=False, default=default)
        body = http_body(envelope)
        confirmed = catalog.with_confirm(spec, body, _header(envelope, "x-confirm"))
        result = await call(spec, confirmed, caller)
    except WorkerError as err:
        return {"status_code": HTTP_STATUS.get(err.code, 500), "body": {"error": err.to_dict()}}
    return {"status_code": 200, "body": result}
