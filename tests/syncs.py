"""Recording what reaches the disk's order: each `os.fsync` (by the path its descriptor names)
and each `os.replace` (by its target), in the order they ran, for tests that a write is durable
before it is acknowledged (a kill cannot show a missing sync: the page cache survives it)."""

from __future__ import annotations

import os
from typing import Any

import pytest


def recorded_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """`("fsync", path)` and `("replace", target)` entries, appended as they happen."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_replace(src, dst, *args, **kwargs)
        events.append(("replace", os.fspath(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events
