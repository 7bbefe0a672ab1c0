"""`memory-worker serve` in standalone mode: the catalog over local REST, with no engine.

Every catalog function is `POST /memory/<http_path>` (the paths the iii http triggers use); the body
is the JSON payload (empty = `{}`), the answer is the JSON result, and every failure is
`{"error": {"code", "message"}}` with a status from `STATUS_BY_CODE`. `GET /healthz` says which mode
runs on which data dir. `GET /` is the console (`adapters.console`); its live stream is fed by the
service's change events (`ConsoleFeed` is this mode's `Emitter`). `/mcp` and `/mcp/<bank>` serve
the same functions to MCP clients (`adapters.mcp_server`, when the `mcp` extra is installed).

A call forwarded by another door (the CLI, `memory-worker mcp`, a hook: `adapters.doors`) says
who it speaks for in its `Memory-Caller` header; `doors.decode_caller` decides what is believed.

Lifecycle, explicit rather than hidden in `web.run_app`:
- `start()` binds the socket first (so the real port is known; listening, so no other process
  can take the port), then opens the store with a lock holder naming this server's URL, then
  accepts. No request can reach a half-opened server (it waits in the backlog), and a refused
  command (`trigger`, a second `serve`) can name the URL to use instead.
- `wait()` returns once `stop()` is called (the `serve()` driver wires SIGTERM and SIGINT to it).
- `close()` drops the URL from the lock's holder record, stops accepting, lets in-flight requests
  finish (up to `SHUTDOWN_TIMEOUT_S`, then cancels them), drains the banks' pending writes and
  closes the store, releasing the lock.

A bug never reaches the client as a traceback: it is logged with one (under an incident id) and
answered 500 `internal`. What aiohttp's parser refuses, before any route or middleware, is
answered 400 `invalid_input` in the same shape (`_Protocol`), and neither the log nor the answer
quotes the refused bytes (`refusal_reason`): they are often cookies or a token.

Who may call is `adapters.access`'s (Host, Origin, JSON-only calls, the bearer token); every request
passes that gate first. No request can hold the server: an idle or half-sent connection is closed
after `IDLE_TIMEOUT_S` (aiohttp's keep-alive timer runs from the connection's start until its
request is read), a body must arrive within `BODY_TIMEOUT_S`, an answer the client stops reading
is cut off after `WRITE_TIMEOUT_S` without progress, a head holds at most `MAX_HEADERS` lines
of `MAX_FIELD_BYTES`, and past `MAX_CONNECTIONS` open
connections a new one is answered 503 and closed. Running out of file descriptors makes the accept
loop back off (asyncio retries a second later) with one log line per episode, not one per attempt.

Past 500 lines on purpose: `StandaloneServer` owns one data dir's whole life behind one URL
(store, token, watchers, settings reload, console feed, MCP, capture loop) and the routes that
reach it; the gate (`access`) and the connection cap (`connections`) live apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import json
import logging
import os
import re
import secrets
import signal
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentEncodingError,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from memory_worker.adapters import access
from memory_worker.adapters.accounts import account_of
from memory_worker.adapters.connections import OUT_OF_DESCRIPTORS, CappedSite
from memory_worker.adapters.console.feed import ConsoleFeed
from memory_worker.adapters.console.web import ConsoleContext, add_routes
from memory_worker.adapters.doors import (
    CALLER_HEADER,
    CAPTURE_PATH,
    Door,
    LocalDoor,
    decode_caller,
)
from memory_worker.adapters.lifecycle import SHORT_HOLDER_WAIT_S
from memory_worker.adapters.openai_chat import OpenAIChatCompleter
from memory_worker.adapters.settings_file import SettingsFileWatcher
from memory_worker.adapters.watch import DataDirWatcher
from memory_worker.app import catalog
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.app.ports import Completer, Embedder
from memory_worker.app.reconfigure import Applied, Reconfigurer
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings, resolve_data_dir
from memory_worker.core.errors import HTTP_STATUS, Conflict, Forbidden, InvalidInput, WorkerError
from memory_worker.core.payload import MAX_VALUES, loads
from memory_worker.harness.capture import CaptureRunner
from memory_worker.storage import files
from memory_worker.storage.capture import CaptureQueue
from memory_worker.storage.logger import get_logger
from memory_worker.storage.store import Store

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "STATUS_BY_CODE",
    "StandaloneServer",
    "build_app",
    "refusal_reason",
    "serve",
]

log = get_logger(__name__)

# The person the local service answers to (an agent token, when access levels need one, will
# name an agent instead).
REST_CALLER = Caller.human("rest")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
SHUTDOWN_TIMEOUT_S = 5.0  # in-flight requests get this long after SIGTERM, then are cancelled
IDLE_TIMEOUT_S = 15.0  # a connection sends a whole request head this long after it opens or idles
BODY_TIMEOUT_S = 30.0  # then its body within this
WRITE_TIMEOUT_S = 30.0  # an answer the client stopped reading: cut off past this without progress
MAX_CONNECTIONS = 256  # open at once; one more is answered 503 and closed
MAX_BODY_BYTES = 1024 * 1024  # the largest call is a 64K-character rule; more is an attack
# One header line, name and value (aiohttp's default is 8,190 bytes). A browser sends the cookies
# of every localhost port to this one, so a person whom other local apps gave more than 8 KB of
# them could not open the console at all. 16 KiB is Node's limit for a whole head: a cookie jar
# the local dev servers built on it (Vite, Next) live with fits here too.
MAX_FIELD_BYTES = 16 * 1024
# Headers in one request (aiohttp's default is 128; a browser sends about 20, a tunnel adds a
# dozen). With the longer line above, a head still costs at most the 1 MiB it did
# (64 x 16 KiB = 128 x 8 KiB) under the connection cap. The request line keeps aiohttp's 8,190
# bytes: no route needs a long URL.
MAX_HEADERS = 64
MODE = "standalone"
READY_LINE = "memory-worker serving on {url}"  # scripts and tests wait for this line on stdout
CONSOLE_LINE = "console: open {url}/ in a browser"  # printed right after, for a person

STATUS_BY_CODE = HTTP_STATUS  # kept under its old name for importers

_SERVICE_KEY = web.AppKey("service", MemoryService)
_MCP_KEY = web.AppKey("mcp", object)  # the McpHttp endpoint, when the `mcp` extra is installed
# The capture loop the route hands turns to (looked up per request: a data_dir change replaces it).
CurrentCapture = Callable[[], CaptureRunner | None]
_CAPTURE_KEY: web.AppKey[CurrentCapture] = web.AppKey("capture")
MCP_CALLER = Caller.for_agent("mcp")  # whoever speaks MCP to us is an agent


@dataclass(frozen=True, slots=True)
class _PolicySource:
    current: Callable[[], access.Policy]  # what the gate accepts now (settings hot-reload)


_POLICY_KEY = web.AppKey("policy", _PolicySource)
_BODY_TIMEOUT_KEY = web.AppKey("body_timeout_s", float)
_json = functools.partial(json.dumps, ensure_ascii=False)


# What a refusal's own words may say when no fixed reason fits: llhttp's reasons ("Invalid
# character in chunk size") and aiohttp's fixed sentences ("Too many headers received").
_PLAIN_REASON = re.compile(r"[A-Za-z][A-Za-z0-9 ,.'`-]{0,119}")


def refusal_reason(exc: BaseException) -> str:
    """Why aiohttp's parser refused a request, in words of ours or its own fixed ones, never the
    request's bytes: its messages quote the refused line (`b'Cookie: session=…'`), which is
    often a person's cookies or a token, and they would go to the log and back to the client.
    Also for a body it could not read (`RequestPayloadError`, which carries the same text)."""
    if isinstance(exc, web.RequestPayloadError):
        if isinstance(exc.__cause__, HttpProcessingError):
            return refusal_reason(exc.__cause__)
        text = str(exc).lower()
        if "content-encoding" in text:
            return "the body's Content-Encoding cannot be decoded"
        if "not enough data" in text:
            return "the body ended before the length it announced"
        return "the body is malformed"
    if isinstance(exc, LineTooLong):
        return f"a request line or header is longer than {exc.args[1]} bytes"
    if isinstance(exc, BadHttpMethod):
        https = "HTTPS traffic" in exc.message
        return "HTTPS was sent to an HTTP port" if https else "the method is not valid"
    fixed = {
        BadStatusLine: "the request line is not valid HTTP",
        InvalidURLError: "the request target is not valid",
        InvalidHeader: "a header is not valid",
        TransferEncodingError: "the chunked body is malformed",
        ContentLengthError: "the body ended before its Content-Length",
        ContentEncodingError: "the body's Content-Encoding cannot be decoded",
    }
    for kind, reason in fixed.items():
        if isinstance(exc, kind):
            return reason
    # llhttp's refusals read "<reason>:\n\n  <the bytes>\n  ^": the reason alone.
    message = exc.message if isinstance(exc, HttpProcessingError) else ""
    head = str(message).split("\n", 1)[0].split(":", 1)[0].strip()
    return head if _PLAIN_REASON.fullmatch(head) else "the request is malformed"


class _Protocol(RequestHandler):
    """aiohttp's per-connection protocol, answering what its parser refuses (a bad request line
    or header, a line past its limit, a malformed chunk) like every other refusal: `400
    invalid_input` in our JSON shape, and one `bad_http_request` line in the log with the
    reason and never the refused bytes. aiohttp answered those in plain text quoting the bytes,
    past every middleware, and offers no hook for it but this method."""

    __slots__ = ("_streaming",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The body of the newest request the parser handed out: the one it reads bytes into
        # until that body ends (a request after it is parsed only then).
        self._streaming: StreamReader | None = None

    def data_received(self, data: bytes) -> None:
        queued = len(self._messages)
        super().data_received(data)
        # llhttp refusing a body mid-way (a malformed chunk sent after the head) queues its
        # refusal as the next request and leaves the body being read with no end: its handler
        # waited out `BODY_TIMEOUT_S` to answer `408`, the body "did not arrive". The body ends
        # in the refusal instead (`_body` answers it; the queued one is never reached). The
        # body the parser was in, not the request being handled: with both reads run before
        # the request's handler began (a busy loop), there was none, and it was `408` again.
        for message, payload in itertools.islice(self._messages, queued, None):
            if not isinstance(message, _ErrInfo):
                self._streaming = payload
                continue
            body = self._streaming
            if body is not None and not body.is_eof() and body.exception() is None:
                error = web.RequestPayloadError(refusal_reason(message.exc))
                error.__cause__ = message.exc
                body.set_exception(error)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            # A bug past the middlewares (which answer every handler's error): aiohttp logs it
            # with its traceback and checks that no answer has begun; the answer is ours.
            super().handle_error(request, status, exc, message)
            if status == 500:
                response = _error(500, "internal", "unexpected server error; see the server log")
            else:
                response = _error(status, _status_code(status), HTTPStatus(status).description)
        else:
            reason = refusal_reason(exc)
            # Non-HTTP bytes (TLS, a port scan) on a fresh connection: noise, as aiohttp rules.
            say = log.debug if isinstance(exc, BadHttpMethod) else log.info
            say("bad_http_request", client=request.remote, status=status, error=reason)
            if request.writer.output_size > 0:  # as aiohttp: an answer was begun already
                raise ConnectionError("an answer was begun; the refusal cannot be sent")
            response = _error(
                status, "invalid_input", f"the request cannot be read as HTTP: {reason}"
            )
        response.force_close()  # the rest of the connection cannot be read as HTTP
        return response


def _status_code(status: int) -> str:
    return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")


class _ProtocolLog(logging.Logger):
    """aiohttp's server log (`aiohttp.server`). A request its parser refuses is `_Protocol`'s
    (one `bad_http_request` line); should one still reach this log, and when a body aiohttp
    drains after the answer cannot be read, it is one line with the reason and never the
    request's bytes: aiohttp logged each with a full traceback quoting them, so any client
    could fill the log at will. Everything else, a handler's unexpected error with its
    traceback first, goes on to aiohttp's logger."""

    def __init__(self) -> None:
        super().__init__("aiohttp.server")
        self.parent = logging.getLogger("aiohttp.server")  # its handlers and level, as before

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            log.info(
                "bad_http_request",
                client=str(args[0]) if args else None,
                status=exc_info.code,
                error=refusal_reason(exc_info),
            )
            return
        if isinstance(exc_info, web.RequestPayloadError):
            # Met while aiohttp drains a body it cannot read after the answer (one `_body`
            # refused and logged already): the client's error, not a traceback.
            log.debug("bad_http_body_drained", error=refusal_reason(exc_info))
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


def _dumps(value: object) -> str:
    """JSON text aiohttp can encode: a lone surrogate (echoed from a caller's input) is escaped
    rather than failing the whole answer with a plain-text 500."""
    text = _json(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)  # ASCII escapes: `\ud800` is valid JSON text
    return text


def _error(status: int, code: str, message: str, **headers: str) -> web.Response:
    return web.json_response(
        {"error": {"code": code, "message": message}}, status=status, dumps=_dumps, headers=headers
    )


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's own refusals (no route, wrong method, body too large) in our error shape."""
    if exc.status == 404:
        return _error(
            404,
            "not_found",
            f"no such path {request.path}; functions are POST /memory/<name>, e.g. /memory/save, "
            "/memory/recall, /memory/bank/list",
        )
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return _error(
            405,
            "method_not_allowed",
            f"{request.method} is not allowed on {request.path}; use {allowed}",
            Allow=allowed,
        )
    if exc.status == 413:
        return _error(413, "invalid_input", f"request body is too large ({exc.reason})")
    if exc.status == 408:
        response = _error(408, "request_timeout", exc.reason)
        response.force_close()  # the rest of a slow body is not waited for
        return response
    return _error(exc.status, _status_code(exc.status), exc.reason)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place any failure becomes `{"error": {...}}`: domain errors by code, aiohttp's
    refusals by status, and anything else as a logged 500 that leaks no detail."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except WorkerError as err:
        response = _error(STATUS_BY_CODE.get(err.code, 500), err.code, err.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _http_error(request, exc)
    except Exception:
        incident = uuid.uuid4().hex[:12]
        log.exception("request_failed", method=request.method, path=request.path, incident=incident)
        response = _error(
            500,
            "internal",
            f"unexpected server error (incident {incident}); the details are in the server log",
        )
    log.debug(
        "request",
        method=request.method,
        path=request.path,
        status=response.status,
        ms=round((time.perf_counter() - started) * 1000, 2),
    )
    return response


@web.middleware
async def _gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """`access.check` before anything else runs: a refused request reads no body, touches
    nothing, and gets no `Access-Control-*` header (so no browser hands its answer to a page)."""
    policy = request.app[_POLICY_KEY].current()
    transport = request.transport
    refusal = access.check(
        policy,
        request.method,
        request.path,
        request.headers,
        peer_account=lambda: account_of(transport),
    )
    if refusal is None:
        return await handler(request)
    headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else {}
    if refusal.status == 503:  # the account could not be told for want of descriptors
        headers["Retry-After"] = "1"
    log.info("request_refused", method=request.method, path=request.path, code=refusal.code)
    response = _error(refusal.status, refusal.code, refusal.message, **headers)
    response.force_close()  # whatever body it sent is not read
    return response


@web.middleware
async def _body(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every body read whole, within `BODY_TIMEOUT_S`, before any handler runs: the routes that
    read their own (`/mcp`, the console's) would otherwise wait for a slow body as long as its
    client likes, holding a connection under the cap, and the console read only what had
    arrived. Handlers then get it from `request.read()` at once."""
    if request.method in ("GET", "HEAD") or not request.body_exists:
        return await handler(request)
    timeout_s = request.app[_BODY_TIMEOUT_KEY]
    try:
        async with asyncio.timeout(timeout_s):
            await request.read()
    except TimeoutError:
        raise web.HTTPRequestTimeout(
            reason=f"the request body did not arrive within {timeout_s:g} s"
        ) from None
    except ConnectionError:  # the client left mid-body: nobody to answer, nothing to log
        response = _error(400, "invalid_input", "the connection closed before the body arrived")
        response.force_close()
        return response
    except (web.RequestPayloadError, HttpProcessingError) as exc:
        # A body aiohttp cannot read (a bad chunk, a `Content-Encoding` it is not in): the
        # client's error, one line (its reason, not its bytes), not a server bug's 500 (its
        # pure-Python parser hands a bad first chunk's own error to the reader).
        detail = refusal_reason(exc)
        log.info("bad_http_request", client=request.remote, status=400, error=detail)
        response = _error(400, "invalid_input", f"the request body cannot be read: {detail}")
        response.force_close()  # the rest of the body is not in a state to be skipped
        return response
    return await handler(request)


async def _payload(request: web.Request, *, max_values: int | None = MAX_VALUES) -> object:
    raw = await request.read()  # already read whole, within the body timeout (`_body`)
    if not raw.strip():
        return {}
    # Bounded by MAX_BODY_BYTES, and by payload.MAX_VALUES here or by the call (`max_values`).
    return loads(raw, "request body", max_values=max_values)


def _caller(request: web.Request) -> Caller:
    """Who a call speaks for: a person at the REST door, unless a forwarding door says otherwise
    (believed as `doors.decode_caller` rules: an agent or an automatic path from anyone, the rest
    only from a request that presented the server's token — the gate has refused every request
    with a wrong one)."""
    trusted = request.headers.get("Authorization") is not None
    return decode_caller(request.headers.get(CALLER_HEADER), trusted=trusted, default=REST_CALLER)


# Answers that grow with the bank rather than with a page size (an export is every record of the
# log): built and encoded off the loop, where a large bank's held every other request for as long
# (a second per 50,000 records). Their records are read from the file, shared with nothing else.
_OFF_LOOP_ANSWERS = frozenset({"memory::export"})


def _encoded(response: Any) -> bytes:
    return _dumps(response.to_wire()).encode("utf-8")


def _function_handler(spec: catalog.FunctionSpec) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        caller = _caller(request)
        # The values are counted by `catalog.request_of`, with the function's own budget.
        body = await _payload(request, max_values=None)
        payload = catalog.with_confirm(spec, body, request.headers.get(catalog.CONFIRM_HEADER))
        service = request.app[_SERVICE_KEY]
        if spec.id in _OFF_LOOP_ANSWERS:
            response = await catalog.respond(service, spec.id, payload, caller)
            encoded = await asyncio.to_thread(_encoded, response)
            return web.Response(body=encoded, content_type="application/json", charset="utf-8")
        result = await catalog.call(service, spec.id, payload, caller)
        return web.json_response(result, dumps=_dumps)

    return handle


async def _capture(request: web.Request) -> web.StreamResponse:
    """A Stop hook's turn, into the durable queue; the capture loop runs it. Never an agent's
    (`Memory-Caller`): capture is the involuntary path, and a turn of an agent's own making would
    have extraction write into a bank its access level keeps it from writing."""
    if _caller(request).kind is CallerKind.AGENT:
        raise Forbidden("capture takes a coding agent's Stop hook's turns, not an agent's call")
    current = request.app.get(_CAPTURE_KEY)
    runner = current() if current is not None else None
    if runner is None:
        raise InvalidInput("this server does not capture turns")
    return web.json_response(await runner.enqueue(await _payload(request)), dumps=_dumps)


async def _mcp(request: web.Request) -> web.StreamResponse:
    endpoint = request.app.get(_MCP_KEY)
    if endpoint is None:
        raise InvalidInput(
            "this server has no MCP endpoint: install the mcp extra (pip install "
            "'memory-worker[mcp]'; ./scripts/run installs it) and restart it"
        )
    from memory_worker.adapters.mcp_server import McpHttp

    assert isinstance(endpoint, McpHttp)
    return await endpoint.handle(request, bank=request.match_info.get("bank"), caller=MCP_CALLER)


async def _healthz(request: web.Request) -> web.StreamResponse:
    service = request.app[_SERVICE_KEY]
    return web.json_response(
        {"ok": True, "mode": MODE, "data_dir": str(service.store.root)}, dumps=_dumps
    )


def build_app(
    service: MemoryService,
    console: ConsoleContext | None = None,
    mcp: object | None = None,
    capture: Callable[[], CaptureRunner | None] | None = None,
    *,
    policy: Callable[[], access.Policy] | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> web.Application:
    """The REST surface over `service`: one POST route per catalog entry, plus `GET /healthz`,
    `/mcp` (answered by `mcp`, an `McpHttp`, when given), `POST /capture` (into the queue of the
    runner `capture()` gives), and the console's routes when `console` is given, all behind the
    access gate (`policy`: what it accepts now; by default a loopback server's)."""
    if policy is None:
        fixed = access.Policy.build(secrets.token_urlsafe(32), DEFAULT_HOST, DEFAULT_HOST)
        policy = lambda: fixed  # noqa: E731 - a constant policy
    app = web.Application(middlewares=[_errors, _gate, _body], client_max_size=MAX_BODY_BYTES)
    app[_SERVICE_KEY] = service
    app[_POLICY_KEY] = _PolicySource(policy)
    app[_BODY_TIMEOUT_KEY] = body_timeout_s
    if mcp is not None:
        app[_MCP_KEY] = mcp
    if capture is not None:
        app[_CAPTURE_KEY] = capture
    app.router.add_post(f"/{CAPTURE_PATH}", _capture)
    app.router.add_get("/healthz", _healthz)
    for spec in catalog.CATALOG:
        app.router.add_post(f"/{spec.http_path}", _function_handler(spec))
    # With a trailing slash too: a URL pasted into a client's settings often has one.
    for path in ("/mcp", "/mcp/", "/mcp/{bank}", "/mcp/{bank}/"):
        app.router.add_route("*", path, _mcp)
    if console is not None:
        add_routes(app, console)
    return app


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket, not yet accepting: the port is known before the store's lock is
    taken. Listening at once, since the lock's record names this URL from then on and a socket
    that is only bound can be bound again by another process (SO_REUSEADDR), which would get
    the calls clients forward here (connections wait in the backlog until the app serves)."""
    if not 0 <= port <= 65535:
        raise InvalidInput(f"--port must be between 0 and 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidInput(f"--host {host!r} does not resolve: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart during TIME_WAIT
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(f"cannot listen on {host}:{port}: {reason}") from None
        raise InvalidInput(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


# A wildcard listener is reached on this machine through loopback: a browser refuses to open
# `http://0.0.0.0:…` (the URL the server printed), and a forwarded call needs an address too.
_WILDCARD_AS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    host = _WILDCARD_AS.get(host, host)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-worker")
    except PackageNotFoundError:
        return ""


class StandaloneServer:
    """The REST service over one data dir: `start()` / `wait()` / `close()`; `stop()` from a
    signal handler (or a test) ends `wait()`."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
        config_path: Path | None = None,
        data_dir_flag: str | None = None,
        completer: Completer | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        write_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        self.settings = settings
        # What capture's passes ask (the extraction endpoint); None: turns wait in the queue.
        self.completer = completer
        self.data_dir = data_dir
        self.config_path = config_path  # hot-reloaded when given
        self.data_dir_flag = data_dir_flag  # wins over the file's data_dir, as at start
        self.host = host
        self.port = port
        self.shutdown_timeout_s = shutdown_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = body_timeout_s
        self.max_connections = max_connections
        self.write_timeout_s = write_timeout_s
        self.embedder: Embedder | None = None  # the semantic arm, when one was loaded
        # What a settings-file change loads (a local model), so turning embeddings on or picking
        # another model needs no restart.
        self.embedder_for: Callable[[Settings], Embedder | None] | None = None
        self.url: str | None = None
        self.service: MemoryService | None = None
        self._sock: socket.socket | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._watchers: list[DataDirWatcher | SettingsFileWatcher] = []
        self._site: CappedSite | None = None
        self._tokens: dict[Path, str] = {}  # data dir → its token (made at start, or on reopen)
        self._policy: tuple[tuple[object, ...], access.Policy] | None = None
        self._previous_handler: object = None
        self._out_of_descriptors = False  # one log line per episode, not one per failed accept
        self.feed = ConsoleFeed()  # the console tabs' live stream: this mode's change events
        self._apply_settings: Callable[[Settings], Awaitable[Applied]] | None = None
        self._mcp: Any = None  # McpHttp, when the mcp extra is installed
        self.capture: CaptureRunner | None = None
        self._own_completer: OpenAIChatCompleter | None = None
        # The banks' boot after the server started serving: its result is how many memories
        # retention's sweep retired (tests await it).
        self.booting: asyncio.Task[int] | None = None

    def __repr__(self) -> str:
        state = "stopping" if self._stopping.is_set() else "running" if self._runner else "idle"
        return f"<StandaloneServer {state} url={self.url!r} service={self.service!r}>"

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def settings_watcher(self) -> SettingsFileWatcher | None:
        """The watcher of the settings file, when one is served (tests wait on its changes)."""
        return next((w for w in self._watchers if isinstance(w, SettingsFileWatcher)), None)

    def _holder(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "kind": "serve",
            "command": "memory-worker serve",
            "url": self.url,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    @property
    def token_path(self) -> Path | None:
        """Where the bearer token of the data dir being served is (never logged itself)."""
        return self.service.store.root / access.TOKEN_FILE if self.service else None

    def _token(self, root: Path) -> str:
        token = self._tokens.get(root)
        if token is None:
            token = self._tokens[root] = access.ensure_token(root)
        return token

    def policy(self) -> access.Policy:
        """What the gate accepts now: the served data dir's token and the live settings."""
        service = self.service
        assert service is not None and self._sock is not None
        settings, root = service.settings, service.store.root
        key = (root, tuple(settings.allowed_hosts), settings.require_token)
        if self._policy is None or self._policy[0] != key:
            built = access.Policy.build(
                self._token(root),
                self.host,
                self._sock.getsockname()[0],
                settings.allowed_hosts,
                require_token=settings.require_token,
            )
            self._policy = (key, built)
        return self._policy[1]

    async def start(self) -> str:
        """Bind, open the store (lock holder names the URL), make its token, listen; returns the
        URL. Raises `Conflict` (port or data dir taken), `StorageError` or `InvalidInput`,
        leaving nothing open."""
        loop = asyncio.get_running_loop()
        try:
            self._sock = _bind(self.host, self.port)
            self.url = _url(self._sock)
            # Lazy: the banks are replayed after the server starts serving (`booting`).
            holder = self._holder()
            store = await asyncio.to_thread(
                Store.open,
                self.data_dir,
                holder=holder,
                lock_wait_s=SHORT_HOLDER_WAIT_S,
                lazy=True,
            )
            self.service = service = MemoryService(
                store,
                self.settings,
                embedder=self.embedder,
                emitter=self.feed,
                # With no completer given, turns are extracted only through an endpoint.
                engine_less=self.completer is None,
            )
            await asyncio.to_thread(self._token, store.root)
            if self.completer is None:
                self._own_completer = OpenAIChatCompleter(lambda: service.settings)
            await self._start_capture(service)
            await self._watch(service)
            console = ConsoleContext(
                feed=self.feed,
                settings=lambda: service.settings,
                config_path=self.config_path,
                apply=self._apply_settings,
                data_dir=lambda: service.store.root,
            )
            self._mcp = await self._start_mcp()
            self._runner = web.AppRunner(
                build_app(
                    service,
                    console,
                    self._mcp,
                    lambda: self.capture,
                    policy=self.policy,
                    body_timeout_s=self.body_timeout_s,
                ),
                access_log=None,
                logger=_ProtocolLog(),
                shutdown_timeout=self.shutdown_timeout_s,
                keepalive_timeout=self.idle_timeout_s,
                lingering_time=1.0,
                max_field_size=MAX_FIELD_BYTES,
                max_headers=MAX_HEADERS,
            )
            await self._runner.setup()
            self._previous_handler = loop.get_exception_handler()
            loop.set_exception_handler(self._loop_exception)
            self._site = CappedSite(
                self._runner,
                self._sock,
                self.max_connections,
                self.write_timeout_s,
                protocol=_Protocol,
            )
            self._site.accepting = self._accepted
            await self._site.start()
        except BaseException:
            await self.close()
            raise
        # Every bank replayed, embedded and swept, one at a time while calls are answered.
        self.booting = asyncio.create_task(service.boot_banks(), name="memory-boot")
        if self.policy().token_required:
            log.warning(
                "serving_beyond_loopback",
                url=self.url,
                detail="every request needs the bearer token",
                token_file=str(self.token_path),
            )
        return self.url

    async def _start_capture(self, service: MemoryService) -> None:
        """The capture loop over the queue of the data dir the service runs on now (again
        after a `data_dir` change: the queue belongs to its data dir)."""
        if self.capture is not None:
            await self.capture.close()
        queue = await asyncio.to_thread(CaptureQueue, service.store.root)
        self.capture = CaptureRunner(
            service,
            queue,
            self.completer or self._own_completer,
            # Without an endpoint, turns wait in the queue (never fail for want of one).
            available=lambda: bool(service.settings.extraction_endpoint),
        )
        self.capture.start()

    @contextlib.asynccontextmanager
    async def _door(self, caller: Caller) -> AsyncIterator[Door]:
        """The in-process door MCP calls go through: whichever store this server runs on now."""
        if self.service is None:
            raise Conflict("the server is stopping")
        yield LocalDoor(self.service, caller)

    async def _start_mcp(self) -> Any:
        try:
            from memory_worker.adapters.mcp_server import McpHttp, McpTools
        except ImportError as exc:  # the mcp extra is not installed: /mcp says how to get it
            log.info("mcp_unavailable", detail=str(exc))
            return None
        endpoint = McpHttp(McpTools(self._door), version=_version())
        await endpoint.start()
        return endpoint

    def _accepted(self) -> None:
        if self._out_of_descriptors:
            self._out_of_descriptors = False
            log.info("accepting_again", url=self.url)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        """asyncio's accept loop already backs off a second when the process (or the system) is
        out of file descriptors, but reports every attempt with a traceback: one line instead."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS:
            if not self._out_of_descriptors:
                self._out_of_descriptors = True
                log.error(
                    "accept_paused",
                    url=self.url,
                    error=exc.strerror or str(exc),
                    detail="out of file descriptors: new connections wait, retried every second",
                )
            return
        previous = self._previous_handler
        if callable(previous):
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    async def _watch(self, service: MemoryService) -> None:
        """Hand edits of the data dir, and of the settings file when there is one."""
        data_dir_watcher = DataDirWatcher(lambda: service)
        watchers: list[DataDirWatcher | SettingsFileWatcher] = [data_dir_watcher]
        if self.config_path is not None:
            reconfigure = Reconfigurer(
                service,
                lambda s: resolve_data_dir(self.data_dir_flag, s),
                lambda path: Store.open(path, holder=self._holder()),
                self.embedder_for,
            )

            async def apply(settings: Settings) -> Applied:
                applied = await reconfigure.apply(settings)
                if applied is Applied.REOPENED:
                    await asyncio.to_thread(self._token, service.store.root)  # its own token
                    await data_dir_watcher.restart()  # follow the new data dir at once
                    await self._start_capture(service)
                    self.feed.resync()  # open tabs show the old dir's banks: refetch them all
                return applied

            self._apply_settings = apply  # the console's settings edits apply the same way
            watchers.append(SettingsFileWatcher(self.config_path, apply))
        for watcher in watchers:
            await watcher.start()
            self._watchers.append(watcher)

    async def _stop_naming_url(self) -> None:
        """The lock's record stops naming this URL before the port is let go: until the store
        closes (in-flight requests, the banks' last writes) the lock is still held, and a client
        reading the URL would forward its call and token to whatever took the port meanwhile.
        A client waits for the lock instead (`files.STOPPING`)."""
        service = self.service
        if service is None:
            return
        holder: dict[str, object] = {**self._holder(), "kind": files.STOPPING}
        holder.pop("url", None)
        try:
            await asyncio.to_thread(service.store.rewrite_holder, holder)
        except WorkerError as err:
            log.warning("holder_not_rewritten", error=str(err))

    def stop(self, reason: str = "stop requested") -> None:
        if self._stopping.is_set():
            log.info("already_stopping", reason=reason)
            return
        log.info("stopping", reason=reason, url=self.url)
        self._stopping.set()

    async def wait(self) -> None:
        await self._stopping.wait()

    async def close(self) -> None:
        """Stop listening, finish (or after the timeout cancel) in-flight requests, then drain and
        close the store. Safe to call more than once and after a failed `start()`."""
        self._stopping.set()
        booting, self.booting = self.booting, None
        if booting is not None:  # the banks it has not reached are simply never replayed
            booting.cancel()
            await asyncio.gather(booting, return_exceptions=True)
        self.feed.close()  # live streams end now, so they do not hold the runner's shutdown
        for watcher in self._watchers:
            await watcher.stop()
        self._watchers.clear()
        if self._site is not None:
            with contextlib.suppress(RuntimeError):  # the loop may be another one's (tests)
                asyncio.get_running_loop().set_exception_handler(
                    self._previous_handler  # type: ignore[arg-type]
                )
            self._site = None
        runner, self._runner = self._runner, None
        if runner is not None:
            await self._stop_naming_url()
            await runner.cleanup()
        mcp, self._mcp = self._mcp, None
        if mcp is not None:
            await mcp.close()
        capture, self.capture = self.capture, None
        if capture is not None:
            await capture.close()
        completer, self._own_completer = self._own_completer, None
        if completer is not None:
            await completer.aclose()
        if self._sock is not None:
            self._sock.close()  # only matters when start() failed before listening
            self._sock = None
        service, self.service = self.service, None
        if service is not None:
            await service.close()
            await service.store.close()
            log.info("stopped", url=self.url, data_dir=str(service.store.root))


async def serve(
    settings: Settings,
    data_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    embedder: Embedder | None = None,
    embedder_for: Callable[[Settings], Embedder | None] | None = None,
    reason: str = "",
    config_path: Path | None = None,
    data_dir_flag: str | None = None,
) -> int:
    """Run the standalone service until SIGTERM or SIGINT; exit status 0 after a clean close."""
    server = StandaloneServer(
        settings,
        data_dir,
        host=host,
        port=port,
        config_path=config_path,
        data_dir_flag=data_dir_flag,
    )
    server.embedder = embedder
    server.embedder_for = embedder_for
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, server.stop, sig.name)
    try:
        url = await server.start()
        log.info(
            "serving",
            mode=MODE,
            reason=reason,
            url=url,
            data_dir=str(data_dir.resolve()),
            pid=os.getpid(),
        )
        if not server.stopping:
            print(READY_LINE.format(url=url), flush=True)
            print(CONSOLE_LINE.format(url=url), flush=True)
        await server.wait()
    finally:
        try:
            await server.close()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
    return 0
