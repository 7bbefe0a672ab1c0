"""Dates in questions (`Fusion.in_span`): a question naming a stretch of time ("in January 2022",
"on 1 May", "last month") favours the memories stated then, or the day after (an event is mostly
told after it happened), or whose own words point into it ("last month", said in April, for "in
March"); a question naming none ranks as it did. A "how long" question favours a memory stating
a duration ("seven years now"), as a "when" question one stating a date."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_worker.core.models import Confidence, Memory
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
    """Said on 18 April, "last month" is March: a question about March finds it, with the told
    span on (`Fusion.span_told`, off by default: it reads texts at query time)."""
    convention = _memory(
        "conv", "My colleagues and I went to a convention last month", "2022-04-18"
    )
    other = _memory("other", "My colleagues and I went to a convention downtown", "2022-06-02")
    memories = (convention, other)
    question = "what did I go to with my colleagues in March 2022?"
    assert _rank(question, Fusion(span_told=True), memories=memories)[0] == "conv"
    assert _rank(question, Fusion(span_told=False), memories=memories)[0] == "other"


def test_a_how_long_question_prefers_the_memory_stating_a_duration() -> None:
    said = _memory("said", "Painting? Seven years now, it is my real muse", "2022-03-01")
    other = _memory("other", "I love painting, it is my muse", "2022-09-01")
    assert _rank("how long has she been painting?", memories=(said, other))[0] == "said"


def test_a_relative_time_is_counted_from_the_recall_s_as_of() -> None:
    """Time travel: "last month", asked as of 10 September 2022, is August 2022."""
    by_id = {m.id: m for m in (*SCREENPLAYS, *FILLER)}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    question = "which screenplay did I finish last month?"
    query = RecallQuery(
        text=question, limit=3, now_ms=NOW_MS, half_life_days=60.0, as_of=_at("2022-09-10")
    )
    assert rank(by_id, index, query)[0].memory.id == "aug"
    assert _rank(question)[0] != "aug"  # asked now (December 2022), last month is November


def test_a_time_outside_the_calendar_is_no_time_and_fails_no_recall() -> None:
    """Recall asked "3000 years ago" (before year 1), or "next year" as of 9999, ranks as without
    the boost; a memory saying "3000 years ago" is read as pointing nowhere (the told span)."""
    text = "which screenplay was finished 3000 years ago?"
    assert _rank(text) == _rank(text, Fusion(in_span=0.0))
    ancient = _memory("old", "A screenplay about dinosaurs, set 3000 years ago", "2022-11-10")
    memories = (*SCREENPLAYS, ancient)
    text = "which screenplay did I finish last month?"
    told = _rank(text, Fusion(span_told=True), memories=memories)
    assert told == _rank(text, memories=memories)
    by_id = {m.id: m for m in (*SCREENPLAYS, *FILLER)}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    answers = [
        [hit.memory.id for hit in rank(by_id, index, RecallQuery(
            text="which screenplay will I finish next year?", limit=3, now_ms=NOW_MS,
            half_life_days=60.0, as_of=253_402_300_799_999, fusion=fusion,
        ))]
        for fusion in (DEFAULT_FUSION, Fusion(in_span=0.0))
    ]  # fmt: skip
    assert answers[0] == answers[1]
