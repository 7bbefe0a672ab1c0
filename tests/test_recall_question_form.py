"""A question finds the statement that answers it, not the stored questions its embedding leans
toward by form alone: in a bank holding both (a transcript), the hybrid's semantic arm takes the
direction from the statements' mean vector to the questions' out of the query
(`Fusion.question_form`, `ranking._question_form`). A bank of stated facts asks nothing and is
ranked exactly as before."""

from __future__ import annotations

import dataclasses

import numpy as np

from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import (
    QUESTION_FORM_MIN,
    RecallMode,
    RecallQuery,
    _question_form,
    indexed,
    rank,
)
from memory_worker.search.scoring import Fusion

DIM = 48
COMMON, ASKING, ANSWER = 0, 1, 2  # shared by all; what every question shares; the fact asked
TOPICS = range(3, DIM)


def _e(i: int) -> np.ndarray:
    e = np.zeros(DIM)
    e[i] = 1.0
    return e


def _unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _add(
    memories: dict[str, Memory], index: LexicalIndex, mid: str, text: str, vector: np.ndarray
) -> None:
    memories[mid] = Memory(
        id=mid, text=text, confidence=Confidence.STATED, created_at=1, updated_at=1
    )
    index.add_doc(indexed(memories[mid]))
    index.set_vector(mid, _unit(vector))


def _conversation(questions: int = 12) -> tuple[dict[str, Memory], LexicalIndex]:
    """Statements on topics of their own, questions on others (each with the question form),
    and the statement that answers the query."""
    memories: dict[str, Memory] = {}
    index = LexicalIndex()
    for i in range(12):
        _add(memories, index, f"said{i}", "we said something", _e(COMMON) + _e(TOPICS[i]))
    for i in range(questions):
        vector = _e(COMMON) + _e(ASKING) + 0.8 * _e(TOPICS[12 + i])
        _add(memories, index, f"asked{i}", "what did you do?", vector)
    _add(memories, index, "answer", "we said something", _e(COMMON) + _e(ANSWER))
    return memories, index


# "what did she answer?": mostly its form, a little of the fact it is after.
QUESTION = _unit(_e(COMMON) + _e(ASKING) + 0.5 * _e(ANSWER))


def _ask(memories: dict[str, Memory], index: LexicalIndex, **fusion: float) -> list[str]:
    query = RecallQuery(
        text="zzz", limit=5, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(QUESTION), fusion=dataclasses.replace(Fusion(), **fusion),
    )  # fmt: skip
    return [hit.memory.id for hit in rank(memories, index, query)]


def test_a_question_finds_the_statement_that_answers_it_not_questions_alike_in_form() -> None:
    memories, index = _conversation()
    # With the form left in (the arm before), a stored question came first: it shares the
    # query's form and nothing it asks.
    assert _ask(memories, index, question_form=0.0)[0].startswith("asked")
    assert _ask(memories, index)[0] == "answer"


def test_a_bank_that_asks_nothing_is_ranked_exactly_as_before() -> None:
    memories: dict[str, Memory] = {}
    index = LexicalIndex()
    for i in range(20):
        _add(memories, index, f"fact{i}", "the user has a fact", _e(COMMON) + _e(TOPICS[i]))
    _add(memories, index, "answer", "the user has a fact", _e(COMMON) + _e(ANSWER))
    assert _question_form(memories, index) is None
    query = RecallQuery(
        text="fact", limit=5, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(QUESTION),
    )  # fmt: skip
    off = dataclasses.replace(query, fusion=dataclasses.replace(Fusion(), question_form=0.0))
    assert [(h.memory.id, h.score) for h in rank(memories, index, query)] == [
        (h.memory.id, h.score) for h in rank(memories, index, off)
    ]


def test_the_direction_needs_enough_questions_and_follows_the_bank() -> None:
    memories, index = _conversation(questions=QUESTION_FORM_MIN - 1)
    assert _question_form(memories, index) is None  # too few questions to tell a form
    vector = _e(COMMON) + _e(ASKING) + 0.8 * _e(TOPICS[-1])
    _add(memories, index, "one_more", "and you?", vector)
    direction = _question_form(memories, index)
    assert direction is not None  # a changed bank is read again, not served from the cache
    assert float(direction @ _e(ASKING)) > 0.9
