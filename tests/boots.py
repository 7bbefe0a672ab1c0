"""One boot of a data dir in its own event loop, as a process start would: open the store,
run `work` against a service on it, close both (closing writes the derived files a boot reads)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

from .conftest import HOLDER

NOW_MS = 1_760_000_000_000
# What both snapshot test files save: a few people's facts, sharing words across memories.
TEXTS = [
    "Ana moved to Lisbon in 2021 and works at a bakery",
    "Rui plays chess every Tuesday with his brother",
    "The user prefers green tea over coffee",
    "Ana's bakery sells pastel de nata on weekends",
    "Rui's brother is called Tiago and lives in Porto",
    "The user is learning Portuguese on weekday evenings",
]


def session(
    data_dir: Path, work: Callable[[MemoryService], Awaitable[Any]], now_ms: int = NOW_MS
) -> Any:
    async def run() -> Any:
        store = Store.open(data_dir, holder=HOLDER)
        # A fixed clock: recency moves every score a little as real time passes between boots.
        service = MemoryService(store, Settings(), clock=lambda: now_ms)
        try:
            return await work(service)
        finally:
            await service.close()
            await store.close()

    return asyncio.run(run())
