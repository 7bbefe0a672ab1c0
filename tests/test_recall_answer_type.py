"""A list question ("What European countries has Maria been to?") is answered by memories that
name instances of the kind it asks for ("a trip to Spain", "that castle in England"), which
rarely share its words or sit near the whole question's embedding. The kind is embedded alone
(`core.text.answer_type`, `RecallQuery.type_vector`) and takes `Fusion.answer_type` of the
hybrid's query vector; any other question is ranked exactly as before."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, ClassVar

import numpy as np
import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.core.models import Confidence, Memory
from memory_worker.core.text import answer_type
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallMode, RecallQuery, indexed, rank
from memory_worker.search.scoring import Fusion
from memory_worker.storage.store import Store

from .fakes import FakeEmbedder, FixedClock, RecordingEmitter


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("What European countries has Maria been to?", "European countries"),
        ("What exercises has John done?", "exercises"),
        ("what instruments does Tim play?", "instruments"),
        ("Which US cities does John mention visiting?", "US cities"),
        ("What kinds of games have you tried?", "games"),
        ("What activities does Melanie partake in?", "activities"),
        ("So, what European countries has Maria been to?", "European countries"),
        ("and which books does Tim read?", "books"),
        ("WHAT BOOKS DOES TIM READ?", "books"),  # shouted: the kind as a word, not an acronym
        ("What classes has Ana taken?", "classes"),
        ("Which files are in the repo?", "files"),
        ("What series has Tim watched?", "series"),
        ("What events for veterans has John joined?", "events for veterans"),
        ("Which places or events has Calvin visited?", "places or events"),
        ("What kids’ books does Ana read?", "kids’ books"),
        # Asked as a request: the question is embedded, its subject before its verb.
        ("Can you tell me what countries Maria visited?", "countries"),
        ("Do you remember which restaurants I liked?", "restaurants"),
        ("I forgot which books Melanie has read", "books"),
        ("Tell me what instruments Melanie plays", "instruments"),
        ("Could you please remind me what kinds of games we played?", "games"),
        ("Can you tell me what activities does Melanie partake in?", "activities"),
        ("List the countries Maria visited", "countries"),
        ("Name all the books Melanie read", "books"),
        # Portuguese: the plural words after "quais"/"que", up to the subject or the verb.
        ("Quais países a Maria visitou?", "países"),
        ("Que livros o Tim leu?", "livros"),
        ("Quais são os hobbies do João?", "hobbies"),
        ("Quais os seus hobbies?", "hobbies"),
        ("Que tipos de exercício eu faço?", "exercício"),  # "tipos" counts a singular noun
        ("Que tipo de filmes eu gosto?", "filmes"),
        ("Em quais cidades eu morei?", "cidades"),
        ("Quais países europeus a Maria visitou?", "países europeus"),
        ("Então, que jogos de tabuleiro eu tenho?", "jogos de tabuleiro"),
        ("e quais filmes vocês viram?", "filmes"),
        ("Quais livros Marcos leu?", "livros"),  # a name is capitalised, an adjective not
        ("Que livros lemos?", "livros"),  # "-mos": the verb
        ("Que primos vieram à festa?", "primos"),  # a noun in "-mos"
        ("Quais outros livros a Ana leu?", "livros"),
        ("Quais museus a Ana visitou?", "museus"),  # "-eus": a plural
        ("QUAIS LIVROS O TIM LEU?", "livros"),
        ("Você lembra quais países a Maria visitou?", "países"),
        ("Me diga que livros o Tim leu", "livros"),
        ("Pode me dizer quais restaurantes eu gostei?", "restaurantes"),
        ("Esqueci quais filmes eu vi", "filmes"),
    ],
)
def test_a_list_question_names_the_kind_it_asks_for(question: str, kind: str) -> None:
    assert answer_type(question) == kind


@pytest.mark.parametrize(
    "question",
    [
        "What is Joanna allergic to?",
        "which days do I have to commute?",  # a unit of time: answered by times, not instances
        "What type of workout class did Maria start doing?",  # "-ss": singular
        "What has John cooked?",
        "What does Joanna do to relax?",
        "How many dogs has Maria adopted?",
        "What are Nate's favorite desserts?",
        "where do I live now",
        "",
        # An auxiliary, a determiner or a preposition is no part of a kind: the regex took
        # "do her parents" and "of the dogs" as one.
        "What do her parents do for a living?",
        "What did the kids do at the park?",
        "What do the Smiths have planned?",
        "Which of the dogs is older?",
        # A singular or uncountable noun ending in "s" is no list.
        "What status does the order have?",
        "What bus does Ana take to work?",
        "What analysis is done on the data?",
        "What physics does the game use?",
        "What is Ana's address?",
        "What kind of dream did James have recently?",
        # A request around a question that names no kind, or a verb taken for one.
        "Can you tell me what is Maria's address?",
        "Do you remember what Maria's kids like?",
        "tell me what happened yesterday",
        "Do you know which days I work?",
        "Remind me what my wife's name is",
        "List everything Maria visited",
        "what foods am I allergic to?",  # "am" ends no kind (measured: `_EN_AUX`)
        "Você sabe que eu gosto de café?",  # "que" as "that"
        "Lembra que eu te falei?",
        # A verb in "-s" opening the embedded question, its object taken for the subject that
        # ends a kind ("what makes Maria happy" asks for no kind; "What makes Maria happy?"
        # alone never read as one).
        "Tell me what makes Maria happy",
        "Can you tell me what helps the kids sleep?",
        "Do you remember what bothers my son?",
        "Can you tell me which song motivates Caroline to be courageous?",  # LoCoMo's, asked so
        "Can you tell me what Jon thinks the ideal dance studio should look like?",
        "I wonder what keeps the team going",
        # After a verb of knowing or telling, "que" is mostly "that": a plural noun right after
        # it, with no subject of its own after it, is that clause's subject, no kind asked for.
        "Você sabe que gatos gostam de peixe?",
        "Lembra que pessoas mudam?",
        "Me diga que amigos vieram ontem",
        "Esqueci que reuniões eram hoje",
        # Portuguese: a verb, a pronoun or a determiner is no kind; "qual" asks for one thing,
        # "o que" for no kind, "quantos" for a count.
        "Quais são?",
        "Quais são as dele?",
        "Que você fez ontem?",
        "Que vocês fizeram ontem?",
        "O que eu fiz ontem?",
        "e o que eu comi?",
        "Qual livro eu li?",
        "Qual é o meu nome?",
        "pra qual time eu torço?",
        "Quantos cachorros a Maria tem?",
        "Que mais eu preciso comprar?",
        "Que achas disto?",  # the "tu" form of a verb in "-s"
        "Que vais fazer amanhã?",
        "Quais outros?",
        # Units of time, answered by times.
        "Quais dias eu trabalho?",
        "Quais semanas eu folguei?",
        "Em que mês eu nasci?",
        "Que horas são?",
        "Quais vezes eu fui ao médico?",
        "Quais anos eu morei lá?",
        "Quais fins de semana eu viajei?",
        # Singular nouns ending in "s", and a singular noun: no list.
        "Que ônibus eu pego?",
        "Que lápis eu comprei?",
        "Que país a Maria visitou?",
        "Que tipo de música eu gosto?",
        "que livro eu estou lendo?",
    ],
)
def test_any_other_question_names_no_kind(question: str) -> None:
    assert answer_type(question) is None


DIM = 32
COMMON, ASKED, KIND = 0, 1, 2  # shared by all; what the question's words are about; the kind
TOPICS = range(3, DIM)


def _e(i: int) -> np.ndarray:
    e = np.zeros(DIM)
    e[i] = 1.0
    return e


def _unit(v: np.ndarray) -> tuple[float, ...]:
    return tuple((v / np.linalg.norm(v)).astype(np.float32).tolist())


def _bank() -> tuple[dict[str, Memory], LexicalIndex]:
    """Turns about what the question's words are about, each on a topic of its own, and one
    that names an instance of the kind asked for (near the kind, far from the words)."""
    memories: dict[str, Memory] = {}
    index = LexicalIndex()

    def add(mid: str, vector: np.ndarray) -> None:
        memories[mid] = Memory(
            id=mid, text="we said something", confidence=Confidence.STATED,
            created_at=1, updated_at=1,
        )  # fmt: skip
        index.add_doc(indexed(memories[mid]))
        index.set_vector(mid, list(_unit(vector)))

    for i in range(12):
        add(f"about{i}", _e(COMMON) + _e(ASKED) + 0.7 * _e(TOPICS[i]))
    for i in range(12, 24):
        add(f"other{i}", _e(COMMON) + _e(TOPICS[i]))
    add("instance", _e(COMMON) + _e(KIND) + 0.3 * _e(ASKED))
    return memories, index


QUESTION = _unit(_e(COMMON) + _e(ASKED) + 0.3 * _e(KIND))
THE_KIND = _unit(_e(KIND))


def _ask(
    memories: dict[str, Memory],
    index: LexicalIndex,
    kind: tuple[float, ...] | None,
    **fusion: float,
) -> list[tuple[str, float]]:
    query = RecallQuery(
        text="zzz", limit=3, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=QUESTION, type_vector=kind, fusion=dataclasses.replace(Fusion(), **fusion),
    )  # fmt: skip
    return [(hit.memory.id, hit.score) for hit in rank(memories, index, query)]


def test_the_answer_type_brings_an_instance_of_the_kind_into_the_hits() -> None:
    memories, index = _bank()
    without = [mid for mid, _ in _ask(memories, index, None)]
    assert "instance" not in without  # the question's other words pulled their own turns first
    assert "instance" in [mid for mid, _ in _ask(memories, index, THE_KIND)]


def test_without_a_kind_or_with_the_share_off_the_ranking_is_exactly_as_before() -> None:
    memories, index = _bank()
    before = _ask(memories, index, None)
    assert _ask(memories, index, THE_KIND, answer_type=0.0) == before
    assert _ask(memories, index, THE_KIND[:-1]) == before  # another model's width: ignored


class _Countries(FakeEmbedder):
    CONCEPTS: ClassVar[dict[str, str]] = {
        **FakeEmbedder.CONCEPTS, "countries": "country", "spain": "country", "england": "country",
    }  # fmt: skip


async def test_recall_embeds_a_list_questions_kind_alone_and_nothing_more_for_others(
    store: Store, clock: FixedClock
) -> None:
    embedder = _Countries()
    service = MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )
    for text in ("Spain was lovely last year", "Lunch is at noon", "The bus was late"):
        await catalog.call(service, "memory::save", {"text": text})
    await service.settle()
    embedder.calls.clear()
    result = await catalog.call(
        service, "memory::recall", {"query": "What countries has she been to?"}
    )
    assert embedder.calls == [["What countries has she been to?"], ["countries"]]
    assert [h["memory"]["text"] for h in result["memories"]][:1] == ["Spain was lovely last year"]
    embedder.calls.clear()
    await catalog.call(service, "memory::recall", {"query": "when is lunch?"})
    assert embedder.calls == [["when is lunch?"]]
    embedder.calls.clear()
    await catalog.call(
        service, "memory::recall", {"query": "What countries has she been to?", "mode": "semantic"}
    )
    assert embedder.calls == [["What countries has she been to?"]]  # the hybrid's arm only


class _Paises(FakeEmbedder):
    CONCEPTS: ClassVar[dict[str, str]] = {
        **FakeEmbedder.CONCEPTS, "países": "country", "espanha": "country",
    }  # fmt: skip


async def test_a_portuguese_list_question_reaches_the_instance_of_its_kind(
    store: Store, clock: FixedClock
) -> None:
    # The question's words ("Maria", "visitou") pull the turns that repeat them; the one that
    # names a country shares only "Maria" with it. The kind, "países", embedded alone, brings
    # it up, as "European countries" does in English.
    embedder = _Paises()
    service = MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )
    for text in (
        "A Maria visitou a feira ontem",
        "A Maria visitou o dentista na terça",
        "A Maria foi para a Espanha no verão",
    ):
        await catalog.call(service, "memory::save", {"text": text})
    await service.settle()
    embedder.calls.clear()
    result = await catalog.call(
        service, "memory::recall", {"query": "Quais países a Maria visitou?"}
    )
    assert embedder.calls == [["Quais países a Maria visitou?"], ["países"]]
    assert result["memories"][0]["memory"]["text"] == "A Maria foi para a Espanha no verão"


async def test_a_kind_asked_again_is_not_embedded_again(store: Store, clock: FixedClock) -> None:
    embedder = _Countries()
    service = MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )
    await catalog.call(service, "memory::save", {"text": "Spain was lovely last year"})
    await service.settle()
    embedder.calls.clear()
    first = await catalog.call(
        service, "memory::recall", {"query": "What countries has she been to?"}
    )
    again = await catalog.call(service, "memory::recall", {"query": "Which countries did Tim see?"})
    assert embedder.calls == [
        ["What countries has she been to?"],
        ["countries"],
        ["Which countries did Tim see?"],
    ]
    assert again["memories"][0]["memory"]["id"] == first["memories"][0]["memory"]["id"]


class _KindTrouble(_Countries):
    """The question embeds (after `delay_s`); its answer type fails, or never comes back."""

    def __init__(self, *, delay_s: float = 0.0, hang: bool = False) -> None:
        super().__init__()
        self.delay_s, self.hang = delay_s, hang

    async def embed(self, texts: Any) -> list[list[float]]:
        if list(texts) == ["countries"]:
            self.calls.append(list(texts))
            if self.hang:
                await asyncio.Event().wait()  # cancelled by the timeout
            raise SiblingUnavailable("router::embed: the provider went away")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)  # a slow model, not a wait for work
        return await super().embed(texts)


async def _trouble(
    store: Store, clock: FixedClock, embedder: _KindTrouble, timeout_s: float = 2.0
) -> MemoryService:
    service = MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )
    service.query_embed_timeout_s = timeout_s
    for text in ("Spain was lovely last year", "Lunch is at noon"):
        await catalog.call(service, "memory::save", {"text": text})
    await service.settle()
    embedder.calls.clear()
    return service


async def test_a_failing_answer_type_leaves_the_hybrid_on_the_questions_vector(
    store: Store, clock: FixedClock
) -> None:
    embedder = _KindTrouble()
    service = await _trouble(store, clock, embedder)
    result = await catalog.call(
        service, "memory::recall", {"query": "What countries has she been to?"}
    )
    assert embedder.calls == [["What countries has she been to?"], ["countries"]]
    assert result["retrieval"] == "bm25-entity-semantic"  # the question's vector ran it
    assert result["memories"][0]["memory"]["text"] == "Spain was lovely last year"


async def test_the_answer_type_gets_only_what_is_left_of_the_questions_timeout(
    store: Store, clock: FixedClock
) -> None:
    # The question takes 60% of its timeout; the type then hung for a whole timeout of its
    # own (1.6 timeouts in all): a recall waits one at most.
    embedder = _KindTrouble(delay_s=0.6, hang=True)
    service = await _trouble(store, clock, embedder, timeout_s=1.0)
    started = time.monotonic()
    result = await catalog.call(
        service, "memory::recall", {"query": "What countries has she been to?"}
    )
    assert time.monotonic() - started < 1.4
    assert embedder.calls[-1] == ["countries"]
    assert result["retrieval"] == "bm25-entity-semantic"
    assert result["memories"][0]["memory"]["text"] == "Spain was lovely last year"
