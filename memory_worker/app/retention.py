"""Retention and the bank's statistics: `memory::stats` counts a bank by category and subject,
shows its capacity, and runs the retention reaper (seed 004's "stats op").

Where the reaper runs, and why: here, in the worker that owns the files, at boot (every bank, as
`boot_banks` reaches it), on each `memory::stats`, and when a read meets an expired memory; the
schedule belongs to the consolidation sibling, which calls `memory::stats` like any client (seed
000: this worker never grows a scheduler). An expiry is a tombstone with `invalid_reason:
expired` — recoverable, in history until a compaction — never of a pinned memory; each is
announced, and listed by the bank's next `memory::stats` (`expired`: what the reaper retired
since the last one, wherever it ran, so the consolidation sibling's count misses none).

A memory stops surfacing when its TTL runs out, not when a reaper next runs: recall (every mode),
the injection and `memory::list` leave out what is past its TTL by the clock (`search.ranking`'s
filters, `core.retention.past_ttl`), so a standalone server nobody calls `memory::stats` on (no
consolidation sibling) never hands out a fact that expired hours ago. A read that left one out
has the bank reaped right after (`_reap_soon`): a background task of the worker's own, one per
bank at a time, announced as any expiry. A look-up or a change by id that names one has the bank
reaped first (`_reaped_for`, the same reap), so it answers the memory retired, as list and recall
treat it (a pin or an edit kept an expired memory live for good). No timer: what nobody reads
is reaped at the next stats call, boot, or read, and until then nobody can see it. `close()` and
`settle()` wait for those reaps.
A save (a write already) reaps its bank first when something in it is past its TTL, so an
expired memory never takes a live one's place at `max_memories`, nor is renewed as still known.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import Counter, deque

from memory_worker.app.caller import SYSTEM, Caller, CallerKind
from memory_worker.app.embedding import EmbeddingWork
from memory_worker.app.wire import StatsRequest, StatsResponse
from memory_worker.core import temporal, transitions
from memory_worker.core.errors import StorageError
from memory_worker.core.models import ItemEvent, Memory
from memory_worker.core.retention import EXPIRED, expired, kind_of, past_ttl
from memory_worker.core.subjects import count_by_subject, in_scope
from memory_worker.storage.bank import Bank
from memory_worker.storage.logger import get_logger

__all__ = ["RetentionUseCases"]

log = get_logger(__name__)

# Retired memories a bank's next `memory::stats` lists at most (the newest): a server nobody
# asks for stats keeps no more than this many of them per bank.
EXPIRED_REPORTED = 10_000


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
            # One a forget-subject is erasing goes with it: retired in this write, it made the
            # whole write (and the save or stats that asked for it) a `conflict`.
            if not bank.being_erased(m)
            and (t := transitions.tombstone(m, now_ms=now_ms, reason=EXPIRED)) is not None
        ]
        if not gone:
            return []
        if bank.log_edited():
            # A hand edit RAM has not read may have pinned one of them: our tombstone, one
            # revision up as the person's line and after it, would win at replay. Left to the
            # reload that reads the edit (reads leave them out by the clock meanwhile).
            log.info("retention_sweep_deferred", bank=bank.name, reason="log edited by hand")
            return []
        await bank.commit(gone)
        log.info("memories_expired", bank=bank.name, n=len(gone))
        since = self._expired_since.get(bank.name)
        if since is None or since[0]() is not bank:  # a bank deleted since: its report went too
            report: deque[Memory] = deque(maxlen=EXPIRED_REPORTED)
            since = self._expired_since[bank.name] = (weakref.ref(bank), report)
        since[1].extend(gone)
        for record in gone:
            self._emit_item(ItemEvent.DELETED, bank.name, record, EXPIRED)
        return gone

    def _expired_report(self, bank: Bank, *, consume: bool) -> list[Memory]:
        """What the reaper retired in `bank` since the last call that `consume`d it, oldest reap
        first."""
        since = self._expired_since.get(bank.name)
        if since is None or since[0]() is not bank:
            return []
        if consume:
            del self._expired_since[bank.name]
        return list({m.id: m for m in since[1]}.values())  # saved again, expired again: once

    async def _reaped_for(
        self, bank: Bank, *records: Memory, reading: bool = False, anywhere: bool = False
    ) -> bool:
        """Reap `bank` now when one of `records` is live and past its TTL (`anywhere`: or any
        memory of the bank is); whether it did (its caller reads them again). A memory past its
        TTL is gone, reaped or not: a look-up by id shows it retired (`expired`) and a change by
        id finds it retired, instead of pinning or editing it back to life; a change, as a save,
        counts no expired memory toward a cap. A reap the reads already asked for is waited for
        first (its tombstones, not a second set). A read whose reap fails (a disk refusing
        writes) shows the records as they stand; a write fails, as its own commit would."""
        retention = self.bank_settings(bank).retention
        now_ms = self.clock()
        if not retention:
            return False
        from memory_worker.search.ranking import expired_slots  # (a bank with retention only)

        if not any(m.live and past_ttl(m, retention, now_ms) for m in records) and not (
            anywhere and expired_slots(bank.index, retention, now_ms).size
        ):
            return False
        await self._reap_in_flight(bank)
        try:
            # Run on past this call's caller (`finished`): a read runs in its caller's task, and
            # a caller that gave up mid-commit had the tombstones land (the flusher writes them
            # all the same) but never announced nor reported for `memory::stats`.
            await self.finished(self.reap(bank))
        except Exception:
            if not reading:
                raise
            log.exception("retention_sweep_failed", bank=bank.name)
        return True

    async def _reap_in_flight(self, bank: Bank) -> None:
        """Wait for the reap a read of `bank` started (`_reap_soon`), if it is still writing."""
        running = self._reaping.get(bank.name)
        if running is not None and not running.done():
            await asyncio.shield(running)  # `_reap_quietly`: never raises

    async def _existing_now(
        self, name: str, memory_id: str, caller: Caller = SYSTEM
    ) -> tuple[Bank, Memory]:
        """`_existing`, as retention leaves the bank now (`_reaped_for`): what a change decides
        on."""
        bank, record = self._existing(name, memory_id, caller)
        if await self._reaped_for(bank, record, anywhere=True):
            bank, record = self._existing(name, memory_id, caller)
        return bank, record

    def _reap_soon(self, bank: Bank) -> None:
        """A read left out memories of `bank` past their TTL: reap it in the background (once at
        a time per bank: a reap already under way retires them too)."""
        running = self._reaping.get(bank.name)
        if running is not None and not running.done():
            return
        self._reaping[bank.name] = asyncio.create_task(
            self._reap_quietly(bank), name=f"memory-reap:{bank.name}"
        )

    async def _reap_quietly(self, bank: Bank) -> None:
        if self.store.find(bank.name) is not bank:
            return  # deleted (or replaced) since the read: nothing of it to retire
        try:
            await self.reap(bank)
        except Exception:  # the read already left them out; the next one, or stats, retries
            log.exception("retention_sweep_failed", bank=bank.name)

    async def _reaps_done(self) -> None:
        while running := [task for task in self._reaping.values() if not task.done()]:
            # Not `gather`: cancelled, it cancels the reaps mid-commit (see `_calls_done`).
            await asyncio.wait(running)
        self._reaping.clear()

    async def settle(self) -> None:
        """Wait for the calls whose callers left (`finished`) and the reaps reads asked for,
        then for background embedding."""
        await self._calls_done()
        await self._reaps_done()
        await super().settle()

    async def close(self) -> None:
        """Let the calls whose callers left end (their writes announced) and the reaps reads
        asked for land (one short commit each), then stop embedding."""
        await self._calls_done()
        await self._reaps_done()
        await super().close()

    async def boot_banks(self) -> int:
        """What a long-lived worker does for every bank once its store is open: replay each bank
        no call has loaded yet, start embedding what lacks a vector, and retention's boot sweep.
        A server opens its store lazily and runs this after it starts serving: one bank at a
        time, each replayed in a worker thread while the loop answers calls (a call naming a
        bank not reached yet replays that one at once; one naming the bank being replayed waits
        for it). Returns how many memories the sweep retired. A bank that cannot be loaded or
        written is logged and skipped: neither may keep the others from being served."""
        started, total = time.monotonic(), 0
        # What recall reads dates with, compiled now, not by the first recall (a one-shot process
        # compiles each at its first use: `core.temporal`); in a thread, as replays are.
        await asyncio.to_thread(temporal.compile_patterns)
        try:
            await self._finish_erasures_in_trash()
        except StorageError as exc:  # its file unreadable for want of descriptors: next boot
            log.error("forget_subject_unfinished_in_trash", error=str(exc))
        names = self.store.names()
        for name in names:
            try:
                bank = await self.store.replay(name)  # in a thread: calls go on meanwhile
            except StorageError as exc:  # out of descriptors: the next call naming it retries
                log.error("bank_load_failed", bank=name, error=str(exc))
                continue
            if bank is not None:
                await self._announce_late_erasures(bank)
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
        # Counted as the caller may see them: an agent in a bank partitioned by subject counts
        # the general memories and its turn's speaker's, never who else the bank knows of and
        # how much (a person, and consolidation, count the whole bank). The reaper runs over all.
        scoped, subject = self.scope_of(bank, caller.speaker if caller.in_turn else None, caller)
        gone: list[Memory] = []
        if bank is not None:  # this call's sweep, and what reads, saves or the boot retired
            # A reap a read asked for, still writing: its tombstones are in flight, so this
            # sweep finds nothing to retire, and they join the report only once it lands. Not
            # waited for, they went to the next stats call (a pass later, for the consolidation
            # sibling's count).
            await self._reap_in_flight(bank)
            await self.reap(bank)
            # Reported once, to whoever counts for the whole bank (a person, consolidation): a
            # scoped view, or an agent's look, leaves it for them.
            owner = not scoped and caller.kind is not CallerKind.AGENT
            gone = self._expired_report(bank, consume=owner)
        live = self.live_in_view(bank, scoped, subject) if bank is not None else []
        if scoped:
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
