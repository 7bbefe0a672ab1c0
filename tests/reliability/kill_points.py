"""SIGKILL at a chosen file operation: a real CLI process (forked from a forkserver that has
imported the worker) counts its calls of the `os` functions that change files and kills itself,
with no handler running, at the k-th one, before it runs. Run once to the end, it reports how many
there were, so a test can kill at every one of them or at a chosen few.

With `half`, a k-th call that is a write stores half of its bytes first (a write the kill tore).
Run to its end (k=0), a child also reports each call and the file it acted on (`Run.trace`), so a
test can choose its moments by what they do.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

__all__ = ["KILL_OPS", "Run", "forkserver", "reset", "run_call_killed", "run_killed"]

# Every `os` function through which the worker changes a file or a folder.
KILL_OPS = ("write", "fsync", "replace", "rename", "unlink", "ftruncate", "mkdir", "rmdir")
_ISOLATED = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL", "MEMORY_EMBEDDER")


PRELOAD = [
    "memory_worker.adapters.cli",
    "memory_worker.adapters.consolidate.options",
    "memory_worker.adapters.embedders",
    "memory_worker.adapters.engine_turns",
    "memory_worker.app.catalog",
    "memory_worker.app.service",
    "memory_worker.storage.store",
]


def forkserver() -> ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    # What a one-shot command imports on its way: each child forks with it loaded.
    context.set_forkserver_preload(PRELOAD)
    return context


def _target(args: tuple[Any, ...]) -> str:
    """The file an `os` call acts on (for a descriptor, the file it is open on)."""
    target = args[0]
    if isinstance(target, int):
        try:
            return os.readlink(f"/proc/self/fd/{target}")
        except OSError:
            return str(target)
    return os.fsdecode(target)


class _Counter:
    """Stands in for each of `KILL_OPS`: counts the calls, SIGKILLs this process at the k-th."""

    def __init__(self, k: int, half: bool) -> None:
        self.k, self.half = k, half
        self.count = 0
        self.trace: list[str] = []  # each call, for a run to its end (k=0)
        self.real = {name: getattr(os, name) for name in KILL_OPS}

    def wrap(self, name: str) -> Any:
        function = self.real[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "write" and args[0] in (0, 1, 2):
                return function(*args, **kwargs)  # the answer, not a file
            self.count += 1
            if self.k == 0:
                self.trace.append(f"{name} {_target(args)}")
            elif self.count == self.k:
                if self.half and name == "write" and len(args[1]) > 1:
                    # Past the middle: lines of one length would end whole at it.
                    data = bytes(args[1])
                    function(args[0], data[: min(len(data) - 1, len(data) // 2 + 1)])
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)

        return call

    def install(self) -> None:
        for name in KILL_OPS:
            setattr(os, name, self.wrap(name))

    def remove(self) -> None:
        for name in KILL_OPS:
            setattr(os, name, self.real[name])


def _child(argv: list[str], k: int, half: bool, report: str, env: dict[str, str]) -> None:
    """`memory-worker ARGV`, SIGKILLed at its k-th file operation (0: never); writes how many it
    made to `report` when it ends by itself."""
    for var in _ISOLATED:
        os.environ.pop(var, None)
    os.environ.update(env)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    from memory_worker.adapters.cli import main

    counter = _Counter(k, half)
    counter.install()
    code = main(argv)
    counter.remove()
    Path(report).write_text(
        json.dumps({"code": code, "ops": counter.count, "trace": counter.trace})
    )
    os._exit(code)


def _call_child(
    target: Callable[..., None], args: tuple[Any, ...], k: int, report: str, env: dict[str, str]
) -> None:
    """`target(*args)` (a module-level function: what the CLI cannot show, such as the events a
    server sends), SIGKILLed at its k-th file operation as `_child` is."""
    for var in _ISOLATED:
        os.environ.pop(var, None)
    os.environ.update(env)
    counter = _Counter(k, half=False)
    counter.install()
    target(*args)
    counter.remove()
    Path(report).write_text(json.dumps({"code": 0, "ops": counter.count, "trace": counter.trace}))
    os._exit(0)


class Run:
    """What one run did: killed (at the k-th operation) or ended by itself (`code`, `ops`)."""

    def __init__(self, exitcode: int | None, report: Path) -> None:
        self.killed = exitcode == -signal.SIGKILL
        done = json.loads(report.read_text()) if report.exists() else {}
        self.code: int | None = done.get("code")
        self.ops: int = done.get("ops", 0)
        self.trace: list[str] = done.get("trace", [])  # each operation of a run to its end
        assert self.killed or self.code is not None, f"the child died otherwise ({exitcode})"


def run_killed(
    context: ForkServerContext,
    argv: list[str],
    k: int,
    *,
    scratch: Path,
    half: bool = False,
    env: dict[str, str] | None = None,
) -> Run:
    """`memory-worker ARGV` in a child (with `env` set), SIGKILLed before its k-th file operation
    (`half`: half-way through it, a write); k=0 runs it to its end."""
    report = scratch / f"run-{k}.json"
    report.unlink(missing_ok=True)
    child = context.Process(target=_child, args=(argv, k, half, str(report), env or {}))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
        raise AssertionError(f"{argv} did not end within 60 s")
    return Run(child.exitcode, report)


def run_call_killed(
    context: ForkServerContext,
    target: Callable[..., None],
    args: tuple[Any, ...],
    k: int,
    *,
    scratch: Path,
    env: dict[str, str] | None = None,
) -> Run:
    """`target(*args)` in a child, SIGKILLed before its k-th file operation; k=0 runs it to its
    end. A file the target writes through Python's own file objects (not `os.write`) is not
    counted: what a test records of the run (the events it sent) survives the kill."""
    report = scratch / f"call-{k}.json"
    report.unlink(missing_ok=True)
    child = context.Process(target=_call_child, args=(target, args, k, str(report), env or {}))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
        raise AssertionError(f"{target.__name__} did not end within 60 s")
    return Run(child.exitcode, report)


def reset(seeded: Path, data: Path) -> None:
    """`data` as `seeded` left it, byte for byte."""
    if data.exists():
        shutil.rmtree(data)
    shutil.copytree(seeded, data, symlinks=True)
