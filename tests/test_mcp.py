"""The MCP server (adapters.mcp_server), driven by the SDK's own client: in-process for the tool
surface, over stdio (`memory-worker mcp` as a real subprocess) and over streamable HTTP against a
real standalone server (`/mcp`, `/mcp/<bank>`), which `memory-worker mcp` also forwards to."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client, StdioServerParameters

from memory_worker.adapters.cli import main as cli_main
from memory_worker.adapters.doors import Door, LocalDoor
from memory_worker.adapters.mcp_server import (
    MAX_BATCH_MESSAGES,
    McpTools,
    build_server,
    forgiving,
    tool_name,
)
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app import catalog
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings

from .processes import read_line
from .rawhttp import request, split_url
from .served import ENV, cli, serving

AGENT_SET = {
    "memory_recall",
    "memory_save",
    "memory_get",
    "memory_list",
    "memory_update",
    "memory_delete",
    "memory_pin",
}


LESSON: dict[str, Any] = {
    "text": "Helm charts fail to render when values.yaml has tabs.",
    "category": "lesson",
    "title": "Lint the chart before a deploy",
    "recommendation": "Run `helm lint` before deploying a chart.",
}


READ_VALUES: dict[str, Any] = {"tool": "Read", "arguments": {"file_path": "deploy/values.yaml"}}


def _tools(service: MemoryService, seen: list[Caller], **options: Any) -> McpTools:
    @contextlib.asynccontextmanager
    async def door_for(caller: Caller) -> AsyncIterator[Door]:
        seen.append(caller)
        yield LocalDoor(service, caller)

    return McpTools(door_for, **options)


def _text(result: Any) -> str:
    return str(result.content[0].text)


class TestToolSurface:
    def test_the_tool_list_is_built_once_per_kind_of_endpoint(
        self, service: MemoryService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each tool's schemas are the catalog's, the same for the server's life: rebuilt for
        every `tools/list`, the list cost ~75 ms an HTTP request (each stateless client session
        asks), against ~4 ms for a tool call."""
        tools = _tools(service, [])
        built: list[Any] = []
        real = catalog.json_schema
        monkeypatch.setattr(
            catalog, "json_schema", lambda model: built.append(model) or real(model)
        )
        first = [t.model_dump() for t in tools.list()]
        count = len(built)
        assert count and [t.model_dump() for t in tools.list()] == first
        pinned = [t.model_dump() for t in tools.list(bank="work")]
        assert len(built) > count and pinned != first  # a pinned endpoint's own schemas, once
        count = len(built)
        assert [t.model_dump() for t in tools.list(bank="home")] == pinned
        assert len(built) == count

    async def test_tools_are_the_agent_set_with_the_catalogs_hints_and_schemas(
        self, service: MemoryService
    ) -> None:
        """Listed through the SDK client: exactly the functions agents may call, each with the
        catalog's description, request schema (the golden schema's source) and hints."""
        async with Client(build_server(_tools(service, []))) as client:
            listed = (await client.list_tools()).tools
        assert {tool.name for tool in listed} == AGENT_SET
        for tool in listed:
            spec = next(s for s in catalog.CATALOG if tool_name(s) == tool.name)
            assert tool.description == spec.description
            golden = catalog.json_schema(spec.request)
            if "definitions" not in golden:
                assert tool.input_schema == golden
            else:  # written out where used (test_input_schemas_carry_no_references)
                assert tool.input_schema["properties"].keys() == golden["properties"].keys()
                assert tool.input_schema.get("required") == golden.get("required")
            golden_out = catalog.json_schema(spec.response)
            if "definitions" not in golden_out:
                assert tool.output_schema == golden_out
            else:  # written out where used (test_output_schemas_carry_no_references)
                assert tool.output_schema is not None
                assert tool.output_schema["properties"].keys() == golden_out["properties"].keys()
            hints = tool.annotations
            assert hints is not None
            assert hints.read_only_hint is spec.hints.read_only
            assert hints.idempotent_hint is spec.hints.idempotent
            if not spec.hints.read_only:
                assert hints.destructive_hint is spec.hints.destructive
        by_name = {tool.name: tool.annotations for tool in listed}
        assert by_name["memory_recall"].read_only_hint is True  # type: ignore[union-attr]
        assert by_name["memory_delete"].destructive_hint is True  # type: ignore[union-attr]
        assert by_name["memory_save"].destructive_hint is False  # type: ignore[union-attr]

    async def test_input_schemas_carry_no_references(self, service: MemoryService) -> None:
        """Clients that never resolve a `$ref` (GitHub Copilot CLI, LM Studio, FastGPT, …) could
        not build or check `memory_recall`'s `mode` or `memory_save`'s `anchors`: every input
        schema is self-contained, the definitions written out where they are used."""
        for bank in (None, "blog"):
            for tool in _tools(service, [], tools="approval", bank=bank).list():
                text = json.dumps(tool.input_schema)
                assert "$ref" not in text and "definitions" not in tool.input_schema, tool.name
                assert "$defs" not in tool.input_schema, tool.name
        listed = {tool.name: tool for tool in _tools(service, []).list()}
        mode = listed["memory_recall"].input_schema["properties"]["mode"]
        assert mode["enum"] == ["hybrid", "lexical", "semantic"] and mode["type"] == "string"
        assert mode["default"] == "hybrid" and mode["description"].startswith("`hybrid`")
        anchors = listed["memory_save"].input_schema["properties"]["anchors"]["anyOf"][0]
        assert anchors["additionalProperties"] is False and "files" in anchors["properties"]

    async def test_output_schemas_carry_no_references_and_describe_the_results(
        self, service: MemoryService
    ) -> None:
        """An output schema is written out like an input schema: a client that resolves no `$ref`
        could not check a result typed by one (`memory_recall`'s hits, `memory_save`'s memory).
        Each result validates against its own tool's advertised schema, checked with no reference
        resolution beyond the schema itself (as the SDK's client does)."""
        from jsonschema.validators import validator_for
        from referencing import Registry

        for bank in (None, "blog"):
            for tool in _tools(service, [], tools="approval", bank=bank).list():
                assert tool.output_schema is not None, tool.name
                text = json.dumps(tool.output_schema)
                assert "$ref" not in text and "definitions" not in tool.output_schema, tool.name
        tools = _tools(service, [], tools="approval")
        listed = {tool.name: tool for tool in tools.list()}
        recall = listed["memory_recall"].output_schema["properties"]["memories"]  # type: ignore[index]
        assert recall["items"]["properties"]["memory"]["properties"]["text"]["type"] == "string"
        saved = await tools.call("memory_save", {"text": "The user deploys with helm"})
        lesson = {**LESSON, "anchors": {"files": ["deploy/values.yaml"]}}
        assert not (await tools.call("memory_save", lesson)).is_error
        memory_id = saved.structured_content["memory"]["id"]  # type: ignore[index]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("memory_recall", {"query": "helm"}),
            ("memory_get", {"id": memory_id}),
            ("memory_list", {}),
            ("memory_history", {"id": memory_id}),
            ("memory_tags", {}),
            ("memory_stats", {}),
            ("memory_preview", {"query": "helm"}),
            ("memory_bank_get", {"name": "main"}),
            ("memory_lessons_match", READ_VALUES),
            ("memory_pin", {"id": memory_id, "pinned": True}),
        ]
        for name, arguments in calls:
            result = await tools.call(name, arguments)
            assert not result.is_error, (name, _text(result))
            schema = listed[name].output_schema
            assert schema is not None
            validator = validator_for(schema)(schema, registry=Registry())
            errors = [e.message for e in validator.iter_errors(result.structured_content)]
            assert errors == [], name
            if name == "memory_lessons_match":  # a card was delivered, and checked
                assert result.structured_content["cards"], result.structured_content  # type: ignore[index]

    async def test_approval_tools_and_a_pinned_bank(self, service: MemoryService) -> None:
        """`tools="approval"` adds the functions an operator approves; a pinned bank leaves
        `bank` out of every schema."""
        tools = _tools(service, [], tools="approval", bank="blog")
        names = {tool.name for tool in tools.list()}
        assert names > AGENT_SET and "memory_preview" in names and "memory_export" in names
        assert "memory_rule_set" not in names and "memory_bank_delete" not in names
        assert all("bank" not in tool.input_schema["properties"] for tool in tools.list())
        bank_get = next(tool for tool in tools.list() if tool.name == "memory_bank_get")
        assert "name" not in bank_get.input_schema["properties"]

    async def test_a_pinned_bank_is_not_left_through_the_bank_tools(
        self, service: MemoryService
    ) -> None:
        """The bank tools name their bank by `name`: pinned like `bank`, and the tools that look
        at every bank (`bank::list`, `doctor`) are not offered where one bank is served."""
        await catalog.call(service, "memory::save", {"bank": "personal", "text": "The user is ill"})
        await catalog.call(service, "memory::save", {"bank": "work", "text": "Deploys on Friday"})
        tools = _tools(service, [], tools="approval", bank="work")
        names = {tool.name for tool in tools.list()}
        assert "memory_bank_get" in names
        assert "memory_bank_list" not in names and "memory_doctor" not in names
        other = await tools.call("memory_bank_get", {"name": "personal"})
        assert other.is_error and "serves bank work only" in _text(other)
        own = await tools.call("memory_bank_get", {})
        assert not own.is_error and own.structured_content["bank"]["name"] == "work"  # type: ignore[index]
        listed = await tools.call("memory_bank_list", {})
        assert listed.is_error and "personal" not in _text(listed)

    async def test_a_pinned_bank_named_by_a_number_is_its_own_bank(
        self, service: MemoryService
    ) -> None:
        """A client that sends the pinned bank's name as a number (`2024`) names that bank, as
        every other door reads it."""
        tools = _tools(service, [], tools="approval", bank="2024")
        saved = await tools.call("memory_save", {"bank": 2024, "text": "The trip was in May"})
        assert not saved.is_error, _text(saved)
        other = await tools.call("memory_save", {"bank": 2025, "text": "Another year"})
        assert other.is_error and "serves bank 2024 only" in _text(other)

    def test_guessed_argument_names_are_read_as_the_real_fields(self) -> None:
        recall = catalog.find("memory::recall")
        assert forgiving(recall, {"q": "tea", "k": 3}) == {"query": "tea", "limit": 3}
        assert forgiving(recall, {"text": "tea", "includeSuperseded": True}) == {
            "query": "tea",
            "include_superseded": True,
        }
        save = catalog.find("memory::save")
        # `text` is save's own field: never renamed; `content` is the guess for it
        assert forgiving(save, {"content": "x", "tag": "a"}) == {"text": "x", "tags": "a"}
        assert forgiving(save, {"text": "x", "content": "y"}) == {"text": "x", "content": "y"}
        get = catalog.find("memory::get")
        assert forgiving(get, {"memoryId": "fp1"}) == {"id": "fp1"}
        # recall and list filter by one `tag`: `tags` (save's field) is the guess for it
        assert forgiving(recall, {"q": "x", "tags": "home"}) == {"query": "x", "tag": "home"}
        listing = catalog.find("memory::list")
        assert forgiving(listing, {"label": "home"}) == {"tag": "home"}

    async def test_a_guessed_tag_filter_narrows_a_recall_never_dropped(
        self, service: MemoryService
    ) -> None:
        """A model that names recall's filter `tags`, as save's field is named, had it dropped
        as an unknown argument: the recall came back unfiltered, other labels' memories in it."""
        async with Client(build_server(_tools(service, []))) as client:
            for text, tag in (
                ("The garden needs water", "home"),
                ("Water the office plants", "work"),
            ):
                await client.call_tool("memory_save", {"text": text, "tags": tag})
            found = await client.call_tool("memory_recall", {"query": "water", "tags": "home"})
        assert not found.is_error, _text(found)
        hits = found.structured_content["memories"]  # type: ignore[index]
        assert [h["memory"]["text"] for h in hits] == ["The garden needs water"]

    async def test_a_tag_filter_guessed_as_tags_filters(self, service: MemoryService) -> None:
        """`memory_save` takes `tags`, `memory_list` and `memory_recall` filter by one `tag`: a
        model that wrote `tags` (or `label`) to filter was silently given every memory, the
        filter dropped as an unknown argument. It is read as `tag`."""
        tools = _tools(service, [])
        await tools.call("memory_save", {"text": "The user deploys on Fridays", "tags": ["ops"]})
        await tools.call("memory_save", {"text": "The user deploys a blog", "tags": ["blog"]})
        for arguments in ({"tags": "ops"}, {"label": "ops"}):
            listed = await tools.call("memory_list", arguments)
            assert not listed.is_error, _text(listed)
            texts = [m["text"] for m in listed.structured_content["memories"]]  # type: ignore[index]
            assert texts == ["The user deploys on Fridays"], arguments
            found = await tools.call("memory_recall", {"query": "deploys", **arguments})
            hits = found.structured_content["memories"]  # type: ignore[index]
            assert [h["memory"]["text"] for h in hits] == ["The user deploys on Fridays"]
        several = await tools.call("memory_list", {"tags": ["ops", "blog"]})  # refused, not dropped
        assert several.is_error and _text(several).startswith("invalid_input: tag: ")

    async def test_an_optional_argument_sent_as_null_is_left_unset(
        self, service: MemoryService
    ) -> None:
        """MCP clients built over function-calling frameworks (CrewAI's and LangChain's adapters,
        the Inspector's older forms) send every optional argument they did not fill as `null`.
        Where the advertised schema admits no null (`tags`, `entities`, `pinned`, `mode`) every
        such call was refused `invalid_input: entities: Input should be a valid list`: a null
        there is the argument left unset. A nullable field's null is passed on as it was."""
        tools = _tools(service, [], tools="approval")
        listed = {tool.name: tool for tool in tools.list()}

        def all_null(name: str, **given: Any) -> dict[str, Any]:
            return {key: None for key in listed[name].input_schema["properties"]} | given

        saved = await tools.call("memory_save", all_null("memory_save", text="The user likes tea"))
        assert not saved.is_error, _text(saved)
        memory = saved.structured_content["memory"]  # type: ignore[index]
        assert memory["tags"] == [] and memory["pinned"] is False
        for name, given in (
            ("memory_recall", {"query": "tea"}),
            ("memory_list", {}),
            ("memory_preview", {"query": "tea"}),
            ("memory_pin", {"id": memory["id"], "pinned": True}),
        ):
            result = await tools.call(name, all_null(name, **given))
            assert not result.is_error, (name, _text(result))
        missing = await tools.call("memory_save", {"text": None})  # required: refused as ever
        assert missing.is_error and _text(missing).startswith("invalid_input: text")
        recall = catalog.find("memory::recall")
        assert forgiving(recall, {"q": "tea", "mode": None, "k": None}) == {"query": "tea"}

    async def test_a_list_or_object_or_flag_a_model_sent_as_json_text_is_read_as_that_value(
        self, service: MemoryService
    ) -> None:
        """Models stringify structured arguments (a client that shows an `anyOf` field as a
        string, a framework that fills every parameter with text): `tags: '["x", "y"]'` was split
        at its comma into the tags `["x"` and `"y"]`, a lesson's `anchors` given as its JSON text
        and a flag given as `"true"` were refused. Each is read as the value its text spells."""
        tools = _tools(service, [])
        saved = await tools.call(
            "memory_save",
            {"text": "The user bakes bread", "tags": '["baking", "home"]', "entities": '["bread"]'},
        )
        assert not saved.is_error, _text(saved)
        memory = saved.structured_content["memory"]  # type: ignore[index]
        assert memory["tags"] == ["baking", "home"] and memory["entities"] == ["bread"]
        pinned = await tools.call("memory_update", {"id": memory["id"], "pinned": "true"})
        assert not pinned.is_error, _text(pinned)
        assert pinned.structured_content["memory"]["pinned"] is True  # type: ignore[index]
        unpinned = await tools.call("memory_pin", {"id": memory["id"], "pin": "false"})
        assert unpinned.structured_content["memory"]["pinned"] is False  # type: ignore[index]
        listed = await tools.call("memory_list", {"include_superseded": "False"})
        assert not listed.is_error, _text(listed)
        lesson = LESSON | {"anchors": json.dumps({"files": ["deploy/values.yaml"]})}
        card = await tools.call("memory_save", lesson)
        assert not card.is_error, _text(card)
        anchors = card.structured_content["memory"]["anchors"]  # type: ignore[index]
        assert anchors["files"] == ["deploy/values.yaml"]
        # Text that is no JSON list stays what it was: one tag per comma-separated part.
        plain = await tools.call("memory_save", {"text": "The user reads", "tags": "[wip], b"})
        assert plain.structured_content["memory"]["tags"] == ["[wip]", "b"]  # type: ignore[index]
        vague = await tools.call("memory_update", {"id": memory["id"], "pinned": "yes"})
        assert vague.is_error and _text(vague).startswith("invalid_input: pinned")

    @pytest.mark.parametrize(
        "groups", ['[["helm", "tabs"]]', ['["helm", "tabs"]'], json.dumps(["helm tabs"])]
    )
    async def test_a_lessons_keyword_groups_a_model_sent_as_json_text_are_read_as_them(
        self, service: MemoryService, groups: object
    ) -> None:
        """Files, folders and identifiers given as a JSON list's text were read as that list,
        keyword groups were not: the groups as text were refused as no list, and a group as
        text was split at its spaces into the terms `["helm",` and `"tabs"]`, refused as no
        words. Each is read as the groups its text spells, as at every other list field."""
        tools = _tools(service, [])
        lesson = LESSON | {"anchors": {"keyword_groups": groups}}
        card = await tools.call("memory_save", lesson)
        assert not card.is_error, _text(card)
        anchors = card.structured_content["memory"]["anchors"]  # type: ignore[index]
        assert anchors["keyword_groups"] == [["helm", "tabs"]]

    async def test_save_and_recall_through_aliases_as_an_agent(
        self, service: MemoryService
    ) -> None:
        seen: list[Caller] = []
        async with Client(build_server(_tools(service, seen))) as client:
            saved = await client.call_tool(
                "memory_save", {"content": "The user drinks oolong tea", "tags": "tea"}
            )
            assert not saved.is_error, _text(saved)
            assert saved.structured_content["memory"]["tags"] == ["tea"]  # type: ignore[index]
            found = await client.call_tool("memory_recall", {"q": "which tea"})
        assert not found.is_error
        hits = found.structured_content["memories"]  # type: ignore[index]
        assert hits[0]["memory"]["text"] == "The user drinks oolong tea"
        assert json.loads(_text(found)) == found.structured_content
        assert seen and all(c.kind is CallerKind.AGENT and c.via == "mcp" for c in seen)

    async def test_errors_are_tool_errors_with_our_codes(self, service: MemoryService) -> None:
        async with Client(build_server(_tools(service, [], bank="blog"))) as client:
            missing = await client.call_tool("memory_get", {"id": "fp0000000000000000"})
            bad = await client.call_tool("memory_save", {"text": ""})
            unknown = await client.call_tool("memory_rule_set", {"name": "x", "content": "y"})
            other = await client.call_tool("memory_recall", {"query": "x", "bank": "main"})
        for result, code in (
            (missing, "bank_not_found"),
            (bad, "invalid_input"),
            (unknown, "invalid_input"),
            (other, "invalid_input"),
        ):
            assert result.is_error, _text(result)
            assert _text(result).startswith(f"{code}: ")
            assert result.structured_content is None  # it would have to fit the output schema
        assert "serves bank blog only" in _text(other)
        assert not (service.store.root / "main").exists()  # the other bank was never touched

    async def test_a_tool_error_passes_a_client_that_checks_results_against_the_schema(
        self, service: MemoryService
    ) -> None:
        """The TypeScript SDK's client (Claude Code, the MCP Inspector, VS Code) checks any
        `structuredContent` against the tool's `outputSchema`, an error's too: an error carrying
        `{"error": …}` there failed `memory_get`'s schema (`memory` required), and the client threw
        `-32602 Structured content does not match the tool's output schema` instead of showing the
        model `memory_not_found: …`. An error is its text alone, as the SDK's own server answers."""
        from jsonschema.validators import validator_for
        from referencing import Registry

        tools = _tools(service, [], tools="approval")
        listed = {tool.name: tool for tool in tools.list()}
        failures = [
            ("memory_get", {"id": "fp0000000000000000"}),
            ("memory_save", {"text": ""}),
            ("memory_recall", {}),
            ("memory_bank_get", {"name": "Not A Bank"}),
        ]
        for name, arguments in failures:
            result = await tools.call(name, arguments)
            assert result.is_error and _text(result).startswith(
                ("memory_not_found: ", "invalid_input: ", "bank_not_found: ")
            ), (name, _text(result))
            schema = listed[name].output_schema
            assert schema is not None
            if result.structured_content is not None:  # what the TypeScript client then does
                validator = validator_for(schema)(schema, registry=Registry())
                errors = [e.message for e in validator.iter_errors(result.structured_content)]
                assert errors == [], (name, errors)


async def test_an_mcp_save_stores_the_situation_the_agent_gives_and_invents_none(
    service: MemoryService,
) -> None:
    """Seed 004: a conscious write carries the association lanes of the situation it was formed
    in, when known. Over MCP the worker sees no conversation (no session, no turn, no speaker):
    the agent's own `context` and `intention` are stored as given, and a save naming none
    carries none (no other conversation's words are lent to it)."""
    tools = _tools(service, [])
    situation = {"context": "setting up the CI pipeline", "intention": "automate deploys"}
    given = await tools.call("memory_save", {"text": "The user deploys with helm", **situation})
    stored = given.structured_content["memory"]  # type: ignore[index]
    assert (stored["context"], stored["intention"]) == (situation["context"], "automate deploys")
    bare = await tools.call("memory_save", {"text": "The user works in Lisbon"})
    stored = bare.structured_content["memory"]  # type: ignore[index]
    assert "context" not in stored and "intention" not in stored


async def test_an_unexpected_failure_is_a_coded_tool_error_too() -> None:
    """A failure that is not one of ours (a bug, an unmapped OS error) is a tool error `internal:
    …`, as REST answers `500 internal`: it was a JSON-RPC protocol error (`Internal server
    error`), which the spec keeps for requests that are themselves wrong."""

    @contextlib.asynccontextmanager
    async def door_for(caller: Caller) -> AsyncIterator[Door]:
        raise OSError(28, "No space left on device")
        yield  # pragma: no cover

    async with Client(build_server(McpTools(door_for))) as client:
        result = await client.call_tool("memory_save", {"text": "The user likes tea"})
    assert result.is_error and _text(result).startswith("internal: ")
    assert result.structured_content is None


@pytest.mark.parametrize("bank", ["", "Main"])
def test_a_pinned_bank_no_bank_can_have_is_refused_at_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bank: str
) -> None:
    """`mcp --bank ""` (an unset variable in the client's config) served every bank: the pin
    was read as absent, so the agent reached banks it was to be kept from. It is refused before
    anything is served, exit status 1 with `{code, message}`, as `--bank Main` was."""
    code = cli_main(["mcp", "--bank", bank, "--data-dir", str(tmp_path / "data")])
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input" and "--bank" in error["message"]


def _stdio(data_dir: Path, *extra: str) -> StdioServerParameters:
    argv = cli("mcp", "--data-dir", str(data_dir), *extra)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=ENV)


async def test_stdio_subprocess_lists_saves_recalls_and_codes_errors(tmp_path: Path) -> None:
    """`memory-worker mcp` as an MCP client launches it: tools with hints, a save then a recall
    of it, a coded error; the data dir is free between calls (a `trigger` runs meanwhile)."""
    data = tmp_path / "data"
    async with Client(_stdio(data)) as client:
        listed = (await client.list_tools()).tools
        assert {tool.name for tool in listed} == AGENT_SET
        recall = next(tool for tool in listed if tool.name == "memory_recall")
        assert recall.annotations is not None and recall.annotations.read_only_hint is True
        saved = await client.call_tool("memory_save", {"text": "The user rides a blue bicycle"})
        assert not saved.is_error, _text(saved)
        between = subprocess.run(
            cli("trigger", "memory::list", "--data-dir", str(data)),
            capture_output=True,
            text=True,
            env=ENV,
            timeout=60,
            check=False,
        )
        assert between.returncode == 0, between.stderr
        assert json.loads(between.stdout)["total"] == 1
        found = await client.call_tool("memory_recall", {"query": "bicycle"})
        assert (
            found.structured_content["memories"][0]["memory"]["id"]
            == (  # type: ignore[index]
                saved.structured_content["memory"]["id"]  # type: ignore[index]
            )
        )
        failed = await client.call_tool("memory_delete", {"id": "fp0000000000000000"})
        assert failed.is_error and _text(failed).startswith("memory_not_found: ")


async def test_http_at_mcp_and_a_pinned_bank_against_a_real_server(tmp_path: Path) -> None:
    """Streamable HTTP on the standalone server: `/mcp` lists the tools, `/mcp/blog` saves into
    and recalls from bank blog only; a stdio `memory-worker mcp` on the same data dir forwards
    to the server and sees the same memories; errors keep their codes on every path."""
    data = tmp_path / "data"
    with serving(data, tmp_path / "serve.stderr") as served:
        async with Client(f"{served.url}/mcp") as client:
            listed = (await client.list_tools()).tools
            assert {tool.name for tool in listed} == AGENT_SET
            assert "bank" in listed[0].input_schema["properties"]
        async with Client(f"{served.url}/mcp/blog") as client:
            listed = (await client.list_tools()).tools
            assert all("bank" not in tool.input_schema["properties"] for tool in listed)
            saved = await client.call_tool("memory_save", {"text": "The user edits on Sundays"})
            assert not saved.is_error, _text(saved)
            found = await client.call_tool("memory_recall", {"q": "sundays"})
            assert len(found.structured_content["memories"]) == 1  # type: ignore[index]
            refused = await client.call_tool("memory_list", {"bank": "main"})
            assert refused.is_error and _text(refused).startswith("invalid_input: ")
        async with Client(_stdio(data, "--bank", "blog")) as client:
            forwarded = await client.call_tool("memory_recall", {"query": "sundays"})
            assert not forwarded.is_error, _text(forwarded)

            def ids(result: Any) -> list[str]:
                return [hit["memory"]["id"] for hit in result.structured_content["memories"]]

            assert ids(forwarded) == ids(found)  # (scores move with recency between calls)
            missing = await client.call_tool("memory_get", {"id": "fp0000000000000000"})
            assert missing.is_error and _text(missing).startswith("memory_not_found: ")
        assert "Traceback" not in served.stderr()


async def test_stopping_the_server_is_not_held_by_a_clients_get_stream(tmp_path: Path) -> None:
    """A streamable-HTTP client (the TypeScript SDK, Claude Code's) opens `GET /mcp` for the
    server's own messages once it is initialized. A stateless server has none to send: it says so
    (405, as the spec allows), so no stream stays open to hold the server's stop."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0, shutdown_timeout_s=30)
    url = await server.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(url + "/mcp", headers={"Accept": "text/event-stream"}) as stream,
        ):
            assert stream.status == 405 and stream.headers["Allow"] == "POST"
            assert (await stream.json())["error"]["code"] == "method_not_allowed"
    finally:
        await asyncio.wait_for(server.close(), 15)  # half the 30 s shutdown timeout: told apart


async def test_a_clients_delete_ending_its_session_needs_no_content_type(tmp_path: Path) -> None:
    """A streamable-HTTP client ends its session with `DELETE /mcp` (no body, so no Content-Type:
    the Python and TypeScript SDKs send none). It was refused `415 unsupported_media_type` by the
    rule meant for calls with a body; a stateless server answers the spec's 405 ("no session
    termination here"), which clients take in stride, with the `Allow` header HTTP requires
    naming the one method served (POST), as for any other method."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    try:
        for path in ("/mcp", "/mcp/blog"):
            ended = await asyncio.to_thread(
                request, url, "DELETE", path, headers={"Mcp-Session-Id": "0123abcd"}
            )
            assert ended.status == 405, (path, ended.status, ended.body)
            assert ended.headers["allow"] == "POST" and ended.code == "method_not_allowed"
        for method in ("PUT", "PATCH"):  # the SDK's 405 said `Allow: GET, POST, DELETE`
            other = await asyncio.to_thread(
                request, url, method, "/mcp", "{}", headers={"Content-Type": "application/json"}
            )
            assert (other.status, other.headers["allow"]) == (405, "POST"), (method, other.body)
        foreign = await asyncio.to_thread(
            request, url, "DELETE", "/mcp", headers={"Origin": "http://evil.example"}
        )
        assert (foreign.status, foreign.code) == (403, "forbidden")  # the Origin rule still holds
    finally:
        await server.close()


async def test_a_post_without_accept_is_answered_as_one_accepting_anything(tmp_path: Path) -> None:
    """HTTP reads a request with no `Accept` (or an empty one) as accepting any media type, and
    clients in the wild (scripts, proxies, some HTTP libraries) send none: it was refused `406
    Not Acceptable`. It gets the JSON answer a `*/*` gets; one that accepts only what this
    server never sends is still refused."""
    ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    try:
        answers = [
            await asyncio.to_thread(
                request,
                url,
                "POST",
                "/mcp",
                ping,
                headers={"Content-Type": "application/json", **h},
            )
            for h in ({}, {"Accept": ""}, {"Accept": "*/*"}, {"Accept": "text/html"})
        ]
    finally:
        await server.close()
    *served, refused = answers
    for answer in served:
        assert answer.status == 200, (answer.status, answer.body)
        assert answer.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert refused.status == 406, (refused.status, refused.body)


async def test_a_header_that_is_not_latin_1_is_passed_to_mcp_as_sent(tmp_path: Path) -> None:
    """Header values reach the SDK as the bytes that were sent: a UTF-8 `User-Agent` (a client
    named in any script) or bytes that are not UTF-8 were a 500 `internal`, with a traceback in
    the log, on every request (they were re-encoded as Latin-1)."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()

    def exchange(agent: bytes) -> bytes:
        host, port = split_url(url)
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nConnection: close\r\n"
                b"User-Agent: " + agent + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            return answer

    try:
        for agent in ("Claude Code café".encode(), "клиент €".encode(), b"\xff\xfe"):
            answer = await asyncio.to_thread(exchange, agent)
            assert answer.startswith(b"HTTP/1.1 200"), answer[-200:]
            assert b'"tools"' in answer
    finally:
        await server.close()


async def test_concurrent_calls_over_one_stdio_session_all_succeed(tmp_path: Path) -> None:
    """A client sends several tool calls at once over one stdio session (an agent's parallel tool
    uses): each is served in turn, none is refused because the process itself holds the data
    dir for another call (they queued on the lock in threads, starving the pool the holder
    needed, and were refused `conflict` naming this very process)."""
    data = tmp_path / "data"
    async with Client(_stdio(data)) as client:
        saved = await asyncio.gather(
            *(
                client.call_tool("memory_save", {"text": f"The user owns cat number {i}"})
                for i in range(8)
            ),
            client.call_tool("memory_recall", {"query": "cat"}),
        )
        for result in saved:
            assert not result.is_error, _text(result)
        listed = await client.call_tool("memory_list", {"limit": 50})
        assert listed.structured_content["total"] == 8  # type: ignore[index]


async def test_a_trailing_slash_is_the_same_endpoint(tmp_path: Path) -> None:
    """`/mcp/` and `/mcp/blog/` (a URL pasted into a client's settings with its slash) are the
    endpoints without it; they were `404 not_found`, and the client never connected."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    try:
        async with Client(f"{url}/mcp/") as client:
            listed = (await client.list_tools()).tools
            assert {tool.name for tool in listed} == AGENT_SET
            assert all("bank" in tool.input_schema["properties"] for tool in listed)
        async with Client(f"{url}/mcp/blog/") as client:
            listed = (await client.list_tools()).tools
            assert all("bank" not in tool.input_schema["properties"] for tool in listed)
            saved = await client.call_tool("memory_save", {"text": "The user edits on Sundays"})
            assert not saved.is_error, _text(saved)
        assert (tmp_path / "data" / "blog").is_dir()
    finally:
        await server.close()


async def test_a_stdio_recall_gets_the_semantic_arm_once_a_server_embedded_the_bank(
    tmp_path: Path,
) -> None:
    """`memory-worker mcp` embeds a recall's query, as a one-shot CLI recall does, over a bank that
    holds its vectors: it opened every door without an embedder, so an agent's recall through
    MCP ran lexical only (`bm25-entity`) where `memory-worker trigger memory::recall` fused the
    semantic arm, and a question sharing no word with its memory found nothing."""
    from memory_worker.adapters.embedders import load_local
    from memory_worker.storage.store import Store

    data = tmp_path / "data"
    env = {k: v for k, v in ENV.items() if k != "MEMORY_EMBEDDER"}  # the default: local
    argv = cli("mcp", "--data-dir", str(data))
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with Client(params) as client:
        saved = await client.call_tool(
            "memory_save", {"text": "The user's dog is a beagle named Pipoca"}
        )
        await client.call_tool("memory_save", {"text": "The user's favourite colour is green"})
    store = Store.open(data, holder={"pid": os.getpid(), "kind": "test"})
    service = MemoryService(store, embedder=load_local())
    await service.backfill_embeddings()
    await service.settle()
    await store.close()
    async with Client(params) as client:
        await client.call_tool("memory_recall", {"query": "colour"})  # the model, kept for:
        found = await client.call_tool("memory_recall", {"query": "que raça é o meu cachorro?"})
    assert found.structured_content["retrieval"] == "bm25-entity-semantic"  # type: ignore[index]
    hits = found.structured_content["memories"]  # type: ignore[index]
    assert hits[0]["memory"]["id"] == saved.structured_content["memory"]["id"]  # type: ignore[index]


async def test_a_stdio_only_agent_gets_the_semantic_arm_with_no_server_ever(
    tmp_path: Path,
) -> None:
    """An agent whose only door is `memory-worker mcp` (a Claude Code set-up with no server):
    what it saves is not embedded then, and with no server to embed it later its recall stayed
    lexical for good. A recall now embeds what its bank lacks first, within a budget."""
    data = tmp_path / "data"
    env = {k: v for k, v in ENV.items() if k != "MEMORY_EMBEDDER"}  # the default: local
    argv = cli("mcp", "--data-dir", str(data))
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with Client(params) as client:
        saved = await client.call_tool(
            "memory_save", {"text": "The user's dog is a beagle named Pipoca"}
        )
        await client.call_tool("memory_save", {"text": "The user's favourite colour is green"})
        found = await client.call_tool("memory_recall", {"query": "que raça é o meu cachorro?"})
    assert found.structured_content["retrieval"] == "bm25-entity-semantic"  # type: ignore[index]
    hits = found.structured_content["memories"]  # type: ignore[index]
    assert hits[0]["memory"]["id"] == saved.structured_content["memory"]["id"]  # type: ignore[index]
    assert len((data / "main" / "vectors.jsonl").read_text().splitlines()) == 2


def _raw_stdio_session(
    data_dir: Path, lines: list[bytes], *, version: str = "2025-06-18"
) -> list[Any]:
    """`memory-worker mcp` driven by hand: the handshake, then each raw line, each answer read
    with a deadline (a line that gets none fails the test instead of hanging it)."""
    proc = subprocess.Popen(
        cli("mcp", "--data-dir", str(data_dir)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
        bufsize=0,
    )
    assert proc.stdin is not None
    answers: list[dict[str, Any]] = []
    try:
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        proc.stdin.write(json.dumps(hello).encode() + b"\n")
        assert json.loads(read_line(proc, time.monotonic() + 60))["id"] == 0
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for line in lines:
            proc.stdin.write(line + b"\n")
            try:
                answers.append(json.loads(read_line(proc, time.monotonic() + 10)))
            except AssertionError as exc:
                raise AssertionError(f"no answer to {line!r}: {exc}") from None
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    return answers


def test_a_lone_surrogate_over_stdio_is_answered_and_the_session_goes_on(tmp_path: Path) -> None:
    """A request holding a lone surrogate escape (`"\\ud800"`, a JavaScript string cut inside an
    emoji) is answered `invalid_input` as every other door answers it (a tool error for a tool
    call, a JSON-RPC error for another request); a line that is not JSON or not a JSON-RPC
    message is answered as JSON-RPC says. The SDK could not decode any of them and answered
    nothing, so the client waited for good. The next request is served."""
    save = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "memory_save", "arguments": {"text": "The user likes \ud800 tea"}},
    }
    listing = {"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {"cursor": "\udfff"}}
    named = {"jsonrpc": "2.0", "id": "n\ud800", "method": "tools/list"}  # no UTF-8 form to echo
    answers = _raw_stdio_session(
        tmp_path / "data",
        [
            json.dumps(save).encode(),
            json.dumps(listing).encode(),
            json.dumps(named).encode(),
            b'{"jsonrpc": "2.0", "id": 9, "method": ',
            b'[{"jsonrpc": "2.0", "id": 11, "method": "tools/list"}]',  # a batch: MCP has none
            b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"memory_list"}}',
        ],
    )
    surrogate, listed, unnamed, garbage, batch, after = answers
    assert surrogate["id"] == 7 and surrogate["result"]["isError"] is True, surrogate
    text = surrogate["result"]["content"][0]["text"]
    assert text.startswith("invalid_input: ") and "lone surrogate" in text
    assert "structuredContent" not in surrogate["result"], surrogate
    assert listed["id"] == "l" and listed["error"]["code"] == -32602, listed
    assert listed["error"]["message"].startswith("invalid_input: ")
    assert unnamed["id"] is None and unnamed["error"]["code"] == -32602, unnamed
    assert garbage["id"] is None and garbage["error"]["code"] == -32700, garbage
    assert batch["id"] is None and batch["error"]["code"] == -32600, batch
    assert after["id"] == 10 and after["result"]["structuredContent"]["total"] == 0, after


async def test_a_lone_surrogate_over_http_is_the_same_invalid_input(tmp_path: Path) -> None:
    """Over streamable HTTP the SDK answered a lone surrogate escape with a bare `Parse error:
    unexpected end of hex escape` (a transport failure to the client, which the model cannot act
    on): it is the tool error `invalid_input` stdio and REST answer, and a request that is not a
    tool call a JSON-RPC `invalid_input` error."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    save = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "memory_save", "arguments": {"text": "The user likes \ud800 tea"}},
    }
    listing = {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"cursor": "\udfff"}}
    named = {"jsonrpc": "2.0", "id": "n\ud800", "method": "tools/list"}
    pair = {**save, "params": {"name": "memory_save", "arguments": {"text": "Tea \ud83d\ude00"}}}
    try:
        answers = [
            await asyncio.to_thread(
                request, url, "POST", "/mcp/blog", json.dumps(body), headers=headers
            )
            for body in (save, listing, named, pair)
        ]
    finally:
        await server.close()
    saved, listed, unnamed, emoji = answers
    assert saved.status == 200, saved.body
    result = saved.json()["result"]
    assert result["isError"] is True and result["content"][0]["text"].startswith("invalid_input: ")
    assert "lone surrogate" in result["content"][0]["text"]
    assert listed.json()["error"]["message"].startswith("invalid_input: "), listed.body
    assert listed.json()["id"] == 8 and unnamed.json()["id"] is None, unnamed.body
    assert emoji.status == 200 and emoji.json()["result"]["isError"] is False, emoji.body


def test_a_request_whose_id_is_not_one_is_answered_over_stdio(tmp_path: Path) -> None:
    """JSON-RPC 2.0 ids are strings or integers (null only in an answer): a request whose id is
    `null`, `true` or `1.5` is an Invalid Request (-32600, `id: null`). The SDK read each as a
    notification and answered nothing, so the client waited for good. A message with no id at
    all is a notification and is still not answered; the next request is served."""
    answers = _raw_stdio_session(
        tmp_path / "data",
        [
            b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
            b'{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"memory_list"}}',
            b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}\n'
            b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"memory_list"}}',
        ],
    )
    *invalid, after = answers
    for answer in invalid:
        assert answer["id"] is None and answer["error"]["code"] == -32600, answer
        assert "id" in answer["error"]["message"], answer
    assert after["id"] == 12 and after["result"]["structuredContent"]["total"] == 0, after


def test_a_batch_over_stdio_is_served_under_2025_03_26(tmp_path: Path) -> None:
    """A session that negotiated 2025-03-26, whose spec says an implementation MUST support
    receiving JSON-RPC batches: a batch line is answered with one line, the array of its requests'
    answers in their order (each answered as it would be alone); a batch of notifications only is
    answered nothing. Batches were refused whole (-32600) whatever the version."""
    save = {"name": "memory_save", "arguments": {"text": "The user keeps bees"}}
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progressToken": 1, "progress": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": save},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
        7,
    ]  # fmt: skip
    notes = [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}]
    answers = _raw_stdio_session(
        tmp_path / "data",
        [
            json.dumps(batch).encode(),
            json.dumps(notes).encode() + b"\n" + b'{"jsonrpc":"2.0","id":9,"method":"ping"}',
            b'[{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"memory_list"}}]',
            json.dumps([{"jsonrpc": "2.0", "method": "x"}] * (MAX_BATCH_MESSAGES + 1)).encode(),
        ],
        version="2025-03-26",
    )
    answered, after, listed, too_long = answers
    assert too_long["id"] is None and too_long["error"]["code"] == -32600, too_long
    assert isinstance(answered, list), answered
    ping, saved, bad_id, unknown, not_one = answered
    assert ping == {"jsonrpc": "2.0", "id": "a", "result": {}}
    assert saved["id"] == 2 and saved["result"]["isError"] is False, saved
    assert bad_id["id"] is None and bad_id["error"]["code"] == -32600, bad_id
    assert unknown["id"] == 3 and unknown["error"]["code"] == -32601, unknown
    assert not_one["id"] is None and not_one["error"]["code"] == -32600, not_one
    assert after == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert listed[0]["id"] == 10 and listed[0]["result"]["structuredContent"]["total"] == 1


async def test_a_batch_whose_request_the_client_cancels_is_answered_without_it() -> None:
    """A batch's answers go out together once each request in it is answered; a request the
    client cancels is never answered, so the batch is sent with the others' alone (it waited for
    good, and the end of stdin waited out its drain)."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    from memory_worker.adapters.mcp_server import _Answering

    into, inner = anyio.create_memory_object_stream[Any](10)
    out, written = anyio.create_memory_object_stream[Any](10)
    lines: collections.deque[str] = collections.deque()
    answering = _Answering(inner, out, lines, drain_s=5)
    hello = types.JSONRPCRequest(jsonrpc="2.0", id=0, method="initialize", params={})
    await into.send(SessionMessage(hello))
    lines.append(hello.model_dump_json() + "\n")
    assert (await answering.receive()).message.id == 0
    result = {"protocolVersion": "2025-03-26", "capabilities": {}, "serverInfo": {"name": "t"}}
    await answering.writer.send(
        SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=0, result=result))
    )
    assert (await written.receive()).message.id == 0
    await into.send(ValueError("a batch is no message"))  # as the SDK hands a batch line over
    lines.append(
        '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"2","method":"ping"}]\n'
    )
    assert [(await answering.receive()).message.id for _ in range(2)] == [1, "2"]
    await answering.writer.send(
        SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=1, result={}))
    )
    assert written.statistics().current_buffer_used == 0  # held for the batch
    cancel = {"requestId": 2, "reason": "user"}
    cancelled = types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/cancelled", params=cancel
    )
    await into.send(SessionMessage(cancelled))
    lines.append(cancelled.model_dump_json() + "\n")
    assert (await answering.receive()).message.method == "notifications/cancelled"
    line = (await written.receive()).message.model_dump_json(by_alias=True, exclude_unset=True)
    assert json.loads(line) == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    into.close()
    with anyio.fail_after(2):  # nothing is left to wait for
        with pytest.raises(anyio.EndOfStream):
            await answering.receive()
    for stream in (inner, out, written):
        stream.close()


async def _posted_to_mcp(tmp_path: Path, bodies: list[str]) -> list[Any]:
    """Each of `bodies` POSTed to a standalone server's `/mcp` in turn: their answers."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    try:
        return [
            await asyncio.to_thread(request, url, "POST", "/mcp", body, headers=headers)
            for body in bodies
        ]
    finally:
        await server.close()


async def test_a_request_whose_id_is_not_one_is_answered_over_http(tmp_path: Path) -> None:
    """The same requests over streamable HTTP are answered Invalid Request too, never a 202
    that tells the client its request was a notification."""
    bodies = [
        '{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"memory_list"}}',
        '{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
    ]
    answers = await _posted_to_mcp(tmp_path, bodies)
    for answer in answers:
        assert answer.status == 400, (answer.status, answer.body)
        assert answer.json()["id"] is None and answer.json()["error"]["code"] == -32600, answer.body


def test_requests_sent_before_stdin_closes_are_served_and_answered(tmp_path: Path) -> None:
    """A client that writes its requests and closes stdin (a script piping them in, a client
    that half-closes when it is done sending) still reads stdout: each request is served and
    answered before the process exits. The SDK cancelled every call in flight at the end of
    stdin and answered `Connection closed`, so the saves were lost."""
    data = tmp_path / "data"
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "pipe", "version": "1"},
        },
    }
    saves = [
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "memory_save", "arguments": {"text": f"The user owns cat {i}"}},
        }
        for i in range(1, 5)
    ]
    lines = [hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *saves]
    done = subprocess.run(
        cli("mcp", "--data-dir", str(data)),
        input=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
        capture_output=True,
        env=ENV,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = {a["id"]: a for a in map(json.loads, done.stdout.decode().splitlines())}
    for i in range(1, 5):
        assert answers[i].get("result", {}).get("isError") is False, answers[i]
    listed = subprocess.run(
        cli("trigger", "memory::list", "--data-dir", str(data)),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        check=False,
    )
    assert json.loads(listed.stdout)["total"] == 4, listed.stdout + listed.stderr


_V = "MCP-Protocol-Version"


async def test_a_batch_over_http_is_refused_from_2025_06_18_on(tmp_path: Path) -> None:
    """2025-06-18 took batches out of MCP: under that version (or a later one) a JSON array is
    JSON-RPC's Invalid Request (-32600, `id: null`), as is an empty array or any JSON that is not
    an object under every version. Over HTTP the SDK answered `-32602 Invalid params` with
    pydantic's report, the client's own input echoed in it."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    pings = '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]'
    sent = [
        (pings, "2025-06-18"),
        (pings, "2025-11-25"),
        ("[]", None),
        ("[]", "2025-03-26"),
        ('"ping"', None),
    ]
    try:
        answers = [
            await asyncio.to_thread(
                request,
                url,
                "POST",
                "/mcp",
                body,
                headers=headers
                if version is None
                else {**headers, "MCP-Protocol-Version": version},
            )
            for body, version in sent
        ]
    finally:
        await server.close()
    for answer in answers:
        assert answer.status == 400, (answer.status, answer.body)
        error = answer.json()["error"]
        assert answer.json()["id"] is None and error["code"] == -32600, answer.body
        assert "pydantic" not in error["message"] and "input_value" not in error["message"]


async def test_a_batch_over_http_is_served_under_2025_03_26(tmp_path: Path) -> None:
    """2025-03-26 says an implementation MUST support receiving JSON-RPC batches, and a POST body
    may be an array of requests and notifications: a client on that version (it sends the
    version header, or none at all, which the spec says to read as 2025-03-26) gets one answer
    per request, in its order, as a JSON array; a batch of notifications only is a 202 with no
    body. Each element is answered as it would be alone: a tool call, a bad id, a lone
    surrogate, a method that is none. Batches were refused whole (-32600)."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0)
    url = await server.start()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    save = {"name": "memory_save", "arguments": {"text": "The user keeps bees"}}
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": save},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "memory_list"}},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "memory_save",
         "arguments": {"text": "Tea \ud800"}}},
        {"jsonrpc": "2.0", "id": 5, "method": "no/such"},
        7,
    ]  # fmt: skip
    notes = [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
    pings = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(MAX_BATCH_MESSAGES + 1)]
    try:
        answered, untold, too_long, listed = [
            await asyncio.to_thread(request, url, "POST", path, json.dumps(body), headers=sent)
            for path, body, sent in (
                ("/mcp/blog", batch, headers),
                ("/mcp", notes, {**headers, "MCP-Protocol-Version": "2025-03-26"}),
                ("/mcp", pings, headers),
                ("/mcp/blog", [{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                "params": {"name": "memory_list"}}], headers),
            )
        ]  # fmt: skip
    finally:
        await server.close()
    assert answered.status == 200, (answered.status, answered.body)
    assert answered.headers["content-type"].startswith("application/json")
    ping, saved, before, bad_id, surrogate, unknown, not_one = answered.json()
    assert ping == {"jsonrpc": "2.0", "id": "a", "result": {}}
    assert saved["id"] == 2 and saved["result"]["isError"] is False, saved
    assert before["id"] == 3 and before["result"]["structuredContent"]["total"] == 1, before
    assert bad_id["id"] is None and bad_id["error"]["code"] == -32600, bad_id
    assert surrogate["id"] == 4 and surrogate["result"]["isError"] is True, surrogate
    assert unknown["id"] == 5 and unknown["error"]["code"] == -32601, unknown
    assert not_one["id"] is None and not_one["error"]["code"] == -32600, not_one
    assert (untold.status, untold.body) == (202, b"")
    assert too_long.status == 400 and too_long.json()["error"]["code"] == -32600, too_long.body
    assert f"at most {MAX_BATCH_MESSAGES}" in too_long.json()["error"]["message"]
    assert listed.status == 200 and listed.json()[0]["result"]["structuredContent"]["total"] == 1


async def test_an_object_that_is_not_json_rpc_over_http_is_an_invalid_request_as_over_stdio(
    tmp_path: Path,
) -> None:
    """An object that is no JSON-RPC message (no `jsonrpc`, another version, neither a method nor
    a result, params that are not an object) is Invalid Request (-32600, `id: null`) over HTTP as
    over stdio. The SDK answered `-32602` with pydantic's report of it, the client's own input
    echoed back."""
    bodies = [
        '{"id":8,"method":"ping"}',
        '{"jsonrpc":"1.0","id":9,"method":"ping"}',
        '{"jsonrpc":"2.0","id":10}',
        '{"jsonrpc":"2.0","id":11,"method":"ping","params":5}',
    ]
    ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    *answers, good = await _posted_to_mcp(tmp_path, [*bodies, ping])
    for answer in answers:
        assert answer.status == 400, (answer.status, answer.body)
        assert answer.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Invalid request: not a JSON-RPC message"},
        }, answer.body
        assert answer.headers["content-length"] == str(len(answer.body))
    assert good.status == 200 and good.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
