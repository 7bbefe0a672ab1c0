"""What each conversation was handed, so each thing reaches it once: the lesson cards its tool
calls earned (`memory::lessons::match`) and the memories a coding agent's prompts were given
(`memory::preview` with a `conversation`). Keys are a bank's id at one revision
(`core.lessons.lesson_key`): a new revision is handed again, a new conversation gets everything
again. The ledger is the state worker in engine mode (`lessons.KeyValueDeliveries`), a small file
per conversation under the data dir otherwise (`storage.deliveries`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection

from memory_worker.app.base import ServiceBase
from memory_worker.app.ports import Deliveries
from memory_worker.storage.deliveries import FileDeliveries

__all__ = ["CACHE_CONVERSATIONS", "MAX_CONVERSATION_CHARS", "ConversationLedger"]

MAX_CONVERSATION_CHARS = 256
CACHE_CONVERSATIONS = 4096


class ConversationLedger(ServiceBase):
    """The ledger and one lock per conversation, shared by every use case that hands things out
    once per conversation."""

    _file_deliveries: FileDeliveries | None = None
    _delivery_locks: dict[str, asyncio.Lock] | None = None

    @property
    def deliveries(self) -> Deliveries:
        """The configured ledger, else the data dir's (it follows the store when that changes)."""
        if self.deliveries_port is not None:
            return self.deliveries_port
        current = self._file_deliveries
        if current is None or current.folder.parent != self.store.root:
            current = self._file_deliveries = FileDeliveries(self.store.root)
        return current

    def _lock(self, conversation: str) -> asyncio.Lock:
        """One delivery at a time per conversation: two parallel tool calls (or prompts) never
        both get the same thing. Locks not held are dropped once there are many."""
        locks = self._delivery_locks
        if locks is None:
            locks = self._delivery_locks = {}
        if len(locks) > CACHE_CONVERSATIONS:
            for key in [k for k, lock in locks.items() if not lock.locked()]:
                del locks[key]
        return locks.setdefault(conversation, asyncio.Lock())

    # The erasures taking ids out of the ledger now, and the deliveries between their read and
    # their record: the one waits for the other (`_delivering`, `erase_deliveries`).
    _ledger_erasures: int = 0
    _ledger_active: int = 0
    _ledger_open: asyncio.Event | None = None  # set: no erasure is under way
    _ledger_idle: asyncio.Event | None = None  # set: no delivery is under way

    def _ledger_events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._ledger_open is None or self._ledger_idle is None:
            self._ledger_open, self._ledger_idle = asyncio.Event(), asyncio.Event()
            self._ledger_open.set()
            self._ledger_idle.set()
        return self._ledger_open, self._ledger_idle

    @contextlib.asynccontextmanager
    async def _delivering(self, conversation: str) -> AsyncIterator[None]:
        """One delivery to `conversation`, from the read of its ledger to its record: under the
        conversation's lock, and never beside an erasure of the ledger (it waits for it to end:
        read before and recorded after, the erased keys were written back whole)."""
        async with self._lock(conversation):
            opened, idle = self._ledger_events()
            while not opened.is_set():
                await opened.wait()
            self._ledger_active += 1
            idle.clear()
            try:
                yield
            finally:
                self._ledger_active -= 1
                if not self._ledger_active:
                    idle.set()

    async def erase_deliveries(self, bank: str, ids: Collection[str]) -> None:
        """Take erased memories out of what every conversation was handed: once the deliveries
        under way end (one that ranked them before they were erased records them) and with new
        ones held until it is done (one that read its ledger before the keys left would write
        them back), from the data dir's ledger and its RAM copy. The state worker's (engine
        mode) keeps one entry per conversation and cannot be walked: there their keys age out
        with the conversation."""
        opened, idle = self._ledger_events()
        self._ledger_erasures += 1
        opened.clear()
        try:
            while self._ledger_active:
                await idle.wait()
            current = self._file_deliveries
            if current is None or current.folder.parent != self.store.root:
                current = FileDeliveries(self.store.root)
            await current.erase(bank, ids)
        finally:
            self._ledger_erasures -= 1
            if not self._ledger_erasures:
                opened.set()

    def _erased_from_ledger(self, bank: str, ids: set[str]) -> None:
        # Kept, the conversation's next delivery wrote its whole ledger back, their keys in it.
        if self._file_deliveries is not None:
            self._file_deliveries.erase_cached(bank, ids)

    async def forget_deliveries(self, conversation: str) -> None:
        """Drop what a conversation was given (its session was deleted, or its context reset)."""
        await self.deliveries.forget(conversation)
