"""Hand edits picked up without a restart: `Bank.disk_changed`, `Store.reload_bank`,
`MemoryService.reload_bank` and the data-dir watcher over real files.

Nothing here sleeps to wait for the watcher: a test makes its edit, then waits (bounded) for the
watcher to report the reload it expects. "No reload happened" is proven with a barrier: a hand edit
in another bank made after the writes; the watcher reports a batch only when all of it is handled,
and batches come in order, so once the barrier's reload is reported every earlier change was seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import watch
from memory_worker.adapters.watch import DataDirWatcher, bank_of
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core import transitions
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, InvalidInput, StorageError
from memory_worker.core.models import Memory
from memory_worker.core.text import fingerprint
from memory_worker.storage import bank as bank_module
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter
from .holds import hold_bank_loads, hold_every_log_sync, hold_log_syncs

pytestmark = pytest.mark.timeout(60)

NOW = 1_793_491_200_000


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload)


def _memory(text: str) -> Memory:
    return transitions.new_memory(fingerprint(text), text, now_ms=NOW)


def _replace(path: Path, text: str) -> None:
    """Write a whole file the way most editors save: a hidden temp file renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.edit")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def _hand_line(bank_dir: Path, text: str) -> bytes:
    """A new record in the exact JSON shape the worker writes (copied from its last line), less
    its checksum: a line written by hand carries none."""
    shape = json.loads((bank_dir / "memories.jsonl").read_bytes().splitlines()[-1])
    shape.update(id=fingerprint(text), text=text, revision=0)
    shape.pop("batch", None)
    shape.pop("crc", None)
    return json.dumps(shape).encode() + b"\n"


def _bank_events(emitter: RecordingEmitter, bank: str) -> list[str]:
    return [e["event_type"] for e in emitter.of(BANK_CHANGED) if e["bank"] == bank]


@pytest.fixture(name="bank")
async def _bank(store: Store) -> Bank:
    bank, _ = await store.ensure("main")
    await bank.commit([_memory("The user likes tea")])
    await bank.set_rule("style", "Be brief.")
    return bank


@pytest.fixture(name="watcher")
async def _watcher(service: MemoryService) -> AsyncIterator[DataDirWatcher]:
    # Banks the tests use exist before the watch starts: their creation is not what is tested.
    await call(service, "memory::save", bank="main", text="The user likes tea")
    await call(service, "memory::bank::create", name="other")
    watcher = DataDirWatcher(lambda: service)
    await watcher.start()
    try:
        yield watcher
    finally:
        await watcher.stop()
        await service.close()


async def _barrier(watcher: DataDirWatcher, root: Path) -> None:
    """Make a hand edit in bank `other` and wait until the watcher reloaded it: by then every
    change made before this call has been handled."""
    stamp = time.monotonic_ns()
    _replace(root / "other" / "rules" / "barrier.md", f"barrier {stamp}")
    assert await watcher.wait_reloaded("other") == "reloaded"


# --- Bank.disk_changed -------------------------------------------------------------------------


class TestDiskChanged:
    async def test_the_banks_own_writes_are_not_changes(self, bank: Bank) -> None:
        assert not bank.disk_changed()
        await asyncio.gather(*(bank.commit([_memory(f"fact number {i}")]) for i in range(20)))
        await bank.set_rule("tone", "Be warm.")
        await bank.set_rule("style", "")  # removing a rule is the bank's own write too
        assert not bank.disk_changed()

    async def test_a_freshly_loaded_bank_matches_its_files(self, bank: Bank) -> None:
        await bank.drain()
        assert not Bank.load("main", bank.path).disk_changed()

    async def test_a_hand_append_is_a_change(self, bank: Bank) -> None:
        _append(bank.path / "memories.jsonl", _memory("The user keeps bees").to_line() + b"\n")
        assert bank.disk_changed()

    async def test_a_replaced_log_is_a_change_even_with_the_same_bytes(self, bank: Bank) -> None:
        log = bank.path / "memories.jsonl"
        content = log.read_bytes()
        tmp = log.with_name(".memories.edit")
        tmp.write_bytes(content)
        os.replace(tmp, log)
        assert bank.disk_changed()

    async def test_a_removed_log_is_a_change(self, bank: Bank) -> None:
        (bank.path / "memories.jsonl").unlink()
        assert bank.disk_changed()

    @pytest.mark.parametrize(
        ("relative", "content"),
        [
            ("rules/style.md", "Be very brief."),
            ("rules/new.md", "A new rule."),
            ("bank.yaml", "description: edited by hand\n"),
        ],
    )
    async def test_rule_and_description_edits_are_changes(
        self, bank: Bank, relative: str, content: str
    ) -> None:
        _replace(bank.path / relative, content)
        assert bank.disk_changed()

    async def test_a_removed_rule_is_a_change(self, bank: Bank) -> None:
        (bank.path / "rules" / "style.md").unlink()
        assert bank.disk_changed()

    async def test_what_a_load_ignores_is_not_a_change(self, bank: Bank) -> None:
        (bank.path / "rules" / ".style.md.tmp").write_text("Be bri")
        (bank.path / "rules" / "notes.txt").write_text("not a rule")
        (bank.path / "vectors.jsonl").write_text("derived data\n")
        (bank.path / "README").write_text("a note")
        os.utime(bank.path / "rules" / "style.md")  # touched, same content
        assert not bank.disk_changed()

    async def test_in_flight_writes_answer_false_and_an_edit_among_them_is_still_caught(
        self, bank: Bank
    ) -> None:
        task = asyncio.create_task(bank.commit([_memory("The user likes cocoa")]))
        await asyncio.sleep(0)  # the write is appended; its fsync has not run
        _append(bank.path / "memories.jsonl", _memory("The user keeps bees").to_line() + b"\n")
        assert not bank.disk_changed()  # mid-write by us: no answer yet
        await task
        assert bank.disk_changed()  # the fsync did not absorb the foreign bytes

    async def test_log_edited_answers_mid_write_and_knows_our_own_bytes(self, bank: Bank) -> None:
        """What an automatic retirement asks before it decides (`Bank.log_edited`): unlike
        `disk_changed` it must answer while other saves are in flight."""
        await asyncio.gather(*(bank.commit([_memory(f"fact number {i}")]) for i in range(5)))
        assert not bank.log_edited()
        task = asyncio.create_task(bank.commit([_memory("The user likes cocoa")]))
        await asyncio.sleep(0)  # the write is appended; its fsync has not run
        assert not bank.log_edited()  # our own bytes
        _append(bank.path / "memories.jsonl", _memory("The user keeps bees").to_line() + b"\n")
        assert bank.log_edited()
        await task
        assert bank.log_edited()  # until a reload reads it

    async def test_a_log_replaced_before_the_banks_next_write_is_still_caught(
        self, bank: Bank
    ) -> None:
        log = bank.path / "memories.jsonl"
        tmp = log.with_name(".memories.edit")
        tmp.write_bytes(log.read_bytes())
        os.replace(tmp, log)
        await bank.commit([_memory("The user likes cocoa")])  # appends to the new file
        assert bank.disk_changed()

    async def test_an_in_place_edit_of_the_same_size_before_the_banks_next_write_is_caught(
        self, bank: Bank
    ) -> None:
        # A save before the watcher's debounce ends: the stamp after its fsync has the size of
        # everything the bank appended, so the edit must be noticed before the bank writes.
        _edit_in_place(bank.path / "memories.jsonl", b"likes tea", b"likes rum")
        await bank.commit([_memory("The user likes cocoa")])
        assert bank.disk_changed()


def _edit_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Overwrite `old` with `new` (the same size) inside the file itself, as `dd conv=notrunc`
    or an editor writing in place does, a little later than the file's last write (its clock
    ticks coarsely: an edit within the same tick would leave no trace in its stat)."""
    assert len(old) == len(new)
    data = path.read_bytes()
    before = path.stat()
    with path.open("r+b") as handle:
        handle.seek(data.index(old))
        handle.write(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10_000_000))


# --- Store.reload_bank -------------------------------------------------------------------------


class TestStoreReloadBank:
    async def test_unchanged_bank_is_left_alone(self, store: Store, bank: Bank) -> None:
        assert await store.reload_bank("main") == "unchanged"
        assert store.get("main") is bank
        await bank.commit([_memory("still writable")])  # it was never frozen

    async def test_a_hand_edit_is_reloaded_and_the_old_bank_refuses_writes(
        self, store: Store, bank: Bank
    ) -> None:
        hand = _memory("The user keeps bees")
        _append(bank.path / "memories.jsonl", hand.to_line() + b"\n")
        assert await store.reload_bank("main") == "reloaded"
        fresh = store.get("main")
        assert fresh is not bank and fresh.get(hand.id) == hand and not fresh.disk_changed()
        with pytest.raises(StorageError, match="reloading"):
            await bank.commit([_memory("into the stale copy")])
        await fresh.commit([_memory("into the new one")])
        assert not fresh.disk_changed()

    async def test_force_reloads_even_when_nothing_differs(self, store: Store, bank: Bank) -> None:
        assert await store.reload_bank("main", force=True) == "reloaded"
        assert store.get("main") is not bank

    async def test_added_and_removed_folders(self, store: Store, data_dir: Path) -> None:
        _replace(data_dir / "made" / "rules" / "hello.md", "Say hello.")
        assert await store.reload_bank("made") == "added"
        assert [r.name for r in store.get("made").rules()] == ["hello"]
        shutil.rmtree(data_dir / "made")
        assert await store.reload_bank("made") == "removed"
        assert store.find("made") is None and "made" not in store.names()
        assert await store.reload_bank("made") == "unchanged"

    async def test_a_folder_that_fails_to_load_is_broken_then_recovers(
        self, store: Store, bank: Bank
    ) -> None:
        log = bank.path / "memories.jsonl"
        log.unlink()
        log.mkdir()  # a folder where the log should be: unreadable
        assert await store.reload_bank("main") == "broken"
        assert store.find("main") is None and "main" in store.broken
        with pytest.raises(StorageError, match="could not be loaded"):
            store.get("main")
        log.rmdir()
        assert await store.reload_bank("main") == "added"
        assert "main" not in store.broken and store.get("main").rules()[0].name == "style"

    async def test_a_broken_folder_that_vanished_is_removed(
        self, store: Store, data_dir: Path
    ) -> None:
        (data_dir / "bad" / "memories.jsonl").mkdir(parents=True)
        assert await store.reload_bank("bad") == "broken"
        shutil.rmtree(data_dir / "bad")
        assert await store.reload_bank("bad") == "removed"
        assert "bad" not in store.broken

    async def test_other_banks_are_not_touched(self, store: Store, bank: Bank) -> None:
        other, _ = await store.ensure("other")
        _replace(bank.path / "rules" / "style.md", "Be very brief.")
        assert await store.reload_bank("main") == "reloaded"
        assert store.get("other") is other

    async def test_invalid_name_is_refused(self, store: Store) -> None:
        with pytest.raises(InvalidInput):
            await store.reload_bank("../etc")


# --- MemoryService.reload_bank -----------------------------------------------------------------


class TestServiceReloadBank:
    async def test_rules_edit_emits_rules_changed(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        await call(service, "memory::rule::set", bank="main", name="style", content="Be brief.")
        emitter.clear()
        _replace(data_dir / "main" / "rules" / "style.md", "Be very brief.")
        assert await service.reload_bank("main") == "reloaded"
        assert _bank_events(emitter, "main") == ["rules-changed"]
        rules = await call(service, "memory::rule::list", bank="main")
        assert rules["rules"][0]["content"] == "Be very brief."

    async def test_memory_edits_by_hand_are_announced_per_memory(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        """Live views and subscribers hear of what a person changed in `memories.jsonl` as of any
        other change (and no bank event: the rules and settings are as they were)."""
        tea, cat, old = [
            (await call(service, "memory::save", bank="main", text=text))["memory"]
            for text in ("The user likes tea", "The user has a cat", "The user is 40")
        ]
        emitter.clear()
        log = data_dir / "main" / "memories.jsonl"
        kept = [line for line in log.read_bytes().splitlines(keepends=True) if b"is 40" not in line]
        log.write_bytes(b"".join(kept).replace(b"likes tea", b"likes mint tea"))
        _append(log, _hand_line(data_dir / "main", "Bees"))
        assert await service.reload_bank("main") == "reloaded"
        assert emitter.of(BANK_CHANGED) == []
        changes = {
            (e["event_type"], e["memory"]["id"], e["memory"].get("text"), e["reason"])
            for e in emitter.of(ITEM_CHANGED)
        }
        assert changes == {
            ("updated", tea["id"], "The user likes mint tea", "edited by hand"),
            ("created", fingerprint("Bees"), "Bees", "edited by hand"),
            ("deleted", old["id"], "The user is 40", "edited by hand"),
        }
        assert cat["id"] not in {e["memory"]["id"] for e in emitter.of(ITEM_CHANGED)}
        emitter.clear()
        os.utime(log)  # touched, nothing changed: nothing to announce
        await service.reload_bank("main")
        assert emitter.events == []

    async def test_a_memory_moved_to_another_subject_by_hand_tells_the_view_it_left(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        """A person edits `memories.jsonl` to make Ana's memory Bruno's: its `updated` event is
        about Bruno, so (as for `memory::update`) it carries `previous_subject` and the bus tells
        Ana's bindings it left (`moved`). Without it her live view kept showing it."""
        saved = await call(
            service, "memory::save", bank="main", text="Prefers the aisle seat.", subject="ana"
        )
        emitter.clear()
        log = data_dir / "main" / "memories.jsonl"
        log.write_bytes(log.read_bytes().replace(b'"subject":"ana"', b'"subject":"bruno"'))
        assert await service.reload_bank("main") == "reloaded"
        [event] = emitter.of(ITEM_CHANGED)
        assert (event["event_type"], event["memory"]["id"]) == ("updated", saved["memory"]["id"])
        assert event["memory"]["subject"] == "bruno"
        assert event.get("previous_subject") == "ana"

    async def test_a_save_during_a_reload_waits_for_it_instead_of_failing(
        self, service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A person's edit reloads the bank; an agent's or extraction's save that arrives
        meanwhile waits for the reload (the bank is taken under the store's lock) and lands in
        the bank as reloaded, never refused as `the bank is reloading; retry`."""
        await call(service, "memory::save", bank="main", text="The user likes tea")
        entered, release = hold_bank_loads(monkeypatch)
        _replace(data_dir / "main" / "rules" / "style.md", "Be brief.")
        reloading = asyncio.create_task(service.reload_bank("main"))
        assert await asyncio.to_thread(entered.wait, 10)
        saving = asyncio.create_task(call(service, "memory::save", bank="main", text="Cocoa"))
        await asyncio.sleep(0)  # the save reaches the frozen bank first
        release.set()
        assert await reloading == "reloaded"
        saved = await saving
        assert saved["memory"]["text"] == "Cocoa"
        listed = await call(service, "memory::list", bank="main")
        assert sorted(m["text"] for m in listed["memories"]) == ["Cocoa", "The user likes tea"]

    @pytest.mark.parametrize(
        ("function_id", "payload"),
        [
            ("memory::update", {"text": "The user likes green tea"}),
            ("memory::delete", {}),
            ("memory::pin", {"pinned": True}),
        ],
    )
    async def test_a_change_by_id_during_a_reload_waits_for_it_instead_of_failing(
        self,
        service: MemoryService,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        function_id: str,
        payload: dict[str, Any],
    ) -> None:
        """As a save: an agent's update, delete or pin that arrives while a person's edit
        reloads the bank waits for the reload and changes the memory in the bank as reloaded,
        never refused as `the bank is reloading; retry`."""
        tea = (await call(service, "memory::save", bank="main", text="The user likes tea"))[
            "memory"
        ]
        entered, release = hold_bank_loads(monkeypatch)
        _replace(data_dir / "main" / "rules" / "style.md", "Be brief.")
        reloading = asyncio.create_task(service.reload_bank("main"))
        assert await asyncio.to_thread(entered.wait, 10)
        changing = asyncio.create_task(
            call(service, function_id, bank="main", id=tea["id"], **payload)
        )
        await asyncio.sleep(0)  # the change reaches the frozen bank first
        release.set()
        assert await reloading == "reloaded"
        changed = (await changing)["memory"]
        assert changed["revision"] == tea["revision"] + 1
        got = await call(service, "memory::get", bank="main", id=tea["id"])
        assert got["memory"]["revision"] == changed["revision"]

    async def test_a_bank_deleted_while_a_hand_edit_reloads_it_stays_deleted(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A person deletes a bank while the watcher reloads it for a hand edit: the delete
        waits for the reload (or the reload for the delete), never both at once, so the bank
        the reload read does not come back into RAM after its folder went to `.trash`."""
        await call(service, "memory::save", bank="notes", text="The user likes tea")
        entered, release = hold_bank_loads(monkeypatch)
        _replace(data_dir / "notes" / "rules" / "style.md", "Be brief.")
        reloading = asyncio.create_task(service.reload_bank("notes"))
        assert await asyncio.to_thread(entered.wait, 10)
        deleting = asyncio.create_task(call(service, "memory::bank::delete", name="notes"))
        await asyncio.sleep(0)  # the delete reaches the bank being reloaded
        release.set()
        outcome = await reloading
        await deleting
        assert outcome == "reloaded"
        assert service.store.find("notes") is None
        assert not (data_dir / "notes").exists()
        listed = await call(service, "memory::bank::list")
        assert "notes" not in {b["name"] for b in listed["banks"]}
        with pytest.raises(Exception, match="bank_not_found"):
            await call(service, "memory::list", bank="notes")

    @pytest.mark.parametrize("whole", [False, True], ids=["reload_bank", "memory::reload"])
    async def test_a_save_landing_as_a_reload_starts_is_announced_once(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        whole: bool,
    ) -> None:
        """A save whose fsync is under way when a hand edit's reload begins lands (the reload
        drains it first) and announces itself; the reload's comparison must not take it for
        a hand edit and announce it a second time as `edited by hand`."""
        await call(service, "memory::save", bank="main", text="The user likes tea")
        bank = service.store.get("main")
        entered, release = hold_log_syncs(monkeypatch, bank)
        emitter.clear()
        saving = asyncio.create_task(call(service, "memory::save", bank="main", text="Cocoa"))
        assert await asyncio.to_thread(entered.wait, 10)
        _replace(data_dir / "main" / "rules" / "style.md", "Be brief.")
        reloading = asyncio.create_task(
            call(service, "memory::reload") if whole else service.reload_bank("main")
        )
        await asyncio.sleep(0)  # the reload has begun while the save's fsync runs
        release.set()
        saved = (await saving)["memory"]
        assert await reloading == ({"ok": True, "banks": 1} if whole else "reloaded")
        about_cocoa = [
            (e["event_type"], e.get("reason"))
            for e in emitter.of(ITEM_CHANGED)
            if e["memory"]["id"] == saved["id"]
        ]
        assert about_cocoa == [("created", None)]
        assert _bank_events(emitter, "main") == ["rules-changed"]

    async def test_added_and_removed_folders_emit_created_and_trashed(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        _replace(data_dir / "made" / "bank.yaml", "description: by hand\n")
        assert await service.reload_bank("made") == "added"
        shutil.rmtree(data_dir / "made")
        assert await service.reload_bank("made") == "removed"
        assert _bank_events(emitter, "made") == ["created", "trashed"]
        assert await service.reload_bank("made") == "unchanged"
        assert _bank_events(emitter, "made") == ["created", "trashed"]


# --- a hand edit not read yet ------------------------------------------------------------------


def _pin_by_hand(bank_dir: Path, memory_id: str) -> None:
    """What a person does to pin a memory in `memories.jsonl` with an editor: its last record
    appended again, pinned, one revision up, without a checksum."""
    log = bank_dir / "memories.jsonl"
    last = [json.loads(line) for line in log.read_bytes().splitlines()]
    record = [r for r in last if r["id"] == memory_id][-1]
    record.update(pinned=True, revision=record["revision"] + 1)
    record.pop("batch", None)
    record.pop("crc", None)
    _append(log, json.dumps(record).encode() + b"\n")


class TestAPinByHandNotReadYet:
    """A memory a person pinned by editing `memories.jsonl` is pinned, though RAM learns it only
    at the next reload (the watcher's debounce, `memory::reload`). No automatic path may retire or
    rewrite it in between: its record, one revision up and after the person's line, won at replay
    and the pin was gone for good."""

    async def _pinned_after_reload(self, service: MemoryService, memory_id: str) -> dict[str, Any]:
        assert await service.reload_bank("main") == "reloaded"
        memory: dict[str, Any] = (await call(service, "memory::get", id=memory_id))["memory"]
        assert memory["pinned"] is True and memory.get("invalid_at") is None
        return memory

    async def test_the_reaper_leaves_it_alone(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        kept = await call(service, "memory::save", text="On call today", category="context")
        _pin_by_hand(data_dir / "main", kept["memory"]["id"])
        clock.advance_days(2)
        assert (await call(service, "memory::stats"))["expired"] == []
        await self._pinned_after_reload(service, kept["memory"]["id"])

    async def test_consolidation_cannot_supersede_it(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        loser = (await call(service, "memory::save", text="The user likes green tea"))["memory"]
        winner = (await call(service, "memory::save", text="The user loves green tea"))["memory"]
        _pin_by_hand(data_dir / "main", loser["id"])
        with pytest.raises(Conflict, match="edited by hand"):
            await catalog.call(
                service,
                "memory::supersede",
                {
                    "id": loser["id"],
                    "superseded_by": winner["id"],
                    "reinforce": True,
                    "expected_revision": loser["revision"],
                    "expected_winner_revision": winner["revision"],
                },
                Caller.internal("consolidate"),
            )
        await self._pinned_after_reload(service, loser["id"])

    async def test_extraction_cannot_rewrite_it_by_saying_it_again(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        said = (await call(service, "memory::save", text="The user likes green tea"))["memory"]
        _pin_by_hand(data_dir / "main", said["id"])
        with pytest.raises(Conflict, match="edited by hand"):
            await catalog.call(
                service,
                "memory::save",
                {"text": "The user likes green tea"},
                Caller.internal("extraction"),
            )
        await self._pinned_after_reload(service, said["id"])

    async def test_a_save_at_the_cap_does_not_evict_it(
        self, service: MemoryService, clock: FixedClock, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=2)
        oldest = await call(service, "memory::save", text="The user owns a red bicycle")
        clock.advance(10)
        await call(service, "memory::save", text="The user drinks green tea")
        clock.advance(10)
        _pin_by_hand(data_dir / "main", oldest["memory"]["id"])
        saved = await call(service, "memory::save", text="The user plays chess")
        assert "evicted" not in saved  # one over the cap until the reload, nothing lost
        await self._pinned_after_reload(service, oldest["memory"]["id"])
        clock.advance(10)
        again = await call(service, "memory::save", text="The user reads novels")
        assert again["evicted"] and oldest["memory"]["id"] not in again["evicted"]


# --- the watcher -------------------------------------------------------------------------------


class TestBankOf:
    @pytest.mark.parametrize(
        ("relative", "expected"),
        [
            ("main", "main"),
            ("main/memories.jsonl", "main"),
            ("main/bank.yaml", "main"),
            ("main/rules", "main"),
            ("main/rules/style.md", "main"),
            ("main/vectors.jsonl", None),
            ("main/rules/.style.md.tmp", None),
            ("main/rules/style.md~", None),
            ("main/notes/x.md", None),
            (".trash/main-1793491200000/memories.jsonl", None),
            (".lock", None),
            (".main.tmp-1a2b3c4d/bank.yaml", None),
            ("Not A Bank/memories.jsonl", None),
            ("", None),
        ],
    )
    def test_paths_map_to_their_bank(self, tmp_path: Path, relative: str, expected: str) -> None:
        assert bank_of(tmp_path, str(tmp_path / relative)) == expected

    def test_paths_outside_the_root_are_ignored(self, tmp_path: Path) -> None:
        assert bank_of(tmp_path / "data", str(tmp_path / "elsewhere" / "main")) is None


class TestWatcher:
    async def test_hand_edited_rule_is_loaded_and_announced(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
    ) -> None:
        emitter.clear()
        _replace(data_dir / "main" / "rules" / "style.md", "Answer in Portuguese.")
        assert await watcher.wait_reloaded("main") == "reloaded"
        rules = await call(service, "memory::rule::list", bank="main")
        assert [(r["name"], r["content"]) for r in rules["rules"]] == [
            ("style", "Answer in Portuguese.")
        ]
        assert _bank_events(emitter, "main") == ["rules-changed"]

    async def test_hand_appended_memory_is_recalled(
        self, watcher: DataDirWatcher, service: MemoryService, data_dir: Path
    ) -> None:
        line = _hand_line(data_dir / "main", "The user keeps bees in the garden")
        _append(data_dir / "main" / "memories.jsonl", line)
        assert await watcher.wait_reloaded("main") == "reloaded"
        listed = await call(service, "memory::list", bank="main")
        assert listed["total"] == 2
        hits = await call(service, "memory::recall", bank="main", query="bees garden")
        assert hits["memories"][0]["memory"]["text"] == "The user keeps bees in the garden"

    async def test_bank_folder_added_and_removed_by_hand(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
        tmp_path: Path,
    ) -> None:
        made = tmp_path / "made-elsewhere"
        _replace(made / "bank.yaml", "description: copied in by hand\n")
        _replace(made / "rules" / "hello.md", "Say hello.")
        os.rename(made, data_dir / "handmade")  # one step, as `mv` does
        assert await watcher.wait_reloaded("handmade") == "added"
        banks = (await call(service, "memory::bank::list"))["banks"]
        assert {b["name"]: b["description"] for b in banks}["handmade"] == "copied in by hand"
        # The folder that moved in is watched too.
        _replace(data_dir / "handmade" / "rules" / "hello.md", "Say hi.")
        assert await watcher.wait_reloaded("handmade") == "reloaded"
        shutil.rmtree(data_dir / "handmade")
        assert await watcher.wait_reloaded("handmade") == "removed"
        banks = (await call(service, "memory::bank::list"))["banks"]
        assert "handmade" not in {b["name"] for b in banks}
        assert _bank_events(emitter, "handmade") == ["created", "rules-changed", "trashed"]

    async def test_a_burst_of_saves_reloads_nothing(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
    ) -> None:
        emitter.clear()
        await asyncio.gather(
            *(call(service, "memory::save", bank="main", text=f"fact {i}") for i in range(25))
        )
        for i in range(25, 50):
            await call(service, "memory::save", bank="main", text=f"fact {i}")
        await _barrier(watcher, data_dir)
        assert watcher.checked["main"] >= 1  # its events were seen and judged the worker's own
        assert watcher.reloads_of("main") == []
        assert _bank_events(emitter, "main") == []
        assert (await call(service, "memory::list", bank="main"))["total"] == 51

    async def test_rule_set_through_the_service_reloads_nothing(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
    ) -> None:
        emitter.clear()
        await call(service, "memory::rule::set", bank="main", name="tone", content="Be warm.")
        await call(service, "memory::rule::set", bank="main", name="tone", content="Be kind.")
        await call(service, "memory::rule::set", bank="main", name="tone", content="")
        await call(service, "memory::rule::set", bank="main", name="style", content="Be brief.")
        await _barrier(watcher, data_dir)
        assert watcher.checked["main"] >= 1
        assert watcher.reloads_of("main") == []
        assert _bank_events(emitter, "main") == ["rules-changed"] * 4  # the service's own only

    async def test_a_hand_edit_made_while_the_worker_writes_is_still_picked_up(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        entered, release = hold_every_log_sync(monkeypatch)
        log = data_dir / "main" / "memories.jsonl"
        hand = _hand_line(data_dir / "main", "The user keeps bees")
        saving = asyncio.create_task(call(service, "memory::save", bank="main", text="Cocoa"))
        try:
            assert await asyncio.to_thread(entered.wait, 10)  # our line is written, not synced
            _append(log, hand)
            # Correct code waits for the write to land before judging, so this gives up; code
            # that judged the file mid-write ("ours, in flight") would have answered by now.
            with contextlib.suppress(TimeoutError):
                await watcher.wait_until(lambda w: w.checked["main"] > 0, timeout=0.3)
        finally:
            release.set()
        await saving
        assert await watcher.wait_reloaded("main") == "reloaded"
        listed = await call(service, "memory::list", bank="main")
        assert sorted(m["text"] for m in listed["memories"]) == [
            "Cocoa",
            "The user keeps bees",
            "The user likes tea",
        ]

    @staticmethod
    def _replace(log: Path, older: bytes) -> None:
        """`git checkout`, or an editor's save by rename: the line went into the old file."""
        tmp = log.with_name(".memories.checkout")
        tmp.write_bytes(older)
        os.replace(tmp, log)

    @staticmethod
    def _rewrite_in_place(log: Path, older: bytes) -> None:
        """An editor that saves in place (truncate, write what it read): the line is cut away."""
        with log.open("r+b") as editor:
            editor.truncate(0)
            editor.write(older)

    @pytest.mark.parametrize("edit", ["_replace", "_rewrite_in_place"])
    async def test_a_save_whose_log_is_edited_before_its_fsync_is_not_lost(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        edit: str,
    ) -> None:
        # The log is edited by hand between the worker's write of a save and its fsync.
        entered, release = hold_every_log_sync(monkeypatch)
        monkeypatch.setattr(bank_module, "INLINE_SYNC_S", 0.0)  # the fsync in its thread
        log = data_dir / "main" / "memories.jsonl"
        older = log.read_bytes()
        saving = asyncio.create_task(call(service, "memory::save", bank="main", text="Cocoa"))
        try:
            assert await asyncio.to_thread(entered.wait, 10)
            getattr(self, edit)(log, older)
        finally:
            release.set()
        await saving  # acknowledged
        assert await watcher.wait_reloaded("main") == "reloaded"
        listed = await call(service, "memory::list", bank="main")
        assert sorted(m["text"] for m in listed["memories"]) == ["Cocoa", "The user likes tea"]

    async def test_a_log_being_written_by_hand_is_not_cut_by_a_reload(
        self, watcher: DataDirWatcher, service: MemoryService, data_dir: Path
    ) -> None:
        # `cp` over the log (or `git checkout` of a big one) still writing when the watcher
        # reloads: the log ends short, but it is a person's write under way, not a crash of ours.
        log = data_dir / "main" / "memories.jsonl"
        new = log.read_bytes() + _hand_line(data_dir / "main", "The user keeps bees")
        cut = len(new) - 20
        with log.open("r+b") as out:
            out.truncate(0)
            out.write(new[:cut])
            out.flush()
            assert await watcher.wait_reloaded("main") == "reloaded"
            out.write(new[cut:])
        assert await watcher.wait_reloaded("main") == "reloaded"
        assert log.read_bytes() == new  # no hole of zero bytes where a reload cut it
        listed = await call(service, "memory::list", bank="main")
        assert sorted(m["text"] for m in listed["memories"]) == [
            "The user keeps bees",
            "The user likes tea",
        ]

    async def test_vectors_and_dot_files_are_ignored(
        self, watcher: DataDirWatcher, data_dir: Path
    ) -> None:
        _append(data_dir / "main" / "vectors.jsonl", b"derived\n")
        (data_dir / ".scratch").write_text("not a bank")
        (data_dir / "main" / "rules" / ".draft.md").write_text("not yet a rule")
        await _barrier(watcher, data_dir)
        assert watcher.checked["main"] == 0 and watcher.reloads_of("main") == []

    async def test_malformed_edit_reloads_reports_damage_and_keeps_good_records(
        self, watcher: DataDirWatcher, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::save", bank="main", text="The user likes cocoa")
        log = data_dir / "main" / "memories.jsonl"
        _append(log, b"this line is garbage\n" + _hand_line(data_dir / "main", "The user rows"))
        assert await watcher.wait_reloaded("main") == "reloaded"
        listed = await call(service, "memory::list", bank="main")
        assert sorted(m["text"] for m in listed["memories"]) == [
            "The user likes cocoa",
            "The user likes tea",
            "The user rows",
        ]
        doctor = await call(service, "memory::doctor")
        intact = next(c for c in doctor["checks"] if c["name"] == "files-intact")
        assert not intact["ok"] and "main/memories.jsonl:3: corrupt line" in intact["detail"]
        await call(service, "memory::save", bank="main", text="written after the reload")
        assert len(log.read_bytes().splitlines()) == 5

    async def test_an_error_is_logged_and_the_watcher_goes_on(
        self,
        watcher: DataDirWatcher,
        service: MemoryService,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        real = service.reload_bank

        async def failing(name: str) -> str:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(service, "reload_bank", failing)
        _replace(data_dir / "main" / "rules" / "style.md", "first edit")
        assert await watcher.wait_reloaded("main") == "error"
        monkeypatch.setattr(service, "reload_bank", real)
        _replace(data_dir / "main" / "rules" / "style.md", "second edit")
        assert await watcher.wait_reloaded("main") == "reloaded"
        rule = service.store.get("main").rule("style")
        assert rule is not None and rule.content == "second edit"

    async def test_on_reload_hook_sees_every_reload(self, service: MemoryService) -> None:
        seen: list[tuple[str, str]] = []
        await call(service, "memory::bank::create", name="hooked")
        watcher = DataDirWatcher(lambda: service, on_reload=lambda b, o: seen.append((b, o)))
        await watcher.start()
        try:
            _replace(service.store.root / "hooked" / "rules" / "a.md", "A.")
            assert await watcher.wait_reloaded("hooked") == "reloaded"
            assert seen == [("hooked", "reloaded")]
        finally:
            await watcher.stop()

    async def test_it_follows_the_data_dir_when_the_store_is_swapped(
        self, tmp_path: Path, clock: FixedClock
    ) -> None:
        first = MemoryService(Store.open(tmp_path / "one", holder=HOLDER), Settings(), clock=clock)
        second = MemoryService(Store.open(tmp_path / "two", holder=HOLDER), Settings(), clock=clock)
        for service in (first, second):
            await call(service, "memory::bank::create", name="old")
            await call(service, "memory::bank::create", name="new")
        current = first
        watcher = DataDirWatcher(lambda: current)
        await watcher.start()
        try:
            assert watcher.root == first.store.root
            current = second
            await watcher.restart()
            assert watcher.root == second.store.root
            _replace(first.store.root / "old" / "rules" / "a.md", "edited in the old dir")
            _replace(second.store.root / "new" / "rules" / "a.md", "edited in the new dir")
            assert await watcher.wait_reloaded("new") == "reloaded"
            assert watcher.history == [("new", "reloaded")]
            assert first.store.get("old").rules() == []
        finally:
            await watcher.stop()
            await first.store.close()
            await second.store.close()

    async def test_a_missing_data_dir_is_retried_not_fatal(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        shutil.rmtree(data_dir)
        watcher = DataDirWatcher(lambda: service)
        await watcher.start()  # returns: the watch failed and will be retried
        try:
            _replace(data_dir / "late" / "bank.yaml", "description: made after the start\n")
            await watcher.restart()  # (or within idle_s by itself)
            _replace(data_dir / "late" / "rules" / "a.md", "A.")
            # The folder predates this watch: it is loaded at its first change.
            assert await watcher.wait_reloaded("late") == "added"
            assert service.store.get("late").rules()[0].content == "A."
        finally:
            await watcher.stop()

    async def test_stop_is_prompt_and_idempotent(
        self, service: MemoryService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The watch sees the stop within a step (20 ms) and ends on its own; one that missed it
        would be cancelled only after the grace, raised here to a minute so that a stop taking
        it cannot be mistaken for a slow machine (nor a slow machine for it)."""
        monkeypatch.setattr(watch, "STOP_GRACE_S", 60.0)
        watcher = DataDirWatcher(lambda: service)
        await watcher.start()
        started = time.perf_counter()
        await watcher.stop()
        assert time.perf_counter() - started < 30.0
        await watcher.stop()
        assert "running=False" in repr(watcher)
