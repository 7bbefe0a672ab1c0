"""`memory::doctor` on data dirs a person really has."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_worker.app import catalog
from memory_worker.app.doctor import DOCTOR_PROBE_TEXT
from memory_worker.app.service import MemoryService
from memory_worker.core import transitions
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter


async def test_lost_and_found_of_a_mount_point_is_not_a_broken_bank(
    data_dir: Path, clock: FixedClock
) -> None:
    # A data dir that is its own file system (a volume, a mounted disk) has fsck's `lost+found`:
    # never a bank, so it must not fail doctor's required checks forever.
    (data_dir / "lost+found").mkdir(parents=True)
    store = Store.open(data_dir, holder=HOLDER)
    try:
        service = MemoryService(store, Settings(), emitter=RecordingEmitter(), clock=clock)
        report = await catalog.call(service, "memory::doctor", {})
        failed = [c for c in report["checks"] if c["required"] and not c["ok"]]
        assert report["ok"] is True, failed
        assert (await catalog.call(service, "memory::bank::list", {}))["banks"] == []
    finally:
        await store.close()


async def test_a_scratch_bank_left_by_a_killed_doctor_run_is_cleared_by_the_next(
    service: MemoryService, data_dir: Path
) -> None:
    # A worker killed mid-roundtrip leaves `doctor-NNNNNN` behind: a bank no one made, listed
    # (and counted against max_banks) for good, since every later run picks another name.
    bank, _ = await service.store.ensure("doctor-004242", "doctor scratch")
    probe = transitions.new_memory(
        bank.new_id(DOCTOR_PROBE_TEXT), DOCTOR_PROBE_TEXT, now_ms=service.clock()
    )
    await bank.commit([probe])
    report = await catalog.call(service, "memory::doctor", {})
    assert report["ok"] is True
    assert (await catalog.call(service, "memory::bank::list", {}))["banks"] == []
    assert not (data_dir / "doctor-004242").exists()
    roundtrip = {c["name"]: c for c in report["checks"]}["store-roundtrip"]
    assert "doctor-004242" in roundtrip["detail"]


async def test_a_bank_named_like_a_scratch_that_holds_data_is_left_alone(
    service: MemoryService,
) -> None:
    await catalog.call(
        service, "memory::save", {"bank": "doctor-000001", "text": "The user owns this bank"}
    )
    mimic, _ = await service.store.ensure("doctor-000002", "doctor scratch")
    await mimic.commit(
        [transitions.new_memory(mimic.new_id("A real note"), "A real note", now_ms=1)]
    )
    assert (await catalog.call(service, "memory::doctor", {}))["ok"] is True
    banks = (await catalog.call(service, "memory::bank::list", {}))["banks"]
    assert sorted(b["name"] for b in banks) == ["doctor-000001", "doctor-000002"]


@pytest.mark.parametrize(
    ("engine_less", "settings", "ok", "says"),
    [
        (True, {}, False, "Stop hook queues none"),  # the standalone server's and the CLI's default
        (True, {"extraction_endpoint": "http://127.0.0.1:8088/v1"}, True, "127.0.0.1:8088"),
        (False, {}, True, "router::complete"),
        (False, {"extraction_enabled": False}, False, "extraction_enabled is false"),
    ],
)
async def test_doctor_names_whether_turns_are_extracted(
    store: Store,
    clock: FixedClock,
    engine_less: bool,
    settings: dict[str, object],
    ok: bool,
    says: str,
) -> None:
    # Without an engine and an endpoint nothing said in a conversation is remembered unless the
    # agent saves it: the degradation a person asking "why is memory absent?" needs named.
    service = MemoryService(store, Settings(**settings), clock=clock, engine_less=engine_less)
    report = await catalog.call(service, "memory::doctor", {})
    check = {c["name"]: c for c in report["checks"]}["extraction"]
    assert (check["ok"], check["required"]) == (ok, False)
    assert says in check["detail"]
    assert report["ok"] is True  # advisory: explicit saves and recall still work
