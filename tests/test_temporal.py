"""Time read from words: the recency policy of a question, 'when' questions, dated memories."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_worker.core import temporal
from memory_worker.core.temporal import (
    asks_when,
    named_span,
    recency_policy,
    states_time,
    told_span,
)


@pytest.mark.parametrize(
    ("question", "policy"),
    [
        ("where do I live now?", "current"),
        ("what book am I reading at the moment?", "current"),
        ("qual é a minha série favorita agora?", "current"),
        ("onde eu trabalho atualmente?", "current"),
        ("que livro eu estou lendo?", "current"),
        ("what am I reading?", "current"),
        ("when did I move to Lisbon?", "past"),
        ("what did I do last month?", "past"),
        ("where did I live before I moved?", "past"),
        ("o que eu fiz no ano passado?", "past"),
        ("quando eu me mudei para Lisboa?", "past"),
        ("quando me casei?", "past"),
        ("what's my dog called?", "default"),
        ("qual é o meu nome?", "default"),
    ],
)
def test_the_question_shape_picks_the_recency_policy(question: str, policy: str) -> None:
    assert recency_policy(question) == policy


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("what day is my meetup talk?", True),
        ("quando é o aniversário da minha mãe?", True),
        ("how long ago was her birthday?", True),
        ("what's my github handle", False),
        ("qual é o meu tipo sanguíneo?", False),
    ],
)
def test_when_questions_are_told_apart(question: str, expected: bool) -> None:
    assert asks_when(question) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The user's flight is on 2026-12-18, leaving at 10:40.", True),
        ("I went to a support group yesterday.", True),
        ("Marta's birthday is on March 3.", True),
        ("O casamento será no dia 13 de fevereiro de 2027.", True),
        ("We ran a charity race last Saturday", True),
        ("The user flies to Rome in two weeks.", True),
        ("The user's lease ends in 3 months.", True),
        ("O usuário viaja daqui a duas semanas.", True),
        ("A usuária muda de emprego em um mês.", True),
        ("The user lives in a two-bedroom flat.", False),
        ("The user may like tea", False),  # "may" alone is not a month
        ("The user is allergic to penicillin.", False),
    ],
)
def test_memories_that_state_a_time_are_told_apart(text: str, expected: bool) -> None:
    assert states_time(text) is expected


# The relative phrases as one plain alternative per word: "in two weeks", "seven years now"
# (`temporal._RELATIVE` writes each tail once a first letter, `_each_then`).
_PLAIN_RELATIVE = "|".join(
    [
        temporal._RELATIVE_WORDS,
        *(f"{word} (?:{temporal._COUNT}) (?:{temporal._SPANS})" for word in temporal._FROM_NOW),
        *(
            f"{count} (?:{temporal._SPANS}) {temporal._SO_FAR}"
            for count in temporal._COUNT.split("|")
            if count != r"\d+"
        ),
    ]
)
# What `states_time` matched before its alternatives were grouped by their first letter: the
# plain alternation of the same words, the digit-led ones as first written.
_PLAIN_TIME = re.compile(
    r"\b(?:\d{4}-\d{2}-\d{2}|(?:19|20)\d{2}|\d{1,2}:\d{2}|\d{1,2} ?(?:am|pm)|\d+ may|"
    rf"{temporal._MONTHS_EN}|{temporal._MONTHS_PT}|{temporal._WEEKDAYS}|{_PLAIN_RELATIVE})\b"
)
# The words and pieces the alternatives are made of, and what a text puts between them.
_PIECES = sorted(
    {piece for piece in re.split(r"[|()?:\\\[\]]+", _PLAIN_TIME.pattern) if piece.strip()}
    | {"3", "12", "1999", "2026", "2026-12-18", "10:40", "é", "x", "_", "ano", "mês"}
)
_BETWEEN = st.sampled_from(["", " ", "  ", ".", "-", ":", "_", "9", "\n", "'"])


@pytest.mark.parametrize(
    "text",
    [
        "3 may",
        "on may 5",
        "at 7pm",
        "10 am",
        "19:30",
        "x2024",
        "in 1999",
        "in a couple of days",
        "dentro de poucos meses",
        "semana passada",
        "janeiros",
        "the other dayx",
        "Há 3 dias",
        "٣ may",  # an Arabic-Indic digit is a digit to `\d`
    ],
)
def test_grouping_the_time_words_by_letter_matches_what_the_plain_alternation_did(
    text: str,
) -> None:
    assert states_time(text) is (_PLAIN_TIME.search(text.lower()) is not None)


@given(st.lists(st.tuples(st.sampled_from(_PIECES), _BETWEEN), max_size=8))
def test_any_text_of_the_time_words_is_dated_as_by_the_plain_alternation(
    parts: list[tuple[str, str]],
) -> None:
    text = "".join(piece + between for piece, between in parts)
    assert states_time(text) is (_PLAIN_TIME.search(text.lower()) is not None)


@given(st.lists(st.tuples(st.sampled_from(_PIECES), _BETWEEN), max_size=8))
def test_a_text_without_a_digit_names_no_date_but_a_month_alone(
    parts: list[tuple[str, str]],
) -> None:
    """`told_span` skips the date forms of a text without a digit (`_calendar_span`): each of
    them before the month alone must need one, or a memory's told span would change."""
    text = "".join(piece + between for piece, between in parts).lower()
    digitless = re.sub(r"\d", "", text)
    assert temporal._absolute(digitless, temporal._MONTH_ALONE) == ()


# Thursday 20 December 2023, 15:00 UTC: the "now" the spans below are counted from.
_NOW = int(datetime(2023, 12, 20, 15, tzinfo=UTC).timestamp() * 1000)


def _day(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("question", "span"),
    [
        ("What did Joanna accomplish in January 2022?", ("2022-01-01", "2022-02-01")),
        ("What movie did Joanna watch on 1 May, 2022?", ("2022-05-01", "2022-05-02")),
        ("What did Gina get accepted for on May 23, 2023?", ("2023-05-23", "2023-05-24")),
        ("what did I book on 2022-05-01?", ("2022-05-01", "2022-05-02")),
        ("Where was John between August 11 and August 15 2023?", ("2023-08-11", "2023-08-16")),
        ("how often did I swim in 2023?", ("2023-01-01", "2024-01-01")),
        ("o que aconteceu em 3 de março de 2022?", ("2022-03-03", "2022-03-04")),
        ("o que fiz em março?", ("2023-03-01", "2023-04-01")),
        # A month without a year is the latest one not after now: last year's, when still ahead.
        ("where did I travel in June?", ("2023-06-01", "2023-07-01")),
        ("what did I buy on 25 December?", ("2022-12-25", "2022-12-26")),
        # Counted back from now's date.
        ("what did I do last month?", ("2023-11-01", "2023-12-01")),
        ("o que eu fiz no mês passado?", ("2023-11-01", "2023-12-01")),
        ("what did I eat yesterday?", ("2023-12-19", "2023-12-20")),
        ("what did I read last week?", ("2023-12-11", "2023-12-18")),
        ("who did I meet two weeks ago?", ("2023-12-06", "2023-12-13")),
        ("what did I fix last year?", ("2022-01-01", "2023-01-01")),
        ("what am I doing tomorrow?", ("2023-12-21", "2023-12-22")),
        ("who do I see next week?", ("2023-12-25", "2024-01-01")),
        ("o que vou fazer no próximo mês?", ("2024-01-01", "2024-02-01")),
        # Ahead-looking without a year: the coming one; no tense at all: the nearer one.
        ("what is due in January?", ("2024-01-01", "2024-02-01")),
        ("what about March?", ("2024-03-01", "2024-04-01")),
        ("what about September?", ("2023-09-01", "2023-10-01")),
    ],
)
def test_a_question_names_the_stretch_of_time_it_asks_about(
    question: str, span: tuple[str, str]
) -> None:
    assert named_span(question, _NOW) == (_day(span[0]), _day(span[1]))


@pytest.mark.parametrize(
    "question",
    [
        "when is my flight?",
        "May I ask what my dog is called?",
        "what did I do at 10:30?",
        "when did I move to Lisbon?",
        "quanto custou o mar de gente?",
        "what were 3 out of the 5 things I liked?",
        "when did Marco call me?",
    ],
)
def test_a_question_that_names_no_time_has_no_span(question: str) -> None:
    assert named_span(question, _NOW) is None


@pytest.mark.parametrize(
    ("text", "stated", "span"),
    [
        # Friday 15 April 2022: "last week" is the calendar week before.
        ("Dyed my hair last week - come see!", "2022-04-15", ("2022-04-04", "2022-04-11")),
        ("My colleagues and I went to a convention last month", "2023-04-18",
         ("2023-03-01", "2023-04-01")),
        ("Alright, see you tomorrow!", "2022-11-09", ("2022-11-10", "2022-11-11")),
        ("Fomos à praia ontem", "2023-07-02", ("2023-07-01", "2023-07-02")),
        # An absolute date without a year: the nearer one to when it was said.
        ("My flight to São Paulo is on 18 December", "2026-11-20", ("2026-12-18", "2026-12-19")),
        ("We met on 3 May 2019", "2023-01-01", ("2019-05-03", "2019-05-04")),
    ],
)  # fmt: skip
def test_a_memory_points_to_the_time_its_own_words_name_from_when_it_was_said(
    text: str, stated: str, span: tuple[str, str]
) -> None:
    assert told_span(text, _day(stated)) == (_day(span[0]), _day(span[1]))


@pytest.mark.parametrize(
    "text",
    [
        "June said the cake was lovely",  # a month alone, in a memory's text, is as often a name
        "Seven years now, and I love it",
        "The garden is lovely",
    ],
)
def test_a_memory_without_a_time_of_its_own_points_nowhere(text: str) -> None:
    assert told_span(text, _NOW) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Seven years now, and I've found my real muses", True),
        ("I've had them for 3 years now", True),
        ("faço isso há 2 anos", True),
        ("moro aqui 2 meses já", True),
        ("so now what?", False),
        ("I have been there for ages", False),
    ],
)
def test_a_duration_so_far_states_a_time(text: str, expected: bool) -> None:
    """The answer to "how long…" ("for 3 years now") is dated, as "when…"'s is."""
    assert states_time(text) is expected


# The last moment the wire takes for a time (`as_of`, a memory's own dates): 31 December 9999.
_LAST_MS = 253_402_300_799_999


@pytest.mark.parametrize(
    ("text", "now"),
    [
        ("what lived on this island 3000 years ago?", _NOW),
        ("o que havia aqui há 5000 anos?", _NOW),
        ("what did I do 99999999999 days ago?", _NOW),
        ("what will I do next year?", _LAST_MS),
        ("what is on tomorrow?", _LAST_MS),
        ("what is due in January?", _LAST_MS),
    ],
)
def test_a_time_outside_the_calendar_names_no_span(text: str, now: int) -> None:
    """Counted before year 1 or after 9999, a time has no date: no span, where it raised
    OverflowError / ValueError through every recall asking it (and, with the told span, every
    memory saying it)."""
    assert named_span(text, now) is None
    assert told_span(text, now) is None


@pytest.mark.parametrize(
    "question",
    [
        "what happened in the last year of the project?",  # an ordinal, not last year
        "what did we cut in the last week of the trip?",
        "what did I eat the last month of school?",
    ],
)
def test_the_last_stretch_of_something_names_no_calendar_span(question: str) -> None:
    assert named_span(question, _NOW) is None


@pytest.mark.parametrize(
    ("question", "span"),
    [
        # Now is Wednesday 20 December 2023: the stretch up to and including today, where "the
        # past month" was November alone (nothing of December's twenty days) and "the past
        # year" all of 2022 (nothing of 2023).
        ("what did I read in the past week?", ("2023-12-13", "2023-12-21")),
        ("what have I cooked over the past month?", ("2023-11-20", "2023-12-21")),
        ("where did I travel in the past year?", ("2022-12-20", "2023-12-21")),
        ("what did I do in the last month?", ("2023-11-20", "2023-12-21")),
        # "last month" alone stays the calendar one before now's.
        ("what did I do last month?", ("2023-11-01", "2023-12-01")),
    ],
)
def test_the_past_stretch_is_counted_back_from_today(question: str, span: tuple[str, str]) -> None:
    assert named_span(question, _NOW) == (_day(span[0]), _day(span[1]))


@pytest.mark.parametrize(
    ("question", "span"),
    [
        # Asked in December 2023: January of the year before, not this January.
        ("what did I do in January last year?", ("2022-01-01", "2022-02-01")),
        ("o que eu fiz em janeiro do ano passado?", ("2022-01-01", "2022-02-01")),
        ("what did I give for Christmas last year?", None),  # no month: last year itself
        ("what did I buy in December last year?", ("2022-12-01", "2023-01-01")),
        ("what is planned for December next year?", ("2024-12-01", "2025-01-01")),
        ("o que vou fazer em dezembro do ano que vem?", ("2024-12-01", "2025-01-01")),
    ],
)
def test_a_month_of_last_or_next_year_takes_that_year(
    question: str, span: tuple[str, str] | None
) -> None:
    if span is None:
        span = ("2022-01-01", "2023-01-01")
    assert named_span(question, _NOW) == (_day(span[0]), _day(span[1]))


@pytest.mark.parametrize(
    "question",
    [
        "can you summarize my notes in 2000 words?",
        "why did I lose a total of 2019 points?",
        "what did I buy for the price of 1999 euros?",
        "o que eu comprei de 2000 reais?",
    ],
)
def test_a_count_that_looks_like_a_year_names_no_span(question: str) -> None:
    assert named_span(question, _NOW) is None


@pytest.mark.parametrize(
    "question",
    [
        "what did we decide about the march to the sea?",
        "how long was the march?",
        "where did they march with the banners?",
        "should we march on Friday or stay home?",
    ],
)
def test_march_the_walk_names_no_month(question: str) -> None:
    assert named_span(question, _NOW) is None


@pytest.mark.parametrize(
    ("question", "span"),
    [
        ("what was said at the March meeting?", ("2023-03-01", "2023-04-01")),
        ("what did I read from January to March?", ("2023-01-01", "2023-04-01")),
        ("what did I do in March?", ("2023-03-01", "2023-04-01")),
    ],
)
def test_march_the_month_still_names_one(question: str, span: tuple[str, str]) -> None:
    assert named_span(question, _NOW) == (_day(span[0]), _day(span[1]))


@pytest.mark.parametrize(
    "question",
    [
        "what happened in March?",
        "who visited me in June?",
        "what did we celebrate in June?",
        "where I moved to in June",
        "o que aconteceu em junho?",
        "quem me visitou em junho?",
    ],
)
def test_a_past_verb_leans_a_month_without_a_year_back(question: str) -> None:
    """Asked on 20 December 2023, "what happened in March?" is about the March gone, not the
    nearer one to come (which a question without a tense takes)."""
    month = 3 if "march" in question.lower() else 6
    start = datetime(2023, month, 1, tzinfo=UTC)
    end = datetime(2023, month + 1, 1, tzinfo=UTC)
    assert named_span(question, _NOW) == (
        int(start.timestamp() * 1000),
        int(end.timestamp() * 1000),
    )
