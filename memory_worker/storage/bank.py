"""One bank in RAM: its memories, index, rules and damage report, replayed from its folder.

Invariants:
- `commit()` is the single mutation choke point. A record's line is appended and fsynced before the
  record becomes visible to readers; concurrent commits share one fsync (group commit).
- Decisions read `latest()`/`match_text()`, which include records written but not yet
  durable, so two concurrent saves of one text reinforce instead of duplicating. Callers
  decide and call `commit()` with no `await` in between.
- A failed write or fsync cuts the log back to its last durable size and fails every commit that was
  waiting on it: RAM never holds what the disk does not.
- Replay is last-wins by id and revision (a tie goes to the later line); torn or corrupt lines are
  skipped and reported with their line numbers, never fatal.
- Every line this worker writes ends with its checksum (`"crc"`); a line whose bytes no longer match
  it is corrupt, even when it still parses. Lines without one (older logs, hand-written) still load.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import time
import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import structlog
import yaml
from pydantic import ValidationError

from memory_worker.core.errors import StorageError
from memory_worker.core.lessons import is_lesson
from memory_worker.core.models import Memory, Rule
from memory_worker.core.text import fingerprint, normalize
from memory_worker.search.index import LexicalIndex
from memory_worker.search.lessons import LessonIndex
from memory_worker.search.ranking import indexed, top_memories
from memory_worker.storage import files
from memory_worker.storage.vectors import (
    VECTORS_FILE,
    VectorRecord,
    append_vectors,
    load_vectors,
    text_hash,
)

__all__ = ["Bank", "Damage", "DurabilityWarning", "DurabilityWarnings"]

log = structlog.get_logger(__name__)

MEMORIES_FILE = "memories.jsonl"
BANK_FILE = "bank.yaml"
RULES_DIR = "rules"


@dataclass(frozen=True, slots=True)
class Damage:
    """Something found broken on disk and skipped: reported by doctor and in the logs."""

    file: str
    reason: str
    line: int | None = None

    def describe(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class DurabilityWarning:
    """A change that landed (RAM and disk have it) whose directory sync failed: a power loss
    before the file system writes that directory out could still undo it."""

    at_ms: int
    bank: str
    change: str
    error: str


class DurabilityWarnings:
    """The store's recent durability warnings, for doctor: the last `LIMIT`, and how many in all.
    Kept in RAM only: after a restart the disk is what it is, and is served as such."""

    LIMIT = 20

    def __init__(self) -> None:
        self._recent: deque[DurabilityWarning] = deque(maxlen=self.LIMIT)
        self.total = 0

    def note(self, bank: str, change: str, error: StorageError) -> None:
        self._recent.append(DurabilityWarning(int(time.time() * 1000), bank, change, error.message))
        self.total += 1
        log.warning("durability_unknown", bank=bank, change=change, error=str(error))

    def recent(self) -> list[DurabilityWarning]:
        return list(self._recent)

    def take(self, bank: str) -> list[DurabilityWarning]:
        """Remove and return the warnings about `bank` (doctor's scratch bank reports its own)."""
        taken = [w for w in self._recent if w.bank == bank]
        if taken:
            self._recent = deque((w for w in self._recent if w.bank != bank), maxlen=self.LIMIT)
            self.total -= len(taken)
        return taken


@dataclass(slots=True)
class _OpenBatch:
    nonce: str
    size: int
    first_line: int
    records: list[Memory] = field(default_factory=list)


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
# CRC-32C's edge is hardware speed, which does not matter here. It guards against accidents (disk,
# editor, copy), not tampering: anyone can recompute it. A line without the member (written before
# checksums, or by hand) is still loaded; a person editing a line removes its `crc`.
_CRC_KEY = b',"crc":"'
_CRC_SUFFIX = len(_CRC_KEY) + 8 + 2  # ,"crc":"xxxxxxxx"}


def _sealed(body: bytes) -> bytes:
    """`body` (one JSON object, no newline) with its checksum as the last member."""
    return b'%s,"crc":"%08x"}\n' % (body[:-1], zlib.crc32(body))


def _encode(records: Sequence[Memory]) -> bytes:
    if len(records) == 1:
        return _sealed(records[0].to_line())
    nonce = f"{_NONCE}{next(_batches):x}"
    size = len(records)
    return b"".join(
        _sealed(record.to_line()[:-1] + b',"batch":"%s:%d:%d"}' % (nonce.encode(), index, size))
        for index, record in enumerate(records)
    )


def _checksum_problem(line: bytes) -> str | None:
    """Why `line` (which parsed) fails its checksum; None when it matches or it carries none."""
    if line[-_CRC_SUFFIX:-10] == _CRC_KEY:
        try:
            if zlib.crc32(b"}", zlib.crc32(line[:-_CRC_SUFFIX])) == int(line[-10:-2], 16):
                return None
        except ValueError:
            return "unreadable checksum"
        return (
            "checksum mismatch (the line changed after it was written; "
            'a line edited by hand must have its "crc" field removed)'
        )
    if b'"crc":' in line:  # a key: a string value is never followed by a colon
        return 'a "crc" field not in the form the worker writes'
    return None


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


@dataclass(slots=True)
class _Pending:
    records: Sequence[Memory]
    future: asyncio.Future[None] = field(repr=False)


def _mtime_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return 0


class Bank:
    def __init__(
        self,
        name: str,
        path: Path,
        description: str = "",
        warnings: DurabilityWarnings | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.description = description
        self.warnings = warnings if warnings is not None else DurabilityWarnings()
        self.damage: list[Damage] = []
        self.index = LexicalIndex()
        self.lessons = LessonIndex()  # live lessons' anchors, kept beside the lexical index
        self._memories: dict[str, Memory] = {}
        self._applied = 0  # records applied so far: the version `standing()` is cached against
        self._standing: tuple[tuple[int, int], list[Memory]] | None = None
        self._by_text: dict[str, set[str]] = {}  # normalized text → ids whose text it is
        self._rules: dict[str, Rule] = {}
        self._vector_models: dict[str, str] = {}  # id → model of the vector the index holds
        self._embed_model: str | None = None  # the model `_to_embed` is kept for
        self._to_embed: dict[str, None] = {}  # live ids lacking its vector, in arrival order
        self._log = files.AppendLog(path / MEMORIES_FILE)
        self._queue: list[_Pending] = []
        self._staged: dict[str, tuple[Memory, str]] = {}  # id → (record, normalized text)
        self._flusher: asyncio.Task[None] | None = None
        self._rules_lock = asyncio.Lock()
        self._broken: str | None = None  # set when a failed write could not be cut back
        self._frozen: str | None = None
        self._log_stamp: _Stamp | None = None  # memories.jsonl as of our last replay/fsync

    def __repr__(self) -> str:
        return (
            f"<Bank {self.name!r} memories={len(self._memories)} live={len(self.index)} "
            f"rules={len(self._rules)} staged={len(self._staged)} damage={len(self.damage)}>"
        )

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, name: str, path: Path, description: str, warnings: DurabilityWarnings | None = None
    ) -> Bank:
        """Make the folder with its `bank.yaml` and `rules/` (blocking). It is built under a
        hidden temporary name and renamed into place, so a crash never leaves half a bank."""
        staging = path.with_name(f".{name}.tmp-{secrets.token_hex(4)}")
        try:
            (staging / RULES_DIR).mkdir(parents=True)
            body = yaml.safe_dump({"description": description}, allow_unicode=True).encode()
            files.atomic_write(staging / BANK_FILE, body)
            files.fsync_dir(staging)
            os.rename(staging, path)  # fails when the name is taken: never merge into a folder
        except (OSError, StorageError) as exc:
            files.remove_tree(staging)
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot create bank folder {path}: {exc.strerror}") from exc
        bank = cls(name, path, description, warnings)
        try:
            files.fsync_dir(path.parent)
        except StorageError as exc:
            # Past the rename the bank exists: report the unsynced entry, do not disown the folder.
            bank.warnings.note(name, "bank folder created", exc)
        return bank

    @classmethod
    def load(cls, name: str, path: Path, warnings: DurabilityWarnings | None = None) -> Bank:
        """Replay a bank folder (blocking): description, memories, rules, leftovers."""
        bank = cls(name, path, warnings=warnings)
        bank.description = bank._read_description()
        # Stamped before reading, so an edit made while replaying still counts as a change.
        bank._log_stamp = _stat_stamp(bank.path / MEMORIES_FILE)
        bank._replay()
        bank._load_vectors()
        bank._load_rules()
        for damage in bank.damage:
            log.warning("bank_damage_skipped", bank=name, detail=damage.describe())
        return bank

    def _read_description(self) -> str:
        description, valid = self._description_on_disk()
        if not valid:
            self.damage.append(Damage(BANK_FILE, "not valid YAML; description ignored"))
        return description

    def _description_on_disk(self) -> tuple[str, bool]:
        """`bank.yaml`'s description, and whether the file parsed (absent counts as parsed)."""
        path = self.path / BANK_FILE
        if not path.exists():
            return "", True
        try:
            data = yaml.safe_load(files.read_text(path))
        except yaml.YAMLError:
            return "", False
        value = data.get("description") if isinstance(data, dict) else None
        return (value if isinstance(value, str) else ""), True

    def _replay(self) -> None:
        memories = self._memories
        batch: _OpenBatch | None = None
        for number, line, complete in files.iter_lines(self.path / MEMORIES_FILE):
            try:
                record = Memory.model_validate_json(line)
            except ValidationError as exc:
                reason = "torn last line (interrupted write)" if not complete else "corrupt line"
                first = exc.errors()[0]
                detail = f"{first['msg']} at {'.'.join(str(p) for p in first['loc']) or 'line'}"
                self.damage.append(Damage(MEMORIES_FILE, f"{reason}: {detail}", number))
                continue
            problem = _checksum_problem(line)
            if problem is not None:
                reason = "torn last line (interrupted write)" if not complete else "corrupt line"
                self.damage.append(Damage(MEMORIES_FILE, f"{reason}: {problem}", number))
                continue
            tag = _batch_tag(line)
            if batch is not None and (tag is None or tag[0] != batch.nonce):
                self._drop_torn_batch(batch)  # the rest of that write never made it to disk
                batch = None
            if tag is not None:
                batch = batch or _OpenBatch(tag[0], tag[2], number)
                batch.records.append(record)
                if len(batch.records) < batch.size:
                    continue
                ready, batch = batch.records, None
            else:
                ready = [record]
            for item in ready:
                previous = memories.get(item.id)
                if previous is None or item.revision >= previous.revision:
                    memories[item.id] = item
        if batch is not None:
            self._drop_torn_batch(batch)
        for record in memories.values():
            self._map_text(record)
        self.index.add_many(indexed(record) for record in memories.values() if record.live)
        self._index_lessons()

    def _index_lessons(self) -> None:
        for record in self._memories.values():
            if record.live and record.anchors is not None and is_lesson(record):
                self.lessons.add(record.id, record.anchors)

    def _drop_torn_batch(self, batch: _OpenBatch) -> None:
        self.damage.append(
            Damage(
                MEMORIES_FILE,
                f"interrupted write of {batch.size} records ({len(batch.records)} on disk): "
                "none of them applied",
                batch.first_line,
            )
        )

    def _load_vectors(self) -> None:
        records, skipped = load_vectors(self.path / VECTORS_FILE)
        if skipped:
            self.damage.append(
                Damage(
                    VECTORS_FILE,
                    f"{skipped} unreadable line(s) skipped; their memories are re-embedded",
                )
            )
        for record in records.values():
            memory = self._memories.get(record.id)
            current = (
                memory is not None and memory.live and record.text_hash == text_hash(memory.text)
            )
            if current and self.index.set_vector(record.id, record.vector):
                self._vector_models[record.id] = record.model

    def needs_embedding(self, model: str, limit: int) -> list[Memory]:
        """Live memories with no vector from `model` (new, edited, or embedded by another model).
        The first call for a model scans the bank; after that the set is kept up to date."""
        if model != self._embed_model:
            self._embed_model = model
            self._to_embed = {
                m.id: None
                for m in self._memories.values()
                if m.live and self._vector_models.get(m.id) != model
            }
        return [self._memories[memory_id] for memory_id in islice(self._to_embed, limit)]

    async def store_vectors(self, model: str, pairs: Sequence[tuple[Memory, list[float]]]) -> int:
        """Keep the vectors whose memory is still live with the same text; returns how many."""
        kept: list[VectorRecord] = []
        width = self.index.vector_width
        if pairs and width and len(pairs[0][1]) != width:
            # A model of another width: its vectors replace every old one (they cannot be mixed).
            self.index.reset_vectors()
            self._vector_models.clear()
        for memory, vector in pairs:
            current = self._memories.get(memory.id)
            if current is None or not current.live or current.text != memory.text:
                continue  # edited or retired while it was being embedded: a later pass redoes it
            if self.index.set_vector(memory.id, vector):
                self._vector_models[memory.id] = model
                if model == self._embed_model:
                    self._to_embed.pop(memory.id, None)
                kept.append(
                    VectorRecord(
                        memory.id, model, current.revision, text_hash(current.text), vector
                    )
                )
        if kept:
            await asyncio.to_thread(append_vectors, self.path / VECTORS_FILE, kept)
        return len(kept)

    def _load_rules(self) -> None:
        folder = self.path / RULES_DIR
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name) if folder.is_dir() else []
        except OSError as exc:
            self.damage.append(Damage(RULES_DIR, f"unreadable: {exc.strerror or exc}"))
            return
        for entry in entries:
            if entry.name.startswith("."):
                if entry.name.endswith(".tmp"):
                    self.damage.append(
                        Damage(
                            f"{RULES_DIR}/{entry.name}",
                            "leftover temp file of an interrupted "
                            "rule write (the rule itself is intact); safe to delete",
                        )
                    )
                continue
            if not entry.name.endswith(".md") or not entry.is_file():
                continue
            path = Path(entry.path)
            try:
                content = files.read_text(path)
            except StorageError as exc:
                self.damage.append(Damage(f"{RULES_DIR}/{entry.name}", exc.message))
                continue
            name = entry.name[: -len(".md")]
            self._rules[name] = Rule(name=name, content=content, updated_at=_mtime_ms(path))

    # --- reads (durable state) -----------------------------------------------------------------

    @property
    def memories(self) -> Mapping[str, Memory]:
        return self._memories

    def get(self, memory_id: str) -> Memory | None:
        return self._memories.get(memory_id)

    def is_empty(self) -> bool:
        """No memory, rule or write in flight: what a bank just created looks like."""
        return not (self._memories or self._rules or self._queue or self._staged)

    def live_count(self) -> int:
        return len(self.index)

    def pinned_count(self) -> int:
        return sum(1 for m in self._memories.values() if m.pinned and m.live)

    def rules(self) -> list[Rule]:
        return [self._rules[name] for name in sorted(self._rules)]

    def rule(self, name: str) -> Rule | None:
        return self._rules.get(name)

    # --- decisions (durable + written-but-not-yet-synced) ---------------------------------------

    def latest(self, memory_id: str) -> Memory | None:
        staged = self._staged.get(memory_id)
        return staged[0] if staged is not None else self._memories.get(memory_id)

    def match_text(self, text: str) -> Memory | None:
        """The record whose text is `text` up to case and whitespace: a live one first, else a
        retired one (to resurrect), else None. Among several, the most recently updated wins, so
        the answer depends only on the records, never on the order they were loaded in."""
        norm = normalize(text)
        candidates = {
            record.id: record
            for record, staged_norm in self._staged.values()
            if staged_norm == norm
        }
        for memory_id in self._by_text.get(norm, ()):
            if memory_id not in self._staged:
                candidates[memory_id] = self._memories[memory_id]
        if not candidates:
            return None
        return max(candidates.values(), key=lambda m: (m.live, m.updated_at, m.id))

    def new_id(self, text: str) -> str:
        """The content fingerprint of `text`; salted deterministically in the rare case another
        record already owns it (its text was edited away from this one)."""
        memory_id = fingerprint(text)
        salt = 0
        while memory_id in self._memories or memory_id in self._staged:
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
        if self._broken is not None:
            raise StorageError(
                f"bank {self.name} refuses writes until memory::reload: {self._broken}"
            )
        if self._frozen is not None:
            raise StorageError(f"bank {self.name} cannot be written: {self._frozen}")
        try:
            data = _encode(records)
        except ValueError as exc:  # pydantic's serialization error is a ValueError
            raise StorageError(f"cannot serialize a record of bank {self.name}: {exc}") from exc
        self._log.write(data)
        pending = _Pending(records, asyncio.get_running_loop().create_future())
        pending.future.add_done_callback(_consume_exception)
        self._queue.append(pending)
        for record in records:
            self._staged[record.id] = (record, normalize(record.text))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=f"memory-flush:{self.name}")
        # Shielded: a caller that gives up (a hook timeout) must not strand its record half-applied.
        await asyncio.shield(pending.future)

    async def _flush(self) -> None:
        while self._queue:
            batch = list(self._queue)
            try:
                await asyncio.to_thread(self._log.sync)
            except StorageError as exc:
                self._abort(exc)
                return
            self._stamp_own_write()
            del self._queue[: len(batch)]
            for pending in batch:
                for record in pending.records:
                    self._apply(record)
                pending.future.set_result(None)
            self._staged = {
                record.id: (record, normalize(record.text))
                for pending in self._queue
                for record in pending.records
            }

    def _abort(self, exc: StorageError) -> None:
        log.error("commit_failed", bank=self.name, error=str(exc), waiting=len(self._queue))
        try:
            self._log.truncate(self._log.synced_size)
        except StorageError as cut:
            self._broken = cut.message
            log.error("bank_write_disabled", bank=self.name, error=str(cut))
        failed, self._queue, self._staged = self._queue, [], {}
        for pending in failed:
            pending.future.set_exception(exc)

    def standing(self, limit: int) -> list[Memory]:
        """`top_memories` of this bank, kept until the next record lands: the hook pads every
        turn's recall with it, and sorting 10k memories per turn costs tens of milliseconds."""
        key = (self._applied, limit)
        if self._standing is None or self._standing[0] != key:
            self._standing = (key, top_memories(self._memories.values(), limit))
        return self._standing[1]

    def _apply(self, record: Memory) -> None:
        """Make a durable record visible, with replay's rule: a lower revision never wins."""
        previous = self._memories.get(record.id)
        if previous is not None and record.revision < previous.revision:
            return
        self._applied += 1
        self._memories[record.id] = record
        if record.live and record.anchors is not None and is_lesson(record):
            self.lessons.add(record.id, record.anchors)
        else:
            self.lessons.remove(record.id)
        if previous is not None:
            self._unmap_text(previous)
        self._map_text(record)
        indexed_same = (
            previous is not None
            and previous.live
            and previous.text == record.text
            and previous.entities == record.entities
        )
        if not record.live:
            self.index.remove(record.id)
            self._vector_models.pop(record.id, None)
            self._to_embed.pop(record.id, None)
        elif indexed_same:
            self.index.update_columns(indexed(record, with_terms=False))
        else:
            self.index.add_doc(indexed(record))  # a new slot: any old vector is gone with it
            self._vector_models.pop(record.id, None)
            if self._embed_model is not None:
                self._to_embed[record.id] = None

    def _map_text(self, record: Memory) -> None:
        self._by_text.setdefault(normalize(record.text), set()).add(record.id)

    def _unmap_text(self, record: Memory) -> None:
        norm = normalize(record.text)
        ids = self._by_text.get(norm)
        if ids is not None:
            ids.discard(record.id)
            if not ids:
                del self._by_text[norm]

    def freeze(self, reason: str) -> None:
        """Refuse new commits (bank being trashed or reloaded); writes in flight still land."""
        self._frozen = reason

    def unfreeze(self) -> None:
        self._frozen = None

    async def drain(self) -> None:
        """Wait for every write in flight to land (or fail): memory commits and rule writes."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        async with self._rules_lock:
            pass

    def close(self) -> None:
        self._log.close()

    # --- rules ---------------------------------------------------------------------------------

    async def set_rule(self, name: str, content: str) -> bool:
        """Write `rules/<name>.md` atomically, or remove it when `content` is blank; returns whether
        the rule exists afterwards."""
        path = self.path / RULES_DIR / f"{name}.md"
        async with self._rules_lock:
            if self._frozen is not None:
                raise StorageError(f"bank {self.name} cannot be written: {self._frozen}")
            removing = not content.strip()
            try:
                if removing:
                    await asyncio.to_thread(files.remove_file, path)
                else:
                    await asyncio.to_thread(_write_rule, path, content.encode("utf-8"))
            except files.UnsyncedChange as exc:
                change = f"rule {name} {'removed' if removing else 'written'}"
                self.warnings.note(self.name, change, exc)
                raise
            finally:
                # Even a failed call may have reached the disk (the rename happened, its directory
                # sync did not): RAM follows what the file now says, so a reboot changes nothing.
                self._sync_rule(name, path)
            return name in self._rules

    def _sync_rule(self, name: str, path: Path) -> None:
        try:
            content = files.read_text(path)
        except StorageError:
            self._rules.pop(name, None)
            return
        self._rules[name] = Rule(name=name, content=content, updated_at=_mtime_ms(path))

    # --- hand edits ----------------------------------------------------------------------------

    def disk_changed(self) -> bool:
        """Whether the folder says something RAM does not (an edit by hand), by content and file
        identity, never by timing: `memories.jsonl` against its stamp from this bank's own last
        replay or fsync, the rule files' names and contents, and `bank.yaml`'s description.
        False while writes are in flight: the file is mid-write by us; ask again after `drain()`.
        Blocking, but only a stat and the small rule and `bank.yaml` files are read."""
        if self._queue or self._rules_lock.locked():
            return False
        if self._flusher is not None and not self._flusher.done():
            return False
        if _stat_stamp(self.path / MEMORIES_FILE) != self._log_stamp:
            return True
        try:
            description = self._disk_description()
        except StorageError:
            return True  # unreadable: a reload reports it (the bank becomes broken)
        if description != self.description:
            return True
        return self._disk_rules() != {name: rule.content for name, rule in self._rules.items()}

    def is_frozen(self) -> bool:
        """Being trashed or reloaded: whoever froze it decides what happens to it next."""
        return self._frozen is not None

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

    def _disk_description(self) -> str:
        """`bank.yaml`'s description as `load()` would read it, without recording damage."""
        return self._description_on_disk()[0]

    def _disk_rules(self) -> dict[str, str]:
        """The rules `load()` would read (same filter, unreadable files skipped alike)."""
        folder = self.path / RULES_DIR
        try:
            entries = list(os.scandir(folder)) if folder.is_dir() else []
        except OSError:
            return {}
        found: dict[str, str] = {}
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(".md"):
                continue
            try:
                if entry.is_file():
                    found[entry.name[: -len(".md")]] = files.read_text(Path(entry.path))
            except (OSError, StorageError):
                continue
        return found


def _write_rule(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
    files.atomic_write(path, data)


def _consume_exception(future: asyncio.Future[None]) -> None:
    # A failed commit is reported to its caller; this only stops asyncio warning about it twice.
    if not future.cancelled():
        future.exception()


# (inode, size, mtime_ns) of a file, or None when it is missing: what `disk_changed` compares.
_Stamp = tuple[int, int, int]


def _stat_stamp(path: Path) -> _Stamp | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns
