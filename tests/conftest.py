from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage import logger
from memory_worker.storage.store import Store

from .fakes import FixedClock, RecordingEmitter

HOLDER = {"pid": os.getpid(), "kind": "test", "command": "pytest"}


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL"):
        monkeypatch.delenv(var, raising=False)
    structlog.reset_defaults()
    logger.reset()  # what a `configure_logging` of an earlier test chose goes with it
    yield
    structlog.reset_defaults()
    logger.reset()


@pytest.fixture(name="data_dir")
def _data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(name="clock")
def _clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(name="emitter")
def _emitter() -> RecordingEmitter:
    return RecordingEmitter()


@pytest.fixture(name="store")
async def _store(data_dir: Path) -> AsyncIterator[Store]:
    store = Store.open(data_dir, holder=HOLDER)
    yield store
    await store.close()


@pytest.fixture(name="service")
def _service(store: Store, clock: FixedClock, emitter: RecordingEmitter) -> MemoryService:
    return MemoryService(store, Settings(), emitter=emitter, clock=clock)
