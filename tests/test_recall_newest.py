"""A question about the present ("…now?", "…these days?", "…atualmente?") puts the newest
statement of a fact first (`Fusion.same_fact`, `ranking._newest_statements_first`): an older hit
stating the same fact of the same subject is scored just under a newer strong one, however
better its words match. A near fact of another attribute, another person's fact, and a question
without a present cue rank as without the rule.

The first tests rank a held-out household with the default local model, written for this rule
and never tuned on (the golden persona's `tu-14` is where it was found). Of its nine updated
facts, the older statement outranked the newer in three without the rule; the rule puts the
newer first in one (the coffee shop, below) and misses two whose vectors do not stand out from
the hits around them (the board game, 0.34 of the way to a restatement; the phone, "iPhone 12"
/ "Pixel 8"). The others use small vectors of their own, so that only the gate under test
differs."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memory_worker.adapters.embedders import load_local
from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import DEFAULT_FUSION, Fusion

OFF = dataclasses.replace(DEFAULT_FUSION, same_fact=0.0)
DAY_MS = 86_400_000


def _ms(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp() * 1000)


NOW_MS = _ms("2026-06-01")


def _memory(mid: str, day: str, text: str, entities: tuple[str, ...] = ("user",)) -> Memory:
    at = _ms(day)
    return Memory(
        id=mid, text=text, entities=entities, confidence=Confidence.STATED,
        created_at=at, updated_at=at,
    )  # fmt: skip


HOUSEHOLD = (
    _memory("game_old", "2024-03-10", "The user's favourite board game is Catan."),
    _memory("game_new", "2026-02-14", "Right now the user's favourite game is Wingspan."),
    _memory("car_old", "2024-05-02", "The user drives a red Fiat Panda to work."),
    _memory("car_new", "2026-01-20", "The user now drives an electric Renault Zoe."),
    _memory("sport_old", "2024-06-01", "O usuário treina jiu-jitsu três vezes por semana."),
    _memory("sport_new", "2026-03-03", "Atualmente o usuário treina natação às terças e quintas."),
    _memory("phone_old", "2024-09-09", "The user's phone is an iPhone 12."),
    _memory("phone_new", "2026-04-04", "The user switched to a Pixel 8 phone."),
    _memory("colour_old", "2024-02-02", "A cor favorita do usuário é azul."),
    _memory("colour_new", "2026-05-05", "Hoje em dia a cor favorita do usuário é verde."),
    _memory("restaurant", "2024-04-04", "The user's favourite restaurant is Cervejaria Ramiro."),
    _memory("podcast", "2026-04-20", "Right now the user's favourite podcast is Hard Fork."),
    _memory("tv_user", "2024-07-07", "The user's favourite TV series is The Wire."),
    _memory("tv_marta", "2026-03-30", "Marta's favourite TV series is Fleabag.", ("marta",)),
    _memory(
        "cafe_old", "2024-08-08", "The user's favourite coffee shop is Fábrica Coffee Roasters."
    ),
    _memory(
        "cafe_new", "2026-02-02", "These days the user's favourite café is Copenhagen Coffee Lab."
    ),
    _memory("shoes_old", "2024-10-10", "The user's go-to running shoes are Nike Pegasus."),
    _memory("shoes_new", "2026-03-15", "The user now runs in Hoka Clifton shoes."),
    _memory("lang_old", "2024-01-05", "A linguagem de programação favorita do usuário é Python."),
    _memory("lang_new", "2026-04-12", "Atualmente a linguagem preferida do usuário é Rust."),
    _memory("gym_old", "2024-11-11", "The user's gym is Fitness Hut in Saldanha."),
    _memory("gym_new", "2026-01-30", "The user now trains at a CrossFit box in Alvalade."),
    # The rest of a life, so that the bank's typical pair is a typical pair.
    _memory("job", "2024-01-10", "The user works as a data engineer at a bank in Porto."),
    _memory(
        "sister", "2024-02-11", "The user's sister Inês is a nurse in Braga.", ("user", "inês")
    ),
    _memory("lactose", "2024-03-12", "The user is lactose intolerant."),
    _memory("home", "2024-04-13", "O usuário mora em Matosinhos com a companheira Marta."),
    _memory("server", "2024-05-14", "The user runs a Jellyfin media server on an old ThinkPad."),
    _memory("tea", "2024-06-15", "The user prefers tea over coffee, usually green tea."),
    _memory("cat", "2024-07-16", "The user's cat is called Tofu.", ("user", "tofu")),
    _memory("japanese", "2024-08-17", "O usuário estuda japonês aos sábados de manhã."),
    _memory("birthday", "2024-09-18", "The user's birthday is on 9 October."),
    _memory("stack", "2024-10-19", "The user writes Go and TypeScript at work."),
    _memory("style", "2024-11-20", "The user wants answers in English, short and direct."),
    _memory("dentist", "2025-01-21", "The user has a dentist check-up every six months."),
    _memory("marta_job", "2025-02-22", "Marta works as a landscape architect.", ("marta",)),
    _memory("iceland", "2025-03-23", "O usuário viajou para a Islândia em março de 2025."),
    _memory("laptop", "2025-04-24", "The user's laptop is a Framework 13 running Fedora."),
    _memory("bass", "2025-05-25", "The user plays bass in a cover band on Fridays."),
    _memory("flat", "2025-06-26", "The user is saving money to buy a flat."),
    _memory("manager", "2025-07-27", "The user's manager is Rui Costa.", ("user", "rui")),
    _memory("vegetarian", "2025-08-28", "O usuário é vegetariano há cinco anos."),
    _memory("food_bank", "2025-09-29", "The user volunteers at a food bank once a month."),
)


@dataclasses.dataclass(frozen=True)
class _Bank:
    memories: dict[str, Memory]
    index: LexicalIndex
    embedder: Any


@pytest.fixture(name="household", scope="module")
def _household() -> _Bank:
    # The default local model (what a fresh install serves, a core dependency): never skipped.
    embedder = load_local()
    memories = {memory.id: memory for memory in HOUSEHOLD}
    index = LexicalIndex()
    index.add_many(indexed(memory) for memory in memories.values())
    vectors = asyncio.run(embedder.embed([memory.text for memory in memories.values()]))
    for memory, vector in zip(memories.values(), vectors, strict=True):
        index.set_vector(memory.id, vector)
    return _Bank(memories, index, embedder)


def _ranked(bank: _Bank, question: str, fusion: Fusion = DEFAULT_FUSION) -> list[str]:
    vector = tuple(asyncio.run(bank.embedder.embed_query(question)))
    query = RecallQuery(
        text=question, limit=5, now_ms=NOW_MS, half_life_days=60.0, vector=vector,
        fusion=fusion, duplicate_cosine=bank.embedder.duplicate_cosine,
    )  # fmt: skip
    return [hit.memory.id for hit in rank(bank.memories, bank.index, query)]


def test_the_newest_statement_of_a_fact_wins_a_question_about_now(household: _Bank) -> None:
    question = "what's my favourite coffee shop now?"
    # Without the rule the old statement's words ("coffee shop") win: the trap.
    assert _ranked(household, question, OFF)[:2] == ["cafe_old", "cafe_new"]
    assert _ranked(household, question)[:2] == ["cafe_new", "cafe_old"]  # under it, not gone


@pytest.mark.parametrize(
    "question",
    [
        # The podcast is newer, a strong hit and "favourite" too: another attribute all the same.
        "what's my favourite restaurant these days?",
        "qual é a minha cor favorita atualmente?",  # the newest first already
        "what's my favourite coffee shop?",  # no present cue: age counts as ever
    ],
)
def test_other_questions_rank_as_without_the_rule(household: _Bank, question: str) -> None:
    assert _ranked(household, question) == _ranked(household, question, OFF)


# --- each gate alone, on vectors of our own ---------------------------------------------------

DIM = 32
COMMON, ASKED = 0, 1  # what every memory shares; the attribute the question asks about
VALUES = (2, 3)  # the two values it was stated with
TOPICS = range(4, DIM)
QUESTION = "what's my favourite board game these days?"


def _e(*dims: int, weights: Iterable[float] | None = None) -> list[float]:
    v = np.zeros(DIM)
    for dim, weight in zip(dims, weights or [1.0] * len(dims), strict=True):
        v[dim] = weight
    return (v / np.linalg.norm(v)).tolist()


def _synthetic(newer: Memory) -> tuple[dict[str, Memory], LexicalIndex]:
    """The old statement, `newer` (the same attribute, another value: a near vector, below a
    restatement's), and unrelated memories, one topic each."""
    old = _memory("old", "2024-03-10", "The user's favourite board game is Catan.")
    filler = [
        _memory(f"f{i}", "2025-01-01", f"The user noted item {i}: bus times and the weather.")
        for i in range(len(TOPICS))
    ]
    vectors = {
        "old": _e(COMMON, ASKED, VALUES[0], weights=(1.0, 1.0, 0.5)),
        newer.id: _e(COMMON, ASKED, VALUES[1], weights=(1.0, 1.0, 0.5)),
    }
    vectors.update({f"f{i}": _e(COMMON, topic) for i, topic in enumerate(TOPICS)})
    memories = {memory.id: memory for memory in (old, newer, *filler)}
    index = LexicalIndex()
    index.add_many(indexed(memory) for memory in memories.values())
    for mid, vector in vectors.items():
        index.set_vector(mid, vector)
    return memories, index


def _synthetic_ranked(
    newer: Memory, fusion: Fusion = DEFAULT_FUSION, text: str = QUESTION
) -> list[str]:
    memories, index = _synthetic(newer)
    query = RecallQuery(
        text=text, limit=3, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion,
        vector=tuple(_e(COMMON, ASKED)), duplicate_cosine=0.97,
    )  # fmt: skip
    return [hit.memory.id for hit in rank(memories, index, query)][:2]


NEWER = _memory("new", "2026-02-14", "Right now the user's favourite game is Wingspan.")


def test_the_older_statement_goes_just_under_the_newer() -> None:
    assert _synthetic_ranked(NEWER, OFF) == ["old", "new"]
    assert _synthetic_ranked(NEWER) == ["new", "old"]


def test_another_persons_fact_is_not_the_users() -> None:
    marta = _memory(
        "new", "2026-02-14", "Marta's favourite game right now is Wingspan.", ("marta",)
    )
    assert _synthetic_ranked(marta, OFF) == ["old", "new"]
    assert _synthetic_ranked(marta) == ["old", "new"]


def test_a_weak_newer_hit_does_not_take_the_answers_place() -> None:
    strict = dataclasses.replace(DEFAULT_FUSION, same_fact_strong=0.99)
    assert _synthetic_ranked(NEWER, strict) == ["old", "new"]


def test_only_a_question_about_the_present_reorders() -> None:
    text = "what's my favourite board game?"
    assert _synthetic_ranked(NEWER, text=text) == _synthetic_ranked(NEWER, OFF, text=text)


def test_the_typical_cosine_is_the_mean_over_pairs_of_live_embeddings() -> None:
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(6, DIM))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = LexicalIndex()
    assert index.typical_cosine() is None  # no embedding yet
    for i, row in enumerate(rows):
        memory = _memory(f"m{i}", "2025-01-01", f"memory {i}")
        index.add_doc(indexed(memory))
        index.set_vector(memory.id, row.tolist())
    stored = index.vectors[:6].astype(np.float64)
    cosines = stored @ stored.T
    expected = (cosines.sum() - np.trace(cosines)) / (6 * 5)
    # float32 rows are unit to ~1e-7 each: the sum counts each as exactly 1
    assert index.typical_cosine() == pytest.approx(expected, abs=1e-5)


def test_a_chain_of_three_statements_puts_the_newest_first() -> None:
    # Three statements A < B < C, each near the next; A and C too far apart in score to pair
    # (C under `same_fact_strong` of A): B goes under C, and A must follow B there, not stay
    # over both at B's old score (the oldest first, the one statement the rule moved last).
    fusion = dataclasses.replace(DEFAULT_FUSION, same_fact_strong=0.9)
    chain = (
        (_memory("a", "2025-09-01", "The user's favourite board game is Catan."), (2,), 0.7),
        (_memory("b", "2025-12-01", "The user's favourite board game is Azul."), (2, 3), 0.6),
        (_memory("c", "2026-03-01", "Right now the user's favourite game is Wingspan."), (3,), 0.7),
    )
    filler = [
        _memory(f"f{i}", "2025-01-01", f"The user noted item {i}: bus times and the weather.")
        for i in range(len(TOPICS))
    ]
    memories = {memory.id: memory for memory in (*(m for m, _, _ in chain), *filler)}
    index = LexicalIndex()
    index.add_many(indexed(memory) for memory in memories.values())
    for memory, dims, weight in chain:
        weights = (1.0, 1.0, *([weight] * len(dims)))
        index.set_vector(memory.id, _e(COMMON, ASKED, *dims, weights=weights))
    for i, topic in enumerate(TOPICS):
        index.set_vector(f"f{i}", _e(COMMON, topic))

    def ranked(fusion: Fusion) -> list[str]:
        query = RecallQuery(
            text=QUESTION, limit=3, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion,
            vector=tuple(_e(COMMON, ASKED)), duplicate_cosine=0.97,
        )  # fmt: skip
        return [hit.memory.id for hit in rank(memories, index, query)]

    assert ranked(OFF) == ["a", "b", "c"]
    assert ranked(fusion) == ["c", "b", "a"]


def _mean_pair_cosine(rows: np.ndarray) -> float:
    units = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    cosines = units @ units.T
    n = len(rows)
    return float((cosines.sum() - np.trace(cosines)) / (n * (n - 1)))


def test_the_typical_cosine_of_vectors_that_are_not_unit() -> None:
    # An embedder behind `router::embed` need not normalise (the index keeps |v|² for the
    # semantic arm's sake): the typical pair is still the mean cosine, not a mean dot product.
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(8, DIM)) + 2.0  # a shared direction: a typical pair well above 0
    rows *= rng.uniform(0.3, 3.0, size=(8, 1))
    index = LexicalIndex()
    for i, row in enumerate(rows):
        memory = _memory(f"m{i}", "2025-01-01", f"memory {i}")
        index.add_doc(indexed(memory))
        index.set_vector(memory.id, row.tolist())
    index.set_vector("m0", (rows[0] * 5.0).tolist())  # re-embedded at another length
    index.remove("m7")
    stored = index.vectors[[index.slot(f"m{i}") for i in range(7)]].astype(np.float64)
    assert index.typical_cosine() == pytest.approx(_mean_pair_cosine(stored), abs=1e-9)


def test_the_typical_cosine_of_a_big_bank_matches_a_direct_count() -> None:
    rng = np.random.default_rng(3)
    rows = (rng.normal(size=(3000, DIM)) + 1.0).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = LexicalIndex()
    index.add_many(indexed(_memory(f"m{i}", "2025-01-01", f"memory {i}")) for i in range(3000))
    for i, row in enumerate(rows):
        index.set_vector(f"m{i}", row.tolist())
    stored = index.vectors[:3000].astype(np.float64)
    assert index.typical_cosine() == pytest.approx(_mean_pair_cosine(stored), abs=1e-9)
