"""Conversational context (`Fusion.context`): a hit that asks a question raises the memories saved
right after it in its session, so the turn that answers a matching question is recalled though it
shares nothing with the query. Never a memory the query's filters exclude, never one from another
session or from before the question, never a restatement of it; a stated fact lends nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.models import Confidence, Memory, Provenance
from memory_worker.search import index as index_module
from memory_worker.search.index import IndexedDoc, LexicalIndex
from memory_worker.search.ranking import RecallMode, RecallQuery, indexed, rank
from memory_worker.search.scoring import Fusion
from memory_worker.storage import bank as bank_module
from memory_worker.storage.snapshot import SNAPSHOT_FILE

from .boots import session

DIM = 24
HUMAN = Caller.human("cli")


def _unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _axis(i: int) -> np.ndarray:
    e = np.zeros(DIM)
    e[i] = 1.0
    return e


QUESTION, ANSWER, TOPIC = 0, 1, 2  # directions: what the query asks, the answer's own, shared


def _memory(mid: str, text: str, created_at: int, session_id: str | None, **extra: Any) -> Memory:
    return Memory(
        id=mid,
        text=text,
        confidence=Confidence.STATED,
        created_at=created_at,
        updated_at=created_at,
        source=Provenance(session_id=session_id) if session_id else None,
        **extra,
    )


def _bank(
    answer_session: str | None = "s1", **answer_extra: Any
) -> tuple[dict[str, Memory], LexicalIndex]:
    """A question turn matching the query, the turn after it answering it in other words (its
    vector shares the question's topic, not the query's), and distractors with a
    little of its meaning (no word of it), in sessions of their own."""
    rows: list[tuple[Memory, np.ndarray]] = [
        (
            _memory("q", "Caroline: What got you into running?", 10, "s1"),
            0.8 * _axis(QUESTION) + 0.6 * _axis(TOPIC),
        ),
        (
            _memory(
                "a", "Melanie: My kids wanted a hobby we share.", 11, answer_session, **answer_extra
            ),
            0.6 * _axis(TOPIC) + 0.8 * _axis(ANSWER),
        ),
    ]
    for i in range(8):
        rows.append(
            (
                _memory(f"d{i}", f"Note {i}: a club meets on Sundays", 20 + i, f"other{i}"),
                0.3 * _axis(QUESTION) + _axis(3 + i),
            )
        )
    memories = {m.id: m for m, _ in rows}
    index = LexicalIndex()
    for memory, vector in rows:
        index.add_doc(indexed(memory))
        index.set_vector(memory.id, _unit(vector))
    return memories, index


def _query(context: float = Fusion().context, **extra: Any) -> RecallQuery:
    fusion = dataclasses.replace(Fusion(), context=context)
    return RecallQuery(
        text="what got her into running",
        limit=3,
        now_ms=100,
        half_life_days=60.0,
        mode=RecallMode.HYBRID,
        vector=tuple(_unit(_axis(QUESTION))),
        fusion=fusion,
        **extra,
    )


def _ids(memories: dict[str, Memory], index: LexicalIndex, query: RecallQuery) -> list[str]:
    return [hit.memory.id for hit in rank(memories, index, query)]


def _scores(memories: dict[str, Memory], index: LexicalIndex, context: float) -> dict[str, float]:
    query = dataclasses.replace(_query(context=context), limit=20)
    return {hit.memory.id: hit.score for hit in rank(memories, index, query)}


def test_the_default_fusion_reads_context() -> None:
    assert Fusion().context > 0 and Fusion().context_span >= 1


def test_the_turn_after_the_best_hit_in_its_session_is_recalled() -> None:
    memories, index = _bank()
    without = _ids(memories, index, _query(context=0.0))
    assert without[0] == "q" and "a" not in without  # nothing of the query is in the answer
    with_context = _ids(memories, index, _query())
    assert with_context[0] == "q" and "a" in with_context


def test_a_raised_answer_ranks_just_under_the_question_never_above_it() -> None:
    memories, index = _bank()
    closer = memories["a"].model_copy(update={"text": "Melanie: running, because my kids asked."})
    memories["a"] = closer
    index.add_doc(indexed(closer))
    index.set_vector("a", _unit(0.6 * _axis(TOPIC) + 0.8 * _axis(ANSWER)))
    plain = _scores(memories, index, 0.0)
    assert plain["a"] + Fusion().context * plain["q"] > plain["q"]  # uncapped, it would lead
    hits = rank(memories, index, _query())
    assert [hit.memory.id for hit in hits[:2]] == ["q", "a"]
    assert plain["a"] < hits[1].score < hits[0].score


def test_only_a_question_lends_context_and_only_to_what_came_after_it() -> None:
    memories, index = _bank()
    statement = memories["q"].model_copy(update={"text": "Caroline: I got into running."})
    memories["q"] = statement
    index.add_doc(indexed(statement))  # re-indexed with its new text: the newest slot now
    index.set_vector("q", _unit(0.8 * _axis(QUESTION) + 0.6 * _axis(TOPIC)))
    assert _scores(memories, index, Fusion().context) == _scores(memories, index, 0.0)
    memories, index = _bank()
    later = memories["a"].model_copy(update={"created_at": 5, "updated_at": 5})  # said before
    memories["a"] = later
    index.update_columns(indexed(later))
    assert _scores(memories, index, Fusion().context) == _scores(memories, index, 0.0)


def test_a_memory_saved_in_another_session_or_outside_any_is_not_context() -> None:
    for elsewhere in ("s2", None):
        memories, index = _bank(answer_session=elsewhere)
        assert "a" not in _ids(memories, index, _query())


@pytest.mark.parametrize(
    ("answer_extra", "query_extra"),
    [
        ({"tags": ("private",)}, {"tag": "public"}),
        ({"subject": "bob"}, {"scoped": True, "subject": "ana"}),
        ({}, {"as_of": 10}),  # saved after the moment asked about
    ],
    ids=["another tag", "out of scope", "after as_of"],
)
def test_context_never_brings_in_a_memory_the_filters_exclude(
    answer_extra: dict[str, Any], query_extra: dict[str, Any]
) -> None:
    memories, index = _bank(**answer_extra)
    if "tag" in query_extra:  # the best hit itself passes the tag filter
        memories["q"] = memories["q"].model_copy(update={"tags": ("public",)})
        index.update_columns(indexed(memories["q"]))
    hits = _ids(memories, index, _query(**query_extra))
    assert hits and hits[0] == "q"
    assert "a" not in hits


def test_a_banks_relevance_threshold_keeps_out_what_it_cut() -> None:
    memories, index = _bank()
    hits = _ids(memories, index, _query(threshold=0.3))
    assert hits[0] == "q" and "a" not in hits


def test_a_restatement_of_the_best_hit_is_not_raised_as_its_context() -> None:
    memories, index = _bank()
    index.set_vector("a", _unit(0.8 * _axis(QUESTION) + 0.6 * _axis(TOPIC)))  # same as "q"

    assert _scores(memories, index, Fusion().context) == _scores(memories, index, 0.0)


def test_session_neighbours_are_in_saving_order_and_skip_removed_memories() -> None:
    index = LexicalIndex()
    # Saved out of order on purpose: the order is creation time, then slot.
    for doc_id, created in [("t3", 3), ("t1", 1), ("t2", 2), ("t5", 5), ("t4", 4), ("x", 2)]:
        session_id = "other" if doc_id == "x" else "s"
        index.add_doc(IndexedDoc(doc_id, ["w"], created_at=created, session=session_id))

    def around(doc_id: str, before: int, after: int) -> list[str]:
        slots = index.session_neighbours(index.slot(doc_id), before=before, after=after)
        return [index.doc_id(int(s)) for s in slots]

    assert around("t3", 1, 1) == ["t2", "t4"]
    assert around("t3", 2, 2) == ["t1", "t2", "t4", "t5"]
    assert around("t3", 0, 2) == ["t4", "t5"]
    assert around("t1", 2, 2) == ["t2", "t3"]
    index.remove("t4")
    assert around("t3", 1, 1) == ["t2", "t5"]
    index.add_doc(IndexedDoc("alone", ["w"], created_at=3))
    assert around("alone", 2, 2) == []


# (op, doc number, session number, created_at): add or re-add a doc, remove it
SESSION_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]),
        st.integers(0, 12),
        st.integers(0, 3),
        st.integers(0, 5),
    ),
    max_size=120,
)


@settings(max_examples=80, deadline=None)
@given(SESSION_OPS)
@example(
    [("add", n, 1 + n % 2, n % 3) for n in range(10)] + [("remove", n, 0, 0) for n in range(8)]
)
def test_session_neighbours_match_a_scan_of_the_live_memories_after_any_changes(
    ops: list[tuple[str, int, int, int]],
) -> None:
    with mock.patch.object(index_module, "_MIN_CAPACITY", 2):  # removals compact the index too
        _check_session_neighbours(ops)


def _check_session_neighbours(ops: list[tuple[str, int, int, int]]) -> None:
    index = LexicalIndex()
    for op, n, session_no, created in ops:
        if op == "add":
            session_id = None if session_no == 0 else f"s{session_no}"
            index.add_doc(IndexedDoc(f"d{n}", ["w"], created_at=created, session=session_id))
        else:
            index.remove(f"d{n}")
    sessions = {f"d{n}": (sn, c) for op, n, sn, c in ops if op == "add"}
    for doc_id in list(index._slot_of):
        session_no, _ = sessions[doc_id]
        slot = index.slot(doc_id)
        got = [index.doc_id(int(s)) for s in index.session_neighbours(slot, before=2, after=2)]
        if session_no == 0:
            assert got == []
            continue
        same = sorted(
            (int(index.created_at[index.slot(d)]), index.slot(d), d)
            for d in index._slot_of
            if sessions[d][0] == session_no
        )
        names = [d for _, _, d in same]
        at = names.index(doc_id)
        assert got == names[max(0, at - 2) : at] + names[at + 1 : at + 3]


def test_a_bulk_load_keeps_each_memorys_session() -> None:
    docs = [
        IndexedDoc(f"t{i}", ["w", f"t{i}"], created_at=i, session=None if i == 2 else f"s{i % 2}")
        for i in range(6)
    ]
    one_by_one = LexicalIndex()
    for doc in docs:
        one_by_one.add_doc(doc)
    bulk = LexicalIndex()
    bulk.add_many(docs)
    for doc in docs:
        slot = one_by_one.slot(doc.doc_id)
        near = one_by_one.session_neighbours(slot, before=2, after=2)
        expected = [one_by_one.doc_id(int(s)) for s in near]
        near = bulk.session_neighbours(bulk.slot(doc.doc_id), before=2, after=2)
        got = [bulk.doc_id(int(s)) for s in near]
        assert got == expected


def test_a_snapshot_boot_gives_the_same_context_as_a_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 3)
    rows = [
        {"id": f"m{i}", "text": f"turn {i} about topic {i % 3}", "created_at": 1_000 + i,
         "source": {"session_id": f"s{i // 4}"}}
        for i in range(12)
    ]  # fmt: skip

    async def seed(service: MemoryService) -> None:
        await service.import_records("b", rows)

    def neighbours(service: MemoryService) -> dict[str, list[str]]:
        index = service.store.get("b").index
        return {
            row["id"]: [
                index.doc_id(int(s))
                for s in index.session_neighbours(index.slot(row["id"]), before=2, after=2)
            ]
            for row in rows
        }

    async def read(service: MemoryService) -> dict[str, list[str]]:
        await call(service, "memory::list", {"bank": "b"}, HUMAN)  # the bank is loaded
        return neighbours(service)

    session(tmp_path, seed)
    from_snapshot = session(tmp_path, read)
    (tmp_path / "b" / SNAPSHOT_FILE).unlink()
    from_log = session(tmp_path, read)
    assert from_snapshot == from_log
    assert from_log["m5"] == ["m4", "m6", "m7"]  # the session of m4…m7, m5's neighbours


@pytest.mark.parametrize("in_session", [True, False])
def test_recall_through_the_call_entry_finds_the_answer_a_transcript_import_saved(
    tmp_path: Path, in_session: bool
) -> None:
    turns = [
        "Caroline: What got you into running?",
        "Melanie: My kids wanted a hobby we share.",
        "Caroline: That is lovely, see you soon!",
    ] + [f"Note {i}: the club meets on Sundays" for i in range(5)]
    rows = [
        {"id": f"t{i}", "text": text, "created_at": 1_000 + i}
        | ({"source": {"session_id": "chat-1"}} if in_session else {})
        for i, text in enumerate(turns)
    ]

    async def work(service: MemoryService) -> list[str]:
        await service.import_records("b", rows)
        found = await call(
            service,
            "memory::recall",
            {"bank": "b", "query": "what got her into running", "limit": 3},
            HUMAN,
        )
        return [hit["memory"]["id"] for hit in found["memories"]]

    ids = session(tmp_path, work)
    assert ids[0] == "t0"
    assert ("t1" in ids) is in_session
