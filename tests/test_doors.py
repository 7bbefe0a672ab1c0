"""One writer, many doors (adapters.doors): a client of a data dir that a server holds forwards
its calls there and gets what a direct call answers; who is calling travels with the call, and
is believed only as far as it narrows what the call may do; import, export and compaction go
through the same door."""

from __future__ import annotations

import asyncio
import errno
import json
import math
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from memory_worker.adapters import cli, standalone
from memory_worker.adapters.doors import (
    LocalDoor,
    RemoteDoor,
    decode_caller,
    encode_caller,
    open_door,
    serving_url,
)
from memory_worker.adapters.standalone import REST_CALLER, StandaloneServer
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.app.service import MemoryService
from memory_worker.core.bank_settings import BankOverrides, BankSettings, parse_overrides
from memory_worker.core.config import Settings, load_settings
from memory_worker.core.errors import BankNotFound, Conflict, InvalidInput, WorkerError
from memory_worker.storage.bank_file import BANK_FILE, read_bank_file
from memory_worker.storage.files import DataDirLock
from memory_worker.storage.snapshot import RECORDS_FILE, SNAPSHOT_FILE, SNAPSHOT_MIN_LIVE
from memory_worker.storage.store import Store

from .other_accounts import (
    OTHER_UID,
    as_root_on_linux,
    listening_as_another_account,
    skip_unless_accounts_are_told,
)
from .rawhttp import split_url
from .served import ENV, START_TIMEOUT_S, serving

_TIMES = ("created_at", "updated_at", "stated_at", "invalid_at", "last_accessed_at")


@pytest.fixture(name="server")
async def _server(tmp_path: Path) -> AsyncIterator[StandaloneServer]:
    server = StandaloneServer(Settings(), tmp_path / "served", port=0)
    await server.start()
    # Its banks boot in the background and log when done: done before a test reads its stdout.
    if server.booting is not None:
        await server.booting
    try:
        yield server
    finally:
        await server.close()


def _timeless(value: Any) -> Any:
    """A result with its clock readings and scores left out (two data dirs, two clocks)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in (*_TIMES, "score")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("memory::save", {"text": "The user keeps bees on the roof", "tags": ["home"]}),
    ("memory::save", {"text": "The deploy runs on Fridays", "pinned": True}),
    ("memory::save", {"text": "The user keeps bees on the roof"}),  # reinforces
    ("memory::recall", {"query": "bees"}),
    ("memory::list", {}),
    ("memory::tags", {}),
    ("memory::get", {"id": "fp45e4f3a8a3f9f1a7"}),  # memory_not_found
    ("memory::save", {"text": ""}),  # invalid_input
    ("memory::bank::create", {"name": "Not A Name"}),  # invalid_input
    ("memory::rule::set", {"name": "style", "content": "# Style\nShort answers."}),
    ("memory::preview", {"query": "what about bees"}),
    ("memory::bank::list", {}),
]


async def _outcome(door: Any, function_id: str, payload: Any) -> Any:
    try:
        return {"result": await door.call(function_id, payload)}
    except WorkerError as err:
        return {"error": err.to_dict()}


async def _run(door: Any) -> list[Any]:
    return [await _outcome(door, function_id, payload) for function_id, payload in CALLS]


class TestForwarding:
    async def test_a_held_data_dir_forwards_and_answers_as_a_direct_call(
        self, server: StandaloneServer, tmp_path: Path
    ) -> None:
        """The same calls on a served data dir (forwarded) and on a free one (in-process):
        identical results and identical coded errors."""
        assert serving_url(server.data_dir) == server.url
        settings = Settings()
        async with open_door(
            server.data_dir, lambda: settings, Caller.human("cli"), command="test", lock_wait_s=0
        ) as door:
            assert isinstance(door, RemoteDoor) and door.remote == server.url
            forwarded = await _run(door)
        async with open_door(
            tmp_path / "free", lambda: settings, Caller.human("cli"), command="test", lock_wait_s=0
        ) as door:
            assert isinstance(door, LocalDoor) and door.remote is None
            direct = await _run(door)
        assert _timeless(forwarded) == _timeless(direct)
        codes = [item["error"]["code"] for item in forwarded if "error" in item]
        assert codes == ["memory_not_found", "invalid_input", "invalid_input"]

    async def test_what_utf8_or_json_cannot_carry_answers_as_a_direct_call(
        self, server: StandaloneServer, tmp_path: Path
    ) -> None:
        """A lone surrogate (a caller's `"\\ud800"`) has no UTF-8 form, and infinity (what
        `1e400` decodes to) no JSON one: forwarded, the first was `payload is not JSON` from the
        server and the second was sent as `Infinity`, which the server refused."""
        calls: list[tuple[str, dict[str, Any]]] = [
            ("memory::get", {"id": "fp\ud800"}),
            ("memory::save", {"text": "The user likes caf\u00e9 \ud800 and tea"}),
            ("memory::save", {"text": "The user likes tea", "weight": math.inf}),
            ("memory::recall", {"query": "tea", "weight": -math.inf}),
            ("memory::list", {}),
        ]
        settings = Settings()
        answers = []
        for data_dir in (server.data_dir, tmp_path / "free"):
            async with open_door(
                data_dir, lambda: settings, Caller.human("cli"), command="test", lock_wait_s=0
            ) as door:
                assert door.remote == (server.url if data_dir == server.data_dir else None)
                answers.append([await _outcome(door, fid, payload) for fid, payload in calls])
        forwarded, direct = answers
        assert _timeless(forwarded) == _timeless(direct)
        codes = [item["error"]["code"] for item in direct if "error" in item]
        assert codes == ["memory_not_found", "invalid_input", "invalid_input", "invalid_input"]

    async def test_an_unknown_function_fails_before_any_request(
        self, server: StandaloneServer
    ) -> None:
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            with pytest.raises(InvalidInput, match="unknown function"):
                await door.call("memory::nope", {})

    async def test_the_callers_claim_travels_and_an_agent_is_believed(
        self, server: StandaloneServer
    ) -> None:
        """A forwarded agent call saves with the agent's session and name as provenance; an
        internal claim from a request without the server's token is a person at REST."""
        agent = Caller.for_agent("mcp", session_id="sess-9", agent="claude-code")
        async with RemoteDoor(server.url, agent) as door:
            saved = await door.call("memory::save", {"text": "The user prefers tabs"})
        assert saved["memory"]["source"] == {"session_id": "sess-9", "agent": "claude-code"}
        internal = Caller.internal("hook", session_id="sess-hook")
        async with RemoteDoor(server.url, internal) as door:
            saved = await door.call("memory::save", {"text": "The user prefers spaces"})
        assert "source" not in saved["memory"]  # not believed: no session, no agent

    def test_an_automatic_paths_claim_is_believed_without_the_token_bare(self) -> None:
        """Consolidate's or extraction's claim only turns guards on, so it is believed from
        anyone — without the session or agent it names (provenance on the caller's word), and
        never in place of an agent, whose bank access level it would skip."""
        for via in ("consolidate", "extraction"):
            claim = encode_caller(Caller.internal(via, session_id="s", agent="a"))
            assert decode_caller(claim, trusted=False, default=REST_CALLER) == Caller.internal(via)
        agent_door = Caller.for_agent("mcp")
        claim = encode_caller(Caller.internal("consolidate"))
        assert decode_caller(claim, trusted=False, default=agent_door) is agent_door

    async def test_consolidate_over_rest_without_a_token_never_merges_two_subjects(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memory_worker.adapters.consolidate.clients import HttpClient
        from memory_worker.app import catalog
        from memory_worker.core.errors import Conflict

        monkeypatch.delenv("MEMORY_TOKEN", raising=False)
        assert server.service is not None
        alice, bob = [
            (await catalog.call(server.service, "memory::save", {"text": text, "subject": who}))
            for text, who in (("Alice likes tea", "alice"), ("Bob likes tea", "bob"))
        ]
        payload = {"id": alice["memory"]["id"], "superseded_by": bob["memory"]["id"]}
        client = HttpClient(server.url)
        try:
            with pytest.raises(Conflict, match="different subjects; consolidate never merges"):
                await client.call("memory::supersede", payload)
        finally:
            await client.close()
        got = await catalog.call(server.service, "memory::get", {"id": alice["memory"]["id"]})
        assert "invalid_at" not in got["memory"]

    def test_the_caller_header_rules(self) -> None:
        agent = Caller.for_agent("mcp", session_id="s", agent="a")
        for trusted in (False, True):
            decoded = decode_caller(encode_caller(agent), trusted=trusted, default=REST_CALLER)
            assert decoded == agent
        human = Caller.human("cli")
        internal = Caller.internal("hook", session_id="s")
        assert decode_caller(encode_caller(human), trusted=False, default=REST_CALLER) is (
            REST_CALLER
        )
        assert decode_caller(encode_caller(human), trusted=True, default=REST_CALLER) == human
        assert decode_caller(encode_caller(internal), trusted=False, default=REST_CALLER) is (
            REST_CALLER
        )
        trusted = decode_caller(encode_caller(internal), trusted=True, default=REST_CALLER)
        assert trusted.kind is CallerKind.INTERNAL and trusted.session_id == "s"
        assert decode_caller(None, trusted=True, default=REST_CALLER) is REST_CALLER
        for bad in ("nope", "[]", '{"kind": "god"}', '{"kind": "agent", "via": 3}', "x" * 3000):
            with pytest.raises(InvalidInput):
                decode_caller(bad, trusted=True, default=REST_CALLER)

    @pytest.mark.parametrize(
        "header", ["[" * 1024 + "]" * 1024, '{"kind": ' + "[" * 990 + "]" * 990 + "}"]
    )
    def test_a_caller_header_nested_too_deep_is_invalid_input(self, header: str) -> None:
        """Within the header's 2048 bytes, nesting deep enough for the JSON decoder's recursion
        limit was a `RecursionError`: a 500 `internal` (and a traceback) for any client."""
        with pytest.raises(InvalidInput, match="Memory-Caller header is nested"):
            decode_caller(header, trusted=False, default=REST_CALLER)


class TestMovingRecords:
    async def _history(self, door: Any, bank: str) -> list[dict[str, Any]]:
        exported = await door.call("memory::export", {"bank": bank})
        return [{k: v for k, v in record.items() if k != "bank"} for record in exported["records"]]

    async def test_export_then_import_replays_to_the_same_bank_history_included(
        self, server: StandaloneServer
    ) -> None:
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            first = await door.call("memory::save", {"bank": "src", "text": "The user runs"})
            memory_id = first["memory"]["id"]
            await door.call("memory::pin", {"bank": "src", "id": memory_id, "pinned": True})
            await door.call("memory::save", {"bank": "src", "text": "Gone soon"})
            gone = (await door.call("memory::list", {"bank": "src"}))["memories"][0]["id"]
            await door.call("memory::delete", {"bank": "src", "id": gone})
            records = await self._history(door, "src")
            assert len(records) == 4  # two saves, a pin, a tombstone: every revision
            imported = await door.call("memory::import", {"bank": "dst", "records": records})
            assert (imported["imported"], imported["live"]) == (4, 1)
            assert await self._history(door, "dst") == records
            for bank in ("src", "dst"):
                history = await door.call("memory::history", {"bank": bank, "id": memory_id})
                assert [r["revision"] for r in history["revisions"]] == [0, 1]
            listed = [
                await door.call("memory::list", {"bank": bank, "include_superseded": True})
                for bank in ("src", "dst")
            ]
            assert listed[0]["memories"] == listed[1]["memories"]

    async def test_a_forwarded_import_in_many_requests_writes_nothing_when_one_row_is_bad(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(cli, "FORWARD_CHUNK_BYTES", 200)
        rows = [{"text": f"Imported fact number {i} about the garden"} for i in range(12)]
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            assert len(cli._chunks(rows, cli.FORWARD_CHUNK_BYTES)) > 3
            with pytest.raises(InvalidInput, match="record"):
                await cli.import_rows(door, "garden", [*rows, {"text": 5, "pinned": "maybe"}])
            with pytest.raises(BankNotFound):  # nothing was written: not even the bank
                await door.call("memory::list", {"bank": "garden"})
            report = await cli.import_rows(door, "garden", rows)
            assert (report["imported"], report["live"]) == (12, 12)
            assert (await door.call("memory::list", {"bank": "garden"}))["total"] == 12

    async def test_a_forwarded_import_in_many_requests_makes_the_bank_with_its_settings(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An export's bank line travels with the first request: the bank is made with its
        settings before its records land, and its rules are written once."""
        monkeypatch.setattr(cli, "FORWARD_CHUNK_BYTES", 200)
        rows = [{"text": f"Imported fact number {i} about the garden"} for i in range(12)]
        carried = {
            "description": "The garden",
            "settings": {"subject_scoping": True},
            "rules": [{"name": "style", "content": "Short answers.", "revision": "ab"}],
        }
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            assert len(cli._chunks(rows, cli.FORWARD_CHUNK_BYTES)) > 3
            report = await cli.import_rows(door, "garden", rows, carried)
            assert report["imported"] == 12 and report["rules_written"] == ["style"]
            info = (await door.call("memory::bank::get", {"name": "garden"}))["bank"]
            assert info["description"] == "The garden" and info["settings"]["subject_scoping"]
            rules = (await door.call("memory::rule::list", {"bank": "garden"}))["rules"]
            assert [(r["name"], r["content"]) for r in rules] == [("style", "Short answers.")]

    async def test_a_forwarded_import_sends_rules_past_one_requests_size_apart(
        self, server: StandaloneServer
    ) -> None:
        """An export's rules travelled in the first request with its records: a bank whose rules
        add up to more than a server takes in one body (1 MiB; a rule may hold 65,536
        characters) could not be imported while a server ran. They go in requests of their
        own, validated with the records before anything is written."""
        rows = [{"text": f"Imported fact number {i} about the garden"} for i in range(3)]
        rules = [
            {"name": f"rule-{n}", "content": f"Rule {n}. " + "Water the plants early. " * 2700}
            for n in range(20)
        ]
        carried = {"description": "The garden", "settings": {"subject_scoping": True}}
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            bad = [*rules, {"name": "bad", "content": ""}]
            with pytest.raises(InvalidInput, match=r"rules\[21\]: content is empty"):
                await cli.import_rows(door, "garden", rows, {**carried, "rules": bad})
            with pytest.raises(BankNotFound):  # nothing was written: not even the bank
                await door.call("memory::list", {"bank": "garden"})
            report = await cli.import_rows(door, "garden", rows, {**carried, "rules": rules})
            assert report["imported"] == 3
            assert report["rules_written"] == [rule["name"] for rule in rules]
            info = (await door.call("memory::bank::get", {"name": "garden"}))["bank"]
            assert info["description"] == "The garden" and info["settings"]["subject_scoping"]
            held = (await door.call("memory::rule::list", {"bank": "garden"}))["rules"]
            assert {(r["name"], r["content"]) for r in held} == {
                (r["name"], r["content"]) for r in rules
            }

    async def test_a_forwarded_import_in_many_requests_names_the_bad_record_as_a_direct_one(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """README: a command prints what a direct call prints while a server runs. The refusal
        of a bad record named its place in the request that carried it (`record 1`), not in the
        file (`record 13`, what the same import prints with no server running), so nobody could
        find the line. A memory's revisions travel together, so requests reorder the rows too."""
        monkeypatch.setattr(cli, "FORWARD_CHUNK_BYTES", 200)
        rows = [{"text": f"Imported fact number {i} about the garden"} for i in range(12)]
        rows.insert(3, {"id": "fpm1", "text": "A memory with two revisions", "revision": 0})
        bad = [*rows, {"id": "fpm1", "text": "x", "revision": 1}]
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            assert len(cli._chunks(bad, cli.FORWARD_CHUNK_BYTES)) > 3
            with pytest.raises(InvalidInput) as forwarded:
                await cli.import_rows(door, "garden", bad)
        assert server.service is not None
        with pytest.raises(InvalidInput) as direct:
            await server.service.import_records("direct", bad)
        assert forwarded.value.message == direct.value.message
        assert forwarded.value.message.startswith("record 14: ")

    async def test_a_forwarded_import_in_many_requests_reports_what_one_request_would(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A memory's revisions travel in one request, so the count of live memories is the
        # bank's, not a sum over requests that each saw part of a memory's history.
        monkeypatch.setattr(cli, "FORWARD_CHUNK_BYTES", 200)
        rows = []
        for i in range(6):
            rows.append({"id": f"fpm{i}", "text": f"Imported fact number {i}", "revision": 0})
            rows.append({"id": f"fpm{i}", "text": f"Imported fact number {i}!", "revision": 1})
        rows.append(
            {"id": "fpm0", "text": "Imported fact number 0", "revision": 2, "invalid_at": 9}
        )
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            report = await cli.import_rows(door, "many", rows)
            assert (report["imported"], report["live"]) == (13, 5)
            assert (await door.call("memory::list", {"bank": "many"}))["total"] == 5

    async def test_a_forwarded_import_refused_for_a_pinned_memory_writes_no_request(
        self, server: StandaloneServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(cli, "FORWARD_CHUNK_BYTES", 200)
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            pinned = await door.call("memory::save", {"bank": "p", "text": "Kept", "pinned": True})
            rows = [{"text": f"Imported fact number {i} about the garden"} for i in range(12)]
            unpin = {**pinned["memory"], "pinned": False, "revision": 1}
            with pytest.raises(Conflict, match="pinned"):
                await cli.import_rows(door, "p", [*rows, unpin])
            assert (await door.call("memory::list", {"bank": "p"}))["total"] == 1

    async def test_compact_is_forwarded(self, server: StandaloneServer) -> None:
        async with RemoteDoor(server.url, Caller.human("cli")) as door:
            saved = await door.call("memory::save", {"bank": "c", "text": "Compact me"})
            await door.call(
                "memory::update", {"bank": "c", "id": saved["memory"]["id"], "tags": "t"}
            )
            result = await door.call("memory::compact", {"bank": "c", "horizon_days": 0})
            assert (result["lines_before"], result["lines_after"]) == (2, 1)


async def test_capture_while_a_server_holds_the_data_dir_leaves_the_queue_to_it(
    server: StandaloneServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server runs the capture queue with its own settings: `memory-worker capture` says
    so. It used to fail first for want of an extraction endpoint in the CLI's settings, which
    a server started with its own `--config` does not share."""
    argv = ["capture", "--data-dir", str(tmp_path / "served")]
    code = await asyncio.to_thread(cli.main, argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # The in-process server's own log lines (its background boot) may land in the same stdout.
    printed = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert [answer["forwarded"] for answer in printed] == [server.url]


def test_cli_export_and_import_round_trip_through_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    for text in ("The user likes plums", "The user likes figs"):
        assert cli.main(["trigger", "memory::save", f"text={text}", "--data-dir", data]) == 0
    out = tmp_path / "main.jsonl"
    assert cli.main(["export", "--bank", "main", "-o", str(out), "--data-dir", data]) == 0
    capsys.readouterr()
    assert cli.main(["import", str(out), "--bank", "copy", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 2
    assert cli.main(["export", "--bank", "copy", "--data-dir", data]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        json.loads(line) for line in out.read_text().splitlines()
    ]


async def test_a_data_dir_change_moves_capture_to_the_new_data_dirs_queue(tmp_path: Path) -> None:
    """Capture's queue belongs to its data dir: after a `data_dir` edit of the settings file, a
    Stop hook's turn lands in the new data dir's queue."""
    config = tmp_path / "memory.yaml"
    config.write_text(f"data_dir: {tmp_path / 'old'}\n")
    server = StandaloneServer(Settings(), tmp_path / "old", port=0, config_path=config)
    await server.start()
    try:
        assert server._apply_settings is not None
        # An endpoint (never answering): with none, capture is off and no turn is queued.
        moved = Settings(
            data_dir=str(tmp_path / "new"), extraction_endpoint="http://127.0.0.1:9/v1"
        )
        await server._apply_settings(moved)
        turn = {"entry_id": "e1", "role": "user", "text": "I water the plants on Sundays"}
        async with RemoteDoor(server.url or "", Caller.internal("hook")) as door:
            queued = await door.capture({"session_id": "s1", "entries": [turn]})
        assert queued == {"queued": "s1:e1", "new": True}
        assert (tmp_path / "new" / ".capture.jsonl").exists()
        assert not (tmp_path / "old" / ".capture.jsonl").exists()
    finally:
        await server.close()


# What a forwarded one-shot process may not import: a coding agent's hook runs one per prompt,
# and these are most of a second of CPU before the call leaves (bench/oneshot.py).
_HEAVY = (
    "numpy",
    "pydantic",
    "memory_worker.app.catalog",
    "memory_worker.app.wire",
    "memory_worker.app.service",
    "memory_worker.storage.store",
    "memory_worker.core.models",
    "Stemmer",  # the tokenizer's stemmers (`core.text`)
    "memory_worker.adapters.embedders",
)
_NOT_A_PROMPT_HOOKS = ("memory_worker.adapters.formats", "memory_worker.storage.capture")
_FORWARDED_PROBE = """
import json, sys
from memory_worker.adapters import cli
code = cli.main(sys.argv[2:])
print(json.dumps([code, [m for m in sys.argv[1].split(",") if m in sys.modules]]), file=sys.stderr)
"""


def test_a_forwarded_call_imports_neither_the_catalog_nor_the_store(tmp_path: Path) -> None:
    """The CLI and the prompt hook, forwarded to the server holding the data dir, answer without
    loading the catalog's models, the service, the store, numpy or pydantic (the server does
    that work, and builds the settings it serves with); the same command on a data dir nobody
    holds does load them, so the probe can tell."""
    data = tmp_path / "data"
    prompt = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "tea?"}
    commands = {
        "trigger": (["trigger", "memory::bank::list", "--data-dir", str(data)], ""),
        "hook": (["hook", "user-prompt-submit", "--data-dir", str(data)], json.dumps(prompt)),
    }

    def probe(argv: list[str], stdin: str, watched: tuple[str, ...] = _HEAVY) -> list[Any]:
        done = subprocess.run(
            [sys.executable, "-c", _FORWARDED_PROBE, ",".join(watched), *argv],
            input=stdin,
            capture_output=True,
            text=True,
            env=ENV,
            timeout=START_TIMEOUT_S,
            check=True,
        )
        return list(json.loads(done.stderr.strip().splitlines()[-1]))

    # In-process it loads them all (the embedders aside: the tests' MEMORY_EMBEDDER is none).
    assert probe(*commands["trigger"]) == [0, list(_HEAVY[:-1])]
    with serving(data, tmp_path / "serve.stderr"):
        for argv, stdin in commands.values():
            assert probe(argv, stdin) == [0, []], argv
        # Nor what only other commands read: the other systems' export readers (`import`), the
        # capture queue (the Stop hook, and a server).
        assert probe(*commands["hook"], watched=_NOT_A_PROMPT_HOOKS) == [0, []]


_LOCAL_PROBE = """
import json, sys
from memory_worker.adapters import cli
code = cli.main(sys.argv[1:])
from memory_worker.app import wire
built = sorted(
    name for name, model in vars(wire).items()
    if isinstance(model, type) and issubclass(model, wire.BaseModel)
    and model.__module__ == wire.__name__ and model.__pydantic_complete__
)
seams = "memory_worker.app.seams" in sys.modules
print(json.dumps([code, "http.client" in sys.modules, built, seams]), file=sys.stderr)
"""


def test_a_local_one_shot_save_loads_no_http_client_and_builds_only_its_own_models(
    tmp_path: Path,
) -> None:
    """A `trigger memory::save` the process answers itself (nobody holds the data dir) never
    imports the HTTP client (only a forwarded call posts) nor the internal seams' models (the
    bus's and the harness's), and of the catalog's request and response models only those the
    save validates and answers with are built (pydantic's `defer_build`): building all of them
    at import was tens of milliseconds of every one-shot."""
    found, answer = _probed_save(_LOCAL_PROBE, tmp_path / "data", "tea at five")
    code, http_loaded, built, seams_loaded = found
    assert (code, http_loaded, seams_loaded) == (0, False, False)
    assert answer["memory"]["text"] == "tea at five"
    assert "SaveRequest" in built and "RecallRequest" not in built and "ImportRequest" not in built


def _imported_by_a_save(data: Path, text: str, env: dict[str, str] = ENV) -> tuple[set[str], Any]:
    """The modules a `memory-worker trigger memory::save` process (the program itself, as a
    person runs it) imports (`python -X importtime`), and its answer."""
    argv = ["trigger", "memory::save", "--data-dir", str(data), f"text={text}"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memory_worker", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=START_TIMEOUT_S,
        check=True,
    )
    lines = done.stderr.splitlines()
    found = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    return found, json.loads(done.stdout)


async def _seeded(data: Path, count: int) -> None:
    """A bank `main` of `count` memories, closed as a server closes it (its snapshots left)."""
    store = Store.open(data, holder={"pid": os.getpid(), "kind": "cli"})
    service = MemoryService(store, Settings())
    rows = [{"text": f"The user note {i}: tea garden kiln {i * 7 % 13}"} for i in range(count)]
    await service.import_records("main", rows)
    await service.close()
    await store.close()


def test_a_local_one_shot_save_imports_neither_the_search_package_nor_the_capture_queue(
    tmp_path: Path,
) -> None:
    """A one-shot save into a bank a records snapshot covers decides from the records alone
    (`storage.bank._Deferred`): it never builds the lexical index, so it no longer imports the
    search package either (~14 ms of CPU: the index, ranking, lanes, scoring and lessons
    modules; only the recall modes the wire contract names). Nor the capture queue, which only
    an erasure to finish (or doctor) reads."""
    data = tmp_path / "data"
    asyncio.run(_seeded(data, SNAPSHOT_MIN_LIVE))
    assert (data / "main" / RECORDS_FILE).is_file() and (data / "main" / SNAPSHOT_FILE).is_file()
    imported, answer = _imported_by_a_save(data, "tea at five")
    assert answer["created"] is True and answer["memory"]["text"] == "tea at five"
    assert "memory_worker.app.service" in imported  # what the probe sees is the local save's
    search = sorted(m for m in imported if m.startswith("memory_worker.search."))
    assert search == ["memory_worker.search.modes"]
    assert "memory_worker.storage.capture" not in imported  # (an erasure's: none to finish)


_COMPILES_PROBE = """
import json, re, sys
compile_ = re.compile
compiled = []


def counted(pattern, flags=0):
    compiled.append(sys._getframe(1).f_globals.get("__name__"))
    return compile_(pattern, flags)


re.compile = counted
from memory_worker.adapters import cli
code = cli.main(sys.argv[1:])
print(json.dumps([code, compiled.count("memory_worker.core.temporal")]), file=sys.stderr)
"""


def test_a_local_one_shot_save_compiles_only_the_date_pattern_it_reads(tmp_path: Path) -> None:
    """Of the patterns that read time in a question (`core.temporal`: ~15 ms to compile, `re`
    parses in Python), a local save compiles only the one telling whether its text states a
    time, at its first use; compiled at import, every one-shot process paid for all of them.
    (A text that states one also reads where its words point: `told_span`'s own patterns.)"""
    found, answer = _probed_save(_COMPILES_PROBE, tmp_path / "data", "tea with Ana")
    assert found == [0, 1]
    assert answer["memory"]["text"] == "tea with Ana"


_SETTINGS_PROBE = """
import json, sys
from memory_worker.adapters import cli
code = cli.main(sys.argv[1:])
from memory_worker.app import seams
from memory_worker.core import bank_settings, config, models
models_ = [config.Settings, bank_settings.BankOverrides, bank_settings.BankSettings,
           bank_settings.AssociationWeights, models.Rule, models.BankInfo, seams.HookEnvelope]
built = [m.__name__ for m in models_ if m.__pydantic_complete__]
print(json.dumps([code, built, "yaml" in sys.modules, "structlog" in sys.modules]), file=sys.stderr)
"""


def test_a_local_save_into_a_plain_bank_builds_no_settings_model_nor_loads_yaml_or_structlog(
    tmp_path: Path,
) -> None:
    """With no configuration file and a `bank.yaml` that chose no setting there is nothing to
    validate: the settings are the models' defaults, made without building the models (each
    build is milliseconds of every one-shot process), and equal to validated ones."""
    data = tmp_path / "data"
    first = ["trigger", "memory::save", "--data-dir", str(data), "text=tea at five"]
    subprocess.run([sys.executable, "-m", "memory_worker", *first], env=ENV, check=True,
                   capture_output=True, timeout=START_TIMEOUT_S)  # fmt: skip
    found, answer = _probed_save(_SETTINGS_PROBE, data, "coffee at six")
    code, built, yaml_loaded, structlog_loaded = found
    assert (code, built) == (0, [])
    assert not yaml_loaded  # nor the YAML parser (a plain bank.yaml)
    assert not structlog_loaded  # nor structlog: nothing was logged at the CLI's level
    assert answer["memory"]["text"] == "coffee at six"
    defaults = load_settings(None)
    assert defaults == Settings() == Settings.model_validate({})
    validated = Settings.model_validate({"scope": "private"}).bank_defaults()  # chosen: validated
    assert (
        defaults.bank_defaults() == validated == BankSettings.model_validate(validated.model_dump())
    )
    assert parse_overrides({}, source="test") == BankOverrides()
    assert read_bank_file(data / "main" / BANK_FILE).overrides == BankOverrides()


def test_a_one_shot_process_writes_its_logs_at_its_level_as_json_lines(tmp_path: Path) -> None:
    """structlog is loaded on the first record at the chosen level (`storage.logger`), and
    configured then as `configure_logging` chose: JSON lines on stderr, level and timestamp."""
    argv = ["trigger", "memory::save", "--data-dir", str(tmp_path / "data"), "text=tea at five"]
    done = subprocess.run(
        [sys.executable, "-m", "memory_worker", *argv, "--log-level", "info"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=START_TIMEOUT_S,
        check=True,
    )
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    opened = [r for r in records if r["event"] == "store_opened"]
    assert opened and opened[0]["level"] == "info" and opened[0]["timestamp"].endswith("Z")
    quiet = subprocess.run(
        [sys.executable, "-m", "memory_worker", *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=START_TIMEOUT_S,
        check=True,
    )
    assert "store_opened" not in quiet.stderr  # below the default level (warning)


class _CloggedStream:
    """A non-blocking stderr whose pipe is full: a write takes what fits, half a line here, and
    raises `BlockingIOError` (EAGAIN) for the rest, as a buffered writer does."""

    def __init__(self) -> None:
        self.written = ""
        self.clogged = False

    def write(self, text: str) -> int:
        if self.clogged:
            taken = len(text) // 2
            self.written += text[:taken]
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable", taken)
        self.written += text
        return len(text)

    def flush(self) -> None:
        if self.clogged:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable", 0)


def test_a_log_line_cut_by_a_full_non_blocking_stderr_leaves_the_next_one_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line the full pipe took only part of was dropped with its end: the next line was
    written straight after the cut one, on its line, and a JSON-lines reader lost both. The
    cut line stays alone on its line; the next record reads whole."""
    from memory_worker.adapters.logs import configure_logging
    from memory_worker.storage.logger import get_logger

    stream = _CloggedStream()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("info")
    log = get_logger("test")
    log.info("before", n=1)
    stream.clogged = True
    log.info("cut", pad="x" * 40)
    stream.clogged = False
    log.info("after", n=2)
    lines = stream.written.split("\n")
    assert json.loads(lines[0])["event"] == "before"
    assert lines[1].startswith('{"pad": "xxx') and not lines[1].endswith("}")  # the cut line
    assert json.loads(lines[2])["event"] == "after"
    assert lines[3:] == [""]


_BLAS_PROBE = """
import json, os, sys
from memory_worker.adapters import cli
code = cli.main(sys.argv[1:])
print(json.dumps([code, os.environ.get("OPENBLAS_NUM_THREADS")]), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_a_local_one_shot_process_loads_numpy_with_one_blas_thread_unless_told(
    tmp_path: Path, given: str | None, expected: str
) -> None:
    """OpenBLAS starts (and spins) a thread per core when numpy loads: ~60 ms of CPU of a
    process that multiplies one query vector at most. A one-shot command asks for one before
    the door loads numpy; a value in the environment is kept."""
    assert _local_save_probe(_BLAS_PROBE, tmp_path, "OPENBLAS_NUM_THREADS", given) == [0, expected]


def _local_save_probe(
    probe: str, tmp_path: Path, variable: str | None = None, given: str | None = None
) -> Any:
    """What `probe` (a script running `cli.main` on its argv) prints last on stderr, as JSON,
    after a local one-shot save with `variable` set to `given` in its environment (None:
    unset)."""
    env = {k: v for k, v in ENV.items() if k != variable}
    if given is not None:
        env[variable] = given
    return _probed_save(probe, tmp_path / "data", "tea at five", env)[0]


def _probed_save(
    probe: str, data: Path, text: str, env: dict[str, str] = ENV
) -> tuple[Any, dict[str, Any]]:
    """`probe` (a script running `cli.main` on its argv) run as a local one-shot save of `text`
    into `data`: what it prints last on stderr, as JSON, and the save's answer."""
    argv = ["trigger", "memory::save", "--data-dir", str(data), f"text={text}"]
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=START_TIMEOUT_S,
        check=True,
    )
    return json.loads(done.stderr.strip().splitlines()[-1]), json.loads(done.stdout)


_PLUGIN_PROBE = """
import json, os, sys
from pydantic.plugin import _loader
from memory_worker.adapters import cli
code = cli.main(sys.argv[1:])
scanned = _loader._plugins is not None
print(json.dumps([code, os.environ.get("PYDANTIC_DISABLE_PLUGINS"), scanned]), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "__all__"), ("other", "other")])
def test_a_local_one_shot_process_skips_pydantics_plugin_scan_unless_told(
    tmp_path: Path, given: str | None, expected: str
) -> None:
    """pydantic reads every installed distribution's entry points for plugins when it builds its
    first model: ~20 ms of a one-shot process, for plugins this package never uses. A one-shot
    command turns the scan off before the door builds a model; a value in the environment (a
    list of plugin names to leave out) is kept, and then the scan runs."""
    found = _local_save_probe(_PLUGIN_PROBE, tmp_path, "PYDANTIC_DISABLE_PLUGINS", given)
    assert found == [0, expected, given is not None]


_COLLECTOR_PROBE = """
import gc, json, sys
from memory_worker.adapters import cli
passes = [0, 0, 0]
gc.callbacks.append(lambda phase, info: phase == "start" and passes.__setitem__(
    info["generation"], passes[info["generation"]] + 1))
code = cli.main(sys.argv[1:])
print(json.dumps([code, passes, gc.isenabled()]), file=sys.stderr)
"""


def test_a_local_one_shot_process_imports_the_service_with_the_collector_paused(
    tmp_path: Path,
) -> None:
    """The service, the store and the catalog a local one-shot call imports are hundreds of
    modules and classes, none of them garbage: with the collector on, its passes over them as
    they piled up (about 80 young and 8 older ones) were ~15-20 ms of every such process. It is
    paused while they load (and what they made frozen), and on again after."""
    code, passes, enabled = _local_save_probe(_COLLECTOR_PROBE, tmp_path)
    assert (code, enabled) == (0, True)
    # The call's own few passes are left: 3-6 young ones on a quiet machine, up to ~11 young and
    # 2 older under load (its waits allocate more); with the imports, ~80 young and ~8 older.
    assert passes[0] < 40 and passes[1] + passes[2] <= 4


_EXIT_PROBE = """
import atexit, os, sys
class Witness:
    def __del__(self):
        os.write(2, b"torn down\\n")
witness = Witness()
atexit.register(lambda: os.write(2, b"exit handler ran\\n"))
from memory_worker.adapters import cli
sys.argv = ["memory-worker", *sys.argv[1:]]
sys.exit(cli.main())
"""


def test_a_one_shot_program_ends_at_once_after_its_exit_handlers_and_answer(
    tmp_path: Path,
) -> None:
    """The program (no argv given) ends a finished one-shot command with `os._exit`: no
    interpreter teardown (50-90 ms of CPU after a 10k-memory bank), the same answer, exit
    status and exit handlers. A caller passing argv gets the code back instead."""
    data = str(tmp_path / "data")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _EXIT_PROBE, *argv],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=START_TIMEOUT_S,
        )

    saved = run("trigger", "memory::save", "--data-dir", data, "text=tea at five")
    assert saved.returncode == 0
    assert json.loads(saved.stdout)["memory"]["text"] == "tea at five"
    assert "exit handler ran" in saved.stderr and "torn down" not in saved.stderr
    missing = run("trigger", "memory::get", "--data-dir", data, "id=nope")
    assert missing.returncode == 1
    assert json.loads(missing.stderr.splitlines()[0])["code"] == "memory_not_found"
    assert "torn down" not in missing.stderr
    listed = run("permissions")  # not a one-shot command: the normal exit, teardown included
    assert listed.returncode == 0 and "torn down" in listed.stderr


async def _answering(raw: bytes) -> tuple[asyncio.Server, str]:
    """A server that answers every connection with `raw` once the request's head has arrived."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("raw", "answer"),
    [
        (b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"a": true}', {"a": True}),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'4;x=y\r\n{"a"\r\n3\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n',
            {"a": 1},
        ),
        (b"HTTP/1.0 200 OK\r\n\r\n{}", {}),  # read to the end of the stream
    ],
)
async def test_a_forwarded_answer_is_read_sized_chunked_or_to_its_end(
    raw: bytes, answer: dict[str, Any]
) -> None:
    server, url = await _answering(raw)
    try:
        async with RemoteDoor(url, Caller.human("cli")) as door:
            assert await door.call("memory::bank::list", {}) == answer
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"SSH-2.0-x\r\n\r\n",
        b"HTTP/1.1 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}",
    ],
)
async def test_an_answer_that_is_not_whole_http_is_sibling_unavailable(raw: bytes) -> None:
    server, url = await _answering(raw)
    try:
        async with RemoteDoor(url, Caller.human("cli")) as door:
            with pytest.raises(WorkerError) as failed:
                await door.call("memory::bank::list", {})
        assert failed.value.code == "sibling_unavailable", failed.value
    finally:
        server.close()
        await server.wait_closed()


async def test_a_server_that_is_gone_is_sibling_unavailable_naming_it(tmp_path: Path) -> None:
    """A holder record left by a server that no longer listens: the call fails with
    `sibling_unavailable` naming the URL, it is never run in-process behind the holder's back."""
    server = StandaloneServer(Settings(), tmp_path / "gone", port=0)
    url = await server.start()
    await server.close()  # the port is free again: nothing answers there now
    async with RemoteDoor(url, Caller.human("cli")) as door:
        with pytest.raises(WorkerError) as failed:
            await door.call("memory::bank::list", {})
    assert failed.value.code == "sibling_unavailable"
    assert f"the server at {url} holds the data dir but cannot be reached" in str(failed.value)


# --- the holder's URL is trusted only while it is the server's -----------------------------------


def _squat(url: str) -> socket.socket | None:
    """Another process taking the server's port (SO_REUSEADDR, as any server sets it): the
    listening socket when it got it, else None."""
    host, port = split_url(url)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        squatter.bind((host, port))
        squatter.listen()
    except OSError:
        squatter.close()
        return None
    return squatter


def test_no_process_can_take_the_port_between_bind_and_serving() -> None:
    """The lock's record names the URL as soon as the store is open, before the app serves:
    a process that took the port meanwhile would get the calls (and the token) clients forward
    there. A listening socket cannot be shared, a merely bound one can."""
    sock = standalone._bind("127.0.0.1", 0)
    try:
        squatter = _squat(standalone._url(sock))
        if squatter is not None:
            squatter.close()
        assert squatter is None, "another socket took the port the server is about to serve"
    finally:
        sock.close()


async def test_a_stopping_server_stops_naming_its_url_before_it_closes_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between closing its listener and releasing the lock (in-flight requests, the banks'
    last writes) the port is free for anyone while the record still said "forward here": a
    CLI call or a hook then sent its payload and token to whoever took the port, and trusted
    its answer. The record stops naming the URL first; a client waits for the lock instead."""
    server = StandaloneServer(Settings(), tmp_path / "stopping", port=0)
    url = await server.start()
    assert server.service is not None and server._runner is not None
    root = server.service.store.root
    seen: dict[str, Any] = {}
    cleanup = web.AppRunner.cleanup

    async def closing_the_listener(runner: web.AppRunner) -> None:
        seen["url"] = serving_url(root)  # what a client reads as the port is let go
        await cleanup(runner)
        squatter = _squat(url)
        seen["squatted"] = squatter is not None
        if squatter is not None:
            squatter.close()
        seen["holder"] = DataDirLock(root, {}).read_holder()

    monkeypatch.setattr(web.AppRunner, "cleanup", closing_the_listener)
    await server.close()
    assert seen["squatted"]  # the port was free: only the record kept clients away
    assert seen["url"] is None
    assert seen["holder"].get("pid") == os.getpid()  # a refused client still names it


@as_root_on_linux
@pytest.mark.parametrize("defer_accept", [False, True], ids=["accepting", "deferring"])
async def test_a_forwarded_call_sends_nothing_to_another_accounts_program_on_the_port(
    defer_accept: bool,
) -> None:
    """Whatever the lock's record names, the port is one any account can take the moment the
    server lets it go: a forwarded call sent its payload and the data dir's token to that
    account's program, and took its answer for the server's. Nothing is sent now: the call is
    refused like a port that refuses it (and so chooses its door again, waiting for the lock).
    A listener that defers its accepts kept the connection a request socket, reported as root's,
    and was sent the call and the token."""
    skip_unless_accounts_are_told()
    pid, port, pipe = listening_as_another_account(defer_accept)
    token = "t0ken-" + "x" * 40
    try:
        async with RemoteDoor(f"http://127.0.0.1:{port}", REST_CALLER, token=token) as door:
            with pytest.raises(WorkerError) as refused:
                await door.call("memory::save", {"text": "my bank PIN is 4321"})
    finally:
        with os.fdopen(pipe, "rb") as reports:
            received = await asyncio.to_thread(reports.read)
        await asyncio.to_thread(os.waitpid, pid, 0)
    assert refused.value.code == "sibling_unavailable"
    assert f"uid {OTHER_UID}" in str(refused.value) and "nothing was sent" in str(refused.value)
    assert received == b""  # not the call, not the token


@as_root_on_linux
async def test_root_forwards_to_the_server_of_the_account_that_owns_the_data_dir(
    tmp_path: Path,
) -> None:
    """Root's CLI on a person's data dir (`sudo memory-worker …`, a root cron job) forwarded to
    the server the person runs, which holds the dir: that server's account is not root's, and
    the call was refused as sent to another account's program, and then waited for a lock the
    server never lets go of. The account that owns the data dir is no stranger to it."""
    skip_unless_accounts_are_told()
    root = tmp_path / "data"
    root.mkdir()
    os.chown(root, OTHER_UID, OTHER_UID)
    pid, port, pipe = listening_as_another_account()
    holder = DataDirLock(root, {"pid": pid, "kind": "serve", "url": f"http://127.0.0.1:{port}"})
    holder.acquire()
    settings = Settings()
    try:
        async with open_door(
            root, lambda: settings, Caller.human("cli"), command="test", lock_wait_s=0
        ) as door:
            answer = await door.call("memory::list", {})
    finally:
        holder.release()
        with os.fdopen(pipe, "rb") as reports:
            received = await asyncio.to_thread(reports.read)
        await asyncio.to_thread(os.waitpid, pid, 0)
    assert answer == {}
    assert received.startswith(b"POST /memory/list ")


class TestCancelledOpen:
    """A call cancelled while its door opens (an MCP client's `notifications/cancelled`, a user
    pressing Esc): `asyncio.to_thread` cannot stop its thread, which went on to take the lock (or
    open the store) for nobody. The data dir stayed locked until the process exited: the MCP
    server's next call, the hooks and the CLI were all refused `conflict` naming it."""

    async def _open_again(self, root: Path) -> None:
        settings = Settings()
        async with open_door(
            root, lambda: settings, Caller.human("cli"), command="again", lock_wait_s=5
        ) as door:
            assert isinstance(door, LocalDoor)
            assert (await door.call("memory::list", {}))["total"] == 0

    async def _cancel_one(self, root: Path, entered: asyncio.Event) -> None:
        settings = Settings()

        async def use() -> None:
            async with open_door(
                root, lambda: settings, Caller.for_agent("mcp"), command="mcp", lock_wait_s=5
            ) as door:
                await door.call("memory::list", {})

        task = asyncio.create_task(use())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def test_cancelled_while_waiting_for_the_lock(self, tmp_path: Path) -> None:
        root = tmp_path / "data"
        root.mkdir()
        holder = DataDirLock(root, {"pid": os.getpid(), "kind": "cli", "command": "other"})
        holder.acquire()
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()
        took = threading.Event()
        acquire = DataDirLock.acquire

        def waiting(self: DataDirLock, wait_s: float = 0.0) -> None:
            loop.call_soon_threadsafe(entered.set)  # the door's thread waits for the lock
            try:
                acquire(self, wait_s)
            finally:
                took.set()

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(DataDirLock, "acquire", waiting)
            await self._cancel_one(root, entered)
        holder.release()  # the cancelled door's thread now takes the lock
        assert await asyncio.to_thread(took.wait, 10)
        await self._open_again(root)

    async def test_cancelled_while_the_store_opens(self, tmp_path: Path) -> None:
        from memory_worker.storage.store import Store

        root = tmp_path / "data"
        loop = asyncio.get_running_loop()
        entered = asyncio.Event()
        go_on = threading.Event()
        adopt = Store.adopt

        def slow_adopt(lock: DataDirLock, **options: Any) -> Store:
            loop.call_soon_threadsafe(entered.set)
            go_on.wait(10)
            return adopt(lock, **options)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Store, "adopt", slow_adopt)
            await self._cancel_one(root, entered)
        go_on.set()
        await self._open_again(root)
