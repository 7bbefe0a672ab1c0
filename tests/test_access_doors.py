"""Access levels (C22) at the other doors: MCP (every MCP caller is an agent) gets a coded tool
error, REST a 403 for an agent's claim (`Memory-Caller`), and in both a refused call changes
nothing while the owner's REST calls are never limited."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client

from memory_worker.adapters.doors import CALLER_HEADER, Door, LocalDoor, encode_caller
from memory_worker.adapters.mcp_server import McpTools, build_server
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService

from .served import serving

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _tools(service: MemoryService, bank: str) -> McpTools:
    @contextlib.asynccontextmanager
    async def door_for(caller: Caller) -> AsyncIterator[Door]:
        yield LocalDoor(service, caller)

    return McpTools(door_for, bank=bank)


async def test_mcp_tools_are_held_to_the_banks_level(service: MemoryService) -> None:
    await call(service, "memory::bank::create", {"name": "diary", "conscious_access": "none"})
    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    await call(service, "memory::save", {"bank": "wiki", "text": "Deploys happen on Tuesdays."})
    async with Client(build_server(_tools(service, "diary"))) as client:
        refused = await client.call_tool("memory_recall", {"query": "anything"})
    async with Client(build_server(_tools(service, "wiki"))) as client:
        found = await client.call_tool("memory_recall", {"query": "deploys"})
        read_only = await client.call_tool("memory_save", {"text": "Deploys moved to Fridays."})
    assert refused.is_error and refused.content[0].text.startswith(  # type: ignore[union-attr]
        "forbidden: bank diary gives agents no memory tools"
    )
    assert refused.structured_content is not None
    assert refused.structured_content["error"]["code"] == "forbidden"
    assert not found.is_error
    assert read_only.is_error and read_only.content[0].text.startswith(  # type: ignore[union-attr]
        "forbidden: bank wiki lets agents read only"
    )
    listed = await call(service, "memory::list", {"bank": "wiki"})
    assert [m["text"] for m in listed["memories"]] == ["Deploys happen on Tuesdays."]


def _post(url: str, path: str, body: object, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_rest_answers_an_agents_refused_call_403(tmp_path: Path) -> None:
    agent = {CALLER_HEADER: encode_caller(Caller.for_agent("rest", session_id="s1"))}
    with serving(tmp_path / "data", tmp_path / "serve.stderr") as served:
        url = served.url
        status, _ = _post(
            url, "/memory/bank/create", {"name": "wiki", "conscious_access": "read"}, {}
        )
        assert status == 200
        save = {"bank": "wiki", "text": "Deploys happen on Tuesdays."}
        status, refused = _post(url, "/memory/save", save, agent)
        assert status == 403, refused
        assert refused["error"]["code"] == "forbidden"
        assert refused["error"]["message"].startswith("bank wiki lets agents read only")
        status, listed = _post(url, "/memory/list", {"bank": "wiki"}, {})
        assert status == 200 and listed["total"] == 0  # the refused save changed nothing
        status, _ = _post(url, "/memory/recall", {"bank": "wiki", "query": "deploys"}, agent)
        assert status == 200
        status, _ = _post(url, "/memory/save", save, {})  # the owner is never limited
        assert status == 200
