"""Capture without an engine: the agents' transcripts read (adapters.transcripts), the durable
queue (storage.capture) and its runner (harness.capture) — the same Extractor as the bus path,
each turn once, through failures, restarts and SIGKILL at random moments."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from memory_worker.adapters.transcripts import read_transcript
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import InvalidInput
from memory_worker.core.models import MAX_TIME_MS
from memory_worker.harness.capture import (
    MAX_ENTRY_CHARS,
    RETRY_AFTER_MAX_MS,
    RETRY_MAX_MS,
    UNCONFIGURED_MAX_AGE_MS,
    CaptureJob,
    CaptureRunner,
)
from memory_worker.storage.capture import CAPTURE_FILE, MAX_ATTEMPTS, CaptureQueue
from memory_worker.storage.store import Store

from .capture_fakes import GARDEN, DownModel, ScriptedModel
from .fakes import FixedClock
from .processes import read_line

SECRET = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 4


def claude_line(kind: str, uuid: str, content: Any, **extra: Any) -> dict[str, Any]:
    """One line of a Claude Code transcript, as it writes them."""
    line: dict[str, Any] = {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/dev/shop",
        "sessionId": "7f3c-sess",
        "version": "2.1.0",
        "gitBranch": "main",
        "type": kind,
        "message": {"role": kind, "content": content},
        "uuid": uuid,
        "timestamp": "2026-11-30T10:00:00.000Z",
    }
    if kind == "assistant":
        line["message"] |= {"model": "claude-sonnet-4-5", "stop_reason": "end_turn"}
    return line | extra


def write_transcript(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def turn(n: int, fruit: str, *, garden: bool = False) -> list[dict[str, Any]]:
    said = f"I like {fruit}" + (" in my garden" if garden else "")
    return [
        claude_line("user", f"u{n}", said),
        claude_line(
            "assistant",
            f"a{n}",
            [
                {"type": "thinking", "thinking": "the user shares a preference"},
                {"type": "text", "text": f"Noted, {fruit} it is."},
                {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"p": "x"}},
            ],
        ),
        claude_line(
            "user",
            f"r{n}",
            [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "file body"}],
        ),
    ]


class TestTranscripts:
    def test_claude_codes_lines_give_the_words_only(self, tmp_path: Path) -> None:
        path = write_transcript(
            tmp_path / "t.jsonl",
            [
                {"type": "summary", "summary": "Shop work", "leafUuid": "x"},
                *turn(1, "figs"),
                claude_line("user", "m1", "<command-name>/clear</command-name>"),
                claude_line("user", "s1", "sub-agent words", isSidechain=True),
                claude_line("user", "meta", "Caveat: local commands", isMeta=True),
                claude_line("user", "k1", f"my key is {SECRET} keep it"),
            ],
        )
        with path.open("a") as handle:
            handle.write('{"type": "user", "uuid": "torn", "mess')  # being written right now
        entries = read_transcript(path, limit=50)
        assert [(e["entry_id"], e["role"]) for e in entries] == [
            ("u1", "user"),
            ("a1", "assistant"),
            ("k1", "user"),
        ]
        assert entries[0]["text"] == "I like figs"
        assert entries[1]["text"] == "Noted, figs it is."  # no thinking, no tool call
        assert SECRET not in entries[2]["text"] and "[REDACTED:" in entries[2]["text"]
        assert entries[0]["timestamp"] == 1796032800000
        assert len(read_transcript(path, limit=2)) == 2

    def test_claude_codes_own_assistant_lines_are_not_the_models_words(
        self, tmp_path: Path
    ) -> None:
        """Claude Code writes its own notices as assistant lines: an API error
        (`isApiErrorMessage`, model `<synthetic>`), "No response requested." after an
        interrupt, a usage-limit notice. Read as the assistant's, they went to extraction as
        something the model said in the session."""
        error = claude_line(
            "assistant",
            "e1",
            [{"type": "text", "text": "API Error: 529 Overloaded. Retrying the payment migration"}],
            isApiErrorMessage=True,
        )
        error["message"]["model"] = "<synthetic>"
        notice = claude_line(
            "assistant", "n1", [{"type": "text", "text": "No response requested."}]
        )
        notice["message"]["model"] = "<synthetic>"
        path = write_transcript(tmp_path / "t.jsonl", [*turn(1, "figs"), error, notice])
        entries = read_transcript(path, limit=50)
        assert [e["entry_id"] for e in entries] == ["u1", "a1"]

    def test_a_secret_across_the_cut_of_a_long_message_is_redacted_not_sent_in_part(
        self, tmp_path: Path
    ) -> None:
        """A message is cut at 20,000 characters. Cut before redaction, a database URL cut
        between its password and its `@host` no longer read as a credentialed URL, and the
        whole password went to the model."""
        from memory_worker.adapters.transcripts import _MAX_TEXT_CHARS

        password = "Sup3rS3cretPassw0rd"
        head = "connecting with postgres://admin:" + password
        pasted = "x" * (_MAX_TEXT_CHARS - len(head)) + head + "@db.internal:5432/shop"
        path = write_transcript(tmp_path / "t.jsonl", [claude_line("user", "u1", pasted)])
        [entry] = read_transcript(path, limit=10)
        assert len(entry["text"]) <= _MAX_TEXT_CHARS
        assert password not in entry["text"]

    def test_a_long_transcript_is_decoded_from_the_end_only_as_far_as_it_keeps(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memory_worker.adapters import transcripts

        lines = [line for n in range(2000) for line in turn(n, f"fruit {n}")]
        path = write_transcript(tmp_path / "long.jsonl", lines)
        redacted: list[str] = []
        real = transcripts.redact
        monkeypatch.setattr(transcripts, "redact", lambda text: redacted.append(text) or real(text))
        entries = read_transcript(path, limit=4)
        assert [e["entry_id"] for e in entries] == ["u1998", "a1998", "u1999", "a1999"]
        assert len(redacted) == 4  # not the 4,000 messages before them

    def test_a_turn_longer_than_the_read_keeps_the_persons_own_message(
        self, tmp_path: Path
    ) -> None:
        """A long agentic turn (the agent narrating 250 steps) after one prompt: the last 200
        messages were all the agent's, the person's words fell out, and extraction (which keeps
        only what the person said) found nothing to remember of the turn."""
        prompt = "I moved to Porto last week; set up the shop's deploy for the new office."
        lines = [
            claude_line("user", "old", "I like figs"),
            claude_line("user", "u1", prompt),
            *[
                claude_line("assistant", f"a{n}", [{"type": "text", "text": f"Step {n}."}])
                for n in range(250)
            ],
        ]
        path = write_transcript(tmp_path / "t.jsonl", lines)
        entries = read_transcript(path, limit=200)
        assert len(entries) == 200
        assert (entries[0]["entry_id"], entries[0]["text"]) == ("u1", prompt)
        assert [e["entry_id"] for e in entries[1:3]] == ["a51", "a52"]
        assert entries[-1]["entry_id"] == "a249"

    def test_a_turn_too_big_for_one_job_keeps_the_persons_own_message(self) -> None:
        """The Stop hook keeps the newest messages that fit in one request: a turn of long
        replies (code) pushed the person's prompt out, and with it every fact of the turn."""
        from memory_worker.adapters.agent_hooks import MAX_JOB_BYTES, _newest_fitting

        prompt = {"entry_id": "u1", "role": "user", "text": "I moved to Porto last week."}
        replies = [
            {"entry_id": f"a{n}", "role": "assistant", "text": "x" * 20_000} for n in range(60)
        ]
        kept = _newest_fitting([prompt, *replies], MAX_JOB_BYTES)
        assert kept[0] == prompt and kept[-1]["entry_id"] == "a59"
        assert len(json.dumps(kept).encode()) <= MAX_JOB_BYTES
        assert _newest_fitting([prompt, *replies[:3]], MAX_JOB_BYTES) == [prompt, *replies[:3]]

    def test_codex_entries_keep_their_line_numbers_whatever_the_limit(self, tmp_path: Path) -> None:
        said = [
            {
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": f"note {n}"}],
                },
            }
            for n in range(5)
        ]
        path = write_transcript(tmp_path / "r.jsonl", said)
        every = read_transcript(path, limit=10)
        assert [e["entry_id"] for e in read_transcript(path, limit=2)] == [
            e["entry_id"] for e in every[-2:]
        ]

    def test_codex_entries_keep_their_ids_once_the_rollout_outgrows_the_read(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past `MAX_TRANSCRIPT_BYTES` only the end is read; Codex entries are named by line
        number, counted from the file's start: counted from where the read started, every id
        moved as the file grew, and the session's cursor named another message (turns skipped
        or read twice)."""
        from memory_worker.adapters import transcripts

        def said(n: int) -> str:
            item = {"type": "message", "role": "user", "content": [{"type": "input_text"}]}
            item["content"][0]["text"] = f"note number {n}"
            return json.dumps({"type": "response_item", "payload": item}) + "\n"

        path = tmp_path / "rollout.jsonl"
        path.write_text("".join(said(n) for n in range(50)), encoding="utf-8")
        monkeypatch.setattr(transcripts, "MAX_TRANSCRIPT_BYTES", 20 * len(said(0)))
        before = {e["text"]: e["entry_id"] for e in read_transcript(path, limit=5)}
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(said(n) for n in range(50, 53)))
        after = {e["text"]: e["entry_id"] for e in read_transcript(path, limit=10)}
        assert before == {text: after[text] for text in before}
        assert after["note number 52"] == "line-53"

    def test_codex_rollout_lines_are_read_too(self, tmp_path: Path) -> None:
        rollout = [
            {"timestamp": "2026-11-30T10:00:00.000Z", "type": "session_meta", "payload": {}},
            {
                "timestamp": "2026-11-30T10:00:01.000Z",
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "I like plums"}],
                },
            },
            {
                "timestamp": "2026-11-30T10:00:02.000Z",
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Plums, noted."}],
                },
            },
        ]
        entries = read_transcript(write_transcript(tmp_path / "r.jsonl", rollout), limit=10)
        assert [(e["role"], e["text"]) for e in entries] == [
            ("user", "I like plums"),
            ("assistant", "Plums, noted."),
        ]
        assert entries[0]["entry_id"] != entries[1]["entry_id"]

    def test_a_line_nested_past_the_decoders_depth_is_skipped_like_any_unreadable_line(
        self, tmp_path: Path
    ) -> None:
        """`json.loads` raises `RecursionError` (not `ValueError`) on such a line: the Stop
        hook failed, and every later turn of the session too while the line was in the tail."""
        path = tmp_path / "t.jsonl"
        path.write_text(
            json.dumps(claude_line("user", "u1", "I like figs"))
            + "\n"
            + "[" * 100_000
            + "]" * 100_000
            + "\n"
            + json.dumps(claude_line("assistant", "a1", "Noted."))
            + "\n"
        )
        assert [e["text"] for e in read_transcript(path, limit=10)] == ["I like figs", "Noted."]

    def test_a_lone_surrogate_in_a_message_does_not_refuse_the_turn(self, tmp_path: Path) -> None:
        """A JavaScript agent writes a string cut inside an emoji as a `\\ud83d` escape; decoded,
        it has no UTF-8 form and the capture job was refused as a whole, for this turn and
        every later one while the message was in the transcript's tail."""
        path = tmp_path / "t.jsonl"
        line = json.dumps(claude_line("user", "u1", "I prefer tabs \ud83d over spaces"))
        assert "\\ud83d" in line
        path.write_text(line + "\n" + json.dumps(claude_line("assistant", "a1", "Noted.")) + "\n")
        entries = read_transcript(path, limit=10)
        assert entries[0]["text"] == "I prefer tabs \ufffd over spaces"
        CaptureJob.model_validate({"session_id": "s1", "entries": entries})

    def test_what_the_agent_itself_writes_as_a_user_message_is_not_the_users_words(
        self, tmp_path: Path
    ) -> None:
        """Codex records its environment context and the AGENTS.md text as user messages of the
        rollout, and Claude Code a `!` shell's output, background task notices and system
        reminders as user lines: read as the user's words, extraction made memories of a shell
        listing or of the repository's instructions."""

        def codex_user(text: str) -> dict[str, Any]:
            item = {"type": "message", "role": "user", "content": [{"type": "input_text"}]}
            item["content"][0]["text"] = text
            return {"type": "response_item", "payload": item}

        codex = [
            codex_user(
                "<environment_context>\n  <cwd>/home/dev/shop</cwd>\n</environment_context>"
            ),
            codex_user("<user_instructions>\nAlways use tabs.\n</user_instructions>"),
            codex_user("# AGENTS.md instructions for /home/dev/shop\n\n<INSTRUCTIONS>\nx"),
            codex_user("<turn_aborted>\nThe user interrupted.\n</turn_aborted>"),
            codex_user("I like plums"),
        ]
        entries = read_transcript(write_transcript(tmp_path / "r.jsonl", codex), limit=10)
        assert [e["text"] for e in entries] == ["I like plums"]

        claude = [
            claude_line("user", "b1", "<bash-input>ls</bash-input>"),
            claude_line(
                "user", "b2", "<bash-stdout>secrets.txt</bash-stdout><bash-stderr></bash-stderr>"
            ),
            claude_line("user", "c1", "<local-command-stderr>boom</local-command-stderr>"),
            claude_line(
                "user", "n1", "<task-notification>\n<task-id>b1</task-id>\n</task-notification>"
            ),
            claude_line("user", "r1", "<system-reminder>\nThe file changed.\n</system-reminder>"),
            claude_line("user", "i1", [{"type": "text", "text": "[Request interrupted by user]"}]),
            claude_line("user", "i2", "[Request interrupted by user for tool use]"),
            claude_line("user", "u1", "I like figs"),
            claude_line(
                "user",
                "u2",
                [
                    {"type": "text", "text": "<system-reminder>\nA hint.\n</system-reminder>"},
                    {"type": "text", "text": "and plums"},
                ],
            ),
        ]
        entries = read_transcript(write_transcript(tmp_path / "t.jsonl", claude), limit=10)
        assert [e["text"] for e in entries] == ["I like figs", "and plums"]

    def test_what_codex_itself_writes_as_a_user_message_is_not_the_users_words(
        self, tmp_path: Path
    ) -> None:
        """Codex also records as user messages of the rollout a `!` shell command with its
        output, a skill's instructions, a subagent's notice and a Stop hook's continuation
        prompt: read as the user's words, a shell listing or a skill's text became memories."""

        def codex_user(text: str) -> dict[str, Any]:
            item = {"type": "message", "role": "user", "content": [{"type": "input_text"}]}
            item["content"][0]["text"] = text
            return {"type": "response_item", "payload": item}

        codex = [
            codex_user(
                "<user_shell_command>\n<command>\ncat .env\n</command>\n<result>\nExit code: 0"
                "\nOutput:\nDEBUG=1\n</result>\n</user_shell_command>"
            ),
            codex_user("<skill>\n<name>pdf</name>\nAlways use pdftotext.\n</skill>"),
            codex_user(
                '<subagent_notification>\n{"status": "completed"}\n</subagent_notification>'
            ),
            codex_user('<hook_prompt hook_run_id="stop:1">Run the tests again.</hook_prompt>'),
            codex_user("I like plums"),
        ]
        entries = read_transcript(write_transcript(tmp_path / "r.jsonl", codex), limit=10)
        assert [e["text"] for e in entries] == ["I like plums"]

    def test_what_an_ide_adds_to_a_prompt_is_not_the_users_words(self, tmp_path: Path) -> None:
        """Claude Code in VS Code or JetBrains puts the open file and the selected lines beside
        the prompt (`<ide_opened_file>`, `<ide_selection>`): read as the user's words, the file's
        path and a copy of its code went to extraction as something the user said. The user's
        own words around them stay."""
        opened = (
            "<ide_opened_file>The user opened the file /home/dev/shop/billing.py in the IDE. "
            "This may or may not be related to the current task.</ide_opened_file>"
        )
        selected = (
            "<ide_selection>The user selected the lines 3 to 4 from /home/dev/shop/billing.py:\n"
            "API_KEY = load()\nrate = 0.2\n\nThis may or may not be related to the current "
            "task.</ide_selection>"
        )
        claude = [
            claude_line(
                "user",
                "u1",
                [{"type": "text", "text": opened}, {"type": "text", "text": "I like figs"}],
            ),
            claude_line("user", "u2", f"{selected}and plums"),
            claude_line("user", "u3", opened),
        ]
        entries = read_transcript(write_transcript(tmp_path / "t.jsonl", claude), limit=10)
        assert [e["text"] for e in entries] == ["I like figs", "and plums"]

    @pytest.mark.parametrize(
        "stamp",
        ["1e400", "1e300", '"0001-01-01T00:00:00+14:00"', '"1900-01-01T00:00:00Z"'],
        ids=["past-a-float", "past-9999", "year-1", "before-1970"],
    )
    def test_a_line_with_a_time_no_job_can_hold_is_kept_without_it(
        self, tmp_path: Path, stamp: str
    ) -> None:
        """One such line used to fail the turn's whole capture (a traceback, or a job refused
        for a negative time): its words are still the turn's."""
        path = tmp_path / "t.jsonl"
        path.write_text(
            json.dumps(claude_line("user", "u1", "I moved to Lisbon last month"))
            + "\n"
            + json.dumps(claude_line("assistant", "a1", "Noted.")).replace(
                '"2026-11-30T10:00:00.000Z"', stamp
            )
            + "\n"
        )
        entries = read_transcript(path, limit=10)
        CaptureJob.model_validate({"session_id": "s1", "entries": entries})
        assert [e["text"] for e in entries] == ["I moved to Lisbon last month", "Noted."]
        assert "timestamp" in entries[0] and "timestamp" not in entries[1]

    def test_a_lines_time_is_bounded_like_a_memorys(self, tmp_path: Path) -> None:
        lines = [
            claude_line("user", "u1", "first", timestamp="9999-12-31T23:59:59.999Z"),
            claude_line("user", "u2", "second", timestamp=MAX_TIME_MS + 1),
        ]
        entries = read_transcript(write_transcript(tmp_path / "t.jsonl", lines), limit=10)
        assert [e.get("timestamp") for e in entries] == [MAX_TIME_MS, None]


@pytest.fixture(name="root")
def _root(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(name="service")
async def _service(root: Path) -> AsyncIterator[MemoryService]:
    store = Store.open(root, holder={"pid": 0, "kind": "test"})
    service = MemoryService(store, Settings())
    try:
        yield service
    finally:
        await service.close()
        await store.close()


def job(session: str, entries: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"session_id": session, "entries": entries, **extra}


def entries_of(tmp_path: Path, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return read_transcript(write_transcript(tmp_path / "t.jsonl", lines), limit=200)


async def _memories(service: MemoryService, bank: str = "main") -> dict[str, dict[str, Any]]:
    listed = await catalog.call(service, "memory::list", {"bank": bank, "limit": 500})
    return {m["text"]: m for m in listed["memories"]}


class TestRunner:
    async def test_a_turn_becomes_memories_and_only_new_messages_are_read_next_time(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        model = ScriptedModel()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        first = entries_of(tmp_path, turn(1, "figs"))
        queued = await runner.enqueue(job("s1", first))
        assert queued == {"queued": "s1:a1", "new": True}
        assert await runner.enqueue(job("s1", first)) == {"queued": "s1:a1", "new": False}
        assert await runner.run_once() == 1
        assert "The user likes figs" in await _memories(service)
        both = entries_of(tmp_path, [*turn(1, "figs"), *turn(2, "kiwis")])
        await runner.enqueue(job("s1", both))
        assert await runner.run_once() == 1
        assert "I like kiwis" in model.asked[-1] and "I like figs" not in model.asked[-1]
        memories = await _memories(service)
        assert memories["The user likes figs"]["corroboration"] == 0
        assert memories["The user likes kiwis"]["source"]["session_id"] == "s1"
        assert memories["The user likes kiwis"]["confidence"] == "extracted"
        assert runner.queue.cursor("s1")["last_entry_id"] == "a2"
        await runner.close()

    async def test_a_job_into_another_bank_and_bad_jobs_are_refused(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        runner = CaptureRunner(service, CaptureQueue(root), ScriptedModel())
        await runner.enqueue(job("s2", entries_of(tmp_path, turn(1, "pears")), bank="home"))
        await runner.run_once()
        assert "The user likes pears" in await _memories(service, "home")
        for bad in (
            {"entries": []},
            job("s", [{"entry_id": "x", "role": "system", "text": "hi"}]),
            job("s", [], bank="Not A Bank"),
        ):
            with pytest.raises(InvalidInput):
                await runner.enqueue(bad)
        assert len(runner.queue.pending()) == 0
        await runner.close()

    async def test_a_turn_posted_unredacted_is_queued_redacted(
        self, service: MemoryService, root: Path
    ) -> None:
        """`POST /capture` is a write path of its own: a client other than the Stop hook (which
        redacts first) may send the words as they were, and the queue file must not keep a secret
        it holds."""
        secret = "gh" + "p_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
        runner = CaptureRunner(service, CaptureQueue(root), None)
        said = {"entry_id": "u1", "role": "user", "text": f"my token is {secret}, keep it"}
        await runner.enqueue(job("s10", [said]))
        [pending] = runner.queue.pending()
        assert pending.job["entries"][0]["text"] == "my token is [REDACTED:github-token], keep it"
        await runner.close()
        assert secret not in (root / CAPTURE_FILE).read_text("utf-8")

    async def test_a_message_longer_than_an_entry_holds_is_cut_not_the_turn_refused(
        self, service: MemoryService, root: Path
    ) -> None:
        """A client of `POST /capture` posting a pasted log: the message is cut (the Stop hook
        cuts its own the same way), the turn is queued, and a secret the cut splits is redacted
        whole, never kept in part."""
        secret = "gh" + "p_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
        head = "I moved to Porto last week. " + "log line\n" * 2_400
        text = head[: MAX_ENTRY_CHARS - 10] + secret + " more log " * 1_000
        runner = CaptureRunner(service, CaptureQueue(root), None)
        await runner.enqueue(job("s11", [{"entry_id": "u1", "role": "user", "text": text}]))
        [pending] = runner.queue.pending()
        kept = pending.job["entries"][0]["text"]
        assert kept.startswith("I moved to Porto last week.") and len(kept) <= MAX_ENTRY_CHARS
        assert secret[:8] not in kept
        await runner.close()

    async def test_a_failing_endpoint_is_retried_then_the_job_is_dead_not_lost(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        model = ScriptedModel(fail=2)
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s3", entries_of(tmp_path, turn(1, "limes"))))
        assert await runner.run_once() == 0
        pending = runner.queue.pending()
        assert pending[0].attempts == 1 and "did not answer" in (pending[0].error or "")
        assert await runner.run_once() == 0  # not due yet: retried after its delay
        pending[0].retry_at = 0  # (the delay, fast-forwarded)
        await runner.run_once()
        runner.queue.pending()[0].retry_at = 0
        assert await runner.run_once() == 1
        assert "The user likes limes" in await _memories(service)
        dead = CaptureRunner(service, runner.queue, ScriptedModel(fail=MAX_ATTEMPTS))
        await dead.enqueue(job("s4", entries_of(tmp_path, turn(1, "dates"))))
        for _ in range(MAX_ATTEMPTS):
            for waiting in dead.queue.pending():
                waiting.retry_at = 0
            await dead.run_once()
        assert dead.queue.pending() == [] and dead.queue.dead == 1
        await runner.close()

    async def test_a_reply_in_prose_is_given_up_after_one_retry_with_its_reason(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A model that answers in prose ("I can't help with that.": a refusal, a chat answer)
        made no attempt at the JSON: it was retried like a timeout, eight times over some twenty
        minutes, before the job died. It is asked once more (a sampled reply may differ), then
        the job is dead at once, the reply's words its recorded reason."""

        class Refusing:
            asked = 0

            async def complete(self, system_prompt: str, user_text: str) -> str:
                self.asked += 1
                return "I'm sorry, but I can't help with that."

        model = Refusing()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s12", entries_of(tmp_path, turn(1, "figs"))))
        assert await runner.run_once() == 0
        [pending] = runner.queue.pending()
        assert pending.attempts == 1 and "can't help with that" in (pending.error or "")
        pending.retry_at = 0  # (the delay, fast-forwarded)
        assert await runner.run_once() == 1  # dead: no third question
        assert (model.asked, runner.queue.pending(), runner.queue.dead) == (2, [], 1)
        await runner.close()
        [dead] = [
            json.loads(line)
            for line in (root / CAPTURE_FILE).read_text().splitlines()
            if '"dead"' in line
        ]
        assert dead["op"] == "dead" and "prose" in dead["error"]
        assert "can't help with that" in dead["error"]

    async def test_a_reply_in_prose_is_logged_without_its_words(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A reply in prose may repeat the memories the model was shown: its words are the
        dead job's recorded reason (erased with their subject), never a log line's, which
        outlives a `memory::forget-subject` wherever the logs are kept."""

        class Quoting:
            async def complete(self, system_prompt: str, user_text: str) -> str:
                return "I won't keep that: Ana's blood type is AB negative."

        runner = CaptureRunner(service, CaptureQueue(root), Quoting())
        await runner.enqueue(job("s13", entries_of(tmp_path, turn(1, "figs"))))
        with structlog.testing.capture_logs() as logs:
            await runner.run_once()
            runner.queue.pending()[0].retry_at = 0  # (the delay, fast-forwarded)
            assert await runner.run_once() == 1  # dead
        await runner.close()
        failed = [entry for entry in logs if entry["event"] == "capture_failed"]
        assert len(failed) == 2 and all("in prose" in entry["error"] for entry in failed)
        assert not [entry for entry in logs if "AB negative" in repr(entry)]
        assert "AB negative" in (root / CAPTURE_FILE).read_text()  # the dead job's reason

    async def test_a_reply_in_prose_after_a_timeout_is_still_asked_once_more(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """Asked "once more" is counted in prose replies, not in attempts: a job whose first
        attempt timed out died at its first refusal, never asked the question a sampled
        reply may answer."""

        class TimeoutThenRefusal(ScriptedModel):
            async def complete(self, system_prompt: str, user_text: str) -> str:
                if len(self.asked) == 1:  # (the first, timed out, counted in `asked`)
                    self.asked.append(user_text)
                    return "I'm sorry, but I can't help with that."
                return await super().complete(system_prompt, user_text)

        model = TimeoutThenRefusal(fail=1)
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s13", entries_of(tmp_path, turn(1, "kiwis"))))
        for _ in range(3):
            for waiting in runner.queue.pending():
                waiting.retry_at = 0  # (the delay, fast-forwarded)
            await runner.run_once()
        assert (len(model.asked), runner.queue.dead) == (3, 0)
        assert "The user likes kiwis" in await _memories(service)
        await runner.close()

    async def test_an_endpoint_that_is_down_pauses_the_queue_and_spends_no_attempts(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """An extraction endpoint nobody answers on (the local model server not started yet, a
        laptop offline) is not a failure of the turns: each pass used one of every queued
        session's attempts, so an hour of it left every turn dead, never read. Now the queue
        pauses with a growing delay, asking once per delay, and no job spends an attempt."""
        real, clock = service.clock, FixedClock()
        service.clock = clock
        model = DownModel(down=3 * MAX_ATTEMPTS)
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s8", entries_of(tmp_path, turn(1, "quinces"))))
        await runner.enqueue(job("s9", entries_of(tmp_path, turn(1, "lychees"))))
        delays = []
        for _ in range(3 * MAX_ATTEMPTS):
            assert await runner.run_once() == 0
            due = runner.next_due_ms()
            assert due is not None and due > clock()
            assert await runner.run_once() == 0  # paused: nothing is asked before the delay
            delays.append(due - clock())
            clock.now_ms = due
        assert model.asked == 3 * MAX_ATTEMPTS  # one question per delay, not one per session
        assert delays == sorted(delays) and delays[-1] == RETRY_MAX_MS
        assert [p.attempts for p in runner.queue.pending()] == [0, 0]
        assert runner.queue.dead == 0
        service.clock = real  # (a pass lets the clock tick past its decision)
        assert await runner.run_once() == 2  # back: both turns are read
        assert {"The user likes quinces", "The user likes lychees"} <= set(await _memories(service))
        await runner.close()

    async def test_a_rate_limited_endpoint_is_asked_again_when_it_said_not_before(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A 429 with `Retry-After: 120`: the queue asked again after 5 s, 10 s, 20 s, …, each
        early request one more against the limit. It now waits what the endpoint said (within
        an hour), or its own delay when that is longer."""
        service.clock = clock = FixedClock()
        model = DownModel(down=1, retry_after_ms=120_000)
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s13", entries_of(tmp_path, turn(1, "guavas"))))
        assert await runner.run_once() == 0
        due = runner.next_due_ms()
        assert due is not None and due - clock() == 120_000
        model.retry_after_ms, model.down = 10**9, 2
        clock.now_ms = due
        assert await runner.run_once() == 0
        assert runner.next_due_ms() == clock() + RETRY_AFTER_MAX_MS  # a day's quota: capped
        await runner.close()

    async def test_a_turn_queued_while_extraction_is_off_is_stepped_over_without_an_endpoint(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """`extraction_enabled: false` is "stop remembering": with no endpoint configured the
        turns said meanwhile waited in the queue, and were all extracted once an endpoint was
        set and extraction turned back on (the engine steps such turns over)."""
        endpoint = {"set": False}
        model = ScriptedModel()
        runner = CaptureRunner(
            service, CaptureQueue(root), model, available=lambda: endpoint["set"]
        )
        service.settings = Settings(extraction_enabled=False)
        await runner.enqueue(job("s12", entries_of(tmp_path, turn(1, "durians"))))
        await runner.run_once()
        service.settings = Settings(extraction_enabled=True)
        endpoint["set"] = True
        await runner.run_once()
        assert model.asked == [] and "The user likes durians" not in await _memories(service)
        assert runner.queue.pending() == []
        await runner.close()

    async def test_with_no_endpoint_configured_a_turn_is_not_queued_and_that_is_said_once(
        self, root: Path, tmp_path: Path
    ) -> None:
        """No engine and no `extraction_endpoint` (the standalone server's and the CLI's
        default): nothing would ever run a queued turn, and the queue file kept every
        conversation's words, without bound, where nobody expected them. The turn is not
        queued, the reply says why, the log says it once; an endpoint set later captures."""
        store = Store.open(root, holder={"pid": 0, "kind": "test"})
        service = MemoryService(store, Settings(), engine_less=True)
        runner = CaptureRunner(service, CaptureQueue(root), None)
        try:
            with structlog.testing.capture_logs() as logs:
                first = await runner.enqueue(job("s20", entries_of(tmp_path, turn(1, "figs"))))
                await runner.enqueue(job("s20", entries_of(tmp_path, turn(2, "kiwis"))))
            assert first["queued"] is None and first["new"] is False
            assert "no extraction_endpoint is configured" in first["detail"]
            assert runner.queue.pending() == [] and not (root / CAPTURE_FILE).exists()
            assert [entry["event"] for entry in logs].count("capture_off") == 1
            with pytest.raises(InvalidInput):  # bad input is still refused as bad input
                await runner.enqueue(job("s", [], bank="Not A Bank"))
            service.settings = Settings(extraction_endpoint="http://127.0.0.1:9/v1")
            queued = await runner.enqueue(job("s20", entries_of(tmp_path, turn(3, "limes"))))
            assert queued["new"] is True and len(runner.queue.pending()) == 1
        finally:
            await runner.close()
            await service.close()
            await store.close()
        kept = (root / CAPTURE_FILE).read_text("utf-8")
        assert "limes" in kept and "figs" not in kept and "kiwis" not in kept

    async def test_a_turn_left_queued_with_no_endpoint_expires_dead_without_its_words(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A queue left from an earlier configuration (the endpoint since removed from the
        settings) was kept forever. Past `UNCONFIGURED_MAX_AGE_MS` a job is dead, its reason
        recorded and its messages gone from the file; a younger one waits. An endpoint that is
        configured but down keeps every job, however old (at least once)."""
        service.clock = clock = FixedClock()
        endpoint = {"set": True}
        runner = CaptureRunner(
            service, CaptureQueue(root), DownModel(down=10**6), available=lambda: endpoint["set"]
        )
        await runner.enqueue(job("s21", entries_of(tmp_path, turn(1, "tamarinds"))))
        clock.advance(UNCONFIGURED_MAX_AGE_MS + 1)
        await runner.enqueue(job("s22", entries_of(tmp_path, turn(1, "mangos"))))
        assert await runner.run_once() == 0  # configured but down: paused, nothing expires
        assert len(runner.queue.pending()) == 2 and runner.queue.dead == 0
        endpoint["set"] = False
        assert await runner.run_once() == 0  # just unset: a week for the edit to be undone
        clock.advance(UNCONFIGURED_MAX_AGE_MS)
        with structlog.testing.capture_logs() as logs:
            assert await runner.run_once() == 1
        assert [p.job["session_id"] for p in runner.queue.pending()] == ["s22"]
        assert runner.queue.dead == 1
        assert [entry["jobs"] for entry in logs if entry["event"] == "capture_jobs_expired"] == [1]
        await runner.close()
        text = (root / CAPTURE_FILE).read_text("utf-8")
        assert "tamarinds" not in text and "mangos" in text
        [dead] = [json.loads(line) for line in text.splitlines() if '"dead"' in line]
        assert dead["expired"] is True and dead["entries_dropped"] >= 1
        assert "no extraction_endpoint configured" in dead["error"]
        reopened = CaptureQueue(root)
        try:
            assert reopened.dead == 1
            assert [p.job["session_id"] for p in reopened.pending()] == ["s22"]
        finally:
            reopened.close()

    async def test_an_endpoint_unset_after_a_long_outage_gives_its_waiting_jobs_a_week(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A job kept 8 days for an endpoint that was configured but down (as promised) was
        expired, its words dropped, on the first pass after the endpoint left the settings (a
        console edit, a restart without `--config`): its week was counted from its enqueue, so
        the edit had no time to be undone. The week runs from when no endpoint is configured."""
        service.clock = clock = FixedClock()
        endpoint = {"set": True}
        runner = CaptureRunner(
            service, CaptureQueue(root), DownModel(down=10**6), available=lambda: endpoint["set"]
        )
        try:
            await runner.enqueue(job("s23", entries_of(tmp_path, turn(1, "persimmons"))))
            clock.advance_days(8)
            assert await runner.run_once() == 0  # down: paused, kept
            endpoint["set"] = False  # the edit
            assert await runner.run_once() == 0
            assert len(runner.queue.pending()) == 1 and runner.queue.dead == 0
            clock.advance(UNCONFIGURED_MAX_AGE_MS - 1)
            assert await runner.run_once() == 0
            assert "persimmons" in (root / CAPTURE_FILE).read_text("utf-8")
            clock.advance(1)  # a week with no endpoint: now it goes
            assert await runner.run_once() == 1
            assert runner.queue.pending() == [] and runner.queue.dead == 1
        finally:
            await runner.close()
        assert "persimmons" not in (root / CAPTURE_FILE).read_text("utf-8")

    async def test_a_later_turn_waits_for_an_earlier_turns_retry_and_none_is_read_twice(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """Turn 1's job fails and waits for its retry. Turn 2's job (its tail holds both turns)
        used to run meanwhile and move the cursor past both: the retry then found no cursor in
        its own messages, read turn 1 again and moved the cursor back, so turn 3 read turn 2
        again. A session's jobs run in order instead."""
        model = ScriptedModel(fail=1)
        runner = CaptureRunner(service, CaptureQueue(root), model)
        one = turn(1, "figs")
        two = [*one, *turn(2, "kiwis")]
        await runner.enqueue(job("s6", entries_of(tmp_path, one)))
        await runner.enqueue(job("s6", entries_of(tmp_path, two)))
        await runner.enqueue(job("s7", entries_of(tmp_path, turn(1, "pears"))))
        assert await runner.run_once() == 1  # s7 ran; s6's turn 2 waits behind turn 1
        assert [p.id for p in runner.queue.pending()] == ["s6:a1", "s6:a2"]
        runner.queue.pending()[0].retry_at = 0  # (the delay, fast-forwarded)
        assert await runner.run_once() == 2
        assert "I like kiwis" in model.asked[-1] and "I like figs" not in model.asked[-1]
        await runner.enqueue(job("s6", entries_of(tmp_path, [*two, *turn(3, "plums")])))
        assert await runner.run_once() == 1
        assert "I like plums" in model.asked[-1] and "I like kiwis" not in model.asked[-1]
        assert sum("I like figs" in asked for asked in model.asked) == 2  # the failure, the retry
        assert runner.queue.cursor("s6")["last_entry_id"] == "a3"
        memories = await _memories(service)
        assert {memories[f"The user likes {f}"]["corroboration"] for f in ("figs", "kiwis")} == {0}
        await runner.close()

    async def test_a_sessions_turns_queued_while_nothing_runs_hold_each_message_once(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """Each Stop hook hands the transcript's tail: with nothing running the queue, every
        turn was queued with all the turns before it, and the file grew with the square of the
        session. A job holds only what no earlier pending job of its session (nor the cursor)
        covers; the model is asked exactly what it was asked turn by turn, the queue replays
        the same after a restart, and a turn read already queues nothing."""
        fruits = ["figs", "kiwis", "plums", "limes"]
        tails = [[line for n in range(k + 1) for line in turn(n, fruits[n])] for k in range(4)]
        waiting = CaptureRunner(service, CaptureQueue(root), None)  # a hook: queues only
        for tail in tails:
            await waiting.enqueue(job("s14", entries_of(tmp_path, tail)))
        await waiting.close()
        text = (root / CAPTURE_FILE).read_text("utf-8")
        assert [text.count(f"I like {fruit}") for fruit in fruits] == [1, 1, 1, 1]
        reopened = CaptureQueue(root)  # a kill now: the same jobs, the same messages
        assert [p.id for p in reopened.pending()] == [f"s14:a{n}" for n in range(4)]
        model = ScriptedModel()
        runner = CaptureRunner(service, reopened, model)
        assert await runner.run_once() == 4
        # as when each turn ran before the next was queued (the whole tail in each job)
        alone = ScriptedModel()
        other = tmp_path / "other"
        store = Store.open(other, holder={"pid": 0, "kind": "test"})
        each = CaptureRunner(MemoryService(store, Settings()), CaptureQueue(other), alone)
        for tail in tails:
            await each.enqueue(job("s14", entries_of(tmp_path, tail)))
            assert await each.run_once() == 1
        await each.close()
        await each.service.close()
        await store.close()
        assert model.asked == alone.asked
        assert [sum(f"I like {f}" in a for a in model.asked) for f in fruits] == [1, 1, 1, 1]
        assert runner.queue.cursor("s14")["last_entry_id"] == "a3"
        # Stop again, nothing new: read already, nothing is queued
        again = await runner.enqueue(job("s14", entries_of(tmp_path, tails[-1])))
        assert again == {"queued": "s14:a3", "new": False}
        assert runner.queue.pending() == []
        # a turn after a finished one holds its own messages only (from the cursor on)
        more = [*tails[-1], *turn(4, "pears")]
        await runner.enqueue(job("s14", entries_of(tmp_path, more)))
        [pending] = runner.queue.pending()
        assert [e["text"] for e in pending.job["entries"]] == [
            "",
            "I like pears",
            "Noted, pears it is.",
        ]
        assert await runner.run_once() == 1
        assert "I like pears" in model.asked[-1] and "I like limes" not in model.asked[-1]
        await runner.close()

    async def test_a_turn_whose_job_died_is_still_read_with_the_next_turn(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """A job that dies leaves the cursor before its turn, and the next turn's job (the
        transcript's tail) read that turn again: a turn lost to a flaky endpoint came back with
        the next. Turn 2's job, queued while turn 1's waited, held only its own messages, so turn
        1 was never read. The dead job's messages go to that next job, the same after a replay
        and after a rewrite of the file (never twice)."""
        one = turn(1, "figs")
        waiting = CaptureRunner(service, CaptureQueue(root), None)  # a hook: queues only
        await waiting.enqueue(job("s16", entries_of(tmp_path, one)))
        await waiting.enqueue(job("s16", entries_of(tmp_path, [*one, *turn(2, "kiwis")])))
        await waiting.close()
        # turn 1's job dies; turn 2's first attempt fails too (the endpoint still flaky)
        failing = CaptureRunner(service, CaptureQueue(root), ScriptedModel(fail=MAX_ATTEMPTS + 1))
        for _ in range(MAX_ATTEMPTS):
            for pending in failing.queue.pending():
                pending.retry_at = 0
            await failing.run_once()
        assert failing.queue.dead == 1 and [p.id for p in failing.queue.pending()] == ["s16:a2"]
        await failing.close()
        for replayed in (CaptureQueue(root), CaptureQueue(root)):  # a kill; then a rewrite
            [pending] = replayed.pending()
            said = [entry["text"] for entry in pending.job["entries"]]
            assert [said.count(f"I like {f}") for f in ("figs", "kiwis")] == [1, 1]
            replayed.erase(lambda job: False, [])  # the file rewritten (nothing erased)
            replayed.close()
        model = ScriptedModel()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        runner.queue.pending()[0].retry_at = 0  # (the delay, fast-forwarded)
        assert await runner.run_once() == 1
        assert "I like figs" in model.asked[-1] and "I like kiwis" in model.asked[-1]
        assert {"The user likes figs", "The user likes kiwis"} <= (await _memories(service)).keys()
        await runner.close()

    async def test_a_session_runs_in_queue_order_when_the_clock_went_back_between_turns(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """The clock stepped back (an NTP correction) between two Stop hooks of one session:
        jobs were ordered by the time they were queued, so turn 2's job (holding both turns)
        ran first and moved the cursor past both, then turn 1's found no cursor in its own
        messages, read figs again (a second extraction of one turn) and moved the cursor back.
        The queue's own order is the order the turns were queued."""
        model = ScriptedModel()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        real, back = service.clock, [0]
        service.clock = lambda: real() - back[0]  # it ticks on (a pass waits for a tick)
        one = turn(1, "figs")
        await runner.enqueue(job("s8", entries_of(tmp_path, one)))
        back[0] = 60_000  # a minute back
        await runner.enqueue(job("s8", entries_of(tmp_path, [*one, *turn(2, "kiwis")])))
        assert [p.id for p in runner.queue.pending()] == ["s8:a1", "s8:a2"]
        assert await runner.run_once() == 2
        assert sum("I like figs" in asked for asked in model.asked) == 1
        assert runner.queue.cursor("s8")["last_entry_id"] == "a2"
        reopened = CaptureQueue(root)  # the order survives a restart too
        assert reopened.cursor("s8")["last_entry_id"] == "a2"
        reopened.close()
        service.clock = real
        await runner.close()

    async def test_a_dead_job_outlives_the_queues_compaction(
        self,
        service: MemoryService,
        root: Path,
        tmp_path: Path,
    ) -> None:
        """A dead job is kept in the file for a person. Compaction (nothing pending, the file
        grown) rewrote the file to the sessions' cursors alone, and the dead turn was gone."""
        runner = CaptureRunner(service, CaptureQueue(root), ScriptedModel(fail=MAX_ATTEMPTS))
        await runner.enqueue(job("s8", entries_of(tmp_path, turn(1, "dates"))))
        for _ in range(MAX_ATTEMPTS):
            for waiting in runner.queue.pending():
                waiting.retry_at = 0
            await runner.run_once()
        assert runner.queue.dead == 1
        await runner.enqueue(job("s9", entries_of(tmp_path, turn(1, "limes"))))
        assert await runner.run_once() == 1  # then compacted: nothing is pending
        await runner.close()
        assert "I like dates" in (root / CAPTURE_FILE).read_text()
        replayed = CaptureQueue(root)
        assert (replayed.dead, replayed.pending()) == (1, [])
        assert replayed.cursor("s9")["last_entry_id"] == "a1"
        replayed.close()

    async def test_a_finished_turns_words_leave_the_queue_file_once_it_is_idle(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """The queue file kept every finished turn's messages (and the memories the model was
        shown) until it passed 1 MB: weeks of a person's conversation beside their memories,
        still there after they deleted a memory or erased a person. Once nothing is pending it
        keeps the sessions' cursors (and dead jobs) only."""
        runner = CaptureRunner(service, CaptureQueue(root), ScriptedModel())
        await runner.enqueue(job("s8", entries_of(tmp_path, turn(1, "figs"))))
        assert "I like figs" in (root / CAPTURE_FILE).read_text()
        assert await runner.run_once() == 1
        kept = (root / CAPTURE_FILE).read_text()
        assert "figs" not in kept
        await runner.enqueue(job("s8", entries_of(tmp_path, [*turn(1, "figs"), *turn(2, "kiwis")])))
        assert await runner.run_once() == 1
        await runner.close()
        assert "kiwis" not in (root / CAPTURE_FILE).read_text()
        replayed = CaptureQueue(root)
        assert replayed.cursor("s8")["last_entry_id"] == "a2" and replayed.pending() == []
        replayed.close()
        assert (await _memories(service)).keys() >= {
            "The user likes figs",
            "The user likes kiwis",
        }

    async def test_a_turn_is_queued_while_another_turns_extraction_waits_for_its_model(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """Several agents at once: a Stop hook's `POST /capture` (3 s budget) arrives while the
        runner waits on the model for another session's turn. Queueing the turn is one fsynced
        line; it must not wait for that extraction (tens of seconds with a slow endpoint), or
        the hook runs out of time on every turn that ends meanwhile."""

        class HeldModel(ScriptedModel):
            def __init__(self) -> None:
                super().__init__()
                self.entered, self.release = asyncio.Event(), asyncio.Event()

            async def complete(self, system_prompt: str, user_text: str) -> str:
                self.entered.set()
                await self.release.wait()
                return await super().complete(system_prompt, user_text)

        model = HeldModel()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        await runner.enqueue(job("s1", entries_of(tmp_path, turn(1, "figs"))))
        running = asyncio.create_task(runner.run_once())
        await asyncio.wait_for(model.entered.wait(), 10)
        try:
            queued = await asyncio.wait_for(
                runner.enqueue(job("s2", entries_of(tmp_path, turn(2, "kiwis")))), 10
            )
        finally:
            model.release.set()
        assert queued == {"queued": "s2:a2", "new": True}
        assert await running == 2  # the turn queued meanwhile is run in the same round
        assert (await _memories(service)).keys() >= {"The user likes figs", "The user likes kiwis"}
        assert runner.queue.pending() == []
        assert {
            r["op"] for r in map(json.loads, (root / CAPTURE_FILE).read_text().splitlines())
        } == {"cursor"}  # compacted once idle: no turn's words left behind
        await runner.close()

    async def test_a_job_stopped_after_its_decision_is_finished_without_writing_twice(
        self, service: MemoryService, root: Path, tmp_path: Path
    ) -> None:
        """The queue as a kill right after the last write leaves it (the `done` line never
        written): the restart finishes the job from its journal, writing nothing again."""
        await catalog.call(service, "memory::save", {"text": GARDEN})
        model = ScriptedModel()
        runner = CaptureRunner(service, CaptureQueue(root), model)
        runner.queue.compact = lambda: False  # type: ignore[method-assign]  # killed before it
        await runner.enqueue(job("s5", entries_of(tmp_path, turn(1, "quinces", garden=True))))
        await runner.run_once()
        await runner.close()
        before = await _memories(service)
        assert before[GARDEN]["corroboration"] == 1
        path = root / CAPTURE_FILE
        lines = path.read_text().splitlines()
        assert json.loads(lines[-1])["op"] == "done"
        path.write_text("\n".join(lines[:-1]) + "\n")  # the kill: no done line
        again = CaptureRunner(service, CaptureQueue(root), model)
        assert again.queue.pending()[0].decided is not None
        assert await again.run_once() == 1
        assert len(model.asked) == 1  # the recorded reply was used, the model not asked again
        assert await _memories(service) == before
        assert again.queue.pending() == []
        assert again.queue.cursor("s5")["last_entry_id"] == "a1"
        await again.close()


def _op(line: str) -> str:
    try:
        return str(json.loads(line)["op"])
    except ValueError:
        return "torn"  # killed mid-line: replay skips it


def test_sigkill_at_random_moments_loses_no_turn_and_runs_none_twice(tmp_path: Path) -> None:
    """Sixty sessions' turns queued; a worker draining them is SIGKILLed at random moments
    and started again until it drains: every fact is saved once (corroboration 0), and the
    garden memory every turn restates is reinforced exactly once per turn."""
    root = tmp_path / "data"
    sessions = 60

    async def seed() -> None:
        store = Store.open(root, holder={"pid": 0, "kind": "test"})
        service = MemoryService(store, Settings())
        await catalog.call(service, "memory::save", {"text": GARDEN})
        runner = CaptureRunner(service, CaptureQueue(root), None)
        for n in range(sessions):
            lines = turn(n, f"fruit{n}", garden=True)
            entries = read_transcript(write_transcript(tmp_path / f"t{n}.jsonl", lines), limit=9)
            await runner.enqueue(job(f"s{n}", entries))
        await runner.close()
        await service.close()
        await store.close()

    import asyncio

    asyncio.run(seed())
    env = {**os.environ, "MEMORY_EMBEDDER": "none"}
    argv = [sys.executable, "-m", "tests.capture_worker", str(root)]
    cwd = Path(__file__).resolve().parent.parent
    rng = random.Random(15)
    kills = 0
    moments: list[tuple[int, str]] = []  # (jobs done, the last step on disk) at each kill
    for _ in range(60):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=cwd)
        try:
            assert read_line(proc, time.monotonic() + 60) == "ready"
            if kills < 8:
                time.sleep(rng.uniform(0.05, 0.4))  # the crash's moment, not a wait for work
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                kills += 1
                steps = [_op(line) for line in (root / CAPTURE_FILE).read_text().splitlines()]
                done = steps.count("done")
                moments.append((done, steps[-1]))
                continue
            assert read_line(proc, time.monotonic() + 120) == "drained"
            assert proc.wait(timeout=30) == 0
            break
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            assert proc.stdout is not None
            proc.stdout.close()

    async def check() -> None:
        store = Store.open(root, holder={"pid": 0, "kind": "test"})
        service = MemoryService(store, Settings())
        memories = await _memories(service)
        queue = CaptureQueue(root)
        assert queue.pending() == [] and queue.dead == 0
        for n in range(sessions):
            assert memories[f"The user likes fruit{n}"]["corroboration"] == 0
            assert queue.cursor(f"s{n}")["last_entry_id"] == f"a{n}"
        assert memories[GARDEN]["corroboration"] == sessions
        queue.close()
        await service.close()
        await store.close()

    asyncio.run(check())
    assert kills == 8
    # The kills landed while jobs were running. Whether one lands in the sub-millisecond moment
    # between a decision and its done line depends on the machine's speed, so that moment is
    # tested deterministically instead (`test_a_job_stopped_after_its_decision_is_finished_…`).
    assert any(0 < done < sessions for done, _ in moments)
