"""The right to be forgotten: `memory::forget-subject` erases every memory about one subject.

Unlike a delete (a tombstone, recoverable), this destroys: every revision of each memory about the
subject leaves the log, its vectors leave the sidecar, the capture queue loses the bank's dead
jobs (`storage.capture.erase_jobs`), and the bank's trashed copies under `.trash/` are erased the
same way, so nothing of theirs stays on disk. It is all-or-nothing across
those files (`storage.erasure`: an intent first, finished at the next load after a crash), asks an
explicit `confirm`, refuses while a memory about them is pinned (a person pinned it: they unpin it
first, nothing is erased meanwhile), and announces one `erased` event per id, with no text:
at least once, a kill before they are sent leaves them to the next load (`storage.erasure`'s
outbox), which sends them with the same `event_id`s.
It wins over work queued before it: its time is stamped (`storage.erasure.ErasureStamps`), and
extraction saves nothing about them from words said before it.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Collection

from memory_worker.app.base import clean_subject
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.embedding import EmbeddingWork
from memory_worker.app.ledger import ConversationLedger
from memory_worker.app.wire import ForgetSubjectRequest, ForgetSubjectResponse
from memory_worker.core.errors import BankNotFound, Conflict, InvalidInput, StorageError
from memory_worker.core.subjects import same_subject
from memory_worker.storage import erasure
from memory_worker.storage.bank import Bank
from memory_worker.storage.lane_vectors import LANE_VECTORS_FILE
from memory_worker.storage.log import MEMORIES_FILE
from memory_worker.storage.logger import get_logger
from memory_worker.storage.vectors import VECTORS_FILE

__all__ = ["CONFIRM", "ForgetUseCases"]

log = get_logger(__name__)

CONFIRM = "destructive"  # seed 004: `X-Confirm: destructive`


class ForgetUseCases(EmbeddingWork, ConversationLedger):
    """Erasure use cases."""

    async def forget_subject(
        self, req: ForgetSubjectRequest, caller: Caller = SYSTEM
    ) -> ForgetSubjectResponse:
        if (req.confirm or "").strip().lower() != CONFIRM:
            raise InvalidInput(
                'forget-subject erases for good and requires confirm: "destructive" (REST: the '
                "X-Confirm: destructive header)"
            )
        subject = clean_subject(req.subject)[0]
        if subject is None:
            raise InvalidInput("subject must name who to forget")
        name = self._name(req.bank)
        # Derived from their words like their vectors: the retired records' vectors a semantic
        # history view embedded (`EmbeddingWork._history_vectors`) go too (keyed by text hash,
        # so all of them), whichever way this erasure goes (a trashed bank's were embedded while
        # it was live). A new cache, not the old one emptied: a view embedding meanwhile fills
        # the one it started with, dropped with it.
        self._history_cache = OrderedDict()
        try:
            bank = self.store.get(name)
        except BankNotFound:
            if erasure.has_copies(self.store.root, name):
                return await self._forget_in_trash(name, subject)
            if name != self.settings.default_bank:
                # Still `bank_not_found`, as at every bank function, but stamped first: a bank
                # of that name can yet be made by extraction, from a turn queued before now
                # (seed 000: it creates the bank after a turn). Unstamped, that job wrote their
                # words into it after the person was told there was nothing to forget.
                await asyncio.to_thread(self.store.erasures.stamp, name, subject, self.clock())
                await self._erase_queued(name, ())  # a dead job for that bank held their words
                raise BankNotFound(
                    f"{name} (no such bank: nothing of theirs was there to erase; the erasure is "
                    "recorded, so a bank made by that name later takes nothing of theirs said "
                    "before now)"
                ) from None
            found = await self._forget_before_first_write(name, subject)
            if found is None:
                return ForgetSubjectResponse(
                    bank=name, subject=subject, erased=[], trash_copies=0, damaged_dropped=0
                )
            bank = found
        async with bank.erasure_lock:  # erasures asked at once run one after the other
            if not bank.log_edited():
                return await self._forget(name, bank, subject)
        # The log holds a hand edit RAM has not read (the watcher's debounce, or before a
        # `memory::reload`): the pinned check and the ids erased and announced are decided on
        # RAM, so a memory a person pinned there was erased, and one they moved to someone else
        # was announced `erased` though the log kept it. Read first, announced as the watcher
        # would; once (an edit landing after it is announced by the rewrite, `take_adopted`).
        await self.reload_bank(name)
        bank = self.store.get(name)
        async with bank.erasure_lock:
            return await self._forget(name, bank, subject)

    async def _forget_before_first_write(self, name: str, subject: str) -> Bank | None:
        """The default bank before its first write holds no one yet, but its next write makes
        it: stamped, so an extraction job queued before now saves nothing about them into it
        (refused as bank_not_found, the erasure was lost and the job wrote their words). The
        bank if a write made it meanwhile (it is then erased as any bank), else None."""
        await asyncio.to_thread(self.store.erasures.stamp, name, subject, self.clock())
        try:
            return self.store.get(name)
        except BankNotFound:
            await self._erase_queued(name, ())  # a job that died before making it
            return None

    async def _erase_queued(self, name: str, ids: Collection[str]) -> int:
        """The bank's turns in the data dir's capture queue (`storage.capture.erase_jobs`): a job
        carries no subject, so its dead jobs (kept for a person, never run again) leave whole,
        with what quotes the erased memories (ids, failed attempts' reasons). Idempotent, so
        an erasure finished by the next load (`erasure.resume`) does it again there."""
        from memory_worker.storage import capture  # (a one-shot save never erases)

        erase = functools.partial(capture.erase_jobs, default_bank=self.settings.default_bank)
        return await asyncio.to_thread(erase, self.store.root, name, ids)

    async def _forget(self, name: str, bank: Bank, subject: str) -> ForgetSubjectResponse:
        # Decided on each memory's newest record, a write still in flight included (a pin being
        # written counts), and from here on no write about them lands until the erasure ends.
        about = bank.about(subject)
        pinned = [i for i in about if (m := bank.latest(i)) is not None and m.live and m.pinned]
        if pinned:
            raise Conflict(
                f"{len(pinned)} memory(ies) about {subject} are pinned ({', '.join(pinned[:5])}); "
                "unpin them first — nothing was erased"
            )
        with bank.erasing(subject, about):
            # Before the intent: a job that read them before now saves nothing about them later,
            # even if this erasure is only finished by the next load.
            await asyncio.to_thread(self.store.erasures.stamp, name, subject, self.clock())
            key = await asyncio.to_thread(erasure.write_intent, bank.path, subject, about)
            # From here on the erasure finishes: now, or at the next load if this process dies.
            copies = await asyncio.to_thread(erasure.erase_copies, self.store.root, name, subject)
            result = await bank.rewrite(erasure.forget_plan(subject), drop_damaged=True)
            # Besides their memories, the log it read may hold a hand edit the watcher had not
            # picked up (announced once they are, as a reload would). Taken now: the old RAM it
            # holds has their texts.
            adopted = bank.take_adopted()
            # And again now their records are gone: a view asked during the steps above read
            # them still, and embedded them into the cache made before.
            self._history_cache = OrderedDict()
            await asyncio.to_thread(
                functools.partial(erasure.drop_unfilterable, within=bank.root),
                bank.path / MEMORIES_FILE,
            )
            # After the log, and after the vector writes that saw their memories live (one
            # landing after the sidecar's rewrite stayed for good): a vector stored meanwhile for
            # a memory about them is caught too.
            await bank.vector_writes_settled()
            # The memories as the erased log holds them: a vector of an earlier revision (a
            # memory moved to someone else, embedded while it was theirs) goes too. The bank's
            # own mapping, looked up from the thread: an edit landing meanwhile is judged by
            # its new text, whose vector may be appended before the sidecar is read.
            erase = functools.partial(
                erasure.erase_vectors, within=bank.root, current=bank.memories
            )
            await asyncio.to_thread(erase, bank.path / VECTORS_FILE, set(about))
            await asyncio.to_thread(erase, bank.path / LANE_VECTORS_FILE, set(about))
            await asyncio.to_thread(bank.access.forget, about)
            await self.erase_deliveries(name, about)  # their ids: fingerprints of their words
            queued = await self._erase_queued(name, about)
            # Before the intent goes, what its events will say: a kill from here to their
            # sending leaves them for the next load to send (same ids), not lost.
            await asyncio.to_thread(bank.to_announce, dict.fromkeys(about, (subject, key)))
            await asyncio.to_thread(erasure.clear_intent, bank.path, subject)
        self._unreport(name, bank, set(about))
        log.info(
            "subject_forgotten",
            bank=name,
            erased=len(about),
            trash_copies=copies,
            damaged_dropped=result.damaged_dropped,
            dead_jobs_dropped=queued,
        )
        for memory_id in about:
            self._emit_erased(name, memory_id, subject, key)
        await self._announce_adopted(name, adopted, besides=about)
        try:
            await asyncio.to_thread(bank.announced, about)
        except StorageError as exc:  # sent again by the next load, with the same ids
            log.warning("erasure_outbox_not_cleared", bank=name, error=str(exc))
        return ForgetSubjectResponse(
            bank=name,
            subject=subject,
            erased=about,
            trash_copies=copies,
            damaged_dropped=result.damaged_dropped,
        )

    def _unreport(self, name: str, bank: Bank, erased: set[str]) -> None:
        """Drop erased memories from what the reaper retired and the bank's next `memory::stats`
        lists (`expired`): kept there, their records (text and all) outlived the erasure in RAM
        and their ids were reported as expired memories no longer anywhere."""
        since = self._expired_since.get(name)
        if since is None or since[0]() is not bank or not erased:
            return
        kept = [m for m in since[1] if m.id not in erased]
        since[1].clear()
        since[1].extend(kept)

    async def _forget_in_trash(self, name: str, subject: str) -> ForgetSubjectResponse:
        """A deleted bank's trashed copies (`.trash/`, kept for a person to recover by hand)
        hold every memory about them too: erased the same way, though no bank by that name is
        live. Each id is announced as any erasure's (`erased`, no text): nothing of theirs was
        live, but a copy kept elsewhere (memory-consolidate's last report of the bank, which
        only that event scrubs) still held their texts. Committed first at the data dir's root
        (`erasure.write_trash_intent`, with the ids: a copy's rewritten log no longer names
        them), cleared once announced: a kill in between is finished and announced by the next
        boot (`_finish_erasures_in_trash`), or by this call asked again."""
        # A default bank is recreated by its next write: what was read before stays out of it.
        await asyncio.to_thread(self.store.erasures.stamp, name, subject, self.clock())
        ids = await asyncio.to_thread(erasure.trashed_ids, self.store.root, name, subject)
        held_before = await asyncio.to_thread(self._trash_erasure_held, name, subject)
        if ids or held_before:
            held = await asyncio.to_thread(
                erasure.write_trash_intent, self.store.root, name, subject, ids
            )
        else:  # nothing of theirs to announce: no file written (the copies are still swept)
            held = erasure.TrashErasure(name, subject, None, [])
        copies, erased, queued = await self._erase_in_trash(held)
        log.info(
            "subject_forgotten",
            bank=name,
            erased=len(erased),
            trash_copies=copies,
            dead_jobs_dropped=queued,
        )
        return ForgetSubjectResponse(
            bank=name,
            subject=subject,
            erased=sorted(erased),
            trash_copies=copies,
            damaged_dropped=0,
        )

    def _trash_erasure_held(self, name: str, subject: str) -> bool:
        return any(
            e.bank == name and same_subject(e.subject, subject)
            for e in erasure.trash_intents(self.store.root)
        )

    async def _erase_in_trash(self, held: erasure.TrashErasure) -> tuple[int, set[str], int]:
        """Erase what `held` names from its bank's trashed copies and announce it (each step
        idempotent), then clear it. The ledger and the capture queue first, then the copies'
        derived files, their logs last (`erasure.erase_trashed`). Returns the copies touched,
        the ids erased and the dead capture jobs dropped."""
        name, subject = held.bank, held.subject
        await self.erase_deliveries(name, held.ids)
        queued = await self._erase_queued(name, held.ids)
        copies, erased = await asyncio.to_thread(
            erasure.erase_trashed, self.store.root, name, subject, held.ids
        )
        erased |= set(held.ids)
        for memory_id in sorted(erased):
            self._emit_erased(name, memory_id, subject, held.key)
        if held.key is not None:
            await asyncio.to_thread(erasure.clear_trash_intent, self.store.root, name, subject)
        return copies, erased, queued

    async def _finish_erasures_in_trash(self, bank: str | None = None) -> None:
        """Finish and announce the erasures in trashed copies a kill interrupted (at boot), or
        those of `bank`, just deleted (`erasure.commit_before_trash`)."""
        for held in await asyncio.to_thread(erasure.trash_intents, self.store.root):
            if bank is not None and held.bank != bank:
                continue
            try:
                await self._erase_in_trash(held)
            except StorageError as exc:  # kept: the next boot, or the call asked again, retries
                log.error("forget_subject_unfinished_in_trash", bank=held.bank, error=str(exc))
                continue
            log.warning("forget_subject_resumed", bank=held.bank, erased=len(held.ids))
