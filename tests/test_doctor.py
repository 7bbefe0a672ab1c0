"""`memory::doctor` on data dirs a person really has."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_worker.app import catalog
from memory_worker.app.doctor import DOCTOR_PROBE_TEXT
from memory_worker.app.service import MemoryService
from memory_worker.core import transitions
from memory_worker.core.config import Settings
from memory_worker.storage.capture import CAPTURE_FILE, CaptureQueue
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


def _capture_check(report: dict[str, object]) -> dict[str, object]:
    checks = report["checks"]
    assert isinstance(checks, list)
    check = {c["name"]: c for c in checks}["capture-queue"]
    assert check["required"] is False  # advisory: saves and recall still work
    return dict(check)


_TURN = {"session_id": "s1", "bank": "main", "entries": [{"role": "user", "content": "hi"}]}
_ENDPOINT = {"extraction_endpoint": "http://127.0.0.1:8088/v1"}


async def test_doctor_says_no_turn_waits_when_the_queue_is_empty(
    store: Store, clock: FixedClock
) -> None:
    service = MemoryService(store, Settings(**_ENDPOINT), clock=clock, engine_less=True)
    check = _capture_check(await catalog.call(service, "memory::doctor", {}))
    assert (check["ok"], check["detail"]) == (True, "no turn waits for extraction")
    assert not (store.root / CAPTURE_FILE).exists()  # looking writes nothing


async def test_doctor_names_turns_waiting_and_flags_them_past_a_day(
    store: Store, clock: FixedClock
) -> None:
    # Turns a Stop hook queued wait for the extraction endpoint: a person asking why a
    # conversation was not remembered needs to see them, and an endpoint that has taken more
    # than a day is worth a look.
    queue = CaptureQueue(store.root)
    queue.enqueue(dict(_TURN), job_id="j1", now_ms=clock())
    queue.close()
    service = MemoryService(store, Settings(**_ENDPOINT), clock=clock, engine_less=True)
    check = _capture_check(await catalog.call(service, "memory::doctor", {}))
    assert check["ok"] is True
    assert "1 turn(s) wait for extraction, the oldest queued 2026-11-01" in str(check["detail"])
    clock.advance_days(2)
    check = _capture_check(await catalog.call(service, "memory::doctor", {}))
    assert check["ok"] is False
    assert "waiting over a day" in str(check["detail"])


@pytest.mark.parametrize(
    ("engine_less", "says"),
    [
        (True, "nothing here extracts them"),  # no endpoint configured
        # Under an engine turns go through router::complete: a standalone run's queue waits for a
        # standalone server with an extraction endpoint.
        (False, "under an engine this queue is not read"),
    ],
)
async def test_doctor_flags_turns_queued_where_nothing_extracts_them(
    store: Store, clock: FixedClock, engine_less: bool, says: str
) -> None:
    queue = CaptureQueue(store.root)
    queue.enqueue(dict(_TURN), job_id="j1", now_ms=clock())
    queue.close()
    service = MemoryService(store, Settings(), clock=clock, engine_less=engine_less)
    check = _capture_check(await catalog.call(service, "memory::doctor", {}))
    assert check["ok"] is False
    assert says in str(check["detail"])


async def test_doctor_counts_the_jobs_that_will_never_run(store: Store, clock: FixedClock) -> None:
    # A dead job's turn is not remembered and its messages stay in the file: visible, with the
    # expired ones (messages dropped) told apart.
    queue = CaptureQueue(store.root)
    for job_id in ("j1", "j2", "j3"):
        queue.enqueue(dict(_TURN, session_id=job_id), job_id=job_id, now_ms=clock())
    queue.failed("j1", "model said no", now_ms=clock(), retry_in_ms=0, last=True)
    queue.expire(clock() + 1, "expired: test", now_ms=clock())  # j2 and j3
    service = MemoryService(store, Settings(**_ENDPOINT), clock=clock, engine_less=True)
    try:  # read through the queue this process holds open
        check = _capture_check(await catalog.call(service, "memory::doctor", {}))
    finally:
        queue.close()
    assert check["ok"] is False
    assert "3 job(s) will never run (2 expired" in str(check["detail"])
    assert "1 failed past their attempts" in str(check["detail"])
    reread = _capture_check(await catalog.call(service, "memory::doctor", {}))  # from the file
    assert reread == check


async def test_doctor_reports_a_queue_file_it_cannot_read_instead_of_failing(
    store: Store, clock: FixedClock
) -> None:
    # A folder (or a link, a pipe) where the queue file belongs: the one check says so, not
    # a storage error out of the whole report a person runs to learn what is wrong.
    (store.root / CAPTURE_FILE).mkdir()
    service = MemoryService(store, Settings(**_ENDPOINT), clock=clock, engine_less=True)
    report = await catalog.call(service, "memory::doctor", {})
    check = _capture_check(report)
    assert check["ok"] is False
    assert f"{CAPTURE_FILE} cannot be read" in str(check["detail"])
    assert report["ok"] is True  # advisory: saves and recall still work
