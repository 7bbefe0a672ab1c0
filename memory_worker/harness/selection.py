"""Bank selection: one resolver for the hook, extraction and agent calls (SPEC C12).

The speaker (`subject`, for subject scoping) is read the same way: turn metadata `memory_subject` →
session metadata `memory_subject` → nobody.

Order: the turn's metadata `memory_bank` → the session's metadata `memory_bank` → for a sub-agent,
the parent turn's bank, else the parent session's (walked up) → `default_bank`. An invalid name, a
deleted bank other than the default, or a parent session that no longer exists means NO memory —
never another bank. A failed session lookup is its own outcome: the hook keeps what the session
already has and extraction retries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from memory_worker.app.ports import SessionDirectory
from memory_worker.core.errors import BankNotFound, InvalidInput, SiblingUnavailable
from memory_worker.core.names import check_name
from memory_worker.harness.sessions import SessionState
from memory_worker.storage.store import Store

__all__ = ["MAX_PARENT_DEPTH", "BankResolver", "Outcome", "Parent", "Resolution", "parent_of"]

MAX_PARENT_DEPTH = 8  # sub-agents of sub-agents; a cycle in parent links ends here


class Outcome(StrEnum):
    BANK = "bank"  # memory on `bank`
    NO_MEMORY = "no_memory"  # invalid or deleted bank, or a parent that no longer exists
    LOOKUP_FAILED = "lookup_failed"  # the session-manager did not answer


@dataclass(frozen=True, slots=True)
class Resolution:
    outcome: Outcome
    bank: str | None = None
    source: str = ""  # turn | session | parent-turn | parent-session | default (or why not)
    exists: bool = False  # (what a missing bank is told is `service.injection`'s to decide)

    @property
    def has_memory(self) -> bool:
        return self.outcome is Outcome.BANK


@dataclass(frozen=True, slots=True)
class Parent:
    """A sub-agent's live link to the turn that spawned it."""

    session_id: str
    turn_id: str | None = None


def parent_of(raw: object) -> Parent | None:
    """The parent link of a hook envelope, turn payload or session meta (`parent: {session_id,
    turn_id}`), leniently: harness builds differ in what they carry (the parent's session id
    alone, as a string, is a link too: read as none, a sub-agent's turn was extracted)."""
    if isinstance(raw, str) and raw.strip():
        return Parent(raw.strip(), None)
    if not isinstance(raw, dict):
        return None
    session_id = raw.get("session_id") or raw.get("parent_session_id")
    turn_id = raw.get("turn_id") or raw.get("parent_turn_id")
    if not isinstance(session_id, str) or not session_id:
        return None
    return Parent(session_id, turn_id if isinstance(turn_id, str) and turn_id else None)


def _named_bank(metadata: object) -> str | None:
    """The bank `metadata` chooses; None when it chooses none (absent, null or blank: the next
    source decides). A value that is not a string is still a choice, never a reason to fall
    through to another bank: a whole number is the bank of that name (`memory_bank=2024` as
    `iii trigger` decodes it), anything else a name no bank has (no memory)."""
    if not isinstance(metadata, dict):
        return None
    bank = metadata.get("memory_bank")
    if bank is None or (isinstance(bank, str) and not bank.strip()):
        return None
    if isinstance(bank, str):
        return bank.strip()
    if isinstance(bank, int) and not isinstance(bank, bool):
        return str(bank)
    return f"<{type(bank).__name__}>"  # fails the name check: no memory


def _named_subject(metadata: object) -> str | None:
    if isinstance(metadata, dict):
        subject = metadata.get("memory_subject")
        # A user id is often a number: it names that person, as `subject=12345` does at every
        # door (read as nobody, their turns' memories became general, everyone's to see).
        if isinstance(subject, int) and not isinstance(subject, bool):
            return str(subject)
        if isinstance(subject, str) and subject.strip():
            return subject.strip()
    return None


class BankResolver:
    """Resolves the bank of a session (and turn). `store` and `default_bank` are read at each call:
    a configuration reload may swap them."""

    def __init__(
        self,
        sessions: SessionDirectory | None,
        state: SessionState,
        store: Callable[[], Store],
        default_bank: Callable[[], str],
    ) -> None:
        self._sessions = sessions
        self._state = state
        self._store = store
        self._default_bank = default_bank

    async def resolve(
        self, session_id: str, turn_metadata: object = None, parent: Parent | None = None
    ) -> Resolution:
        chosen = self.named(turn_metadata)
        if chosen is not None:
            return chosen
        return await self._from_session(session_id, parent, depth=0)

    def named(self, turn_metadata: object) -> Resolution | None:
        """What the turn's own metadata chooses, checked (no lookup); None when it names none."""
        named = _named_bank(turn_metadata)
        return None if named is None else self._check(named, "turn")

    async def subject(
        self, session_id: str, turn_metadata: object = None, *, strict: bool = False
    ) -> str | None:
        """Who is speaking in a turn: the turn's metadata `memory_subject` → the session's →
        nobody. A failed session lookup is nobody too: with subject scoping that means general
        memories only, never someone else's — for a read. `strict` (a write about the speaker:
        extraction) raises it instead: nobody's facts are general, everyone's to see."""
        named = _named_subject(turn_metadata)
        if named is not None or self._sessions is None or not session_id:
            return named
        try:
            meta = await self._sessions.get(session_id)
        except SiblingUnavailable:
            if strict:
                raise
            return None
        return _named_subject(meta.get("metadata")) if isinstance(meta, dict) else None

    def recorded(self, bank: str) -> Resolution:
        """A turn's bank as recorded at its first step ("" = it ran without memory): later
        steps keep it without asking the session-manager again, unless it was deleted since."""
        if not bank:
            return Resolution(Outcome.NO_MEMORY, source="the turn runs without memory")
        return self._check(bank, "turn-record")

    async def for_call(self, context: object) -> str | None:
        """The bank of a `memory::*` call that names none: inside a turn (the call's metadata
        carries `session_id`, maybe `turn_id`) it is that turn's bank; outside one, None (the
        service's default). A turn without memory refuses rather than writing elsewhere."""
        if not isinstance(context, dict):
            return None
        session_id, turn_id = context.get("session_id"), context.get("turn_id")
        if not isinstance(session_id, str) or not session_id:
            return None
        if isinstance(turn_id, str) and turn_id:
            try:
                record = await self._state.get(session_id)
            except SiblingUnavailable as exc:
                # The turn may run with a bank of its own (its metadata's): refused, never
                # written into the session's or the default bank instead — unless the call
                # carries that choice itself, which is what its first step resolved first.
                if self.named(context) is None:
                    raise SiblingUnavailable(
                        f"cannot tell the bank of turn {turn_id}: {exc}"
                    ) from exc
                record = None
            told = record.turn_bank(turn_id) if record is not None else None
            if told is not None:
                # As the turn's own later steps see it: a bank deleted since is no memory, and
                # an agent's write must not bring it back.
                recorded = self.recorded(told)
                if not recorded.has_memory:
                    raise BankNotFound(f"turn {turn_id} runs without memory: {recorded.source}")
                return recorded.bank
        resolution = await self.resolve(session_id, context, parent_of(context.get("parent")))
        if resolution.outcome is Outcome.LOOKUP_FAILED:
            raise SiblingUnavailable(f"cannot tell this session's bank: {resolution.source}")
        if not resolution.has_memory:
            raise BankNotFound(f"this session runs without memory: {resolution.source}")
        return resolution.bank

    async def _from_session(self, session_id: str, parent: Parent | None, depth: int) -> Resolution:
        meta: dict[str, Any] | None = None
        if self._sessions is not None and session_id:
            try:
                meta = await self._sessions.get(session_id)
            except SiblingUnavailable as exc:
                return Resolution(Outcome.LOOKUP_FAILED, source=str(exc))
        if isinstance(meta, dict):
            named = _named_bank(meta.get("metadata"))
            if named is not None:
                return self._check(named, "session" if depth == 0 else "parent-session")
            parent = parent or parent_of(meta.get("parent"))
        if parent is not None:
            return await self._from_parent(parent, depth + 1)
        if depth > 0 and meta is None and self._sessions is not None and not self._sessions.absent:
            # Without a session-manager no session is known: the parent ran on the default bank.
            return Resolution(Outcome.NO_MEMORY, source="parent session no longer exists")
        return self._check(self._default_bank(), "default" if depth == 0 else "parent-default")

    async def _from_parent(self, parent: Parent, depth: int) -> Resolution:
        if depth > MAX_PARENT_DEPTH:
            return Resolution(Outcome.NO_MEMORY, source="parent chain too deep")
        if parent.turn_id is not None:
            try:
                record = await self._state.get(parent.session_id)
            except SiblingUnavailable as exc:
                # The parent turn's bank is unknown, not absent: the parent session's bank may
                # be another one (the turn chose its own), so nothing rather than a guess.
                return Resolution(Outcome.LOOKUP_FAILED, source=str(exc))
            told = record.turn_bank(parent.turn_id) if record is not None else None
            if told == "":
                return Resolution(Outcome.NO_MEMORY, source="the parent turn ran without memory")
            if told is not None:
                return self._check(told, "parent-turn")
        return await self._from_session(parent.session_id, None, depth)

    def _check(self, name: str, source: str) -> Resolution:
        try:
            check_name(name, "bank")
        except InvalidInput:
            return Resolution(Outcome.NO_MEMORY, source=f"invalid bank name from {source}")
        store = self._store()
        missing = not store.is_pending(name) and store.find(name) is None  # no replay here
        if missing and name != self._default_bank() and store.was_deleted(name):
            return Resolution(Outcome.NO_MEMORY, bank=name, source=f"bank {name} was deleted")
        # A bank that does not exist yet is still this session's: what it gets then is
        # `service.injection`'s to say (the one function `memory::preview` shows too).
        return Resolution(Outcome.BANK, bank=name, source=source, exists=not missing)
