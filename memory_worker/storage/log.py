"""The `memories.jsonl` line format and its replay.

Every line is one whole `Memory` record ending with its checksum (`"crc"`); a commit of several
records is one write whose lines carry `"batch"`, applied whole or not at all (one whose last line
is there reached its end: lines missing from it were removed by hand, the rest applies). Replay is
last-wins by id and revision (a tie goes to the later line); torn or corrupt lines are skipped and
reported with their line numbers, never fatal.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import secrets
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import compress, repeat
from operator import is_
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memory_worker.core.errors import StorageError
from memory_worker.core.lessons import CATEGORIES
from memory_worker.core.models import Memory
from memory_worker.core.transitions import stored_labels
from memory_worker.storage import files
from memory_worker.storage.damage import Damage

__all__ = [
    "INTERRUPTED_FILE",
    "MEMORIES_FILE",
    "RESTORED_FORM",
    "LazyRecords",
    "as_stored",
    "continues_batch",
    "encode",
    "history",
    "interrupted_tail",
    "lines_of",
    "read_all",
    "records_at",
    "replay",
    "replayed",
    "revision_at",
    "tail_records",
    "winning_spans",
]

MEMORIES_FILE = "memories.jsonl"
# Where a load moves a write that a crash cut short at the log's end (`interrupted_tail`).
INTERRUPTED_FILE = "interrupted-writes.jsonl"


@dataclass(slots=True)
class _OpenBatch:
    nonce: str
    size: int
    first_line: int
    records: list[Memory] = field(default_factory=list)
    ended: bool = False  # its last line (index size - 1) is on disk: the write reached its end
    broken: bool = False  # an unreadable line came while it was open (a torn write's mark)


# A commit of several records (supersede with reinforce, an import) is one write; each of its lines
# carries `"batch": "<nonce>:<index>:<size>"` so replay applies the write whole or not at all.
_BATCH_KEY = b'"batch":"'
_batches = itertools.count()
_NONCE = secrets.token_hex(3)


# Every line ends with `,"crc":"<8 hex>"}`: the CRC-32 of the line as it reads without that member
# (so `{...}` → `{...,"crc":"…"}`). It catches a changed byte that still leaves valid JSON (a
# `"revision":0` turned into `"revision":9` would otherwise win replay), and costs one C call per
# line. zlib's CRC-32 rather than CRC-32C: it is in the standard library, and for lines of a few
# hundred bytes both detect every burst of up to 32 bits and miss random damage with odds of 2^-32;
# CRC-32C's edge is hardware speed, which does not matter here. It tells a line changed outside
# the worker, not tampering: anyone can recompute it. A line without the member (written before
# checksums, or by hand) loads. So does one that parses as a record but no longer matches its
# checksum: the files are there to be edited in any editor (seed 000), and a person who changes a
# memory's text, or re-serialises the line with a JSON library, means it. Such a line is reported
# (`_HAND_EDITED`: doctor and the log name it), never dropped. Damage that garbles a line's JSON or
# its record is skipped as ever; a byte flip that leaves a valid record is read as an edit (the
# price of editable files: a disk that flips bytes undetected by its own checks is rare, a person
# fixing a typo is not).
_CRC_KEY = b',"crc":"'
_CRC_SUFFIX = len(_CRC_KEY) + 8 + 2  # ,"crc":"xxxxxxxx"}


# `Memory.model_validate_json` without its Python wrapper: replay calls it once per line.
_validate_json = Memory.__pydantic_validator__.validate_json

# pydantic gives every record its own set of the field names it was given (~700 bytes: as much
# as the rest of the record) and its own dict of values (~830 bytes for Memory's 26 fields).
# Records are frozen, so nothing adds to either (pydantic copies both before a `model_copy`
# updates them): records given the same fields share one set, and a record kept in RAM holds its
# values in a key-sharing instance dict (CPython shares the keys among instances of a class: ~280
# bytes). Both are invisible to callers: equality, dumps, copies and validation read the same
# values.
_FIELD_SETS: list[set[str]] = []  # the distinct sets seen: a handful (which optional fields)
_MAX_FIELD_SETS = 64  # a log of odd records cannot make the lookup long
_new_record = object.__new__
_ID = operator.attrgetter("id")
_set = object.__setattr__


def _shared_set(fields: set[str]) -> set[str]:
    """The set of given field names equal to `fields` that records share (`fields` itself when
    it is the first of its kind)."""
    for shared in _FIELD_SETS:
        if shared == fields:
            return shared
    if len(_FIELD_SETS) < _MAX_FIELD_SETS:
        _FIELD_SETS.append(fields)
    return fields


def shared_fields(record: Memory) -> Memory:
    """`record` as RAM keeps it: the same values in a key-sharing dict, its set of given field
    names the one shared by equal sets. A new object (the given one is left as it was)."""
    return _compact(
        type(record),
        record.__dict__,
        record.__pydantic_fields_set__,
        record.__pydantic_extra__,
        record.__pydantic_private__,
    )


def _compact(
    cls: type[Memory], given: dict[str, Any], fields: set[str], extra: Any, private: Any
) -> Memory:
    """A record of `cls` from its field values as RAM keeps it (see `shared_fields`)."""
    compact = _new_record(cls)
    values = compact.__dict__  # created empty with the class's shared keys
    # One key first, then a bulk update: `update` into an EMPTY dict copies the source's own
    # (unshared, ~830-byte) layout, into a non-empty one it inserts key by key, keeping the
    # class's shared keys (a Python loop over the 26 fields cost a third of a records boot).
    values["id"] = given["id"]
    values.update(given)
    # A record never edited has the same instant two or three times; one int object holds it.
    created = values["created_at"]
    if values["updated_at"] == created:
        values["updated_at"] = created
    if values["stated_at"] == created:
        values["stated_at"] = created
    _set(compact, "__pydantic_fields_set__", _shared_set(fields))
    _set(compact, "__pydantic_extra__", extra)
    _set(compact, "__pydantic_private__", private)
    return compact


@cache
def _fields_validator() -> Callable[[bytes], Memory] | None:
    """A line's validation into a record as RAM keeps it (`shared_fields`'s), made straight
    from the fields: `Memory`'s own core schema is a `model` around its `model-fields`, and
    validating the inner one with the model's config is the very same per-field validation,
    without the instance pydantic makes only for `shared_fields` to copy it at once. None when
    the schema is not that plain shape (a model validator, a custom `__init__`, a post-init):
    then the model's validator and `shared_fields` are used."""
    schema: Any = Memory.__pydantic_core_schema__
    if (
        schema.get("type") != "model"
        or schema.get("cls") is not Memory
        or schema.get("custom_init")
        or schema.get("root_model")
        or schema.get("post_init")
        or schema["schema"].get("type") != "model-fields"
        or Memory.__pydantic_post_init__ is not None
    ):
        return None
    # pydantic-core's SchemaValidator, by the class of the model's own validator (this layer
    # imports pydantic, not its core).
    validator_class: Any = type(Memory.__pydantic_validator__)
    try:
        validate = validator_class(schema["schema"], schema.get("config")).validate_json
    except Exception:  # a schema that does not stand alone (definitions kept outside it)
        return None

    def record(line: bytes) -> Memory:
        given, extra, fields = validate(line)
        return _compact(Memory, given, fields, extra, None)

    return record


def _sealed(body: bytes) -> bytes:
    """`body` (one JSON object, no newline) with its checksum as the last member."""
    return b'%s,"crc":"%08x"}\n' % (body[:-1], zlib.crc32(body))


def _readable(record: Memory) -> bytes:
    """`record`'s line, once replay is known to read it back: a record built with `model_copy`
    skips validation, and a line replay refuses would be an acknowledged write lost at the next
    boot. Raises `ValueError` (the commit answers `storage` and writes nothing)."""
    line = record.to_line()
    try:
        # `Memory.model_validate_json` without pydantic's Python wrapper (~2 µs of every save).
        Memory.__pydantic_validator__.validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise ValueError(
            f"refusing to write memory {record.id}: replay could not read it back "
            f"({where}: {first['msg']})"
        ) from None
    return line


def encode(records: Sequence[Memory]) -> bytes:
    """The lines of one commit; every record is checked to replay before anything is written."""
    if len(records) == 1:
        return _sealed(_readable(records[0]))
    nonce = f"{_NONCE}{next(_batches):x}"
    size = len(records)
    return b"".join(
        _sealed(_readable(record)[:-1] + b',"batch":"%s:%d:%d"}' % (nonce.encode(), index, size))
        for index, record in enumerate(records)
    )


_HAND_EDITED = "edited by hand (its checksum no longer matches): loaded as it reads"
# A line's tags or category not in the form every write path stores (a hand edit's "Billing"):
# read as stored, so filters and retention find them. Kept damage: only mentioned, and it tells
# the records file written later that its lines need this pass again at a boot.
RESTORED_FORM = "tags or category written by hand: read as the worker stores them"


def _hand_edited(line: bytes) -> bool:
    """Whether `line` (which parsed) carries a checksum that does not match it, in the form the
    worker writes or any other (a JSON library's spacing): changed since it was written."""
    if line[-_CRC_SUFFIX:-10] == _CRC_KEY:
        try:
            return zlib.crc32(b"}", zlib.crc32(line[:-_CRC_SUFFIX])) != int(line[-10:-2], 16)
        except ValueError:
            return True
    return b'"crc":' in line  # a key: a string value is never followed by a colon


def _batch_tag(line: bytes) -> tuple[str, int, int] | None:
    """`(nonce, index, size)` of a line written as part of a multi-record commit."""
    start = line.rfind(_BATCH_KEY)
    if start < 0:
        return None
    end = line.find(b'"', start + len(_BATCH_KEY))
    try:
        nonce, index, size = line[start + len(_BATCH_KEY) : end].decode().split(":")
        return nonce, int(index), int(size)
    except ValueError:
        return None


def replay(
    path: Path, *, within: Path | None = None, compact: bool = True
) -> tuple[dict[str, Memory], list[Damage]]:
    """The records `path` holds (last wins by id and revision) and what was skipped on the way.
    A link planted in its place is reported and not read (writes to it are refused too).
    `compact`: each record as RAM keeps it for long (`shared_fields`); a process that exits
    after one command keeps them as validated (equal, a little larger, ~2 µs a record less)."""
    damage: list[Damage] = []
    return replayed(_intact(path, damage, within=within, compact=compact)), damage


def replayed(records: Iterable[Memory]) -> dict[str, Memory]:
    """What replay makes of `records` in this order: last wins by id and revision."""
    memories: dict[str, Memory] = {}
    for record in records:
        previous = memories.get(record.id)
        if previous is None or record.revision >= previous.revision:
            memories[record.id] = record
    return memories


def winning_spans(data: bytes, start_at: int = 0) -> dict[str, tuple[int, int, int]] | None:
    """id → (revision, start, end) of the line that wins replay for each id in `data` (a whole
    log) from the line starting at `start_at` on, in replay order; None unless every such line
    is a JSON object with a string id and an integer revision (or none), and the log ends whole.
    Only for a log already known to replay without damage (a records snapshot is made of it):
    it does not check checksums or batches."""
    if data and not data.endswith(b"\n"):
        return None
    winners: dict[str, tuple[int, int, int]] = {}
    offset = start_at
    for raw in data[start_at:].split(b"\n"):
        line = raw.strip()
        if line:
            start = offset + len(raw) - len(raw.lstrip())
            try:
                doc = json.loads(line)
            # UnicodeDecodeError and JSONDecodeError included; RecursionError: nested past the
            # decoder's limit (a damaged line, never one of ours)
            except (ValueError, RecursionError):
                return None
            memory_id, revision = _id_and_revision(doc)
            if memory_id is None or revision is None:
                return None
            previous = winners.get(memory_id)
            if previous is None or revision >= previous[0]:
                winners[memory_id] = (revision, start, start + len(line))
        offset += len(raw) + 1
    return winners


def revision_at(data: bytes, start: int, end: int) -> int | None:
    """The revision of the record line `data[start:end]`; None when it does not read as one."""
    try:
        return _id_and_revision(json.loads(data[start:end]))[1]
    except (ValueError, RecursionError):
        return None


def _id_and_revision(doc: object) -> tuple[str | None, int | None]:
    if not isinstance(doc, dict):
        return None, None
    memory_id, revision = doc.get("id"), doc.get("revision", 0)
    return (
        memory_id if isinstance(memory_id, str) else None,
        revision if type(revision) is int else None,
    )


# Whether a tag tuple is as the worker stores it: tuples repeat across a bank, so the check of
# each distinct one runs once and the rest are a C-level cache hit (a boot's records, all of them).
_tags_stored = lru_cache(maxsize=16_384)(lambda tags: stored_labels(tags) is tags)
_TAGS = operator.attrgetter("tags")
_CATEGORY = operator.attrgetter("category")
# A category as every write path stores it, or none; another one (a hand edit's "misc") is left
# as it reads.
_CATEGORY_STORED = frozenset({*CATEGORIES, None}).__contains__


def _as_stored(record: Memory) -> Memory:
    """`record` with its tags and category as every write path stores them (normalized tags,
    `transitions.stored_labels`; a known category in lowercase). Only a line edited by hand
    differs: its "Billing" was listed by `memory::tags` and matched no filter, its "Preference"
    matched no `category` filter nor its retention. The same record when nothing differs."""
    changes: dict[str, object] = {}
    if record.tags and not _tags_stored(record.tags):
        changes["tags"] = stored_labels(record.tags)
    if not _CATEGORY_STORED(record.category):
        category = str(record.category).strip().lower()
        if category in CATEGORIES:
            changes["category"] = category
    return record.model_copy(update=changes) if changes else record


def as_stored(memories: dict[str, Memory], *, compact: bool = True) -> list[int]:
    """`records_at`'s records as a replay reads them (`_intact_lines`, `_as_stored`), in place;
    the positions (in `memories`' order) of those that were not. The records file vouches for
    lines, a hand-edited one included, not for the form of their tags and category; it says
    whether its lines were all as stored when it was written (then this pass, ~1 µs a record,
    is not needed)."""
    records = memories.values()
    if all(map(_tags_stored, map(_TAGS, records))) and all(
        map(_CATEGORY_STORED, map(_CATEGORY, records))
    ):
        return []
    changed: list[int] = []
    for position, (memory_id, record) in enumerate(list(memories.items())):
        fixed = _as_stored(record)
        if fixed is not record:
            memories[memory_id] = shared_fields(fixed) if compact else fixed
            changed.append(position)
    return changed


def records_at(
    data: bytes, starts: Sequence[int], ends: Sequence[int], *, compact: bool = True
) -> dict[str, Memory] | None:
    """The records of the lines `data[starts[i]:ends[i]]`, by id in that order, as RAM keeps
    them (`compact`: see `replay`); None when one does not read as a record or two share an id.
    Only for spans a records snapshot vouches are a replay's winners (no checksum or batch check
    here)."""
    if len(starts) != len(ends):
        return None
    lines = map(data.__getitem__, map(slice, starts, ends))
    try:
        # Chained maps: the per-record steps run from C, with no Python frame of ours per line.
        direct = _fields_validator() if compact else None
        if direct is not None:
            records = list(map(direct, lines))
        else:
            validated = map(_validate_json, lines)
            records = list(map(shared_fields, validated) if compact else validated)
    except ValidationError:
        return None
    memories = dict(zip(map(_ID, records), records, strict=True))
    return memories if len(memories) == len(records) else None


class LazyRecords:
    """`records_at`'s records, each validated from its line at its first read: a short-lived
    process (a one-shot save) reads the few records its command touches, not the ~10,000 a
    bank holds (~4 µs a line). Ids (from the records snapshot, which vouches for them as it
    vouches for the spans) in replay order; a record set here (a write applied) replaces its
    line, a new id goes last, as in the dict the bank otherwise holds. A line that no longer
    reads as its record (only a records file made for other bytes or other code could vouch for
    such a line: the whole log's CRC-32 and the replay code's digest match) raises
    `StorageError` after `unreadable` is called: the boot that validated every line would have
    replayed the log instead and reported it."""

    __slots__ = ("_data", "_ends", "_held", "_read", "_starts", "_unreadable")

    def __init__(
        self,
        ids: Sequence[str],
        data: bytes,
        starts: Sequence[int],
        ends: Sequence[int],
        unreadable: Callable[[str], None],
    ) -> None:
        # id → its record once read, else its row in the spans (an int: never a record)
        self._held: dict[str, Memory | int] = dict(zip(ids, range(len(ids)), strict=True))
        self._read: list[int] = []  # the rows whose lines are read (or their records replaced)
        self._data, self._starts, self._ends = data, starts, ends
        self._unreadable = unreadable

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._held

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def get(self, memory_id: str) -> Memory | None:
        held = self._held.get(memory_id)
        if not isinstance(held, int):
            return held  # a record, or None
        record = self._held[memory_id] = self._line(memory_id, held)
        self._read.append(held)
        return record

    def row(self, memory_id: str) -> int | None:
        """The row (in the spans, and the order of the ids given) of `memory_id`'s line while
        it was not read; None once it was (or set, or for an unknown id)."""
        held = self._held.get(memory_id)
        return held if isinstance(held, int) else None

    def __setitem__(self, memory_id: str, record: Memory) -> None:
        held = self._held.get(memory_id)
        if isinstance(held, int):
            self._read.append(held)
        self._held[memory_id] = record

    def rows_read(self) -> list[int]:
        """The rows whose records are held as records (read, or replaced), not as lines."""
        return self._read

    def records(self) -> Iterator[Memory]:
        """The records held as records (read, replaced or added), in replay order."""
        return (held for held in self._held.values() if not isinstance(held, int))

    def all(self) -> dict[str, Memory]:
        """Every record, by id in replay order: the lines not read yet validated now, in one
        pass from C as `records_at` validates them (a recall reads them all). The mapping is
        handed over: it holds records only from here on. On the loop only, as every write: a
        write applied while this ran in a thread would be overwritten by its line's older record."""
        held = self._held
        values = list(held.values())
        unread = list(map(is_, map(type, values), repeat(int)))
        ids = list(compress(held, unread))
        rows: list[int] = list(compress(values, unread))  # type: ignore[arg-type]  # the ints
        starts, ends = self._starts, self._ends
        lines = map(
            self._data.__getitem__,
            map(slice, map(starts.__getitem__, rows), map(ends.__getitem__, rows)),
        )
        try:
            records: list[Memory] = list(map(_validate_json, lines))
        except ValidationError:
            records = []
        if len(records) != len(ids) or list(map(_ID, records)) != ids:
            # One line at a time: raises at the first that does not read as its record.
            records = [self._line(memory_id, row) for memory_id, row in zip(ids, rows, strict=True)]
        held.update(zip(ids, records, strict=True))
        return held  # type: ignore[return-value]  # every value a record now

    def readable(self) -> dict[str, Memory]:
        """Every record whose line reads as it (the lines not read yet validated one by one, and
        kept as they are), by id in replay order: what a bank that found a line that does not
        read still shows (a reload compares it with what the replay of its log finds)."""
        found: dict[str, Memory] = {}
        for memory_id, held in self._held.items():
            record = self._parse(memory_id, held) if isinstance(held, int) else held
            if not isinstance(record, str):
                found[memory_id] = record
        return found

    def _parse(self, memory_id: str, row: int) -> Memory | str:
        """The record of row `row`'s line, or what is wrong with it (not `memory_id`'s record)."""
        line = self._data[self._starts[row] : self._ends[row]]
        try:
            record: Memory = _validate_json(line)  # as `records_at` validates (not compacted)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            return f"{first['msg']} at {field}" if field else first["msg"]
        return record if record.id == memory_id else f"its id reads {record.id!r}"

    def _line(self, memory_id: str, row: int) -> Memory:
        problem = self._parse(memory_id, row)
        if not isinstance(problem, str):
            return problem
        self._unreadable(memory_id)
        raise StorageError(
            f"{MEMORIES_FILE}: the line of memory {memory_id} no longer reads as the record "
            f"the records snapshot vouched for ({problem}); the bank refuses writes until "
            "memory::reload replays its log"
        )


def read_all(path: Path, *, within: Path | None = None) -> tuple[list[Memory], list[Damage]]:
    """Every intact record of `path` in log order, and what was skipped."""
    damage: list[Damage] = []
    return list(_intact(path, damage, within=within)), damage


def lines_of(records: Iterable[Memory]) -> Iterator[bytes]:
    """`records` as log lines, one sealed line each (a rewrite is atomic as a whole: no batch
    tags are needed)."""
    for record in records:
        yield _sealed(record.to_line())


def history(path: Path, memory_ids: Collection[str], *, within: Path | None = None) -> list[Memory]:
    """Every intact record of `memory_ids` in log order: their revisions, oldest first. A line
    the worker wrote for another id (its leading `{"id":"…"`, no batch tag) is passed over without
    being parsed, whatever the number of ids asked; any other line is parsed and checked."""
    if not memory_ids:
        return []
    wanted = {i.encode("utf-8", "surrogatepass") for i in memory_ids}

    def keep(line: bytes) -> bool:
        if _BATCH_KEY in line:
            return True  # a multi-record write applies whole or not at all: read all of it
        leading = _LEADING_ID.match(line)
        return leading is None or leading[1] in wanted

    return [
        record for record in _intact(path, [], keep=keep, within=within) if record.id in memory_ids
    ]


# The id as the worker writes it, first in the line; a line in another form (written by hand, an
# id with an escape) does not match and is parsed.
_LEADING_ID = re.compile(rb'\{"id":"([^"\\]*)"')


def _intact(
    path: Path,
    damage: list[Damage],
    keep: Callable[[bytes], bool] | None = None,
    within: Path | None = None,
    compact: bool = True,
) -> Iterator[Memory]:
    """The records of `path` in log order, skipping (and noting in `damage`) what is torn or
    corrupt and every record of a multi-record write that did not land whole. A link planted in
    the log's place is reported and never read."""
    if files.is_link(path):
        damage.append(Damage(MEMORIES_FILE, files.planted(path).message))
        return
    lines = files.iter_lines(path, within=within)
    if keep is not None:
        lines = (entry for entry in lines if keep(entry[1]))
    yield from _intact_lines(lines, damage, compact)


def tail_records(data: bytes, start: int) -> list[Memory] | None:
    """The records of the lines of `data` (a whole log) from the one starting at `start` on, in
    log order, with replay's checks (checksums, batches applied whole); None when one of those
    lines is torn, corrupt or part of a write that did not land whole, or when the log does not
    end whole: the caller replays the whole log then, for its damage report. Only for a `start`
    that ends a prefix known to replay without damage (a records snapshot was made of it), which
    leaves no batch open: what these lines replay to is what they add to a full replay."""
    if start < 0 or start > len(data) or (start and data[start - 1] != ord("\n")):
        return None
    if data and not data.endswith(b"\n"):
        return None
    damage: list[Damage] = []
    lines = (
        (number, stripped, True)
        for number, raw in enumerate(data[start:].split(b"\n"), start=1)
        if (stripped := raw.strip())
    )
    records = list(_intact_lines(lines, damage))
    return None if damage else records


def continues_batch(data: bytes, start: int) -> bool:
    """Whether the first line of `data` at or past `start` belongs to a multi-record write whose
    tag was seen before `start` (the two halves of one write would replay together, not apart)."""
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end].strip()
        if line:
            tag = _batch_tag(line)
            return tag is not None and data.rfind(_BATCH_KEY + tag[0].encode(), 0, start) >= 0
        start = end + 1
    return False


def _intact_lines(
    lines: Iterable[tuple[int, bytes, bool]], damage: list[Damage], compact: bool = True
) -> Iterator[Memory]:
    """`_intact` over `(line_number, line, complete)` of non-empty stripped lines."""
    batch: _OpenBatch | None = None
    for number, line, complete in lines:
        try:
            record = _validate_json(line)
            fixed = _as_stored(record)  # differs only for a line written by hand
            if fixed is not record:
                damage.append(Damage(MEMORIES_FILE, RESTORED_FORM, number, kept=True))
                record = fixed
            if compact:
                record = shared_fields(record)
        except ValidationError as exc:
            reason = "torn last line (interrupted write)" if not complete else "corrupt line"
            first = exc.errors()[0]
            # A field's error names the field; JSON's own names its place in the line already
            # (`… at line 1 column 26`), and a bare "at line" after it read as a cut message.
            field = ".".join(str(p) for p in first["loc"])
            detail = f"{first['msg']} at {field}" if field else first["msg"]
            damage.append(Damage(MEMORIES_FILE, f"{reason}: {detail}", number))
            if batch is not None:
                batch.broken = True
            continue
        if _hand_edited(line):  # (a torn write never parses: its record or its JSON is cut)
            damage.append(Damage(MEMORIES_FILE, _HAND_EDITED, number, kept=True))
        tag = _batch_tag(line)
        if batch is not None and (tag is None or tag[0] != batch.nonce):
            yield from _short(batch, damage, followed=True)
            batch = None
        if tag is None:
            yield record
            continue
        batch = batch or _OpenBatch(tag[0], tag[2], number)
        batch.records.append(record)
        batch.ended = batch.ended or tag[1] == tag[2] - 1
        if len(batch.records) == batch.size:
            yield from batch.records
            batch = None
    if batch is not None:
        yield from _short(batch, damage)


def _short(batch: _OpenBatch, damage: list[Damage], *, followed: bool = False) -> list[Memory]:
    """What a multi-record write with lines missing applies. A write cut short by a crash is
    a prefix of its lines: none applied. One whose last line is there reached its end, so the
    lines missing were removed by hand (a person deleting one imported memory): the others are
    what the file says, and hiding them hid a whole import. So were those of one `followed` by
    another write with every line it has whole: a crash cuts short the log's last write, and
    the next load sets that aside (`interrupted_tail`) before anything is written after it, so
    its last line was deleted by hand too (a torn line among them still marks a crash)."""
    if not batch.ended and (not followed or batch.broken):
        damage.append(_torn(batch))  # the rest of that write never made it to disk
        return []
    reason = (
        f"{batch.size - len(batch.records)} of the {batch.size} lines of one write removed "
        "by hand: the others loaded as they read"
    )
    damage.append(Damage(MEMORIES_FILE, reason, batch.first_line, kept=True))
    return batch.records


def interrupted_tail(path: Path, *, within: Path | None = None) -> int | None:
    """The byte offset where a write that never finished begins, when that write is the END of
    the log: a torn last line, and the lines before it of the same multi-record write that stops
    short. None when the log ends whole (the common case costs one read of its last line).

    Such a write was never acknowledged: a commit answers only after its whole write is fsynced,
    and the next commit starts after it. Damage anywhere else in the log is not a tail: it stays
    reported, never cut."""
    found = files.last_line(path, within=within)
    if found is None or not _ends_short(*found):
        return None
    cut: int | None = None
    batch: tuple[str, int] | None = None  # (nonce, offset of its first line) while one is open
    for _, offset, line, complete in files.iter_lines_at(path, within=within):
        whole = _whole(line)
        if not complete and not whole:
            return batch[1] if batch is not None else offset  # the torn last line
        tag = _batch_tag(line) if whole else None
        if tag is None:
            batch = None
        elif batch is None or tag[0] != batch[0]:
            batch = (tag[0], offset) if tag[1] + 1 < tag[2] else None
        elif tag[1] + 1 == tag[2]:
            batch = None
        cut = batch[1] if batch is not None else None
    return cut


def _ends_short(line: bytes, complete: bool) -> bool:
    """Whether a log whose last line is `line` ends inside a write: torn, or a line of a
    multi-record write that is not its last."""
    if not _whole(line):
        return not complete
    tag = _batch_tag(line)
    return tag is not None and tag[1] + 1 < tag[2]


def _whole(line: bytes) -> bool:
    """Whether `line` reads as a record (edited by hand or not)."""
    try:
        _validate_json(line)
    except ValidationError:
        return False
    return True


def _torn(batch: _OpenBatch) -> Damage:
    return Damage(
        MEMORIES_FILE,
        f"interrupted write of {batch.size} records ({len(batch.records)} on disk): "
        "none of them applied",
        batch.first_line,
    )
