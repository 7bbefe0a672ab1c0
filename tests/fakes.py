"""Test doubles for the ports: a recording emitter and a clock that only moves when told."""

from __future__ import annotations

from typing import Any


class RecordingEmitter:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        self.events.append((trigger_type, payload))

    def of(self, trigger_type: str) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.events if kind == trigger_type]

    def clear(self) -> None:
        self.events.clear()


class FixedClock:
    """Epoch ms; starts at 2026-11-01T00:00:00Z and advances only through `advance()`."""

    START_MS = 1_793_491_200_000

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int = 1) -> int:
        self.now_ms += ms
        return self.now_ms

    def advance_days(self, days: float) -> int:
        return self.advance(int(days * 86_400_000))
