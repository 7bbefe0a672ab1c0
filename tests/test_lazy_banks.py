"""Lazy banks: a one-shot CLI call replays only the bank it names, and `memory::bank::list` reads
the derived counts file instead of replaying, without that file ever changing an answer."""

from __future__ import annotations

import asyncio
import errno
import json
import shutil
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, StorageError
from memory_worker.storage import store as store_module
from memory_worker.storage.bank import MEMORIES_FILE, Bank
from memory_worker.storage.counts import COUNTS_FILE
from memory_worker.storage.store import Store

HOLDER: dict[str, object] = {"pid": 0, "kind": "test"}
HUMAN = Caller.human("cli")


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the banks replayed (`Bank.load`) while the test runs."""
    seen: list[str] = []
    real = Bank.load

    def spy(name: str, path: Path, *args: Any, **kwargs: Any) -> Bank:
        seen.append(name)
        return real(name, path, *args, **kwargs)

    monkeypatch.setattr(Bank, "load", spy)
    yield seen


def trigger(capsys: pytest.CaptureFixture[str], data_dir: Path, function: str, *pairs: str) -> Any:
    capsys.readouterr()
    code = cli.main(["trigger", function, "--data-dir", str(data_dir), *pairs])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def seed(data_dir: Path, banks: dict[str, list[str]]) -> None:
    """Banks of memories written through the service, as a server leaves them; the first memory
    of each bank is pinned."""

    async def write() -> None:
        store = Store.open(data_dir, holder=HOLDER)
        service = MemoryService(store, Settings())
        for name, texts in banks.items():
            for text in texts:
                saved = await call(service, "memory::save", {"bank": name, "text": text}, HUMAN)
                if text == texts[0]:
                    pin = {"bank": name, "id": saved["memory"]["id"], "pinned": True}
                    await call(service, "memory::pin", pin, HUMAN)
        await service.close()
        await store.close()

    asyncio.run(write())


def listed(capsys: pytest.CaptureFixture[str], data_dir: Path) -> dict[str, dict[str, Any]]:
    banks = trigger(capsys, data_dir, "memory::bank::list")["banks"]
    return {b["name"]: b for b in banks}


def test_a_one_shot_save_replays_only_the_bank_it_writes_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[str]
) -> None:
    seed(tmp_path, {"alpha": ["Ana lives in Lisbon"], "beta": ["Rui plays chess"]})
    beta_log = tmp_path / "beta" / MEMORIES_FILE
    beta_log.write_bytes(beta_log.read_bytes() + b'{"torn": \n')  # damage only a replay reports
    damaged = beta_log.read_bytes()
    loads.clear()

    saved = trigger(capsys, tmp_path, "memory::save", "bank=alpha", "text=Ana lives in Lisbon")

    assert saved["created"] is False  # the bank's existing memory was found: it was replayed
    assert saved["memory"]["corroboration"] == 1
    assert loads == ["alpha"]
    assert beta_log.read_bytes() == damaged


def test_bank_list_reads_counts_without_replaying_and_matches_a_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[str]
) -> None:
    seed(tmp_path, {"alpha": ["one fact", "two facts", "three facts"], "beta": ["a note"]})
    about_ana = {"bank": "alpha", "text": "Ana takes the night train", "subject": "ana"}
    configure = {"name": "alpha", "subject_scoping": True, "max_memories": 50}
    store = Store.open(tmp_path, holder=HOLDER)
    service = MemoryService(store, Settings())
    asyncio.run(call(service, "memory::save", about_ana, HUMAN))
    asyncio.run(call(service, "memory::bank::configure", configure, HUMAN))
    asyncio.run(service.close())
    asyncio.run(store.close())
    loads.clear()

    quick = listed(capsys, tmp_path)

    assert loads == []
    assert quick["alpha"]["memories"] == 4 and quick["alpha"]["pinned"] == 1
    assert quick["alpha"]["subjects"] == 1  # from the counts file, as a replay counts them
    assert quick["alpha"]["settings"]["subject_scoping"] is True  # from bank.yaml
    assert quick["beta"]["memories"] == 1 and quick["beta"]["rules"] == 0
    # What an eager store (a server) answers, replaying everything:
    store = Store.open(tmp_path, holder=HOLDER)
    full = asyncio.run(call(MemoryService(store, Settings()), "memory::bank::list", {}, HUMAN))
    asyncio.run(store.close())
    assert {b["name"]: b for b in full["banks"]} == quick


@pytest.mark.parametrize("damage", ["deleted", "garbage", "lies about another log"])
def test_a_missing_or_damaged_counts_file_changes_nothing_but_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[str], damage: str
) -> None:
    seed(tmp_path, {"alpha": ["one fact", "two facts"], "beta": ["a note"]})
    before = listed(capsys, tmp_path)
    counts = tmp_path / "alpha" / COUNTS_FILE
    if damage == "deleted":
        counts.unlink()
    elif damage == "garbage":
        counts.write_bytes(b"\x00{not json")
    else:  # the right shape, for a log that is not this one any more
        data = json.loads(counts.read_bytes())
        data["log"][1] += 1
        data["live"] = 99
        counts.write_text(json.dumps(data))
    loads.clear()

    assert listed(capsys, tmp_path) == before
    assert loads == ["alpha"]  # the one bank whose counts could not be believed was replayed
    assert json.loads(counts.read_bytes())["live"] == 2  # and its counts written afresh


def test_a_hand_edited_log_is_counted_from_the_log_not_the_stale_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(tmp_path, {"alpha": ["one fact", "two facts"]})
    assert listed(capsys, tmp_path)["alpha"]["memories"] == 2
    log = tmp_path / "alpha" / MEMORIES_FILE
    first = json.loads(log.read_bytes().splitlines()[0])
    first.pop("crc")  # a line edited by hand drops its checksum
    first.update(id="fphandwritten0001", text="a third fact, typed by hand", revision=0)
    with log.open("ab") as fh:
        fh.write(json.dumps(first).encode() + b"\n")

    assert listed(capsys, tmp_path)["alpha"]["memories"] == 3


def test_the_doctor_of_a_one_shot_store_checks_banks_it_was_not_asked_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(tmp_path, {"alpha": ["one fact"], "beta": ["a note"]})
    beta_log = tmp_path / "beta" / MEMORIES_FILE
    beta_log.write_bytes(beta_log.read_bytes() + b"not json at all\n")

    capsys.readouterr()
    cli.main(["trigger", "memory::doctor", "--data-dir", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)

    intact = next(c for c in report["checks"] if c["name"] == "files-intact")
    assert intact["ok"] is False and "beta" in intact["detail"]


def test_a_counts_file_planted_as_a_link_is_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    seed(data_dir, {"alpha": ["one fact", "two facts"]})
    counts = data_dir / "alpha" / COUNTS_FILE
    forged = json.loads(counts.read_bytes())
    forged["live"] = 99  # the right stamp, a lie about the count, outside the data dir
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(forged))
    counts.unlink()
    counts.symlink_to(elsewhere)

    assert listed(capsys, data_dir)["alpha"]["memories"] == 2


def test_max_banks_counts_the_banks_a_one_shot_store_has_not_replayed(tmp_path: Path) -> None:
    seed(tmp_path, {"alpha": ["one fact"], "beta": ["a note"]})

    async def create() -> Any:
        store = Store.open(tmp_path, holder=HOLDER, lazy=True)
        service = MemoryService(store, Settings(max_banks=2))
        try:
            payload = {"bank": "gamma", "text": "a third bank"}
            return await call(service, "memory::save", payload, HUMAN)
        finally:
            await service.close()
            await store.close()

    with pytest.raises(Conflict, match="already holds 2 banks"):
        asyncio.run(create())
    assert not (tmp_path / "gamma").exists()


def test_bank_list_after_a_crash_mid_erasure_counts_what_the_bank_holds(tmp_path: Path) -> None:
    """An erasure whose intent is on disk finishes at the bank's load: the counts file, written
    before it, is not believed meanwhile."""
    from memory_worker.storage import erasure

    async def seed_subjects() -> None:
        store = Store.open(tmp_path, holder=HOLDER)
        service = MemoryService(store, Settings())
        try:
            create = {"name": "main", "subject_scoping": True}
            await call(service, "memory::bank::create", create, HUMAN)
            for n in range(3):
                save = {"bank": "main", "text": f"Ana fact {n}.", "subject": "ana"}
                await call(service, "memory::save", save, HUMAN)
            await call(service, "memory::save", {"bank": "main", "text": "The door code."}, HUMAN)
        finally:
            await store.close()

    asyncio.run(seed_subjects())
    erasure.write_intent(tmp_path / "main", "ana")  # forget's first step, then the process died

    async def one_shot() -> tuple[int, int]:
        store = Store.open(tmp_path, holder=HOLDER, lazy=True, short_lived=True)
        service = MemoryService(store, Settings())
        try:
            listed = (await call(service, "memory::bank::list", {}, HUMAN))["banks"][0]
            held = (await call(service, "memory::list", {"bank": "main"}, HUMAN))["memories"]
            return listed["memories"], len(held)
        finally:
            await store.close()

    assert asyncio.run(one_shot()) == (1, 1)


class TestReplayInAThread:
    """`Store.replay`, a server's background boot: the replay runs in a worker thread and the
    loop installs it; a call naming the bank meanwhile waits for that replay, never a second."""

    @pytest.fixture
    def threads(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
        """(bank, thread id) of every `Bank.load` while the test runs."""
        seen: list[tuple[str, int]] = []
        real = Bank.load

        def spy(name: str, path: Path, *args: Any, **kwargs: Any) -> Bank:
            seen.append((name, threading.get_ident()))
            return real(name, path, *args, **kwargs)

        monkeypatch.setattr(Bank, "load", spy)
        yield seen

    def test_a_replay_runs_off_the_loop_and_a_call_meanwhile_shares_it(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        seed(tmp_path, {"alpha": ["a one", "a two"], "bravo": ["b one"]})

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            try:
                replaying = asyncio.create_task(store.replay("alpha"))
                await asyncio.sleep(0)  # the replay has been handed to its thread
                found = store.find("alpha")  # waits for that replay, whenever it ends
                assert found is not None and await replaying is found
                assert threads == [("alpha", threads[0][1])]
                assert threads[0][1] != threading.get_ident()
                assert store.pending() == ["bravo"]
                assert await store.replay("alpha") is found  # replayed once, kept
            finally:
                await store.close()

        asyncio.run(scenario())

    def test_replaying_all_of_them_runs_each_off_the_loop_and_keeps_the_loaded_ones(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"], "charlie": ["c one"]})

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            try:
                bravo = store.find("bravo")  # a call named it: replayed on the loop
                await store.replay_all()  # what the doctor does first
                assert store.pending() == [] and store.find("bravo") is bravo
                loop = threading.get_ident()
                assert [(name, tid == loop) for name, tid in threads] == [
                    ("bravo", True),
                    ("alpha", False),
                    ("charlie", False),
                ]
            finally:
                await store.close()

        asyncio.run(scenario())

    def test_a_call_or_a_turn_naming_a_bank_not_replayed_yet_replays_it_off_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"], "main": ["m one"]})

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            service = MemoryService(store, Settings())
            try:
                listed = await call(service, "memory::list", {"bank": "alpha"}, HUMAN)
                assert [m["text"] for m in listed["memories"]] == ["a one"]
                plan = await service.injection("bravo", "one")  # a hook's turn
                assert [hit.memory.text for hit in plan.memories] == ["b one"]
                await call(service, "memory::list", {}, HUMAN)  # the default bank, `main`
                loop = threading.get_ident()
                assert [(name, tid != loop) for name, tid in threads] == [
                    ("alpha", True),
                    ("bravo", True),
                    ("main", True),
                ]
                assert store.pending() == []
            finally:
                await service.close()
                await store.close()

        asyncio.run(scenario())

    def test_closing_the_store_mid_replay_installs_and_closes_that_bank(
        self, tmp_path: Path, threads: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"]})
        closed: list[str] = []
        real_close = Bank.close

        def spy_close(bank: Bank) -> None:
            closed.append(bank.name)
            real_close(bank)

        monkeypatch.setattr(Bank, "close", spy_close)

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            replaying = asyncio.create_task(store.replay("alpha"))
            await asyncio.sleep(0)
            replaying.cancel()  # the boot is cancelled; its thread's replay still lands
            await store.close()
            assert [name for name, _ in threads] == ["alpha"] and closed == ["alpha"]
            await Store.open(tmp_path, holder=HOLDER).close()  # the lock was released

        asyncio.run(scenario())

    def test_a_replay_that_ran_out_of_descriptors_is_retried_by_the_next_call(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"]})
        self.out_of_descriptors_once(monkeypatch, [])

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            try:
                with pytest.raises(StorageError, match="Too many open files"):
                    await store.replay("alpha")
                assert store.pending() == ["alpha"] and "alpha" not in store.broken
                bank = store.find("alpha")
                assert bank is not None and bank.live_count() == 1
            finally:
                await store.close()

        asyncio.run(scenario())

    def test_a_second_waiter_on_a_replay_that_failed_gets_its_error_not_a_replay_on_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"]})
        threads.clear()
        self.out_of_descriptors_once(monkeypatch, threads)

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            try:
                # The boot's replay and a call's, waiting on the same thread's replay.
                outcomes = await asyncio.gather(
                    store.replay("alpha"), store.replay("alpha"), return_exceptions=True
                )
                assert [type(o) for o in outcomes] == [StorageError, StorageError]
                loop = threading.get_ident()
                assert [(name, tid != loop) for name, tid in threads] == [("alpha", True)]
                assert store.pending() == ["alpha"]  # left for the next call, as one waiter
            finally:
                await store.close()

        asyncio.run(scenario())

    @staticmethod
    def out_of_descriptors_once(
        monkeypatch: pytest.MonkeyPatch, threads: list[tuple[str, int]]
    ) -> None:
        """The next `Bank.load` fails as a process out of file descriptors does; every load is
        recorded in `threads` as (bank, thread id)."""
        real = Bank.load
        failures = [OSError(errno.EMFILE, "Too many open files")]

        def flaky(name: str, path: Path, *args: Any, **kwargs: Any) -> Bank:
            threads.append((name, threading.get_ident()))
            if failures:
                raise failures.pop()
            return real(name, path, *args, **kwargs)

        monkeypatch.setattr(Bank, "load", flaky)

    @staticmethod
    def lazily(
        data_dir: Path, work: Callable[[MemoryService], Awaitable[None]], **options: Any
    ) -> None:
        """Run `work` on a service over `data_dir` opened lazily, as a server does."""

        async def scenario() -> None:
            store = Store.open(data_dir, holder=HOLDER, lazy=True)
            service = MemoryService(store, Settings(), **options)
            try:
                await work(service)
            finally:
                await service.close()
                await store.close()

        asyncio.run(scenario())

    @staticmethod
    def off_the_loop(threads: list[tuple[str, int]]) -> list[tuple[str, bool]]:
        """Each replay so far: the bank, and whether a thread other than the loop's ran it."""
        loop = threading.get_ident()
        return [(name, tid != loop) for name, tid in threads]

    def test_the_bank_functions_replay_the_bank_they_name_off_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"]})
        threads.clear()

        async def work(service: MemoryService) -> None:
            shown = await call(service, "memory::bank::get", {"name": "alpha"}, HUMAN)
            assert shown["bank"]["memories"] == 1
            await call(service, "memory::bank::delete", {"name": "bravo"}, HUMAN)
            assert self.off_the_loop(threads) == [("alpha", True), ("bravo", True)]

        self.lazily(tmp_path, work)

    def test_a_hook_turn_resolving_its_bank_replays_it_off_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        from .test_pregenerate import Hooked

        seed(tmp_path, {"main": ["Ana lives in Lisbon"]})
        threads.clear()

        async def work(service: MemoryService) -> None:
            assert await Hooked(service).step("s1", "where does Ana live?") is not None
            assert self.off_the_loop(threads) == [("main", True)]

        self.lazily(tmp_path, work)

    def test_listing_a_bank_whose_counts_are_stale_replays_it_off_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"]})
        (tmp_path / "alpha" / COUNTS_FILE).unlink()  # as a crash leaves it
        threads.clear()

        async def work(service: MemoryService) -> None:
            listed = await call(service, "memory::bank::list", {}, HUMAN)
            counted = [(b["name"], b["memories"]) for b in listed["banks"]]
            assert counted == [("alpha", 1), ("bravo", 1)]
            assert self.off_the_loop(threads) == [("alpha", True)]

        self.lazily(tmp_path, work)

    def test_turning_embeddings_on_replays_nothing_and_boot_embeds_the_rest(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        from .fakes import FakeEmbedder

        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"]})
        threads.clear()

        async def work(service: MemoryService) -> None:
            assert await service.store.replay("alpha") is not None
            service.embedding_changed(turned_on=True)
            assert service.store.pending() == ["bravo"]  # not replayed on the loop for this
            await service.boot_banks()
            await service.settle()
            assert self.off_the_loop(threads) == [("alpha", True), ("bravo", True)]
            assert service.embedding_progress() == []  # both fully embedded

        self.lazily(tmp_path, work, embedder=FakeEmbedder())

    def test_the_data_dir_watcher_replays_a_bank_edited_before_its_replay_off_the_loop(
        self, tmp_path: Path, threads: list[tuple[str, int]]
    ) -> None:
        from memory_worker.adapters import watch

        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"]})
        threads.clear()

        async def work(service: MemoryService) -> None:
            # A hand edit of each during the server's boot, before the boot reached them.
            assert not await watch._needs_reload(service.store, "alpha")  # files are the truth
            assert await service.store.reload_bank("bravo") == "reloaded"
            assert self.off_the_loop(threads) == [("alpha", True), ("bravo", True)]

        self.lazily(tmp_path, work)


class TestReplayDuringAReload:
    """`memory::reload` reads the whole data dir again and replaces every bank: a bank not
    replayed yet is not replayed on its own meanwhile, or it would land in the map being
    replaced (a write into it acknowledged, then missing from the bank the reload installs).
    A call naming it waits for the reload and works on the bank the reload made."""

    @staticmethod
    def pause(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
        """(read, go): from now on, a reload's read of the data dir, once done, waits for `go`."""
        read, go = threading.Event(), threading.Event()
        real = store_module._load_all

        def paused_load_all(*args: Any) -> Any:
            loaded = real(*args)
            read.set()
            go.wait(30)
            return loaded

        monkeypatch.setattr(store_module, "_load_all", paused_load_all)
        return read, go

    def test_a_write_into_a_bank_not_replayed_yet_waits_for_the_reload_and_is_kept(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one", "b two"]})
        lines = (tmp_path / "bravo" / MEMORIES_FILE).read_text().splitlines()
        victim = next(json.loads(line)["id"] for line in lines if '"b two"' in line)
        read, go = self.pause(monkeypatch)

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            service = MemoryService(store, Settings())
            delete = {"bank": "bravo", "id": victim}
            try:
                reloading = asyncio.create_task(call(service, "memory::reload", {}, HUMAN))
                await asyncio.to_thread(read.wait, 30)
                deleting = asyncio.create_task(call(service, "memory::delete", delete, HUMAN))
                go.set()
                await reloading
                assert await deleting
                listed = await call(service, "memory::list", {"bank": "bravo"}, HUMAN)
                assert [m["text"] for m in listed["memories"]] == ["b one"]
            finally:
                go.set()
                await service.close()
                await store.close()

        asyncio.run(scenario())

    def test_a_replay_asked_meanwhile_gets_the_reloaded_bank_the_one_closed_at_the_end(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seed(tmp_path, {"alpha": ["a one"], "bravo": ["b one"]})
        read, go = self.pause(monkeypatch)
        closed: list[Bank] = []
        real_close = Bank.close

        def spy_close(bank: Bank) -> None:
            closed.append(bank)
            real_close(bank)

        monkeypatch.setattr(Bank, "close", spy_close)

        async def scenario() -> None:
            store = Store.open(tmp_path, holder=HOLDER, lazy=True)
            try:
                reloading = asyncio.create_task(store.reload())
                await asyncio.to_thread(read.wait, 30)
                replaying = asyncio.create_task(store.replay("bravo"))
                with pytest.raises(StorageError, match="reloading; retry"):
                    store.find("bravo")  # what cannot wait is told to retry
                go.set()
                await reloading
                served = store.get("bravo")
                assert await replaying is served
            finally:
                go.set()
                await store.close()
            assert [bank for bank in closed if bank.name == "bravo"] == [served]

        asyncio.run(scenario())


def test_a_bank_folder_removed_before_its_first_replay_is_no_bank(tmp_path: Path) -> None:
    # A lazy store (every server until its background replay is done, every one-shot command)
    # lists the folders at open; one removed by hand after that is gone, not an empty bank into
    # which every write fails, and a save makes it again.
    seed(tmp_path, {"alpha": ["one fact"], "beta": ["a note"], "gamma": ["more"]})

    async def work() -> Any:
        store = Store.open(tmp_path, holder=HOLDER, lazy=True)
        service = MemoryService(store, Settings())
        try:
            for folder in ("alpha", "beta", "gamma"):
                shutil.rmtree(tmp_path / folder)
            assert await store.reload_bank("gamma") == "removed"  # the watcher's question
            banks = await call(service, "memory::bank::list", {}, HUMAN)
            assert banks["banks"] == []
            payload = {"bank": "alpha", "text": "a new fact"}
            saved = await call(service, "memory::save", payload, HUMAN)
            assert saved["created"] is True
            return await call(service, "memory::bank::list", {}, HUMAN)
        finally:
            await service.close()
            await store.close()

    banks = asyncio.run(work())["banks"]
    assert [(b["name"], b["memories"]) for b in banks] == [("alpha", 1)]


def test_a_counts_file_that_counted_spellings_apart_is_replayed_not_believed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A subject is one person in any case: the counts a version-2 file kept named "Ana" and
    "ana" as two subjects, and a listing must not repeat that once the bank counts them as one."""

    async def write() -> None:
        store = Store.open(tmp_path, holder=HOLDER)
        service = MemoryService(store, Settings())
        for text, subject in (("Likes tea.", "Ana"), ("Plays cello.", "ana")):
            payload = {"bank": "alpha", "text": text, "subject": subject}
            await call(service, "memory::save", payload, HUMAN)
        await service.close()
        await store.close()

    asyncio.run(write())
    counts = tmp_path / "alpha" / COUNTS_FILE
    old = json.loads(counts.read_bytes())
    old.update(version=2, subjects=2)  # what the version that compared by case wrote
    counts.write_text(json.dumps(old))
    assert listed(capsys, tmp_path)["alpha"]["subjects"] == 1


def test_a_bank_listed_from_its_counts_leaves_out_what_passed_its_ttl_since(
    tmp_path: Path, loads: list[str]
) -> None:
    """The counts file was written before a memory's TTL ran out: believed, a listing counted
    the expired memory (and its subject) until something replayed the bank. A bank without
    retention, or whose memories are all within their TTL, is still listed without a replay."""
    from .fakes import FixedClock

    clock = FixedClock()
    plans: dict[str, dict[str, Any]] = {
        "decaying": {"retention": {"context": 1}},  # its context memory expires
        "fresh": {"retention": {"context": 30}},  # nothing of it expires in 2 days
        "plain": {},  # no retention: never replayed to be listed
    }

    async def write() -> None:
        store = Store.open(tmp_path, holder=HOLDER)
        service = MemoryService(store, Settings(), clock=clock)
        for name, settings in plans.items():
            await call(service, "memory::bank::create", {"name": name, **settings}, HUMAN)
            for text, extra in (
                ("Ana is debugging the parser today.", {"category": "context", "subject": "Ana"}),
                ("Rui wrote the parser in Rust.", {"category": "fact", "subject": "Rui"}),
            ):
                payload = {"bank": name, "text": text, **extra}
                await call(service, "memory::save", payload, HUMAN)
        await service.close()
        await store.close()

    async def listing() -> dict[str, tuple[int, int]]:
        store = Store.open(tmp_path, holder=HOLDER, lazy=True)
        try:
            service = MemoryService(store, Settings(), clock=clock)
            banks = (await call(service, "memory::bank::list", {}, HUMAN))["banks"]
        finally:
            await store.close()
        return {b["name"]: (b["memories"], b["subjects"]) for b in banks}

    asyncio.run(write())
    loads.clear()
    assert asyncio.run(listing()) == {"decaying": (2, 2), "fresh": (2, 2), "plain": (2, 2)}
    assert loads == []
    clock.advance_days(2)
    assert asyncio.run(listing()) == {"decaying": (1, 1), "fresh": (2, 2), "plain": (2, 2)}
    assert loads == ["decaying"]
