"""End to end with no iii engine: a Claude Code–style session (the hook payloads Claude Code sends,
its JSONL transcript) against a standalone server whose extraction goes to a fake
OpenAI-compatible endpoint over real HTTP. The session is told the rules and the memories that
fit each prompt, its turn is captured into memories, and the next session is told those."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.core.config import load_settings
from memory_worker.core.text import fingerprint
from memory_worker.storage.capture import CAPTURE_FILE, CaptureQueue

from .openai_server import FakeOpenAI
from .served import ENV
from .test_capture import claude_line, write_transcript

SESSION = "3f1d0c5e-5b7a-4f3e-9a61-2c8f2d1e9b70"


def payload(event: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """A hook's stdin as Claude Code sends it (the common fields, then the event's own)."""
    return {
        "session_id": SESSION,
        "transcript_path": str(tmp_path / f"{SESSION}.jsonl"),
        "cwd": str(tmp_path / "shop"),
        "permission_mode": "default",
        "hook_event_name": event,
        **extra,
    }


async def hook(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    event: str,
    body: dict[str, Any],
) -> dict[str, Any] | None:
    """`memory-worker hook EVENT` with `body` on stdin (the CLI in a thread: its own loop)."""
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(body)))
    code = await asyncio.to_thread(cli.main, ["hook", event, "--data-dir", str(data)])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out) if out.strip() else None


@pytest.fixture(name="model")
async def _model() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as model:
        yield model


@pytest.fixture(name="server")
async def _server(tmp_path: Path, model: FakeOpenAI) -> AsyncIterator[StandaloneServer]:
    config = tmp_path / "memory.yaml"
    config.write_text(f"extraction_endpoint: {model.url}\nextraction_model: local-model\n")
    server = StandaloneServer(load_settings(config), tmp_path / "data", port=0, config_path=config)
    await server.start()
    # Its banks boot in the background and log when done: done before a test reads its stdout.
    if server.booting is not None:
        await server.booting
    try:
        yield server
    finally:
        await server.close()


async def test_a_claude_code_session_is_told_its_memory_and_its_turns_are_captured(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: FakeOpenAI,
    server: StandaloneServer,
) -> None:
    data = server.data_dir
    trigger = ["trigger", "--data-dir", str(data)]
    rule = ["memory::rule::set", "name=style", "content=# Style\nAnswer in short sentences."]
    fact = ["memory::save", "text=The user's shop sells handmade ceramic mugs"]
    for argv in (rule, fact):  # the CLI, forwarded to the running server
        assert await asyncio.to_thread(cli.main, [trigger[0], *argv, *trigger[1:]]) == 0
    capsys.readouterr()

    started = await hook(
        monkeypatch,
        capsys,
        data,
        "session-start",
        payload("SessionStart", tmp_path, source="startup"),
    )
    assert started is not None
    context = started["hookSpecificOutput"]
    assert context["hookEventName"] == "SessionStart"
    assert "Answer in short sentences." in context["additionalContext"]
    preview = await cli_preview(data, "")
    assert context["additionalContext"] == preview["system_prompt_section"]  # preview's output

    prompt = "Write a product description for the mugs in my shop"
    asked = await hook(
        monkeypatch,
        capsys,
        data,
        "user-prompt-submit",
        payload("UserPromptSubmit", tmp_path, prompt=prompt),
    )
    assert asked is not None
    assert asked["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    told = asked["hookSpecificOutput"]["additionalContext"]
    assert "handmade ceramic mugs" in told
    assert told == (await cli_preview(data, prompt))["message"]

    # The turn: what Claude Code writes to the transcript, then its Stop hook.
    write_transcript(
        tmp_path / f"{SESSION}.jsonl",
        [
            claude_line("user", "e1", prompt),
            claude_line(
                "assistant",
                "e2",
                [{"type": "text", "text": "Here is a short description of your mugs."}],
            ),
            claude_line(
                "user", "e3", "Nice. By the way, my cat is called Miso and sits on the kiln."
            ),
            claude_line("assistant", "e4", [{"type": "text", "text": "Miso sounds lovely."}]),
        ],
    )
    model.reply(
        json.dumps(
            {
                "memories": [
                    {"op": "add", "text": "The user's cat is called Miso", "entities": ["user"]}
                ]
            }
        )
    )
    stopped = await hook(
        monkeypatch, capsys, data, "stop", payload("Stop", tmp_path, stop_hook_active=False)
    )
    assert stopped is None  # a Stop hook prints nothing: it never asks the agent to go on
    assert server.capture is not None
    await asyncio.wait_for(server.capture.settle(), 30)
    chat = model.chats[-1].body
    assert chat["model"] == "local-model"
    assert "my cat is called Miso" in chat["messages"][1]["content"]

    later = await hook(
        monkeypatch,
        capsys,
        data,
        "user-prompt-submit",
        payload("UserPromptSubmit", tmp_path, prompt="what is my cat called"),
    )
    assert later is not None
    assert "The user's cat is called Miso" in later["hookSpecificOutput"]["additionalContext"]

    # the same Stop again (Claude Code fires it per turn; a retry): captured once, nothing new
    await hook(monkeypatch, capsys, data, "stop", payload("Stop", tmp_path))
    await asyncio.wait_for(server.capture.settle(), 30)
    assert len(model.chats) == 1


async def cli_preview(data: Path, query: str) -> dict[str, Any]:
    """memory::preview through the CLI (forwarded), for comparing with what a hook printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memory_worker",
        "trigger",
        "memory::preview",
        "--data-dir",
        str(data),
        "--json",
        json.dumps({"query": query}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


def configure_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An `extraction_endpoint` in the settings the hook reads (`$MEMORY_CONFIG`): without
    one the Stop hook queues nothing. Never called: no server runs the queue here."""
    config = tmp_path / "endpoint.yaml"
    config.write_text("extraction_endpoint: http://127.0.0.1:9/v1\n")
    monkeypatch.setenv(cli.CONFIG_ENV, str(config))


async def test_without_a_server_the_stop_hook_queues_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_endpoint(tmp_path, monkeypatch)
    [job] = await _stop_hook_queued(tmp_path, monkeypatch, capsys)
    assert job["session_id"] == SESSION
    assert job["entries"][0]["text"] == "Remember that I deploy on Mondays"


async def _stop_hook_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    """The jobs a Stop hook run with no server left in the data dir's queue, for a turn whose
    user said "Remember that I deploy on Mondays"."""
    data = tmp_path / "data"
    write_transcript(
        tmp_path / f"{SESSION}.jsonl",
        [claude_line("user", "e1", "Remember that I deploy on Mondays")],
    )
    assert await hook(monkeypatch, capsys, data, "stop", payload("Stop", tmp_path)) is None
    queue = CaptureQueue(data)
    try:
        return [pending.job for pending in queue.pending()]
    finally:
        queue.close()


async def test_without_a_server_each_message_of_a_long_session_is_queued_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no server running the queue, every Stop hook queued the transcript's newest 200
    messages again: a session's turns were all in the file many times over (a 40-turn session
    made 2.25 MB of a 120 KB transcript), and each Stop replayed the whole file. Each message
    is queued once now: the file grows with the session's distinct messages."""
    configure_endpoint(tmp_path, monkeypatch)
    data = tmp_path / "data"
    lines: list[dict[str, Any]] = []
    turns = 12
    for n in range(turns):
        lines += [
            claude_line("user", f"u{n}", f"Turn {n}: remember that box {n} holds the spare fuses"),
            claude_line("assistant", f"a{n}", [{"type": "text", "text": f"Noted, box {n}."}]),
        ]
        write_transcript(tmp_path / f"{SESSION}.jsonl", lines)
        assert await hook(monkeypatch, capsys, data, "stop", payload("Stop", tmp_path)) is None
    text = (data / CAPTURE_FILE).read_text("utf-8")
    for n in range(turns):
        assert text.count(f"remember that box {n} holds") == 1, n
        assert text.count(f"Noted, box {n}.") == 1, n
    jobs = _queued(data)
    assert len(jobs) == turns  # a turn per Stop, each its own messages
    assert [e["text"] for e in jobs[-1]["entries"] if e["text"]] == [
        f"Turn {turns - 1}: remember that box {turns - 1} holds the spare fuses",
        f"Noted, box {turns - 1}.",
    ]


LESSON = {
    "text": "Editing the proto files needs make gen, or the checked-in stubs go stale.",
    "category": "lesson",
    "title": "Run make gen after editing protos",
    "recommendation": "After editing `proto/*.proto`, run `make gen` and commit the stubs.",
    "anchors": {"files": ["proto/user.proto"]},
}


async def test_the_lessons_hook_forwards_to_the_running_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: StandaloneServer,
) -> None:
    """PreToolUse while a server holds the data dir: the card comes from the server (it used
    to print nothing), once per session."""
    saved = ["trigger", "memory::save", "--data-dir", str(server.data_dir)]
    assert await asyncio.to_thread(cli.main, [*saved, "--json", json.dumps(LESSON)]) == 0
    capsys.readouterr()
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    body = payload(
        "PreToolUse",
        tmp_path,
        tool_name="Read",
        tool_input={"file_path": str(repo / "proto" / "user.proto")},
        tool_use_id="toolu_01",
    )
    first = await hook(monkeypatch, capsys, server.data_dir, "pre-tool-use", body)
    assert first is not None
    assert "Run make gen" in first["hookSpecificOutput"]["additionalContext"]
    again = await hook(
        monkeypatch, capsys, server.data_dir, "pre-tool-use", {**body, "tool_use_id": "toolu_02"}
    )
    assert again is None


async def test_a_write_of_a_large_file_gets_its_card_from_the_running_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: StandaloneServer,
) -> None:
    """A Write whose content runs past the 1 MiB a server takes in one request (a generated
    file, a fixture) still meets the card anchored to its path, as it does in-process."""
    saved = ["trigger", "memory::save", "--data-dir", str(server.data_dir)]
    assert await asyncio.to_thread(cli.main, [*saved, "--json", json.dumps(LESSON)]) == 0
    capsys.readouterr()
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    content = 'syntax = "proto3";\n' + "message User { string name = 1; }\n" * 50_000
    body = payload(
        "PreToolUse",
        tmp_path,
        tool_name="Write",
        tool_input={"file_path": str(repo / "proto" / "user.proto"), "content": content},
        tool_use_id="toolu_01",
    )
    told = await hook(monkeypatch, capsys, server.data_dir, "pre-tool-use", body)
    assert told is not None
    assert "Run make gen" in told["hookSpecificOutput"]["additionalContext"]


async def test_a_long_sessions_turn_still_reaches_the_servers_queue(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: FakeOpenAI,
    server: StandaloneServer,
) -> None:
    """The Stop hook hands over the session's last 200 messages: in a long coding session they
    run past the 1 MiB a server takes in one request, and the turn must still be captured (the
    oldest messages are the ones left out), not refused whole on every Stop from then on."""
    block = "A long answer with code in it. " * 200  # ~6 KB, as coding answers run
    lines = []
    for n in range(100):
        lines.append(claude_line("user", f"u{n}", f"Question {n}: {block}"))
        lines.append(claude_line("assistant", f"a{n}", [{"type": "text", "text": block}]))
    lines.append(claude_line("user", "last", "By the way, my cat is called Miso."))
    write_transcript(tmp_path / f"{SESSION}.jsonl", lines)
    model.reply(json.dumps({"memories": []}))
    capsys.readouterr()  # the server's own start lines
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(payload("Stop", tmp_path))))
    argv = ["hook", "stop", "--data-dir", str(server.data_dir)]
    code = await asyncio.to_thread(cli.main, argv)
    told = capsys.readouterr()
    assert (code, told.out) == (0, "")
    assert server.capture is not None
    await asyncio.wait_for(server.capture.settle(), 30)
    assert len(model.chats) == 1, told.err
    assert "my cat is called Miso" in json.dumps(model.chats[0].body)


async def test_a_session_is_handed_each_memory_once_until_its_context_is_reset(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: StandaloneServer,
) -> None:
    """Each prompt of a long session used to repeat the same `<memory>` block (C8: a memory the
    window already carries is not handed twice). Now a revision reaches the session once; an
    edit is handed again; after a compaction SessionStart hands the standing ones anew."""
    data = server.data_dir
    argv = ["trigger", "memory::save", "text=The user's shop sells handmade ceramic mugs"]
    assert await asyncio.to_thread(cli.main, [*argv, "--data-dir", str(data)]) == 0
    capsys.readouterr()  # (the server's log lines share this process's stdout)
    mugs = fingerprint("The user's shop sells handmade ceramic mugs")
    prompt = payload("UserPromptSubmit", tmp_path, prompt="Describe the mugs in my shop")

    async def told(event: str, body: dict[str, Any]) -> str | None:
        reply = await hook(monkeypatch, capsys, data, event, body)
        return None if reply is None else str(reply["hookSpecificOutput"]["additionalContext"])

    first = await told("user-prompt-submit", prompt)
    assert first is not None and "handmade ceramic mugs" in first
    assert await told("user-prompt-submit", prompt) is None  # its transcript still holds it
    edit = ["trigger", "memory::update", f"id={mugs}", "text=The shop sells mugs and bowls"]
    assert await asyncio.to_thread(cli.main, [*edit, "--data-dir", str(data)]) == 0
    capsys.readouterr()
    edited = await told("user-prompt-submit", prompt)
    assert edited is not None and "mugs and bowls" in edited
    compacted = await told("session-start", payload("SessionStart", tmp_path, source="compact"))
    assert compacted is not None and "mugs and bowls" in compacted
    assert compacted.startswith((await cli_preview(data, ""))["system_prompt_section"])
    assert await told("user-prompt-submit", prompt) is None
    other = {**prompt, "session_id": "another-session"}
    assert "mugs and bowls" in (await told("user-prompt-submit", other) or "")


async def test_a_prompt_larger_than_a_request_still_gets_its_memories_from_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: StandaloneServer,
) -> None:
    """A pasted log past the 1 MiB a server takes in one request: in-process the prompt got its
    memories, forwarded it was refused whole ("request body is too large") and got none."""
    data = server.data_dir
    argv = ["trigger", "memory::save", "text=The user's shop sells handmade ceramic mugs"]
    assert await asyncio.to_thread(cli.main, [*argv, "--data-dir", str(data)]) == 0
    capsys.readouterr()
    log = "2026-12-07T03:00:00 ERROR the glaze pipeline worker exited with code 137\n" * 16_000
    prompt = f"Why does the mugs page of my shop fail?\n{log}"
    assert len(prompt.encode()) > 1024 * 1024
    body = payload("UserPromptSubmit", tmp_path, prompt=prompt)
    told = await hook(monkeypatch, capsys, data, "user-prompt-submit", body)
    assert told is not None
    assert "handmade ceramic mugs" in told["hookSpecificOutput"]["additionalContext"]


async def test_a_multi_edit_larger_than_a_request_gets_its_card_from_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: StandaloneServer,
) -> None:
    """Each value of a tool call is cut to what matching reads of it, but a MultiEdit of many
    long edits still ran past the 1 MiB a server takes: refused, its card never came."""
    saved = ["trigger", "memory::save", "--data-dir", str(server.data_dir)]
    assert await asyncio.to_thread(cli.main, [*saved, "--json", json.dumps(LESSON)]) == 0
    capsys.readouterr()
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    edits = [{"old_string": "a" * 9_000, "new_string": "b" * 9_000} for _ in range(80)]
    body = payload(
        "PreToolUse",
        tmp_path,
        tool_name="MultiEdit",
        tool_input={"file_path": str(repo / "proto" / "user.proto"), "edits": edits},
        tool_use_id="toolu_01",
    )
    told = await hook(monkeypatch, capsys, server.data_dir, "pre-tool-use", body)
    assert told is not None
    assert "Run make gen" in told["hookSpecificOutput"]["additionalContext"]


async def test_with_no_endpoint_configured_the_stop_hook_keeps_no_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No server and a configuration with no `extraction_endpoint`: nothing would ever extract
    a queued turn, yet every Stop queued the conversation's words in the data dir, for good.
    None are kept now, and the hook still prints nothing."""
    config = tmp_path / "no-endpoint.yaml"
    config.write_text("extraction_model: local-model\n")
    monkeypatch.setenv(cli.CONFIG_ENV, str(config))
    data = tmp_path / "data"
    write_transcript(
        tmp_path / f"{SESSION}.jsonl",
        [claude_line("user", "e1", "Remember that I deploy on Mondays")],
    )
    assert await hook(monkeypatch, capsys, data, "stop", payload("Stop", tmp_path)) is None
    assert not (data / CAPTURE_FILE).exists()


async def test_a_stop_hook_with_no_configuration_queues_for_the_server_that_runs_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's hook commands name no configuration: the endpoint is in the server's
    `--config`. With the server stopped, the hook's own process (default settings) took the
    endpoint for absent and dropped every turn; the next server start, configured, had none to
    extract. A process that read no configuration queues the turn for whoever runs the queue."""
    monkeypatch.delenv(cli.CONFIG_ENV, raising=False)
    [job] = await _stop_hook_queued(tmp_path, monkeypatch, capsys)
    assert job["entries"][0]["text"] == "Remember that I deploy on Mondays"


def codex_stop(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """A Stop hook's stdin as Codex sends it (`stop.command.input`): every field is there, and
    `transcript_path` is null when the session has no rollout path to give (an ephemeral one,
    one whose rollout it could not name)."""
    return {
        "session_id": SESSION,
        "turn_id": "019d036d-c7fa-72d2-b6fd-78878bfe34e4",
        "transcript_path": None,
        "cwd": str(tmp_path / "shop"),
        "hook_event_name": "Stop",
        "model": "gpt-5-codex",
        "permission_mode": "default",
        "stop_hook_active": False,
        "last_assistant_message": "Noted: you deploy on Mondays, so I set the job for Monday.",
        **extra,
    }


def codex_message(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return {
        "timestamp": "2026-12-07T09:00:00.000Z",
        "type": "response_item",
        "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": text}]},
    }


def _queued(data: Path) -> list[dict[str, Any]]:
    queue = CaptureQueue(data)
    try:
        return [pending.job for pending in queue.pending()]
    finally:
        queue.close()


async def test_a_codex_stop_with_no_transcript_path_reads_the_sessions_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Codex sends `transcript_path: null` when it cannot name the rollout; the rollout is still
    where Codex keeps every session's (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<id>.jsonl`)
    and is read from there. The turn used to be dropped (`no session_id/transcript_path`)."""
    configure_endpoint(tmp_path, monkeypatch)
    home = tmp_path / "codex"
    day = home / "sessions" / "2026" / "12" / "07"
    day.mkdir(parents=True)
    write_transcript(  # another session's rollout beside it is not read
        day / "rollout-2026-12-07T08-00-00-0b7e1c2a-1111-4222-8333-944455556666.jsonl",
        [codex_message("user", "I keep my notes in Obsidian")],
    )
    write_transcript(
        day / f"rollout-2026-12-07T09-00-00-{SESSION}.jsonl",
        [
            codex_message("user", "Remember that I deploy on Mondays"),
            codex_message("assistant", "Noted: you deploy on Mondays."),
        ],
    )
    monkeypatch.setenv("CODEX_HOME", str(home))
    data = tmp_path / "data"
    assert await hook(monkeypatch, capsys, data, "stop", codex_stop(tmp_path)) is None
    [job] = _queued(data)
    assert job["session_id"] == SESSION
    assert [(e["role"], e["text"]) for e in job["entries"]] == [
        ("user", "Remember that I deploy on Mondays"),
        ("assistant", "Noted: you deploy on Mondays."),
    ]


async def test_a_codex_stop_with_no_rollout_at_all_captures_its_own_last_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ephemeral Codex session writes no rollout: the turn's words the payload carries
    (`last_assistant_message`) are captured, redacted as a transcript's are; the same Stop
    delivered twice queues once, a continued turn's next message is a turn of its own."""
    configure_endpoint(tmp_path, monkeypatch)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))  # no sessions at all
    data = tmp_path / "data"
    said = "Your deploy key is sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789ABCD; Mondays it is."
    stop = codex_stop(tmp_path, last_assistant_message=said)
    assert await hook(monkeypatch, capsys, data, "stop", stop) is None
    assert await hook(monkeypatch, capsys, data, "stop", stop) is None  # delivered twice
    [job] = _queued(data)
    [entry] = job["entries"]
    assert entry["role"] == "assistant" and "Mondays it is." in entry["text"]
    assert "sk-proj-Abcdefghijklmnopqrstuvwxyz" not in entry["text"]
    again = codex_stop(tmp_path, stop_hook_active=True, last_assistant_message="Done: on Monday.")
    assert await hook(monkeypatch, capsys, data, "stop", again) is None
    assert [job["entries"][0]["text"] for job in _queued(data)][1] == "Done: on Monday."
    nothing = codex_stop(tmp_path, turn_id="t2", last_assistant_message=None)
    assert await hook(monkeypatch, capsys, data, "stop", nothing) is None
    assert len(_queued(data)) == 2


async def test_a_codex_stop_whose_turn_id_holds_a_lone_surrogate_is_captured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The turn's id names the captured message (`said`): one with a lone surrogate (a
    JavaScript string cut inside an emoji) has no UTF-8 form, and the capture job was refused
    whole (`entry_id: … unable to parse raw data as a unicode string`), the turn dropped."""
    configure_endpoint(tmp_path, monkeypatch)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))  # no rollout: the payload's words
    data = tmp_path / "data"
    stop = codex_stop(tmp_path, turn_id="turn-\ud83d")
    assert await hook(monkeypatch, capsys, data, "stop", stop) is None
    [job] = _queued(data)
    [entry] = job["entries"]
    assert entry["text"] == stop["last_assistant_message"]
    assert entry["entry_id"].startswith("turn-\ufffd:assistant:")
