"""A question that names someone ranks what was said about them, not the bare remarks of theirs
that share little but their name: the hybrid's semantic arm is centred on the named entity's
memories (`Fusion.entity_center`, `ranking._centre`), since the entity boost already counts the
name. An entity on every memory, the bank's owner, leaves the arm as it was."""

from __future__ import annotations

import dataclasses

import numpy as np

from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallMode, RecallQuery, indexed, rank
from memory_worker.search.scoring import Fusion

DIM = 40
COMMON, ANA, BRUNO, TRAVEL = 0, 1, 2, 3  # shared by every memory; each person's; the topic asked
REMARK, ASKING = 38, 39  # what a bare "thanks!" says besides the name; what a question does
TOPICS = range(4, 38)  # everything else said


def _unit(v: np.ndarray) -> list[float]:
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _e(i: int) -> np.ndarray:
    e = np.zeros(DIM)
    e[i] = 1.0
    return e


def _bank(vectors: dict[str, tuple[str, np.ndarray]]) -> tuple[dict[str, Memory], LexicalIndex]:
    """Memories by id from (entity, vector); every text the same, so only the arms' vectors and
    the entity tell them apart."""
    memories: dict[str, Memory] = {}
    index = LexicalIndex()
    for mid, (entity, vector) in vectors.items():
        memory = Memory(
            id=mid, text=f"{entity} said something", entities=(entity,),
            confidence=Confidence.STATED, created_at=1, updated_at=1,
        )  # fmt: skip
        memories[mid] = memory
        index.add_doc(indexed(memory))
        index.set_vector(mid, _unit(vector))
    return memories, index


def _two_people() -> tuple[dict[str, Memory], LexicalIndex]:
    """30 memories of Ana's and 30 of Bruno's, each on a topic of its own; Ana's trip to Porto;
    and a bare remark of Ana's ("Ana: Thanks!"): her name and something generic."""
    vectors = {}
    for i in range(30):
        vectors[f"ana{i}"] = ("ana", _e(COMMON) + _e(ANA) + _e(TOPICS[i % 12]))
        vectors[f"bruno{i}"] = ("bruno", _e(COMMON) + _e(BRUNO) + _e(TOPICS[12 + i % 12]))
    vectors["ana_trip"] = ("ana", _e(COMMON) + _e(ANA) + _e(TRAVEL))
    vectors["ana_thanks"] = ("ana", _e(COMMON) + _e(ANA) + 0.6 * _e(REMARK))
    return _bank(vectors)


# "Which cities has Ana been to?": Ana, a question, and only a little of the travel it is about.
QUESTION = _unit(_e(COMMON) + _e(ANA) + 0.2 * _e(TRAVEL) + 0.5 * _e(ASKING))


def _ask(
    memories: dict[str, Memory],
    index: LexicalIndex,
    text: str,
    vector: list[float],
    **fusion: float,
) -> list[str]:
    query = RecallQuery(
        text=text, limit=5, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(vector), fusion=dataclasses.replace(Fusion(), **fusion),
    )  # fmt: skip
    return [hit.memory.id for hit in rank(memories, index, query)]


def test_a_question_about_someone_ranks_what_they_said_on_it_above_a_bare_remark() -> None:
    memories, index = _two_people()
    # Centred on the bank's mean (the arm before), Ana's bare remark came first: what it shares
    # with the question is Ana, whom every memory of hers names.
    assert _ask(memories, index, "ana", QUESTION, entity_center=0.0)[0] == "ana_thanks"
    assert _ask(memories, index, "ana", QUESTION)[0] == "ana_trip"


def test_a_question_naming_no_entity_is_ranked_as_before() -> None:
    memories, index = _two_people()
    assert _ask(memories, index, "somewhere", QUESTION) == _ask(
        memories, index, "somewhere", QUESTION, entity_center=0.0
    )


def test_an_entity_on_every_memory_leaves_the_semantic_arm_as_the_banks_centre_has_it() -> None:
    # The bank's owner: every memory carries `user`, so naming them sets nothing apart.
    vectors = {f"m{i}": ("user", _e(COMMON) + _e(ANA) + _e(TOPICS[i])) for i in range(12)}
    vectors["bare"] = ("user", _e(COMMON) + _e(ANA) + 0.6 * _e(REMARK))
    memories, index = _bank(vectors)
    query = RecallQuery(
        text="user", limit=5, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(QUESTION),
    )  # fmt: skip
    off = dataclasses.replace(query, fusion=dataclasses.replace(Fusion(), entity_center=0.0))
    assert [(h.memory.id, h.score) for h in rank(memories, index, query)] == [
        (h.memory.id, h.score) for h in rank(memories, index, off)
    ]


def test_a_name_on_one_memory_does_not_become_its_own_centre() -> None:
    """One memory about Marta among the owner's: centred on it alone, it would be compared with
    itself taken out; the prior keeps the centre near the bank's, and a question about her
    finds it first."""
    vectors = {f"m{i}": ("user", _e(COMMON) + _e(BRUNO) + _e(TOPICS[i])) for i in range(15)}
    vectors["marta"] = ("marta", _e(COMMON) + _e(ANA) + _e(TRAVEL))
    memories, index = _bank(vectors)
    question = _unit(_e(COMMON) + 0.5 * _e(ANA) + 0.5 * _e(TRAVEL) + 0.5 * _e(ASKING))
    assert _ask(memories, index, "marta", question)[0] == "marta"
