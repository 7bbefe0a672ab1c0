"""memory-worker: durable cross-session memory for AI agents, as plain files.

The public surface is the service and its models; adapters (CLI, bus) live in their own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Where each public name lives. Imported on first use (PEP 562), so that `import memory_worker.x`
# — every command, a coding agent's hook run once per prompt — does not pay for the whole service.
_HOME = {
    "MemoryService": "memory_worker.app.service",
    "Settings": "memory_worker.core.config",
    "BankNotFound": "memory_worker.core.errors",
    "Conflict": "memory_worker.core.errors",
    "InvalidInput": "memory_worker.core.errors",
    "MemoryNotFound": "memory_worker.core.errors",
    "SiblingUnavailable": "memory_worker.core.errors",
    "StorageError": "memory_worker.core.errors",
    "WorkerError": "memory_worker.core.errors",
    "BankInfo": "memory_worker.core.models",
    "Confidence": "memory_worker.core.models",
    "Memory": "memory_worker.core.models",
    "Provenance": "memory_worker.core.models",
    "Rule": "memory_worker.core.models",
    "fingerprint": "memory_worker.core.text",
    "Store": "memory_worker.storage.store",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'memory_worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


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
