"""A standalone server run as the real CLI in a subprocess, for tests that need one: started
with a deadline on its readiness line (never a sleep), always killed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .processes import read_line

__all__ = ["ENV", "Served", "cli", "serving"]

START_TIMEOUT_S = 60.0  # a cold interpreter on a loaded 2-core machine
EXIT_TIMEOUT_S = 10.0
_ISOLATED = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL", "MEMORY_TOKEN")
ENV = {k: v for k, v in os.environ.items() if k not in _ISOLATED} | {"MEMORY_EMBEDDER": "none"}


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    data_dir: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "memory_worker", *args]


@contextmanager
def serving(data_dir: Path, stderr_path: Path, *extra: str) -> Iterator[Served]:
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            cli("serve", "--standalone", "--port", "0", "--data-dir", str(data_dir), *extra),
            stdout=subprocess.PIPE,
            stderr=err,
            env=ENV,
            bufsize=0,
        )
    try:
        try:
            line = read_line(proc, time.monotonic() + START_TIMEOUT_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr: {stderr_path.read_text()}") from None
        prefix = "memory-worker serving on "
        assert line.startswith(prefix), line
        yield Served(proc, line.removeprefix(prefix), data_dir, stderr_path)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=EXIT_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()
