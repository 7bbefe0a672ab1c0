"""Wire-tier fixtures: the engine double, and the REAL worker (`memory-worker serve --engine`) as a
subprocess on the real `iii-sdk` client.

Readiness is never a sleep: the worker prints `memory-worker connected to URL` once its
registrations are sent, and the engine double is then asked to wait for the configuration binding,
the last thing the worker binds (one socket, in order: everything before it has arrived).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..processes import read_line
from .engine_double import EngineDouble
from .siblings import TurnSiblings

START_TIMEOUT_S = 120.0  # a cold interpreter: ~2 s alone, over 60 s seen at load 28 on 2 cores
EXIT_TIMEOUT_S = 30.0  # a graceful stop flushes to siblings and closes the SDK: seconds under load
READY_PREFIX = "memory-worker connected to "
_ISOLATED = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL", "III_CONFIG_NAME")


@pytest.fixture(autouse=True)
def _sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """OTel off (no /otel socket, no global providers); SDK process markers under tmp."""
    monkeypatch.setenv("OTEL_ENABLED", "false")
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("III_WORKER_NAME", "III_NAMESPACE", "III_TOKEN", "III_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(name="engine")
def _engine() -> Iterator[EngineDouble]:
    double = EngineDouble().start()
    try:
        yield double
    finally:
        double.close()
    assert double.errors == []  # nothing went wrong inside the double itself


class WorkerProcess:
    """One `memory-worker serve --engine` process; `restart()` keeps its data dir and env."""

    def __init__(
        self,
        engine: EngineDouble,
        data_dir: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        data_dir_flag: bool = True,
    ) -> None:
        """`data_dir_flag=False`: no `--data-dir`, so the configuration's `data_dir` decides
        (relative to `$III_COMPOSE_DIR`, which the caller sets in `env`)."""
        self.engine = engine
        self.data_dir_flag = data_dir_flag
        self.data_dir = data_dir
        self.log_path = log_path
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
        self.env.update({"OTEL_ENABLED": "false", "MEMORY_EMBEDDER": "router", **(env or {})})
        self.env.setdefault("HOME", str(log_path.parent))  # the SDK leaves `iii ps` markers there
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        self.proc = self._popen()
        self.starts += 1
        try:
            line = read_line(self.proc, time.monotonic() + START_TIMEOUT_S)
            assert line.startswith(READY_PREFIX), line
            self.engine.wait_binding(
                "configuration", "memory::on-config-change", timeout=START_TIMEOUT_S
            )
            # The binding count is per registration; after a restart wait for this process's.
            self.engine.wait_function(
                "memory::save", min_count=self.starts, timeout=START_TIMEOUT_S
            )
            # Bindings to a sibling's trigger type reach that sibling after the engine has them:
            # a test that fires one (a hook, a session deletion) at once found nobody bound.
            self.engine.wait_settled(timeout=START_TIMEOUT_S)
        except BaseException as exc:
            self.kill()
            raise AssertionError(
                f"worker did not start ({exc!r}); engine errors: {self.engine.errors}; "
                f"log:\n{self.log()}"
            ) from None
        return self

    def run_to_exit(self, timeout: float = START_TIMEOUT_S) -> tuple[int, str]:
        """Start a worker that is expected to stop on its own (refused, say): its exit status
        and stdout. Waits for the process itself, never a fixed time."""
        self.proc = self._popen()
        try:
            out, _ = self.proc.communicate(timeout=timeout)
            return self.proc.returncode, out.decode(errors="replace")
        finally:
            self.kill()

    def _popen(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "memory_worker",
            "serve",
            "--engine",
            self.engine.url,
            *(("--data-dir", str(self.data_dir)) if self.data_dir_flag else ()),
            "--log-level",
            "debug",
            *self.args,
        ]
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, env=self.env, bufsize=0
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == name:
                    out.append(event)
        return out

    def stop(self, sig: int = signal.SIGTERM) -> int:
        proc = self.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=EXIT_TIMEOUT_S)
        finally:
            self.kill()
        return code

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=EXIT_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()

    def restart(self) -> WorkerProcess:
        self.stop()
        return self.start()


@pytest.fixture(name="spawn")
def _spawn(engine: EngineDouble, tmp_path: Path) -> Iterator[Any]:
    """`spawn(env=..., args=...)` starts a worker on this test's engine; all are killed after."""
    started: list[WorkerProcess] = []

    def spawn(
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        data_dir_flag: bool = True,
        start: bool = True,
    ) -> WorkerProcess:
        """`start=False`: the process is made, not started (`run_to_exit`, or `start()`)."""
        index = len(started)
        worker = WorkerProcess(
            engine,
            tmp_path / f"data{index}",
            tmp_path / f"worker{index}.log",
            env,
            args,
            data_dir_flag,
        )
        started.append(worker)
        return worker.start() if start else worker

    try:
        yield spawn
    finally:
        for worker in started:
            worker.kill()


CONSOLIDATE_READY_PREFIX = "memory-consolidate connected to "


class ConsolidateProcess:
    """One `memory-consolidate serve --engine` process (the sibling), backstop off unless asked:
    the test fires `cron` itself. `restart()` keeps its arguments; `kill()` is SIGKILL."""

    def __init__(self, engine: EngineDouble, log_path: Path, args: tuple[str, ...] = ()) -> None:
        self.engine = engine
        self.log_path = log_path
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
        self.env.update({"OTEL_ENABLED": "false"})
        self.env.setdefault("HOME", str(log_path.parent))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> ConsolidateProcess:
        command = [
            sys.executable,
            "-m",
            "memory_worker.adapters.consolidate.cli",
            "--log-level",
            "debug",
            "serve",
            "--engine",
            self.engine.url,
            "--backstop-s",
            "0",
            *self.args,
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=log, env=self.env, bufsize=0
            )
        self.starts += 1
        try:
            line = read_line(self.proc, time.monotonic() + START_TIMEOUT_S)
            assert line.startswith(CONSOLIDATE_READY_PREFIX), line
            self.engine.wait_binding(
                "configuration", "memory-consolidate::on-config-change", timeout=START_TIMEOUT_S
            )
            self.engine.wait_function(
                "memory-consolidate::run", min_count=self.starts, timeout=START_TIMEOUT_S
            )
            self.engine.wait_settled(timeout=START_TIMEOUT_S)  # as WorkerProcess.start
        except BaseException as exc:
            self.kill()
            raise AssertionError(
                f"memory-consolidate did not start ({exc!r}); engine errors: "
                f"{self.engine.errors}; log:\n{self.log()}"
            ) from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == name:
                    out.append(event)
        return out

    def stop(self, sig: int = signal.SIGTERM) -> int:
        proc = self.proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            return proc.wait(timeout=EXIT_TIMEOUT_S)
        finally:
            self.kill()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=EXIT_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(name="spawn_consolidate")
def _spawn_consolidate(engine: EngineDouble, tmp_path: Path) -> Iterator[Any]:
    """`spawn_consolidate(args=...)` starts memory-consolidate on this test's engine."""
    started: list[ConsolidateProcess] = []

    def spawn(args: tuple[str, ...] = ()) -> ConsolidateProcess:
        process = ConsolidateProcess(engine, tmp_path / f"consolidate{len(started)}.log", args)
        started.append(process)
        return process.start()

    try:
        yield spawn
    finally:
        for process in started:
            process.kill()


@pytest.fixture(name="sib")
def _turn_siblings(engine: EngineDouble) -> Iterator[TurnSiblings]:
    siblings = TurnSiblings(engine)
    try:
        yield siblings
    finally:
        siblings.close()
