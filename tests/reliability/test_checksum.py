"""Per-line checksums of `memories.jsonl` (D9): every line the worker writes ends with
`,"crc":"<8 hex>"}`, the CRC-32 of the line without that member. A line that still parses as a
record but no longer matches was edited by hand (seed 000: "edit them in any editor"): it is
served as it reads and named, with its line number, by doctor and the load's log; a line that no
longer parses is skipped and reported as damage. Lines without a checksum (older logs,
hand-written lines) load."""

from __future__ import annotations

import asyncio
import json
import random
import re
import zlib
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.core.models import Confidence, Memory
from memory_worker.core.text import fingerprint
from memory_worker.storage import bank as bank_module
from memory_worker.storage.snapshot import RECORDS_FILE

from ..fakes import FixedClock
from ..test_cli import run_cli
from .helpers import answers, open_service

LOG = "memories.jsonl"
_CRC = re.compile(rb',"crc":"([0-9a-f]{8})"\}$')


def _verified(line: bytes) -> bool:
    """Checked independently of the worker's code: the line is a JSON object whose last member is
    `crc`, and it holds the CRC-32 of the line with that member taken out."""
    match = _CRC.search(line)
    if match is None or json.loads(line).get("crc") != match[1].decode():
        return False
    return zlib.crc32(line[: match.start()] + b"}") == int(match[1], 16)


def _unverified_lines(data: Path) -> list[str]:
    return [
        f"{log.relative_to(data)}:{number}"
        for log in sorted(data.glob("*/memories.jsonl"))
        for number, line in enumerate(log.read_bytes().splitlines(), start=1)
        if not _verified(line)
    ]


async def _log_damage(data: Path) -> tuple[list[tuple[int | None, str]], dict[str, Any]]:
    service = open_service(data)
    try:
        damage = [(d.line, d.reason) for d in service.store.get("main").damage if d.file == LOG]
        return damage, await answers(service)
    finally:
        await service.store.close()


async def _saved(data: Path, texts: list[str]) -> list[str]:
    clock = FixedClock()
    service = open_service(data, clock)
    try:
        ids = []
        for text in texts:
            clock.advance()
            ids.append(
                (await catalog.call(service, "memory::save", {"text": text}))["memory"]["id"]
            )
        return ids
    finally:
        await service.store.close()


async def test_a_line_edited_in_an_editor_is_served_as_it_reads_and_named(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    ids = await _saved(data, [f"The user keeps fact number {n}" for n in range(3)])
    log = data / "main" / LOG
    lines = log.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"fact number 1", b"fact number 7")  # its crc left as it was
    log.write_bytes(b"".join(lines))
    service = open_service(data)
    try:
        bank = service.store.get("main")
        assert [(d.line, d.kept) for d in bank.damage] == [(2, True)]
        edited = bank.get(ids[1])
        assert edited is not None and edited.text == "The user keeps fact number 7"
        found = await catalog.call(service, "memory::recall", {"query": "fact number 7"})
        assert found["memories"][0]["memory"]["id"] == ids[1]
        doctor = await catalog.call(service, "memory::doctor", {})
        (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
        assert intact["ok"] and "memories.jsonl:2: edited by hand" in intact["detail"]
        await catalog.call(service, "memory::save", {"text": "Written after the edit"})
    finally:
        await service.store.close()
    noted, _ = await _log_damage(data)
    assert [line for line, _ in noted] == [2]  # the next write did not hide or add any
    assert _unverified_lines(data) == ["main/memories.jsonl:2"]  # the person's line, untouched


async def test_a_compaction_seals_a_line_edited_by_hand_again(tmp_path: Path) -> None:
    """A log with a hand-edited line is not damaged: compaction rewrites it (it refuses a log
    with unreadable lines), every line sealed again, and the note goes with the old file."""
    data = tmp_path / "data"
    ids = await _saved(data, ["The user keeps bees", "The user keeps goats"])
    log = data / "main" / LOG
    log.write_bytes(log.read_bytes().replace(b"keeps bees", b"keeps hens"))
    service = open_service(data)
    try:
        await catalog.call(service, "memory::compact", {"bank": "main"})
        assert service.store.get("main").damage == []
        got = await catalog.call(service, "memory::get", {"id": ids[0]})
        assert got["memory"]["text"] == "The user keeps hens"
    finally:
        await service.store.close()
    assert _unverified_lines(data) == []
    noted, _ = await _log_damage(data)
    assert noted == []


async def test_a_log_edited_by_hand_still_gets_its_boot_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only damage keeps a bank booting by full replay: a log a person edited writes its records
    snapshot again at close, and the next boot from it serves the edited text."""
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 2)
    data = tmp_path / "data"
    ids = await _saved(data, ["The user keeps bees", "The user keeps goats"])
    log = data / "main" / LOG
    log.write_bytes(log.read_bytes().replace(b"keeps bees", b"keeps hens"))
    (data / "main" / RECORDS_FILE).unlink(missing_ok=True)
    service = open_service(data)
    await service.store.close()  # read by full replay, the edit noted; the snapshot written
    assert (data / "main" / RECORDS_FILE).is_file()
    service = open_service(data)
    try:
        bank = service.store.get("main")
        edited = bank.get(ids[0])
        assert edited is not None and edited.text == "The user keeps hens"
    finally:
        await service.store.close()


async def test_a_corrupt_line_of_a_multi_record_write_drops_the_whole_write(
    tmp_path: Path,
) -> None:
    """A supersede with `reinforce` is two lines: one of them no longer reads as a record, so
    neither is applied (the retirement without the survivor's reinforcement would be half a
    write)."""
    data = tmp_path / "data"
    old, new = await _saved(data, ["The office is on Rua Augusta", "The office is in Paulista"])
    service = open_service(data)
    try:
        payload = {"id": old, "superseded_by": new, "reinforce": True}
        await catalog.call(service, "memory::supersede", payload)
    finally:
        await service.store.close()
    log = data / "main" / LOG
    lines = log.read_bytes().splitlines(keepends=True)
    assert b'"corroboration":1' in lines[3]
    lines[3] = lines[3].replace(b'"corroboration":1', b'"corroboration":"x7"')
    log.write_bytes(b"".join(lines))
    damage, seen = await _log_damage(data)
    assert [line for line, _ in damage] == [4, 3], damage  # the bad line, then the whole write
    assert "corrupt line" in damage[0][1] and "none of them applied" in damage[1][1]
    memories = {m["id"]: m for m in seen["main"]["memories"]["memories"]}
    assert "invalid_at" not in memories[old] and memories[new]["corroboration"] == 0


async def test_old_lines_without_a_checksum_still_load(tmp_path: Path) -> None:
    """A log written before checksums (single lines and a batch-tagged pair) loads whole, with no
    damage; the next write is checksummed and the old lines stay as they were."""
    data = tmp_path / "data"
    (data / "main").mkdir(parents=True)

    def record(text: str, at: int, **extra: Any) -> Memory:
        return Memory(
            id=fingerprint(text),
            text=text,
            confidence=Confidence.STATED,
            created_at=at,
            updated_at=at,
            **extra,
        )

    a, b = record("The user likes tea", 1), record("The user likes coffee", 2)
    retired = a.model_copy(update={"invalid_at": 3, "superseded_by": b.id, "revision": 1})
    reinforced = b.model_copy(update={"corroboration": 1, "revision": 1})
    old = [
        a.to_line(),
        b.to_line(),
        retired.to_line()[:-1] + b',"batch":"old1:0:2"}',
        reinforced.to_line()[:-1] + b',"batch":"old1:1:2"}',
    ]
    log = data / "main" / LOG
    log.write_bytes(b"\n".join(old) + b"\n")
    service = open_service(data)
    try:
        bank = service.store.get("main")
        assert bank.damage == []
        assert bank.get(a.id) == retired and bank.get(b.id) == reinforced
        await catalog.call(service, "memory::save", {"text": "The user likes cocoa"})
    finally:
        await service.store.close()
    lines = log.read_bytes().splitlines()
    assert lines[:4] == old and _verified(lines[4])
    damage, _ = await _log_damage(data)
    assert damage == []


async def test_a_line_rewritten_by_a_json_library_loads_as_an_edit(tmp_path: Path) -> None:
    """A line carrying its old `crc` in another form (read and written again by a JSON library,
    its text changed) is a hand edit: it loads, and it is named as one."""
    data = tmp_path / "data"
    await _saved(data, ["The user likes tea"])
    log = data / "main" / LOG
    shape = json.loads(log.read_bytes().splitlines()[0])
    edited = {
        **shape,
        "id": fingerprint("The user likes green tea"),
        "text": "The user likes green tea",
    }
    handmade = {k: v for k, v in edited.items() if k != "crc"}
    with log.open("ab") as handle:
        handle.write(json.dumps(edited).encode() + b"\n" + json.dumps(handmade).encode() + b"\n")
    damage, seen = await _log_damage(data)
    assert [(line, "edited by hand" in reason) for line, reason in damage] == [(2, True)]
    texts = sorted(m["text"] for m in seen["main"]["memories"]["memories"])
    assert texts == ["The user likes green tea", "The user likes tea"]


async def test_every_write_path_writes_checksummed_lines(tmp_path: Path) -> None:
    data = tmp_path / "data"
    clock = FixedClock()
    service = open_service(data, clock)
    try:
        saved = []
        for text in ("The user likes tea", "The user likes coffee", "The user rows", "Old news"):
            clock.advance()
            saved.append((await catalog.call(service, "memory::save", {"text": text}))["memory"])
        tea, coffee, rows, old = (m["id"] for m in saved)
        calls: list[tuple[str, dict[str, Any]]] = [
            ("memory::save", {"text": "THE USER LIKES TEA"}),  # reinforce
            ("memory::update", {"id": rows, "text": "The user rows on Sundays", "tags": ["x"]}),
            ("memory::pin", {"id": tea, "pinned": True}),
            ("memory::supersede", {"id": old, "superseded_by": coffee}),
            ("memory::delete", {"id": coffee}),
            ("memory::save", {"text": "Old news"}),  # resurrect a retired record
            ("memory::save", {"bank": "work", "text": "A fact in a new bank"}),
            ("memory::save", {"text": "Merged away"}),
        ]
        for function_id, payload in calls:
            clock.advance()
            await catalog.call(service, function_id, payload)
        merged = service.store.get("main").match_text("Merged away")
        assert merged is not None
        payload = {"id": merged.id, "superseded_by": rows, "reinforce": True}
        await catalog.call(service, "memory::supersede", payload)
        await service.import_records("main", [{"text": f"Imported fact {n}"} for n in range(3)])
    finally:
        await service.store.close()
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text(
        "".join(json.dumps({"text": f"CLI imported fact {n}"}) + "\n" for n in range(3))
    )
    done = run_cli("import", str(rows_file), "--bank", "cli", "--data-dir", str(data), cwd=tmp_path)
    assert done.code == 0, done.stderr
    counts = {log.parent.name: len(log.read_bytes().splitlines()) for log in data.glob("*/" + LOG)}
    assert counts == {"main": 16, "work": 1, "cli": 3}
    assert _unverified_lines(data) == []


async def test_a_reopen_after_many_writes_shows_no_damage(tmp_path: Path) -> None:
    """Hundreds of mixed writes over two banks, some concurrent (so group commits share one
    fsync), some multi-record: a reopen serves exactly what RAM served, with no damage."""
    data = tmp_path / "data"
    rng = random.Random(9)
    clock = FixedClock()
    service = open_service(data, clock)
    try:
        for round_ in range(40):
            clock.advance()
            banks = ("main", "other")
            saves = [
                catalog.call(
                    service,
                    "memory::save",
                    {"bank": rng.choice(banks), "text": f"Fact {rng.randrange(60)} about tea"},
                )
                for _ in range(8)
            ]
            results = await asyncio.gather(*saves)
            ids = [(r["memory"]["id"], r["memory"].get("text")) for r in results]
            memory_id, _ = rng.choice(ids)
            bank = next(
                b for b in banks if (found := service.store.find(b)) and found.get(memory_id)
            )
            kind = rng.random()
            if kind < 0.3:
                await catalog.call(
                    service, "memory::pin", {"bank": bank, "id": memory_id, "pinned": True}
                )
            elif kind < 0.5:
                await catalog.call(service, "memory::delete", {"bank": bank, "id": memory_id})
            elif kind < 0.8:
                rows = [{"text": f"Import {round_}.{n} about coffee"} for n in range(4)]
                await service.import_records(bank, rows)
            else:
                live = [m for m in service.store.get(bank).memories.values() if m.live]
                if len(live) >= 2:
                    a, b = rng.sample(live, 2)
                    payload = {"bank": bank, "id": a.id, "superseded_by": b.id, "reinforce": True}
                    await catalog.call(service, "memory::supersede", payload)
        live_state = await answers(service)
    finally:
        await service.store.close()
    assert _unverified_lines(data) == []
    reopened = open_service(data)
    try:
        assert await answers(reopened) == live_state
        assert [d for n in reopened.store.names() for d in reopened.store.get(n).damage] == []
    finally:
        await reopened.store.close()
