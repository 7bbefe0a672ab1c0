"""A user switching from the public Rust worker: its data dir, byte for byte as it writes it
(`/work/shared/reference/rust-memory-worker.md` §1), opened by this worker on the same engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.text import fingerprint
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FakeEmbedder, FixedClock, RecordingEmitter

PERSON = Caller.human("cli")


def rust_record(text: str, **fields: Any) -> dict[str, Any]:
    """A `memories.jsonl` record in the Rust worker's field order, its optional fields absent."""
    record: dict[str, Any] = {
        "id": fingerprint(text),
        "text": text,
        "entities": fields.pop("entities", []),
        "tags": fields.pop("tags", []),
        "confidence": fields.pop("confidence", "stated"),
        "corroboration": fields.pop("corroboration", 0),
        "pinned": fields.pop("pinned", False),
    }
    if "source" in fields:
        record["source"] = fields.pop("source")
    record["created_at"] = fields.pop("created_at", 1_700_000_000_000)
    record["updated_at"] = fields.pop("updated_at", record["created_at"])
    for optional in ("invalid_at", "superseded_by"):
        if optional in fields:
            record[optional] = fields.pop(optional)
    record["revision"] = fields.pop("revision", 0)
    record.update(fields)
    return record


def rust_line(row: dict[str, Any]) -> str:
    """serde_json's compact form: no spaces, UTF-8 as is."""
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def write_rust_bank(root: Path, records: list[dict[str, Any]], name: str = "main") -> Path:
    bank = root / name
    (bank / "rules").mkdir(parents=True)
    (bank / "bank.yaml").write_text("description: ''\n")
    (bank / "memories.jsonl").write_text("".join(rust_line(r) + "\n" for r in records))
    return bank


def _service(store: Store, clock: FixedClock, embedder: FakeEmbedder | None = None) -> Any:
    return MemoryService(
        store, Settings(), emitter=RecordingEmitter(), clock=clock, embedder=embedder
    )


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, PERSON)


class TestVectorsSidecar:
    """The Rust worker's `vectors.jsonl` lines are `{"id","model","revision","v":[f32…]}`: the
    configured `embedding_model` of `router::embed` ("" = the router's default), the memory's
    revision at embed time, the vector as a JSON array."""

    async def test_rust_vectors_are_used_not_reported_as_damage(
        self, data_dir: Path, clock: FixedClock
    ) -> None:
        router = FakeEmbedder("router:default")  # our engine-mode embedder's name for it
        blog = rust_record("Rafa publishes blog posts weekly")
        lunch = rust_record("Lunch is at noon", revision=2)
        edited = rust_record("The user has a puppy", revision=3)
        bank = write_rust_bank(data_dir, [blog, lunch, edited])
        rows = [
            # an older Rust worker stamped no revision (serde's default: 0)
            {"id": blog["id"], "model": "", "v": router.vector(blog["text"])},
            {"id": lunch["id"], "model": "", "revision": 2, "v": router.vector(lunch["text"])},
            # embedded at an older revision: stale, as the Rust worker drops it too
            {"id": edited["id"], "model": "", "revision": 1, "v": router.vector("a cat")},
        ]
        (bank / "vectors.jsonl").write_text("".join(rust_line(r) + "\n" for r in rows))
        store = Store.open(data_dir, holder=HOLDER)
        try:
            service = _service(store, clock, router)
            doctor = await call(service, "memory::doctor")
            [intact] = [c for c in doctor["checks"] if c["name"] == "files-intact"]
            assert intact["ok"], intact["detail"]
            assert store.get("main").embedding_progress(router.model) == (2, 3)
            await service.backfill_embeddings()
            await service.settle()
            embedded = [text for batch in router.calls for text in batch]
            assert blog["text"] not in embedded and lunch["text"] not in embedded
            assert edited["text"] in embedded  # the stale one only
            found = await call(service, "memory::recall", query="writes essays")
            assert found["retrieval"] == "bm25-entity-semantic"
            assert [h["memory"]["id"] for h in found["memories"]][:1] == [blog["id"]]
        finally:
            await store.close()

    async def test_a_vector_line_with_numbers_past_a_float_is_dropped_not_fatal(
        self, data_dir: Path, clock: FixedClock
    ) -> None:
        # An integer too large for a float (a Rust-format `v`) or an infinite revision: one
        # damaged derived line, dropped like any other, not an OverflowError opening the bank.
        blog = rust_record("Rafa publishes blog posts weekly")
        bank = write_rust_bank(data_dir, [blog])
        huge = "1" + "0" * 400
        (bank / "vectors.jsonl").write_text(
            f'{{"id":"{blog["id"]}","model":"","revision":0,"v":[{huge}]}}\n'
            f'{{"id":"{blog["id"]}","model":"m","revision":1e999,"text_hash":"x","v":""}}\n'
        )
        store = Store.open(data_dir, holder=HOLDER)
        try:
            service = _service(store, clock)
            found = await call(service, "memory::recall", query="blog posts")
            assert [h["memory"]["id"] for h in found["memories"]] == [blog["id"]]
        finally:
            await store.close()


class TestBankFile:
    """The Rust worker writes `bank.yaml` once, `description: <serde_yaml scalar>`; serde_yaml
    speaks YAML 1.2, where a date, `1_000` or `12:30` is a plain string it leaves unquoted."""

    async def test_a_number_past_the_int_digit_limit_is_text_not_a_broken_bank(
        self, data_dir: Path, clock: FixedClock
    ) -> None:
        # A description of 5000 digits (YAML 1.1 reads an int; Python refuses to parse one that
        # long with a ValueError, not a YAMLError): the description as written, the bank loads.
        digits = "1" * 5000
        bank = write_rust_bank(data_dir, [rust_record("The user likes tea")])
        (bank / "bank.yaml").write_text(f"description: {digits}\nmax_memories: 50\n")
        store = Store.open(data_dir, holder=HOLDER)
        try:
            service = _service(store, clock)
            [listed] = (await call(service, "memory::bank::list"))["banks"]
            assert listed["description"] == digits
            assert listed["settings"]["max_memories"] == 50
            found = await call(service, "memory::recall", query="tea")
            assert len(found["memories"]) == 1
        finally:
            await store.close()

    async def test_a_description_yaml_1_1_reads_as_something_else_is_kept(
        self, data_dir: Path, clock: FixedClock
    ) -> None:
        written = {"dated": "2024-01-05", "count": "1_000", "time": "12:30"}
        for name, description in written.items():
            bank = write_rust_bank(data_dir, [rust_record("The user likes tea")], name)
            (bank / "bank.yaml").write_text(f"description: {description}\n")
        store = Store.open(data_dir, holder=HOLDER)
        try:
            service = _service(store, clock)
            listed = (await call(service, "memory::bank::list"))["banks"]
            assert {b["name"]: b["description"] for b in listed} == written
            # a settings change rewrites the file: the description must survive it
            await call(service, "memory::bank::configure", name="dated", max_memories=50)
            [dated] = [
                b
                for b in (await call(service, "memory::bank::list"))["banks"]
                if b["name"] == "dated"
            ]
            assert dated["description"] == "2024-01-05"
            assert "2024-01-05" in (data_dir / "dated" / "bank.yaml").read_text()
        finally:
            await store.close()
