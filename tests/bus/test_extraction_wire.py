"""Extraction end to end on the wire: harness turn → queue job → session messages → one
router::complete → memories saved → item-changed delivered; and its failure paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .engine_double import EngineDouble
from .siblings import (
    Cli,
    FakeSubscriber,
    TurnSiblings,
    assistant_message,
    envelope,
    finish_turn,
    meta_changed,
    user_message,
)

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load

SECRET = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def test_a_turn_becomes_memories_and_events(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.sessions.add(
        "s1",
        messages=[
            user_message("I moved to Porto last month and I now work as a nurse."),
            assistant_message("Congratulations on the move!"),
        ],
    )
    reply = {
        "memories": [
            {"op": "add", "text": "The user lives in Porto.", "entities": ["porto"]},
            {"op": "add", "text": "The user works as a nurse.", "tags": ["work"]},
        ],
        "rules": ["Never start replies with 'Certainly'."],
    }
    sib.router.script([json.dumps(reply)])
    with FakeSubscriber(engine.url, "memory::item-changed") as events, Cli(engine.url) as cli:
        engine.wait_binding("memory::item-changed", events.function_id)
        [delivery] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
        assert delivery.error is None and delivery.result["written"] == 3
        created = events.wait_events(2)
        assert {e["memory"]["text"] for e in created} == {
            "The user lives in Porto.",
            "The user works as a nurse.",
        }
        listed = cli.call("memory::list", {})["memories"]
        assert all("user" in m["entities"] and m["confidence"] == "extracted" for m in listed)
        [rules] = [cli.call("memory::rule::list", {})["rules"]]
        assert [r["name"] for r in rules] == ["learned"]
    [request] = sib.router.requests
    assert request["model"] == "fake-model"  # the router's first model
    assert "I moved to Porto" in request["messages"][0]["content"][0]["text"]
    assert sib.state.data["memory_cursor"]["s1"]["last_entry_id"]


def test_a_failing_router_retries_then_dead_letters_and_the_cursor_stays(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.sessions.add("s1", messages=[user_message("My daughter Lia starts school in September.")])
    sib.router.fail = True
    receipt = finish_turn(sib, "s1", "t1")
    attempts = sib.queue.wait_done(receipt, timeout=30)
    assert len(attempts) == 3 and all(d.error for d in attempts)
    assert [m["receipt"] for m in sib.queue.dead_letters] == [receipt]
    assert "s1" not in sib.state.data.get("memory_cursor", {})


def test_a_router_whose_first_model_changed_is_asked_again(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """Without `extraction_model` the router's first model is used, and was kept for the life
    of the process: once the router's providers changed and that model was gone, every turn's
    extraction failed until dead-lettered, until the worker was restarted. A failed completion
    now asks `router::models::list` again on the next attempt."""
    spawn()
    sib.router.only_listed = True
    sib.sessions.add("s1", messages=[user_message("I moved to Porto last month.")])
    sib.router.script(
        [json.dumps({"memories": [{"op": "add", "text": "The user lives in Porto."}]})]
    )
    [first] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
    assert first.error is None and first.result["written"] == 1
    sib.router.models = ["other-model"]  # the providers changed: fake-model is gone
    sib.sessions.append("s1", user_message("I now work as a nurse."))
    sib.router.script([json.dumps({"memories": [{"op": "add", "text": "The user is a nurse."}]})])
    attempts = sib.queue.wait_done(finish_turn(sib, "s1", "t2"), timeout=30)
    assert attempts[-1].error is None, [a.error for a in attempts]
    assert attempts[-1].result["written"] == 1
    assert sib.router.requests[-1]["model"] == "other-model"


def test_a_secret_in_the_chat_never_reaches_the_router_or_the_disk(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    worker = spawn()
    sib.sessions.add(
        "s1", messages=[user_message(f"use my token {SECRET} for the deploy to staging, please")]
    )
    sib.router.script(
        [json.dumps({"memories": [{"op": "add", "text": f"The user's token is {SECRET}."}]})]
    )
    [delivery] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
    assert delivery.error is None
    assert SECRET not in json.dumps(sib.router.requests)
    files = [p for p in worker.data_dir.rglob("*") if p.is_file()]
    assert files and not any(SECRET in p.read_text(errors="ignore") for p in files)


def refs(request: dict[str, Any]) -> dict[str, str]:
    """known memory text → the `mN` label the worker showed the model."""
    shown = request["messages"][0]["content"][0]["text"]
    out = {}
    for line in shown.splitlines():
        label, sep, text = line.partition(": ")
        if sep and label[:1] == "m" and label[1:].isdigit():
            out[text.removesuffix(" [pinned]")] = label
    return out


def test_restate_correct_and_a_rule_said_twice_across_turns(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    rule = "Never start replies with 'Certainly'."
    sib.sessions.add("s1", messages=[user_message("I live in Lisbon. Never start with Certainly.")])
    sib.router.script(
        [
            json.dumps(
                {"memories": [{"op": "add", "text": "The user lives in Lisbon."}], "rules": [rule]}
            ),
            lambda req: json.dumps(
                {
                    "memories": [{"op": "restate", "ref": refs(req)["The user lives in Lisbon."]}],
                    "rules": [rule],
                }
            ),
            lambda req: json.dumps(
                {
                    "memories": [
                        {
                            "op": "correct",
                            "ref": refs(req)["The user lives in Lisbon."],
                            "text": "The user lives in Porto.",
                            "reason": "the user moved",
                        }
                    ]
                }
            ),
        ]
    )
    with Cli(engine.url) as cli:
        sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
        sib.sessions.append("s1", user_message("Lisbon is lovely. And really: no 'Certainly'!"))
        sib.queue.wait_done(finish_turn(sib, "s1", "t2"))
        sib.sessions.append("s1", user_message("Update: I have moved from Lisbon to Porto."))
        [last] = sib.queue.wait_done(finish_turn(sib, "s1", "t3"))
        assert last.error is None
        history = cli.call("memory::list", {"include_superseded": True})["memories"]
        by_text = {m["text"]: m for m in history}
        assert set(by_text) == {"The user lives in Lisbon.", "The user lives in Porto."}
        lisbon = by_text["The user lives in Lisbon."]
        assert lisbon["corroboration"] == 1  # restated once, never duplicated
        assert lisbon["superseded_by"] == by_text["The user lives in Porto."]["id"]
        [learned] = cli.call("memory::rule::list", {})["rules"]
        assert learned["content"].count("Certainly") == 1


def test_a_redelivered_job_after_a_lost_cursor_creates_no_duplicates(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.sessions.add("s1", messages=[user_message("My partner Sam is a violinist in Porto.")])
    reply = json.dumps(
        {"memories": [{"op": "add", "text": "The user's partner Sam is a violinist."}]}
    )
    sib.router.script([reply, reply])
    sib.state.fail = True  # the pass writes, then dies before its cursor is kept
    with Cli(engine.url) as cli:
        job = {"session_id": "s1", "bank": "main"}
        assert cli.call("memory::extract-job", job)["written"] == 1
        sib.state.fail = False
        cli.call("memory::extract-job", job)  # the queue delivers it again
        [memory] = cli.call("memory::list", {})["memories"]
        assert memory["corroboration"] == 1


def test_extraction_into_a_deleted_bank_never_recreates_it(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.sessions.add(
        "s1",
        metadata={"memory_bank": "blog"},
        messages=[user_message("Posts go out on Fridays now.")],
    )
    sib.router.script(
        [json.dumps({"memories": [{"op": "add", "text": "Blog posts go out on Fridays."}]})]
    )
    with Cli(engine.url) as cli:
        cli.call("memory::bank::create", {"name": "blog"})
        cli.call("memory::bank::delete", {"name": "blog"})
        [delivery] = sib.queue.wait_done(finish_turn(sib, "s1", "t1"))
        assert delivery.error is None and "skipped" in delivery.result
        assert [b["name"] for b in cli.call("memory::bank::list", {})["banks"]] == []
    assert sib.router.requests == []


FACTS = {
    "sprint review": "The user's sprint review is every Thursday at 3pm.",
    "therapist": "The user's therapist is Dr. Silva.",
}


def facts_said(request: dict[str, Any]) -> str:
    """A model that keeps one fact per user message it was shown (and nothing else)."""
    shown = request["messages"][0]["content"][0]["text"].split("NEW MESSAGES:", 1)[1]
    adds = [
        {"op": "add", "text": fact}
        for line in shown.splitlines()
        if " user: " in line
        for key, fact in FACTS.items()
        if key in line
    ]
    return json.dumps({"memories": adds, "rules": []})


def bank_texts(cli: Cli, bank: str) -> set[str]:
    return {m["text"] for m in cli.call("memory::list", {"bank": bank})["memories"]}


def two_turns_in_two_banks(sib: TurnSiblings, cli: Cli) -> tuple[str, str]:
    """Turn 1 runs in bank `work`; the session then switches to `personal`, where turn 2 says
    something private. Both jobs are held in the queue (lag); returns their receipts."""
    for bank in ("work", "personal"):
        cli.call("memory::bank::create", {"name": bank})
    sib.harness.wait_bound("harness::hook::pre-generate")
    sib.queue.hold()
    first = user_message("Our sprint review is every Thursday at 3pm, please note it.")
    sib.sessions.add("s1", metadata={"memory_bank": "work"}, messages=[first])
    run = sib.harness.hook(envelope("s1", "t1", messages=[first]))
    assert run.annotations["memory_bank"] == "work"
    sib.sessions.append("s1", assistant_message("Noted: Thursdays at 3pm."))
    receipt1 = finish_turn(sib, "s1", "t1")
    sib.queue.wait_held(1)
    meta_changed(sib.engine, cli, lambda: sib.sessions.set_meta("s1", {"memory_bank": "personal"}))
    second = user_message("On another note: my therapist is Dr. Silva, I see her weekly.")
    sib.sessions.append("s1", second)
    run = sib.harness.hook(envelope("s1", "t2", messages=[first, second]))
    assert run.annotations["memory_bank"] == "personal"
    sib.sessions.append("s1", assistant_message("Thanks for sharing that."))
    receipt2 = finish_turn(sib, "s1", "t2")
    sib.queue.wait_held(2)
    return receipt1, receipt2


def test_a_late_job_reads_only_its_own_turn_so_nothing_leaks_into_the_old_bank(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    spawn()
    sib.router.script([facts_said, facts_said])
    with Cli(engine.url) as cli:
        receipt1, receipt2 = two_turns_in_two_banks(sib, cli)
        sib.queue.release(receipt1)  # turn 1's job runs after turn 2 happened
        [first] = sib.queue.wait_done(receipt1)
        sib.queue.release(receipt2)
        [second] = sib.queue.wait_done(receipt2)
        assert first.error is None and second.error is None
        assert bank_texts(cli, "work") == {FACTS["sprint review"]}
        assert bank_texts(cli, "personal") == {FACTS["therapist"]}
    [request1, request2] = sib.router.requests
    assert "therapist" not in json.dumps(request1)  # turn 2 never reached turn 1's pass
    assert "sprint review" not in json.dumps(request2)


def test_jobs_run_out_of_order_each_reads_its_own_turn(
    engine: EngineDouble, spawn: Any, sib: TurnSiblings
) -> None:
    """A retried job can run after the next turn's: neither reads the other's messages, and the
    earlier one is not lost because the cursor already went past it."""
    spawn()
    sib.router.script([facts_said, facts_said])
    with Cli(engine.url) as cli:
        receipt1, receipt2 = two_turns_in_two_banks(sib, cli)
        sib.queue.release(receipt2)
        [second] = sib.queue.wait_done(receipt2)
        sib.queue.release(receipt1)
        [first] = sib.queue.wait_done(receipt1)
        assert first.error is None and second.error is None
        assert first.result["written"] == 1
        assert bank_texts(cli, "personal") == {FACTS["therapist"]}
        assert bank_texts(cli, "work") == {FACTS["sprint review"]}
        again = cli.call("memory::extract-job", sib.queue.enqueued[1]["data"])  # redelivered
        assert again["written"] == 0
    assert len(sib.router.requests) == 2
