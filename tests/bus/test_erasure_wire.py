"""Engine mode end to end, as a user's harness drives it: a turn's queued job (held, retried by
the queue, or dead-lettered and redriven) never brings back a person erased after they spoke; the
same person speaking again is remembered; an agent moving a memory to another subject tells each
subject's view; a step's lesson cards keep to their 16000-token budget, a tool call's to 8000."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from memory_worker.core.injection import message_text
from memory_worker.core.lessons import tokens

from .engine_double import EngineDouble
from .siblings import (
    Cli,
    FakeHarness,
    FakeState,
    FakeSubscriber,
    TurnSiblings,
    as_agent,
    assistant_message,
    envelope,
    finish_turn,
    function_call,
    function_result,
    user_message,
)

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load

ANA = {"memory_subject": "ana"}
FORGET_ANA = {"bank": "main", "subject": "ana", "confirm": "destructive"}


def adds(*texts: str) -> str:
    return json.dumps({"memories": [{"op": "add", "text": text} for text in texts]})


def subjects(cli: Cli) -> list[tuple[str, str | None]]:
    return [(m["text"], m["subject"]) for m in cli.call("memory::list", {})["memories"]]


def test_a_turn_becomes_memories_about_its_speaker(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.sessions.add("s1", metadata=ANA, messages=[user_message("I moved to Porto last month.")])
    sib.router.script([adds("The user lives in Porto.")])
    with Cli(engine.url) as cli:
        [delivery] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
        assert delivery.error is None and delivery.result["written"] == 1
        assert subjects(cli) == [("The user lives in Porto.", "ana")]


def test_an_erasure_between_the_turn_and_its_job_wins(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """Ana speaks, her turn's job waits in the queue, she is erased, the job runs: nothing she
    said comes back. Then she speaks again: that is remembered, as anyone's words are."""
    spawn()
    sib.router.script([adds("The user lives in Porto."), adds("The user is a nurse.")])
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "main"})
        sib.queue.hold()
        sib.sessions.add(
            "s1",
            metadata=ANA,
            messages=[user_message("I moved to Porto last month."), assistant_message("Nice!")],
        )
        receipt = finish_turn(sib, "s1", "t1")
        sib.queue.wait_held(1)
        cli.call("memory::forget-subject", FORGET_ANA)
        sib.queue.resume()
        [late] = sib.queue.wait_done(receipt)
        assert late.error is None, late.error
        assert subjects(cli) == []
        # Ana speaks again after her erasure: that turn is hers to be remembered by.
        sib.sessions.append("s1", user_message("These days I work as a nurse."))
        [again] = sib.queue.wait_done(finish_turn(sib, "s1", "t2"))
        assert again.error is None, again.error
        assert subjects(cli) == [("The user is a nurse.", "ana")]
        [shown] = sib.router.requests[-1]["messages"]
        assert "Porto" not in json.dumps(shown)  # the erased turn's words are not read again


def test_a_dead_lettered_job_retried_after_an_erasure_writes_nothing(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """The router was down: the turn's job dead-lettered. Ana is erased; the operator then
    retries the dead letter (the router is back): her words from before stay gone."""
    spawn()
    sib.sessions.add("s1", metadata=ANA, messages=[user_message("My daughter Lia is seven.")])
    sib.router.fail = True
    receipt = finish_turn(sib, "s1", "t1")
    attempts = sib.queue.wait_done(receipt, timeout=30)
    assert attempts and all(a.error for a in attempts)
    [dead] = sib.queue.dead_letters
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "main"})
        cli.call("memory::forget-subject", FORGET_ANA)
        sib.router.fail = False
        sib.router.script([adds("The user's daughter Lia is seven.")])
        job = sib.queue.enqueued[0]["data"]
        assert dead["receipt"] == receipt
        assert cli.call("memory::extract-job", job)["written"] == 0  # the dead letter redriven
        assert subjects(cli) == []


def test_an_agent_moving_a_memory_tells_both_subjects_views(
    engine: EngineDouble, spawn: Any
) -> None:
    spawn()
    with (
        Cli(engine.url) as cli,
        FakeSubscriber(engine.url, "memory::item-changed", {"subject": "ana"}) as ana,
        FakeSubscriber(engine.url, "memory::item-changed", {"subject": "bob"}) as bob,
        FakeSubscriber(engine.url, "memory::item-changed") as everything,
    ):
        for sub in (ana, bob, everything):
            engine.wait_binding("memory::item-changed", sub.function_id)
        saved = cli.call(
            "memory::save", {"text": "The spare key is under the mat.", "subject": "ana"}
        )
        memory_id = saved["memory"]["id"]
        [created] = ana.wait_events(1)
        assert created["event_type"] == "created"
        as_agent(cli, "memory::update", {"id": memory_id, "subject": "bob"}, session_id="s9")
        [_, moved] = ana.wait_events(2)
        assert moved["event_type"] == "moved" and moved["id"] == memory_id
        assert moved["memory"] == {"id": memory_id, "subject": "ana"}  # no text: Bob's now
        [updated] = bob.wait_events(1)
        assert updated["event_type"] == "updated" and updated["memory"]["subject"] == "bob"
        assert "previous_subject" not in updated  # Bob's view learns nobody else's name
        [_, told] = everything.wait_events(2)
        assert told["event_type"] == "updated" and told["previous_subject"] == "ana"
        # Moving it back: Bob's view hears it left, Ana's gets the memory again.
        as_agent(cli, "memory::update", {"id": memory_id, "subject": "ana"}, session_id="s9")
        [_, left] = bob.wait_events(2)
        assert left["event_type"] == "moved" and left["memory"] == {
            "id": memory_id,
            "subject": "bob",
        }
        [_, _, back] = ana.wait_events(3)
        assert back["event_type"] == "updated" and back["memory"]["subject"] == "ana"
        assert "previous_subject" not in back


def test_an_erasure_during_a_failed_attempt_wins_over_the_queues_retry(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """The first attempt's model call fails while Ana is being erased; the queue retries the
    job and the model answers: her words from before the erasure stay gone."""
    spawn()
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "main"})

        def erased_then_down(_request: dict[str, Any]) -> str:
            cli.call("memory::forget-subject", FORGET_ANA)
            raise RuntimeError("router/unavailable: no provider reachable (fake)")

        sib.router.script([erased_then_down, adds("The user's daughter Lia is seven.")])
        sib.sessions.add("s1", metadata=ANA, messages=[user_message("My daughter Lia is seven.")])
        attempts = sib.queue.wait_done(finish_turn(sib, "s1", "t1"), timeout=30)
        assert attempts[0].error and len(sib.router.requests) >= 2
        assert subjects(cli) == []


CARDS = 110
LESSON_BUDGET = 16_000  # seed 002's `nodeInjectionTokens`: the cards of one step of a turn


def test_a_steps_lesson_cards_fill_the_step_budget_not_the_tool_calls(
    engine: EngineDouble, spawn: Any
) -> None:
    """Cards earned by a step's tool calls are packed within `lesson_injection_tokens` (16000),
    not memory::lessons::match's 8000: more than 8000 tokens of them are shown, never past 16000."""
    with Cli(engine.url) as cli, FakeHarness(engine.url) as harness, FakeState(engine.url):
        spawn()
        harness.wait_bound("harness::hook::pre-generate")
        for n in range(CARDS):  # ~190 tokens a card: ~19,000 in all, past both budgets
            cli.call(
                "memory::save",
                {
                    "text": f"Editing the proto files needs make gen (note {n}).",
                    "category": "lesson",
                    "title": f"Run make gen after editing protos, case {n}",
                    "recommendation": (f"Case {n}: " + "run make gen after it; " * 30)[:600],
                    "anchors": {"files": ["proto/user.proto"]},
                },
            )
        window = [
            user_message("rename the user's email field"),
            function_call("shell::fs::read", path="proto/user.proto"),
            function_result(),
        ]
        run = harness.hook(envelope("s1", "t1", 1, window))
        [block] = [
            t for t in map(message_text, run.appended) if t.startswith('<memory lessons="main">')
        ]
        assert 8000 < tokens(block) <= LESSON_BUDGET
        assert 40 < len(run.annotations["memory_lessons"]) < CARDS  # the rest on a later step
        # One tool call's hook (memory::lessons::match) keeps to its own 8000.
        call = {"tool": "Read", "arguments": {"file_path": "/repo/proto/user.proto"}}
        matched = cli.call("memory::lessons::match", {**call, "cwd": "/repo"})
        assert len(matched["cards"]) > 20 and tokens(matched["message"]) <= 8000


def test_a_person_speaking_after_their_erasure_is_remembered_past_an_unread_turn(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """Ana's turn was never read (its job dead-lettered: the router was down); she is erased;
    she speaks again and the router is back. What she says now is hers to be remembered by,
    and the turn from before her erasure is not read out again."""
    spawn()
    sib.sessions.add("s1", metadata=ANA, messages=[user_message("My daughter Lia is seven.")])
    sib.router.fail = True
    assert all(a.error for a in sib.queue.wait_done(finish_turn(sib, "s1", "t1"), timeout=30))
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "main"})
        cli.call("memory::forget-subject", FORGET_ANA)
        sib.router.fail = False
        sib.router.script([adds("The user is a nurse.")])
        sib.sessions.append("s1", user_message("These days I work as a nurse."))
        [again] = sib.queue.wait_done(finish_turn(sib, "s1", "t2"))
        assert again.error is None, again.error
        assert subjects(cli) == [("The user is a nurse.", "ana")]
        [shown] = sib.router.requests[-1]["messages"]
        assert "Lia" not in json.dumps(shown)


def test_a_general_memory_given_to_one_person_leaves_the_others_views(
    engine: EngineDouble, spawn: Any
) -> None:
    """A general memory is in every subject's view; moved to Bob, Ana's view hears it left
    (no text), Bob's gets it, and the unfiltered view gets the update naming no one before."""
    spawn()
    with (
        Cli(engine.url) as cli,
        FakeSubscriber(engine.url, "memory::item-changed", {"subject": "ana"}) as ana,
        FakeSubscriber(engine.url, "memory::item-changed", {"subject": "bob"}) as bob,
    ):
        for sub in (ana, bob):
            engine.wait_binding("memory::item-changed", sub.function_id)
        saved = cli.call("memory::save", {"text": "The spare key is under the mat."})
        memory_id = saved["memory"]["id"]
        ana.wait_events(1)
        bob.wait_events(1)
        as_agent(cli, "memory::update", {"id": memory_id, "subject": "bob"}, session_id="s9")
        [_, moved] = ana.wait_events(2)
        assert moved["event_type"] == "moved" and moved["memory"] == {"id": memory_id}
        [_, updated] = bob.wait_events(2)
        assert updated["event_type"] == "updated" and updated["memory"]["subject"] == "bob"
        assert "previous_subject" not in updated


def test_a_damaged_stamps_file_dated_ahead_holds_back_no_one_speaking_now(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """A damaged `.erased-subjects.json` counts everyone as erased when it last changed. A file
    dated ahead of the clock (copied from a machine whose clock ran ahead, restored with a
    wrong date) made that time the future: every turn's memories were refused until then."""
    worker = spawn()
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "main"})
        cli.call("memory::forget-subject", FORGET_ANA)
    worker.stop()
    stamps = worker.data_dir / ".erased-subjects.json"
    stamps.write_text("{not json")
    ahead_s = time.time() + 30 * 24 * 3600
    os.utime(stamps, (ahead_s, ahead_s))
    worker.start()
    sib.sessions.add("s1", metadata=ANA, messages=[user_message("I work as a nurse now.")])
    sib.router.script([adds("The user is a nurse.")])
    with Cli(engine.url) as cli:
        [delivery] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
        assert delivery.error is None and delivery.result["written"] == 1, delivery
        assert subjects(cli) == [("The user is a nurse.", "ana")]


def test_an_erasure_before_the_default_banks_first_write_wins_over_a_queued_job(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """A fresh install: Ana's first turn is queued, and she asks to be forgotten before the
    default bank's first write. The erasure was refused (bank_not_found, nothing stamped), then
    the job made the bank and saved her words. It now succeeds, erasing nothing yet, and wins."""
    spawn()
    with Cli(engine.url) as cli:
        sib.queue.hold()
        sib.sessions.add("s1", metadata=ANA, messages=[user_message("My daughter Lia is seven.")])
        receipt = finish_turn(sib, "s1", "t1")
        sib.queue.wait_held(1)
        forgotten = cli.call("memory::forget-subject", FORGET_ANA)
        assert forgotten["erased"] == []
        sib.router.script([adds("The user's daughter Lia is seven.")])
        sib.queue.resume()
        [late] = sib.queue.wait_done(receipt)
        assert late.error is None, late.error
        assert subjects(cli) == []
