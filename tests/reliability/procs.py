"""Writer processes to kill: `memory-worker call --batch -` and `memory-worker import`, started as a
real interpreter (`spawn`, what a person runs) or forked from this process, which has already
imported the worker (`fork`: no interpreter start, so a campaign can kill thousands of writers).

A forked child runs exactly `memory_worker.cli.main(argv)` with its stdin and stdout on pipes,
so the code under attack is the real CLI either way. Forking is only safe while this process has a
single thread: the campaign forks before it starts any event loop. Every child is killed and reaped
by its handle (`kill()`, `close()`, or leaving the `with` block).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from tests.test_cli import cli_command, cli_env

__all__ = ["ANSWER_TIMEOUT_S", "Child", "Mode", "ProcessFailed", "Writer"]

Mode = Literal["spawn", "fork"]
ANSWER_TIMEOUT_S = 60.0  # includes a cold start: 15 s and more on a loaded 2-core machine
EXIT_TIMEOUT_S = 30.0
ISOLATED_VARS = (
    "MEMORY_DATA_DIR",
    "MEMORY_CONFIG",
    "III_COMPOSE_DIR",
    "III_URL",
    "MEMORY_EMBEDDER",
)

_OPEN_PARENT_FDS: set[int] = set()  # our ends of every live child's pipes: closed in new children


class ProcessFailed(AssertionError):
    """A writer did not answer in time or exited early (a crash of the worker, not of the test)."""


class Child:
    """One CLI process with stdin/stdout on pipes and stderr in a file (spawn) or discarded."""

    def __init__(self, argv: list[str], *, cwd: Path, mode: Mode, stdin: bool = True) -> None:
        self.mode = mode
        self.argv = argv
        self._popen: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        if mode == "spawn":
            self._popen = subprocess.Popen(
                cli_command(*argv),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=cwd,
                env=cli_env(),
                bufsize=0,
            )
            self.pid = self._popen.pid
            assert self._popen.stdout is not None
            self.stdin_fd = self._popen.stdin.fileno() if self._popen.stdin is not None else None
            self.stdout_fd = self._popen.stdout.fileno()
        else:
            self.pid, self.stdin_fd, self.stdout_fd = _fork_cli(argv, cwd=cwd, stdin=stdin)
            for fd in (self.stdin_fd, self.stdout_fd):
                if fd is not None:
                    _OPEN_PARENT_FDS.add(fd)

    def alive(self) -> bool:
        return self.returncode is None and self._poll() is None

    def _poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._popen is not None:
            self.returncode = self._popen.poll()
            return self.returncode
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        if self._popen is not None:
            try:
                self.returncode = self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise ProcessFailed(f"{self.argv[0]} did not exit within {timeout}s") from None
        else:
            deadline = time.monotonic() + timeout
            while self._poll() is None:
                if time.monotonic() > deadline:
                    self.kill()
                    raise ProcessFailed(f"{self.argv[0]} did not exit within {timeout}s")
                time.sleep(0.005)  # polling an exit, not waiting for work
        self._close_fds()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, no goodbye: whatever was in flight is cut off where it stood. Reaped."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            if self._popen is not None:
                self.returncode = self._popen.wait()
            else:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
        self._close_fds()

    def _close_fds(self) -> None:
        if self._popen is not None:
            for stream in (self._popen.stdin, self._popen.stdout):
                if stream is not None:
                    stream.close()
            return
        for fd in (self.stdin_fd, self.stdout_fd):
            if fd is not None and fd in _OPEN_PARENT_FDS:
                _OPEN_PARENT_FDS.discard(fd)
                os.close(fd)

    def read_all(self) -> bytes:
        chunks = []
        while chunk := os.read(self.stdout_fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()


def _fork_cli(argv: list[str], *, cwd: Path, stdin: bool) -> tuple[int, int | None, int]:
    in_r, in_w = os.pipe() if stdin else (os.open(os.devnull, os.O_RDONLY), -1)
    out_r, out_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: become `memory-worker ARGV` and never return
        code = 70
        try:
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            for fd in {in_r, in_w, out_r, out_w, devnull, *_OPEN_PARENT_FDS} - {-1, 0, 1, 2}:
                os.close(fd)
            os.chdir(cwd)
            for var in ISOLATED_VARS:
                os.environ.pop(var, None)
            from memory_worker.adapters import cli

            code = cli.main(argv)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(in_r)
    os.close(out_w)
    return pid, (in_w if stdin else None), out_r


class Writer(Child):
    """`memory-worker call --batch - --data-dir DIR`, one request line and one answer line."""

    def __init__(self, data_dir: Path, *, cwd: Path, mode: Mode = "spawn") -> None:
        super().__init__(["call", "--batch", "-", "--data-dir", str(data_dir)], cwd=cwd, mode=mode)
        self._pending = b""

    def send(self, function_id: str, payload: dict[str, Any]) -> None:
        assert self.stdin_fd is not None
        data = (json.dumps({"function_id": function_id, "payload": payload}) + "\n").encode()
        while data:
            data = data[os.write(self.stdin_fd, data) :]

    def read_answer(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.stdout_fd, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise ProcessFailed(f"no answer line within {timeout}s")
                chunk = os.read(self.stdout_fd, 65536)
                if not chunk:
                    raise ProcessFailed(f"the writer exited early (status {self._poll()})")
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def answers_waiting(self) -> bool:
        """Whether an answer can be read without blocking."""
        if b"\n" in self._pending:
            return True
        with selectors.DefaultSelector() as selector:
            selector.register(self.stdout_fd, selectors.EVENT_READ)
            return bool(selector.select(0))

    def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.send(function_id, payload)
        return self.read_answer()

    def result(self, function_id: str, payload: dict[str, Any]) -> Any:
        answer = self.call(function_id, payload)
        if "result" not in answer:
            raise ProcessFailed(f"{function_id} {payload} answered {answer}")
        return answer["result"]

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> int:
        """End of input: the writer answers what is left and exits."""
        if self._popen is not None and self._popen.stdin is not None:
            self._popen.stdin.close()
        elif self.stdin_fd is not None and self.stdin_fd in _OPEN_PARENT_FDS:
            _OPEN_PARENT_FDS.discard(self.stdin_fd)
            os.close(self.stdin_fd)
        self.stdin_fd = None
        return self.wait(timeout)
