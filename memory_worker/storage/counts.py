"""`.counts.json`: a bank's live and pinned memory counts, how many subjects they are about and
when each category's oldest memory was last stated (what retention goes by), derived from its
log, so listing banks does not replay them.

The file is written when a bank is closed, and only when RAM still says what the log says (the log
is exactly as this bank last replayed or fsynced it) and the file does not already say the same. It
records the log's stamp — size, modification time and the CRC-32 of its last 4 KiB — and is believed
only while the log still carries that stamp: any append, rewrite or hand edit of the log changes
it, and the bank is replayed instead. The inode is left out on purpose, so a data dir copied with
its times (`cp -a`, a backup restored) keeps its counts. It is never needed for correctness: a
missing, stale or unreadable file costs a replay and nothing else. The leading dot keeps it out of
the watcher's view (a derived file, like `vectors.jsonl`, is not an edit).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from memory_worker.storage import files

__all__ = ["COUNTS_FILE", "Counts", "Stamp", "read_counts", "stat_stamp", "write_counts"]

COUNTS_FILE = ".counts.json"
# 2: `subjects` (a version-1 file costs one replay); 3: `subjects` counts each person once
# whatever the case of their spellings (a version-2 count may name "Ana" and "ana" twice); 4:
# `stated`, when each category's oldest memory that may expire was last stated (a version-3 file
# cannot tell whether one of its memories has passed its TTL since).
_VERSION = 4

# (size, mtime_ns, CRC-32 of the last 4 KiB) of the log.
Stamp = tuple[int, int, int]
_TAIL = 4096


@dataclass(frozen=True, slots=True)
class Counts:
    live: int
    pinned: int
    subjects: int = 0
    # Per category, when its oldest live memory that may expire (not pinned) was last stated
    # (`LexicalIndex.oldest_stated`): a listing believes the counts only while none of them
    # can have passed its TTL, whatever the bank's retention is by then.
    stated: dict[str, int] = field(default_factory=dict)


def _open(path: Path) -> BinaryIO:
    # Nothing planted in the data dir is followed or waited on: a link or a pipe is an error here.
    return os.fdopen(files.open_regular(path, os.O_RDONLY), "rb")


def stat_stamp(path: Path) -> Stamp | None:
    """The log's stamp, or None when it is missing or unreadable."""
    try:
        with _open(path) as fh:
            stat = os.fstat(fh.fileno())
            fh.seek(max(stat.st_size - _TAIL, 0))
            tail = fh.read(_TAIL)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns, zlib.crc32(tail)


def read_counts(folder: Path, log: Path) -> Counts | None:
    """The counts `folder` holds for `log` as it stands now; None when absent, unreadable or
    written for another state of the log."""
    try:
        with _open(folder / COUNTS_FILE) as fh:
            data = json.loads(fh.read())
        stamp = stat_stamp(log)
        if (
            isinstance(data, dict)
            and data.get("version") == _VERSION
            and stamp is not None
            and data.get("log") == list(stamp)
        ):
            live, pinned, subjects = data["live"], data["pinned"], data["subjects"]
            stated = data["stated"]
            if not isinstance(stated, dict):
                return None
            numbers = (live, pinned, subjects, *stated.values())
            if (
                all(type(n) is int for n in numbers)
                and all(type(kind) is str for kind in stated)
                and 0 <= pinned <= live
                and subjects >= 0
            ):
                return Counts(live, pinned, subjects, stated)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        pass  # derived data: anything wrong with it means "replay instead"
    return None


def write_counts(folder: Path, stamp: Stamp, counts: Counts) -> None:
    """Record `counts` for the log as `stamp` says it is: a temp file renamed over the old one, not
    fsynced (a crash leaves the old file, none, or one that fails to parse, and each of those only
    costs a replay). A failure is swallowed for the same reason."""
    body = {
        "version": _VERSION,
        "log": list(stamp),
        "live": counts.live,
        "pinned": counts.pinned,
        "subjects": counts.subjects,
        "stated": counts.stated,
    }
    path = folder / COUNTS_FILE
    data = json.dumps(body).encode()
    with contextlib.suppress(OSError), _open(path) as fh:
        if fh.read() == data:
            return  # already says so: a session that changed nothing writes nothing
    # A derived file that cannot be written is simply absent: a replay reads the log instead.
    files.write_derived(path, lambda fh: fh.write(data))
