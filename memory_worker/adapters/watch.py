"""Hand edits picked up without a restart: a watcher on the data dir reloads the bank that changed.

Each change maps to its bank folder (the first path component under the data dir, a valid bank
name). Only what a bank is made of counts: the folder itself, `memories.jsonl`, `bank.yaml`,
`rules/` and `rules/*.md`. Dot entries (`.trash`, `.lock`, `.write-probe-*`, the `.<name>.tmp`
files of atomic writes, a bank being created under its hidden staging name), `vectors.jsonl`
(derived data the worker appends in the background) and anything else are ignored.

The worker's own writes are told apart by content and file identity, never by timing: the watcher
waits for the bank's writes in flight to land (`Bank.drain()`), then asks `Bank.disk_changed()`,
which compares the log against the stamp the bank took after its own last fsync and the rule files
and `bank.yaml` against RAM. A bank is reloaded (`MemoryService.reload_bank`) only when that says
so, or when its folder appeared or vanished.

The data dir is read from the service at every batch and at every idle wake-up (`idle_s`), so when
the service's store is swapped for another dir the watcher follows it within `idle_s`; `restart()`
switches at once. A reload the store deferred (the process ran out of file descriptors: nothing
is wrong with the files) is tried again at the next wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from watchfiles import Change, awatch

from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput
from memory_worker.core.names import check_name
from memory_worker.storage import files
from memory_worker.storage.bank import BANK_FILE, MEMORIES_FILE, RULES_DIR
from memory_worker.storage.logger import get_logger
from memory_worker.storage.store import Store

__all__ = ["DataDirWatcher", "bank_of"]

log = get_logger(__name__)

DEBOUNCE_MS = 100  # a burst of changes (an editor's save, `cp -r`) becomes one batch
STEP_MS = 20  # quiet time that ends a batch early; also how fast a stop request is seen
IDLE_S = 1.0  # wake-up with no change: notice a swapped data dir, retry a missing one
STOP_GRACE_S = 5.0  # stop() lets a reload in progress finish rather than cut it in half

ReloadHook = Callable[[str, str], None]


def bank_of(root: Path, path: str) -> str | None:
    """The bank whose folder `path` belongs to, or None when the change cannot affect a bank."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None
    if not parts or any(part.startswith(".") for part in parts):
        return None
    rest = parts[1:]
    relevant = (
        len(rest) == 0
        or (len(rest) == 1 and rest[0] in (MEMORIES_FILE, BANK_FILE, RULES_DIR))
        or (len(rest) == 2 and rest[0] == RULES_DIR and rest[1].endswith(".md"))
    )
    if not relevant:
        return None
    try:
        return check_name(parts[0], "bank folder")
    except InvalidInput:
        return None


async def _needs_reload(store: Store, name: str) -> bool:
    """A folder that appeared or vanished, or a bank whose files say something RAM does not."""
    present = files.is_real_dir(store.root / name)  # a link is never a bank folder
    bank = await store.replay(name)  # one not replayed yet: in a worker thread, not on the loop
    if bank is None:
        return present or name in store.broken
    if not present:
        return True
    await bank.drain()  # our own writes land first: a file mid-write by us is not an edit
    return bank.disk_changed()


class DataDirWatcher:
    """Follows the data dir of `service_getter()` and reloads banks edited by hand.

    `history` lists every `reload_bank` call the watcher made with its outcome ("error" when it
    raised: logged, and the watcher goes on), in order; `checked` counts how often each bank was
    looked at. Both are updated when a whole batch has been handled, and batches come in order, so
    `wait_reloaded` returning means every earlier change was handled too."""

    def __init__(
        self,
        service_getter: Callable[[], MemoryService | None],
        *,
        on_reload: ReloadHook | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        idle_s: float = IDLE_S,
        force_polling: bool | None = None,
    ) -> None:
        self._service_getter = service_getter
        self._on_reload = on_reload
        self._debounce_ms = debounce_ms
        self._idle_s = idle_s
        self._force_polling = force_polling
        self.history: list[tuple[str, str]] = []
        self.checked: Counter[str] = Counter()
        self.root: Path | None = None  # the dir being followed now
        self._handed: Counter[str] = Counter()  # outcomes per bank `wait_reloaded` returned
        self._retry: set[str] = set()  # banks whose reload was deferred: tried at the next wake
        self._updated = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._halt = asyncio.Event()  # ends the current follow (stop or restart)
        self._ready = asyncio.Event()

    def __repr__(self) -> str:
        running = self._task is not None and not self._task.done()
        root = str(self.root) if self.root is not None else None
        return f"<DataDirWatcher root={root!r} running={running} reloads={len(self.history)}>"

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start watching; returns once the watch is in place, so any change made after this call
        is seen."""
        if self._task is not None and not self._task.done():
            return
        self._stopping.clear()
        self._ready.clear()
        self._task = asyncio.create_task(self._run(), name="memory-watch")
        await self._until_ready()

    async def restart(self) -> None:
        """Drop the current watch and follow the service's data dir as it is now."""
        if self._task is None or self._task.done():
            await self.start()
            return
        self._ready.clear()
        self._halt.set()
        await self._until_ready()

    async def _until_ready(self) -> None:
        """Wait for the watch to be in place, or for the task to have died (then re-raise)."""
        assert self._task is not None
        ready = asyncio.create_task(self._ready.wait())
        try:
            await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._task.done() and not self._ready.is_set():
            self._task.result()

    async def stop(self) -> None:
        """Stop watching. A reload in progress is allowed to finish (cut in half it would leave a
        bank frozen); past `STOP_GRACE_S` the task is cancelled. Safe to call more than once."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        self._halt.set()  # the watch thread checks it every STEP_MS
        _done, pending = await asyncio.wait({task}, timeout=STOP_GRACE_S)
        if pending:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # --- waiting (tests, tools) ----------------------------------------------------------------

    def reloads_of(self, bank: str) -> list[str]:
        """Outcomes of the watcher's reloads of `bank`, in order, but for "unchanged"."""
        return [
            outcome for name, outcome in self.history if name == bank and outcome != "unchanged"
        ]

    async def wait_until(
        self, predicate: Callable[[DataDirWatcher], bool], timeout: float = 10.0
    ) -> None:
        """Wait until `predicate(self)` holds, re-checked after each handled batch (`TimeoutError`
        past `timeout` seconds)."""
        async with asyncio.timeout(timeout), self._updated:
            await self._updated.wait_for(lambda: predicate(self))

    async def wait_reloaded(self, bank: str, timeout: float = 10.0) -> str:
        """The outcome of the next reload of `bank` not yet returned by this method (waiting for
        it up to `timeout` seconds; `TimeoutError` past that)."""
        await self.wait_until(lambda w: len(w.reloads_of(bank)) > w._handed[bank], timeout)
        outcome = self.reloads_of(bank)[self._handed[bank]]
        self._handed[bank] += 1
        return outcome

    # --- the loop ------------------------------------------------------------------------------

    def _service(self) -> MemoryService | None:
        try:
            return self._service_getter()
        except Exception as exc:  # a service being swapped: nothing to watch for a moment
            log.warning("watch_no_service", error=str(exc))
            return None

    async def _run(self) -> None:
        failure = ""  # the last error, logged once rather than at every retry
        while not self._stopping.is_set():
            service = self._service()
            self.root = service.store.root if service is not None else None
            self._halt = asyncio.Event()
            try:
                if self.root is not None:
                    await self._follow(self.root)
                    failure = ""
                    continue
            except Exception as exc:  # a vanished data dir, a watch limit: retry, never die
                if str(exc) != failure:
                    log.error("watch_failed", data_dir=str(self.root), error=str(exc))
                failure = str(exc)
            self._ready.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._halt.wait(), self._idle_s)
        log.info("watch_stopped")

    async def _follow(self, root: Path) -> None:
        """Watch `root` until halted or until the service's data dir is another one."""
        changes_of = awatch(
            root,
            watch_filter=lambda _change, path: bank_of(root, path) is not None,
            debounce=self._debounce_ms,
            step=STEP_MS,
            stop_event=self._halt,
            rust_timeout=int(self._idle_s * 1000),
            yield_on_timeout=True,
            force_polling=self._force_polling,
        )
        # The generator's first step puts the watch in place before it first waits, and a
        # callback scheduled now runs only after that step: `start()` returns once it is there.
        asyncio.get_running_loop().call_soon(self._ready.set)
        log.info("watch_started", data_dir=str(root))
        async with contextlib.aclosing(changes_of) as stream:
            async for changes in stream:
                service = self._service()
                if self._stopping.is_set() or service is None or service.store.root != root:
                    return
                if changes or self._retry:
                    await self._handle(service, root, changes)

    async def _handle(
        self, service: MemoryService, root: Path, changes: Iterable[tuple[Change, str]]
    ) -> None:
        names = sorted(
            {name for _, path in changes if (name := bank_of(root, path)) is not None} | self._retry
        )
        self._retry.clear()
        done: list[tuple[str, str]] = []
        for name in names:
            try:
                if await _needs_reload(service.store, name):
                    outcome = await service.reload_bank(name)
                    if outcome == "deferred":
                        self._retry.add(name)
                    done.append((name, outcome))
            except Exception as exc:  # one bank's trouble must not stop the others or the watcher
                log.error("watch_reload_failed", bank=name, error=str(exc))
                done.append((name, "error"))
            self.checked[name] += 1
        async with self._updated:
            self.history.extend(done)
            self._updated.notify_all()
        for name, outcome in done:
            self._notify(name, outcome)

    def _notify(self, name: str, outcome: str) -> None:
        if self._on_reload is None:
            return
        try:
            self._on_reload(name, outcome)
        except Exception as exc:
            log.error("watch_hook_failed", bank=name, error=str(exc))
