"""Helpers for tests that run the worker as a subprocess."""

from __future__ import annotations

import os
import select
import subprocess
import time

__all__ = ["read_line"]


def read_line(proc: subprocess.Popen[bytes], deadline: float) -> str:
    """One stdout line (a readiness line), byte by byte so nothing after it is consumed; fails at
    the deadline or when the process exits first. Never a sleep: `select` wakes on output."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no readiness line before the deadline (got {line!r})")
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            raise AssertionError(f"the process exited before it was ready (got {line!r})")
        line += chunk
    return line.decode().strip()
