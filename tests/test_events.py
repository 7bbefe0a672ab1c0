"""The bus emitter's delivery guarantee: at-least-once, a failed fan-out retried a bounded number
of times with backoff, the same event (same `event_id`) each time; other bindings unaffected."""

from __future__ import annotations

from typing import Any

from iii.triggers import TriggerConfig

from memory_worker.adapters.bus.events import MAX_ATTEMPTS, BindingTable, BusEmitter
from memory_worker.app.ports import ITEM_CHANGED


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
