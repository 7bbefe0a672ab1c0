"""One writer, many doors: every client of a data dir (the CLI, `memory-worker mcp`, the agent
hooks) calls through a `Door`, which is the data dir opened in-process when nobody holds it, or
the server that holds it, over HTTP, when one does.

- Only one process writes a data dir (its `.lock`). A served worker records its URL in the lock's
  holder record, so a client refused the lock reads where to go instead of failing. A data dir
  held by a short CLI call is waited for (the lock's own wait); one held by a process with no URL
  (an engine-mode worker) is still refused, naming it.
- A forwarded call is the same catalog call: `POST <url>/memory/<path>` with the payload, the
  result or `{"error": {code, message}}` back, the error re-raised with its code, so a caller
  cannot tell the doors apart by what they answer.
- Who is calling travels in the `Memory-Caller` header (`encode_caller`). The server believes a
  claim that narrows what the caller may do (an agent, an automatic path such as consolidate)
  from anyone, and any other claim (a person at the CLI, an internal path such as a hook) only
  from a request that presented the server's token: see `decode_caller`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from memory_worker.adapters import access
from memory_worker.app import functions
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.core.errors import (
    ERROR_CLASSES,
    Conflict,
    InvalidInput,
    SiblingUnavailable,
    WorkerError,
)
from memory_worker.core.payload import check_depth
from memory_worker.storage import files
from memory_worker.storage.logger import get_logger

# A forwarded call (the data dir is held by a server) needs none of the service: a one-shot CLI
# call or a coding agent's hook, a new process each time, would import the catalog's models,
# numpy and the whole store for nothing (most of a second of CPU). The in-process door imports
# them when it opens the data dir itself.
if TYPE_CHECKING:
    from memory_worker.app.ports import Embedder
    from memory_worker.app.service import MemoryService
    from memory_worker.core.config import Settings

__all__ = [
    "CALLER_HEADER",
    "CAPTURE_PATH",
    "Door",
    "LocalDoor",
    "RemoteDoor",
    "RemoteError",
    "decode_caller",
    "encode_caller",
    "open_door",
    "request_body",
    "serving_url",
]

log = get_logger(__name__)

CALLER_HEADER = "Memory-Caller"
CAPTURE_PATH = "capture"  # POST /capture on the standalone server: queue one turn
FORWARD_TIMEOUT_S = 300.0  # a forwarded doctor, import or compaction may take a while
_MAX_CALLER_HEADER = 2048
_CALLER_FIELDS = ("via", "worker_id", "session_id", "turn_id", "agent")


class Door(Protocol):
    """Where a client's calls go: `call` is `catalog.call` on behalf of the door's caller."""

    @property
    def remote(self) -> str | None:
        """The server's URL when calls are forwarded; None in-process."""
        ...

    async def call(self, function_id: str, payload: object) -> dict[str, Any]: ...

    async def capture(self, job: dict[str, Any]) -> dict[str, Any]:
        """Queue one turn for extraction (`harness.capture.CaptureJob`): `{"queued", "new"}`."""
        ...


@dataclass(frozen=True, slots=True)
class LocalDoor:
    """The data dir opened in this process."""

    service: MemoryService
    caller: Caller

    @property
    def remote(self) -> str | None:
        return None

    async def call(self, function_id: str, payload: object) -> dict[str, Any]:
        from memory_worker.app import catalog

        return await catalog.call(self.service, function_id, payload, self.caller)

    async def capture(self, job: dict[str, Any]) -> dict[str, Any]:
        """Into the data dir's queue (this process holds the lock); a server started later, or
        `memory-worker capture`, runs it."""
        from memory_worker.harness.capture import CaptureRunner
        from memory_worker.storage.capture import CaptureQueue

        queue = await asyncio.to_thread(CaptureQueue, self.service.store.root)
        try:
            # This process only queues the turn; the next server start (or `memory-worker
            # capture`) runs it under its own settings. Settings read from no configuration file
            # (the README's hook commands name none; the endpoint is in the server's `--config`)
            # cannot say that server has no endpoint: the turn is queued, and a server with none
            # expires it after 7 days. A configuration read here is believed.
            configured = bool(self.service.settings.model_fields_set)
            runner = CaptureRunner(self.service, queue, None, knows_endpoint=configured)
            return await runner.enqueue(job)
        finally:
            await asyncio.to_thread(queue.close)


class RemoteError(WorkerError):
    """An error the server answered with a code this side has no class for (`unauthorized`,
    `forbidden`, `internal`, …): the code is carried as it came."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _error_of(status: int, body: object, url: str) -> WorkerError:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code, message = error["code"], str(error.get("message", ""))
        known = ERROR_CLASSES.get(code)
        return known(message) if known is not None else RemoteError(code, message)
    return SiblingUnavailable(f"the server at {url} answered {status} without an error body")


class RemoteDoor:
    """Calls forwarded to the server holding the data dir. Use as `async with`.

    One HTTP/1.1 exchange per call with the standard library's `http.client` (`Connection:
    close`), not httpx: a forwarded one-shot process (a coding agent's hook, one per prompt) would
    spend more importing it (and the CLI tools it loads when they are installed) than the call
    takes. The holder's URL is on this machine's word: no proxy, netrc or redirect is followed,
    and nothing is sent to a port another account on the machine holds (`_check_server_account`).
    A cancelled call closes its connection at once.

    `choose_again`: what a call the server's port refuses goes through instead, asked once. The
    server stopped (or was killed) after its URL was read, which a call made while `memory-worker
    serve` restarts hits often; the call never reached it, so it is sent again through the door
    chosen anew (the stopping server's lock waited for, or the server started since)."""

    def __init__(
        self,
        url: str,
        caller: Caller,
        *,
        token: str | None = None,
        timeout_s: float = FORWARD_TIMEOUT_S,
        choose_again: Callable[[], Awaitable[Door]] | None = None,
        owner: int | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._owner = owner  # the data dir's owner (uid): its server is no stranger's
        self.caller = caller
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"the server URL {url!r} is not an http(s) URL")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._base = parts.path  # what the server's paths sit under ("" for a plain server)
        netloc = parts.netloc.rpartition("@")[2]  # never credentials in a Host header
        self._headers = {
            "Host": netloc,
            **access.request_headers(token),
            CALLER_HEADER: encode_caller(caller),
            "Connection": "close",
        }
        self._timeout_s = timeout_s
        self._choose_again = choose_again
        self._instead: Door | None = None

    def __repr__(self) -> str:
        return f"RemoteDoor({self.url!r}, caller={self.caller.describe()!r})"

    @property
    def remote(self) -> str | None:
        return self.url if self._instead is None else self._instead.remote

    async def __aenter__(self) -> RemoteDoor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing stays open between calls (each has its own connection)."""

    async def call(self, function_id: str, payload: object) -> dict[str, Any]:
        functions.check_known(function_id)  # an unknown function fails here, as in-process
        path = functions.http_path(function_id)
        return await self._sent(path, payload, lambda door: door.call(function_id, payload))

    async def capture(self, job: dict[str, Any]) -> dict[str, Any]:
        """To the server's queue: it runs the job as soon as it can."""
        return await self._sent(CAPTURE_PATH, job, lambda door: door.capture(job))

    async def _sent(
        self, path: str, payload: object, instead: Callable[[Door], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        if self._instead is not None:
            return await instead(self._instead)
        try:
            return await self._post(path, payload)
        except _Refused:
            choose_again, self._choose_again = self._choose_again, None
            if choose_again is None:
                raise
        log.info("forward_refused_choosing_again", url=self.url)
        self._instead = await choose_again()
        return await instead(self._instead)

    async def _post(self, path: str, payload: object) -> dict[str, Any]:
        # Here, not at the top: a call the process answers itself (nobody holds the data dir)
        # never loads the HTTP client, nor the email parser and ssl it imports.
        import http.client

        url = f"{self.url}/{path}"
        body = request_body({} if payload is None else payload)
        try:
            async with asyncio.timeout(self._timeout_s):
                status, raw = await self._exchange(f"{self._base}/{path}", body)
        except TimeoutError:
            raise SiblingUnavailable(f"the server at {self.url} did not answer in time") from None
        except ConnectionRefusedError as exc:
            raise _Refused(self.url, exc) from None
        except (OSError, http.client.HTTPException) as exc:
            raise SiblingUnavailable(
                f"the server at {self.url} holds the data dir but cannot be reached: "
                f"{type(exc).__name__}"
            ) from None
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            answer = None
        if status >= 400:
            raise _error_of(status, answer, self.url)
        if not isinstance(answer, dict):
            raise SiblingUnavailable(f"the server at {self.url} answered {url} with no JSON object")
        return answer

    async def _exchange(self, target: str, body: bytes) -> tuple[int, bytes]:
        """POST `body` to `target`: (status, response body), through the standard library's
        HTTP client in a thread. A cancelled call (the hook's budget) shuts the socket, so the
        thread returns at once instead of waiting for the server."""
        import http.client

        connection_class = http.client.HTTPSConnection if self._tls else http.client.HTTPConnection
        connection = connection_class(self._host, self._port, timeout=self._timeout_s)

        def exchange() -> tuple[int, bytes]:
            connection.connect()
            _check_server_account(connection.sock, self.url, self._owner)
            connection.request("POST", target, body=body, headers=self._headers)
            response = connection.getresponse()
            return response.status, response.read()

        try:
            return await asyncio.to_thread(exchange)
        finally:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()


class _NotOurs(ConnectionRefusedError):
    """The server's port is held by another account's program: nothing was sent to it."""


def _check_server_account(sock: socket.socket, url: str, owner: int | None = None) -> None:
    """Nothing is sent (not the call, not the token) to a server another account on this machine
    runs: the port the lock's record names is one any account can take the moment the server
    lets it go, and the call then chooses its door again (the lock waited for), as when the port
    refuses it. Root's is taken (it can read the data dir anyway), and so is that of `owner`, the
    account owning the data dir (root's CLI on a person's data dir forwards to the server the
    person runs); where the account cannot be told (not Linux, a server on another machine), as
    before."""
    from memory_worker.adapters.accounts import server_account

    holder = server_account(sock)
    if holder is not None and holder not in (0, os.geteuid(), owner):
        raise _NotOurs(f"the server at {url} is another account's (uid {holder}): nothing was sent")


class _Refused(SiblingUnavailable):
    """The server's port refused the connection: the call never reached it, so it is safe to
    send again (`RemoteDoor`'s `choose_again`)."""

    def __init__(self, url: str, exc: OSError) -> None:
        super().__init__(
            str(exc)
            if isinstance(exc, _NotOurs)
            else f"the server at {url} holds the data dir but cannot be reached: "
            f"{type(exc).__name__}"
        )


def request_body(payload: object) -> bytes:
    """`payload` as the JSON body of a forwarded call: the server must read back exactly what
    the process would have called with, or the two answer differently. What JSON cannot carry
    (NaN, Infinity) is `invalid_input`, as `catalog.call` refuses it in-process."""
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        # NaN or Infinity: refused in the words of the in-process call (its own size budget aside)
        check_depth(payload, max_values=None)
        raise InvalidInput(f"payload is not JSON: {exc}") from None
    # A lone surrogate (a caller's `"\ud800"`) has no UTF-8 form: it can only stand inside a JSON
    # string, where the same `\ud800` escape is valid and reads back as the same text.
    return text.encode("utf-8", "backslashreplace")


# --- who is calling, over HTTP -----------------------------------------------------------------


def encode_caller(caller: Caller) -> str:
    """The `Memory-Caller` header of a forwarded call (JSON, ASCII)."""
    fields = {"kind": str(caller.kind)}
    fields.update({name: value for name in _CALLER_FIELDS if (value := getattr(caller, name))})
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":"))


def decode_caller(header: str | None, *, trusted: bool, default: Caller) -> Caller:
    """The caller a REST request speaks for. Without a header: `default` (a person at the REST
    door). A claim that only narrows what the call may do is believed from anyone: an agent's,
    and an automatic path's (consolidate, extraction: never a pinned, retired or other subject's
    memory, never a deleted bank) in place of a person — believed bare, since its session and
    agent would be provenance on the caller's word. Any other human or internal claim widens it,
    so it is believed only when `trusted` (the request presented the server's token); otherwise
    `default`. A malformed header is `invalid_input`, never silently someone else."""
    if header is None:
        return default
    if len(header) > _MAX_CALLER_HEADER:
        raise InvalidInput(f"{CALLER_HEADER} header is longer than {_MAX_CALLER_HEADER} bytes")
    try:
        fields = json.loads(header)
    except ValueError:
        raise InvalidInput(f"{CALLER_HEADER} header is not JSON") from None
    except RecursionError:  # 2048 bytes are enough to reach the decoder's recursion limit
        raise InvalidInput(f"{CALLER_HEADER} header is nested too deep") from None
    if not isinstance(fields, dict):
        raise InvalidInput(f"{CALLER_HEADER} header must be a JSON object")
    try:
        kind = CallerKind(str(fields.get("kind")))
    except ValueError:
        raise InvalidInput(f"{CALLER_HEADER} kind must be human, agent or internal") from None
    values = {name: fields.get(name) for name in _CALLER_FIELDS}
    if any(v is not None and not isinstance(v, str) for v in values.values()):
        raise InvalidInput(f"{CALLER_HEADER} fields must be strings")
    via = values.pop("via") or default.via
    if kind is CallerKind.AGENT:
        return Caller.for_agent(via, **values)
    if not trusted:
        automatic = Caller.internal(via)
        # Only in place of a person: for an agent, an internal caller would skip its access level.
        narrows = kind is CallerKind.INTERNAL and default.kind is CallerKind.HUMAN
        return automatic if narrows and automatic.automatic else default
    if kind is CallerKind.HUMAN:
        return Caller.human(via)
    return Caller.internal(
        via, session_id=values["session_id"], turn_id=values["turn_id"], agent=values["agent"]
    )


# --- choosing the door -------------------------------------------------------------------------


def serving_url(root: Path) -> str | None:
    """The URL of the server holding `root`, from its lock's holder record; None when the holder
    is not a server with a URL (or nothing holds it)."""
    holder = files.DataDirLock(root, {}).read_holder()
    url = holder.get("url")
    if holder.get("kind") == "serve" and isinstance(url, str) and url.startswith("http"):
        return url
    return None


def _holder(command: str) -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "kind": "cli",
        "command": command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


@contextlib.asynccontextmanager
async def _forwarded(
    root: Path,
    url: str,
    caller: Caller,
    command: str,
    timeout_s: float,
    again: Callable[[], contextlib.AbstractAsyncContextManager[Door]] | None,
) -> AsyncIterator[Door]:
    log.debug("forwarding", url=url, command=command)
    async with contextlib.AsyncExitStack() as stack:  # holds the door chosen again, if any
        door = RemoteDoor(
            url,
            caller,
            token=access.client_token(root),
            timeout_s=timeout_s,
            choose_again=None if again is None else lambda: stack.enter_async_context(again()),
            owner=_owner_of(root),
        )
        async with door:
            yield door


def _owner_of(root: Path) -> int | None:
    """The uid owning the data dir `root`; None when it cannot be read."""
    try:
        return root.stat().st_uid
    except OSError:
        return None


def _lock(root: Path, command: str, wait_s: float) -> files.DataDirLock:
    """`root` probed and locked for this process, as `Store.open` does (`Conflict` when held)."""
    files.probe_writable(root)
    lock = files.DataDirLock(root, _holder(command))
    lock.acquire(wait_s)
    return lock


_CATALOG = "memory_worker.app.catalog"
_T = TypeVar("_T")
_UNDOING: set[asyncio.Task[None]] = set()  # undos under way (a task nobody holds may vanish)


async def _in_thread(work: Callable[[], _T], undo: Callable[[_T], Awaitable[None]]) -> _T:
    """`work()` in a worker thread, undone (`undo(result)`) when this task is cancelled before
    the thread is over. A cancelled `to_thread` cannot stop its thread: the lock it then took (the
    store it opened) was held for nobody until the process exited, and an MCP client's cancelled
    call locked the server's next calls, the hooks and the CLI out of the data dir."""
    future = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def done(finished: asyncio.Future[_T]) -> None:
            if finished.cancelled() or finished.exception() is not None:
                return  # nothing was taken: `_lock` and `Store.adopt` let go of what they hold
            task = asyncio.ensure_future(_quietly(undo(finished.result())))
            _UNDOING.add(task)
            task.add_done_callback(_UNDOING.discard)

        future.add_done_callback(done)
        raise


async def _quietly(undoing: Awaitable[None]) -> None:
    try:
        await undoing
    except Exception as exc:  # an undo nobody waits for: said, not raised
        log.warning("cancelled_open_undo_failed", error=str(exc))


async def _release(lock: files.DataDirLock) -> None:
    lock.release()


@contextlib.asynccontextmanager
async def open_door(
    root: Path,
    settings: Callable[[], Settings],
    caller: Caller,
    *,
    command: str,
    lock_wait_s: float,
    embedder: Embedder | None = None,
    make_embedder: Callable[[], Embedder | None] | None = None,
    embed_writes: bool = True,
    catch_up_s: float = 0.0,
    forward_timeout_s: float = FORWARD_TIMEOUT_S,
    short_lived: bool = False,
    choose_again: bool = True,
) -> AsyncIterator[Door]:
    """The door to `root` for one command: the data dir opened in-process (its lock held until
    the block ends, what was saved embedded before it closes), or the server holding it.
    `settings` and `make_embedder` (instead of `embedder`) are called only in-process: a
    forwarded call never builds the settings (pydantic is not even imported then: the CLI's
    forwarded hook runs once per prompt) nor loads an embedder (the server embeds).
    `short_lived`: the process exits after this command (`Store.adopt`), unlike an MCP server
    opening a door per call. `catch_up_s`: in-process, with `embed_writes` False, how long a
    recall may embed what its bank lacks first (`MemoryService.catch_up_s`). `choose_again`: a
    forwarded call the server's port refuses chooses its door again, once (`RemoteDoor`)."""
    root = root.resolve()
    again = (
        functools.partial(
            open_door,
            root,
            settings,
            caller,
            command=command,
            lock_wait_s=lock_wait_s,
            embedder=embedder,
            make_embedder=make_embedder,
            embed_writes=embed_writes,
            catch_up_s=catch_up_s,
            forward_timeout_s=forward_timeout_s,
            short_lived=short_lived,
            choose_again=False,
        )
        if choose_again
        else None
    )
    lock = None
    if serving_url(root) is not None:
        # A server's record in the lock: it most likely holds the data dir, so the lock is tried
        # at once, with nothing but `storage.files` imported, and a refused call is forwarded
        # before anything of the store or the service is.
        try:
            lock = await _in_thread(functools.partial(_lock, root, command, 0.0), _release)
        except Conflict:
            lock = None
            # No server names itself any more (it was killed or is stopping, and a one-shot
            # call holds the lock now): the lock is waited for below, as for any short holder.
            if (url := serving_url(root)) is not None:
                async with _forwarded(root, url, caller, command, forward_timeout_s, again) as door:
                    yield door
                return
    try:
        # The store and the service are imported before the lock is waited for, not while it is
        # held: twelve CLI calls queued on one data dir would each hold it for the imports too.
        # A process that exits after this command imports them with the collector paused, as a
        # bank's boot is built (`storage.boot`): modules, classes and their schemas are never
        # garbage, and the collector's passes over them as they piled up (~80 young and ~8
        # older ones) were ~15-20 ms of every local one-shot call. What they made is frozen
        # after. (Once imported, as in a process that opened a door before, there is no pile.)
        from memory_worker.storage.boot import booting  # (not on a forwarded call's path)

        first = short_lived and _CATALOG not in sys.modules
        with booting(hand_back=False) if first else contextlib.nullcontext():
            from memory_worker.app.service import MemoryService
            from memory_worker.storage.store import Store

            importlib.import_module(_CATALOG)  # what LocalDoor.call runs
        if make_embedder is not None:
            embedder = make_embedder()
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if lock is None:
        try:
            lock = await _in_thread(functools.partial(_lock, root, command, lock_wait_s), _release)
        except Conflict:
            if (url := serving_url(root)) is None:
                raise
            async with _forwarded(root, url, caller, command, forward_timeout_s, again) as door:
                yield door
            return
    # Lazy: a command replays only the banks it names (`memory::bank::list` reads their counts
    # files), so one line appended to one bank of a hundred costs that bank alone.
    store = await _in_thread(
        functools.partial(Store.adopt, lock, lazy=True, short_lived=short_lived),
        lambda opened: opened.close(),
    )
    service = MemoryService(
        store,
        settings(),
        embedder=embedder,
        embed_writes=embed_writes,
        catch_up_s=catch_up_s,
        engine_less=True,
    )
    try:
        yield LocalDoor(service, caller)
        await service.settle()  # the vectors of what this command saved land before it exits
    finally:
        await service.close()
        await store.close()
