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

import pytest
from mcp import Client

from memory_worker.adapters.doors import CALLER_HEADER, Door, LocalDoor, encode_caller
from memory_worker.adapters.mcp_server import McpTools, build_server
from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import InvalidInput

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
    assert refused.structured_content is None  # it would have to fit the output schema
    assert not found.is_error
    assert read_only.is_error and read_only.content[0].text.startswith(  # type: ignore[union-attr]
        "forbidden: bank wiki lets agents read only"
    )
    listed = await call(service, "memory::list", {"bank": "wiki"})
    assert [m["text"] for m in listed["memories"]] == ["Deploys happen on Tuesdays."]


async def test_an_unknown_tools_error_names_the_tools_the_endpoint_lists(
    service: MemoryService,
) -> None:
    """A tool name the endpoint does not serve was answered with every agent tool ("tools:
    memory_save, …, memory_pin") where a bank at `read` lists three: a model that took the hint
    and called `memory_save` was refused again. The error names what `tools/list` lists."""
    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    async with Client(build_server(_tools(service, "wiki"))) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        unknown = await client.call_tool("memory_search", {"query": "deploys"})
    text = unknown.content[0].text  # type: ignore[union-attr]
    assert unknown.is_error and text.startswith("invalid_input: unknown tool 'memory_search'")
    assert set(text.split("; tools: ", 1)[1].split(", ")) == listed
    assert listed == {"memory_get", "memory_list", "memory_recall"}


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


async def test_rest_through_the_engines_http_worker_believes_an_agents_claim(
    service: MemoryService,
) -> None:
    """The engine's REST door answers a request that claims an agent as the standalone one does:
    held to the bank's level (403), while the same request without the claim is the owner's."""
    from memory_worker.adapters.bus.catalog import http_reply
    from memory_worker.adapters.bus.worker import HTTP_CALLER

    async def through(spec: Any, body: Any, caller: Caller) -> dict[str, Any]:
        return await call(service, spec.id, body, caller)

    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    save = {"bank": "wiki", "text": "Deploys happen on Tuesdays."}
    claim = encode_caller(Caller.for_agent("rest", session_id="s1"))
    envelope = {"path": "/memory/save", "body": save, "headers": {"memory-caller": claim}}
    refused = await http_reply(envelope, through, HTTP_CALLER)
    assert refused["status_code"] == 403, refused
    assert refused["body"]["error"]["code"] == "forbidden"
    assert (await call(service, "memory::list", {"bank": "wiki"}))["total"] == 0
    owner = await http_reply({"path": "/memory/save", "body": save}, through, HTTP_CALLER)
    assert owner["status_code"] == 200, owner


def test_a_json_body_the_engine_did_not_parse_for_its_content_types_case_says_so() -> None:
    """The engine's http worker parses a body only when its `Content-Type` holds
    `application/json` as written, in lower case (`content_type.contains(...)`): sent as
    `Application/JSON`, valid JSON arrives as `null`. The refusal said the body was not valid
    JSON, and the caller went looking for a fault in a body that had none."""
    from memory_worker.adapters.bus.catalog import http_body
    from memory_worker.app.seams import HttpEnvelope

    def refusal(kind: str) -> str:
        headers = {"content-type": kind, "content-length": "16"}
        envelope = HttpEnvelope.model_validate({"path": "/memory/list", "headers": headers})
        with pytest.raises(InvalidInput) as refused:
            http_body(envelope)
        return refused.value.message

    assert "not valid JSON" in refusal("application/json; charset=utf-8")
    mixed = refusal("Application/JSON")
    assert "not valid JSON" not in mixed
    assert "Application/JSON" in mixed and "Content-Type: application/json" in mixed


async def test_the_console_and_capture_refuse_a_request_that_claims_an_agent(
    tmp_path: Path,
) -> None:
    """The console's routes are a person's: an agent's claim gets neither the event stream (every
    bank's changes, `none` banks' included) nor the settings (the default `conscious_access`
    among them), as it gets no human-owned function; nor may it queue a turn for capture."""
    import aiohttp

    from memory_worker.adapters.standalone import StandaloneServer
    from memory_worker.core.config import Settings

    config = tmp_path / "memory.yaml"
    config.write_text("conscious_access: none\n")
    data = tmp_path / "data"
    server = StandaloneServer(Settings(), data, port=0, config_path=config, data_dir_flag=str(data))
    url = await server.start()
    agent = {CALLER_HEADER: encode_caller(Caller.for_agent("rest", session_id="s1"))}
    try:
        async with aiohttp.ClientSession() as http:
            for path, body in (
                ("/console/events", {}),
                ("/console/settings", {}),
                ("/console/settings/set", {"values": {"conscious_access": "read_write"}}),
            ):
                async with http.post(url + path, json=body, headers=agent) as r:
                    assert r.status == 403, path
                    assert (await r.json())["error"]["code"] == "forbidden"
            async with http.post(url + "/console/settings", json={}) as r:
                assert r.status == 200  # the owner's page
            # Capture is the Stop hook's (the involuntary path): an agent posting a turn of its
            # own making would have extraction write into a bank its level keeps it out of.
            turn = {
                "session_id": "s1",
                "bank": "main",
                "entries": [{"entry_id": "e1", "role": "user", "text": "I moved to Lisbon."}],
            }
            async with http.post(url + "/capture", json=turn, headers=agent) as r:
                assert r.status == 403, await r.text()
                assert (await r.json())["error"]["code"] == "forbidden"
            async with http.post(url + "/capture", json=turn) as r:
                assert r.status == 200, await r.text()
    finally:
        await server.close()
    assert config.read_text() == "conscious_access: none\n"


async def test_an_mcp_endpoint_pinned_to_a_bank_lists_the_tools_its_level_gives(
    service: MemoryService,
) -> None:
    """Seed 004: `none` gives the agent no memory tools, `read` the ones that look; the tool list
    says so up front instead of offering tools whose every call is refused."""
    await call(service, "memory::bank::create", {"name": "diary", "conscious_access": "none"})
    await call(service, "memory::bank::create", {"name": "wiki", "conscious_access": "read"})
    listed: dict[str, set[str]] = {}
    for bank in ("diary", "wiki", "main"):
        async with Client(build_server(_tools(service, bank))) as client:
            listed[bank] = {tool.name for tool in (await client.list_tools()).tools}
    assert listed["diary"] == set()
    assert listed["wiki"] == {"memory_recall", "memory_get", "memory_list"}
    assert "memory_save" in listed["main"] and len(listed["main"]) == 7
