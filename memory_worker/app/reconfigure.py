"""Hot reload: apply a new settings snapshot to a running service.

Every field but `data_dir` takes effect on the next call (the service reads its settings per call).
A `data_dir` change opens the new store first and swaps only when that succeeded, so a bad value
keeps the last good store AND the last good settings (the caller reports the error). A change of
`embedding_model` or `embeddings_enabled` loads the embedder it asks for (when the adapter builds
one: a local model) and re-embeds in the background. Reloads are serialized: two changes arriving
together apply in order, never interleaved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from memory_worker.app.ports import Embedder
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.logger import get_logger
from memory_worker.storage.store import Store

__all__ = ["Applied", "Reconfigurer"]

log = get_logger(__name__)


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
        embedder_for: Callable[[Settings], Embedder | None] | None = None,
    ) -> None:
        """`data_dir_for`: where a settings snapshot puts the data (a `--data-dir` flag wins over
        the configuration); `open_store`: blocking open (probe, lock, replay), run in a thread;
        `embedder_for`: blocking load of the embedder a snapshot asks for, run in a thread
        (None: the embedder follows the settings by itself, as `router::embed` does)."""
        self._service = service
        self._data_dir_for = data_dir_for
        self._open_store = open_store
        self._embedder_for = embedder_for
        self._lock = asyncio.Lock()

    async def apply(self, settings: Settings) -> Applied:
        """Raises (`StorageError`, `Conflict`) when the new data dir cannot be opened; then
        nothing changed."""
        async with self._lock:
            service = self._service
            previous = service.settings
            if settings == previous:
                return Applied.UNCHANGED
            target = self._data_dir_for(settings).resolve()
            if target == service.store.root:
                service.settings = settings
                log.info("settings_reloaded", data_dir=str(target))
                applied = Applied.UPDATED
            else:
                store = await asyncio.to_thread(self._open_store, target)
                old = service.store
                service.store, service.settings = store, settings
                await service.close()  # background embedding of the old banks
                try:
                    await old.close()
                except Exception as exc:
                    # The swap is done: the new store serves. `Store.close` let every bank and
                    # the old lock go before raising; its banks' acknowledged writes had landed.
                    # Raised here, `apply` said "nothing changed" and the new store never booted.
                    log.error("old_store_close_failed", old=str(old.root), error=str(exc))
                await service.boot_banks()
                log.info("store_reopened", old=str(old.root), new=str(target))
                applied = Applied.REOPENED
            if _embedding(previous) != _embedding(settings):
                await self._reembed(previous, settings)
            return applied

    async def _reembed(self, previous: Settings, settings: Settings) -> None:
        service = self._service
        wanted = settings.embeddings_enabled and (
            service.embedder is None or previous.embedding_model != settings.embedding_model
        )
        if self._embedder_for is not None and wanted:
            service.embedder = await asyncio.to_thread(self._embedder_for, settings)
        turned_on = settings.embeddings_enabled and not previous.embeddings_enabled
        log.info(
            "embeddings_reconfigured",
            enabled=settings.embeddings_enabled,
            model=service.embedder.model if service.embedder is not None else None,
        )
        service.embedding_changed(turned_on=turned_on)


def _embedding(settings: Settings) -> tuple[bool, str]:
    return settings.embeddings_enabled, settings.embedding_model
