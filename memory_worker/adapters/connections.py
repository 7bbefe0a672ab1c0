"""The standalone server's listening socket with a connection cap: every connection is counted
from the moment its protocol is handed out, and one past the cap is answered 503 at once (never
parsed) and closed — so a burst of connections cannot exhaust the process."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["OUT_OF_DESCRIPTORS", "CappedSite", "busy_response"]

_BUSY_LINGER_S = 1.0  # how long a refused connection's unread request is drained
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def busy_response(max_connections: int) -> bytes:
    """The whole HTTP answer a connection over the cap gets: 503, JSON, `Retry-After: 1`."""
    body = json.dumps(
        {
            "error": {
                "code": "unavailable",
                "message": f"the server has {max_connections} connections open; retry shortly",
            }
        }
    ).encode()
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


class _Busy(asyncio.Protocol):
    """A connection over the cap: answered 503 at once, never parsed. The write side is shut
    first and whatever the client still sends is read and dropped for a moment, since closing
    with unread bytes resets the connection and the client would never see the answer."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._answer)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(_BUSY_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # dropped: nothing of a refused connection is parsed

    def eof_received(self) -> bool:
        if self._transport is not None:
            self._transport.close()
        return False


class _Counted(asyncio.Protocol):
    """aiohttp's request handler for one connection, counted from the moment it is handed out
    (asyncio creates the protocols of a burst of accepts before any of them is connected, so the
    server's own connection list lags behind) until the connection is lost.

    An answer the client stops reading (an export larger than the socket buffers) paused the
    writes for good, and aiohttp has no write timeout: the connection, a slot under the cap, was
    held until the client went away, so a few hundred such requests locked everyone out. Writes
    paused for `write_timeout_s` without the client taking any more cut the connection off."""

    def __init__(self, inner: asyncio.Protocol, site: CappedSite) -> None:
        self._inner = inner
        self._site = site
        self._transport: asyncio.BaseTransport | None = None
        self._stalled: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()
        timeout_s = self._site.write_timeout_s
        if timeout_s is not None and self._stalled is None:
            self._stalled = asyncio.get_running_loop().call_later(timeout_s, self._cut_off)

    def resume_writing(self) -> None:
        self._unstall()  # the client read: it gets the whole timeout again for the rest
        self._inner.resume_writing()

    def _unstall(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _cut_off(self) -> None:
        self._stalled = None
        if isinstance(self._transport, asyncio.WriteTransport):
            self._transport.abort()  # `close()` would wait to flush what the client won't read

    def connection_lost(self, exc: Exception | None) -> None:
        self._unstall()
        self._site.open -= 1
        self._inner.connection_lost(exc)


class CappedSite(web.SockSite):
    """`SockSite` whose connections are counted: past `max_connections` open ones, a new one
    gets `_Busy` instead of a request handler. `write_timeout_s`: how long a connection's writes
    may stay paused (its client reading none of the answer) before it is cut off. `protocol`:
    the request handler class each connection gets (a subclass of aiohttp's, made as aiohttp's
    server makes its own, with the runner's arguments)."""

    def __init__(
        self,
        runner: web.AppRunner,
        sock: socket.socket,
        max_connections: int,
        write_timeout_s: float | None = None,
        *,
        protocol: type[RequestHandler] = RequestHandler,
    ) -> None:
        super().__init__(runner, sock)
        self._max_connections = max_connections
        self.write_timeout_s = write_timeout_s
        self._protocol = protocol
        self._busy = busy_response(max_connections)
        self.open = 0
        self.refused = 0
        self.accepting: Callable[[], None] = lambda: None  # told of every accepted connection

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        # What `server()` does, with our class: aiohttp has no argument for it.
        handler_args = server._kwargs

        def factory() -> asyncio.BaseProtocol:
            self.accepting()
            if self.open >= self._max_connections:
                self.refused += 1
                return _Busy(self._busy)
            self.open += 1
            return _Counted(self._protocol(server, loop=loop, **handler_args), self)

        self._server = await loop.create_server(factory, sock=self._sock, backlog=self._backlog)
