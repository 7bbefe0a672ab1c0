"""Embeddings are derived data: every save is embedded in the background, queries on demand.

A failing or missing embedder never fails a call: recall degrades to lexical and says so. Vectors
of two models are never compared: a query vector is used in a bank only when that bank's vectors
all come from the query's model. A model change (`embedding_model`, `embeddings_enabled`, another
embedder) re-embeds every bank in the background; until a bank is done its recall runs without
the semantic arm (`retrieval: bm25-entity`) and `memory::doctor` shows how far it got."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memory_worker.app.base import QUERY_EMBED_TIMEOUT_S, ServiceBase
from memory_worker.app.ports import Embedder, QueryEmbedder
from memory_worker.core.errors import WorkerError
from memory_worker.core.lanes import LANES, embedding_text
from memory_worker.core.models import Memory
from memory_worker.core.text import answer_type
from memory_worker.storage.bank import Bank
from memory_worker.storage.logger import get_logger
from memory_worker.storage.vectors import text_hash

if TYPE_CHECKING:  # (the search package: imported by a recall, never by a one-shot save)
    from memory_worker.search.lanes import LaneQuery
    from memory_worker.search.scoring import LaneWeights

__all__ = [
    "EMBED_BATCH",
    "QUERY_EMBED_CHARS",
    "QUERY_EMBED_TIMEOUT_S",
    "EmbeddingWork",
    "embedded_part",
    "query_deadline",
]

log = get_logger(__name__)

EMBED_BATCH = 64
# A catch-up's batch (`EmbeddingWork._catch_up`): small, so its time budget is overrun by little
# (a memory-sized text takes ~45 ms on one core with the local e5 model).
CATCH_UP_BATCH = 4
# What of a query is embedded: at most this many characters, about 250 tokens, embedded well
# inside the query's timeout on a loaded CPU (~1 s per 1000 characters for the local model). A
# query as long as a pasted log (the hook's query is the whole user message) held the local
# engine for minutes after its timeout, each later query waiting behind it, and a remote provider
# refused it. Its beginning and its end are kept: a pasted log's question comes before it ("why
# does this fail:") or after it. The lexical arm still reads the whole query.
QUERY_EMBED_CHARS = 1_000
# How many answer types' vectors a service keeps (`_question_vectors`): a list question's kind
# ("countries", "books") recurs across questions and sessions. ~12 kB each as a tuple of 384
# floats: ~3 MB at most.
KIND_VECTORS = 256
# How many retired records' vectors a service keeps (`_history_vectors`): a retired record never
# changes, so a semantic history view asked again is not embedded again. ~1.5 kB each as float32
# rows of 384: ~6 MB — or the records of the biggest view asked, when it has more: a view bigger
# than the cache evicted its own first vectors while embedding its last ones, so every call
# embedded it all again (and one the embedder could not finish in one call never answered).
HISTORY_VECTORS = 4096
# The most records one semantic history view embeds (~25 MB of vectors): a bigger one answers
# `semantic-unavailable` at once rather than holding a whole bank's history in RAM.
HISTORY_VIEW_MAX = 16_384


# When the query-time embeddings of the current call must be over (`time.monotonic()`), if its
# caller has a budget of its own: set by `query_deadline`, read by `_query_timeout_s`.
_QUERY_DEADLINE: ContextVar[float | None] = ContextVar("query_deadline", default=None)


@contextlib.contextmanager
def query_deadline(at: float) -> Iterator[None]:
    """Within: a query (or lane) embedding is given up by `at` (`time.monotonic()`) even before
    its own timeout, and recall runs lexical. The hook's budget is shared by its sibling calls:
    the query timeout alone fits in it, not after a slow session lookup, and the step then got
    nothing."""
    token = _QUERY_DEADLINE.set(at)
    try:
        yield
    finally:
        _QUERY_DEADLINE.reset(token)


def embedded_part(query: str) -> str:
    """What of `query` the semantic arm embeds: all of it, or its first and last
    `QUERY_EMBED_CHARS // 2` characters."""
    if len(query) <= QUERY_EMBED_CHARS:
        return query
    half = QUERY_EMBED_CHARS // 2
    return f"{query[:half]} … {query[-half:]}"


class EmbeddingWork(ServiceBase):
    """Embedding work."""

    def _embedding_on(self) -> bool:
        return self.embedder is not None and self.settings.embeddings_enabled

    async def _query_vector(self, text: str, bank: Bank | None) -> tuple[float, ...] | None:
        """The query's embedding for `bank`, or None (lexical recall) when there is no embedder,
        it fails, or the bank's vectors are not (all) from its model yet: the semantic arm is an
        enrichment, never a reason for recall to fail, and never a comparison across models. A
        service that does not embed writes (a one-shot command, MCP over stdio) first catches up
        on what the bank lacks, within `catch_up_s` (`_catch_up`); with none (a hook, inside its
        budget) it embeds a query only over a bank that holds vectors of its model."""
        embedder = self.embedder
        if embedder is None or bank is None or not self._embedding_on() or not text.strip():
            return None
        if not self.embed_writes:
            if self.catch_up_s > 0.0:
                await self._catch_up(bank, embedder)
            elif not bank.embedded_by(embedder.model):
                return None
        model = embedder.model
        if not bank.semantic_ready(model):
            return None  # its re-embedding (started by the change) has not finished
        text = embedded_part(text)
        timeout_s = self._query_timeout_s()
        if timeout_s is None:
            log.warning("query_embedding_skipped", reason="the caller's budget is spent")
            return None
        try:
            if isinstance(embedder, QueryEmbedder):
                vector = await asyncio.wait_for(embedder.embed_query(text), timeout_s)
            else:
                vectors = await asyncio.wait_for(embedder.embed([text]), timeout_s)
                vector = vectors[0] if vectors else []
        except (WorkerError, TimeoutError) as exc:
            log.warning("query_embedding_failed", error=str(exc))
            return None
        if self.embedder is not embedder or embedder.model != model:
            return None  # the model changed while the query was embedded
        return tuple(vector) if vector else None

    async def _question_vectors(
        self, text: str, bank: Bank | None
    ) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
        """The query's embedding (`_query_vector`) and, for a list question, its answer type's
        embedded alone (`core.text.answer_type`: "European countries" of "What European
        countries has Maria been to?"), for the hybrid's semantic arm (`Fusion.answer_type`).
        The type is None when the question is no list question, when its own vector is None
        (no second embedding a recall could not use), or when it does not come within what is
        left of the question's timeout: an enrichment never doubles how long a slow embedder
        keeps a recall waiting."""
        started = time.monotonic()
        vector = await self._query_vector(text, bank)
        kind = answer_type(text) if vector is not None else None
        if kind is None:
            return vector, None
        embedder = self.embedder
        key = (embedder.model if embedder is not None else "", kind)
        cached = self._kind_vectors.get(key)
        if cached is not None:
            self._kind_vectors.move_to_end(key)
            return vector, cached
        by = started + self.query_embed_timeout_s
        deadline = _QUERY_DEADLINE.get()
        with query_deadline(by if deadline is None else min(by, deadline)):
            typed = await self._query_vector(kind, bank)
        if typed is not None and embedder is self.embedder:
            self._kind_vectors[key] = typed
            while len(self._kind_vectors) > KIND_VECTORS:
                self._kind_vectors.popitem(last=False)
        return vector, typed

    async def _history_vectors(
        self, records: list[Memory]
    ) -> dict[str, npt.NDArray[np.float32]] | None:
        """The embeddings of `records` by id (retired, or as they read at `as_of`), for
        `mode: semantic`'s history view: the index holds live vectors only. Embedded as memories
        are, in batches under the query's timeout, each batch kept (`HISTORY_VECTORS`): a view
        cut short goes on where it stopped at the next call. None when the embedder failed,
        timed out or changed model meanwhile: the arm cannot rank what was asked."""
        embedder = self.embedder
        if embedder is None:
            return None
        model, cache = embedder.model, self._history_cache
        found: dict[str, npt.NDArray[np.float32]] = {}
        missing: dict[tuple[str, str], list[Memory]] = {}
        kept: set[tuple[str, str]] = set()
        for memory in records:
            key = (model, text_hash(memory.text))
            row = cache.get(key)
            if row is None:
                missing.setdefault(key, []).append(memory)
                continue
            cache.move_to_end(key)
            kept.add(key)
            found[memory.id] = row
        if not missing:
            return found
        if len(kept) + len(missing) > HISTORY_VIEW_MAX:
            log.warning(
                "history_view_too_big",
                records=len(kept) + len(missing),
                most=HISTORY_VIEW_MAX,
                advice="ask lexical or hybrid recall, which rank history by its words",
            )
            return None
        timeout_s = self._query_timeout_s()
        if timeout_s is None:
            log.warning("history_embedding_skipped", reason="the caller's budget is spent")
            return None
        keys = list(missing)
        # Room for the whole view: its vectors found above were moved to the end and the new
        # ones go after them, so only other views' are evicted (a view cut short keeps its part).
        room = max(HISTORY_VECTORS, len(kept) + len(keys))
        try:
            async with asyncio.timeout(timeout_s):
                for start in range(0, len(keys), EMBED_BATCH):
                    batch = keys[start : start + EMBED_BATCH]
                    vectors = await embedder.embed([missing[key][0].text for key in batch])
                    if self.embedder is not embedder or embedder.model != model:
                        return None  # the model changed meanwhile: never compared across
                    for key, vector in zip(batch, vectors, strict=True):
                        row = np.asarray(vector, np.float32)
                        cache[key] = row
                        found.update((memory.id, row) for memory in missing[key])
                    while len(cache) > room:
                        cache.popitem(last=False)
        except (WorkerError, ValueError, TimeoutError) as exc:
            log.warning("history_embedding_failed", error=str(exc))
            return None
        return found

    def _query_timeout_s(self) -> float | None:
        """How long a query-time embedding may take: its own timeout, cut to the caller's
        deadline (`query_deadline`); None when that has passed."""
        timeout_s = self.query_embed_timeout_s
        deadline = _QUERY_DEADLINE.get()
        if deadline is None:
            return timeout_s
        timeout_s = min(timeout_s, deadline - time.monotonic())
        return timeout_s if timeout_s > 0 else None

    async def _catch_up(self, bank: Bank, embedder: Embedder) -> None:
        """Embed what `bank` lacks, a few memories at a time, for at most `catch_up_s` (one batch
        may run past it): a process that does not embed its writes (a one-shot command, MCP over
        stdio) brings a bank that only such processes wrote to its semantic arm, recall by
        recall, when no server holds the data dir to embed in the background. What is left
        waits for the next recall; the arm runs once most of the bank is embedded
        (`Bank.semantic_ready`). A bank another model embeds (the server's, configured
        otherwise) is left to it: taking it over here would re-embed it, bit by bit, in turn
        with the server."""
        if self.left_to_another(bank, embedder):
            return
        deadline = time.monotonic() + self.catch_up_s
        while time.monotonic() < deadline:
            model = embedder.model
            pending = bank.needs_embedding(model, CATCH_UP_BATCH, newest=True)
            if not pending:
                # Then the lanes the bank weights, as a server's pass does: left out, a
                # recall's window was compared by its words alone for good where none runs.
                if not await self._embed_lanes(bank, embedder, model, CATCH_UP_BATCH):
                    return
                continue
            if not await self._store_batch(bank, embedder, model, pending):
                return

    async def _store_batch(
        self, bank: Bank, embedder: Embedder, model: str, pending: list[Memory]
    ) -> int | None:
        """Embed `pending` and keep their vectors: how many were kept (0 when the embedder or its
        model changed meanwhile: never stored under the new one), None when it failed."""
        try:
            vectors = await embedder.embed([memory.text for memory in pending])
        except (WorkerError, ValueError) as exc:
            self._embedding_failed(bank.name, model, exc)
            return None
        if self.embedder is not embedder or embedder.model != model:
            return 0
        try:
            return await bank.store_vectors(model, list(zip(pending, vectors, strict=True)))
        except ValueError as exc:
            self._embedding_failed(bank.name, model, exc)
            return None

    @staticmethod
    def left_to_another(bank: Bank, embedder: Embedder) -> list[str]:
        """The models other than `embedder`'s whose vectors make a recall's catch-up leave `bank`
        alone (`_catch_up`). An older build of the same local model (its name is the base name
        and the build's digests: `base_model`) is no other model: no process runs it any more
        once the package is upgraded, and leaving it alone kept every bank it had embedded
        lexical for good where no server runs."""
        model = embedder.model
        base: str | None = getattr(embedder, "base_model", None)
        others = bank.models_other_than(model)
        return [m for m in others if not (base and m.startswith(f"{base}-"))]

    def _embed_soon(self, bank: Bank) -> None:
        """Embed the bank's new or edited memories in the background (explicit saves included)."""
        if not self._embedding_on() or not self.embed_writes:
            return
        running = self._embedding.get(bank.name)
        if running is not None and not running.done():
            return  # it re-checks what is pending after every batch, so it will see this one
        self._embedding[bank.name] = asyncio.create_task(
            self._embed_bank(bank), name=f"memory-embed:{bank.name}"
        )

    async def _embed_bank(self, bank: Bank) -> None:
        """Embed what the bank lacks, batch by batch, following the embedder and its model as
        they are NOW (a change mid-pass switches the pass to the new model)."""
        while (embedder := self.embedder) is not None and self._embedding_on():
            model = embedder.model
            pending = bank.needs_embedding(model, EMBED_BATCH)
            if not pending:
                if not await self._embed_lanes(bank, embedder, model):
                    return
                continue
            stored = await self._store_batch(bank, embedder, model, pending)
            if stored is None:
                return
            if self.embedder is not embedder or embedder.model != model:
                continue  # changed while this batch ran: the pass goes on with the new one
            if not stored:
                return  # nothing could be kept (edited meanwhile): their commit re-queues them

    async def _embed_lanes(
        self, bank: Bank, embedder: Embedder, model: str, limit: int = EMBED_BATCH
    ) -> bool:
        """One batch of the association lanes' vectors (after the content's: recall needs those
        first), of the lanes the bank weights only — embedding a window costs several times a
        memory's text, and a lane without weight is never compared; a weight set later embeds
        them then. False when there is nothing (more) to do."""
        weighted = self._weighted_lanes(bank)
        if not weighted:
            return False
        lanes = bank.lane_vectors.pending(bank.memories, limit, weighted)
        if not lanes:
            return False
        try:
            vectors = await embedder.embed(
                [embedding_text(getattr(memory, lane)) for lane, memory in lanes]
            )
        except (WorkerError, ValueError) as exc:
            self._embedding_failed(bank.name, model, exc)
            return False
        if self.embedder is not embedder or embedder.model != model:
            return True  # changed meanwhile: the loop starts over with the new one
        items = [(lane, memory, v) for (lane, memory), v in zip(lanes, vectors, strict=True)]
        return await bank.lane_vectors.store(model, items, bank.memories) > 0

    async def _lane_vectors(
        self, lanes: LaneQuery, bank: Bank | None, weights: LaneWeights
    ) -> LaneQuery:
        """The recall's window and goal embedded as the stored lanes are (passages: the two sides
        are alike), when the bank's lane vectors are all of the query's model; else the lanes run
        lexically. One call for both, under the query embedding's timeout; a lane the bank gives
        no weight costs nothing."""
        embedder = self.embedder
        asked = tuple(lane for lane in lanes.asked if float(getattr(weights, lane)) > 0.0)
        if embedder is None or bank is None or not asked or not self._embedding_on():
            return lanes
        model = embedder.model
        if not bank.semantic_ready(model) or not bank.lane_vectors.ready(model, asked):
            return lanes
        texts = [embedding_text(lanes.text(lane) or "") for lane in asked]
        timeout_s = self._query_timeout_s()
        if timeout_s is None:
            log.warning("lane_embedding_skipped", reason="the caller's budget is spent")
            return lanes
        try:
            vectors = await asyncio.wait_for(embedder.embed(texts), timeout_s)
        except (WorkerError, ValueError, TimeoutError) as exc:
            log.warning("lane_embedding_failed", error=str(exc))
            return lanes
        if self.embedder is not embedder or embedder.model != model or len(vectors) != len(asked):
            return lanes
        found = {lane: tuple(v) for lane, v in zip(asked, vectors, strict=True) if v}
        return dataclasses.replace(
            lanes, context_vector=found.get("context"), intention_vector=found.get("intention")
        )

    def _weighted_lanes(self, bank: Bank) -> tuple[str, ...]:
        weights = self.bank_settings(bank).association_weights
        return tuple(lane for lane in LANES if float(getattr(weights, lane)) > 0.0)

    def _embedding_failed(self, bank: str, model: str, exc: Exception) -> None:
        """Logged once per model and error: a model that cannot embed fails on every save."""
        key = (model, str(exc))
        if key != self._last_embed_failure:
            self._last_embed_failure = key
            log.warning("embedding_failed", bank=bank, model=model, error=str(exc))

    def embedding_changed(self, *, turned_on: bool = False) -> None:
        """The embedder, its model or `embeddings_enabled` changed: re-embed in the background
        what the current model lacks (`turned_on`: what was saved while embeddings were off
        must be embedded before the semantic arm counts again)."""
        self._last_embed_failure = None
        # The banks replayed so far: one not replayed yet is embedded when it is (`boot_banks`,
        # or the call that names it), and replaying it here would stall the loop meanwhile.
        for bank in self.store.loaded():
            if turned_on:
                bank.restart_embedding()
            self._embed_soon(bank)

    def embedding_progress(self) -> list[tuple[str, int, int, bool]]:
        """`(bank, embedded, live, semantic)` of every bank not fully embedded by the current
        model; `semantic`: its recall runs the semantic arm all the same (`Bank.semantic_ready`)."""
        if self.embedder is None:
            return []
        model = self.embedder.model
        progress = []
        for bank in self.store.loaded():  # the doctor replays the pending ones first
            embedded, live = bank.embedding_progress(model)
            ready = bank.semantic_ready(model)
            if embedded < live or not ready:
                progress.append((bank.name, embedded, live, ready))
        return progress

    async def backfill_embeddings(self) -> None:
        """Start embedding every bank's memories that lack a vector from the current model, the
        banks not replayed yet replayed first (each in a worker thread)."""
        await self.store.replay_all()
        for bank in self.store.loaded():
            self._embed_soon(bank)

    async def close(self) -> None:
        """Stop background embedding (derived data: the next start backfills what is missing)."""
        running = [task for task in self._embedding.values() if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def settle(self) -> None:
        """Wait for background embedding to finish (tests, shutdown, benchmarks)."""
        while running := [task for task in self._embedding.values() if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)
