"""memory-consolidate: the sibling that keeps banks clean without ever losing a fact (SPEC C18).

It reaches memories only through the memory worker's public functions (a `ports.MemoryClient`),
so it can be installed, stopped or removed without touching stored memory. Pure planning
(`text`, `plan`, `judge`), one pass (`runner`), the schedule (`schedule`); the transports (bus,
REST, in process) are adapters. It imports `memory_worker.core` and itself, nothing else.
"""

from __future__ import annotations

from memory_worker.consolidate.config import CONFIG_ID, ConsolidateSettings, parse_settings
from memory_worker.consolidate.runner import Consolidator
from memory_worker.consolidate.schedule import Scheduler

__all__ = ["CONFIG_ID", "ConsolidateSettings", "Consolidator", "Scheduler", "parse_settings"]
