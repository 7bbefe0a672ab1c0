"""Concurrency: 64 writer tasks in one process (one bank, and four), CLI processes side by side on
one data dir, and writes racing a reload. No lost update, no duplicate id for one text, revisions
strictly increasing per id in the log, replay equal to the live state, never two writers."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import Conflict, MemoryNotFound
from memory_worker.core.models import Memory
from memory_worker.core.text import fingerprint, normalize
from memory_worker.storage.bank import Bank

from ..test_cli import finish_all, kill_all, start_cli
from ..test_properties import CONCURRENT_POOL
from .helpers import answers, open_service

WRITERS = 64
POOL = (*CONCURRENT_POOL, "The user has a dog named Pipoca")
Acked = list[tuple[str, dict[str, Any]]]  # (bank, memory as answered)


async def _writer(
    service: MemoryService, rng: random.Random, banks: list[str], acked: Acked
) -> None:
    for _ in range(6):
        payload: dict[str, Any]
        bank = rng.choice(banks)
        ids = sorted({fingerprint(text) for text in POOL})
        kind = rng.choice(("save", "save", "save", "update", "pin", "delete", "supersede"))
        if kind == "save":
            function_id, payload = "memory::save", {"text": rng.choice(POOL), "tags": ["t"]}
        elif kind == "update":
            change = rng.choice(
                (
                    {"tags": [rng.choice(("a", "b", "c"))]},
                    {"entities": ["ana"]},
                    {"text": f"An edited note {rng.random():.9f}"},
                )
            )
            function_id, payload = "memory::update", {"id": rng.choice(ids), **change}
        elif kind == "pin":
            function_id, payload = (
                "memory::pin",
                {"id": rng.choice(ids), "pinned": rng.random() < 0.5},
            )
        elif kind == "delete":
            function_id, payload = "memory::delete", {"id": rng.choice(ids)}
        else:
            target, winner = rng.sample(ids, 2)
            function_id = "memory::supersede"
            payload = {"id": target, "superseded_by": winner, "reinforce": rng.random() < 0.5}
        try:
            result = await catalog.call(service, function_id, {"bank": bank, **payload})
        except (Conflict, MemoryNotFound):
            continue  # pinned, retired, an edited-away id: refused whole, which is allowed
        acked.append((bank, result["memory"]))
        await asyncio.sleep(0)  # hand the loop over between calls, as separate callers would


def _log_revisions(data: Path, bank: str) -> dict[str, list[int]]:
    revisions: dict[str, list[int]] = defaultdict(list)
    for line in (data / bank / "memories.jsonl").read_bytes().splitlines():
        record = Memory.model_validate_json(line)
        revisions[record.id].append(record.revision)
    return revisions


@pytest.mark.parametrize("bank_count", [1, 4])
async def test_64_concurrent_writers_lose_no_update_and_replay_to_the_live_state(
    tmp_path: Path, bank_count: int
) -> None:
    data = tmp_path / "data"
    banks = ["main", "work", "notes", "ops"][:bank_count]
    service = open_service(data)
    try:
        for bank in banks:
            for text in POOL:
                await catalog.call(service, "memory::save", {"bank": bank, "text": text})
        acked: Acked = []
        rng = random.Random(bank_count)
        writers = [
            _writer(service, random.Random(rng.random()), banks, acked) for _ in range(WRITERS)
        ]
        await asyncio.gather(*writers)
        assert len(acked) > WRITERS
        live = await answers(service)
    finally:
        await service.store.close()

    for bank in banks:
        memories = {m["id"]: m for m in live[bank]["memories"]["memories"]}
        live_texts = [normalize(m["text"]) for m in memories.values() if "invalid_at" not in m]
        assert len(live_texts) == len(set(live_texts)), "two live records for one text"
        # Every acknowledged state of an id has its own revision, and none is overwritten by
        # another with the same revision (a lost update).
        by_revision: dict[tuple[str, int], dict[str, Any]] = {}
        for where, memory in acked:
            if where != bank:
                continue
            key = (memory["id"], memory["revision"])
            assert by_revision.setdefault(key, memory) == memory, f"lost update of {key}"
        for (memory_id, revision), memory in by_revision.items():
            final = memories[memory_id]
            assert final["revision"] >= revision
            if final["revision"] == revision:
                assert final == memory
        for memory_id, revisions in _log_revisions(data, bank).items():
            assert revisions == sorted(set(revisions)), f"{memory_id}: revisions {revisions}"

    reopened = open_service(data)
    try:
        assert await answers(reopened) == live
    finally:
        await reopened.store.close()


@pytest.mark.timeout(360)  # finish_all's deadline for 12 side by side is 240 s
def test_concurrent_cli_processes_share_one_data_dir_one_at_a_time(tmp_path: Path) -> None:
    """Twelve processes at once: each waits for the lock (up to 10 s a holder), none is refused,
    and the log holds exactly one line per mutation (two writers would tear or duplicate lines)."""
    data = tmp_path / "data"
    commands: list[tuple[str, ...]] = []
    for text in ("The user likes tea", "The user likes chess", "The user likes Porto") * 2:
        commands.append(("trigger", "memory::save", f"text={text}"))
    for rule in ("style", "tone"):
        commands.append(("trigger", "memory::rule::set", f"name={rule}", f"content=Rule {rule}."))
    for n in range(2):
        batch = tmp_path / f"batch-{n}.jsonl"
        lines = [
            {"function_id": "memory::save", "payload": {"bank": "work", "text": f"Batch {n} {i}"}}
            for i in range(3)
        ]
        pin = {"bank": "work", "id": fingerprint(f"Batch {n} 0"), "pinned": True}
        lines.append({"function_id": "memory::pin", "payload": pin})
        batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
        commands.append(("call", "--batch", str(batch)))
        rows = tmp_path / f"rows-{n}.jsonl"
        rows.write_text("".join(json.dumps({"text": f"Row {n} {i}"}) + "\n" for i in range(5)))
        commands.append(("import", str(rows), "--bank", "work"))
    procs: list[subprocess.Popen[str]] = []
    try:
        for command in commands:
            procs.append(start_cli(*command, "--data-dir", str(data), cwd=tmp_path))
        outcomes = finish_all(procs)
    finally:
        kill_all(procs)
    failed = [
        (c, o.stderr.strip()[-300:]) for c, o in zip(commands, outcomes, strict=True) if o.code
    ]
    assert failed == []
    for outcome in outcomes:
        if outcome.stdout.startswith('{"result"') or outcome.stdout.startswith('{"error"'):
            assert all("result" in json.loads(line) for line in outcome.stdout.splitlines())

    main = (data / "main" / "memories.jsonl").read_bytes().splitlines()
    work = (data / "work" / "memories.jsonl").read_bytes().splitlines()
    main_records = [Memory.model_validate_json(line) for line in main]
    work_records = [Memory.model_validate_json(line) for line in work]
    assert len(main_records) == 6  # three creations, three reinforcements
    assert len(work_records) == 2 * 4 + 2 * 5
    latest = {r.id: r for r in main_records}
    assert sorted(r.corroboration for r in latest.values()) == [1, 1, 1]
    assert len({r.id for r in work_records}) == 2 * 3 + 2 * 5
    assert sorted(p.name for p in (data / "main" / "rules").iterdir()) == ["style.md", "tone.md"]


WRITE_WINDOW_S = 1.0  # ample for one write to land while the reload is held; a worker that
# serializes writes behind the reload makes it wait instead, and the test then goes on after this


@pytest.mark.parametrize("write", ["save-into-a-new-bank", "rule-set"])
async def test_a_write_acknowledged_during_a_reload_stays_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """`memory::reload` scans the data dir and replays each bank in a thread while the loop keeps
    serving. A save that creates a bank, or a rule write, acknowledged in that window must still
    be served once the reload has installed its banks (it may also wait for the reload)."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        await catalog.call(service, "memory::save", {"text": "The user likes tea"})
        real_load = Bank.load.__func__  # type: ignore[attr-defined]
        replayed, resume = threading.Event(), threading.Event()

        def load_then_pause(cls: type[Bank], name: str, path: Path, *rest: Any) -> Bank:
            bank: Bank = real_load(cls, name, path, *rest)
            if not replayed.is_set():  # the reload has read `main`: hold it there
                replayed.set()
                resume.wait(10)
            return bank

        monkeypatch.setattr(Bank, "load", classmethod(load_then_pause))
        reload = asyncio.create_task(catalog.call(service, "memory::reload", {}))
        await asyncio.to_thread(replayed.wait, 10)
        if write == "rule-set":
            payload = {"name": "style", "content": "Be brief."}
            written = asyncio.create_task(catalog.call(service, "memory::rule::set", payload))
        else:
            payload = {"bank": "work", "text": "A work fact"}
            written = asyncio.create_task(catalog.call(service, "memory::save", payload))
        await asyncio.wait({written}, timeout=WRITE_WINDOW_S)
        landed_inside = written.done()
        resume.set()
        await reload
        await written
        if write == "rule-set":
            rules = (await catalog.call(service, "memory::rule::list", {}))["rules"]
            seen = [(r["name"], r["content"]) for r in rules]
            assert seen == [("style", "Be brief.")], f"landed inside the reload: {landed_inside}"
        else:
            page = await catalog.call(service, "memory::list", {"bank": "work"})
            texts = [m["text"] for m in page["memories"]]
            assert texts == ["A work fact"], f"landed inside the reload: {landed_inside}"
    finally:
        await service.store.close()
