"""Files planted in the data dir (issue 11): a symbolic link where the worker keeps a file or a
folder is never followed for a write, a read or a delete (nothing outside the data dir changes or
leaks), doctor lists it, and the lock cannot be fooled by deleting `.lock`."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, StorageError, WorkerError
from memory_worker.storage import files
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock

OUTSIDE_TEXT = "the victim's own file, outside the data dir\n"


@pytest.fixture(name="outside")
def _outside(tmp_path: Path) -> Path:
    """A folder outside the data dir with a file in it: what a planted link points at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text(OUTSIDE_TEXT)
    (folder / "style.md").write_text("# the victim's notes, not a rule\n")
    return folder


def _untouched(outside: Path) -> None:
    assert (outside / "victim.txt").read_text() == OUTSIDE_TEXT
    assert (outside / "style.md").read_text() == "# the victim's notes, not a rule\n"
    assert sorted(p.name for p in outside.iterdir()) == ["style.md", "victim.txt"]


async def _seeded(data: Path) -> None:
    """A data dir with bank `main` (one memory, rule `style`), closed again."""
    service = _open(data)
    try:
        await catalog.call(service, "memory::save", {"text": "The user drinks green tea"})
        await catalog.call(service, "memory::rule::set", {"name": "style", "content": "Be brief."})
    finally:
        await service.store.close()


def _open(data: Path) -> MemoryService:
    return MemoryService(Store.open(data, holder=HOLDER), Settings(), clock=FixedClock())


async def _call(service: MemoryService, function_id: str, payload: dict[str, object]) -> object:
    try:
        return await catalog.call(service, function_id, payload)
    except WorkerError as err:
        return err


async def _planted_links(service: MemoryService) -> str:
    doctor = await catalog.call(service, "memory::doctor", {})
    check = next(c for c in doctor["checks"] if c["name"] == "planted-links")
    assert check["ok"] is False
    return str(check["detail"])


async def test_a_symlinked_lock_file_is_never_written_through(
    data_dir: Path, outside: Path
) -> None:
    data_dir.mkdir()
    (data_dir / ".lock").symlink_to(outside / "victim.txt")
    with pytest.raises(StorageError, match="symbolic link"):
        Store.open(data_dir, holder=HOLDER)
    _untouched(outside)


async def test_a_predictable_rule_temp_file_planted_as_a_link_is_not_written_through(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    rules = data_dir / "main" / "rules"
    (rules / ".style.md.tmp").symlink_to(outside / "victim.txt")  # the old temp name
    service = _open(data_dir)
    try:
        result = await catalog.call(
            service, "memory::rule::set", {"name": "style", "content": "Answer in English."}
        )
        assert result["exists"] is True
        assert (rules / "style.md").read_text() == "Answer in English."
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_rule_file_that_is_a_link_is_neither_read_nor_written_through(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    rule = data_dir / "main" / "rules" / "style.md"
    rule.unlink()
    rule.symlink_to(outside / "style.md")
    service = _open(data_dir)
    try:
        listed = await catalog.call(service, "memory::rule::list", {})
        assert listed["rules"] == []  # the victim's notes were not served as a rule
        assert "rules/style.md" in await _planted_links(service)
        await catalog.call(service, "memory::rule::set", {"name": "style", "content": "Mine."})
        assert not rule.is_symlink() and rule.read_text() == "Mine."  # the link was replaced
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_symlinked_rules_folder_reads_writes_and_deletes_nothing_outside(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    rules = data_dir / "main" / "rules"
    (rules / "style.md").unlink()
    rules.rmdir()
    rules.symlink_to(outside, target_is_directory=True)
    service = _open(data_dir)
    try:
        listed = await catalog.call(service, "memory::rule::list", {})
        assert listed["rules"] == []
        removed = await _call(service, "memory::rule::set", {"name": "style", "content": ""})
        written = await _call(service, "memory::rule::set", {"name": "victim", "content": "x"})
        assert isinstance(removed, StorageError) or removed == {"ok": True, "exists": False}
        assert isinstance(written, StorageError) and "symbolic link" in written.message
        assert "main/rules" in await _planted_links(service)
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_symlinked_memory_log_gets_no_record_appended(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    log = data_dir / "main" / "memories.jsonl"
    log.unlink()
    log.symlink_to(outside / "victim.txt")
    service = _open(data_dir)
    try:
        saved = await _call(service, "memory::save", {"text": "The user moved to Lisbon"})
        assert isinstance(saved, StorageError) and "symbolic link" in saved.message
        listed = await catalog.call(service, "memory::list", {})
        assert listed["total"] == 0
        assert "main/memories.jsonl" in await _planted_links(service)
        doctor = await catalog.call(service, "memory::doctor", {})
        intact = next(c for c in doctor["checks"] if c["name"] == "files-intact")
        assert "memories.jsonl" in intact["detail"] and "symbolic link" in intact["detail"]
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_symlinked_vector_sidecar_is_not_appended_to(data_dir: Path, outside: Path) -> None:
    await _seeded(data_dir)
    (data_dir / "main" / "vectors.jsonl").symlink_to(outside / "victim.txt")
    store = Store.open(data_dir, holder=HOLDER)
    try:
        bank = store.get("main")
        memory = next(iter(bank.memories.values()))
        with pytest.raises(StorageError, match="symbolic link"):
            await bank.store_vectors("test-model", [(memory, [1.0, 0.0, 0.0])])
    finally:
        await store.close()
    _untouched(outside)


async def test_a_symlinked_trash_never_receives_a_deleted_bank(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    (data_dir / ".trash").symlink_to(outside, target_is_directory=True)
    service = _open(data_dir)
    try:
        deleted = await _call(service, "memory::bank::delete", {"name": "main"})
        assert isinstance(deleted, StorageError) and "symbolic link" in deleted.message
        assert "main" in service.store.names()  # nothing moved: the bank is still served
        saved = await catalog.call(service, "memory::save", {"text": "Still writable here"})
        assert saved["created"] is True
        assert ".trash" in await _planted_links(service)
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_link_named_like_a_bank_is_not_loaded_nor_written_into(
    data_dir: Path, outside: Path
) -> None:
    await _seeded(data_dir)
    (data_dir / "work").symlink_to(outside, target_is_directory=True)
    service = _open(data_dir)
    try:
        assert service.store.names() == ["main"]
        saved = await _call(service, "memory::save", {"bank": "work", "text": "Into the link"})
        created = await _call(service, "memory::bank::create", {"name": "work"})
        assert isinstance(saved, StorageError) and "symbolic link" in saved.message
        assert isinstance(created, StorageError)
        assert "work" in await _planted_links(service)
    finally:
        await service.store.close()
    _untouched(outside)


async def test_doctor_says_no_link_is_planted_in_a_clean_data_dir(data_dir: Path) -> None:
    await _seeded(data_dir)
    service = _open(data_dir)
    try:
        doctor = await catalog.call(service, "memory::doctor", {})
    finally:
        await service.store.close()
    check = next(c for c in doctor["checks"] if c["name"] == "planted-links")
    assert check["ok"] is True and check["required"] is False


# --- the lock ------------------------------------------------------------------------------


async def test_a_deleted_lock_file_does_not_let_a_second_store_open_the_dir(
    data_dir: Path,
) -> None:
    first = Store.open(data_dir, holder={"pid": 1, "kind": "serve", "command": "first"})
    try:
        (data_dir / ".lock").unlink()
        with pytest.raises(Conflict):
            Store.open(data_dir, holder=HOLDER)
    finally:
        await first.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_worker_whose_lock_file_vanished_refuses_writes(data_dir: Path, how: str) -> None:
    """With `.lock` gone, a second process of an older version (which locks only that file) could
    open the dir: the running one must stop writing rather than race it."""
    service = _open(data_dir)
    try:
        await catalog.call(service, "memory::save", {"text": "Written while the lock held"})
        lock = data_dir / ".lock"
        lock.unlink()
        if how == "replaced":
            lock.write_text("{}")
        for function_id, payload in (
            ("memory::save", {"text": "Written after the lock vanished"}),
            ("memory::rule::set", {"name": "style", "content": "Be brief."}),
            ("memory::bank::create", {"name": "work"}),
            ("memory::bank::delete", {"name": "main"}),
        ):
            refused = await _call(service, function_id, payload)
            assert isinstance(refused, StorageError), function_id
            assert "lock is gone" in refused.message
        listed = await catalog.call(service, "memory::list", {})
        assert [m["text"] for m in listed["memories"]] == ["Written while the lock held"]
        doctor = await catalog.call(service, "memory::doctor", {})
        assert doctor["ok"] is False
    finally:
        await service.store.close()
    assert sorted(set(os.listdir(data_dir)) - {".lock"}) == ["main"]  # no bank made or moved


async def test_the_lock_is_on_the_directory_itself(data_dir: Path) -> None:
    """`flock` on the data dir: what a deletion of `.lock` cannot take away."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        await store.close()
    again = files.DataDirLock(data_dir, HOLDER)
    again.acquire()  # released by close(): free again
    again.release()


@pytest.mark.parametrize(
    "name", ["memories.jsonl", "access.jsonl", "vectors.jsonl", ".counts.json"]
)
async def test_a_line_nested_past_the_json_decoders_limit_is_damage_not_a_broken_bank(
    data_dir: Path, name: str
) -> None:
    """`json.loads` raises RecursionError, not ValueError, on a line nested too deep: planted in
    a derived file (access counts, vectors, counts) it made the whole bank unloadable."""
    await _seeded(data_dir)
    deep = b"[" * 100_000 + b"\n"
    with (data_dir / "main" / name).open("ab") as handle:
        handle.write(deep)
    service = _open(data_dir)
    try:
        found = await catalog.call(service, "memory::recall", {"query": "green tea"})
        assert [m["memory"]["text"] for m in found["memories"]] == ["The user drinks green tea"]
        assert service.store.broken == {}
    finally:
        await service.store.close()


# A named pipe planted where a file of the bank belongs: opening it for reading would wait for a
# writer for good (the boot, a call naming the bank, or the close hung). Each is refused instead:
# the log's makes the bank unavailable (as a folder there would), a derived file's is rebuilt.
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "name",
    [
        "memories.jsonl",
        "bank.yaml",
        "vectors.jsonl",
        "lane-vectors.jsonl",
        "access.jsonl",
        ".counts.json",
    ],
)
async def test_a_named_pipe_where_a_bank_file_belongs_never_hangs_the_worker(
    data_dir: Path, name: str
) -> None:
    await _seeded(data_dir)
    path = data_dir / "main" / name
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    service = _open(data_dir)
    try:
        listed = await _call(service, "memory::list", {})
        if name == "memories.jsonl":
            assert isinstance(listed, StorageError) and "not a regular file" in listed.message
        else:
            assert isinstance(listed, dict) and listed["total"] == 1
            doctor = await catalog.call(service, "memory::doctor", {})
            assert doctor["checks"][0]["ok"]
    finally:
        await service.store.close()


@pytest.mark.parametrize("kind", ["folder", "link"])
async def test_a_lane_vector_sidecar_that_is_not_a_file_does_not_take_the_bank_offline(
    data_dir: Path, outside: Path, kind: str
) -> None:
    # Derived data, like vectors.jsonl: reported and rebuilt, never the bank unavailable.
    await _seeded(data_dir)
    path = data_dir / "main" / "lane-vectors.jsonl"
    if kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(outside / "victim.txt")
    service = _open(data_dir)
    try:
        listed = await catalog.call(service, "memory::list", {})
        assert listed["total"] == 1
        doctor = await catalog.call(service, "memory::doctor", {})
        intact = next(c for c in doctor["checks"] if c["name"] == "files-intact")
        assert "lane-vectors.jsonl" in intact["detail"]
    finally:
        await service.store.close()
    _untouched(outside)


async def test_a_bank_that_failed_to_load_can_still_be_deleted_to_the_trash(
    data_dir: Path,
) -> None:
    # A folder where its log belongs: the bank is unavailable (doctor says so), and deleting it
    # (to `.trash`, recoverable) is the way out short of a repair by hand.
    await _seeded(data_dir)
    log = data_dir / "main" / "memories.jsonl"
    log.unlink()
    log.mkdir()
    service = _open(data_dir)
    try:
        assert isinstance(await _call(service, "memory::list", {}), StorageError)
        deleted = await catalog.call(service, "memory::bank::delete", {"name": "main"})
        trashed = Path(str(deleted["trashed_to"]))
        assert trashed.parent == (data_dir / ".trash").resolve()
        assert (trashed / "memories.jsonl").is_dir() and (trashed / "rules" / "style.md").is_file()
        assert not (data_dir / "main").exists()
        doctor = await catalog.call(service, "memory::doctor", {})
        assert next(c for c in doctor["checks"] if c["name"] == "banks-loaded")["ok"]
        created = await catalog.call(service, "memory::bank::create", {"name": "main"})
        assert created["created"] is True and created["bank"]["memories"] == 0
    finally:
        await service.store.close()


async def test_a_data_dir_the_worker_creates_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """Memories are personal: a data dir the worker makes is 0700, so other accounts on the
    machine cannot read the files inside (created 0644, as an editor expects). A folder the
    person made themselves keeps the mode they gave it."""
    made = tmp_path / "home" / "memory"
    await _seeded(made)
    assert made.stat().st_mode & 0o777 == 0o700
    chosen = tmp_path / "shared"
    chosen.mkdir()
    chosen.chmod(0o750)
    await _seeded(chosen)
    assert chosen.stat().st_mode & 0o777 == 0o750
