"""The standalone server's `Emitter`: the same `memory::item-changed` / `memory::bank-changed`
events the bus fans out, fed to the console tabs that hold a live stream open.

Bounded by construction: at most `MAX_CLIENTS` streams, each with a queue of at most
`QUEUE_EVENTS` events. A tab that falls behind (a slow link, a frozen background tab) is not
allowed to grow the server's memory: its queue is dropped and replaced by one `resync` marker, and
the tab refetches what it shows. Events are encoded once, whoever listens; `emit()` never blocks
and never fails the write that caused it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.storage.logger import get_logger

__all__ = ["MAX_CLIENTS", "QUEUE_EVENTS", "RESYNC", "ConsoleFeed", "FeedClient", "FeedFull"]

log = get_logger(__name__)

MAX_CLIENTS = 16  # open console tabs per server; more fall back to polling
QUEUE_EVENTS = 256  # per tab: a burst (an import, a consolidation pass) past it means "refetch"
RESYNC = "resync"  # the event a lagging tab gets instead of what it missed

Frame = tuple[str, str]  # (event name, JSON data)


class FeedFull(Exception):
    """Every live slot is taken."""


class FeedClient:
    """One open stream. `next()` waits for the next frame; None means the feed closed."""

    def __init__(self, queue_events: int) -> None:
        self._queue: asyncio.Queue[Frame | None] = asyncio.Queue(maxsize=queue_events)
        self.lagging = False  # a resync is queued; newer events add nothing to it
        self.dropped = 0

    def offer(self, frame: Frame) -> None:
        if self.lagging:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped += self._queue.qsize() + 1
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait((RESYNC, "{}"))
            self.lagging = True

    def end(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def next(self) -> Frame | None:
        frame = await self._queue.get()
        if frame is not None and frame[0] == RESYNC:
            self.lagging = False
        return frame


class ConsoleFeed:
    """Implements `Emitter` for the standalone server; `open()` / `drop()` per stream."""

    def __init__(self, *, max_clients: int = MAX_CLIENTS, queue_events: int = QUEUE_EVENTS) -> None:
        self.max_clients = max_clients
        self.queue_events = queue_events
        self._clients: set[FeedClient] = set()
        self._closed = False
        self.emitted = 0

    def __repr__(self) -> str:
        return f"<ConsoleFeed clients={len(self._clients)} emitted={self.emitted}>"

    @property
    def clients(self) -> int:
        return len(self._clients)

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        if trigger_type not in (ITEM_CHANGED, BANK_CHANGED) or not self._clients:
            return
        frame = (trigger_type, json.dumps(payload, ensure_ascii=False))
        self.emitted += 1
        for client in self._clients:
            client.offer(frame)

    def resync(self) -> None:
        """Every tab refetches what it shows: what it holds is gone as a whole (the data dir was
        swapped), which no change event would say."""
        for client in self._clients:
            client.offer((RESYNC, "{}"))

    def open(self) -> FeedClient:
        if self._closed:
            raise FeedFull("the server is stopping")
        if len(self._clients) >= self.max_clients:
            raise FeedFull(f"{self.max_clients} live console streams are already open")
        client = FeedClient(self.queue_events)
        self._clients.add(client)
        return client

    def drop(self, client: FeedClient) -> None:
        self._clients.discard(client)
        if client.dropped:
            log.info("console_stream_lagged", dropped=client.dropped)

    def close(self) -> None:
        """End every stream (shutdown): their handlers return instead of holding the server."""
        self._closed = True
        for client in self._clients:
            client.end()
