"""A hook never holds the agent up: when the server holding the data dir accepts the call and never
answers, `memory-worker hook` gives up within its budget, prints nothing and exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from memory_worker.adapters.agent_hooks import HOOK_BUDGET_S
from memory_worker.adapters.doors import FORWARD_TIMEOUT_S
from memory_worker.storage.store import Store

from .served import ENV


async def test_a_server_that_never_answers_costs_the_agent_at_most_the_budget(
    tmp_path: Path,
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    hung = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = hung.sockets[0].getsockname()[1]
    data = tmp_path / "data"
    holder = {"pid": os.getpid(), "kind": "serve", "url": f"http://127.0.0.1:{port}"}
    store = Store.open(data, holder=holder)
    try:
        prompt = {
            "session_id": "s",
            "transcript_path": str(tmp_path / "t.jsonl"),
            "cwd": str(tmp_path),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "what do I drink in the morning",
        }
        argv = [sys.executable, "-m", "memory_worker", "hook", "user-prompt-submit"]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            "--data-dir",
            str(data),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(prompt).encode())
        proc.stdin.close()
        # A forwarded call alone would wait FORWARD_TIMEOUT_S (300 s): done well within 60 s
        # (a cold interpreter on a loaded machine included) means the budget cut it.
        assert FORWARD_TIMEOUT_S > 60
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0 and out == b""
        assert b"hook_timed_out" in err, err.decode()
        assert f'"budget_s": {HOOK_BUDGET_S}'.encode() in err
        assert accepted, "the hook reached the server that holds the data dir"
    finally:
        for writer in accepted:
            writer.close()
        hung.close()
        await hung.wait_closed()
        await store.close()


async def test_a_read_that_never_returns_costs_the_agent_at_most_the_budget(
    tmp_path: Path,
) -> None:
    """Work stuck in a worker thread (a transcript on a stalled mount; here a FIFO nobody writes)
    cannot be cancelled, and the interpreter's way out waits for that thread: the hook still ends
    once its budget is spent, having printed nothing."""
    transcript = tmp_path / "transcript.jsonl"
    os.mkfifo(transcript)
    stop = {
        "session_id": "s",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "hook_event_name": "Stop",
    }
    argv = [sys.executable, "-m", "memory_worker", "hook", "stop"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        "--data-dir",
        str(tmp_path / "data"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(stop).encode()), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0 and out == b""
    assert b"hook_timed_out" in err, err.decode()
