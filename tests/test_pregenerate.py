"""The pre-generate hook, bank selection and the turn pipeline, through their ports (no wire).

The wire tier (`tests/bus/`) runs the same code through the real SDK and an engine double; here
each rule of the hook is pinned with fakes that can be told to fail.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memory_worker.app.lessons import KeyValueDeliveries
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import (
    AnchorsInput,
    BankCreateRequest,
    BankDeleteRequest,
    PinRequest,
    PreviewRequest,
    RuleSetRequest,
    SaveRequest,
)
from memory_worker.core.config import Settings
from memory_worker.core.errors import BankNotFound, ProseReply, SiblingUnavailable
from memory_worker.core.injection import RULES_UPDATE_TAG, message_text, render_rules_update
from memory_worker.harness.extractor import Extractor
from memory_worker.harness.pregenerate import PreGenerate, step_calls, user_message
from memory_worker.harness.selection import BankResolver, Outcome, Parent
from memory_worker.harness.sessions import SCOPE, SessionRecord, SessionState
from memory_worker.harness.turns import EXTRACT_JOB, TurnPipeline

from .fakes import FakeKeyValue as KV


class Sessions:
    """The session-manager port: metas by id; `fail` makes every lookup fail."""

    def __init__(self) -> None:
        self.metas: dict[str, dict[str, Any]] = {}
        self.fail = False
        self.calls = 0
        self.absent = False

    def add(self, session_id: str, bank: str | None = None, parent: Parent | None = None) -> None:
        meta: dict[str, Any] = {"session_id": session_id, "metadata": {}}
        if bank is not None:
            meta["metadata"]["memory_bank"] = bank
        if parent is not None:
            meta["parent"] = {"session_id": parent.session_id, "turn_id": parent.turn_id}
        self.metas[session_id] = meta

    async def get(self, session_id: str) -> dict[str, Any] | None:
        self.calls += 1
        if self.fail:
            raise SiblingUnavailable("session::get timed out")
        return self.metas.get(session_id)


class Queue:
    def __init__(self, present: bool = True) -> None:
        self.present = present
        self.jobs: dict[str, dict[str, Any]] = {}

    async def enqueue(self, function_id: str, data: dict[str, Any], receipt: str) -> bool:
        assert function_id == EXTRACT_JOB
        if self.present:
            self.jobs.setdefault(receipt, data)
        return self.present


class RecordingExtractor:
    """Stands in for the extraction pass: records what it was asked to extract."""

    def __init__(self) -> None:
        self.extracted: list[tuple[ExtractJob, str]] = []

    async def extract(self, job: ExtractJob, bank: str) -> int:
        self.extracted.append((job, bank))
        return 0

    async def pass_over(self, job: ExtractJob) -> None:
        raise AssertionError("a turn with memory must be extracted, not passed over")


class FlakyExtractor(RecordingExtractor):
    """The extraction pass failing its first `failures` attempts (the router down a moment, or
    `error`)."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0
        self.error = error or SiblingUnavailable("router::complete timed out")

    async def extract(self, job: ExtractJob, bank: str) -> int:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return await super().extract(job, bank)


class Hooked:
    """The hook wired to a real service and fake siblings, plus a tiny harness: it keeps each
    session's window (the appended messages persist, as the harness does)."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self.sessions = Sessions()
        self.kv = KV()
        self.state = SessionState(self.kv)
        self.resolver = BankResolver(
            self.sessions, self.state, lambda: service.store, lambda: service.settings.default_bank
        )
        self.hook = PreGenerate(service, self.resolver, self.state)
        self.windows: dict[str, list[dict[str, Any]]] = {}

    def restarted_with_state_down(self) -> Hooked:
        """A new process on the same service whose state worker holds what this one wrote but
        fails every call."""
        restarted = Hooked(self.service)
        restarted.kv.data, restarted.kv.fail = self.kv.data, True
        return restarted

    async def step(
        self,
        session_id: str,
        text: str | None,
        *,
        turn: str = "t1",
        step: int = 0,
        metadata: dict[str, Any] | None = None,
        parent: dict[str, Any] | None = None,
        persist: bool = True,
    ) -> dict[str, Any] | None:
        window = self.windows.setdefault(session_id, [])
        if text is not None:
            window.append(user_message(text, 1))
        envelope = {
            "point": "pre_generate",
            "session_id": session_id,
            "turn_id": turn,
            "step": step,
            "metadata": metadata,
            "parent": parent,
            "generate": {"system_prompt": "BASE", "messages": list(window), "model": "m"},
            "_caller_worker_id": "harness-1",
        }
        reply = await self.hook.run(envelope)
        if persist and reply and reply.get("mutations"):
            window.extend(reply["mutations"]["append_messages"])
        return reply


def appended(reply: dict[str, Any] | None) -> list[str]:
    if not reply or "mutations" not in reply:
        return []
    return [message_text(m) for m in reply["mutations"]["append_messages"]]


@pytest.fixture(name="h")
def _hooked(service: MemoryService) -> Hooked:
    return Hooked(service)


async def save(service: MemoryService, text: str, bank: str = "main") -> None:
    await service.save(SaveRequest(text=text, bank=bank))


async def set_rule(service: MemoryService, name: str, content: str, bank: str = "main") -> None:
    await service.rule_set(RuleSetRequest(bank=bank, name=name, content=content))


class TestInjection:
    async def test_first_step_gets_the_section_in_the_system_prompt_and_memories_appended(
        self, h: Hooked
    ) -> None:
        await set_rule(h.service, "style", "Answer in British English.")
        await save(h.service, "The user's cat is called Miso.")
        reply = await h.step("s1", "what is my cat called?")
        assert reply is not None and reply["decision"] == "continue"
        prompt = reply["mutations"]["system_prompt"]
        assert prompt.startswith("BASE") and "# Memory — bank: main" in prompt
        assert "Answer in British English." in prompt
        [block] = appended(reply)
        assert block.startswith('<memory bank="main"') and "Miso" in block
        notes = reply["annotations"]
        assert notes["memory_bank"] == "main" and notes["memory_recalled"] == 1
        assert notes["memory_rules"] == 1 and notes["memory_retrieval"] == "bm25-entity"

    async def test_later_steps_send_the_same_prefix_and_recall_nothing(self, h: Hooked) -> None:
        await set_rule(h.service, "style", "Be brief.")
        await save(h.service, "The user lives in Lisbon.")
        first = await h.step("s1", "where do I live?")
        second = await h.step("s1", None, step=1)
        assert second is not None
        assert second["mutations"]["system_prompt"] == first["mutations"]["system_prompt"]
        assert appended(second) == []

    async def test_later_steps_of_a_turn_keep_its_bank_without_asking_again(
        self, h: Hooked
    ) -> None:
        h.sessions.add("s1", bank="blog")
        first = await h.step("s1", "hi")
        asked = h.sessions.calls
        h.sessions.add("s1", bank="other")  # a switch applies from the next turn on
        later = await h.step("s1", None, step=1)
        assert h.sessions.calls == asked
        assert later["annotations"]["memory_bank"] == first["annotations"]["memory_bank"] == "blog"

    async def test_the_ambient_floor_follows_new_memories(self, h: Hooked) -> None:
        await save(h.service, "The user's name is Ana.")
        first = await h.step("s1", "hello there")
        assert "Ana" in appended(first)[0]  # no word matches: the floor brings it
        await h.service.pin(PinRequest(id=first["annotations"]["memory_ids"][0], pinned=True))
        await save(h.service, "The user works as a nurse.")
        second = await h.step("s2", "hello there")
        assert "nurse" in appended(second)[0]  # the cached floor saw the new memory

    async def test_a_rule_change_arrives_once_as_an_appended_update(self, h: Hooked) -> None:
        await set_rule(h.service, "style", "Be brief.")
        first = await h.step("s1", "hello")
        frozen = first["mutations"]["system_prompt"]
        await set_rule(h.service, "style", "Be thorough.")
        reply = await h.step("s1", "next question", turn="t2")
        assert reply["mutations"]["system_prompt"] == frozen  # the prefix never changes
        updates = [t for t in appended(reply) if t.startswith(RULES_UPDATE_TAG)]
        assert len(updates) == 1 and "Be thorough." in updates[0]
        assert reply["annotations"]["memory_rules_updated"] is True
        again = await h.step("s1", None, turn="t2", step=1)
        assert [t for t in appended(again) if t.startswith(RULES_UPDATE_TAG)] == []

    async def test_a_redelivered_step_gets_the_same_update(self, h: Hooked) -> None:
        await set_rule(h.service, "style", "Be brief.")
        await h.step("s1", "hello")
        await set_rule(h.service, "style", "Be thorough.")
        one = await h.step("s1", "question", turn="t2", persist=False)
        two = await h.step("s1", None, turn="t2", persist=False)  # same window again
        assert appended(one)[0] == appended(two)[0]

    async def test_rules_changed_back_are_announced_again(self, h: Hooked) -> None:
        await set_rule(h.service, "style", "Be brief.")
        await h.step("s1", "hello")
        await set_rule(h.service, "style", "Be thorough.")
        await h.step("s1", "q2", turn="t2")
        await set_rule(h.service, "style", "Be brief.")
        reply = await h.step("s1", "q3", turn="t3")
        [update] = [t for t in appended(reply) if t.startswith(RULES_UPDATE_TAG)]
        assert "Be brief." in update

    async def test_what_a_session_was_told_survives_a_restart(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await set_rule(service, "style", "Be brief.")
        first = await h.step("s1", "hello")
        await h.state.flush()
        await set_rule(service, "style", "Be thorough.")
        restarted = Hooked(service)  # a new process: empty caches, same state worker
        restarted.kv.data = h.kv.data
        restarted.windows = h.windows
        reply = await restarted.step("s1", "again", turn="t2")
        assert reply["mutations"]["system_prompt"] == first["mutations"]["system_prompt"]
        assert any(t.startswith(RULES_UPDATE_TAG) for t in appended(reply))

    async def test_memories_the_window_already_carries_are_not_handed_again(
        self, h: Hooked
    ) -> None:
        await save(h.service, "The user's cat is called Miso.")
        await save(h.service, "The user plays the cello.")
        first = await h.step("s1", "tell me about my cat")
        assert "Miso" in appended(first)[0]
        second = await h.step("s1", "and my cat's name again?", turn="t2")
        assert all("Miso" not in text for text in appended(second))

    async def test_what_the_window_carries_leaves_room_for_the_next_memories(
        self, h: Hooked
    ) -> None:
        """`recall_limit` counts what a turn is handed: memories the window already carries make
        way for the next ones, instead of taking their places and leaving the turn nothing new."""
        h.service.settings = Settings(recall_limit=2)
        for text in (
            "The user's cat Miso is orange.",
            "The user's cat Miso sleeps all day.",
            "The user's cat Miso hates the vet.",
        ):
            await save(h.service, text)
        first = await h.step("s1", "tell me about my cat Miso")
        handed = appended(first)[0]
        second = await h.step("s1", "and what else about my cat Miso?", turn="t2")
        assert len(appended(second)) == 1, "the third memory about Miso was never handed"
        third = appended(second)[0]
        assert "Miso" in third and not any(line in handed for line in third.splitlines()[2:-1])

    async def test_our_own_blocks_are_never_the_query(self, h: Hooked) -> None:
        await save(h.service, "The user's cat is called Miso.")
        h.windows["s1"] = [user_message("cat", 1), user_message('<memory bank="x">junk', 2)]
        reply = await h.step("s1", None)
        assert "Miso" in appended(reply)[0]

    async def test_a_stuck_sibling_costs_the_turn_nothing_past_the_budget(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await set_rule(service, "style", "Be brief.")
        first = await h.step("s1", "hello")
        never = asyncio.Event()

        async def stuck(session_id: str) -> dict[str, Any] | None:
            await never.wait()  # a session-manager that never answers
            return None

        h.sessions.get = stuck  # type: ignore[method-assign]
        hook = PreGenerate(service, h.resolver, h.state, budget_s=0.05)
        reply = await hook.run(
            {"session_id": "s1", "turn_id": "t2", "generate": {"system_prompt": "BASE"}}
        )
        assert reply == {
            "decision": "continue",
            "mutations": {
                "append_messages": [],
                "system_prompt": first["mutations"]["system_prompt"],
            },
        }

    async def test_no_session_id_passes(self, h: Hooked) -> None:
        assert await h.hook.run({"generate": {"messages": []}}) is None
        assert await h.hook.run("not an envelope") is None

    async def test_both_injections_off_withdraws_the_section_once(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await set_rule(service, "style", "Be brief.")
        first = await h.step("s1", "hello")
        service.settings = Settings(inject_rules=False, inject_memories=False)
        reply = await h.step("s1", "q", turn="t2")
        assert reply["mutations"]["system_prompt"] == first["mutations"]["system_prompt"]
        assert appended(reply) == [render_rules_update("")]
        assert appended(await h.step("s1", "q2", turn="t3")) == []
        assert await h.step("s-new", "hi") is None  # a new session is told nothing at all


class TestSelection:
    async def test_turn_metadata_wins_over_session_metadata(self, h: Hooked) -> None:
        await save(h.service, "Blog posts go out on Fridays.", bank="blog")
        h.sessions.add("s1", bank="coding")
        reply = await h.step("s1", "when do posts go out?", metadata={"memory_bank": "blog"})
        assert reply["annotations"]["memory_bank"] == "blog"
        assert "Fridays" in appended(reply)[0]

    async def test_session_metadata_picks_the_bank(self, h: Hooked) -> None:
        await save(h.service, "Blog posts go out on Fridays.", bank="blog")
        h.sessions.add("s1", bank="blog")
        reply = await h.step("s1", "when do posts go out?")
        assert reply["annotations"]["memory_bank"] == "blog"

    async def test_a_sub_agent_uses_its_parent_turns_bank(self, h: Hooked) -> None:
        await save(h.service, "Blog posts go out on Fridays.", bank="blog")
        await h.step("parent", "hi", turn="pt", metadata={"memory_bank": "blog"})
        h.sessions.add("parent")
        h.sessions.add("child", parent=Parent("parent", "pt"))
        reply = await h.step("child", "when do posts go out?", turn="ct")
        assert reply["annotations"]["memory_bank"] == "blog"

    async def test_a_sub_agent_walks_up_to_the_parent_sessions_bank(self, h: Hooked) -> None:
        await save(h.service, "Blog posts go out on Fridays.", bank="blog")
        h.sessions.add("root", bank="blog")
        h.sessions.add("mid", parent=Parent("root"))
        h.sessions.add("leaf", parent=Parent("mid"))
        reply = await h.step("leaf", "posts?")
        assert reply["annotations"]["memory_bank"] == "blog"

    async def test_a_parent_that_no_longer_exists_means_no_memory(self, h: Hooked) -> None:
        await save(h.service, "The user likes tea.")
        h.sessions.add("orphan", parent=Parent("gone"))
        resolution = await h.resolver.resolve("orphan")
        assert resolution.outcome is Outcome.NO_MEMORY
        assert await h.step("orphan", "what do I like?") is None

    async def test_without_a_session_manager_a_sub_agents_parent_is_on_the_default(
        self, h: Hooked
    ) -> None:
        h.sessions.absent = True  # `session::get` not registered: no session is known
        resolution = await h.resolver.resolve("child", parent=Parent("parent"))
        assert resolution.outcome is Outcome.BANK and resolution.bank == "main"

    async def test_an_invalid_bank_name_means_no_memory_never_the_default(self, h: Hooked) -> None:
        await save(h.service, "The user likes tea.")
        reply = await h.step("s1", "what do I like?", metadata={"memory_bank": "../etc"})
        assert reply is None
        assert (await h.state.get("s1")).turn_bank("t1") == ""

    async def test_a_bank_named_by_a_number_is_that_bank_never_the_default(self, h: Hooked) -> None:
        await save(h.service, "The user likes tea.")
        await save(h.service, "The user drank coffee all year.", bank="2024")
        # `memory_bank=2024` as `iii trigger` decodes it: the bank "2024", not main.
        reply = await h.step("s1", "what do I drink?", metadata={"memory_bank": 2024})
        assert reply["annotations"]["memory_bank"] == "2024"
        assert all("tea" not in text for text in appended(reply))

    async def test_a_bank_value_that_is_not_a_name_means_no_memory(self, h: Hooked) -> None:
        await save(h.service, "The user likes tea.")
        h.sessions.add("s1", bank="main")
        for turn, chosen in (("t1", ["blog"]), ("t2", True), ("t3", {"name": "blog"})):
            reply = await h.step(
                "s1", "what do I like?", turn=turn, metadata={"memory_bank": chosen}
            )
            assert reply is None, chosen

    async def test_a_sub_agent_whose_parent_turn_cannot_be_read_gets_no_other_bank(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await save(service, "Blog posts go out on Fridays.", bank="blog")
        await save(service, "The user likes tea.")
        await h.step("parent", "hi", turn="pt", metadata={"memory_bank": "blog"})
        await h.state.flush()
        restarted = h.restarted_with_state_down()
        restarted.sessions.add("parent")  # the session itself would select main
        restarted.sessions.add("child", parent=Parent("parent", "pt"))
        resolution = await restarted.resolver.resolve("child")
        assert resolution.outcome is Outcome.LOOKUP_FAILED
        assert await restarted.step("child", "what do I like?", turn="ct") is None

    async def test_a_call_in_a_turn_whose_bank_cannot_be_read_is_refused(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await h.step("s1", "hi", turn="t9", metadata={"memory_bank": "blog"})
        await h.state.flush()
        restarted = h.restarted_with_state_down()
        restarted.sessions.add("s1")  # the session alone would select main
        with pytest.raises(SiblingUnavailable):
            await restarted.resolver.for_call({"session_id": "s1", "turn_id": "t9"})

    async def test_a_call_naming_its_turns_bank_needs_no_state_lookup(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await h.step("s1", "hi", turn="t9", metadata={"memory_bank": "blog"})
        await h.state.flush()
        restarted = h.restarted_with_state_down()
        # The call carries the turn's own choice: the bank its hook injected from, state or not.
        context = {"session_id": "s1", "turn_id": "t9", "memory_bank": "blog"}
        assert await restarted.resolver.for_call(context) == "blog"
        bad = {"session_id": "s1", "turn_id": "t9", "memory_bank": "BAD NAME"}
        with pytest.raises(BankNotFound):  # still never another bank
            await restarted.resolver.for_call(bad)

    async def test_a_deleted_bank_means_no_memory(self, h: Hooked, service: MemoryService) -> None:
        await save(service, "Blog posts go out on Fridays.", bank="blog")
        await service.bank_delete(BankDeleteRequest(name="blog"))
        await save(service, "The user likes tea.")
        h.sessions.add("s1", bank="blog")
        assert await h.step("s1", "what do I like?") is None

    async def test_a_deleted_bank_mid_session_withdraws_its_section(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await set_rule(service, "style", "Blog voice.", bank="blog")
        h.sessions.add("s1", bank="blog")
        first = await h.step("s1", "hi")
        await service.bank_delete(BankDeleteRequest(name="blog"))
        reply = await h.step("s1", "again", turn="t2")
        assert reply["mutations"]["system_prompt"] == first["mutations"]["system_prompt"]
        assert appended(reply) == [render_rules_update("")]

    async def test_a_failed_lookup_keeps_the_told_section_and_adds_nothing(self, h: Hooked) -> None:
        await save(h.service, "The user likes tea.")
        first = await h.step("s1", "hello")
        h.sessions.fail = True
        reply = await h.step("s1", "what do I like?", turn="t2")
        assert reply == {
            "decision": "continue",
            "mutations": {
                "append_messages": [],
                "system_prompt": first["mutations"]["system_prompt"],
            },
        }
        assert await h.step("never-seen", "hi") is None

    async def test_an_unknown_bank_gets_the_header_only_while_extraction_is_on(
        self, h: Hooked, service: MemoryService
    ) -> None:
        reply = await h.step("s1", "hi", metadata={"memory_bank": "fresh"})
        assert "# Memory — bank: fresh" in reply["mutations"]["system_prompt"]
        service.settings = Settings(extraction_enabled=False)
        quiet = await h.step("s2", "hi", metadata={"memory_bank": "fresh2"})
        assert quiet is None or "mutations" not in quiet

    async def test_a_call_inside_a_turn_acts_on_that_turns_bank(self, h: Hooked) -> None:
        await h.step("s1", "hi", turn="t9", metadata={"memory_bank": "blog"})
        assert await h.resolver.for_call({"session_id": "s1", "turn_id": "t9"}) == "blog"
        assert await h.resolver.for_call(None) is None  # outside a session: the default
        await h.step("s2", "hi", turn="t8", metadata={"memory_bank": "BAD NAME"})
        with pytest.raises(BankNotFound):
            await h.resolver.for_call({"session_id": "s2", "turn_id": "t8"})

    async def test_a_call_in_a_turn_whose_bank_was_deleted_since_is_refused(
        self, h: Hooked, service: MemoryService
    ) -> None:
        await save(service, "Blog posts go out on Fridays.", bank="blog")
        await h.step("s1", "hi", turn="t9", metadata={"memory_bank": "blog"})
        await service.bank_delete(BankDeleteRequest(name="blog"))
        with pytest.raises(BankNotFound):  # an agent's save would bring the bank back
            await h.resolver.for_call({"session_id": "s1", "turn_id": "t9"})
        assert (await h.step("s1", None, turn="t9", step=1))["annotations"] == {
            "memory_rules_updated": True
        }  # its own later steps see no memory either

    async def test_state_worker_failure_does_not_break_the_hook(self, h: Hooked) -> None:
        h.kv.fail = True
        await save(h.service, "The user likes tea.")
        reply = await h.step("s1", "what do I like?")
        assert "tea" in appended(reply)[0]
        await h.state.flush()


async def _inline_turn(h: Hooked, extractor: FlakyExtractor) -> TurnPipeline:
    """A pipeline with no queue (its retries' delays none) that has run the inline pass of
    session s1's turn t1 in bank `blog`, to its end."""
    pipeline = TurnPipeline(
        h.service,
        h.resolver,
        h.state,
        Queue(present=False),
        extractor,  # type: ignore[arg-type]
    )
    pipeline.inline_retry_delays_s = (0.0, 0.0, 0.0)
    await h.step("s1", "hi", turn="t1", metadata={"memory_bank": "blog"})
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
    await pipeline.settle()
    return pipeline


class TestTurnPipeline:
    @pytest.fixture(name="pipe")
    def _pipe(self, h: Hooked) -> tuple[TurnPipeline, Queue]:
        queue = Queue()
        return TurnPipeline(h.service, h.resolver, h.state, queue, extractor=None), queue

    async def test_a_turn_enqueues_one_job_into_the_bank_it_ran_with(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, queue = pipe
        await h.step("s1", "hi", turn="t1", metadata={"memory_bank": "blog"})
        h.sessions.add("s1", bank="other")  # a later switch does not move a finished turn
        turn = {"session_id": "s1", "turn_id": "t1", "status": "failed"}
        assert (await pipeline.on_turn_completed(turn))["queued"]
        await pipeline.on_turn_completed(turn)  # redelivered: the same receipt
        [job] = queue.jobs.values()
        assert job["bank"] == "blog" and job["session_id"] == "s1"

    async def test_a_turn_the_hook_kept_nothing_for_is_extracted_into_its_own_choice(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, queue = pipe
        h.sessions.add("s1", bank="other")  # the hook never saw t1 (or a restart lost it)
        turn = {"session_id": "s1", "turn_id": "t1", "metadata": {"memory_bank": "blog"}}
        await pipeline.on_turn_completed(turn)
        bad = {"session_id": "s1", "turn_id": "t2", "metadata": {"memory_bank": "NOT valid"}}
        await pipeline.on_turn_completed(bad)
        first, second = queue.jobs.values()
        assert first["bank"] == "blog"
        assert second["skip"] is True  # an invalid choice: no memory, never the session's

    async def test_a_job_still_queued_when_extraction_is_turned_off_is_stepped_over(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue], service: MemoryService
    ) -> None:
        pipeline, queue = pipe
        await h.step("s1", "hi", turn="t1")
        await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
        [job] = queue.jobs.values()
        service.settings = Settings(extraction_enabled=False)  # "stop remembering", job waiting

        class SteppingOver(RecordingExtractor):
            def __init__(self) -> None:
                super().__init__()
                self.stepped: list[str] = []

            async def pass_over(self, job: ExtractJob) -> None:
                self.stepped.append(job.session_id)

        extractor = SteppingOver()
        late = TurnPipeline(service, h.resolver, h.state, queue, extractor)  # type: ignore[arg-type]
        assert "skipped" in await late.extract_job(job)
        assert extractor.extracted == [] and extractor.stepped == ["s1"]

    async def test_sub_agent_turns_are_not_extracted(
        self, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, queue = pipe
        turn = {"session_id": "c", "turn_id": "t", "parent": {"session_id": "p", "turn_id": "x"}}
        assert (await pipeline.on_turn_completed(turn))["skipped"] == "sub-agent turn"
        # A harness build naming the parent by its session id alone: a sub-agent's turn too.
        bare = {"session_id": "c", "turn_id": "t2", "parent": "p"}
        assert (await pipeline.on_turn_completed(bare))["skipped"] == "sub-agent turn"
        assert queue.jobs == {}

    async def test_a_turn_without_memory_only_skips(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, queue = pipe
        await h.step("s1", "hi", turn="t1", metadata={"memory_bank": "NOT valid"})
        await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
        [job] = queue.jobs.values()
        assert job["skip"] is True
        assert (await pipeline.extract_job(job))["skipped"]

    async def test_a_job_for_a_deleted_bank_never_recreates_it(
        self, pipe: tuple[TurnPipeline, Queue], service: MemoryService
    ) -> None:
        pipeline, _ = pipe
        await save(service, "Blog posts go out on Fridays.", bank="blog")
        await service.bank_delete(BankDeleteRequest(name="blog"))
        result = await pipeline.extract_job({"session_id": "s1", "bank": "blog"})
        assert "deleted" in result["skipped"]
        assert service.store.find("blog") is None

    async def test_the_default_bank_deleted_is_still_extracted_into(
        self, pipe: tuple[TurnPipeline, Queue], service: MemoryService
    ) -> None:
        pipeline, _ = pipe
        await save(service, "The user likes tea.")
        await service.bank_delete(BankDeleteRequest(name="main"))
        result = await pipeline.extract_job({"session_id": "s1", "bank": "main"})
        assert result.get("bank") == "main" and "skipped" not in result

    async def test_a_job_whose_session_lookup_fails_raises_so_the_queue_retries(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, _ = pipe
        h.sessions.fail = True
        with pytest.raises(SiblingUnavailable):
            await pipeline.extract_job({"session_id": "s1"})

    async def test_a_speaker_the_session_lookup_could_not_tell_is_asked_again_not_nobody(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        """Seed 000: a session-lookup failure makes extraction retry. Read as nobody when the
        turn completed, the speaker's facts were written general: for everyone to see in a bank
        partitioned by person."""
        pipeline, queue = pipe
        await h.step("s1", "hi", turn="t1", metadata={"memory_bank": "blog"})  # bank recorded
        h.sessions.add("s1", bank="blog")
        h.sessions.metas["s1"]["metadata"]["memory_subject"] = "ana"
        h.sessions.fail = True
        await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
        [job] = queue.jobs.values()
        extractor = RecordingExtractor()
        late = TurnPipeline(h.service, h.resolver, h.state, queue, extractor)  # type: ignore[arg-type]
        with pytest.raises(SiblingUnavailable):
            await late.extract_job(job)
        assert extractor.extracted == []
        h.sessions.fail = False  # the queue's retry
        await late.extract_job(job)
        [(ran, bank)] = extractor.extracted
        assert (ran.subject, bank) == ("ana", "blog")

    async def test_without_a_queue_the_job_runs_inline(self, h: Hooked) -> None:
        extractor = RecordingExtractor()
        pipeline = TurnPipeline(
            h.service,
            h.resolver,
            h.state,
            Queue(present=False),
            extractor,  # type: ignore[arg-type]
        )
        await h.step("s1", "hi", turn="t1", metadata={"memory_bank": "blog"})
        reply = await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
        assert reply["inline"] == "memx-s1-t1"
        await pipeline.settle()
        assert [(job.session_id, bank) for job, bank in extractor.extracted] == [("s1", "blog")]
        await pipeline.close()

    async def test_without_a_queue_a_failed_pass_is_tried_again_not_lost(self, h: Hooked) -> None:
        """The next turn's pass starts where this turn ended: an inline pass given up on after
        one failure (the router down a moment) was a turn never read."""
        extractor = FlakyExtractor(failures=2)
        pipeline = await _inline_turn(h, extractor)
        assert extractor.attempts == 3
        assert [(job.session_id, bank) for job, bank in extractor.extracted] == [("s1", "blog")]
        await pipeline.close()

    async def test_without_a_queue_a_reply_in_prose_is_asked_once_more_then_given_up(
        self, h: Hooked
    ) -> None:
        """A refusal is no router down a moment: it was asked again after every delay (some
        twelve minutes of them), the same answer each time."""
        refusal = ProseReply('router::complete replied in prose: "I can\'t help with that."')
        extractor = FlakyExtractor(failures=10, error=refusal)
        pipeline = await _inline_turn(h, extractor)
        assert extractor.attempts == 2 and extractor.extracted == []
        await pipeline.close()

    async def test_without_a_queue_a_refusal_after_a_timeout_is_still_asked_once_more(
        self, h: Hooked
    ) -> None:
        """Asked "once more" is counted in prose replies, not attempts: after a timeout, the first
        refusal gave the turn up unasked again."""

        class TimeoutThenRefusal(FlakyExtractor):
            async def extract(self, job: ExtractJob, bank: str) -> int:
                if self.attempts == 1:  # (the second attempt: the first timed out)
                    self.attempts += 1
                    raise ProseReply('router::complete replied in prose: "I can\'t help."')
                return await super().extract(job, bank)

        extractor = TimeoutThenRefusal(failures=1)
        pipeline = await _inline_turn(h, extractor)
        assert extractor.attempts == 3
        assert [(job.session_id, bank) for job, bank in extractor.extracted] == [("s1", "blog")]
        await pipeline.close()

    async def test_session_deleted_drops_what_was_kept(
        self, h: Hooked, pipe: tuple[TurnPipeline, Queue]
    ) -> None:
        pipeline, _ = pipe
        await h.step("s1", "hi")
        await h.state.flush()
        assert (SCOPE, "s1") in h.kv.data
        await pipeline.on_session_deleted({"session_id": "s1"})
        assert (SCOPE, "s1") not in h.kv.data and await h.state.get("s1") is None


async def test_turn_only_changes_share_one_late_write() -> None:
    kv = KV()
    writes = 0
    original = kv.set

    async def counting(scope: str, key: str, value: Any) -> None:
        nonlocal writes
        writes += 1
        await original(scope, key, value)

    kv.set = counting  # type: ignore[method-assign]
    state = SessionState(kv)
    record = SessionRecord(system="section")
    state.put("s1", record)  # the frozen section: written at once
    await state.flush()
    for turn in ("t1", "t2", "t3"):
        record.remember_turn(turn, "main")
        state.put("s1", record, urgent=False)
    assert writes == 1  # nothing yet: the turns wait for the debounce
    await state.flush()  # (shutdown writes what waits)
    assert writes == 2 and kv.data[(SCOPE, "s1")]["turns"] == {
        "t1": "main",
        "t2": "main",
        "t3": "main",
    }


def test_session_record_round_trips_and_accepts_the_wrapped_shape() -> None:
    record = SessionRecord(system="x", turns={"t": "main", "u": ""})
    assert SessionRecord.from_json(record.to_json()) == record
    assert SessionRecord.from_json({"value": record.to_json()}) == record
    assert SessionRecord.from_json("garbage") is None


# --- lessons on later steps --------------------------------------------------------------------

PROTO_LESSON = SaveRequest(
    text="Editing the proto files needs make gen, or the checked-in stubs go stale.",
    category="lesson",
    title="Run make gen after editing protos",
    recommendation="After editing `proto/*.proto`, run `make gen` and commit the stubs.",
    anchors=AnchorsInput(files=["proto/user.proto"]),
)


def tool_call(function_id: str, **arguments: Any) -> dict[str, Any]:
    """The assistant message a step produces when the model calls a function, and its result."""
    return {
        "role": "assistant",
        "content": [
            {
                "type": "function_call",
                "id": "c1",
                "function_id": function_id,
                "arguments": arguments,
            }
        ],
        "stop_reason": "function_call",
        "model": "m",
        "provider": "p",
        "timestamp": 2,
    }


def function_result() -> dict[str, Any]:
    return {
        "role": "function_result",
        "function_call_id": "c1",
        "function_id": "shell::fs::read",
        "content": [{"type": "text", "text": "syntax = 'proto3';"}],
        "details": {},
        "is_error": False,
        "timestamp": 3,
    }


@pytest.fixture(name="lh")
async def _lessons_hooked(store: Any, clock: Any) -> Hooked:
    kv = KV()
    service = MemoryService(store, Settings(), clock=clock, deliveries=KeyValueDeliveries(kv))
    await service.save(PROTO_LESSON)
    hooked = Hooked(service)
    hooked.kv = kv
    return hooked


def lesson_blocks(reply: dict[str, Any] | None) -> list[str]:
    return [t for t in appended(reply) if t.startswith('<memory lessons="main">')]


async def test_a_later_step_gets_the_lesson_its_tool_calls_earn_once_per_session(
    lh: Hooked,
) -> None:
    first = await lh.step("s1", "fix the user proto")
    assert lesson_blocks(first) == []  # step 0: no tool call yet, and no lesson by recall
    lh.windows["s1"] += [tool_call("shell::fs::read", path="proto/user.proto"), function_result()]
    second = await lh.step("s1", None, step=1)
    [block] = lesson_blocks(second)
    assert "Run make gen after editing protos" in block
    assert second is not None and len(second["annotations"]["memory_lessons"]) == 1
    lh.windows["s1"] += [tool_call("shell::fs::read", path="proto/user.proto"), function_result()]
    assert lesson_blocks(await lh.step("s1", None, step=2)) == []
    await lh.step("s1", "and again", turn="t2")
    lh.windows["s1"] += [tool_call("shell::fs::read", path="proto/user.proto"), function_result()]
    assert lesson_blocks(await lh.step("s1", None, turn="t2", step=1)) == []
    lh.windows["s2"] = [
        user_message("other session", 1),
        tool_call("shell::fs::read", path="proto/user.proto"),
    ]
    assert len(lesson_blocks(await lh.step("s2", None, step=1))) == 1


async def test_a_retried_step_gets_the_same_lesson_again(lh: Hooked) -> None:
    await lh.step("s1", "fix the user proto")
    lh.windows["s1"].append(tool_call("Read", file_path="proto/user.proto"))
    first = await lh.step("s1", None, step=1, persist=False)  # the step failed: nothing kept
    retry = await lh.step("s1", None, step=1)
    assert lesson_blocks(first) == lesson_blocks(retry) and len(lesson_blocks(retry)) == 1


async def test_without_turn_ids_a_later_turns_step_is_no_retry_of_an_earlier_one(
    lh: Hooked,
) -> None:
    """A harness that sends no `turn_id` numbers every turn's steps from 0 again: step 1 of
    the next turn was taken for a retry of this turn's step 1 (both `:1`) and given the card
    again. A retry sends the same window; a later turn's is longer."""
    await lh.step("s1", "fix the user proto", turn=None)  # type: ignore[arg-type]
    lh.windows["s1"] += [tool_call("shell::fs::read", path="proto/user.proto"), function_result()]
    first = await lh.step("s1", None, turn=None, step=1, persist=False)  # type: ignore[arg-type]
    retry = await lh.step("s1", None, turn=None, step=1)  # type: ignore[arg-type]
    assert len(lesson_blocks(first)) == 1 and lesson_blocks(retry) == lesson_blocks(first)
    lh.windows["s1"].append(user_message(lesson_blocks(retry)[0], 4))  # as the harness keeps it
    await lh.step("s1", "now the order proto", turn=None)  # type: ignore[arg-type]
    lh.windows["s1"] += [tool_call("shell::fs::read", path="proto/user.proto"), function_result()]
    assert lesson_blocks(await lh.step("s1", None, turn=None, step=1)) == []  # type: ignore[arg-type]


async def test_calls_before_the_newest_user_message_are_not_matched_again(lh: Hooked) -> None:
    lh.windows["s1"] = [
        user_message("earlier turn", 1),
        tool_call("shell::fs::read", path="proto/user.proto"),
        function_result(),
        user_message("a new question", 4),
    ]
    assert lesson_blocks(await lh.step("s1", None, turn="t2", step=1)) == []


async def test_a_state_worker_down_adds_no_lesson_and_keeps_it_eligible(lh: Hooked) -> None:
    await lh.step("s1", "fix the user proto")
    lh.windows["s1"].append(tool_call("shell::fs::read", path="proto/user.proto"))
    lh.kv.fail = True
    down = await lh.step("s1", None, step=1, persist=False)
    assert down is not None and down["decision"] == "continue"
    assert lesson_blocks(down) == [] and down["mutations"]["system_prompt"].startswith("BASE")
    lh.kv.fail = False
    assert len(lesson_blocks(await lh.step("s1", None, step=1))) == 1


async def test_lessons_can_be_turned_off(lh: Hooked) -> None:
    lh.service.settings = Settings(inject_lessons=False)
    await lh.step("s1", "fix the user proto")
    lh.windows["s1"].append(tool_call("shell::fs::read", path="proto/user.proto"))
    assert lesson_blocks(await lh.step("s1", None, step=1)) == []


def test_step_calls_reads_function_calls_in_order_and_stops_at_the_user() -> None:
    window = [
        user_message("q", 1),
        tool_call("a", path="old"),
        user_message("<memory lessons=...>", 2),
        tool_call("b", path="x"),
        {"role": "assistant", "content": [{"type": "tool_use", "name": "c", "input": {"p": 1}}]},
        {"role": "assistant", "content": [{"type": "toolCall", "name": "d", "arguments": "{}"}]},
        {"role": "assistant", "content": [{"type": "function_call", "arguments": {}}]},  # no name
    ]
    assert step_calls(window) == [("b", {"path": "x"}), ("c", {"p": 1}), ("d", {})]


def test_step_calls_reads_past_the_user_message_that_carries_tool_results() -> None:
    """A provider's shape with `tool_use` blocks (Anthropic's) returns each result in a user
    message of `tool_result` blocks: the step's calls are behind it, and it is no new question.
    They were never matched, so such a window got no lesson card at all."""
    window = [
        user_message("fix the user proto", 1),
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "syntax"}],
        },
    ]
    assert step_calls(window) == [("Read", {"file_path": "a"})]
    # A user message with words of its own (a question, our `<memory>` blocks) still ends them.
    assert step_calls([*window, user_message("<memory lessons=...>", 2)]) == []


def test_a_call_whose_arguments_nest_too_deep_is_skipped_not_the_steps_others() -> None:
    """`json.loads` raises RecursionError, not ValueError, past its nesting limit: the hook
    failed open and the step lost its lessons and memories for one bad call."""
    window = [
        user_message("q", 1),
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "name": "x", "arguments": "[" * 100_000}],
        },
        tool_call("b", path="x"),
    ]
    assert step_calls(window) == [("b", {"path": "x"})]


class Chat:
    """session::messages over a list (one page)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def say(self, role: str, text: str) -> str:
        entry_id = f"e{len(self.items) + 1}"
        message = {"role": role, "content": [{"type": "text", "text": text}]}
        self.items.append({"entry_id": entry_id, "message": message})
        return entry_id

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        return list(self.items), None


async def test_a_finished_turn_bounds_its_job_between_the_previous_turn_and_its_last_entry(
    h: Hooked,
) -> None:
    chat, queue = Chat(), Queue()
    pipeline = TurnPipeline(h.service, h.resolver, h.state, queue, None, chat)
    await h.step("s1", "hi", turn="t1")
    chat.say("user", "hi")
    first = chat.say("assistant", "hello")
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1", "agent": "planner"})
    await h.step("s1", "and now?", turn="t2")
    chat.say("user", "and now?")
    second = chat.say("assistant", "now this")
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t2"})
    chat.say("user", "a third turn began")
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})  # redelivered late
    job1, job2 = queue.jobs.values()
    assert (job1.get("after"), job1["until"], job1["agent"]) == (None, first, "planner")
    assert (job2["after"], job2["until"]) == (first, second)
    record = await h.state.get("s1")
    assert record is not None and record.close_turn("t1", "e-late")[:2] == (None, first)


class SentModel:
    """A completer that records each excerpt it is sent and finds nothing in it."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def complete(self, system_prompt: str, user_text: str) -> str:
        self.sent.append(user_text)
        return '{"memories": [], "rules": []}'


async def test_a_turn_finished_while_extraction_was_off_is_never_extracted_later(
    h: Hooked,
) -> None:
    chat, model = Chat(), SentModel()
    extractor = Extractor(h.service, chat, model, h.kv)
    pipeline = TurnPipeline(h.service, h.resolver, h.state, Queue(present=False), extractor, chat)
    h.service.settings = Settings(extraction_enabled=False)  # "do not remember this part"
    await h.step("s1", "My therapist is Dr. Silva and I see her on Mondays.", turn="t1")
    chat.say("user", "My therapist is Dr. Silva and I see her on Mondays.")
    chat.say("assistant", "Thanks for sharing.")
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t1"})
    await pipeline.settle()
    h.service.settings = Settings()
    await h.step("s1", "I moved to Lisbon last month with my partner.", turn="t2")
    chat.say("user", "I moved to Lisbon last month with my partner.")
    chat.say("assistant", "Noted, welcome to Lisbon.")
    await pipeline.on_turn_completed({"session_id": "s1", "turn_id": "t2"})
    await pipeline.settle()
    [excerpt] = model.sent
    assert "Lisbon" in excerpt and "Silva" not in excerpt
    await pipeline.close()


BANK_STATES = ["rules-and-memories", "empty", "never-created", "deleted"]
SETTINGS = [
    {},
    {"extraction_enabled": False},
    {"inject_rules": False},
    {"inject_memories": False},
    {"inject_rules": False, "inject_memories": False},
]


async def _bank_in_state(service: MemoryService, bank: str, state: str) -> None:
    if state in ("rules-and-memories", "deleted"):
        await set_rule(service, "style", "Answer in British English.", bank=bank)
        await save(service, "The user's cat is called Miso.", bank=bank)
    elif state == "empty":
        await service.bank_create(BankCreateRequest(name=bank))
    if state == "deleted":
        await service.bank_delete(BankDeleteRequest(name=bank))


@pytest.mark.parametrize("overrides", SETTINGS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("state", BANK_STATES)
@pytest.mark.parametrize("bank", ["main", "blog"], ids=["default-bank", "named-bank"])
async def test_preview_is_what_the_hook_sends_in_every_bank_state(
    service: MemoryService, bank: str, state: str, overrides: dict[str, bool]
) -> None:
    await _bank_in_state(service, bank, state)
    service.settings = Settings(**overrides)
    query = "what is my cat called?"
    preview = await service.preview(PreviewRequest(bank=bank, query=query))
    h = Hooked(service)
    reply = await h.step("s1", query, metadata={"memory_bank": bank}) or {}
    mutations = reply.get("mutations") or {}
    section = preview.system_prompt_section
    assert mutations.get("system_prompt") == (f"BASE{section}" if section else None)
    assert appended(reply) == ([preview.message] if preview.message else [])
    assert reply.get("annotations", {}).get("memory_ids", []) == [
        m.memory.id for m in preview.memories
    ]


class TestLanes:
    async def test_the_hook_recalls_by_the_window_it_is_in(self, h: Hooked) -> None:
        """Association lanes (C21): the hook asks with the recent window and the latest message,
        so on a bank that weights the context lane a memory formed in a conversation like this one
        comes back even though the question shares no word with it."""
        await h.service.bank_create(
            BankCreateRequest(name="main", association_weights={"content": 0.7, "context": 0.3})
        )
        await h.service.save(
            SaveRequest(
                bank="main",
                text="Sofia prefers the window seat.",
                context="booking flights to Rome for the spring trip",
            )
        )
        for n in range(6):  # newer: the ambient floor, with nothing recalled, picks these
            h.service.clock.advance(1000)  # type: ignore[attr-defined]
            await save(h.service, f"Gardening note number {n} about tomatoes.")
        h.windows["s1"] = [user_message("We are booking flights to Rome this spring.", 1)]
        reply = await h.step("s1", "what did she ask for?")
        assert any("window seat" in block for block in appended(reply))
        h.windows["s2"] = [user_message("Let us talk about the garden.", 1)]
        other = await h.step("s2", "what did she ask for?")
        assert not any("window seat" in block for block in appended(other))
