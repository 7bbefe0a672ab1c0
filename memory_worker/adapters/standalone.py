"""`memory-worker serve` in standalone mode: the catalog over local REST, with no engine.

Every catalog function is `POST /memory/<http_path>` (the paths the iii http triggers use); the body
is the JSON payload (empty = `{}`), the answer is the JSON result, and every failure is
`{"error": {"code", "message"}}` with a status from `STATUS_BY_CODE`. `GET /healthz` says which mode
runs on which data dir. `GET /` is the console (`adapters.console`); its live stream is fed by the
service's change events (`ConsoleFeed` is this mode's `Emitter`).

Lifecycle, explicit rather than hidden in `web.run_app`:
- `start()` binds the socket first (so the real port is known), then opens the store with a lock
  holder naming this server's URL, then listens. No request can reach a half-opened server, and a
  refused command (`trigger`, a second `serve`) can name the URL to use instead.
- `wait()` returns once `stop()` is called (the `serve()` driver wires SIGTERM and SIGINT to it).
- `close()` stops accepting, lets in-flight requests finish (up to `SHUTDOWN_TIMEOUT_S`, then
  cancels them), drains the banks' pending writes and closes the store, releasing the lock.

A bug never reaches the client as a traceback: it is logged with one (under an incident id) and
answered 500 `internal`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from memory_worker.adapters.console.feed import ConsoleFeed
from memory_worker.adapters.console.web import ConsoleContext, add_routes
from memory_worker.adapters.settings_file import SettingsFileWatcher
from memory_worker.adapters.watch import DataDirWatcher
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import Embedder
from memory_worker.app.reconfigure import Applied, Reconfigurer
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings, resolve_data_dir
from memory_worker.core.errors import HTTP_STATUS, Conflict, InvalidInput, WorkerError
from memory_worker.storage.store import Store

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "STATUS_BY_CODE",
    "StandaloneServer",
    "build_app",
    "serve",
]

log = structlog.get_logger(__name__)

# The person the local service answers to (an agent token, when access levels need one, will
# name an agent instead).
REST_CALLER = Caller.human("rest")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
SHUTDOWN_TIMEOUT_S = 5.0  # in-flight requests get this long after SIGTERM, then are cancelled
MODE = "standalone"
READY_LINE = "memory-worker serving on {url}"  # scripts and tests wait for this line on stdout
CONSOLE_LINE = "console: open {url}/ in a browser"  # printed right after, for a person

STATUS_BY_CODE = HTTP_STATUS  # kept under its old name for importers

_SERVICE_KEY = web.AppKey("service", MemoryService)
_dumps = functools.partial(json.dumps, ensure_ascii=False)


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
    code = HTTPStatus(exc.status).phrase.lower().replace(" ", "_").replace("-", "_")
    return _error(exc.status, code, exc.reason)


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


async def _payload(request: web.Request) -> object:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None


def _function_handler(spec: catalog.FunctionSpec) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        payload = await _payload(request)
        result = await catalog.call(request.app[_SERVICE_KEY], spec.id, payload, REST_CALLER)
        return web.json_response(result, dumps=_dumps)

    return handle


async def _healthz(request: web.Request) -> web.StreamResponse:
    service = request.app[_SERVICE_KEY]
    return web.json_response(
        {"ok": True, "mode": MODE, "data_dir": str(service.store.root)}, dumps=_dumps
    )


def build_app(service: MemoryService, console: ConsoleContext | None = None) -> web.Application:
    """The REST surface over `service`: one POST route per catalog entry, plus `GET /healthz`,
    and the console's routes when `console` is given."""
    app = web.Application(middlewares=[_errors])
    app[_SERVICE_KEY] = service
    app.router.add_get("/healthz", _healthz)
    for spec in catalog.CATALOG:
        app.router.add_post(f"/{spec.http_path}", _function_handler(spec))
    if console is not None:
        add_routes(app, console)
    return app


def _bind(host: str, port: int) -> socket.socket:
    """A bound, not yet listening socket: the port is known before the store's lock is taken."""
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
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(f"cannot listen on {host}:{port}: {reason}") from None
        raise InvalidInput(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
    ) -> None:
        self.settings = settings
        self.data_dir = data_dir
        self.config_path = config_path  # hot-reloaded when given
        self.data_dir_flag = data_dir_flag  # wins over the file's data_dir, as at start
        self.host = host
        self.port = port
        self.shutdown_timeout_s = shutdown_timeout_s
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
        self.feed = ConsoleFeed()  # the console tabs' live stream: this mode's change events
        self._apply_settings: Callable[[Settings], Awaitable[Applied]] | None = None

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

    async def start(self) -> str:
        """Bind, open the store (lock holder names the URL), listen; returns the URL. Raises
        `Conflict` (port or data dir taken), `StorageError` or `InvalidInput`, leaving nothing
        open."""
        try:
            self._sock = _bind(self.host, self.port)
            self.url = _url(self._sock)
            store = await asyncio.to_thread(Store.open, self.data_dir, holder=self._holder())
            self.service = service = MemoryService(
                store, self.settings, embedder=self.embedder, emitter=self.feed
            )
            service.backfill_embeddings()
            await self._watch(service)
            console = ConsoleContext(
                feed=self.feed,
                settings=lambda: service.settings,
                config_path=self.config_path,
                apply=self._apply_settings,
            )
            self._runner = web.AppRunner(
                build_app(service, console),
                access_log=None,
                shutdown_timeout=self.shutdown_timeout_s,
            )
            await self._runner.setup()
            await web.SockSite(self._runner, self._sock).start()
        except BaseException:
            await self.close()
            raise
        if not _is_loopback(self._sock.getsockname()[0]):
            log.warning("serving_beyond_loopback", url=self.url, detail="no authentication")
        return self.url

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
                    await data_dir_watcher.restart()  # follow the new data dir at once
                return applied

            self._apply_settings = apply  # the console's settings edits apply the same way
            watchers.append(SettingsFileWatcher(self.config_path, apply))
        for watcher in watchers:
            await watcher.start()
            self._watchers.append(watcher)

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
        self.feed.close()  # live streams end now, so they do not hold the runner's shutdown
        for watcher in self._watchers:
            await watcher.stop()
        self._watchers.clear()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
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
