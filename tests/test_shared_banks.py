"""Shared banks (C22): several agents bound to one bank see each other's memories, and what
extraction writes from each agent's turns lands in that one bank with the agent in provenance."""

from __future__ import annotations

import json

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.harness.extractor import Extractor

from .fakes import FakeKeyValue
from .test_extractor import Model, Transcript


async def extract_as(
    service: MemoryService, agent: str, session: str, said: str, fact: str
) -> None:
    chat, model = Transcript(size=10), Model()
    chat.say("user", said)
    model.replies.append(json.dumps({"memories": [{"op": "add", "text": fact}]}))
    extractor = Extractor(service, chat, model, FakeKeyValue())
    assert await extractor.extract(ExtractJob(session_id=session, agent=agent), "team") == 1


async def test_two_agents_share_one_bank(service: MemoryService) -> None:
    await call(service, "memory::bank::create", {"name": "team", "scope": "shared"})
    listed = await call(service, "memory::bank::list", {})
    assert [b["settings"]["scope"] for b in listed["banks"] if b["name"] == "team"] == ["shared"]
    await extract_as(
        service, "planner", "s1", "The launch is set for March 3.", "The launch is on March 3."
    )
    await extract_as(
        service, "reviewer", "s2", "Reviews need two approvals.", "Reviews need two approvals."
    )
    planner = Caller.for_agent("bus", session_id="s1", agent="planner")
    reviewer = Caller.for_agent("bus", session_id="s2", agent="reviewer")
    # Each agent recalls what the other's conversations taught the bank.
    by_planner = await call(
        service, "memory::recall", {"bank": "team", "query": "approvals"}, planner
    )
    by_reviewer = await call(
        service, "memory::recall", {"bank": "team", "query": "launch"}, reviewer
    )
    assert [m["memory"]["text"] for m in by_planner["memories"]] == ["Reviews need two approvals."]
    assert [m["memory"]["text"] for m in by_reviewer["memories"]] == ["The launch is on March 3."]
    listed = await call(service, "memory::list", {"bank": "team"})
    agents = {
        m["text"]: (m["source"]["agent"], m["source"]["session_id"]) for m in listed["memories"]
    }
    assert agents == {
        "The launch is on March 3.": ("planner", "s1"),
        "Reviews need two approvals.": ("reviewer", "s2"),
    }
    # One agent's explicit save is the other's to read as well, provenance naming who saved it.
    saved = await call(
        service, "memory::save", {"bank": "team", "text": "Standup is at 9."}, reviewer
    )
    assert saved["memory"]["source"] == {"session_id": "s2", "agent": "reviewer"}
    seen = await call(service, "memory::recall", {"bank": "team", "query": "standup"}, planner)
    assert [m["memory"]["text"] for m in seen["memories"]] == ["Standup is at 9."]
