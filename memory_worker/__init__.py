"""memory-worker: durable cross-session memory for AI agents, as plain files.

The public surface is the service and its models; adapters (CLI, bus) live in their own modules.
"""

from __future__ import annotations

from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    SiblingUnavailable,
    StorageError,
    WorkerError,
)
from memory_worker.core.models import BankInfo, Confidence, Memory, Provenance, Rule
from memory_worker.core.text import fingerprint
from memory_worker.storage.store import Store

__all__ = [
    "BankInfo",
    "BankNotFound",
    "Confidence",
    "Conflict",
    "InvalidInput",
    "Memory",
    "MemoryNotFound",
    "MemoryService",
    "Provenance",
    "Rule",
    "Settings",
    "SiblingUnavailable",
    "StorageError",
    "Store",
    "WorkerError",
    "fingerprint",
]

__version__ = "0.1.0"
