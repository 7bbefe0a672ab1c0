"""MemoryService over a real Store on tmp_path, with a recording emitter and a fixed clock."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from memory_worker.app import catalog
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    StorageError,
)
from memory_worker.core.models import Memory
from memory_worker.storage.bank import Bank
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter
from .holds import hold_every_log_sync, hold_log_syncs


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload)


async def save(service: MemoryService, text: str, **payload: Any) -> dict[str, Any]:
    result = await call(service, "memory::save", text=text, **payload)
    memory: dict[str, Any] = result["memory"]
    return memory


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


class TestBanks:
    async def test_create_is_idempotent_and_announced_once(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        first = await call(service, "memory::bank::create", name="blog", description="Posts")
        again = await call(service, "memory::bank::create", name="blog", description="other")
        assert first["created"] and not again["created"]
        assert again["bank"]["description"] == "Posts"  # the first create wins
        assert emitter.of(BANK_CHANGED) == [
            {"event_type": "created", "bank": "blog", "event_id": ANY}
        ]

    @pytest.mark.parametrize("name", ["../evil", "Bad", "-lead", "", "a" * 65, ".trash", "a/b"])
    async def test_invalid_names_are_refused_and_create_nothing(
        self, service: MemoryService, data_dir: Path, name: str
    ) -> None:
        before = _tree(data_dir)
        with pytest.raises(InvalidInput, match="must match"):
            await call(service, "memory::bank::create", name=name)
        assert _tree(data_dir) == before

    async def test_list_counts_live_pinned_and_rules(self, service: MemoryService) -> None:
        await save(service, "The user likes tea", bank="b1", pinned=True)
        doomed = await save(service, "The user likes coffee", bank="b1")
        await call(service, "memory::delete", bank="b1", id=doomed["id"])
        await call(service, "memory::rule::set", bank="b1", name="style", content="Be brief.")
        banks = (await call(service, "memory::bank::list"))["banks"]
        assert banks == [
            {
                "name": "b1",
                "description": "",
                "memories": 1,
                "pinned": 1,
                "rules": 1,
                "subjects": 0,
                "settings": ANY,  # tests/test_bank_settings.py
                "settings_revision": ANY,
            }
        ]

    async def test_delete_moves_to_trash_and_a_recreated_bank_starts_empty(
        self, service: MemoryService, store: Store, emitter: RecordingEmitter, clock: FixedClock
    ) -> None:
        await save(service, "Secret plans for the blog", bank="blog")
        result = await call(service, "memory::bank::delete", name="blog")
        trashed = Path(result["trashed_to"])
        assert trashed.parent == store.root / ".trash"
        assert trashed.name == f"blog-{clock()}"
        assert (trashed / "memories.jsonl").read_text().count("Secret plans") == 1
        assert {"event_type": "trashed", "bank": "blog", "event_id": ANY} in emitter.of(
            BANK_CHANGED
        )
        with pytest.raises(BankNotFound):
            await call(service, "memory::list", bank="blog")
        await call(service, "memory::bank::create", name="blog")
        assert (await call(service, "memory::recall", bank="blog", query="plans"))["memories"] == []

    async def test_deleting_a_missing_bank_is_bank_not_found(self, service: MemoryService) -> None:
        with pytest.raises(BankNotFound):
            await call(service, "memory::bank::delete", name="nope")


class TestSave:
    async def test_first_save_creates_bank_and_memory_with_events(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        result = await call(service, "memory::save", text="The user is called Ana", tags="people")
        assert result["created"] and result["redacted"] == []
        memory = result["memory"]
        assert memory["tags"] == ["people"] and memory["confidence"] == "stated"
        bank_event = {"event_type": "created", "bank": "main", "event_id": ANY}
        assert emitter.events[0] == (BANK_CHANGED, bank_event)
        assert emitter.events[1] == (
            ITEM_CHANGED,
            {"event_type": "created", "bank": "main", "memory": memory, "event_id": ANY},
        )

    async def test_a_first_save_that_fails_leaves_no_bank_and_announces_nothing(
        self, service: MemoryService, emitter: RecordingEmitter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The bank a failed first write created goes again (a failed call changes nothing), and
        the error reaching the caller is the write's own."""

        async def refused(bank: Bank, records: Sequence[Memory]) -> None:
            raise StorageError("disk refused")

        monkeypatch.setattr(Bank, "commit", refused)
        with pytest.raises(StorageError, match="disk refused"):
            await call(service, "memory::save", bank="fresh", text="The user is called Ana")
        assert service.store.find("fresh") is None
        assert not (service.store.root / "fresh").exists()
        assert emitter.events == []

    async def test_every_event_carries_its_own_identity(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        first = await save(service, "The user is called Ana")
        await save(service, "The user is called Ana")  # reinforced: another change, another event
        await call(service, "memory::delete", id=first["id"])
        ids = [payload["event_id"] for _, payload in emitter.events]
        assert len(ids) == 4 and len(set(ids)) == 4
        assert all(isinstance(i, str) and len(i) == 32 for i in ids)

    async def test_resave_reinforces_instead_of_duplicating(self, service: MemoryService) -> None:
        first = await save(service, "User prefers short names", tags=["style"], pinned=True)
        result = await call(
            service, "memory::save", text="  user PREFERS short   names ", tags=["naming"]
        )
        again = result["memory"]
        assert not result["created"]
        assert again["id"] == first["id"] and again["text"] == first["text"]
        assert again["corroboration"] == 1 and again["revision"] == 1
        assert again["tags"] == ["style", "naming"] and again["pinned"]
        total = (await call(service, "memory::list"))["total"]
        assert total == 1

    async def test_a_resave_in_another_unicode_form_reinforces_instead_of_duplicating(
        self, service: MemoryService
    ) -> None:
        """The same words composed ("São", U+00E3) or decomposed ("a" + U+0303, as macOS and
        some keyboards hand them out) are the same text: a re-save in the other form reinforces
        the memory, whichever form came first. The id stays the fingerprint of the first text."""
        composed = "The user lives in S\u00e3o Paulo"
        decomposed = "The user lives in Sa\u0303o Paulo"
        for first, second in (
            (composed, decomposed),
            (decomposed.replace("Paulo", "Vicente"), composed.replace("Paulo", "Vicente")),
        ):
            saved = await save(service, first)
            result = await call(service, "memory::save", text=second)
            assert not result["created"], second
            assert result["memory"]["id"] == saved["id"] and result["memory"]["text"] == first
            assert result["memory"]["corroboration"] == 1
        assert (await call(service, "memory::list"))["total"] == 2

    async def test_a_save_in_the_other_unicode_form_finds_the_first_still_in_flight(
        self, service: MemoryService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same words in the other form (and case) saved while the first save's fsync still
        runs: the second finds the first among the writes in flight and reinforces it."""
        await save(service, "The user likes tea")  # the bank exists: its log can be held
        bank = service.store.get("main")
        entered, release = hold_log_syncs(monkeypatch, bank)
        commits: list[Sequence[Memory]] = []
        second_decided = asyncio.Event()
        real_commit = bank.commit

        async def commit(records: Sequence[Memory]) -> None:  # called once the save decided
            commits.append(records)
            if len(commits) == 2:
                second_decided.set()
            await real_commit(records)

        monkeypatch.setattr(bank, "commit", commit)
        decomposed = "The user lives in Sa\u0303o Paulo"
        first = asyncio.create_task(call(service, "memory::save", text=decomposed))
        assert await asyncio.to_thread(entered.wait, 10)
        second = asyncio.create_task(
            call(service, "memory::save", text="THE USER LIVES IN S\u00c3O  PAULO")
        )
        await asyncio.wait_for(second_decided.wait(), 10)
        assert bank.in_flight()  # the first is still on its way
        release.set()
        made, reinforced = await first, await second
        assert made["created"] and not reinforced["created"]
        assert reinforced["memory"]["id"] == made["memory"]["id"]
        assert reinforced["memory"]["text"] == decomposed
        assert reinforced["memory"]["corroboration"] == 1
        assert (await call(service, "memory::list"))["total"] == 2

    async def test_invisible_characters_at_the_edges_are_trimmed_like_spaces(
        self, service: MemoryService
    ) -> None:
        """A byte-order mark or a zero-width space pasted before or after a text is as invisible
        as a space: trimmed, so the re-save reinforces instead of making a look-alike duplicate,
        and a text of nothing else is as empty as a blank one."""
        saved = await save(service, "The user likes green tea")
        result = await call(
            service, "memory::save", text="\ufeff\u200b The user likes green tea\u2060\u200b "
        )
        assert not result["created"] and result["memory"]["id"] == saved["id"]
        assert result["memory"]["text"] == "The user likes green tea"
        for blank in ("\u200b\u200b\u200b", "\ufeff \u200b\u2060 \ufeff", "\u200bok\u200b"):
            with pytest.raises(InvalidInput, match="at least 3 characters"):
                await call(service, "memory::save", text=blank)
            with pytest.raises(InvalidInput, match="at least 3 characters"):
                await call(service, "memory::update", id=saved["id"], text=blank)

    async def test_resave_after_delete_resurrects_with_continued_revision(
        self, service: MemoryService, data_dir: Path, clock: FixedClock
    ) -> None:
        memory = await save(service, "The user lives in Porto")
        clock.advance()
        await call(service, "memory::delete", id=memory["id"])
        clock.advance()
        result = await call(service, "memory::save", text="The user lives in Porto")
        assert result["created"] and result["memory"]["revision"] == 2
        assert "invalid_at" not in result["memory"]
        reopened = await _reopen(service, data_dir)
        got = await call(reopened, "memory::get", id=memory["id"])
        assert "invalid_at" not in got["memory"] and got["memory"]["revision"] == 2
        await reopened.store.close()

    async def test_iii_trigger_style_coercion(self, service: MemoryService) -> None:
        result = await call(
            service,
            "memory::save",
            text=42424,
            tags="a, b",
            pinned=True,  # JSON true, as `iii trigger pinned=true` decodes it
            _caller_worker_id="w1",
            unknown="ignored",
        )
        assert result["memory"]["text"] == "42424"
        assert result["memory"]["tags"] == ["a", "b"] and result["memory"]["pinned"] is True

    async def test_a_number_given_for_a_list_is_a_list_of_its_text(
        self, service: MemoryService
    ) -> None:
        """`iii trigger memory::save … tags=2024` decodes `2024` as JSON: a number, the one
        value of the list as `tags=blog` is (and `tag=2024` already filters on "2024")."""
        saved = await call(
            service, "memory::save", text="Posts about the 2024 election", tags=2024, entities=7
        )
        assert saved["memory"]["tags"] == ["2024"] and saved["memory"]["entities"] == ["7"]
        updated = await call(service, "memory::update", id=saved["memory"]["id"], tags=2025)
        assert updated["memory"]["tags"] == ["2025"]
        listed = await call(service, "memory::list", tag=2025)
        assert [m["id"] for m in listed["memories"]] == [saved["memory"]["id"]]

    @pytest.mark.parametrize(
        "payload",
        [
            {},
            {"text": "ab"},
            {"text": "x" * 2001},
            {"text": ["a"]},
            {"text": "ok text", "pinned": "maybe"},
            {"text": "ok text", "bank": "Bad Name"},
            {"text": "ok text", "tags": [{"a": 1}]},
        ],
    )
    async def test_bad_input_is_invalid_and_writes_nothing(
        self, service: MemoryService, data_dir: Path, payload: dict[str, Any]
    ) -> None:
        before = _tree(data_dir)
        with pytest.raises(InvalidInput):
            await catalog.call(service, "memory::save", payload)
        assert _tree(data_dir) == before


class TestReadsAndHistory:
    async def test_default_bank_reads_before_first_write_are_empty_and_create_nothing(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        assert (await call(service, "memory::list"))["total"] == 0
        assert (await call(service, "memory::recall", query="anything"))["memories"] == []
        assert (await call(service, "memory::tags"))["tags"] == []
        assert (await call(service, "memory::rule::list"))["rules"] == []
        assert not (data_dir / "main").exists()
        with pytest.raises(MemoryNotFound):
            await call(service, "memory::get", id="fp0000000000000000")

    @pytest.mark.parametrize(
        ("function_id", "payload"),
        [
            ("memory::list", {"category": "bogus"}),
            ("memory::list", {"tag": "a\x00b"}),
            ("memory::list", {"subject": "x" * 1000}),
            ("memory::get", {"id": "fp0000000000000000", "subject": "x" * 1000}),
            ("memory::preview", {"query": "tea", "subject": "x" * 1000}),
        ],
        ids=["list category", "list tag", "list subject", "get subject", "preview subject"],
    )
    @pytest.mark.parametrize("written", [False, True], ids=["before", "after first write"])
    async def test_a_bad_filter_is_invalid_input_whatever_the_bank_holds(
        self, service: MemoryService, function_id: str, payload: dict[str, Any], written: bool
    ) -> None:
        if written:
            await save(service, "The user likes tea")
        with pytest.raises(InvalidInput):
            await call(service, function_id, **payload)

    async def test_list_is_newest_first_with_paging_tag_filter_and_history(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        ids = []
        for i in range(5):
            clock.advance()
            tags = ["even"] if i % 2 == 0 else []
            ids.append((await save(service, f"memory number {i}", tags=tags))["id"])
        clock.advance()
        await call(service, "memory::delete", id=ids[0])
        page = await call(service, "memory::list", limit=2, offset=1)
        assert page["total"] == 4
        assert [m["id"] for m in page["memories"]] == [ids[3], ids[2]]
        tagged = await call(service, "memory::list", tag="EVEN")
        assert [m["id"] for m in tagged["memories"]] == [ids[4], ids[2]]
        history = await call(service, "memory::list", include_superseded=True)
        assert history["total"] == 5 and history["memories"][0]["id"] == ids[0]

    async def test_get_returns_tombstones(self, service: MemoryService) -> None:
        memory = await save(service, "The user owns a cat")
        deleted = (await call(service, "memory::delete", id=memory["id"]))["memory"]
        got = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert got == deleted and got["invalid_at"] is not None

    async def test_a_tag_filter_is_normalised_like_the_stored_tags(
        self, service: MemoryService
    ) -> None:
        tagged = await save(service, "one thing here", tags=["My  Tag"])
        assert tagged["tags"] == ["my tag"]
        for asked in ("my  tag", " MY tag ", "my\ttag"):
            listed = await call(service, "memory::list", tag=asked)
            assert [m["id"] for m in listed["memories"]] == [tagged["id"]], asked
            found = await call(service, "memory::recall", query="one thing", tag=asked)
            assert [h["memory"]["id"] for h in found["memories"]] == [tagged["id"]], asked

    async def test_a_tag_is_one_tag_whatever_unicode_form_it_was_typed_in(
        self, service: MemoryService
    ) -> None:
        """ "café" composed and decomposed (macOS hands out the latter), or "ＡＰＩ" typed in an
        IME's full-width mode, read the same to a person: one tag, and a filter in any of the
        forms finds it (they were two tags in `memory::tags`, and a filter in the other form
        found nothing)."""
        composed, decomposed = "caf\u00e9", "cafe\u0301"
        first = await save(service, "one thing here", tags=[composed, "\uff21\uff30\uff29"])
        second = await save(service, "two things here", tags=[decomposed, "api"])
        assert first["tags"] == second["tags"] == [composed, "api"]
        assert (await call(service, "memory::tags"))["tags"] == [
            {"tag": "api", "count": 2},
            {"tag": composed, "count": 2},
        ]
        both = {first["id"], second["id"]}
        for asked in (composed, decomposed, "CAFE\u0301", "api", "\uff41\uff50\uff49"):
            listed = await call(service, "memory::list", tag=asked)
            assert {m["id"] for m in listed["memories"]} == both, asked
            found = await call(service, "memory::recall", query="thing", tag=asked)
            assert {h["memory"]["id"] for h in found["memories"]} == both, asked

    async def test_a_blank_tag_is_no_tag_and_a_blank_filter_no_filter(
        self, service: MemoryService
    ) -> None:
        """A tag of spaces or zero-width characters is dropped like "" (it was stored as an
        invisible tag), and a filter of them filters nothing, as `tag: ""` does (it matched
        nothing)."""
        saved = await save(service, "The user likes black tea", tags=[" ", "\u200b", "\ufefftea"])
        assert saved["tags"] == ["tea"]
        for blank in ("", " ", "\t", "\u200b"):
            listed = await call(service, "memory::list", tag=blank)
            assert [m["id"] for m in listed["memories"]] == [saved["id"]], repr(blank)
            found = await call(service, "memory::recall", query="black tea", tag=blank)
            assert [h["memory"]["id"] for h in found["memories"]] == [saved["id"]], repr(blank)

    async def test_tags_count_live_memories_most_used_first(self, service: MemoryService) -> None:
        await save(service, "one thing here", tags=["b", "a"])
        await save(service, "two things here", tags=["b"])
        dead = await save(service, "three things here", tags=["c"])
        await call(service, "memory::delete", id=dead["id"])
        assert (await call(service, "memory::tags"))["tags"] == [
            {"tag": "b", "count": 2},
            {"tag": "a", "count": 1},
        ]


class TestUpdateDeletePin:
    @pytest.mark.parametrize(
        ("function_id", "change"),
        [
            ("memory::update", {"text": "The user lives in Porto"}),
            ("memory::update", {"tags": ["moved"]}),
            ("memory::delete", {}),
            ("memory::pin", {"pinned": False}),
        ],
    )
    @pytest.mark.parametrize("via", ["consolidate", "extraction"])
    async def test_an_automatic_path_never_changes_a_pinned_or_retired_memory(
        self, service: MemoryService, emitter: RecordingEmitter, function_id: str,
        change: dict[str, Any], via: str,
    ) -> None:  # fmt: skip
        """Only a person's or an agent's explicit call changes a pinned memory, or a retired
        one: consolidation's and extraction's calls are refused (save and supersede were)."""
        pinned = await save(service, "The user lives in Lisbon", pinned=True)
        retired = await save(service, "The user works at Acme")
        await call(service, "memory::delete", id=retired["id"])
        emitter.clear()
        automatic = Caller.internal(via)
        for memory, state in ((pinned, "pinned"), (retired, "retired")):
            payload = {"id": memory["id"], **change}
            with pytest.raises(Conflict, match=f"is {state}: {via} never touches it"):
                await catalog.call(service, function_id, payload, automatic)
        assert emitter.events == []
        kept = await call(service, "memory::get", id=pinned["id"])
        assert (kept["memory"]["text"], kept["memory"]["pinned"]) == (pinned["text"], True)

    async def test_update_bumps_revision_and_new_text_is_findable_by_fingerprint(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        memory = await save(service, "The user lives in Lisbon")
        updated = (
            await call(service, "memory::update", id=memory["id"], text="The user lives in Porto")
        )["memory"]
        assert updated["revision"] == 1 and updated["id"] == memory["id"]
        assert emitter.events[-1][1]["event_type"] == "updated"
        again = await call(service, "memory::save", text="the user lives in porto")
        assert not again["created"] and again["memory"]["id"] == memory["id"]
        assert again["memory"]["corroboration"] == 1

    async def test_saving_the_old_text_after_an_edit_creates_a_distinct_memory(
        self, service: MemoryService
    ) -> None:
        memory = await save(service, "The user lives in Lisbon")
        await call(service, "memory::update", id=memory["id"], text="The user lives in Porto")
        old = await call(service, "memory::save", text="The user lives in Lisbon")
        assert old["created"] and old["memory"]["id"] != memory["id"]
        ported = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert ported["text"] == "The user lives in Porto" and ported["corroboration"] == 0

    async def test_update_to_another_live_memorys_text_is_a_conflict(
        self, service: MemoryService
    ) -> None:
        await save(service, "The user likes tea")
        other = await save(service, "The user likes coffee")
        with pytest.raises(Conflict, match="duplicates"):
            await call(service, "memory::update", id=other["id"], text="the user likes TEA")

    async def test_update_needs_a_field_and_a_known_id(self, service: MemoryService) -> None:
        memory = await save(service, "The user likes tea")
        with pytest.raises(InvalidInput, match="at least one"):
            await call(service, "memory::update", id=memory["id"])
        with pytest.raises(MemoryNotFound):
            await call(service, "memory::update", id="fpnope", text="something else")

    async def test_tags_update_replaces_and_empty_list_clears(self, service: MemoryService) -> None:
        memory = await save(service, "The user likes tea", tags=["a"])
        cleared = await call(service, "memory::update", id=memory["id"], tags=[])
        assert cleared["memory"]["tags"] == []

    async def test_delete_is_a_tombstone_that_leaves_recall(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        memory = await save(service, "The user owns a red bicycle")
        await call(service, "memory::delete", id=memory["id"])
        events = len(emitter.events)
        again = await call(service, "memory::delete", id=memory["id"])  # already retired
        assert len(emitter.events) == events and again["memory"]["invalid_at"] is not None
        recall = await call(service, "memory::recall", query="red bicycle")
        assert recall["memories"] == []
        history = await call(
            service, "memory::recall", query="red bicycle", include_superseded=True
        )
        assert [h["memory"]["id"] for h in history["memories"]] == [memory["id"]]

    async def test_pin_and_unpin(self, service: MemoryService) -> None:
        memory = await save(service, "The user likes tea")
        pinned = (await call(service, "memory::pin", id=memory["id"], pinned=True))["memory"]
        assert pinned["pinned"] and pinned["revision"] == 1
        same = (await call(service, "memory::pin", id=memory["id"], pinned=True))["memory"]
        assert same["revision"] == 1  # no-op, no new revision
        with pytest.raises(InvalidInput):
            await call(service, "memory::pin", id=memory["id"])


class TestSupersede:
    async def test_merge_retires_target_and_reinforces_survivor_with_reason_on_events(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        old = await save(service, "The user drinks tea daily")
        await save(service, "The user drinks tea daily")  # corroboration 1
        new = await save(service, "Every day the user drinks tea")
        emitter.clear()
        result = await call(
            service,
            "memory::supersede",
            id=old["id"],
            superseded_by=new["id"],
            reinforce=True,
            reason="  near-duplicate  ",
        )
        assert result["reinforced"] and result["memory"]["superseded_by"] == new["id"]
        survivor = (await call(service, "memory::get", id=new["id"]))["memory"]
        assert survivor["corroboration"] == 2
        assert [(p["event_type"], p["reason"]) for p in emitter.of(ITEM_CHANGED)] == [
            ("superseded", "near-duplicate"),
            ("updated", "near-duplicate"),
        ]

    async def test_a_reason_past_any_length_is_carried_capped_at_500(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        """Seed 000: "Trimmed, capped at 500 chars" — never refused for its length."""
        old = await save(service, "The user drinks tea daily")
        new = await save(service, "Every day the user drinks tea")
        emitter.clear()
        reason = "  " + "near-duplicate " * 3_000
        await call(
            service, "memory::supersede", id=old["id"], superseded_by=new["id"], reason=reason
        )
        carried = emitter.of(ITEM_CHANGED)[0]["reason"]
        assert carried == reason.strip()[:500].strip() and len(carried) <= 500

    async def test_pinned_and_retired_targets_are_refused(self, service: MemoryService) -> None:
        pinned = await save(service, "The user was born in 1990", pinned=True)
        winner = await save(service, "The user was born in 1991")
        with pytest.raises(Conflict, match="pinned"):
            await call(service, "memory::supersede", id=pinned["id"], superseded_by=winner["id"])
        loser = await save(service, "The user was born in 1989")
        await call(service, "memory::supersede", id=loser["id"], superseded_by=winner["id"])
        with pytest.raises(Conflict, match="already retired"):
            await call(service, "memory::supersede", id=loser["id"], superseded_by=winner["id"])

    async def test_unknown_survivor_is_memory_not_found(self, service: MemoryService) -> None:
        memory = await save(service, "The user likes tea")
        with pytest.raises(MemoryNotFound, match="superseded_by"):
            await call(service, "memory::supersede", id=memory["id"], superseded_by="fpnope")


class TestCancelledCalls:
    @pytest.mark.parametrize("function_id", ["memory::save", "memory::update"])
    async def test_a_write_whose_caller_gave_up_mid_commit_still_announces_itself(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
        function_id: str,
    ) -> None:
        """An MCP client cancels a tool call (the person pressed Esc), or the engine gives up
        on a handler, while its write's fsync runs: the write lands (the commit is shielded),
        so its change event goes out too. The rest of the call was cut off with it: the
        memory was saved but the console, subscribers and the embedder never heard of it."""
        first = await save(service, "The user likes tea")
        bank = service.store.get("main")
        entered, release = hold_log_syncs(monkeypatch, bank)
        emitter.clear()
        payload: dict[str, Any] = (
            {"text": "The user likes cocoa"}
            if function_id == "memory::save"
            else {"id": first["id"], "text": "The user likes green tea"}
        )
        calling = asyncio.create_task(call(service, function_id, bank="main", **payload))
        assert await asyncio.to_thread(entered.wait, 10)
        calling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await calling
        release.set()
        await bank.drain()  # the write lands whatever its caller did
        await service.settle()
        texts = {m["text"] for m in (await call(service, "memory::list", bank="main"))["memories"]}
        assert payload["text"] in texts
        events = [(e["event_type"], e["memory"]["text"]) for e in emitter.of(ITEM_CHANGED)]
        expected = "created" if function_id == "memory::save" else "updated"
        assert events == [(expected, payload["text"])]

    async def test_a_settle_cancelled_while_it_waits_leaves_the_call_it_waited_for_running(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A save whose caller gave up runs on, and `settle` (or `close`: a hook past its budget
        while its door closes) waits for it; that wait cancelled must not cancel the save: its
        record lands all the same, and then the bank it made was left unannounced (and never
        settled) and the memory's own event never went out."""
        entered, release = hold_every_log_sync(monkeypatch)  # the new bank's too
        calling = asyncio.create_task(
            call(service, "memory::save", bank="fresh", text="The user likes cocoa")
        )
        assert await asyncio.to_thread(entered.wait, 10)
        calling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await calling
        settling = asyncio.create_task(service.settle())
        await asyncio.sleep(0)  # it waits for the save
        settling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await settling
        release.set()
        await service.store.get("fresh").drain()
        await service.settle()
        assert [(e["event_type"], e["memory"]["text"]) for e in emitter.of(ITEM_CHANGED)] == [
            ("created", "The user likes cocoa")
        ]
        assert [e["event_type"] for e in emitter.of(BANK_CHANGED)] == ["created"]
        assert not service.store.get("fresh").unsettled


class TestImportEvents:
    async def test_an_import_announces_each_memory_it_changes_and_nothing_else(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        kept = await save(service, "The user drinks tea daily")
        edited = await save(service, "The user lives in Lisbon")
        retired = await save(service, "The user works at Acme")
        emitter.clear()
        rows = [
            kept,  # re-imported as it is: nothing changes
            {**edited, "text": "The user lives in Porto", "revision": 1},
            {**retired, "revision": 1, "invalid_at": 5, "superseded_by": edited["id"]},
            {"id": "fpnew1", "text": "The user plays chess", "revision": 0},
            {"id": "fpnew1", "text": "The user plays chess weekly", "revision": 1},
            {"id": "fpold1", "text": "The user once had a cat", "invalid_at": 5},  # never live
            {"id": "fpkey1", "text": "The user's key is sk-ant-api03-" + "a" * 90},
        ]
        await call(service, "memory::import", bank="main", records=rows)
        events = [
            (p["event_type"], p["memory"]["id"], p.get("reason")) for p in emitter.of(ITEM_CHANGED)
        ]
        assert events == [
            ("updated", edited["id"], None),
            ("superseded", retired["id"], None),
            ("created", "fpnew1", None),
            ("created", "fpkey1", "redacted: anthropic-key"),
        ]
        chess = next(p["memory"] for p in emitter.of(ITEM_CHANGED) if p["memory"]["id"] == "fpnew1")
        assert chess["text"] == "The user plays chess weekly"  # the newest revision, as stored
        emitter.clear()
        # Again: every record is already there.
        await call(service, "memory::import", bank="main", records=rows)
        assert emitter.of(ITEM_CHANGED) == []

    async def test_an_import_of_new_memories_reads_no_log(
        self, service: MemoryService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Only an older revision than RAM's latest needs the log to tell whether it is held:
        read for every request of a large import, it parsed every line imported before (a 100k
        import took 3× as long)."""
        from memory_worker.storage.bank import Bank

        await save(service, "The user lives in Lisbon")
        reads: list[object] = []

        async def revisions(bank: Bank, ids: object) -> list[object]:
            reads.append(ids)
            return []

        monkeypatch.setattr(Bank, "revisions", revisions)
        rows = [{"id": f"fpnew{i}", "text": f"The user owns book {i}"} for i in range(5)]
        result = await call(service, "memory::import", bank="main", records=rows)
        assert result["imported"] == 5 and reads == []

    async def test_an_import_of_what_the_log_holds_writes_nothing(
        self, service: MemoryService
    ) -> None:
        """An export imported again (a migration run twice) appended every revision a second
        time: each memory's history listed each revision twice."""
        first = await save(service, "The user lives in Lisbon")
        await call(service, "memory::update", id=first["id"], text="The user lives in Porto")
        await save(service, "The user drinks tea daily")
        log = service.store.root / "main" / "memories.jsonl"
        exported = [json.loads(line) for line in log.read_text().splitlines()]
        rows = [{k: v for k, v in r.items() if k not in ("crc", "batch")} for r in exported]
        before = log.read_bytes()
        again = await call(service, "memory::import", bank="main", records=rows)
        assert (again["imported"], again["live"]) == (0, 0)
        assert log.read_bytes() == before
        history = await call(service, "memory::history", id=first["id"])
        assert [r["revision"] for r in history["revisions"]] == [0, 1]
        partly = [*rows, {**rows[-1], "text": "The user drinks green tea daily", "revision": 1}]
        assert (await call(service, "memory::import", bank="main", records=partly))["imported"] == 1

    async def test_a_record_without_an_id_whose_text_the_bank_holds_is_not_a_second_memory(
        self, service: MemoryService
    ) -> None:
        """Records without an id (a mem0 export, a markdown vault, a hand-written file) imported
        a second time — or a fact the bank already held — became a second memory with a salted
        id: every memory doubled at each run, and a kill mid-way could not be retried. Content
        ids make the same fact one memory; a pinned one is not refused nor touched."""
        pinned = await save(service, "The user likes green tea", pinned=True)
        rows = [
            {"text": "The user likes green tea"},
            {"text": "The user lives in Lisbon", "tags": ["home"]},
            {"text": "Ana lives in Porto", "subject": "ana"},
        ]
        first = await call(service, "memory::import", bank="main", records=rows)
        assert first["imported"] == 2
        again = await call(service, "memory::import", bank="main", records=rows)
        assert again["imported"] == 0
        listed = await call(service, "memory::list", bank="main")
        texts = sorted(m["text"] for m in listed["memories"])
        assert texts == [
            "Ana lives in Porto",
            "The user likes green tea",
            "The user lives in Lisbon",
        ]
        kept = await call(service, "memory::get", bank="main", id=pinned["id"])
        assert kept["memory"]["pinned"] and kept["memory"]["revision"] == 0
        # The same words about another person are another memory.
        other = await call(
            service, "memory::import", bank="main", records=[{"text": "Ana lives in Porto"}]
        )
        assert other["imported"] == 1

    async def test_one_text_twice_in_an_import_without_ids_is_each_persons_memory_once(
        self, service: MemoryService
    ) -> None:
        """A mem0 export of several users, or a vault holding one line in two notes: records
        without an id were all given their text's fingerprint, so the same words about Ana and
        about Bruno were one id and the later record replaced the earlier (Ana's memory gone,
        both counted as imported), and a fact twice in the file was written twice as revision
        0 of one id, the first's tags lost."""
        rows = [
            {"text": "The user likes green tea", "tags": ["drinks"]},
            {"text": "the user  likes green tea"},  # the same fact again, first one kept
            {"text": "Likes hiking in the Alps", "subject": "ana"},
            {"text": "Likes hiking in the Alps", "subject": "bruno"},
        ]
        first = await call(service, "memory::import", bank="main", records=rows)
        assert (first["imported"], first["live"]) == (3, 3)
        listed = await call(service, "memory::list", bank="main", include_superseded=True)
        found = sorted((m["text"], m.get("subject"), tuple(m["tags"])) for m in listed["memories"])
        assert found == [
            ("Likes hiking in the Alps", "ana", ()),
            ("Likes hiking in the Alps", "bruno", ()),
            ("The user likes green tea", None, ("drinks",)),
        ]
        log = service.store.root / "main" / "memories.jsonl"
        assert len(log.read_text().splitlines()) == 3
        again = await call(service, "memory::import", bank="main", records=rows)
        assert again["imported"] == 0

    async def test_an_export_imported_again_keeps_why_a_memory_was_retired(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """An expired or evicted memory's tombstone says why (`invalid_reason`); the import
        dropped the field, so an export imported again appended every such tombstone once more
        (history listed it twice) and, as the newest record, it said no more why."""
        await call(service, "memory::bank::create", name="main", retention={"context": 1})
        gone = (await save(service, "The user debugs the parser.", category="context"))["id"]
        clock.advance_days(2)
        assert (await call(service, "memory::stats", bank="main"))["expired"] == [gone]
        log = service.store.root / "main" / "memories.jsonl"
        before = log.read_bytes()
        rows = (await call(service, "memory::export", bank="main"))["records"]
        again = await call(service, "memory::import", bank="main", records=rows)
        assert again["imported"] == 0 and log.read_bytes() == before
        moved = await call(service, "memory::import", bank="copy", records=rows)
        assert moved["imported"] == len(rows)
        copy = await call(service, "memory::get", bank="copy", id=gone)
        assert copy["memory"]["invalid_reason"] == "expired"


class TestRecall:
    async def test_tag_filter_applies_before_truncation(self, service: MemoryService) -> None:
        for i in range(5):
            await save(service, f"the garden needs water {i} garden garden")
        tagged = await save(service, "water the garden plants", tags=["home"])
        result = await call(service, "memory::recall", query="garden water", limit=1, tag="home")
        assert [h["memory"]["id"] for h in result["memories"]] == [tagged["id"]]

    async def test_a_memory_outside_the_tag_lends_no_words_to_the_ones_inside(
        self, service: MemoryService
    ) -> None:
        for i in range(3):
            await save(service, f"Project alpha note {i} about deployment", tags=["alpha"])
        await save(service, "Deployment of beta uses kubernetes", tags=["beta"])
        # No alpha memory says anything about kubernetes: the beta one must not bring them in.
        result = await call(service, "memory::recall", query="kubernetes", tag="alpha")
        assert result["memories"] == []

    async def test_a_memory_of_another_category_lends_no_words_to_the_ones_asked_for(
        self, service: MemoryService
    ) -> None:
        for i in range(3):
            await save(service, f"Project alpha note {i} about deployment", category="procedure")
        await save(service, "Deployment of beta uses kubernetes", category="context")
        result = await call(service, "memory::recall", query="kubernetes", category="procedure")
        assert result["memories"] == []

    async def test_a_category_recall_is_not_cut_by_the_scores_of_other_categories(
        self, service: MemoryService
    ) -> None:
        # Strong matches of another category must not set the relevance cutoff for the asked one.
        for i in range(6):
            await save(service, f"garden water garden water garden plan {i}", category="context")
        liked = await save(service, "The user likes a garden in the shade", category="preference")
        result = await call(
            service, "memory::recall", query="garden water plan", category="preference"
        )
        assert [h["memory"]["id"] for h in result["memories"]] == [liked["id"]]

    async def test_a_memory_saved_after_as_of_lends_no_words_to_older_ones(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        for i in range(3):
            await save(service, f"Project alpha note {i} about deployment")
        then = clock()
        clock.advance_days(1)
        await save(service, "Deployment of beta uses kubernetes")
        result = await call(service, "memory::recall", query="kubernetes", as_of=then)
        assert result["memories"] == []

    @pytest.mark.parametrize("query", ["Lisboa", "cafe", "acucar"])
    async def test_a_short_query_finds_a_memory_stemmed_as_portuguese(
        self, service: MemoryService, query: str
    ) -> None:
        # One word says no language (it is stemmed as English); the memory is Portuguese.
        memory = await save(service, "O usuário mora em Lisboa e toma café sem açúcar")
        for mode in ("hybrid", "lexical"):
            result = await call(service, "memory::recall", query=query, mode=mode)
            assert [h["memory"]["id"] for h in result["memories"]] == [memory["id"]], mode

    @pytest.mark.parametrize(
        ("query", "text"),
        [("chá", "chás verdes"), ("cafés", "café"), ("viagem", "viagens"), ("animais", "animal")],
    )
    async def test_a_portuguese_singular_finds_its_plural(
        self, service: MemoryService, query: str, text: str
    ) -> None:
        """Snowball keeps "cafés", "viagens" and "animais" apart from "café" ("caf"), "viagem"
        ("viag") and "animal": a question in one number missed a memory in the other."""
        memory = await save(service, f"O usuário gosta de {text} sem açúcar")
        for mode in ("hybrid", "lexical"):
            result = await call(service, "memory::recall", query=query, mode=mode)
            assert [h["memory"]["id"] for h in result["memories"]] == [memory["id"]], mode

    async def test_an_english_irregular_plural_finds_its_singular(
        self, service: MemoryService
    ) -> None:
        memory = await save(service, "The user has one child, Tom")
        for mode in ("hybrid", "lexical"):
            result = await call(service, "memory::recall", query="children", mode=mode)
            assert [h["memory"]["id"] for h in result["memories"]] == [memory["id"]], mode

    async def test_a_negative_contraction_alone_recalls_nothing(
        self, service: MemoryService
    ) -> None:
        """ "isn't" is a stopword, but the tokenizer made it "isn" + "t": "it isn't working"
        recalled every memory with a negation in it, and the hook handed them to the turn."""
        await save(service, "The office isn't open on Sundays")
        await save(service, "Rafa didn't finish the marathon")
        for query in ("it isn't working", "didn't you say so"):
            result = await call(service, "memory::recall", query=query)
            assert result["memories"] == [], query

    async def test_modes_name_the_retrieval_that_ran(self, service: MemoryService) -> None:
        await save(service, "The user plays chess on Sundays")
        hybrid = await call(service, "memory::recall", query="chess")
        lexical = await call(service, "memory::recall", query="chess", mode="lexical")
        semantic = await call(service, "memory::recall", query="chess", mode="semantic")
        assert hybrid["retrieval"] == "bm25-entity" and len(hybrid["memories"]) == 1
        assert lexical["retrieval"] == "lexical" and len(lexical["memories"]) == 1
        assert semantic == {"bank": "main", "memories": [], "retrieval": "semantic-unavailable"}
        with pytest.raises(InvalidInput):
            await call(service, "memory::recall", query="chess", mode="fuzzy")

    async def test_as_of_ranks_over_memories_live_then(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        old = await save(service, "The user works at Acme")
        t_old = clock()
        clock.advance_days(10)
        new = await save(service, "The user works at Globex")
        await call(service, "memory::supersede", id=old["id"], superseded_by=new["id"])
        then = await call(service, "memory::recall", query="where does the user work", as_of=t_old)
        assert [h["memory"]["id"] for h in then["memories"]] == [old["id"]]
        now = await call(service, "memory::recall", query="where does the user work")
        assert [h["memory"]["id"] for h in now["memories"]] == [new["id"]]

    async def test_as_of_ranks_a_memory_by_what_it_said_then(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        memory = await save(service, "The user lives in Lisbon")
        then = clock()
        clock.advance_days(10)
        await call(service, "memory::update", id=memory["id"], text="The user lives in Porto")
        lisbon = await call(service, "memory::recall", query="lisbon", as_of=then)
        assert [h["memory"]["text"] for h in lisbon["memories"]] == ["The user lives in Lisbon"]
        porto = await call(service, "memory::recall", query="porto", as_of=then)
        assert porto["memories"] == []  # said only ten days later

    async def test_as_of_leaves_out_a_memory_deleted_then_and_saved_again_since(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        memory = await save(service, "The user works at Acme")
        clock.advance_days(1)
        await call(service, "memory::delete", id=memory["id"])
        clock.advance_days(1)
        deleted_then = clock()
        clock.advance_days(1)
        await save(service, "The user works at Acme")  # brought back
        then = await call(service, "memory::recall", query="acme", as_of=deleted_then)
        assert then["memories"] == []
        now = await call(service, "memory::recall", query="acme")
        assert [h["memory"]["id"] for h in now["memories"]] == [memory["id"]]

    async def test_as_of_shows_a_memory_deleted_since_as_it_was_then(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """A memory retired since `as_of` is ranked and returned from its record then: its tags
        then (a `tag` filter found the later tags instead), not the tombstone written later."""
        memory = await save(service, "The user works at Acme", tags=["work"])
        then = clock()
        clock.advance_days(1)
        await call(service, "memory::update", id=memory["id"], tags=["archive"], pinned=True)
        await save(service, "The user works at Acme")  # reinforced since
        await call(service, "memory::pin", id=memory["id"], pinned=False)
        clock.advance_days(1)
        await call(service, "memory::delete", id=memory["id"])
        for tag in (None, "work"):
            found = await call(service, "memory::recall", query="acme", as_of=then, tag=tag)
            assert [h["memory"] for h in found["memories"]] == [memory], tag
        found = await call(service, "memory::recall", query="acme", as_of=then, tag="archive")
        assert found["memories"] == []

    async def test_entities_pins_and_corroboration_lift_equal_text_matches(
        self, service: MemoryService
    ) -> None:
        plain = await save(service, "project deadline is friday")
        pinned = await save(service, "project launch is friday", pinned=True)
        result = await call(service, "memory::recall", query="project friday")
        assert [h["memory"]["id"] for h in result["memories"]][:2] == [pinned["id"], plain["id"]]

    async def test_identity_question_reaches_user_facts(self, service: MemoryService) -> None:
        await save(service, "The user's name is Ana")
        await save(service, "The office plant needs water weekly")
        result = await call(service, "memory::recall", query="what's my name?")
        assert result["memories"][0]["memory"]["text"] == "The user's name is Ana"


class TestRulesAndPreview:
    @pytest.mark.parametrize(
        ("engine_less", "fields", "captured"),
        [
            (False, {}, True),  # under an engine: the router extracts
            (False, {"extraction_enabled": False}, False),
            (True, {}, False),  # no engine, no endpoint: nothing reads the turns
            (True, {"extraction_endpoint": "http://127.0.0.1:8080/v1"}, True),
        ],
    )
    async def test_the_section_promises_capture_only_when_turns_are_extracted(
        self, service: MemoryService, engine_less: bool, fields: dict[str, Any], captured: bool
    ) -> None:
        service.engine_less = engine_less
        service.settings = Settings(**fields)
        await save(service, "The user drinks green tea")
        section = (await call(service, "memory::preview", query="tea"))["system_prompt_section"]
        assert ("saved without any tool call" in section) is captured
        assert ("Nothing is captured automatically here" in section) is not captured

    async def test_a_preview_for_a_conversation_hands_each_revision_once(
        self, service: MemoryService
    ) -> None:
        tea = await save(service, "The user drinks green tea every morning")
        ask = {"query": "what tea does the user drink"}

        async def ids(**extra: Any) -> list[str]:
            shown = await call(service, "memory::preview", **ask, **extra)
            return [m["memory"]["id"] for m in shown["memories"]]

        assert await ids() == await ids() == [tea["id"]]  # no conversation: a dry run
        assert await ids(conversation="c1") == [tea["id"]]
        assert await ids(conversation="c1") == []  # c1 holds it already
        assert await ids(conversation="c2") == [tea["id"]]
        await call(service, "memory::update", id=tea["id"], text="The user drinks oolong tea")
        assert await ids(conversation="c1") == [tea["id"]]  # a new revision is handed again
        assert await ids(conversation="c1") == []
        assert await ids(conversation="c1", fresh=True) == [tea["id"]]  # its context was reset

    async def test_rule_set_list_and_remove(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        result = await call(
            service, "memory::rule::set", name="style", content="# Style\nNo em-dashes."
        )
        revision = hashlib.sha256(b"# Style\nNo em-dashes.").hexdigest()[:16]
        assert result == {"ok": True, "exists": True, "revision": revision, "redacted": []}
        assert (data_dir / "main" / "rules" / "style.md").read_text() == "# Style\nNo em-dashes."
        rules = (await call(service, "memory::rule::list"))["rules"]
        assert [(r["name"], r["content"], r["revision"]) for r in rules] == [
            ("style", "# Style\nNo em-dashes.", revision)
        ]
        removed = await call(service, "memory::rule::set", name="style", content="  ")
        assert removed["exists"] is False
        assert not (data_dir / "main" / "rules" / "style.md").exists()
        kinds = [p["event_type"] for p in emitter.of(BANK_CHANGED)]
        assert kinds == ["created", "rules-changed", "rules-changed"]

    async def test_setting_a_rule_to_what_it_says_announces_nothing(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        """An editor saving without a change (or a script setting the same text again) changed
        nothing a subscriber or an open tab needs to refetch."""
        first = await call(service, "memory::rule::set", name="style", content="Be brief.")
        emitter.clear()
        again = await call(service, "memory::rule::set", name="style", content="Be brief.")
        assert again["revision"] == first["revision"] and emitter.events == []
        await call(service, "memory::rule::set", name="style", content="Be briefer.")
        assert [p["event_type"] for p in emitter.of(BANK_CHANGED)] == ["rules-changed"]

    async def test_concurrent_identical_rule_writes_announce_one_change(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        """Two tabs (or a script's retries) saving the same text at once change the rule once:
        one `rules-changed`, not one per call — and the same for removing it."""
        await call(service, "memory::rule::set", name="other", content="Exists already.")
        emitter.clear()
        same = [
            call(service, "memory::rule::set", name="style", content="Be brief.") for _ in range(3)
        ]
        await asyncio.gather(*same)
        assert [p["event_type"] for p in emitter.of(BANK_CHANGED)] == ["rules-changed"]
        emitter.clear()
        gone = [call(service, "memory::rule::set", name="style", content="") for _ in range(3)]
        assert all(not r["exists"] for r in await asyncio.gather(*gone))
        assert [p["event_type"] for p in emitter.of(BANK_CHANGED)] == ["rules-changed"]

    async def test_removing_a_rule_of_a_missing_bank_creates_nothing(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        result = await call(service, "memory::rule::set", bank="ghost", name="style", content="")
        assert result["exists"] is False
        assert not (data_dir / "ghost").exists() and emitter.events == []

    async def test_bad_rule_name_is_refused(self, service: MemoryService) -> None:
        with pytest.raises(InvalidInput, match="rule name"):
            await call(service, "memory::rule::set", name="../x", content="hi")

    async def test_preview_shows_section_memories_and_message(self, service: MemoryService) -> None:
        await call(service, "memory::rule::set", name="style", content="Formal register.")
        memory = await save(service, "User publishes blog posts on Tuesday mornings")
        preview = await call(service, "memory::preview", query="when do I publish blog posts")
        assert "# Memory — bank: main" in preview["system_prompt_section"]
        assert "## style\nFormal register." in preview["system_prompt_section"]
        assert preview["rules"] == 1 and preview["rules_truncated"] is False
        assert [m["memory"]["id"] for m in preview["memories"]] == [memory["id"]]
        assert preview["message"].startswith('<memory bank="main" recalled="2026-11-01">')
        assert "- [2026-11-01] User publishes blog posts on Tuesday mornings" in preview["message"]
        assert preview["retrieval"] == "bm25-entity"


class TestRedaction:
    SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"

    async def test_secret_is_redacted_everywhere_and_never_reaches_disk(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        result = await call(
            service,
            "memory::save",
            text=f"The user's OpenAI key is {self.SECRET}",
            entities=[self.SECRET],
            tags=[f"key {self.SECRET}"],
        )
        assert self.SECRET not in str(result)
        assert result["redacted"] == ["openai-key"]
        assert "[REDACTED:openai-key]" in result["memory"]["text"]
        assert emitter.of(ITEM_CHANGED)[0]["reason"] == "redacted: openai-key"
        await call(service, "memory::rule::set", name="keys", content=f"use {self.SECRET}")
        await call(
            service,
            "memory::update",
            id=result["memory"]["id"],
            text=f"The key moved: {self.SECRET}",
        )
        await call(service, "memory::bank::create", name="other", description=self.SECRET)
        for path in data_dir.rglob("*"):
            if path.is_file():
                assert self.SECRET.encode() not in path.read_bytes(), path

    async def test_markers_in_entities_and_tags_stay_exactly_as_the_redactor_writes_them(
        self, service: MemoryService
    ) -> None:
        saved = await call(
            service,
            "memory::save",
            text="The deploy key lives in the vault.",
            entities=[self.SECRET],
            tags=[f"Key {self.SECRET}"],
        )
        marker = "[REDACTED:openai-key]"
        assert saved["memory"]["entities"] == [marker]
        assert saved["memory"]["tags"] == [f"key {marker}"]
        for tag in (f"key {marker}", f"KEY {self.SECRET}"):  # a filter is normalised the same way
            listed = await call(service, "memory::list", tag=tag)
            assert [m["id"] for m in listed["memories"]] == [saved["memory"]["id"]]
            recalled = await call(service, "memory::recall", query="deploy key vault", tag=tag)
            assert [m["memory"]["id"] for m in recalled["memories"]] == [saved["memory"]["id"]]


class TestDoctorAndReload:
    async def test_doctor_roundtrip_passes_and_leaves_no_scratch(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        for _ in range(3):
            report = await call(service, "memory::doctor")
            assert report["ok"] is True
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["store-roundtrip"]["ok"] and checks["store-roundtrip"]["required"]
        assert list((data_dir / ".trash").iterdir()) == []
        assert (await call(service, "memory::bank::list"))["banks"] == []
        assert emitter.events == []

    async def test_doctor_reports_corrupt_lines_with_numbers(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await save(service, "The user likes tea")
        log = data_dir / "main" / "memories.jsonl"
        with log.open("ab") as handle:
            handle.write(b"{not json}\n")
        await call(service, "memory::reload")
        report = await call(service, "memory::doctor")
        damage = {c["name"]: c for c in report["checks"]}["files-intact"]
        assert not damage["ok"] and "main/memories.jsonl:2" in damage["detail"]
        assert report["ok"] is True  # advisory: every intact record is still served

    async def test_reload_picks_up_hand_edits(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        await save(service, "The user likes tea")
        emitter.clear()
        (data_dir / "main" / "rules" / "hand.md").write_text("Edited by hand.")
        hand = (
            '{"id":"fphand000000000001","text":"The user hand-wrote this memory",'
            '"confidence":"stated","created_at":1,"updated_at":1}\n'
        )
        with (data_dir / "main" / "memories.jsonl").open("a") as handle:
            handle.write(hand)
        assert await call(service, "memory::reload") == {"ok": True, "banks": 1}
        assert (await call(service, "memory::get", id="fphand000000000001"))["memory"]
        rules = (await call(service, "memory::rule::list"))["rules"]
        assert [r["name"] for r in rules] == ["hand"]
        # Announced as the watcher announces them: what live views show has changed.
        assert [(e["event_type"], e["memory"]["id"]) for e in emitter.of(ITEM_CHANGED)] == [
            ("created", "fphand000000000001")
        ]
        assert [e["event_type"] for e in emitter.of(BANK_CHANGED)] == ["rules-changed"]

    async def test_tags_written_by_hand_read_as_stored_and_filter_list_and_recall(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """Seed 000: tags are stored "normalized lowercase", and `memory::tags` is the filter
        source of `list` and `recall`. A tag written by hand in the log ("Billing") was listed by
        `memory::tags` as written, and no `tag` filter (normalized) ever matched it."""
        await save(service, "The user likes tea")
        hand = (
            '{"id":"fphand000000000002","text":"The invoice run is on Mondays",'
            '"confidence":"stated","created_at":1,"updated_at":1,'
            '"tags":["Billing"," Q3  Plans ","billing"," "]}\n'
        )
        with (data_dir / "main" / "memories.jsonl").open("a") as handle:
            handle.write(hand)
        await call(service, "memory::reload")

        got = (await call(service, "memory::get", id="fphand000000000002"))["memory"]
        assert got["tags"] == ["billing", "q3 plans"]
        assert (await call(service, "memory::tags"))["tags"] == [
            {"tag": "billing", "count": 1},
            {"tag": "q3 plans", "count": 1},
        ]
        for tag in ("billing", "Billing", "q3 plans"):
            listed = await call(service, "memory::list", tag=tag)
            assert [m["id"] for m in listed["memories"]] == ["fphand000000000002"], tag
        recalled = await call(service, "memory::recall", query="invoice run", tag="Q3 Plans")
        assert [h["memory"]["id"] for h in recalled["memories"]] == ["fphand000000000002"]
        history = await call(service, "memory::history", id="fphand000000000002")
        assert [r["tags"] for r in history["revisions"]] == [["billing", "q3 plans"]]

    async def test_a_category_written_by_hand_reads_as_stored_and_filters(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        """Seed 004's categories are stored lowercase (`save` takes "Preference" as
        "preference"); one written by hand as "Preference" was counted apart by `stats`, matched
        no `category` filter and escaped the category's retention."""
        await save(service, "The user likes tea")
        hand = (
            '{"id":"fphand000000000003","text":"The user prefers window seats",'
            '"confidence":"stated","created_at":1,"updated_at":1,"category":" Preference"}\n'
        )
        with (data_dir / "main" / "memories.jsonl").open("a") as handle:
            handle.write(hand)
        await call(service, "memory::reload")

        got = (await call(service, "memory::get", id="fphand000000000003"))["memory"]
        assert got["category"] == "preference"
        listed = await call(service, "memory::list", category="preference")
        assert [m["id"] for m in listed["memories"]] == ["fphand000000000003"]
        assert (await call(service, "memory::stats"))["by_category"] == {
            "fact": 1,
            "preference": 1,
        }

    async def test_the_loop_answers_while_a_reload_closes_the_replaced_banks(
        self, service: MemoryService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A replaced bank leaves its derived files (index snapshot, records, counts), made from
        the whole bank: ~0.3 s per 20,000 memories, measured, which `memory::reload` spent on
        the event loop, every other call of every bank waiting meanwhile."""
        await save(service, "The user likes tea")
        writing, answered = threading.Event(), threading.Event()
        waited: list[bool] = []

        def slow_snapshot(bank: Bank) -> None:
            writing.set()
            waited.append(answered.wait(5))  # set by the test's coroutine: the loop ran

        monkeypatch.setattr(Bank, "_save_snapshot", slow_snapshot)
        reloading = asyncio.create_task(call(service, "memory::reload"))
        assert await asyncio.to_thread(writing.wait, 10)
        answered.set()
        assert await reloading == {"ok": True, "banks": 1}
        assert waited == [True]


async def _reopen(service: MemoryService, data_dir: Path) -> MemoryService:
    await service.store.close()
    store = Store.open(data_dir, holder=HOLDER)
    return MemoryService(store, service.settings, emitter=RecordingEmitter(), clock=service.clock)


def test_event_ids_stay_random_uuid4_hex() -> None:
    """`event_id` builds its id from the random bytes itself (no `UUID` object, a write's cost):
    still what `uuid.uuid4().hex` gives, version-4 and RFC 4122 variant bits set, never twice."""
    import uuid

    from memory_worker.app.base import event_id

    ids = [event_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and len(value) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


class TestBankCreatedOnce:
    """A bank a write makes is announced (`created`) once, by the first call that lands in it or
    is told it exists: its creator, or another call when the creator's own write failed."""

    async def test_a_bank_whose_creator_failed_is_announced_by_the_save_that_landed_in_it(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        emitter.clear()
        with pytest.raises(RuntimeError):
            async with service._writing_into("fresh", SYSTEM):  # the creator
                await call(service, "memory::save", bank="fresh", text="The user likes tea")
                raise RuntimeError("the creator's own write fails")
        assert service.store.find("fresh") is not None  # a memory landed: the bank stays
        created = [e for e in emitter.of(BANK_CHANGED) if e["event_type"] == "created"]
        assert [e["bank"] for e in created] == ["fresh"]

    async def test_a_bank_create_told_it_exists_keeps_it_when_the_creators_write_fails(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        emitter.clear()
        with pytest.raises(RuntimeError):
            async with service._writing_into("told", SYSTEM):
                answer = await call(service, "memory::bank::create", name="told")
                assert answer["created"] is False  # a write is making it
                raise RuntimeError("the creator's own write fails")
        # The caller of memory::bank::create was told it exists: it is not taken away.
        got = await call(service, "memory::bank::get", name="told")
        assert got["bank"]["name"] == "told"
        created = [e for e in emitter.of(BANK_CHANGED) if e["event_type"] == "created"]
        assert [e["bank"] for e in created] == ["told"]

    async def test_a_bank_made_by_a_save_is_announced_once(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        emitter.clear()
        await call(service, "memory::save", bank="once", text="The user likes tea")
        await call(service, "memory::save", bank="once", text="The user likes cocoa")
        await call(service, "memory::bank::create", name="once")
        created = [e for e in emitter.of(BANK_CHANGED) if e["event_type"] == "created"]
        assert [e["bank"] for e in created] == ["once"]
