"""The console's routes on the standalone server: the page, its assets, the live stream and the
settings panel's two calls.

- `GET /` and `GET /console/<asset>`: only names in `ASSETS` (nothing else on disk is reachable),
  with a strict Content-Security-Policy (scripts and styles from this origin only, no inline code,
  no framing), `nosniff` and `no-referrer`.
- `POST /console/events`: a server-sent-events stream of the feed (a POST read with `fetch`, so it
  carries the same JSON content type and `Authorization` header as every other call — an
  `EventSource` could do neither). `hello` first, then one frame per change, a comment every
  `HEARTBEAT_S` so a proxy keeps it open and a closed tab is noticed.
- `POST /console/settings` and `/console/settings/set`: the fields with their descriptions and the
  settings' `revision`; edits land in the `--config` file (only the changed lines) and apply at
  once, and one sent with the `expected_revision` it read is refused (`conflict`) when the
  settings changed since.

Every POST here takes only `application/json` (a cross-site form cannot send it without a
preflight, and the server answers no preflight), and refuses an `Origin` other than the page's own
(compared by host, so a TLS-terminating proxy in front still works).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from memory_worker.adapters import console
from memory_worker.adapters.console.feed import ConsoleFeed, FeedFull
from memory_worker.adapters.console.settings_view import describe, revision, validate_changes
from memory_worker.adapters.doors import CALLER_HEADER, decode_caller
from memory_worker.adapters.settings_file import write_values
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.core.config import Settings, load_settings, settings_from_text
from memory_worker.core.errors import Conflict, Forbidden, InvalidInput
from memory_worker.core.payload import loads
from memory_worker.storage.logger import get_logger

__all__ = ["CSP", "HEARTBEAT_S", "ConsoleContext", "add_routes"]

log = get_logger(__name__)

HEARTBEAT_S = 15.0
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",  # revalidate: an upgraded worker serves its new page at once
}
_MAX_BODY_BYTES = 64 * 1024


@dataclass
class ConsoleContext:
    """What the routes need from the server that hosts them."""

    feed: ConsoleFeed
    settings: Callable[[], Settings]
    config_path: Path | None  # the `--config` file, when there is one: the edits go there
    apply: Callable[[Settings], Awaitable[object]] | None  # applies a new settings snapshot
    data_dir: Callable[[], Path] | None = None  # the data dir being served (a flag may win)
    # One settings edit at a time: each reads the file, changes its lines and replaces it, so
    # two at once (two tabs) left the file with the second's reading, the first edit lost.
    editing: asyncio.Lock = field(default_factory=asyncio.Lock)


_CONTEXT = web.AppKey("console", ConsoleContext)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


_CONSOLE_CALLER = Caller.human("console")


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The POST body as an object; `application/json` only, from this origin only, and never for
    a request that claims an agent (`Memory-Caller`): the console is a person's, and its stream
    and settings would show and change what the agent's access level keeps from it."""
    claim = decode_caller(
        request.headers.get(CALLER_HEADER), trusted=False, default=_CONSOLE_CALLER
    )
    if claim.kind is CallerKind.AGENT:
        raise Forbidden("the console is for people only; agents are refused it")
    origin = request.headers.get("Origin")
    if origin is not None and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(reason=f"cross-origin console call from {origin} refused")
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(reason="console calls must be application/json")
    # Whole (the server read it within its body timeout); `content.read(n)` returned only what
    # had arrived, so a body in two TCP segments was read as broken JSON.
    raw = await request.read()
    if len(raw) > _MAX_BODY_BYTES:
        raise InvalidInput("request body is too large")
    if not raw.strip():
        return {}
    body = loads(raw, "request body")  # bounded nesting and size, like every other edge
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body


def _asset(name: str) -> web.Response:
    asset = console.ASSETS[name]
    return web.Response(
        text=console.read(name),
        content_type=asset.content_type.split(";")[0],
        charset="utf-8",
        headers=_PAGE_HEADERS,
    )


async def _index(request: web.Request) -> web.StreamResponse:
    return _asset("index.html")


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in console.ASSETS:
        raise web.HTTPNotFound()
    return _asset(name)


async def _events(request: web.Request) -> web.StreamResponse:
    await _json_body(request)
    feed = request.app[_CONTEXT].feed
    try:
        client = feed.open()
    except FeedFull as exc:
        return _error(503, "unavailable", f"{exc}; this tab polls instead")
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a buffering proxy (nginx) would hold the events back
        }
    )
    try:
        await response.prepare(request)
        await response.write(b'retry: 5000\nevent: hello\ndata: {"mode": "standalone"}\n\n')
        while True:
            try:
                frame = await asyncio.wait_for(client.next(), HEARTBEAT_S)
            except TimeoutError:
                await response.write(b": ping\n\n")
                continue
            if frame is None:
                break
            event, data = frame
            await response.write(f"event: {event}\ndata: {data}\n\n".encode())
    except ConnectionError:
        pass  # the tab went away: nobody to answer
    finally:
        feed.drop(client)
    return response


def _editability(context: ConsoleContext) -> tuple[bool, str, str | None]:
    if context.config_path is None or context.apply is None:
        return (
            False,
            "This server was started without a settings file, so it runs on the defaults and "
            "there is nothing a console could write to. Start it with --config FILE (or "
            "$MEMORY_CONFIG) to edit the settings here.",
            None,
        )
    return (
        True,
        f"Changes are written to {context.config_path} (only the lines of the settings you "
        "change) and apply at once; data_dir stays a file or --data-dir decision.",
        str(context.config_path),
    )


def _view(
    context: ConsoleContext, editable: bool, reason: str, source: str | None
) -> dict[str, Any]:
    served = context.data_dir() if context.data_dir is not None else None
    return describe(
        context.settings(),
        mode="standalone",
        editable=editable,
        reason=reason,
        source=source,
        data_dir=str(served) if served is not None else None,
    )


async def _settings(request: web.Request) -> web.StreamResponse:
    await _json_body(request)
    context = request.app[_CONTEXT]
    editable, reason, source = _editability(context)
    view = _view(context, editable, reason, source)
    return web.json_response(view)


async def _settings_set(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    context = request.app[_CONTEXT]
    editable, reason, source = _editability(context)
    if not editable or context.config_path is None or context.apply is None:
        raise InvalidInput(reason)
    values = validate_changes(context.settings(), body.get("values"))
    expected = body.get("expected_revision")
    if expected is not None and not isinstance(expected, str):
        raise InvalidInput("`expected_revision` must be the `revision` string the view gave")
    async with context.editing:
        # Under the edit lock, on the settings in effect now: a panel that read them before
        # another tab's save (or the CLI's, or a hand edit) is refused, not written over it.
        if expected is not None and revision(context.settings()) != expected:
            raise Conflict(
                "stale settings: they changed since this panel read them (another tab, the CLI "
                "or a hand edit); read them again and retry"
            )
        # Only a file that loads is written: one already holding a refused value (a hand edit
        # the hot reload kept out) was written anyway and answered "Not saved", the edit then
        # applying unannounced whenever the file was next fixed.
        path = str(context.config_path)
        await asyncio.to_thread(
            write_values,
            context.config_path,
            values,
            lambda text: settings_from_text(text, path),
        )
        settings = await asyncio.to_thread(load_settings, context.config_path)
        await context.apply(settings)
    log.info("settings_edited", path=source, fields=sorted(values))
    view = _view(context, editable, reason, source)
    return web.json_response(view)


def add_routes(app: web.Application, context: ConsoleContext) -> None:
    app[_CONTEXT] = context
    app.router.add_get("/", _index)
    app.router.add_get("/console/{name}", _static)
    app.router.add_post("/console/events", _events)
    app.router.add_post("/console/settings", _settings)
    app.router.add_post("/console/settings/set", _settings_set)
