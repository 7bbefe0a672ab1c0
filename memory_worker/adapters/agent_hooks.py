"""Coding agents' native hooks as `memory-worker hook EVENT`: Claude Code and Codex command hooks.

The agent runs the command with its hook JSON on stdin (`hook_event_name`, `session_id`, `cwd`, and
per event `tool_name`/`tool_input`, …) and reads the reply from stdout. Each event is one row of
`EVENTS`: a handler that turns the agent's payload into catalog calls (`catalog.call`, in-process on
the data dir) and the agent's documented reply. Fail-open by construction: a hook never blocks or
breaks the agent — bad input, a data dir held by another process, any error: nothing is printed,
the exit status is 0, and the reason goes to stderr as a log line.

`pre-tool-use` (PreToolUse): the lesson cards the tool call meets, each revision once per agent
session, as `hookSpecificOutput.additionalContext`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import structlog

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import WorkerError

__all__ = ["EVENTS", "HookEvent", "HookOptions", "add_parser", "run", "workspace_root"]

log = structlog.get_logger(__name__)

MAX_INPUT_BYTES = 8 * 1024 * 1024  # a Write of a large file still fits; beyond, the call is skipped
PROJECT_DIR_ENV = "CLAUDE_PROJECT_DIR"  # what Claude Code sets for hook commands


@dataclass(frozen=True, slots=True)
class HookOptions:
    bank: str | None = None
    workspace_root: str | None = None


Reply = dict[str, Any] | None  # the JSON printed on stdout; None prints nothing
Handler = Callable[[MemoryService, Mapping[str, Any], HookOptions], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class HookEvent:
    """One agent hook event: its command name, the event name agents send and expect back, and
    the handler that answers it (None: nothing to say)."""

    name: str
    agent_event: str
    help: str
    handle: Handler


def workspace_root(cwd: str | None, explicit: str | None, env: Mapping[str, str]) -> str | None:
    """What anchors are relative to: `--workspace-root`, else `$CLAUDE_PROJECT_DIR`, else the
    nearest folder above `cwd` holding `.git`, else `cwd` itself."""
    if explicit:
        return explicit
    if env.get(PROJECT_DIR_ENV):
        return env[PROJECT_DIR_ENV]
    if not cwd:
        return None
    start = Path(cwd)
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return str(folder)
    return cwd


async def _pre_tool_use(
    service: MemoryService, payload: Mapping[str, Any], options: HookOptions
) -> dict[str, Any] | None:
    tool = payload.get("tool_name")
    arguments = payload.get("tool_input")
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        log.warning("hook_input_unusable", hook="PreToolUse", detail="no tool_name/tool_input")
        return None
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    session = payload.get("session_id")
    step = payload.get("tool_use_id")
    request: dict[str, Any] = {
        "tool": tool,
        "arguments": arguments,
        "cwd": cwd,
        "workspace_root": workspace_root(cwd, options.workspace_root, os.environ),
        "conversation": session if isinstance(session, str) and session else None,
        "step": step if isinstance(step, str) and step else None,
    }
    if options.bank:
        request["bank"] = options.bank
    caller = Caller.internal("hook", session_id=request["conversation"])
    result = await catalog.call(service, "memory::lessons::match", request, caller)
    message = result.get("message")
    if not message:
        return None
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": message}}


EVENTS: dict[str, HookEvent] = {
    event.name: event
    for event in (
        HookEvent(
            "pre-tool-use",
            "PreToolUse",
            "before a tool runs: the lesson cards its paths and names meet, as additionalContext",
            _pre_tool_use,
        ),
    )
}


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    hook = sub.add_parser(
        "hook",
        parents=[common],
        help="answer a coding agent's hook (Claude Code, Codex) from stdin",
        description="Read the agent's hook JSON on stdin and print its reply on stdout. Never "
        "fails the agent: on any problem it prints nothing and exits 0. Events: "
        + "; ".join(f"{e.name} ({e.agent_event}): {e.help}" for e in EVENTS.values()),
    )
    hook.add_argument("event", choices=sorted(EVENTS), help="the hook event")
    hook.add_argument("--bank", help="bank to read (default: the configured default bank)")
    hook.add_argument(
        "--workspace-root",
        help=f"what anchors are relative to (default: ${PROJECT_DIR_ENV}, else the git root "
        "above the hook's cwd, else its cwd)",
    )


def _read_payload(stream: TextIO) -> dict[str, Any] | None:
    raw = stream.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        log.warning("hook_input_too_large", limit_bytes=MAX_INPUT_BYTES)
        return None
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        log.warning("hook_input_not_json", error=str(exc))
        return None
    if not isinstance(payload, dict):
        log.warning("hook_input_not_an_object")
        return None
    return payload


WithService = Callable[[argparse.Namespace, str, Callable[[MemoryService], Awaitable[int]]], Any]


async def run(
    args: argparse.Namespace,
    with_service: WithService,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """`memory-worker hook EVENT`: always exit status 0; a reply only when there is one."""
    event = EVENTS[args.event]
    out = stdout or sys.stdout
    payload = _read_payload(stdin or sys.stdin)
    if payload is None:
        return 0
    sent = payload.get("hook_event_name")
    if isinstance(sent, str) and sent != event.agent_event:
        log.warning("hook_event_mismatch", command=event.name, received=sent)
        return 0
    options = HookOptions(bank=args.bank, workspace_root=args.workspace_root)

    async def work(service: MemoryService) -> int:
        reply = await event.handle(service, payload, options)
        if reply is not None:
            out.write(json.dumps(reply, ensure_ascii=False) + "\n")
            out.flush()
        return 0

    # Fail-open: whatever happens, the agent's tool call goes ahead (without memory).
    try:
        await with_service(args, f"memory-worker hook {event.name}", work)
    except WorkerError as exc:  # a held data dir, a bad payload: expected, one line
        log.warning("hook_failed", hook=event.agent_event, error=str(exc))
    except Exception:  # a bug: its traceback on stderr, still never the agent's problem
        log.exception("hook_failed", hook=event.agent_event)
    return 0
