"""`memory::history` and `expected_revision`: every revision readable, every mutation guardable.

A stale `expected_revision` is a `conflict` that changes nothing (the log, RAM and the events stay
as they were); the right one lets the mutation through. Rules carry a revision derived from their
bytes, so a hand edit makes a stale writer fail too.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import BankNotFound, Conflict, MemoryNotFound
from memory_worker.core.models import Confidence
from memory_worker.storage.store import Store

from .conftest import HOLDER
from .fakes import FixedClock, RecordingEmitter


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload)


async def save(service: MemoryService, text: str, **payload: Any) -> dict[str, Any]:
    memory: dict[str, Any] = (await call(service, "memory::save", text=text, **payload))["memory"]
    return memory


def _log(data_dir: Path, bank: str = "main") -> bytes:
    return (data_dir / bank / "memories.jsonl").read_bytes()


class TestHistory:
    async def test_every_revision_is_returned_oldest_first_with_the_tombstone_last(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        first = await save(service, "The user lives in Porto")
        clock.advance(1000)
        await call(service, "memory::pin", id=first["id"], pinned=True)
        clock.advance(1000)
        await call(service, "memory::update", id=first["id"], text="The user lives in Braga")
        clock.advance(1000)
        await call(service, "memory::pin", id=first["id"], pinned=False)
        await call(service, "memory::delete", id=first["id"])
        history = await call(service, "memory::history", id=first["id"])
        revisions = history["revisions"]
        assert [r["revision"] for r in revisions] == [0, 1, 2, 3, 4]
        assert [r["text"] for r in revisions] == ["The user lives in Porto"] * 2 + [
            "The user lives in Braga"
        ] * 3
        assert [r.get("pinned", False) for r in revisions] == [False, True, True, False, False]
        assert "invalid_at" not in revisions[3] and "invalid_at" in revisions[4]
        assert history["bank"] == "main" and history["id"] == first["id"]

    async def test_a_reinforcing_resave_and_a_merge_show_up_as_revisions(
        self, service: MemoryService
    ) -> None:
        winner = await save(service, "The user drinks green tea")
        await save(service, "the user drinks GREEN tea")  # the same fingerprint: reinforced
        loser = await save(service, "The user likes green tea a lot")
        await call(
            service, "memory::supersede", id=loser["id"], superseded_by=winner["id"], reinforce=True
        )
        corroboration = [
            r.get("corroboration", 0)
            for r in (await call(service, "memory::history", id=winner["id"]))["revisions"]
        ]
        assert corroboration == [0, 1, 2]  # the merge adds the retired one (0) + 1
        retired = (await call(service, "memory::history", id=loser["id"]))["revisions"]
        assert retired[-1]["superseded_by"] == winner["id"]

    async def test_an_unknown_id_is_memory_not_found_and_a_missing_bank_bank_not_found(
        self, service: MemoryService
    ) -> None:
        with pytest.raises(MemoryNotFound):
            await call(service, "memory::history", id="fp0000000000000000")
        with pytest.raises(BankNotFound):
            await call(service, "memory::history", bank="ghost", id="fp0000000000000000")

    async def test_history_survives_a_restart_and_is_read_from_the_log(
        self, data_dir: Path, clock: FixedClock
    ) -> None:
        store = Store.open(data_dir, holder=HOLDER)
        service = MemoryService(store, clock=clock)
        memory = await save(service, "The user works at Acme")
        await call(service, "memory::update", id=memory["id"], tags=["work"])
        await store.close()
        reopened = Store.open(data_dir, holder=HOLDER)
        try:
            again = MemoryService(reopened, clock=clock)
            revisions = (await call(again, "memory::history", id=memory["id"]))["revisions"]
            assert [r["revision"] for r in revisions] == [0, 1]
            assert revisions[1]["tags"] == ["work"]
        finally:
            await reopened.close()


# The mutations that take `expected_revision`, each with a payload that changes the record.
MUTATIONS: dict[str, dict[str, Any]] = {
    "memory::update": {"text": "The user lives in Faro"},
    "memory::delete": {},
    "memory::pin": {"pinned": True},
    "memory::supersede": {},  # superseded_by filled in per test
}


class TestExpectedRevision:
    @pytest.mark.parametrize("function_id", sorted(MUTATIONS))
    async def test_the_current_revision_lets_the_mutation_through(
        self, service: MemoryService, function_id: str
    ) -> None:
        memory = await save(service, "The user lives in Porto")
        payload = await self._payload(service, function_id, memory)
        result = await call(service, function_id, **payload, expected_revision=0)
        assert result["memory"]["revision"] == 1

    @pytest.mark.parametrize("function_id", sorted(MUTATIONS))
    async def test_a_stale_revision_is_a_conflict_that_changes_nothing(
        self,
        service: MemoryService,
        emitter: RecordingEmitter,
        data_dir: Path,
        function_id: str,
    ) -> None:
        memory = await save(service, "The user lives in Porto")
        await call(service, "memory::update", id=memory["id"], tags=["home"])  # now revision 1
        payload = await self._payload(service, function_id, memory)
        before, events = _log(data_dir), len(emitter.of(ITEM_CHANGED))
        with pytest.raises(Conflict, match=r"^conflict: stale revision: memory .* at revision 1, "):
            await call(service, function_id, **payload, expected_revision=0)
        assert _log(data_dir) == before
        assert len(emitter.of(ITEM_CHANGED)) == events
        current = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert current["revision"] == 1 and current["text"] == "The user lives in Porto"

    async def test_a_supersede_whose_winner_moved_on_is_a_conflict_that_changes_nothing(
        self, service: MemoryService, emitter: RecordingEmitter, data_dir: Path
    ) -> None:
        loser = await save(service, "The user likes tea")
        winner = await save(service, "The user likes tea.")
        await call(service, "memory::update", id=winner["id"], text="The user hates tea.")
        payload = {"id": loser["id"], "superseded_by": winner["id"], "reinforce": True}
        before, events = _log(data_dir), len(emitter.of(ITEM_CHANGED))
        with pytest.raises(Conflict, match=r"^conflict: stale revision: memory .* at revision 1, "):
            await call(service, "memory::supersede", **payload, expected_winner_revision=0)
        assert _log(data_dir) == before
        assert len(emitter.of(ITEM_CHANGED)) == events
        current = (await call(service, "memory::get", id=loser["id"]))["memory"]
        assert current["revision"] == 0 and "invalid_at" not in current
        done = await call(service, "memory::supersede", **payload, expected_winner_revision=1)
        assert done["reinforced"] and done["memory"]["superseded_by"] == winner["id"]

    async def test_two_writers_that_read_the_same_revision_cannot_both_win(
        self, service: MemoryService
    ) -> None:
        memory = await save(service, "The user lives in Porto")
        edits = [
            call(service, "memory::update", id=memory["id"], text=text, expected_revision=0)
            for text in ("The user lives in Faro", "The user lives in Lagos")
        ]
        results = await asyncio.gather(*edits, return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["Conflict", "dict"]
        revisions = (await call(service, "memory::history", id=memory["id"]))["revisions"]
        assert [r["revision"] for r in revisions] == [0, 1]

    @staticmethod
    async def _payload(
        service: MemoryService, function_id: str, memory: dict[str, Any]
    ) -> dict[str, Any]:
        payload = {"id": memory["id"], **MUTATIONS[function_id]}
        if function_id == "memory::supersede":
            payload["superseded_by"] = (await save(service, "The user lives in Faro now"))["id"]
        return payload


class TestRuleRevision:
    async def test_a_rule_revision_is_the_hash_of_its_bytes_and_guards_the_next_write(
        self, service: MemoryService
    ) -> None:
        first = await call(service, "memory::rule::set", name="style", content="Be brief.")
        assert first["revision"] == hashlib.sha256(b"Be brief.").hexdigest()[:16]
        second = await call(
            service,
            "memory::rule::set",
            name="style",
            content="Be brief. No em-dashes.",
            expected_revision=first["revision"],
        )
        with pytest.raises(Conflict, match=r"^conflict: stale revision: rule style is at"):
            await call(
                service,
                "memory::rule::set",
                name="style",
                content="Be long.",
                expected_revision=first["revision"],
            )
        [rule] = (await call(service, "memory::rule::list"))["rules"]
        assert rule["content"] == "Be brief. No em-dashes."
        assert rule["revision"] == second["revision"]

    async def test_a_hand_edit_makes_a_writer_holding_the_old_revision_stale(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        written = await call(service, "memory::rule::set", name="style", content="Be brief.")
        (data_dir / "main" / "rules" / "style.md").write_text("Edited by hand.")  # RAM not told
        with pytest.raises(Conflict, match="stale revision"):
            await call(
                service,
                "memory::rule::set",
                name="style",
                content="From the console.",
                expected_revision=written["revision"],
            )
        assert (data_dir / "main" / "rules" / "style.md").read_text() == "Edited by hand."

    async def test_an_empty_expected_revision_means_the_rule_must_not_exist_yet(
        self, service: MemoryService, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::rule::set", name="style", content="A", expected_revision="")
        with pytest.raises(Conflict, match="expected it not to exist"):
            await call(
                service, "memory::rule::set", name="style", content="B", expected_revision=""
            )
        assert [e["event_type"] for e in emitter.of(BANK_CHANGED)] == ["created", "rules-changed"]

    async def test_a_stale_create_in_a_new_bank_leaves_no_bank_behind(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        with pytest.raises(Conflict):
            await call(
                service,
                "memory::rule::set",
                bank="fresh",
                name="style",
                content="A",
                expected_revision="0123456789abcdef",
            )
        assert not (data_dir / "fresh").exists()


class TestAutomaticCallers:
    """Extraction (an automatic caller) never touches a pinned or retired memory nor revives a
    deleted bank — decided in the write itself, so no check-then-await window exists."""

    EXTRACTION = Caller.internal("extraction", session_id="s1")

    async def test_a_pinned_or_retired_match_is_refused_and_left_as_it_was(
        self, service: MemoryService
    ) -> None:
        pinned = await save(service, "The user lives in Porto", pinned=True)
        retired = await save(service, "The user lives in Lisbon")
        await call(service, "memory::delete", id=retired["id"])
        for text in ("The user lives in Porto", "The user lives in Lisbon"):
            with pytest.raises(Conflict, match="extraction never touches it"):
                await catalog.call(service, "memory::save", {"text": text}, self.EXTRACTION)
        assert (await call(service, "memory::get", id=pinned["id"]))["memory"]["revision"] == 0
        assert (await call(service, "memory::get", id=retired["id"]))["memory"]["revision"] == 1

    async def test_a_deleted_bank_is_not_brought_back_but_a_person_may(
        self, service: MemoryService
    ) -> None:
        await save(service, "The user plays chess", bank="games")
        await call(service, "memory::bank::delete", name="games")
        with pytest.raises(BankNotFound):
            await catalog.call(
                service, "memory::save", {"bank": "games", "text": "a new fact"}, self.EXTRACTION
            )
        assert "games" not in service.store.names()
        await save(service, "The user plays go", bank="games")  # an explicit save recreates it
        assert "games" in service.store.names()

    async def test_provenance_and_confidence_come_from_the_caller(
        self, service: MemoryService
    ) -> None:
        caller = Caller.internal("extraction", session_id="s9", entry_id="e7", agent="helper")
        result = await catalog.call(
            service, "memory::save", {"text": "The user owns a bike"}, caller
        )
        assert result["memory"]["source"] == {
            "session_id": "s9",
            "entry_id": "e7",
            "agent": "helper",
        }
        assert result["memory"]["confidence"] == "stated"
        extracted = Caller.internal("extraction", confidence=Confidence.EXTRACTED)
        other = await catalog.call(
            service, "memory::save", {"text": "The user owns a car"}, extracted
        )
        assert other["memory"]["confidence"] == "extracted"


# --- properties ------------------------------------------------------------------------------

_steps = st.lists(
    st.tuples(
        st.sampled_from(["update", "pin", "unpin", "delete", "resave"]),
        st.integers(min_value=-1, max_value=3),  # an offset from the current revision, or none
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_steps)
async def test_history_replays_to_the_record_and_stale_guards_never_write(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    """Whatever sequence of guarded and unguarded mutations runs: a guard naming anything but the
    current revision changes nothing, one naming it succeeds, revisions grow by one per write, and
    the last revision in `memory::history` is exactly what `memory::get` answers."""
    data_dir = tmp_path_factory.mktemp("revisions")
    store = Store.open(data_dir, holder=HOLDER)
    try:
        service = MemoryService(store, clock=FixedClock(), emitter=RecordingEmitter())
        memory = await save(service, "The user collects stamps")
        for number, (action, offset) in enumerate(steps):
            current = (await call(service, "memory::get", id=memory["id"]))["memory"]
            guard = None if offset < 0 or action == "resave" else current["revision"] + offset
            payload: dict[str, Any] = {"id": memory["id"]}
            if guard is not None:
                payload["expected_revision"] = guard
            function_id, extra = {
                "update": ("memory::update", {"tags": [f"t{number}"]}),
                "pin": ("memory::pin", {"pinned": True}),
                "unpin": ("memory::pin", {"pinned": False}),
                "delete": ("memory::delete", {}),
                "resave": ("memory::save", {}),
            }[action]
            if action == "resave":
                payload = {"text": "The user collects stamps"}  # a save takes no guard
            before = _log(data_dir)
            try:
                result = await call(service, function_id, **payload, **extra)
            except Conflict as exc:  # stale, or refused by the state (pinning a retired memory)
                if "stale revision" in str(exc):
                    assert guard is not None and guard != current["revision"]
                assert _log(data_dir) == before
                continue
            assert guard is None or guard == current["revision"]
            assert result["memory"]["revision"] in (current["revision"], current["revision"] + 1)
        history = (await call(service, "memory::history", id=memory["id"]))["revisions"]
        assert [r["revision"] for r in history] == list(range(len(history)))
        latest = (await call(service, "memory::get", id=memory["id"]))["memory"]
        assert history[-1] == latest
    finally:
        await store.close()
