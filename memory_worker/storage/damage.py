"""What a bank found broken on disk (`Damage`), and changes whose directory sync failed
(`DurabilityWarnings`): both reported by doctor and in the logs, never fatal."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from memory_worker.core.errors import StorageError
from memory_worker.storage.logger import get_logger

__all__ = ["Damage", "DurabilityWarning", "DurabilityWarnings"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Damage:
    """Something found broken on disk and skipped: reported by doctor and in the logs. `kept`:
    not broken after all but changed by a person (a log line edited by hand), loaded as it reads
    and only mentioned."""

    file: str
    reason: str
    line: int | None = None
    kept: bool = False

    def describe(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class DurabilityWarning:
    """A change that landed (RAM and disk have it) whose directory sync failed: a power loss
    before the file system writes that directory out could still undo it."""

    at_ms: int
    bank: str
    change: str
    error: str


class DurabilityWarnings:
    """The store's recent durability warnings, for doctor: the last `LIMIT`, and how many in all.
    Kept in RAM only: after a restart the disk is what it is, and is served as such."""

    LIMIT = 20

    def __init__(self) -> None:
        self._recent: deque[DurabilityWarning] = deque(maxlen=self.LIMIT)
        self.total = 0

    def note(self, bank: str, change: str, error: StorageError) -> None:
        self._recent.append(DurabilityWarning(int(time.time() * 1000), bank, change, error.message))
        self.total += 1
        log.warning("durability_unknown", bank=bank, change=change, error=str(error))

    def recent(self) -> list[DurabilityWarning]:
        return list(self._recent)

    def take(self, bank: str) -> list[DurabilityWarning]:
        """Remove and return the warnings about `bank` (doctor's scratch bank reports its own)."""
        taken = [w for w in self._recent if w.bank == bank]
        if taken:
            self._recent = deque((w for w in self._recent if w.bank != bank), maxlen=self.LIMIT)
            self.total -= len(taken)
        return taken
