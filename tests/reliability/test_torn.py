"""Torn and corrupt files: a log cut at every byte of its last records, flipped bytes, garbage
lines, a half-written rule temp file and a `vectors.jsonl` from another model or revision. Boot
always succeeds, no good record is lost, the damage is reported with its line number, and a later
write lands on a line of its own."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.models import Memory
from memory_worker.core.text import fingerprint
from memory_worker.storage.bank import Bank
from memory_worker.storage.damage import Damage
from memory_worker.storage.log import INTERRUPTED_FILE as INTERRUPTED
from memory_worker.storage.store import Store
from memory_worker.storage.vectors import VectorRecord, text_hash

from ..fakes import FakeEmbedder, FixedClock
from .helpers import HOLDER, open_service

LOG = "memories.jsonl"


def _records(log: Path) -> list[bytes]:
    return log.read_bytes().splitlines(keepends=True)


async def _build(data: Path, texts: list[str]) -> list[bytes]:
    clock = FixedClock()
    service = open_service(data, clock)
    try:
        for text in texts:
            clock.advance()
            await catalog.call(service, "memory::save", {"text": text})
    finally:
        await service.store.close()
    return _records(data / "main" / LOG)


def _log_damage(service: MemoryService) -> list[Damage]:
    return [d for d in service.store.get("main").damage if d.file == LOG]


async def test_a_cut_at_every_byte_of_the_last_two_records_loses_nothing_before_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    lines = await _build(data, [f"The user keeps fact number {n}" for n in range(5)])
    whole = b"".join(lines)
    start = len(whole) - len(lines[-1]) - len(lines[-2])
    log = data / "main" / LOG
    problems: list[str] = []
    for cut in range(start, len(whole)):
        log.write_bytes(whole[:cut])
        complete = whole[:cut].count(b"\n")  # records whose whole line survived
        torn = whole[:cut].rsplit(b"\n", 1)[-1]  # what is left of the next one
        service = open_service(data)
        try:
            bank = service.store.get("main")
            expected = [Memory.model_validate_json(line) for line in lines[:complete]]
            if any(bank.get(m.id) != m for m in expected):
                problems.append(f"cut {cut}: an earlier record was lost")
            damage = _log_damage(service)
            if damage:
                problems.append(f"cut {cut}: no damage expected, got {damage}")
            if torn and torn != lines[complete].rstrip(b"\n"):
                # Set aside, not lost: the log ends where the torn write began.
                kept = (data / "main" / INTERRUPTED).read_bytes().splitlines()[-1]
                if log.read_bytes() != whole[: cut - len(torn)] or kept != torn:
                    problems.append(f"cut {cut}: the torn {torn[:20]!r}… was not set aside")
            saved = await catalog.call(service, "memory::save", {"text": f"Written after {cut}"})
        finally:
            await service.store.close()
        last = Memory.model_validate_json(log.read_bytes().splitlines()[-1])
        if last.id != saved["memory"]["id"] or not log.read_bytes().endswith(b"\n"):
            problems.append(f"cut {cut}: the next write did not land on a line of its own")
        replayed = Bank.load("main", data / "main")  # the next boot's replay
        if any(replayed.get(m.id) != m for m in expected) or replayed.get(last.id) is None:
            problems.append(f"cut {cut}: a record was lost after the next write")
    assert not problems, f"{len(problems)} problems, e.g. {problems[:5]}"


async def _multi_record_tail(data: Path, kind: str) -> tuple[bytes, int, dict[str, str]]:
    """A log whose last commit is one multi-record write; returns the log, where that write starts,
    and the ids it concerns."""
    clock = FixedClock()
    service = open_service(data, clock)
    try:
        a = await catalog.call(service, "memory::save", {"text": "The office is on Rua Augusta"})
        b = await catalog.call(service, "memory::save", {"text": "The office is in Paulista"})
        start = (data / "main" / LOG).stat().st_size
        clock.advance()
        if kind == "supersede-reinforce":
            await catalog.call(
                service,
                "memory::supersede",
                {"id": a["memory"]["id"], "superseded_by": b["memory"]["id"], "reinforce": True},
            )
        else:
            rows = [{"text": f"Imported fact number {n} about the office"} for n in range(3)]
            await service.import_records("main", rows)
    finally:
        await service.store.close()
    ids = {"target": a["memory"]["id"], "winner": b["memory"]["id"]}
    return (data / "main" / LOG).read_bytes(), start, ids


@pytest.mark.parametrize("kind", ["supersede-reinforce", "import"])
async def test_a_torn_multi_record_write_is_applied_whole_or_not_at_all(
    tmp_path: Path, kind: str
) -> None:
    """A supersede with `reinforce` (retire + reinforce the survivor) and an import are one write
    each, acknowledged only once fsynced. A crash inside that write (a SIGKILL between the pages
    of a big write, or power loss before the fsync) leaves a prefix of its lines; replay must not
    serve a retirement without its reinforcement, or part of an import."""
    data = tmp_path / "data"
    whole, start, ids = await _multi_record_tail(data, kind)
    log = data / "main" / LOG
    half_applied: list[int] = []
    not_cut_back: list[int] = []
    for cut in range(start, len(whole)):
        log.write_bytes(whole[:cut])
        bank = Bank.load("main", data / "main")  # what the next boot replays
        # Inside the write (short of its last line's newline alone): the load sets its lines
        # aside, so the log ends whole where that write began and nothing is left as damage.
        if start < cut < len(whole) - 1 and (log.stat().st_size != start or bank.damage):
            not_cut_back.append(cut)
        if kind == "supersede-reinforce":
            target, winner = bank.get(ids["target"]), bank.get(ids["winner"])
            assert target is not None and winner is not None
            if (not target.live) != (winner.corroboration > 0):
                half_applied.append(cut)
        else:
            present = sum(
                bank.get(fingerprint(f"Imported fact number {n} about the office")) is not None
                for n in range(3)
            )
            if present not in (0, 3):
                half_applied.append(cut)
    assert not half_applied, (
        f"{kind}: {len(half_applied)} of {len(whole) - start} cuts inside the write leave it "
        f"half applied after replay (e.g. a cut at byte {half_applied[0]} of {len(whole)})"
    )
    assert not not_cut_back, f"{kind}: cuts {not_cut_back[:5]} left the torn write in the log"


async def test_random_byte_flips_never_block_boot_and_unreadable_lines_are_reported(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    texts = [f"The user keeps fact number {n}" for n in range(30)]
    lines = await _build(data, texts)
    log = data / "main" / LOG
    rng = random.Random(6)
    for _ in range(25):
        damaged = list(lines)
        touched = set()
        for _ in range(rng.randint(1, 4)):
            index = rng.randrange(5, 25)
            line = bytearray(damaged[index])
            at = rng.randrange(len(line) - 1)  # never the newline itself
            line[at] = rng.choice([b for b in range(256) if b not in (line[at], 0x0A)])
            damaged[index] = bytes(line)
            touched.add(index)
        log.write_bytes(b"".join(damaged))
        service = open_service(data)
        try:
            bank = service.store.get("main")
            reported = {d.line for d in _log_damage(service)}
            for index, raw in enumerate(damaged):
                original = Memory.model_validate_json(lines[index])
                try:
                    Memory.model_validate_json(raw)
                except ValueError:
                    assert index + 1 in reported, f"unreadable line {index + 1} not reported"
                    continue
                if index not in touched:
                    assert bank.get(original.id) == original
                elif index + 1 not in reported:  # still parses: its checksum must catch it ...
                    changed = Memory.model_validate_json(raw)  # ... unless nothing changed
                    assert changed == original, f"a changed line {index + 1} served silently"
            await catalog.call(service, "memory::save", {"text": "Still taking writes"})
        finally:
            await service.store.close()
        service = open_service(data)
        await service.store.close()


async def test_a_changed_byte_that_keeps_a_line_valid_is_never_silent(tmp_path: Path) -> None:
    """One byte of an old line changes (`"revision":0` becomes `"revision":9`): the line still
    parses as a record. A person may have made that change (the files are there to be edited), so
    the line is read as it now says, and its changed checksum names it, with its line number, for
    doctor and the log: never silently."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        saved = await catalog.call(service, "memory::save", {"text": "The user lives in Lisbon"})
        memory_id = saved["memory"]["id"]
        await catalog.call(service, "memory::update", {"id": memory_id, "text": "Porto now"})
    finally:
        await service.store.close()
    log = data / "main" / LOG
    first, rest = log.read_bytes().split(b"\n", 1)
    assert first.count(b'"revision":0') == 1
    log.write_bytes(first.replace(b'"revision":0', b'"revision":9') + b"\n" + rest)
    service = open_service(data)
    try:
        got = await catalog.call(service, "memory::get", {"id": memory_id})
        damage = _log_damage(service)
    finally:
        await service.store.close()
    assert [(d.line, d.kept) for d in damage] == [(1, True)], "a changed line went unreported"
    assert got["memory"]["text"] == "The user lives in Lisbon"  # revision 9, as the line says


GARBAGE = [
    b"\xff\xfe\x00\x01 binary garbage \x80\x81",
    b'{"id": "fp2222222222222222", "text": "unterminated',
    b'{"hello": 1}',
    b"[]",
    b"null",
    b"42",
    b'{"id": "fp3333333333333333", "text": 7, "created_at": "yesterday"}',
    b"<<<<<<< HEAD",
    b"x" * 200_000,
]


async def test_garbage_lines_are_skipped_and_reported_by_line_number(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lines = await _build(data, [f"The user keeps fact number {n}" for n in range(8)])
    mixed: list[bytes] = []
    expected_damage: list[int] = []
    rng = random.Random(7)
    garbage = list(GARBAGE)
    rng.shuffle(garbage)
    for line in lines:
        mixed.append(line)
        if garbage and rng.random() < 0.8:
            mixed.append(b"   \t\n")  # blank lines are not damage
            mixed.append(garbage.pop() + b"\n")
            expected_damage.append(len(mixed))
    mixed.extend(g + b"\n" for g in garbage)
    expected_damage.extend(range(len(mixed) - len(garbage) + 1, len(mixed) + 1))
    log = data / "main" / LOG
    log.write_bytes(b"".join(mixed))
    service = open_service(data)
    try:
        bank = service.store.get("main")
        assert sorted(d.line or 0 for d in _log_damage(service)) == expected_damage
        for line in lines:
            record = Memory.model_validate_json(line)
            assert bank.get(record.id) == record
        doctor = await catalog.call(service, "memory::doctor", {})
        (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
        assert not intact["ok"] and f"memories.jsonl:{expected_damage[0]}:" in intact["detail"]
        saved = await catalog.call(service, "memory::save", {"text": "Written after the garbage"})
    finally:
        await service.store.close()
    assert Memory.model_validate_json(log.read_bytes().splitlines()[-1]).id == saved["memory"]["id"]
    service = open_service(data)
    try:
        assert len(service.store.get("main").memories) == len(lines) + 1
    finally:
        await service.store.close()


async def test_a_half_written_rule_temp_file_is_reported_and_the_next_rule_write_clears_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    service = open_service(data)
    try:
        await catalog.call(service, "memory::rule::set", {"name": "style", "content": "Be brief."})
    finally:
        await service.store.close()
    (data / "main" / "rules" / ".style.md.tmp").write_bytes(b"Be bri")  # a write cut short
    service = open_service(data)
    try:
        rules = await catalog.call(service, "memory::rule::list", {})
        assert [(r["name"], r["content"]) for r in rules["rules"]] == [("style", "Be brief.")]
        assert [d.file for d in service.store.get("main").damage] == ["rules/.style.md.tmp"]
        doctor = await catalog.call(service, "memory::doctor", {})
        (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
        assert not intact["ok"] and "rules/.style.md.tmp" in intact["detail"]
        await catalog.call(service, "memory::rule::set", {"name": "style", "content": "Be warm."})
    finally:
        await service.store.close()
    assert not (data / "main" / "rules" / ".style.md.tmp").exists()
    service = open_service(data)
    try:
        rules = await catalog.call(service, "memory::rule::list", {})
        assert [(r["name"], r["content"]) for r in rules["rules"]] == [("style", "Be warm.")]
        assert service.store.get("main").damage == []
    finally:
        await service.store.close()


# --- vectors.jsonl -------------------------------------------------------------------------

TEXTS = (
    "The user publishes blog posts",
    "The user has a dog named Pipoca",
    "The user works at iii",
)


async def _bank_with_vectors(data: Path, lines: list[bytes]) -> None:
    service = open_service(data)
    try:
        for text in TEXTS:
            await catalog.call(service, "memory::save", {"text": text})
    finally:
        await service.store.close()
    (data / "main" / "vectors.jsonl").write_bytes(b"".join(lines))


def _vector(text: str, model: str, width: int, *, hashed: str | None = None) -> bytes:
    values = FakeEmbedder(model).vector(text)
    vector = (values * (width // len(values) + 1))[:width]
    memory_id = fingerprint(text)
    return VectorRecord(memory_id, model, 0, text_hash(hashed or text), vector).to_line()


async def _embedded(data: Path) -> tuple[list[str], list[str]]:
    """After a backfill with the current embedder: memories still waiting for one of its vectors,
    and memories with no vector in the index at all."""
    embedder = FakeEmbedder()
    service = MemoryService(Store.open(data, holder=HOLDER), Settings(), embedder=embedder)
    try:
        await service.backfill_embeddings()
        await service.settle()
        bank = service.store.get("main")
        waiting = [m.text for m in bank.needs_embedding(embedder.model, 100)]
        without = [t for t in TEXTS if not bank.index.has_vector_for(fingerprint(t))]
        return waiting, without
    finally:
        await service.close()
        await service.store.close()


async def test_stale_vectors_are_not_used_and_garbage_lines_are_reported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    current, stale, _ = TEXTS
    lines = [
        _vector(current, "fake-embedder-1", FakeEmbedder.DIM),
        _vector(stale, "fake-embedder-1", FakeEmbedder.DIM, hashed="an older text of it"),
        b'{"id": "fp1", "model": "x", "v": "not base64!"}\n',
        b"\x00\x01 garbage\n",
        _vector("A memory that does not exist", "fake-embedder-1", FakeEmbedder.DIM),
    ]
    await _bank_with_vectors(data, lines)
    service = open_service(data)
    try:
        bank = service.store.get("main")
        assert bank.index.has_vector_for(fingerprint(current))
        assert not bank.index.has_vector_for(fingerprint(stale))  # its text changed since
        (damage,) = [d for d in bank.damage if d.file == "vectors.jsonl"]
        assert "2 unreadable line(s)" in damage.reason
    finally:
        await service.store.close()
    assert await _embedded(data) == ([], [])


@pytest.mark.parametrize("width", [FakeEmbedder.DIM, 8], ids=["same-width", "other-width"])
async def test_vectors_of_another_model_are_replaced_by_the_current_models(
    tmp_path: Path, width: int
) -> None:
    """A `vectors.jsonl` written under another embedding model (say the configured model changed
    from a 768-wide one to a 384-wide one) must not keep the bank from getting the current model's
    vectors: each memory ends up with a vector of the current model."""
    data = tmp_path / "data"
    await _bank_with_vectors(data, [_vector(text, "old-model", width) for text in TEXTS])
    waiting, without = await _embedded(data)
    assert waiting == [] and without == [], (
        f"after a backfill {len(waiting)} memories still wait for a vector of the current model "
        f"and {len(without)} have none in the index"
    )
