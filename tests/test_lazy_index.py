"""A short-lived process (a one-shot CLI command) opens a bank with its records and exact-text map
only: the search state (the lexical index from `.index.npz`, the lanes, the lessons, the vector
sidecars) is built when something first reads it, so a one-shot save, which decides from the
records alone, never pays for it (issue 12). Built late, it is the state a boot that built it at
once holds after the same writes, and closing leaves the same derived files."""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import StorageError
from memory_worker.search.index import LexicalIndex
from memory_worker.storage import bank as bank_module
from memory_worker.storage import log as log_module
from memory_worker.storage import snapshot
from memory_worker.storage.bank import MEMORIES_FILE, Bank
from memory_worker.storage.counts import COUNTS_FILE, Counts
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE
from memory_worker.storage.store import Store

from .boots import NOW_MS, TEXTS
from .conftest import HOLDER
from .fakes import FakeEmbedder

HUMAN = Caller.human("cli")
QUERIES = ["where does Ana work", "who plays chess", "what does the user drink", "Tiago Porto",
           "garden notes", "Ana moved", "bees", "deploy on friday"]  # fmt: skip
LESSON = {
    "category": "lesson",
    "title": "Run the linter before pushing",
    "recommendation": "Run ruff check on the changed files before every push.",
    "anchors": {"files": ["pyproject.toml"]},
}


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)


Work = Callable[[MemoryService], Awaitable[Any]]


def run(
    data_dir: Path,
    work: Work,
    *,
    short_lived: bool,
    embedder: Any = None,
    settings: Settings | None = None,
    clock: Callable[[], int] = lambda: NOW_MS,
) -> Any:
    """One process's session on `data_dir`: a lazy store (as every door opens one), short-lived
    as a one-shot command's or not as a server's; a fixed clock unless `clock` is given."""

    async def go() -> Any:
        store = Store.open(data_dir, holder=HOLDER, lazy=True, short_lived=short_lived)
        service = MemoryService(store, settings or Settings(), clock=clock, embedder=embedder)
        try:
            result = await work(service)
            await service.settle()
            return result
        finally:
            await service.close()
            await store.close()

    return asyncio.run(go())


def seed(data_dir: Path) -> list[str]:
    """A bank with every kind of search state: subjects, lanes, a lesson, a pinned memory, a
    retired one, and the vectors of a model for the content and the lanes."""

    async def work(service: MemoryService) -> list[str]:
        ids = []
        for i, text in enumerate(TEXTS):
            payload: dict[str, Any] = {"bank": "b", "text": text}
            if i % 2:
                payload["subject"] = "Ana" if i % 4 == 1 else "rui"
            if i == 2:
                payload |= {"context": "talking about drinks", "intention": "pick a tea"}
            saved = await call(service, "memory::save", payload, HUMAN)
            ids.append(saved["memory"]["id"])
        await call(
            service, "memory::save", {"bank": "b", "text": "a lesson about linting"} | LESSON, HUMAN
        )
        await call(service, "memory::pin", {"bank": "b", "id": ids[4], "pinned": True}, HUMAN)
        await call(service, "memory::delete", {"bank": "b", "id": ids[5]}, HUMAN)
        return ids

    (data_dir / "b" / "rules").mkdir(parents=True)  # weighted lanes: they are embedded too
    (data_dir / "b" / "bank.yaml").write_text(
        "description: ''\nassociation_weights: {content: 0.6, context: 0.3, intention: 0.1}\n"
    )
    ids: list[str] = run(data_dir, work, short_lived=False, embedder=FakeEmbedder())
    folder = data_dir / "b"
    for name in (RECORDS_FILE, SNAPSHOT_FILE, "vectors.jsonl", "lane-vectors.jsonl"):
        assert (folder / name).is_file(), name
    return ids


def writes(ids: list[str]) -> Work:
    """What a few one-shot commands write: a new memory, a reinforcement, a new memory about a
    person in another spelling, an edit, a pin, a delete, a multi-record import."""

    async def work(service: MemoryService) -> None:
        await call(service, "memory::save", {"bank": "b", "text": "Zelda keeps bees"}, HUMAN)
        await call(service, "memory::save", {"bank": "b", "text": TEXTS[2]}, HUMAN)
        await call(
            service,
            "memory::save",
            {"bank": "b", "text": "Ana likes figs", "subject": "ANA"},
            HUMAN,
        )
        await call(
            service,
            "memory::update",
            {"bank": "b", "id": ids[0], "text": "Ana moved to Faro"},
            HUMAN,
        )
        await call(service, "memory::pin", {"bank": "b", "id": ids[1], "pinned": True}, HUMAN)
        await call(service, "memory::delete", {"bank": "b", "id": ids[3]}, HUMAN)
        await service.import_records(
            "b",
            [
                {"text": f"garden notes {i} on the roses", "created_at": NOW_MS - i}
                for i in range(3)
            ],
        )

    return work


async def state(service: MemoryService) -> dict[str, Any]:
    """Everything the search state answers: recall (scores included), the index's terms and
    columns by memory, the lanes' and vectors' bookkeeping, the lessons, the counts, damage."""
    found = []
    for query in QUERIES:
        hits = await call(service, "memory::recall", {"bank": "b", "query": query}, HUMAN)
        found.append([(h["memory"]["id"], h["score"]) for h in hits["memories"]])
    lessons = await call(
        service,
        "memory::lessons::match",
        {"bank": "b", "tool": "Edit", "arguments": {"file_path": "pyproject.toml"}, "cwd": "/w"},
        HUMAN,
    )
    bank = service.store.get("b")
    index = bank.index
    live = [i for i, m in bank.memories.items() if m.live]
    analysis = index.analysis_of(live)
    return {
        "recall": found,
        "lessons": [card["id"] for card in lessons["cards"]],
        "slots": index.slot_ids(),
        "vocab": [analysis.vocab[t] for t in analysis.pair_terms.tolist()],
        "tfs": analysis.pair_tfs.tolist(),
        "lengths": analysis.lengths.tolist(),
        "told": (analysis.told_start.tolist(), analysis.told_end.tolist()),
        "columns": [
            (int(index.corroboration[index.slot(i)]), bool(index.pinned[index.slot(i)]))
            for i in live
        ],
        "vectors": sorted(bank._vector_models.items()),
        "to_embed": list(bank._to_embed),
        "lane_slots": {lane: sorted(ix.slot_ids()) for lane, ix in bank.lanes.indexes.items()},
        "lane_pending": list(bank.lane_vectors._pending),
        "lane_models": sorted(bank.lane_vectors._models.items()),
        "embedded": bank.embedding_progress(FakeEmbedder().model),
        "summary": bank.summary(),
        "damage": [d.describe() for d in bank.damage],
    }


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What builds the search state, as it is called: the index snapshot, a bulk build, the
    vector sidecars."""
    seen: list[str] = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def called(*args: Any, **kwargs: Any) -> Any:
            seen.append(name)
            return real(*args, **kwargs)

        return called

    monkeypatch.setattr(
        bank_module, "snapshot_prefix", spy("index snapshot", snapshot.snapshot_prefix)
    )
    monkeypatch.setattr(bank_module, "load_vectors", spy("vectors", bank_module.load_vectors))
    monkeypatch.setattr(LexicalIndex, "add_many", spy("build", LexicalIndex.add_many))
    yield seen


def test_a_one_shot_save_reads_no_index_nor_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 100.0)  # a short tail: the snapshot stays
    ids = seed(tmp_path)
    reads.clear()

    run(tmp_path, writes(ids), short_lived=True)

    assert reads == []  # neither at open, nor for the saves, nor at close
    text = (tmp_path / "b" / MEMORIES_FILE).read_text()
    assert "Zelda keeps bees" in text and "garden notes 2 on the roses" in text


def test_a_one_shot_recall_builds_it_once(tmp_path: Path, reads: list[str]) -> None:
    seed(tmp_path)
    reads.clear()

    async def recall_twice(service: MemoryService) -> None:
        for _ in range(2):
            await call(service, "memory::recall", {"bank": "b", "query": "Ana"}, HUMAN)

    run(tmp_path, recall_twice, short_lived=True)

    # Once (the lanes' bulk builds and the lane sidecar's reads are theirs, not these).
    assert reads.count("index snapshot") == reads.count("vectors") == 1


@pytest.mark.parametrize("tail", ["short", "long"])
def test_built_after_writes_it_answers_as_one_built_at_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: str
) -> None:
    if tail == "short":
        monkeypatch.setattr(snapshot, "TAIL_SHARE", 100.0)
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    async def then_read(service: MemoryService) -> dict[str, Any]:
        await writes(ids)(service)
        return await state(service)

    lazy = run(copies["one-shot"], then_read, short_lived=True)
    eager = run(copies["server"], then_read, short_lived=False)

    assert lazy == eager
    assert any(hits for hits in lazy["recall"]) and lazy["vectors"] and lazy["lessons"]


def test_an_erasure_before_the_first_read_answers_as_one_built_at_boot(tmp_path: Path) -> None:
    """A one-shot `memory::forget-subject` rewrites the log and rebuilds RAM from what is left
    (`Bank._adopt`) while the search state is still unbuilt: building it later must not lay the
    boot's records, and the writes before the erasure, over the rebuilt state."""
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    async def erase_then_read(service: MemoryService) -> dict[str, Any]:
        await writes(ids)(service)
        await call(
            service, "memory::forget-subject", {"subject": "rui", "confirm": "destructive"}, HUMAN
        )
        return await state(service)

    lazy = run(copies["one-shot"], erase_then_read, short_lived=True)
    eager = run(copies["server"], erase_then_read, short_lived=False)

    assert lazy == eager


def _files(folder: Path) -> dict[str, Any]:
    """The derived files a close leaves, by content (the arrays, the headers with the log's
    length and CRC-32 they were written for); not the counts' stat stamp of the log (its inode)."""
    out: dict[str, Any] = {}
    counts = json.loads((folder / COUNTS_FILE).read_text())
    out[COUNTS_FILE] = {k: v for k, v in counts.items() if k != "log"}
    for name in (SNAPSHOT_FILE, RECORDS_FILE):
        with np.load(folder / name, allow_pickle=False) as archive:
            out[name] = {key: archive[key].tolist() for key in archive.files}
            out[name]["meta"] = json.loads(bytes(archive["meta"]).decode())
    return out


def same_batch_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next multi-record write's batch tag is the one the run compared with wrote: the tag is
    the process's nonce then its count of batches so far, in hex, so two runs in one process
    wrote logs of different lengths when that count gained a digit between them (f -> 10, as
    here were it not reset; in a full suite run, wherever the tests before left the count), and
    each snapshot rightly said another `log_size`."""
    monkeypatch.setattr(log_module, "_batches", itertools.count(15))


@pytest.mark.parametrize("case", ["short tail", "long tail", "no index snapshot", "stale"])
def test_a_one_shot_close_leaves_the_files_a_server_close_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 0.0 if case == "long tail" else 100.0)
    ids = seed(tmp_path / "seed")
    before = (tmp_path / "seed" / "b" / SNAPSHOT_FILE).read_bytes()
    if case == "no index snapshot":
        (tmp_path / "seed" / "b" / SNAPSHOT_FILE).unlink()
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)
    if case == "stale":  # an index snapshot of another log (a hand edit of its meta's CRC)
        for folder in copies.values():
            path = folder / "b" / SNAPSHOT_FILE
            with np.load(path, allow_pickle=False) as archive:
                arrays = {key: archive[key] for key in archive.files}
            meta = json.loads(bytes(arrays["meta"]).decode())
            meta["log_crc"] ^= 1
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
            np.savez(path.with_suffix(".tmp.npz"), **arrays)
            path.with_suffix(".tmp.npz").replace(path)

    for kind, folder in copies.items():
        same_batch_tags(monkeypatch)
        run(folder, writes(ids), short_lived=kind == "one-shot")

    logs = {kind: (folder / "b" / MEMORIES_FILE).read_bytes() for kind, folder in copies.items()}
    assert logs["one-shot"] == logs["server"]  # the same log: its derived files must be the same
    lazy, eager = _files(copies["one-shot"] / "b"), _files(copies["server"] / "b")
    assert lazy == eager
    kept = (copies["one-shot"] / "b" / SNAPSHOT_FILE).read_bytes() == before
    assert kept == (case == "short tail")  # a short tail's snapshot is left as it was
    assert lazy[COUNTS_FILE]["subjects"] == 1 and lazy[COUNTS_FILE]["pinned"] == 2


def test_a_failed_build_is_raised_and_leaves_the_bank_unbuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(tmp_path)

    def broken(self: LexicalIndex, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("index broken")

    async def work(service: MemoryService) -> tuple[int, int]:
        bank = service.store.get("b")
        live = bank.live_count()
        with monkeypatch.context() as patch:
            patch.setattr(LexicalIndex, "load_analysis", broken)
            patch.setattr(LexicalIndex, "add_many", broken)
            for _ in range(2):  # tried again at the next read, failing the same way
                with pytest.raises(RuntimeError, match="index broken"):
                    _ = bank.index
        return live, len(bank.index)  # then built whole

    live, built = run(tmp_path, work, short_lived=True)
    assert built == live


async def writes_one(service: MemoryService) -> None:
    await call(service, "memory::save", {"bank": "b", "text": "Zelda keeps bees"}, HUMAN)


def test_a_one_shot_close_that_leaves_only_the_records_reads_no_index_nor_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    """Too few live memories for an index snapshot, enough records for `.records.npz`, its tail
    long enough to write it again: the close looked up what the replay found through `damage`,
    which built the whole search state and read the vector sidecars for it."""
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 0.0)
    seed(tmp_path)
    reads.clear()
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 8)  # 7 live of 8 records after it
    before = (tmp_path / "b" / RECORDS_FILE).read_bytes()

    run(tmp_path, writes_one, short_lived=True)

    assert reads == []
    assert (tmp_path / "b" / RECORDS_FILE).read_bytes() != before  # left for the longer log


def test_a_build_failing_at_a_one_shot_close_leaves_the_save_and_closes_every_bank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-shot save builds the search state at close only to leave `.index.npz` (derived
    data: a server's close writes it best effort, and a failure costs the next boot a rebuild).
    A build failing there (the vector sidecar unreadable for a moment: out of file descriptors)
    raised out of the store's close after the save had landed: the command failed, and the banks
    after it were never closed nor the data dir's lock released."""
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 0.0)  # the tail is long: the close builds it
    ids = seed(tmp_path)
    (tmp_path / "a").mkdir()  # another bank, closed after "b"
    run(
        tmp_path,
        lambda s: call(s, "memory::save", {"bank": "a", "text": "an apple a day"}, HUMAN),
        short_lived=False,
    )
    closed: list[str] = []
    real_close = Bank.close

    def close(self: Bank) -> None:
        real_close(self)
        closed.append(self.name)

    real_load = bank_module.load_vectors

    def exhausted(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.parent.name != "b":
            return real_load(path, *args, **kwargs)
        busy = OSError(errno.EMFILE, "Too many open files")
        raise StorageError(f"cannot read {path.name}") from busy

    monkeypatch.setattr(Bank, "close", close)
    monkeypatch.setattr(bank_module, "load_vectors", exhausted)

    async def save_in_both(service: MemoryService) -> None:
        await call(service, "memory::save", {"bank": "b", "text": "Zelda keeps bees"}, HUMAN)
        await call(service, "memory::save", {"bank": "a", "text": "a pear at noon"}, HUMAN)
        assert service.store.get("b")._deferred is not None  # nothing read the index

    run(tmp_path, save_in_both, short_lived=True)

    assert sorted(closed) == ["a", "b"]
    assert "Zelda keeps bees" in (tmp_path / "b" / MEMORIES_FILE).read_text()
    monkeypatch.undo()
    found = run(
        tmp_path,
        lambda s: call(s, "memory::recall", {"bank": "b", "query": "Zelda bees"}, HUMAN),
        short_lived=False,
    )
    assert found["memories"][0]["memory"]["text"] == "Zelda keeps bees"
    assert ids


def test_a_vector_sidecars_damage_is_reported_after_the_logs(tmp_path: Path) -> None:
    seed(tmp_path)
    with (tmp_path / "b" / "vectors.jsonl").open("a") as fh:
        fh.write("not a vector line\n")
    (tmp_path / "b" / "rules" / "bad.md").write_bytes(b"\xff\xfe not utf-8")

    async def damage(service: MemoryService) -> list[str]:
        return [d.describe() for d in service.store.get("b").damage]

    lazy = run(tmp_path, damage, short_lived=True)
    assert lazy == run(tmp_path, damage, short_lived=False)
    assert any("vectors.jsonl" in d for d in lazy)


def test_a_one_shot_save_at_the_cap_evicts_what_a_server_evicts_without_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 100.0)  # a short tail: the snapshot stays
    seed(tmp_path)

    async def recall(service: MemoryService) -> None:  # access counts for some
        await call(service, "memory::recall", {"bank": "b", "query": "Ana Rui"}, HUMAN)

    run(tmp_path, recall, short_lived=False)
    (tmp_path / "b" / "bank.yaml").write_text("description: ''\nmax_memories: 6\n")

    async def save(service: MemoryService) -> list[Any]:
        evicted = []
        for text in ("one more", "and another"):
            saved = await call(service, "memory::save", {"bank": "b", "text": text}, HUMAN)
            evicted.append(saved.get("evicted"))
        return evicted

    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "b", folder / "b")
    reads.clear()
    lazy = run(copies["one-shot"], save, short_lived=True)
    assert reads == []
    assert all(lazy) and lazy == run(copies["server"], save, short_lived=False)


def test_a_short_lived_load_leaves_the_search_state_to_its_first_read(tmp_path: Path) -> None:
    seed(tmp_path)
    bank = Bank.load("b", tmp_path / "b", short_lived=True)
    try:
        assert bank._deferred is not None  # records and text map only
        assert bank.live_count() == len(bank.index)  # counted as the index counts
        assert bank._deferred is None  # built by that read
    finally:
        bank.close()


def test_the_records_digest_reads_the_version_the_package_metadata_says() -> None:
    # (Read from pydantic's import, not the package's METADATA: the same string, so the
    # `.records.npz` files already on disk keep their digest.)
    from importlib import metadata

    assert snapshot._pydantic_core_version() == metadata.version("pydantic-core")


def test_the_analyzer_digest_reads_the_stemmer_version_the_package_metadata_says() -> None:
    # (Read from the loaded Stemmer module, not the package's METADATA: the same string, so the
    # `.index.npz` files already on disk keep their digest.)
    from importlib import metadata

    assert snapshot._stemmer_version() == metadata.version("PyStemmer")


def test_the_counts_from_the_records_are_the_indexs(tmp_path: Path) -> None:
    ids = seed(tmp_path)

    async def counted(service: MemoryService) -> tuple[Any, Any]:
        await writes(ids)(service)
        for i, kind in enumerate(("preference", "procedure", "context", "correction", None)):
            payload = {"bank": "b", "text": f"kind {kind} number {i}", "subject": f"p{i % 2}"}
            await call(service, "memory::save", payload | {"category": kind}, HUMAN)
        await call(
            service,
            "memory::save",
            {"bank": "b", "text": "Ana\u200b is here", "subject": "Ana\u200b"},
            HUMAN,
        )
        bank = service.store.get("b")
        index = bank.index
        kept = Counts(
            len(index), index.pinned_live(), index.subjects_about(), index.oldest_stated()
        )
        return bank_module._counts_of(bank.memories.values()), kept

    from_records, from_index = run(tmp_path, counted, short_lived=False)
    assert from_records == from_index
    assert len(from_index.stated) == 6 and from_index.subjects == 3


def _more_writes(ids: list[str]) -> Work:
    """What `writes` leaves out and a one-shot command can still do before anything reads the
    search state: a lane edit, a supersede with and without a merge, a lesson's anchors edited,
    a save at a subject's cap and at the bank's cap (each evicts), a memory retired then named
    again."""

    async def work(service: MemoryService) -> None:
        await writes(ids)(service)
        await call(
            service,
            "memory::update",
            {"bank": "b", "id": ids[2], "context": "at the cafe", "intention": "order a drink"},
            HUMAN,
        )
        saved = await call(
            service, "memory::save", {"bank": "b", "text": "Ana works in Faro now"}, HUMAN
        )
        await call(
            service,
            "memory::supersede",
            {"bank": "b", "id": ids[0], "superseded_by": saved["memory"]["id"], "reinforce": True},
            HUMAN,
        )
        saved = await call(
            service, "memory::save", {"bank": "b", "text": "The user prefers black tea"}, HUMAN
        )
        await call(
            service,
            "memory::supersede",
            {"bank": "b", "id": ids[2], "superseded_by": saved["memory"]["id"]},
            HUMAN,
        )
        lesson = next(m for m in service.store.get("b").memories.values() if m.category == "lesson")
        await call(
            service,
            "memory::update",
            {"bank": "b", "id": lesson.id, "anchors": {"files": ["pyproject.toml", "setup.cfg"]}},
            HUMAN,
        )
        for i in range(3):
            await call(
                service,
                "memory::save",
                {"bank": "b", "text": f"Ana note {i} about the orchard", "subject": "Ana"},
                HUMAN,
            )
            await call(service, "memory::save", {"bank": "b", "text": f"loose fact {i}"}, HUMAN)
        gone = await call(
            service, "memory::save", {"bank": "b", "text": "a short-lived fact"}, HUMAN
        )
        await call(service, "memory::delete", {"bank": "b", "id": gone["memory"]["id"]}, HUMAN)
        await call(service, "memory::save", {"bank": "b", "text": "a short-lived fact"}, HUMAN)

    return work


async def _answers(service: MemoryService) -> dict[str, Any]:
    """`state`, and what every other read answers: the list (history included), stats, tags,
    export, the preview, the doctor's checks, then a compaction and what recall says after."""
    out = await state(service)

    async def ask(function: str, payload: dict[str, Any]) -> Any:
        return await call(service, function, payload, HUMAN)

    listed = await ask("memory::list", {"bank": "b", "include_superseded": True, "limit": 500})
    out["list"] = [(m["id"], m["revision"], m.get("invalid_at")) for m in listed["memories"]]
    out["stats"] = await ask("memory::stats", {"bank": "b"})
    out["tags"] = await ask("memory::tags", {"bank": "b"})
    exported = await ask("memory::export", {"bank": "b"})
    out["export"] = [(r["id"], r["revision"]) for r in exported["records"]]
    preview = await ask("memory::preview", {"bank": "b", "query": "Ana orchard drink"})
    out["preview"] = preview.get("block") or preview
    doctor = await ask("memory::doctor", {})
    out["doctor"] = sorted((c["name"], c["ok"]) for c in doctor["checks"])
    await ask("memory::compact", {"bank": "b", "horizon_days": 0})
    out["after compaction"] = await state(service)
    return out


@pytest.mark.parametrize("scoping", [False, True])
def test_every_read_after_one_shot_writes_answers_as_one_built_at_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scoping: bool
) -> None:
    """Unscoped, every write decides from the records and the build waits for the first read;
    scoped by subject, a save at a subject's cap counts over the index, which is built then, in
    the middle of the writes."""
    same_batch_tags(monkeypatch)
    ids = seed(tmp_path / "seed")
    copies = {kind: tmp_path / kind for kind in ("one-shot", "server")}
    for folder in copies.values():
        shutil.copytree(tmp_path / "seed", folder)

    for folder in copies.values():  # caps the writes reach (a configure would read the index)
        (folder / "b" / "bank.yaml").write_text(
            "description: ''\nassociation_weights: {content: 0.6, context: 0.3, intention: 0.1}\n"
            f"max_memories: 12\nmax_per_subject: 2\nsubject_scoping: {str(scoping).lower()}\n"
        )

    async def then_read(service: MemoryService) -> dict[str, Any]:
        await _more_writes(ids)(service)
        # Nothing the writes did read the search state: the one-shot run built it only now.
        built_late = service.store.get("b")._deferred is not None
        return await _answers(service) | {"built late": built_late}

    lazy = run(copies["one-shot"], then_read, short_lived=True)
    same_batch_tags(monkeypatch)
    eager = run(copies["server"], then_read, short_lived=False)

    assert lazy.pop("built late") is not scoping and not eager.pop("built late")
    assert lazy.keys() == eager.keys()
    for key in lazy:
        assert lazy[key] == eager[key], key
