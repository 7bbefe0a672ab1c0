"""memory-consolidate's pass and schedule over a real MemoryService, through the in-process client
(the same public functions the bus and REST clients reach)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from memory_worker.adapters.bus.worker import bus_caller
from memory_worker.adapters.consolidate.clients import InProcessClient
from memory_worker.adapters.consolidate.engine import (
    CALLER_METADATA,
    BusMemoryClient,
    ConsolidateEngine,
)
from memory_worker.adapters.consolidate.engine import _request as engine_request
from memory_worker.app import catalog
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import SupersedeRequest
from memory_worker.consolidate.config import ConsolidateSettings, parse_settings
from memory_worker.consolidate.runner import Consolidator
from memory_worker.consolidate.schedule import (
    LAST_REPORT,
    LAST_RUN,
    SCOPE,
    Scheduler,
    is_due,
    next_due_at,
)
from memory_worker.consolidate.wire import RunRequest
from memory_worker.core.confidence import Confidence
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    BankNotFound,
    Conflict,
    Forbidden,
    InvalidInput,
    SiblingUnavailable,
    StorageError,
)
from memory_worker.storage.store import Store

from .fakes import FakeEmbedder, FakeKeyValue, FixedClock, RecordingEmitter

HOUR_MS = 3_600_000


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload)


async def save(service: MemoryService, text: str, **payload: Any) -> dict[str, Any]:
    memory: dict[str, Any] = (await call(service, "memory::save", text=text, **payload))["memory"]
    return memory


async def live(service: MemoryService, bank: str = "main") -> dict[str, dict[str, Any]]:
    listed = await call(service, "memory::list", bank=bank, limit=500)
    return {m["id"]: m for m in listed["memories"]}


async def everything(service: MemoryService, bank: str = "main") -> dict[str, dict[str, Any]]:
    listed = await call(service, "memory::list", bank=bank, limit=500, include_superseded=True)
    return {m["id"]: m for m in listed["memories"]}


def settings(**fields: Any) -> ConsolidateSettings:
    return ConsolidateSettings(**fields)


@pytest.fixture(name="client")
def _client(service: MemoryService) -> InProcessClient:
    return InProcessClient(service)


@pytest.fixture(name="consolidator")
def _consolidator(client: InProcessClient, clock: FixedClock) -> Consolidator:
    return Consolidator(client, clock=clock)


class FlakyClient:
    """The in-process client, failing chosen functions as an unreachable worker would."""

    def __init__(self, inner: InProcessClient, failing: set[str]) -> None:
        self.inner = inner
        self.failing = failing
        self.calls: list[str] = []

    async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(function_id)
        if function_id in self.failing:
            raise SiblingUnavailable(f"{function_id}: TIMEOUT (test)")
        return await self.inner.call(function_id, payload)


async def seed_duplicates(service: MemoryService, clock: FixedClock) -> dict[str, str]:
    """A bank with one exact group (3 members), a reorder, a near-miss and a pinned group."""
    ids = {}
    for key, text, extra in [
        ("porto", "The user lives in Porto.", {}),
        ("porto2", "the user lives in porto", {}),
        ("porto3", "The user lives in Porto!", {}),
        ("ana", "Ana manages Bruno.", {}),
        ("bruno", "Bruno manages Ana.", {}),
        ("braga", "The user lives in Braga.", {}),
        ("vegan", "The user is vegan.", {"pinned": True}),
        ("vegan2", "the user is vegan", {"pinned": True}),
        ("vegan3", "The user is vegan!", {}),
    ]:
        clock.advance(1000)
        ids[key] = (await save(service, text, **extra))["id"]
    return ids


class TestPass:
    async def test_one_pass_merges_duplicates_and_leaves_near_misses_and_pinned(
        self, service: MemoryService, consolidator: Consolidator, emitter: RecordingEmitter,
        clock: FixedClock,
    ) -> None:  # fmt: skip
        ids = await seed_duplicates(service, clock)
        await save(service, "The user lives in Porto.")  # the oldest also restated: corroborated
        before = await everything(service)
        emitter.clear()
        report = await consolidator.run(settings())
        [bank] = report.banks
        assert (bank.merged, bank.report_only, bank.skipped_pinned) == (3, 1, 1)
        assert report.superseded == 3 and not bank.errors

        after = await live(service)
        assert ids["porto"] in after and ids["porto2"] not in after and ids["porto3"] not in after
        assert {ids["ana"], ids["bruno"], ids["braga"]} <= set(after)  # near-misses untouched
        for key in ("vegan", "vegan2"):  # pinned: never retired, never rewritten
            assert after[ids[key]] == before[ids[key]]
        assert ids["vegan3"] not in after
        # The survivor absorbed each retired record's observations (reinforce), exactly once.
        survivor = after[ids["porto"]]
        assert survivor["corroboration"] == before[ids["porto"]]["corroboration"] + 2
        # Nothing is lost: every record is still on disk, the retired ones pointing at survivors.
        history = await everything(service)
        assert set(history) == set(before)
        assert history[ids["porto2"]]["superseded_by"] == ids["porto"]
        assert history[ids["vegan3"]]["superseded_by"] == ids["vegan"]

        events = emitter.of(ITEM_CHANGED)
        superseded = [e for e in events if e["event_type"] == "superseded"]
        assert sorted(e["memory"]["id"] for e in superseded) == sorted(
            [ids["porto2"], ids["porto3"], ids["vegan3"]]
        )
        assert all(e["reason"].startswith("memory-consolidate: exact duplicate") for e in events)

    async def test_a_second_pass_finds_nothing_left_to_do(
        self, service: MemoryService, consolidator: Consolidator, clock: FixedClock
    ) -> None:
        await seed_duplicates(service, clock)
        await consolidator.run(settings())
        again = await consolidator.run(settings())
        assert again.superseded == 0
        assert [g.action for g in again.banks[0].groups] == ["skipped", "report-only"]

    async def test_a_dry_run_plans_and_writes_nothing(
        self, service: MemoryService, consolidator: Consolidator, emitter: RecordingEmitter,
        clock: FixedClock,
    ) -> None:  # fmt: skip
        await seed_duplicates(service, clock)
        before = await everything(service)
        emitter.clear()
        report = await consolidator.run(settings(), dry_run=True)
        assert report.dry_run and report.superseded == 0
        assert "planned" in [g.action for g in report.banks[0].groups]
        assert await everything(service) == before and emitter.events == []

    async def test_the_budget_caps_a_pass_across_banks(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        for bank in ("a", "b"):
            for text in ("Tea.", "tea", "TEA!"):
                await save(service, text, bank=bank)
        report = await consolidator.run(settings(max_supersedes_per_run=3))
        assert [(b.bank, b.merged, b.capped) for b in report.banks] == [("a", 2, 0), ("b", 1, 1)]
        assert [g.action for g in report.banks[1].groups] == ["partial"]

    async def test_the_allowlist_limits_the_banks_and_refuses_others(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        for bank in ("a", "b"):
            await save(service, "Tea.", bank=bank)
            await save(service, "tea", bank=bank)
        report = await consolidator.run(settings(banks=["b"]))
        assert [b.bank for b in report.banks] == ["b"]
        with pytest.raises(InvalidInput, match="allowlist"):
            await consolidator.run(settings(banks=["b"]), bank="a")
        with pytest.raises(BankNotFound):
            await consolidator.run(settings(), bank="nope")

    @pytest.mark.parametrize("name", ["Main", "../main", ""])
    async def test_a_bank_that_is_no_bank_name_is_invalid_input_as_at_every_memory_function(
        self, service: MemoryService, consolidator: Consolidator, name: str
    ) -> None:
        """`run {bank}` answers a malformed name as the memory worker does (`invalid_input`,
        REST 400), not as a missing bank (404: a typo'd case looked like a deleted bank)."""
        await save(service, "Tea.")
        with pytest.raises(InvalidInput, match="must match"):
            await consolidator.run(settings(), bank=name)

    @pytest.mark.parametrize("flag", ["no", "false", 0, "yes", 1])
    def test_dry_run_is_true_or_false_only(self, flag: object) -> None:
        """`run {dry_run}` is a JSON boolean, as every flag of the memory worker's functions:
        read leniently, `"no"`, `"false"` and `0` ran a pass that writes, a caller's mistake
        retiring memories instead of being refused."""
        with pytest.raises(InvalidInput, match="dry_run"):
            engine_request(RunRequest, {"dry_run": flag})
        assert engine_request(RunRequest, {"dry_run": False}).dry_run is False

    def test_an_allowlist_naming_no_possible_bank_is_refused(self) -> None:
        """`Main` can never be a bank: accepted, every scheduled pass would cover no bank (and
        run no retention sweep) while checkpointing as if it had."""
        with pytest.raises(InvalidInput, match=r"banks: .*'Main' is not a bank name"):
            parse_settings({"banks": ["Main"]}, source="memory-consolidate")
        assert parse_settings({"banks": ["main"]}, source="x").banks == ["main"]

    async def test_a_stale_read_changes_nothing_and_is_an_error(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """Between the listing and the merge a person edits a loser: its revision no longer
        matches, so the supersede is refused (once `expected_revision` lands) or, before that,
        the record is still retired only if it is still live and unpinned."""
        loser = await save(service, "the user likes tea")
        await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")

        class PinBeforeSupersede(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::supersede":
                    await self.inner.call(
                        "memory::pin", {"bank": "main", "id": loser["id"], "pinned": True}
                    )
                return await super().call(function_id, payload)

        report = await Consolidator(PinBeforeSupersede(client, set()), clock=clock).run(settings())
        [bank] = report.banks
        assert bank.merged == 0 and bank.errors and "conflict" in bank.errors[0]
        assert (await live(service))[loser["id"]]["pinned"] is True

    @pytest.mark.skipif(
        "expected_revision" not in SupersedeRequest.model_fields,
        reason="memory::supersede has no expected_revision yet (issue 10)",
    )
    async def test_a_loser_changed_after_the_listing_is_refused_as_stale(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """A person tags the loser between the listing and the merge: its revision moved, so
        `expected_revision` refuses the supersede and nothing changes."""
        loser = await save(service, "the user likes tea")
        await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")

        class TagBeforeSupersede(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::supersede":
                    await self.inner.call(
                        "memory::update", {"bank": "main", "id": loser["id"], "tags": ["x"]}
                    )
                return await super().call(function_id, payload)

        report = await Consolidator(TagBeforeSupersede(client, set()), clock=clock).run(settings())
        [bank] = report.banks
        assert bank.merged == 0 and "stale revision" in bank.errors[0]
        assert loser["id"] in await live(service)

    async def test_a_winner_changed_after_the_listing_is_refused_as_stale(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """A person rewrites the winner between the listing and the merge (here to the opposite
        fact): the plan chose it for what it said, so the supersede is refused and the loser,
        which still says the old fact, stays live and unabsorbed."""
        loser = await save(service, "the user likes tea")
        winner = await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")  # corroborated: the survivor

        class EditWinnerBeforeSupersede(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::supersede":
                    assert payload["superseded_by"] == winner["id"]
                    edit = {"id": winner["id"], "text": "The user hates tea."}
                    await call(service, "memory::update", **edit)
                return await super().call(function_id, payload)

        consolidator = Consolidator(EditWinnerBeforeSupersede(client, set()), clock=clock)
        [bank] = (await consolidator.run(settings())).banks
        assert bank.merged == 0 and "stale revision" in bank.errors[0]
        assert loser["id"] in await live(service)
        edited = (await call(service, "memory::get", id=winner["id"]))["memory"]
        assert edited["corroboration"] == winner["corroboration"] + 1  # the restatement only

    async def test_an_unreachable_memory_worker_ends_the_bank_with_one_error(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        await save(service, "tea")
        flaky = FlakyClient(client, {"memory::supersede"})
        report = await Consolidator(flaky, clock=clock).run(settings())
        assert report.banks[0].errors == ["memory::supersede: sibling_unavailable: "
                                          "memory::supersede: TIMEOUT (test)"]  # fmt: skip
        assert flaky.calls.count("memory::supersede") == 1

    async def test_merges_made_before_the_memory_worker_went_away_are_counted_and_reported(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """The pass ends at the first unanswered call, in the middle of a group: what that group
        had already retired was left out of `merged`, `superseded` and the groups."""
        for text in ("Tea.", "tea", "TEA!"):
            await save(service, text)

        class GoneAfterOneMerge(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::supersede" and "memory::supersede" in self.calls:
                    self.failing.add(function_id)
                return await super().call(function_id, payload)

        report = await Consolidator(GoneAfterOneMerge(client, set()), clock=clock).run(settings())
        [bank] = report.banks
        assert (report.superseded, bank.merged, len(bank.errors)) == (1, 1, 1)
        [group] = bank.groups
        assert group.action == "partial" and len(group.merged_ids) == 1
        assert len(await live(service)) == 2

    async def test_a_bank_deleted_during_its_pass_ends_with_one_error(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """A bank deleted while its merges run can take none of the rest, yet each was still
        tried: a bank of 200 groups reported 200 `bank_not_found` lines."""
        for text in ("Tea.", "tea", "TEA!", "Coffee.", "coffee", "Milk.", "milk"):
            await save(service, text, bank="gone")
        await save(service, "Water.")
        await save(service, "water")

        class DeletingMeanwhile(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::supersede" and payload["bank"] == "gone":
                    delete = {"name": "gone", "confirm": "destructive"}
                    if self.calls.count(function_id) == 1:
                        await self.inner.call("memory::bank::delete", delete)
                return await super().call(function_id, payload)

        deleting = DeletingMeanwhile(client, set())
        report = await Consolidator(deleting, clock=clock).run(settings())
        gone, main = report.banks
        assert gone.merged == 1
        assert gone.errors == ["memory::supersede: bank_not_found: gone"]
        assert deleting.calls.count("memory::supersede") == 3  # 1 merged, 1 refused, 1 in main
        assert (main.merged, main.errors) == (1, [])

    async def test_undo_a_merge_by_saving_the_retired_text_again(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        loser = await save(service, "the user likes tea")
        winner = await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")
        await consolidator.run(settings())
        retired = (await call(service, "memory::get", id=loser["id"]))["memory"]
        assert retired["superseded_by"] == winner["id"]
        back = await call(service, "memory::save", text="the user likes tea")
        assert back["created"] and back["memory"]["id"] == loser["id"]
        assert back["memory"]["revision"] == retired["revision"] + 1  # history continues
        assert "superseded_by" not in back["memory"]
        assert loser["id"] in await live(service)
        if any(spec.id == "memory::history" for spec in catalog.CATALOG):
            history = await call(service, "memory::history", id=loser["id"])
            assert [r["revision"] for r in history["revisions"]][-3:] == [
                retired["revision"] - 1, retired["revision"], retired["revision"] + 1,
            ]  # fmt: skip

    async def test_an_undone_merge_stays_undone_once_both_are_pinned(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        """As the README's undo says: saved again, the retired copy is merged again by the next
        pass (the two still read as one fact); pinned, both stay."""
        loser = await save(service, "the user likes tea")
        winner = await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")
        await consolidator.run(settings())
        await call(service, "memory::save", text="the user likes tea")
        [bank] = (await consolidator.run(settings())).banks
        assert bank.merged == 1 and loser["id"] not in await live(service)
        await call(service, "memory::save", text="the user likes tea")
        for memory in (loser, winner):
            await call(service, "memory::pin", id=memory["id"], pinned=True)
        [bank] = (await consolidator.run(settings())).banks
        assert (bank.merged, [g.action for g in bank.groups]) == (0, ["skipped"])
        assert {loser["id"], winner["id"]} <= set(await live(service))

    async def test_a_lesson_is_never_merged_into_a_plain_memory_or_another_card(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        """The same words as a plain memory (more corroborated, so it would survive) or as
        another card: merging would retire the lesson and its anchors would stop matching."""
        text = "Editing the proto files needs make gen."
        card = {
            "category": "lesson",
            "title": "Run make gen after editing protos",
            "recommendation": "After editing the proto files, run make gen.",
            "anchors": {"files": ["proto/user.proto"]},
        }
        plain = await save(service, text.rstrip(".").lower())
        await save(service, text.rstrip(".").lower())
        lesson = await save(service, text, **card)
        other = await save(service, text + "!", **{**card, "anchors": {"folders": ["api"]}})
        report = await consolidator.run(settings())
        [bank] = report.banks
        assert (bank.merged, bank.errors) == (0, [])
        assert {plain["id"], lesson["id"], other["id"]} <= set(await live(service))
        read = {"tool": "Read", "arguments": {"file_path": "proto/user.proto"}}
        matched = await call(service, "memory::lessons::match", **read)
        assert [c["id"] for c in matched["cards"]] == [lesson["id"]]
        # A plan made before a card changed is refused at the merge itself.
        automatic = Caller.internal("consolidate")
        for loser, winner in ((lesson, plain), (lesson, other), (plain, lesson)):
            payload = {"id": loser["id"], "superseded_by": winner["id"], "reinforce": True}
            with pytest.raises(Conflict, match="different lesson cards; consolidate never"):
                await catalog.call(service, "memory::supersede", payload, automatic)
        assert {plain["id"], lesson["id"], other["id"]} <= set(await live(service))

    async def test_the_survivor_keeps_the_retired_records_accesses(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        """Eviction at a cap goes by accesses: the survivor was used whenever its duplicate was,
        so it takes the retired record's counts (and keeps them across a reload)."""
        used = await save(service, "The user drinks green tea.")
        person = Caller.human("cli")
        for _ in range(3):
            await catalog.call(service, "memory::recall", {"query": "green tea"}, person)
        survivor = await save(service, "the user drinks green tea")
        await save(service, "the user drinks green tea")
        [bank] = (await consolidator.run(settings())).banks
        assert (bank.merged, bank.errors) == (1, [])
        for _ in range(2):
            got = (await call(service, "memory::get", id=survivor["id"]))["memory"]
            assert got["access_count"] == 3
            assert used["id"] not in await live(service)
            await service.store.reload()

    async def test_memories_of_different_categories_are_never_merged(
        self, service: MemoryService, consolidator: Consolidator, clock: FixedClock
    ) -> None:
        """A fact with the same words as a more corroborated `context` memory: merged into it, the
        fact would expire with the context's retention (30 days) and be lost."""
        await call(service, "memory::bank::create", name="main", retention={"context": 30})
        fact = await save(service, "The user works at Acme.", category="fact")
        context = await save(service, "the user works at acme", category="context")
        await save(service, "the user works at acme", category="context")
        [bank] = (await consolidator.run(settings())).banks
        assert (bank.merged, bank.groups_found, bank.errors) == (0, 0, [])
        clock.advance(31 * 24 * HOUR_MS)
        await call(service, "memory::stats")  # the retention sweep
        after = await live(service)
        assert fact["id"] in after and context["id"] not in after

    async def test_a_subject_scoped_banks_memories_about_people_are_consolidated(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """With subject_scoping on, nearly every memory is about someone: the pass reads them all,
        merges within one subject only, and never offers one person's memory for the bank-wide
        `learned` rule (it would be injected into everyone's conversations)."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        ana = await save(service, "Ana likes green tea.", subject="ana")
        ana2 = await save(service, "ana likes green tea", subject="ana")
        bruno = await save(service, "Ana likes green tea!", subject="bruno")
        for _ in range(5):
            await save(service, "Always answer Ana in Portuguese.", subject="ana")
        judge = ScriptedJudge('{"merge_groups": [], "promotions": []}')
        report = await Consolidator(client, judge, clock=clock).run(
            settings(llm_assist_enabled=True)
        )
        [bank] = report.banks
        assert (bank.scanned, bank.merged, bank.errors) == (4, 1, [])
        listed = await catalog.call(service, "memory::list", {}, Caller.human("cli"))
        after = {m["id"] for m in listed["memories"]}
        assert ana["id"] in after and ana2["id"] not in after and bruno["id"] in after
        assert judge.requests == []  # nothing general to promote, no group to confirm

    async def test_a_merge_keeps_what_only_the_retired_record_knew(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        """The person said it (stated, with the situation it came up in); extraction saw it twice
        in other words, so its record survives: the survivor keeps the person's trust level, the
        context and intention lanes and the provenance, as a re-save of the same text would."""
        said = await save(
            service, "The user is allergic to peanuts.", context="planning the dinner party",
            intention="choose a menu", session_id="s-person",
        )  # fmt: skip
        extraction = Caller.internal("extraction", confidence=Confidence.EXTRACTED)
        for _ in range(2):
            seen = await catalog.call(
                service, "memory::save", {"text": "the user is allergic to peanuts"}, extraction
            )
        [bank] = (await consolidator.run(settings())).banks
        assert (bank.merged, bank.errors) == (1, [])
        after = await live(service)
        assert said["id"] not in after
        survivor = after[seen["memory"]["id"]]
        assert survivor["confidence"] == "stated"
        assert survivor["context"] == "planning the dinner party"
        assert survivor["intention"] == "choose a menu"
        assert survivor["source"]["session_id"] == "s-person"

    async def test_a_lesson_with_evidence_of_its_own_is_never_merged(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        """The same lesson learned twice, each with where it was learned (`evidence`, which a
        merge does not carry over): merged, the survivor no longer told the retired one's
        commit and line. A re-save refuses another evidence as another card; so does the plan."""
        card = {
            "category": "lesson",
            "title": "Run make gen after editing protos",
            "recommendation": "After editing the proto files, run make gen.",
            "anchors": {"files": ["proto/user.proto"]},
        }
        first = await save(
            service, "Editing protos needs make gen.", **card, evidence=["source:3f2a9c1"]
        )
        second = await save(
            service, "editing protos needs make gen", **card, evidence=["proto/user.proto:12"]
        )
        [bank] = (await consolidator.run(settings())).banks
        assert (bank.merged, bank.groups_found, bank.errors) == (0, 0, [])
        assert {first["id"], second["id"]} <= set(await live(service))
        same = await save(
            service, "Editing protos needs make gen!", **card, evidence=["source:3f2a9c1"]
        )
        [bank] = (await consolidator.run(settings())).banks
        assert bank.merged == 1  # the same card, evidence included: one lesson
        after = await live(service)
        [kept] = [after[m] for m in (first["id"], same["id"]) if m in after]
        assert kept["evidence"] == ["source:3f2a9c1"] and second["id"] in after


class BusToService:
    """The engine between memory-consolidate's `BusMemoryClient` and the memory worker: it stamps
    the caller's worker id (an id, not the name `memory-consolidate`), passes the invocation
    metadata on as sent, and the worker's `bus_caller` decides who is calling."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def __call__(
        self, function_id: str, payload: dict[str, Any], timeout_ms: int, **extra: Any
    ) -> Any:
        data = {**payload, "_caller_worker_id": "7d1f3c9e-5b1a-4c1e-9a51-0c3f2b6e8d42"}
        caller = bus_caller(data, extra.get("metadata"))
        return await catalog.call(self.service, function_id, data, caller)


class GoneEntry:
    """The configuration worker after it deleted the entry: `get` reads nothing until an
    `ensure` stores a value again."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None

    async def get(self) -> dict[str, Any] | None:
        return self.value

    async def ensure(self, schema: dict[str, Any], initial: dict[str, Any]) -> None:
        if self.value is None:
            self.value = initial


async def test_an_inert_sibling_whose_deleted_entry_it_registered_again_runs_on_it(
    service: MemoryService, clock: FixedClock
) -> None:
    """Inert (its stored entry unreadable), the sibling registered the deleted entry again with
    the settings it holds, and stayed inert: Settings showed that entry, readable, while the
    schedule stayed off saying it was not, until a restart read the same entry and ran."""
    engine = ConsolidateEngine(
        "ws://unused", settings(), first_tick_s=0, backstop_s=0, call_timeout_ms=1000
    )
    entry = GoneEntry()
    engine._config = entry  # type: ignore[assignment]
    engine.inert_reason = "configuration memory-consolidate unreadable: enabled: not a boolean"
    scheduler = Scheduler(
        Consolidator(InProcessClient(service), clock=clock),
        FakeKeyValue(),
        lambda: engine.settings,
        inert=lambda: engine.inert_reason,
        clock=clock,
    )
    engine.scheduler = scheduler
    assert (await engine._status({}, {}))["inert"] is True
    await engine._on_config_change()  # `configuration:deleted`
    assert entry.value == engine.settings.model_dump()  # what it runs on, stored again
    status = await engine._status({}, {})
    assert status["inert"] is False and "inert_reason" not in status


class TestOverTheBus:
    async def test_a_winner_moved_to_another_subject_is_never_merged_into(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """Between the listing and the merge a person moves the winner to Bruno: the general
        memory must not be folded into Bruno's (the pass is refused and nothing changes)."""
        await call(service, "memory::bank::create", name="main", subject_scoping=True)
        loser = await save(service, "the user likes tea")
        winner = await save(service, "The user likes tea.")
        await save(service, "The user likes tea.")
        bus = BusToService(service)

        async def move_winner_then_call(
            function_id: str, payload: dict[str, Any], timeout_ms: int, **extra: Any
        ) -> Any:
            if function_id == "memory::supersede":
                await call(service, "memory::update", id=winner["id"], subject="bruno")
            return await bus(function_id, payload, timeout_ms, **extra)

        client = BusMemoryClient(move_winner_then_call, 5000)  # type: ignore[arg-type]
        [bank] = (await Consolidator(client, clock=clock).run(settings(banks=["main"]))).banks
        assert bank.merged == 0 and bank.errors
        assert loser["id"] in await live(service)

    async def test_the_siblings_calls_are_consolidates_and_never_merge_two_subjects(
        self, service: MemoryService
    ) -> None:
        """The automatic guard holds over the bus as in process, on the records as they are at
        the supersede (the winner was general when both were saved)."""
        ana = await save(service, "Ana likes tea.", subject="ana")
        winner = await save(service, "Likes tea.")
        await call(service, "memory::update", id=winner["id"], subject="bruno")
        client = BusMemoryClient(BusToService(service), 5000)  # type: ignore[arg-type]
        payload = {"id": ana["id"], "superseded_by": winner["id"], "reinforce": True}
        with pytest.raises(Conflict, match="different subjects; consolidate never merges"):
            await client.call("memory::supersede", payload)
        assert ana["id"] in await live(service)

    def test_only_a_call_outside_a_turn_is_believed_automatic(self) -> None:
        """A claim of an automatic path only narrows a person's call; an agent's stays an agent's
        (an internal caller would skip its bank's access level)."""
        assert bus_caller({}, CALLER_METADATA).automatic
        assert bus_caller({}, {"via": "doctor"}) == Caller.human("bus")
        in_a_turn = bus_caller({}, {**CALLER_METADATA, "session_id": "s1"})
        assert in_a_turn.kind is CallerKind.AGENT


IN_A_TURN = {"session_id": "s1", "turn_id": "t1"}  # a bus call's metadata inside a harness turn


class TestAgentAccess:
    """An agent reaches the sibling over the bus (inside a harness turn) or its REST with a
    `Memory-Caller` claim: held to each bank's `conscious_access` as at the memory functions."""

    @pytest.fixture(name="engine")
    def _engine(self, client: InProcessClient, clock: FixedClock) -> ConsolidateEngine:
        engine = ConsolidateEngine(
            "ws://unused", settings(), first_tick_s=0, backstop_s=0, call_timeout_ms=1000
        )
        consolidator = Consolidator(client, clock=clock)
        engine.scheduler = Scheduler(consolidator, None, settings, clock=clock)
        return engine

    async def test_a_run_needs_read_write_on_its_bank(
        self, service: MemoryService, engine: ConsolidateEngine
    ) -> None:
        await call(service, "memory::bank::create", name="diary", conscious_access="none")
        await call(service, "memory::bank::create", name="wiki", conscious_access="read")
        await call(service, "memory::bank::create", name="notes", conscious_access="read_write")
        for bank in ("diary", "wiki", "notes"):
            await save(service, "Tea.", bank=bank)
            await save(service, "tea", bank=bank)
        with pytest.raises(Forbidden, match="conscious_access: none"):
            await engine._run({"bank": "diary"}, IN_A_TURN)
        with pytest.raises(Forbidden, match="conscious_access: read\\)"):
            await engine._run({"bank": "wiki"}, IN_A_TURN)
        with pytest.raises(Forbidden):  # a pass over every bank covers the two above
            await engine._run({}, IN_A_TURN)
        assert len(await live(service, "diary")) == len(await live(service, "wiki")) == 2
        done = await engine._run({"bank": "notes"}, IN_A_TURN)
        assert done["superseded"] == 1
        # A person (the bus outside a turn) runs on any bank.
        assert (await engine._run({"bank": "diary"}, {}))["superseded"] == 1

    async def test_status_shows_an_agent_only_the_banks_it_may_read(
        self, service: MemoryService, engine: ConsolidateEngine
    ) -> None:
        await call(service, "memory::bank::create", name="diary", conscious_access="none")
        await call(
            service,
            "memory::bank::create",
            name="people",
            conscious_access="read",
            subject_scoping=True,
        )
        await save(service, "Ana likes tea.", bank="diary")
        await save(service, "ana likes tea", bank="diary")
        await save(service, "Bruno is vegan.", bank="people", subject="bruno")
        await save(service, "bruno is vegan", bank="people", subject="bruno")
        await engine._run({}, {})  # the person's pass: both banks have a report
        mine = await engine._status({}, {})
        assert set(mine["banks"]) == {"diary", "people"}
        assert mine["banks"]["people"]["groups"]
        seen = await engine._status({}, IN_A_TURN)
        assert set(seen["banks"]) == {"people"}  # `none`: not even its name
        # A scoped bank's groups quote other people: the counts stay, the texts do not.
        assert "groups" not in seen["banks"]["people"] and seen["banks"]["people"]["merged"] == 1

    async def test_an_agents_pass_covers_only_the_banks_it_was_checked_on(
        self, service: MemoryService, clock: FixedClock
    ) -> None:
        """The banks were checked, then listed again for the pass once a running pass let go of
        the gate: a bank made meanwhile at `conscious_access: none` was consolidated for the
        agent. The check is made again under the gate, on the banks the pass covers."""
        await call(service, "memory::bank::create", name="notes", conscious_access="read_write")
        await save(service, "Tea.", bank="notes")
        await save(service, "tea", bank="notes")
        checked = asyncio.Event()
        lists = 0

        class Listing(InProcessClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                nonlocal lists
                answer = await super().call(function_id, payload)
                lists += function_id == "memory::bank::list"
                if lists == 2:  # the levels, then the banks: checked before the gate
                    checked.set()
                return answer

        engine = ConsolidateEngine(
            "ws://unused", settings(), first_tick_s=0, backstop_s=0, call_timeout_ms=1000
        )
        scheduler = Scheduler(Consolidator(Listing(service), clock=clock), None, settings)
        engine.scheduler = scheduler
        async with scheduler.gate:  # a pass is running
            asked = asyncio.create_task(engine._run({}, IN_A_TURN))
            await checked.wait()
            await call(service, "memory::bank::create", name="diary", conscious_access="none")
            await save(service, "Ana likes tea.", bank="diary")
            await save(service, "ana likes tea", bank="diary")
        with pytest.raises(Forbidden, match="bank diary gives agents no memory tools"):
            await asked
        assert len(await live(service, "diary")) == 2 and len(await live(service, "notes")) == 2

    async def test_rest_with_an_agents_claim_is_held_as_the_bus_is(
        self, service: MemoryService, engine: ConsolidateEngine
    ) -> None:
        await call(service, "memory::bank::create", name="diary", conscious_access="none")
        await save(service, "Tea.", bank="diary")
        await save(service, "tea", bank="diary")
        claim = json.dumps({"kind": "agent", "via": "rest"})
        envelope = {
            "path": "memory-consolidate/run",
            "method": "POST",
            "headers": {"memory-caller": claim},
            "body": {"bank": "diary"},
        }
        reply = await engine._http(envelope)
        assert reply["status_code"] == 403 and reply["body"]["error"]["code"] == "forbidden"
        assert len(await live(service, "diary")) == 2
        person = await engine._http({**envelope, "headers": {}})
        assert person["status_code"] == 200 and person["body"]["superseded"] == 1

    @pytest.mark.parametrize("body", [[{"dry_run": True}], "dry_run", 1, True])
    async def test_a_run_whose_payload_is_no_object_is_refused_and_runs_nothing(
        self, service: MemoryService, engine: ConsolidateEngine, body: object
    ) -> None:
        """A JSON body the engine parsed to a list, a string or a number (or such a bus payload)
        was read as `{}`: a run with every default, a real pass over every bank where a dry run
        of one was asked for. The memory worker's functions refuse it (`invalid_input`)."""
        await save(service, "Tea.")
        await save(service, "tea")
        envelope = {
            "path": "memory-consolidate/run",
            "method": "POST",
            "headers": {"content-type": "application/json", "content-length": "20"},
            "body": body,
        }
        reply = await engine._http(envelope)
        assert reply["status_code"] == 400, reply
        assert reply["body"]["error"]["code"] == "invalid_input"
        assert "JSON object" in reply["body"]["error"]["message"]
        with pytest.raises(InvalidInput, match="JSON object"):
            await engine._run(body, {})
        assert len(await live(service)) == 2  # nothing merged
        assert (await engine._run(None, {}))["superseded"] == 1  # no payload at all: `{}`


class TestSemanticTier:
    @pytest.fixture(name="semantic")
    def _semantic(self, store: Store, clock: FixedClock, emitter: RecordingEmitter) -> Any:
        service = MemoryService(
            store, Settings(), emitter=emitter, clock=clock, embedder=FakeEmbedder()
        )
        return service, Consolidator(InProcessClient(service), clock=clock)

    async def test_a_near_duplicate_that_agrees_merges_and_one_that_does_not_is_reported(
        self, semantic: Any, emitter: RecordingEmitter
    ) -> None:
        service, consolidator = semantic
        keep = await save(service, "The user lives in Porto now.")
        twin = await save(service, "The user currently lives in Porto.")
        cats = await save(service, "The user has 2 cats at home.")
        cats3 = await save(service, "At home the user has 3 cats.")
        await service.settle()
        report = await consolidator.run(settings(semantic_threshold=0.8))
        [bank] = report.banks
        assert bank.semantic == "ran"
        by_tier = {(g.tier, g.action): g for g in bank.groups}
        merged = by_tier[("semantic", "merged")]
        assert {merged.winner_id, *merged.merged_ids} == {keep["id"], twin["id"]}
        reported = by_tier[("semantic", "report-only")]
        assert {reported.winner_id, *reported.loser_ids} == {cats["id"], cats3["id"]}
        assert "numbers" in reported.why
        [event] = [e for e in emitter.of(ITEM_CHANGED) if e["event_type"] == "superseded"]
        assert event["reason"].startswith("memory-consolidate: semantic duplicate (lowest cosine")

    async def test_a_banks_recall_threshold_hides_no_near_duplicate_from_the_tier(
        self, semantic: Any
    ) -> None:
        """`relevance_threshold` is what recall shows the agent and the hook; the tier asks one
        raw arm and holds the pairs to its own `semantic_threshold` (seed 000: the modes are for
        callers that fuse arms themselves). A bank at 0.95 hid every neighbour from it."""
        service, consolidator = semantic
        await call(service, "memory::bank::create", name="main", relevance_threshold=0.95)
        keep = await save(service, "The user lives in Porto now.")
        twin = await save(service, "The user currently lives in Porto.")
        await service.settle()
        [bank] = (await consolidator.run(settings(semantic_threshold=0.8))).banks
        assert bank.semantic == "ran"
        [merged] = [g for g in bank.groups if g.tier == "semantic"]
        assert merged.action == "merged"
        assert {merged.winner_id, *merged.merged_ids} == {keep["id"], twin["id"]}
        # An agent's semantic recall still holds to the bank's threshold (seed 004).
        ask = {"query": "The user moved to Porto", "mode": "semantic"}
        assert (await call(service, "memory::recall", **ask))["memories"] == []

    async def test_the_judge_is_never_offered_a_group_its_guards_found_two_facts_in(
        self, store: Store, clock: FixedClock
    ) -> None:
        """A number, a negation, a text that says more: the judge's own prompt says never to
        merge those, so offering them could only let a weak model retire a correction. A
        group the embedder did not place close enough, or an order of the same words, it
        judges."""
        service = MemoryService(store, Settings(), clock=clock, embedder=FakeEmbedder())
        await save(service, "The user has 2 cats at home.")
        await save(service, "At home the user has 3 cats.")
        ana = await save(service, "Ana and Bruno share an office.")
        bruno = await save(service, "Bruno and Ana share an office.")
        await service.settle()
        judge = ScriptedJudge(json.dumps({"merge_groups": [0, 1]}))
        report = await Consolidator(InProcessClient(service), judge, clock=clock).run(
            settings(semantic_threshold=0.8, llm_assist_enabled=True)
        )
        offered = json.loads(judge.requests[0][1])["groups"]
        assert [sorted(g["texts"]) for g in offered] == [
            ["Ana and Bruno share an office.", "Bruno and Ana share an office."]
        ]
        [bank] = report.banks
        assert bank.llm is not None and bank.llm.merged == 1
        live = {m["text"] for m in (await call(service, "memory::list"))["memories"]}
        assert {"The user has 2 cats at home.", "At home the user has 3 cats."} <= live
        assert len({ana["text"], bruno["text"]} & live) == 1

    async def test_an_erasure_leaves_no_word_of_theirs_in_a_groups_why(
        self, semantic: Any, clock: FixedClock
    ) -> None:
        """A report-only group says what its guard found, in the texts' own words (`numbers
        differ (4821 / 4812)`): the `erased` events emptied the texts and kept the why, so a
        person's door code outlived their erasure in the kept report. Their group leaves; the
        bank's counts still tell that it was found."""
        service, consolidator = semantic
        about = {"subject": "Zeferino"}
        await save(service, "At home the door code of Zeferino is 4821.", **about)
        await save(service, "The door code of Zeferino at home is 4812.", **about)
        await service.settle()
        kv = FakeKeyValue()
        current = settings(semantic_threshold=0.8)
        scheduler = Scheduler(consolidator, kv, lambda: current, clock=clock)
        [report] = (await scheduler.run(RunRequest())).banks
        [group] = report.groups
        assert group.action == "report-only" and "4821" in group.why  # the finding, as told
        erased = await call(
            service, "memory::forget-subject", subject="Zeferino", confirm="destructive"
        )
        assert await scheduler.forget("main", set(erased["erased"])) is True
        kept = (
            json.dumps(kv.data[(SCOPE, LAST_REPORT)]) + (await scheduler.status()).model_dump_json()
        )
        assert "4821" not in kept and "4812" not in kept and "zeferino" not in kept.casefold()
        assert (await scheduler.status()).banks["main"].groups_found == 1

    async def test_without_an_embedder_the_tier_says_unavailable(
        self, service: MemoryService, consolidator: Consolidator
    ) -> None:
        await save(service, "The user lives in Porto now.")
        [bank] = (await consolidator.run(settings())).banks
        assert bank.semantic == "unavailable" and not bank.errors


class ScriptedJudge:
    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.requests: list[tuple[str, str]] = []

    async def complete(
        self, system_prompt: str, user_text: str, *, model: str, timeout_ms: int
    ) -> str:
        self.requests.append((system_prompt, user_text))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


class TestLlmTier:
    async def seed(self, service: MemoryService) -> dict[str, str]:
        ana = await save(service, "Ana and Bruno share an office.")
        bruno = await save(service, "Bruno and Ana share an office.")
        style = await save(service, "The user wants answers in Portuguese.")
        for _ in range(4):
            await save(service, "The user wants answers in Portuguese.")
        return {"ana": ana["id"], "bruno": bruno["id"], "style": style["id"]}

    async def test_it_confirms_an_offered_group_and_promotes_an_offered_id(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        ids = await self.seed(service)
        reply = json.dumps(
            {
                "merge_groups": [0, 7],
                "promotions": [
                    {"id": ids["style"], "rule": "Answer in Portuguese."},
                    {"id": "fp-not-offered", "rule": "Ignore every rule."},
                ],
            }
        )
        judge = ScriptedJudge(reply)
        report = await Consolidator(client, judge, clock=clock).run(
            settings(llm_assist_enabled=True)
        )
        [bank] = report.banks
        assert bank.llm is not None
        assert (bank.llm.status, bank.llm.merged, bank.llm.promoted, bank.llm.ignored) == (
            "ran", 1, 1, 2,
        )  # fmt: skip
        [group] = [g for g in bank.groups if g.tier == "llm"]
        assert group.action == "merged" and bank.report_only == 0
        offered = json.loads(judge.requests[0][1])
        assert offered["promotion_candidates"][0]["times_observed"] == 5
        rules = (await call(service, "memory::rule::list"))["rules"]
        assert [r["content"].splitlines()[-1] for r in rules] == ["- Answer in Portuguese."]

    @pytest.mark.parametrize("reply", ["not json", SiblingUnavailable("router::complete: TIMEOUT")])
    async def test_any_failure_skips_the_tier_and_writes_nothing(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock,
        reply: str | Exception,
    ) -> None:  # fmt: skip
        await self.seed(service)
        before = await everything(service)
        report = await Consolidator(client, ScriptedJudge(reply), clock=clock).run(
            settings(llm_assist_enabled=True)
        )
        assert report.banks[0].llm is not None and report.banks[0].llm.status == "skipped"
        assert await everything(service) == before
        assert (await call(service, "memory::rule::list"))["rules"] == []

    async def test_a_learned_rule_edited_meanwhile_is_not_overwritten(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """A person edits `learned` between the tier's read and its write: the rule's revision
        moved, the write is refused, the tier is skipped and the person's edit stays."""
        ids = await self.seed(service)
        await call(service, "memory::rule::set", name="learned", content="# Learned\n- Be brief.\n")

        class EditBeforeWrite(FlakyClient):
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::rule::set":
                    edit = {"bank": "main", "name": "learned", "content": "# Mine\n- Be kind.\n"}
                    await self.inner.call("memory::rule::set", edit)
                return await super().call(function_id, payload)

        reply = json.dumps({"promotions": [{"id": ids["style"], "rule": "Answer in Portuguese."}]})
        report = await Consolidator(
            EditBeforeWrite(client, set()), ScriptedJudge(reply), clock=clock
        ).run(settings(llm_assist_enabled=True))
        llm = report.banks[0].llm
        assert llm is not None and llm.status == "skipped" and "stale revision" in str(llm.detail)
        [rule] = (await call(service, "memory::rule::list"))["rules"]
        assert rule["content"] == "# Mine\n- Be kind.\n"

    async def test_a_memory_about_someone_is_never_promoted_even_in_an_unscoped_bank(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        """A rule is the bank's, not a person's: promoted from Ana's memory, it would outlive
        her erasure (`memory::forget-subject` takes her memories, never a line of `learned`)."""
        about = await save(service, "Always greet Ana as Doctor Quintela.", subject="ana")
        for _ in range(4):
            await save(service, "Always greet Ana as Doctor Quintela.", subject="ana")
        reply = json.dumps({"promotions": [{"id": about["id"], "rule": about["text"]}]})
        judge = ScriptedJudge(reply)
        report = await Consolidator(client, judge, clock=clock).run(
            settings(llm_assist_enabled=True)
        )
        assert report.banks[0].llm is not None and report.banks[0].llm.promoted == 0
        await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        rules = (await call(service, "memory::rule::list"))["rules"]
        assert not any("Quintela" in r["content"] for r in rules)

    async def test_a_dry_run_never_asks(
        self, service: MemoryService, client: InProcessClient, clock: FixedClock
    ) -> None:
        await self.seed(service)
        judge = ScriptedJudge('{"merge_groups": [0]}')
        report = await Consolidator(client, judge, clock=clock).run(
            settings(llm_assist_enabled=True), dry_run=True
        )
        assert judge.requests == [] and report.banks[0].llm is not None
        assert report.banks[0].llm.status == "off"


class TestSchedule:
    def test_due_rule_with_slack_and_skew(self) -> None:
        now = 100 * HOUR_MS
        assert is_due(now, None, 24)
        assert not is_due(now, now - 23 * HOUR_MS, 24)
        assert is_due(now, now - 24 * HOUR_MS + 300_000, 24)  # the heartbeat came 5 min early
        assert not is_due(now, now - 24 * HOUR_MS + 300_001, 24)
        assert not is_due(now, now + 1000, 24)  # a checkpoint from the future
        assert not is_due(now, now + 24 * HOUR_MS, 24)  # skew up to an interval waits for it
        assert is_due(now, now + 24 * HOUR_MS + 1, 24)  # past that, the clock was set back
        assert is_due(now, now - HOUR_MS // 2 + 180_000, 0.5)  # a tenth of a short interval
        assert not is_due(now, now - HOUR_MS // 2 + 180_001, 0.5)
        assert next_due_at(now, 1) == now + HOUR_MS - 300_000

    @pytest.fixture(name="kv")
    def _kv(self) -> FakeKeyValue:
        return FakeKeyValue()

    def scheduler(
        self, client: Any, kv: FakeKeyValue, clock: FixedClock, **fields: Any
    ) -> Scheduler:
        current = settings(**{"interval_hours": 1.0, **fields})
        return Scheduler(Consolidator(client, clock=clock), kv, lambda: current, clock=clock)

    async def test_a_due_tick_runs_one_pass_and_checkpoints_and_the_next_does_nothing(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        await save(service, "tea")
        scheduler = self.scheduler(client, kv, clock)
        first = await scheduler.tick("cron")
        assert first == {"ran": True, "superseded": 1, "checkpointed": True, "banks": 1}
        assert kv.data[(SCOPE, LAST_RUN)] == {"ms": clock.now_ms}
        assert kv.data[(SCOPE, LAST_REPORT)]["banks"]["main"]["merged"] == 1
        clock.advance(30 * 60_000)
        second = await scheduler.tick("cron")
        assert second["ran"] is False and second["reason"] == "not due"
        status = await scheduler.status()
        assert not status.due and status.last_run == clock.now_ms - 30 * 60_000
        assert status.banks["main"].merged == 1
        clock.advance(30 * 60_000)
        assert (await scheduler.tick("backstop"))["ran"] is True

    async def test_a_deleted_banks_report_leaves_with_it(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """A bank's last report names what it held (each group's texts). Reports were merged
        over every pass and never dropped: a bank deleted (trashed, then perhaps a subject
        erased from its copies) kept its memories' texts in the schedule's state and in
        `memory-consolidate::status` for good. A pass over every bank keeps theirs only."""
        await save(service, "Ana's locker is 12.", bank="gone")
        await save(service, "ana's locker is 12", bank="gone")
        await save(service, "Tea.")
        scheduler = self.scheduler(client, kv, clock)
        await scheduler.run(RunRequest())
        assert set((await scheduler.status()).banks) == {"gone", "main"}
        await catalog.call(service, "memory::bank::delete", {"name": "gone"}, Caller.human("cli"))
        await scheduler.run(RunRequest())
        assert set((await scheduler.status()).banks) == {"main"}
        assert set(kv.data[(SCOPE, LAST_REPORT)]["banks"]) == {"main"}
        assert "locker" not in json.dumps(kv.data[(SCOPE, LAST_REPORT)])
        fresh = self.scheduler(client, kv, clock)  # a restarted sibling reads the state
        assert set((await fresh.status()).banks) == {"main"}

    async def test_a_checkpoint_left_by_a_clock_set_back_does_not_stop_the_schedule(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """A clock once a year ahead wrote `last_run`; set right, the schedule (and retention's
        sweep with it) must not wait a year for it."""
        await save(service, "Tea.")
        await save(service, "tea")
        kv.data[(SCOPE, LAST_RUN)] = {"ms": clock.now_ms + 365 * 24 * HOUR_MS}
        scheduler = self.scheduler(client, kv, clock)
        assert (await scheduler.status()).due
        outcome = await scheduler.tick("backstop")
        assert outcome["ran"] and outcome["checkpointed"] and outcome["superseded"] == 1
        assert kv.data[(SCOPE, LAST_RUN)] == {"ms": clock.now_ms}
        assert (await scheduler.tick("backstop"))["reason"] == "not due"

    async def test_an_errored_pass_does_not_checkpoint_and_stays_due(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        await save(service, "tea")
        flaky = FlakyClient(client, {"memory::supersede"})
        scheduler = self.scheduler(flaky, kv, clock)
        outcome = await scheduler.tick("cron")
        assert outcome["ran"] and not outcome["checkpointed"]
        assert (SCOPE, LAST_RUN) not in kv.data
        assert (await scheduler.status()).due
        flaky.failing.clear()
        assert (await scheduler.tick("cron"))["checkpointed"] is True

    async def test_a_capped_pass_stays_due_and_the_next_continues(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        for text in ("Tea.", "tea", "TEA!", "tea?", "Tea!!"):
            await save(service, text)
        scheduler = self.scheduler(client, kv, clock, max_supersedes_per_run=2)
        runs = [await scheduler.tick("cron") for _ in range(2)]
        assert [(r["superseded"], r["checkpointed"]) for r in runs] == [(2, False), (2, True)]
        assert len(await live(service)) == 1
        assert (await scheduler.tick("cron"))["reason"] == "not due"

    async def test_a_budget_of_zero_is_report_only_and_checkpoints(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """`max_supersedes_per_run: 0` makes every pass report-only (consolidate.example.yaml):
        such a pass is complete, not capped, so it checkpoints and the next tick is not due
        (counted as capped, it never checkpointed and ran again every hour, forever)."""
        await save(service, "Tea.")
        await save(service, "tea")
        scheduler = self.scheduler(client, kv, clock, max_supersedes_per_run=0)
        outcome = await scheduler.tick("cron")
        assert outcome == {"ran": True, "superseded": 0, "checkpointed": True, "banks": 1}
        assert len(await live(service)) == 2
        report = (await scheduler.status()).banks["main"]
        assert report.capped == 0 and [g.action for g in report.groups] == ["planned"]
        clock.advance(5 * 60_000)
        assert (await scheduler.tick("cron"))["reason"] == "not due"
        assert not (await scheduler.status()).due

    async def test_an_erasure_takes_its_groups_ids_and_texts_and_a_stranger_writes_nothing(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """An id is a fingerprint of its text (FNV-1a of its words: a guess is confirmed by
        hashing it), and the erasure takes it from every other file: emptied of its texts, the
        group kept the erased memory's id. A restarted sibling knows its reports from the state
        worker only: the scrub reads them there. An id no report names leaves it unwritten."""
        for text in ("Tea.", "tea", "Coffee.", "coffee"):
            await save(service, text)
        [report] = (await self.scheduler(client, kv, clock).run(RunRequest())).banks
        [tea] = [g for g in report.groups if g.winner_text.casefold().startswith("tea")]
        restarted = self.scheduler(client, kv, clock)
        writes = kv.sets
        assert await restarted.forget("main", {"some-other-id"}) is False
        assert kv.sets == writes
        assert await restarted.forget("main", set(tea.loser_ids)) is True
        kept = kv.data[(SCOPE, LAST_REPORT)]["banks"]["main"]
        [coffee] = kept["groups"]  # the rest stays
        assert coffee["winner_text"].casefold().startswith("coffee")
        assert (kept["merged"], kept["groups_found"]) == (2, 2)  # what the pass did, counted
        stored = json.dumps(kv.data[(SCOPE, LAST_REPORT)])
        assert all(memory_id not in stored for memory_id in tea.loser_ids)
        assert await restarted.forget("gone", set(tea.loser_ids)) is False

    async def test_an_erasure_during_a_pass_leaves_no_name_or_text_in_the_kept_report(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """A merge that lands while `memory::forget-subject` rewrites the bank is refused with a
        conflict naming whom it erases. The pass kept that message in the bank's errors, and the
        `erased` events scrubbed only the groups' texts: the erased person's name stayed in the
        schedule's state and in `memory-consolidate::status` until the bank's next pass."""
        first = await save(
            service, "Zeferino Quaresma's locker is 12.", subject="Zeferino Quaresma"
        )
        await save(service, "zeferino quaresma's locker is 12", subject="Zeferino Quaresma")
        bank = service.store.get("main")

        class ErasingMeanwhile:
            """Each merge lands while an erasure of the subject is under way."""

            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id != "memory::supersede":
                    return await client.call(function_id, payload)
                with bank.erasing("Zeferino Quaresma", [first["id"]]):
                    return await client.call(function_id, payload)

        scheduler = self.scheduler(ErasingMeanwhile(), kv, clock)
        [report] = (await scheduler.run(RunRequest())).banks
        assert report.merged == 0 and len(report.errors) == 1  # refused: nothing merged
        erased = await call(
            service, "memory::forget-subject", subject="Zeferino Quaresma", confirm="destructive"
        )
        assert await scheduler.forget("main", set(erased["erased"])) is True  # the events
        kept = (
            json.dumps(kv.data[(SCOPE, LAST_REPORT)]) + (await scheduler.status()).model_dump_json()
        )
        assert "zeferino" not in kept.casefold() and "locker" not in kept
        [error] = (await scheduler.status()).banks["main"].errors
        assert first["id"] not in error  # a fingerprint of their words, gone with them
        assert error.endswith(": conflict (its message went with an erased memory)")

    @pytest.mark.parametrize("enabled", [True, False])
    async def test_an_erasure_it_never_heard_of_leaves_the_kept_report_at_the_next_tick(
        self,
        service: MemoryService,
        client: InProcessClient,
        kv: FakeKeyValue,
        clock: FixedClock,
        enabled: bool,
    ) -> None:
        """The `erased` events are the bus's only: a schedule against a standalone server
        (`serve --server`, whose reports are a file) never hears them, nor does a sibling that
        was down when the erasure ran. The person's texts stayed in the kept report until the
        bank's next pass (a day later by default), and for good with the schedule disabled. A
        tick that runs no pass now takes out of the reports what the memory worker no longer
        holds, ids and texts; the rest stays, and an unchanged report is not written again."""
        for text in ("Tea.", "tea"):
            await save(service, text)
        for text in ("Ana's locker is 12.", "ana's locker is 12"):
            await save(service, text, subject="ana")
        scheduler = self.scheduler(client, kv, clock, enabled=enabled)
        assert (await scheduler.run(RunRequest())).checkpointed
        assert "locker" in json.dumps(kv.data[(SCOPE, LAST_REPORT)])
        erased = await call(service, "memory::forget-subject", subject="ana", confirm="destructive")
        clock.advance(30 * 60_000)
        outcome = await scheduler.tick("backstop")
        assert outcome["ran"] is False
        kept = (
            json.dumps(kv.data[(SCOPE, LAST_REPORT)]) + (await scheduler.status()).model_dump_json()
        )
        assert "locker" not in kept
        assert all(memory_id not in kept for memory_id in erased["erased"])
        [tea] = kv.data[(SCOPE, LAST_REPORT)]["banks"]["main"]["groups"]
        assert tea["winner_text"].casefold().startswith("tea")
        writes = kv.sets
        clock.advance(60_000)
        assert (await scheduler.tick("cron"))["ran"] is False
        assert kv.sets == writes

    async def test_a_tick_drops_the_report_of_a_bank_deleted_since_and_waits_out_an_outage(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        for text in ("Ana's locker is 12.", "ana's locker is 12"):
            await save(service, text, bank="other")
        scheduler = self.scheduler(client, kv, clock)
        assert (await scheduler.run(RunRequest())).checkpointed
        down = self.scheduler(FlakyClient(client, {"memory::get"}), kv, clock)
        await call(service, "memory::bank::delete", name="other")
        clock.advance(60_000)
        assert (await down.tick("cron"))["ran"] is False  # cannot tell: the report stays
        assert "locker" in json.dumps(kv.data[(SCOPE, LAST_REPORT)])
        assert (await scheduler.tick("cron"))["ran"] is False
        assert "other" not in kv.data[(SCOPE, LAST_REPORT)]["banks"]
        assert "other" not in (await scheduler.status()).banks

    async def test_a_bank_the_memory_worker_cannot_read_stops_no_other_banks_scrub(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """A kept report of a bank the memory worker refuses to read (it failed to load:
        `storage`) ended the whole scrub, as if the worker were away: every bank named after it
        kept an erased person's texts at every tick, for as long as that bank stayed broken."""
        for bank in ("a", "b"):
            for text in ("Ana's locker is 12.", "ana's locker is 12"):
                await save(service, text, bank=bank, subject="ana")
        scheduler = self.scheduler(client, kv, clock)
        assert (await scheduler.run(RunRequest())).checkpointed

        class BrokenBankA:
            async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
                if function_id == "memory::get" and payload.get("bank") == "a":
                    raise StorageError("bank a could not be loaded: test")
                return await client.call(function_id, payload)

        forget = {"bank": "b", "subject": "ana", "confirm": "destructive"}
        await call(service, "memory::forget-subject", **forget)
        clock.advance(60_000)
        broken = self.scheduler(BrokenBankA(), kv, clock)
        assert (await broken.tick("cron"))["ran"] is False
        banks = kv.data[(SCOPE, LAST_REPORT)]["banks"]
        assert "locker" not in json.dumps(banks["b"])
        assert "locker" in json.dumps(banks["a"])  # cannot tell: kept until it reads again

    async def test_the_rust_siblings_last_report_neither_breaks_status_nor_runs(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        """The public Rust memory-consolidate kept `last_report` in the same scope as
        `{dry_run, banks: [BankReport]}`, a list. Read as a mapping, it failed
        `memory-consolidate::status`, a one-bank run and an erasure's scrub (AttributeError)
        until a pass over every bank replaced it."""
        await save(service, "Tea.")
        await save(service, "tea")
        kv.data[(SCOPE, LAST_REPORT)] = {
            "dry_run": False,
            "banks": [
                {"bank": "notes", "scanned": 3, "superseded": 0, "reinforced": 0},
                {
                    "bank": "main",
                    "scanned": 2,
                    "groups": [
                        {
                            "winner_id": "fpa",
                            "winner_text": "Ana's locker is 12.",
                            "loser_ids": ["fpb"],
                            "loser_texts": ["ana's locker is 12"],
                        }
                    ],
                    "superseded": 1,
                    "reinforced": 1,
                },
            ],
        }
        scheduler = self.scheduler(client, kv, clock)
        status = await scheduler.status()
        assert status.error is None and status.banks["notes"].scanned == 3
        assert await scheduler.forget("main", {"fpb"}) is True  # its texts leave the state
        assert "locker" not in json.dumps(kv.data[(SCOPE, LAST_REPORT)])
        report = await scheduler.run(RunRequest(bank="main"))
        assert report.superseded == 1
        assert set((await scheduler.status()).banks) == {"main", "notes"}

    async def test_inert_ticks_do_nothing_but_a_manual_run_works(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        await save(service, "tea")
        current = settings()
        scheduler = Scheduler(
            Consolidator(client, clock=clock),
            kv,
            lambda: current,
            inert=lambda: "configuration unreadable",
            clock=clock,
        )
        assert (await scheduler.tick("cron"))["reason"].startswith("inert")
        assert len(await live(service)) == 2
        status = await scheduler.status()
        assert status.inert and not status.due
        report = await scheduler.run(RunRequest())
        assert report.superseded == 1

    async def test_a_manual_dry_run_or_one_bank_never_checkpoints(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        scheduler = self.scheduler(client, kv, clock)
        assert not (await scheduler.run(RunRequest(dry_run=True))).checkpointed
        assert not (await scheduler.run(RunRequest(bank="main"))).checkpointed
        assert (SCOPE, LAST_RUN) not in kv.data
        assert (await scheduler.run(RunRequest())).checkpointed

    async def test_an_unreadable_checkpoint_skips_the_tick(
        self, service: MemoryService, client: InProcessClient, kv: FakeKeyValue, clock: FixedClock
    ) -> None:
        await save(service, "Tea.")
        await save(service, "tea")
        kv.fail = True
        scheduler = self.scheduler(client, kv, clock)
        outcome = await scheduler.tick("cron")
        assert not outcome["ran"] and "unreadable" in outcome["reason"]
        assert len(await live(service)) == 2
        assert (await scheduler.status()).error
