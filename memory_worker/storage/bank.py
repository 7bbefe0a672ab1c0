"""One bank in RAM: its memories, index, rules and damage report, replayed from its folder.

Invariants:
- `commit()` is the single mutation choke point. A record's line is appended and fsynced before the
  record becomes visible to readers; concurrent commits share one fsync (group commit), run in a
  thread while the loop computes the next writes; a lone write's runs on the loop while the
  disk is fast.
- Decisions read `latest()`/`match_text()`, which include records written but not yet
  durable, so two concurrent saves of one text reinforce instead of duplicating. Callers
  decide and call `commit()` with no `await` in between.
- A failed write or fsync cuts the log back to its last durable size and fails every commit that was
  waiting on it: RAM never holds what the disk does not.
- Past 500 lines on purpose: the group commit, the held commits of a rewrite and the RAM state
  (memories, text map, index, vectors) must change in one place under one set of invariants.
- The line format, checksums, batches and replay are `storage.log`'s; the rules folder is
  `storage.rules`'s; the vector sidecar `storage.vectors`'s. This module keeps them in step in RAM.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import os
import secrets
import threading
import time
import unicodedata
import zlib
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import attrgetter, eq, is_, is_not, itemgetter, not_
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memory_worker.core.bank_settings import BankOverrides, no_overrides
from memory_worker.core.capacity import (
    EvictionQueue,
    Key,
    evictable,
    eviction_key,
    eviction_order,
)
from memory_worker.core.categories import CATEGORY_CODES, category_code
from memory_worker.core.errors import Conflict, StorageError
from memory_worker.core.lanes import LANES
from memory_worker.core.lessons import is_lesson
from memory_worker.core.models import Memory, Rule
from memory_worker.core.subjects import of_subject, same_subject, subject_key
from memory_worker.core.text import fingerprint, normalize
from memory_worker.storage import erasure, files, unfinished
from memory_worker.storage.access import ACCESS_FILE, AccessStats
from memory_worker.storage.bank_file import (
    BANK_FILE,
    read_bank_file,
    render_bank_file,
    write_bank_file,
)
from memory_worker.storage.boot import booting, thaw
from memory_worker.storage.counts import Counts, read_counts, write_counts
from memory_worker.storage.counts import stat_stamp as counts_stamp
from memory_worker.storage.damage import Damage, DurabilityWarnings
from memory_worker.storage.eviction import first_to_go
from memory_worker.storage.lane_vectors import LANE_VECTORS_FILE, LaneVectors, lane_carriers
from memory_worker.storage.listing import Listings
from memory_worker.storage.log import (
    INTERRUPTED_FILE,
    MEMORIES_FILE,
    RESTORED_FORM,
    LazyRecords,
    as_stored,
    continues_batch,
    encode,
    history,
    interrupted_tail,
    lines_of,
    read_all,
    records_at,
    replay,
    replayed,
    revision_at,
    shared_fields,
    tail_records,
    winning_spans,
)
from memory_worker.storage.logger import get_logger
from memory_worker.storage.rules import RULES_DIR, RuleFiles
from memory_worker.storage.snapshot import (
    RECORDS_FILE,
    SNAPSHOT_MIN_LIVE,
    RecordSpans,
    log_identity,
    read_records,
    records_prefix,
    snapshot_prefix,
    snapshot_size,
    tail_is_short,
    text_key,
    write_records,
    write_snapshot,
)
from memory_worker.storage.text_map import TextMap
from memory_worker.storage.vectors import (
    VECTORS_FILE,
    VectorAppends,
    VectorRecord,
    load_vectors,
    text_hash,
)

# The search state (the lexical index, lanes and lessons: numpy's columns) is imported where a
# bank first builds it (`_index` and its siblings below): a one-shot save decides from the
# records alone (`_Deferred`) and never imports the search package (~14 ms of CPU).
if TYPE_CHECKING:
    from memory_worker.search.index import Analysis, IndexedDoc, Ints, LexicalIndex
    from memory_worker.search.lanes import LaneIndexes
    from memory_worker.search.lessons import LessonIndex

__all__ = ["BANK_FILE", "MEMORIES_FILE", "RULES_DIR", "Bank", "BankSummary", "Rewrite"]

log = get_logger(__name__)
T = TypeVar("T")

_ID = attrgetter("id")
_ANCHORS = attrgetter("anchors")
_INVALID_AT = attrgetter("invalid_at")
_CATEGORY_OF = attrgetter("category")
_SUBJECT_OF = attrgetter("subject")
# A record's field values are its `__dict__` (pydantic keeps them there): a column read with
# `itemgetter` from those skips the model's attribute lookup.
_VALUES = attrgetter("__dict__")
_UPDATED_AT = itemgetter("updated_at")
_STATED_AT = itemgetter("stated_at")
_SOURCE = itemgetter("source")
_INVALID_AT_VALUE = itemgetter("invalid_at")
_SUBJECT = itemgetter("subject")
_PINNED = itemgetter("pinned")
_CATEGORY = itemgetter("category")

# `first_evictable` answers this many asks over the index's columns before it builds the kept
# eviction order: a one-shot command's save asks once, a bank that keeps saving pays the build.
ONE_OFF_EVICTIONS = 2

# The semantic arm runs over a bank once this share of its live memories has its model's vectors:
# the rest (saved by a process that does not embed its writes, or in flight) rank by their lexical
# and entity scores alone (their lexical relevance standing in for the semantic one). Chosen on
# LoCoMo's tuning half with its newest turns unembedded: at 10% missing the arm still beats no
# arm, at 20% it does not (docs/BENCHMARKS.md, "A partly embedded bank").
SEMANTIC_COVERAGE = 0.9

# A lone write's fsync runs on the event loop while the disk answers within this: handing it to a
# thread and waking the loop again cost ~0.4 ms on this project's machines, twice the fsync
# itself. One slower fsync sends the next ones to the thread, so a slow disk never stalls other
# work on the loop (a recall) for long; a fast one brings them back.
INLINE_SYNC_S = 0.002


@dataclass(slots=True)
class _Pending:
    records: Sequence[Memory]
    data: bytes = field(repr=False)  # the encoded lines, written now or once a rewrite is done
    future: asyncio.Future[None] = field(repr=False)
    norms: Sequence[str] = field(repr=False)  # each record's normalized text, computed once
    # Where `data` went: the log file's inode and the offset it ends at (`AppendLog.lost`).
    written: tuple[int, int] = field(default=(-1, -1), repr=False)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What applying a record to RAM computes from the record alone: its index document (None
    for a retired record, which leaves the index) and its normalized text's key."""

    doc: IndexedDoc | None
    text_key: int

    @classmethod
    def of(cls, record: Memory, norm: str) -> _Prepared:
        from memory_worker.search.ranking import indexed

        return cls(indexed(record) if record.live else None, text_key(norm))

    @classmethod
    def keyed(cls, record: Memory, norm: str) -> _Prepared:
        """The text's key alone: `_apply` analyses a live record itself if it needs to."""
        return cls(None, text_key(norm))


@dataclass(slots=True)
class _Deferred:
    """What a short-lived boot left for building the search state (the lexical index from
    `.index.npz`, the lanes, the lessons, the vector sidecars) when something first reads it: a
    one-shot save decides from the records and the exact-text map alone, and its process exits
    before it would have read the index (~40 ms at 10,000 memories, and every vector line).
    Its records stay lines until read too (`log.LazyRecords`: ~40 ms more), and what it needs
    of the others (the live count, a cap's first to go, close's counts) comes from the records
    file's columns (`snapshot.RECORD_COLUMNS`).
    Built, it is what the boot would have built, with every record applied since applied to it
    in the same order (`applied`)."""

    # The live records the boot replayed, in replay order; None while the records are read
    # lazily (`log.LazyRecords`): taken from the boot's records when the build runs.
    live: list[Memory] | None
    stamp: _Stamp  # the log's stamp the boot replayed (checked against its bytes then)
    data: bytes  # the log's bytes the boot read: what `.index.npz` is checked against
    identity: tuple[int, int]  # their (length, CRC-32)
    damage_at: int  # where the vector sidecars' damage goes in `damage` (after the log's)
    live_count: int  # live memories now (the index's length once built)
    # Each record applied since, with the one it replaced (None: a new id), in order: what the
    # build applies, and undoes on a copy of the records to get back the boot's.
    applied: list[tuple[Memory, Memory | None]] = field(default_factory=list)

    def boot_records(self, now: dict[str, Memory]) -> dict[str, Memory]:
        """The records as the boot replayed them, from `now` (the bank's): each record applied
        since undone, newest first (a new id leaves the end it was added at)."""
        if not self.applied:
            return now
        boot = dict(now)
        for record, previous in reversed(self.applied):
            if previous is None:
                del boot[record.id]
            else:
                boot[record.id] = previous
        return boot


@dataclass(frozen=True, slots=True)
class Rewrite:
    """What a rewrite of `memories.jsonl` did."""

    lines_before: int
    lines_after: int
    bytes_before: int
    bytes_after: int
    damaged_dropped: int  # unreadable lines that were not carried over (only when asked to)


@dataclass(frozen=True, slots=True)
class BankSummary:
    """What listing banks shows of one: its description and how many live, pinned and rules."""

    name: str
    description: str
    live: int
    pinned: int
    rules: int
    subjects: int  # how many subjects the live memories are about
    overrides: BankOverrides  # its bank.yaml's chosen settings
    # From a counts file (`peek`): when each category's oldest memory that may expire was last
    # stated, so the caller can tell whether retention has retired one since. None from RAM.
    stated: Mapping[str, int] | None = None


class Bank:
    def __init__(
        self,
        name: str,
        path: Path,
        description: str = "",
        warnings: DurabilityWarnings | None = None,
        guard: Guard | None = None,
        overrides: BankOverrides | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.root = path.parent  # the data dir: no folder below it is followed as a link
        self.description = description
        # The settings this bank chose in bank.yaml (the rest follow the configuration).
        self.overrides = overrides if overrides is not None else no_overrides()
        self._bank_file_problem: str | None = None  # what the last read of bank.yaml found wrong
        self._settings_lock = asyncio.Lock()  # one bank.yaml writer at a time
        # Recall counts: derived, never the log.
        self.access = AccessStats(path / ACCESS_FILE, within=path.parent)
        self.access.on_change = self._access_changed
        self.warnings = warnings if warnings is not None else DurabilityWarnings()
        # Raises when this process may no longer write the data dir (its lock is gone).
        self.guard = guard
        # What the load and later reads found broken (`damage`: read through it, so a one-shot
        # process's vector sidecars, read when the index is built, are in it as at a full boot).
        self._damage: list[Damage] = []
        self.set_aside: list[str] = []  # interrupted writes moved out of the log's end at load
        # The search state (`index`, `lessons`, `lanes`, `lane_vectors`, the vectors' models):
        # read through their properties, which build it first when a short-lived boot left it
        # for later (`_Deferred`). `_index`, `_lessons`, `_lanes` and `_lane_vectors` are made
        # empty at their first read (below).
        # Sidecar appends in flight: an erasure waits for them (`vector_writes_settled`).
        self._vector_appends = VectorAppends()
        # Set by a short-lived boot that left the search state unbuilt (`load(short_lived=True)`).
        self._deferred: _Deferred | None = None
        # id → record in replay order (read through `_memories`); while a short-lived boot keeps
        # its records' lines unread (`log.LazyRecords`), they are in `_lazy` instead, and the
        # first read of `_memories` validates the rest (what a one-shot save reads goes through
        # `_get`, `_has` and `_size`, which read only the records asked for).
        self._lazy: LazyRecords | None = None
        self._records: dict[str, Memory] = {}
        # The records file's columns by row (`snapshot.RECORD_COLUMNS`) and the subjects' keys its
        # `subject` column names, for the lines `_lazy` has not read.
        self._lazy_columns: Mapping[str, Any] = {}
        self._lazy_subjects: tuple[str, ...] = ()
        self._applied = 0  # records applied so far: the version `standing()` is cached against
        self._standing: tuple[tuple[int, int], list[Memory]] | None = None
        # `memory::list`'s orders and filtered listings, kept by `_apply` (`storage.listing`).
        self._listings = Listings()
        # The memories a cap may take, in eviction order, as decisions see them (each one's
        # latest record: durable or in flight): built once a full bank's saves keep asking
        # (`ONE_OFF_EVICTIONS`), then kept by `commit`, `_restage` and the access counts;
        # dropped when RAM is replaced.
        self._eviction: EvictionQueue | None = None
        self._evictions_asked = 0  # `first_evictable` calls before the kept order was built
        # `text_key` of the normalized text → ids whose text it is (`storage.text_map`); a lookup
        # checks the texts themselves (`match_text`).
        self._by_text = TextMap()
        self._rules = RuleFiles(name, path / RULES_DIR, self.warnings, within=self.root)
        self._vector_models: dict[str, str] = {}  # id → model of the vector the index holds
        # The model whose vectors the index holds: only its vectors are ever compared with a
        # query. A new model takes over when its first vectors are stored (never before: one
        # that cannot embed — a typo, a model the local embedder lacks — leaves the old ones).
        self._embed_model: str | None = None
        self._to_embed: dict[str, None] = {}  # live ids lacking its vector, in arrival order
        self._embed_ready = False  # every live memory had its vector since the model took over
        self._log = files.AppendLog(path / MEMORIES_FILE, within=self.root)
        self._queue: list[_Pending] = []
        # id → (record, its normalized text composed: what `match_text` compares, made once a
        # write rather than at each of the ~32 later saves that scan it while it is in flight)
        self._staged: dict[str, tuple[Memory, str]] = {}
        # Live memories the staged records add (a retired one: take away) to the durable ones.
        self._staged_live = 0
        self._flusher: asyncio.Task[None] | None = None
        self._last_sync_s = INLINE_SYNC_S  # the last fsync's duration: the first goes to a thread
        # Subjects being erased (`erasing`), each with the ids that were theirs when it started.
        self._erasing: dict[str, frozenset[str]] = {}
        # Erasures that failed past their intent (a disk that refused the rewrite): the intent
        # stays, so the next load finishes them, and a write about them landing meanwhile would
        # be acknowledged and then erased. Refused as while they run, until a retry finishes one.
        self._unfinished: dict[str, frozenset[str]] = {}
        # What an erasure finished after its call failed erased (id → subject): at this load
        # (`erasure.resume`), or in the trashed copy when the bank was deleted. Nobody was told:
        # the service announces it as the erasure would have (`take_unannounced_erasures`).
        # Each with the erasure's key (`erasure.write_intent`): its events' ids derive from it.
        # Also on disk (`erasure.unannounced`) until announced: read back by the next load.
        self._unannounced_erasures: erasure.Unannounced = {}
        self._outbox_lock = threading.Lock()  # an erasure adds to it while an announce takes out
        # While a rewrite replaces the log, commits are staged (decisions see them) and held here;
        # they are written to the new log once it is in place.
        self._rewriting: asyncio.Event | None = None  # set when the running rewrite is over
        # Held by a forget-subject from its pinned check to its end: its intent file names one
        # erasure at a time (a second one's end would otherwise remove the first one's intent).
        self.erasure_lock = asyncio.Lock()
        self._held: list[_Pending] = []
        self._broken: str | None = None  # set when a failed write could not be cut back
        self._frozen: str | None = None
        self._log_stamp: _Stamp | None = None  # memories.jsonl as of our last replay/fsync
        # What RAM held before a rewrite made the log's replay RAM's, and that replay, when they
        # differ (`take_adopted`); None when the last rewrite changed nothing RAM showed.
        self._adopted: tuple[dict[str, Memory], dict[str, Memory]] | None = None
        self._snapshot_stamp: _Stamp | None = None  # the log state `.index.npz` was made for
        self._records_stamp: _Stamp | None = None  # the log state `.records.npz` was made for
        # The log's (length, CRC-32) while a boot that read it whole for `.records.npz` indexes.
        self._boot_identity: tuple[int, int] | None = None
        self._boot_data: bytes | None = None  # its bytes, while that boot indexes
        # (inode, length) of the log prefix the snapshot on disk is for, when it is for one of
        # this log: kept at close while the lines past it are few (`snapshot.tail_is_short`).
        self._snapshot_base: tuple[int, int] | None = None
        self._records_base: tuple[int, int] | None = None
        # Whether a boot compacts its records for RAM (`log.shared_fields`); not in a process
        # that exits after one command (`load(short_lived=True)`).
        self._compact_records = True
        # Made for a write that has not landed yet (`create(for_a_write=True)`): its folder is
        # marked until `Store.settle_creation`.
        self.unsettled = False
        # Made by `create` and not announced yet: the first call that lands in it (or is told it
        # exists) announces it, the creator or not (`ServiceBase._announce_created`).
        self.unannounced = False

    # The empty search state, made at its first read (a boot fills it, a rewrite replaces it):
    # not in `__init__`, so a process that never reads it never imports the search package.
    @functools.cached_property
    def _index(self) -> LexicalIndex:
        from memory_worker.search.index import LexicalIndex

        return LexicalIndex()

    @functools.cached_property
    def _lessons(self) -> LessonIndex:
        """Live lessons' anchors, kept beside the lexical index."""
        from memory_worker.search.lessons import LessonIndex

        return LessonIndex()

    @functools.cached_property
    def _lanes(self) -> LaneIndexes:
        """Live memories' context and intention (association lanes)."""
        from memory_worker.search.lanes import LaneIndexes

        return LaneIndexes()

    @functools.cached_property
    def _lane_vectors(self) -> LaneVectors:
        """The lanes' vector sidecar."""
        return LaneVectors(self.path, self._lanes, self._vector_appends)

    @property
    def _memories(self) -> dict[str, Memory]:
        """Every record by id in replay order (a lazily read bank's lines all validated now)."""
        lazy = self._lazy
        if lazy is not None:
            # A bulk build, as the boot's that validated every line: no collector passes over
            # the thousands of records it makes, which are frozen after (`storage.boot`).
            with booting(hand_back=False):
                self._records = lazy.all()
            self._end_lazy()
        return self._records

    @_memories.setter
    def _memories(self, records: dict[str, Memory]) -> None:
        self._records = records
        self._end_lazy()

    def _end_lazy(self) -> None:
        """Every record held as a record: the lines and the records file's columns let go (its
        `subject` column names people: a session's RAM kept a name an erasure took out of every
        file, for as long as it ran)."""
        self._lazy, self._lazy_columns, self._lazy_subjects = None, {}, ()

    def _get(self, memory_id: str) -> Memory | None:
        """`memory_id`'s durable record (read from its line alone while the bank is lazy)."""
        lazy = self._lazy
        return self._records.get(memory_id) if lazy is None else lazy.get(memory_id)

    def _has(self, memory_id: str) -> bool:
        lazy = self._lazy
        return memory_id in (self._records if lazy is None else lazy)

    def _size(self) -> int:
        lazy = self._lazy
        return len(self._records if lazy is None else lazy)

    def _counts_unread(self) -> Counts | None:
        """`_counts_of` the records, while they are read lazily: from the records file's columns
        for the lines not read, from the records for the rest. None when they are all read."""
        lazy, columns = self._lazy, self._lazy_columns
        if lazy is None or not columns:
            return None
        unread = columns["live"].copy()  # (a record not live counts for nothing)
        unread[lazy.rows_read()] = False
        read = [record for record in lazy.records() if record.live]
        pinned = columns["pinned"][unread]
        counted = unread.copy()
        counted[unread] = ~pinned  # live and not pinned: its statement dates its category
        codes, stated = columns["category"][counted], columns["stated"][counted]
        oldest = {code: int(stated[codes == code].min()) for code in set(codes.tolist())}
        for record in read:
            if not record.pinned:
                code, at = category_code(record.category), record.last_stated_at
                oldest[code] = min(at, oldest.get(code, at))
        rows = columns["subject"][unread]
        subjects = {self._lazy_subjects[row] for row in set(rows[rows >= 0].tolist())}
        subjects.update(subject_key(r.subject) for r in read if r.subject is not None)
        # In code order, as `oldest_stated` lists them; a code without a name has no TTL.
        names = {code: name for name, code in CATEGORY_CODES.items()}
        by_name = {names[code]: oldest[code] for code in sorted(oldest) if code in names}
        live = int(unread.sum()) + len(read)
        pinned_live = int(pinned.sum()) + sum(1 for record in read if record.pinned)
        return Counts(live, pinned_live, len(subjects), by_name)

    def _all_read(self) -> bool:
        """Every record read (`_memories`) for a derived file close leaves; False when a line
        no longer reads (`_unreadable_line`: the bank is broken, and leaves none)."""
        try:
            self._memories  # noqa: B018  (the read validates the lines not read yet)
        except StorageError:
            return False
        return True

    def _unreadable_line(self, memory_id: str) -> None:
        """A lazily read line the records snapshot vouched for did not read as its record
        (`log.LazyRecords`): the snapshot is wrong, so it goes, and RAM may not say what the
        log does, so the bank takes no write until a reload replays the log (and reports the
        line, as the boot that validated every line would have)."""
        with contextlib.suppress(OSError):
            (self.path / RECORDS_FILE).unlink()
        self._broken = self._broken or f"the line of memory {memory_id} no longer reads"
        log.warning("bank_records_unreadable", bank=self.name, memory=memory_id)

    def __repr__(self) -> str:
        return (
            f"<Bank {self.name!r} memories={self._size()} live={self.live_count()} "
            f"rules={len(self._rules)} staged={len(self._staged)} damage={len(self._damage)}>"
        )

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        name: str,
        path: Path,
        description: str,
        warnings: DurabilityWarnings | None = None,
        guard: Guard | None = None,
        overrides: BankOverrides | None = None,
        *,
        for_a_write: bool = False,
    ) -> Bank:
        """Make the folder with its `bank.yaml` and `rules/` (blocking). It is built under a
        hidden temporary name and renamed into place, so a crash never leaves half a bank.
        `for_a_write`: made for the write about to go into it, so a crash before that write
        lands leaves no bank either (`storage.unfinished`: marked until `Store.settle_creation`)."""
        if guard is not None:
            guard()
        staging = path.with_name(f".{name}.tmp-{secrets.token_hex(4)}")
        try:
            staging.mkdir()  # its parent is the data dir: never a planted folder
            (staging / RULES_DIR).mkdir()
            chosen = overrides if overrides is not None else no_overrides()
            bank_file = render_bank_file(description, chosen)
            files.atomic_write(staging / BANK_FILE, bank_file, within=path.parent)
            if for_a_write:
                unfinished.mark(staging, bank_file, within=path.parent)
            files.fsync_dir(staging)
            os.rename(staging, path)  # fails when the name is taken: never merge into a folder
        except (OSError, StorageError) as exc:
            files.remove_tree(staging)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot create bank folder {path}: {exc.strerror}") from exc
        bank = cls(name, path, description, warnings, guard, overrides)
        bank.unsettled = for_a_write
        bank.unannounced = True
        try:
            files.fsync_dir(path.parent)
        except StorageError as exc:
            # Past the rename the bank exists: report the unsynced entry, do not disown the folder.
            bank.warnings.note(name, "bank folder created", exc)
        return bank

    @classmethod
    def load(
        cls,
        name: str,
        path: Path,
        warnings: DurabilityWarnings | None = None,
        guard: Guard | None = None,
        *,
        short_lived: bool = False,
        hand_edit: bool = False,
    ) -> Bank:
        """Replay a bank folder (blocking): description, memories, rules, leftovers. A planted
        link where a file of ours belongs is reported and never followed. `short_lived`: the
        process exits after one command, so what only pays off over a long life is skipped: the
        heap the build freed is not handed back to the OS (`storage.boot`), replayed records are
        not compacted for RAM (`log.shared_fields`: equal records either way). `hand_edit`: a
        reload after a change made by hand, so a log that ends short is a person's write still
        under way (`cp`, `git checkout` of a big file), not a crash of ours: reported as damage,
        never cut (the writer would go on past the cut, leaving a hole of zero bytes)."""
        bank = cls(name, path, warnings=warnings, guard=guard)
        for leftover in files.remove_replacements(path / MEMORIES_FILE):
            log.info("rewrite_leftover_removed", bank=name, file=leftover)  # never renamed in
        # An interrupted forget-subject finishes first.
        erasure.resume(path.parent, name, path)
        # What it finished, and what an earlier process erased and died before announcing.
        bank.note_erased(erasure.unannounced(path))
        bank._read_bank_file()
        if not hand_edit:
            bank._set_aside_interrupted_tail()
        # Stamped before reading, so an edit made while replaying still counts as a change.
        bank._log_stamp = _stat_stamp(bank.path / MEMORIES_FILE)
        bank._compact_records = not short_lived
        with booting(hand_back=not short_lived):  # the bulk build: no collector passes
            bank._replay(defer_search=short_lived)
            if bank._deferred is None:
                bank._load_vectors()
            bank.access.load()
        bank._damage.extend(bank._rules.load())
        for damage in bank._damage:
            event = "bank_line_edited_by_hand" if damage.kept else "bank_damage_skipped"
            log.warning(event, bank=name, detail=damage.describe())
        return bank

    def _set_aside_interrupted_tail(self) -> None:
        """Move a write that a crash cut short at the end of the log (never acknowledged, so
        nothing is lost) into `interrupted-writes.jsonl`, so the log ends whole again: otherwise
        its torn lines stay damage for good, and every rewrite (erasure, retention, compaction)
        is refused. The bytes are kept, not dropped: a last line a person typed without a newline
        and a typo looks the same as a torn one."""
        path = self.path / MEMORIES_FILE
        if files.is_link(path):
            return  # planted: reported by the replay, never read or cut
        try:
            offset = interrupted_tail(path, within=self.root)
            if offset is None:
                return
            moved = files.set_aside_tail(
                path, offset, self.path / INTERRUPTED_FILE, within=self.root
            )
        except StorageError as exc:
            log.warning("interrupted_tail_not_set_aside", bank=self.name, error=exc.message)
            return  # the replay reports those lines as damage, as before
        note = (
            f"{self.name}/{MEMORIES_FILE}: an interrupted write at its end ({moved} bytes, never "
            f"acknowledged) was moved to {self.name}/{INTERRUPTED_FILE}"
        )
        self.set_aside.append(note)
        log.warning("interrupted_tail_set_aside", bank=self.name, bytes=moved, offset=offset)

    def _read_bank_file(self) -> None:
        found = read_bank_file(self.path / BANK_FILE, within=self.root)
        self.description, self.overrides = found.description, found.overrides
        self._bank_file_problem = found.problem
        if found.problem is not None:
            self._damage.append(Damage(BANK_FILE, found.problem))

    @classmethod
    def peek(cls, name: str, path: Path) -> BankSummary | None:
        """The summary of the bank folder at `path` without replaying its log (blocking): from its
        counts file, while that still matches the log (`storage.counts`); None otherwise (and when
        its `bank.yaml` has a problem, which a replay reports as damage)."""
        if erasure.pending(path):  # an erasure a crash interrupted: the load finishes it first
            return None
        counts = read_counts(path, path / MEMORIES_FILE)
        if counts is None:
            return None
        found = read_bank_file(path / BANK_FILE, within=path.parent)
        if found.problem is not None:
            return None
        bank = cls(name, path)  # files are opened on first write: nothing but its rules is read
        bank._rules.load()
        return BankSummary(
            name,
            found.description,
            counts.live,
            counts.pinned,
            len(bank._rules),
            counts.subjects,
            found.overrides,
            counts.stated,
        )

    def summary(self, expired: Ints | None = None) -> BankSummary:
        """What listing banks shows of this bank; `expired`: the index slots of live memories
        past their TTL the reaper has not retired yet, counted as gone (never pinned: retention
        spares those)."""
        return BankSummary(
            self.name,
            self.description,
            self.live_count() - (0 if expired is None else int(expired.size)),
            self.pinned_count(),
            len(self._rules),
            self.subject_count(expired),
            self.overrides,
        )

    def subject_count(self, leaving_out: Ints | None = None) -> int:
        """How many subjects the live memories (but the index slots `leaving_out`) are about
        (general ones not counted), each person once whatever the case their memories spell them
        in (the index's subject codes are `subject_key`s)."""
        return self.index.subjects_about(leaving_out)

    def _save_counts(self) -> None:
        """Leave the counts for the next listing, when RAM says exactly what the log does: nothing
        in flight, nothing broken, the log as this bank last replayed or fsynced it."""
        if self._queue or self._held or self._broken is not None or self._log_stamp is None:
            return
        log_path = self.path / MEMORIES_FILE
        if _stat_stamp(log_path) != self._log_stamp:
            return  # edited behind our back: the next replay counts it
        stamp = counts_stamp(log_path)
        if stamp is None or _stat_stamp(log_path) != self._log_stamp:
            return
        if self._deferred is not None:  # from the records: what the index's columns would say
            found = self._counts_unread()
            if found is None and not self._all_read():
                return
            counts = _counts_of(self._memories.values()) if found is None else found
        else:
            stated = self._index.oldest_stated()
            counts = Counts(self.live_count(), self.pinned_count(), self.subject_count(), stated)
        write_counts(self.path, stamp, counts)

    async def configure(
        self, update: Callable[[str, BankOverrides], tuple[str, BankOverrides]]
    ) -> tuple[tuple[str, BankOverrides], tuple[str, BankOverrides]]:
        """Write the bank's description and chosen settings, `update(description, overrides)`
        of what it has, to `bank.yaml` (atomically), then adopt them; returns (before, after).
        `update` runs under the settings lock, on what the bank has then: two changes at once
        each keep the other's (merged before the first landed, the second wrote back what the
        first replaced). Nothing is written when it changes nothing. A failed write
        (`StorageError`) leaves file and RAM as they were, except one that landed but whose
        folder sync failed (`UnsyncedChange`): RAM adopts it too."""
        self._check_writable()
        async with self._settings_lock:
            self._check_writable()  # again: frozen (a reload, a delete) while this one waited
            before = (self.description, self.overrides)
            description, overrides = update(*before)
            if (description, overrides) == before:
                return before, before
            try:
                await asyncio.to_thread(
                    functools.partial(write_bank_file, within=self.root),
                    self.path / BANK_FILE,
                    description,
                    overrides,
                )
            except files.UnsyncedChange as exc:
                # Renamed in, its folder not synced: RAM follows the disk (the next boot reads
                # the new file), the caller is told, as for a rule write.
                self.description, self.overrides = description, overrides
                self.warnings.note(self.name, "bank.yaml written", exc)
                raise
            self.description, self.overrides = description, overrides
            self._bank_file_problem = None  # written whole by us
        return before, (description, overrides)

    def _replay(self, *, defer_search: bool = False) -> None:
        """The records and the exact-text map, then the search state; `defer_search`: a
        short-lived process's boot that read the records snapshot leaves the search state to be
        built when something first reads it (`_Deferred`)."""
        self._boot_identity = self._replay_from_records(lazy=defer_search)
        if self._boot_identity is None:
            self._boot_data = None
            memories, found = replay(
                self.path / MEMORIES_FILE, within=self.root, compact=self._compact_records
            )
            self._memories = memories
            self._eviction = None
            self._damage.extend(found)
            keys = [text_key(normalize(record.text)) for record in memories.values()]
            self._by_text = TextMap.bulk(keys, list(memories))
        if self._lazy is not None:
            # Lazily read records (only past the records snapshot, for a short-lived process):
            # the live count from the records file's columns.
            assert self._log_stamp is not None and self._boot_data is not None
            assert self._boot_identity is not None
            counts = self._counts_unread()
            assert counts is not None
            self._deferred = _Deferred(
                None,
                self._log_stamp,
                self._boot_data,
                self._boot_identity,
                len(self._damage),
                counts.live,
            )
            self._boot_identity, self._boot_data = None, None
            return
        records = self._memories.values()
        # The live ones, picked from C: `invalid_at is None` for each, no Python frame per record.
        live = list(compress(records, map(is_, map(_INVALID_AT, records), repeat(None))))
        if defer_search and self._boot_data is not None and self._boot_identity is not None:
            # Only past the records snapshot: its bytes, checked against the stamp, are what the
            # index snapshot is checked against later (the log may have grown by then).
            assert self._log_stamp is not None  # the records path ran only with it
            self._deferred = _Deferred(
                live,
                self._log_stamp,
                self._boot_data,
                self._boot_identity,
                len(self._damage),
                len(live),
            )
            self._boot_identity, self._boot_data = None, None
            return
        from memory_worker.search.ranking import indexed

        if not self._index_from_snapshot(live):
            self._index.add_many(indexed(record) for record in live)
        self._boot_identity, self._boot_data = None, None
        self._lanes.add_many(lane_carriers(live))
        self._index_lessons()

    def _replay_from_records(self, *, lazy: bool = False) -> tuple[int, int] | None:
        """Load the records `.records.npz` names when it is for exactly the log's bytes as read
        now, or for a prefix of them (the log grew by appends since) whose lines past it replay
        without damage (`storage.snapshot`, `log.tail_records`): only the winning lines of the
        prefix are validated, the exact-text map comes from its keys, and the lines past it are
        replayed over them by replay's rule. Returns the log's (length, CRC-32) when it did; None
        (nothing loaded) sends the boot through the full replay. `lazy`: a short-lived boot
        keeps the lines unread until asked for (`log.LazyRecords`) when every line was in the
        stored form (nothing to read them all again for)."""
        path = self.path / MEMORIES_FILE
        if self._log_stamp is None or not (self.path / RECORDS_FILE).is_file():
            return None
        if files.is_link(path):
            return None  # the replay reports it
        try:
            data = files.read_bytes(path, within=self.root)
        except StorageError:
            return None
        identity = (len(data), zlib.crc32(data))
        size = len(data)
        spans = read_records(self.path, identity)
        tail: list[Memory] = []
        if spans is None:
            found = records_prefix(self.path, data)
            if found is None:
                return None
            spans, size = found
            grown = tail_records(data, size)
            if grown is None:
                return None
            tail = grown
        if _stat_stamp(path) != self._log_stamp:
            return None
        if lazy and spans.as_stored and spans.ids:
            loaded = self._load_lazily(data, spans, tail)  # False: sent to the full replay
            return self._booted_from_records(data, size, identity) if loaded else None
        starts, ends = spans.starts.tolist(), spans.ends.tolist()
        memories = records_at(data, starts, ends, compact=self._compact_records)
        if memories is None or len(memories) != len(starts):
            return None
        if not spans.as_stored:
            self._restore_forms(memories, data, starts)
        self._memories = memories
        self._eviction = None
        if tail:
            keys = _replayed_over(memories, spans.text_keys.tolist(), tail)
            self._by_text = TextMap.bulk(keys, list(memories))
        else:
            self._by_text = TextMap.bulk(spans.text_keys, list(memories))
        return self._booted_from_records(data, size, identity)

    def _booted_from_records(
        self, data: bytes, size: int, identity: tuple[int, int]
    ) -> tuple[int, int]:
        """What a boot from the records of the log `data` (its first `size` bytes) notes."""
        assert self._log_stamp is not None
        if size == len(data):
            self._records_stamp = self._log_stamp
        self._records_base = (self._log_stamp[0], size)
        self._boot_data = data
        return identity

    def _load_lazily(self, data: bytes, spans: RecordSpans, tail: list[Memory]) -> bool:
        """`_replay_from_records`'s records kept as lines, validated when first read, and
        `tail` (the records past the prefix) replayed over them by replay's rule. False (nothing
        loaded) when a line the tail replaces does not read as its record: the boot replays the
        log then, as the boot that validated every line did, and reports that line."""
        lazy = LazyRecords(
            spans.ids, data, spans.starts.tolist(), spans.ends.tolist(), self._unreadable_line
        )
        self._records, self._lazy = {}, lazy
        self._lazy_columns, self._lazy_subjects = spans.columns, spans.subjects
        self._eviction = None
        if tail:
            broken = self._broken
            try:
                keys = _replayed_over(lazy, spans.text_keys.tolist(), tail)
            except StorageError:
                # Still booting (`_unreadable_line` dropped the records file): no bank to refuse
                # writes yet, and the full replay is what it would be asked to do. A failed load
                # here made the bank unavailable for the command (and a session's whole life).
                self._broken = broken
                self._memories = {}
                return False
            self._by_text = TextMap.bulk(keys, list(lazy))
        else:
            self._by_text = TextMap.bulk(spans.text_keys, list(spans.ids))
        return True

    def _save_records(self) -> None:
        """Leave `.records.npz` for the next boot, when the one on disk is not for this log, the
        log replayed without damage and has changed since only by our own durable writes (its
        stamp is ours), and a scan of its bytes finds exactly the ids, order and revisions RAM
        holds (`storage.snapshot`). When the one on disk is for a prefix of this log (it grew by
        appends) only the lines past that prefix are scanned."""
        stamp = self._log_stamp
        if self._queue or self._held or self._broken is not None or stamp is None:
            return
        if stamp == self._records_stamp or self._size() < SNAPSHOT_MIN_LIVE:
            return
        if _short_tail(self._records_base, stamp):
            return  # on disk: records of a prefix of this log (a boot replays the lines past it)
        # A replay must keep reporting the log's damage (a line edited by hand is just a line);
        # a line that no longer reads leaves none either (`_all_read`).
        if (
            any(d.file == MEMORIES_FILE and not d.kept for d in self._damage)
            or not self._all_read()
        ):
            return
        log_path = self.path / MEMORIES_FILE
        if files.is_link(log_path) or _stat_stamp(log_path) != stamp:
            return
        try:
            data = files.read_bytes(log_path, within=self.root)
        except StorageError:
            return
        if _stat_stamp(log_path) != stamp:
            return
        spans = self._spans_past_prefix(data)
        if spans is None:
            winners = winning_spans(data)
            if winners is None or list(winners) != list(self._memories):
                return
            if any(self._memories[i].revision != won[0] for i, won in winners.items()):
                return
            spans = [(start, end) for _, start, end in winners.values()]
        key_of = self._by_text.key_of()
        if len(key_of) != len(self._memories):
            return
        keys = [key_of[memory_id] for memory_id in self._memories]
        # The log's own damage (`_damage`): reading `damage` built the whole search state (and
        # read the vector sidecars) at a one-shot close only to look at what the replay found.
        restored = any(damage.reason == RESTORED_FORM for damage in self._damage)
        identity = (len(data), zlib.crc32(data))
        ids = list(self._memories)
        columns, subjects = _columns_of(self._memories.values())
        write_records(
            self.path, identity, spans, keys, ids, columns, subjects, as_stored=not restored
        )
        self._records_stamp, self._records_base = stamp, (stamp[0], len(data))

    def _restore_forms(self, memories: dict[str, Memory], data: bytes, starts: list[int]) -> None:
        """Records a records file loaded as a replay reads them (`log.as_stored`): its lines were
        not all in the stored form when it was written. Each hand-written one is mentioned as the
        replay does, by its line."""
        for position in as_stored(memories, compact=self._compact_records):
            line = data.count(b"\n", 0, starts[position]) + 1  # as the replay numbers it
            self.damage.append(Damage(MEMORIES_FILE, RESTORED_FORM, line, kept=True))

    def _spans_past_prefix(self, data: bytes) -> list[tuple[int, int]] | None:
        """The winning spans of the log `data`, from the records on disk for a prefix of it and a
        scan of the lines past it: replay order is the prefix's winners then the ids first seen
        past it, so the prefix's spans belong to RAM's first ids (each of their lines is checked
        to begin with its id). None when that does not hold: the caller scans the whole log."""
        found = records_prefix(self.path, data)
        if found is None:
            return None
        prior, size = found
        ids = list(self._memories)
        starts, ends = prior.starts.tolist(), prior.ends.tolist()
        if len(starts) > len(ids):
            return None
        for memory_id, start in zip(ids, starts, strict=False):
            head = b'{"id":"%s"' % memory_id.encode("utf-8", "surrogatepass")
            if not data.startswith(head, start):
                return None
        tail = winning_spans(data, size)
        if tail is None:
            return None
        merged = {memory_id: (s, e) for memory_id, s, e in zip(ids, starts, ends, strict=False)}
        for memory_id, (revision, start, end) in tail.items():
            held = merged.get(memory_id)
            won = revision
            if held is not None:
                before = revision_at(data, *held)
                if before is None:
                    return None
                won = max(revision, before)
            if won == revision:
                merged[memory_id] = (start, end)
            record = self._memories.get(memory_id)
            if record is None or record.revision != won:
                return None
        return list(merged.values()) if list(merged) == ids else None

    def _index_from_snapshot(self, live: list[Memory]) -> bool:
        """Fill the index from `.index.npz` when it is for exactly the log just replayed, or for
        a prefix of it (`storage.snapshot`): then every memory with a line past the prefix is
        analysed again and the rest taken from the snapshot, in replay order, which is what a
        build from the log gives. The log must be unchanged since the stamp taken before
        replaying, and a prefix is used only for a log that replayed without damage and whose
        lines past it do not finish a write begun before it. A deferred build (`_Deferred`)
        checks it against the boot's bytes and stamp: the log may have grown by our writes
        since, which are applied after."""
        deferred = self._deferred
        stamp = self._log_stamp if deferred is None else deferred.stamp
        if len(live) < SNAPSHOT_MIN_LIVE or stamp is None:
            return False
        path = self.path / MEMORIES_FILE
        data = self._boot_data
        if data is None:
            if files.is_link(path):
                return False
            try:
                data = files.read_bytes(path, within=self.root)
            except StorageError:
                return False
        # The records path has the log's CRC-32 already: not a second pass over its bytes.
        known = self._boot_identity
        crc = known[1] if known is not None and known[0] == len(data) else None
        found = snapshot_prefix(self.path, data, crc)
        if found is None or (deferred is None and _stat_stamp(path) != stamp):
            return False
        snapshot_ids, analysis, size = found
        ids = list(map(_ID, live))
        if size == len(data):
            if snapshot_ids != ids:
                return False
            self._snapshot_stamp = stamp
        else:
            grown = self._grown_analysis(data, size, live, ids, snapshot_ids, analysis)
            if grown is None:
                return False
            analysis = grown
        # Each column in one C-level pass over the records' field values (`itemgetter` on their
        # `__dict__`s: half the cost of an attribute lookup on the model), not a Python loop.
        values = list(map(_VALUES, live))
        self._index.load_analysis(
            ids,
            analysis,
            corroboration=list(map(itemgetter("corroboration"), values)),
            pinned=list(map(itemgetter("pinned"), values)),
            stated_at=_last_stated(values),
            created_at=list(map(itemgetter("created_at"), values)),
            tags=list(map(itemgetter("tags"), values)),
            subjects=list(map(itemgetter("subject"), values)),
            sessions=_sessions(values),
            categories=list(map(itemgetter("category"), values)),
        )
        self._snapshot_base = (stamp[0], size)
        return True

    def _grown_analysis(
        self,
        data: bytes,
        size: int,
        live: list[Memory],
        ids: list[str],
        snapshot_ids: list[str],
        analysis: Analysis,
    ) -> Analysis | None:
        """The analysis of `live` from a snapshot of the log's first `size` bytes (`analysis`
        of `snapshot_ids`): the memories with a line past it analysed afresh, every other one
        taken from the snapshot; None when that cannot be vouched for (damage, a write across
        the prefix's end, an unreadable line past it, a memory the snapshot lacks)."""
        if any(damage.file == MEMORIES_FILE and not damage.kept for damage in self._damage):
            return None
        if continues_batch(data, size):
            return None
        past = winning_spans(data, size)
        if past is None:
            return None
        row_of = dict(zip(snapshot_ids, range(len(snapshot_ids)), strict=False))
        if len(row_of) != len(snapshot_ids):
            return None
        rows: list[int] = []
        fresh: list[Memory] = []
        kept = 0
        for memory_id, record in zip(ids, live, strict=True):
            if memory_id in past:
                rows.append(len(snapshot_ids) + len(fresh))
                fresh.append(record)
                continue
            row = row_of.get(memory_id)
            if row is None:
                return None
            rows.append(row)
            kept += 1
        if kept != sum(1 for memory_id in snapshot_ids if memory_id not in past):
            return None  # a memory live in the snapshot, untouched since, is no longer live
        from memory_worker.search.index import analyze, combine
        from memory_worker.search.ranking import indexed

        extra = analyze([indexed(record) for record in fresh])
        return combine(analysis, extra, rows)

    def _save_snapshot(self) -> None:
        """Leave `.index.npz` for the next boot, when the one on disk is not for this log and RAM
        says exactly what the log does (nothing in flight, the log as we last replayed or
        fsynced it, before and after reading it for its checksum)."""
        stamp = self._log_stamp
        if self._queue or self._held or self._broken is not None or stamp is None:
            return
        if self._deferred is not None:
            if self.live_count() < SNAPSHOT_MIN_LIVE or self._snapshot_kept(stamp):
                return
            # A boot would have written it again: built, it is. Best effort, as every derived
            # file's write is (a failure costs the next boot a rebuild): a build failing here (a
            # vector sidecar unreadable for a moment) raised out of a one-shot command's close
            # after its writes had landed, and the banks after this one were never closed nor
            # the data dir's lock released. The failed build leaves the bank as it was.
            try:
                self._searchable()
            except Exception as exc:
                log.warning("index_snapshot_not_left", bank=self.name, error=str(exc))
                return
        if stamp == self._snapshot_stamp or len(self._index) < SNAPSHOT_MIN_LIVE:
            return
        if _short_tail(self._snapshot_base, stamp):
            return  # on disk: the index of a prefix of this log (a boot analyses the lines past it)
        log_path = self.path / MEMORIES_FILE
        if _stat_stamp(log_path) != stamp:
            return
        identity = log_identity(log_path)
        if identity is None or _stat_stamp(log_path) != stamp:
            return
        ids = [memory_id for memory_id, record in self._memories.items() if record.live]
        write_snapshot(self.path, identity, ids, self._index.analysis_of(ids))
        self._snapshot_stamp, self._snapshot_base = stamp, (stamp[0], identity[0])

    # --- the search state, maybe built late ------------------------------------------------------

    @property
    def index(self) -> LexicalIndex:
        self._searchable()
        return self._index

    @property
    def lanes(self) -> LaneIndexes:
        self._searchable()
        return self._lanes

    @property
    def lessons(self) -> LessonIndex:
        self._searchable()
        return self._lessons

    @property
    def lane_vectors(self) -> LaneVectors:
        self._searchable()
        return self._lane_vectors

    @property
    def damage(self) -> list[Damage]:
        """What the load found broken (and the vector sidecars: read with the search state)."""
        self._searchable()
        return self._damage

    def _searchable(self) -> None:
        """Build the search state a short-lived boot left for later, if it did."""
        if self._deferred is not None:
            self._build_deferred()

    def _build_deferred(self) -> None:
        """What `_replay` and `load` would have built at boot, from the boot's records, then
        every record applied since applied to it, in order: the same state, bit for bit, as a
        boot that built it and applied them one by one. A failure leaves it unbuilt (the next
        read tries again and fails the same way) and is raised to the caller."""
        from memory_worker.search.ranking import indexed

        deferred = self._deferred
        assert deferred is not None
        boot = deferred.boot_records(self._memories)
        if deferred.live is None:  # read lazily: the boot's live records, as `_replay` picks them
            values = boot.values()
            deferred.live = list(compress(values, map(is_, map(_INVALID_AT, values), repeat(None))))
        damage = self._damage
        self._damage = damage[: deferred.damage_at]
        try:
            with booting(hand_back=False):  # a bulk build, as at boot
                self._boot_data, self._boot_identity = deferred.data, deferred.identity
                try:
                    if not self._index_from_snapshot(deferred.live):
                        self._index.add_many(indexed(record) for record in deferred.live)
                finally:
                    self._boot_data, self._boot_identity = None, None
                self._lanes.add_many(lane_carriers(deferred.live))
                self._index_lessons(boot)
                self._load_vectors(boot)
                for record, previous in deferred.applied:
                    self._apply_search(record, previous, None)
        except BaseException:
            self._damage = damage
            self._reset_search()
            raise
        found = self._damage[deferred.damage_at :]
        self._damage = [*self._damage, *damage[deferred.damage_at :]]
        self._deferred = None
        for problem in found:  # logged as the load logs what it found
            log.warning("bank_damage_skipped", bank=self.name, detail=problem.describe())

    def _reset_search(self) -> None:
        """An empty search state (a failed deferred build's remains dropped)."""
        from memory_worker.search.index import LexicalIndex
        from memory_worker.search.lanes import LaneIndexes
        from memory_worker.search.lessons import LessonIndex

        self._index = LexicalIndex()
        self._lessons = LessonIndex()
        self._lanes = LaneIndexes()
        self._lane_vectors = LaneVectors(self.path, self._lanes, self._vector_appends)
        self._vector_models.clear()
        self._snapshot_stamp = self._snapshot_base = None

    def _snapshot_kept(self, stamp: _Stamp) -> bool:
        """With the search state not built (`_Deferred`): whether a boot that built it would
        have left `.index.npz` as it is at close: it is for the log's bytes the boot read, or a
        prefix of them, by this analyzer (its header and the prefix's CRC-32; a boot checks its
        arrays too), that prefix does not end inside a write, and the log (the same file) grew
        only a little past it (`tail_is_short`). Otherwise the index is built and written."""
        deferred = self._deferred
        assert deferred is not None
        size = snapshot_size(self.path, deferred.data, deferred.identity)
        if size is None or continues_batch(deferred.data, size):
            return False
        return deferred.stamp[0] == stamp[0] and tail_is_short(size, stamp[1])

    def _index_lessons(self, memories: Mapping[str, Memory] | None = None) -> None:
        # Only records with anchors can be lessons: `filter` passes the rest over from C.
        held = self._memories if memories is None else memories
        for record in filter(_ANCHORS, held.values()):
            if record.live and record.anchors is not None and is_lesson(record):
                self._lessons.add(record.id, record.anchors)

    def _load_vectors(self, memories: Mapping[str, Memory] | None = None) -> None:
        """The vector sidecars' current vectors into the index and the lanes, for `memories`
        (the bank's records, or those a deferred build was booted with)."""
        held = self._memories if memories is None else memories
        try:
            records, skipped = load_vectors(self.path / VECTORS_FILE, within=self.root)
        except StorageError as exc:  # a planted link or pipe: derived data, so rebuilt without it
            if files.is_transient(exc):
                raise
            self._damage.append(Damage(VECTORS_FILE, f"{exc.message}; re-embedded"))
            records, skipped = {}, 0
        if skipped:
            self._damage.append(
                Damage(
                    VECTORS_FILE,
                    f"{skipped} unreadable line(s) skipped; their memories are re-embedded",
                )
            )
        for record in records.values():
            memory = held.get(record.id)
            current = (
                memory is not None
                and memory.live
                and (
                    record.text_hash == text_hash(memory.text)
                    if record.text_hash is not None
                    # a Rust worker's line: embedded at this revision (its own rule)
                    else record.revision == memory.revision
                )
            )
            if current and self._index.set_vector(record.id, record.vector):
                self._vector_models[record.id] = record.model
        try:
            skipped = self._lane_vectors.load(self._lanes, held)
        except StorageError as exc:  # the same for the lanes': never the bank offline for it
            if files.is_transient(exc):
                raise
            self._damage.append(Damage(LANE_VECTORS_FILE, f"{exc.message}; lanes re-embedded"))
            skipped = self._lane_vectors.load(self._lanes, held, read=False)
        if skipped:
            self._damage.append(
                Damage(
                    LANE_VECTORS_FILE,
                    f"{skipped} unreadable line(s) skipped; their lanes are re-embedded",
                )
            )

    def _holds(self, model: str) -> bool:
        """Whether the index's vectors are `model`'s. At first sight (boot) a model that some
        loaded vectors come from — or any model, when there are none — takes over at once."""
        self._searchable()
        if self._embed_model is None and (
            not self._vector_models or model in set(self._vector_models.values())
        ):
            self._take_over(model)
        return model == self._embed_model

    def _take_over(self, model: str) -> None:
        """`model` becomes the one whose vectors count: every other model's leaves the index."""
        self._embed_model = model
        stale = [i for i, m in self._vector_models.items() if m != model]
        if stale and len(stale) == len(self._vector_models):
            self._index.reset_vectors()  # none left: a model of another width may follow
        else:
            for memory_id in stale:
                self._index.clear_vector(memory_id)
        for memory_id in stale:
            del self._vector_models[memory_id]
        self._to_embed = {
            m.id: None
            for m in self._memories.values()
            if m.live and self._vector_models.get(m.id) != model
        }
        self._embed_ready = not self._to_embed
        self._lane_vectors.take_over(model, self._memories)

    def embedded_by(self, model: str) -> bool:
        """Whether any live memory holds a vector from `model` (a scan: for one-shot commands,
        which embed a query only when there is something to compare it with)."""
        self._searchable()
        return model in self._vector_models.values()

    def models_other_than(self, model: str) -> list[str]:
        """The models other than `model` that live memories hold vectors from, sorted: a process
        that does not embed its writes never makes its model take over a bank another one embeds
        (`EmbeddingWork.left_to_another`). None once `model` took over (`_take_over` drops every
        other model's vectors); else a scan, until it does."""
        self._searchable()
        if model == self._embed_model:
            return []
        return sorted(set(self._vector_models.values()) - {model})

    def needs_embedding(self, model: str, limit: int, *, newest: bool = False) -> list[Memory]:
        """Live memories with no vector from `model` (new, edited, or embedded by another model);
        for a model that has not taken over yet, any live ones (it needs them all). Oldest
        first, or `newest` first (a recall's catch-up: what was just said is asked about most,
        and costs the most when it ranks without its vector)."""
        self._searchable()
        if not self._holds(model):
            records = reversed(self._memories.values()) if newest else self._memories.values()
            return list(islice((m for m in records if m.live), limit))
        pending = reversed(self._to_embed) if newest else iter(self._to_embed)
        return [self._memories[memory_id] for memory_id in islice(pending, limit)]

    def semantic_ready(self, model: str) -> bool:
        """Whether a query embedded by `model` may be compared here: the index holds `model`'s
        vectors only, for every live memory (new ones arriving since are in flight) or for at
        least `SEMANTIC_COVERAGE` of them (what a process that does not embed its writes saved
        since: the ranking stands their lexical relevance in for their semantic one). Until
        then recall runs without its semantic arm and says so."""
        if not self._holds(model):
            return False
        if self._embed_ready:
            return True
        live = len(self._index)
        return live > 0 and len(self._to_embed) <= live * (1.0 - SEMANTIC_COVERAGE)

    def restart_embedding(self) -> None:
        """Embeddings were turned on again: what was saved meanwhile must be embedded before the
        semantic arm counts again."""
        self._searchable()
        self._embed_ready = self._embed_ready and not self._to_embed

    def embedding_progress(self, model: str) -> tuple[int, int]:
        """`(embedded, live)`: how many live memories have a vector from `model`."""
        self._searchable()
        live = len(self._index)
        if not self._holds(model):
            return 0, live
        return live - len(self._to_embed), live

    async def store_vectors(self, model: str, pairs: Sequence[tuple[Memory, list[float]]]) -> int:
        """Keep the vectors whose memory is still live with the same text; returns how many. The
        first vectors of a new model make it take over (the old ones are never mixed in)."""
        self._searchable()
        kept: list[VectorRecord] = []
        if pairs and model != self._embed_model:
            self._take_over(model)
        width = self._index.vector_width
        if pairs and width and len(pairs[0][1]) != width:
            # The same model name now answers with another width: start it over.
            self._index.reset_vectors()
            self._vector_models.clear()
            self._to_embed = {m.id: None for m in self._memories.values() if m.live}
            self._embed_ready = False
        for memory, vector in pairs:
            current = self._memories.get(memory.id)
            if current is None or not current.live or current.text != memory.text:
                continue  # edited or retired while it was being embedded: a later pass redoes it
            if self._index.set_vector(memory.id, vector):
                self._vector_models[memory.id] = model
                self._to_embed.pop(memory.id, None)
                kept.append(
                    VectorRecord(
                        memory.id, model, current.revision, text_hash(current.text), vector
                    )
                )
        if not self._to_embed:
            self._embed_ready = True
        if kept:
            await self._vector_appends.append(self.path / VECTORS_FILE, kept, self.root)
        return len(kept)

    async def vector_writes_settled(self) -> None:
        """Wait for the vector appends running now (`VectorAppends.settled`): once the log no
        longer holds a memory, none of its vectors is still on its way to a sidecar."""
        await self._vector_appends.settled()

    # --- reads (durable state) -----------------------------------------------------------------

    @property
    def memories(self) -> Mapping[str, Memory]:
        return self._memories

    @property
    def write_refused(self) -> str | None:
        """Why the bank refuses every write until `memory::reload` (a failed commit whose line
        could not be cut back), or None."""
        return self._broken

    def get(self, memory_id: str) -> Memory | None:
        return self._get(memory_id)

    def shown(self) -> dict[str, Memory]:
        """A copy of every record RAM shows, what a reload compares the log's replay with. A
        bank that found a lazily read line that no longer reads (`_unreadable_line`) shows the
        others, as the boot that validated every line (it skipped that one as damage) would
        have: `memory::reload`, which its refusal names, read every record of it first, met
        that line again and failed."""
        try:
            return dict(self._memories)
        except StorageError:
            lazy = self._lazy
            if lazy is None:
                raise
            return lazy.readable()

    async def revisions(self, memory_ids: Collection[str]) -> list[Memory]:
        """Every durable revision of `memory_ids` as the log holds them, in log order (read from
        the file: RAM keeps only the latest)."""
        await self.drain()  # what was acknowledged is on disk before we read it back
        path = self.path / MEMORIES_FILE
        return await asyncio.to_thread(history, path, memory_ids, within=self.root)

    async def records(self) -> list[Memory]:
        """Every intact record of the log in log order, every revision of every memory (an
        export): read from the file, as `revisions()` is; damaged lines are left out."""
        await self.drain()
        records, _ = await asyncio.to_thread(read_all, self.path / MEMORIES_FILE)
        return records

    def is_empty(self) -> bool:
        """No memory, rule or write in flight: what a bank just created looks like. A rule or
        `bank.yaml` write in flight counts: it may have landed on disk before RAM hears of it,
        and removing the bank then took an acknowledged rule with it."""
        return not (
            self._size()
            or self._rules
            or self._queue
            or self._held
            or self._staged
            or self._rules.busy
            or self._settings_lock.locked()
        )

    def live_count(self) -> int:
        # Counted as records land while the index is not built (`_Deferred`): its length then.
        return len(self._index) if self._deferred is None else self._deferred.live_count

    def pinned_count(self) -> int:
        return self.index.pinned_live()

    def rules(self) -> list[Rule]:
        return self._rules.all()

    def rule(self, name: str) -> Rule | None:
        return self._rules.get(name)

    # --- decisions (durable + written-but-not-yet-synced) ---------------------------------------

    def latest(self, memory_id: str) -> Memory | None:
        staged = self._staged.get(memory_id)
        return staged[0] if staged is not None else self._get(memory_id)

    def about(self, subject: str) -> list[str]:
        """The ids whose newest record, durable or in flight, is about `subject`."""
        ids = {m.id for m in self._memories.values() if of_subject(m.subject, subject)}
        ids.update(i for i, (r, _) in self._staged.items() if of_subject(r.subject, subject))
        return sorted(
            i for i in ids if (m := self.latest(i)) is not None and of_subject(m.subject, subject)
        )

    @contextlib.contextmanager
    def erasing(self, subject: str, ids: Iterable[str]) -> Iterator[None]:
        """While `subject` is being erased: a write of a record about them, or of one of `ids`
        (theirs when the erasure decided), is refused with `conflict`. Nothing of theirs lands
        between the erasure's pinned check and its rewrite (a pin would be erased), nor is held
        during the rewrite and written back after it (the erased memory would come back)."""
        self._erasing[subject] = frozenset(ids)
        try:
            yield
        except BaseException:
            if self._intent_names(subject):  # committed: the next load (or a retry) finishes it
                self._unfinished[subject] = self._erasing[subject]
            raise
        else:
            for unfinished in [s for s in self._unfinished if same_subject(s, subject)]:
                del self._unfinished[unfinished]
        finally:
            del self._erasing[subject]

    def note_erased(self, erased: erasure.Unannounced) -> None:
        """`erased` (id → subject, the erasure's key) was erased and nobody told yet: to
        announce (`take_unannounced_erasures`)."""
        self._unannounced_erasures.update(erased)

    def take_unannounced_erasures(self) -> erasure.Unannounced:
        """What `note_erased` noted (id → subject, key), once: nobody has been told yet. Once
        they are, `announced` takes them out of the outbox on disk."""
        erased, self._unannounced_erasures = self._unannounced_erasures, {}
        return erased

    def announced(self, ids: Iterable[str]) -> None:
        """The `erased` events of `ids` were sent: out of the outbox (blocking). A bank trashed
        meanwhile has no outbox left (`erasure.finish_in_trash` removed its copy's)."""
        done = list(ids)
        if done:
            with self._outbox_lock:
                erasure.write_unannounced(self.path, {}, done=done)

    def to_announce(self, erased: erasure.Unannounced) -> None:
        """Keep `erased` in the outbox on disk (blocking, durable) until `announced`: before an
        erasure's intent is cleared, so a kill before its events leaves them for the next load."""
        if erased:
            with self._outbox_lock:
                erasure.write_unannounced(self.path, erased)

    def _intent_names(self, subject: str) -> bool:
        """Whether the erasure intent on disk still names `subject` (unreadable: it may)."""
        try:
            return any(same_subject(s, subject) for s in erasure.pending(self.path))
        except StorageError:
            return True

    def being_erased(self, record: Memory) -> bool:
        """Whether a write of `record` is refused by an erasure under way (`erasing`)."""
        return self._erasing_about(record) is not None

    def _erasing_about(self, record: Memory) -> str | None:
        """The subject an erasure under way is taking `record` out with, if any: a record about
        them, one of theirs, or one retired in favour of one of theirs (`superseded_by`: their
        id, which the erasure clears from every record it rewrites, and this one would land
        after the rewrite with it)."""
        for subject, ids in (*self._erasing.items(), *self._unfinished.items()):
            if of_subject(record.subject, subject) or record.id in ids:
                return subject
            if record.superseded_by is not None and record.superseded_by in ids:
                return subject
        return None

    def _refuse_erased(self, records: Sequence[Memory]) -> None:
        for record in records:
            if self._erasing_about(record) is not None:
                # Not named: the refusal is logged and kept (a consolidation report's errors),
                # and would write the erased person's name down again.
                raise Conflict(
                    f"memory {record.id} is about a subject bank {self.name} is erasing; nothing "
                    "was written"
                )

    def in_flight(self) -> list[Memory]:
        """Every record written (or held) but not yet durable, newest revision of each: what a
        decision about the bank's contents (a cap) must count beside `memories`."""
        return [record for record, _ in self._staged.values()]

    def match_text(self, text: str, subject: str | None = None) -> Memory | None:
        """The record about `subject` (None: a general one) whose text is `text` up to case and
        whitespace: a live one first, else a retired one (to resurrect), else None. Among several,
        the most recently updated wins, so the answer depends only on the records, never on the
        order they were loaded in. The same words about another person are another memory."""
        norm = normalize(text)
        # Up to Unicode canonical equivalence too: "São" composed or decomposed (macOS, some
        # keyboards) is one text. The map is keyed by the stored form, so both forms are looked up.
        same = _canonical(norm)
        forms = {norm} if norm.isascii() else {norm, same, unicodedata.normalize("NFD", norm)}
        # Every save scans each record in flight (32 writers: ~32 of them): the text, which
        # nearly always differs, is compared first, so the subject is read only for an equal one.
        candidates = {
            record.id: record
            for record, staged_same in self._staged.values()
            if staged_same == same and same_subject(record.subject, subject)
        }
        for form in forms:
            for memory_id in self._by_text.ids(text_key(form)):
                record = self._get(memory_id)
                assert record is not None  # the map holds durable records' ids only
                if (
                    memory_id not in self._staged
                    and same_subject(record.subject, subject)
                    and _canonical(normalize(record.text)) == same
                ):
                    candidates[memory_id] = record
        if not candidates:
            return None
        return max(candidates.values(), key=lambda m: (m.live, m.updated_at, m.id))

    def decided_live_count(self, leaving_out: str | None = None) -> int:
        """Live memories as decisions see them (each one's latest record, written or durable),
        counting `leaving_out`'s durable record instead of its record in flight, if any."""
        count = self.live_count() + self._staged_live
        if leaving_out is not None and leaving_out in self._staged:
            count -= self._live_added(self._staged[leaving_out][0])
        return count

    def _live_added(self, staged: Memory) -> int:
        durable = self._get(staged.id)
        return int(staged.live) - int(durable is not None and durable.live)

    def first_evictable(self, n: int, skip: Collection[str] = ()) -> list[Memory]:
        """The first `n` memories in `capacity.eviction_order` (what a cap takes first) among the
        latest records (`latest`: in flight or durable), leaving out `skip`; from the kept
        order, not a scan of the bank."""
        if self._eviction is None and self._evictions_asked < ONE_OFF_EVICTIONS:
            # The kept order's build costs a key per memory (~35 ms at 10,000), more than a
            # one-shot command's single save spends on everything else it does: the first few
            # asks are answered over the index's columns, and a bank that keeps saving builds it.
            self._evictions_asked += 1
            return self._first_evictable_once(n, skip)
        if self._eviction is None:
            latest = {**self._memories, **{i: r for i, (r, _) in self._staged.items()}}
            keys = {i: self._eviction_key(record) for i, record in latest.items()}
            self._eviction = EvictionQueue({i: k for i, k in keys.items() if k is not None})
        return [self._decided(i) for i in self._eviction.first(n, skip)]

    def _first_evictable_once(self, n: int, skip: Collection[str]) -> list[Memory]:
        """`first_evictable` without the kept order: the durable memories that can come first
        (`first_to_go`, over the index's columns; from the records when the index is not built)
        and the records in flight, in eviction order."""
        flying = [r for i, (r, _) in self._staged.items() if i not in skip]
        excluded = {*self._staged, *skip}
        if self._deferred is not None:
            # No index built (a one-shot save into a full bank): the durable records' own first
            # `n` in eviction order, the order `first_to_go` keeps the candidates of (~10 ms at
            # 10,000 memories, where building the index to read its columns cost ~30-90 ms);
            # from the records file's columns while the lines are unread.
            found = self._first_to_go_unread(n, excluded)
            if found is None:
                rest = (record for i, record in self._memories.items() if i not in excluded)
                found = eviction_order(rest, self.seen, first=n)
            durable = found
        else:
            durable = first_to_go(
                self._index,
                self._memories,
                self.access,
                subject=None,
                scoped=False,
                exclude=excluded,
                k=n,
                evictable=evictable,
            )
        return eviction_order([*durable, *flying], self.seen, first=n)

    def _first_to_go_unread(self, n: int, excluded: Collection[str]) -> list[Memory] | None:
        """`eviction_order(durable records but `excluded`, first=n)` while the records are read
        lazily (`log.LazyRecords`): a line not read yet is keyed by the records file's columns
        (whether a cap may take it, when it was last stated), so only the `n` chosen are
        validated. None when the records are all read, or a chosen one's record does not say
        what its columns did (the caller reads every record then)."""
        lazy, columns = self._lazy, self._lazy_columns
        if lazy is None or not columns:
            return None
        may_go, stated = columns["evictable"].tolist(), columns["stated"].tolist()
        seen, row_of, get = self.seen, lazy.row, lazy.get
        keys: list[Key] = []
        for memory_id in lazy:
            if memory_id in excluded:
                continue
            row = row_of(memory_id)
            if row is not None:
                if may_go[row]:
                    count, last = seen(memory_id) or (0, 0)
                    keys.append((count, last, stated[row], memory_id))
                continue
            record = get(memory_id)
            if record is not None and evictable(record):
                keys.append(eviction_key(record, seen(memory_id)))
        chosen: list[Memory] = []
        for key in heapq.nsmallest(n, keys):
            record = get(key[3])
            if record is None or not evictable(record) or record.last_stated_at != key[2]:
                return None
            chosen.append(record)
        return chosen

    def seen(self, memory_id: str) -> tuple[int, int] | None:
        """`memory_id`'s (accesses, last access), or None: what the eviction order reads."""
        seen = self.access.get(memory_id)
        return None if seen is None else (seen.count, seen.last_ms)

    def _decided(self, memory_id: str) -> Memory:
        latest = self.latest(memory_id)
        assert latest is not None  # the queue holds latest records only
        return latest

    def _eviction_key(self, record: Memory | None) -> Key | None:
        if record is None or not evictable(record):
            return None
        return eviction_key(record, self.seen(record.id))

    def _requeue(self, ids: Iterable[str]) -> None:
        """The kept eviction order after `ids`' latest records (or counts) changed."""
        if self._eviction is not None:
            for memory_id in ids:
                self._eviction.set(memory_id, self._eviction_key(self.latest(memory_id)))

    def _access_changed(self, ids: Iterable[str] | None) -> None:
        if ids is None:
            self._eviction = None  # counts reloaded: rebuilt on next use
        else:
            self._requeue(ids)

    def new_id(self, text: str, taken: Collection[str] = ()) -> str:
        """The content fingerprint of `text`; salted deterministically in the rare case another
        record already owns it (its text was edited away from this one), or `taken` holds it
        (the ids an import is about to write: the same words about two people)."""
        memory_id = fingerprint(text)
        salt = 0
        while self._has(memory_id) or memory_id in self._staged or memory_id in taken:
            salt += 1
            memory_id = fingerprint(f"{normalize(text)}\x00{salt}")
        return memory_id

    # --- the choke point -----------------------------------------------------------------------

    async def commit(self, records: Sequence[Memory]) -> None:
        """Append `records` as one write, wait until it is durable, then apply it to RAM.

        Raises `StorageError` (and changes nothing in RAM) when the write or its fsync fails.
        """
        if not records:
            return
        self._check_writable()
        if self._erasing or self._unfinished:
            self._refuse_erased(records)
        try:
            data = encode(records)
        except ValueError as exc:  # pydantic's serialization error is a ValueError
            raise StorageError(f"cannot serialize a record of bank {self.name}: {exc}") from exc
        norms = [normalize(record.text) for record in records]
        pending = _Pending(records, data, asyncio.get_running_loop().create_future(), norms)
        if self._rewriting is not None:
            self._held.append(pending)
        else:
            if not self._queue:
                self._notice_change_behind_us()
            try:
                pending.written = self._log.write(data)
            except StorageError:
                if not self._queue:
                    self._stamp_own_write()  # cut back: the log is as we last stamped it again
                raise
            self._queue.append(pending)
            self._start_flusher()
        for record, norm in zip(records, norms, strict=True):
            before = self._staged.get(record.id)
            if before is not None:
                self._staged_live -= self._live_added(before[0])
            self._staged_live += self._live_added(record)
            self._staged[record.id] = (record, _canonical(norm))
        self._requeue(record.id for record in records)
        # Awaited as it is, not shielded (a shield's future and callbacks cost ~5 us of every
        # save): a caller that gives up (a hook timeout) cancels only this future, and the flusher
        # writes, syncs and applies its records all the same, settling no cancelled future.
        try:
            await pending.future
        except asyncio.CancelledError:
            _consume_exception(pending.future)  # failed as its caller gave up: asyncio is quiet
            raise

    def _check_writable(self) -> None:
        if self._broken is not None:
            raise StorageError(
                f"bank {self.name} refuses writes until memory::reload: {self._broken}"
            )
        if self._frozen is not None:
            raise StorageError(f"bank {self.name} cannot be written: {self._frozen}")
        if self.guard is not None:
            self.guard()

    def _start_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            # The first fsync is handed to its thread now, not when the task first runs (after
            # every callback already queued: the other writers' next saves), so the disk works
            # while they compute and their writes make the next group.
            first = (self._sync_soon(), list(self._queue))
            self._flusher = asyncio.create_task(
                self._flush(first), name=f"memory-flush:{self.name}"
            )

    def _sync_soon(self) -> asyncio.Future[int]:
        """The log's fsync: done already when it is a lone write's on a fast disk (see
        `INLINE_SYNC_S`), else running in a thread (as `asyncio.to_thread` runs it) while the
        loop computes the next writes, which then share the fsync after it."""
        loop = asyncio.get_running_loop()
        if len(self._queue) > 1 or self._last_sync_s >= INLINE_SYNC_S:
            sync = functools.partial(contextvars.copy_context().run, self._timed_sync)
            return loop.run_in_executor(None, sync)
        done: asyncio.Future[int] = loop.create_future()
        try:
            done.set_result(self._timed_sync())
        except Exception as exc:  # delivered as the thread's would be
            done.set_exception(exc)
        return done

    def _timed_sync(self) -> int:
        started = time.perf_counter()
        try:
            return self._log.sync()
        finally:
            self._last_sync_s = time.perf_counter() - started

    async def _flush(self, first: tuple[asyncio.Future[int], list[_Pending]] | None = None) -> None:
        while self._queue:
            syncing, batch = first if first is not None else (self._sync_soon(), list(self._queue))
            first = None
            # While the fsync runs, this thread does the pure part of applying the batch
            # (analysing each record for the index, its text's key); only the RAM changes wait.
            # With the search state not built yet (`_Deferred`), only the text keys: the build
            # analyses these records if it ever runs, and a one-shot save's never does (a record
            # the index cannot take then fails that build, as it fails the next boot's, instead
            # of this write, which is durable either way).
            prepare = _Prepared.of if self._deferred is None else _Prepared.keyed
            try:
                prepared = [list(map(prepare, p.records, p.norms)) for p in batch]
            except Exception as exc:
                # A record the index cannot take (a bug): left to the task, the flusher died
                # and every save of the bank waited forever. Its callers are told, as at a
                # failed fsync, and the bank takes no write until memory::reload reads the log
                # again (the write may be durable already: RAM no longer says what the log does).
                log.exception("prepare_failed", bank=self.name)
                with contextlib.suppress(Exception):  # the cut waits for the fsync's thread
                    await syncing
                self._abort(
                    StorageError(
                        f"bank {self.name} could not index a record of this write ({exc}); it "
                        "refuses writes until memory::reload"
                    )
                )
                self._broken = self._broken or f"a record written could not be indexed: {exc}"
                return
            try:
                await syncing
                await self._carry_over(batch)
            except StorageError as exc:
                self._abort(exc)
                return
            self._stamp_own_write()
            del self._queue[: len(batch)]
            landed = {record.id: record for pending in batch for record in pending.records}
            added = {i: self._live_added(self._staged[i][0]) for i in landed}
            try:
                for pending, ready in zip(batch, prepared, strict=True):
                    for record, doc in zip(pending.records, ready, strict=True):
                        self._apply(record, doc)
                    _settle(pending.future)
            except Exception as exc:
                self._apply_failed(batch, exc)
                return
            self._unstage(landed, added)

    def _apply_failed(self, batch: list[_Pending], exc: Exception) -> None:
        """Applying a durable batch to RAM raised (a bug): left to the task, the flusher died
        and every later save of the bank waited forever. The batch is in the log, so a restart
        or `memory::reload` shows it; until then RAM does not say what the log does, so the bank
        takes no write. The batch's callers not yet answered are told (their write is durable,
        not acknowledged); writes queued behind it are cut back and fail, as at a failed fsync."""
        log.exception("apply_failed", bank=self.name)
        self._broken = self._broken or f"a durable write could not be applied: {exc}"
        error = StorageError(
            f"bank {self.name} wrote this record to its log but could not apply it ({exc}); it "
            "refuses writes until memory::reload, which reads it from the log"
        )
        for pending in batch:
            _settle(pending.future, error)
        if self._queue:
            self._abort(error)

    async def _carry_over(self, batch: list[_Pending]) -> None:
        """Writes of `batch` that a hand edit of the log undid before their fsync (`git
        checkout` or an editor's save by rename replaced the file: they are durable only in one
        nobody reads any more; an editor's save in place cut them away): written again into the
        file the path names now before they are acknowledged. The bank's stamp still tells the
        edit, so the watcher reloads the bank with them in it."""
        gone = self._log.lost([pending.written for pending in batch])
        lost = [pending for pending, is_gone in zip(batch, gone, strict=True) if is_gone]
        if not lost:
            return
        log.warning("log_edited_mid_write", bank=self.name, written_again=len(lost))
        for pending in lost:
            pending.written = self._log.write(pending.data)
        await asyncio.to_thread(self._log.sync)

    def _unstage(self, landed: dict[str, Memory], added: dict[str, int]) -> None:
        """`_restage` after the queue's first writes landed, touching only their ids: an id whose
        latest write landed leaves the staged records; one written again since stays, its count
        against the new durable record. `landed`: each id's last record in those writes; `added`:
        what its staged record added to the live count before they were applied."""
        staged = self._staged
        for memory_id, record in landed.items():
            self._staged_live -= added[memory_id]
            latest = staged[memory_id][0]
            if latest is record:
                del staged[memory_id]
            else:
                self._staged_live += self._live_added(latest)
        self._requeue(landed)

    def _restage(self) -> None:
        """What decisions must see beyond RAM: every record written or held but not yet durable."""
        was = self._staged
        self._staged = {
            record.id: (record, _canonical(norm))
            for pending in (*self._queue, *self._held)
            for record, norm in zip(pending.records, pending.norms, strict=True)
        }
        self._staged_live = sum(self._live_added(record) for record, _ in self._staged.values())
        self._requeue(was)  # each one's latest record is now its durable one, or a newer write

    def _abort(self, exc: StorageError) -> None:
        log.error("commit_failed", bank=self.name, error=str(exc), waiting=len(self._queue))
        try:
            self._log.truncate()
        except StorageError as cut:
            self._broken = cut.message
            log.error("bank_write_disabled", bank=self.name, error=str(cut))
        else:
            self._stamp_own_write()  # cut back to our last durable line: no change behind us
        failed, self._queue = self._queue, []
        self._restage()
        for pending in failed:
            _settle(pending.future, exc)

    def standing(self, limit: int) -> list[Memory]:
        """`top_memories` of this bank, kept until the next record lands: the hook pads every
        turn's recall with it, and sorting 10k memories per turn costs tens of milliseconds."""
        from memory_worker.search.ranking import top_memories

        key = (self._applied, limit)
        if self._standing is None or self._standing[0] != key:
            self._standing = (key, top_memories(self._memories.values(), limit))
        return self._standing[1]

    def newest_first(self, *, history: bool) -> Sequence[Memory]:
        """The live memories (`history`: every record) newest `updated_at` first, ties by id:
        `memory::list`'s order, kept across reads and moved record by record as writes land
        (`storage.listing`). Valid until the next record lands; never changed by the caller."""
        return self._listings.order(self._memories.values(), history=history)

    def listing(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()` (a filtered listing of `newest_first`), kept under `key` until the next
        record lands."""
        return self._listings.view(key, build)

    def _apply(self, record: Memory, prepared: _Prepared | None = None) -> None:
        """Make a durable record visible, with replay's rule: a lower revision never wins.
        `prepared`: its index document and text key, computed while its fsync ran."""
        previous = self._get(record.id)
        if previous is not None and record.revision < previous.revision:
            return
        self._applied += 1
        deferred = self._deferred
        held = shared_fields(record)
        lazy = self._lazy
        if lazy is None:
            self._records[record.id] = held
        else:
            lazy[record.id] = held
        self._listings.changed(previous, held, self._size())
        self._remap_text(previous, record, prepared)
        if deferred is not None:  # applied to the search state when it is built
            deferred.applied.append((record, previous))
            deferred.live_count += int(record.live) - int(previous is not None and previous.live)
            return
        self._apply_search(record, previous, prepared)

    def _apply_search(
        self, record: Memory, previous: Memory | None, prepared: _Prepared | None
    ) -> None:
        """`_apply`'s part in the search state: the lessons, the lanes, the index, the vectors."""
        from memory_worker.search.ranking import indexed

        if record.live and record.anchors is not None and is_lesson(record):
            self._lessons.add(record.id, record.anchors)
        else:
            self._lessons.remove(record.id)
        indexed_same = (
            previous is not None
            and previous.live
            and previous.text == record.text
            and previous.entities == record.entities
        )
        if not record.live:
            self._lanes.remove(record.id)
            self._lane_vectors.changed(record)
        elif previous is None or not previous.live or not _same_lanes(previous, record):
            # Only a lane edit (or a memory coming live) re-indexes its lanes: a text, entity or
            # tag edit keeps their slots and vectors (seed 004: association vectors are
            # preserved unless explicitly changed), which the bank's lanes otherwise compared by
            # words alone until they were embedded again, unchanged.
            self._lanes.add(record)  # new lane slots: their old vectors are gone with them
            self._lane_vectors.changed(record)
        if not record.live:
            self._index.remove(record.id)
            self._vector_models.pop(record.id, None)
            self._to_embed.pop(record.id, None)
        elif indexed_same:  # the columns only (a prepared document's terms go unread)
            doc = prepared.doc if prepared is not None else None
            self._index.update_columns(indexed(record, with_terms=False) if doc is None else doc)
        else:
            doc = prepared.doc if prepared is not None else None
            self._index.add_doc(indexed(record) if doc is None else doc)  # a new slot
            self._vector_models.pop(record.id, None)
            if self._embed_model is not None:
                self._to_embed[record.id] = None

    def _remap_text(
        self, previous: Memory | None, record: Memory, prepared: _Prepared | None
    ) -> None:
        """The exact-text map after `record` replaced `previous`. The same text when its key
        lists this id alone (a tombstone, a re-save) leaves the map as it is; among other ids,
        it moves to the end of the list, as a removal and an addition always did."""
        key = text_key(normalize(record.text)) if prepared is None else prepared.text_key
        same = previous is not None and previous.text == record.text
        if same and list(self._by_text.ids(key)) == [record.id]:
            return
        if previous is not None:
            self._unmap_text(previous)
        self._by_text.add(key, record.id)

    def _map_text(self, record: Memory) -> None:
        self._by_text.add(text_key(normalize(record.text)), record.id)

    def _unmap_text(self, record: Memory) -> None:
        self._by_text.remove(text_key(normalize(record.text)), record.id)

    def freeze(self, reason: str) -> None:
        """Refuse new commits (bank being trashed or reloaded); writes in flight still land."""
        self._frozen = reason

    def unfreeze(self) -> None:
        self._frozen = None

    async def drain(self) -> None:
        """Wait for every write in flight to land (or fail): memory commits, a rewrite and the
        commits it held, rule writes and a `bank.yaml` write (a reload that did not wait for it
        read the old file, and the bank it installed kept the old settings)."""
        while self._rewriting is not None:
            await self._rewriting.wait()
        await self._drain_commits()
        await self._rules.drain()
        async with self._settings_lock:
            pass

    async def _drain_commits(self) -> None:
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    # --- rewriting the log ---------------------------------------------------------------------

    async def rewrite(
        self, plan: Callable[[list[Memory]], list[Memory]], *, drop_damaged: bool = False
    ) -> Rewrite:
        """Replace `memories.jsonl` by `plan(records)` — the intact records in log order in, the
        records to keep (or rewrite) out — crash-safely (`files.replace_with`): the new file is
        checked to replay to exactly what the plan's records replay to before it is renamed
        over the old one, so a crash leaves the old log or the new, never a mix. Commits made
        meanwhile are staged as usual and land in the new log right after; RAM follows the new
        log's replay. A log with damaged lines is refused (a rewrite would destroy what cannot
        be read) unless `drop_damaged` (erasure: nothing of a chosen record may survive)."""
        # One rewrite at a time; the next waits for it (a compaction and an erasure asked at
        # once both happen: refusing the second left an erasure half done).
        while self._rewriting is not None:
            await self._rewriting.wait()
        if self._broken is not None:
            raise StorageError(
                f"bank {self.name} refuses writes until memory::reload: {self._broken}"
            )
        if self._frozen is not None:
            raise StorageError(f"bank {self.name} cannot be written: {self._frozen}")
        if self.guard is not None:
            self.guard()
        # The search state is rebuilt from the new log (`_adopt`) or kept as it is (a
        # compaction): either way from the state as built, not from a boot before the rewrite.
        self._searchable()
        done = self._rewriting = asyncio.Event()
        try:
            await self._drain_commits()  # every acknowledged line is in the file being read
            if self._broken is not None:
                raise StorageError(f"bank {self.name} refuses writes: {self._broken}")
            result, memories, unsynced = await asyncio.to_thread(
                self._rewrite_file, plan, drop_damaged
            )
            self._adopt(memories, dropped_damage=drop_damaged)  # the new log is in place
            if unsynced is not None:
                # Renamed in, its folder not synced: RAM follows the disk, the caller is told.
                self._adopted = None  # nobody takes it: the old RAM (an erasure's) not kept
                self.warnings.note(self.name, "memories.jsonl rewritten", unsynced)
                raise unsynced
        finally:
            self._rewriting = None
            done.set()
            self._release_held()
        return result

    def _rewrite_file(
        self, plan: Callable[[list[Memory]], list[Memory]], drop_damaged: bool
    ) -> tuple[Rewrite, dict[str, Memory], files.UnsyncedChange | None]:
        path = self.path / MEMORIES_FILE
        records, found = read_all(path, within=self.root)
        damage = [d for d in found if not d.kept]  # a line edited by hand is read as it reads
        if damage and not drop_damaged:
            raise Conflict(
                f"bank {self.name} has {len(damage)} damaged line(s) in {MEMORIES_FILE} "
                f"(first: {damage[0].describe()}); a rewrite would drop them — repair or remove "
                "them by hand first (doctor lists them)"
            )
        planned = plan(records)
        expected = replayed(planned)

        def check(candidate: Path) -> None:
            written, problems = read_all(candidate)
            if problems or replayed(written) != expected:
                raise StorageError(
                    f"rewrite of bank {self.name} did not read back as planned; the log is "
                    "left as it was"
                )

        before = path.lstat().st_size if os.path.lexists(path) else 0
        unsynced = None
        try:
            files.replace_with(path, lines_of(planned), check, within=self.root)
        except files.UnsyncedChange as exc:
            unsynced = exc
        after = path.stat().st_size
        result = Rewrite(len(records) + len(damage), len(planned), before, after, len(damage))
        return result, expected, unsynced

    def _adopt(self, memories: dict[str, Memory], *, dropped_damage: bool) -> None:
        """RAM after a rewrite: what the new log replays to (unchanged for a compaction)."""
        self._log_stamp = _stat_stamp(self.path / MEMORIES_FILE)
        # The snapshots on disk are of the old file: none is a prefix of the new one (a boot would
        # find so by their CRC; this only keeps close from sparing them for it).
        self._snapshot_base = self._records_base = None
        # Every line of the new log is sealed again: what was edited by hand is now just a line.
        self._damage = [
            d for d in self._damage if d.file != MEMORIES_FILE or not (dropped_damage or d.kept)
        ]
        self._adopted = None
        if memories == self._memories:
            return
        # A copy: writes held during the rewrite land in `memories` next, announced by their
        # own callers, never as part of what the rewrite read.
        self._adopted = (self._memories, dict(memories))
        from memory_worker.search.index import LexicalIndex
        from memory_worker.search.lanes import LaneIndexes
        from memory_worker.search.lessons import LessonIndex
        from memory_worker.search.ranking import indexed

        self._applied += 1
        self._memories = memories
        self._listings.clear()
        self._eviction = None
        self._by_text = TextMap()
        self._index = LexicalIndex()
        self._vector_models.clear()
        self._embed_model, self._to_embed = None, {}
        for record in memories.values():
            self._map_text(record)
        self._index.add_many(indexed(record) for record in memories.values() if record.live)
        self._lanes = LaneIndexes()
        self._lanes.add_many(record for record in memories.values() if record.live)
        self._lessons = LessonIndex()
        self._index_lessons()
        self._load_vectors()

    def take_adopted(self) -> tuple[dict[str, Memory], dict[str, Memory]] | None:
        """What RAM held before the last rewrite and what the rewritten log replays to, when they
        differ (once; None otherwise): besides what its plan dropped (an erasure's), a hand edit
        the rewrite read before the watcher did. The rewrite's stamp makes the edit ours, so no
        reload announces it later: the caller does (`transitions.change_event`)."""
        adopted, self._adopted = self._adopted, None
        return adopted

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for pending in held:
            try:
                pending.written = self._log.write(pending.data)
            except StorageError as exc:
                _settle(pending.future, exc)
                continue
            self._queue.append(pending)
        self._restage()
        if self._queue:
            self._start_flusher()

    def close(self) -> None:
        self._close_files()
        self._leave_derived_files()
        thaw()  # the bank is leaving RAM: a collector pass must be able to free its cycles

    async def close_frozen(self) -> None:
        """`close` for a bank frozen and drained (one a reload replaced): its derived files,
        made from the whole bank (~0.3 s per 20,000 memories), are written in a worker thread
        while the loop answers calls; nothing can change what they are made from meanwhile."""
        self._close_files()  # on the loop, as `AccessStats.close` must be
        try:
            await asyncio.to_thread(self._leave_derived_files)
        finally:
            thaw()

    def _close_files(self) -> None:
        self._log.close()
        self.access.close()

    def _leave_derived_files(self) -> None:
        """The counts, index snapshot and records the next replay starts from (blocking)."""
        if self.path.is_dir():  # not when the folder was trashed or removed
            self._save_counts()
            self._save_snapshot()
            self._save_records()

    # --- rules ---------------------------------------------------------------------------------

    async def set_rule(
        self, name: str, content: str, *, expected_revision: str | None = None
    ) -> bool:
        """Write `rules/<name>.md` atomically, or remove it when `content` is blank; returns whether
        the rule changed (`expected_revision`: see `RuleFiles.set`)."""
        if self.guard is not None:
            self.guard()
        return await self._rules.set(
            name, content, refusal=self._frozen, expected_revision=expected_revision
        )

    # --- hand edits ----------------------------------------------------------------------------

    def disk_changed(self) -> bool:
        """Whether the folder says something RAM does not (an edit by hand), by content and file
        identity, never by timing: `memories.jsonl` against its stamp from this bank's own last
        replay or fsync, the rule files' names and contents, and `bank.yaml`'s description and
        settings.
        False while writes are in flight: the file is mid-write by us; ask again after `drain()`.
        Blocking, but only a stat and the small rule and `bank.yaml` files are read."""
        if self._queue or self._held or self._rewriting is not None or self._rules.busy:
            return False
        if self._settings_lock.locked():  # bank.yaml is being replaced by us
            return False
        if self._flusher is not None and not self._flusher.done():
            return False
        if _stat_stamp(self.path / MEMORIES_FILE) != self._log_stamp:
            return True
        try:
            found = read_bank_file(self.path / BANK_FILE, within=self.root)
        except StorageError:
            return True  # unreadable: a reload reports it (the bank becomes broken)
        if found.description != self.description or found.overrides != self.overrides:
            return True
        if found.problem != self._bank_file_problem:
            return True  # an edit that broke the file (or mended it) without changing a setting
        return self._rules.on_disk() != self._rules.contents()

    def log_edited(self) -> bool:
        """Whether `memories.jsonl` holds a change RAM has not read: an edit by hand that the
        watcher or `memory::reload` has not picked up yet. Unlike `disk_changed` it answers while
        our own writes are in flight (what we appended since our last stamp is ours, any other
        byte is not). An automatic retirement asks first: a memory pinned by hand is pinned, and
        our record, one revision up like the person's and after it, would win at replay (a
        write held during a rewrite too: it lands after what the rewrite kept). One stat; a
        rewrite's rename is an edit until it adopts the new log (an automatic change waits)."""
        stamp = self._log_stamp
        if stamp is None:
            return False
        if stamp == _CHANGED:
            return True
        now = _stat_stamp(self.path / MEMORIES_FILE)
        if now == stamp:
            return False
        if not self._queue and (self._flusher is None or self._flusher.done()):
            return True  # nothing of ours since the stamp
        # Ours in flight: the same file, grown by exactly what we appended (an edit before our
        # first write of them was caught by `_notice_change_behind_us`).
        return now is None or now[0] != stamp[0] or now[1] != self._log.size

    def is_frozen(self) -> bool:
        """Being trashed or reloaded: whoever froze it decides what happens to it next."""
        return self._frozen is not None

    def _notice_change_behind_us(self) -> None:
        """Before a write onto a log with none of our writes in flight: it must still be as our
        last replay or fsync stamped it. If not, someone changed it behind our back; an in-place
        edit of the same size would then be taken for our own append by the stamp after our
        fsync (`_stamp_own_write`), hidden from the watcher, and trusted at close (counts and
        snapshots made from RAM, which lacks the edit, for the edited bytes). So no stamp of
        ours describes the log any more: `disk_changed` reports it until a reload."""
        if self._log_stamp != _CHANGED and _stat_stamp(self._log.path) != self._log_stamp:
            self._log_stamp = _CHANGED

    def _stamp_own_write(self) -> None:
        """After our fsync: the log as it now stands is ours, unless someone else touched it too.
        A file of another inode (replaced by hand) or a size other than everything we appended
        (a hand append) keeps the old stamp, so `disk_changed()` still reports the edit."""
        stamp = _stat_stamp(self._log.path)
        if stamp is None or stamp[1] != self._log.size:
            return
        if self._log_stamp is not None and stamp[0] != self._log_stamp[0]:
            return
        self._log_stamp = stamp


def _same_lanes(previous: Memory | None, record: Memory) -> bool:
    return previous is not None and all(
        getattr(previous, lane) == getattr(record, lane) for lane in LANES
    )


def _consume_exception(future: asyncio.Future[None]) -> None:
    # A failed commit is reported to its caller; this only stops asyncio warning about it twice.
    if future.done() and not future.cancelled():
        future.exception()


def _settle(future: asyncio.Future[None], exc: BaseException | None = None) -> None:
    """A commit's outcome to its caller, unless the caller gave up waiting (its future is
    cancelled: the write went on without anyone to tell)."""
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)


# (inode, size, mtime_ns) of a file, or None when it is missing: what `disk_changed` compares.
_Stamp = tuple[int, int, int]
# The log's stamp once it was changed behind our back: no file has it (`_notice_change_behind_us`).
_CHANGED: _Stamp = (-1, -1, -1)
Guard = Callable[[], None]


def _last_stated(values: list[dict[str, Any]]) -> list[int]:
    """`Memory.last_stated_at` of each record given by its field values (`__dict__`), in order:
    `updated_at` from C, then `stated_at` where it is set, a Python step only for those
    (`compress`), not a property call per record."""
    column = list(map(_UPDATED_AT, values))
    stated = list(map(_STATED_AT, values))
    for slot in compress(range(len(stated)), map(is_not, stated, repeat(None))):
        column[slot] = stated[slot]
    return column


def _sessions(values: list[dict[str, Any]]) -> list[str | None]:
    """The session each record (by its field values) was saved in, `source.session_id`, in
    order; a Python step only for the records that have a source."""
    sources = list(map(_SOURCE, values))
    column: list[str | None] = [None] * len(sources)
    for slot in compress(range(len(sources)), map(is_not, sources, repeat(None))):
        column[slot] = sources[slot].session_id
    return column


def _replayed_over(
    memories: dict[str, Memory] | LazyRecords, keys: list[int], tail: list[Memory]
) -> list[int]:
    """Replay `tail` (records in log order) over `memories` in place, by replay's rule (last
    wins by id and revision, a tie to the later line; a new id goes last); returns the text keys
    (`keys`: those of `memories` in its order, extended in place) of the result. Only the
    records `tail` replaces are read (`log.LazyRecords`)."""
    found = keys
    lazy = memories if isinstance(memories, LazyRecords) else None
    # Each id's place in `keys`: a line not read yet is at its own row (`LazyRecords.row`), so a
    # lazy boot maps only the ids `tail` names instead of all of them.
    position = {} if lazy is not None else dict(zip(memories, range(len(memories)), strict=True))
    for record in tail:
        at = position.get(record.id)
        if at is None and lazy is not None:
            at = lazy.row(record.id)
        held = memories.get(record.id) if at is not None else None
        if at is None:
            at = len(found)
            found.append(0)
        elif held is not None and record.revision < held.revision:
            continue
        position[record.id] = at
        memories[record.id] = record
        found[at] = text_key(normalize(record.text))
    return found


def _counts_of(records: Iterable[Memory]) -> Counts:
    """A bank's counts from its records, as its index's columns count them (`live_count`,
    `LexicalIndex.pinned_live`, `subjects_about`, `oldest_stated`): a short-lived process that
    never built the index closes with the counts one that built it leaves. Each column read in
    one C-level pass over the records' field values, as `_index_from_snapshot` reads them."""
    values = list(map(_VALUES, records))
    live = list(compress(values, map(is_, map(_INVALID_AT_VALUE, values), repeat(None))))
    subjects = {subject_key(s) for s in map(_SUBJECT, live) if s is not None}
    flags = list(map(_PINNED, live))
    unpinned = list(compress(live, map(not_, flags)))
    stated = _last_stated(unpinned)
    categories = list(map(_CATEGORY, unpinned))
    oldest: dict[int, int] = {}
    for category in set(categories):  # a few kinds: each one's oldest in one pass
        code = category_code(category)  # (None and "fact" are one code)
        at = min(compress(stated, map(eq, categories, repeat(category))))
        oldest[code] = min(at, oldest.get(code, at))
    # In code order, as `oldest_stated` lists them; a code without a name has no TTL.
    names = {code: name for name, code in CATEGORY_CODES.items()}
    by_name = {names[code]: oldest[code] for code in sorted(oldest) if code in names}
    return Counts(len(live), sum(flags), len(subjects), by_name)


def _columns_of(records: Collection[Memory]) -> tuple[dict[str, Sequence[int]], list[str]]:
    """`snapshot.RECORD_COLUMNS` of `records`, in order, and the subjects' keys the `subject`
    column names (in order of first appearance)."""
    subjects: dict[str, int] = {}
    rows = [
        -1 if s is None else subjects.setdefault(subject_key(s), len(subjects))
        for s in map(_SUBJECT_OF, records)
    ]
    columns: dict[str, Sequence[int]] = {
        "evictable": list(map(evictable, records)),
        "stated": [record.last_stated_at for record in records],
        "category": list(map(category_code, map(_CATEGORY_OF, records))),
        "live": [record.live for record in records],
        "pinned": [record.pinned for record in records],
        "subject": rows,
    }
    return columns, list(subjects)


def _short_tail(base: tuple[int, int] | None, stamp: _Stamp) -> bool:
    """Whether a snapshot for the prefix `base` (inode, length) of the log may stay as it is at
    close: the log is still that file (a rewrite replaces it) and has grown only a little past
    it. Only a matter of time: a boot checks the prefix's bytes before it uses the file."""
    return base is not None and base[0] == stamp[0] and tail_is_short(base[1], stamp[1])


def _stat_stamp(path: Path) -> _Stamp | None:
    try:
        stat = os.lstat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _canonical(norm: str) -> str:
    """A normalized text composed (NFC), as `match_text` compares texts."""
    return norm if norm.isascii() else unicodedata.normalize("NFC", norm)
