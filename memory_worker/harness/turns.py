"""After a turn: one durable extraction job per finished turn, into the bank the turn ran with.

`on_turn_completed` acks fast: it decides the job (bank recorded by the hook for that turn, else
the one the turn's metadata names, else left to the job to resolve; a turn without memory, or one
finished while extraction is off, is only stepped over) and hands it to the queue under a receipt
derived from the turn, so a redelivered turn event dedupes. Without a queue worker the job runs
inline in the background.
`extract_job` is what the queue delivers; its errors propagate so the queue retries and, in the
end, dead-letters instead of losing the pass. The pass itself is an `Extractor`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Protocol

from pydantic import ValidationError

from memory_worker.app import catalog
from memory_worker.app.ports import JobQueue, TranscriptSource
from memory_worker.app.seams import ExtractJob, TurnCompleted
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput, ProseReply, SiblingUnavailable, loggable
from memory_worker.harness.selection import BankResolver, Outcome, parent_of
from memory_worker.harness.sessions import SessionRecord, SessionState
from memory_worker.storage.logger import get_logger

__all__ = [
    "EXTRACT_JOB",
    "Extractor",
    "TurnPipeline",
    "receipt_for",
]

log = get_logger(__name__)

EXTRACT_JOB = catalog.EXTRACT_JOB
MAX_PAGES = 10_000  # session::messages pages walked to find the turn's last entry
MAX_AGENT_CHARS = 128
# With no queue to retry a failed inline pass (the router down, a timeout), it is tried again
# after each of these delays: the next turn's pass starts where this turn ended, so a pass given
# up on is a turn never read. In memory only: a restart meanwhile loses it, as no queue means.
INLINE_RETRY_DELAYS_S = (5.0, 30.0, 120.0, 600.0)


class Extractor(Protocol):
    async def extract(self, job: ExtractJob, bank: str) -> int:
        """Run one pass over the session's new messages into `bank`; the number of writes.
        Raises to make the queue retry (the cursor has not moved)."""
        ...

    async def pass_over(self, job: ExtractJob) -> None:
        """Step the session's cursor past what it holds now without reading anything out."""
        ...

    async def forget(self, session_id: str) -> None:
        """Drop the session's extraction cursor."""
        ...


def _agent_name(raw: object) -> str | None:
    """`agent` as a harness build sends it: a name, or an object with one."""
    if isinstance(raw, dict):
        raw = raw.get("name") or raw.get("id")
    if not isinstance(raw, str) or not raw.strip():
        return None
    return raw.strip()[:MAX_AGENT_CHARS]


def receipt_for(turn: TurnCompleted) -> str:
    """Stable per turn: a redelivered `turn-completed` enqueues nothing new. Without a turn id
    or timestamp nothing can be matched, so every event gets its own job."""
    return f"memx-{turn.session_id}-{turn.turn_id or turn.timestamp or uuid.uuid4().hex}"


class TurnPipeline:
    def __init__(
        self,
        service: MemoryService,
        resolver: BankResolver,
        state: SessionState,
        queue: JobQueue | None,
        extractor: Extractor | None,
        transcript: TranscriptSource | None = None,
    ) -> None:
        """`transcript`: where the turn's last entry is read when it completes (the job's
        `until`); without one the job reads to the end of the session when it runs."""
        self._service = service
        self._resolver = resolver
        self._state = state
        self._queue = queue
        self._extractor = extractor
        self._transcript = transcript
        self._inline: set[asyncio.Task[Any]] = set()
        self.inline_retry_delays_s = INLINE_RETRY_DELAYS_S

    async def on_turn_completed(self, payload: object) -> dict[str, Any]:
        try:
            turn = TurnCompleted.model_validate(payload if isinstance(payload, dict) else {})
        except ValidationError as exc:
            raise InvalidInput(f"turn-completed payload: {exc.errors()[0]['msg']}") from None
        session_id = turn.session_id or ""
        if not session_id:
            return {"ok": True, "skipped": "no session_id"}
        if parent_of(turn.parent) is not None:
            return {"ok": True, "skipped": "sub-agent turn"}  # its parent's turn covers it
        off = not self._service.settings.extraction_enabled
        job = ExtractJob(
            session_id=session_id,
            turn_id=turn.turn_id,
            status=turn.status,
            agent=_agent_name(turn.agent),
            subject=await self._resolver.subject(session_id, turn.metadata),
            at=self._service.clock(),  # an erasure after this wins over the job (`ExtractJob.at`)
        )
        # Read now, while the turn is the newest thing in the session: a job that runs late must
        # not read what later turns said (they may run in another bank).
        until = await self._last_entry(session_id)
        job.until = until
        if turn.turn_id:
            await self._bound_by_turns(job, turn.turn_id, until)
        if job.bank is None and not job.skip:
            # No bank recorded for the turn (the hook did not see it, or a restart lost what it
            # kept): the turn's own choice still comes first, as it did for its injection.
            chosen = self._resolver.named(turn.metadata)
            if chosen is not None:
                job.bank, job.skip = chosen.bank, not chosen.has_memory
        if off:
            # Stepped over, not left for later: the next pass reads from the cursor, and what
            # was said while extraction was off must not reach it once extraction is back on.
            job.skip = True
        data = job.model_dump(exclude_none=True)
        receipt = receipt_for(turn)
        if self._queue is not None and await self._queue.enqueue(EXTRACT_JOB, data, receipt):
            return {"ok": True, "queued": receipt}
        task = asyncio.create_task(self._inline_job(data), name=f"memory-extract:{receipt}")
        self._inline.add(task)
        task.add_done_callback(self._inline.discard)
        return {"ok": True, "inline": receipt}

    async def _bound_by_turns(self, job: ExtractJob, turn_id: str, until: str | None) -> None:
        """The bank the hook recorded for the turn, and where the previous finished turn ended."""
        try:
            record = await self._state.get(job.session_id)
        except SiblingUnavailable:
            return  # the job resolves the bank when it runs, and starts at the cursor
        if record is None:
            record = SessionRecord()
        bank = record.turn_bank(turn_id)
        if bank == "":
            job.skip = True  # the turn ran without memory: only step the cursor past it
        elif bank is not None:
            job.bank = bank
        job.after, job.until, changed = record.close_turn(turn_id, until)
        if changed:
            self._state.put(job.session_id, record, urgent=False)

    async def _last_entry(self, session_id: str) -> str | None:
        """The session's newest user/assistant entry id; None when it cannot be read."""
        if self._transcript is None:
            return None
        newest: str | None = None
        page: str | None = None
        try:
            for _ in range(MAX_PAGES):
                items, page = await self._transcript.page(session_id, page)
                for item in items:
                    entry_id = item.get("entry_id")
                    message = item.get("message")
                    role = message.get("role") if isinstance(message, dict) else None
                    if isinstance(entry_id, str) and entry_id and role in ("user", "assistant"):
                        newest = entry_id
                if page is None:
                    break
        except SiblingUnavailable as exc:
            log.warning("extraction_until_unknown", session_id=session_id, error=str(exc))
            return None
        return newest

    async def _inline_job(self, data: dict[str, Any]) -> None:
        """The job, run here for want of a queue, and retried here as a queue would: the next
        turn's job starts where this turn ended (`after`), so it never reads these messages."""
        delays = self.inline_retry_delays_s
        refused = False  # the previous attempt's reply was in prose
        for attempt in range(len(delays) + 1):
            try:
                await self.extract_job(data)
                return
            except InvalidInput as exc:  # a job that can never run: no retry helps
                error = str(exc)
                break
            except ProseReply as exc:  # a refusal: asked once more, not for every delay
                error = loggable(exc)  # logged only: its words may quote memories
                # Counted in replies, not attempts: after a timeout, a first refusal is asked
                # again too.
                if refused or attempt == len(delays):
                    break
                refused = True
                await asyncio.sleep(delays[attempt])
            except Exception as exc:  # the router, the disk: tried again after a delay
                error, refused = str(exc), False
                if attempt == len(delays):
                    break
                log.warning(
                    "inline_extraction_retried",
                    session_id=data.get("session_id"),
                    error=error,
                    retry_in_s=delays[attempt],
                )
                await asyncio.sleep(delays[attempt])
        log.warning("inline_extraction_failed", session_id=data.get("session_id"), error=error)

    async def extract_job(self, payload: object) -> dict[str, Any]:
        try:
            job = ExtractJob.model_validate(payload if isinstance(payload, dict) else {})
        except ValidationError as exc:
            raise InvalidInput(f"extract job: {exc.errors()[0]['msg']}") from None
        stepped = "the turn ran without memory, or while extraction was off"
        bank, skipped = job.bank, stepped if job.skip else None
        if skipped is None and not self._service.settings.extraction_enabled:
            skipped = "extraction_enabled is false"  # turned off while the job waited
        if skipped is None and bank is None:
            resolution = await self._resolver.resolve(job.session_id)
            if resolution.outcome is Outcome.LOOKUP_FAILED:
                raise SiblingUnavailable(f"session lookup failed, retry later: {resolution.source}")
            bank = resolution.bank if resolution.has_memory else None
            skipped = None if resolution.has_memory else resolution.source
        elif skipped is None and bank is not None and self._deleted(bank):
            skipped = f"bank {bank} was deleted"  # never brought back
        if skipped is None and job.subject is None and self._extractor is not None:
            # No speaker named when the turn completed (none, or the session lookup failed then):
            # the session's, asked now; a failed lookup retries (seed 000) rather than write a
            # person's facts as nobody's, general in a bank partitioned by person.
            job.subject = await self._resolver.subject(job.session_id, strict=True)
        if skipped is not None:
            # Its words must never reach a later pass, which may write into another bank.
            if self._extractor is not None:
                await self._extractor.pass_over(job)
            return {"ok": True, "skipped": skipped}
        assert bank is not None
        if self._extractor is None:
            log.info("extraction_unavailable", session_id=job.session_id, bank=bank)
            return {"ok": True, "bank": bank, "written": 0}
        written = await self._extractor.extract(job, bank)
        return {"ok": True, "bank": bank, "written": written}

    def _deleted(self, bank: str) -> bool:
        """Deleted and not the default (the default bank is recreated by its first write)."""
        return self._service.was_deleted(bank)

    async def on_session_deleted(self, payload: object) -> dict[str, Any]:
        session_id = payload.get("session_id") if isinstance(payload, dict) else None
        if isinstance(session_id, str) and session_id:
            await self._state.drop(session_id)
            await self._service.forget_deliveries(session_id)  # what lessons it was given
            if self._extractor is not None:
                await self._extractor.forget(session_id)
        return {"ok": True}

    async def settle(self) -> None:
        """Wait for the inline jobs running now to finish (tests, benchmarks)."""
        while running := [task for task in self._inline if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._inline):
            task.cancel()
        await asyncio.gather(*self._inline, return_exceptions=True)
