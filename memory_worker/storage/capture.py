"""The durable capture queue: turns waiting for extraction outside an engine, one file in the
data dir (`.capture.jsonl`), so a crash or a restart loses no pending turn and runs none twice.

One fsynced JSON line per step of a job, replayed at open (a torn or unreadable line is skipped:
its step did not happen):

- `{"op": "job", "id", "at", "job"}` — enqueued (the turn's messages, already redacted); an id
  seen before (a retried Stop hook) adds nothing. A Stop hook hands the transcript's tail, the
  turns before too: what an earlier pending job of the session holds, or its cursor is past,
  is left out (the entry the turn starts after stays, without its words), so each message
  waits in the file once (`_unqueued`).
- `{"op": "decided", "id", "at", "reply", "known"}` — the model's reply and the memories it was
  shown, written BEFORE the first memory write: a job that crashes after it is finished with the
  same decisions, and what it already wrote is not written again (`harness.capture`).
- `{"op": "failed", "id", "at", "error", "retry_at"}` — a failed attempt (retried after
  `retry_at`); past the attempt limit the job is `dead` (kept, never run again; its messages
  go to the session's next job trimmed against it, as that job's tail held them). A job that
  `expire`s (nothing could ever run it) is `dead` too, with `"expired": true`, and its
  messages leave the file (its `job` line keeps the session, bank and agent, no entries).
- `{"op": "done", "id", "at", "session", "cursor", "written"}` — finished; `cursor` is where the
  session's passes got to (the pass's own value: the last entry read, the turns finished), so
  the session's next turn starts after it. Done in the same line as the cursor: the two cannot
  disagree.

Once nothing is pending after a job finished, it is rewritten (atomically) to the cursors and
the dead jobs: a finished turn's messages, and the memories its model was shown, do not stay
beside the memories (they did until the file passed 1 MB, still there after a person deleted a
memory or was erased). Only the holder of the data dir's lock writes it.

A `memory::forget-subject` rewrites it too (`erase_jobs`): a job carries no subject, so none of a
bank's jobs can be shown not to hold the person's words. The bank's dead jobs (never run again)
leave whole, every finished job's lines leave, and a pending job (still to be read, and then
compacted away) keeps its messages but not the reasons of its failed attempts (a prose reply
quotes what the model was shown) nor a decision made over one of the erased memories (its ids
are fingerprints of their words; the job asks the model again). An attempt the erasure overlapped
(its model shown their memories before it) writes neither when it ends (`failed`'s `since`).
"""

from __future__ import annotations

import json
import secrets
import threading
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_worker.storage import files
from memory_worker.storage.logger import get_logger

__all__ = [
    "CAPTURE_FILE",
    "MAX_JOB_ENTRIES",
    "CaptureQueue",
    "Pending",
    "QueueSummary",
    "erase_jobs",
    "summary",
]

log = get_logger(__name__)

CAPTURE_FILE = ".capture.jsonl"  # a dot name: never taken for a bank
MAX_ATTEMPTS = 8  # then the job is dead: kept in the file for a person, never run again
# The transcript's tail a job carries; the cursor picks what is new in it. Here, not in
# harness.capture (which validates jobs by it), so the Stop hook reads that tail without
# importing the service.
MAX_JOB_ENTRIES = 200
# What a pending job's failed attempts say once an erasure took their reasons.
ERASED_REASON = "(the reason was erased by memory::forget-subject)"


@dataclass
class Pending:
    """A job not done yet, as replayed."""

    id: str
    job: dict[str, Any]
    enqueued_at: int
    attempts: int = 0
    retry_at: int = 0
    decided: dict[str, Any] | None = None  # {"at", "reply", "known"} once the model answered
    error: str | None = None


@dataclass
class _State:
    pending: dict[str, Pending] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    cursors: dict[str, Any] = field(default_factory=dict)
    # Dead jobs as their `job` and `dead` lines: kept for a person, so a compaction writes them
    # again (the file rewritten to the cursors alone lost every dead turn).
    buried: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    done: int = 0
    skipped_lines: int = 0

    def bury(self, pending: Pending, record: dict[str, Any]) -> None:
        self.pending.pop(pending.id, None)
        born = {"op": "job", "id": pending.id, "at": pending.enqueued_at, "job": pending.job}
        self.buried[pending.id] = (born, record)
        if not record.get("expired"):  # an expired job's words were to leave the file
            self._hand_on(pending.job)

    def _hand_on(self, dead: dict[str, Any]) -> None:
        """The dead job's messages given to the job `_unqueued` trimmed against it, if one
        waits: the cursor stays before the dead turn, and that job (the transcript's tail) read
        it again, as it did whole; trimmed to its own messages, the turn was never read. Here,
        where a live death and its replay both pass: the same jobs after a restart. Only while
        that job still starts at the dead job's last entry (its anchor, without words): never
        twice."""
        held = dead.get("entries") or []
        if not held or not isinstance(held[-1], dict):
            return
        last, whose = held[-1].get("entry_id"), (dead.get("session_id"), dead.get("bank"))
        for waiting in self.pending.values():
            job = waiting.job
            if (job.get("session_id"), job.get("bank")) != whose:
                continue
            entries = job.get("entries") or []
            head = entries[0] if entries and isinstance(entries[0], dict) else {}
            if head.get("entry_id") == last and not head.get("text"):
                # As many as a job carries: a run of deaths must not grow one job unbounded.
                waiting.job = job | {"entries": [*held, *entries[1:]][-MAX_JOB_ENTRIES:]}
            return  # only the session's next job of the bank can start where this one ended

    @property
    def dead(self) -> int:
        return len(self.buried)


class CaptureQueue:
    """The queue file of one data dir. Blocking methods: call them off the event loop."""

    def __init__(self, root: Path) -> None:
        self.path = root / CAPTURE_FILE
        # One step at a time (an append and its RAM change, or a rewrite): the runner's writes
        # and an erasure's (`erase_jobs`) run in different threads.
        self._mutex = threading.RLock()
        self._log = files.AppendLog(self.path)
        self._state = _replay(self.path)
        self._compacted = 0  # the file's size after this process last rewrote it
        self._erased: set[str] = set()  # memories erased while open: never journaled again
        # Erasures through this queue so far, and the last one that scrubbed each pending job:
        # an attempt that began before it cannot write the reason it failed with (`failed`).
        self._erasures = 0
        self._scrubbed: dict[str, int] = {}
        with _OPEN_LOCK:
            _OPEN[_key(root)] = self

    def __repr__(self) -> str:
        s = self._state
        return (
            f"<CaptureQueue pending={len(s.pending)} done={s.done} dead={s.dead} "
            f"sessions={len(s.cursors)}>"
        )

    @property
    def dead(self) -> int:
        return self._state.dead

    @property
    def erasures(self) -> int:
        """How many erasures went through this queue: an attempt notes it as it begins, and
        hands it to `failed`."""
        return self._erasures

    def pending(self) -> list[Pending]:
        """Jobs not done yet, in the order they were queued (the file's): not by the clock's
        `at`, which a clock stepped back between two turns of one session put in reverse, so the
        later turn's job ran first and the earlier one then read its turn a second time."""
        return list(self._state.pending.values())

    def cursor(self, session_id: str) -> Any:
        """The session's cursor as the last finished job left it (None before the first)."""
        return self._state.cursors.get(session_id)

    def _append(self, record: dict[str, Any]) -> None:
        self._log.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")
        self._log.sync()

    def enqueue(self, job: dict[str, Any], *, job_id: str | None, now_ms: int) -> tuple[str, bool]:
        """Durably add `job`; (its id, whether it is new). A known id adds nothing, nor a turn
        the session's cursor is already past. Its messages that wait in the queue already (an
        earlier pending turn of the session carries them) or were read (up to the cursor) are
        left out (`_unqueued`)."""
        job_id = job_id or f"job-{now_ms}-{secrets.token_hex(4)}"
        with self._mutex:
            if job_id in self._state.seen:
                return job_id, False
            job = _unqueued(self._state, job)
            if not job.get("entries"):
                return job_id, False  # every message of it was read: the cursor is at its end
            self._append({"op": "job", "id": job_id, "at": now_ms, "job": job})
            self._state.seen.add(job_id)
            self._state.pending[job_id] = Pending(job_id, job, now_ms)
        return job_id, True

    def decide(self, job_id: str, reply: str, known: list[str], *, now_ms: int) -> None:
        """Durably record what the model answered, before anything is written because of it."""
        decided = {"at": now_ms, "reply": reply, "known": known}
        with self._mutex:
            if not self._erased.isdisjoint(known):
                # Shown memories an erasure took meanwhile (read before its rewrite): their ids
                # are not written back. The job goes on; killed now, it asks the model again.
                self._state.pending[job_id].decided = decided
                return
            self._append({"op": "decided", "id": job_id} | decided)
            self._state.pending[job_id].decided = decided

    def done(self, job_id: str, *, session_id: str, cursor: Any, written: int, now_ms: int) -> None:
        record = {
            "op": "done",
            "id": job_id,
            "at": now_ms,
            "session": session_id,
            "cursor": cursor,
            "written": written,
        }
        with self._mutex:
            self._append(record)
            self._state.pending.pop(job_id, None)
            self._scrubbed.pop(job_id, None)
            self._state.done += 1
            if cursor:
                self._state.cursors[session_id] = cursor

    def failed(
        self,
        job_id: str,
        error: str,
        *,
        now_ms: int,
        retry_in_ms: int,
        last: bool = False,
        since: int | None = None,
    ) -> bool:
        """Record a failed attempt; True when the job will be retried, False when it is dead
        (past the attempt limit, or `last`: the caller knows no retry will help). `since`: the
        `erasures` count when the attempt began. An erasure of the job's bank since then took
        the reasons it had; this one is of the same kind (a prose reply quoting the memories
        the model was shown before the erasure), so it is not written either: written after
        the erasure, it kept the person's words in the file (for good in a dead job's line)."""
        with self._mutex:
            pending = self._state.pending[job_id]
            if since is not None and self._scrubbed.get(job_id, 0) > since:
                error = ERASED_REASON
            if last or pending.attempts + 1 >= MAX_ATTEMPTS:
                record = {"op": "dead", "id": job_id, "at": now_ms, "error": error}
                self._append(record)
                self._state.bury(pending, record)
                self._scrubbed.pop(job_id, None)
                return False
            retry_at = now_ms + retry_in_ms
            self._append(
                {"op": "failed", "id": job_id, "at": now_ms, "error": error, "retry_at": retry_at}
            )
            pending.attempts += 1
            pending.retry_at = retry_at
            pending.error = error
        return True

    def expire(self, before_ms: int, reason: str, *, now_ms: int) -> int:
        """The pending jobs queued before `before_ms` made dead with `reason`, their messages
        dropped; the file rewritten at once (atomically: a crash before it leaves them pending,
        expired again next time), so the words do not stay on disk. The number expired."""
        with self._mutex:
            old = [p for p in self._state.pending.values() if p.enqueued_at < before_ms]
            for pending in old:
                dropped = len(pending.job.get("entries") or [])
                pending.job = {k: v for k, v in pending.job.items() if k != "entries"} | {
                    "entries": []
                }
                record = {
                    "op": "dead",
                    "id": pending.id,
                    "at": now_ms,
                    "error": reason,
                    "expired": True,
                    "entries_dropped": dropped,
                }
                self._state.bury(pending, record)
            if old:
                self._rewrite()
        return len(old)

    def compact(self) -> bool:
        """Rewrite the file to the sessions' cursors and the dead jobs when nothing is pending
        and something was written since the last rewrite (a job's messages, its decision)."""
        with self._mutex:
            if self._state.pending or self._log.size <= self._compacted:
                return False
            self._rewrite()
        return True

    def erase(self, in_bank: Callable[[dict[str, Any]], bool], ids: Collection[str]) -> int:
        """Forget-subject's part here (see the module docstring): the jobs `in_bank` says are
        the bank's lose what may hold the person's words, `ids` (the memories erased) leave
        every decision; the file is rewritten whole, atomically. The dead jobs dropped."""
        with self._mutex:
            self._erased.update(ids)
            self._erasures += 1
            state = self._state
            for pending in state.pending.values():
                if pending.decided is not None and not self._erased.isdisjoint(
                    pending.decided["known"]
                ):
                    pending.decided = None  # asked again: the shown memories are read anew
                if in_bank(pending.job):
                    self._scrubbed[pending.id] = self._erasures  # an attempt running now too
                    if pending.error is not None:
                        pending.error = ERASED_REASON
            dropped = [i for i, (born, _) in state.buried.items() if in_bank(born["job"])]
            for job_id in dropped:
                del state.buried[job_id]
            if self.path.exists() or dropped:
                self._rewrite()
        return len(dropped)

    def _rewrite(self) -> None:
        """The file replaced by what it must hold now: the sessions' cursors, the pending jobs
        (their attempts and decision) and the dead ones; a finished job's lines leave it."""
        state = self._state
        records: list[dict[str, Any]] = [
            {"op": "cursor", "session": s, "cursor": c} for s, c in sorted(state.cursors.items())
        ]
        # The dead jobs first: replayed after a pending job, a death would hand its messages
        # on again (`_State._hand_on`; they were handed on when it died).
        for born, record in state.buried.values():
            records += [born, record]
        for pending in state.pending.values():
            job_id = pending.id
            records.append(
                {"op": "job", "id": job_id, "at": pending.enqueued_at, "job": pending.job}
            )
            if pending.attempts:
                records.append(
                    {
                        "op": "failed",
                        "id": job_id,
                        "at": pending.enqueued_at,
                        "error": pending.error or "",
                        "retry_at": pending.retry_at,
                        "attempts": pending.attempts,  # one line for them all
                    }
                )
            if pending.decided is not None:
                records.append({"op": "decided", "id": job_id} | pending.decided)
        data = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
        self._log.close()
        files.atomic_write(self.path, data)
        self._log = files.AppendLog(self.path)
        self._compacted = len(data)
        # What was done is behind the cursors now; a pending or dead job is still known.
        state.seen = set(state.pending) | set(state.buried)

    def close(self) -> None:
        with self._mutex:
            self._log.close()
        with _OPEN_LOCK:
            if _OPEN.get(_key(self.path.parent)) is self:
                del _OPEN[_key(self.path.parent)]


# The queue open on each data dir in this process (the lock holder's: only it writes the file),
# so an erasure rewrites the file through it, never under it (the runner's next compaction wrote
# its RAM copy, dead jobs and all, back).
_OPEN: weakref.WeakValueDictionary[str, CaptureQueue] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def _key(root: Path) -> str:
    return str(root.resolve())


def erase_jobs(
    root: Path, bank: str, ids: Collection[str], *, default_bank: str | None = None
) -> int:
    """Forget-subject in `bank`, in the data dir's capture queue (blocking; `CaptureQueue.erase`):
    through the queue open in this process, else the file itself when there is one. A job that
    names no bank is `default_bank`'s (None: unknown, as at a bank's load, so it counts as any
    bank's). The dead jobs dropped."""

    def in_bank(job: dict[str, Any]) -> bool:
        named = job.get("bank")
        if not named:
            return default_bank is None or default_bank == bank
        return str(named) == bank

    with _OPEN_LOCK:
        queue = _OPEN.get(_key(root))
    if queue is not None:
        return queue.erase(in_bank, ids)
    if not (root / CAPTURE_FILE).exists():
        return 0
    queue = CaptureQueue(root)
    try:
        return queue.erase(in_bank, ids)
    finally:
        queue.close()


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """What the queue holds, for a person (doctor): counts and the oldest waiting turn."""

    pending: int
    oldest_pending_at: int | None  # epoch ms the oldest pending job was queued
    dead: int  # jobs that will never run again (failed past their attempts, or expired)
    expired: int  # of them, expired: their messages already left the file
    skipped_lines: int  # torn or damaged lines the replay passed over


def summary(root: Path) -> QueueSummary:
    """The data dir's queue as it stands (blocking): through the queue open in this process (its
    RAM is the file's), else a read-only replay of the file; nothing is written either way."""
    with _OPEN_LOCK:
        queue = _OPEN.get(_key(root))
    if queue is not None:
        with queue._mutex:
            return _summarised(queue._state)
    path = root / CAPTURE_FILE
    return _summarised(_replay(path) if path.exists() else _State())


def _summarised(state: _State) -> QueueSummary:
    waiting = [pending.enqueued_at for pending in state.pending.values()]
    expired = sum(1 for _, record in state.buried.values() if record.get("expired"))
    return QueueSummary(
        pending=len(waiting),
        oldest_pending_at=min(waiting) if waiting else None,
        dead=state.dead,
        expired=expired,
        skipped_lines=state.skipped_lines,
    )


def _replay(path: Path) -> _State:
    state = _State()
    for _, raw, _complete in files.iter_lines(path):
        try:
            record = json.loads(raw)
            _apply(state, record)
        except (ValueError, KeyError, TypeError, RecursionError):
            state.skipped_lines += 1  # a torn or damaged line: that step did not happen
    if state.skipped_lines:
        log.warning("capture_queue_lines_skipped", path=str(path), lines=state.skipped_lines)
    return state


def _unqueued(state: _State, job: dict[str, Any]) -> dict[str, Any]:
    """`job` without the messages the queue holds for its session already. Each Stop hook hands
    the transcript's newest messages (up to `MAX_JOB_ENTRIES`), most of them the turns before;
    with nothing running the queue (no server), each turn queued them all again: the file grew
    with the square of a session's length, and each Stop replayed it all.

    The anchor is the entry the job's turn starts after: the last entry of the session's newest
    pending job (of the same bank), else the session's cursor (the entry its passes read up
    to). Found in the job, what comes before it leaves, and it stays as an entry without its
    words: the pass reading the job (after the cursor, which the earlier job leaves at that
    entry) meets it and reads exactly the messages it read from the whole tail. Not found (a
    session rewound or trimmed, a turn of more messages than the tail), the job is kept whole."""
    entries = job.get("entries")
    if not isinstance(entries, list) or not entries:
        return job
    session, bank = job.get("session_id"), job.get("bank")
    anchor: object = None
    for pending in state.pending.values():  # the newest last: the file's order
        if pending.job.get("session_id") == session and pending.job.get("bank") == bank:
            held = pending.job.get("entries") or []
            anchor = held[-1].get("entry_id") if held else anchor
    if anchor is None:
        cursor = state.cursors.get(str(session))
        anchor = cursor.get("last_entry_id") if isinstance(cursor, dict) else None
    ids = [entry.get("entry_id") for entry in entries]
    if anchor is None or anchor not in ids:
        return job
    at = len(ids) - 1 - ids[::-1].index(anchor)
    if at == len(entries) - 1:
        return job | {"entries": []}  # nothing after it: the turn was queued or read already
    kept = {"entry_id": anchor, "role": entries[at].get("role"), "text": ""}
    return job | {"entries": [kept, *entries[at + 1 :]]}


def _apply(state: _State, record: dict[str, Any]) -> None:
    op, job_id = record["op"], str(record.get("id"))
    if op == "cursor":
        state.cursors[str(record["session"])] = record["cursor"]
        return
    if op == "job":
        if job_id not in state.seen:
            state.seen.add(job_id)
            state.pending[job_id] = Pending(job_id, dict(record["job"]), int(record["at"]))
        return
    pending = state.pending.get(job_id)
    if pending is None:
        return
    if op == "decided":
        pending.decided = {
            "at": int(record["at"]),
            "reply": str(record["reply"]),
            "known": [str(k) for k in record["known"]],
        }
    elif op == "failed":
        # `attempts`: an erasure's rewrite wrote them all as one line.
        pending.attempts = int(record.get("attempts", pending.attempts + 1))
        pending.retry_at = int(record["retry_at"])
        pending.error = str(record["error"])
    elif op == "done":
        del state.pending[job_id]
        state.done += 1
        if record.get("cursor"):
            state.cursors[str(record["session"])] = record["cursor"]
    elif op == "dead":
        state.bury(pending, record)
