"""One writer per data dir: a second opener is refused with the holder's name, a short CLI holder
is waited for, and concurrent CLI calls queue on the lock without losing anything."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memory_worker.adapters import cli, doors
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, StorageError
from memory_worker.storage import files
from memory_worker.storage.files import LOCK_NAME, DataDirLock
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .test_cli import RUN_TIMEOUT_S, BatchProcess, finish, finish_all, kill_all, start_cli

SERVER = {"pid": 123, "kind": "serve", "command": "memory-worker serve"}
SHORT_CLI = {"pid": 456, "kind": "cli", "command": "memory-worker trigger memory::save"}


def _lock_path(data: Path) -> str:
    return os.path.realpath(data / LOCK_NAME)


def _has_open(pid: int, path: str) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == path for fd in fds.iterdir())
    except OSError:  # the process exited, or an fd closed while we looked
        return False


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = RUN_TIMEOUT_S) -> None:
    """`timeout` is a hang's: a cold interpreter reaching the lock takes ~15 s on a loaded
    2-core machine."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling a condition, not waiting for work


async def _live_texts(data: Path) -> list[str]:
    store = Store.open(data, holder=HOLDER)
    try:
        service = MemoryService(store, Settings())
        page = await catalog.call(service, "memory::list", {"limit": 500})
        return sorted(m["text"] for m in page["memories"])
    finally:
        await store.close()


def test_second_process_is_refused_at_once_and_told_who_holds_the_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process, so the time measured is the lock's alone (a cold interpreter takes 15 s on a
    loaded 2-core machine, more than the wait it is compared with). The CLI wait is raised to a
    minute: a server waited for like a CLI holder takes that long, being refused takes
    milliseconds. flock excludes a second open file in the same process as it does another
    process."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(cli, "CLI_LOCK_WAIT_S", 60.0)
    lock = DataDirLock(data, SERVER)
    lock.acquire()
    try:
        started = time.monotonic()
        code = cli.main(
            ["trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data)]
        )
        elapsed = time.monotonic() - started
    finally:
        lock.release()
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    error = json.loads(captured.err.strip().splitlines()[-1])
    assert error["code"] == "conflict"
    assert "pid 123" in error["message"]
    assert "memory-worker serve" in error["message"]
    assert elapsed < cli.CLI_LOCK_WAIT_S / 2  # a server is not waited for
    assert not (data / "main").exists()  # nothing was written


def test_a_call_made_while_a_server_stops_waits_for_it_then_runs_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stopping server has taken its URL out of the lock's record (its port is no longer its
    own to forward to) but still holds the lock while it finishes: a CLI call waits for it, as
    for a short CLI holder, instead of being refused, and then opens the data dir itself."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(cli, "CLI_LOCK_WAIT_S", 60.0)
    lock = DataDirLock(data, SERVER)
    lock.acquire()
    lock.rewrite_holder({**SERVER, "kind": files.STOPPING})
    release = threading.Timer(0.5, lock.release)  # the server's last writes, then its exit
    release.start()
    try:
        code = cli.main(
            ["trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data)]
        )
    finally:
        release.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["memory"]["text"] == "The user likes tea"


def test_a_call_queued_behind_a_short_cli_holder_succeeds_once_it_releases(
    tmp_path: Path,
) -> None:
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the waiting process open the lock file")
    data = tmp_path / "data"
    data.mkdir()
    lock = DataDirLock(data, SHORT_CLI)
    lock.acquire()
    released = False
    proc = start_cli(
        "trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data), cwd=tmp_path
    )
    try:
        # Once the caller has the lock file open it is inside acquire(), polling our flock.
        _wait_until(
            lambda: _has_open(proc.pid, _lock_path(data)) or proc.poll() is not None,
            "the trigger to reach the lock",
        )
        assert proc.poll() is None, "the trigger gave up instead of waiting for a CLI holder"
        lock.release()
        released = True
        outcome = finish(proc)
    finally:
        if not released:
            lock.release()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert outcome.result()["memory"]["text"] == "The user likes tea"


def test_a_holder_still_writing_its_name_is_waited_for_not_reported_as_unknown(
    tmp_path: Path,
) -> None:
    """Between taking the flock and writing its record (and between truncating the record and
    closing on release) a holder's `.lock` is empty. A caller that looks in that instant must not
    be refused as if a server held the dir: the window is real for concurrent CLI calls."""
    if not Path(f"/proc/{os.getpid()}/fd").is_dir():
        pytest.skip("needs /proc to see the waiting process open the lock file")

    data = tmp_path / "data"
    data.mkdir()
    fd = os.open(data / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held, record not written yet
    proc = start_cli(
        "trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data), cwd=tmp_path
    )
    try:
        _wait_until(
            lambda: _has_open(proc.pid, _lock_path(data)) or proc.poll() is not None,
            "the trigger to reach the lock",
        )
        os.pwrite(fd, json.dumps(SHORT_CLI).encode(), 0)  # the holder finishes taking the lock
        os.close(fd)  # ... and, being a short call, releases it
        fd = -1
        outcome = finish(proc)
    finally:
        if fd >= 0:
            os.close(fd)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert outcome.code == 0, outcome.stderr


def test_an_idle_batch_process_is_named_to_the_next_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `call --batch -` with its stdin open and idle holds the dir. It is a CLI holder, so the
    next caller waits its budget (10 s) first; the budget is cut here so the test stays fast, which
    is why this caller runs in-process. flock excludes a second open file in the same process
    exactly as it excludes another process."""
    data = tmp_path / "data"
    with BatchProcess(data, cwd=tmp_path) as holder:
        holder.result("memory::bank::list")  # answered: the store is open and locked
        monkeypatch.setattr(cli, "CLI_LOCK_WAIT_S", 0.3)
        code = cli.main(
            ["trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data)]
        )
        captured = capsys.readouterr()
        assert holder.close() == 0
    assert code == 1
    assert captured.out == ""
    error = json.loads(captured.err.strip().splitlines()[-1])
    assert error["code"] == "conflict"
    assert f"pid {holder.pid}" in error["message"]
    assert "memory-worker call --batch" in error["message"]


async def test_a_second_store_on_one_dir_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    holder = {"pid": 777, "kind": "serve", "command": "memory-worker serve --port 8765"}
    first = Store.open(data, holder=holder)
    try:
        with pytest.raises(Conflict) as refused:
            Store.open(data, holder=HOLDER)
        assert "pid 777" in str(refused.value)
        assert "memory-worker serve --port 8765" in str(refused.value)
        assert str(refused.value).startswith("conflict: ")
    finally:
        await first.close()
    second = Store.open(data, holder=HOLDER)
    await second.close()


def test_openers_probing_one_dir_at_the_same_time_do_not_fail_each_other(tmp_path: Path) -> None:
    """Every opener proves the dir writable before it takes the lock, so probes of concurrent
    callers overlap; one caller's probe must not make another's fail."""
    errors: list[str] = []

    def probe_repeatedly() -> None:
        for _ in range(50):
            try:
                files.probe_writable(tmp_path)
            except StorageError as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=probe_repeatedly) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], f"{len(errors)} probes failed, e.g. {errors[0]}"


CONCURRENT_CALLS = 16


@pytest.mark.timeout(420)  # finish_all's deadline for 16 side by side is 300 s
async def test_concurrent_cli_saves_queue_on_the_lock_and_none_is_lost(tmp_path: Path) -> None:
    data = tmp_path / "data"
    texts = [f"The user keeps concurrent note number {n}" for n in range(CONCURRENT_CALLS)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for text in texts:
            command = ("trigger", "memory::save", f"text={text}", "--data-dir", str(data))
            procs.append(start_cli(*command, cwd=tmp_path))
        outcomes = await asyncio.to_thread(finish_all, procs)
    finally:
        kill_all(procs)
    failures = [o.stderr.strip() for o in outcomes if o.code != 0]
    assert not failures, f"{len(failures)} of {CONCURRENT_CALLS} calls failed:\n" + "\n".join(
        failures
    )
    ids = [o.result()["memory"]["id"] for o in outcomes]
    assert len(set(ids)) == CONCURRENT_CALLS
    assert await _live_texts(data) == sorted(texts)


class _QueueClock:
    """Stands in for `time` inside the lock's wait: `sleep` moves a fake clock instead of
    sleeping, and hands the lock to the next scripted holder when its moment has come. One
    thread, no real time: the queue is the same on any machine."""

    def __init__(self, data: Path, handovers: list[tuple[float, dict[str, object] | None]]):
        self.now = 0.0
        self.data = data
        self.handovers = handovers  # (moment, next holder or None for "released")
        self.holder: DataDirLock | None = None

    def hold(self, record: dict[str, object]) -> None:
        if self.holder is not None:
            self.holder.release()
        self.holder = DataDirLock(self.data, record)
        self.holder.acquire()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self.handovers and self.handovers[0][0] <= self.now:
            _, record = self.handovers.pop(0)
            if record is None:
                assert self.holder is not None
                self.holder.release()
                self.holder = None
            else:
                self.hold(record)

    def close(self) -> None:
        if self.holder is not None:
            self.holder.release()


def _cli_holder(pid: int) -> dict[str, object]:
    return {"pid": pid, "kind": "cli", "command": "memory-worker trigger memory::save"}


def test_each_short_holder_in_a_queue_gets_its_own_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three CLI calls ahead, 0.8 s each, 2.4 s in all: a caller with a 1 s wait gets the lock,
    because the queue kept moving (under load sixteen concurrent calls add up like this)."""
    data = tmp_path / "data"
    data.mkdir()
    clock = _QueueClock(data, [(0.8, _cli_holder(2)), (1.6, _cli_holder(3)), (2.4, None)])
    clock.hold(_cli_holder(1))
    monkeypatch.setattr(files, "time", clock)
    caller = DataDirLock(data, _cli_holder(4))
    try:
        caller.acquire(wait_s=1.0)
        assert clock.now >= 2.4 and clock.handovers == []
        assert json.loads((data / LOCK_NAME).read_bytes())["pid"] == 4
    finally:
        caller.release()
        clock.close()


def test_one_short_holder_that_stays_past_the_wait_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same 1 s wait behind one CLI holder that keeps the dir for 2.4 s: refused at 1 s,
    with the holder's name (it is the queue moving that restarts the wait, not time passing)."""
    data = tmp_path / "data"
    data.mkdir()
    clock = _QueueClock(data, [(2.4, None)])
    clock.hold(_cli_holder(1))
    monkeypatch.setattr(files, "time", clock)
    try:
        with pytest.raises(Conflict, match="pid 1, `memory-worker trigger memory::save`"):
            DataDirLock(data, _cli_holder(4)).acquire(wait_s=1.0)
        assert 1.0 <= clock.now < 1.1
    finally:
        clock.close()


async def test_a_server_starting_while_a_short_command_holds_the_dir_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook, a CLI call or an MCP tool call holding the data dir when `memory-worker serve`
    starts (beside a busy coding agent: every prompt runs a hook) is waited for, as a CLI call
    waits for it; the server was refused at once and exited."""
    from memory_worker.adapters.standalone import StandaloneServer

    data = tmp_path / "data"
    data.mkdir()
    clock = _QueueClock(data, [(0.8, None)])  # a one-shot command done 0.8 s in
    clock.hold(_cli_holder(1))
    monkeypatch.setattr(files, "time", clock)
    server = StandaloneServer(Settings(), data, port=0)
    try:
        await server.start()
        assert clock.now >= 0.8 and clock.handovers == []
        assert json.loads((data / LOCK_NAME).read_bytes())["kind"] == "serve"
    finally:
        await server.close()
        clock.close()


async def test_a_server_starting_while_another_server_holds_the_dir_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_worker.adapters.standalone import StandaloneServer

    data = tmp_path / "data"
    data.mkdir()
    clock = _QueueClock(data, [])
    clock.hold(SERVER)
    monkeypatch.setattr(files, "time", clock)
    server = StandaloneServer(Settings(), data, port=0)
    try:
        with pytest.raises(Conflict, match="memory-worker serve"):
            await server.start()
        assert clock.now == 0.0
    finally:
        clock.close()


def test_a_call_that_finds_a_server_gone_and_a_short_holder_in_its_place_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock's record names a server, but by the time the call tries the lock the server is
    gone (killed, or stopping) and a one-shot call holds it: that holder is waited for as any
    short one, not reported as a conflict (seen with a server killed under a burst of hooks)."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(cli, "CLI_LOCK_WAIT_S", 60.0)
    lock = DataDirLock(data, {**SERVER, "url": "http://127.0.0.1:9"})
    lock.acquire()
    real_lock = doors._lock
    release = threading.Timer(0.5, lock.release)  # the one-shot holder's call, then its exit

    def server_replaced_first(root: Path, command: str, wait_s: float) -> DataDirLock:
        if not release.is_alive() and not release.finished.is_set():
            lock.rewrite_holder(SHORT_CLI)  # the server died; a one-shot took the lock
            release.start()
        return real_lock(root, command, wait_s)

    monkeypatch.setattr(doors, "_lock", server_replaced_first)
    _saves_tea_once_released(data, lock, release, capsys)


def _saves_tea_once_released(
    data: Path, lock: DataDirLock, release: threading.Timer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-shot `trigger memory::save` on `data` succeeds, while `release` lets `lock` go
    (the holder's exit); the lock is let go however the call ends."""
    try:
        code = cli.main(
            ["trigger", "memory::save", "text=The user likes tea", "--data-dir", str(data)]
        )
    finally:
        if release.is_alive():
            release.join()
        lock.release()  # a second release is nothing
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["memory"]["text"] == "The user likes tea"


def _refusing_url() -> str:
    """A loopback URL nothing listens on (a port just let go): its connection is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_call_forwarded_as_the_server_stops_runs_here_once_it_has_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`memory-worker serve` restarting under a coding agent's hooks: a call reads the server's
    URL, the server stops naming it and closes its port, and the call's connection is refused.
    The call never reached the server, so it chooses its door again: it waits for the stopping
    server's lock and runs here, instead of failing `sibling_unavailable`."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(cli, "CLI_LOCK_WAIT_S", 60.0)
    lock = DataDirLock(data, {**SERVER, "url": _refusing_url()})
    lock.acquire()
    real_exchange = doors.RemoteDoor._exchange
    release = threading.Timer(0.5, lock.release)  # the server's last writes, then its exit

    async def server_stops_first(
        self: doors.RemoteDoor, target: str, body: bytes
    ) -> tuple[int, bytes]:
        if not release.is_alive() and not release.finished.is_set():
            lock.rewrite_holder({**SERVER, "kind": files.STOPPING})
            release.start()
        return await real_exchange(self, target, body)

    monkeypatch.setattr(doors.RemoteDoor, "_exchange", server_stops_first)
    _saves_tea_once_released(data, lock, release, capsys)


def test_a_forwarded_call_refused_twice_is_sibling_unavailable_not_a_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A holder naming a URL whose port refuses for good (a wedged server) is tried again once."""
    data = tmp_path / "data"
    data.mkdir()
    url = _refusing_url()
    lock = DataDirLock(data, {**SERVER, "url": url})
    lock.acquire()
    try:
        code = cli.main(["trigger", "memory::list", "--data-dir", str(data)])
    finally:
        lock.release()
    captured = capsys.readouterr()
    assert code == 1
    error = json.loads(captured.err.strip().splitlines()[-1])
    assert error["code"] == "sibling_unavailable" and url in error["message"]
