"""`storage.logger`: a record below the configured level never reaches structlog (a one-shot
command that logs nothing never imports it); the first record at the level applies the
configuration once, before anything is written, whichever thread writes first."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import structlog

from memory_worker.storage import logger


def test_below_the_level_nothing_is_written_and_the_configuration_runs_once_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    applied: list[str] = []
    early: list[str] = []  # records that reached structlog before it was configured
    real = structlog.get_logger

    def checked(*args: Any, **kwargs: Any) -> Any:
        if not applied:
            early.append("early")
        return real(*args, **kwargs)

    monkeypatch.setattr(structlog, "get_logger", checked)

    def apply() -> None:
        time.sleep(0.05)  # a slow configuration: the other threads must wait for it
        applied.append("configured")

    logger.configure(30, apply)
    log = logger.get_logger("test")
    with structlog.testing.capture_logs() as logs:
        log.debug("quiet")
        log.info("quiet")
        assert applied == [] and logs == []
        writers = [
            threading.Thread(target=log.warning, args=("loud",), kwargs={"n": i}) for i in range(4)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        log.error("louder")
    assert applied == ["configured"] and early == []
    assert sorted(entry.get("n", -1) for entry in logs) == [-1, 0, 1, 2, 3]
    assert {entry["log_level"] for entry in logs} == {"warning", "error"}


def test_unconfigured_every_record_goes_to_structlog() -> None:
    log = logger.get_logger("test")
    with structlog.testing.capture_logs() as logs:
        log.debug("everything", k=1)
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("everything", "debug"),
        ("failed", "error"),
    ]
    assert logs[1].get("exc_info") is True
