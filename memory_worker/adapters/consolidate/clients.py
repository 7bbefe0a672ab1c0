"""`MemoryClient`s for memory-consolidate without an engine, and a file for its checkpoint.

- `InProcessClient`: the catalog's `call()` on a `MemoryService` this process opened (the CLI's
  `memory-worker consolidate` on a local data dir) — the same public functions, no transport.
- `HttpClient`: a standalone server's REST API (`POST /memory/<path>`), errors read back from
  `{"error": {code, message}}` into the memory worker's own error classes.
- `FileState`: the state-worker shape (`scope` → `key` → value) in one JSON file, replaced
  atomically, for a schedule that runs beside a standalone server.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from memory_worker.adapters import access
from memory_worker.adapters.doors import CALLER_HEADER, encode_caller
from memory_worker.adapters.own_servers import own_servers_only
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.consolidate.ports import error_from
from memory_worker.core.errors import SiblingUnavailable, StorageError
from memory_worker.storage import files
from memory_worker.storage.logger import get_logger

__all__ = ["CONSOLIDATE", "DEFAULT_TIMEOUT_S", "FileState", "HttpClient", "InProcessClient"]

log = get_logger(__name__)

DEFAULT_TIMEOUT_S = 15.0  # one memory call; a pass is many short calls, never one long one


CONSOLIDATE = Caller.internal("consolidate")  # automatic: never a pinned, retired or gone target


class InProcessClient:
    """The memory worker's catalog in this process: validation and errors exactly as on the wire,
    every call made as the automatic `consolidate` caller."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await catalog.call(self.service, function_id, payload, CONSOLIDATE)


class HttpClient:
    """A standalone memory server (`memory-worker serve --standalone`) over its REST API."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # A proxy from the environment must not sit between us and a server on this machine.
        local = urlsplit(self.base_url).hostname in ("127.0.0.1", "localhost", "::1")
        # The server's token ($MEMORY_TOKEN) when it needs one. The server believes these calls
        # are consolidate's with or without it (automatic: never a pinned, retired, gone or
        # other subject's target): a claim that only narrows what a call may do.
        self._headers = {
            **access.request_headers(access.client_token(None)),
            CALLER_HEADER: encode_caller(CONSOLIDATE),
        }
        if transport is None and local:
            # Nothing sent to another account's program on the port while the server restarts
            # (the token would let it call the server as this account): `own_servers`.
            transport = own_servers_only()
        self._http = httpx.AsyncClient(
            timeout=timeout_s,
            transport=transport,
            trust_env=not local,
            headers=self._headers,
            follow_redirects=False,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{function_id.replace('::', '/')}"
        try:
            response = await self._http.post(url, json=payload)
        except httpx.HTTPError as exc:
            raise SiblingUnavailable(f"{function_id}: {url} did not answer ({exc!r})") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 200 and isinstance(body, dict):
            return body
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            raise error_from(f"{error['code']}: {error.get('message', '')}")
        raise SiblingUnavailable(
            f"{function_id}: {url} answered HTTP {response.status_code} without a result"
        )


class FileState:
    """`get`/`set` by scope and key in one JSON file (written whole, atomically, fsynced)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            self._set_aside(str(exc))
            return {}
        return value if isinstance(value, dict) else {}

    def _set_aside(self, why: str) -> None:
        """Keep a damaged file beside, named, and start over: failing every read instead stopped
        the schedule for good (each tick `last_run unreadable`). What is lost is a checkpoint and
        the last reports, so the next pass is simply due."""
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.time_ns() // 1_000_000}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return  # another read set it aside first
        except OSError as exc:
            raise StorageError(f"{self.path} is not JSON and cannot be set aside: {exc}") from None
        log.warning("consolidate_state_damaged", file=str(self.path), kept=str(aside), error=why)

    async def get(self, scope: str, key: str) -> Any:
        data = await asyncio.to_thread(self._read)
        section = data.get(scope)
        return section.get(key) if isinstance(section, dict) else None

    async def set(self, scope: str, key: str, value: Any) -> None:
        async with self._lock:
            data = await asyncio.to_thread(self._read)
            section = data.get(scope)
            data[scope] = {**(section if isinstance(section, dict) else {}), key: value}
            encoded = json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8")

            def write() -> None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                files.atomic_write(self.path, encoded)

            try:
                await asyncio.to_thread(write)
            except OSError as exc:
                raise StorageError(f"cannot write {self.path}: {exc.strerror or exc}") from None
