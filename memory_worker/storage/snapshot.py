"""`.index.npz` and `.records.npz`: derived snapshots of a bank's costly boot work.

`.index.npz` holds the analyzer's terms of every live memory (`search.index.Analysis`), so a
restart does not re-analyse every text.

It is never needed for correctness and never trusted on its word. It is used only when all of these
still hold, else ignored and the index is rebuilt from the log as if it were absent:
- the log's length and CRC-32 are the ones it was written for (any rewrite or hand edit of
  `memories.jsonl` changes them), or the log's first bytes have that length and CRC-32 and end a
  line (it grew by appends since), and the log did not change while it was being replayed;
- the analyzer is the same code (a digest of the modules that turn a memory into terms);
- its arrays are consistent (sizes, term ids within the vocabulary) and it lists exactly the live
  ids the replay produced, in replay order; for a prefix, exactly those with no line past it
  (`storage.bank` analyses the others again, and uses a prefix only for a log that replayed
  without damage and whose lines past it do not finish a write begun before it).
It is written when a bank of at least `SNAPSHOT_MIN_LIVE` live memories is closed and the one on
disk (if any) is not for the log as it stands, unless it is for a prefix of that same log file
that the log outgrew only a little (`tail_is_short`): a one-shot save of one line must not
rewrite megabytes. A temp file renamed into place, not fsynced (a crash leaves an old, missing or
unreadable one: each costs one rebuild). numpy reads it with `allow_pickle=False`: plain arrays,
no code. The leading dot keeps it out of the watcher's view.

`.records.npz` spares a boot the replay's per-line work: for each id (the ids themselves, in
replay order), where the line that wins replay lies in the log (byte start and end), and a
stable 64-bit key of its normalized text (`text_key`, the exact-text map's key). A boot whose log
bytes have exactly the length and CRC-32 it was written for validates only those lines into
records (a short-lived process's, only those it reads: `log.LazyRecords`); one whose first
bytes do (`records_prefix`) does so for them and replays the lines past them with replay's
checks (`log.tail_records`); any other log, or a damaged line past the prefix, is replayed line
by line with its checksums, batches and damage report, as if the file were absent. It is written
only for a log that replayed without damage and has changed since only by this process's own
durable writes, and only when a scan of that log finds exactly the ids and revisions RAM holds
(and, like `.index.npz`, not while the one on disk is for a short-outgrown prefix); it is tied to
the code of the line format and the record model (`replay_digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import unicodedata
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import Stemmer  # type: ignore[import-not-found]  # PyStemmer (the tokenizer's, `core.text`)

from memory_worker.core import capacity, categories, confidence, models, subjects, temporal, text
from memory_worker.storage import files
from memory_worker.storage import log as log_format

if TYPE_CHECKING:  # (imported where a snapshot's terms are read: a one-shot save reads none)
    from memory_worker.search.index import Analysis

__all__ = [
    "DERIVED_FILES",
    "RECORDS_FILE",
    "RECORD_COLUMNS",
    "SNAPSHOT_FILE",
    "SNAPSHOT_MIN_LIVE",
    "TAIL_MAX",
    "TAIL_SHARE",
    "RecordSpans",
    "log_identity",
    "read_records",
    "records_prefix",
    "snapshot_prefix",
    "snapshot_size",
    "tail_is_short",
    "text_key",
    "write_records",
    "write_snapshot",
]

SNAPSHOT_FILE = ".index.npz"
RECORDS_FILE = ".records.npz"
# What a bank folder holds that is derived from its texts (the index's terms, the records' text
# keys): an erasure removes them whole.
DERIVED_FILES = (SNAPSHOT_FILE, RECORDS_FILE)
# Below this a rebuild takes tens of milliseconds: not worth a file.
SNAPSHOT_MIN_LIVE = 2000
# A snapshot for a prefix of the log is kept at close while the lines past it are few: at most
# this share of the prefix's bytes and this many bytes (`tail_is_short`).
TAIL_SHARE = 0.01
TAIL_MAX = 256 * 1024
_VERSION = 2  # 2: the told spans (`Analysis.told_start`, `told_end`)
_CHUNK = 1 << 20
_ARRAYS = (
    "pair_counts", "pair_terms", "pair_tfs", "lengths", "entity_counts", "entity_terms", "dated",
    "told_start", "told_end",
)  # fmt: skip


# 2: the ids in replay order (a short-lived boot keeps each line unread until it is asked for)
_RECORDS_VERSION = 2


@dataclass(frozen=True, slots=True)
class RecordSpans:
    """What `.records.npz` holds: per record in replay order, its winning line's byte span in
    the log and its `text_key`."""

    starts: np.ndarray
    ends: np.ndarray
    text_keys: np.ndarray
    # Whether every line was in the form the worker stores (`log.RESTORED_FORM`) when written:
    # then a boot need not read their tags and categories again (`log.as_stored`).
    as_stored: bool = False
    # The ids of those records, in the same order (each its line's `id`): what a short-lived
    # boot keys its lines by before any of them is validated (`log.LazyRecords`).
    ids: tuple[str, ...] = ()
    # Per record, what a one-shot save reads of those it does not validate (`RECORD_COLUMNS`),
    # by name: each an array in the same order.
    columns: Mapping[str, np.ndarray] = field(default_factory=dict)
    subjects: tuple[str, ...] = ()  # the subjects' keys (`subject_key`) the `subject` column names


# The records' columns `.records.npz` holds, with their dtypes, so a one-shot save reads of the
# records it does not validate what it needs: a cap's eviction order (`core.capacity`: whether
# a cap may take it, when it was last stated), and the counts close leaves (`storage.counts`:
# live, pinned, its category's code, its subject's row in `RecordSpans.subjects` or -1).
RECORD_COLUMNS = {
    "evictable": np.bool_,
    "stated": np.int64,
    "category": np.int8,
    "live": np.bool_,
    "pinned": np.bool_,
    "subject": np.int32,
}


def text_key(normalized: str) -> int:
    """A stable 64-bit key of a normalized text: the exact-text map's key, the same in every
    process (Python's `hash` of a str is salted per process, so it cannot be kept on disk)."""
    digest = hashlib.blake2b(normalized.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def _unicode_tables() -> bytes:
    """What of Python itself both digests depend on: `str.lower`, NFKC and `\\W` follow its
    Unicode tables, which change with its minor version (a text's key and terms with them)."""
    return f"/{sys.version_info[0]}.{sys.version_info[1]}/{unicodedata.unidata_version}".encode()


def _pydantic_core_version() -> str:
    """pydantic-core's version, as pydantic read it at import (`pydantic.version`): asking the
    package's metadata parsed its METADATA file with the email parser, ~2-10 ms of every
    one-shot boot that uses `.records.npz`. The same string, so the same digest."""
    from pydantic import version

    found = getattr(version, "__pydantic_core_version__", None)
    if isinstance(found, str):
        return found
    from importlib import metadata  # (the fallback only: importing it is ~9 ms of a one-shot)

    return metadata.version("pydantic-core")


@cache
def replay_digest() -> str:
    """What a records snapshot's spans depend on: the source of the line format and the record
    model, and pydantic-core's version (it validates the lines); and what its columns do (whom
    `subject_key` takes for one person, the category codes, which memories a cap may take):
    columns another version wrote are not read as this one's counts and first to go. "" when
    unreadable."""
    digest = hashlib.sha256(_pydantic_core_version().encode() + _unicode_tables())
    for module in (models, confidence, log_format, text, subjects, categories, capacity):
        try:
            digest.update(Path(str(module.__file__)).read_bytes())
        except (OSError, TypeError):
            return ""
    digest.update(b"records/%d" % _RECORDS_VERSION)
    return digest.hexdigest()[:16]


def _stemmer_version() -> str:
    """PyStemmer's version, as its loaded module says it (`Stemmer.version()`): asking the
    package's metadata imported the email parser and parsed its METADATA file, ~3-4 ms of a
    one-shot save's close. The same string, so the same digest."""
    found = getattr(Stemmer, "version", None)
    if callable(found) and isinstance(version := found(), str):
        return version
    from importlib import metadata  # (the fallback only: importing it is ~9 ms of a one-shot)

    try:
        return metadata.version("PyStemmer")
    except metadata.PackageNotFoundError:
        return ""


@cache
def analyzer_digest() -> str:
    """What the snapshot's terms depend on: the source of the modules that make them, and the
    stemmer library's version. Unreadable source (a frozen build) → "", and no snapshot is used."""
    digest = hashlib.sha256(_stemmer_version().encode() + _unicode_tables())
    for source in (text.__file__, temporal.__file__, *map(_source_of, _SEARCH_MODULES)):
        try:
            digest.update(Path(str(source)).read_bytes())
        except (OSError, TypeError):
            return ""
    return digest.hexdigest()[:16]


# The search modules whose source the analyzer digest names, read without importing them: a
# one-shot save's close checks the snapshot on disk by its header (`snapshot_size`) and never
# builds the index they make.
_SEARCH_MODULES = ("memory_worker.search.ranking", "memory_worker.search.index")


def _source_of(name: str) -> str | None:
    """The file the module `name` is (or would be) loaded from: its `__file__` once imported."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    spec = importlib.util.find_spec(name)
    return None if spec is None else spec.origin


def _open(path: Path) -> BinaryIO:
    # Nothing planted in the data dir is followed or waited on: a link or a pipe is an error here.
    return os.fdopen(files.open_regular(path, os.O_RDONLY), "rb")


def log_identity(log: Path) -> tuple[int, int] | None:
    """(length, CRC-32) of the log's bytes; None when it cannot be read."""
    crc, size = 0, 0
    try:
        with _open(log) as fh:
            while chunk := fh.read(_CHUNK):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
    except OSError:
        return None
    return size, crc


def _made_for(
    meta: dict[str, object],
    version: int,
    code: tuple[str, str],
    identity: tuple[int, int] | None,
) -> bool:
    """Whether a snapshot's `meta` says it was made by this format `version` and this code (its
    digest under the key `code[0]`) for the log of `identity` (length, CRC-32)."""
    return (
        identity is not None
        and meta.get("version") == version
        and meta.get(code[0]) == code[1]
        and [meta.get("log_size"), meta.get("log_crc")] == list(identity)
    )


@contextlib.contextmanager
def _archive(path: Path) -> Iterator[tuple[dict[str, Any], Any]]:
    """A snapshot archive's `meta` and its arrays, read through our own handle (numpy leaves its
    own open when the file is not a valid archive); any exception means the file is unusable."""
    with _open(path) as fh, np.load(fh, allow_pickle=False) as data:
        yield json.loads(bytes(data["meta"]).decode()), data


def snapshot_prefix(
    folder: Path, data: bytes, crc: int | None = None
) -> tuple[list[str], Analysis, int] | None:
    """What `.index.npz` holds when it was written for a prefix of the log `data` that ends at a
    line boundary (the log has grown by appends since, or is exactly that prefix): the live ids
    of that prefix's replay in replay order, their analysis, and the prefix's length. None
    unless it is for that prefix's exact bytes, by the same analyzer, and consistent; which of
    its ids still hold those texts is the caller's to check (the lines past the prefix). `crc`:
    the CRC-32 of the whole of `data` when the caller has it (a boot that read the records
    snapshot did), so a snapshot for all of it is checked without a second pass over the log."""
    path = folder / SNAPSHOT_FILE
    digest = analyzer_digest()
    if not digest or not path.is_file():
        return None
    try:
        with _archive(path) as (meta, data_):
            size = meta.get("log_size")
            if type(size) is not int or not 0 < size <= len(data) or data[size - 1] != ord("\n"):
                return None
            if crc is None or size != len(data):
                crc = zlib.crc32(memoryview(data)[:size])
            identity = (size, crc)
            count = meta.get("count")
            if not _made_for(meta, _VERSION, ("analyzer", digest), identity):
                return None
            ids = bytes(data_["ids"]).decode().split("\n") if count else []
            if type(count) is not int or len(ids) != count:
                return None
            vocab = bytes(data_["vocab"]).decode().split("\n") if data_["vocab"].size else []
            arrays = {name: np.asarray(data_[name]) for name in _ARRAYS}
    except Exception:  # derived data: anything wrong with it means "rebuild"
        return None
    from memory_worker.search.index import Analysis

    analysis = Analysis(vocab=vocab, **arrays)
    return (ids, analysis, size) if _consistent(analysis, len(ids)) else None


def snapshot_size(folder: Path, data: bytes, identity: tuple[int, int]) -> int | None:
    """The length of the prefix of the log `data` (whose (length, CRC-32) is `identity`) that
    `.index.npz` says it was written for, when its header says so truly: this format and
    analyzer, a prefix ending a line, those bytes' CRC-32. Its arrays are not read (what
    `snapshot_prefix` checks besides): a process that never needs the index asks only whether
    the file on disk is for this log. None otherwise."""
    path = folder / SNAPSHOT_FILE
    digest = analyzer_digest()
    found = _prefix_of(path, data) if digest else None
    if found is None:
        return None
    meta, size = found
    crc = identity[1] if size == identity[0] else zlib.crc32(memoryview(data)[:size])
    return size if _made_for(meta, _VERSION, ("analyzer", digest), (size, crc)) else None


def _prefix_of(path: Path, data: bytes) -> tuple[dict[str, Any], int] | None:
    """The header of the derived archive at `path` and the length of the log prefix it says it
    was written for, when that is a prefix of `data` ending a line; None otherwise (missing,
    unreadable: derived data, so anything wrong with it means "not this log's")."""
    if not path.is_file():
        return None
    try:
        with _archive(path) as (meta, _):
            size = meta.get("log_size")
    except Exception:
        return None
    if type(size) is not int or not 0 < size <= len(data) or data[size - 1] != ord("\n"):
        return None
    return meta, size


def tail_is_short(prefix: int, total: int) -> bool:
    """Whether a snapshot written for the first `prefix` bytes of a log now `total` bytes long
    is still worth keeping: the lines past it are analysed again at every boot (tens of
    microseconds each), while writing the snapshot again costs a closing one-shot process tens
    of milliseconds at 10,000 memories. Kept while the tail is at most `TAIL_SHARE` of the
    prefix and at most `TAIL_MAX` bytes."""
    tail = total - prefix
    return 0 <= tail <= min(prefix * TAIL_SHARE, TAIL_MAX)


def _consistent(a: Analysis, n: int) -> bool:
    ints = (a.pair_counts, a.pair_terms, a.pair_tfs, a.lengths, a.entity_counts, a.entity_terms)
    if any(x.ndim != 1 or x.dtype != np.int64 for x in ints) or a.dated.dtype != np.bool_:
        return False
    if any(x.ndim != 1 or x.dtype != np.int32 for x in (a.told_start, a.told_end)):
        return False
    if not (a.pair_counts.size == a.lengths.size == a.entity_counts.size == a.dated.size == n):
        return False
    if not a.told_start.size == a.told_end.size == n:
        return False
    if int(a.pair_counts.sum()) != a.pair_terms.size or a.pair_terms.size != a.pair_tfs.size:
        return False
    if int(a.entity_counts.sum()) != a.entity_terms.size:
        return False
    if any(x.size and int(x.min()) < 0 for x in ints) or (a.pair_tfs.size and a.pair_tfs.min() < 1):
        return False
    vocab = len(a.vocab)
    return all(not x.size or int(x.max()) < vocab for x in (a.pair_terms, a.entity_terms))


def write_snapshot(
    folder: Path, identity: tuple[int, int], live_ids: list[str], analysis: Analysis
) -> None:
    """Leave `analysis` for the log of `identity` (see the module docstring); a failure, or ids or
    terms the line-joined format cannot hold, leaves no snapshot, which only costs a rebuild."""
    digest = analyzer_digest()
    if not digest or any("\n" in x for x in live_ids) or any("\n" in x for x in analysis.vocab):
        return
    meta = {"version": _VERSION, "analyzer": digest, "count": len(live_ids)}
    _write_archive(
        folder / SNAPSHOT_FILE,
        meta,
        identity,
        ids=np.frombuffer("\n".join(live_ids).encode(), np.uint8),
        vocab=np.frombuffer("\n".join(analysis.vocab).encode(), np.uint8),
        **{name: getattr(analysis, name) for name in _ARRAYS},
    )


def _write_archive(
    path: Path, meta: dict[str, object], identity: tuple[int, int], **arrays: Any
) -> None:
    """Write a snapshot archive: `meta` (with the log's identity added) and `arrays`, through a
    temp file renamed into place (never through a planted link); a failure leaves none."""
    meta = {**meta, "log_size": identity[0], "log_crc": identity[1]}
    header = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    files.write_derived(path, lambda fh: np.savez(fh, meta=header, **arrays))


def read_records(folder: Path, identity: tuple[int, int]) -> RecordSpans | None:
    """The spans `.records.npz` holds for the log whose bytes have `identity` (length, CRC-32);
    None when it is missing, unreadable, for another log or other code, or inconsistent."""
    path = folder / RECORDS_FILE
    digest = replay_digest()
    if not digest or not path.is_file():
        return None
    try:
        with _archive(path) as (meta, data):
            if not _made_for(meta, _RECORDS_VERSION, ("code", digest), identity):
                return None
            n = meta.get("count")
            joined = bytes(data["ids"]).decode("utf-8", "surrogatepass")
            ids = tuple(joined.split("\n")) if n else ()
            named = bytes(data["subjects"]).decode("utf-8", "surrogatepass")
            subjects = tuple(named.split("\n")) if meta.get("subjects") else ()
            spans = RecordSpans(
                np.asarray(data["starts"]),
                np.asarray(data["ends"]),
                np.asarray(data["keys"]),
                meta.get("as_stored") is True,
                ids,
                _columns_of(np.asarray(data["columns"])),
                subjects,
            )
    except Exception:  # derived data: anything wrong with it means "replay"
        return None
    if type(n) is not int or len(spans.ids) != n or len(set(spans.ids)) != n:
        return None
    ints = (spans.starts, spans.ends)
    if any(x.ndim != 1 or x.dtype != np.int64 or x.size != n for x in ints):
        return None
    if spans.text_keys.ndim != 1 or spans.text_keys.dtype != np.uint64 or spans.text_keys.size != n:
        return None
    if n and (spans.starts.min() < 0 or (spans.ends <= spans.starts).any()):
        return None
    if n and int(spans.ends.max()) > identity[0]:
        return None
    if not _columns_consistent(spans, n, meta.get("subjects")):
        return None
    return spans


# The columns as `.records.npz` holds them: one array of records (one header to parse at a
# boot, where six arrays cost six).
_COLUMNS = np.dtype([(name, kind) for name, kind in RECORD_COLUMNS.items()])


def _columns_of(table: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of the records file's table, by name; none unless it is of `_COLUMNS`."""
    if table.ndim != 1 or table.dtype != _COLUMNS:
        return {}
    return {name: table[name] for name in RECORD_COLUMNS}


def _columns_consistent(spans: RecordSpans, n: int, subjects: object) -> bool:
    """Whether the records file's columns are `RECORD_COLUMNS`, `n` long each, and its
    `subject` column names only its `subjects` (as many as its header says, each once)."""
    for name, kind in RECORD_COLUMNS.items():
        x = spans.columns.get(name)
        if x is None or x.ndim != 1 or x.dtype != kind or x.size != n:
            return False
    named = spans.subjects
    if subjects != len(named) or len(set(named)) != len(named):
        return False
    rows = spans.columns["subject"]
    return not n or -1 <= int(rows.min()) <= int(rows.max()) < len(named)


def _table(columns: Mapping[str, Sequence[int]], n: int) -> np.ndarray:
    """`columns` (by name, `n` each) as the one array `.records.npz` holds (`_COLUMNS`)."""
    table = np.zeros(n, dtype=_COLUMNS)
    for name in RECORD_COLUMNS:
        table[name] = columns[name]
    return table


def records_prefix(folder: Path, data: bytes) -> tuple[RecordSpans, int] | None:
    """The spans `.records.npz` holds when it was written for a prefix of the log `data` that
    ends at a line boundary (the log has grown by appends since), and that prefix's length."""
    found = _prefix_of(folder / RECORDS_FILE, data)
    if found is None:
        return None
    size = found[1]
    spans = read_records(folder, (size, zlib.crc32(memoryview(data)[:size])))
    return None if spans is None else (spans, size)


def write_records(
    folder: Path,
    identity: tuple[int, int],
    spans: list[tuple[int, int]],
    keys: list[int],
    ids: list[str],
    columns: Mapping[str, Sequence[int]],
    subjects: Sequence[str],
    *,
    as_stored: bool = False,
) -> None:
    """Leave `.records.npz` for the log of `identity` (see the module docstring); a failure, or
    ids the line-joined format cannot hold, leaves none, which only costs a replay. `ids`: each
    span's record's id, `columns` its `RECORD_COLUMNS` by name, `subjects` the keys the `subject`
    column names. `as_stored`: every line is in the stored form."""
    digest = replay_digest()
    sizes = {len(spans), len(keys), len(ids), *(len(columns[name]) for name in RECORD_COLUMNS)}
    if not digest or len(sizes) != 1 or any("\n" in x for x in (*ids, *subjects)):
        return
    meta = {
        "version": _RECORDS_VERSION,
        "code": digest,
        "count": len(spans),
        "as_stored": as_stored,
        "subjects": len(subjects),
    }
    bounds = np.array(spans, dtype=np.int64).reshape(-1, 2)
    _write_archive(
        folder / RECORDS_FILE,
        meta,
        identity,
        starts=np.ascontiguousarray(bounds[:, 0]),
        ends=np.ascontiguousarray(bounds[:, 1]),
        keys=np.array(keys, dtype=np.uint64),
        ids=np.frombuffer("\n".join(ids).encode("utf-8", "surrogatepass"), np.uint8),
        subjects=np.frombuffer("\n".join(subjects).encode("utf-8", "surrogatepass"), np.uint8),
        columns=_table(columns, len(ids)),
    )
