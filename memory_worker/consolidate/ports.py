"""What memory-consolidate needs from outside, as Protocols; the transports live in `adapters`.

`MemoryClient` is the ONLY way this package reaches memories: the memory worker's public functions
(`memory::bank::list`, `list`, `recall`, `supersede`, `save`, `rule::list`, `rule::set`), over the
bus, REST or in process. Errors arrive as the memory worker's own (`conflict: …`): `error_from()`
turns a `code: message` text back into the matching class, so every transport reports alike.
"""

from __future__ import annotations

from typing import Any, Protocol

from memory_worker.core.errors import (
    ERROR_CLASSES,
    SiblingUnavailable,
    WorkerError,
)

__all__ = ["Completer", "MemoryClient", "StateStore", "error_from"]


class MemoryClient(Protocol):
    async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """One memory function; raises `WorkerError` (by code), `SiblingUnavailable` when the
        memory worker cannot be reached."""
        ...


class Completer(Protocol):
    """`router::complete` for the LLM tier."""

    async def complete(
        self, system_prompt: str, user_text: str, *, model: str, timeout_ms: int
    ) -> str:
        """The reply's text; raises `SiblingUnavailable` on any failure."""
        ...


class StateStore(Protocol):
    """Where the checkpoint and the last reports live (the state worker, or a local file)."""

    async def get(self, scope: str, key: str) -> Any: ...

    async def set(self, scope: str, key: str, value: Any) -> None: ...


def error_from(text: str, *, fallback: type[WorkerError] = SiblingUnavailable) -> WorkerError:
    """`"conflict: memory fp… is pinned"` → `Conflict("memory fp… is pinned")`; text without a
    known code becomes `fallback` with the whole text."""
    code, sep, message = text.partition(": ")
    cls = ERROR_CLASSES.get(code.strip()) if sep else None
    if cls is None:
        return fallback(text)
    return cls(message)
