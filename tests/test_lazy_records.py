"""A short-lived process (a one-shot CLI command) that boots a bank from its records snapshot
keeps each winning line unread until something asks for its record (`log.LazyRecords`): a
one-shot save validates the few records it touches, not the bank's thousands (issue 12), and
reads what it needs of the others (the live count, a full bank's first to go, the counts close
leaves) from the records file's columns. Everything it answers and every file it leaves is what
a process that validated every line answers and leaves."""

from __future__ import annotations

import itertools
import json
import shutil
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog

from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import StorageError
from memory_worker.core.models import Memory
from memory_worker.storage import bank as bank_module
from memory_worker.storage import log as log_module
from memory_worker.storage import snapshot
from memory_worker.storage.bank import MEMORIES_FILE
from memory_worker.storage.counts import COUNTS_FILE, stat_stamp
from memory_worker.storage.snapshot import RECORDS_FILE

from .boots import NOW_MS
from .test_lazy_index import HUMAN, _files, same_batch_tags
from .test_lazy_index import run as lazy_run

N = 60  # memories seeded: far more than a save reads


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 100.0)  # a short tail: the snapshots stay


def run(
    data_dir: Path,
    work: Callable[[MemoryService], Any],
    *,
    short_lived: bool,
    settings: Settings | None = None,
) -> Any:
    """One process's session on `data_dir` (`test_lazy_index.run`), with a clock that moves a
    second at each reading, from the same instant in every session: memories stated at
    different times (the counts' oldest stated one is one of them)."""
    ticks = itertools.count(NOW_MS, 1000)
    return lazy_run(
        data_dir, work, short_lived=short_lived, settings=settings, clock=lambda: next(ticks)
    )


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Every line validated into a `Memory` record by replay or the records' lines."""
    seen: list[bytes] = []
    real = log_module._validate_json

    def counted(line: bytes) -> Any:
        seen.append(line)
        return real(line)

    monkeypatch.setattr(log_module, "_validate_json", counted)
    yield seen


@pytest.fixture
def counted_whole(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many records close counted one by one (`bank._counts_of`)."""
    seen: list[int] = []
    real = bank_module._counts_of

    def spy(records: Any) -> Any:
        records = list(records)
        seen.append(len(records))
        return real(records)

    monkeypatch.setattr(bank_module, "_counts_of", spy)
    yield seen


def seed(data_dir: Path) -> list[str]:
    """A bank of `N` memories (two about people, one pinned, one retired), closed by a server:
    its records snapshot is for its log."""

    async def work(service: MemoryService) -> list[str]:
        ids = []
        for i in range(N):
            payload: dict[str, Any] = {"bank": "b", "text": f"note {i} about the garden"}
            if i in (7, 9):
                payload["subject"] = "Ana"
            saved = await call(service, "memory::save", payload, HUMAN)
            ids.append(saved["memory"]["id"])
        await call(service, "memory::pin", {"bank": "b", "id": ids[3], "pinned": True}, HUMAN)
        await call(service, "memory::delete", {"bank": "b", "id": ids[4]}, HUMAN)
        return ids

    ids: list[str] = run(data_dir, work, short_lived=False)
    assert (data_dir / "b" / RECORDS_FILE).is_file() and (data_dir / "b" / COUNTS_FILE).is_file()
    return ids


SAVES = [
    {"bank": "b", "text": "note 12 about the garden"},  # a reinforcement
    {"bank": "b", "text": "a new note about the kiln"},  # a new general memory
]


async def one_shot(service: MemoryService) -> list[Any]:
    return [await call(service, "memory::save", dict(payload), HUMAN) for payload in SAVES]


def test_a_one_shot_save_validates_only_the_records_it_reads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    validations: list[bytes],
    counted_whole: list[int],
) -> None:
    seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    answers = {}
    read = {}
    for kind, folder in copies.items():
        same_batch_tags(monkeypatch)
        validations.clear()
        answers[kind] = run(folder, one_shot, short_lived=kind == "one-shot")
        read[kind] = len(validations)
        if kind == "one-shot":
            assert counted_whole == []  # close counted from the columns and the records read

    # The reinforced record's line (the saves' own lines are checked before they are written,
    # by another validator); a boot that validated every line read all N of them here.
    assert read["one-shot"] <= len(SAVES), read
    assert answers["one-shot"] == answers["server"]
    logs = {kind: (folder / "b" / MEMORIES_FILE).read_bytes() for kind, folder in copies.items()}
    assert logs["one-shot"] == logs["server"]
    assert _files(copies["one-shot"] / "b") == _files(copies["server"] / "b")


@pytest.mark.parametrize(
    "payload",
    [
        {"text": "Ana likes figs", "subject": "ANA"},  # a subject's second spelling
        {"text": "Rui likes tea", "subject": "Rui"},  # a new subject
        {"id": 3, "pinned": False},  # the pinned memory: the oldest stated one comes back
        {"id": 0, "delete": True},  # the oldest stated memory goes
        {"id": 9, "delete": True},  # one of a subject's memories goes
    ],
)
def test_writes_that_change_the_counts_close_as_a_server_closes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    counted_whole: list[int],
    payload: dict[str, Any],
) -> None:
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    async def write(service: MemoryService) -> Any:
        if "text" in payload:
            return await call(service, "memory::save", {"bank": "b", **payload}, HUMAN)
        target = {"bank": "b", "id": ids[payload["id"]]}
        if "delete" in payload:
            return await call(service, "memory::delete", target, HUMAN)
        return await call(service, "memory::pin", target | {"pinned": False}, HUMAN)

    answers = {}
    for kind, folder in copies.items():
        same_batch_tags(monkeypatch)
        answers[kind] = run(folder, write, short_lived=kind == "one-shot")
        if kind == "one-shot":
            assert counted_whole == []  # from the columns, not every record
    assert answers["one-shot"] == answers["server"]
    assert _files(copies["one-shot"] / "b") == _files(copies["server"] / "b")


def test_a_damaged_line_a_save_does_not_read_is_reported_at_boot_as_ever(
    tmp_path: Path, validations: list[bytes]
) -> None:
    """A line damaged by hand changes the log's CRC-32: the records snapshot is not for it, so
    the boot replays every line and reports the damaged one at load, as it always did; the save
    answers and the records are not written for a damaged log."""
    seed(tmp_path)
    log_path = tmp_path / "b" / MEMORIES_FILE
    lines = log_path.read_bytes().split(b"\n")
    lines[20] = lines[20][:40]  # a line cut in the middle of the log
    log_path.write_bytes(b"\n".join(lines))
    records_before = (tmp_path / "b" / RECORDS_FILE).read_bytes()
    validations.clear()

    with structlog.testing.capture_logs() as logs:
        answers = run(tmp_path, one_shot, short_lived=True)

    skipped = [e for e in logs if e["event"] == "bank_damage_skipped"]
    assert [e["detail"].startswith(f"{MEMORIES_FILE}:21: ") for e in skipped] == [True], skipped
    assert len(validations) >= N  # replayed line by line, as ever
    assert answers[0]["created"] is False and answers[1]["created"] is True

    async def doctor(service: MemoryService) -> Any:
        return await call(service, "memory::doctor", {}, HUMAN)

    report = json.dumps(run(tmp_path, doctor, short_lived=True))
    assert f"{MEMORIES_FILE}:21" in report or "line 21" in report, report
    assert (tmp_path / "b" / RECORDS_FILE).read_bytes() == records_before


def _forge_records(folder: Path) -> None:
    """The records snapshot made to vouch for a log whose line 21 no longer reads (what only a
    CRC-32 collision, or a records file written for other code, could leave)."""
    log_path = folder / MEMORIES_FILE
    data = log_path.read_bytes()
    lines = data.split(b"\n")
    lines[20] = lines[20].replace(b'"revision":', b'"revision":"x","r":', 1)
    forged = b"\n".join(lines)
    assert len(forged) != len(data)
    path = folder / RECORDS_FILE
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    shift = len(forged) - len(data)
    where = data.index(lines[20][:30])
    starts, ends = arrays["starts"], arrays["ends"]
    ends = np.where(starts == where, ends + shift, np.where(starts > where, ends + shift, ends))
    starts = np.where(starts > where, starts + shift, starts)
    meta["log_size"], meta["log_crc"] = len(forged), zlib.crc32(forged)
    arrays |= {"starts": starts, "ends": ends}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path.with_suffix(".tmp.npz"), **arrays)
    path.with_suffix(".tmp.npz").replace(path)
    log_path.write_bytes(forged)
    # The counts file's stamp is the log's: stamped again for the forged bytes.
    counts = json.loads((folder / COUNTS_FILE).read_text())
    counts["log"] = list(stat_stamp(log_path) or ())
    (folder / COUNTS_FILE).write_text(json.dumps(counts))


def test_a_line_the_records_vouch_for_that_does_not_read_fails_loudly_then_replays(
    tmp_path: Path,
) -> None:
    """Laziness moves when such a line is found: from the boot (which replayed the whole log
    then) to the first read of its record. That read fails with `storage` and refuses writes,
    the records snapshot is dropped, and the next boot replays and reports the line."""
    ids = seed(tmp_path)
    _forge_records(tmp_path / "b")
    victim = ids[20]

    async def read(service: MemoryService) -> Callable[[], Any]:
        with pytest.raises(StorageError, match="no longer reads"):
            await call(service, "memory::get", {"bank": "b", "id": victim}, HUMAN)
        with pytest.raises(StorageError):
            await call(service, "memory::save", {"bank": "b", "text": "a new one"}, HUMAN)
        return lambda: None

    run(tmp_path, read, short_lived=True)
    assert not (tmp_path / "b" / RECORDS_FILE).exists()
    with structlog.testing.capture_logs() as logs:
        run(tmp_path, lambda service: call(service, "memory::list", {"bank": "b"}, HUMAN),
            short_lived=True)  # fmt: skip
    damage = [e.get("detail", "") for e in logs if e["event"] == "bank_damage_skipped"]
    assert len(damage) == 1 and damage[0].startswith(f"{MEMORIES_FILE}:21: "), logs


def test_such_a_line_first_read_at_close_leaves_no_records_and_the_close_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that never reads the line, whose close writes the records file again (the log
    outgrew it): the close reads every line, finds that one, leaves no records file for the
    log, and ends as any close does."""
    seed(tmp_path)
    _forge_records(tmp_path / "b")
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 0.0)  # any line past the records: written again
    payload = {"bank": "b", "text": "Rui likes figs", "subject": "Rui"}

    with structlog.testing.capture_logs() as logs:
        saved = run(tmp_path, lambda service: call(service, "memory::save", payload, HUMAN),
                    short_lived=True)  # fmt: skip

    assert saved["created"] is True
    assert any(e["event"] == "bank_records_unreadable" for e in logs)
    assert not (tmp_path / "b" / RECORDS_FILE).exists()


def test_the_next_one_shot_replays_the_lines_past_the_records_over_lines_it_keeps_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validations: list[bytes]
) -> None:
    """A second one-shot boots from records for a prefix of the log (the first one's writes are
    past it, an id written twice among them): the lines past it replayed over the unread ones,
    it answers and leaves what two server sessions leave."""
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    async def first(service: MemoryService) -> list[Any]:
        done = await one_shot(service)
        target = {"bank": "b", "id": ids[12]}
        done.append(await call(service, "memory::update", target | {"text": "note 12b"}, HUMAN))
        return done

    async def second(service: MemoryService) -> list[Any]:
        found = [await call(service, "memory::get", {"bank": "b", "id": ids[12]}, HUMAN)]
        return [*found, *await one_shot(service)]

    answers = {}
    for kind, folder in copies.items():
        same_batch_tags(monkeypatch)
        answers[kind] = [run(folder, work, short_lived=kind == "one-shot") for work in (first,)]
        validations.clear()
        answers[kind].append(run(folder, second, short_lived=kind == "one-shot"))
        if kind == "one-shot":
            assert len(validations) <= 6, len(validations)  # the 3 lines past the records, 2 read

    assert answers["one-shot"] == answers["server"]
    assert answers["one-shot"][1][0]["memory"]["text"] == "note 12b"
    logs = {kind: (folder / "b" / MEMORIES_FILE).read_bytes() for kind, folder in copies.items()}
    assert logs["one-shot"] == logs["server"]
    assert _files(copies["one-shot"] / "b") == _files(copies["server"] / "b")


def test_a_one_shot_save_into_a_full_bank_validates_only_the_memory_it_evicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, validations: list[bytes]
) -> None:
    """At the cap the first to go is found from the records file's eviction columns (whether a
    cap may take each memory, when it was last stated) and the access counts: only that
    memory's line is read, and it is the one a process that read every line evicts."""
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)
    full = Settings(max_memories=N - 1)  # N saved, one deleted: full

    async def recall_then_save(service: MemoryService) -> list[Any]:
        # Counted accesses first (an oldest memory recalled is not the first to go).
        recalled = await call(service, "memory::recall", {"bank": "b", "query": "note 0"}, HUMAN)
        return [recalled, await call(service, "memory::save", {"bank": "b", "text": "new"}, HUMAN)]

    async def save(service: MemoryService) -> Any:
        return await call(service, "memory::save", {"bank": "b", "text": "another"}, HUMAN)

    answers: dict[str, list[Any]] = {}
    for kind, folder in copies.items():
        same_batch_tags(monkeypatch)
        one_shot = kind == "one-shot"
        validations.clear()
        answers[kind] = [run(folder, save, short_lived=one_shot, settings=full)]
        if one_shot:
            # The victim's line, and the log's last one (a load checks it for a torn write).
            assert len(validations) <= 2, len(validations)
        answers[kind].append(run(folder, recall_then_save, short_lived=one_shot, settings=full))
        validations.clear()
        answers[kind].append(run(folder, save, short_lived=one_shot, settings=full))
        if one_shot:
            # The 4 lines past the records (two saves, two evictions), the last line's check
            # and the victim's line.
            assert len(validations) <= 6, len(validations)

    assert answers["one-shot"] == answers["server"]
    first, (_, second), third = answers["one-shot"]
    assert first["evicted"] == [ids[0]]  # the oldest stated, never recalled, not pinned
    # The second session's "new" (never recalled: the recall counted the notes' accesses).
    assert third["evicted"] == [second["memory"]["id"]] and ids[3] not in second["evicted"]
    logs = {kind: (folder / "b" / MEMORIES_FILE).read_bytes() for kind, folder in copies.items()}
    assert logs["one-shot"] == logs["server"]
    assert _files(copies["one-shot"] / "b") == _files(copies["server"] / "b")


def test_a_line_the_tail_replaces_that_does_not_read_sends_the_boot_to_the_replay(
    tmp_path: Path,
) -> None:
    """Such a line whose memory a line past the records revises is read at boot, by the tail's
    replay over the lines kept unread: the boot replays the log then, as the boot that
    validated every line did (the line reported, the bank served and writable), instead of
    failing to load the bank (review S8)."""
    ids = seed(tmp_path)
    log_path = tmp_path / "b" / MEMORIES_FILE
    original = log_path.read_bytes().split(b"\n")[20]
    _forge_records(tmp_path / "b")
    record = Memory.model_validate_json(original)
    assert record.id == ids[20]
    revised = record.model_copy(update={"revision": record.revision + 1, "text": "note 20b"})
    with log_path.open("ab") as fh:
        fh.write(log_module.encode([revised]))  # past the records: a tail naming that memory

    async def work(service: MemoryService) -> list[Any]:
        got = await call(service, "memory::get", {"bank": "b", "id": ids[20]}, HUMAN)
        saved = await call(service, "memory::save", {"bank": "b", "text": "a new one"}, HUMAN)
        return [got, saved]

    with structlog.testing.capture_logs() as logs:
        got, saved = run(tmp_path, work, short_lived=True)

    assert got["memory"]["text"] == "note 20b" and saved["created"] is True
    damage = [e.get("detail", "") for e in logs if e["event"] == "bank_damage_skipped"]
    assert len(damage) == 1 and damage[0].startswith(f"{MEMORIES_FILE}:21: "), logs


def test_the_reload_such_a_refusal_names_recovers_the_bank_in_the_same_session(
    tmp_path: Path,
) -> None:
    """A session that serves several calls (`call --batch`, MCP over stdio) is told to reload:
    the reload compares what the bank showed with the log's replay, which read every record
    of the old bank, met the line again and failed (the bank reloaded all the same, its
    announcements skipped). It answers, and the bank takes writes again (review S8)."""
    ids = seed(tmp_path)
    _forge_records(tmp_path / "b")

    async def work(service: MemoryService) -> list[Any]:
        with pytest.raises(StorageError, match="no longer reads"):
            await call(service, "memory::get", {"bank": "b", "id": ids[20]}, HUMAN)
        reloaded = await call(service, "memory::reload", {}, HUMAN)
        saved = await call(service, "memory::save", {"bank": "b", "text": "a new one"}, HUMAN)
        listed = await call(service, "memory::list", {"bank": "b", "limit": 100}, HUMAN)
        return [reloaded, saved, len(listed["memories"])]

    reloaded, saved, listed = run(tmp_path, work, short_lived=True)
    assert reloaded["ok"] is True and saved["created"] is True
    assert listed == N - 1  # N saved, one deleted, the unreadable one skipped, one new


def test_doctor_reports_such_a_bank_instead_of_failing(tmp_path: Path) -> None:
    """`memory::doctor` reads each bank's damage, which builds what a one-shot's bank left for
    later from every record: the line that no longer reads raised out of doctor, the check
    meant to say what is wrong. It answers, naming the bank and its refusal (review S8)."""
    ids = seed(tmp_path)
    _forge_records(tmp_path / "b")

    async def work(service: MemoryService) -> Any:
        with pytest.raises(StorageError, match="no longer reads"):
            await call(service, "memory::get", {"bank": "b", "id": ids[20]}, HUMAN)
        return await call(service, "memory::doctor", {}, HUMAN)

    report = run(tmp_path, work, short_lived=True)
    checks = {check["name"]: check for check in report["checks"]}
    assert report["ok"] is False and checks["banks-loaded"]["ok"] is False
    assert "b: the line of memory" in checks["banks-loaded"]["detail"]
    assert checks["files-intact"]["ok"] is False
    assert f"b: {MEMORIES_FILE}: the line of memory" in checks["files-intact"]["detail"]


@pytest.mark.parametrize("module", ["subjects", "categories", "capacity"])
def test_columns_made_by_other_code_are_not_believed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """The records file's columns are what `subject_key` (one person whatever the spelling),
    the category codes and `evictable` made of each record when it was written: a version whose
    code for them differs (its line format and model the same) counted people, expiry and the
    first to go by the old rules. The replay digest names that code too (review S8)."""
    from memory_worker import core

    source = getattr(core, module)
    changed = tmp_path / f"{module}.py"
    changed.write_bytes(Path(source.__file__).read_bytes() + b"\n# another version\n")
    before = snapshot.replay_digest()
    snapshot.replay_digest.cache_clear()
    monkeypatch.setattr(source, "__file__", str(changed))
    try:
        after = snapshot.replay_digest()
    finally:
        snapshot.replay_digest.cache_clear()
    assert after and after != before


def test_an_erasure_in_a_session_leaves_no_column_naming_the_person_in_ram(
    tmp_path: Path,
) -> None:
    """The records file's `subject` column names each person of the bank: read at boot, it
    stayed in a session's RAM (MCP over stdio: hours) after `memory::forget-subject` took them
    out of every file and every record, once nothing read it any more (review S8)."""
    seed(tmp_path)

    async def work(service: MemoryService) -> Any:
        payload = {"bank": "b", "subject": "Ana", "confirm": "destructive"}
        erased = await call(service, "memory::forget-subject", payload, HUMAN)
        bank = service.store.get("b")
        return erased, bank._lazy_subjects, dict(bank._lazy_columns)

    erased, subjects, columns = run(tmp_path, work, short_lived=True)
    assert len(erased["erased"]) == 2
    assert subjects == () and columns == {}
