"""Time read from words: the recency policy of a question, 'when' questions, dated memories."""

from __future__ import annotations

import pytest

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
