"""Snapshots for a prefix of the log: a bank closed after a few appends leaves `.index.npz` and
`.records.npz` as they were (a one-shot save must not rewrite megabytes for one line), and the
next boot uses them for the prefix and replays the lines past it — answering exactly as a boot
without them. A tail with damage, or one that finishes a write begun before the prefix, sends
the boot through the full replay and build, with the same damage report."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import IndexedDoc, analyze, combine
from memory_worker.storage import bank as bank_module
from memory_worker.storage import snapshot
from memory_worker.storage.bank import MEMORIES_FILE, Bank
from memory_worker.storage.log import continues_batch, encode, tail_records
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE

from .boots import NOW_MS, TEXTS, session

HUMAN = Caller.human("cli")
QUERIES = ["where does Ana work", "who plays chess", "what does the user drink", "Tiago Porto",
           "garden notes", "Ana moved"]  # fmt: skip


@pytest.fixture(autouse=True)
def small_banks_get_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)


@pytest.fixture
def short_tails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any tail of these tests counts as short (their banks are tiny)."""
    monkeypatch.setattr(snapshot, "TAIL_SHARE", 100.0)


@pytest.fixture
def uses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[bool, bool]]]:
    """Per bank load: (records from `.records.npz`, index from `.index.npz`)."""
    seen: list[tuple[bool, bool]] = []
    real_records = bank_module.Bank._replay_from_records
    real_index = bank_module.Bank._index_from_snapshot

    def records(self: Bank, *, lazy: bool = False) -> tuple[int, int] | None:
        identity = real_records(self, lazy=lazy)
        seen.append((identity is not None, False))
        return identity

    def index(self: Bank, live: list[Any]) -> bool:
        used = real_index(self, live)
        seen[-1] = (seen[-1][0], used)
        return used

    monkeypatch.setattr(bank_module.Bank, "_replay_from_records", records)
    monkeypatch.setattr(bank_module.Bank, "_index_from_snapshot", index)
    yield seen


def seed(data_dir: Path) -> list[str]:
    async def work(service: MemoryService) -> list[str]:
        ids = []
        for text in TEXTS:
            saved = await call(service, "memory::save", {"bank": "b", "text": text}, HUMAN)
            ids.append(saved["memory"]["id"])
        return ids

    return list(session(data_dir, work))


def grow(data_dir: Path, ids: list[str]) -> None:
    """Every kind of line past the prefix: a new memory, a reinforcement, an edit of a text, a
    pin, a delete and a multi-record write."""

    async def work(service: MemoryService) -> None:
        await call(service, "memory::save", {"bank": "b", "text": "Zelda keeps bees"}, HUMAN)
        await call(service, "memory::save", {"bank": "b", "text": TEXTS[2]}, HUMAN)
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
            [{"text": f"garden notes {i} about the roses", "created_at": NOW_MS - i}
             for i in range(3)],
        )  # fmt: skip

    session(data_dir, work)


def observed(data_dir: Path) -> Any:
    """What a boot answers: every record, the text map, the index's terms per live memory (by
    term, not term id) and columns, and recall's hits with their scores."""

    async def work(service: MemoryService) -> Any:
        found = []
        for query in QUERIES:
            hits = await call(service, "memory::recall", {"bank": "b", "query": query}, HUMAN)
            found.append([(h["memory"]["id"], h["score"]) for h in hits["memories"]])
        bank = service.store.get("b")
        index = bank.index
        live = [i for i, m in bank.memories.items() if m.live]
        analysis = index.analysis_of(live)
        terms = []
        offset = 0
        for count in analysis.pair_counts.tolist():
            pairs = zip(
                analysis.pair_terms[offset : offset + count].tolist(),
                analysis.pair_tfs[offset : offset + count].tolist(),
                strict=True,
            )
            terms.append([(analysis.vocab[t], tf) for t, tf in pairs])
            offset += count
        return {
            "records": [r.to_line() for r in bank.memories.values()],
            "by_text": dict(bank._by_text),
            "slots": index.slot_ids(),
            "live": live,
            "terms": terms,
            "lengths": analysis.lengths.tolist(),
            "dated": analysis.dated.tolist(),
            "told": list(
                zip(analysis.told_start.tolist(), analysis.told_end.tolist(), strict=True)
            ),
            "entities": analysis.entity_counts.tolist(),
            "pinned": [bool(index.pinned[index.slot(i)]) for i in live],
            "corroboration": [int(index.corroboration[index.slot(i)]) for i in live],
            "damage": [d.describe() for d in bank.damage],
            "recall": found,
        }

    return session(data_dir, work)


def without_snapshots(data_dir: Path) -> Any:
    """What a boot with no derived file answers (the files put back after)."""
    folder = data_dir / "b"
    kept = {name: (folder / name).read_bytes() for name in (RECORDS_FILE, SNAPSHOT_FILE)
            if (folder / name).is_file()}  # fmt: skip
    for name in kept:
        (folder / name).unlink()
    try:
        return observed(data_dir)
    finally:
        for name, data in kept.items():
            (folder / name).write_bytes(data)


def derived(data_dir: Path) -> dict[str, bytes]:
    folder = data_dir / "b"
    return {name: (folder / name).read_bytes() for name in (RECORDS_FILE, SNAPSHOT_FILE)}


def test_a_one_line_tail_rewrites_no_snapshot_and_the_next_boot_equals_a_full_replay(
    tmp_path: Path, uses: list[tuple[bool, bool]]
) -> None:
    # The default thresholds: one line past a prefix of ~50 KiB is a short tail.
    for i in range(150):
        TEXTS.append(f"filler memory {i} about the harbour and the boats")
    try:
        seed(tmp_path)
    finally:
        del TEXTS[6:]
    before = derived(tmp_path)

    async def save_one(service: MemoryService) -> None:
        await call(service, "memory::save", {"bank": "b", "text": "Zelda keeps bees"}, HUMAN)

    session(tmp_path, save_one)

    assert derived(tmp_path) == before  # the one-shot close left both files as they were
    uses.clear()
    booted = observed(tmp_path)
    assert uses == [(True, True)]  # both used, for the prefix; the new line replayed past it
    assert booted == without_snapshots(tmp_path)
    assert any(hits and hits[0][0] for hits in booted["recall"])


def test_every_kind_of_line_past_the_prefix_boots_as_a_full_replay(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    ids = seed(tmp_path)
    before = derived(tmp_path)
    grow(tmp_path, ids)
    assert derived(tmp_path) == before
    uses.clear()

    booted = observed(tmp_path)

    assert uses == [(True, True)]
    assert booted == without_snapshots(tmp_path)
    assert "fp" in booted["records"][-1].decode()  # the import's memories, last in replay order


def test_a_long_tail_rewrites_both_files_at_close(
    tmp_path: Path, uses: list[tuple[bool, bool]]
) -> None:
    ids = seed(tmp_path)
    before = derived(tmp_path)
    grow(tmp_path, ids)  # far past 1% of a tiny log

    after = derived(tmp_path)
    assert after[RECORDS_FILE] != before[RECORDS_FILE]
    assert after[SNAPSHOT_FILE] != before[SNAPSHOT_FILE]
    uses.clear()
    booted = observed(tmp_path)
    assert uses == [(True, True)]
    assert booted == without_snapshots(tmp_path)


def _append(data_dir: Path, data: bytes) -> None:
    with (data_dir / "b" / MEMORIES_FILE).open("ab") as fh:
        fh.write(data)


def _memory(memory_id: str, text: str) -> Memory:
    return Memory(id=memory_id, text=text, confidence=Confidence.STATED, created_at=NOW_MS,
                  updated_at=NOW_MS)  # fmt: skip


def test_a_damaged_line_past_the_prefix_sends_the_boot_through_the_full_replay(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    seed(tmp_path)
    good = encode([_memory("fpgood", "Zelda keeps bees")])
    bad = encode([_memory("fpbad", "Zelda keeps wasps")]).replace(b'"text":', b'"text";')
    _append(tmp_path, good + bad)
    uses.clear()

    booted = observed(tmp_path)

    assert uses == [(False, False)]
    assert booted == without_snapshots(tmp_path)
    assert booted["damage"] and "corrupt line" in booted["damage"][0]


def test_a_line_edited_by_hand_past_the_prefix_is_read_as_it_reads(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    """Not damage: the boot replays the log for its note, and the prefix's index still serves,
    the edited line analysed afresh with the other lines past it."""
    seed(tmp_path)
    edited = encode([_memory("fpedit", "Zelda keeps wasps")]).replace(b"wasps", b"waspz")
    _append(tmp_path, edited)
    uses.clear()

    booted = observed(tmp_path)

    assert uses == [(False, True)]
    assert booted == without_snapshots(tmp_path)
    assert booted["damage"] and "edited by hand" in booted["damage"][0]


def test_a_torn_write_past_the_prefix_sends_the_boot_through_the_full_replay(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    seed(tmp_path)
    lines = encode([_memory("fpone", "first of two"), _memory("fptwo", "second of two")])
    # Cut inside its second line, as a crash cuts (a write short of whole lines, with a later
    # one after it, lost them by hand: `test_bank`), then a later save on a line of its own.
    torn = lines[: lines.index(b"\n") + 20] + b"\n"
    _append(tmp_path, torn + encode([_memory("fpafter", "a later save")]))
    uses.clear()

    booted = observed(tmp_path)

    assert uses == [(False, False)]
    assert booted == without_snapshots(tmp_path)
    assert any("interrupted write of 2 records" in d for d in booted["damage"])


def test_tail_records_replay_checks_and_continues_batch() -> None:
    one = encode([_memory("fpa", "a")])
    pair = encode([_memory("fpb", "b"), _memory("fpc", "c")])
    data = one + pair
    assert [r.id for r in tail_records(data, len(one)) or []] == ["fpb", "fpc"]
    assert tail_records(data, 0) is not None and len(tail_records(data, 0) or []) == 3
    assert tail_records(data, len(one) + 3) is None  # not at a line boundary
    assert tail_records(data[:-1], len(one)) is None  # does not end whole
    cut = len(one) + pair.index(b"\n") + 1
    assert tail_records(data, cut) is None  # the second half of a write alone: torn
    assert continues_batch(data, cut) and not continues_batch(data, len(one))
    assert not continues_batch(data, len(data))


def _doc(doc_id: str, text: str, entities: tuple[str, ...] = ()) -> IndexedDoc:
    words = text.split()
    return IndexedDoc(doc_id, words, entity_terms=frozenset(entities))


def test_combined_analysis_equals_analysing_the_picked_documents() -> None:
    base_docs = [_doc("a", "tea tea garden", ("ana",)), _doc("b", "kiln glaze"),
                 _doc("c", "garden river river", ("rui", "ana"))]  # fmt: skip
    extra_docs = [_doc("d", "new words here tea"), _doc("e", "glaze", ("zelda",))]
    rows = [4, 0, 3, 2]  # e, a, d, c (b dropped)
    picked = [extra_docs[1], base_docs[0], extra_docs[0], base_docs[2]]

    def terms(a: Any) -> list[Any]:
        out, at, ent = [], 0, 0
        for count, entities in zip(a.pair_counts.tolist(), a.entity_counts.tolist(), strict=True):
            span = slice(at, at + count)
            pairs = zip(a.pair_terms[span].tolist(), a.pair_tfs[span].tolist(), strict=True)
            named = a.entity_terms[ent : ent + entities].tolist()
            out.append(([(a.vocab[t], tf) for t, tf in pairs], [a.vocab[t] for t in named]))
            at, ent = at + count, ent + entities
        return out

    combined = combine(analyze(base_docs), analyze(extra_docs), rows)
    fresh = analyze(picked)

    assert terms(combined) == terms(fresh)
    assert combined.lengths.tolist() == fresh.lengths.tolist()
    assert combined.dated.tolist() == fresh.dated.tolist()
    assert combined.told_start.tolist() == fresh.told_start.tolist()
    assert combined.told_end.tolist() == fresh.told_end.tolist()
    assert Counter(combined.vocab) == Counter(set(combined.vocab))  # no term twice


def test_an_edit_of_the_prefix_ignores_both_snapshots(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    seed(tmp_path)
    log = tmp_path / "b" / MEMORIES_FILE
    data = log.read_bytes()
    first_end = data.index(b"\n")
    line = json.loads(data[:first_end])
    line.pop("crc")
    line["text"] = "Ana moved to Zanzibar"
    log.write_bytes(json.dumps(line).encode() + data[first_end:] + encode([_memory("fpz", "z")]))
    uses.clear()

    booted = observed(tmp_path)

    assert uses == [(False, False)]
    assert booted == without_snapshots(tmp_path)


def test_a_rewritten_log_gets_new_snapshots_at_close_however_little_it_changed(
    tmp_path: Path, short_tails: None, uses: list[tuple[bool, bool]]
) -> None:
    # A compaction replaces the log by another file: the snapshots on disk are of the old one,
    # never a prefix of the new one, so close writes them again (the tail rule is for appends).
    ids = seed(tmp_path)
    grow(tmp_path, ids)
    before = derived(tmp_path)

    async def compact(service: MemoryService) -> None:
        await call(service, "memory::compact", {"bank": "b", "horizon_days": 0}, HUMAN)

    session(tmp_path, compact)
    after = derived(tmp_path)

    assert after[RECORDS_FILE] != before[RECORDS_FILE]
    assert after[SNAPSHOT_FILE] != before[SNAPSHOT_FILE]
    uses.clear()
    booted = observed(tmp_path)
    assert uses == [(True, True)]
    assert booted == without_snapshots(tmp_path)
