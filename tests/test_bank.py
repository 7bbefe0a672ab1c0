"""Bank: the commit choke point under faults and concurrency, replay, and damage reports."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from memory_worker.core import transitions
from memory_worker.core.errors import StorageError
from memory_worker.core.models import Memory
from memory_worker.search import ranking
from memory_worker.storage import bank as bank_module
from memory_worker.storage.bank import INLINE_SYNC_S, Bank
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .holds import hold_log_syncs

NOW = 1_793_491_200_000


def _memory(text: str, **changes: object) -> Memory:
    from memory_worker.core.text import fingerprint

    return transitions.new_memory(fingerprint(text), text, now_ms=NOW).model_copy(update=changes)


@pytest.fixture(name="bank")
async def _bank(store: Store) -> Bank:
    bank, _ = await store.ensure("main")
    return bank


class _Disk:
    """`os.fsync` as seen by the bank: which thread ran each one, and how long the bank's clock
    says it took (`delay_s`, advanced by the fake fsync itself: no real waiting)."""

    def __init__(self) -> None:
        self.loop = threading.get_ident()
        self.other = -1  # recorded for any thread but the loop's
        self.threads: list[int] = []
        self.delay_s = 0.0
        self.fails = False
        self.now = 0.0

    def fsync(self, fd: int) -> None:
        me = threading.get_ident()
        self.threads.append(me if me == self.loop else self.other)
        self.now += self.delay_s
        if self.fails:
            raise OSError(errno.EIO, "Input/output error")

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture(name="disk")
def _disk(monkeypatch: pytest.MonkeyPatch) -> _Disk:
    disk = _Disk()
    monkeypatch.setattr(os, "fsync", disk.fsync)
    monkeypatch.setattr(bank_module, "time", SimpleNamespace(perf_counter=disk.perf_counter))
    return disk


def _lines(bank: Bank) -> list[bytes]:
    return (bank.path / "memories.jsonl").read_bytes().splitlines()


class TestCommit:
    async def test_record_is_visible_only_after_commit_returns(self, bank: Bank) -> None:
        record = _memory("The user likes tea")
        task = asyncio.create_task(bank.commit([record]))
        await asyncio.sleep(0)  # the write is staged; its fsync has not finished
        assert bank.get(record.id) is None
        assert bank.latest(record.id) == record  # but decisions already see it
        await task
        assert bank.get(record.id) == record and record.id in bank.index

    async def test_failed_fsync_changes_nothing_and_the_next_write_is_intact(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        before = (bank.path / "memories.jsonl").read_bytes()
        real_fsync = os.fsync

        def failing_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        lost = _memory("The user likes coffee")
        with pytest.raises(StorageError, match="Input/output error"):
            await bank.commit([lost])
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert bank.get(lost.id) is None and bank.latest(lost.id) is None
        assert (bank.path / "memories.jsonl").read_bytes() == before
        later = _memory("The user likes cocoa")
        await bank.commit([later])
        assert [Memory.model_validate_json(line).id for line in _lines(bank)] == [kept.id, later.id]

    async def test_failed_partial_write_is_cut_back(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        before = (bank.path / "memories.jsonl").read_bytes()
        real_write = os.write
        calls = {"n": 0}

        def disk_full_after_half(fd: int, data: bytes | memoryview) -> int:
            calls["n"] += 1
            if calls["n"] == 1:
                return real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", disk_full_after_half)
        with pytest.raises(StorageError, match="No space left"):
            await bank.commit([_memory("The user likes coffee")])
        monkeypatch.setattr(os, "write", real_write)
        assert (bank.path / "memories.jsonl").read_bytes() == before
        await bank.commit([_memory("The user likes cocoa")])
        assert len(_lines(bank)) == 2

    async def test_a_record_the_index_cannot_take_fails_its_write_and_stops_the_bank(
        self, store: Store, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Analysing a record for the index raised (a bug; a record stated past year 9999 did):
        the flusher died and this save, and every later one of the bank, waited forever. Now its
        callers are told, as at a failed fsync, and the bank takes no write until it is read
        again from its log (the write may already be durable there)."""
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        real = ranking.indexed  # what the bank analyses a record with (imported at its use)

        def failing(record: Memory, **options: bool) -> object:
            if "coffee" in record.text:
                raise OverflowError("year 292278994 is out of range")
            return real(record, **options)

        monkeypatch.setattr(ranking, "indexed", failing)
        doomed = _memory("The user likes coffee")
        with pytest.raises(StorageError, match="could not index"):
            await asyncio.wait_for(bank.commit([doomed]), 5)
        assert bank.get(doomed.id) is None and bank.get(kept.id) == kept  # reads go on
        with pytest.raises(StorageError, match="refuses writes until memory::reload"):
            await asyncio.wait_for(bank.commit([_memory("The user likes cocoa")]), 5)
        monkeypatch.setattr(ranking, "indexed", real)
        assert await store.reload_bank(bank.name, force=True) == "reloaded"
        again = store.get(bank.name)
        assert again.get(kept.id) == kept
        later = _memory("The user likes milk")
        await asyncio.wait_for(again.commit([later]), 5)
        assert again.get(later.id) == later

    async def test_a_durable_record_ram_cannot_take_fails_its_write_and_stops_the_bank(
        self, store: Store, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Applying a durable record to RAM raised (a bug): the flusher died, and this save and
        every later one of the bank waited forever. Now its caller is told, the bank takes no
        write until it is read again from its log, and the reload shows the record (it was
        durable: nothing written is lost)."""
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        real = Bank._apply

        def failing(self: Bank, record: Memory, prepared: object = None) -> None:
            if "coffee" in record.text:
                raise RuntimeError("a bug in applying")
            real(self, record, prepared)  # type: ignore[arg-type]

        monkeypatch.setattr(Bank, "_apply", failing)
        doomed = _memory("The user likes coffee")
        with pytest.raises(StorageError, match="could not apply it"):
            await asyncio.wait_for(bank.commit([doomed]), 5)
        assert bank.get(kept.id) == kept  # reads go on
        with pytest.raises(StorageError, match="refuses writes until memory::reload"):
            await asyncio.wait_for(bank.commit([_memory("The user likes cocoa")]), 5)
        monkeypatch.setattr(Bank, "_apply", real)
        assert await store.reload_bank(bank.name, force=True) == "reloaded"
        again = store.get(bank.name)
        assert again.get(kept.id) == kept and again.get(doomed.id) == doomed
        later = _memory("The user likes milk")
        await asyncio.wait_for(again.commit([later]), 5)
        assert again.get(later.id) == later

    async def test_concurrent_commits_share_fsyncs(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        real_fsync = os.fsync
        count = {"n": 0}

        def counting_fsync(fd: int) -> None:
            count["n"] += 1
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", counting_fsync)
        records = [_memory(f"concurrent memory {i}") for i in range(32)]
        await asyncio.gather(*(bank.commit([r]) for r in records))
        assert all(bank.get(r.id) == r for r in records)
        assert count["n"] < len(records)

    async def test_a_failed_group_fsync_fails_every_waiter(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def failing_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        records = [_memory(f"doomed memory {i}") for i in range(8)]
        results = await asyncio.gather(*(bank.commit([r]) for r in records), return_exceptions=True)
        assert all(isinstance(r, StorageError) for r in results)
        assert all(bank.get(r.id) is None for r in records)
        assert (bank.path / "memories.jsonl").read_bytes() == b""

    async def test_a_lone_write_on_a_fast_disk_is_synced_on_the_loop_and_a_group_in_a_thread(
        self, bank: Bank, disk: _Disk
    ) -> None:
        await bank.commit([_memory("The user likes tea")])
        assert disk.threads[-1] == disk.other  # nothing measured yet: a thread (after the
        disk.threads.clear()  # new log's directory entry, synced where it was made)
        await bank.commit([_memory("The user likes coffee")])
        assert disk.threads == [disk.loop]
        disk.threads.clear()
        records = [_memory(f"concurrent memory {i}") for i in range(8)]
        await asyncio.gather(*(bank.commit([r]) for r in records))
        # The first alone, on the loop; the seven written meanwhile share one fsync in a thread.
        assert disk.threads == [disk.loop, disk.other]
        assert all(bank.get(r.id) == r for r in records)

    async def test_one_slow_fsync_sends_the_next_to_a_thread_until_one_is_fast_again(
        self, bank: Bank, disk: _Disk
    ) -> None:
        await bank.commit([_memory("The user likes tea")])
        disk.threads.clear()
        disk.delay_s = INLINE_SYNC_S * 2
        await bank.commit([_memory("The user likes coffee")])  # still on the loop: it was fast
        await bank.commit([_memory("The user likes cocoa")])
        disk.delay_s = 0.0
        await bank.commit([_memory("The user likes mate")])  # the slow one before: a thread
        await bank.commit([_memory("The user likes chai")])
        assert disk.threads == [disk.loop, disk.other, disk.other, disk.loop]

    async def test_a_failed_fsync_on_the_loop_fails_its_commit_and_changes_nothing(
        self, bank: Bank, disk: _Disk
    ) -> None:
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        before = (bank.path / "memories.jsonl").read_bytes()
        disk.fails = True
        lost = _memory("The user likes coffee")
        with pytest.raises(StorageError, match="Input/output error"):
            await bank.commit([lost])
        assert disk.threads[-1] == disk.loop
        assert bank.get(lost.id) is None and bank.latest(lost.id) is None
        assert (bank.path / "memories.jsonl").read_bytes() == before

    async def test_a_cancelled_caller_does_not_strand_its_record(self, bank: Bank) -> None:
        record = _memory("The user likes tea")
        task = asyncio.create_task(bank.commit([record]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await bank.drain()
        assert bank.get(record.id) == record

    async def test_a_caller_that_gave_up_mid_group_leaves_the_group_acknowledged(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A commit whose caller stops waiting while its group's fsync runs (awaited unshielded:
        only its own future is cancelled): the group lands whole, the other callers are
        acknowledged, the bank takes the next write, and no failure is logged."""
        entered, release = hold_log_syncs(monkeypatch, bank)
        records = [_memory(f"The user likes drink number {i}") for i in range(3)]
        first = asyncio.create_task(bank.commit([records[0]]))
        assert await asyncio.to_thread(entered.wait, 10)  # the first write's fsync holds
        rest = [asyncio.create_task(bank.commit([r])) for r in records[1:]]
        await asyncio.sleep(0)  # both written, queued behind the held fsync
        rest[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await rest[0]
        release.set()
        await first
        await rest[1]
        await bank.drain()
        assert all(bank.get(r.id) == r for r in records)
        later = _memory("The user likes cocoa")
        await bank.commit([later])
        assert bank.get(later.id) == later
        assert "apply_failed" not in caplog.text and "commit_failed" not in caplog.text

    async def test_a_caller_that_gave_up_before_its_fsync_failed_is_told_nothing(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same group's fsync fails: the callers still waiting get the error, the one that
        gave up none (its future stays cancelled), and nothing of the group stays."""
        kept = _memory("The user likes tea")
        await bank.commit([kept])
        before = (bank.path / "memories.jsonl").read_bytes()
        entered, release = hold_log_syncs(monkeypatch, bank)

        def failing_fsync(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing_fsync)
        records = [_memory(f"The user likes drink number {i}") for i in range(2)]
        tasks = [asyncio.create_task(bank.commit([r])) for r in records]
        assert await asyncio.to_thread(entered.wait, 10)
        tasks[0].cancel()  # the write whose fsync runs: the one behind it is failed after it
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]
        release.set()
        with pytest.raises(StorageError, match="Input/output error"):
            await asyncio.wait_for(tasks[1], 10)
        await bank.drain()
        assert (bank.path / "memories.jsonl").read_bytes() == before
        assert all(bank.latest(r.id) is None for r in records)

    async def test_a_torn_last_line_is_set_aside_at_load_so_the_log_ends_whole(
        self, store: Store, data_dir: Path
    ) -> None:
        log = await _closed_with_one_record(store, data_dir)
        whole = log.read_bytes()
        with log.open("ab") as handle:
            handle.write(b'{"id":"fptorn","text":"half a rec')
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            bank = reopened.get("main")
            assert bank.damage == []
            [note] = bank.set_aside
            assert "interrupted write" in note and "interrupted-writes.jsonl" in note
            assert log.read_bytes() == whole  # cut back to where the torn write began
            kept = data_dir / "main" / "interrupted-writes.jsonl"
            assert kept.read_bytes() == b'{"id":"fptorn","text":"half a rec\n'  # kept, not lost
            await bank.commit([_memory("The user likes cocoa")])
            texts = [
                Memory.model_validate_json(line).text for line in log.read_bytes().splitlines()
            ]
            assert texts == ["The user likes tea", "The user likes cocoa"]
        finally:
            await reopened.close()

    async def test_a_write_never_glues_onto_a_last_line_without_its_newline(
        self, store: Store, data_dir: Path
    ) -> None:
        log = await _closed_with_one_record(store, data_dir)
        log.write_bytes(log.read_bytes().rstrip(b"\n"))  # a whole record, its newline lost
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            bank = reopened.get("main")
            assert bank.damage == [] and bank.set_aside == []
            await bank.commit([_memory("The user likes cocoa")])
            lines = log.read_bytes().splitlines()
            assert [Memory.model_validate_json(line).text for line in lines] == [
                "The user likes tea",
                "The user likes cocoa",
            ]
        finally:
            await reopened.close()

    async def test_a_save_after_an_in_place_edit_lost_its_newline_is_not_glued_onto_it(
        self, bank: Bank
    ) -> None:
        """An editor that saves in place (same file, no rename: nano, VS Code) and drops the
        final newline, then a save before the watcher reloads the bank: the save's line was
        glued onto the edited one, and the acknowledged memory was a corrupt line at the next
        load."""
        await bank.commit([_memory("The user likes tea")])
        log = bank.path / "memories.jsonl"
        edited = log.read_bytes().replace(b"likes tea", b"likes green tea").rstrip(b"\n")
        with log.open("r+b") as handle:  # the same inode, rewritten
            handle.write(edited)
            handle.truncate()
        await bank.commit([_memory("The user owns a bike")])
        texts = [Memory.model_validate_json(line).text for line in log.read_bytes().splitlines()]
        assert texts == ["The user likes green tea", "The user owns a bike"]

    @pytest.mark.parametrize("failing", ["write", "fsync"])
    async def test_a_failed_save_after_a_hand_append_leaves_the_appended_line(
        self, bank: Bank, monkeypatch: pytest.MonkeyPatch, failing: str
    ) -> None:
        """A line a person appended by hand (`echo … >> memories.jsonl`), then a save the disk
        refuses (full) before the watcher reloaded the bank: the save was cut back to the size
        the bank had last written, which cut the person's line off the log with it."""
        await bank.commit([_memory("The user likes tea")])
        log = bank.path / "memories.jsonl"
        hand = _memory("The user keeps bees").to_line() + b"\n"
        with log.open("ab") as handle:
            handle.write(hand)
        before = log.read_bytes()

        def disk_full(*args: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, failing, disk_full)
        with pytest.raises(StorageError, match="No space left"):
            await bank.commit([_memory("The user owns a bike")])
        monkeypatch.undo()
        assert log.read_bytes() == before
        assert bank.disk_changed()  # the hand edit is still reported for a reload


async def _closed_with_one_record(store: Store, data_dir: Path) -> Path:
    """Bank `main` holding one memory, its store closed; returns its log."""
    bank, _ = await store.ensure("main")
    await bank.commit([_memory("The user likes tea")])
    await store.close()
    return data_dir / "main" / "memories.jsonl"


class TestReplay:
    async def test_last_wins_by_revision_and_ties_go_to_the_later_line(
        self, store: Store, data_dir: Path
    ) -> None:
        bank, _ = await store.ensure("main")
        first = _memory("The user likes tea")
        await bank.commit([first.model_copy(update={"revision": 2, "corroboration": 5})])
        await bank.commit([first.model_copy(update={"revision": 1, "corroboration": 9})])
        await bank.commit([first.model_copy(update={"revision": 2, "corroboration": 7})])
        assert bank.get(first.id).corroboration == 7  # type: ignore[union-attr]
        await store.close()
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            assert reopened.get("main").get(first.id).corroboration == 7  # type: ignore[union-attr]
        finally:
            await reopened.close()

    def test_tombstones_are_not_indexed_after_replay(self, tmp_path: Path) -> None:
        folder = tmp_path / "main"
        folder.mkdir()
        live = _memory("The user likes tea")
        dead = _memory("The user likes coffee", invalid_at=NOW + 1, revision=1)
        (folder / "memories.jsonl").write_bytes(live.to_line() + b"\n" + dead.to_line() + b"\n")
        bank = Bank.load("main", folder)
        assert live.id in bank.index and dead.id not in bank.index
        assert bank.live_count() == 1 and len(bank.memories) == 2

    def test_old_records_without_tags_or_stated_at_load(self, tmp_path: Path) -> None:
        folder = tmp_path / "main"
        folder.mkdir()
        legacy = (
            b'{"id":"fp1","text":"legacy memory","entities":[],"confidence":"extracted",'
            b'"corroboration":0,"pinned":false,"created_at":5,"updated_at":6,"revision":0}\n'
        )
        (folder / "memories.jsonl").write_bytes(legacy)
        memory = Bank.load("main", folder).get("fp1")
        assert memory is not None and memory.tags == () and memory.stated_at is None
        assert memory.last_stated_at == 6

    async def test_a_log_an_editor_saved_with_a_byte_order_mark_loses_no_memory(
        self, store: Store, data_dir: Path
    ) -> None:
        """An editor that saves UTF-8 with a byte order mark (Windows Notepad) and CRLF line
        ends: the mark glued onto the first line made it a corrupt line, and that memory was
        gone from every read until someone found the invisible character."""
        log = await _closed_with_one_record(store, data_dir)
        second = _memory("The user lives in Porto")
        body = log.read_bytes() + second.to_line() + b"\n"
        log.write_bytes(b"\xef\xbb\xbf" + body.replace(b"\n", b"\r\n"))
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            bank = reopened.get("main")
            assert [d.describe() for d in bank.damage] == []
            assert bank.live_count() == 2
            third = _memory("The user owns a bike")
            await bank.commit([third])  # the next write lands after it, and all of it replays
            await reopened.close()
            reopened = Store.open(data_dir, holder=HOLDER)
            assert reopened.get("main").live_count() == 3
        finally:
            await reopened.close()

    @pytest.mark.parametrize("removed", [0, 1, 2])
    async def test_a_line_of_an_import_deleted_by_hand_hides_only_that_memory(
        self, store: Store, data_dir: Path, removed: int
    ) -> None:
        """An import is one write of many lines, applied whole or not at all. A person who
        deleted one imported memory's line from memories.jsonl lost every memory of that import
        (an "interrupted write": none applied). A crash cuts a write short at its end; a write
        whose last line is there reached it, so only the deleted line is gone. So did one
        followed by a later write (`removed=2`, its last line): a write a crash cut short is the
        log's last, and the next load sets it aside before anything is written after it."""
        bank, _ = await store.ensure("main")
        texts = ["The user likes tea", "The user lives in Lisbon", "The user has a cat"]
        await bank.commit([_memory(text) for text in texts])
        await bank.commit([_memory("The user plays chess")])
        await store.close()
        log = data_dir / "main" / "memories.jsonl"
        lines = log.read_bytes().splitlines(keepends=True)
        log.write_bytes(b"".join(line for i, line in enumerate(lines) if i != removed))
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            bank = reopened.get("main")
            assert sorted(m.text for m in bank.memories.values()) == sorted(
                [*(t for i, t in enumerate(texts) if i != removed), "The user plays chess"]
            )
            assert [d.kept for d in bank.damage] == [True]
        finally:
            await reopened.close()

    def test_leftover_rule_temp_file_is_reported_and_ignored(self, tmp_path: Path) -> None:
        folder = tmp_path / "main"
        (folder / "rules").mkdir(parents=True)
        (folder / "rules" / "style.md").write_text("Be brief.")
        (folder / "rules" / ".style.md.tmp").write_text("Be bri")
        bank = Bank.load("main", folder)
        assert [r.content for r in bank.rules()] == ["Be brief."]
        assert [d.file for d in bank.damage] == ["rules/.style.md.tmp"]

    def test_a_rule_file_whose_name_is_not_utf8_is_reported_not_served(
        self, tmp_path: Path
    ) -> None:
        # `régles.md` saved in Latin-1: its name would reach every answer and every system prompt
        # as a lone surrogate, which no JSON reader on the other side accepts (and no write takes).
        folder = tmp_path / "main"
        (folder / "rules").mkdir(parents=True)
        (folder / "rules" / "style.md").write_text("Be brief.")
        (Path(os.fsdecode(os.fsencode(folder / "rules") + b"/r\xe9gles.md"))).write_text("Hi.")
        bank = Bank.load("main", folder)
        assert [r.name for r in bank.rules()] == ["style"]
        assert [d.file for d in bank.damage] == ["rules/r\\xe9gles.md"]
        assert all(d.describe().encode("utf-8") for d in bank.damage)
        assert not bank.disk_changed()


class TestStore:
    def test_unwritable_data_dir_is_fatal_with_a_clear_message(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        with pytest.raises(StorageError, match="not writable"):
            Store.open(blocker / "data", holder=HOLDER)

    async def test_a_bank_folder_that_fails_to_load_is_reported_not_fatal(
        self, data_dir: Path
    ) -> None:
        (data_dir / "good").mkdir(parents=True)
        (data_dir / "bad").mkdir()
        (data_dir / "bad" / "memories.jsonl").mkdir()  # a folder where the log should be
        store = Store.open(data_dir, holder=HOLDER)
        try:
            assert store.names() == ["good"]
            assert "bad" in store.broken
            with pytest.raises(StorageError, match="could not be loaded"):
                store.get("bad")
        finally:
            await store.close()

    async def test_a_bank_that_fails_to_close_leaves_the_others_closed_and_the_dir_free(
        self, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`Store.close` stopped at the first bank whose close raised: the banks after it were
        never closed and the data dir's lock stayed held, so a process that goes on (a server
        whose settings moved its data dir) kept every later opener out. Every bank is closed, the
        lock let go, and then the failure raised; nothing written is lost."""
        store = Store.open(data_dir, holder=HOLDER)
        saved: dict[str, str] = {}
        for name in ("a", "b", "c"):
            bank, _ = await store.ensure(name)
            memory = _memory(f"The user's {name} fact")
            await bank.commit([memory])
            saved[name] = memory.id
        closed: list[str] = []
        real_close = Bank.close

        def close(bank: Bank) -> None:
            closed.append(bank.name)
            if len(closed) == 1:  # the first bank closed, whichever it is
                raise StorageError("the disk refused")
            real_close(bank)

        monkeypatch.setattr(Bank, "close", close)
        with pytest.raises(StorageError, match="the disk refused"):
            await store.close()
        monkeypatch.undo()
        assert sorted(closed) == ["a", "b", "c"]
        reopened = Store.open(data_dir, holder=HOLDER)  # refused (`Conflict`) while still locked
        try:
            for name, memory_id in saved.items():
                assert reopened.get(name).get(memory_id) is not None
        finally:
            await reopened.close()


def test_a_rule_write_killed_before_its_rename_leaves_no_damage_at_the_next_load(
    tmp_path: Path,
) -> None:
    """A process killed inside a rule write leaves the write's temp file beside the rule (the
    rename never happened: the rule file is still the truth, the new text never acknowledged).
    It was reported as damage for good, so doctor's `files-intact` failed after any such kill
    (the SIGKILL campaign's test, now and then); the load removes it, as it does a log
    rewrite's. A dot file of another shape is still left for a person, and named."""
    rules = tmp_path / "main" / "rules"
    rules.mkdir(parents=True)
    (rules / "facts.md").write_text("Prefers tabs.\n")
    (rules / ".facts.md.0123abcd.tmp").write_text("Prefers spa")  # cut short, never renamed
    (rules / ".style.md.89abcdef.tmp").write_text("Use black.")  # a new rule's first write
    (rules / ".notes.tmp").write_text("not ours")
    bank = Bank.load("main", tmp_path / "main")
    assert [(rule.name, rule.content) for rule in bank.rules()] == [("facts", "Prefers tabs.\n")]
    assert sorted(p.name for p in rules.iterdir()) == [".notes.tmp", "facts.md"]
    assert [damage.file for damage in bank.damage] == ["rules/.notes.tmp"]
