"""Access levels (C22) on the wire: a call made inside a harness turn (invocation metadata naming
its session) is an agent's and is held to the bank's `conscious_access`; the same call without a
session (a person driving the bus) and the hook are not."""

from __future__ import annotations

from typing import Any

import pytest
from iii import InvocationError

from .engine_double import EngineDouble
from .siblings import Cli, FakeHarness, envelope, user_message

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load


def as_agent(cli: Cli, function_id: str, payload: dict[str, Any]) -> Any:
    return cli.client.trigger(
        {
            "function_id": function_id,
            "payload": payload,
            "metadata": {"session_id": "s1", "turn_id": "t1"},
        }
    )


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
