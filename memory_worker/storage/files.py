"""The only module that opens data files.

Every `OSError` becomes `StorageError` here, chained, naming the path. Appends are fsynced by the
caller's choice of `AppendLog.sync()`; whole-file writes are atomic (temp file, fsync, rename, fsync
the directory) so a reader sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from memory_worker.core.errors import Conflict, StorageError

__all__ = [
    "AppendLog",
    "DataDirLock",
    "UnsyncedChange",
    "append_unsynced",
    "atomic_write",
    "describe",
    "fsync_dir",
    "iter_lines",
    "move_to_trash",
    "probe_writable",
    "read_text",
    "remove_file",
    "remove_replacements",
    "remove_tree",
    "replace_with",
]

PROBE_NAME = ".write-probe"
LOCK_NAME = ".lock"
_LOCK_POLL_S = 0.02


def _storage(action: str, path: Path | str, exc: OSError) -> StorageError:
    reason = exc.strerror or exc.__class__.__name__
    return StorageError(f"cannot {action} {path}: {reason}")


class UnsyncedChange(StorageError):
    """The change landed (a rename or removal is visible) but syncing its directory failed, so a
    power loss could still undo it. Still `storage` on the wire; callers make RAM follow the disk.
    `landed`: where the moved thing now is, when that is not where the caller asked for."""

    def __init__(self, message: str, landed: Path | None = None) -> None:
        super().__init__(message)
        self.landed = landed


def _sync_landed(path: Path, landed: Path | None = None) -> None:
    """`fsync_dir` after the point of no return: its failure is an `UnsyncedChange`."""
    try:
        fsync_dir(path)
    except StorageError as exc:
        raise UnsyncedChange(exc.message, landed) from exc


def fsync_dir(path: Path) -> None:
    """Make a created, renamed or removed directory entry durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _storage("sync directory", path, exc) from exc


def probe_writable(root: Path, *, create: bool = True) -> None:
    """Prove a file can be written, synced and removed in `root` (created first when `create`;
    a running worker probes without creating, so a vanished data dir is reported, not remade)."""
    # A name of its own: two processes probing one dir must not unlink each other's probe.
    probe = root / f"{PROBE_NAME}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        if create:
            root.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StorageError(f"data_dir {root} is not writable: {exc.strerror or exc}") from exc


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` through a synced temp file `.<name>.tmp` and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _storage("write", path, exc) from exc
    _sync_landed(path.parent)


REPLACEMENT_SUFFIX = ".replacing"  # `.<name>.<random>.replacing`: a rewrite not yet in place


def replace_with(path: Path, chunks: Iterable[bytes], check: Callable[[Path], None]) -> None:
    """Replace `path` with the concatenation of `chunks`, crash-safely: written to a new file
    beside it (exclusive, random name), fsynced, `check`ed (it raises to abort), renamed over
    `path`, and the folder fsynced. A crash at any point leaves the old file or the new one at
    `path`, never a mix; an aborted or interrupted attempt leaves at most a temp file that
    `remove_replacements` clears. Past the rename a failed folder sync is `UnsyncedChange`."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{REPLACEMENT_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            for chunk in chunks:
                _write_all(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        check(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _storage("rewrite", path, exc) from exc
        raise
    _sync_landed(path.parent)


def remove_replacements(path: Path) -> list[str]:
    """Remove the temp files of rewrites of `path` that never reached their rename (the old file
    is still the truth); returns their names."""
    removed: list[str] = []
    prefix = f".{path.name}."
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        if entry.name.startswith(prefix) and entry.name.endswith(REPLACEMENT_SUFFIX):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed


def read_text(path: Path) -> str:
    """The file's text exactly as written: no newline translation (`\r\n` stays `\r\n`)."""
    try:
        with path.open(encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()
    except OSError as exc:
        raise _storage("read", path, exc) from exc


def remove_file(path: Path) -> bool:
    """Remove `path`; False when it did not exist."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _storage("remove", path, exc) from exc
    _sync_landed(path.parent)
    return True


def move_to_trash(folder: Path, trash_root: Path, stem: str) -> Path:
    """Rename `folder` to `trash_root/<stem>` (suffixed when taken); nothing is ever deleted."""
    try:
        trash_root.mkdir(exist_ok=True)
        target = trash_root / stem
        suffix = 1
        while target.exists():
            target = trash_root / f"{stem}-{suffix}"
            suffix += 1
        os.rename(folder, target)
    except OSError as exc:
        raise _storage("move to trash", folder, exc) from exc
    _sync_landed(trash_root, target)
    _sync_landed(folder.parent, target)
    return target


def iter_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield `(line_number, line, complete)` for each non-empty line; `complete` is False only for a
    last line with no trailing newline (possibly torn by a crash mid-write)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _storage("read", path, exc) from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                complete = line.endswith(b"\n")
                stripped = line.strip()
                if stripped:
                    yield number, stripped, complete
        except OSError as exc:
            raise _storage("read", path, exc) from exc


def append_unsynced(path: Path, data: bytes) -> None:
    """Append derived data (rebuildable, so not fsynced), starting on a line of its own."""
    try:
        with path.open("ab+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    data = b"\n" + data
            handle.write(data)
    except OSError as exc:
        raise _storage("append to", path, exc) from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class AppendLog:
    """An append-only file: `write()` adds bytes at the end, `sync()` makes them durable, and
    `truncate()` cuts back to a durable size after a failure, so a later write is never glued onto
    a torn or unsynced tail. Reopened automatically when the file was replaced by hand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._inode: int | None = None
        self.size = 0
        self.synced_size = 0
        self._needs_newline = False

    def _open(self) -> int:
        if self._fd is not None:
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == self._inode:
                return self._fd
            self.close()  # replaced or removed behind our back: follow the path, not the inode
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            stat = os.fstat(fd)
            size = stat.st_size
        except OSError as exc:
            raise _storage("open", self.path, exc) from exc
        try:
            if size == 0:
                fsync_dir(self.path.parent)
            needs_newline = size > 0 and not self._ends_with_newline(size)
        except StorageError:
            # Not kept open: the next open tries again, so no line is ever acknowledged in a file
            # whose directory entry may not survive a power loss, or glued onto a torn line.
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fd, self._inode = fd, stat.st_ino
        self.size = self.synced_size = size
        self._needs_newline = needs_newline
        return fd

    def _ends_with_newline(self, size: int) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                return os.pread(fd, 1, size - 1) == b"\n"
            finally:
                os.close(fd)
        except OSError as exc:
            raise _storage("read", self.path, exc) from exc

    def write(self, data: bytes) -> None:
        """Append `data` (which ends with a newline). On failure the file is cut back to its size
        before this call and `StorageError` is raised."""
        fd = self._open()
        if self._needs_newline:
            data = b"\n" + data  # a torn last line stays a line of its own
        before = self.size
        try:
            _write_all(fd, data)
        except OSError as exc:
            self.truncate(before)
            raise _storage("append to", self.path, exc) from exc
        self._needs_newline = False
        self.size = before + len(data)

    def sync(self) -> int:
        """fsync what was written; returns the size now durable."""
        size = self.size
        if self._fd is None or self.synced_size >= size:
            return self.synced_size
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise _storage("sync", self.path, exc) from exc
        self.synced_size = size
        return size

    def truncate(self, size: int) -> None:
        """Cut the file back to `size` bytes (a durable boundary)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            raise _storage("truncate", self.path, exc) from exc
        # Best effort: when the disk refuses this sync too, the next successful commit's fsync
        # persists the cut along with its own line.
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        self.size = self.synced_size = size

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._inode = None


class DataDirLock:
    """One writer per data dir: an exclusive `flock` on `<root>/.lock`, which also records who holds
    it so a refused process can name the holder."""

    def __init__(self, root: Path, holder: dict[str, object]) -> None:
        self.path = root / LOCK_NAME
        self.holder = holder
        self._fd: int | None = None

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lock, waiting up to `wait_s` for a short-lived CLI holder; a long-running
        holder (a served worker) is refused at once."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _storage("open", self.path, exc) from exc
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise _storage("lock", self.path, exc) from exc
                holder = self.read_holder()
                # An empty record is a holder still writing its name (or just releasing): wait.
                short_lived = not holder or holder.get("kind") == "cli"
                if short_lived and time.monotonic() < deadline:
                    time.sleep(_LOCK_POLL_S)
                    continue
                os.close(fd)
                raise Conflict(
                    f"data dir {self.path.parent} is in use by {describe(holder)}"
                ) from None
        record = json.dumps(self.holder).encode()
        try:
            os.pwrite(fd, record, 0)  # write first, then cut: the record is never seen empty
            os.ftruncate(fd, len(record))
        except OSError as exc:
            os.close(fd)
            raise _storage("write", self.path, exc) from exc
        self._fd = fd

    def read_holder(self) -> dict[str, object]:
        try:
            raw = self.path.read_bytes()
            value = json.loads(raw) if raw else {}
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def describe(holder: dict[str, object]) -> str:
    """A person-readable name for a lock holder."""
    if not holder:
        return "another process (holder unknown)"
    parts = [f"pid {holder.get('pid', '?')}"]
    if holder.get("command"):
        parts.append(f"`{holder['command']}`")
    if holder.get("url"):
        parts.append(f"serving at {holder['url']}")
    if holder.get("started_at"):
        parts.append(f"since {holder['started_at']}")
    return "memory-worker " + ", ".join(parts)


def remove_tree(path: Path) -> None:
    """Delete a folder the worker made for itself (the doctor's scratch bank), never user data."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _storage("remove", path, exc) from exc
