"""Isolation: a bank's memories never appear in another bank's recall, list, tags, preview or
events, under concurrent use and after a bank is deleted and recreated under the same name; and no
maintenance path (doctor's scratch bank) touches a user's bank."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from memory_worker.app import catalog
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import StorageError
from memory_worker.core.models import Memory

from ..fakes import FixedClock, RecordingEmitter
from .helpers import open_service

BANKS = ("alpha", "bravo", "charlie", "delta")
SHARED = ("tea", "blog", "office", "deploy", "dog")  # words every bank uses, so recall overlaps


def _text(bank: str, rng: random.Random) -> str:
    words = " ".join(rng.sample(SHARED, 3))
    return f"Note {rng.random():.9f} of {bank}marker about {words}"


def _owner(memory: dict[str, Any]) -> str:
    """The bank a memory was written to, from the marker in its text."""
    owners = [bank for bank in BANKS if f"{bank}marker" in memory["text"]]
    assert len(owners) == 1, memory["text"]
    return owners[0]


async def _user(service: MemoryService, rng: random.Random) -> None:
    for _ in range(8):
        bank = rng.choice(BANKS)
        kind = rng.choice(("save", "save", "recall", "list", "delete"))
        if kind == "save":
            payload = {"bank": bank, "text": _text(bank, rng), "tags": [f"{bank}-tag", "shared"]}
            await catalog.call(service, "memory::save", payload)
        elif kind == "recall":
            result = await catalog.call(
                service, "memory::recall", {"bank": bank, "query": rng.choice(SHARED), "limit": 50}
            )
            assert {_owner(hit["memory"]) for hit in result["memories"]} <= {bank}
        elif kind == "list":
            page = await catalog.call(service, "memory::list", {"bank": bank, "limit": 500})
            assert {_owner(m) for m in page["memories"]} <= {bank}
        else:
            page = await catalog.call(service, "memory::list", {"bank": bank, "limit": 5})
            if page["memories"]:
                memory_id = rng.choice(page["memories"])["id"]
                await catalog.call(service, "memory::delete", {"bank": bank, "id": memory_id})
        await asyncio.sleep(0)


async def _assert_isolated(service: MemoryService, emitter: RecordingEmitter) -> None:
    for bank in BANKS:
        page = await catalog.call(
            service, "memory::list", {"bank": bank, "include_superseded": True, "limit": 500}
        )
        assert page["total"] > 0
        assert {_owner(m) for m in page["memories"]} == {bank}
        for query in (*SHARED, " ".join(SHARED), "note marker"):
            for extra in ({}, {"include_superseded": True}, {"mode": "lexical"}, {"tag": "shared"}):
                result = await catalog.call(
                    service, "memory::recall", {"bank": bank, "query": query, "limit": 100, **extra}
                )
                assert {_owner(hit["memory"]) for hit in result["memories"]} <= {bank}
            preview = await catalog.call(service, "memory::preview", {"bank": bank, "query": query})
            assert {_owner(m["memory"]) for m in preview["memories"]} <= {bank}
            assert not any(
                f"{other}marker" in (preview["message"] or "") for other in BANKS if other != bank
            )
        tags = await catalog.call(service, "memory::tags", {"bank": bank})
        assert {t["tag"] for t in tags["tags"]} == {f"{bank}-tag", "shared"}
    for event in emitter.of(ITEM_CHANGED):
        assert _owner(event["memory"]) == event["bank"]


async def test_no_bank_sees_another_banks_memories_under_concurrent_use(tmp_path: Path) -> None:
    emitter = RecordingEmitter()
    service = open_service(tmp_path / "data", FixedClock(), emitter)
    try:
        rng = random.Random(4)
        for bank in BANKS:
            await catalog.call(
                service,
                "memory::save",
                {"bank": bank, "text": _text(bank, rng), "tags": [f"{bank}-tag", "shared"]},
            )
        await asyncio.gather(*(_user(service, random.Random(rng.random())) for _ in range(64)))
        await _assert_isolated(service, emitter)
    finally:
        await service.store.close()
    reopened = open_service(tmp_path / "data", FixedClock(), RecordingEmitter())
    try:
        await _assert_isolated(reopened, RecordingEmitter())
    finally:
        await reopened.store.close()


async def test_a_bank_deleted_and_recreated_under_its_name_starts_empty(tmp_path: Path) -> None:
    data = tmp_path / "data"
    clock = FixedClock()
    emitter = RecordingEmitter()
    service = open_service(data, clock, emitter)
    rng = random.Random(9)
    try:
        old = [_text("alpha", rng) for _ in range(5)]
        for text in old:
            await catalog.call(
                service, "memory::save", {"bank": "alpha", "text": text, "tags": ["alpha-tag"]}
            )
        await catalog.call(
            service,
            "memory::rule::set",
            {"bank": "alpha", "name": "style", "content": "Old alpha rule."},
        )
        clock.advance()
        # Saves racing the delete land in the old bank (and go to the trash with it), fail with
        # `storage`, or create the new bank: never lost, never in both.
        racing = [_text("alpha", rng) for _ in range(16)]
        results = await asyncio.gather(
            catalog.call(service, "memory::bank::delete", {"name": "alpha"}),
            *(catalog.call(service, "memory::save", {"bank": "alpha", "text": t}) for t in racing),
            return_exceptions=True,
        )
        deleted, saves = results[0], results[1:]
        assert isinstance(deleted, dict), deleted
        assert all(isinstance(r, dict | StorageError) for r in saves), saves
        trashed = Path(deleted["trashed_to"])
        in_trash = {
            Memory.model_validate_json(line).text
            for line in (trashed / "memories.jsonl").read_bytes().splitlines()
        }
        assert set(old) <= in_trash
        assert (trashed / "rules" / "style.md").read_text() == "Old alpha rule."
        page = (
            await catalog.call(service, "memory::list", {"bank": "alpha", "limit": 500})
            if "alpha" in service.store.names()
            else {"memories": []}
        )
        in_new = {m["text"] for m in page["memories"]}
        for text, result in zip(racing, saves, strict=True):
            if isinstance(result, dict):
                assert (text in in_trash) != (text in in_new), text
            else:
                assert text not in in_trash and text not in in_new
        assert not in_new & set(old)

        emitter.clear()
        created = await catalog.call(service, "memory::bank::create", {"name": "alpha"})
        assert created["bank"]["memories"] == len(in_new)
        assert (await catalog.call(service, "memory::rule::list", {"bank": "alpha"}))["rules"] == []
        for query in (*SHARED, "alphamarker note"):
            result = await catalog.call(
                service,
                "memory::recall",
                {"bank": "alpha", "query": query, "include_superseded": True},
            )
            assert {hit["memory"]["text"] for hit in result["memories"]} <= in_new
            preview = await catalog.call(
                service, "memory::preview", {"bank": "alpha", "query": query}
            )
            assert "Old alpha rule" not in preview["system_prompt_section"]
            assert {m["memory"]["text"] for m in preview["memories"]} <= in_new
        tags = await catalog.call(service, "memory::tags", {"bank": "alpha"})
        assert "alpha-tag" not in {t["tag"] for t in tags["tags"]}
    finally:
        await service.store.close()
    reopened = open_service(data)
    try:
        page = await catalog.call(
            reopened, "memory::list", {"bank": "alpha", "include_superseded": True}
        )
        assert {m["text"] for m in page["memories"]} == in_new
    finally:
        await reopened.store.close()


async def test_doctor_never_touches_a_user_bank_that_has_its_scratch_banks_name(
    tmp_path: Path,
) -> None:
    """Doctor's scratch bank is `doctor-<clock ms mod 10^6>`, a valid user bank name: when a user
    bank has that name, doctor writes its probe into it, trashes it, and then deletes it from the
    trash for good."""
    clock = FixedClock()
    service = open_service(tmp_path / "data", clock)
    name = f"doctor-{clock() % 1_000_000:06d}"
    try:
        await catalog.call(
            service, "memory::save", {"bank": name, "text": "Patient note: allergic"}
        )
        before = await catalog.call(service, "memory::list", {"bank": name})
        await catalog.call(service, "memory::doctor", {})
        assert name in service.store.names(), f"doctor deleted the user bank {name}"
        assert await catalog.call(service, "memory::list", {"bank": name}) == before
    finally:
        await service.store.close()
