"""`memory-worker serve` picks its mode: `--standalone` → `--engine` → `$III_URL` → an engine
answering at the default address → standalone, and says why."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from iii import InvocationError

from memory_worker.adapters import cli
from memory_worker.adapters.bus.worker import EngineWorker
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable


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
