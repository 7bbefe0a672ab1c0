"""Turns at a local embedding engine, shared by the local embedders (e5, MiniLM).

A bulk embed (a bank's backfill, 64 texts) runs as many small engine calls, each taking a turn:
- one call at a time: the engine shares its buffers between calls, and a second call would take
  the core the event loop needs;
- a waiting query goes before the next part of a bulk embed, so a recall keeps its semantic arm
  while a bank is embedded (it waited for the whole batch, past its timeout, and went lexical);
- an embed nobody awaits any more (its task cancelled: a server stopping, a query past its
  timeout) stops at its next turn instead of running to the end of its batch. A stopping
  process's exit waits for that thread, and the vectors would be thrown away anyway (a batch
  not stored is embedded again at the next start).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["Abandoned", "EngineTurns", "off_loop"]

T = TypeVar("T")


class Abandoned(Exception):
    """The embed's caller went away: raised at a turn instead of calling the engine again."""


class EngineTurns:
    """Who calls the engine next: a waiting query first, then the next part of a bulk embed."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._busy = False
        self._queries_waiting = 0

    @contextlib.contextmanager
    def turn(self, *, query: bool, cancelled: threading.Event | None = None) -> Iterator[None]:
        """Hold the engine for one call.

        Raises:
            Abandoned: `cancelled` was set before the turn came.
        """
        with self._turn:
            if query:
                self._queries_waiting += 1
                self._turn.notify_all()
                try:
                    self._turn.wait_for(lambda: not self._busy)
                finally:
                    self._queries_waiting -= 1
                    self._turn.notify_all()  # memory texts may wait for no query to wait
            else:
                self._turn.wait_for(lambda: not self._busy and not self._queries_waiting)
            if cancelled is not None and cancelled.is_set():
                raise Abandoned
            self._busy = True
        try:
            yield
        finally:
            with self._turn:
                self._busy = False
                self._turn.notify_all()


async def off_loop(work: Callable[[threading.Event], T]) -> T:
    """`work(cancelled)` on a worker thread; `cancelled` is set when the awaiting task is
    cancelled, so the work stops at its next turn rather than outliving its caller."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(work, cancelled)
    except asyncio.CancelledError:
        cancelled.set()
        raise
