"""An httpx transport that sends nothing to a port of this machine another account's program holds.

A client configured with a loopback URL (`memory-consolidate --server http://127.0.0.1:8765`, an
`extraction_endpoint` of a local llama.cpp or Ollama) keeps it for days; while the server behind
it restarts, any account on the machine can take its port. What the client sent there was that
account's to keep (`$MEMORY_TOKEN`, which lets it call the real server as this account; an API
key; the person's turns to extract) and what it answered was taken for the server's (memories
written into a bank). Each connection is checked the moment it is made, as `doors` checks a
forwarded call's: another account's listener is refused before a byte is written (an
`httpcore.ConnectError`, so each client answers it as a port nobody listens on). Root's is taken
(it can read the data dir anyway), and where the account cannot be told (not Linux, a server on
another machine), as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from memory_worker.adapters.accounts import server_account
from memory_worker.storage.logger import get_logger

__all__ = ["own_servers_only"]

log = get_logger(__name__)


class _OwnServersOnly(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        # On asyncio a `TransportSocket`, not a `socket.socket`: its two addresses are all the
        # query reads. One `sock_diag` query, answered at once: asked on the loop.
        sock = stream.get_extra_info("socket")
        holder = server_account(sock) if hasattr(sock, "getpeername") else None
        if holder is not None and holder not in (0, os.geteuid()):
            await stream.aclose()
            log.warning("refused_another_accounts_port", host=host, port=port, uid=holder)
            raise httpcore.ConnectError(
                f"{host}:{port} is another account's (uid {holder}): nothing was sent"
            )
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def own_servers_only() -> httpx.AsyncHTTPTransport:
    """httpx's own transport (no proxy, nothing from the environment), each connection checked
    as above. httpx takes no network backend, so its connection pool's is wrapped."""
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    pool = transport._pool
    pool._network_backend = _OwnServersOnly(pool._network_backend)
    return transport
