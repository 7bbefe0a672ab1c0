"""Storage faults injected at the file layer (`os.fsync`, `os.write`, `os.replace`, `os.rename`):
the call fails with `storage`, what callers see is unchanged, the next write is intact, and a
reopen serves exactly what RAM served. An unusable data dir at start is fatal, never RAM-only."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import StorageError
from memory_worker.storage import files
from memory_worker.storage.store import Store

from ..test_cli import finish, start_cli
from .helpers import HOLDER, NEW, OLD, SEED_IDS, TEA, Injector, answers, is_dir, open_service, seed

EIO, ENOSPC = errno.EIO, errno.ENOSPC

OPS: dict[str, tuple[str, dict[str, Any]]] = {
    "save": ("memory::save", {"text": "The user moved to Porto"}),
    "reinforce": ("memory::save", {"text": TEA.upper()}),
    "update": ("memory::update", {"id": SEED_IDS[TEA], "text": "The user drinks black tea"}),
    "pin": ("memory::pin", {"id": SEED_IDS[TEA], "pinned": True}),
    "delete": ("memory::delete", {"id": SEED_IDS[TEA]}),
    "supersede-reinforce": (
        "memory::supersede",
        {"id": SEED_IDS[OLD], "superseded_by": SEED_IDS[NEW], "reinforce": True},
    ),
    "import": ("import", {"bank": "main"}),
    "rule-set": ("memory::rule::set", {"name": "style", "content": "Answer at length."}),
    "rule-new": ("memory::rule::set", {"bank": "blog", "name": "tone", "content": "Be warm."}),
    "bank-delete": ("memory::bank::delete", {"name": "blog"}),
}
IMPORT_ROWS: list[dict[str, Any]] = [
    {"text": "Imported fact one", "tags": ["imp"]},
    {"text": "Imported fact two", "invalid_at": 5, "created_at": 1},
    {"text": "Imported fact three", "pinned": True},
]


@pytest.fixture(scope="module", name="seeded")
def _seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    data = tmp_path_factory.mktemp("seeded") / "data"
    asyncio.run(seed(data))
    return data


async def _call(service: MemoryService, op: str) -> Any:
    function_id, payload = OPS[op]
    if function_id == "import":
        return await service.import_records(payload["bank"], IMPORT_ROWS)
    return await catalog.call(service, function_id, payload)


async def _next_writes_land_and_replay(service: MemoryService, data: Path) -> None:
    """A save into every bank callers see and a rule write succeed, and a reopen serves exactly
    what RAM served, with nothing reported damaged."""
    for info in (await catalog.call(service, "memory::bank::list", {}))["banks"]:
        bank = info["name"]
        await catalog.call(service, "memory::save", {"bank": bank, "text": f"After, in {bank}"})
    await catalog.call(service, "memory::rule::set", {"name": "after", "content": "Still here."})
    live = await answers(service)
    await service.store.close()
    reopened = open_service(data)
    try:
        assert await answers(reopened) == live
        damage = [
            d.describe() for n in reopened.store.names() for d in reopened.store.get(n).damage
        ]
        assert damage == []
    finally:
        await reopened.store.close()


CASES = [
    ("save", "fsync", EIO),
    ("save", "fsync", ENOSPC),
    ("save", "write", EIO),
    ("save", "write-partial", ENOSPC),
    ("reinforce", "fsync", EIO),
    ("update", "write-partial", ENOSPC),
    ("pin", "fsync", ENOSPC),
    ("delete", "write", ENOSPC),
    ("supersede-reinforce", "fsync", EIO),
    ("supersede-reinforce", "write-partial", ENOSPC),
    ("import", "fsync", ENOSPC),
    ("import", "write-partial", ENOSPC),
    ("rule-set", "replace", EIO),
    ("rule-set", "replace", ENOSPC),
    ("rule-set", "fsync", EIO),  # the temp file's own fsync
    ("rule-set", "write-partial", ENOSPC),
    ("rule-new", "replace", ENOSPC),
    ("bank-delete", "rename", EIO),
    ("bank-delete", "rename", ENOSPC),
]


@pytest.mark.parametrize(
    ("op", "point", "code"), CASES, ids=[f"{o}-{p}-{errno.errorcode[c]}" for o, p, c in CASES]
)
async def test_a_failed_write_changes_nothing_and_the_next_write_is_intact(
    seeded: Path, tmp_path: Path, op: str, point: str, code: int
) -> None:
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    closed = False
    try:
        before = await answers(service)
        with Injector(point, 1, code) as fault, pytest.raises(StorageError) as failed:
            await _call(service, op)
        assert fault.fired
        assert str(failed.value).startswith("storage: ")
        assert await answers(service) == before
        closed = True
        await _next_writes_land_and_replay(service, data)
    finally:
        if not closed:
            await service.store.close()


# --- failures after the point of no return -----------------------------------------------------


async def test_a_bank_create_that_fails_leaves_no_half_made_bank(
    seeded: Path, tmp_path: Path
) -> None:
    """The disk refuses `bank.yaml` (ENOSPC): the create fails, but its folder stays behind, so the
    next boot lists a bank nobody created, and a retry finds the folder, loads it as a hand-made
    bank, answers `created: false` and drops the description."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        before = await answers(service)
        payload = {"name": "work", "description": "Work projects"}
        with Injector("replace", 1, ENOSPC), pytest.raises(StorageError):
            await catalog.call(service, "memory::bank::create", payload)
        assert await answers(service) == before
        await service.store.close()
        service = open_service(data)
        assert await answers(service) == before, "a failed create left a bank behind"
        retried = await catalog.call(service, "memory::bank::create", payload)
        assert retried["created"] is True
        assert retried["bank"]["description"] == "Work projects"
    finally:
        await service.store.close()


class _Died(BaseException):
    """The process dies at this instant: no handler, no cleanup after it runs (a SIGKILL)."""


async def test_a_bank_create_cut_short_by_a_crash_leaves_no_bank_without_its_description(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILL between the bank folder's mkdir and its `bank.yaml` (the campaign hits this
    window: `kill-partial-bank-create`): the next boot must not list a bank without the
    description it was created with. The crash is simulated where the kill lands."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:

        def die(path: Path, data: bytes, **_: object) -> None:
            raise _Died

        monkeypatch.setattr(files, "atomic_write", die)
        with pytest.raises(_Died):
            payload = {"name": "work", "description": "Work projects"}
            await catalog.call(service, "memory::bank::create", payload)
        monkeypatch.undo()
    finally:
        await service.store.close()  # what the kernel does for a dead process: the lock goes
    reopened = open_service(data)
    try:
        banks = await catalog.call(reopened, "memory::bank::list", {})
        described = {b["name"]: b["description"] for b in banks["banks"]}
        assert described.get("work", "Work projects") == "Work projects", described
    finally:
        await reopened.store.close()


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::save", {"bank": "work", "text": "The user ships on Fridays"}),
        ("memory::rule::set", {"bank": "work", "name": "tone", "content": "Be warm."}),
    ],
    ids=["save", "rule-set"],
)
async def test_a_failed_write_into_a_new_bank_does_not_create_the_bank(
    seeded: Path, tmp_path: Path, function_id: str, payload: dict[str, Any]
) -> None:
    """The bank is created first, then the write fails: the call reports `storage`, yet the bank
    list (in RAM and after a reopen) has a new, empty bank."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        before = await answers(service)

        def in_work(path: str) -> bool:
            return "/work/" in path and not path.endswith(("bank.yaml", ".bank.yaml.tmp"))

        point = "fsync" if function_id == "memory::save" else "replace"
        with Injector(point, 1, EIO, where=in_work) as fault, pytest.raises(StorageError):
            await catalog.call(service, function_id, payload)
        assert fault.fired
        assert await answers(service) == before
    finally:
        await service.store.close()


async def test_a_rule_written_into_a_new_bank_survives_the_failed_save_that_created_it(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save creates bank `work` and fails (the disk); meanwhile a rule write into `work` has
    landed on disk and not yet answered. The failed save removed the bank as empty (its rule
    not in RAM yet) and its folder with the rule: the rule write then answered success for a
    rule no longer anywhere."""
    import asyncio
    import threading

    from memory_worker.storage import bank as bank_module
    from memory_worker.storage import rules as rules_module

    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    loop = asyncio.get_running_loop()
    committing, written, release = asyncio.Event(), asyncio.Event(), threading.Event()
    real_write = rules_module._write_rule

    def landed_then_slow(*args: Any) -> None:
        real_write(*args)  # on disk; the loop has not heard back yet
        loop.call_soon_threadsafe(written.set)
        release.wait(30)

    async def failing_commit(self: Any, records: Any) -> None:
        committing.set()
        await written.wait()
        raise StorageError("cannot append to memories.jsonl: No space left on device")

    monkeypatch.setattr(rules_module, "_write_rule", landed_then_slow)
    monkeypatch.setattr(bank_module.Bank, "commit", failing_commit)
    try:
        save = asyncio.ensure_future(
            catalog.call(service, "memory::save", {"bank": "work", "text": "Ships on Fridays"})
        )
        await committing.wait()
        rule = asyncio.ensure_future(
            catalog.call(
                service, "memory::rule::set", {"bank": "work", "name": "tone", "content": "Warm."}
            )
        )
        with pytest.raises(StorageError):
            await save
        release.set()
        answered = await rule
        assert answered["ok"] is True and answered["exists"] is True
        monkeypatch.undo()
        listed = await catalog.call(service, "memory::rule::list", {"bank": "work"})
        assert [r["content"] for r in listed["rules"]] == ["Warm."]
    finally:
        release.set()
        await service.store.close()


async def test_a_bank_delete_whose_directory_sync_fails_is_either_done_or_undone(
    seeded: Path, tmp_path: Path
) -> None:
    """The rename into `.trash` succeeds and the directory fsync after it fails: the call reports
    `storage` and RAM still lists the bank, but its folder is in the trash, so every write to it
    fails ("cannot open …/blog/memories.jsonl") and the next boot no longer has it."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    closed = False
    try:
        with Injector("fsync", 1, EIO, where=is_dir), pytest.raises(StorageError):
            await catalog.call(service, "memory::bank::delete", {"name": "blog"})
        closed = True
        await _next_writes_land_and_replay(service, data)
    finally:
        if not closed:
            await service.store.close()


@pytest.mark.parametrize("content", ["Answer at length.", ""], ids=["overwrite", "remove"])
async def test_a_rule_write_whose_directory_sync_fails_leaves_ram_and_disk_agreeing(
    seeded: Path, tmp_path: Path, content: str
) -> None:
    """The rule file is replaced (or removed) and the directory fsync after it fails: the call
    reports `storage` and RAM keeps the old rule, while the disk, and so the next boot, has the
    new one."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        payload = {"name": "style", "content": content}
        with Injector("fsync", 1, EIO, where=is_dir), pytest.raises(StorageError):
            await catalog.call(service, "memory::rule::set", payload)
        seen = await _rules(service)
        await service.store.close()
        service = open_service(data)
        assert await _rules(service) == seen, "RAM serves one rule, the next boot another"
    finally:
        await service.store.close()


async def test_a_bank_configure_whose_directory_sync_fails_leaves_ram_and_disk_agreeing(
    seeded: Path, tmp_path: Path
) -> None:
    """`bank.yaml` is replaced and the directory fsync after it fails: the call reports
    `storage`, but RAM kept the old settings while the disk, and so the next boot, has the new
    ones (an agent still writing to a bank a person had just set to `read`)."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        payload = {"name": "blog", "description": "Drafts only", "conscious_access": "read"}
        with Injector("fsync", 1, EIO, where=is_dir), pytest.raises(StorageError):
            await catalog.call(service, "memory::bank::configure", payload)
        seen = await _bank(service)
        await service.store.close()
        service = open_service(data)
        assert await _bank(service) == seen, "RAM serves one setting, the next boot another"
    finally:
        await service.store.close()


async def test_a_rule_that_makes_its_rules_folder_syncs_the_bank_folder_before_it_answers(
    seeded: Path, tmp_path: Path
) -> None:
    """A bank folder without `rules/` (made by hand, or by an older worker): the first rule write
    makes the folder, and only `rules/` itself was fsynced, so the new folder's entry in the bank
    folder could go with a power loss, the acknowledged rule with it. A failed sync of the bank
    folder must reach the caller, and nothing is written then."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    shutil.rmtree(data / "blog" / "rules")
    service = open_service(data)
    try:
        payload = {"bank": "blog", "name": "tone", "content": "Be warm."}
        fault = Injector("fsync", 1, EIO, where=_in(data / "blog"))
        with fault, pytest.raises(StorageError):
            await catalog.call(service, "memory::rule::set", payload)
        assert fault.fired, "the bank folder holding the new rules/ was never synced"
        assert not (data / "blog" / "rules").exists()  # a failed call changes nothing
        assert (await catalog.call(service, "memory::rule::list", {"bank": "blog"}))["rules"] == []
        await catalog.call(service, "memory::rule::set", payload)  # the retry lands
        await service.store.close()
        service = open_service(data)
        listed = await catalog.call(service, "memory::rule::list", {"bank": "blog"})
        assert [r["content"] for r in listed["rules"]] == ["Be warm."]
    finally:
        await service.store.close()


async def _bank(service: MemoryService) -> tuple[str, str]:
    bank = (await catalog.call(service, "memory::bank::get", {"name": "blog"}))["bank"]
    return bank["description"], bank["settings"]["conscious_access"]


async def _rules(service: MemoryService) -> list[tuple[str, str]]:
    rules = (await catalog.call(service, "memory::rule::list", {}))["rules"]
    return [(r["name"], r["content"]) for r in rules]


# --- an unusable data dir at start ------------------------------------------------------------


def _unusable(tmp_path: Path, case: str) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    if case == "under-a-regular-file":
        return blocker / "data"
    if case == "a-regular-file":
        return blocker
    link = tmp_path / "dangling"
    link.symlink_to(blocker / "data")
    return link


@pytest.mark.parametrize("case", ["under-a-regular-file", "a-regular-file", "dangling-symlink"])
def test_an_unusable_data_dir_at_start_is_fatal(tmp_path: Path, case: str) -> None:
    with pytest.raises(StorageError, match="not writable"):
        Store.open(_unusable(tmp_path, case), holder=HOLDER)


def test_a_read_only_data_dir_at_start_is_fatal(tmp_path: Path) -> None:
    """(Running as root, chmod does not stop writes: the file system's EROFS is injected.)"""
    data = tmp_path / "data"
    data.mkdir()
    with Injector("open", 1, errno.EROFS), pytest.raises(StorageError, match="Read-only"):
        Store.open(data, holder=HOLDER)
    assert list(data.iterdir()) == []


async def test_a_data_dir_made_at_start_is_synced_into_the_folders_above_it(
    tmp_path: Path,
) -> None:
    """The first start makes the data dir (and the folders above it that are missing): their
    entries were never synced, so a power loss after the first acknowledged save could take the
    whole data dir, though every file inside it was synced. Each new folder's parent is synced
    before the store opens."""
    data = tmp_path / "home" / "share" / "data"
    synced: set[str] = set()

    def seen(path: str) -> bool:
        synced.add(path)
        return False  # only counted, never failed

    with Injector("fsync", 0, EIO, where=seen):
        store = Store.open(data, holder=HOLDER)
    await store.close()
    above = {str(folder.resolve()) for folder in data.parents[:3]}  # share, home, tmp_path
    assert synced >= above, sorted(above - synced)


@pytest.mark.parametrize(
    "command",
    [
        ("trigger", "memory::save", "text=The user likes tea"),
        ("call", "--batch", "-"),
        ("serve", "--standalone", "--port", "0"),
    ],
    ids=["trigger", "call-batch", "serve"],
)
def test_every_command_refuses_to_run_on_an_unusable_data_dir(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    data = _unusable(tmp_path, "under-a-regular-file")
    outcome = finish(start_cli(*command, "--data-dir", str(data), cwd=tmp_path))
    assert outcome.code == 1, (outcome.stdout, outcome.stderr)
    assert outcome.stdout == ""  # no answer, no ready line: nothing ran on RAM alone
    assert '"code": "storage"' in outcome.stderr.splitlines()[-1]
    assert str(data) in outcome.stderr


async def test_a_data_dir_deleted_while_running_refuses_writes_and_doctor_says_so(
    tmp_path: Path,
) -> None:
    """Writes fail with `storage` (never RAM-only), but doctor's probe recreates the folder, its
    scratch roundtrip succeeds there, and it answers `ok: true` while every existing bank is
    unwritable (and the new folder has no lock, so a second process could open it)."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        await catalog.call(service, "memory::save", {"text": "The user likes tea"})
        shutil.rmtree(data)
        with pytest.raises(StorageError):
            await catalog.call(service, "memory::save", {"text": "The user likes coffee"})
        doctor = await catalog.call(service, "memory::doctor", {})
        assert doctor["ok"] is False, [(c["name"], c["ok"]) for c in doctor["checks"]]
    finally:
        await service.store.close()


async def test_a_bank_that_refuses_writes_fails_doctor(tmp_path: Path) -> None:
    """A failed commit whose line could not be cut back leaves the bank refusing every write
    until `memory::reload`: doctor names it and fails (it answered `ok: true`, "1 bank(s)
    loaded", while every save into the bank failed)."""
    data = tmp_path / "data"
    service = open_service(data)
    log = lambda path: path.endswith("main/memories.jsonl")  # noqa: E731
    try:
        await catalog.call(service, "memory::save", {"text": "The user likes tea"})
        sync, cut = Injector("fsync", 1, EIO, where=log), Injector("ftruncate", 1, EIO)
        with sync, cut, pytest.raises(StorageError):
            await catalog.call(service, "memory::save", {"text": "The user likes coffee"})
        with pytest.raises(StorageError, match="refuses writes"):
            await catalog.call(service, "memory::save", {"text": "The user likes cocoa"})
        doctor = await catalog.call(service, "memory::doctor", {})
        banks = _check(doctor, "banks-loaded")
        assert doctor["ok"] is False and banks["ok"] is False
        assert "refuse writes until memory::reload: main:" in banks["detail"]
    finally:
        await service.store.close()


# --- durability warnings: a change that landed while its directory sync failed ----------------


def _in(folder: Path) -> Any:
    """An `Injector` filter: only the directory `folder` itself counts."""
    target = str(folder.resolve())
    return lambda path: path == target


def _check(doctor: dict[str, Any], name: str) -> dict[str, Any]:
    (check,) = [c for c in doctor["checks"] if c["name"] == name]
    return check


DIR_SYNC_CASES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    # case: (function, payload, the directory whose sync fails, the change doctor names)
    "bank-create": (
        "memory::bank::create",
        {"name": "work", "description": "Work projects"},
        ".",
        "bank folder created",
    ),
    "rule-write": (
        "memory::rule::set",
        {"name": "style", "content": "Answer at length."},
        "main/rules",
        "rule style written",
    ),
    "rule-remove": ("memory::rule::set", {"name": "style", "content": ""}, "main/rules", "removed"),
    "bank-delete": ("memory::bank::delete", {"name": "blog"}, ".trash", "bank deleted"),
}


@pytest.mark.parametrize("case", list(DIR_SYNC_CASES))
async def test_doctor_warns_about_a_change_whose_directory_sync_failed(
    seeded: Path, tmp_path: Path, case: str
) -> None:
    """The change lands (RAM follows the disk) but its directory fsync fails: doctor keeps `ok`
    (the worker works) and says so in the advisory `durability-warnings` check, with what
    happened and what to do. A restart starts from what the disk holds, without the warning."""
    function_id, payload, folder, change = DIR_SYNC_CASES[case]
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    (data / ".trash").mkdir(exist_ok=True)
    service = open_service(data)
    try:
        quiet = _check(await catalog.call(service, "memory::doctor", {}), "durability-warnings")
        assert quiet["ok"] and not quiet["required"]
        with Injector("fsync", 1, EIO, where=_in(data / folder)) as fault:
            try:
                await catalog.call(service, function_id, payload)
            except StorageError:
                assert case != "bank-create"  # a created bank is kept and the call succeeds
        assert fault.fired
        doctor = await catalog.call(service, "memory::doctor", {})
        warning = _check(doctor, "durability-warnings")
        assert doctor["ok"] is True, "an advisory check must not fail doctor"
        assert warning["ok"] is False and warning["required"] is False
        detail = warning["detail"]
        assert detail.startswith("1 change(s) landed") and change in detail
        assert "Input/output error" in detail and "power loss" in detail and "sync" in detail
        bank = payload.get("name") if case.startswith("bank") else "main"
        assert f"bank {bank}:" in detail
        await service.store.close()
        service = open_service(data)
        after = _check(await catalog.call(service, "memory::doctor", {}), "durability-warnings")
        assert after["ok"] is True
    finally:
        await service.store.close()


async def test_durability_warnings_are_bounded(seeded: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        for n in range(25):
            payload = {"name": f"rule-{n}", "content": "Be brief."}
            rules = data / "main" / "rules"
            with Injector("fsync", 1, EIO, where=_in(rules)), pytest.raises(StorageError):
                await catalog.call(service, "memory::rule::set", payload)
        detail = _check(await catalog.call(service, "memory::doctor", {}), "durability-warnings")[
            "detail"
        ]
        assert detail.startswith("25 change(s)") and "and 5 older" in detail
        assert detail.count("bank main: rule") == 20
        assert "rule rule-24 written" in detail and "rule rule-4 written" not in detail
    finally:
        await service.store.close()


@pytest.mark.parametrize(
    ("point", "k", "data_dir_only"),
    [("fsync", 1, True), ("fsync", 2, True), ("unlink", 2, False)],
    ids=["create-sync", "trash-sync", "scratch-removal"],
)
async def test_a_fault_inside_doctors_roundtrip_fails_it_and_leaves_no_scratch_bank(
    seeded: Path, tmp_path: Path, point: str, k: int, data_dir_only: bool
) -> None:
    """Doctor's own scratch bank hits a storage fault: the data dir's sync after the scratch
    bank's rename into place (doctor used to answer ok: the failure was only logged), the sync
    after its move into `.trash`, or the removal from the trash (both used to leave the scratch
    in `.trash`). The roundtrip check fails — the disk refuses to make changes durable right now —
    and no scratch bank is left behind, in the data dir or its trash."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        before = await answers(service)
        where = _in(data) if data_dir_only else None
        with Injector(point, k, EIO, where=where) as fault:
            doctor = await catalog.call(service, "memory::doctor", {})
        assert fault.fired
        assert doctor["ok"] is False
        roundtrip = _check(doctor, "store-roundtrip")
        assert roundtrip["ok"] is False and "Input/output error" in roundtrip["detail"]
        assert _check(doctor, "durability-warnings")["ok"] is True  # the scratch is not a user's
        assert await answers(service) == before
        leftovers = [p.name for p in (*data.iterdir(), *data.glob(".trash/*"))]
        assert not [name for name in leftovers if "doctor" in name], leftovers
        again = await catalog.call(service, "memory::doctor", {})
        assert again["ok"] is True, [(c["name"], c["detail"]) for c in again["checks"]]
    finally:
        await service.store.close()


async def test_a_failed_directory_sync_of_a_new_log_is_retried_before_a_line_is_acknowledged(
    seeded: Path, tmp_path: Path
) -> None:
    """The first save into a bank creates its `memories.jsonl`; syncing the bank folder fails, so
    the save fails. The next save must sync the folder again before it is acknowledged, never
    fsync only the file whose directory entry may not be durable."""
    data = tmp_path / "data"
    shutil.copytree(seeded, data)
    service = open_service(data)
    try:
        await catalog.call(service, "memory::bank::create", {"name": "work"})
        work = data / "work"
        with Injector("fsync", 1, EIO, where=_in(work)), pytest.raises(StorageError):
            await catalog.call(service, "memory::save", {"bank": "work", "text": "First"})
        with Injector("fsync", 0, EIO, where=_in(work)) as counter:
            await catalog.call(service, "memory::save", {"bank": "work", "text": "Second"})
        assert counter.calls >= 1, "the bank folder was never synced after its log was created"
    finally:
        await service.store.close()
