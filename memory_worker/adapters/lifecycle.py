"""A worker process run until SIGTERM or SIGINT: memory-worker's engine mode and memory-consolidate
share the same start, ready line, wait and close, with the signal handlers removed after the close
whatever happened."""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol

from memory_worker.storage.logger import get_logger

__all__ = ["SHORT_HOLDER_WAIT_S", "Servable", "Stoppable", "serve_until_signalled"]

log = get_logger(__name__)

# A server starting while a one-shot command holds its data dir (a hook, a CLI call, a tool call of
# `memory-worker mcp`, a recall catching its bank's embeddings up) waits for it this long, as a CLI
# call does: refused at once, a server started beside a busy coding agent failed at random. A
# long-running holder (another server) is still refused at once (`files.DataDirLock.acquire`).
SHORT_HOLDER_WAIT_S = 10.0


class Servable(Protocol):
    @property
    def stopping(self) -> bool: ...

    def stop(self, reason: str = ...) -> None: ...

    async def start(self) -> None: ...

    async def wait(self) -> None: ...

    async def close(self) -> None: ...


class Stoppable:
    """The stop half of a `Servable`: `stop()` (once, logged with why) ends `wait()`."""

    def __init__(self) -> None:
        self._stopping = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, reason: str = "stop requested") -> None:
        if not self._stopping.is_set():
            log.info("stopping", reason=reason)
            self._stopping.set()

    async def wait(self) -> None:
        await self._stopping.wait()


async def serve_until_signalled(worker: Servable, ready_line: str) -> None:
    """Start `worker`, print `ready_line` (scripts and tests wait for it) unless a signal already
    stopped it, wait until it stops, then close it."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, worker.stop, sig.name)
    try:
        await worker.start()
        if not worker.stopping:
            print(ready_line, flush=True)
        await worker.wait()
    finally:
        try:
            await worker.close()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
