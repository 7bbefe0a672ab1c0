"""Test doubles for the ports: a recording emitter and a clock that only moves when told."""

from __future__ import annotations

from typing import Any, ClassVar


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


class FakeEmbedder:
    """Deterministic bag-of-concepts vectors: words map to concepts (so listed synonyms meet),
    each concept to a fixed axis. Good enough to tell the semantic arm from the lexical one."""

    CONCEPTS: ClassVar[dict[str, str]] = {
        "publish": "write", "publishes": "write", "articles": "write", "blog": "write",
        "posts": "write", "writes": "write", "essays": "write",
        "dog": "pet", "puppy": "pet", "pet": "pet", "pipoca": "pet",
        "job": "work", "employer": "work", "works": "work", "company": "work",
    }  # fmt: skip
    DIM = 32

    def __init__(self, model: str = "fake-embedder-1", fail: bool = False) -> None:
        self._model = model
        self.fail = fail
        self.calls: list[list[str]] = []

    @property
    def model(self) -> str:
        return self._model

    def vector(self, text: str) -> list[float]:
        import zlib

        out = [0.0] * self.DIM
        for word in text.lower().replace(".", " ").replace("?", " ").split():
            concept = self.CONCEPTS.get(word, word)
            out[zlib.crc32(concept.encode()) % self.DIM] += 1.0
        norm = sum(v * v for v in out) ** 0.5 or 1.0
        return [v / norm for v in out]

    async def embed(self, texts: Any) -> list[list[float]]:
        from memory_worker.core.errors import SiblingUnavailable

        self.calls.append(list(texts))
        if self.fail:
            raise SiblingUnavailable("router::embed: no embed-capable provider")
        return [self.vector(text) for text in texts]


class FakeKeyValue:
    """The state worker port (`ports.KeyValue`) in a dict; `fail` makes every call raise as an
    unreachable state worker does."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], Any] = {}
        self.fail = False
        self.sets = 0  # writes made

    def _check(self) -> None:
        if self.fail:
            from memory_worker.core.errors import SiblingUnavailable

            raise SiblingUnavailable("state::get failed (state worker down)")

    async def get(self, scope: str, key: str) -> Any:
        self._check()
        return self.data.get((scope, key))

    async def set(self, scope: str, key: str, value: Any) -> None:
        self._check()
        self.sets += 1
        self.data[(scope, key)] = value

    async def delete(self, scope: str, key: str) -> None:
        self.data.pop((scope, key), None)
