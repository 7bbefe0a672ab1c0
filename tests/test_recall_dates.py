"""Dates in questions (`Fusion.in_span`): a question naming a stretch of time ("in January 2022",
"on 1 May", "last month") favours the memories stated then, or the day after (an event is mostly
told after it happened), or whose own words point into it ("last month", said in April, for "in
March"); a question naming none ranks as it did. A "how long" question favours a memory stating
a duration ("seven years now"), as a "when" question one stating a date."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from memory_worker.core.models import Confidence, Memory
from memory_worker.search import ranking
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import DEFAULT_FUSION, Fusion

NOW_MS = int(datetime(2022, 12, 1, tzinfo=UTC).timestamp() * 1000)


def _at(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


def _memory(mid: str, text: str, day: str) -> Memory:
    return Memory(
        id=mid,
        text=text,
        confidence=Confidence.STATED,
        created_at=_at(day),
        updated_at=_at(day),
    )


SCREENPLAYS = (
    _memory("jan", "Finally finished my screenplay and printed it", "2022-01-23"),
    _memory("jun", "Finished my screenplay about the lighthouse", "2022-06-10"),
    _memory("aug", "I finished a screenplay draft on the train", "2022-08-02"),
)
# Unrelated memories, so the question's words are rare in the bank, as in a real one.
FILLER = tuple(
    _memory(f"f{i}", f"Note {i}: the weather, the groceries and the bus times", "2022-01-20")
    for i in range(30)
)


def _rank(
    text: str, fusion: Fusion = DEFAULT_FUSION, memories: tuple[Memory, ...] = SCREENPLAYS
) -> list[str]:
    by_id = {m.id: m for m in (*memories, *FILLER)}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    query = RecallQuery(text=text, limit=3, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion)
    return [hit.memory.id for hit in rank(by_id, index, query)]


def test_a_memory_stated_in_the_month_a_question_names_ranks_first() -> None:
    assert _rank("which screenplay did I finish in January 2022?")[0] == "jan"
    assert _rank("which screenplay did I finish in June?")[0] == "jun"
    assert _rank("que screenplay eu finish em agosto de 2022?")[0] == "aug"


def test_a_memory_told_the_day_after_the_named_day_still_counts() -> None:
    told_later = _memory("told", "Finished my screenplay last night", "2022-05-02")
    memories = (*SCREENPLAYS, told_later)
    assert _rank("what screenplay did I finish on 1 May, 2022?", memories=memories)[0] == "told"
    # A month later is another time: no longer favoured over the better match.
    weeks_later = told_later.model_copy(update={"created_at": _at("2022-06-01")})
    weeks_later = weeks_later.model_copy(update={"updated_at": _at("2022-06-01")})
    memories = (*SCREENPLAYS, weeks_later)
    assert _rank("what screenplay did I finish on 1 May, 2022?", memories=memories)[0] != "told"


def test_a_question_naming_no_time_ranks_as_without_the_boost() -> None:
    for text in ("which screenplay did I finish?", "when did I finish my screenplay?"):
        assert _rank(text) == _rank(text, Fusion(in_span=0.0))


def test_a_memory_whose_own_words_point_into_the_named_month_counts() -> None:
    """Said on 18 April, "last month" is March: a question about March finds it (the told span,
    `Fusion.span_told`, on by default), and without the told span it does not."""
    convention = _memory(
        "conv", "My colleagues and I went to a convention last month", "2022-04-18"
    )
    other = _memory("other", "My colleagues and I went to a convention downtown", "2022-06-02")
    memories = (convention, other)
    question = "what did I go to with my colleagues in March 2022?"
    assert _rank(question, memories=memories)[0] == "conv"
    assert _rank(question, Fusion(span_told=False), memories=memories)[0] == "other"


def _told_bank(rng: random.Random, n: int) -> dict[str, Memory]:
    phrases = ("last month", "yesterday", "two weeks ago", "on 3 March", "in 2021", "last week",
               "next week", "on the weekend", "")  # fmt: skip
    days = [f"2022-{month:02d}-{day:02d}" for month in range(1, 12) for day in (1, 9, 17, 25)]
    return {
        f"m{i}": _memory(f"m{i}", f"We went to the {rng.choice(('fair', 'lake', 'gym'))} "
                         f"{rng.choice(phrases)}", rng.choice(days))
        for i in range(n)
    }  # fmt: skip


def _answers(by_id: dict[str, Memory], index: LexicalIndex) -> list[list[tuple[str, float]]]:
    questions = ("where did we go in March 2022?", "where did we go last month?",
                 "what did we do on 2 May 2022?", "where did we go in 2021?")  # fmt: skip
    return [
        [(hit.memory.id, round(hit.score, 12)) for hit in rank(by_id, index, RecallQuery(
            text=q, limit=8, now_ms=NOW_MS, half_life_days=60.0, as_of=as_of))]
        for q in questions for as_of in (None, _at("2022-06-15"))
    ]  # fmt: skip


def test_told_spans_kept_by_the_index_answer_as_reading_every_text_afresh() -> None:
    """The index keeps each memory's told span (`LexicalIndex.told_days`); after re-statements
    (a new `last_stated_at` moves "last month"), edits, deletions and a compaction, recall
    answers as an index built afresh from the memories does."""
    rng = random.Random(7)
    by_id = _told_bank(rng, 60)
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    for round_ in range(4):
        fresh = LexicalIndex()
        fresh.add_many(indexed(m) for m in by_id.values())
        assert _answers(by_id, index) == _answers(by_id, fresh), round_
        for mid in rng.sample(sorted(by_id), 12):
            memory = by_id[mid]
            change = rng.choice(("restated", "edited", "deleted"))
            if change == "deleted":
                del by_id[mid]
                index.remove(mid)
                continue
            if change == "restated":
                memory = memory.model_copy(update={"stated_at": _at("2022-10-20")})
            else:
                memory = memory.model_copy(update={"text": f"{memory.text} last week"})
            by_id[mid] = memory
            if change == "restated":
                index.update_columns(indexed(memory, with_terms=False))
            else:
                index.add_doc(indexed(memory))
        if round_ == 2:
            index._compact()


def test_a_recall_reads_no_memory_s_words_for_its_told_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The index read each memory's told span when it indexed it: a recall naming a time reads
    none again (read at every recall, a big bank paid for thousands of texts each time)."""
    by_id = _told_bank(random.Random(3), 40)
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    expected = _answers(by_id, index)
    read: list[str] = []
    real = ranking.told_span

    def counted(text: str, stated_ms: int) -> tuple[int, int] | None:
        read.append(text)
        return real(text, stated_ms)

    monkeypatch.setattr(ranking, "told_span", counted)
    assert _answers(by_id, index) == expected
    assert read == []
