"""Holding the store's blocking steps mid-way, for tests of what happens meanwhile: each returns
(entered, release) — `entered` is set once the step runs, which then waits for `release` (30 s
at most, so a failing test cannot hang the suite)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from memory_worker.storage import bank as bank_module
from memory_worker.storage import files
from memory_worker.storage.bank import Bank

HOLD_S = 30.0

Hold = tuple[threading.Event, threading.Event]


def hold_bank_loads(monkeypatch: pytest.MonkeyPatch) -> Hold:
    """Every `Bank.load` (a reload's replay, in its worker thread) waits for `release`."""
    entered, release = threading.Event(), threading.Event()
    real_load = Bank.load.__func__  # type: ignore[attr-defined]

    def held_load(cls: type[Bank], *args: Any, **kwargs: Any) -> Bank:
        entered.set()
        release.wait(HOLD_S)
        return real_load(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Bank, "load", classmethod(held_load))
    return entered, release


def hold_log_syncs(monkeypatch: pytest.MonkeyPatch, bank: Bank) -> Hold:
    """`bank`'s log fsyncs run in their thread (never inline) and wait for `release`: a commit
    stays in flight until then."""
    entered, release = threading.Event(), threading.Event()
    real_sync = bank._log.sync

    def held_sync() -> int:
        entered.set()
        release.wait(HOLD_S)
        return real_sync()

    monkeypatch.setattr(bank_module, "INLINE_SYNC_S", 0.0)  # the fsync in its thread
    monkeypatch.setattr(bank._log, "sync", held_sync)
    return entered, release


def hold_every_log_sync(monkeypatch: pytest.MonkeyPatch) -> Hold:
    """Every log's fsync (`AppendLog.sync`, whichever bank's log, however often it is opened
    again) waits for `release`."""
    entered, release = threading.Event(), threading.Event()
    real_sync = files.AppendLog.sync

    def held_sync(log: files.AppendLog) -> int:
        entered.set()
        release.wait(HOLD_S)
        return real_sync(log)

    monkeypatch.setattr(files.AppendLog, "sync", held_sync)
    return entered, release
