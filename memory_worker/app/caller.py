"""Who is calling: carried by every call through `catalog.call`, so access, provenance and audit
are decided in one place.

Three kinds: a **human** (the CLI on the machine, the REST service, the console — owners of their
data), an **agent** (a call made from inside a harness turn over the bus, or through MCP), and an
**internal** path of the worker itself (the hook, the extraction pass, doctor). The automatic
internal paths never touch a pinned or retired memory and never bring a deleted bank back; the
use cases enforce that from the caller, in the same step as the write.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from memory_worker.core.confidence import Confidence

__all__ = ["BUS", "SYSTEM", "Caller", "CallerKind"]


class CallerKind(StrEnum):
    HUMAN = "human"
    AGENT = "agent"
    INTERNAL = "internal"


# The door of a call that came over the engine's bus: the engine's permission manifest has
# already decided whether its agent may call the function at all.
BUS = "bus"

# Internal paths that act on their own, with no person or agent asking: the pinned and retired
# records and the deleted banks are out of their reach.
_AUTOMATIC = frozenset({"extraction", "consolidate"})
# Internal paths whose read naming no subject covers every subject of a scoped bank, as a
# person's does: consolidation keeps the whole bank (it merges within one subject only, and
# memory::supersede refuses it any other). Its claim is believed only in place of a person's.
_WHOLE_BANK = frozenset({"consolidate"})


@dataclass(frozen=True, slots=True)
class Caller:
    kind: CallerKind
    via: str  # the door: cli, rest, console, bus, mcp, hook, extraction, doctor, system, …
    worker_id: str | None = None  # the bus worker that invoked us (`_caller_worker_id`)
    session_id: str | None = None  # the harness session the call was made in
    turn_id: str | None = None
    agent: str | None = None  # the agent that ran the turn, when known
    entry_id: str | None = None  # the transcript entry a captured fact came from
    # How what this caller saves entered the store: what a person or an agent says is stated;
    # extraction reads it from a conversation (or infers it).
    confidence: Confidence = Confidence.STATED
    # An agent's call made inside a harness turn (the bus) acts for the person speaking in it:
    # `in_turn` says the speaker is known, `speaker` is who (None: nobody, general memories
    # only). In a subject-scoped bank such a call cannot touch another person's memory by id.
    in_turn: bool = False
    speaker: str | None = None
    # The situation of that turn as its hook last saw it: the recent window and the person's
    # latest message. An agent's save there is stored with them, as extraction's facts are (seed
    # 004: conscious writes flow through the same pipeline, association capture included).
    window: str | None = None
    goal: str | None = None
    # When the hook read them (ms): a save about a subject erased at or after it stores neither
    # (their words from before the erasure), as `read_at` refuses extraction's.
    situation_at: int | None = None
    # When what this caller saves was said (ms): extraction's oldest word of the turn it read.
    # A save about a subject erased at or after it is refused: the erasure wins over work queued
    # before it (`storage.erasure.ErasureStamps`). None: saved as it is said, now.
    read_at: int | None = None

    @classmethod
    def human(cls, via: str) -> Caller:
        return cls(CallerKind.HUMAN, via)

    @classmethod
    def for_agent(
        cls,
        via: str,
        *,
        worker_id: str | None = None,
        session_id: str | None = None,
        turn_id: str | None = None,
        agent: str | None = None,
    ) -> Caller:
        return cls(
            CallerKind.AGENT,
            via,
            worker_id=worker_id,
            session_id=session_id,
            turn_id=turn_id,
            agent=agent,
        )

    def speaking_for(self, speaker: str | None) -> Caller:
        """This agent's call as made inside a turn whose speaker is `speaker` (None: nobody)."""
        return dataclasses.replace(self, in_turn=True, speaker=speaker)

    def in_situation(self, window: str | None, goal: str | None, at: int | None = None) -> Caller:
        """This call as made in a turn whose window and goal are these (the hook's reading, at
        `at` ms)."""
        return dataclasses.replace(self, window=window, goal=goal, situation_at=at)

    @classmethod
    def internal(
        cls,
        via: str,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        agent: str | None = None,
        entry_id: str | None = None,
        confidence: Confidence = Confidence.STATED,
        read_at: int | None = None,
    ) -> Caller:
        return cls(
            CallerKind.INTERNAL,
            via,
            session_id=session_id,
            turn_id=turn_id,
            agent=agent,
            entry_id=entry_id,
            confidence=confidence,
            read_at=read_at,
        )

    @property
    def automatic(self) -> bool:
        """An internal path acting on its own (extraction, consolidation), not on someone's word."""
        return self.kind is CallerKind.INTERNAL and self.via in _AUTOMATIC

    @property
    def reads_whole_bank(self) -> bool:
        """A read naming no subject covers every subject: a person's (the owner's view of the
        bank) and consolidation's; an agent's or another internal path's sees general memories."""
        if self.kind is CallerKind.HUMAN:
            return True
        return self.kind is CallerKind.INTERNAL and self.via in _WHOLE_BANK

    def describe(self) -> str:
        """For logs and audit lines: `agent via bus (worker w1, session s1)`."""
        details = [
            f"{label} {value}"
            for label, value in (
                ("worker", self.worker_id),
                ("session", self.session_id),
                ("turn", self.turn_id),
                ("agent", self.agent),
            )
            if value
        ]
        return f"{self.kind} via {self.via}" + (f" ({', '.join(details)})" if details else "")


# The worker itself, for calls made by code rather than through an adapter (tests, tools).
SYSTEM = Caller.internal("system")
