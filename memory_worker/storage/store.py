"""The bank registry under one data dir: open (write probe + exclusive lock), ensure, trash, reload.

Opening is all-or-nothing about the directory: an unwritable data dir or one held by another process
is fatal, never a silent RAM-only store. A single bank that fails to load is reported and skipped
(reads and writes of it fail with `storage`), so one bad folder cannot take the others down — but a
load that failed only for want of file descriptors (`EMFILE`/`ENFILE`, transient) never marks a
bank broken: a reload keeps the bank RAM holds, and boot fails instead. A symbolic link in the
data dir is never loaded as a bank (doctor lists it).

A lazy store (`open(..., lazy=True)`: one-shot commands, and servers, which replay the rest in
the background once they serve: `replay`) lists the bank folders at open and replays a bank only
when a call first names it, so appending one line to one bank of a hundred does not replay the
other ninety-nine; `summary()` answers `memory::bank::list` from a bank's derived counts file
when it still matches the log, without a replay.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

from memory_worker.core.bank_settings import BankOverrides
from memory_worker.core.errors import BankNotFound, Conflict, StorageError
from memory_worker.core.names import check_name
from memory_worker.storage import erasure, files, unfinished
from memory_worker.storage.bank import Bank, BankSummary, Guard
from memory_worker.storage.damage import DurabilityWarnings
from memory_worker.storage.logger import get_logger

__all__ = ["TRASH_DIR", "BankSummary", "Store"]

log = get_logger(__name__)

TRASH_DIR = ".trash"
# A bank's replay in a worker thread: the bank it made, or why its folder is broken.
_Loading = concurrent.futures.Future[tuple[Bank | None, str | None]]
# `.trash/<bank>-<ms>[-<n>]`: the name a trashed bank folder gets (files.move_to_trash); `<n>`
# is short (copies trashed within one millisecond), so `x-1234567890-<ms>` is bank `x-1234567890`.
_TRASHED = re.compile(r"^(?P<bank>[a-z0-9][a-z0-9_-]*?)-\d{10,}(?:-\d{1,9})?$")


def _trashed_names(root: Path) -> set[str]:
    try:
        entries = os.listdir(root / TRASH_DIR)
    except OSError:  # no trash yet (or unreadable: then nothing counts as deleted)
        return set()
    return {m["bank"] for m in map(_TRASHED.match, entries) if m is not None}


LOST_AND_FOUND = "lost+found"


def _folders(root: Path) -> list[str]:
    """The bank folders under `root` (dot entries, plain files and links are not banks), sorted."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise StorageError(f"cannot list data_dir {root}: {exc.strerror or exc}") from exc
    # A link is never a bank (doctor lists it): following it would read and write elsewhere.
    # `lost+found` is fsck's, in a data dir that is a mount point: never a bank (no bank name has
    # a `+`), and counting it broken would fail doctor's required check for good.
    return [
        e.name
        for e in entries
        if not e.name.startswith(".")
        and e.name != LOST_AND_FOUND
        and e.is_dir(follow_symlinks=False)
    ]


def _load_one(
    root: Path,
    name: str,
    warnings: DurabilityWarnings,
    banks: dict[str, Bank],
    broken: dict[str, str],
    guard: Guard | None = None,
    *,
    short_lived: bool = False,
) -> None:
    if not files.is_real_dir(root / name):
        return  # removed or moved to .trash by hand since it was listed: no bank, not a broken one
    try:
        check_name(name, "bank folder")
        if short_lived:
            banks[name] = Bank.load(name, root / name, warnings, guard, short_lived=True)
        else:  # the call every other path (and a test's stand-in for `load`) has always made
            banks[name] = Bank.load(name, root / name, warnings, guard)
    except Exception as exc:  # one bad folder must not stop the others from loading
        if files.is_transient(exc):
            raise StorageError(f"cannot load bank {name}: {exc}") from exc
        broken[name] = str(exc)
        log.error("bank_load_failed", bank=name, error=str(exc))


def _load_all(
    root: Path, warnings: DurabilityWarnings, guard: Guard | None = None
) -> tuple[dict[str, Bank], dict[str, str]]:
    banks: dict[str, Bank] = {}
    broken: dict[str, str] = {}
    for name in _folders(root):
        _load_one(root, name, warnings, banks, broken, guard)
    return banks, broken


class Store:
    def __init__(
        self,
        root: Path,
        banks: dict[str, Bank],
        broken: dict[str, str],
        lock: files.DataDirLock,
        durability: DurabilityWarnings | None = None,
        unloaded: set[str] | None = None,
    ) -> None:
        self.root = root
        self._banks = banks
        self.broken = broken
        # Bank folders seen at open and not replayed yet (a lazy store): each is loaded the first
        # time a call names it, and never again looked at otherwise.
        self._unloaded = unloaded if unloaded is not None else set()
        # Banks of `_unloaded` being replayed in a worker thread (`replay`): each future holds
        # what the thread made, installed by the loop (`_take_loaded`), never by the thread.
        self._loading: dict[str, _Loading] = {}
        # Set while `reload` reads the whole data dir again: a bank of `_unloaded` is not replayed
        # on its own meanwhile (`replay` waits for the reload's instead). It would land in the map
        # the reload is about to replace, where a write into it would be acknowledged and then
        # missing from the bank the reload installs.
        self._reloading: asyncio.Event | None = None  # set when the running reload is over
        # Whether the process exits after one command (`adopt`): its banks boot for that.
        self._short_lived = False
        self._lock = lock
        # Changes that landed but whose directory sync failed (doctor `durability-warnings`).
        self.durability = durability if durability is not None else DurabilityWarnings()
        self._create_lock = asyncio.Lock()
        self._trash_lock = asyncio.Lock()  # one bank delete at a time: a second one finds it gone
        self._trashed = _trashed_names(root)
        # When each subject was erased from each bank: what extraction read before is refused.
        self.erasures = erasure.ErasureStamps.load(root)

    def __repr__(self) -> str:
        return (
            f"<Store {str(self.root)!r} banks={len(self._banks)} broken={len(self.broken)} "
            f"unloaded={len(self._unloaded)}>"
        )

    @classmethod
    def open(
        cls,
        root: Path,
        *,
        holder: dict[str, object],
        lock_wait_s: float = 0.0,
        lazy: bool = False,
        short_lived: bool = False,
    ) -> Store:
        """Probe, lock and replay `root` (blocking). Raises `StorageError` or `Conflict`.
        `lazy`: list the bank folders only; each is replayed when first named (`find`).
        `short_lived`: the process exits after one command (see `adopt`)."""
        root = root.resolve()
        files.probe_writable(root)
        lock = files.DataDirLock(root, holder)
        lock.acquire(lock_wait_s)
        return cls.adopt(lock, lazy=lazy, short_lived=short_lived)

    @classmethod
    def adopt(
        cls, lock: files.DataDirLock, *, lazy: bool = False, short_lived: bool = False
    ) -> Store:
        """Replay the data dir of `lock`, which this process has just acquired (a door takes the
        lock before it imports the store, to forward the call when it is refused). The lock is
        released when the replay fails. `short_lived` (a lazy store of a process that exits after
        one command): a bank's boot skips what pays off only over a long life (`Bank.load`):
        handing its freed heap back to the OS (glibc's `malloc_trim`, ~10 ms at 10,000 memories;
        the exit returns it all) and compacting its records for RAM (~20 ms)."""
        root = lock.root
        durability = DurabilityWarnings()
        banks: dict[str, Bank] = {}
        broken: dict[str, str] = {}
        unloaded: set[str] = set()
        try:
            # Banks a crash made for a write that never landed go before anything lists them.
            unfinished.sweep(root, _folders(root))
            if lazy:
                unloaded = set(_folders(root))
            else:
                banks, broken = _load_all(root, durability, lock.verify)
            # Inside: it reads the erasure stamps, which may fail too (out of descriptors).
            store = cls(root, banks, broken, lock, durability, unloaded)
        except BaseException:
            lock.release()
            raise
        log.info(
            "store_opened",
            data_dir=str(root),
            banks=len(banks),
            broken=len(broken),
            unloaded=len(unloaded),
        )
        store._short_lived = short_lived
        return store

    def names(self) -> list[str]:
        """Every bank that is (or, in a lazy store, would be once named) loaded."""
        return sorted(self._banks.keys() | self._unloaded)

    def loaded(self) -> list[Bank]:
        """The banks replayed so far (every bank, once a lazy store has none pending)."""
        return [self._banks[name] for name in sorted(self._banks)]

    def pending(self) -> list[str]:
        """The bank folders a lazy store has listed and not replayed yet."""
        return sorted(self._unloaded)

    def is_pending(self, name: str) -> bool:
        """Whether `name` is one of `pending()` (without sorting them all)."""
        return name in self._unloaded

    def find(self, name: str) -> Bank | None:
        """The bank `name`, replayed now if a lazy store has not yet (blocking); None when there
        is no such bank or it failed to load (then it is in `broken`)."""
        bank = self._banks.get(name)
        if bank is None and name in self._unloaded:
            self._refuse_while_reloading(name)
            if name not in self._loading:  # no thread is replaying it: replay it here
                self._load_into(name, self._begin_load(name))
            bank = self._take_loaded(name)  # installed (a thread's replay waited for, blocking)
        return bank

    async def replay(self, name: str) -> Bank | None:
        """`find`, with a bank not replayed yet replayed in a worker thread while the loop goes
        on answering calls (a server's background boot). A call naming that bank meanwhile
        waits for this replay (`find`) instead of starting another."""
        while name in self._unloaded and self._reloading is not None:
            await self._reloading.wait()  # the reload replays it: that bank, not a second one
        if name in self._unloaded and name not in self._loading:
            started = self._begin_load(name)
            asyncio.get_running_loop().run_in_executor(None, self._load_into, name, started)
        loading = self._loading.get(name)
        if loading is not None:
            await asyncio.wait([asyncio.wrap_future(loading)])  # its outcome is `find`'s to take
            if self._loading.get(name) is not loading and name in self._unloaded:
                # Another waiter took this replay's outcome, a transient failure that left the
                # bank unloaded: raised here too, not retried on the loop by `find`.
                loading.result()
        return self.find(name)

    async def settled(self, name: str) -> None:
        """Wait while a reload holds `name` frozen (`reload`, `reload_bank`: under the create
        lock): the bank it installs takes writes, the frozen one never will again. A write that
        found the frozen bank failed with `the bank is reloading; retry` whenever a person's hand
        edit was being picked up (a save waits for it in `ensure`; a change by id did not)."""
        while (
            (bank := self._banks.get(name)) is not None
            and bank.is_frozen()
            and self._create_lock.locked()
        ):
            async with self._create_lock:
                pass

    def _refuse_while_reloading(self, name: str) -> None:
        """For `find`, which cannot wait for the reload as `replay` does."""
        if self._reloading is not None:
            raise StorageError(f"bank {name} cannot be opened: the store is reloading; retry")

    def _begin_load(self, name: str) -> _Loading:
        """The future a replay of `name` fills: while it is pending, `find` waits for it."""
        loading: _Loading = concurrent.futures.Future()
        self._loading[name] = loading
        return loading

    def _load_into(self, name: str, loading: _Loading) -> None:
        """Replay `name` into `loading`, touching nothing the loop reads (so a worker thread may
        run it); `_take_loaded` installs the outcome."""
        banks: dict[str, Bank] = {}
        broken: dict[str, str] = {}
        try:
            _load_one(
                self.root,
                name,
                self.durability,
                banks,
                broken,
                self._lock.verify,
                short_lived=self._short_lived,
            )
        except BaseException as exc:  # transient (out of descriptors): `find` raises it
            loading.set_exception(exc)
        else:
            loading.set_result((banks.get(name), broken.get(name)))

    def _take_loaded(self, name: str) -> Bank | None:
        """Install what the replay thread of `name` made, waiting for it (blocking) if need be.
        A transient failure leaves the bank unloaded (the next call retries) and is raised."""
        bank, error = self._loading.pop(name).result()
        self._unloaded.discard(name)
        if bank is not None and name in self._banks:  # never over a bank already serving
            bank.close()
            return self._banks[name]
        if bank is not None:
            self._banks[name] = bank
        if error is not None:
            self.broken[name] = error
        return bank

    async def _settle_loads(self) -> None:
        """Install every replay still running in a thread: what closes or replaces every bank
        must see them all."""
        while self._loading:
            name, loading = next(iter(self._loading.items()))
            await asyncio.wait([asyncio.wrap_future(loading)])
            if self._loading.get(name) is loading:  # not taken by a call meanwhile
                with contextlib.suppress(StorageError):
                    self._take_loaded(name)

    async def replay_all(self) -> None:
        """Replay every bank a lazy store has not yet, each in a worker thread (`replay`): for
        what looks at them all, such as the doctor's damage and load checks, which a server may
        run while its background boot is still going (the loop keeps answering meanwhile).
        Nothing to do for a store opened eagerly."""
        for name in self.pending():
            await self.replay(name)

    async def summary(
        self, name: str, believe: Callable[[BankSummary], bool] | None = None
    ) -> Bank | BankSummary | None:
        """What `memory::bank::list` shows of `name`: the bank when it is loaded, else its summary
        from its folder (the description, the rules and the derived counts file) without a
        replay; a bank whose counts file is missing or no longer matches its log (after a crash),
        or whose summary the caller does not `believe` (retention may have retired one of its
        memories since), is replayed instead, in a worker thread (`replay`)."""
        if name in self._unloaded:
            summary = Bank.peek(name, self.root / name)
            if summary is not None and (believe is None or believe(summary)):
                return summary
            return await self.replay(name)
        return self.find(name)

    def was_deleted(self, name: str) -> bool:
        """True for a bank that is not live but sits in `.trash`: a session bound to it gets no
        memory, and extraction must not bring it back (only an explicit create or save does)."""
        return name not in self._banks and name not in self._unloaded and name in self._trashed

    def get(self, name: str) -> Bank:
        """The loaded bank `name`; `bank_not_found` if absent, `storage` if it failed to load."""
        bank = self.find(name)
        if bank is not None:
            return bank
        check_name(name, "bank")
        if name in self.broken:
            raise StorageError(f"bank {name} could not be loaded: {self.broken[name]}")
        raise BankNotFound(name)

    def rewrite_holder(self, holder: dict[str, object]) -> None:
        """Replace the lock's holder record (blocking; `StorageError`)."""
        self._lock.rewrite_holder(holder)

    def verify_lock(self) -> None:
        """Raise `StorageError` when this process no longer holds the data dir's lock."""
        self._lock.verify()

    async def ensure(
        self,
        name: str,
        description: str = "",
        *,
        revive: bool = True,
        overrides: BankOverrides | None = None,
        limit: int | None = None,
        for_a_write: bool = False,
    ) -> tuple[Bank, bool]:
        """The bank `name`, created (folder, `bank.yaml`, `rules/`) when missing. `revive=False`:
        a bank that was deleted stays deleted (`bank_not_found`), decided under the same lock as
        the creation, so a delete racing the caller cannot be undone by it. `limit`: how many
        banks may exist; creating one more is a `conflict` (folders made by hand still load).
        `for_a_write`: a bank created here is the caller's to keep once its write landed
        (`settle_creation`); a crash before that removes it at the next open."""
        check_name(name, "bank")
        bank = self.find(name)
        if bank is not None and not self._create_lock.locked():
            return bank, False  # what taking the free lock would find, without taking it
        async with self._create_lock:
            bank = self.find(name)
            if bank is not None:
                return bank, False
            if not revive and name in self._trashed:
                raise BankNotFound(f"{name} was deleted")
            if name in self.broken:
                raise StorageError(f"bank {name} could not be loaded: {self.broken[name]}")
            path = self.root / name
            if files.is_link(path):
                raise files.planted(path)
            if os.path.lexists(path):  # created by hand since boot: load it, never overwrite
                bank = await asyncio.to_thread(
                    Bank.load, name, path, self.durability, self._lock.verify
                )
                self._banks[name] = bank
                return bank, False
            held = len(self._banks) + len(self._unloaded)  # a lazy store's unread ones count
            if limit is not None and held >= limit:
                raise Conflict(
                    f"cannot create bank {name}: the data dir already holds {held} "
                    f"banks and max_banks is {limit}; delete a bank or raise max_banks"
                )
            bank = await asyncio.to_thread(
                functools.partial(
                    Bank.create,
                    name,
                    path,
                    description,
                    self.durability,
                    self._lock.verify,
                    overrides,
                    for_a_write=for_a_write,
                )
            )
            self._banks[name] = bank
            return bank, True

    async def settle_creation(self, name: str) -> None:
        """Something landed in bank `name` (or its caller was told it exists): if a write made
        it (`ensure(for_a_write=True)`), it is no longer removed at the next open. A failure is
        logged: that open keeps a bank where something landed all the same."""
        bank = self._banks.get(name)
        if bank is None or not bank.unsettled:
            return
        try:
            await asyncio.to_thread(unfinished.settle, bank.path, within=self.root)
        except StorageError as exc:
            log.warning("bank_creation_not_settled", bank=name, error=str(exc))
            return
        bank.unsettled = False

    async def discard_if_empty(self, name: str) -> None:
        """Undo a bank created by a call whose first write failed, if nothing landed in it since
        and no caller was told it exists (`settle_creation`: `memory::bank::create` of the same
        name meanwhile answered that it does)."""
        async with self._create_lock:
            bank = self._banks.get(name)
            if bank is None or not bank.unsettled or not bank.is_empty():
                return
            del self._banks[name]
            bank.close()
            await asyncio.to_thread(files.remove_tree, bank.path)

    async def trash(self, name: str, now_ms: int) -> Path:
        """Move the bank folder to `.trash/<name>-<ms>`: disk first, so a failed rename leaves the
        bank usable. Deletes run one at a time: a second delete of one bank waits for the first
        and then finds no bank (`bank_not_found`), never a folder that already moved."""
        async with self._trash_lock:
            return await self._trash(name, now_ms)

    async def _trash(self, name: str, now_ms: int) -> Path:
        try:
            bank = self.get(name)
        except StorageError:
            if name not in self.broken:
                raise
            return await self._trash_broken(name, now_ms)
        self._lock.verify()
        bank.freeze("the bank was deleted")
        await bank.drain()
        try:
            # Before the move: past it, an unfinished erasure's intent and an unsent outbox
            # would sit in a copy nothing loads (a kill there lost their `erased` events).
            await asyncio.to_thread(erasure.commit_before_trash, self.root, name, bank.path)
            target = await asyncio.to_thread(
                files.move_to_trash, bank.path, self.root / TRASH_DIR, f"{name}-{now_ms}"
            )
        except StorageError as exc:
            if not isinstance(exc, files.UnsyncedChange):  # not moved: the bank stays, usable
                bank.unfreeze()
            else:  # moved, but its directory sync failed: RAM follows the disk, then report
                self._banks.pop(name, None)
                self._trashed.add(name)
                bank.close()
                self.durability.note(name, "bank deleted (moved to .trash)", exc)
            raise
        self._banks.pop(name, None)
        self._trashed.add(name)
        bank.close()
        await self._finish_erasures(bank, target)
        return target

    async def _finish_erasures(self, bank: Bank, target: Path) -> None:
        """An erasure that failed past its intent (the disk refused its rewrite) promised to
        finish at the bank's next load, which a deleted bank never has: finished in its trashed
        copy now. What it erased, and what the bank's outbox held, was committed at the data
        dir's root before the move (`erasure.commit_before_trash`): the service announces it
        from there (`_finish_erasures_in_trash`), as the next boot does after a kill. A failure
        is logged (the delete itself is done); `memory::forget-subject` naming the deleted bank
        erases its trashed copies again."""
        bank.take_unannounced_erasures()  # announced from the root's commitment, not twice
        try:
            await asyncio.to_thread(erasure.finish_in_trash, self.root, bank.name, target)
        except StorageError as exc:
            log.error("forget_subject_unfinished_in_trash", bank=bank.name, error=str(exc))

    async def _trash_broken(self, name: str, now_ms: int) -> Path:
        """A bank folder that failed to load is still the user's bank, and deleting it is the way
        out short of a repair by hand: it moves to `.trash` like any other (nothing in RAM to
        drain). Under the create lock, which `ensure` and `reload` decide `broken` under."""
        async with self._create_lock:
            if name in self.broken:
                self._lock.verify()
                trash, stem = self.root / TRASH_DIR, f"{name}-{now_ms}"
                try:
                    target = await asyncio.to_thread(
                        files.move_to_trash, self.root / name, trash, stem
                    )
                except files.UnsyncedChange as exc:  # moved: the store follows the disk
                    del self.broken[name]
                    self._trashed.add(name)
                    self.durability.note(name, "bank deleted (moved to .trash)", exc)
                    raise
                del self.broken[name]
                self._trashed.add(name)
                return target
        return await self._trash(name, now_ms)  # reloaded meanwhile: delete what it is now

    async def reload(self) -> int:
        """Drop every bank from RAM and replay the data dir again (hand edits picked up)."""
        async with self._create_lock:  # a bank created mid-reload would miss the new map
            await self._settle_loads()
            # No await since the last replay was installed: none runs, and none starts now.
            self._reloading = reloading = asyncio.Event()
            try:
                old = await self._reload_all()
            finally:
                self._reloading = None
                reloading.set()
            count = len(self._banks)
        for bank in old:
            await bank.close_frozen()
        return count

    async def _reload_all(self) -> list[Bank]:
        """`reload`'s work under its lock: the old banks frozen and drained, the data dir read
        again, the maps replaced; returns the old banks, to close."""
        old = list(self._banks.values())
        for bank in old:
            bank.freeze("the store is reloading; retry")
        for bank in old:
            await bank.drain()
        try:
            banks, broken = await asyncio.to_thread(
                _load_all, self.root, self.durability, self._lock.verify
            )
        except StorageError:
            for bank in old:
                bank.unfreeze()
            raise
        self._banks, self.broken, self._unloaded = banks, broken, set()
        self._trashed = _trashed_names(self.root)
        return old

    async def close(self) -> None:
        """Drain and close every bank, then let the data dir's lock go, whatever fails on the way.
        A bank whose drain or close raised (its derived files not written, a descriptor the OS
        refused to close) once stopped the loop there: the banks after it were never closed and
        the lock stayed held by a process that goes on (a server whose settings moved its data
        dir: every later opener of the old dir was refused). Each failure is logged; the first is
        raised once all is done. Every write acknowledged before the close had already landed in
        its log (a commit answers once fsynced)."""
        errors: list[Exception] = []
        try:
            try:
                await self._settle_loads()
            except Exception as exc:
                errors.append(exc)
                log.error("store_close_failed", data_dir=str(self.root), error=str(exc))
            for bank in list(self._banks.values()):
                try:
                    await bank.drain()
                except Exception as exc:
                    errors.append(exc)
                    log.error("bank_drain_failed", bank=bank.name, error=str(exc))
                # Closed even when its drain failed: a flusher that died is done, and the derived
                # files are not written for a bank with writes in flight (`Bank._save_*`).
                try:
                    bank.close()
                except Exception as exc:
                    errors.append(exc)
                    log.error("bank_close_failed", bank=bank.name, error=str(exc))
        finally:
            self._lock.release()
        if errors:
            raise errors[0]

    async def reload_bank(self, name: str, *, force: bool = False) -> str:
        """Bring one bank in line with its folder (a hand edit, a folder added or removed by hand);
        the other banks are not touched. Returns "reloaded" | "added" | "removed" | "unchanged" |
        "broken" | "deferred" (a transient failure, such as no file descriptor left: RAM is kept
        and nothing is marked broken; try again later). Without `force`, a bank whose files say
        what RAM holds is left alone (and never frozen, so writes to it do not fail meanwhile).

        Same discipline as `reload()`: under the create lock, freeze, drain, load, swap, close. A
        folder that fails to load goes to `broken` and its old bank is dropped and closed, as a
        restart would do (the files are the truth; stale RAM must not keep answering for them)."""
        check_name(name, "bank")
        async with self._create_lock:
            bank = self._banks.get(name)
            if bank is None and name in self._unloaded:
                # Never replayed (a lazy store): replaying it now (in a worker thread) is all a
                # reload would do.
                if await self.replay(name) is not None:
                    return "reloaded"
                return "broken" if name in self.broken else "removed"
            if bank is None:
                return await self._load_appeared(name)
            if bank.is_frozen():
                return "unchanged"  # a trash in progress owns it: it drops the bank itself
            await bank.drain()
            present = files.is_real_dir(self.root / name)
            if present and not force and not bank.disk_changed():
                return "unchanged"
            bank.freeze("the bank is reloading; retry")
            await bank.drain()
            if not files.is_real_dir(self.root / name):
                del self._banks[name]
                self._trashed = _trashed_names(self.root)
                bank.close()
                log.info("bank_folder_removed", bank=name)
                return "removed"
            try:
                fresh = await asyncio.to_thread(
                    functools.partial(Bank.load, hand_edit=True),
                    name,
                    self.root / name,
                    self.durability,
                    self._lock.verify,
                )
            except Exception as exc:  # as at boot: the folder is reported, the others go on
                if files.is_transient(exc):  # out of descriptors: keep serving what RAM holds
                    bank.unfreeze()
                    log.warning("bank_reload_deferred", bank=name, error=str(exc))
                    return "deferred"
                del self._banks[name]
                self.broken[name] = str(exc)
                await bank.close_frozen()
                log.error("bank_load_failed", bank=name, error=str(exc))
                return "broken"
            self._banks[name] = fresh
        await bank.close_frozen()  # a bank.yaml or rule edit leaves the log as it was
        return "reloaded"

    async def _load_appeared(self, name: str) -> str:
        """A name not in RAM: load its folder if one is there now (caller holds the create lock)."""
        path = self.root / name
        if not files.is_real_dir(path):  # gone, or a link (never loaded: doctor lists it)
            return "removed" if self.broken.pop(name, None) is not None else "unchanged"
        try:
            bank = await asyncio.to_thread(
                functools.partial(Bank.load, hand_edit=True),
                name,
                path,
                self.durability,
                self._lock.verify,
            )
        except Exception as exc:
            if files.is_transient(exc):
                log.warning("bank_reload_deferred", bank=name, error=str(exc))
                return "deferred"
            self.broken[name] = str(exc)
            log.error("bank_load_failed", bank=name, error=str(exc))
            return "broken"
        self.broken.pop(name, None)
        self._banks[name] = bank
        log.info("bank_folder_added", bank=name, memories=bank.live_count())
        return "added"
