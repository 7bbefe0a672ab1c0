"""Extraction end to end on the wire: harness turn → queue job → session messages → one
router::complete → memories saved → item-changed delivered; and its failure paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .engine_double import EngineDouble
from .siblings import (
    Cli,
    FakeHarness,
    FakeQueue,
    FakeRouter,
    FakeSessions,
    FakeState,
    FakeSubscriber,
    assistant_message,
    turn_event,
    user_message,
)

pytestmark = pytest.mark.timeout(120)

SECRET = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


class Siblings:
    def __init__(self, engine: EngineDouble) -> None:
        self.harness = FakeHarness(engine.url)
        self.sessions = FakeSessions(engine.url)
        self.queue = FakeQueue(engine.url)
        self.router = FakeRouter(engine.url)
        self.state = FakeState(engine.url)

    def close(self) -> None:
        for sibling in (self.harness, self.sessions, self.queue, self.router, self.state):
            sibling.close()


@pytest.fixture(name="sib")
def _siblings(engine: EngineDouble) -> Any:
    siblings = Siblings(engine)
    try:
        yield siblings
    finally:
        siblings.close()


def finish_turn(sib: Siblings, session_id: str, turn_id: str) -> str:
    sib.harness.wait_bound("harness::turn-completed")
    sib.harness.turn_completed(turn_event(session_id, turn_id))
    return f"memx-{session_id}-{turn_id}"


def test_a_turn_becomes_memories_and_events(
    engine: EngineDouble, spawn: Any, sib: Siblings
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
    engine: EngineDouble, spawn: Any, sib: Siblings
) -> None:
    spawn()
    sib.sessions.add("s1", messages=[user_message("My daughter Lia starts school in September.")])
    sib.router.fail = True
    receipt = finish_turn(sib, "s1", "t1")
    attempts = sib.queue.wait_done(receipt, timeout=30)
    assert len(attempts) == 3 and all(d.error for d in attempts)
    assert [m["receipt"] for m in sib.queue.dead_letters] == [receipt]
    assert "s1" not in sib.state.data.get("memory_cursor", {})


def test_a_secret_in_the_chat_never_reaches_the_router_or_the_disk(
    engine: EngineDouble, spawn: Any, sib: Siblings
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
