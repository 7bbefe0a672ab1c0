"""Hot reload: apply a new settings snapshot to a running service.

Every field but `data_dir` takes effect on the next call (the service reads its settings per call).
A `data_dir` change opens the new store first and swaps only when that succeeded, so a bad value
keeps the last good store AND the last good settings (the caller reports the error). Reloads are
serialized: two changes arriving together apply in order, never interleaved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import structlog

from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

__all__ = ["Applied", "Reconfigurer"]

log = structlog.get_logger(__name__)


class Applied(StrEnum):
    UNCHANGED = "unchanged"
    UPDATED = "updated"  # settings swapped, same store
    REOPENED = "reopened"  # new data dir opened and swapped in


class Reconfigurer:
    def __init__(
        self,
        service: MemoryService,
        data_dir_for: Callable[[Settings], Path],
        open_store: Callable[[Path], Store],
    ) -> None:
        """`data_dir_for`: where a settings snapshot puts the data (a `--data-dir` flag wins over
        the configuration); `open_store`: blocking open (probe, lock, replay), run in a thread."""
        self._service = service
        self._data_dir_for = data_dir_for
        self._open_store = open_store
        self._lock = asyncio.Lock()

    async def apply(self, settings: Settings) -> Applied:
        """Raises (`StorageError`, `Conflict`) when the new data dir cannot be opened; then
        nothing changed."""
        async with self._lock:
            service = self._service
            if settings == service.settings:
                return Applied.UNCHANGED
            target = self._data_dir_for(settings).resolve()
            if target == service.store.root:
                service.settings = settings
                log.info("settings_reloaded", data_dir=str(target))
                return Applied.UPDATED
            store = await asyncio.to_thread(self._open_store, target)
            old = service.store
            service.store, service.settings = store, settings
            await service.close()  # background embedding of the old banks
            await old.close()
            service.backfill_embeddings()
            log.info("store_reopened", old=str(old.root), new=str(target))
            return Applied.REOPENED
