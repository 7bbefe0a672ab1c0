"""A server serves before it replays its banks (issue 12, lazy banks): it opens its data dir
lazily, answers at once, and replays, embeds and sweeps every bank in the background, one bank at
a time; a call naming a bank the background has not reached replays that bank at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.retention import DAY_MS
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter
from .rawhttp import request

PERSON = Caller.human("cli")
BANKS = ("alpha", "bravo", "charlie")
# Long enough ago that every `context` memory is past the 30 days its banks keep them.
LONG_AGO = FixedClock(FixedClock.START_MS - 400 * DAY_MS)


async def _seeded(data_dir: Path) -> dict[str, dict[str, str]]:
    """Each bank: one expired memory and one kept, written by a store that is then closed."""
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=LONG_AGO)
    ids: dict[str, dict[str, str]] = {}
    for name in BANKS:
        await catalog.call(
            service, "memory::bank::create", {"name": name, "retention": {"context": 30}}, PERSON
        )
        ids[name] = {}
        for key, text, category in (
            ("expired", f"The {name} team is debugging a flaky test today.", "context"),
            ("kept", f"The {name} team ships on Fridays.", "fact"),
        ):
            payload = {"bank": name, "text": text, "category": category}
            answer = await catalog.call(service, "memory::save", payload, PERSON)
            ids[name][key] = answer["memory"]["id"]
    await service.close()
    await store.close()
    return ids


def _ids(answer: dict[str, Any]) -> set[str]:
    return {m["id"] for m in answer["memories"]}


async def test_a_server_serves_before_its_banks_replay_then_boots_each_in_the_background(
    data_dir: Path,
) -> None:
    ids = await _seeded(data_dir)
    emitter = RecordingEmitter()
    server = StandaloneServer(Settings(), data_dir, port=0)
    await server.start()
    try:
        assert server.service is not None and server.booting is not None
        server.service.emitter = emitter
        store = server.service.store
        assert store.pending() == sorted(BANKS)  # serving, and nothing replayed yet
        assert server.url is not None
        headers = {"Content-Type": "application/json"}
        body = {"bank": "charlie"}
        answer = await asyncio.to_thread(
            request, server.url, "POST", "/memory/list", body, headers=headers
        )
        assert answer.status == 200
        assert {ids["charlie"]["kept"]} <= _ids(answer.json())
        # One expired memory a bank, retired: by the boot's sweep, or charlie's by the reap its
        # listing asked for (the listing left it out), whichever came first.
        assert await server.booting in (len(BANKS) - 1, len(BANKS))
        assert ids["charlie"]["expired"] not in _ids(answer.json())
        await server.service.settle()
        assert store.pending() == []
        retired = [e["memory"]["id"] for e in emitter.of(ITEM_CHANGED) if e["reason"] == "expired"]
        assert sorted(retired) == sorted(bank["expired"] for bank in ids.values())
        for name in BANKS:
            bank = store.get(name)
            assert bank.get(ids[name]["kept"]) is not None
            expired = bank.get(ids[name]["expired"])
            assert expired is not None and not expired.live
    finally:
        await server.close()


async def test_closing_a_server_mid_boot_leaves_the_banks_it_never_reached_untouched(
    data_dir: Path,
) -> None:
    await _seeded(data_dir)
    logs = {name: (data_dir / name / "memories.jsonl").read_bytes() for name in BANKS}
    server = StandaloneServer(Settings(), data_dir, port=0)
    await server.start()
    booting = server.booting
    await server.close()  # before the background boot ever ran
    assert booting is not None and booting.cancelled()
    assert {name: (data_dir / name / "memories.jsonl").read_bytes() for name in BANKS} == logs
    again = Store.open(data_dir, holder=HOLDER)  # the lock was released
    try:
        assert sorted(again.names()) == sorted(BANKS)
    finally:
        await again.close()
