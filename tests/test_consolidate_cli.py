"""memory-consolidate without an engine: `memory-worker consolidate` on a local data dir and
through the standalone server holding it, `memory-consolidate serve --server` (its own schedule
against the REST API), and the REST client, checkpoint file and settings file it uses."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_worker.adapters.consolidate.cli import FileSettings
from memory_worker.adapters.consolidate.clients import FileState, HttpClient
from memory_worker.core.errors import Conflict, MemoryNotFound, SiblingUnavailable

from .other_accounts import (
    OTHER_UID,
    as_root_on_linux,
    listening_as_another_account,
    skip_unless_accounts_are_told,
)
from .processes import read_line
from .test_cli import cli_env, run_cli
from .test_standalone import _OPENER, Served, _kill, _start

pytestmark = pytest.mark.timeout(120)

TEXTS = ["The user lives in Porto.", "the user lives in porto", "The user lives in Porto!"]
ENV = cli_env(MEMORY_EMBEDDER="none")


def post(url: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/{path}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _OPENER.open(request, timeout=10) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body


def seed_local(data_dir: Path, cwd: Path) -> None:
    for text in TEXTS:
        run_cli("trigger", "memory::save", f"text={text}", "--data-dir", str(data_dir),
                cwd=cwd, env=ENV).result()  # fmt: skip


def live_count(data_dir: Path, cwd: Path) -> int:
    listed = run_cli("trigger", "memory::list", "--data-dir", str(data_dir), cwd=cwd, env=ENV)
    return int(listed.result()["total"])


class TestOnePass:
    def test_memory_worker_consolidate_on_the_local_data_dir(self, tmp_path: Path) -> None:
        data_dir = tmp_path / "data"
        seed_local(data_dir, tmp_path)
        dry = run_cli("consolidate", "--dry-run", "--data-dir", str(data_dir),
                      cwd=tmp_path, env=ENV).result()  # fmt: skip
        assert dry["dry_run"] is True and dry["banks"][0]["groups"][0]["action"] == "planned"
        assert live_count(data_dir, tmp_path) == 3
        done = run_cli("consolidate", "--data-dir", str(data_dir), cwd=tmp_path, env=ENV).result()
        assert done["superseded"] == 2 and done["checkpointed"] is False
        assert done["banks"][0]["semantic"] == "unavailable"  # MEMORY_EMBEDDER=none
        assert live_count(data_dir, tmp_path) == 1

    def test_an_unknown_bank_is_a_coded_error(self, tmp_path: Path) -> None:
        data_dir = tmp_path / "data"
        seed_local(data_dir, tmp_path)
        failed = run_cli("consolidate", "--bank", "nope", "--data-dir", str(data_dir),
                         cwd=tmp_path, env=ENV)  # fmt: skip
        assert failed.error()["code"] == "bank_not_found"

    def test_through_the_standalone_server_that_holds_the_data_dir(self, tmp_path: Path) -> None:
        served = _start(tmp_path / "data", tmp_path / "server.err")
        try:
            for text in TEXTS:
                post(served.url, "memory/save", {"text": text})
            done = run_cli("consolidate", "--data-dir", str(served.data_dir),
                           cwd=tmp_path, env=ENV).result()  # fmt: skip
            assert done["superseded"] == 2
            assert post(served.url, "memory/list", {})["total"] == 1
        finally:
            _kill(served.proc)

    def test_a_bad_memory_embedder_is_refused_as_by_every_other_command(
        self, tmp_path: Path
    ) -> None:
        """`MEMORY_EMBEDDER=locl` (a typo) is `invalid_input` for `trigger`, `mcp` and the
        hooks; `memory-worker consolidate` read it as "no embedder" and ran its pass without the
        semantic tier, saying only `"semantic": "unavailable"` in its report."""
        data_dir = tmp_path / "data"
        seed_local(data_dir, tmp_path)
        env = cli_env(MEMORY_EMBEDDER="locl")
        trigger = run_cli("trigger", "memory::tags", "--data-dir", str(data_dir),
                          cwd=tmp_path, env=env).error()  # fmt: skip
        failed = run_cli("consolidate", "--dry-run", "--data-dir", str(data_dir),
                         cwd=tmp_path, env=env).error()  # fmt: skip
        assert failed == trigger
        assert failed["code"] == "invalid_input" and "MEMORY_EMBEDDER" in failed["message"]

    def test_a_pass_forwarded_to_the_server_loads_no_local_model(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A forwarded call never loads an embedder (the server holds its own): the pass the
        server runs uses the server's. `memory-worker consolidate` loaded the local model
        before it knew where the pass would run (~14 MB and a tenth of a second each time)."""
        from memory_worker.adapters.consolidate import cli as consolidate_cli

        loaded: list[str] = []

        def load_local(name: str = "") -> Any:
            loaded.append(name)
            raise AssertionError("a forwarded pass loaded the local model")

        monkeypatch.setattr(consolidate_cli, "load_local", load_local)
        monkeypatch.delenv("MEMORY_EMBEDDER", raising=False)  # the default: local
        for name in ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "MEMORY_CONSOLIDATE_CONFIG"):
            monkeypatch.delenv(name, raising=False)
        served = _start(tmp_path / "data", tmp_path / "server.err")
        try:
            for text in TEXTS:
                post(served.url, "memory/save", {"text": text})
            args = argparse.Namespace(
                server=None, config=None, data_dir=str(served.data_dir),
                consolidate_config=None, bank=None, dry_run=True,
            )  # fmt: skip
            assert asyncio.run(consolidate_cli.run_once(args)) == 0
        finally:
            _kill(served.proc)
        assert loaded == []


@pytest.fixture(name="served")
def _served(tmp_path: Path) -> Iterator[Served]:
    served = _start(tmp_path / "data", tmp_path / "server.err")
    try:
        yield served
    finally:
        _kill(served.proc)


class TestOwnSchedule:
    def test_serve_against_a_standalone_server_catches_up_at_boot_and_checkpoints(
        self, served: Served, tmp_path: Path
    ) -> None:
        for text in TEXTS:
            post(served.url, "memory/save", {"text": text})
        state = tmp_path / "consolidate" / "state.json"
        command = [
            sys.executable, "-m", "memory_worker.adapters.consolidate.cli", "serve",
            "--server", served.url, "--state", str(state),
            "--first-tick-s", "0", "--backstop-s", "3600",
        ]  # fmt: skip
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV, bufsize=0
        )
        try:
            deadline = time.monotonic() + 60  # a cold interpreter and a pass, on a loaded machine
            assert read_line(proc, deadline).startswith("memory-consolidate scheduling")
            tick = json.loads(read_line(proc, deadline))["tick"]
            assert tick == {"ran": True, "superseded": 2, "checkpointed": True, "banks": 1}
            stored = json.loads(state.read_text())["memory_consolidate"]
            assert stored["last_run"]["ms"] > 0
            assert stored["last_report"]["banks"]["main"]["merged"] == 2
            assert post(served.url, "memory/list", {})["total"] == 1
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            _kill(proc)  # type: ignore[arg-type]

    @pytest.mark.timeout(20)  # before: a loop that never pauses (or a 45 s wait, then one)
    @pytest.mark.parametrize(
        ("flag", "value"),
        [("--backstop-s", "-5"), ("--first-tick-s", "nan"), ("--call-timeout-ms", "0")],
    )
    def test_a_bad_schedule_number_is_refused_before_anything_starts(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
    ) -> None:
        from memory_worker.adapters.consolidate.cli import main

        state = tmp_path / "state.json"
        argv = ["serve", "--server", "http://127.0.0.1:9", "--state", str(state), flag, value]
        assert main(argv) == 1
        error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert error["code"] == "invalid_input" and flag in error["message"]
        assert not state.exists()


class TestHttpClient:
    async def test_errors_come_back_as_the_memory_workers_own(self) -> None:
        def handler(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            if path == "/memory/supersede":
                body = {"error": {"code": "conflict", "message": "memory fp1 is pinned"}}
                return httpx.Response(409, json=body)
            if path == "/memory/get":
                body = {"error": {"code": "memory_not_found", "message": "fp2 in bank main"}}
                return httpx.Response(404, json=body)
            if path == "/memory/list":
                return httpx.Response(502, text="bad gateway")
            return httpx.Response(200, json={"banks": []})

        client = HttpClient("http://127.0.0.1:1", transport=httpx.MockTransport(handler))
        try:
            assert await client.call("memory::bank::list", {}) == {"banks": []}
            with pytest.raises(Conflict, match="pinned"):
                await client.call("memory::supersede", {})
            with pytest.raises(MemoryNotFound):
                await client.call("memory::get", {})
            with pytest.raises(SiblingUnavailable, match="HTTP 502"):
                await client.call("memory::list", {})
        finally:
            await client.close()

    async def test_a_server_that_is_not_there_is_sibling_unavailable(self) -> None:
        client = HttpClient("http://127.0.0.1:9", timeout_s=2)
        try:
            with pytest.raises(SiblingUnavailable, match="did not answer"):
                await client.call("memory::bank::list", {})
        finally:
            await client.close()

    @as_root_on_linux
    async def test_nothing_is_sent_to_another_accounts_program_on_the_servers_port(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`memory-consolidate serve --server http://127.0.0.1:PORT` runs for days beside the
        server; while that server restarts, any account on the machine can take its port. The
        schedule's next call sent that account's program `$MEMORY_TOKEN` (with which it may
        call the real server as this account: another account needs the token on loopback)
        and the pass's payload, and took its answers for the server's. Nothing is sent now,
        as the CLI's forwarded calls send nothing there (`doors`)."""
        skip_unless_accounts_are_told()
        token = "t0ken-" + "x" * 40
        monkeypatch.setenv("MEMORY_TOKEN", token)
        pid, port, pipe = listening_as_another_account()
        client = HttpClient(f"http://127.0.0.1:{port}", timeout_s=5)
        try:
            with pytest.raises(SiblingUnavailable) as refused:
                await client.call("memory::list", {"bank": "main"})
        finally:
            await client.close()
            # The child accepts one connection and then stops listening: this one ends it
            # when the client's was closed unsent (refused when the client's was served).
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                pass
            with os.fdopen(pipe, "rb") as reports:
                received = await asyncio.to_thread(reports.read)
            await asyncio.to_thread(os.waitpid, pid, 0)
        assert f"uid {OTHER_UID}" in str(refused.value) and "nothing was sent" in str(refused.value)
        assert token.encode() not in received and b"POST" not in received


class TestFiles:
    async def test_file_state_keeps_scopes_and_keys(self, tmp_path: Path) -> None:
        state = FileState(tmp_path / "deep" / "state.json")
        assert await state.get("s", "k") is None
        await asyncio.gather(state.set("s", "a", {"ms": 1}), state.set("s", "b", 2))
        assert (await state.get("s", "a"), await state.get("s", "b")) == ({"ms": 1}, 2)

    async def test_a_damaged_state_file_is_set_aside_and_the_schedule_goes_on(
        self, tmp_path: Path
    ) -> None:
        """A state file that no longer reads as JSON (a hand edit, a damaged disk) used to fail
        every read and write: each tick said `last_run unreadable` and no pass ever ran again.
        It is kept beside, named, and the state starts over (the next pass is simply due)."""
        path = tmp_path / "state.json"
        state = FileState(path)
        await state.set("s", "a", {"ms": 1})
        path.write_text("{not json")
        assert await state.get("s", "a") is None
        [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("state.json.damaged-")]
        assert aside.read_text() == "{not json"
        await state.set("s", "a", {"ms": 2})
        assert await state.get("s", "a") == {"ms": 2}

    def test_settings_file_unreadable_at_first_is_inert_then_a_later_bad_edit_keeps_the_last(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "consolidate.yaml"
        path.write_text("enabled: [oops\n")
        config = FileSettings(path)
        assert config.inert is not None and "consolidate.yaml" in config.inert
        path.write_text("interval_hours: 2\n")
        assert config.settings().interval_hours == 2 and config.inert is None
        path.write_text("max_supersedes_per_run: -5\n")
        bump = path.stat().st_mtime + 5
        os.utime(path, (bump, bump))  # a new mtime, whatever the clock's resolution
        assert config.settings().interval_hours == 2 and config.inert is None


def test_an_unknown_log_level_is_a_usage_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memory_worker.adapters.consolidate import cli as consolidate_cli

    with pytest.raises(SystemExit) as exited:
        consolidate_cli.main(["--log-level", "verbose", "run"])
    assert exited.value.code == 2
    assert "'verbose' is not one of debug, info, warning, error" in capsys.readouterr().err


def test_serve_help_names_where_the_checkpoint_goes(capsys: pytest.CaptureFixture[str]) -> None:
    """`--state` defaults to `$MEMORY_CONSOLIDATE_STATE`, else data/memory-consolidate/state.json
    under `$III_COMPOSE_DIR` or the working directory. The help named no variable and read
    "$III_COMPOSE_DIR or ./ data/memory-consolidate/state.json"."""
    from memory_worker.adapters.consolidate import cli as consolidate_cli

    with pytest.raises(SystemExit):
        consolidate_cli.main(["serve", "-h"])
    usage = " ".join(capsys.readouterr().out.split())
    assert "$MEMORY_CONSOLIDATE_STATE" in usage and "./ data" not in usage


def test_serve_given_both_an_engine_and_a_server_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --engine URL --server URL` scheduled against the server and said nothing of the
    engine it was given; two schedules are one too many, so the command line is refused."""
    from memory_worker.adapters.consolidate import cli as consolidate_cli

    started: list[str] = []

    async def serve_rest(args: Any) -> int:
        started.append(args.server)
        return 0

    monkeypatch.setattr(consolidate_cli, "_serve_rest", serve_rest)
    argv = ["serve", "--engine", "ws://127.0.0.1:9", "--server", "http://127.0.0.1:9"]
    assert consolidate_cli.main(argv) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input"
    assert "--engine" in error["message"] and "--server" in error["message"]
    assert started == []
