"""A boot pauses the cyclic garbage collector while it builds a bank's records and index
(`storage.log.collector_paused`): it must come back on exactly as it was, when the last of
several overlapping boots ends, and after a boot that failed."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from memory_worker.storage.log import collector_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
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
