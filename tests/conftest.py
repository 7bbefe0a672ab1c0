from __future__ import annotations

import os
import time
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


@pytest.fixture(autouse=True, scope="session")
def _utc() -> Iterator[None]:
    """The suite's dates are UTC whatever the machine's zone: prompts show local time
    (`core.models.local_datetime`), and the expected texts are written for UTC. Child processes
    inherit it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture(name="local_zone")
def _local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's zone three hours west of UTC, as São Paulo's (a POSIX rule, so no tz
    database is needed), for one test."""
    monkeypatch.setenv("TZ", "<-03>3")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


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
