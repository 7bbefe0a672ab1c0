"""Capacity (C20): at a cap a new memory evicts the least-accessed, oldest non-pinned memory of
its own scope, recorded as a tombstone (reason `evicted`) with an event; access counts live in an
unsynced sidecar, so recall never writes the log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.storage import files
from memory_worker.storage.access import ACCESS_FILE, Access, AccessStats
from memory_worker.storage.access import _line as access_line

from .fakes import FixedClock, RecordingEmitter

PERSON = Caller.human("cli")


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, PERSON)


async def save(service: MemoryService, text: str, **payload: Any) -> dict[str, Any]:
    memory: dict[str, Any] = (await call(service, "memory::save", text=text, **payload))["memory"]
    return memory


async def live_texts(service: MemoryService) -> set[str]:
    listed = await call(service, "memory::list", limit=500)
    return {m["text"] for m in listed["memories"]}


class TestEviction:
    async def test_at_the_cap_the_least_accessed_oldest_goes_recorded_and_announced(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=3)
        old = await save(service, "The user owns a red bicycle.")
        clock.advance(10)
        used = await save(service, "The user drinks green tea.")
        clock.advance(10)
        await save(service, "The user lives in Porto.")
        clock.advance(10)
        await call(service, "memory::recall", query="green tea")  # `used` is accessed once
        emitter.clear()
        saved = await call(service, "memory::save", text="The user plays chess.")
        assert saved["evicted"] == [old["id"]]  # the caller learns what made room
        assert "evicted" not in await call(service, "memory::save", text="The user plays chess.")
        assert await live_texts(service) == {
            "The user drinks green tea.",
            "The user lives in Porto.",
            "The user plays chess.",
        }
        gone = (await call(service, "memory::get", id=old["id"]))["memory"]
        assert gone["invalid_reason"] == "evicted" and gone["invalid_at"] is not None
        events = [e for e in emitter.of(ITEM_CHANGED) if e.get("reason") == "evicted"]
        assert [
            (e["event_type"], e["memory"]["id"], e["memory"]["invalid_reason"]) for e in events
        ] == [("deleted", old["id"], "evicted")]
        kept = (await call(service, "memory::get", id=used["id"]))["memory"]
        assert kept["access_count"] == 1

    async def test_a_pinned_memory_is_never_evicted_and_a_full_pinned_bank_refuses(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=2)
        await save(service, "The user was born in 1990.", pinned=True)
        await save(service, "The user likes jazz.")
        await save(service, "The user likes blues.")  # evicts jazz, never the pinned one
        assert await live_texts(service) == {"The user was born in 1990.", "The user likes blues."}
        await call(
            service,
            "memory::pin",
            id=(await save(service, "The user likes blues."))["id"],
            pinned=True,
        )
        before = (data_dir / "main" / "memories.jsonl").read_bytes()
        with pytest.raises(Conflict, match=r"max_memories \(2\) is reached"):
            await save(service, "The user likes rock.")
        assert (data_dir / "main" / "memories.jsonl").read_bytes() == before

    @pytest.mark.parametrize("cap", ["max_memories", "max_per_subject"])
    async def test_a_cap_given_as_true_is_invalid_input_and_changes_nothing(
        self, service: MemoryService, data_dir: Path, cap: str
    ) -> None:
        """`max_memories=true` was read as a cap of 1: every later save evicted a memory."""
        await call(service, "memory::bank::create", name="main")
        before = (data_dir / "main" / "bank.yaml").read_bytes()
        with pytest.raises(InvalidInput, match=rf"{cap}: .*not true or false"):
            await call(service, "memory::bank::configure", name="main", **{cap: True})
        with pytest.raises(InvalidInput, match=rf"{cap}: .*not true or false"):
            await call(service, "memory::bank::create", name="other", **{cap: True})
        assert (data_dir / "main" / "bank.yaml").read_bytes() == before
        assert [b["name"] for b in (await call(service, "memory::bank::list"))["banks"]] == ["main"]

    async def test_reinforcing_at_the_cap_evicts_nothing(self, service: MemoryService) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=2)
        await save(service, "The user likes jazz.")
        await save(service, "The user likes blues.")
        again = await call(service, "memory::save", text="The user likes jazz.")
        assert not again["created"]
        assert len(await live_texts(service)) == 2

    @pytest.mark.parametrize("scoping", [False, True])  # the kept order; the bulk selection
    async def test_a_memory_just_said_again_is_not_the_oldest_one(
        self, service: MemoryService, clock: FixedClock, scoping: bool
    ) -> None:
        """Restating renews a memory for retention; at a cap it must too: the person's freshest
        statement was the one evicted, for having been saved first."""
        await call(
            service, "memory::bank::create", name="main", max_memories=3, subject_scoping=scoping
        )
        for text in ("The user likes jazz.", "The user likes blues.", "The user likes rock."):
            await save(service, text)
            clock.advance(1000)
        clock.advance_days(10)
        await save(service, "The user likes jazz.")  # said again: reinforced, not new
        clock.advance(1000)
        await save(service, "The user likes metal.")
        assert await live_texts(service) == {
            "The user likes jazz.",
            "The user likes rock.",
            "The user likes metal.",
        }

    async def test_an_evicted_memory_saved_again_and_then_superseded_is_not_called_evicted(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=2)
        jazz = await save(service, "The user likes jazz.")
        clock.advance(10)
        await save(service, "The user likes blues.")
        clock.advance(10)
        rock = await save(service, "The user likes rock.")  # evicts jazz
        clock.advance(10)
        back = await save(service, "The user likes jazz.")  # back, evicting blues
        assert back["id"] == jazz["id"] and "invalid_reason" not in back
        retired = await call(service, "memory::supersede", id=jazz["id"], superseded_by=rock["id"])
        assert retired["memory"]["superseded_by"] == rock["id"]
        assert "invalid_reason" not in retired["memory"]

    async def test_a_chatty_subject_evicts_only_its_own_rows(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        await call(
            service,
            "memory::bank::create",
            name="main",
            subject_scoping=True,
            max_per_subject=2,
            max_memories=6,
        )
        await save(service, "Bruno likes tea.", subject="bruno")
        await save(service, "Bruno likes chess.", subject="bruno")
        await save(service, "The office opens at 9.")
        for n in range(6):
            clock.advance(10)  # older first: the oldest of Ana's go
            await save(service, f"Ana said thing number {n}.", subject="ana")
        texts = await live_texts(service)
        assert {"Bruno likes tea.", "Bruno likes chess.", "The office opens at 9."} <= texts
        assert sorted(t for t in texts if t.startswith("Ana")) == [
            "Ana said thing number 4.",
            "Ana said thing number 5.",
        ]

    async def test_a_full_bank_makes_room_in_the_new_memorys_own_scope(
        self, service: MemoryService
    ) -> None:
        await call(
            service, "memory::bank::create", name="main", subject_scoping=True, max_memories=3
        )
        await save(service, "Bruno likes tea.", subject="bruno")
        await save(service, "The office opens at 9.")
        await save(service, "Ana likes cello.", subject="ana")
        await save(service, "Ana likes opera.", subject="ana")  # the bank is full: Ana's room
        assert await live_texts(service) == {
            "Bruno likes tea.",
            "The office opens at 9.",
            "Ana likes opera.",
        }

    async def test_a_full_scoped_bank_learns_a_new_person_by_evicting_the_banks_first(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        """Seed 004: at max_memories the least-accessed oldest memory is evicted. With subject
        scoping, a person with no memories yet (or a general memory in an empty pool) has
        nothing of their own to pay with: the save was refused (`conflict`), so a full bank
        could never learn about anyone new. Their own scope goes first; when it has nothing
        evictable, the bank-wide order decides (never a pinned memory)."""
        await call(
            service, "memory::bank::create", name="main", subject_scoping=True, max_memories=3
        )
        await save(service, "Bruno was born in 1980.", subject="bruno", pinned=True)
        clock.advance(10)
        oldest = await save(service, "Bruno likes tea.", subject="bruno")
        clock.advance(10)
        ana = await save(service, "Ana likes cello.", subject="ana")
        clock.advance(10)
        emitter.clear()
        saved = await call(service, "memory::save", text="Cara likes jazz.", subject="cara")
        assert saved["created"] and saved["evicted"] == [oldest["id"]]
        events = [e for e in emitter.of(ITEM_CHANGED) if e.get("reason") == "evicted"]
        assert [(e["event_type"], e["memory"]["id"]) for e in events] == [("deleted", oldest["id"])]
        assert await live_texts(service) == {
            "Bruno was born in 1980.",
            "Ana likes cello.",
            "Cara likes jazz.",
        }
        clock.advance(10)
        await call(service, "memory::recall", query="cara jazz", subject="cara")  # Cara's used
        general = await call(service, "memory::save", text="The office opens at 9.")
        assert general["evicted"] == [ana["id"]]  # the general pool was empty: the bank's first
        clock.advance(10)
        again = await call(service, "memory::save", text="Cara likes opera.", subject="cara")
        assert again["evicted"] == [saved["memory"]["id"]]  # with memories: her own first

    async def test_concurrent_new_people_into_a_full_scoped_bank_each_evict_their_own(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        scoped = {"subject_scoping": True, "max_memories": 10}
        await call(service, "memory::bank::create", name="main", **scoped)
        for n in range(10):
            clock.advance(10)
            await save(service, f"Bruno said old thing {n}.", subject="bruno")
        emitter.clear()
        await asyncio.gather(
            *(save(service, f"Person {n} likes jazz.", subject=f"p{n}") for n in range(8))
        )
        texts = await live_texts(service)
        assert len(texts) == 10 and len([t for t in texts if "jazz" in t]) == 8
        evicted = [e for e in emitter.of(ITEM_CHANGED) if e.get("reason") == "evicted"]
        assert len({e["memory"]["id"] for e in evicted}) == 8

    async def test_a_full_scoped_bank_of_pinned_memories_still_refuses(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(
            service, "memory::bank::create", name="main", subject_scoping=True, max_memories=2
        )
        await save(service, "Bruno likes tea.", subject="bruno", pinned=True)
        await save(service, "Ana likes cello.", subject="ana", pinned=True)
        before = (data_dir / "main" / "memories.jsonl").read_bytes()
        for subject in ("cara", None, "ana"):
            with pytest.raises(Conflict, match=r"max_memories \(2\) is reached"):
                await save(service, "Someone likes jazz.", subject=subject)
        assert (data_dir / "main" / "memories.jsonl").read_bytes() == before

    async def test_a_full_subject_still_pays_from_its_own_rows_only(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """max_per_subject stays the subject's own: a person at their cap whose memories are
        all pinned is refused, never let through by evicting someone else's."""
        create = {"subject_scoping": True, "max_per_subject": 1, "max_memories": 3}
        await call(service, "memory::bank::create", name="main", **create)
        await save(service, "Bruno likes tea.", subject="bruno")
        clock.advance(10)
        await save(service, "Ana likes cello.", subject="ana", pinned=True)
        with pytest.raises(Conflict, match=r"max_per_subject \(1\) is reached"):
            await save(service, "Ana likes opera.", subject="ana")
        assert await live_texts(service) == {"Bruno likes tea.", "Ana likes cello."}

    async def test_concurrent_saves_into_a_full_bank_each_evict_their_own_victim(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        """Saves in flight count: 16 saves racing into a full bank must not all pick the same
        victim (the bank ended 15 over its cap, and a later save evicted all 15 at once)."""
        await call(service, "memory::bank::create", name="main", max_memories=10)
        for n in range(10):
            clock.advance(10)
            await save(service, f"The user noted old thing {n}.")
        emitter.clear()
        clock.advance(10)
        await asyncio.gather(*(save(service, f"The user noted new thing {n}.") for n in range(16)))
        texts = await live_texts(service)
        assert len(texts) == 10
        assert {t for t in texts if "old" in t} == set()  # the 16 new ones pushed out all 10 old
        evicted = [e for e in emitter.of(ITEM_CHANGED) if e.get("reason") == "evicted"]
        assert len(evicted) == 16 and len({e["memory"]["id"] for e in evicted}) == 16

    async def test_concurrent_saves_about_one_subject_hold_its_cap(
        self, service: MemoryService
    ) -> None:
        scoped = {"subject_scoping": True, "max_per_subject": 3}
        await call(service, "memory::bank::create", name="main", **scoped)
        await save(service, "Bruno likes tea.", subject="bruno")
        await asyncio.gather(
            *(save(service, f"Ana said thing number {n}.", subject="ana") for n in range(8))
        )
        texts = await live_texts(service)
        assert "Bruno likes tea." in texts
        assert len([t for t in texts if t.startswith("Ana")]) == 3


class TestOverTheCap:
    """A bank past its cap (an import is not held to the caps; a cap can be lowered) is not cut
    back by the next save: a save retires at most the one memory it makes room for."""

    async def test_a_save_after_an_import_past_the_cap_retires_one_memory_not_the_excess(
        self, service: MemoryService, clock: FixedClock, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="main", max_memories=5)
        rows = [
            {"text": f"The user imported note {n}.", "created_at": 1_000 + n} for n in range(20)
        ]
        await call(service, "memory::import", bank="main", records=rows)
        assert len(await live_texts(service)) == 20
        emitter.clear()
        await save(service, "The user plays chess.")
        texts = await live_texts(service)
        assert len(texts) == 20 and "The user imported note 0." not in texts  # the oldest went
        evicted = [e for e in emitter.of(ITEM_CHANGED) if e.get("reason") == "evicted"]
        assert len(evicted) == 1

    async def test_a_lowered_subject_cap_is_not_enforced_by_a_mass_eviction(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        scoped = {"subject_scoping": True, "max_per_subject": 10}
        await call(service, "memory::bank::create", name="main", **scoped)
        for n in range(6):
            clock.advance(10)
            await save(service, f"Ana said thing number {n}.", subject="ana")
        await call(service, "memory::bank::configure", name="main", max_per_subject=2)
        await save(service, "Ana said one more thing.", subject="ana")
        texts = await live_texts(service)
        assert len([t for t in texts if t.startswith("Ana")]) == 6
        assert "Ana said thing number 0." not in texts


class TestAccessSidecar:
    async def test_recall_never_writes_the_log_and_counts_survive_a_reload(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        memory = await save(service, "The user drinks green tea.")
        log_before = (data_dir / "main" / "memories.jsonl").read_bytes()
        for _ in range(3):
            await call(service, "memory::recall", query="green tea")
        assert (data_dir / "main" / "memories.jsonl").read_bytes() == log_before
        assert (data_dir / "main" / ACCESS_FILE).read_text().count(memory["id"]) == 3
        await service.store.reload()
        got = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert got["access_count"] == 3

    async def test_preview_and_extractions_look_do_not_count(self, service: MemoryService) -> None:
        memory = await save(service, "The user drinks green tea.")
        await call(service, "memory::preview", query="green tea")
        await catalog.call(
            service, "memory::recall", {"query": "green tea"}, Caller.internal("extraction")
        )
        assert "access_count" not in (await call(service, "memory::get", id=memory["id"]))["memory"]

    async def test_a_look_at_history_counts_no_use_of_a_retired_memory(
        self, service: MemoryService
    ) -> None:
        """Recall with `include_superseded` returns retired records too; counting them gave a
        superseded memory an `access_count`, as if what it said were still in use."""
        old = await save(service, "The user drinks green tea.")
        await call(service, "memory::delete", id=old["id"])
        live = await save(service, "The user drinks black tea now.")
        found = await call(service, "memory::recall", query="tea", include_superseded=True)
        assert {m["memory"]["id"] for m in found["memories"]} == {old["id"], live["id"]}
        got = await call(service, "memory::get", id=old["id"], include_superseded=True)
        assert "access_count" not in got["memory"]
        assert (await call(service, "memory::get", id=live["id"]))["memory"]["access_count"] == 1

    async def test_a_grown_sidecar_is_folded_at_load(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        memory = await save(service, "The user drinks green tea.")
        for _ in range(20):
            await call(service, "memory::recall", query="green tea")
        await service.store.reload()
        assert len((data_dir / "main" / ACCESS_FILE).read_text().splitlines()) == 1
        got = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert got["access_count"] == 20

    async def test_the_kept_open_sidecar_follows_its_path_never_the_old_file(
        self, service: MemoryService, data_dir: Path, tmp_path: Path
    ) -> None:
        # The file is kept open between recalls: one replaced, removed or torn by hand is
        # appended to at its path (on a line of its own), and one turned into a link is refused.
        memory = await save(service, "The user drinks green tea.")
        sidecar = data_dir / "main" / ACCESS_FILE
        await call(service, "memory::recall", query="green tea")
        sidecar.rename(data_dir / "main" / "old-access")
        await call(service, "memory::recall", query="green tea")
        assert sidecar.read_text().count(memory["id"]) == 1
        assert (data_dir / "main" / "old-access").read_text().count(memory["id"]) == 1
        swap = data_dir / "main" / "swap"
        swap.write_text("")
        swap.replace(sidecar)  # a new file at the path while the old one is still open
        await call(service, "memory::recall", query="green tea")
        assert sidecar.read_text().count(memory["id"]) == 1
        sidecar.write_text('{"at": 1, "ids": ["torn')  # cut by hand, the same file
        await call(service, "memory::recall", query="green tea")
        assert sidecar.read_text().splitlines()[1].count(memory["id"]) == 1
        outside = tmp_path / "outside.jsonl"
        outside.write_text("")
        sidecar.unlink()
        sidecar.symlink_to(outside)
        await call(service, "memory::recall", query="green tea")  # answered, not counted on disk
        assert outside.read_text() == ""
        got = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert got["access_count"] == 5

    def test_a_count_after_forget_lands_in_the_rewritten_file(self, tmp_path: Path) -> None:
        # `forget` replaces the file (off the event loop, leaving the open one alone): the next
        # append finds the path names a new file and writes there.
        (tmp_path / "bank").mkdir()
        stats = AccessStats(tmp_path / "bank" / ACCESS_FILE, within=tmp_path)
        stats.bump(["fpa", "fpb"], 1)
        stats.forget(["fpa"])
        stats.bump(["fpb"], 2)
        text = (tmp_path / "bank" / ACCESS_FILE).read_text()
        assert "fpa" not in text
        assert text.count("fpb") == 2
        stats.close()
        reloaded = AccessStats(tmp_path / "bank" / ACCESS_FILE, within=tmp_path)
        reloaded.load()
        assert reloaded.get("fpb") == Access(2, 2) and reloaded.get("fpa") is None

    def test_only_a_few_sidecars_stay_open_however_many_banks_are_recalled(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A server with thousands of banks must not hold a file descriptor for each: past
        `MAX_OPEN_APPENDERS` the least recently written sidecar is closed, and its next count
        opens it again and lands on a line of its own."""
        monkeypatch.setattr(files, "MAX_OPEN_APPENDERS", 2)
        banks = []
        for n in range(4):
            (tmp_path / f"b{n}").mkdir()
            banks.append(AccessStats(tmp_path / f"b{n}" / ACCESS_FILE, within=tmp_path))
        for n, stats in enumerate(banks):
            stats.bump([f"fp{n}"], 1)
        assert sum(stats.holds_file_open() for stats in banks) == 2
        assert [stats.holds_file_open() for stats in banks] == [False, False, True, True]
        banks[0].bump(["fp0"], 2)  # reopened; the least recently written (b2) closes
        assert [stats.holds_file_open() for stats in banks] == [True, False, False, True]
        for stats in banks:
            stats.close()
        reloaded = AccessStats(tmp_path / "b0" / ACCESS_FILE, within=tmp_path)
        reloaded.load()
        assert reloaded.get("fp0") == Access(2, 2)
        assert (tmp_path / "b0" / ACCESS_FILE).read_text().count("\n") == 2


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["ana", "bruno", None]), st.integers(0, 30), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_property_caps_hold_and_pinned_memories_survive(
    service: MemoryService, ops: list[tuple[str | None, int, bool]]
) -> None:
    await call(
        service,
        "memory::bank::create",
        name="main",
        subject_scoping=True,
        max_per_subject=3,
        max_memories=7,
    )
    pinned: set[str] = set()
    for who, n, pin in ops:
        try:
            memory = await save(service, f"{who} fact {n}.", subject=who, pinned=pin)
        except Conflict:
            continue  # everything in scope pinned: refused, nothing lost
        if pin:
            pinned.add(memory["id"])
    listed = (await call(service, "memory::list", limit=500))["memories"]
    assert len(listed) <= 7 or len(pinned) >= 7
    for who in ("ana", "bruno"):
        mine = [m for m in listed if m.get("subject") == who]
        assert len(mine) <= 3 or all(m["pinned"] for m in mine)
    assert pinned <= {m["id"] for m in listed}
    for bank in service.store.names():
        await service.store.trash(bank, service.clock())


@given(
    ids=st.lists(
        st.one_of(st.from_regex(r"fp[0-9a-f]{16}", fullmatch=True), st.text()), max_size=6
    ),
    now_ms=st.one_of(st.integers(0, 2**62), st.floats(0, 1e13)),
)
def test_an_access_line_is_what_json_dumps_writes(ids: list[str], now_ms: int) -> None:
    # The line a recall appends is formatted directly for plain ids: byte for byte json's.
    want = json.dumps({"at": now_ms, "ids": ids}, separators=(",", ":")).encode() + b"\n"
    assert access_line(now_ms, ids) == want


async def test_an_import_never_retires_unpins_or_rewrites_a_pinned_memory(
    service: MemoryService,
) -> None:
    saved = await catalog.call(
        service, "memory::save", {"text": "The user was born in 1990.", "pinned": True}
    )
    pinned = saved["memory"]
    newer = {"id": pinned["id"], "text": pinned["text"], "revision": pinned["revision"] + 1}
    for change in (
        {"invalid_at": pinned["created_at"] + 1},
        {"pinned": False},
        {"text": "The user was born in 1991."},
    ):
        rows = [{"text": "The user likes tea"}, {**newer, "pinned": True, **change}]
        with pytest.raises(Conflict, match="pinned memory; unpin it first"):
            await catalog.call(service, "memory::import", {"bank": "main", "records": rows})
    got = await catalog.call(service, "memory::get", {"id": pinned["id"]})
    assert got["memory"] == pinned  # nothing imported, not even the other row
    listed = await catalog.call(service, "memory::list", {})
    assert [m["text"] for m in listed["memories"]] == [pinned["text"]]
    same = {**newer, "pinned": True, "revision": pinned["revision"]}
    await catalog.call(service, "memory::import", {"bank": "main", "records": [same]})
