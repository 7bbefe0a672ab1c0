"""Erasing every trace of one subject from a bank's files: the right to be forgotten.

What holds a memory about the subject: the bank's `memories.jsonl` (every revision), its derived
`vectors.jsonl` and `lane-vectors.jsonl` (with the stale lines of a memory's earlier revisions:
one moved to someone else kept the vectors of what it said of them), the snapshots `.index.npz`
and `.records.npz` (removed whole), and the same files in each trashed copy of the bank under
`.trash/`. They are separate files, so the erasure is made all-or-nothing by an intent:
`.forget-subject.json` is written (atomically) before the first file changes, and removed after
the last; a bank that loads with an intent finishes the erasure first (`resume`). A crash before
the intent leaves everything, after it the next load erases everything. Each file is replaced
crash-safely (`files.replace_with`), and each step is idempotent, so finishing twice is harmless.

The intent names the subject (an id, not a memory's text) and lives only while the erasure runs.
It also holds a random key per subject, from which each `erased` event's `event_id` is derived.

Announcing is at-least-once, through an outbox: before the intent is cleared, what the erasure took
(id → subject and key) is written to `.erased-unannounced.json` in the bank's folder, and removed
once its `erased` events are sent. A kill between the two leaves it for the next load, which
announces it again with the same `event_id`s (a subscriber that saw one already dedupes on it).
Not the intent kept longer: an intent finishes the erasure at the next load, and a memory about
them saved after the erasure (said after it: legitimate) would be erased with it; the outbox
erases nothing. Without it, a kill after the intent's removal and before the events (or a load
that finished an erasure, then died before announcing it) lost them for good: their ids then are
nowhere (memory-consolidate's last report kept their texts, which only that event scrubs).
A deleted bank's trashed copies are never loaded: an erasure there is committed, with its ids and
key, in `.erasing-in-trash.json` at the data dir's root (`write_trash_intent`), and cleared once
announced; the next boot finishes and announces one a kill interrupted. A bank deleted with an
unfinished erasure or an unsent outbox commits them there before it moves (`commit_before_trash`).

What outlives it is a stamp (`ErasureStamps`, `.erased-subjects.json` at the data dir's root): when
each subject of each bank was last erased, keyed by a digest, so the file names no one. Work read
before the erasure and written after it (an extraction job that waited in the queue) is refused
against it: the erasure wins over what was queued before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from memory_worker.core.errors import StorageError
from memory_worker.core.models import Memory
from memory_worker.core.subjects import of_subject, same_subject, subject_key
from memory_worker.storage import deliveries, files
from memory_worker.storage.access import ACCESS_FILE, AccessStats
from memory_worker.storage.lane_vectors import LANE_VECTORS_FILE
from memory_worker.storage.log import (
    INTERRUPTED_FILE,
    MEMORIES_FILE,
    lines_of,
    read_all,
    replayed,
)
from memory_worker.storage.logger import get_logger
from memory_worker.storage.snapshot import DERIVED_FILES
from memory_worker.storage.vectors import VECTORS_FILE, text_hash

__all__ = [
    "INTENT_FILE",
    "OUTBOX_FILE",
    "STAMPS_FILE",
    "STAMPS_MAX_BYTES",
    "TRASH_INTENT_FILE",
    "ErasureStamps",
    "TrashErasure",
    "clear_intent",
    "clear_trash_intent",
    "commit_before_trash",
    "drop_unfilterable",
    "erase_copies",
    "erase_log_file",
    "erase_trashed",
    "erase_vectors",
    "erased_ids",
    "finish_in_trash",
    "forget_plan",
    "has_copies",
    "intended_ids",
    "pending",
    "resume",
    "trash_intents",
    "trashed_ids",
    "unannounced",
    "write_intent",
    "write_trash_intent",
    "write_unannounced",
]

log = get_logger(__name__)

INTENT_FILE = ".forget-subject.json"
OUTBOX_FILE = ".erased-unannounced.json"  # in the bank's folder: erased, `erased` not yet sent
# At the data dir's root: erasures in deleted banks' trashed copies under way (`write_trash_intent`)
TRASH_INTENT_FILE = ".erasing-in-trash.json"
STAMPS_FILE = ".erased-subjects.json"  # at the data dir's root; a dot name: never taken for a bank
# A stamp is ~50 bytes: this holds ~300,000 erased subjects. Past it the file is damage, read no
# further (a planted file of gigabytes held the store's open).
STAMPS_MAX_BYTES = 16 * 1024 * 1024
_FLOOR_KEY = "*"  # not a digest: every subject counts as erased at its time (a damaged file's)
_TRASH_DIR = ".trash"  # as `store.TRASH_DIR` (store imports the bank, which imports this)
# The `-<ms>[-<n>]` a trashed folder's name ends with (`files.move_to_trash`): `<n>` counts the
# copies trashed within one millisecond, so it is short. A longer one is a millisecond stamp:
# `.trash/main-1234567890-<ms>` is a copy of bank `main-1234567890`, not one of `main`.
_STAMP = re.compile(r"^\d{10,}(?:-\d{1,9})?$")


class ErasureStamps:
    """When each subject of each bank was last erased (ms, the service's clock), durable.

    An erasure is stamped before its intent is written; a write that says when what it saves was
    read (`Caller.read_at`: extraction, from a turn said before the job ran) is refused about a
    subject erased at or after that. Without it a job queued (or dead-lettered, then retried)
    before the erasure saved their facts again after it. At the data dir's root, not in the
    bank's folder: a default bank deleted, erased in its trash and recreated by its next write
    keeps it. Keyed by a digest of the bank and the subject's key (`subject_key`: every spelling
    of them): the file names no one. Costs one small file rewritten per erasure (it grows by one
    entry per subject ever erased) and a dictionary look-up per such write."""

    def __init__(
        self,
        root: Path,
        stamps: dict[str, int] | None = None,
        *,
        floor: int | None = None,
        damage: str | None = None,
    ) -> None:
        self.path = root / STAMPS_FILE
        self._root = root
        self._stamps = dict(stamps or {})
        # Every subject of every bank counts as erased at `floor` (ms): set when the file was
        # found damaged, so what it held is unknown (`load`).
        self._floor = floor
        self.damage = damage  # what was wrong with the file at load, for the doctor
        self._lock = threading.Lock()  # erasures of two banks stamp from two threads

    @classmethod
    def load(cls, root: Path) -> ErasureStamps:
        """The stamps kept under `root` (blocking). The file is only ever replaced whole
        (`atomic_write`), so one that does not read as written (not JSON, a link, past
        `STAMPS_MAX_BYTES`, wrong types) was damaged or planted by hand. That fails safe: which
        subjects it named is unknown, so every subject counts as erased when it last changed
        (at or after every stamp it held; a kill cannot tear it), or now if it is dated ahead.
        Only work read before then is refused (extraction queued before it): a queued fact
        lost, never an erased person's words written back. The floor is kept by the file's next
        rewrite (`*`). Running out of file descriptors or memory says nothing about the file and
        raises (`StorageError`): the store does not open, as for a bank it cannot read for that."""
        path = root / STAMPS_FILE
        if not os.path.lexists(path):
            return cls(root)
        problem: str | None = None
        data: object = None
        try:
            raw = files.read_bytes(path, within=root, at_most=STAMPS_MAX_BYTES)
            if len(raw) > STAMPS_MAX_BYTES:
                problem = f"larger than {STAMPS_MAX_BYTES} bytes"
            else:
                data = json.loads(raw.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError, StorageError) as exc:
            if files.is_transient(exc):
                raise  # out of descriptors: nothing known of the file (the open fails, retried)
            problem = str(exc)
        stamps: dict[str, int] = {}
        floor: int | None = None
        if problem is None:
            if not isinstance(data, dict):
                problem = f"not a JSON object but {type(data).__name__}"
            else:
                bad = 0
                for key, at in data.items():
                    if not isinstance(at, int) or isinstance(at, bool):
                        bad += 1
                    elif key == _FLOOR_KEY:
                        floor = at
                    else:
                        stamps[key] = at
                if bad:
                    problem = f"{bad} entry(ies) are not a time in ms"
        if problem is None:
            return cls(root, stamps, floor=floor)
        changed = _changed_ms(path)
        floor = changed if floor is None else max(floor, changed)
        # No erasure happened after now: a file dated ahead (copied from a machine whose clock
        # ran ahead, restored with a wrong date) refused everyone's memories until that date.
        floor = min(floor, time.time_ns() // 1_000_000)
        damage = f"{STAMPS_FILE} is damaged ({problem})"
        log.warning("erasure_stamps_unreadable", path=str(path), error=problem, floor=floor)
        return cls(root, stamps, floor=floor, damage=damage)

    @property
    def floor(self) -> int | None:
        """When every subject counts as erased (the file was found damaged); None if never."""
        return self._floor

    @staticmethod
    def _key(bank: str, subject: str) -> str:
        return hashlib.sha256(f"{bank}\0{subject_key(subject)}".encode()).hexdigest()[:32]

    def erased_at(self, bank: str, subject: str) -> int | None:
        """When `subject` was last erased from `bank`; None if never."""
        at = self._stamps.get(self._key(bank, subject)) if self._stamps else None
        if self._floor is None:
            return at
        return self._floor if at is None else max(at, self._floor)

    def stamp(self, bank: str, subject: str, at_ms: int) -> None:
        """Record (durably, blocking) that `subject` is erased from `bank` as of `at_ms`."""
        with self._lock:
            stamps = dict(self._stamps)
            key = self._key(bank, subject)
            stamps[key] = max(at_ms, stamps.get(key, at_ms))
            kept = stamps if self._floor is None else {**stamps, _FLOOR_KEY: self._floor}
            body = json.dumps(kept, sort_keys=True).encode()
            self._set_aside_folder()
            files.atomic_write(self.path, body, within=self._root)
            files.fsync_dir(self._root)
            self._stamps = stamps  # effective once durable
            self.damage = None  # replaced whole: readable again

    def _set_aside_folder(self) -> None:
        """A folder planted at the file's path (read at load as damage: the floor holds) is moved
        beside it, kept whole, so the stamp can be written: no file can replace a folder, and
        every erasure failed `storage` until a person found and removed it (the doctor's advice,
        "the next erasure rewrites it", did not hold)."""
        if not stat.S_ISDIR(_lstat_mode(self.path)):
            return
        aside = self.path.with_name(f"{STAMPS_FILE}.set-aside-{time.time_ns() // 1_000_000}")
        try:
            os.rename(self.path, aside)
        except OSError as exc:
            raise StorageError(
                f"{self.path} is a folder and cannot be moved aside ({exc.strerror or exc}); "
                "move it away by hand — nothing was erased"
            ) from None
        files.fsync_dir(self._root)
        log.warning("erasure_stamps_folder_set_aside", path=str(self.path), kept=str(aside))


def _lstat_mode(path: Path) -> int:
    """`path`'s own mode (a link's, not its target's); 0 when there is nothing there."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _changed_ms(path: Path) -> int:
    """When `path` (a link itself, not its target) last changed, in ms; now if that is unknown."""
    try:
        return os.lstat(path).st_mtime_ns // 1_000_000
    except OSError:
        return time.time_ns() // 1_000_000


def forget_plan(subject: str) -> Callable[[list[Memory]], list[Memory]]:
    """A rewrite plan (records in log order in, records kept out) that drops every revision of
    each memory whose latest record is about `subject`, and any other revision about them (a
    memory moved to someone else keeps its later revisions, never the ones that were theirs)."""

    def plan(records: list[Memory]) -> list[Memory]:
        latest = replayed(records)
        gone = {memory_id for memory_id, m in latest.items() if of_subject(m.subject, subject)}
        return [
            _unpointed(r, gone)
            for r in records
            if r.id not in gone and not of_subject(r.subject, subject)
        ]

    return plan


def _unpointed(record: Memory, gone: set[str]) -> Memory:
    """`record` without its `superseded_by` when that names an erased memory: a memory of
    someone else retired in favour of theirs (a person's merge across subjects, or a survivor
    moved to them since) pointed at their id, a fingerprint of their words, which the erasure
    takes from every other file. It stays retired, as a delete reads."""
    if record.superseded_by is None or record.superseded_by not in gone:
        return record
    return record.model_copy(update={"superseded_by": None})


def erased_ids(records: Iterable[Memory], subject: str) -> set[str]:
    """The ids `forget_plan(subject)` removes whole."""
    latest = replayed(records)
    return {memory_id for memory_id, m in latest.items() if of_subject(m.subject, subject)}


def write_intent(bank_path: Path, subject: str, ids: Iterable[str] = ()) -> str:
    """Commit to erasing `subject` (blocking): once this is durable, the erasure finishes. `ids`:
    the memories it erases, kept for the load that finishes it (`resume`): past the log's
    rewrite the log no longer tells which they were, and their vectors, access counts and
    ledger keys were still to go. Returns the erasure's key (its `erased` events' `event_id`s
    derive from it): the one the intent holds already for `subject` (a retry of an erasure that
    failed past its intent, nobody told yet), else a new one."""
    subjects, held, keys = _read_intent(bank_path)
    held = {**held, subject: sorted({*held.get(subject, []), *ids})}
    key = next((k for s, k in keys.items() if same_subject(s, subject)), None)
    key = key or secrets.token_hex(16)
    _write_intent(bank_path, sorted({*subjects, subject}), held, {**keys, subject: key})
    files.fsync_dir(bank_path)
    return key


def _write_intent(
    bank_path: Path, subjects: list[str], held: dict[str, list[str]], keys: dict[str, str]
) -> None:
    ids = {s: held[s] for s in subjects if held.get(s)}
    kept = {s: keys[s] for s in subjects if keys.get(s)}
    body = json.dumps(
        {"subjects": subjects, **({"ids": ids} if ids else {}), **({"keys": kept} if kept else {})}
    ).encode()
    files.atomic_write(bank_path / INTENT_FILE, body, within=bank_path.parent)


def _read_intent(bank_path: Path) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """The subjects an intent names, the ids it holds for each, and each one's key."""
    path = bank_path / INTENT_FILE
    if not os.path.lexists(path):
        return [], {}, {}
    try:
        data = json.loads(files.read_text(path, within=bank_path.parent))
    except (ValueError, RecursionError):
        return [], {}, {}  # a torn intent was never durable: the erasure had not started
    if not isinstance(data, dict):
        return [], {}, {}
    subjects = data.get("subjects")
    named = [s for s in subjects if isinstance(s, str)] if isinstance(subjects, list) else []
    ids = data.get("ids")
    held = {
        subject: [i for i in listed if isinstance(i, str)]
        for subject, listed in (ids.items() if isinstance(ids, dict) else ())
        if isinstance(listed, list)
    }
    raw_keys = data.get("keys")
    keys = {
        subject: key
        for subject, key in (raw_keys.items() if isinstance(raw_keys, dict) else ())
        if isinstance(key, str) and key
    }
    return named, held, keys


def _key_of(bank_path: Path, subject: str) -> str | None:
    """The key the intent holds for `subject` (any spelling); None for an intent written before
    keys were (its events get random ids)."""
    keys = _read_intent(bank_path)[2]
    return next((k for s, k in keys.items() if same_subject(s, subject)), None)


def pending(bank_path: Path) -> list[str]:
    """The subjects whose erasure started and did not finish."""
    return _read_intent(bank_path)[0]


def intended_ids(bank_path: Path, subject: str) -> set[str]:
    """The ids the intent says the erasure of `subject` (any spelling) removes (`write_intent`)."""
    held = _read_intent(bank_path)[1]
    return {i for named, ids in held.items() if same_subject(named, subject) for i in ids}


def clear_intent(bank_path: Path, subject: str | None = None) -> None:
    """The erasure of `subject` (None: of everyone the intent names) is over. Another subject
    the intent still names is one whose erasure failed past its intent: it stays for the next
    load to finish (removing the file whole left their memories half erased for good)."""
    subjects, held, keys = _read_intent(bank_path) if subject is not None else ([], {}, {})
    left = [s for s in subjects if not same_subject(s, subject or "")]
    if left:
        _write_intent(bank_path, sorted(left), held, keys)
        return
    _remove_named(bank_path / INTENT_FILE, within=bank_path.parent)


Unannounced = dict[str, tuple[str, str | None]]  # memory id → (subject, the erasure's key)


def unannounced(bank_path: Path) -> Unannounced:
    """What erasures of the bank at `bank_path` erased and are not known to have announced
    (blocking; the outbox, `write_unannounced`). An unreadable outbox (a hand edit, a disk
    fault) reads as empty: only an event is at stake, never a memory."""
    path = bank_path / OUTBOX_FILE
    if not os.path.lexists(path):
        return {}
    try:
        data = json.loads(files.read_text(path, within=bank_path.parent))
    except (ValueError, RecursionError, StorageError) as exc:
        if isinstance(exc, StorageError) and files.is_transient(exc):
            raise
        log.warning("erasure_outbox_unreadable", path=str(path))
        return {}
    erased = data.get("erased") if isinstance(data, dict) else None
    found: Unannounced = {}
    for memory_id, entry in erased.items() if isinstance(erased, dict) else ():
        if isinstance(entry, list) and entry and isinstance(entry[0], str):
            key = entry[1] if len(entry) > 1 and isinstance(entry[1], str) else None
            found[memory_id] = (entry[0], key)
    return found


def write_unannounced(bank_path: Path, entries: Unannounced, *, done: Iterable[str] = ()) -> None:
    """The outbox (blocking, durable) with `entries` added and the ids `done` (announced) taken
    out; removed when nothing is left to announce."""
    held = {**unannounced(bank_path), **entries}
    for memory_id in done:
        if memory_id not in entries:
            held.pop(memory_id, None)
    path = bank_path / OUTBOX_FILE
    if not held:
        _remove_named(path, within=bank_path.parent)
        return
    body = {"erased": {i: [s, k] if k else [s] for i, (s, k) in sorted(held.items())}}
    files.atomic_write(path, json.dumps(body).encode(), within=bank_path.parent)
    files.fsync_dir(bank_path)


def _remove_named(path: Path, *, within: Path) -> None:
    """Remove one of the files that name the person (the intent, the outbox, the trash intent),
    and the temp files of its rewrites a kill cut short: each held what the file held then,
    and only a later write of it swept them (`atomic_write`), so the removal that ends its
    last erasure left them, with their name and ids, for good."""
    if os.path.lexists(path):
        files.remove_file(path, within=within)  # syncs its folder
    files.remove_leftovers(path)


def drop_unfilterable(log_path: Path, *, within: Path | None = None) -> None:
    """Remove what beside `log_path` holds something of every memory and cannot be filtered by
    subject: the interrupted writes a load set aside (torn bytes no one was ever told were stored,
    which an erasure cannot parse to spare what is someone else's), and the derived snapshots
    (the index's terms of every text; rebuilt from the log when next needed)."""
    for name in (INTERRUPTED_FILE, *DERIVED_FILES):
        files.remove_file(log_path.with_name(name), within=within)
        files.remove_leftovers(log_path.with_name(name))  # a write a kill cut short holds them too


def erase_log_file(path: Path, subject: str, *, within: Path | None = None) -> set[str]:
    """Rewrite a log without `subject` (blocking; unreadable lines go too: what cannot be read
    cannot be shown to be someone else's), and drop what beside it cannot be filtered
    (`drop_unfilterable`). Returns the ids removed whole."""
    drop_unfilterable(path, within=within)
    if not os.path.lexists(path):
        return set()
    records, damage = read_all(path, within=within)
    gone = erased_ids(records, subject)
    kept = forget_plan(subject)(records)
    # The same records, each the same object: nothing dropped, no pointer to them cleared.
    unchanged = len(kept) == len(records) and all(
        a is b for a, b in zip(kept, records, strict=True)
    )
    if unchanged and not damage:
        return gone
    expected = replayed(kept)

    def check(candidate: Path) -> None:
        written, problems = read_all(candidate, within=within)
        if problems or replayed(written) != expected:
            raise StorageError(f"erasure of {path} did not read back as planned; left as it was")

    files.replace_with(path, lines_of(kept), check, within=within)
    return gone


def erase_vectors(
    path: Path,
    ids: set[str],
    *,
    within: Path | None = None,
    current: Mapping[str, Memory] | None = None,
) -> None:
    """Rewrite a vector sidecar without `ids` (and without unreadable lines: derived data, a
    later pass re-embeds whatever it misses). `current`: the memories as the erased log holds
    them; a line that is not the vector of its memory's text there (of an earlier revision)
    goes too. A memory moved to someone else keeps its id, and the vector of what it said
    while it was theirs (their words embedded, their text's hash) stayed in the sidecar, whose
    stale lines nothing ever reads and nothing else removes. Judged from the log as it is, so
    the load that finishes an erasure a kill cut short drops them as well."""
    if not os.path.lexists(path):
        return
    kept: list[bytes] = []
    dropped = False
    for _, line, _ in files.iter_lines(path, within=within):
        try:
            row = json.loads(line)
            keep = isinstance(row, dict) and _kept_vector(row, ids, current or {})
        except (ValueError, RecursionError):
            keep = False
        if keep:
            kept.append(line.rstrip(b"\n") + b"\n")
        else:
            dropped = True
    if dropped:
        files.replace_with(path, kept, lambda _: None, within=within)


def _kept_vector(row: dict[str, object], ids: set[str], current: Mapping[str, Memory]) -> bool:
    """Whether a sidecar line stays: its memory is not erased, and the line is the vector of
    what its memory says now (`current`), when that is known."""
    # A lane vector's id is `<memory id>#<lane>`: it goes with its memory.
    memory_id, _, lane = str(row.get("id")).partition("#")
    if memory_id in ids:
        return False
    memory = current.get(memory_id)
    if memory is None:
        return True  # landed after the erased log was read (or never in it): not judged here
    hashed = row.get("text_hash")
    if hashed is None:  # a Rust worker's line: current only at the revision it was made for
        return row.get("revision", 0) == memory.revision
    text = getattr(memory, lane, None) if lane else memory.text
    return isinstance(text, str) and bool(text) and hashed == text_hash(text)


def _trashed_copies(root: Path, bank: str) -> list[Path]:
    try:
        entries = sorted(os.listdir(root / _TRASH_DIR))
    except OSError:
        return []
    prefix = f"{bank}-"
    return [
        root / _TRASH_DIR / name
        for name in entries
        if name.startswith(prefix) and _STAMP.match(name[len(prefix) :])
    ]


def erase_copies(root: Path, bank: str, subject: str) -> int:
    """Erase `subject` from every trashed copy of `bank` (blocking); returns how many copies held
    something of theirs."""
    return erase_trashed(root, bank, subject)[0]


def has_copies(root: Path, bank: str) -> bool:
    """Whether `.trash/` holds a copy of `bank`."""
    return bool(_trashed_copies(root, bank))


def trashed_ids(root: Path, bank: str, subject: str) -> set[str]:
    """The ids of `subject`'s memories in `bank`'s trashed copies (read only): in their logs,
    and in an intent a copy kept (its log maybe rewritten already)."""
    found = set[str]()
    for copy in _trashed_copies(root, bank):
        found |= _ids_in_log(copy / MEMORIES_FILE, subject, within=root)
        found |= intended_ids(copy, subject)
    return found


def _ids_in_log(path: Path, subject: str, *, within: Path) -> set[str]:
    return erased_ids(_records_in(path, within=within), subject)


def _records_in(path: Path, *, within: Path) -> list[Memory]:
    if not os.path.lexists(path):
        return []
    return read_all(path, within=within)[0]


def erase_trashed(
    root: Path, bank: str, subject: str, also: Iterable[str] = ()
) -> tuple[int, set[str]]:
    """`erase_copies`, and the ids it removed whole. `also`: ids erased from a copy's log before,
    whose vectors and access counts go too. In each copy what is derived from the log goes
    first, the log last: a run cut short between them left ids the next run, reading them from
    the rewritten log, no longer knew (no intent keeps them here). One at a time per bank: no
    bank lock holds a deleted bank's copies, and two erasures of it asked at once each read a
    copy's log, so the one renamed in last wrote the other's person back (announced erased)."""
    with _trash_lock(root, bank):
        return _erase_trashed(root, bank, subject, also)


_trash_locks: dict[tuple[str, str], threading.Lock] = {}
_trash_locks_guard = threading.Lock()


def _trash_lock(root: Path, bank: str) -> threading.Lock:
    """The lock of `bank`'s trashed copies in data dir `root` (in this process: another process
    opens the data dir only while holding its lock)."""
    with _trash_locks_guard:
        return _trash_locks.setdefault((str(root.resolve()), bank), threading.Lock())


def _erase_trashed(
    root: Path, bank: str, subject: str, also: Iterable[str]
) -> tuple[int, set[str]]:
    touched, erased = 0, set[str]()
    for copy in _trashed_copies(root, bank):
        # An earlier, killed attempt's temp files.
        for name in (MEMORIES_FILE, VECTORS_FILE, LANE_VECTORS_FILE):
            files.remove_replacements(copy / name)
        records = _records_in(copy / MEMORIES_FILE, within=root)
        about = erased_ids(records, subject)
        gone = about | set(also) | intended_ids(copy, subject)
        # Judged against the log as its erasure leaves it (rewritten below, after them).
        current = replayed(forget_plan(subject)(records))
        erase_vectors(copy / VECTORS_FILE, gone, within=root, current=current)
        erase_vectors(copy / LANE_VECTORS_FILE, gone, within=root, current=current)
        access = AccessStats(copy / ACCESS_FILE, within=root)  # ids are fingerprints of texts
        access.load()
        access.forget(gone)
        about |= erase_log_file(copy / MEMORIES_FILE, subject, within=root)
        if any(same_subject(s, subject) for s in pending(copy)):
            # Done here: an intent (it names them) that a killed `finish_in_trash` left in the
            # copy would stay for good, as a trashed bank is never loaded to clear it.
            clear_intent(copy, subject)
        # Its outbox likewise (it names them): what it held was committed at the data dir's
        # root before the bank moved here (`commit_before_trash`), and is announced from there.
        outbox = unannounced(copy)
        if any(same_subject(s, subject) for s, _ in outbox.values()):
            done = [i for i, (s, _) in outbox.items() if same_subject(s, subject)]
            write_unannounced(copy, {}, done=done)
        touched += bool(about)
        erased |= gone
    return touched, erased


class TrashErasure(NamedTuple):
    """An erasure of `subject` from the trashed copies of deleted bank `bank` under way."""

    bank: str
    subject: str
    # Its `erased` events' ids derive from it, as a live bank's (`write_intent`); None: not
    # written down (it had nothing to announce).
    key: str | None
    ids: list[str]  # what it erases: past a copy's rewrite, only this still names them


_trash_intents_lock = threading.Lock()  # erasures of two deleted banks run at once


def trash_intents(root: Path) -> list[TrashErasure]:
    """The erasures in trashed copies that started and are not known to have been announced
    (blocking). Unreadable (torn: never durable; a hand edit): none."""
    path = root / TRASH_INTENT_FILE
    if not os.path.lexists(path):
        return []
    try:
        data = json.loads(files.read_text(path, within=root))
    except (ValueError, RecursionError, StorageError) as exc:
        if isinstance(exc, StorageError) and files.is_transient(exc):
            raise
        log.warning("erasure_in_trash_intent_unreadable", path=str(path))
        return []
    listed = data.get("erasures") if isinstance(data, dict) else None
    found: list[TrashErasure] = []
    for entry in listed if isinstance(listed, list) else ():
        if not isinstance(entry, dict):
            continue
        bank, subject, key, ids = (entry.get(k) for k in ("bank", "subject", "key", "ids"))
        if isinstance(bank, str) and isinstance(subject, str) and isinstance(key, str):
            held = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
            found.append(TrashErasure(bank, subject, key, held))
    return found


def _write_trash_intents(root: Path, erasures: list[TrashErasure]) -> None:
    path = root / TRASH_INTENT_FILE
    if not erasures:
        _remove_named(path, within=root)
        return
    body = {"erasures": [e._asdict() for e in erasures]}
    files.atomic_write(path, json.dumps(body).encode(), within=root)
    files.fsync_dir(root)


def write_trash_intent(
    root: Path, bank: str, subject: str, ids: Iterable[str], *, key: str | None = None
) -> TrashErasure:
    """Commit to erasing `subject` from `bank`'s trashed copies and announcing `ids` (blocking,
    durable), before the first copy changes: a trashed copy is never loaded, and past its log's
    rewrite nothing else names the ids. A kill from here on is finished and announced by the
    next boot (`trash_intents`). Returns the erasure, with what an earlier, killed attempt held
    (its key, so its events keep their ids); else with `key` (a live erasure's, carried over by
    `commit_before_trash`), else a new one."""
    with _trash_intents_lock:
        held = trash_intents(root)
        same = [e for e in held if e.bank == bank and same_subject(e.subject, subject)]
        others = [e for e in held if e not in same]
        key = same[0].key if same else key or secrets.token_hex(16)
        every = sorted({*ids, *(i for e in same for i in e.ids)})
        erasure = TrashErasure(bank, subject, key, every)
        _write_trash_intents(root, [*others, erasure])
    return erasure


def clear_trash_intent(root: Path, bank: str, subject: str) -> None:
    """The erasure of `subject` from `bank`'s trashed copies is finished and announced."""
    with _trash_intents_lock:
        held = trash_intents(root)
        left = [e for e in held if not (e.bank == bank and same_subject(e.subject, subject))]
        if len(left) != len(held):
            _write_trash_intents(root, left)


def commit_before_trash(root: Path, bank: str, bank_path: Path) -> bool:
    """Before the bank at `bank_path` moves to `.trash/` (blocking, durable): what its intent
    still has to erase and what its outbox still has to announce, committed at the data dir's
    root (`write_trash_intent`, each with its erasure's key, so its events keep their ids). A
    trashed copy is never loaded: a kill past the move left them in the copy, never finished
    nor announced. Finished and announced by the delete, else by the next boot. Whether there
    was any."""
    subjects, held, keys = _read_intent(bank_path)
    groups: dict[tuple[str, str | None], set[str]] = {}
    for subject in subjects:
        groups.setdefault((subject, keys.get(subject)), set()).update(held.get(subject, ()))
    for memory_id, (subject, key) in unannounced(bank_path).items():
        groups.setdefault((subject, key), set()).add(memory_id)
    for (subject, key), ids in groups.items():
        write_trash_intent(root, bank, subject, ids, key=key)
    return bool(groups)


def finish_in_trash(root: Path, bank: str, copy: Path) -> Unannounced:
    """Finish in `copy` (a folder of `bank` just moved to `.trash/`) the erasures its intent
    names (blocking): a trashed bank is never loaded again, so `resume` would never run for it
    and their memories would stay there. Every trashed copy of `bank` is erased as
    `memory::forget-subject` erases them; returns what was removed whole (id → subject and the
    erasure's key), with what the copy's outbox held still to announce. The copy's outbox goes:
    a trashed bank is never loaded to announce it, and it names the person; what it held was
    committed at the root before the move (`commit_before_trash`), as what this erases is here."""
    from memory_worker.storage import capture  # (a deleted bank's copies only)

    subjects = pending(copy)
    finished = unannounced(copy)
    for subject in subjects:
        # Their ids out of what conversations were handed, as `resume` takes them out: first,
        # while the logs (and the intent, for a log rewritten before the delete) still name them.
        ids = trashed_ids(root, bank, subject)
        deliveries.erase_delivered(root, bank, ids)
        key = _key_of(copy, subject)
        # Announced from the data dir's root (the delete, or the next boot after a kill): every
        # id, for an intent that held none (written before intents held them) or not all.
        write_trash_intent(root, bank, subject, ids, key=key)
        capture.erase_jobs(root, bank, ids)  # its queued turns, as `resume` below
        gone = erase_trashed(root, bank, subject, ids)[1]
        finished.update(dict.fromkeys(gone, (subject, key)))
        log.warning("forget_subject_resumed", bank=bank, trash_copy=copy.name)
    if subjects:
        clear_intent(copy)
    _remove_named(copy / OUTBOX_FILE, within=root)
    return finished


def resume(root: Path, bank: str, bank_path: Path) -> dict[str, set[str]]:
    """Finish the erasures a crash interrupted (blocking; at load, before the log is replayed).
    Returns the subjects it finished, each with the ids it removed whole from the bank's log."""
    subjects = pending(bank_path)
    finished: dict[str, set[str]] = {}
    for name in (VECTORS_FILE, LANE_VECTORS_FILE, ACCESS_FILE):  # the log's: `Bank.load`
        files.remove_replacements(bank_path / name)
    for subject in subjects:
        erase_copies(root, bank, subject)
        gone = erase_log_file(bank_path / MEMORIES_FILE, subject, within=root)
        # A kill past the log's rewrite left their ids only in the intent (and in the files
        # below, still to be erased).
        gone |= intended_ids(bank_path, subject)
        # The log as erased (above): what the vectors are judged against.
        current = replayed(_records_in(bank_path / MEMORIES_FILE, within=root))
        erase_vectors(bank_path / VECTORS_FILE, gone, within=root, current=current)
        erase_vectors(bank_path / LANE_VECTORS_FILE, gone, within=root, current=current)
        access = AccessStats(bank_path / ACCESS_FILE, within=root)
        access.load()
        access.forget(gone)
        deliveries.erase_delivered(root, bank, gone)
        # The queued turns: which bank a job naming none is for is not known here, so it counts
        # as this one's (its dead jobs leave as well). (Imported here: a load with nothing to
        # finish, every one-shot save's, never reads the queue.)
        from memory_worker.storage import capture

        capture.erase_jobs(root, bank, gone)
        log.warning("forget_subject_resumed", bank=bank, erased=len(gone))
        finished[subject] = gone
        # Before the intent goes: the load that announces them may die first (`unannounced`).
        key = _key_of(bank_path, subject)
        write_unannounced(bank_path, dict.fromkeys(gone, (subject, key)))
    if subjects:
        clear_intent(bank_path)
    return finished
