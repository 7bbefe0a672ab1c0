"""A boot pauses the cyclic garbage collector while it builds a bank's records and index
(`storage.boot.booting`): it must come back on exactly as it was, when the last of several
overlapping boots ends, and after a boot that failed; then what the process holds is frozen out of
the collector's passes until a bank leaves RAM, and the freed heap goes back to the OS."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.storage import bank as bank_module
from memory_worker.storage import boot
from memory_worker.storage.boot import booting as collector_paused
from memory_worker.storage.snapshot import RECORDS_FILE
from memory_worker.storage.store import Store

from .conftest import HOLDER


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_inside_and_back_on_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # a bank loading inside another's load
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer boot is still building
    assert gc.isenabled()


def test_a_failed_boot_turns_it_back_on() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("replay failed")
    assert gc.isenabled()


def test_a_collector_someone_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_overlapping_boots_on_two_threads_leave_it_on_once_both_end() -> None:
    inside, release = threading.Barrier(2), threading.Event()

    def boot() -> None:
        with collector_paused():
            inside.wait()
            release.wait()

    other = threading.Thread(target=boot)
    other.start()
    with collector_paused():
        inside.wait()
    assert not gc.isenabled()  # the other thread's boot is still building
    release.set()
    other.join()
    assert gc.isenabled()


def test_freed_memory_goes_back_once_the_last_boot_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[None] = []
    monkeypatch.setattr(boot, "return_freed_memory", lambda: calls.append(None) or True)
    with collector_paused():
        with collector_paused():
            pass
        assert not calls  # the outer boot's temporaries are still in use
    assert len(calls) == 1


def test_glibc_hands_freed_memory_back() -> None:
    import platform

    returned = boot.return_freed_memory()
    assert returned == (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")


def test_a_boot_that_does_not_ask_hands_nothing_back_unless_an_overlapping_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[None] = []
    monkeypatch.setattr(boot, "return_freed_memory", lambda: calls.append(None) or True)
    with collector_paused(hand_back=False):
        pass
    assert not calls
    with collector_paused(hand_back=False), collector_paused():
        pass
    assert len(calls) == 1


def test_a_one_shot_cli_save_hands_no_heap_back_a_store_that_stays_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one-shot process exits right after its command: glibc's malloc_trim (~10 ms at 10k
    # memories) would return memory the exit returns anyway. A store that stays open trims.
    calls: list[None] = []
    monkeypatch.setattr(boot, "return_freed_memory", lambda: calls.append(None) or True)
    data = tmp_path / "data"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["trigger", "memory::save", "--data-dir", str(data), "text=tea"]) == 0
        assert cli.main(["trigger", "memory::save", "--data-dir", str(data), "text=tea"]) == 0
    assert not calls  # the second replayed bank `main`, without trimming

    store = Store.open(data, holder=HOLDER, lazy=True)
    try:
        assert store.find("main") is not None
    finally:
        asyncio.run(store.close())
    assert len(calls) == 1


@pytest.mark.parametrize("with_records", [True, False])
def test_a_short_lived_boot_loads_the_same_records_without_compacting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_records: bool
) -> None:
    # Compacting records for RAM (`log.shared_fields`) pays off over a server's life, not a
    # one-shot process's: its boot keeps them as validated, equal record for record.
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)
    data = tmp_path / "data"
    with contextlib.redirect_stdout(io.StringIO()):
        for text in ("tea at five", "coffee at six", "Ana lives in Porto", "tea at five"):
            assert (
                cli.main(["trigger", "memory::save", "--data-dir", str(data), f"text={text}"]) == 0
            )
    if not with_records:
        (data / "main" / RECORDS_FILE).unlink()
    sets: dict[bool, int] = {}  # distinct field-set objects among the records, per kind of boot

    def load(short_lived: bool) -> list[Any]:
        store = Store.open(data, holder=HOLDER, lazy=True, short_lived=short_lived)
        try:
            bank = store.find("main")
            assert bank is not None
            records = list(bank.memories.values())
            sets[short_lived] = len({id(m.__pydantic_fields_set__) for m in records})
            return [(m.to_line(), m.model_dump(), m.model_fields_set) for m in records]
        finally:
            asyncio.run(store.close())

    short = load(True)
    assert short == load(False) and len(short) == 3
    # Validated records each hold their own set; compacted ones share one per shape (these three
    # were given the same fields), whichever way the boot validated them.
    assert sets[True] == 3 and sets[False] < 3


def test_what_a_boot_leaves_is_frozen_until_a_bank_leaves_ram(tmp_path: Path) -> None:
    # The boot's records, left young, were walked by the collector's next passes (a 62 ms pass
    # in the first recall after a 100k boot, a ~300 ms full pass later): frozen, they are not.
    data = tmp_path / "data"
    with contextlib.redirect_stdout(io.StringIO()):
        for text in ("tea at five", "coffee at six"):
            assert (
                cli.main(["trigger", "memory::save", "--data-dir", str(data), f"text={text}"]) == 0
            )
    assert gc.get_freeze_count() == 0  # the command's store closed: its bank left RAM
    store = Store.open(data, holder=HOLDER, lazy=True)
    try:
        bank = store.find("main")
        assert bank is not None
        assert gc.is_tracked(bank) and gc.get_freeze_count() > 1_000
    finally:
        asyncio.run(store.close())
    assert gc.get_freeze_count() == 0


def test_a_bank_that_left_ram_is_collected_though_its_boot_froze_it(tmp_path: Path) -> None:
    # A bank's object graph holds cycles, which only a collector pass frees: frozen for good,
    # every reload of a bank would leak the old one.
    data = tmp_path / "data"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["trigger", "memory::save", "--data-dir", str(data), "text=tea"]) == 0
    store = Store.open(data, holder=HOLDER, lazy=True)
    try:
        bank = store.find("main")
        assert bank is not None
        old = weakref.ref(bank)
        del bank
        assert asyncio.run(store.reload_bank("main", force=True)) == "reloaded"
        gc.collect()
        assert old() is None
        assert store.find("main") is not None  # the fresh one, booted and frozen in its place
    finally:
        asyncio.run(store.close())


def test_a_failed_boot_freezes_nothing() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("replay failed")
    assert gc.get_freeze_count() == 0
    with collector_paused():
        pass
    assert gc.get_freeze_count() > 0
