"""Access levels (C22): how much of a bank an agent may consciously use, decided at the call entry.

Seed 004's `conscious_access` per bank: `none` (memory is involuntary — the hook injects, the
extraction pass writes, the agent gets no memory tools), `read` (the agent may look: recall, get,
list, tags, preview — every call that changes nothing), `read_write` (it may also save, update,
delete and pin — never more: the human-owned functions, trashing or configuring a bank, erasing a
subject, rules, imports, compaction and reload, stay a person's at every level). It limits AGENT
callers only: people (CLI, console, REST as the owner) own their data, and the worker's own paths
(the hook, extraction, consolidation) are the involuntary memory the setting leaves in place.
`catalog.respond` asks here before any use case runs, so a refused call is refused before it can
change anything.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from memory_worker.app.caller import BUS, Caller, CallerKind
from memory_worker.app.wire import Request
from memory_worker.core.config import Settings
from memory_worker.core.errors import Forbidden
from memory_worker.core.names import check_name

__all__ = ["AccessLevel", "LevelSource", "addressed_bank", "check_access", "required_level"]


class AccessLevel(StrEnum):
    NONE = "none"
    READ = "read"
    READ_WRITE = "read_write"


_RANK = {AccessLevel.NONE: 0, AccessLevel.READ: 1, AccessLevel.READ_WRITE: 2}


class LevelSource(Protocol):
    """What the entry needs of the service: the bank a call addresses, and its level."""

    settings: Settings

    def access_level(self, bank: str) -> AccessLevel: ...


def addressed_bank(function_id: str, request: Request) -> tuple[bool, str | None]:
    """Whether the call addresses one bank, and the name it gives (None: the default one). The
    bank functions name theirs `name`; every other bank-scoped request has `bank`."""
    fields = type(request).model_fields
    if function_id.startswith("memory::bank::") and "name" in fields:
        return True, getattr(request, "name", None)
    if "bank" in fields:
        return True, getattr(request, "bank", None)
    return False, None


def required_level(read_only: bool) -> AccessLevel:
    """What a call needs: looking needs `read`, anything that may change memory `read_write`."""
    return AccessLevel.READ if read_only else AccessLevel.READ_WRITE


def check_access(
    source: LevelSource,
    function_id: str,
    request: Request,
    read_only: bool,
    caller: Caller,
    *,
    human_only: bool = False,
) -> None:
    """Raise `forbidden` when an agent's call needs more than its bank grants, or is one of the
    functions that are a person's whatever the level (`human_only`)."""
    if caller.kind is not CallerKind.AGENT:
        return
    if human_only and caller.via != BUS:
        # Our own doors (REST with an agent's claim, MCP) have no permission manifest: the
        # catalog's policy is the only one, so a read_write agent must not trash or reconfigure a
        # shared bank through them. On the bus the engine's manifest decides (its shipped
        # default denies these; an operator who grants one to an agent means it).
        raise Forbidden(
            f"{function_id} is for people only (the CLI, the console, REST as the owner); "
            "agents are refused it at every conscious_access level"
        )
    scoped, requested = addressed_bank(function_id, request)
    if not scoped:
        return
    need = required_level(read_only)
    bank = check_name(requested or source.settings.default_bank, "bank")
    level = source.access_level(bank)
    if _RANK[level] >= _RANK[need]:
        return
    if level is AccessLevel.NONE:
        raise Forbidden(
            f"bank {bank} gives agents no memory tools (conscious_access: none); {function_id} "
            "is refused — its memory works through the hook and extraction only"
        )
    raise Forbidden(
        f"bank {bank} lets agents read only (conscious_access: read); {function_id} changes "
        "memory and is refused"
    )
