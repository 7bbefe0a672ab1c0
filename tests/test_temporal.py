"""Time read from words: the recency policy of a question, 'when' questions, dated memories."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_worker.core import temporal
from memory_worker.core.temporal import asks_when, recency_policy, states_time


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


# What `states_time` matched before its alternatives were grouped by their first letter: the
# plain alternation of the same words, the digit-led ones as first written.
_PLAIN_TIME = re.compile(
    r"\b(?:\d{4}-\d{2}-\d{2}|(?:19|20)\d{2}|\d{1,2}:\d{2}|\d{1,2} ?(?:am|pm)|\d+ may|"
    rf"{temporal._MONTHS_EN}|{temporal._MONTHS_PT}|{temporal._WEEKDAYS}|{temporal._RELATIVE})\b"
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
