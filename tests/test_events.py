"""The bus emitter's delivery guarantee: at-least-once, a failed fan-out retried a bounded number
of times with backoff, the same event (same `event_id`) each time; other bindings unaffected."""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import ANY

import pytest
from iii.triggers import TriggerConfig

from memory_worker.adapters.bus.events import MAX_ATTEMPTS, BindingTable, BusEmitter
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

from .fakes import FixedClock


class Client:
    """`trigger_async` of the SDK: the first `fail[function_id]` sends of a function raise."""

    def __init__(self, fail: dict[str, int]) -> None:
        self.fail = dict(fail)
        self.sent: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}

    async def trigger_async(self, request: dict[str, Any]) -> None:
        function_id = request["function_id"]
        self.attempts[function_id] = self.attempts.get(function_id, 0) + 1
        if self.fail.get(function_id, 0) > 0:
            self.fail[function_id] -= 1
            raise ConnectionError("engine connection closed mid-send")
        self.sent.append(request)


async def emitter_with(client: Client, *function_ids: str, **options: Any) -> BusEmitter:
    table = BindingTable(ITEM_CHANGED)
    for i, function_id in enumerate(function_ids):
        await table.register_trigger(TriggerConfig(id=f"b{i}", function_id=function_id, config={}))
    options.setdefault("backoff_s", 0.0)
    return BusEmitter(client, {ITEM_CHANGED: table}, **options)  # type: ignore[arg-type]


EVENT = {"event_type": "created", "bank": "main", "memory": {}, "event_id": "e" * 32}


async def test_a_failed_delivery_is_retried_with_the_same_event() -> None:
    client = Client({"sub::flaky": MAX_ATTEMPTS - 1})
    emitter = await emitter_with(client, "sub::flaky", "sub::fine")
    emitter.emit(ITEM_CHANGED, EVENT)
    await emitter.flush()
    delivered = {r["function_id"]: r["payload"] for r in client.sent}
    assert delivered == {"sub::flaky": EVENT, "sub::fine": EVENT}
    assert client.attempts == {"sub::flaky": MAX_ATTEMPTS, "sub::fine": 1}


async def test_retries_are_bounded() -> None:
    client = Client({"sub::down": 1_000})
    emitter = await emitter_with(client, "sub::down")
    emitter.emit(ITEM_CHANGED, EVENT)
    await emitter.flush()
    assert client.sent == [] and client.attempts == {"sub::down": MAX_ATTEMPTS}


async def test_backoff_grows_between_attempts() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the delays, without waiting them out
        waits.append(seconds)

    client = Client({"sub::flaky": 2})
    emitter = await emitter_with(client, "sub::flaky", backoff_s=0.5, sleep=sleep)
    emitter.emit(ITEM_CHANGED, EVENT)
    await emitter.flush()
    assert waits == [0.5, 1.0] and len(client.sent) == 1


async def test_a_subject_binding_names_the_person_as_memories_store_them() -> None:
    """A subject is stored cleaned (whitespace collapsed, NFC): a binding for "José" typed
    decomposed, or for "Ana  Maria" with two spaces, never heard of that person's memories."""
    table = BindingTable(ITEM_CHANGED)
    for i, subject in enumerate(("Jose\u0301", "Ana  Maria")):
        config = {"subject": subject}
        await table.register_trigger(
            TriggerConfig(id=f"b{i}", function_id=f"sub::{i}", config=config)
        )
    assert [b.function_id for b in table.matching("main", "Jos\u00e9")] == ["sub::0"]
    assert [b.function_id for b in table.matching("main", "Ana Maria")] == ["sub::1"]


async def test_a_subject_binding_hears_the_person_in_any_case() -> None:
    """A subject is one person whatever its case: a binding for "ana" heard nothing of the
    memories saved about "Ana" (and would miss their erasure)."""
    table = BindingTable(ITEM_CHANGED)
    await table.register_trigger(
        TriggerConfig(id="b0", function_id="sub::ana", config={"subject": "ana"})
    )
    for spelling in ("Ana", "ANA", "ana"):
        assert [b.function_id for b in table.matching("main", spelling)] == ["sub::ana"]
    assert table.matching("main", "Bob") == []


class TestAMemoryMovedToAnotherSubject:
    """`memory::update` may give a memory another subject: its event is about the new one, so a
    binding for the old subject never heard that the memory left its view (a live view of Ana's
    memories kept showing one that was now Bruno's, or no longer anyone's but the pool's)."""

    TEXT = "Prefers the window seat on long flights."

    async def _moved(
        self,
        store: Store,
        clock: FixedClock,
        before: str | None,
        after: str,
        *,
        by_import: bool = False,
    ) -> tuple[str, dict[str, list[dict[str, Any]]]]:
        client = Client({})
        table = BindingTable(ITEM_CHANGED)
        for who in ("ana", "bruno", None):
            config = {} if who is None else {"subject": who}
            await table.register_trigger(
                TriggerConfig(id=f"b-{who}", function_id=f"sub::{who}", config=config)
            )
        emitter = BusEmitter(client, {ITEM_CHANGED: table}, backoff_s=0.0)  # type: ignore[arg-type]
        service = MemoryService(store, Settings(), emitter=emitter, clock=clock)
        person = Caller.human("cli")
        await catalog.call(
            service, "memory::bank::create", {"name": "main", "subject_scoping": True}, person
        )
        saved = await catalog.call(
            service, "memory::save", {"text": self.TEXT, "subject": before}, person
        )
        await emitter.flush()
        client.sent.clear()
        memory_id = saved["memory"]["id"]
        if by_import:  # the same id imported again, about someone else
            record = {"id": memory_id, "text": self.TEXT, "subject": after}
            await catalog.call(
                service, "memory::import", {"bank": "main", "records": [record]}, person
            )
        else:
            await catalog.call(
                service, "memory::update", {"id": memory_id, "subject": after}, person
            )
        await emitter.flush()
        heard: dict[str, list[dict[str, Any]]] = {}
        for request in client.sent:
            heard.setdefault(request["function_id"], []).append(request["payload"])
        return memory_id, heard

    @pytest.mark.parametrize("by_import", [False, True], ids=["update", "import"])
    async def test_the_old_subjects_binding_hears_it_left_without_its_text(
        self, store: Store, clock: FixedClock, by_import: bool
    ) -> None:
        memory_id, heard = await self._moved(store, clock, "ana", "bruno", by_import=by_import)
        assert heard["sub::ana"] == [
            {
                "event_type": "moved",
                "bank": "main",
                "id": memory_id,
                "subject": "ana",
                "memory": {"id": memory_id, "subject": "ana"},
                "event_id": ANY,
            }
        ]
        [updated] = heard["sub::bruno"]
        assert updated["event_type"] == "updated" and updated["memory"]["subject"] == "bruno"
        assert "ana" not in json.dumps(updated), "the new subject's view learns no one else"
        [everything] = heard["sub::None"]  # the whole bank's view: the change, with its origin
        assert everything["previous_subject"] == "ana" and everything["memory"]["text"]

    async def test_a_general_memory_given_to_someone_leaves_the_others_views(
        self, store: Store, clock: FixedClock
    ) -> None:
        memory_id, heard = await self._moved(store, clock, None, "bruno")
        assert [(e["event_type"], e["memory"]) for e in heard["sub::ana"]] == [
            ("moved", {"id": memory_id})
        ]
        assert [e["event_type"] for e in heard["sub::bruno"]] == ["updated"]
