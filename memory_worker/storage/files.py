"""The only module that opens data files.

Every `OSError` becomes `StorageError` here, chained, naming the path. Appends are fsynced by the
caller's choice of `AppendLog.sync()`; whole-file writes are atomic (temp file, fsync, rename, fsync
the directory) so a reader sees the old file or the new one, never half of either.

Nothing planted in the data dir is ever followed: data files are opened with `O_NOFOLLOW`, the
folders between the data dir (`within`) and a file are checked with `lstat`, temp files get a random
name and `O_EXCL`, and a symbolic link where a file or folder of ours should be is refused as
`storage` ("a planted link"), so no write, read or delete reaches outside the data dir through one.
The data dir is locked on the directory itself (a deleted `.lock` fools nobody), and the holder
re-checks its lock before every write (`DataDirLock.verify`).

Past 500 lines on purpose: every byte the worker writes goes through here (appends, atomic
replaces, the directory lock, no-follow opens); one module keeps one set of durability and
no-link rules.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from memory_worker.core.errors import Conflict, StorageError

__all__ = [
    "MAX_OPEN_APPENDERS",
    "STOPPING",
    "AppendLog",
    "DataDirLock",
    "UnsyncedAppender",
    "UnsyncedChange",
    "append_unsynced",
    "atomic_write",
    "check_folders",
    "describe",
    "find_links",
    "fsync_dir",
    "is_link",
    "is_real_dir",
    "is_transient",
    "iter_lines",
    "iter_lines_at",
    "last_line",
    "move_to_trash",
    "open_regular",
    "planted",
    "probe_writable",
    "read_private",
    "read_text",
    "remove_file",
    "remove_leftovers",
    "remove_replacements",
    "remove_tree",
    "replace_with",
    "set_aside_tail",
    "write_derived",
]

PROBE_NAME = ".write-probe"
LOCK_NAME = ".lock"
_LOCK_POLL_S = 0.02


def _storage(action: str, path: Path | str, exc: OSError) -> StorageError:
    if exc.errno == errno.ELOOP:
        return planted(path)
    reason = exc.strerror or exc.__class__.__name__
    return StorageError(f"cannot {action} {path}: {reason}")


def planted(path: Path | str) -> StorageError:
    return StorageError(
        f"refusing to follow the symbolic link {path}: nothing inside the data dir may be a link "
        "(remove it, or put the real file or folder there)"
    )


_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def is_transient(exc: BaseException | None) -> bool:
    """A failure that says nothing about the files (the process or the system ran out of file
    descriptors or memory): retry later, never mark anything broken or damaged for it."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno in _TRANSIENT:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def is_link(path: Path) -> bool:
    """Whether `path` itself is a symbolic link (never followed)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir(path: Path) -> bool:
    """A directory, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def check_folders(folder: Path, within: Path | None) -> None:
    """Refuse (`storage`) when `folder`, or a folder between `within` (exclusive) and it, is a
    symbolic link: a write or read through it would land outside the data dir. `within` None
    checks `folder` alone."""
    current = folder
    while within is None or current != within:
        if is_link(current):
            raise planted(current)
        if within is None or current.parent == current:
            return
        current = current.parent


def find_links(root: Path) -> list[str]:
    """Every symbolic link where the worker keeps data (the data dir's entries, each bank folder's
    and its `rules/`), relative to `root`: what doctor reports as planted."""
    found: list[str] = []

    def scan(folder: Path, prefix: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if entry.is_symlink():
                found.append(f"{prefix}{entry.name}")
            elif depth > 0 and entry.is_dir(follow_symlinks=False) and entry.name != ".trash":
                scan(Path(entry.path), f"{prefix}{entry.name}/", depth - 1)

    scan(root, "", 2)
    return found


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
            missing = [p for p in (root, *root.parents) if not os.path.lexists(p)]
            # Made here: the owner's alone (memories are personal; the files inside are 0644
            # as an editor expects, so the folder is what keeps other accounts out). A folder
            # the person made keeps the mode they gave it.
            root.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                root.mkdir(mode=0o700)
            # Each folder made here durable in its parent: a power loss after the first
            # acknowledged save could otherwise take the whole data dir, synced files and all.
            for folder in reversed(missing):
                fsync_dir(folder.parent)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StorageError(f"data_dir {root} is not writable: {_why_unwritable(exc)}") from exc


def _why_unwritable(exc: OSError) -> str:
    """The OS's reason, or the file standing where a folder of the data dir's path belongs: for
    that the OS says "File exists" or "Not a directory", and names neither the file nor why."""
    if isinstance(exc, FileExistsError | NotADirectoryError) and exc.filename:
        path = Path(os.fsdecode(exc.filename))
        for candidate in (path, *path.parents):
            if candidate.exists() and not candidate.is_dir():
                return f"{candidate} is a file, not a folder"
    return exc.strerror or str(exc)


# A temp file of `atomic_write`: `.<name>.<8 hex>.tmp` (random, created with O_EXCL), or the
# `.<name>.tmp` older versions used; leftovers of a crash are reported at load and removed by the
# next write of the same file.
_TEMP = re.compile(r"^\.(?P<name>.+?)(?:\.[0-9a-f]{8})?\.tmp$")


def atomic_write(path: Path, data: bytes, *, within: Path | None = None, mode: int = 0o644) -> None:
    """Replace `path` with `data` through a synced temp file (random name, `O_EXCL`, never through
    a link) and a rename; the folders between `within` and `path` must not be links."""
    check_folders(path.parent, within)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)  # replaces a link planted at `path` itself, never its target
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _storage("write", path, exc) from exc
    remove_leftovers(path)
    _sync_landed(path.parent)


REPLACEMENT_SUFFIX = ".replacing"  # `.<name>.<random>.replacing`: a rewrite not yet in place


def replace_with(
    path: Path,
    chunks: Iterable[bytes],
    check: Callable[[Path], None],
    *,
    within: Path | None = None,
) -> None:
    """Replace `path` with the concatenation of `chunks`, crash-safely: written to a new file
    beside it (exclusive, random name), fsynced, `check`ed (it raises to abort), renamed over
    `path`, and the folder fsynced. A crash at any point leaves the old file or the new one at
    `path`, never a mix; an aborted or interrupted attempt leaves at most a temp file that
    `remove_replacements` clears. Past the rename a failed folder sync is `UnsyncedChange`. The
    folders between `within` and `path` must not be links."""
    check_folders(path.parent, within)
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


def write_derived(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Replace the derived file `path` with what `write` puts in a new temp file beside it
    (random name, `O_EXCL`: never through a link planted there, hard or symbolic), not synced
    (derived data: a crash costs a rebuild). A failure leaves the old file, or none, and no temp
    file: the next boot replays the log instead."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return
    remove_leftovers(path)


def remove_leftovers(path: Path) -> None:
    """Temp files interrupted writes of `path` left behind (`atomic_write`'s, `write_derived`'s);
    best effort, and unlink never follows a link."""
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        match = _TEMP.match(name)
        if match is not None and match["name"] == path.name:
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)


def _open_nofollow(path: Path, flags: int, within: Path | None, mode: int = 0o644) -> int:
    check_folders(path.parent, within)
    return open_regular(path, flags, mode)


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` of a data file, never through a link, and only of a regular file: a named pipe
    planted where a file of ours belongs would block the open (or the read) for good, and with
    it the bank's boot, so it is opened without blocking and refused (`OSError`)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(kind):
            raise OSError(errno.EINVAL, "not a regular file (a named pipe, socket or device)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: Path, *, within: Path | None = None, at_most: int | None = None) -> bytes:
    """The file's bytes in one read (`at_most`: no more than one byte past it, so a caller can
    tell a file too large without reading all of it). A link is refused, as are folders between
    `within` and the file that are links (`StorageError`, as for a missing file)."""
    try:
        fd = _open_nofollow(path, os.O_RDONLY, within)
        with open(fd, "rb") as handle:
            return handle.read() if at_most is None else handle.read(at_most + 1)
    except OSError as exc:
        raise _storage("read", path, exc) from exc


def read_text(path: Path, *, within: Path | None = None) -> str:
    """The file's text exactly as written: no newline translation (`\r\n` stays `\r\n`); bytes
    that are not UTF-8 read as U+FFFD. Refused as `read_bytes` refuses."""
    return read_bytes(path, within=within).decode("utf-8", errors="replace")


def read_private(path: Path) -> bytes | None:
    """The bytes of an owner-only file (a secret such as the server token): None when it is
    missing, a link, not a regular file, not ours, or readable by anyone else."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        private = stat.S_ISREG(info.st_mode) and not info.st_mode & 0o077
        if not private or info.st_uid != os.geteuid():
            return None
        return handle.read()


def remove_file(path: Path, *, within: Path | None = None) -> bool:
    """Remove `path` (a link planted there is removed itself, never its target); False when it did
    not exist. The folders between `within` and it must not be links."""
    check_folders(path.parent, within)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _storage("remove", path, exc) from exc
    _sync_landed(path.parent)
    return True


def move_to_trash(folder: Path, trash_root: Path, stem: str) -> Path:
    """Rename `folder` to `trash_root/<stem>` (suffixed when taken); nothing is ever deleted. A
    `trash_root` that is a link is refused: the bank would move outside the data dir."""
    check_folders(folder, None)
    check_folders(trash_root, None)
    try:
        trash_root.mkdir(exist_ok=True)
        check_folders(trash_root, None)  # planted between the check and the mkdir
        target = trash_root / stem
        suffix = 1
        while os.path.lexists(target):
            target = trash_root / f"{stem}-{suffix}"
            suffix += 1
        os.rename(folder, target)
    except OSError as exc:
        raise _storage("move to trash", folder, exc) from exc
    _sync_landed(trash_root, target)
    _sync_landed(folder.parent, target)
    return target


def iter_lines(path: Path, *, within: Path | None = None) -> Iterator[tuple[int, bytes, bool]]:
    """Yield `(line_number, line, complete)` for each non-empty line; `complete` is False only for a
    last line with no trailing newline (possibly torn by a crash mid-write). A link is refused."""
    for number, _, line, complete in iter_lines_at(path, within=within):
        yield number, line, complete


_UTF8_BOM = b"\xef\xbb\xbf"


def iter_lines_at(
    path: Path, *, within: Path | None = None
) -> Iterator[tuple[int, int, bytes, bool]]:
    """`iter_lines` with each line's byte offset: `(line_number, offset, line, complete)`."""
    try:
        handle = open(_open_nofollow(path, os.O_RDONLY, within), "rb")  # noqa: SIM115
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _storage("read", path, exc) from exc
    offset = 0
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                complete = line.endswith(b"\n")
                stripped = line.strip()
                if number == 1:
                    # The byte order mark an editor (Windows Notepad) writes first: glued onto
                    # the first line, it made that record unreadable.
                    stripped = stripped.removeprefix(_UTF8_BOM).strip()
                if stripped:
                    yield number, offset, stripped, complete
                offset += len(line)
        except OSError as exc:
            raise _storage("read", path, exc) from exc


def last_line(path: Path, *, within: Path | None = None) -> tuple[bytes, bool] | None:
    """The file's last non-empty line (stripped) and whether it ends with a newline, read from
    the end (a boot checks every log's tail, so this must not read the whole file); None when
    the file is missing or blank."""
    try:
        fd = _open_nofollow(path, os.O_RDONLY, within)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _storage("read", path, exc) from exc
    try:
        end = os.fstat(fd).st_size
        tail = b""
        while end > 0:
            start = max(0, end - 65536)
            tail = os.pread(fd, end - start, start) + tail
            end = start
            body = tail.rstrip()
            if not body:
                continue
            newline = body.rfind(b"\n")
            if newline >= 0 or end == 0:
                return body[newline + 1 :].strip(), tail.endswith(b"\n")
        return None
    except OSError as exc:
        raise _storage("read", path, exc) from exc
    finally:
        os.close(fd)


def set_aside_tail(path: Path, offset: int, keep: Path, *, within: Path | None = None) -> int:
    """Move the bytes of `path` from `offset` to its end onto the end of `keep` (fsynced first,
    so a crash between the two steps only copies them twice), then cut `path` back to `offset`
    (fsynced). Returns how many bytes moved."""
    try:
        fd = _open_nofollow(path, os.O_RDWR, within)
    except OSError as exc:
        raise _storage("open", path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        moved = os.pread(fd, size - offset, offset) if size > offset else b""
        if moved:
            kept = _open_nofollow(keep, os.O_WRONLY | os.O_APPEND | os.O_CREAT, within)
            try:
                _write_all(kept, moved if moved.endswith(b"\n") else moved + b"\n")
                os.fsync(kept)
            finally:
                os.close(kept)
            fsync_dir(keep.parent)
            os.ftruncate(fd, offset)
            os.fsync(fd)
        return len(moved)
    except OSError as exc:
        raise _storage("set aside the interrupted end of", path, exc) from exc
    finally:
        os.close(fd)


def append_unsynced(path: Path, data: bytes, *, within: Path | None = None) -> None:
    """Append derived data (rebuildable, so not fsynced), starting on a line of its own. A last
    line with no newline is a write a crash cut short (`kill -9` can stop one between two
    pages): it is cut off first, as rebuildable as the rest. Kept as a line of its own, it was
    damage every later boot logged and the doctor reported, for good."""
    try:
        fd = _open_nofollow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, within)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.ftruncate(fd, _after_last_newline(fd, size))
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _storage("append to", path, exc) from exc


# How many `UnsyncedAppender` files stay open in the process at once: a server holding thousands
# of banks must not hold a descriptor for each (sockets and the log need them too); past this,
# the least recently written one is closed and reopens through the checks when next written.
MAX_OPEN_APPENDERS = 64
_open_appenders: OrderedDict[UnsyncedAppender, None] = OrderedDict()
_appenders_lock = threading.RLock()  # held across an append: no file is closed mid-write


class UnsyncedAppender:
    """`append_unsynced` on a file kept open: the link checks and the open once, then each append
    is one `lstat` and one `write`. The `lstat` says the path still names the open file (one
    replaced, removed or turned into a link is opened again through the checks, never written
    through the old inode) and its size: a size other than this appender left (another writer, a
    cut by hand) has its last byte read again, so a line always starts on a line of its own. For
    a sidecar appended on every read (`access.jsonl`: a recall's open, folder checks, fstat, pread
    and close were ~10% of it). A failed write closes the file. At most `MAX_OPEN_APPENDERS`
    are open in the process; the least recently written is closed first."""

    def __init__(self, path: Path, *, within: Path | None = None) -> None:
        self.path = path
        self.within = within
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._size = 0  # the file's size after this appender's last write

    def _open(self) -> tuple[int, bool]:
        """The open file and whether the next line needs a newline before it."""
        fd = self._fd
        if fd is not None:
            try:
                now = os.lstat(self.path)
            except OSError:
                now = None
            if now is not None and _identity(now) == self._identity:
                if now.st_size == self._size:
                    return fd, False
                self._size = now.st_size
                return fd, bool(now.st_size) and os.pread(fd, 1, now.st_size - 1) != b"\n"
            self.close()  # replaced or removed behind our back: follow the path, not the inode
        fd = _open_nofollow(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, self.within)
        try:
            info = os.fstat(fd)
            size = info.st_size
            needs_newline = bool(size) and os.pread(fd, 1, size - 1) != b"\n"
        except OSError:
            os.close(fd)
            raise
        self._fd, self._identity, self._size = fd, _identity(info), size
        self._keep_open()
        return fd, needs_newline

    def _keep_open(self) -> None:
        """Count this file among the open ones, closing the least recently written past the cap."""
        with _appenders_lock:
            _open_appenders[self] = None
            _open_appenders.move_to_end(self)
            while len(_open_appenders) > MAX_OPEN_APPENDERS:
                oldest, _ = _open_appenders.popitem(last=False)
                oldest._close_fd()

    def append(self, data: bytes) -> None:
        """Append `data` (ending with a newline), starting on a line of its own; unsynced."""
        with _appenders_lock:
            try:
                fd, needs_newline = self._open()
                if needs_newline:
                    data = b"\n" + data
                _write_all(fd, data)
                self._size += len(data)
                _open_appenders.move_to_end(self)
            except OSError as exc:
                self.close()
                raise _storage("append to", self.path, exc) from exc

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        with _appenders_lock:
            _open_appenders.pop(self, None)
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._identity = None


def _after_last_newline(fd: int, size: int, chunk: int = 65_536) -> int:
    """The offset just past the last newline among the file's first `size` bytes (0: none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class AppendLog:
    """An append-only file: `write()` adds bytes at the end, `sync()` makes them durable, and
    `truncate()` cuts back to the durable end after a failure, so a later write is never glued
    onto a torn or unsynced tail. Reopened automatically when the file was replaced by hand; never
    opened through a link (`within`: the data dir, down from which no folder may be a link).

    Two sizes are kept: `size`/`synced_size`, what this log accounts for (the file as opened plus
    what it appended; the bank's stamp tells a hand edit by them), and where those end in the
    file, which a hand append in place moves. A failed write or sync cuts back to the file's
    own end, so a line a person appended meanwhile stays (cut back to our count, it was lost)."""

    def __init__(self, path: Path, *, within: Path | None = None) -> None:
        self.path = path
        self.within = within
        self._fd: int | None = None
        self._inode: int | None = None
        # (size, end): what we account for and the file's real size after our last step, as one
        # value, so a sync in a thread reads a consistent pair while the loop writes on.
        self._tail = (0, 0)
        self.synced_size = 0
        self._synced_end = 0  # where the durable part ends in the file: what `truncate` keeps
        self._needs_newline = False

    @property
    def size(self) -> int:
        return self._tail[0]

    def _open(self) -> int:
        if self._fd is not None:
            try:
                info: os.stat_result | None = os.lstat(self.path)
            except FileNotFoundError:
                info = None
            if info is not None and info.st_ino == self._inode:
                size, end = self._tail
                if info.st_size != end:
                    # Rewritten in place by someone else (an editor that saves without a rename,
                    # an `echo >>`): an edited last line may have lost its newline, and the next
                    # line glued onto it made both corrupt. `size` stays what we appended: the
                    # bank's stamp tells a hand edit by it.
                    self._needs_newline = not self._ends_with_newline(self._fd, info.st_size)
                    if self.synced_size == size:  # nothing of ours unsynced: all of it stays
                        self._synced_end = info.st_size
                    self._tail = (size, info.st_size)
                return self._fd
            self.close()  # replaced or removed behind our back: follow the path, not the inode
        try:
            fd = _open_nofollow(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, self.within)
            stat_ = os.fstat(fd)
            size = stat_.st_size
        except OSError as exc:
            raise _storage("open", self.path, exc) from exc
        try:
            if size == 0:
                fsync_dir(self.path.parent)
            needs_newline = size > 0 and not self._ends_with_newline(fd, size)
        except StorageError:
            # Not kept open: the next open tries again, so no line is ever acknowledged in a file
            # whose directory entry may not survive a power loss, or glued onto a torn line.
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fd, self._inode = fd, stat_.st_ino
        self._tail = (size, size)
        self.synced_size = self._synced_end = size
        self._needs_newline = needs_newline
        return fd

    def _ends_with_newline(self, fd: int, size: int) -> bool:
        if size <= 0:
            return True  # an empty file: nothing to end
        try:
            return os.pread(fd, 1, size - 1) == b"\n"
        except OSError as exc:
            raise _storage("read", self.path, exc) from exc

    def write(self, data: bytes) -> tuple[int, int]:
        """Append `data` (which ends with a newline); returns where it went, the inode of the file
        and the offset its bytes end at (see `lost`). On failure the file is cut back to its size
        before this call and `StorageError` is raised."""
        fd = self._open()
        if self._needs_newline:
            data = b"\n" + data  # a torn last line stays a line of its own
        size, end = self._tail
        try:
            _write_all(fd, data)
        except OSError as exc:
            self._cut(fd, end)  # nothing of this write stays; what is before it, ours or not, does
            raise _storage("append to", self.path, exc) from exc
        self._needs_newline = False
        self._tail = (size + len(data), end + len(data))
        assert self._inode is not None  # set by `_open`
        return self._inode, end + len(data)

    def lost(self, written: Sequence[tuple[int, int]]) -> list[bool]:
        """For each place `write` put bytes at, whether they are surely gone from the file the
        path names: the file was replaced (a rename, as `git checkout` or an editor's save
        does) or removed, or cut short of them (an editor's save in place, `truncate`)."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return [True] * len(written)
        except OSError as exc:
            raise _storage("stat", self.path, exc) from exc
        return [inode != info.st_ino or info.st_size < end for inode, end in written]

    def sync(self) -> int:
        """fsync what was written; returns the size now durable."""
        size, end = self._tail
        if self._fd is None or self.synced_size >= size:
            return self.synced_size
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise _storage("sync", self.path, exc) from exc
        self.synced_size, self._synced_end = size, end
        return size

    def truncate(self) -> None:
        """Cut the file back to its durable end (after a failed sync): what this log wrote
        since goes, a hand append made before it stays."""
        if self._fd is None:
            return
        self._cut(self._fd, self._synced_end)
        self._tail = (self.synced_size, self._synced_end)

    def _cut(self, fd: int, end: int) -> None:
        try:
            os.ftruncate(fd, end)
        except OSError as exc:
            raise _storage("truncate", self.path, exc) from exc
        # Best effort: when the disk refuses this sync too, the next successful commit's fsync
        # persists the cut along with its own line.
        with contextlib.suppress(OSError):
            os.fsync(fd)
        self._tail = (self._tail[0], end)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._inode = None


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


STOPPING = "stopping"  # a holder's kind once it is closing: waited for, like a CLI call


class DataDirLock:
    """One writer per data dir: an exclusive `flock` on the data dir itself (a deleted or replaced
    `.lock` cannot fool it) and on `<root>/.lock` (what versions before it lock), which also
    records who holds it so a refused process can name the holder.

    `verify()` (before every write) refuses once the lock is no longer what was taken: `.lock`
    deleted or replaced, or the data dir itself moved or replaced. Another process could then be
    writing the same files, so this one stops writing until it is restarted."""

    def __init__(self, root: Path, holder: dict[str, object]) -> None:
        self.root = root
        self.path = root / LOCK_NAME
        self.holder = holder
        self._fd: int | None = None
        self._dir_fd: int | None = None
        self._ids: tuple[tuple[int, int], tuple[int, int]] | None = None
        self._lost: str | None = None
        self._released = False

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lock, waiting up to `wait_s` for each short-lived CLI holder ahead of this
        one; a long-running holder (a served worker) is refused at once. The wait starts over when
        the holder changes: sixteen CLI calls at once queue behind each other, and the last must
        not be refused because fifteen quick ones (slow on a loaded machine) added up to more than
        one long one."""
        try:
            dir_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _storage("open", self.root, exc) from exc
        fd = -1
        try:
            try:
                fd = os.open(
                    self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
                )
            except OSError as exc:
                raise _storage("open", self.path, exc) from exc
            self._wait_for(dir_fd, self.root, wait_s)
            self._wait_for(fd, self.path, wait_s)  # what a worker of an older version locks
            record = json.dumps(self.holder).encode()
            try:
                os.pwrite(fd, record, 0)  # write first, then cut: the record is never seen empty
                os.ftruncate(fd, len(record))
            except OSError as exc:
                raise _storage("write", self.path, exc) from exc
        except BaseException:
            if fd >= 0:
                os.close(fd)
            os.close(dir_fd)  # closing drops the flocks
            raise
        self._fd, self._dir_fd = fd, dir_fd
        self._ids = (_identity(os.fstat(dir_fd)), _identity(os.fstat(fd)))
        self._lost = None

    def _wait_for(self, fd: int, what: Path, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        seen: dict[str, object] = {}
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise _storage("lock", what, exc) from exc
            holder = self.read_holder()
            if holder and holder != seen:  # the queue moved: this holder gets its own wait
                if seen:
                    deadline = time.monotonic() + wait_s
                seen = holder
            # An empty record is a holder still writing its name (or just releasing): wait. So
            # is a server that is stopping (it no longer names a URL to forward to).
            short_lived = not holder or holder.get("kind") in ("cli", STOPPING)
            if short_lived and time.monotonic() < deadline:
                time.sleep(_LOCK_POLL_S)
                continue
            raise Conflict(f"data dir {self.root} is in use by {describe(holder)}") from None

    def verify(self) -> None:
        """Raise `StorageError` when this process no longer holds what it locked (see the class).
        Two `lstat`s; once lost, the lock stays lost."""
        if self._lost is None and self._ids is not None:
            try:
                now = (_identity(os.stat(self.root)), _identity(os.lstat(self.path)))
            except OSError as exc:
                now = None
                reason = f"{exc.filename or self.path}: {exc.strerror or exc}"
            else:
                reason = f"{self.path} or {self.root} was replaced"
            if now != self._ids:
                self._lost = (
                    f"the data dir lock is gone ({reason}); another process may be writing this "
                    "data dir, so this one refuses writes until it is restarted"
                )
        if self._lost is not None:
            raise StorageError(self._lost)
        if self._released:
            # A call still holding a bank of a closed store (the data dir moved under it, or the
            # worker is stopping): the lock is let go, so writing on would land unguarded in a
            # dir this process no longer serves, acknowledged but invisible where it now serves.
            raise StorageError(
                f"the data dir {self.root} was closed (it moved, or the worker is stopping); retry"
            )

    def rewrite_holder(self, holder: dict[str, object]) -> None:
        """Replace the record of who holds the lock, still holding it (a server that stops
        naming its URL before it lets its port go). Nothing when the lock is not this process's
        any more. Raises `StorageError`."""
        if self._fd is None or self._lost is not None:
            return
        record = json.dumps(holder).encode()
        try:
            os.pwrite(self._fd, record, 0)  # as at acquire: never seen empty
            os.ftruncate(self._fd, len(record))
        except OSError as exc:
            raise _storage("write", self.path, exc) from exc
        self.holder = holder

    def read_holder(self) -> dict[str, object]:
        try:
            fd = open_regular(self.path, os.O_RDONLY)
            with open(fd, "rb") as handle:
                raw = handle.read(64 * 1024)
            value = json.loads(raw) if raw else {}
        except (OSError, ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}

    def release(self) -> None:
        self._released = self._ids is not None  # `verify` refuses every write from now on
        if self._fd is not None:
            if self._lost is None:  # a `.lock` that is not ours any more is left alone
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


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
