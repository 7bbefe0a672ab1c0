"""`memory::forget-subject`: every trace of one subject erased — log revisions, vectors, trashed
copies — so a grep of the data dir finds none of their texts; general memories and other people's
untouched; confirmed, refused while pinned, one event per id, all-or-nothing under kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import threading
import time
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from aiohttp.test_utils import TestClient, TestServer

from memory_worker.adapters.standalone import build_app
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core import transitions
from memory_worker.core.errors import BankNotFound, Conflict, InvalidInput, StorageError
from memory_worker.harness.capture import CaptureRunner
from memory_worker.harness.extractor import Extractor
from memory_worker.harness.turns import TurnPipeline
from memory_worker.storage import bank as bank_module
from memory_worker.storage import erasure, files, log
from memory_worker.storage.capture import CAPTURE_FILE, CaptureQueue, erase_jobs
from memory_worker.storage.deliveries import FileDeliveries
from memory_worker.storage.snapshot import SNAPSHOT_FILE
from memory_worker.storage.store import Store
from memory_worker.storage.vectors import VECTORS_FILE, text_hash

from .capture_fakes import ScriptedModel
from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter
from .test_extractor import Model, Transcript
from .test_pregenerate import Chat, Hooked, Queue

PERSON = Caller.human("cli")
ANA_TEXTS = [
    "Ana keeps her spare key under the blue flowerpot.",
    "Ana's blood type is AB negative.",
    "Ana is moving to Porto in March.",
]
ANA_EDITED = "Ana is moving to Braga in April."  # a later revision of the third
BRUNO_TEXT = "Bruno keeps his spare key under the doormat."
GENERAL_TEXT = "The building's front door code changes every Monday."


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, PERSON)


def _grep(root: Path, needle: str) -> list[str]:
    """Every file under `root` whose bytes contain `needle` (as `grep -r` would find it)."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


async def _populate(service: MemoryService) -> dict[str, list[str]]:
    """Ana's memories with every kind of trace: revisions, a tombstone, vectors, a trashed copy."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    await call(service, "memory::save", text="Ana's old locker is number 12.", subject="ana")
    await call(service, "memory::bank::delete", name="main")  # a copy in .trash/ holds it
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    ids: dict[str, list[str]] = {"ana": [], "other": []}
    for text in ANA_TEXTS:
        saved = await call(service, "memory::save", text=text, subject="ana")
        ids["ana"].append(saved["memory"]["id"])
    await call(service, "memory::update", id=ids["ana"][2], text=ANA_EDITED)
    await call(service, "memory::delete", id=ids["ana"][1])  # a tombstone still holds the text
    bruno = await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
    general = await call(service, "memory::save", text=GENERAL_TEXT)
    ids["other"] = [bruno["memory"]["id"], general["memory"]["id"]]
    bank = service.store.get("main")
    pairs = [(m, [1.0, 0.0, 0.0]) for m in bank.memories.values() if m.live]
    await bank.store_vectors("test-model", pairs)
    return ids


async def _erase_ana_past_its_intent(
    service: MemoryService, bank: bank_module.Bank, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `forget-subject` of "ana" whose log rewrite the disk refuses (full): its intent is
    written and stays, for the bank's next load (or a retry) to finish."""

    async def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("cannot rewrite memories.jsonl: No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(bank, "rewrite", disk_full)
        with pytest.raises(StorageError):
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")


class TestForget:
    async def test_a_grep_of_the_data_dir_finds_nothing_of_theirs_and_the_rest_stays(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        ids = await _populate(service)
        assert _grep(data_dir, "flowerpot") and _grep(data_dir, "locker")  # the traces exist
        assert ids["ana"][0] in (data_dir / "main" / "vectors.jsonl").read_text()
        emitter.clear()
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert sorted(out["erased"]) == sorted(ids["ana"])
        assert out["trash_copies"] == 1
        for needle in ("flowerpot", "AB negative", "Porto", "Braga", "locker", *ids["ana"]):
            assert _grep(data_dir, needle) == [], needle
        for needle in (BRUNO_TEXT, GENERAL_TEXT):
            assert _grep(data_dir, needle.split()[-1].rstrip(".")), needle
        assert not (data_dir / "main" / erasure.INTENT_FILE).exists()
        # One event per erased id, with no text; nothing else announced.
        assert emitter.of(ITEM_CHANGED) == [
            {
                "event_type": "erased",
                "bank": "main",
                "id": i,
                "subject": "ana",
                # The seed's payload shape (`memory` always there), with nothing but identity.
                "memory": {"id": i, "subject": "ana"},
                "reason": "forget-subject",
                "event_id": ANY,
            }
            for i in sorted(ids["ana"])
        ]
        listed = await call(service, "memory::list", include_superseded=True)
        assert sorted(m["id"] for m in listed["memories"]) == sorted(ids["other"])
        recalled = await call(service, "memory::recall", query="spare key", subject="bruno")
        assert [m["memory"]["id"] for m in recalled["memories"]] == [ids["other"][0]]
        again = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert again["erased"] == []  # idempotent

    async def test_a_hand_edit_the_erasure_reads_first_is_announced_apart_from_the_erased(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        """The rewrite reads the log as it is on disk: a line a person removed by hand, which
        the watcher had not picked up yet, is RAM's after it and no reload announces it later.
        It is announced as a reload would (`deleted`, edited by hand); their memories only as
        `erased`, never with their text."""
        ids = await _populate(service)
        path = data_dir / "main" / "memories.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(line for line in lines if b"door code" not in line))
        emitter.clear()
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        events = [
            (e["event_type"], e["memory"]["id"], e.get("reason")) for e in emitter.of(ITEM_CHANGED)
        ]
        assert sorted(events) == sorted(
            [("erased", i, "forget-subject") for i in ids["ana"]]
            + [("deleted", ids["other"][1], "edited by hand")]
        )
        assert await service.reload_bank("main") == "unchanged"

    @pytest.mark.parametrize("edit", ["pinned", "moved"])
    async def test_a_hand_edit_not_read_yet_decides_what_is_theirs_and_what_is_pinned(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter, edit: str
    ) -> None:
        """A person pinned one of their memories in `memories.jsonl` (or moved it to someone
        else) and asked for the erasure before the watcher read the edit: the pinned check and
        the ids erased were RAM's, so the rewrite erased a pinned memory, or announced `erased`
        for one the log keeps (moved to bruno, live). The edit is read first, as a reload does."""
        ids = await _populate(service)
        changed = ids["ana"][0]
        path = data_dir / "main" / "memories.jsonl"
        record = [json.loads(line) for line in path.read_bytes().splitlines()]
        last = [r for r in record if r["id"] == changed][-1]
        last["revision"] += 1
        last.update({"pinned": True} if edit == "pinned" else {"subject": "bruno"})
        for key in ("batch", "crc"):
            last.pop(key, None)
        with path.open("ab") as out:
            out.write(json.dumps(last).encode() + b"\n")
        emitter.clear()
        if edit == "pinned":
            with pytest.raises(Conflict, match="pinned"):
                await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
            kept = (await call(service, "memory::get", id=changed))["memory"]
            assert kept["pinned"] is True and kept.get("invalid_at") is None
            return
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert changed not in out["erased"]
        erased = [e["id"] for e in emitter.of(ITEM_CHANGED) if e["event_type"] == "erased"]
        assert changed not in erased
        moved = (await call(service, "memory::get", id=changed))["memory"]
        assert moved["subject"] == "bruno" and moved.get("invalid_at") is None

    @pytest.mark.parametrize("confirm", [None, "", "yes", "destroy"])
    async def test_without_the_confirmation_nothing_changes(
        self, service: MemoryService, data_dir: Path, confirm: str | None
    ) -> None:
        await _populate(service)
        before = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
        with pytest.raises(InvalidInput, match='requires confirm: "destructive"'):
            await call(service, "memory::forget-subject", subject="ana", confirm=confirm)
        assert {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()} == before

    async def test_a_pinned_memory_about_them_refuses_the_whole_erasure(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        ids = await _populate(service)
        await call(service, "memory::pin", id=ids["ana"][0], pinned=True)
        with pytest.raises(Conflict, match=r"pinned.*unpin them first — nothing was erased"):
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert _grep(data_dir, "flowerpot") and _grep(data_dir, "Porto")

    async def test_a_pin_still_being_written_when_the_erasure_starts_refuses_it(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        text = "Ana's blood type is AB negative."
        saved = await call(service, "memory::save", text=text, subject="ana")
        pin = call(service, "memory::pin", id=saved["memory"]["id"], pinned=True)
        forget = call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        pinned, forgot = await asyncio.gather(pin, forget, return_exceptions=True)
        assert isinstance(pinned, dict) and pinned["memory"]["pinned"] is True
        assert isinstance(forgot, Conflict) and "pinned" in str(forgot)
        assert _grep(data_dir, "AB negative")

    async def test_a_write_about_them_during_the_erasure_is_refused_and_brings_nothing_back(
        self, service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        saved = await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        memory_id = saved["memory"]["id"]
        bank = service.store.get("main")
        real_rewrite = bank.rewrite
        refused: list[BaseException] = []

        async def rewrite_with_an_edit_arriving(*args: Any, **kwargs: Any) -> Any:
            # An edit of their memory and a new save about them, while the erasure runs: before
            # this change the edit was held during the rewrite and written back after it.
            for payload in ({"id": memory_id, "tags": ["health"]}, {"text": "Ana likes figs."}):
                function = "memory::update" if "id" in payload else "memory::save"
                extra = {} if "id" in payload else {"subject": "ana"}
                try:
                    await call(service, function, **payload, **extra)
                except Conflict as exc:
                    refused.append(exc)
            return await real_rewrite(*args, **kwargs)

        monkeypatch.setattr(bank, "rewrite", rewrite_with_an_edit_arriving)
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert out["erased"] == [memory_id] and len(refused) == 2
        assert all("erasing; nothing was written" in str(exc) for exc in refused)
        # Not named: a refusal is logged and kept (a consolidation report's errors).
        assert not any("ana" in str(exc).lower() for exc in refused)
        listed = await call(service, "memory::list", include_superseded=True)
        assert listed["memories"] == []
        assert _grep(data_dir, "locker") == [] and _grep(data_dir, "figs") == []
        await call(service, "memory::save", text="Ana likes figs.", subject="ana")  # after: fine

    @pytest.mark.parametrize("scoping", [False, True])
    async def test_a_save_into_a_full_bank_during_the_erasure_is_not_refused(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
        scoping: bool,
    ) -> None:
        """A general save into a full bank while Ana is being erased: its eviction picked Ana's
        memory (first in eviction order; in a scoped bank the whole bank's, the general pool
        being empty), and the save was refused as a write about Ana — a `conflict` naming her
        to whoever saved. Her erasure makes the room: the save lands, nothing else retired."""
        await call(
            service, "memory::bank::create", name="main", max_memories=2, subject_scoping=scoping
        )
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await call(service, "memory::save", text="Ana likes figs.", subject="ana")
        bank = service.store.get("main")
        real_rewrite = bank.rewrite
        saved: list[dict[str, Any]] = []

        async def rewrite_with_a_save_arriving(*args: Any, **kwargs: Any) -> Any:
            saved.append(await call(service, "memory::save", text=GENERAL_TEXT))
            return await real_rewrite(*args, **kwargs)

        monkeypatch.setattr(bank, "rewrite", rewrite_with_a_save_arriving)
        emitter.clear()
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert len(out["erased"]) == 2
        assert saved[0]["created"] and saved[0].get("evicted") is None
        listed = await call(service, "memory::list", include_superseded=True)
        assert [m["text"] for m in listed["memories"]] == [GENERAL_TEXT]
        reasons = [e.get("reason") for e in emitter.of(ITEM_CHANGED)]
        assert "evicted" not in reasons and reasons.count("forget-subject") == 2

    async def test_stats_never_reports_an_erased_memory_as_expired(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """What the reaper retired waits for the bank's next `memory::stats` (its `expired`):
        a memory of Ana's that expired and was then erased was still listed there, and its
        record (text and all) kept in RAM for it, after her erasure."""
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        saved = await call(
            service, "memory::save", text="Ana is at the dentist today.", subject="ana",
            category="context",
        )  # fmt: skip
        kept = await call(
            service, "memory::save", text="The team is in Lisbon.", category="context"
        )
        clock.advance_days(2)
        listed = await call(service, "memory::list")
        assert listed["memories"] == []  # both past their TTL: reaped in the background
        await service.settle()
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        stats = await call(service, "memory::stats")
        assert stats["expired"] == [kept["memory"]["id"]]
        assert saved["memory"]["id"] not in stats["expired"]

    async def test_a_snapshot_write_a_kill_cut_short_goes_too(
        self,
        service: MemoryService,
        store: Store,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 1)
        await _populate(service)
        await store.reload()  # the close wrote the index snapshot
        folder = data_dir / "main"
        # What a kill between the snapshot's write and its rename leaves.
        leftover = folder / f".{SNAPSHOT_FILE}.0123abcd.tmp"
        os.replace(folder / SNAPSHOT_FILE, leftover)
        assert _grep(data_dir, "flowerpot")
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert _grep(data_dir, "flowerpot") == [] and not leftover.exists()

    @pytest.mark.parametrize("name", [erasure.INTENT_FILE, erasure.OUTBOX_FILE])
    async def test_a_rewrite_of_its_own_files_a_kill_cut_short_leaves_no_name_behind(
        self, service: MemoryService, store: Store, data_dir: Path, name: str
    ) -> None:
        """The intent and the outbox name the person and their ids, and are rewritten whole
        while another erasure's entries stay in them: a kill inside such a rewrite left its temp
        file, which the load that finished and announced the erasure, removing the file, kept
        for good (only a later write of the same file swept it)."""
        ids = await _populate(service)
        folder = data_dir / "main"
        if name == erasure.INTENT_FILE:  # as if the process died past it
            erasure.write_intent(folder, "ana", ids["ana"])
        else:  # as if it died past the erasure, before announcing it
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
            erasure.write_unannounced(folder, dict.fromkeys(ids["ana"], ("ana", None)))
        leftover = folder / f".{name}.0123abcd.tmp"
        leftover.write_bytes((folder / name).read_bytes())
        await store.reload()  # finishes the erasure
        await service.boot_banks()  # announces it
        assert not (folder / erasure.INTENT_FILE).exists()
        assert not (folder / erasure.OUTBOX_FILE).exists()
        for needle in ("flowerpot", *ids["ana"]):
            assert _grep(data_dir, needle) == [], needle
        assert not leftover.exists()

    async def test_a_trashed_copys_access_counts_lose_their_ids(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        saved = await call(service, "memory::save", text="Ana's old locker is 12.", subject="ana")
        trashed_id = saved["memory"]["id"]
        found = await call(service, "memory::recall", query="locker", subject="ana")
        assert [h["memory"]["id"] for h in found["memories"]] == [trashed_id]  # counted
        await call(service, "memory::bank::delete", name="main")
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="The door code changes.")
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert out["trash_copies"] == 1 and _grep(data_dir, "locker") == []
        assert _grep(data_dir, trashed_id) == []  # an id is a fingerprint of its text

    async def test_another_banks_trashed_copy_is_not_taken_for_one_of_this_bank(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        # Bank `main-1234567890` trashed is `.trash/main-1234567890-<ms>`, which begins like a
        # trashed copy of `main`: erasing Ana from `main` must leave that other bank's copy alone.
        other = "main-1234567890"
        await call(service, "memory::bank::create", name=other, subject_scoping=True)
        await call(service, "memory::save", bank=other, text=ANA_TEXTS[0], subject="ana")
        await call(service, "memory::bank::delete", name=other)
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana")
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert out["trash_copies"] == 0
        assert _grep(data_dir / ".trash", "flowerpot")
        await service.store.reload()  # the trash read again: which bank each copy is of
        assert service.store.was_deleted(other)
        await call(service, "memory::bank::delete", name="main")
        await service.store.reload()
        assert service.store.was_deleted("main")

    async def test_an_interrupted_erasure_is_finished_by_the_next_load(
        self, service: MemoryService, store: Store, data_dir: Path
    ) -> None:
        await _populate(service)
        erasure.write_intent(data_dir / "main", "ana")  # as if the process died right after
        await store.reload()
        for needle in ("flowerpot", "Braga", "locker"):
            assert _grep(data_dir, needle) == [], needle
        assert _grep(data_dir, "doormat") and erasure.pending(data_dir / "main") == []

    async def test_the_index_snapshots_of_the_bank_and_its_trashed_copies_go_too(
        self,
        service: MemoryService,
        store: Store,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """`.index.npz` holds the analyzer's terms of every live text ("flowerpot" among them):
        derived, and not filterable by subject, so an erasure removes it whole."""
        monkeypatch.setattr(bank_module, "SNAPSHOT_MIN_LIVE", 1)
        await _populate(service)
        await store.reload()  # closing the bank leaves its snapshot
        live = data_dir / "main" / SNAPSHOT_FILE
        [copy] = (data_dir / ".trash").iterdir()
        shutil.copy(live, copy / SNAPSHOT_FILE)  # as a restart before that delete left it
        stem = "flowerpot"  # the analyzer's term for it, as the snapshot stores it
        assert (
            stem.encode() in live.read_bytes()
            and stem.encode() in copy.joinpath(SNAPSHOT_FILE).read_bytes()
        )
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert not live.exists() and not (copy / SNAPSHOT_FILE).exists()
        await store.reload()  # the next close writes one for the log as it is now
        assert live.exists()
        for needle in (stem, "locker", "Braga"):
            assert _grep(data_dir, needle) == [], needle
        assert _grep(data_dir, "doormat")

    async def test_rest_takes_the_confirmation_as_the_x_confirm_header(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await _populate(service)
        async with TestClient(TestServer(build_app(service))) as client:
            refused = await client.post("/memory/forget-subject", json={"subject": "ana"})
            assert refused.status == 400
            assert (await refused.json())["error"]["code"] == "invalid_input"
            done = await client.post(
                "/memory/forget-subject",
                json={"subject": "ana"},
                headers={"X-Confirm": "destructive"},
            )
            assert done.status == 200 and len((await done.json())["erased"]) == 3
        assert _grep(data_dir, "flowerpot") == []

    async def test_a_persons_merge_across_subjects_carries_nothing_of_theirs_to_the_survivor(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """A person may supersede Ana's memory by Bruno's with `reinforce` (REST, the CLI): the
        survivor counts the observation, but what Ana's record said about her (lanes, entities,
        tags, the session) is not copied onto Bruno's memory, where his recalls would show it and
        her erasure would not reach it."""
        async with TestClient(TestServer(build_app(service))) as client:

            async def post(path: str, **body: Any) -> dict[str, Any]:
                answer = await client.post(f"/memory/{path}", json=body)
                assert answer.status == 200, await answer.text()
                result: dict[str, Any] = await answer.json()
                return result

            await post("bank/create", name="main", subject_scoping=True)
            ana = await post(
                "save",
                text="Ana is seeing a lawyer about the house.",
                subject="ana",
                context="Ana confided her separation plans",
                intention="keep the separation from her family",
                entities=["ana-solicitor"],
                tags=["separation"],
                session_id="ana-private-session",
            )
            bruno = await post("save", text="Bruno is seeing a lawyer.", subject="bruno")
            merged = await post(
                "supersede",
                id=ana["memory"]["id"],
                superseded_by=bruno["memory"]["id"],
                reinforce=True,
            )
            assert merged["reinforced"] is True
            survivor = (await post("get", id=bruno["memory"]["id"]))["memory"]
            assert survivor["corroboration"] == 1  # the observation is counted
            for field in ("context", "intention", "source"):
                assert survivor.get(field) is None, field
            assert survivor["entities"] == [] and survivor["tags"] == []
            done = await client.post(
                "/memory/forget-subject",
                json={"subject": "ana"},
                headers={"X-Confirm": "destructive"},
            )
            assert done.status == 200
        for needle in ("separation", "ana-solicitor", "ana-private-session", "confided"):
            assert _grep(data_dir, needle) == [], needle

    async def test_a_memory_retired_in_favour_of_theirs_keeps_no_pointer_to_it(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """A person's merge across subjects (or a survivor moved to Ana since) leaves Bruno's
        retired record pointing at Ana's memory (`superseded_by`): her id, the fingerprint of
        her words, which every other file of the erasure loses. After it, his record stays in
        history (retired, as before) with no pointer to a memory no longer anywhere."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        bruno = (await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno"))["memory"]
        ana = (await call(service, "memory::save", text=ANA_TEXTS[0], subject="ana"))["memory"]
        await call(service, "memory::supersede", id=bruno["id"], superseded_by=ana["id"])
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert _grep(data_dir, ana["id"]) == []
        [kept] = (await call(service, "memory::history", id=bruno["id"]))["revisions"][-1:]
        assert kept["invalid_at"] is not None and kept.get("superseded_by") is None
        now = (await call(service, "memory::get", id=bruno["id"]))["memory"]
        assert now["text"] == BRUNO_TEXT and now.get("superseded_by") is None
        listed = await call(service, "memory::list", include_superseded=True)
        assert ana["id"] not in json.dumps(listed)
        # Reloaded from the rewritten log, as a restart reads it.
        await call(service, "memory::reload")
        again = (await call(service, "memory::get", id=bruno["id"]))["memory"]
        assert again["invalid_at"] is not None and again.get("superseded_by") is None

    async def test_a_merge_into_theirs_while_they_are_erased_is_refused(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """A person's merge of Bruno's memory into Ana's, without reinforcing hers, writes only
        his record, which names her id (`superseded_by`): made while her erasure ran, it was no
        write about her, landed after the log's rewrite, and kept her id (a fingerprint of her
        words) for good. It is refused as a write about her is."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        bruno = (await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno"))["memory"]
        ana = (await call(service, "memory::save", text=ANA_TEXTS[0], subject="ana"))["memory"]
        bank = service.store.get("main")
        with bank.erasing("ana", [ana["id"]]), pytest.raises(Conflict):
            await call(
                service,
                "memory::supersede",
                id=bruno["id"],
                superseded_by=ana["id"],
                reinforce=False,
            )
        now = (await call(service, "memory::get", id=bruno["id"]))["memory"]
        assert now.get("invalid_at") is None and now.get("superseded_by") is None

    async def test_a_trashed_copys_pointer_to_theirs_goes_too(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        bruno = (await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno"))["memory"]
        ana = (await call(service, "memory::save", text=ANA_TEXTS[0], subject="ana"))["memory"]
        await call(service, "memory::supersede", id=bruno["id"], superseded_by=ana["id"])
        await call(service, "memory::bank::delete", name="main")
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert _grep(data_dir, ana["id"]) == []
        assert _grep(data_dir, bruno["id"])  # his retired record stays in the copy

    async def test_a_name_typed_decomposed_is_the_same_person(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """ "José" precomposed (NFC) or decomposed (NFD, as macOS and some keyboards send it) is
        one person: forget-subject erased nothing of the other spelling and reported success.
        A record stored before subjects were normalised is theirs too."""
        nfc, nfd = "Jos\u00e9", "Jose\u0301"
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        typed = await call(
            service, "memory::save", text="José keeps his spare key in the mailbox.", subject=nfd
        )
        assert typed["memory"]["subject"] == nfc
        await call(service, "memory::save", text="José's PIN hint is his dog.", subject=nfc)
        seen = await call(service, "memory::recall", query="spare key mailbox", subject=nfd)
        assert typed["memory"]["id"] in [m["memory"]["id"] for m in seen["memories"]]
        bank = service.store.get("main")
        text = "José was born in Faro."
        old = transitions.new_memory(bank.new_id(text), text, subject=nfd, now_ms=service.clock())
        await bank.commit([old])  # as a worker before this fix wrote it
        out = await call(service, "memory::forget-subject", subject=nfd, confirm="destructive")
        assert len(out["erased"]) == 3 and out["subject"] == nfc
        for needle in ("mailbox", "PIN hint", "Faro"):
            assert _grep(data_dir, needle) == [], needle

    async def test_any_case_of_the_name_is_the_same_person_live_and_trashed(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """ "Ana", "ANA" and "ana" are one person: forget-subject for "ana" left every memory
        saved about "Ana" in place — live, in RAM and in the trashed copies — and reported
        success with nothing erased."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="Ana's old locker is number 12.", subject="ANA")
        await call(service, "memory::bank::delete", name="main")  # a copy in .trash/ holds it
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        ids = [
            (await call(service, "memory::save", text=text, subject=who))["memory"]["id"]
            for text, who in zip(ANA_TEXTS, ("Ana", "ANA", "ana"), strict=True)
        ]
        bruno = await call(service, "memory::save", text=BRUNO_TEXT, subject="Bruno")
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert sorted(out["erased"]) == sorted(ids) and out["trash_copies"] == 1
        for needle in ("flowerpot", "AB negative", "Porto", "locker", *ids):
            assert _grep(data_dir, needle) == [], needle
        listed = await call(service, "memory::list", include_superseded=True)
        assert [m["id"] for m in listed["memories"]] == [bruno["memory"]["id"]]

    async def test_a_deleted_banks_trashed_copies_are_erased_too(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """A deleted bank sits in `.trash/` (recoverable by hand) with every memory about them:
        forget-subject naming it answered `bank_not_found` and left them all there."""
        await _populate(service)
        await call(service, "memory::bank::delete", name="main")
        assert _grep(data_dir, "flowerpot") and _grep(data_dir, "locker")
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert out["trash_copies"] == 2 and len(out["erased"]) == 4
        for needle in ("flowerpot", "AB negative", "Braga", "locker", *out["erased"]):
            assert _grep(data_dir, needle) == [], needle
        assert _grep(data_dir, "doormat") and _grep(data_dir, "Monday")  # the others stay
        with pytest.raises(BankNotFound):  # a name with no bank and no copy is still unknown
            await call(
                service,
                "memory::forget-subject",
                bank="nobody",
                subject="ana",
                confirm="destructive",
            )

    async def test_an_erasure_in_a_deleted_banks_trashed_copies_is_announced(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        """What the erasure took out of a deleted bank's trashed copies is announced like any
        erasure (`erased`, id and subject only): a copy kept elsewhere (memory-consolidate's last
        report of that bank, which only an `erased` event scrubs) drops their texts at once."""
        await _populate(service)
        await call(service, "memory::bank::delete", name="main")
        emitter.clear()
        out = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        assert emitter.of(ITEM_CHANGED) == [
            {
                "event_type": "erased",
                "bank": "main",
                "id": memory_id,
                "subject": "ana",
                "memory": {"id": memory_id, "subject": "ana"},
                "reason": "forget-subject",
                "event_id": ANY,
            }
            for memory_id in out["erased"]
        ]

    async def test_erasures_asked_at_once_all_finish(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """Three people forgotten at once (a batch of requests), and a compaction meanwhile:
        the second erasure failed with `conflict: a rewrite ... is already running` after it
        had erased their trashed copies, and the first one's end removed its intent, so a
        restart did not finish it either: their memory stayed, half erased."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        people = ("ana", "bruno", "caio", "dora")
        for who in people:
            await call(service, "memory::save", text=f"{who} hides a key in the shed.", subject=who)
        await call(service, "memory::save", text=GENERAL_TEXT)
        forgets = [
            call(service, "memory::forget-subject", subject=who, confirm="destructive")
            for who in people[:3]
        ]
        compact = call(service, "memory::compact", bank="main", horizon_days=0)
        done = await asyncio.gather(compact, *forgets, return_exceptions=True)
        assert not [r for r in done if isinstance(r, BaseException)], done
        assert [len(r["erased"]) for r in done[1:]] == [1, 1, 1]
        for who in people[:3]:
            assert _grep(data_dir, f"{who} hides") == [], who
        assert _grep(data_dir, "dora hides") and _grep(data_dir, "Monday")
        assert not (data_dir / "main" / erasure.INTENT_FILE).exists()

    async def test_two_people_forgotten_at_once_in_a_deleted_banks_trash_both_stay_erased(
        self, service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A deleted bank's trashed copy is erased with no bank lock (no bank is live): two
        erasures asked at once each read the copy's log, and the one renamed in last wrote the
        other's person back, whose `erased` events had been sent. Each read is held here until
        the other erasure reads too (or, once they run one after the other, for a second)."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        for who in ("ana", "bruno"):
            await call(service, "memory::save", text=f"{who} hides a key in the shed.", subject=who)
        await call(service, "memory::save", text=GENERAL_TEXT)
        await call(service, "memory::bank::delete", name="main")
        both_read = threading.Barrier(2, timeout=1.0)
        plan = erasure.forget_plan

        def read_then_wait(subject: str) -> Any:  # called once the copy's log is read
            with contextlib.suppress(threading.BrokenBarrierError):
                both_read.wait()
            return plan(subject)

        monkeypatch.setattr(erasure, "forget_plan", read_then_wait)
        done = await asyncio.gather(
            *(
                call(service, "memory::forget-subject", subject=who, confirm="destructive")
                for who in ("ana", "bruno")
            ),
            return_exceptions=True,
        )
        assert not [r for r in done if isinstance(r, BaseException)], done
        assert [len(r["erased"]) for r in done] == [1, 1]
        for who in ("ana", "bruno"):
            assert _grep(data_dir, f"{who} hides") == [], who
        assert _grep(data_dir, "Monday")

    async def test_a_save_after_an_erasure_the_disk_refused_is_not_erased_by_the_next_load(
        self, service: MemoryService, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The disk refuses the erasure's rewrite (ENOSPC) after its intent is durable: the
        call fails, but the intent stays, so the next load (a restart, `memory::reload`)
        finishes the erasure. A memory about them saved and acknowledged in between was erased
        with it, and one pinned in between too (the pinned check never saw it): a write about
        them stays refused until the erasure is finished, as while it runs."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        old = await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
        refused: list[str] = []
        for function_id, payload in (
            ("memory::save", {"text": "Ana likes figs.", "subject": "ana"}),
            ("memory::pin", {"id": old["memory"]["id"], "pinned": True}),
        ):
            try:
                await call(service, function_id, **payload)
            except Conflict as exc:
                refused.append(str(exc))
        await store.reload()  # the next load finishes what the intent committed to
        listed = await call(service, "memory::list", include_superseded=True)
        survivors = [m["text"] for m in listed["memories"]]
        # Acknowledged then erased, or refused: never both.
        assert survivors == [] and len(refused) == 2, (survivors, refused)
        assert all("erasing; nothing was written" in r for r in refused)
        await call(service, "memory::save", text="Ana likes figs.", subject="ana")  # after: fine

    @pytest.mark.parametrize("finished_by", ["memory::reload", "a restart"])
    async def test_an_erasure_finished_by_the_next_load_is_announced_as_erased(
        self,
        service: MemoryService,
        store: Store,
        data_dir: Path,
        emitter: RecordingEmitter,
        clock: FixedClock,
        monkeypatch: pytest.MonkeyPatch,
        finished_by: str,
    ) -> None:
        """The erasure the disk refused past its intent is finished by the next load: announced
        as the call would have (`erased`, id and subject only, reason `forget-subject`), never
        as a hand edit's `deleted` carrying the erased memory's whole text to every subscriber
        (and to memory-consolidate's kept reports, which only an `erased` event scrubs)."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        locker = await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        figs = await call(service, "memory::save", text="Ana likes figs.", subject="ana")
        await call(service, "memory::delete", id=figs["memory"]["id"])  # retired: erased too
        await call(service, "memory::save", text="The office is in Porto.")
        await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
        emitter.clear()
        if finished_by == "memory::reload":
            await call(service, "memory::reload")
        else:
            await store.close()
            store = Store.open(data_dir, holder=HOLDER)
            service = MemoryService(store, emitter=emitter, clock=clock)
            await service.boot_banks()
        events = emitter.of(ITEM_CHANGED)
        erased = sorted([locker["memory"]["id"], figs["memory"]["id"]])
        assert events == [
            {
                "event_type": "erased",
                "bank": "main",
                "id": memory_id,
                "subject": "ana",
                "memory": {"id": memory_id, "subject": "ana"},
                "reason": "forget-subject",
                "event_id": ANY,
            }
            for memory_id in erased
        ]
        if finished_by == "a restart":
            await store.close()

    async def test_an_unfinished_erasure_is_finished_when_its_bank_is_deleted(
        self,
        service: MemoryService,
        store: Store,
        data_dir: Path,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The erasure the disk refused past its intent would be finished by the bank's next
        load; deleted, the bank is never loaded again (its folder sits in `.trash/`), and their
        memories stayed there for good. The delete finishes it in the trashed copy, and
        announces it as the erasure would have."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        locker = await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
        await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
        emitter.clear()
        trashed = Path((await call(service, "memory::bank::delete", name="main"))["trashed_to"])
        memory_id = locker["memory"]["id"]
        assert [(kind, e["event_type"], e.get("id")) for kind, e in emitter.events] == [
            (BANK_CHANGED, "trashed", None),
            (ITEM_CHANGED, "erased", memory_id),
        ]
        assert _grep(data_dir, "locker") == []
        assert _grep(data_dir, "doormat") == [str(trashed.relative_to(data_dir) / "memories.jsonl")]
        assert erasure.pending(trashed) == []

    async def test_an_unfinished_erasure_whose_intent_lists_no_ids_is_announced_at_delete(
        self,
        service: MemoryService,
        store: Store,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """An intent written before intents held ids names only the subject: the delete finds
        the ids in the trashed copy's log, and what it erases there is announced as well (from
        the data dir's root, where it is committed before the copy's log is rewritten)."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        locker = await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
        (store.get("main").path / erasure.INTENT_FILE).write_text('{"subjects": ["ana"]}')
        emitter.clear()
        await call(service, "memory::bank::delete", name="main")
        erased = [e["id"] for kind, e in emitter.events if e.get("event_type") == "erased"]
        assert erased == [locker["memory"]["id"]]
        assert not (store.root / erasure.TRASH_INTENT_FILE).exists()

    async def test_another_persons_erasure_keeps_an_unfinished_ones_intent(
        self, service: MemoryService, store: Store, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Ana's erasure failed past its intent; Bruno's then succeeded and removed the intent
        file whole, Ana's name in it: her erasure was never finished, her trashed copies gone
        and her live memories back at the next load."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
        bank = store.get("main")
        real_rewrite = bank.rewrite

        async def disk_full(*args: Any, **kwargs: Any) -> Any:
            raise StorageError("cannot rewrite memories.jsonl: No space left on device")

        monkeypatch.setattr(bank, "rewrite", disk_full)
        with pytest.raises(StorageError):
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        monkeypatch.setattr(bank, "rewrite", real_rewrite)
        await call(service, "memory::forget-subject", subject="bruno", confirm="destructive")
        assert erasure.pending(data_dir / "main") == ["ana"]
        await store.reload()
        assert _grep(data_dir, "locker") == [] and _grep(data_dir, "doormat") == []
        assert not (data_dir / "main" / erasure.INTENT_FILE).exists()

    def test_it_is_denied_to_agents(self) -> None:
        assert catalog.find("memory::forget-subject").policy is catalog.Policy.HUMANS
        permissions = (Path(__file__).parent.parent / "iii-permissions.yaml").read_text()
        assert "'!memory::forget-subject'" in permissions


# --- killed at random moments ----------------------------------------------------------------

KILLS = 60
ANA_MEMORIES = 400  # enough lines that a run lasts long enough to be killed in its middle


def _forget_child(data_dir: str) -> None:
    from memory_worker.adapters.cli import main

    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    args = ["trigger", "memory::forget-subject", "subject=ana", "confirm=destructive"]
    os._exit(main([*args, "--data-dir", data_dir]))


@pytest.fixture(name="forkserver", scope="module")
def _forkserver() -> ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["memory_worker.adapters.cli"])
    return context


def _seed(data_dir: Path) -> None:
    async def build() -> None:
        store = Store.open(data_dir, holder=HOLDER)
        try:
            service = MemoryService(store)
            await call(service, "memory::bank::create", name="main", subject_scoping=True)
            await call(service, "memory::save", text="Ana trashed secret 0.", subject="ana")
            await call(service, "memory::bank::delete", name="main")
            for n in range(ANA_MEMORIES):
                await call(service, "memory::save", text=f"Ana fact {n} xyzzy.", subject="ana")
                if n % 10 == 0:
                    await call(service, "memory::save", text=f"General fact {n}.")
        finally:
            await store.close()

    asyncio.run(build())


def _snapshot(data_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_dir)): p.read_bytes()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and p.name != ".lock" and not p.name.endswith(".replacing")
    }


def _state(data_dir: Path) -> str:
    """After the next open (which finishes an interrupted erasure): "none" when every trace of
    Ana is still there, "all" when none is, anything else is a failure."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        memories = log.replay(data_dir / "main" / "memories.jsonl")[0]
    finally:
        asyncio.run(store.close())
    ana = sum(1 for m in memories.values() if m.subject == "ana")
    general = sum(1 for m in memories.values() if m.subject is None)
    assert general == ANA_MEMORIES // 10, "general memories were touched"
    found = len(_grep(data_dir, "xyzzy")) + len(_grep(data_dir, "trashed secret"))
    if ana == ANA_MEMORIES and found == 2:
        return "none"
    assert ana == 0 and found == 0, f"half erased: {ana} memories, {found} files with traces"
    return "all"


@pytest.mark.timeout(900)
def test_forget_subject_killed_at_random_moments_erases_all_or_nothing(
    tmp_path: Path, forkserver: ForkServerContext
) -> None:
    seeded = tmp_path / "seeded"
    _seed(seeded)
    original = _snapshot(seeded)
    data_dir = tmp_path / "data"

    def reset() -> None:
        if data_dir.exists():
            import shutil

            shutil.rmtree(data_dir)
        for name, body in original.items():
            path = data_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)

    reset()
    started = time.monotonic()
    child = forkserver.Process(target=_forget_child, args=(str(data_dir),))
    child.start()
    child.join(60)
    duration = time.monotonic() - started
    assert child.exitcode == 0
    assert _state(data_dir) == "all"

    rng = random.Random(5)
    outcomes = {"none": 0, "all": 0}
    for _ in range(KILLS):
        reset()
        child = forkserver.Process(target=_forget_child, args=(str(data_dir),))
        child.start()
        time.sleep(rng.uniform(0, duration * 1.1))  # the kill moment: anywhere in the run
        child.kill()
        child.join(10)
        outcomes[_state(data_dir)] += 1
    assert outcomes["none"] > 0 and outcomes["all"] > 0, outcomes


# --- killed at chosen points ------------------------------------------------------------------

# Where `memory::forget-subject` is SIGKILLed: past its intent, after the log was rewritten.
KILL_POINTS = {
    "before-the-vectors": ("memory_worker.storage.bank", "Bank", "vector_writes_settled"),
    "before-the-ledger": ("memory_worker.app.service", "MemoryService", "erase_deliveries"),
}
# The same in a deleted bank's trashed copy (no intent: a rerun finishes it).
TRASH_KILL_POINTS = {
    "before-the-vectors": ("memory_worker.storage.erasure", None, "erase_vectors"),
    "before-the-ledger": ("memory_worker.app.service", "MemoryService", "erase_deliveries"),
}


def _forget_killed_at(data_dir: str, point: str, trash: bool = False) -> None:
    """A CLI `forget-subject` that SIGKILLs itself when it reaches `point` (no handler runs)."""
    import importlib
    import signal

    module, owner, attribute = (TRASH_KILL_POINTS if trash else KILL_POINTS)[point]

    def die_now(*args: Any, **kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    async def die(*args: Any, **kwargs: Any) -> None:
        die_now()

    target = importlib.import_module(module)
    if owner is None:
        setattr(target, attribute, die_now)  # a blocking step, run in a thread
    else:
        setattr(getattr(target, owner), attribute, die)
    _forget_child(data_dir)


async def _ana_and_bruno_everywhere(
    data_dir: Path, *, then_deleted: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bank `main` (scoped) holding one memory about Ana and one about Bruno, each with a vector
    and handed to conversation c1 (a ledger key); the bank deleted after, when asked. Their
    records; both ids are on disk."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        service = MemoryService(store)
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
        bruno = (await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno"))["memory"]
        bank = store.get("main")
        pairs = [(m, [1.0, 0.0, 0.0]) for m in bank.memories.values() if m.live]
        await bank.store_vectors("test-model", pairs)
        for who in ("ana", "bruno"):
            await call(
                service, "memory::preview", query="blood type key?", subject=who, conversation="c1"
            )
        if then_deleted:
            await call(service, "memory::bank::delete", name="main")
    finally:
        await store.close()
    assert _grep(data_dir, ana["id"]) and _grep(data_dir, bruno["id"])
    return ana, bruno


def _killed_in_a_child(forkserver: ForkServerContext, target: Any, *args: object) -> None:
    """`target(*args)` run in a child process, which SIGKILLs itself where the test chose."""
    child = forkserver.Process(target=target, args=args)
    child.start()
    child.join(60)
    assert child.exitcode == -9, "killed where chosen"


def _forget_killed_in_a_child(
    forkserver: ForkServerContext, data_dir: Path, point: str, *, trashed: bool = False
) -> None:
    """Ana's erasure run in a child process, SIGKILLed at `point`."""
    args = (str(data_dir), point, True) if trashed else (str(data_dir), point)
    _killed_in_a_child(forkserver, _forget_killed_at, *args)


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
async def test_an_erasure_killed_past_its_log_leaves_no_id_of_theirs_on_disk_after_the_next_load(
    data_dir: Path, forkserver: ForkServerContext, point: str
) -> None:
    """Killed after the log was rewritten, the next load finishes the erasure from its intent:
    it took the ids to erase from the log, where they no longer were, so their vectors (ids and
    embeddings of their words) and the ledger's keys (fingerprints of their words) stayed.
    Until its `erased` events are sent (a service's boot), only the outbox names their ids:
    what those events say (`erasure.OUTBOX_FILE`, at-least-once), gone once they are."""
    ana, bruno = await _ana_and_bruno_everywhere(data_dir)
    _forget_killed_in_a_child(forkserver, data_dir, point)
    assert (data_dir / "main" / erasure.INTENT_FILE).exists()
    reopened = Store.open(data_dir, holder=HOLDER)
    try:
        await reopened.replay_all()  # the bank's load finishes the erasure
        assert not (data_dir / "main" / erasure.INTENT_FILE).exists()
        assert _grep(data_dir, ana["id"]) == [f"main/{erasure.OUTBOX_FILE}"]
        emitter = RecordingEmitter()
        await MemoryService(reopened, emitter=emitter).boot_banks()
        assert [e["id"] for e in emitter.of(ITEM_CHANGED)] == [ana["id"]]
        assert _grep(data_dir, ana["id"]) == []
        assert _grep(data_dir, "Ana") == []
        kept = _grep(data_dir, bruno["id"])
        assert "main/memories.jsonl" in kept and "main/vectors.jsonl" in kept
        assert any(path.startswith(".lessons-delivered/") for path in kept), kept
    finally:
        await reopened.close()


@pytest.mark.parametrize("point", sorted(TRASH_KILL_POINTS))
async def test_an_erasure_of_a_deleted_bank_killed_midway_is_finished_whole_by_the_next(
    data_dir: Path, forkserver: ForkServerContext, point: str
) -> None:
    """A deleted bank's copy in `.trash/` is erased without an intent: each step is redone by
    the next `forget-subject`. Killed after the copy's log was rewritten, the next took the ids
    to erase from that log, where they no longer were: their vectors and ledger keys stayed."""
    ana, bruno = await _ana_and_bruno_everywhere(data_dir, then_deleted=True)
    _forget_killed_in_a_child(forkserver, data_dir, point, trashed=True)
    reopened = Store.open(data_dir, holder=HOLDER)
    try:
        again = MemoryService(reopened)
        await call(
            again, "memory::forget-subject", bank="main", subject="ana", confirm="destructive"
        )
        assert _grep(data_dir, ana["id"]) == []
        assert _grep(data_dir, "Ana") == []
        kept = _grep(data_dir, bruno["id"])
        assert any(path.endswith("/vectors.jsonl") for path in kept), kept
        assert any(path.startswith(".lessons-delivered/") for path in kept), kept
    finally:
        await reopened.close()


def _preview_killed_at_the_rename(data_dir: str) -> None:
    """A CLI `memory::preview` for Ana in conversation c2, SIGKILLed when its ledger write has
    written and synced its temp file and is about to rename it into place."""
    import signal

    from memory_worker.adapters.cli import main

    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if "lessons-delivered" in str(dst):
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    args = ["trigger", "memory::preview", "query=blood type?", "subject=ana", "conversation=c2"]
    os._exit(main([*args, "--data-dir", data_dir]))


async def test_a_ledger_write_killed_before_its_rename_leaves_no_id_of_theirs_after_the_erasure(
    data_dir: Path, forkserver: ForkServerContext
) -> None:
    """A delivery killed between its ledger's temp file and the rename left the temp (Ana's id
    in it) in `.lessons-delivered/`; her erasure scrubbed only the `*.json` ledgers, and nothing
    ever removed the temp (pruning, too, reads `*.json` only)."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        service = MemoryService(store)
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
    finally:
        await store.close()
    _killed_in_a_child(forkserver, _preview_killed_at_the_rename, str(data_dir))
    assert _grep(data_dir / ".lessons-delivered", ana["id"]), "the temp holds her id"
    reopened = Store.open(data_dir, holder=HOLDER)
    try:
        again = MemoryService(reopened)
        await call(again, "memory::forget-subject", subject="ana", confirm="destructive")
        assert _grep(data_dir, ana["id"]) == []
    finally:
        await reopened.close()


def _delete_killed_finishing_an_erasure(data_dir: str) -> None:
    """An erasure of Ana the disk refused past its intent (full), then the bank deleted: the
    delete finishes it in the trashed copy, and is SIGKILLed as it starts erasing there."""
    import signal

    async def run() -> None:
        store = Store.open(Path(data_dir), holder=HOLDER)
        service = MemoryService(store)
        bank = store.get("main")

        async def disk_full(*args: Any, **kwargs: Any) -> Any:
            raise StorageError("cannot rewrite memories.jsonl: No space left on device")

        bank.rewrite = disk_full  # type: ignore[method-assign]
        with contextlib.suppress(StorageError):
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")

        def die(*args: Any, **kwargs: Any) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        erasure.erase_trashed = die  # type: ignore[assignment]
        await call(service, "memory::bank::delete", name="main")

    asyncio.run(run())
    os._exit(0)


async def test_a_delete_killed_finishing_an_erasure_in_the_trash_leaves_no_trace_after_a_rerun(
    data_dir: Path, forkserver: ForkServerContext
) -> None:
    """The trashed copy kept its intent (naming Ana) when the delete finishing it was killed;
    a `forget-subject` naming the deleted bank then erased the copy but left the intent, her
    name in it, in `.trash/` for good (a trashed bank is never loaded again to clear it)."""
    store = Store.open(data_dir, holder=HOLDER)
    try:
        service = MemoryService(store)
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
        await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
    finally:
        await store.close()
    _killed_in_a_child(forkserver, _delete_killed_finishing_an_erasure, str(data_dir))
    assert _grep(data_dir / ".trash", "ana")
    reopened = Store.open(data_dir, holder=HOLDER)
    try:
        again = MemoryService(reopened)
        await call(
            again, "memory::forget-subject", bank="main", subject="ana", confirm="destructive"
        )
        assert _grep(data_dir, ana["id"]) == []
        assert _grep(data_dir, "Ana") == [] and _grep(data_dir, "ana") == []
        assert _grep(data_dir, "doormat"), "Bruno's memory stays in the trashed copy"
    finally:
        await reopened.close()


# --- work queued before the erasure ----------------------------------------------------------

BRAGA = "I live in Braga now, with my sister and her two cats."
BRAGA_FACT = "The user lives in Braga with her sister."


def _braga_model() -> Model:
    """A completer that finds one fact about the speaker in any turn."""
    model = Model()
    model.replies.append(json.dumps({"memories": [{"op": "add", "text": BRAGA_FACT}]}))
    return model


class TestWorkQueuedBeforeTheErasure:
    """An erasure wins over extraction queued before it: nothing about the erased person that was
    said before the erasure is saved after it — a job that waited in the queue, one dead-lettered
    and retried, one whose turn the erasure happened in the middle of, and across a restart."""

    async def _ana_turn(
        self, service: MemoryService, chat: Transcript, clock: FixedClock, turn: str = "t1"
    ) -> tuple[Hooked, TurnPipeline, Queue]:
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        hooked, queue = Hooked(service), Queue()
        extractor = Extractor(service, chat, _braga_model(), hooked.kv)
        pipeline = TurnPipeline(service, hooked.resolver, hooked.state, queue, extractor, chat)
        await hooked.step("s1", BRAGA, turn=turn, metadata={"memory_subject": "ana"})
        chat.say("user", BRAGA, at=clock())
        return hooked, pipeline, queue

    async def _queued_then_erased(
        self, service: MemoryService, store: Store, chat: Transcript, clock: FixedClock
    ) -> Any:
        """Ana's turn completed and its job queued; a minute later she is erased; the process
        then stops (pipeline and store closed) before the job ran. The job."""
        _, pipeline, queue = await self._ana_turn(service, chat, clock)
        await pipeline.on_turn_completed(
            {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_subject": "ana"}}
        )
        [job] = queue.jobs.values()
        clock.advance(60_000)
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        await pipeline.close()
        await store.close()
        return job

    async def _run_late(
        self, reopened: Store, chat: Transcript, clock: FixedClock, job: Any
    ) -> MemoryService:
        """`job` run by a new process's pipeline over `reopened`: its service."""
        again = MemoryService(reopened, clock=clock)
        hooked = Hooked(again)
        extractor = Extractor(again, chat, _braga_model(), hooked.kv)
        late = TurnPipeline(again, hooked.resolver, hooked.state, None, extractor, chat)
        await late.extract_job(job)
        return again

    async def _about_ana(self, service: MemoryService) -> list[str]:
        listed = await call(service, "memory::list", subject="ana", include_superseded=True)
        return [m["text"] for m in listed["memories"] if m.get("subject") == "ana"]

    async def test_a_job_queued_before_the_erasure_saves_nothing_about_them(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        chat = Transcript()
        _, pipeline, queue = await self._ana_turn(service, chat, clock)
        chat.say("assistant", "Noted, Braga it is.", at=clock())
        completed = {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_subject": "ana"}}
        await pipeline.on_turn_completed(completed)
        [job] = queue.jobs.values()
        clock.advance(60_000)
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        clock.advance(60_000)
        # Delivered late (or dead-lettered, then retried by hand: the same payload).
        assert (await pipeline.extract_job(job))["written"] == 0
        assert await self._about_ana(service) == []
        await pipeline.close()

    async def test_a_turn_the_erasure_happened_in_the_middle_of_saves_nothing_about_them(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        chat = Transcript()
        _, pipeline, queue = await self._ana_turn(service, chat, clock)
        clock.advance(60_000)
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        clock.advance(60_000)
        chat.say("assistant", "Noted, Braga it is.", at=clock())  # the turn ends after it
        completed = {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_subject": "ana"}}
        await pipeline.on_turn_completed(completed)
        [job] = queue.jobs.values()
        await pipeline.extract_job(job)
        assert await self._about_ana(service) == []
        await pipeline.close()

    async def test_an_erasure_naming_a_bank_not_made_yet_is_kept_for_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """Ana's turn runs in bank `work`, which extraction makes after the turn (seed 000); she
        asks to be forgotten there first. The answer stays `bank_not_found` (nothing there yet),
        but the erasure was not recorded: the queued job then made `work` with her words."""
        chat = Transcript()
        hooked, queue = Hooked(service), Queue()
        extractor = Extractor(service, chat, _braga_model(), hooked.kv)
        pipeline = TurnPipeline(service, hooked.resolver, hooked.state, queue, extractor, chat)
        meta = {"memory_subject": "ana", "memory_bank": "work"}
        await hooked.step("s1", BRAGA, metadata=meta)
        chat.say("user", BRAGA, at=clock())
        chat.say("assistant", "Noted, Braga it is.", at=clock())
        await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1", "metadata": meta})
        [job] = queue.jobs.values()
        clock.advance(60_000)
        with pytest.raises(BankNotFound, match="the erasure is recorded"):
            await call(
                service,
                "memory::forget-subject",
                bank="work",
                subject="ana",
                confirm="destructive",
            )
        clock.advance(60_000)
        await pipeline.extract_job(job)
        try:
            listed = await call(service, "memory::list", bank="work", include_superseded=True)
        except BankNotFound:
            listed = {"memories": []}
        assert [m["text"] for m in listed["memories"] if m.get("subject") == "ana"] == []
        await pipeline.close()

    async def test_the_erasure_still_wins_after_a_restart(
        self, service: MemoryService, store: Store, data_dir: Path, clock: FixedClock
    ) -> None:
        chat = Transcript()
        job = await self._queued_then_erased(service, store, chat, clock)
        clock.advance(60_000)
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            again = await self._run_late(reopened, chat, clock, job)
            assert await self._about_ana(again) == []
            assert (data_dir / erasure.STAMPS_FILE).exists()
            assert _grep(data_dir, "ana") == [], "the stamp names no one"
            # Said after the erasure: theirs to keep, as any new memory.
            await call(again, "memory::save", text="Ana likes figs.", subject="ana")
            assert await self._about_ana(again) == ["Ana likes figs."]
        finally:
            await reopened.close()

    @pytest.mark.parametrize("damage", ["not-json", "a-link", "huge", "a-list", "wrong-types"])
    async def test_a_damaged_stamps_file_still_opens_says_so_and_lets_no_one_back(
        self, service: MemoryService, store: Store, data_dir: Path, clock: FixedClock, damage: str
    ) -> None:
        """The stamps file damaged by hand (or planted) after the erasure: the store opens, the
        doctor names the file, and the late job still saves nothing about them (fail safe: what
        the file held is unknown, so every subject counts as erased when it last changed)."""
        chat = Transcript()
        job = await self._queued_then_erased(service, store, chat, clock)
        stamps = data_dir / erasure.STAMPS_FILE
        kept = json.loads(stamps.read_bytes())
        stamps.unlink()
        if damage == "not-json":
            stamps.write_bytes(b'{"3f2a": 17935')  # cut off
        elif damage == "a-link":
            target = data_dir.parent / "elsewhere.json"
            target.write_text(json.dumps(kept))
            stamps.symlink_to(target)
        elif damage == "huge":
            stamps.write_bytes(b" " * (erasure.STAMPS_MAX_BYTES + 1) + json.dumps(kept).encode())
        elif damage == "a-list":
            stamps.write_text(json.dumps(list(kept.items())))
        else:
            stamps.write_text(json.dumps({key: str(at) for key, at in kept.items()}))
        clock.advance(60_000)
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            again = await self._run_late(reopened, chat, clock, job)
            assert await self._about_ana(again) == []
            report = await call(again, "memory::doctor")
            [check] = [c for c in report["checks"] if c["name"] == "erasure-stamps"]
            assert not check["ok"] and erasure.STAMPS_FILE in check["detail"]
        finally:
            await reopened.close()

    async def test_a_turn_said_after_the_erasure_is_remembered_as_any_other(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """Messages without dates of their own: the job's time (when the turn completed) tells
        they came after the erasure; what Ana says then is hers to keep."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        clock.advance(60_000)
        chat, hooked, queue = Chat(), Hooked(service), Queue()
        extractor = Extractor(service, chat, _braga_model(), hooked.kv)
        pipeline = TurnPipeline(service, hooked.resolver, hooked.state, queue, extractor, chat)
        await hooked.step("s1", BRAGA, turn="t1", metadata={"memory_subject": "ana"})
        chat.say("user", BRAGA)
        await pipeline.on_turn_completed(
            {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_subject": "ana"}}
        )
        [job] = queue.jobs.values()
        assert (await pipeline.extract_job(job))["written"] == 1
        assert await self._about_ana(service) == [BRAGA_FACT]
        await pipeline.close()

    async def _dated_turn(
        self, service: MemoryService, clock: FixedClock, ahead: int, *, erase_mid_turn: bool
    ) -> int:
        """Ana's turn with every message dated `ahead` ms past the worker's clock, the erasure
        a minute into it (else a minute before it); the writes of its extraction job."""
        chat = Transcript()
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        if not erase_mid_turn:
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
            clock.advance(60_000)
        hooked, queue = Hooked(service), Queue()
        extractor = Extractor(service, chat, _braga_model(), hooked.kv)
        pipeline = TurnPipeline(service, hooked.resolver, hooked.state, queue, extractor, chat)
        await hooked.step("s1", BRAGA, turn="t1", metadata={"memory_subject": "ana"})
        chat.say("user", BRAGA, at=clock() + ahead)
        clock.advance(60_000)
        if erase_mid_turn:
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
            clock.advance(60_000)
        chat.say("assistant", "Noted, Braga it is.", at=clock() + ahead)
        await pipeline.on_turn_completed(
            {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_subject": "ana"}}
        )
        [job] = queue.jobs.values()
        written: int = (await pipeline.extract_job(job))["written"]
        await pipeline.close()
        return written

    async def test_a_client_clock_ahead_does_not_date_their_words_past_the_erasure(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """The client's clock runs 10 minutes ahead of the worker's: what Ana said a minute
        before she was erased was dated 9 minutes after it, and the turn's job saved it. A
        message dated past the moment its turn completed (the worker's clock) shows by how much
        the client's clock is ahead at least: the dates are read back by that much."""
        assert await self._dated_turn(service, clock, 10 * 60_000, erase_mid_turn=True) == 0
        assert await self._about_ana(service) == []

    async def test_a_client_clock_ahead_still_keeps_what_they_say_after_it(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        assert await self._dated_turn(service, clock, 10 * 60_000, erase_mid_turn=False) == 1
        assert await self._about_ana(service) == [BRAGA_FACT]


class TestVectorsInFlight:
    async def test_a_vector_being_written_when_the_erasure_runs_is_erased_too(
        self, service: MemoryService, store: Store, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An embedding pass checked Ana's memory was live and was appending its vector (a slow
        disk) when the erasure ran: the append landed after the erasure had rewritten
        `vectors.jsonl`, and her memory's vector (and text hash) stayed there for good."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        saved = await call(service, "memory::save", text=ANA_TEXTS[0], subject="ana")
        bank = store.get("main")
        entered, release = threading.Event(), threading.Event()
        real_append, real_erase = files.append_unsynced, erasure.erase_vectors

        def slow_append(path: Path, *args: Any, **kwargs: Any) -> None:
            if path.name == VECTORS_FILE:
                entered.set()
                release.wait(30.0)
            real_append(path, *args, **kwargs)

        def erase_then_release(*args: Any, **kwargs: Any) -> None:
            real_erase(*args, **kwargs)
            release.set()  # the append lands after the sidecar was rewritten…

        async def settled_then_release() -> None:
            release.set()  # …unless the erasure waits for it first (then it lands before)
            await real_settled()

        real_settled = getattr(bank, "vector_writes_settled", None)
        monkeypatch.setattr(files, "append_unsynced", slow_append)
        monkeypatch.setattr(erasure, "erase_vectors", erase_then_release)
        if real_settled is not None:
            monkeypatch.setattr(bank, "vector_writes_settled", settled_then_release)
        memory = bank.get(saved["memory"]["id"])
        assert memory is not None
        storing = asyncio.create_task(bank.store_vectors("test-model", [(memory, [1.0, 0.0])]))
        await asyncio.to_thread(entered.wait, 30.0)
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        await storing
        assert _grep(data_dir, memory.id) == []

    @pytest.mark.parametrize("where", ["live", "finished by the next load", "trashed"])
    async def test_a_memory_moved_to_someone_else_keeps_no_vector_of_what_it_said_of_them(
        self, service: MemoryService, store: Store, data_dir: Path, where: str
    ) -> None:
        """A memory about Ana edited to be about Bruno (its text and context too): the erasure
        takes the revisions that were hers out of the log, but the sidecars kept the vectors
        (and text hashes) of her text and her context, embedded while it was hers, for good."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        saved = await call(
            service, "memory::save", text=ANA_TEXTS[0], subject="ana", context="at Ana's flat"
        )
        bank = store.get("main")

        async def embed() -> None:
            for memory in bank.memories.values():
                await bank.store_vectors("test-model", [(memory, [1.0, 0.0])])
                await bank.lane_vectors.store(
                    "test-model", [("context", memory, [0.0, 1.0])], bank.memories
                )

        await embed()
        memory_id = saved["memory"]["id"]
        await call(
            service,
            "memory::update",
            id=memory_id,
            text=BRUNO_TEXT,
            subject="bruno",
            context="at the office",
        )
        await embed()
        hers = [text_hash(ANA_TEXTS[0]), text_hash("at Ana's flat")]
        his = [text_hash(BRUNO_TEXT), text_hash("at the office")]
        assert all(_grep(data_dir, h) for h in hers + his)  # the traces exist
        if where == "finished by the next load":
            erasure.write_intent(data_dir / "main", "ana")  # as if the process died right after
            await store.reload()
        else:
            if where == "trashed":
                await call(service, "memory::bank::delete", name="main")
            await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        for needle in hers:
            assert _grep(data_dir, needle) == [], needle
        assert all(_grep(data_dir, h) for h in his)  # Bruno's own vectors stay


async def test_the_ledger_of_what_a_conversation_was_handed_loses_their_ids(
    service: MemoryService, data_dir: Path
) -> None:
    """A coding agent's prompt was handed Ana's memory (`memory::preview` with `conversation`):
    the ledger under `.lessons-delivered/` kept its id (a fingerprint of her words, which a
    guess of the text confirms) for 30 days after she was erased, as access counts did once."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    saved = await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana")
    await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
    memory_id = saved["memory"]["id"]
    for who in ("ana", "bruno"):
        shown = await call(
            service, "memory::preview", query="what blood type?", subject=who, conversation="c1"
        )
        assert shown
    assert _grep(data_dir, memory_id), "handed to the conversation, and recorded"
    await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
    assert _grep(data_dir, memory_id) == []


async def test_a_folder_planted_among_the_ledgers_does_not_stop_the_erasure(
    service: MemoryService, data_dir: Path, emitter: RecordingEmitter
) -> None:
    """A folder named as a conversation's ledger file in `.lessons-delivered/` holds no ledger:
    it is passed over. Taken for an unreadable file and removed as one, it failed the erasure
    half way (`cannot remove …: Is a directory`): Ana's memories gone from the log, but no
    `erased` event (views kept showing her words) and her ids left in every other ledger, which
    the next load's `resume` no longer looked for."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    saved = await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana")
    memory_id = saved["memory"]["id"]
    shown = await call(
        service, "memory::preview", query="what blood type?", subject="ana", conversation="c1"
    )
    assert shown
    planted = data_dir / ".lessons-delivered" / f"{'0' * 32}.json"
    planted.mkdir()
    emitter.clear()
    await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
    assert _grep(data_dir, memory_id) == []
    assert [e["id"] for e in emitter.of(ITEM_CHANGED) if e["event_type"] == "erased"] == [memory_id]
    assert planted.is_dir(), "not ours to remove"


async def test_a_delivery_that_starts_while_the_ledger_is_erased_does_not_write_their_ids_back(
    service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure waited for the deliveries running when it reached the ledger (P, to
    conversation c1), but not for one that started while it waited (Q, to c2): Q read c2's
    ledger (Ana's id in it) before the erasure took it out, recorded it whole after, and her id
    was back in `.lessons-delivered/` for 30 days."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
    await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")

    def preview(who: str, conversation: str) -> Any:
        return call(
            service,
            "memory::preview",
            query="what blood type? spare key?",
            subject=who,
            conversation=conversation,
        )

    await preview("ana", "c2")  # c2 was handed Ana's memory
    assert _grep(data_dir, ana["id"])
    p_held, release_p, e_entered, q_started, erased = (asyncio.Event() for _ in range(5))
    real_record, real_erase = FileDeliveries.record, service.erase_deliveries
    real_lock = service._lock

    async def held_record(self: FileDeliveries, conversation: str, delivered: Any) -> None:
        if conversation == "c1":
            p_held.set()
            await release_p.wait()
        else:
            await erased.wait()  # Q records once the erasure is over
        await real_record(self, conversation, delivered)

    async def entered_erase(*args: Any) -> None:
        e_entered.set()
        await real_erase(*args)

    def signalled_lock(conversation: str) -> asyncio.Lock:
        if conversation == "c2":
            q_started.set()
        return real_lock(conversation)

    monkeypatch.setattr(FileDeliveries, "record", held_record)
    monkeypatch.setattr(service, "erase_deliveries", entered_erase)
    monkeypatch.setattr(service, "_lock", signalled_lock)
    p = asyncio.create_task(preview("bruno", "c1"))
    await p_held.wait()
    e = asyncio.create_task(
        call(service, "memory::forget-subject", subject="ana", confirm="destructive")
    )
    e.add_done_callback(lambda _: erased.set())
    await e_entered.wait()  # the erasure waits for P now
    q = asyncio.create_task(preview("bruno", "c2"))
    await q_started.wait()
    release_p.set()
    await asyncio.wait_for(asyncio.gather(p, e, q), 30)
    assert _grep(data_dir, ana["id"]) == []


async def test_an_erasure_finished_by_a_reload_leaves_no_id_in_the_ledgers_ram_copy(
    service: MemoryService, store: Store, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure the disk refused past its intent is finished by `memory::reload`, which
    takes their ids out of `.lessons-delivered/`, but not out of the ledger this process keeps
    in RAM: the conversation's next delivery wrote its ledger back whole, her id with it."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
    await call(service, "memory::save", text=BRUNO_TEXT, subject="bruno")
    query = "what blood type? spare key?"
    await call(service, "memory::preview", query=query, subject="ana", conversation="c1")
    assert _grep(data_dir, ana["id"])
    await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
    await call(service, "memory::reload")
    assert _grep(data_dir, ana["id"]) == [], "the load finished the erasure on disk"
    await call(service, "memory::preview", query=query, subject="bruno", conversation="c1")
    assert _grep(data_dir, ana["id"]) == []


async def test_an_erasure_finished_as_its_bank_is_deleted_leaves_no_id_in_the_ledger(
    service: MemoryService, store: Store, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erasure the disk refused past its intent is finished in the bank's trashed copy when
    the bank is deleted (`erasure.finish_in_trash`): that took their memories out of the copy,
    but their ids stayed in `.lessons-delivered/`, which a load's `resume` empties of them."""
    await call(service, "memory::bank::create", name="main", subject_scoping=True)
    ana = (await call(service, "memory::save", text=ANA_TEXTS[1], subject="ana"))["memory"]
    await call(
        service, "memory::preview", query="what blood type?", subject="ana", conversation="c1"
    )
    assert _grep(data_dir, ana["id"])
    await _erase_ana_past_its_intent(service, store.get("main"), monkeypatch)
    await call(service, "memory::bank::delete", name="main", confirm="destructive")
    assert _grep(data_dir, ana["id"]) == []


class TestDamagedStamps:
    """`.erased-subjects.json` unreadable: every subject counts as erased when it last changed
    (it is replaced whole at each stamp, so that is at or after every stamp it held), and that
    floor outlives the file's next rewrite."""

    def test_a_damaged_file_counts_every_subject_erased_when_it_last_changed(
        self, tmp_path: Path
    ) -> None:
        erasure.ErasureStamps(tmp_path).stamp("main", "ana", 1_000)
        stamps = tmp_path / erasure.STAMPS_FILE
        stamps.write_bytes(b"\\x00garbage")
        os.utime(stamps, ns=(5_000 * 1_000_000, 5_000 * 1_000_000))
        loaded = erasure.ErasureStamps.load(tmp_path)
        assert loaded.damage is not None and erasure.STAMPS_FILE in loaded.damage
        assert loaded.erased_at("main", "ana") == 5_000
        assert loaded.erased_at("other", "bruno") == 5_000

    def test_the_floor_outlives_the_next_stamp(self, tmp_path: Path) -> None:
        stamps = tmp_path / erasure.STAMPS_FILE
        stamps.write_bytes(b"[1, 2")
        os.utime(stamps, ns=(5_000 * 1_000_000, 5_000 * 1_000_000))
        erasure.ErasureStamps.load(tmp_path).stamp("main", "carla", 9_000)
        reloaded = erasure.ErasureStamps.load(tmp_path)
        assert reloaded.damage is None  # rewritten whole: readable again
        assert reloaded.erased_at("main", "ana") == 5_000
        assert reloaded.erased_at("main", "carla") == 9_000

    def test_an_intact_file_sets_no_floor(self, tmp_path: Path) -> None:
        erasure.ErasureStamps(tmp_path).stamp("main", "ana", 1_000)
        loaded = erasure.ErasureStamps.load(tmp_path)
        assert loaded.damage is None
        assert loaded.erased_at("main", "ana") == 1_000
        assert loaded.erased_at("main", "bruno") is None

    async def test_a_folder_planted_at_its_path_is_set_aside_and_erasures_go_on(
        self, service: MemoryService, store: Store, data_dir: Path
    ) -> None:
        """A folder at `.erased-subjects.json` (made by hand, a sync tool, a bad restore): the
        store opens with the damage named, and the next erasure moves the folder beside, kept
        whole, and writes the stamps. No file can replace a folder: every forget-subject failed
        `storage` (nothing erased) until a person found it, though the doctor said the next
        erasure would rewrite it."""
        await call(service, "memory::save", text="Ana's locker is 12.", subject="ana")
        await store.close()
        planted = data_dir / erasure.STAMPS_FILE
        planted.mkdir()
        (planted / "notes.txt").write_text("kept")
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            again = MemoryService(reopened)
            report = await call(again, "memory::doctor")
            [check] = [c for c in report["checks"] if c["name"] == "erasure-stamps"]
            assert not check["ok"] and erasure.STAMPS_FILE in check["detail"]
            out = await call(again, "memory::forget-subject", subject="ana", confirm="destructive")
            assert len(out["erased"]) == 1
            assert planted.is_file()
            [aside] = [p for p in data_dir.iterdir() if p.name.startswith(f"{planted.name}.")]
            assert (aside / "notes.txt").read_text() == "kept"
            loaded = erasure.ErasureStamps.load(data_dir)
            assert loaded.damage is None and loaded.erased_at("main", "ana") is not None
            assert loaded.floor is not None  # what the folder stood for still holds
        finally:
            await reopened.close()


class _Refusing:
    """An extraction model that answers in prose, quoting what it was shown about Ana (a memory
    recalled for the turn, or the turn's own words)."""

    async def complete(self, system_prompt: str, user_text: str) -> str:
        quoted = re.search(r"Ana[^\n]*", user_text)
        return "I'm sorry, I won't store that" + (f": {quoted[0]}" if quoted else ".")


def _said(entry_id: str, text: str) -> dict[str, Any]:
    return {"entry_id": entry_id, "role": "user", "text": text}


class TestCaptureQueue:
    """The data dir's capture queue (`.capture.jsonl`: coding agents' turns waiting for
    extraction) held their words after the erasure: a dead job's messages and its reason (a
    prose reply quoting what the model was shown), a pending job's failed attempts' reasons and
    a decision naming their memories' ids. A job carries no subject, so the bank's dead jobs
    leave whole; a pending job keeps its turn (still to be read) and its attempts."""

    async def _queue_with_their_words(
        self, service: MemoryService, data_dir: Path, ids: dict[str, list[str]]
    ) -> CaptureRunner:
        # Off, the turn's recall (no subject: capture names none) shows the model Ana's memories.
        await call(service, "memory::bank::configure", name="main", subject_scoping=False)
        runner = CaptureRunner(service, CaptureQueue(data_dir), _Refusing())
        told = "Ana said her blood type is AB negative."
        await runner.enqueue({"session_id": "s1", "bank": "main", "entries": [_said("u1", told)]})
        asked = _said("u1", "Where is the spare key kept?")
        await runner.enqueue({"session_id": "s2", "bank": "main", "entries": [asked]})
        await runner.enqueue(
            {"session_id": "s3", "bank": "home", "entries": [_said("u1", "I grow basil.")]}
        )
        assert await runner.run_once() == 0  # each refused once: retried later
        for waiting in runner.queue.pending():
            if waiting.job["session_id"] != "s2":
                waiting.retry_at = 0  # (the delay, fast-forwarded)
        assert await runner.run_once() == 2  # s1 and s3 dead; s2 waits for its retry
        [waiting] = runner.queue.pending()
        assert "flowerpot" in (waiting.error or "")  # the memory the model was shown, quoted
        # A decision journaled over Ana's memory (a job killed past it, or failing after it).
        await asyncio.to_thread(
            runner.queue.decide, waiting.id, '{"memories": []}', [ids["ana"][0]], now_ms=1
        )
        return runner

    async def test_their_words_leave_the_capture_queue_and_the_rest_stays(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        ids = await _populate(service)
        runner = await self._queue_with_their_words(service, data_dir, ids)
        queued = (data_dir / CAPTURE_FILE).read_text()
        assert "flowerpot" in queued and "AB negative" in queued and ids["ana"][0] in queued
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        for needle in ("flowerpot", "AB negative", *ids["ana"]):
            assert _grep(data_dir, needle) == [], needle
        # Another bank's dead job stays for a person; the pending turn stays to be read, its
        # attempt counted, its decision gone (the model is asked again).
        assert runner.queue.dead == 1 and "I grow basil." in (data_dir / CAPTURE_FILE).read_text()
        [waiting] = runner.queue.pending()
        assert (waiting.job["session_id"], waiting.attempts, waiting.decided) == ("s2", 1, None)
        replayed = CaptureQueue(data_dir)
        assert [(p.id, p.attempts, p.decided) for p in replayed.pending()] == [
            (waiting.id, 1, None)
        ]
        assert replayed.dead == 1
        replayed.close()
        # The live queue was rewritten through, not under: its next compaction writes none back.
        runner.completer = ScriptedModel()
        waiting.retry_at = 0
        service.clock = lambda: time.time_ns() // 1_000_000  # a decision waits for the next ms
        assert await runner.run_once() == 1
        await runner.close()
        assert _grep(data_dir, "flowerpot") == [] and _grep(data_dir, "AB negative") == []
        assert "I grow basil." in (data_dir / CAPTURE_FILE).read_text()

    async def test_a_queue_not_open_is_erased_through_its_file(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """`memory-worker forget-subject` with no server running: nobody holds the queue open."""
        ids = await _populate(service)
        runner = await self._queue_with_their_words(service, data_dir, ids)
        await runner.close()
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        for needle in ("flowerpot", "AB negative", *ids["ana"]):
            assert _grep(data_dir, needle) == [], needle
        replayed = CaptureQueue(data_dir)
        assert [(p.job["session_id"], p.attempts) for p in replayed.pending()] == [("s2", 1)]
        assert replayed.dead == 1
        replayed.close()

    async def test_an_erasure_finished_by_the_next_load_erases_the_queue_too(
        self, service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ids = await _populate(service)
        runner = await self._queue_with_their_words(service, data_dir, ids)
        await runner.close()
        bank = service.store.get("main")
        await _erase_ana_past_its_intent(service, bank, monkeypatch)
        assert _grep(data_dir, "flowerpot")  # the intent stays: the next load finishes it
        await service.store.close()
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            reopened.get("main")
            for needle in ("flowerpot", "AB negative"):
                assert _grep(data_dir, needle) == [], needle
            # Their ids stay only where their `erased` events wait for a service to send them.
            for needle in ids["ana"]:
                assert _grep(data_dir, needle) == [f"main/{erasure.OUTBOX_FILE}"], needle
        finally:
            await reopened.close()

    async def test_a_dead_job_for_a_bank_it_never_made_leaves_too(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """Extraction would have made the bank; the job died first. The erasure answers that
        there is no such bank (and stamps it), and the dead turn holding their words leaves."""
        runner = CaptureRunner(service, CaptureQueue(data_dir), _Refusing())
        told = _said("u1", "Ana said her blood type is AB negative.")
        await runner.enqueue({"session_id": "s1", "bank": "work", "entries": [told]})
        await runner.run_once()
        runner.queue.pending()[0].retry_at = 0  # (the delay, fast-forwarded)
        assert await runner.run_once() == 1 and runner.queue.dead == 1
        with pytest.raises(BankNotFound):
            await call(
                service, "memory::forget-subject", bank="work", subject="ana", confirm="destructive"
            )
        assert runner.queue.dead == 0 and _grep(data_dir, "AB negative") == []
        await runner.close()

    async def test_a_reason_the_model_gave_while_the_erasure_ran_is_not_written_after_it(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """The model, shown Ana's memory, answered in prose quoting it after the erasure had
        rewritten the queue: the failed attempt's reason, written then, kept her words in the
        file (for good once the job died: a dead job's reason is kept for a person)."""
        ids = await _populate(service)
        await call(service, "memory::bank::configure", name="main", subject_scoping=False)

        class ErasedMeanwhile(_Refusing):
            erased = False

            async def complete(self, system_prompt: str, user_text: str) -> str:
                reply = await super().complete(system_prompt, user_text)
                if not self.erased:  # while the model thinks, the person is erased
                    self.erased = True
                    await call(
                        service, "memory::forget-subject", subject="ana", confirm="destructive"
                    )
                return reply

        runner = CaptureRunner(service, CaptureQueue(data_dir), ErasedMeanwhile())
        asked = _said("u1", "Where is the spare key kept?")
        await runner.enqueue({"session_id": "s2", "bank": "main", "entries": [asked]})
        assert await runner.run_once() == 0  # refused: retried later
        [waiting] = runner.queue.pending()
        assert waiting.attempts == 1 and "flowerpot" not in (waiting.error or "")
        await runner.close()
        for needle in ("flowerpot", *ids["ana"]):
            assert _grep(data_dir, needle) == [], needle

    def test_a_decision_made_over_their_memories_during_the_erasure_is_not_journaled(
        self, data_dir: Path
    ) -> None:
        """A job whose model was shown their memories before the log's rewrite answers after the
        queue was erased: its decision (naming their ids) goes on in RAM, never to the file."""
        data_dir.mkdir()
        queue = CaptureQueue(data_dir)
        job_id, _ = queue.enqueue(
            {"session_id": "s1", "bank": "main", "entries": [_said("u1", "hi")]},
            job_id=None,
            now_ms=1,
        )
        assert erase_jobs(data_dir, "main", {"fp0123456789abcdef"}) == 0
        queue.decide(job_id, '{"memories": []}', ["fp0123456789abcdef"], now_ms=2)
        [pending] = queue.pending()
        assert pending.decided is not None  # the job finishes with it
        queue.close()
        assert _grep(data_dir, "fp0123456789abcdef") == []
