"""What the use cases need from outside, as Protocols: adapters implement them, tests fake them."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BANK_CHANGED",
    "ITEM_CHANGED",
    "Clock",
    "Completer",
    "Deliveries",
    "Embedder",
    "Emitter",
    "HealthProbe",
    "JobQueue",
    "KeyValue",
    "NullEmitter",
    "QueryEmbedder",
    "SessionDirectory",
    "TranscriptSource",
    "system_clock",
]

ITEM_CHANGED = "memory::item-changed"
BANK_CHANGED = "memory::bank-changed"


class Emitter(Protocol):
    """Fire-and-forget change events; `trigger_type` is `ITEM_CHANGED` or `BANK_CHANGED`."""

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None: ...


class Embedder(Protocol):
    """Sentence embeddings for the semantic recall arm (`router::embed` on the bus, or a local
    ONNX model). `model` names what produced a vector, so a model change triggers re-embedding."""

    @property
    def model(self) -> str: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raises `SiblingUnavailable` when it cannot answer."""
        ...


@runtime_checkable
class QueryEmbedder(Protocol):
    """An embedder whose model embeds a search query differently from a memory (e5's `query: ` and
    `passage: ` prefixes), or that lets a query go before a backfill's memory texts (the local
    engines). Without `embed_query`, a query is embedded as `embed([query])[0]`."""

    async def embed_query(self, text: str) -> list[float]:
        """The query's vector. Raises `SiblingUnavailable` when it cannot answer."""
        ...


class SessionDirectory(Protocol):
    """The session-manager, read for bank selection (`session::get`)."""

    # True while the last lookup found no session-manager at all: an unknown session then says
    # nothing about whether it exists (a sub-agent's parent is not "gone", it runs on the default).
    absent: bool

    async def get(self, session_id: str) -> dict[str, Any] | None:
        """The session's meta (`metadata`, parent link), or None for an unknown session. Raises
        `SiblingUnavailable` when the lookup itself failed (then nothing new may be injected)."""
        ...


class TranscriptSource(Protocol):
    """A session's messages (`session::messages`), oldest first, one page at a time."""

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Items `{entry_id, message}` and the next page's cursor (None on the last page)."""
        ...


class Completer(Protocol):
    """One LLM completion (`router::complete`): the model and its timeout are the adapter's."""

    async def complete(self, system_prompt: str, user_text: str) -> str:
        """The reply's text. Raises `SiblingUnavailable` when there is no answer."""
        ...


class KeyValue(Protocol):
    """Small durable per-key state (the state worker): what each session was told survives a
    worker restart."""

    async def get(self, scope: str, key: str) -> Any: ...

    async def set(self, scope: str, key: str, value: Any) -> None: ...

    async def delete(self, scope: str, key: str) -> None: ...


class Deliveries(Protocol):
    """Which lesson revisions each conversation was given (`lesson key → step`), so each is given
    once: the state worker in engine mode, a small file per conversation under the data dir
    otherwise. Raises `SiblingUnavailable` (or `StorageError`) when it cannot say or keep it."""

    async def delivered(self, conversation: str) -> dict[str, str]: ...

    async def record(self, conversation: str, delivered: Mapping[str, str]) -> None:
        """Replace the conversation's whole mapping with `delivered`."""
        ...

    async def forget(self, conversation: str) -> None: ...


class JobQueue(Protocol):
    """Durable background jobs (the queue worker). `receipt` dedupes a redelivered enqueue."""

    async def enqueue(self, function_id: str, data: dict[str, Any], receipt: str) -> bool:
        """True when queued; False when no queue exists (the caller runs the job inline)."""
        ...


class HealthProbe(Protocol):
    """Advisory health of what surrounds the worker (sibling reachability), for `memory::doctor`.
    Each entry: `(name, ok, detail)`."""

    async def __call__(self) -> list[tuple[str, bool, str]]: ...


class Clock(Protocol):
    def __call__(self) -> int:
        """Milliseconds since the epoch."""
        ...


class NullEmitter:
    """For embedded use (the CLI): nobody is listening."""

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        return None


def system_clock() -> int:
    return time.time_ns() // 1_000_000
