"""Capture without an engine: the turns a coding agent's Stop hook hands over, extracted into
memories by the same `Extractor` (prompt, parser, write rules) as the bus path, from the durable
queue in the data dir (`storage.capture`).

- A job carries the turn's messages (the hook read them from the agent's transcript and redacted
  them); `JobTranscript` serves them to the pass as `session::messages` would. The session's
  cursor is the queue's: the last entry a finished job read, so a job carrying the whole tail of
  a transcript only extracts what is new.
- Jobs run one at a time, oldest first, a session's in the order its turns were queued (one
  waiting for its retry holds the session's later ones). The pass journals its decision in the
  queue before it writes (`Extractor` with a `PassJournal`), and a job is done in the same
  fsynced line as its cursor: killed at any moment, a job is finished after the restart exactly
  once.
- A failed attempt (the endpoint slow, answering garbage) is retried with a growing delay;
  past the attempt limit the job is dead, kept in the file, never run again. A reply in prose
  (a refusal: no attempt at the JSON) is tried once more, then the job is dead, its words the
  recorded reason. An endpoint nobody answers on (`SiblingDown`) is not the job's failure: the
  whole queue pauses with a growing delay, asking once per delay, and no job spends an attempt
  (an hour offline used to kill every queued turn).
- With no endpoint configured (and no engine), nothing would ever run a job: a turn is not
  queued at all (the queue file kept every conversation's words without bound, where nobody
  expected them), and a job queued under an earlier configuration expires after
  `UNCONFIGURED_MAX_AGE_MS`: recorded dead with its reason, its messages dropped. An endpoint
  that is configured but down keeps every job (the pause above).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory_worker.app.ports import Completer
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput, ProseReply, SiblingDown, loggable
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.harness.extractor import CURSOR_SCOPE, PROSE_REPLY, Decision, Extractor
from memory_worker.storage.capture import MAX_JOB_ENTRIES, CaptureQueue, Pending
from memory_worker.storage.logger import get_logger

__all__ = [
    "MAX_JOB_ENTRIES",
    "RETRY_AFTER_MAX_MS",
    "UNCONFIGURED_MAX_AGE_MS",
    "CaptureEntry",
    "CaptureJob",
    "CaptureRunner",
]

log = get_logger(__name__)

MAX_ENTRY_CHARS = 20_000  # one message's text; a longer one is cut (the facts are in the words)
# A message is redacted this far past the cut, then cut (as `adapters.transcripts` does): a secret
# the cut would split no longer reads as one, and its part would be queued and sent.
REDACT_PAST_CUT_CHARS = 4096
RETRY_FIRST_MS = 5_000
RETRY_MAX_MS = 10 * 60_000
# The longest pause an endpoint's own `Retry-After` may ask for (a daily quota says a day; a
# bogus header must not stop capture for longer).
RETRY_AFTER_MAX_MS = 60 * 60_000
UNAVAILABLE_POLL_S = 30.0  # with no endpoint configured, how often to look again
# How long a job left from an earlier configuration waits for an endpoint to be configured
# again before it expires (dead, its messages dropped): a week for a settings edit to be undone.
UNCONFIGURED_MAX_AGE_MS = 7 * 24 * 60 * 60_000
# `enqueue`'s reply (and its one log line) when capture is off for want of an endpoint.
NOT_QUEUED = (
    "no extraction_endpoint is configured: capture is off, the turn is not queued; set "
    "extraction_endpoint (an OpenAI-compatible server) to capture turns"
)


class CaptureEntry(BaseModel):
    """One transcript message: the agent's entry id, its role and text, when it was written."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    entry_id: str = Field(min_length=1, max_length=200)
    role: str = Field(pattern="^(user|assistant)$")
    text: str = Field(max_length=MAX_ENTRY_CHARS)
    timestamp: int | None = Field(default=None, ge=0)

    @field_validator("text", mode="before")
    @classmethod
    def _cut(cls, value: object) -> object:
        """A longer message is cut, not the turn refused: a client of `POST /capture` posting a
        pasted log lost the whole turn, and every later one that carried it."""
        if isinstance(value, str) and len(value) > MAX_ENTRY_CHARS:
            value = redact(value[: MAX_ENTRY_CHARS + REDACT_PAST_CUT_CHARS]).text
            return value[:MAX_ENTRY_CHARS]
        return value


class CaptureJob(BaseModel):
    """What the Stop hook hands to capture: one turn (and the tail before it) of one session."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    session_id: str = Field(min_length=1, max_length=200)
    bank: str | None = None
    agent: str | None = Field(default=None, max_length=100)
    entries: list[CaptureEntry] = Field(max_length=MAX_JOB_ENTRIES)

    def job_id(self) -> str | None:
        """Stable per turn (a Stop hook fired twice enqueues once): the session and its newest
        entry."""
        return f"{self.session_id}:{self.entries[-1].entry_id}" if self.entries else None


def _redact_entries(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        entry["text"] = redact(entry["text"]).text


class JobTranscript:
    """`TranscriptSource` over one job's messages: a single page."""

    def __init__(self, job: dict[str, Any]) -> None:
        self._items = [
            {
                "entry_id": entry["entry_id"],
                "message": {
                    "role": entry["role"],
                    "content": entry["text"],
                    "timestamp": entry.get("timestamp"),
                },
            }
            for entry in job.get("entries", [])
        ]

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        return self._items, None


class _Cursors:
    """`KeyValue` for the pass's cursor (the Extractor's own value: the entry it got to and the
    turns it finished): read from the queue; a move is kept here and written with the job's
    `done` line (one fsync: done and cursor cannot disagree)."""

    def __init__(self, queue: CaptureQueue) -> None:
        self._queue = queue
        self.moved: dict[str, Any] | None = None

    async def get(self, scope: str, key: str) -> Any:
        if scope != CURSOR_SCOPE:
            return None
        return self.moved if self.moved is not None else self._queue.cursor(key)

    async def set(self, scope: str, key: str, value: Any) -> None:
        if scope == CURSOR_SCOPE and isinstance(value, dict):
            self.moved = value

    async def delete(self, scope: str, key: str) -> None:
        return None


class _Journal:
    """`PassJournal` over the queue's `decided` line of one job."""

    def __init__(self, runner: CaptureRunner, pending: Pending) -> None:
        self._runner = runner
        self._pending = pending

    def recorded(self) -> Decision | None:
        decided = self._pending.decided
        if decided is None:
            return None
        return Decision(decided["reply"], tuple(decided["known"]), int(decided["at"]))

    async def record(self, decision: Decision) -> None:
        await self._runner._written(
            self._runner.queue.decide,
            self._pending.id,
            decision.reply,
            list(decision.known),
            now_ms=decision.at_ms,
        )


class CaptureRunner:
    """Runs the queue's jobs: `enqueue()` adds one and wakes the loop; `run_once()` runs every
    job that is due now (tests, `memory-worker capture`); `start()` / `close()` own the loop."""

    def __init__(
        self,
        service: MemoryService,
        queue: CaptureQueue,
        completer: Completer | None,
        *,
        available: Callable[[], bool] = lambda: True,
        knows_endpoint: bool = True,
    ) -> None:
        self.service = service
        # Whether these settings are the ones the queue runs under, so that no endpoint in them
        # means capture is off. Not for a process that only queues and read no configuration (a
        # hook beside a stopped server): the server that runs the queue has settings of its own.
        self.knows_endpoint = knows_endpoint
        self.queue = queue
        self.completer = completer  # None: jobs only wait (an enqueue-only runner)
        # Whether the completer can answer now (an endpoint is configured): jobs wait, not fail.
        self.available = available
        self._lock = asyncio.Lock()  # one job at a time
        # One queue write at a time, apart from the job lock: a turn is queued while another
        # turn's extraction waits on its model (a Stop hook has 3 s; a slow endpoint, 30).
        self._writes = asyncio.Lock()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set while the loop has nothing due to run
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.finished = 0
        self._down_until_ms = 0  # the endpoint answered nothing: no job runs before this
        self._down_streak = 0  # passes in a row that found it down (the delay doubles)
        self._said_off = False  # "capture is off" logged (once while it stays off)
        # When the passes first found no endpoint configured (None while one is): a job expires
        # a week after both its enqueue and this, so a job kept through a long outage of a
        # configured endpoint is not dropped the moment a settings edit removes it.
        self._unconfigured_since_ms: int | None = None

    def __repr__(self) -> str:
        return f"<CaptureRunner {self.queue!r} finished={self.finished}>"

    async def _blocking(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _written(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A write of the queue file (`_blocking`), one at a time."""
        async with self._writes:
            return await self._blocking(fn, *args, **kwargs)

    async def enqueue(self, payload: object) -> dict[str, Any]:
        """Validate and durably queue one turn; `{"queued": id, "new": bool}`. With capture
        off for want of an endpoint, nothing is written: `{"queued": None, "new": False,
        "detail"}` (a Stop hook prints nothing either way)."""
        try:
            job = CaptureJob.model_validate(payload if isinstance(payload, dict) else {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "payload"
            raise InvalidInput(f"capture job: {where}: {err['msg']}") from None
        if job.bank is not None:
            check_name(job.bank, "bank")
        if self._unconfigured():
            if not self._said_off:
                self._said_off = True
                log.info("capture_off", detail=NOT_QUEUED)
            return {"queued": None, "new": False, "detail": NOT_QUEUED}
        self._said_off = False
        data = job.model_dump(exclude_none=True)
        # The Stop hook redacted the words already, but `POST /capture` takes a turn from any
        # client: what reaches the queue file is redacted here too (idempotent on redacted text).
        await self._blocking(_redact_entries, data["entries"])
        job_id, new = await self._written(
            self.queue.enqueue, data, job_id=job.job_id(), now_ms=self.service.clock()
        )
        if new:
            self._idle.clear()
            self._wake.set()
        return {"queued": job_id, "new": new}

    def _unconfigured(self) -> bool:
        """Whether nothing could ever extract a queued turn: extraction is on, but there is no
        engine and no `extraction_endpoint`. Not with extraction off: such a turn is queued to
        be stepped over (its words never read once extraction is back on), with no endpoint."""
        if not self.knows_endpoint:
            return False
        return self.service.settings.extraction_enabled and not self.service.captures_turns()

    def _heads(self) -> list[Pending]:
        """Each session's oldest pending job, oldest first. A session's jobs run in the order
        its turns were queued: a later turn's job carries the earlier turns too and moves the
        cursor past them, so an earlier job retried after it found no cursor in its own
        messages, read its turn again and moved the cursor back."""
        heads: dict[str, Pending] = {}
        for pending in self.queue.pending():
            heads.setdefault(str(pending.job.get("session_id")), pending)
        return list(heads.values())

    def _due(self, now_ms: int) -> list[Pending]:
        return [p for p in self._heads() if p.retry_at <= now_ms]

    async def run_once(self) -> int:
        """Run every job due now, oldest first, each session's in order (a job waiting for its
        retry holds its session's later ones); the number finished (done or dead)."""
        finished = 0
        if self.completer is None:
            return 0
        if self.service.settings.extraction_enabled and not self.available():
            finished += await self._expire()
        else:
            self._unconfigured_since_ms = None
        tried: set[str] = set()
        while not self._closing and not self._paused():
            due = [p for p in self._due(self.service.clock()) if p.id not in tried]
            if not due:
                break
            tried.add(due[0].id)
            async with self._lock:
                finished += await self._run(due[0])
        if finished:
            async with self._lock:
                await self._written(self.queue.compact)
        self.finished += finished
        return finished

    def _paused(self) -> bool:
        """Whether due jobs wait: no endpoint configured, or the endpoint down. Not with
        extraction off: nothing is asked of the endpoint then, and the turns said meanwhile are
        stepped over at once (as the engine does), never left to be read once it is back on."""
        if not self.service.settings.extraction_enabled:
            return False
        return not self.available() or self.service.clock() < self._down_until_ms

    async def _expire(self) -> int:
        """With no endpoint configured for `UNCONFIGURED_MAX_AGE_MS` (as this runner saw it),
        the jobs queued longer ago than that (under an earlier configuration) are dead, their
        messages dropped from the file: nothing would ever run them. Recorded (the reason in the
        dead line, a warning here); never while an endpoint is configured, even one that is
        down."""
        now = self.service.clock()
        if self._unconfigured_since_ms is None:
            self._unconfigured_since_ms = now
        if now - self._unconfigured_since_ms < UNCONFIGURED_MAX_AGE_MS:
            return 0  # the week an edit has to be undone, for the jobs already old too
        reason = (
            f"expired: waited more than {UNCONFIGURED_MAX_AGE_MS // 86_400_000} days with no "
            "extraction_endpoint configured; its messages were dropped"
        )
        async with self._lock:
            expired: int = await self._written(
                self.queue.expire, now - UNCONFIGURED_MAX_AGE_MS, reason, now_ms=now
            )
        if expired:
            log.warning("capture_jobs_expired", jobs=expired, reason=reason)
        return expired

    async def _run(self, pending: Pending) -> int:
        assert self.completer is not None
        job = pending.job
        session_id = str(job["session_id"])
        bank = str(job.get("bank") or self.service.settings.default_bank)
        cursors = _Cursors(self.queue)
        extractor = Extractor(
            self.service, JobTranscript(job), self.completer, cursors, _Journal(self, pending)
        )
        until = job["entries"][-1]["entry_id"] if job.get("entries") else None
        agent = job.get("agent")
        extract_job = ExtractJob(
            session_id=session_id, bank=bank, until=until, agent=agent, at=pending.enqueued_at
        )
        erasures = self.queue.erasures  # one of its bank during the attempt takes its reason
        try:
            if not self.service.settings.extraction_enabled or self.service.was_deleted(bank):
                await extractor.pass_over(extract_job)  # its words must never reach a later pass
                written = 0
            else:
                written = await extractor.extract(extract_job, bank)
        except SiblingDown as exc:  # nobody there: the queue waits, the job keeps its attempts
            # As long as the endpoint said (a rate limit's `Retry-After`), if longer: asked
            # earlier, each question is one more request against the limit.
            said = min(exc.retry_after_ms or 0, RETRY_AFTER_MAX_MS)
            pause = max(_backoff_ms(self._down_streak), said)
            self._down_streak += 1
            self._down_until_ms = self.service.clock() + pause
            log.warning("capture_endpoint_down", job=pending.id, error=str(exc), retry_in_ms=pause)
            return 0
        except Exception as exc:  # the endpoint, the disk: retried, never lost
            retry_in = _backoff_ms(pending.attempts)
            # A reply in prose (a refusal) is asked once more (a sampled reply may differ), then
            # the job is dead at once, its words the reason: it was asked the same for every
            # attempt, some twenty minutes. Counted in replies, not attempts: after a timeout, a
            # first refusal killed the job unasked again.
            last = isinstance(exc, ProseReply) and PROSE_REPLY in (pending.error or "")
            retried = await self._written(
                self.queue.failed,
                pending.id,
                str(exc)[:500],
                now_ms=self.service.clock(),
                retry_in_ms=retry_in,
                last=last,
                since=erasures,
            )
            log.warning(
                "capture_failed",
                job=pending.id,
                error=loggable(exc),
                retry_in_ms=retry_in if retried else None,
                dead=not retried,
            )
            return 0 if retried else 1
        self._down_streak = 0
        await self._written(
            self.queue.done,
            pending.id,
            session_id=session_id,
            cursor=cursors.moved or self.queue.cursor(session_id),
            written=written,
            now_ms=self.service.clock(),
        )
        log.info("captured", job=pending.id, bank=bank, written=written)
        return 1

    def next_due_ms(self) -> int | None:
        due = min((p.retry_at for p in self._heads()), default=None)
        return None if due is None else max(due, self._down_until_ms)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="memory-capture")

    async def settle(self) -> None:
        """Wait until the loop has run every job due (tests, benchmarks)."""
        await self._idle.wait()

    async def _loop(self) -> None:
        while not self._closing:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:  # a bug: logged, the loop goes on (the job stays queued)
                log.exception("capture_loop_failed")
            due = self.next_due_ms()
            if self._wake.is_set():
                continue  # enqueued while running: run again before saying idle
            if due is None or due > self.service.clock() or not self.available():
                self._idle.set()
            timeout = None if due is None else max(due - self.service.clock(), 0) / 1000 + 0.01
            if self.completer is None:
                timeout = None  # an enqueue-only runner: nothing runs here
            elif not self.available():
                timeout = UNAVAILABLE_POLL_S  # a settings edit may bring an endpoint
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            # A job mid-way is cut off: its journal and cursor make the next start finish it.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._written(self.queue.close)


def _backoff_ms(failures: int) -> int:
    """The delay after `failures` failed tries in a row: doubling from `RETRY_FIRST_MS`, capped."""
    delay: int = RETRY_FIRST_MS * 2 ** min(failures, 32)
    return min(delay, RETRY_MAX_MS)
