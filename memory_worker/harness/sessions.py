"""What the worker remembers about each session: the memory section frozen into its system prompt
and the bank each of its turns ran with.

Kept in the state worker (`KeyValue`, scope `memory_sessions`) so a restart changes nothing a
running session sees, with an in-process LRU in front so the hook's hot path reads RAM. The state
worker is an enrichment: when it fails, the cache still answers this process and the failure is
logged.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from memory_worker.app.ports import KeyValue
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.storage.logger import get_logger

__all__ = ["MAX_TURNS_KEPT", "SCOPE", "SessionRecord", "SessionState"]

log = get_logger(__name__)

SCOPE = "memory_sessions"
CACHE_SESSIONS = 4096
LAZY_WRITE_S = 1.0  # a turn's bank reaches the state worker within this, batched
MAX_TURNS_KEPT = 64  # a turn's bank is needed until its extraction job and its sub-agents are done


@dataclass
class SessionRecord:
    """`system`: the section sent in the system prompt since the session's first step ("" = none),
    None before the first step. `turns`: turn id → bank ("" = the turn ran without memory).
    `untils`: finished turn id → its last user/assistant entry, in the order the turns finished:
    each extraction job reads from the previous turn's entry to its own, never beyond."""

    system: str | None = None
    turns: dict[str, str] = field(default_factory=dict)
    untils: dict[str, str] = field(default_factory=dict)

    def remember_turn(self, turn_id: str, bank: str | None) -> bool:
        """Record the bank of a turn at its first sight; True when something changed."""
        if turn_id in self.turns:
            return False
        self.turns[turn_id] = bank or ""
        while len(self.turns) > MAX_TURNS_KEPT:
            del self.turns[next(iter(self.turns))]
        return True

    def turn_bank(self, turn_id: str) -> str | None:
        """The bank the turn ran with; "" when it ran without memory; None when never seen."""
        return self.turns.get(turn_id)

    def close_turn(self, turn_id: str, until: str | None) -> tuple[str | None, str | None, bool]:
        """`(after, until, changed)` for a finished turn: the entry its extraction stops at (as
        first recorded: a redelivered event keeps it, even when later turns exist by now) and the
        previous finished turn's, where it starts. `until=None` (the transcript could not be
        read) records nothing."""
        finished = list(self.untils)
        if turn_id in self.untils:
            at = finished.index(turn_id)
            return (self.untils[finished[at - 1]] if at else None), self.untils[turn_id], False
        after = self.untils[finished[-1]] if finished else None
        if until is None:
            return after, None, False
        self.untils[turn_id] = until
        while len(self.untils) > MAX_TURNS_KEPT:
            del self.untils[next(iter(self.untils))]
        return after, until, True

    def to_json(self) -> dict[str, Any]:
        return {"system": self.system, "turns": dict(self.turns), "untils": dict(self.untils)}

    @classmethod
    def from_json(cls, raw: object) -> SessionRecord | None:
        if isinstance(raw, dict) and "value" in raw and "turns" not in raw:
            raw = raw["value"]  # older state workers wrap the stored value
        if not isinstance(raw, dict):
            return None
        system = raw.get("system")
        return cls(
            system=system if isinstance(system, str) else None,
            turns=_strings(raw.get("turns")),
            untils=_strings(raw.get("untils")),
        )


def _strings(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, str)}


class SessionState:
    """Session records behind an LRU; writes go to the state worker in order, in the background."""

    def __init__(self, kv: KeyValue | None, *, cache_size: int = CACHE_SESSIONS) -> None:
        self._kv = kv
        self._cache: OrderedDict[str, SessionRecord] = OrderedDict()
        self._cache_size = cache_size
        self._writes: dict[str, asyncio.Task[None]] = {}
        self._lazy: dict[str, SessionRecord] = {}
        self._lazy_task: asyncio.Task[None] | None = None
        # Bumped by every drop: a read that was on its way across one may return the record of
        # a session deleted meanwhile, which must not be cached back (a sub-agent would find
        # its deleted parent's turn bank instead of no memory).
        self._drops = 0

    def _cached(self, session_id: str, record: SessionRecord) -> SessionRecord:
        self._cache[session_id] = record
        self._cache.move_to_end(session_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return record

    def cached(self, session_id: str) -> SessionRecord | None:
        """The record if this process holds it (no state-worker round trip)."""
        record = self._cache.get(session_id)
        if record is not None:
            self._cache.move_to_end(session_id)
        return record

    async def get(self, session_id: str) -> SessionRecord | None:
        """The record (cached, else from the state worker); None for a session never seen.
        Raises `SiblingUnavailable` when the state worker cannot say."""
        record = self._cache.get(session_id)
        if record is not None:
            self._cache.move_to_end(session_id)
            return record
        if self._kv is None:
            return None
        drops = self._drops
        try:
            raw = await self._kv.get(SCOPE, session_id)
        except Exception as exc:
            # Unknown is not "never seen": a caller that took it for a fresh session would
            # freeze a new section and write it over the one the session really has.
            log.warning("session_state_read_failed", session_id=session_id, error=str(exc))
            raise SiblingUnavailable(f"state::get failed for session {session_id}: {exc}") from exc
        record = SessionRecord.from_json(raw)
        if record is None or drops != self._drops:
            return record
        return self._cached(session_id, record)

    def put(self, session_id: str, record: SessionRecord, *, urgent: bool = True) -> None:
        """Cache now; persist in the background, one write at a time per session, last wins.

        `urgent=False` (only a turn's bank was added) waits up to `LAZY_WRITE_S` and shares one
        write with whatever else changed meanwhile: the section frozen into a session's prompt is
        what must survive a restart at once, a turn's bank is needed by this process first."""
        self._cached(session_id, record)
        if self._kv is None:
            return
        if not urgent:
            self._lazy[session_id] = record
            if self._lazy_task is None or self._lazy_task.done():
                self._lazy_task = asyncio.create_task(self._write_lazy())
            return
        self._lazy.pop(session_id, None)
        previous = self._writes.get(session_id)
        self._writes[session_id] = asyncio.create_task(
            self._persist(session_id, record.to_json(), previous)
        )

    async def _persist(
        self, session_id: str, value: dict[str, Any], previous: asyncio.Task[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        assert self._kv is not None
        try:
            await self._kv.set(SCOPE, session_id, value)
        except Exception as exc:
            log.warning("session_state_write_failed", session_id=session_id, error=str(exc))
        finally:
            if self._writes.get(session_id) is asyncio.current_task():
                del self._writes[session_id]

    async def _write_lazy(self, delay_s: float = LAZY_WRITE_S) -> None:
        await asyncio.sleep(delay_s)  # a debounce, not a wait for work: turns come in bursts
        while self._lazy:
            session_id, record = self._lazy.popitem()
            self.put(session_id, record)

    async def drop(self, session_id: str) -> None:
        self._drops += 1
        self._lazy.pop(session_id, None)
        self._cache.pop(session_id, None)
        pending = self._writes.pop(session_id, None)
        if pending is not None:
            await asyncio.gather(pending, return_exceptions=True)
        if self._kv is not None:
            try:
                await self._kv.delete(SCOPE, session_id)
            except Exception as exc:
                log.warning("session_state_delete_failed", session_id=session_id, error=str(exc))

    async def flush(self) -> None:
        """Write what waits and wait for background writes (shutdown, tests)."""
        if self._lazy_task is not None:
            self._lazy_task.cancel()
            await asyncio.gather(self._lazy_task, return_exceptions=True)
            self._lazy_task = None
        while self._lazy:
            session_id, record = self._lazy.popitem()
            self.put(session_id, record)
        while pending := list(self._writes.values()):
            await asyncio.gather(*pending, return_exceptions=True)
