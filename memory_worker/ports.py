"""What the use cases need from outside, as Protocols: adapters implement them, tests fake them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "BANK_CHANGED",
    "ITEM_CHANGED",
    "Clock",
    "Embedder",
    "Emitter",
    "NullEmitter",
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
