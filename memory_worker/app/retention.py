"""Retention and the bank's statistics: `memory::stats` counts a bank by category and subject,
shows its capacity, and runs the retention reaper (seed 004's "stats op").

Where the reaper runs, and why: here, in the worker that owns the files, at boot (every bank, as
`boot_banks` reaches it) and on each `memory::stats`; the schedule belongs to the consolidation
sibling, which calls `memory::stats` like any client (seed 000: this worker never grows a
scheduler). An expiry is a tombstone with `invalid_reason: expired` — recoverable, in history
until a compaction — never of a pinned memory, and each is announced.
"""

from __future__ import annotations

import time
from collections import Counter

from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.embedding import EmbeddingWork
from memory_worker.app.wire import StatsRequest, StatsResponse
from memory_worker.core import transitions
from memory_worker.core.errors import StorageError
from memory_worker.core.models import ItemEvent, Memory
from memory_worker.core.retention import EXPIRED, expired, kind_of
from memory_worker.core.subjects import count_by_subject, in_scope
from memory_worker.storage.bank import Bank
from memory_worker.storage.logger import get_logger

__all__ = ["RetentionUseCases"]

log = get_logger(__name__)


class RetentionUseCases(EmbeddingWork):
    """Retention use cases."""

    async def reap(self, bank: Bank) -> list[Memory]:
        """Tombstone `bank`'s memories past their category's TTL (one write), and announce each.
        Decided on the newest record of each (in-flight ones included) with no await before the
        commit, so a pin landing meanwhile is never overwritten by an expiry."""
        retention = self.bank_settings(bank).retention
        if not retention:
            return []
        now_ms = self.clock()
        due = expired(bank.memories.values(), retention, now_ms)
        latest = [bank.latest(m.id) or m for m in due]
        gone = [
            t
            for m in expired(latest, retention, now_ms)
            if (t := transitions.tombstone(m, now_ms=now_ms, reason=EXPIRED)) is not None
        ]
        if not gone:
            return []
        await bank.commit(gone)
        log.info("memories_expired", bank=bank.name, n=len(gone))
        for record in gone:
            self._emit_item(ItemEvent.DELETED, bank.name, record, EXPIRED)
        return gone

    async def boot_banks(self) -> int:
        """What a long-lived worker does for every bank once its store is open: replay each bank
        no call has loaded yet, start embedding what lacks a vector, and retention's boot sweep.
        A server opens its store lazily and runs this after it starts serving: one bank at a
        time, each replayed in a worker thread while the loop answers calls (a call naming a
        bank not reached yet replays that one at once; one naming the bank being replayed waits
        for it). Returns how many memories the sweep retired. A bank that cannot be loaded or
        written is logged and skipped: neither may keep the others from being served."""
        started, total = time.monotonic(), 0
        names = self.store.names()
        for name in names:
            try:
                bank = await self.store.replay(name)  # in a thread: calls go on meanwhile
            except StorageError as exc:  # out of descriptors: the next call naming it retries
                log.error("bank_load_failed", bank=name, error=str(exc))
                continue
            if bank is not None:
                self._embed_soon(bank)
                try:
                    total += len(await self.reap(bank))
                except Exception:
                    log.exception("retention_sweep_failed", bank=name)
        seconds = round(time.monotonic() - started, 3)
        log.info("banks_booted", banks=len(names), retired=total, seconds=seconds)
        return total

    async def stats(self, req: StatsRequest, caller: Caller = SYSTEM) -> StatsResponse:
        name = self._name(req.bank)
        bank = self._readable(name)  # the default bank before its first write: empty
        gone = await self.reap(bank) if bank is not None else []
        live = [m for m in bank.memories.values() if m.live] if bank is not None else []
        # Counted as the caller may see them: an agent in a bank partitioned by subject counts
        # the general memories and its turn's speaker's, never who else the bank knows of and
        # how much (a person, and consolidation, count the whole bank). The reaper ran over all.
        scoped, subject = self.scope_of(bank, caller.speaker if caller.in_turn else None, caller)
        if scoped:
            live = [m for m in live if in_scope(m.subject, subject)]
            gone = [m for m in gone if in_scope(m.subject, subject)]
        settings = self.bank_settings(bank) if bank is not None else self.settings.bank_defaults()
        by_subject = count_by_subject(m.subject for m in live if m.subject is not None)
        return StatsResponse(
            bank=name,
            memories=len(live),
            pinned=sum(1 for m in live if m.pinned),
            by_category=dict(sorted(Counter(kind_of(m) for m in live).items())),
            by_subject=by_subject,
            general=sum(1 for m in live if m.subject is None),
            max_memories=settings.max_memories,
            max_per_subject=settings.max_per_subject,
            retention=settings.retention,
            expired=[m.id for m in gone],
        )
