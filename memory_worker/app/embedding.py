"""Embeddings are derived data: every save is embedded in the background, queries on demand.

A failing or missing embedder never fails a call: recall degrades to lexical and says so."""

from __future__ import annotations

import asyncio

import structlog

from memory_worker.app.base import ServiceBase
from memory_worker.core.errors import WorkerError
from memory_worker.storage.bank import Bank

__all__ = ["EMBED_BATCH", "QUERY_EMBED_TIMEOUT_S", "EmbeddingWork"]

log = structlog.get_logger(__name__)

QUERY_EMBED_TIMEOUT_S = 2.0  # inside the hook's budget: a slow embedder costs the turn nothing
EMBED_BATCH = 64


class EmbeddingWork(ServiceBase):
    """Embedding work."""

    def _embedding_on(self) -> bool:
        return self.embedder is not None and self.settings.embeddings_enabled

    async def _query_vector(self, text: str) -> tuple[float, ...] | None:
        """The query's embedding, or None (lexical recall) when there is no embedder or it fails:
        the semantic arm is an enrichment, never a reason for recall to fail."""
        if self.embedder is None or not self._embedding_on() or not text.strip():
            return None
        try:
            vectors = await asyncio.wait_for(self.embedder.embed([text]), QUERY_EMBED_TIMEOUT_S)
        except (WorkerError, TimeoutError) as exc:
            log.warning("query_embedding_failed", error=str(exc))
            return None
        return tuple(vectors[0]) if vectors else None

    def _embed_soon(self, bank: Bank) -> None:
        """Embed the bank's new or edited memories in the background (explicit saves included)."""
        if not self._embedding_on():
            return
        running = self._embedding.get(bank.name)
        if running is not None and not running.done():
            return  # it re-checks what is pending after every batch, so it will see this one
        self._embedding[bank.name] = asyncio.create_task(
            self._embed_bank(bank), name=f"memory-embed:{bank.name}"
        )

    async def _embed_bank(self, bank: Bank) -> None:
        assert self.embedder is not None
        model = self.embedder.model
        while pending := bank.needs_embedding(model, EMBED_BATCH):
            try:
                vectors = await self.embedder.embed([memory.text for memory in pending])
                stored = await bank.store_vectors(model, list(zip(pending, vectors, strict=True)))
            except (WorkerError, ValueError) as exc:
                log.warning("embedding_failed", bank=bank.name, error=str(exc))
                return
            if not stored:
                return  # nothing could be kept (edited meanwhile, or a width mismatch)

    def backfill_embeddings(self) -> None:
        """Start embedding every bank's memories that lack a vector from the current model."""
        for name in self.store.names():
            bank = self.store.find(name)
            if bank is not None:
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
