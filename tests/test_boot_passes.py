"""A boot from the derived snapshots does each pass over the log and the records once, and
what it builds equals a boot without them: the log's CRC-32 is computed once for both
snapshots, replayed records are compacted in bulk with the same values and field sets, the
index's columns come from the records as `indexed` gives them, and a bank with no lane text
takes no lane pass."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.models import Confidence, Memory, Provenance
from memory_worker.search.index import category_code
from memory_worker.search.ranking import indexed
from memory_worker.storage import bank as bank_module
from memory_worker.storage import snapshot as snapshot_module
from memory_worker.storage.bank import MEMORIES_FILE, Bank
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE

from .boots import NOW_MS, session
from .test_records_snapshot import seed, state


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)


HUMAN = Caller.human("cli")


def test_a_boot_from_both_snapshots_reads_the_logs_crc_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(tmp_path)
    folder = tmp_path / "b"
    assert (folder / RECORDS_FILE).is_file() and (folder / SNAPSHOT_FILE).is_file()
    size = (folder / MEMORIES_FILE).stat().st_size
    passes: list[int] = []

    class CountingZlib:
        @staticmethod
        def crc32(data: Any, value: int = 0) -> int:
            if len(data) == size:
                passes.append(len(data))
            return zlib.crc32(data, value)

    monkeypatch.setattr(bank_module, "zlib", CountingZlib)
    monkeypatch.setattr(snapshot_module, "zlib", CountingZlib)
    used: list[bool] = []
    real = bank_module.Bank._index_from_snapshot

    def spy(self: Bank, live: list[Any]) -> bool:
        used.append(real(self, live))
        return used[-1]

    monkeypatch.setattr(bank_module.Bank, "_index_from_snapshot", spy)

    Bank.load("b", folder)

    assert used == [True]
    assert passes == [size]  # the records path's; the index snapshot is checked against it


def test_the_index_snapshot_is_refused_when_the_given_crc_is_not_the_logs(
    tmp_path: Path,
) -> None:
    seed(tmp_path)
    folder = tmp_path / "b"
    data = (folder / MEMORIES_FILE).read_bytes()
    crc = zlib.crc32(data)

    found = snapshot_module.snapshot_prefix(folder, data)
    given = snapshot_module.snapshot_prefix(folder, data, crc)
    wrong = snapshot_module.snapshot_prefix(folder, data, crc ^ 1)

    assert found is not None and given is not None
    assert given[0] == found[0] and given[2] == found[2] == len(data)
    assert wrong is None


def test_a_boot_with_snapshots_equals_one_without(tmp_path: Path) -> None:
    seed(tmp_path)
    folder = tmp_path / "b"
    with_them = Bank.load("b", folder)
    for name in (RECORDS_FILE, SNAPSHOT_FILE):
        (folder / name).unlink()
    without = Bank.load("b", folder)

    assert state(with_them) == state(without)
    assert index_state(with_them) == index_state(without)


def index_state(bank: Bank) -> dict[str, Any]:
    """The index's terms and ranking columns by id (slot order and term numbering aside)."""
    index = bank.index
    out: dict[str, Any] = {}
    for memory_id in bank.memories:
        if memory_id not in index:
            continue
        slot = index._slot_of[memory_id]
        out[memory_id] = (
            sorted((index._terms[t], f) for t, f in index._forward.pairs(slot)),
            float(index.corroboration[slot]),
            bool(index.pinned[slot]),
            float(index.stated_at[slot]),
            float(index.created_at[slot]),
            bool(index.dated[slot]),
            (int(index._told_start[slot]), int(index._told_end[slot])),
            float(index._length[slot]),
            index._doc_tags.get(memory_id, ()),
            int(index.category[slot]),
        )
    return out


def test_a_snapshot_boot_keeps_each_memorys_category_for_retention(tmp_path: Path) -> None:
    async def work(service: MemoryService) -> None:
        for n, category in enumerate(("context", None, "preference", "fact", "context")):
            payload = {"bank": "b", "text": f"note {n} about the garden", "category": category}
            saved = await call(service, "memory::save", payload, HUMAN)
        await call(
            service,
            "memory::update",
            {"bank": "b", "id": saved["memory"]["id"], "category": "procedure"},
            HUMAN,
        )

    session(tmp_path, work)
    folder = tmp_path / "b"
    assert (folder / SNAPSHOT_FILE).is_file()
    booted = Bank.load("b", folder)
    kinds = {m.id: category_code(m.category) for m in booted.memories.values()}
    assert {i: int(booted.index.category[booted.index.slot(i)]) for i in kinds} == kinds
    assert sorted(kinds.values()) == [0, 0, 1, 2, 3]
    for name in (RECORDS_FILE, SNAPSHOT_FILE):
        (folder / name).unlink()
    assert index_state(Bank.load("b", folder)) == index_state(booted)


def _memory(n: int, **fields: Any) -> Memory:
    return Memory(
        id=f"m{n}",
        text=f"note {n}",
        confidence=Confidence.EXTRACTED,
        created_at=NOW_MS - 10,
        updated_at=NOW_MS - n,
        **fields,
    )


def test_a_snapshot_boots_columns_are_what_indexing_each_record_gives() -> None:
    records = [
        _memory(1),
        _memory(2, stated_at=0),  # set, and falsy: not `updated_at`
        _memory(3, stated_at=NOW_MS - 5),
        _memory(4, source=Provenance(session_id="s1", agent="a")),
        _memory(5, source=Provenance(agent="a")),
        _memory(6, stated_at=NOW_MS - 7, source=Provenance(session_id="s2")),
    ]
    docs = [indexed(record) for record in records]
    values = [record.__dict__ for record in records]

    assert bank_module._last_stated(values) == [doc.stated_at for doc in docs]
    assert bank_module._last_stated(values) == [NOW_MS - 1, 0, NOW_MS - 5, NOW_MS - 4,
                                                 NOW_MS - 5, NOW_MS - 7]  # fmt: skip
    assert bank_module._sessions(values) == [doc.session for doc in docs]
    assert bank_module._sessions(values) == [None, None, None, "s1", None, "s2"]
