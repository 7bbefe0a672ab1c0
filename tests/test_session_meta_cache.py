"""The session-manager client's meta cache (bank selection, SPEC C12): a `session::meta-updated`
drops what it kept, even while a lookup that started before it is still in flight."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from memory_worker.adapters.bus.siblings import BusCall, SessionsClient
from memory_worker.harness.sessions import SessionRecord, SessionState


class _SessionManager:
    """`session::get` answering the metadata of the moment it was asked; `hold` parks a reply."""

    def __init__(self) -> None:
        self.bank = "work"
        self.hold: asyncio.Event | None = None
        self.asked = asyncio.Event()

    async def __call__(self, function_id: str, payload: dict[str, Any], timeout_ms: int) -> Any:
        meta = {"metadata": {"memory_bank": self.bank}}  # read when asked, as the manager does
        self.asked.set()
        if self.hold is not None:
            await self.hold.wait()
        return {"meta": meta}


async def test_a_meta_update_during_a_lookup_is_not_hidden_by_its_stale_reply() -> None:
    manager = _SessionManager()
    client = SessionsClient(cast(BusCall, manager))
    manager.hold = asyncio.Event()
    lookup = asyncio.create_task(client.get("s1"))
    await manager.asked.wait()
    # The user switches the session's bank while that lookup's reply is on its way.
    manager.bank = "personal"
    client.invalidate("s1")
    manager.hold.set()
    assert (await lookup) == {"metadata": {"memory_bank": "work"}}  # it was asked before
    manager.hold = None
    # The next turn must see the new bank, not the stale reply kept for the cache's TTL.
    assert await client.get("s1") == {"metadata": {"memory_bank": "personal"}}


async def test_a_lookup_after_an_update_is_cached_again() -> None:
    manager = _SessionManager()
    client = SessionsClient(cast(BusCall, manager))
    assert await client.get("s1") == {"metadata": {"memory_bank": "work"}}
    manager.bank = "personal"
    assert await client.get("s1") == {"metadata": {"memory_bank": "work"}}  # cached
    client.invalidate("s1")
    assert await client.get("s1") == {"metadata": {"memory_bank": "personal"}}


class _HeldState:
    """A state worker whose `get` can be parked, holding one session record."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.hold: asyncio.Event | None = None
        self.asked = asyncio.Event()

    async def get(self, scope: str, key: str) -> Any:
        value = self.values.get(key)
        self.asked.set()
        if self.hold is not None:
            await self.hold.wait()
        return value

    async def set(self, scope: str, key: str, value: Any) -> None:
        self.values[key] = value

    async def delete(self, scope: str, key: str) -> None:
        self.values.pop(key, None)


async def test_a_session_deleted_during_a_read_of_its_record_stays_deleted() -> None:
    kv = _HeldState()
    kv.values["parent"] = SessionRecord(system="", turns={"t1": "work"}).to_json()
    state = SessionState(kv)
    kv.hold = asyncio.Event()
    reading = asyncio.create_task(state.get("parent"))
    await kv.asked.wait()
    await state.drop("parent")  # session::deleted while that read is on its way
    kv.hold.set()
    await reading
    kv.hold = None
    # A sub-agent of that parent must find no record (no memory), not the parent turn's bank.
    assert await state.get("parent") is None
