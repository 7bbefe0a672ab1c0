"""`memory-worker serve` picks its mode: `--standalone` → `--engine` → `$III_URL` → an engine
answering at the default address → standalone, and says why."""

from __future__ import annotations

import socket

import pytest

from memory_worker.adapters import cli


def test_standalone_flag_wins_over_everything() -> None:
    url, reason = cli.choose_mode(True, "ws://e:1", {"III_URL": "ws://x:2"})
    assert url is None and "--standalone" in reason


def test_engine_flag_then_env() -> None:
    assert cli.choose_mode(False, "ws://e:1", {"III_URL": "ws://x:2"}) == (
        "ws://e:1",
        "--engine was given",
    )
    assert cli.choose_mode(False, None, {"III_URL": "ws://x:2"}) == ("ws://x:2", "III_URL is set")


def test_default_address_is_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"ws://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setattr(cli, "DEFAULT_ENGINE_URL", url)
        assert cli.choose_mode(False, None, {}) == (url, f"an engine answers at {url}")
    # Closed now: nothing answers, so standalone, naming the address it tried.
    found, reason = cli.choose_mode(False, None, {})
    assert found is None and url in reason
