"""Hot reload of the YAML settings file when there is no engine (standalone mode).

The same fields as the configuration worker's entry; an edit is applied like a configuration change
(`Reconfigurer`). A file that does not parse, or a `data_dir` that cannot be opened, is logged and
the last good settings and store stay in service: a typo never takes a running worker down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog
import watchfiles

from memory_worker.core.config import Settings, load_settings
from memory_worker.core.errors import InvalidInput, WorkerError

__all__ = ["SettingsFileWatcher"]

log = structlog.get_logger(__name__)

DEBOUNCE_MS = 100


class SettingsFileWatcher:
    def __init__(self, path: Path, apply: Callable[[Settings], Awaitable[object]]) -> None:
        self.path = path.absolute()
        self._apply = apply
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.attempts = 0  # edits seen, applied or not (tests wait on `changed`)
        self.applied = 0  # of which took effect
        self.changed = asyncio.Condition()

    async def start(self) -> None:
        """Returns once the watch is in place: an edit made right after is seen."""
        self._task = asyncio.create_task(self._run(), name="memory-settings-watch")
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._task.done():
            await self._task  # it failed to start: say why

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        # The parent directory, not the file: editors replace files by rename.
        changes_of = watchfiles.awatch(
            self.path.parent, stop_event=self._stop, debounce=DEBOUNCE_MS, recursive=False
        )
        # The generator's first step creates the watch before it first waits; a callback
        # scheduled now runs after that step (the same trick as `watch.DataDirWatcher`).
        asyncio.get_running_loop().call_soon(self._ready.set)
        async for changes in changes_of:
            if any(Path(changed).absolute() == self.path for _, changed in changes):
                await self.reload()

    async def reload(self) -> None:
        try:
            if not (await asyncio.to_thread(self.path.read_text, "utf-8")).strip():
                # An editor mid-save, or a truncated file: "all defaults" would move data_dir.
                raise InvalidInput(f"{self.path} is empty")
            settings = await asyncio.to_thread(load_settings, self.path)
            outcome = await self._apply(settings)
        except (WorkerError, OSError) as err:
            log.error("settings_rejected", path=str(self.path), error=str(err), kept="last good")
            outcome = None
        else:
            log.info("settings_file_applied", path=str(self.path), outcome=str(outcome))
        async with self.changed:
            self.attempts += 1
            self.applied += outcome is not None
            self.changed.notify_all()
