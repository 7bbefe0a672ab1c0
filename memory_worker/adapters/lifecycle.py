"""A worker process run until SIGTERM or SIGINT: memory-worker's engine mode and memory-consolidate
share the same start, ready line, wait and close, with the signal handlers removed after the close
whatever happened."""

from __future__ import annotations

import asyncio
import signal
from typing import Protocol

__all__ = ["Servable", "serve_until_signalled"]


class Servable(Protocol):
    @property
    def stopping(self) -> bool: ...

    def stop(self, reason: str = ...) -> None: ...

    async def start(self) -> None: ...

    async def wait(self) -> None: ...

    async def close(self) -> None: ...


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
