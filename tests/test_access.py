"""Access levels (C22): `conscious_access` limits agent calls at the call entry — `none` refuses
every one, `read` allows only what changes nothing, `read_write` everything the manifest lets
agents call — while people and the involuntary path (the hook, extraction) are never limited,
and a refused call changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import HTTP_STATUS, Forbidden
from memory_worker.harness.extractor import Extractor
from memory_worker.storage.store import Store

from .fakes import FakeKeyValue, FixedClock, RecordingEmitter
from .test_extractor import Model, Transcript

AGENT = Caller.for_agent("bus", session_id="s1", turn_id="t1", agent="planner")
READS = {
    "memory::recall": {"query": "tea"},
    "memory::get": {"id": "ID"},
    "memory::list": {},
    "memory::tags": {},
    "memory::preview": {"query": "tea"},
    # Seed 004: "stats | Auth: Read". Its reaper retires only what every read hides already.
    "memory::stats": {},
}
WRITES = {
    "memory::save": {"text": "The user likes coffee."},
    "memory::update": {"id": "ID", "text": "The user likes green tea."},
    "memory::pin": {"id": "ID", "pinned": True},
    "memory::delete": {"id": "ID"},
}


def service_with(store: Store, clock: FixedClock, level: str) -> MemoryService:
    return MemoryService(
        store, Settings(conscious_access=level), emitter=RecordingEmitter(), clock=clock
    )


async def seeded(store: Store, clock: FixedClock, level: str) -> tuple[MemoryService, str]:
    service = service_with(store, clock, level)
    saved = await call(service, "memory::save", {"bank": "main", "text": "The user likes tea."})
    return service, str(saved["memory"]["id"])


def payload(template: dict[str, Any], mid: str) -> dict[str, Any]:
    return {"bank": "main", **{k: (mid if v == "ID" else v) for k, v in template.items()}}


def snapshot(data_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_dir)): p.read_bytes()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and p.suffix != ".lock" and "vectors" not in p.name
    }


@pytest.mark.parametrize("function_id", [*READS, *WRITES])
async def test_none_refuses_every_agent_call_and_changes_nothing(
    store: Store, clock: FixedClock, data_dir: Path, function_id: str
) -> None:
    service, mid = await seeded(store, clock, "none")
    await store.find("main").drain()  # type: ignore[union-attr]
    before = snapshot(data_dir)
    template = {**READS, **WRITES}[function_id]
    with pytest.raises(Forbidden, match=r"^forbidden: bank main gives agents no memory tools"):
        await call(service, function_id, payload(template, mid), AGENT)
    assert snapshot(data_dir) == before


@pytest.mark.parametrize("function_id", list(WRITES))
async def test_read_refuses_writes_and_changes_nothing(
    store: Store, clock: FixedClock, data_dir: Path, function_id: str
) -> None:
    service, mid = await seeded(store, clock, "read")
    await store.find("main").drain()  # type: ignore[union-attr]
    before = snapshot(data_dir)
    with pytest.raises(Forbidden, match=r"^forbidden: bank main lets agents read only"):
        await call(service, function_id, payload(WRITES[function_id], mid), AGENT)
    assert snapshot(data_dir) == before
    got = await call(service, "memory::get", {"bank": "main", "id": mid})
    assert got["memory"]["text"] == "The user likes tea." and got["memory"]["revision"] == 0


@pytest.mark.parametrize("function_id", list(READS))
async def test_read_allows_looking(store: Store, clock: FixedClock, function_id: str) -> None:
    service, mid = await seeded(store, clock, "read")
    result = await call(service, function_id, payload(READS[function_id], mid), AGENT)
    assert isinstance(result, dict)


@pytest.mark.parametrize("function_id", [*READS, *WRITES])
async def test_read_write_allows_the_agent_set(
    store: Store, clock: FixedClock, function_id: str
) -> None:
    service, mid = await seeded(store, clock, "read_write")
    template = {**READS, **WRITES}[function_id]
    await call(service, function_id, payload(template, mid), AGENT)


async def test_the_default_bank_is_what_an_unnamed_call_is_checked_against(
    store: Store, clock: FixedClock
) -> None:
    service = service_with(store, clock, "read")
    with pytest.raises(Forbidden):
        await call(service, "memory::save", {"text": "The user likes coffee."}, AGENT)
    assert (await call(service, "memory::list", {}))["total"] == 0


@pytest.mark.parametrize("via", ["cli", "rest", "console", "bus"])
async def test_people_are_never_limited(store: Store, clock: FixedClock, via: str) -> None:
    service, mid = await seeded(store, clock, "none")
    human = Caller.human(via)
    await call(service, "memory::save", {"bank": "main", "text": "The user likes coffee."}, human)
    await call(service, "memory::delete", {"bank": "main", "id": mid}, human)
    assert (await call(service, "memory::list", {"bank": "main"}, human))["total"] == 1


async def test_the_involuntary_path_works_at_none(store: Store, clock: FixedClock) -> None:
    """The hook injects and extraction writes even when agents get no memory tools."""
    service, _ = await seeded(store, clock, "none")
    plan = await service.injection("main", "do I like tea?")
    assert [hit.memory.text for hit in plan.memories] == ["The user likes tea."]
    chat, model = Transcript(size=10), Model()
    chat.say("user", "I also play the cello every Sunday.")
    model.replies.append(json.dumps({"memories": [{"op": "add", "text": "The user plays cello."}]}))
    extractor = Extractor(service, chat, model, FakeKeyValue())
    assert await extractor.extract(ExtractJob(session_id="s1", agent="planner"), "main") == 1
    listed = await call(service, "memory::list", {"bank": "main"})
    assert listed["total"] == 2


async def test_bank_functions_are_checked_on_the_bank_they_name(
    store: Store, clock: FixedClock
) -> None:
    service, _ = await seeded(store, clock, "read")
    with pytest.raises(Forbidden):
        await call(service, "memory::bank::delete", {"name": "main"}, AGENT)
    assert store.find("main") is not None
    # A call that addresses no bank is the permission manifest's business, not a bank's level.
    assert "banks" in await call(service, "memory::bank::list", {}, AGENT)


def test_forbidden_is_a_stable_code_mapped_to_403() -> None:
    assert Forbidden("x").to_dict() == {"code": "forbidden", "message": "x"}
    assert HTTP_STATUS["forbidden"] == 403


async def test_each_bank_has_its_own_level(store: Store, clock: FixedClock) -> None:
    """The configured default (read_write) for `main`; `diary` chose none, `wiki` read — and a
    change by `memory::bank::configure` applies to the very next call."""
    service = service_with(store, clock, "read_write")
    await call(service, "memory::bank::create", {"name": "diary", "conscious_access": "none"})
    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    save = {"text": "The user likes tea."}
    await call(service, "memory::save", {"bank": "main", **save}, AGENT)
    with pytest.raises(Forbidden, match="conscious_access: none"):
        await call(service, "memory::recall", {"bank": "diary", "query": "tea"}, AGENT)
    await call(service, "memory::recall", {"bank": "wiki", "query": "tea"}, AGENT)
    with pytest.raises(Forbidden, match="conscious_access: read"):
        await call(service, "memory::save", {"bank": "wiki", **save}, AGENT)
    await call(
        service, "memory::bank::configure", {"name": "wiki", "conscious_access": "read_write"}
    )
    await call(service, "memory::save", {"bank": "wiki", **save}, AGENT)
    # An agent may not raise its own level: configuring a bank is a change.
    with pytest.raises(Forbidden):
        await call(
            service,
            "memory::bank::configure",
            {"name": "diary", "conscious_access": "read_write"},
            AGENT,
        )
    listed = await call(service, "memory::bank::list", {})
    levels = {b["name"]: b["settings"]["conscious_access"] for b in listed["banks"]}
    assert levels == {"main": "read_write", "diary": "none", "wiki": "read_write"}


HUMAN_OWNED = {
    "memory::bank::create": {"name": "team"},
    "memory::bank::configure": {"name": "main", "conscious_access": "none"},
    "memory::bank::delete": {"name": "main"},
    "memory::forget-subject": {"bank": "main", "subject": "ana", "confirm": "destructive"},
    "memory::rule::set": {"bank": "main", "name": "tone", "content": "Be brief."},
    "memory::supersede": {"bank": "main", "id": "ID", "superseded_by": "ID"},
    "memory::import": {"bank": "main", "records": []},
    "memory::compact": {"bank": "main"},
    "memory::reload": {},
}


@pytest.mark.parametrize("function_id", list(HUMAN_OWNED))
async def test_read_write_gives_agents_no_human_owned_function(
    store: Store, clock: FixedClock, data_dir: Path, function_id: str
) -> None:
    """read_write lets an agent store, update, delete and pin memories (seed 004) — trashing or
    reconfiguring the bank, erasing a subject, rewriting its rules, importing, compacting or
    reloading stay a person's, whatever door the agent's call comes through."""
    service, mid = await seeded(store, clock, "read_write")
    await store.find("main").drain()  # type: ignore[union-attr]
    before = snapshot(data_dir)
    template = {k: (mid if v == "ID" else v) for k, v in HUMAN_OWNED[function_id].items()}
    for door in ("rest", "mcp"):
        agent = Caller.for_agent(door, session_id="s1", agent="planner")
        with pytest.raises(Forbidden, match=r"^forbidden: .*people"):
            await call(service, function_id, template, agent)
    assert snapshot(data_dir) == before
    assert store.find("main") is not None and store.find("team") is None


async def test_on_the_bus_the_engines_manifest_decides_the_human_owned_functions(
    store: Store, clock: FixedClock
) -> None:
    """The shipped manifest denies agents these functions; an operator who grants one (say
    `memory::rule::set`) to an agent means it, and the worker does not overrule the engine."""
    service, _ = await seeded(store, clock, "read_write")
    payload = HUMAN_OWNED["memory::rule::set"]
    done = await call(service, "memory::rule::set", payload, AGENT)
    assert done["exists"] is True


async def test_an_agent_lists_only_the_banks_it_may_see(store: Store, clock: FixedClock) -> None:
    """A bank at `none` is invisible to agents: no name, no counts in `memory::bank::list`."""
    service = service_with(store, clock, "read_write")
    await call(service, "memory::bank::create", {"name": "diary", "conscious_access": "none"})
    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    await call(service, "memory::save", {"bank": "diary", "text": "The user feels low today."})
    await call(service, "memory::save", {"bank": "main", "text": "The user likes tea."})
    listed = await call(service, "memory::bank::list", {}, AGENT)
    assert sorted(b["name"] for b in listed["banks"]) == ["main", "wiki"]
    everything = await call(service, "memory::bank::list", {}, Caller.human("cli"))
    assert sorted(b["name"] for b in everything["banks"]) == ["diary", "main", "wiki"]


async def test_a_read_only_agents_recall_counts_no_access(
    store: Store, clock: FixedClock, data_dir: Path
) -> None:
    """At `read` an agent's recall changes nothing — not even the access counts that decide
    which memory a full bank evicts next; a person's recall still counts."""
    service, mid = await seeded(store, clock, "read")
    await store.find("main").drain()  # type: ignore[union-attr]
    before = snapshot(data_dir)
    found = await call(service, "memory::recall", {"bank": "main", "query": "tea"}, AGENT)
    assert [m["memory"]["id"] for m in found["memories"]] == [mid]
    assert snapshot(data_dir) == before
    got = await call(service, "memory::get", {"bank": "main", "id": mid})
    assert got["memory"].get("access_count") in (None, 0)
    await call(service, "memory::recall", {"bank": "main", "query": "tea"}, Caller.human("cli"))
    got = await call(service, "memory::get", {"bank": "main", "id": mid})
    assert got["memory"]["access_count"] == 1


async def test_a_read_only_agent_may_match_lessons_but_records_no_delivery(
    store: Store, clock: FixedClock, data_dir: Path
) -> None:
    """`memory::lessons::match` without a conversation only looks, so `read` allows it; with one
    it writes the conversation's delivery ledger, which `read` refuses, leaving it unwritten."""
    service = service_with(store, clock, "read")
    lesson = {
        "bank": "main",
        "text": "Editing the proto files needs make gen.",
        "category": "lesson",
        "title": "Run make gen after editing protos",
        "recommendation": "After editing proto files, run make gen.",
        "anchors": {"files": ["proto/user.proto"]},
    }
    await call(service, "memory::save", lesson)
    await store.find("main").drain()  # type: ignore[union-attr]
    before = snapshot(data_dir)
    match = {"bank": "main", "tool": "Read", "arguments": {"file_path": "proto/user.proto"}}
    found = await call(service, "memory::lessons::match", match, AGENT)
    assert [c["title"] for c in found["cards"]] == [lesson["title"]]
    with pytest.raises(Forbidden, match="conscious_access: read"):
        await call(service, "memory::lessons::match", {**match, "conversation": "c1"}, AGENT)
    assert snapshot(data_dir) == before


async def test_a_read_only_agent_may_preview_but_not_record_a_conversations_memories(
    store: Store, clock: FixedClock
) -> None:
    """A preview for a `conversation` records what it hands (the once-per-conversation ledger):
    a write `read` refuses; the dry run stays a look."""
    service, mid = await seeded(store, clock, "read")
    shown = await call(service, "memory::preview", {"bank": "main", "query": "tea"}, AGENT)
    assert [m["memory"]["id"] for m in shown["memories"]] == [mid]
    with pytest.raises(Forbidden, match="conscious_access: read"):
        ask = {"bank": "main", "query": "tea", "conversation": "c1"}
        await call(service, "memory::preview", ask, AGENT)
