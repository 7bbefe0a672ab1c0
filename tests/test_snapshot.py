"""The derived index snapshot (`.index.npz`): used only when it is for exactly the log replayed,
and deleting, corrupting or outdating it changes nothing but boot time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.search import index as index_module
from memory_worker.search import ranking
from memory_worker.storage import bank as bank_module
from memory_worker.storage import snapshot
from memory_worker.storage.bank import MEMORIES_FILE
from memory_worker.storage.snapshot import SNAPSHOT_FILE

from .boots import NOW_MS, TEXTS, session

HUMAN = Caller.human("cli")
QUERIES = ["where does Ana work", "who plays chess", "what does the user drink", "Tiago Porto"]


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)


@pytest.fixture
def snapshot_uses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each bank load took its index from the snapshot."""
    seen: list[bool] = []
    real = bank_module.Bank._index_from_snapshot

    def spy(self: bank_module.Bank, live: list[Any]) -> bool:
        used = real(self, live)
        seen.append(used)
        return used

    monkeypatch.setattr(bank_module.Bank, "_index_from_snapshot", spy)
    yield seen


def seed(data_dir: Path) -> None:
    async def work(service: MemoryService) -> None:
        for text in TEXTS:
            saved = await call(service, "memory::save", {"bank": "b", "text": text}, HUMAN)
        await call(
            service,
            "memory::pin",
            {"bank": "b", "id": saved["memory"]["id"], "pinned": True},
            HUMAN,
        )
        await call(service, "memory::delete", {"bank": "b", "id": saved["memory"]["id"]}, HUMAN)

    session(data_dir, work)


def answers(data_dir: Path) -> list[Any]:
    async def work(service: MemoryService) -> list[Any]:
        out = []
        for query in QUERIES:
            found = await call(service, "memory::recall", {"bank": "b", "query": query}, HUMAN)
            out.append([(h["memory"]["id"], h["score"]) for h in found["memories"]])
        return out

    return list(session(data_dir, work))


def test_a_closed_bank_leaves_a_snapshot_the_next_boot_uses_with_the_same_answers(
    tmp_path: Path, snapshot_uses: list[bool]
) -> None:
    seed(tmp_path)
    assert (tmp_path / "b" / SNAPSHOT_FILE).is_file()
    rebuilt = answers(tmp_path)  # the seed session's own snapshot: used
    (tmp_path / "b" / SNAPSHOT_FILE).unlink()
    from_log = answers(tmp_path)  # rebuilt from the log, and the snapshot written again
    again = answers(tmp_path)

    assert snapshot_uses == [True, False, True]
    assert rebuilt == from_log == again
    assert any(hits for hits in from_log)


def _garbage(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04 not a zip at all")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _out_of_range_term(path: Path) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    arrays["pair_terms"][0] = 10**9
    np.savez(path, **arrays)


def _another_analyzer(path: Path) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["analyzer"] = "0" * 16
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)


def _pickled(path: Path) -> None:
    # An object array needs pickle to load: refused (`allow_pickle=False`), never executed.
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    arrays["dated"] = np.array([object()] * arrays["dated"].size, dtype=object)
    np.savez(path, **arrays)


def _format_one(path: Path) -> None:
    # What a worker before the told spans left (format 1: no told arrays), by the same analyzer.
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    del arrays["told_start"], arrays["told_end"]
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["version"] = 1
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)


def _told_cut_short(path: Path) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    arrays["told_end"] = arrays["told_end"][:-1]
    np.savez(path, **arrays)


def _told_widened(path: Path) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    arrays["told_start"] = arrays["told_start"].astype(np.int64)
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    "damage",
    [
        _garbage,
        _truncated,
        _out_of_range_term,
        _another_analyzer,
        _pickled,
        _format_one,
        _told_cut_short,
        _told_widened,
    ],
)
def test_a_damaged_snapshot_is_ignored_and_changes_no_answer(
    tmp_path: Path, snapshot_uses: list[bool], damage: Any
) -> None:
    seed(tmp_path)
    before = answers(tmp_path)
    damage(tmp_path / "b" / SNAPSHOT_FILE)
    snapshot_uses.clear()

    assert answers(tmp_path) == before
    assert snapshot_uses == [False]


def test_a_log_appended_behind_the_snapshot_indexes_the_new_line_from_the_log(
    tmp_path: Path, snapshot_uses: list[bool]
) -> None:
    # The snapshot is for a prefix of the log: its terms are used, the line past it analysed.
    seed(tmp_path)
    log = tmp_path / "b" / MEMORIES_FILE
    line = json.loads(log.read_bytes().splitlines()[0])
    line.pop("crc")  # a line edited by hand drops its checksum
    line.update(id="fphandwritten0001", text="Zelda keeps bees on the roof", revision=0)
    with log.open("ab") as fh:
        fh.write(json.dumps(line).encode() + b"\n")
    snapshot_uses.clear()

    found = answers_for(tmp_path, "who keeps bees")
    (tmp_path / "b" / SNAPSHOT_FILE).unlink()

    assert snapshot_uses == [True]
    assert found and found[0] == "fphandwritten0001"
    assert answers(tmp_path) == answers(tmp_path)  # built from the log, then from its snapshot


def test_a_log_edited_behind_the_snapshot_is_indexed_from_the_log(
    tmp_path: Path, snapshot_uses: list[bool]
) -> None:
    seed(tmp_path)
    log = tmp_path / "b" / MEMORIES_FILE
    data = log.read_bytes()
    at = data.index(b"Lisbon")
    line_start = data.rindex(b"\n", 0, at) + 1 if b"\n" in data[:at] else 0
    line_end = data.index(b"\n", at)
    line = json.loads(data[line_start:line_end])
    line.pop("crc")
    line["text"] = "Ana moved to Zanzibar in 2021 and works at a bakery"
    log.write_bytes(data[:line_start] + json.dumps(line).encode() + data[line_end:])
    snapshot_uses.clear()

    found = answers_for(tmp_path, "Zanzibar")

    assert snapshot_uses == [False]
    assert found and found[0] == line["id"]


def test_a_log_edited_in_place_then_saved_to_leaves_no_stale_snapshot(
    tmp_path: Path, snapshot_uses: list[bool]
) -> None:
    # Same-size bytes changed in place, then a save before the watcher looked: the fsync's stamp
    # has the size of everything the bank appended, yet close must not write RAM's terms (which
    # lack the edit) for the edited log.
    seed(tmp_path)
    log = tmp_path / "b" / MEMORIES_FILE

    async def work(service: MemoryService) -> None:
        await call(service, "memory::list", {"bank": "b"}, HUMAN)
        data, before = log.read_bytes(), log.stat()
        with log.open("r+b") as handle:
            handle.seek(data.index(b"Lisbon"))
            handle.write(b"Zurich")
        # Later than the worker's last write, as a person's edit is (the file clock is coarse).
        os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns + 10_000_000))
        await call(service, "memory::save", {"bank": "b", "text": "Carla paints murals"}, HUMAN)

    session(tmp_path, work)

    assert answers_for(tmp_path, "Zurich")
    assert answers_for(tmp_path, "Zurich")  # and from the snapshot that boot left


def answers_for(data_dir: Path, query: str) -> list[str]:
    async def work(service: MemoryService) -> list[str]:
        found = await call(service, "memory::recall", {"bank": "b", "query": query}, HUMAN)
        return [h["memory"]["id"] for h in found["memories"]]

    return list(session(data_dir, work))


def test_the_log_identity_is_its_length_and_crc(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"abc")
    assert snapshot.log_identity(log) == (3, 0x352441C2)
    assert snapshot.log_identity(tmp_path / "missing") is None


@pytest.mark.parametrize("planted", [".counts.json", ".index.npz", ".records.npz"])
def test_a_hard_link_planted_at_a_derived_files_temp_name_is_never_written_through(
    tmp_path: Path, planted: str
) -> None:
    data_dir = tmp_path / "data"
    seed(data_dir)
    victim = tmp_path / "outside-the-data-dir.txt"
    victim.write_bytes(b"precious\n")
    for name in (".counts.json", ".index.npz", ".records.npz"):
        (data_dir / "b" / name).unlink()
    # The fixed temp name the derived files used to be written through (`O_TRUNC`, no `O_EXCL`).
    os.link(victim, data_dir / "b" / f".{planted}.tmp")

    async def save_one(service: MemoryService) -> None:
        await call(service, "memory::save", {"bank": "b", "text": "one more"}, HUMAN)

    session(data_dir, save_one)
    assert victim.read_bytes() == b"precious\n"
    assert (data_dir / "b" / planted).is_file()


def test_both_digests_name_pythons_unicode_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """`str.lower`, NFKC and `\\W` (a text's key, its terms) follow Python's Unicode tables, which
    a Python upgrade changes: a snapshot made under other tables is not believed."""
    before = (snapshot.replay_digest(), snapshot.analyzer_digest())
    snapshot.replay_digest.cache_clear()
    snapshot.analyzer_digest.cache_clear()
    monkeypatch.setattr(snapshot, "unicodedata", SimpleNamespace(unidata_version="99.0.0"))
    try:
        after = (snapshot.replay_digest(), snapshot.analyzer_digest())
    finally:
        snapshot.replay_digest.cache_clear()
        snapshot.analyzer_digest.cache_clear()
    assert after[0] != before[0] and after[1] != before[1]


_TOLD_TEXTS = [
    "We went to the fair last month",
    "Ana flies to Porto tomorrow",
    "Rui met his brother yesterday",
    "The flight on 18 December was late",
    "We moved in 2021",
    "The user prefers green tea",
]


async def _told_as_read_now(service: MemoryService) -> list[tuple[str, tuple[int, int], Any]]:
    """Each live memory's told span as the index keeps it, beside its text read afresh."""
    bank = service.store.get("b")
    out = []
    for memory_id, memory in bank.memories.items():
        if not memory.live:
            continue
        start, end = bank.index.told_days(np.asarray([bank.index.slot(memory_id)]))
        read = ranking._told_days(memory.text, memory.last_stated_at)
        out.append((memory_id, (int(start[0]), int(end[0])), read or index_module._TOLD_NONE))
    return out


def test_the_told_spans_kept_are_the_texts_read_afresh_through_every_path(
    tmp_path: Path, snapshot_uses: list[bool]
) -> None:
    """Saves, a re-statement a month on (it moves "last month"), an edit, a pin, a delete, a
    boot from the snapshot and one from a prefix of it plus the lines past it: the index's told
    span of every live memory is the one its text and `last_stated_at` give now."""
    day = 86_400_000

    async def first(service: MemoryService) -> list[str]:
        ids = []
        for text in _TOLD_TEXTS:
            saved = await call(service, "memory::save", {"bank": "b", "text": text}, HUMAN)
            ids.append(saved["memory"]["id"])
        return ids

    ids = session(tmp_path, first, now_ms=NOW_MS)

    async def later(service: MemoryService) -> Any:
        await call(service, "memory::save", {"bank": "b", "text": _TOLD_TEXTS[0]}, HUMAN)
        await call(
            service, "memory::update", {"bank": "b", "id": ids[1], "text": "Ana flew last week"},
            HUMAN,
        )  # fmt: skip
        await call(service, "memory::pin", {"bank": "b", "id": ids[2], "pinned": True}, HUMAN)
        await call(service, "memory::delete", {"bank": "b", "id": ids[4]}, HUMAN)
        return await _told_as_read_now(service)

    def check(seen: list[tuple[str, tuple[int, int], Any]]) -> None:
        assert all(kept == read for _, kept, read in seen), seen
        assert sum(kept != index_module._TOLD_NONE for _, kept, _ in seen) >= 3, seen

    check(session(tmp_path, later, now_ms=NOW_MS + 40 * day))
    snapshot_uses.clear()
    check(session(tmp_path, _told_as_read_now, now_ms=NOW_MS + 41 * day))  # the full snapshot

    async def grow(service: MemoryService) -> Any:
        await call(service, "memory::save", {"bank": "b", "text": _TOLD_TEXTS[3]}, HUMAN)
        return await _told_as_read_now(service)

    check(session(tmp_path, grow, now_ms=NOW_MS + 90 * day))
    check(session(tmp_path, _told_as_read_now, now_ms=NOW_MS + 91 * day))  # prefix + tail
    assert snapshot_uses == [True, True, True]


_DIGEST_PROBE = """
import json, sys
from memory_worker.storage import snapshot
digest = snapshot.analyzer_digest()
searched = sorted(m for m in sys.modules if m.startswith("memory_worker.search."))
print(json.dumps([digest, searched]))
"""


def test_a_process_that_never_imported_the_search_modules_names_the_same_analyzer() -> None:
    """The code digest a snapshot is checked by is the same in a one-shot command (which finds the
    search modules' source by their spec, never importing them) as in the server that imported
    them and wrote the snapshot: otherwise every one-shot save would find each server's snapshot
    stale and rebuild the index, and every server boot the one-shot's."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _DIGEST_PROBE],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    digest, searched = json.loads(done.stdout)
    assert searched == []  # the probe took the spec's path, not an imported module's
    assert ranking.__name__ in sys.modules and index_module.__name__ in sys.modules
    assert digest and digest == snapshot.analyzer_digest()
