"""Access levels (C22) on the wire: a call made inside a harness turn (invocation metadata naming
its session) is an agent's and is held to the bank's `conscious_access`; the same call without a
session (a person driving the bus) and the hook are not."""

from __future__ import annotations

from typing import Any

import pytest
from iii import InvocationError

from .engine_double import EngineDouble
from .siblings import Cli, FakeHarness, as_agent, envelope, user_message

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load


def test_levels_hold_agents_and_leave_people_and_the_hook_alone(
    engine: EngineDouble, spawn: Any
) -> None:
    with Cli(engine.url) as cli, FakeHarness(engine.url) as harness:
        spawn()
        cli.call("memory::bank::create", {"name": "diary", "conscious_access": "none"})
        cli.call("memory::bank::create", {"name": "wiki", "conscious_access": "read"})
        cli.call("memory::save", {"bank": "diary", "text": "The user prefers tea."})
        cli.call("memory::save", {"bank": "wiki", "text": "Deploys happen on Tuesdays."})
        with pytest.raises(InvocationError) as refused:
            as_agent(cli, "memory::recall", {"bank": "diary", "query": "tea"})
        assert refused.value.message.startswith("forbidden: bank diary gives agents no memory")
        found = as_agent(cli, "memory::recall", {"bank": "wiki", "query": "deploys"})
        assert [m["memory"]["text"] for m in found["memories"]] == ["Deploys happen on Tuesdays."]
        with pytest.raises(InvocationError) as read_only:
            as_agent(cli, "memory::save", {"bank": "wiki", "text": "Deploys moved to Fridays."})
        assert read_only.value.message.startswith("forbidden: bank wiki lets agents read only")
        listed = cli.call("memory::list", {"bank": "wiki"})
        assert [m["text"] for m in listed["memories"]] == ["Deploys happen on Tuesdays."]
        # A person on the bus, and the involuntary path, are never limited.
        cli.call("memory::save", {"bank": "diary", "text": "The user drinks it without sugar."})
        turn = envelope(
            "s1", "t1", 0, [user_message("tea or coffee?")], metadata={"memory_bank": "diary"}
        )
        run = harness.hook(turn)
        assert any("tea" in str(message) for message in run.appended)


def test_the_rest_seam_called_inside_a_turn_is_an_agents_call(
    engine: EngineDouble, spawn: Any
) -> None:
    """`memory::http` reaches every function: invoked from inside a harness turn it is the
    agent's call like any other (held to the bank's level), not the owner's REST request."""
    with Cli(engine.url) as cli:
        spawn()
        cli.call("memory::bank::create", {"name": "wiki", "conscious_access": "read"})
        save = {"bank": "wiki", "text": "Deploys happen on Tuesdays."}
        reply = as_agent(cli, "memory::http", {"path": "/memory/save", "body": save})
        assert reply["status_code"] == 403, reply
        assert cli.call("memory::list", {"bank": "wiki"})["total"] == 0
        owner = cli.call("memory::http", {"path": "/memory/save", "body": save})
        assert owner["status_code"] == 200, owner


def test_the_rest_seam_inside_a_turn_sees_what_the_turns_speaker_may_see(
    engine: EngineDouble, spawn: Any
) -> None:
    """Inside Ana's turn, `memory::http` is the agent's call as a direct one is: a read naming
    Bob (a `subject` in the body) sees general memories and Ana's, never Bob's, and a write is
    about Ana or general. It ran as an agent outside any turn, which may name anyone."""
    with Cli(engine.url) as cli:
        spawn()
        cli.call("memory::bank::create", {"name": "team", "subject_scoping": True})
        cli.call("memory::save", {"bank": "team", "text": "Bob's salary is 90k.", "subject": "bob"})
        cli.call("memory::save", {"bank": "team", "text": "Ana's salary is 80k.", "subject": "ana"})
        in_anas_turn = {"session_id": "s1", "turn_id": "t1", "memory_subject": "ana"}

        def through_rest(path: str, body: dict[str, Any]) -> Any:
            return cli.client.trigger(
                {
                    "function_id": "memory::http",
                    "payload": {"path": path, "body": body},
                    "metadata": in_anas_turn,
                }
            )

        ask = {"bank": "team", "query": "salary", "subject": "bob"}
        direct = cli.client.trigger(
            {"function_id": "memory::recall", "payload": ask, "metadata": in_anas_turn}
        )
        assert [m["memory"]["subject"] for m in direct["memories"]] == ["ana"]
        reply = through_rest("/memory/recall", ask)
        assert reply["status_code"] == 200, reply
        assert [m["memory"]["subject"] for m in reply["body"]["memories"]] == ["ana"]
        save = {"bank": "team", "text": "Bob is leaving in May.", "subject": "bob"}
        refused = through_rest("/memory/save", save)
        assert refused["status_code"] == 403, refused
        listed = cli.call("memory::list", {"bank": "team", "subject": "bob"})
        assert [m["text"] for m in listed["memories"]] == ["Bob's salary is 90k."]
