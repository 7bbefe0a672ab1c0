"""What each conversation was handed, so each thing reaches it once: the lesson cards its tool
calls earned (`memory::lessons::match`) and the memories a coding agent's prompts were given
(`memory::preview` with a `conversation`). Keys are a bank's id at one revision
(`core.lessons.lesson_key`): a new revision is handed again, a new conversation gets everything
again. The ledger is the state worker in engine mode (`lessons.KeyValueDeliveries`), a small file
per conversation under the data dir otherwise (`storage.deliveries`)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

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

    async def erase_deliveries(self, bank: str, ids: Collection[str]) -> None:
        """Take erased memories out of what every conversation was handed: once the deliveries
        under way end (each holds its conversation's lock from its read to its record: one that
        ranked them before they were erased records them), from the data dir's ledger and its
        RAM copy. The state worker's (engine mode) keeps one entry per conversation and cannot
        be walked: there their keys age out with the conversation."""
        for lock in [lock for lock in (self._delivery_locks or {}).values() if lock.locked()]:
            async with lock:
                pass
        current = self._file_deliveries
        if current is None or current.folder.parent != self.store.root:
            current = FileDeliveries(self.store.root)
        await current.erase(bank, ids)

    async def forget_deliveries(self, conversation: str) -> None:
        """Drop what a conversation was given (its session was deleted, or its context reset)."""
        await self.deliveries.forget(conversation)
