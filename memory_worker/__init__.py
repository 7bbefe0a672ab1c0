"""memory-worker: durable cross-session memory for AI agents, as plain files.

The public surface is the service and its models; adapters (CLI, bus) live in their own modules.
"""

from __future__ import annotations

from .config import Settings
from .errors import (
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    SiblingUnavailable,
    StorageError,
    WorkerError,
)
from .models import BankInfo, Confidence, Memory, Provenance, Rule
from .service import MemoryService
from .store import Store
from .text import fingerprint

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
