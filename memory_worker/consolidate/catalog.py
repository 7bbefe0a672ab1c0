"""memory-consolidate's functions: ids, descriptions and wire models, for every surface (bus,
REST through the http worker, the CLI, the README table)."""

from __future__ import annotations

from dataclasses import dataclass

from memory_worker.consolidate import wire

__all__ = [
    "FUNCTIONS",
    "HTTP",
    "ON_CONFIG_CHANGE",
    "ON_ITEM_CHANGED",
    "ON_TICK",
    "RUN",
    "STATUS",
    "ConsolidateFunction",
]

RUN = "memory-consolidate::run"
STATUS = "memory-consolidate::status"
ON_TICK = "memory-consolidate::on-tick"
ON_CONFIG_CHANGE = "memory-consolidate::on-config-change"
ON_ITEM_CHANGED = "memory-consolidate::on-item-changed"
HTTP = "memory-consolidate::http"


@dataclass(frozen=True, slots=True)
class ConsolidateFunction:
    id: str
    description: str
    request: type[wire.Request]
    response: type[wire.Response]

    @property
    def http_path(self) -> str:
        return self.id.replace("::", "/")


FUNCTIONS: tuple[ConsolidateFunction, ...] = (
    ConsolidateFunction(
        RUN,
        "Run one consolidation pass now: exact duplicates merge into their survivor through "
        "memory::supersede (reinforce, reason, expected revision), reorders and guarded "
        "near-duplicates are reported for a person; pinned memories are never retired. "
        "`dry_run` plans without writing. Returns the report of every bank.",
        wire.RunRequest,
        wire.PassReport,
    ),
    ConsolidateFunction(
        STATUS,
        "The consolidation schedule: enabled, interval, the last complete pass, whether one is "
        "due, and the last report of each bank (groups found, merged, report-only, skipped "
        "pinned, capped, errors, duration).",
        wire.StatusRequest,
        wire.StatusResponse,
    ),
)
