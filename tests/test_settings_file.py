"""Hot reload without an engine: the YAML settings file is watched and applied through the same
`Reconfigurer` as a configuration change. Waits are on the watcher's condition, never a sleep."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters.settings_file import SettingsFileWatcher
from memory_worker.app.reconfigure import Applied, Reconfigurer
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import SaveRequest
from memory_worker.core.config import Settings, parse_settings
from memory_worker.core.errors import InvalidInput, StorageError
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

from .conftest import HOLDER

pytestmark = pytest.mark.timeout(60)


def _reconfigurer(service: MemoryService, tmp_path: Path) -> Reconfigurer:
    def data_dir_for(settings: Settings) -> Path:
        path = Path(settings.data_dir)
        return path if path.is_absolute() else tmp_path / path

    return Reconfigurer(service, data_dir_for, lambda path: Store.open(path, holder=HOLDER))


async def _edit(watcher: SettingsFileWatcher, text: str | bytes) -> None:
    seen = watcher.attempts
    watcher.path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    async with watcher.changed:
        await asyncio.wait_for(watcher.changed.wait_for(lambda: watcher.attempts > seen), 20)


@pytest.mark.parametrize(
    "fields",
    [
        {"default_bank": "My Notes"},  # every session naming no bank would get no memory
        {"default_bank": ""},
        {"data_dir": ""},  # the working directory itself, its folders opened as banks
        {"data_dir": "   "},
    ],
)
def test_a_setting_that_would_quietly_disable_or_misplace_memory_is_refused(
    fields: dict[str, str],
) -> None:
    with pytest.raises(InvalidInput, match=next(iter(fields))):
        parse_settings(fields)


class TestReconfigurer:
    async def test_fields_apply_at_once_and_the_same_snapshot_is_a_no_op(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        reconfigure = _reconfigurer(service, tmp_path)
        current = service.settings.model_copy(update={"data_dir": str(service.store.root)})
        service.settings = current
        assert await reconfigure.apply(current) is Applied.UNCHANGED
        assert (
            await reconfigure.apply(current.model_copy(update={"recall_limit": 2}))
            is Applied.UPDATED
        )
        assert service.settings.recall_limit == 2

    async def test_a_data_dir_that_cannot_open_keeps_store_and_settings(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        reconfigure = _reconfigurer(service, tmp_path)
        blocker = tmp_path / "file"
        blocker.write_text("x")
        before = (service.store, service.settings)
        with pytest.raises(StorageError):
            await reconfigure.apply(Settings(data_dir=str(blocker / "sub"), recall_limit=1))
        assert (service.store, service.settings) == before
        await service.save(SaveRequest(text="Still writable after the refusal."))

    async def test_a_new_data_dir_is_opened_then_swapped_and_the_old_lock_released(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        old_root = service.store.root
        reconfigure = _reconfigurer(service, tmp_path)
        assert await reconfigure.apply(Settings(data_dir=str(tmp_path / "new"))) is Applied.REOPENED
        assert service.store.root == (tmp_path / "new").resolve()
        await service.save(SaveRequest(text="Lands in the new data dir."))
        reopened = Store.open(old_root, holder=HOLDER)  # the old lock was released
        await reopened.close()

    async def test_an_old_store_failing_to_close_still_leaves_the_new_one_booted(
        self, service: MemoryService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The swap is done once the new store is in place: the old one's close failing (a bank
        whose derived file could not be written) raised out of `apply`, which says "nothing
        changed", and skipped the new store's boot (its banks loaded only at first use)."""
        old_store = service.store
        close = old_store.close
        failed: list[bool] = []

        async def failing_close() -> None:
            await close()  # everything let go, then the error, as `Store.close` does
            if not failed:  # once: the fixture's own close at the end is a real one
                failed.append(True)
                raise StorageError("cannot write .index.npz")

        monkeypatch.setattr(old_store, "close", failing_close)
        booted: list[Path] = []
        boot = service.boot_banks

        async def recorded_boot() -> None:
            booted.append(service.store.root)
            await boot()

        monkeypatch.setattr(service, "boot_banks", recorded_boot)
        reconfigure = _reconfigurer(service, tmp_path)
        assert await reconfigure.apply(Settings(data_dir=str(tmp_path / "new"))) is Applied.REOPENED
        assert booted == [(tmp_path / "new").resolve()]
        await service.save(SaveRequest(text="Lands in the new data dir."))

    async def test_a_write_in_flight_during_a_data_dir_swap_never_lands_in_the_old_dir(
        self, service: MemoryService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A save creating its bank in the old store while data_dir moves: once the old store is
        # closed (its lock released) nothing may be written there, acknowledged yet invisible in
        # the new dir and unguarded against the next holder of the old one.
        old_root = service.store.root
        started, release = threading.Event(), threading.Event()
        create = Bank.create

        def slow_create(*args: Any, **kwargs: Any) -> Bank:
            started.set()
            release.wait(20)
            return create(*args, **kwargs)

        monkeypatch.setattr(Bank, "create", slow_create)
        old_store = service.store
        close = old_store.close

        async def close_then_let_the_save_go() -> None:
            await close()  # the old lock is released now
            release.set()

        monkeypatch.setattr(old_store, "close", close_then_let_the_save_go)
        save = asyncio.create_task(service.save(SaveRequest(text="Written mid swap.", bank="x")))
        await asyncio.to_thread(started.wait, 20)
        reconfigure = _reconfigurer(service, tmp_path)
        assert await reconfigure.apply(Settings(data_dir=str(tmp_path / "new"))) is Applied.REOPENED
        try:
            await save
        except StorageError:
            pass  # refused: the caller retries, into the new dir
        else:
            pytest.fail("the save was acknowledged")
        log = old_root / "x" / "memories.jsonl"
        assert not log.exists() or b"Written mid swap." not in log.read_bytes()


class TestSettingsFile:
    async def test_an_edit_is_applied_and_a_broken_one_keeps_the_last_good(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        path = tmp_path / "memory.yaml"
        path.write_text(f"data_dir: {service.store.root}\n", encoding="utf-8")
        service.settings = Settings(data_dir=str(service.store.root))
        watcher = SettingsFileWatcher(path, _reconfigurer(service, tmp_path).apply)
        await watcher.start()
        try:
            await _edit(watcher, f"data_dir: {service.store.root}\nrecall_limit: 3\n")
            assert service.settings.recall_limit == 3 and watcher.applied == 1
            await _edit(watcher, "recall_limit: [not, a, number\n")
            assert service.settings.recall_limit == 3 and watcher.applied == 1
            await _edit(watcher, f"data_dir: {service.store.root}\nbogus_field: 1\n")
            assert service.settings.recall_limit == 3  # unknown keys are rejected, not ignored
        finally:
            await watcher.stop()

    async def test_a_settings_file_that_is_a_symlink_reloads_when_its_target_is_edited(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        # `~/.config/memory.yaml -> ~/dotfiles/memory.yaml`: an edit writes the target, in a
        # folder the watch of the link's own folder never sees.
        (tmp_path / "dotfiles").mkdir()
        target = tmp_path / "dotfiles" / "memory.yaml"
        root = service.store.root
        target.write_text(f"data_dir: {root}\n", encoding="utf-8")
        (tmp_path / "config").mkdir()
        link = tmp_path / "config" / "memory.yaml"
        link.symlink_to(target)
        service.settings = Settings(data_dir=str(root))
        watcher = SettingsFileWatcher(link, _reconfigurer(service, tmp_path).apply)
        await watcher.start()
        try:
            await _edit(watcher, f"data_dir: {root}\nrecall_limit: 4\n")
            assert service.settings.recall_limit == 4 and watcher.applied == 1
        finally:
            await watcher.stop()

    async def test_a_file_in_another_encoding_is_rejected_and_later_edits_still_apply(
        self, service: MemoryService, tmp_path: Path
    ) -> None:
        path = tmp_path / "memory.yaml"
        root = service.store.root
        path.write_text(f"data_dir: {root}\n", encoding="utf-8")
        service.settings = Settings(data_dir=str(root))
        watcher = SettingsFileWatcher(path, _reconfigurer(service, tmp_path).apply)
        await watcher.start()
        try:
            latin1 = f"data_dir: {root}\nrecall_limit: 2  # café\n".encode("latin-1")
            await _edit(watcher, latin1)  # a Windows editor's save
            assert service.settings.recall_limit == 6 and watcher.applied == 0
            await _edit(watcher, f"data_dir: {root}\nrecall_limit: 3\n")
            assert service.settings.recall_limit == 3 and watcher.applied == 1
        finally:
            await watcher.stop()


async def test_standalone_turns_embeddings_on_without_a_restart(tmp_path: Path) -> None:
    """Issue 21: the settings file turns embeddings on (or picks another local model) and the
    running server loads it and re-embeds; nothing to restart."""
    from memory_worker.adapters.standalone import StandaloneServer
    from memory_worker.app import catalog

    from .fakes import FakeEmbedder

    data_dir = tmp_path / "data"
    path = tmp_path / "memory.yaml"
    path.write_text(f"data_dir: {data_dir}\nembeddings_enabled: false\n", encoding="utf-8")
    loaded: list[str] = []

    def embedder_for(settings: Settings) -> FakeEmbedder:
        loaded.append(settings.embedding_model)
        return FakeEmbedder(settings.embedding_model or "fake-default")

    server = StandaloneServer(
        Settings(data_dir=str(data_dir), embeddings_enabled=False),
        data_dir,
        port=0,
        config_path=path,
    )
    server.embedder_for = embedder_for
    await server.start()
    try:
        service = server.service
        watcher = server.settings_watcher
        assert service is not None and watcher is not None and service.embedder is None
        await catalog.call(service, "memory::save", {"text": "Rafa publishes blog posts weekly"})
        query = {"query": "writes essays"}
        assert (await catalog.call(service, "memory::recall", query))["retrieval"] == "bm25-entity"
        await _edit(watcher, f"data_dir: {data_dir}\nembeddings_enabled: true\n")
        await service.settle()
        assert loaded == [""] and service.embedder is not None
        result = await catalog.call(service, "memory::recall", query)
        assert result["retrieval"] == "bm25-entity-semantic" and result["memories"]
        await _edit(watcher, f"data_dir: {data_dir}\nembedding_model: other\n")
        await service.settle()
        assert loaded == ["", "other"] and service.embedder.model == "other"
        assert (await catalog.call(service, "memory::recall", query))["memories"]
    finally:
        await server.close()
