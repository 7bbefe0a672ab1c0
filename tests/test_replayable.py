"""Acknowledged means replayable (issue 11): a record the worker answered ok for is one the next
boot reads back — counters at their limits, timestamps at theirs. Every record is checked before
it is written, counters never pass `MAX_INT`, every timestamp a caller gives is bounded by the
last instant a date can show, and a record already on disk past it still renders."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, InvalidInput, StorageError, WorkerError
from memory_worker.core.models import MAX_INT, MAX_TIME_MS, Memory
from memory_worker.storage.log import MEMORIES_FILE, encode
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock

TEXTS = ("The user likes green tea", "The office is in Lisbon", "Posts go out on Tuesdays")


def _open(data: Path, clock: FixedClock | None = None) -> MemoryService:
    store = Store.open(data, holder=HOLDER)
    return MemoryService(store, Settings(), clock=clock or FixedClock())


async def _everything(service: MemoryService) -> dict[str, Any]:
    listed = await catalog.call(service, "memory::list", {"include_superseded": True, "limit": 500})
    return {m["id"]: m for m in listed["memories"]}


async def _replays(service: MemoryService, data: Path) -> MemoryService:
    """Reopen the data dir: it must serve exactly what RAM served, with nothing skipped."""
    before = await _everything(service)
    await service.store.close()
    again = _open(data, service.clock)  # type: ignore[arg-type]
    bank = again.store.find("main")
    assert bank is None or bank.damage == [], [d.describe() for d in bank.damage]
    assert await _everything(again) == before
    return again


# --- counters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function_id", "extra"),
    [
        ("memory::update", {"text": "The user likes black tea"}),
        ("memory::update", {"tags": ["tea"]}),
        ("memory::pin", {"pinned": True}),
        ("memory::delete", {}),
        ("memory::supersede", {"superseded_by": None}),
    ],
    ids=["update-text", "update-tags", "pin", "delete", "supersede"],
)
async def test_a_change_past_the_last_revision_is_refused_not_lost_at_replay(
    data_dir: Path, function_id: str, extra: dict[str, Any]
) -> None:
    """Imported at revision 2^63-1, the next revision (2^63) was written, acknowledged, and
    refused as corrupt at the next boot: the change lost, doctor blaming the disk."""
    service = _open(data_dir)
    try:
        await service.import_records(
            "main", [{"id": "fplast", "text": TEXTS[0], "revision": MAX_INT}, {"text": TEXTS[1]}]
        )
        other = next(m for m in (await _everything(service)) if m != "fplast")
        payload = {"id": "fplast", **extra}
        if function_id == "memory::supersede":
            payload["superseded_by"] = other
        with pytest.raises(Conflict, match="last revision"):
            await catalog.call(service, function_id, payload)
        service = await _replays(service, data_dir)
        assert (await _everything(service))["fplast"]["revision"] == MAX_INT
    finally:
        await service.store.close()


async def test_corroboration_at_its_limit_saturates_and_replays(data_dir: Path) -> None:
    service = _open(data_dir)
    try:
        await service.import_records(
            "main",
            [
                {"id": "fpa", "text": TEXTS[0], "corroboration": MAX_INT},
                {"id": "fpb", "text": TEXTS[1], "corroboration": MAX_INT},
            ],
        )
        resaved = await catalog.call(service, "memory::save", {"text": TEXTS[0]})
        assert resaved["memory"]["corroboration"] == MAX_INT
        merged = await catalog.call(
            service, "memory::supersede", {"id": "fpb", "superseded_by": "fpa", "reinforce": True}
        )
        assert merged["reinforced"] is True
        service = await _replays(service, data_dir)
        assert (await _everything(service))["fpa"]["corroboration"] == MAX_INT
    finally:
        await service.store.close()


async def test_a_record_replay_could_not_read_is_never_written(data_dir: Path) -> None:
    """The last guard, below every transition: `model_copy` skips validation, so the commit
    reads each line back before writing it."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        bank, _ = await store.ensure("main")
        good = Memory(id="fp1", text=TEXTS[0], confidence="stated", created_at=1, updated_at=1)
        await bank.commit([good])
        bad = good.model_copy(update={"revision": MAX_INT + 1})
        with pytest.raises(StorageError, match="replay could not read it back"):
            await bank.commit([good.model_copy(update={"revision": 1}), bad])
        size = (bank.path / MEMORIES_FILE).stat().st_size
        assert bank.get("fp1") == good
    finally:
        await store.close()
    assert (data_dir / "main" / MEMORIES_FILE).stat().st_size == size


# --- timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["created_at", "updated_at", "stated_at", "invalid_at"])
async def test_an_imported_timestamp_past_year_9999_is_refused(
    service: MemoryService, field: str
) -> None:
    with pytest.raises(InvalidInput, match=field):
        await service.import_records("main", [{"text": TEXTS[0], field: MAX_TIME_MS + 1}])
    assert service.store.names() == []
    await service.import_records("main", [{"text": TEXTS[0], field: MAX_TIME_MS}])


async def test_recall_as_of_past_year_9999_is_refused(service: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="as_of"):
        await catalog.call(service, "memory::recall", {"query": "tea", "as_of": MAX_TIME_MS + 1})


async def test_preview_and_the_hook_render_a_record_dated_past_year_9999(
    data_dir: Path,
) -> None:
    """A record written before timestamps were bounded (or by hand) still loads (up to
    `MAX_INT`); showing it must not fail the bank's every turn."""
    store = Store.open(data_dir, holder=HOLDER)
    bank, _ = await store.ensure("main")
    far = MAX_TIME_MS * 10
    record = Memory(
        id="fpfar", text=TEXTS[0], confidence="stated", created_at=far, updated_at=far,
        stated_at=far,
    )  # fmt: skip
    await bank.commit([record])
    await store.close()
    service = _open(data_dir, FixedClock(far + 1))
    try:
        preview = await catalog.call(service, "memory::preview", {"query": "green tea"})
        assert [m["memory"]["id"] for m in preview["memories"]] == ["fpfar"]
        assert "9999-12-31" in (preview["message"] or "")
        recalled = await catalog.call(service, "memory::recall", {"query": "green tea"})
        assert recalled["memories"][0]["memory"]["id"] == "fpfar"
    finally:
        await service.store.close()


async def test_a_record_stated_past_year_9999_with_a_relative_time_loads_and_recalls(
    data_dir: Path,
) -> None:
    """A record on disk stated past the last calendar day ("yesterday" said in year 292 million)
    points to no time: indexing it (its told span) must not fail the boot that replays it, a
    recall naming a time, or an edit of it (a flusher that raised left the save waiting)."""
    store = Store.open(data_dir, holder=HOLDER)
    await store.ensure("main")
    await store.close()
    record = Memory(
        id="fpfar", text="The user tried green tea yesterday", confidence="stated",
        created_at=MAX_INT, updated_at=MAX_INT, stated_at=MAX_INT,
    )  # fmt: skip
    with (data_dir / "main" / MEMORIES_FILE).open("ab") as fh:
        fh.write(encode([record]))
    service = _open(data_dir, FixedClock(MAX_TIME_MS))
    try:
        question = {"query": "what tea did the user try last week?"}
        recalled = await catalog.call(service, "memory::recall", question)
        assert [m["memory"]["id"] for m in recalled["memories"]] == ["fpfar"]
        await catalog.call(service, "memory::pin", {"id": "fpfar", "pinned": True})
        recalled = await catalog.call(service, "memory::recall", question)
        assert recalled["memories"][0]["memory"]["pinned"] is True
    finally:
        await service.store.close()


# --- everything acknowledged replays ---------------------------------------------------------

_EDGE_COUNT = st.sampled_from([0, 1, MAX_INT - 2, MAX_INT - 1, MAX_INT])
_EDGE_TIME = st.sampled_from([0, 1, MAX_TIME_MS - 1, MAX_TIME_MS])
_rows = st.lists(
    st.fixed_dictionaries(
        {
            "text": st.sampled_from(TEXTS),
            "revision": _EDGE_COUNT,
            "corroboration": _EDGE_COUNT,
            "created_at": _EDGE_TIME,
            "updated_at": _EDGE_TIME,
            "stated_at": _EDGE_TIME,
            "pinned": st.booleans(),
        }
    ),
    min_size=1,
    max_size=3,
)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.sampled_from(TEXTS)),
        st.tuples(st.just("update"), st.integers(0, 5), st.sampled_from(TEXTS)),
        st.tuples(st.just("pin"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("supersede"), st.integers(0, 5), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("tick"), st.sampled_from([1, 86_400_000])),
    ),
    max_size=12,
)


def _call_for(op: tuple[Any, ...], ids: list[str]) -> tuple[str, dict[str, Any]]:
    def pick(n: int) -> str:
        return ids[n % len(ids)]

    kind = op[0]
    if kind == "save":
        return "memory::save", {"text": op[1]}
    if kind == "update":
        return "memory::update", {"id": pick(op[1]), "text": op[2] + "!"}
    if kind == "pin":
        return "memory::pin", {"id": pick(op[1]), "pinned": op[2]}
    if kind == "delete":
        return "memory::delete", {"id": pick(op[1])}
    payload = {"id": pick(op[1]), "superseded_by": pick(op[2]), "reinforce": op[3]}
    return "memory::supersede", payload


async def _acknowledged_replays(data: Path, rows: list[dict[str, Any]], ops: list[Any]) -> int:
    """Returns how many calls were acknowledged (so the property is not vacuous)."""
    clock = FixedClock()
    service = _open(data, clock)
    acknowledged = 0
    try:
        try:
            await service.import_records("main", rows)
        except WorkerError:
            return 0  # refused whole: nothing was acknowledged
        acknowledged += 1
        ids = sorted(await _everything(service))
        for op in ops:
            if op[0] == "tick":
                clock.advance(op[1])
                continue
            function_id, payload = _call_for(op, ids)
            try:
                await catalog.call(service, function_id, payload)
            except (Conflict, InvalidInput):
                continue  # refused: nothing written
            acknowledged += 1
            ids = sorted(await _everything(service))
        service = await _replays(service, data)
    finally:
        await service.store.close()
    return acknowledged


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=_rows, ops=_ops)
def test_every_acknowledged_record_replays(rows: list[dict[str, Any]], ops: list[Any]) -> None:
    """Records at the edges (counters near `MAX_INT`, timestamps at year 9999), then any mix of
    calls: whatever was answered ok is exactly what a reopen serves, nothing skipped."""
    root = Path(tempfile.mkdtemp(prefix="replayable-"))
    try:
        acknowledged = asyncio.run(_acknowledged_replays(root / "data", rows, ops))
    finally:
        shutil.rmtree(root)
    event(f"acknowledged calls: {min(acknowledged, 5)}+")
