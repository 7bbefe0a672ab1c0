"""The derived records snapshot (`.records.npz`): a boot takes its records from the lines it
names only when the log's bytes are exactly the ones it was written for, and what it loads is
what a full replay loads, record for record; any other log (appended, edited, truncated, damaged)
is replayed line by line with its damage report, as if the file were absent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.models import Confidence, Memory
from memory_worker.storage import bank as bank_module
from memory_worker.storage.bank import MEMORIES_FILE, Bank
from memory_worker.storage.log import (
    RESTORED_FORM,
    encode,
    read_all,
    replayed,
    winning_spans,
)
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE

from .boots import NOW_MS, TEXTS, session

HUMAN = Caller.human("cli")


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)


@pytest.fixture
def records_uses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each bank load took its records from the snapshot."""
    seen: list[bool] = []
    real = bank_module.Bank._replay_from_records

    def spy(self: Bank, *, lazy: bool = False) -> tuple[int, int] | None:
        identity = real(self, lazy=lazy)
        seen.append(identity is not None)
        return identity

    monkeypatch.setattr(bank_module.Bank, "_replay_from_records", spy)
    yield seen


def seed(data_dir: Path) -> None:
    """Saves, a reinforcement, an edit, a pin, a delete and a batch import: ids with several
    revisions, tombstones and multi-record writes in the log."""

    async def work(service: MemoryService) -> None:
        ids = []
        for text in TEXTS:
            saved = await call(service, "memory::save", {"bank": "b", "text": text}, HUMAN)
            ids.append(saved["memory"]["id"])
        await call(service, "memory::save", {"bank": "b", "text": TEXTS[0]}, HUMAN)
        await call(
            service, "memory::update", {"bank": "b", "id": ids[1], "text": "Rui plays go"}, HUMAN
        )
        await call(service, "memory::pin", {"bank": "b", "id": ids[2], "pinned": True}, HUMAN)
        await call(service, "memory::delete", {"bank": "b", "id": ids[3]}, HUMAN)
        await service.import_records(
            "b",
            [
                {"text": f"imported note {i} about the garden", "confidence": "extracted",
                 "created_at": NOW_MS - i, "tags": ["g"]}
                for i in range(4)
            ],
        )  # fmt: skip

    session(data_dir, work)


def state(bank: Bank) -> dict[str, Any]:
    """Everything a load decides, record by record and in order."""
    return {
        "ids": list(bank.memories),
        "records": [
            (r.to_line(), r.model_dump(), r.model_fields_set) for r in bank.memories.values()
        ],
        "by_text": dict(bank._by_text),
        "damage": [d.describe() for d in bank.damage],
        "live": bank.live_count(),
        "index": [i in bank.index for i in bank.memories],
    }


def load(data_dir: Path) -> Bank:
    return Bank.load("b", data_dir / "b")


def plain_replay(data_dir: Path) -> dict[str, Any]:
    """What the log replays to with no derived file beside it (the files put back after)."""
    folder = data_dir / "b"
    kept = {name: (folder / name).read_bytes() for name in (RECORDS_FILE, SNAPSHOT_FILE)
            if (folder / name).is_file()}  # fmt: skip
    for name in kept:
        (folder / name).unlink()
    try:
        return state(load(data_dir))
    finally:
        for name, data in kept.items():
            (folder / name).write_bytes(data)


def test_a_closed_bank_leaves_records_a_boot_uses_and_they_equal_a_replay(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    seed(tmp_path)
    assert (tmp_path / "b" / RECORDS_FILE).is_file()

    from_records = state(load(tmp_path))
    replayed_state = plain_replay(tmp_path)

    assert records_uses == [True, False]
    assert from_records == replayed_state
    assert len(from_records["ids"]) == len(TEXTS) + 4 and not from_records["damage"]


def test_materialised_records_answer_recall_and_saves_as_replayed_ones(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    seed(tmp_path)

    async def work(service: MemoryService) -> tuple[list[str], str, str]:
        found = await call(service, "memory::recall", {"bank": "b", "query": "bakery"}, HUMAN)
        again = await call(service, "memory::save", {"bank": "b", "text": TEXTS[4]}, HUMAN)
        new = await call(service, "memory::save", {"bank": "b", "text": "a new one"}, HUMAN)
        return [h["memory"]["id"] for h in found["memories"]], again["created"], new["created"]

    ids, reinforced_created, new_created = session(tmp_path, work)
    assert records_uses == [True]
    assert ids and not reinforced_created and new_created  # the exact-text map found the text
    assert state(load(tmp_path)) == plain_replay(tmp_path)  # its own records, written at close
    assert records_uses[-2:] == [True, False]


def _arrays(path: Path) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]).tolist() for name in data.files if name != "meta"}
        arrays["meta"] = json.loads(bytes(data["meta"]).decode())
    return arrays


def test_records_of_a_grown_log_scan_only_its_new_lines_and_equal_a_full_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(tmp_path)
    ids = list(load(tmp_path).memories)
    scans: list[int] = []
    real = bank_module.winning_spans

    def spy(data: bytes, start_at: int = 0) -> Any:
        scans.append(start_at)
        return real(data, start_at)

    monkeypatch.setattr(bank_module, "winning_spans", spy)

    async def grow(service: MemoryService) -> None:
        await call(
            service, "memory::update", {"bank": "b", "id": ids[0], "text": "Ana moved"}, HUMAN
        )
        await call(
            service, "memory::save", {"bank": "b", "text": "a memory past the prefix"}, HUMAN
        )
        await call(service, "memory::delete", {"bank": "b", "id": ids[4]}, HUMAN)

    session(tmp_path, grow)
    records = tmp_path / "b" / RECORDS_FILE
    grown = _arrays(records)
    records.unlink()
    session(tmp_path, lambda service: asyncio.sleep(0))  # no change: its close scans it all

    assert scans[0] > 0 and scans[1:] == [0]  # first only the new lines, then the whole log
    assert _arrays(records) == grown
    assert state(load(tmp_path)) == plain_replay(tmp_path)


def _append_hand_line(log: Path) -> None:
    line = json.loads(log.read_bytes().splitlines()[0])
    line.pop("crc")  # a line edited by hand drops its checksum
    line.update(id="fphandwritten0001", text="Zelda keeps bees on the roof", revision=0)
    with log.open("ab") as fh:
        fh.write(json.dumps(line).encode() + b"\n")


def _edit_in_place(log: Path) -> None:
    # Same length, one byte of a text changed: the line's checksum no longer matches.
    data = log.read_bytes()
    at = data.index(b"Lisbon")
    log.write_bytes(data[:at] + b"L" + data[at + 1 :].replace(b"isbon", b"isbxn", 1))


def _raise_a_revision(log: Path) -> None:
    # Valid JSON, the same length: only the checksum catches it.
    data = log.read_bytes()
    log.write_bytes(data.replace(b'"revision":0', b'"revision":9', 1))


def _torn_tail(log: Path) -> None:
    data = log.read_bytes()
    log.write_bytes(data[: len(data) - 20])


def _drop_first_line(log: Path) -> None:
    data = log.read_bytes()
    log.write_bytes(data[data.index(b"\n") + 1 :])


@pytest.mark.parametrize(
    "change", [_edit_in_place, _raise_a_revision, _torn_tail, _drop_first_line]
)
def test_a_log_changed_behind_the_records_is_replayed_line_by_line(
    tmp_path: Path, records_uses: list[bool], change: Callable[[Path], None]
) -> None:
    seed(tmp_path)
    change(tmp_path / "b" / MEMORIES_FILE)

    loaded = state(load(tmp_path))
    expected = plain_replay(tmp_path)

    assert records_uses == [False, False]
    assert loaded == expected


def test_a_log_appended_behind_the_records_replays_only_the_new_line_over_them(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    # The records are for a prefix of the log; the hand-written line past it is replayed.
    seed(tmp_path)
    _append_hand_line(tmp_path / "b" / MEMORIES_FILE)

    loaded = state(load(tmp_path))
    expected = plain_replay(tmp_path)

    assert records_uses == [True, False]
    assert loaded == expected and "fphandwritten0001" in loaded["ids"]


def test_tags_written_by_hand_load_as_stored_from_the_records_as_from_a_replay(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    """A hand-written line's tags ("Billing") and category ("Procedure") load normalized as the
    worker stores them, by the replay that first reads the line and by the boots the records
    written at its close serve."""
    seed(tmp_path)
    hand = (
        b'{"id":"fphandtagged00001","text":"The invoice run is on Mondays",'
        b'"confidence":"stated","created_at":1,"updated_at":1,"tags":["Billing","g"],'
        b'"category":"Procedure"}\n'
    )
    with (tmp_path / "b" / MEMORIES_FILE).open("ab") as handle:
        handle.write(hand)
    session(tmp_path, lambda service: asyncio.sleep(0))  # replays the line, leaves the records

    loaded = state(load(tmp_path))
    expected = plain_replay(tmp_path)

    assert records_uses[-2:] == [True, False]
    assert loaded == expected
    record = load(tmp_path).memories["fphandtagged00001"]
    assert (record.tags, record.category) == (("billing", "g"), "procedure")


def test_only_records_of_hand_written_lines_are_read_again_for_their_form(
    tmp_path: Path, records_uses: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records file says whether every line was in the form the worker stores when it was
    written: a boot from one the worker's writes alone made skips the per-record pass over
    tags and categories (~1 µs a record: 1 s of a 1M-memory boot's 10); one that holds a line
    written by hand runs it, and tells doctor so."""
    passes: list[bool] = []
    real = bank_module.as_stored

    def counted(memories: dict[str, Memory], *, compact: bool = True) -> list[int]:
        changed = real(memories, compact=compact)
        passes.append(bool(changed))
        return changed

    monkeypatch.setattr(bank_module, "as_stored", counted)
    seed(tmp_path)
    clean = load(tmp_path)
    assert records_uses[-1] and passes == []  # the worker's lines: no pass
    assert not any(d.reason == RESTORED_FORM for d in clean.damage)

    hand = (
        b'{"id":"fphandtagged00002","text":"The invoice run is on Fridays",'
        b'"confidence":"stated","created_at":1,"updated_at":1,"tags":["Billing"]}\n'
    )
    with (tmp_path / "b" / MEMORIES_FILE).open("ab") as handle:
        handle.write(hand)
    session(tmp_path, lambda service: asyncio.sleep(0))  # replays it, leaves the records
    booted = load(tmp_path)
    assert records_uses[-1] and passes == [True]
    assert booted.memories["fphandtagged00002"].tags == ("billing",)
    assert any(d.reason == RESTORED_FORM for d in booted.damage)


def _garble_a_line(log: Path) -> None:
    # One byte of a line's JSON changed: it no longer reads as a record.
    data = log.read_bytes()
    at = data.index(b'"text":')
    log.write_bytes(data[:at] + b"'" + data[at + 1 :])


def test_a_damaged_log_keeps_its_damage_report_and_gets_no_records(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    seed(tmp_path)
    _garble_a_line(tmp_path / "b" / MEMORIES_FILE)
    (tmp_path / "b" / RECORDS_FILE).unlink()

    first = session(tmp_path, lambda service: _damage_of(service))
    second = session(tmp_path, lambda service: _damage_of(service))

    assert first and first == second  # reported at every boot
    assert not (tmp_path / "b" / RECORDS_FILE).exists()  # never vouched for
    assert records_uses == [False, False]


@pytest.mark.parametrize("change", [_edit_in_place, _raise_a_revision])
def test_a_log_edited_by_hand_is_named_once_and_gets_its_records_again(
    tmp_path: Path, records_uses: list[bool], change: Callable[[Path], None]
) -> None:
    """A line that parses but no longer matches its checksum was edited by hand: the load that
    reads it names it, and the records written at close vouch for the log as it now reads."""
    seed(tmp_path)
    change(tmp_path / "b" / MEMORIES_FILE)
    (tmp_path / "b" / RECORDS_FILE).unlink()

    first = session(tmp_path, lambda service: _damage_of(service))
    assert first and all("edited by hand" in note for note in first)
    assert (tmp_path / "b" / RECORDS_FILE).exists()
    expected = plain_replay(tmp_path)
    loaded = state(load(tmp_path))  # booted from the records: the edit as it reads
    assert loaded.pop("damage") == [] and expected.pop("damage") == first  # named once
    assert loaded == expected
    assert records_uses == [False, False, True]  # session, plain replay, then the records


async def _damage_of(service: MemoryService) -> list[str]:
    bank = service.store.get("b")
    assert bank is not None
    return [d.describe() for d in bank.damage if d.file == MEMORIES_FILE]


def _rewrite(path: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    edit(arrays)
    np.savez(path, **arrays)


def _meta(arrays: dict[str, np.ndarray], **changes: Any) -> None:
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta.update(changes)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)


def _garbage(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04 not a zip at all")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _span_past_the_end(path: Path) -> None:
    _rewrite(path, lambda a: a["ends"].__setitem__(0, 10**9))


def _span_inside_a_line(path: Path) -> None:
    _rewrite(path, lambda a: a["starts"].__setitem__(0, int(a["starts"][0]) + 1))


def _two_spans_one_line(path: Path) -> None:
    def edit(a: dict[str, np.ndarray]) -> None:
        a["starts"][1], a["ends"][1] = a["starts"][0], a["ends"][0]

    _rewrite(path, edit)


def _other_code(path: Path) -> None:
    _rewrite(path, lambda a: _meta(a, code="0" * 16))


def _other_log(path: Path) -> None:
    _rewrite(path, lambda a: _meta(a, log_crc=12345))


def _short_count(path: Path) -> None:
    _rewrite(path, lambda a: _meta(a, count=1))


@pytest.mark.parametrize(
    "damage",
    [
        _garbage,
        _truncated,
        _span_past_the_end,
        _span_inside_a_line,
        _two_spans_one_line,
        _other_code,
        _other_log,
        _short_count,
    ],
)
def test_a_damaged_records_file_is_ignored_and_changes_nothing(
    tmp_path: Path, records_uses: list[bool], damage: Callable[[Path], None]
) -> None:
    seed(tmp_path)
    expected = plain_replay(tmp_path)
    damage(tmp_path / "b" / RECORDS_FILE)
    records_uses.clear()

    assert state(load(tmp_path)) == expected
    assert records_uses == [False]


def _record(memory_id: str, text: str, revision: int) -> Memory:
    return Memory(
        id=memory_id, text=text, confidence=Confidence.EXTRACTED, created_at=1, updated_at=1,
        revision=revision,
    )  # fmt: skip


def test_winning_spans_follow_replays_rule(tmp_path: Path) -> None:
    # Last wins by id and revision, a tie going to the later line; order is first appearance.
    lines = [
        encode([_record("fpa", "a0", 0)]),
        encode([_record("fpb", "b1", 1)]),
        encode([_record("fpa", "a1", 1)]),
        encode([_record("fpb", "b0", 0)]),  # lower revision: loses
        encode([_record("fpa", "a1 again", 1)]),  # tie: the later line wins
        encode([_record("fpc", "c0", 0), _record("fpd", "d0", 0)]),  # a batch
    ]
    data = b"".join(lines)
    log = tmp_path / MEMORIES_FILE
    log.write_bytes(data)

    spans = winning_spans(data)
    expected = replayed(read_all(log)[0])

    assert spans is not None and list(spans) == list(expected)
    assert [Memory.model_validate_json(data[s:e]) for _, s, e in spans.values()] == list(
        expected.values()
    )
    assert winning_spans(data[:-1]) is None  # a log that does not end whole
    assert winning_spans(data + b"{not json}\n") is None


def test_ids_sharing_a_text_get_the_same_text_map_from_records_as_from_a_replay(
    tmp_path: Path, records_uses: list[bool]
) -> None:
    # The records boot maps text key → id in one call and only walks the keys several ids share
    # (a hand-written log, or an edit that made one text another's): both must end as a replay's.
    seed(tmp_path)
    twins = [
        Memory(id=f"fptwin{i}", text="The user prefers green tea over coffee",
               confidence=Confidence.STATED, created_at=NOW_MS + i, updated_at=NOW_MS + i)
        for i in range(3)
    ]  # fmt: skip
    with (tmp_path / "b" / MEMORIES_FILE).open("ab") as fh:
        fh.write(b"".join(encode([twin]) for twin in twins))
    # The records of the prefix, the twins replayed over them; its close vouches for them all.
    session(tmp_path, lambda service: asyncio.sleep(0))

    loaded = state(load(tmp_path))

    assert records_uses == [True, True]
    assert loaded == plain_replay(tmp_path)
    shared = [ids for ids in loaded["by_text"].values() if isinstance(ids, list)]
    assert shared and len(shared[0]) == 4  # the seeded text's id, then the three twins in order
