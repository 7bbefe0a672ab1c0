"""`MemoryService`: one async method per public function over a `Store`; it knows no bus.

The use cases live by concern in their own modules (banks, memories, recall, rules, doctor,
imports, embedding, lessons, transfer) and share one state (`ServiceBase`); this class puts
them together.
Every write path validates and redacts the whole request before touching anything, decides with a
pure transition, commits through `Bank.commit()`, and only then emits its change event. Reads of
the default bank before its first write see an empty bank: it materializes on first use.
"""

from __future__ import annotations

from memory_worker.app.banks import BankUseCases
from memory_worker.app.doctor import DoctorUseCases
from memory_worker.app.imports import ImportReport, ImportUseCases
from memory_worker.app.lessons import LessonUseCases
from memory_worker.app.memories import MemoryUseCases
from memory_worker.app.recall import Injection, RecallUseCases
from memory_worker.app.rules import RuleUseCases
from memory_worker.app.transfer import TransferUseCases

__all__ = ["ImportReport", "Injection", "MemoryService"]


class MemoryService(
    TransferUseCases,  # first: it builds on the bank and import use cases below
    BankUseCases,
    MemoryUseCases,
    RecallUseCases,
    RuleUseCases,
    DoctorUseCases,
    ImportUseCases,
    LessonUseCases,
):
    """Every use case of the worker over one store (see the modules it is made of)."""
