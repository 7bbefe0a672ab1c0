"""`memory-worker serve` picks its mode: `--standalone` → `--engine` → `$III_URL` → an engine
answering at the default address → standalone, and says why."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import threading
from typing import Any

import pytest
from iii import InvocationError

from memory_worker.adapters import cli
from memory_worker.adapters.bus import siblings
from memory_worker.adapters.bus import worker as worker_module
from memory_worker.adapters.bus.worker import EngineWorker
from memory_worker.adapters.consolidate import engine as consolidate_engine
from memory_worker.app.reconfigure import Applied
from memory_worker.consolidate.config import ConsolidateSettings
from memory_worker.core.config import Settings
from memory_worker.core.errors import InvalidInput, SiblingUnavailable

from .bus.engine_double import EngineDouble
from .other_accounts import OTHER_UID, as_root_on_linux, skip_unless_accounts_are_told


def test_standalone_flag_wins_over_everything() -> None:
    url, reason = cli.choose_mode(True, "ws://e:1", {"III_URL": "ws://x:2"})
    assert url is None and "--standalone" in reason


def test_engine_flag_then_env() -> None:
    assert cli.choose_mode(False, "ws://e:1", {"III_URL": "ws://x:2"}) == (
        "ws://e:1",
        "--engine was given",
    )
    assert cli.choose_mode(False, None, {"III_URL": "ws://x:2"}) == ("ws://x:2", "III_URL is set")


@pytest.mark.parametrize(
    "given", ["127.0.0.1:49134", "http://127.0.0.1:49134", "ws://", "ws://[::1:49134"]
)
@pytest.mark.parametrize("source", ["--engine", "III_URL"])
def test_an_engine_url_no_websocket_can_reach_is_refused_at_once(given: str, source: str) -> None:
    """`--engine 127.0.0.1:49134` (or `http://…`) can never connect: the WebSocket client
    refuses the URL, the SDK retried it for 30 s, and serve then stopped with "no iii engine
    answers at 127.0.0.1:49134" while an engine listened there. Refused before anything
    starts, with the form that works."""
    flag, env = (given, {}) if source == "--engine" else (None, {"III_URL": given})
    with pytest.raises(InvalidInput) as refused:
        cli.choose_mode(False, flag, env)
    assert source in str(refused.value) and "ws://" in str(refused.value)


def test_memory_consolidate_refuses_such_an_engine_url_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memory_worker.adapters.consolidate import cli as consolidate_cli

    started: list[str] = []

    async def serve_engine(url: str, *args: Any, **kwargs: Any) -> int:
        started.append(url)
        return 0

    monkeypatch.setattr(consolidate_engine, "serve_engine", serve_engine)
    assert consolidate_cli.main(["serve", "--engine", "localhost:49134"]) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input" and "ws://" in error["message"]
    assert started == []


def test_an_engine_at_the_default_address_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe speaks the WebSocket handshake to the engine (the double: a real WebSocket
    server), and leaves it with a close frame the engine takes as a normal goodbye."""
    with EngineDouble() as engine:
        monkeypatch.setattr(cli, "DEFAULT_ENGINE_URL", engine.url)
        assert cli.choose_mode(False, None, {}) == (
            engine.url,
            f"an engine answers at {engine.url}",
        )
        assert engine.errors == []
    # Closed now: nothing answers, so standalone, naming the address it tried.
    found, reason = cli.choose_mode(False, None, {})
    assert found is None and f"no engine answers at {engine.url}" in reason


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
def test_another_program_on_the_default_port_is_no_engine(
    monkeypatch: pytest.MonkeyPatch, answer: bytes
) -> None:
    """Something that is not an iii engine holds 49134 (it never answers, or answers HTTP without
    upgrading): serve stays standalone and says why. A bare TCP connect took it for an engine,
    and serve then waited 30 s for an engine handshake before failing."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"ws://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setattr(cli, "DEFAULT_ENGINE_URL", url)
        monkeypatch.setattr(cli, "ENGINE_PROBE_TIMEOUT_S", 0.2)
        stop = threading.Event()

        def answer_every_connection() -> None:
            listener.settimeout(0.05)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.recv(4096)
                    if answer:
                        conn.sendall(answer)

        server = threading.Thread(target=answer_every_connection)
        server.start()
        try:
            found, reason = cli.choose_mode(False, None, {})
        finally:
            stop.set()
            server.join()
    assert found is None
    assert reason.startswith(f"{url} is held by a program that is not an iii engine")


def _engine_of_another_account() -> tuple[int, str, int]:
    """A forked child dropped to another account (`nobody`), listening on 127.0.0.1 and
    completing one WebSocket handshake, as another user's fake engine on the default port would:
    (its pid, its ws:// URL, the pipe on which it reports whether anyone shook hands)."""
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here, then `_exit`
        shook = b"0"
        try:
            os.close(to_parent)
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
                listener.bind(("127.0.0.1", 0))
                listener.listen()
                os.write(from_child, listener.getsockname()[1].to_bytes(2, "big"))
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(10)
                    head = b""
                    while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                        head += chunk
                    for line in head.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"sec-websocket-key":
                            digest = hashlib.sha1(value.strip() + _WS_GUID).digest()
                            conn.sendall(
                                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                                + base64.b64encode(digest)
                                + b"\r\n\r\n"
                            )
                            shook = b"1"
        except OSError:
            pass
        finally:
            os.write(from_child, shook)
            os._exit(0)
    os.close(from_child)
    port = int.from_bytes(os.read(to_parent, 2), "big")
    return pid, f"ws://127.0.0.1:{port}", to_parent


_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@as_root_on_linux
def test_another_accounts_program_on_the_default_port_is_never_taken_for_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Any account on the machine can listen on 127.0.0.1:49134 and answer the handshake: `serve`
    took that program for the engine and served it every memory (and every rule it wrote) of a
    user whose data dir is `0700` against that account. It stays standalone, saying why."""
    skip_unless_accounts_are_told()
    pid, url, pipe = _engine_of_another_account()
    monkeypatch.setattr(cli, "DEFAULT_ENGINE_URL", url)
    try:
        found, reason = cli.choose_mode(False, None, {})
    finally:
        with os.fdopen(pipe, "rb") as reports:
            shook = reports.read()
        os.waitpid(pid, 0)
    assert found is None
    assert reason.startswith(f"{url} is held by a program of another account on this machine")
    assert shook == b"0"  # not even the handshake was sent
    # Asked for by name, it is the person's choice.
    assert cli.choose_mode(False, url, {}) == (url, "--engine was given")


async def test_a_failing_configuration_worker_answers_with_a_sibling_code() -> None:
    """`memory::on-config-change` re-reads the configuration worker; when that sibling errors,
    the answer carries the stable `sibling_unavailable:` code (SPEC §3), not `internal:`."""

    class FailingConfig:
        config_id = "memory"

        async def get(self) -> None:
            raise InvocationError("TIMEOUT", "configuration::get timed out")

    worker = EngineWorker("ws://127.0.0.1:9", Settings())
    worker._config = FailingConfig()  # type: ignore[assignment]
    worker._reconfigure = object()  # type: ignore[assignment]  # never reached
    with pytest.raises(SiblingUnavailable) as failed:
        await worker._on_config_change()
    assert str(failed.value).startswith("sibling_unavailable: configuration::get failed")


async def test_a_deleted_entry_stored_again_by_someone_else_first_is_the_one_applied() -> None:
    """Deleted, the entry is registered again with the running settings; but an entry stored
    meanwhile (its file put back, another instance's registration) is kept by `ensure`, and
    that one arrives as `configuration:registered`, which the worker does not listen to: it ran
    on its old settings beside a stored entry saying otherwise, until a restart. The entry is
    read back after `ensure` and applied."""

    class RacedEntry:
        config_id = "memory"

        def __init__(self) -> None:
            self.reads: list[dict[str, Any] | None] = [None, {"recall_limit": 3}]
            self.ensured: list[dict[str, Any]] = []

        async def get(self) -> dict[str, Any] | None:
            return self.reads.pop(0)

        async def ensure(self, schema: dict[str, Any], initial: dict[str, Any]) -> None:
            self.ensured.append(initial)  # a value is stored already: kept

    class Recording:
        def __init__(self) -> None:
            self.applied: list[Settings] = []

        async def apply(self, settings: Settings) -> Applied:
            self.applied.append(settings)
            return Applied.UPDATED

    seed = Settings()
    worker = EngineWorker("ws://127.0.0.1:9", seed)
    entry, reconfigure = RacedEntry(), Recording()
    worker._config = entry  # type: ignore[assignment]
    worker._reconfigure = reconfigure  # type: ignore[assignment]
    answer = await worker._on_config_change()  # `configuration:deleted`
    assert entry.ensured == [seed.model_dump()]  # offered the settings it runs on
    assert [s.recall_limit for s in reconfigure.applied] == [3]  # and runs on what is stored
    assert answer == {"ok": True, "applied": "updated"}


async def test_the_stored_configuration_chooses_the_local_embedder_not_the_seed() -> None:
    """The local embedder is loaded from the YAML seed before the engine is asked; a stored
    configuration naming another model (or turning embeddings off) was ignored until its next
    change, and recall embedded with the seed's model."""
    seeded, loaded = object(), object()
    asked: list[tuple[bool, str]] = []

    def embedder_for(settings: Settings) -> Any:
        asked.append((settings.embeddings_enabled, settings.embedding_model))
        return loaded

    seed = Settings()
    worker = EngineWorker("ws://127.0.0.1:9", seed, embedder=seeded, embedder_for=embedder_for)  # type: ignore[arg-type]
    assert await worker._embedder_at_start(seed.model_copy()) is seeded
    assert asked == []
    stored = seed.model_copy(update={"embedding_model": "another-model"})
    assert await worker._embedder_at_start(stored) is loaded
    off = seed.model_copy(update={"embeddings_enabled": False})
    assert await worker._embedder_at_start(off) is loaded
    assert asked == [(True, "another-model"), (False, seed.embedding_model)]


class _Unreached:
    """What `register_worker` returns when no engine answered within its 30 s wait: a client
    still retrying in the background."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_connection_state(self) -> str:
        return "reconnecting"

    def __getattr__(self, name: str) -> Any:  # a call through it would time out after 5 s
        self.calls.append(name)
        raise AssertionError(f"{name}: nothing is asked of a client that never connected")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


def _memory_worker(monkeypatch: pytest.MonkeyPatch, register: Any) -> Any:
    monkeypatch.setattr(worker_module, "register_worker", register)
    return EngineWorker("ws://127.0.0.1:9", Settings())


def _consolidate_worker(monkeypatch: pytest.MonkeyPatch, register: Any) -> Any:
    monkeypatch.setattr(consolidate_engine, "register_worker", register)
    return consolidate_engine.ConsolidateEngine(
        "ws://127.0.0.1:9",
        ConsolidateSettings(),
        first_tick_s=45.0,
        backstop_s=0.0,
        call_timeout_ms=1000,
    )


WORKERS = pytest.mark.parametrize(
    "make", [_memory_worker, _consolidate_worker], ids=["memory-worker", "memory-consolidate"]
)


@WORKERS
async def test_an_engine_that_never_answers_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`serve --engine URL` with nothing at URL waited out the SDK's 30 s, then the memory
    worker failed on its first call with `sibling_unavailable: cannot read configuration memory:
    TIMEOUT …` (memory-consolidate went on serving, inert for "configuration unreadable"), which
    sends a user after a configuration worker instead of the engine address they mistyped."""
    client = _Unreached()
    worker = make(monkeypatch, lambda url, options: client)
    monkeypatch.setattr(siblings, "REGISTER_WAIT_S", 0.0)  # the SDK's 30 s wait, run out at once
    try:
        with pytest.raises(SiblingUnavailable) as failed:
            await worker.start()
    finally:
        await worker.close()
    message = str(failed.value)
    assert message.startswith("sibling_unavailable: no iii engine answers at ws://127.0.0.1:9")
    assert "--engine" in message and "III_URL" in message and "configuration" not in message
    assert client.calls == ["shutdown"]


@WORKERS
async def test_a_connection_dropped_right_after_it_was_made_is_left_to_the_sdk(
    monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`register_worker` returned at once (it connected) and the engine went away since: the SDK
    reconnects by itself, so the start goes on to its first calls (here, the stand-in client
    refuses them) instead of failing as for an engine that never answered."""
    client = _Unreached()
    worker = make(monkeypatch, lambda url, options: client)
    try:
        with pytest.raises(AssertionError, match="nothing is asked of a client"):
            await worker.start()
    finally:
        await worker.close()
    assert client.calls and client.calls[0] != "shutdown"


@WORKERS
async def test_a_stop_while_waiting_for_the_engine_ends_the_start_quietly(
    monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """SIGTERM during the SDK's wait for an engine: the worker still made its first calls
    (5 s more) and then failed with an error, for a stop the user asked for."""
    client = _Unreached()
    workers: list[Any] = []

    def register(url: str, options: Any) -> _Unreached:
        workers[0].stop("SIGTERM")  # arrives while the SDK waits
        return client

    workers.append(worker := make(monkeypatch, register))
    try:
        await worker.start()
    finally:
        await worker.close()
    assert client.calls == ["shutdown"] and getattr(worker, "failure", None) is None
