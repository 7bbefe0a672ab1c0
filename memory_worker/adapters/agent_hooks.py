"""Coding agents' native hooks as `memory-worker hook EVENT`: Claude Code and Codex command hooks.

The agent runs the command with its hook JSON on stdin (`hook_event_name`, `session_id`, `cwd`,
`transcript_path`, and per event `prompt`, `tool_name`/`tool_input`, …) and reads the reply from
stdout. Each event is one row of `EVENTS`: a handler that turns the agent's payload into catalog
calls through the data dir's door (in-process, or forwarded to the server that holds it) and the
agent's documented reply. Fail-open by construction: a hook never blocks or breaks the agent — bad
input, a data dir held by a process with no URL, a server that does not answer, any error, or more
than `budget_s` spent: nothing is printed, the exit status is 0, and the reason goes to stderr as
a log line.

- `session-start` (SessionStart): the bank's memory section (header + rules), exactly as
  `memory::preview` renders it for a new session, as `hookSpecificOutput.additionalContext`.
- `user-prompt-submit` (UserPromptSubmit): the memories recalled for the prompt, the `<memory>`
  message `memory::preview` renders for it, as `additionalContext` — each memory revision once
  per agent session (after /clear or a compaction, SessionStart hands the standing ones anew).
- `pre-tool-use` (PreToolUse): the lesson cards the tool call meets, each revision once per agent
  session (a subagent's context counting as its own), as `additionalContext`.
- `stop` (Stop): the turn's messages, read from the agent's transcript file (a Codex payload
  naming none: the session's rollout, else the payload's `last_assistant_message`), handed to
  capture (`harness.capture`); it prints nothing, so it never asks the agent to go on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from memory_worker.adapters.doors import Door
from memory_worker.app.caller import Caller
from memory_worker.core.errors import InvalidInput, WorkerError
from memory_worker.core.names import check_name
from memory_worker.core.patch_headers import DIFF_HEADERS, PATCH_FILE_HEADERS
from memory_worker.core.payload import loads
from memory_worker.storage.logger import get_logger

__all__ = [
    "EVENTS",
    "HookEvent",
    "HookOptions",
    "add_parser",
    "bank_option",
    "run",
    "workspace_root",
]

log = get_logger(__name__)

MAX_INPUT_BYTES = 8 * 1024 * 1024  # a Write of a large file still fits; beyond, the call is skipped
PROJECT_DIR_ENV = "CLAUDE_PROJECT_DIR"  # what Claude Code sets for hook commands
# The agent waits on these hooks before its prompt or tool goes on: what memory cannot say in this
# long is left unsaid (the agent's own hook timeout is far longer, 60 s by default).
HOOK_BUDGET_S = 3.0
# A data dir held by another short command is waited for this long at most: past a recall
# catching its bank's embeddings up (`cli.CATCH_UP_S`, plus loading the model), which a coding
# agent's parallel tool calls (an MCP recall beside a PreToolUse hook) run into. Waited for 1 s,
# such a hook came back empty.
HOOK_LOCK_WAIT_S = 2.0
# A Stop hook's turn in one request: a server takes at most 1 MiB (`standalone.MAX_BODY_BYTES`);
# this leaves room for the job's other fields and its escaping.
MAX_JOB_BYTES = 768 * 1024
# What lesson matching reads of one tool argument (`search.toolcall.MAX_SCAN_CHARS_PER_VALUE`): the
# rest of a large Write's content matches nothing, and pushed the request past that 1 MiB.
MAX_ARGUMENT_CHARS = 8_192
# What one forwarded request may carry of the prompt, or of all a tool call's strings together: a
# character takes at most 6 bytes in it (a control character's `\uXXXX`), so this fits the 1 MiB a
# server takes. Past it a pasted log, or a MultiEdit of many long edits, was refused whole with a
# server running (no memory, no card) where the same call in-process got them.
MAX_REQUEST_CHARS = MAX_JOB_BYTES // 6
# SessionStart's `source` values after which the session no longer holds what it was told.
RESET_SOURCES = frozenset({"clear", "compact"})
# Lines naming a patch's files (Codex apply_patch, unified diffs), kept past that cut.
PATCH_HEADERS = (*PATCH_FILE_HEADERS, *DIFF_HEADERS)
MAX_HEADER_CHARS = 1_100  # a header naming a path matching still reads (1024 characters)
MAX_PATCH_FILES = 256
# The most characters of context one hook hands the agent. Past 10,000 characters Claude Code
# saves a hook's context to a file and shows the model a 2 KB preview of it (anthropics/
# claude-code#94358, #91614); Codex does the same past 2,500 tokens by default (openai/codex
# #22861). Under both for English text; `--max-context-chars` moves it (a Codex hook given a
# larger `additionalContextLimit`, or a language that costs more tokens a character).
MAX_CONTEXT_CHARS = 9_000


@dataclass(frozen=True, slots=True)
class HookOptions:
    bank: str | None = None
    workspace_root: str | None = None
    max_context_chars: int = MAX_CONTEXT_CHARS


Reply = dict[str, Any] | None  # the JSON printed on stdout; None prints nothing
Handler = Callable[[Door, Mapping[str, Any], HookOptions], Awaitable[Reply]]


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
        # Read as `--data-dir` is: a tilde no shell expanded (`--workspace-root=~/repo`) and a
        # relative path (`.`, from where the agent runs its hooks) name a folder. Passed on as
        # given, neither is absolute, so matching took no root and fell back to the hook's cwd.
        return str(Path(explicit).expanduser().absolute())
    if env.get(PROJECT_DIR_ENV):
        return env[PROJECT_DIR_ENV]
    if not cwd:
        return None
    start = Path(cwd)
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return str(folder)
    return cwd


def _context(event: str, text: str | None) -> Reply:
    """The reply both agents document for added context; None (print nothing) when empty."""
    if not text or not text.strip():
        return None
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def _session(payload: Mapping[str, Any]) -> str | None:
    session = payload.get("session_id")
    return session if isinstance(session, str) and session else None


def _caller(payload: Mapping[str, Any]) -> Caller:
    return Caller.internal("hook", session_id=_session(payload))


async def _preview(
    door: Door,
    payload: Mapping[str, Any],
    options: HookOptions,
    query: str,
    *,
    handed: bool = False,
    fresh: bool = False,
    max_chars: int | None = None,
) -> dict[str, Any]:
    """`memory::preview` for the agent's session, its section and message each within
    `max_chars` (default: the hook's cap). `handed`: the memories in its `message` go to the
    session, so they are recorded, and the ones it was handed already are left out (the
    session's transcript still holds them); `fresh`: its context was just reset, so what it was
    handed before is forgotten first."""
    limit = options.max_context_chars if max_chars is None else max_chars
    request: dict[str, Any] = {"query": query, "max_chars": limit}
    if options.bank:
        request["bank"] = options.bank
    session = _session(payload)
    if handed and session is not None:
        request |= {"conversation": session, "fresh": fresh}
    return await door.call("memory::preview", request)


async def _session_start(
    door: Door, payload: Mapping[str, Any], options: HookOptions
) -> dict[str, Any] | None:
    """Startup and resume: the memory section once, as a new session's system prompt gets it.
    After /clear or a compaction the session lost what it was told: the section, and its standing
    memories handed anew (the memories it was handed before count as not handed any more; its
    lesson cards still count, seed 002: a compaction does not reset them)."""
    section = (await _preview(door, payload, options, "")).get("system_prompt_section") or ""
    if payload.get("source") not in RESET_SOURCES:
        return _context("SessionStart", section)
    # The memories share the hook's cap with the section: only what the agent is shown is
    # recorded as handed (a memory cut here would never be handed again in this session).
    # A section that fills the cap leaves them to the next prompts' recall (the session's record
    # is still cleared).
    room = max(1, options.max_context_chars - len(section) - 2)
    preview = await _preview(door, payload, options, "", handed=True, fresh=True, max_chars=room)
    parts = (section, preview.get("message"))
    return _context("SessionStart", "\n\n".join(p for p in parts if p and p.strip()))


async def _user_prompt_submit(
    door: Door, payload: Mapping[str, Any], options: HookOptions
) -> dict[str, Any] | None:
    """The memories recalled for the prompt that the session was not handed yet (at their
    current revision): each prompt of a long session used to repeat the same block."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        log.warning("hook_input_unusable", hook="UserPromptSubmit", detail="no prompt")
        return None
    if len(prompt) > MAX_REQUEST_CHARS:  # its beginning and its end: where a log's question is
        half = MAX_REQUEST_CHARS // 2
        prompt = f"{prompt[:half]}\n{prompt[-half:]}"
    preview = await _preview(door, payload, options, prompt, handed=True)
    return _context("UserPromptSubmit", preview.get("message"))


async def _stop(door: Door, payload: Mapping[str, Any], options: HookOptions) -> None:
    """The turn just finished: its messages (the transcript's tail; the queue's cursor keeps
    what was captured before) go to capture. Nothing is printed: a Stop hook's output could
    only ask the agent to keep going.

    Codex sends `transcript_path: null` when it cannot name the session's rollout: the rollout
    is looked up where Codex keeps it, and a session that has none (an ephemeral one) gives
    the words its payload carries (`last_assistant_message`). Such a turn was dropped."""
    session = _session(payload)
    if session is None:
        log.warning("hook_input_unusable", hook="Stop", detail="no session_id")
        return None
    # Here, not at the top: it compiles the redaction patterns, which only this hook needs (and
    # the capture queue's module, which the other hooks never load).
    from memory_worker.adapters.transcripts import codex_rollout, read_transcript, said
    from memory_worker.storage.capture import MAX_JOB_ENTRIES

    given = payload.get("transcript_path")
    path: Path | None = None
    if isinstance(given, str) and given:
        path = Path(given).expanduser()
    elif given is None:  # null, or not sent: not a path that is wrong, one not given
        path = await asyncio.to_thread(codex_rollout, session, os.environ)
    entries: list[dict[str, Any]] = []
    if path is not None:
        try:
            entries = await asyncio.to_thread(read_transcript, path, limit=MAX_JOB_ENTRIES)
        except OSError as exc:
            log.warning("hook_transcript_unreadable", hook="Stop", error=str(exc))
            return None
    else:
        own = said(payload.get("turn_id"), "assistant", payload.get("last_assistant_message"))
        entries = [own] if own is not None else []
        if not entries:
            log.warning("hook_input_unusable", hook="Stop", detail="no transcript to read")
    entries = _newest_fitting(entries, MAX_JOB_BYTES)
    if not entries:
        return None
    job: dict[str, Any] = {"session_id": session, "entries": entries}
    if options.bank:
        job["bank"] = options.bank
    queued = await door.capture(job)
    if queued.get("queued") is None:  # capture is off (no endpoint): nothing was kept
        log.info("hook_capture_off", hook="Stop", detail=queued.get("detail"))
        return None
    log.info("hook_captured", hook="Stop", queued=queued.get("queued"), via=door.remote or "dir")
    return None


def _newest_fitting(entries: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The newest `entries` whose JSON fits in `limit` bytes. A long coding session's last 200
    messages run past what a server takes in one request, which refused the whole turn on every
    Stop from then on; the oldest messages (context, most likely captured before) are left out.
    Not the person's last message: when none of theirs fits, it is kept in place of the oldest
    that did (a turn of long replies pushed its prompt out, and extraction keeps only what the
    person said)."""
    sizes = [_entry_bytes(entry) for entry in entries]
    start, size = len(entries), 0
    while start > 0 and size + sizes[start - 1] <= limit:
        start -= 1
        size += sizes[start]
    newest = entries[start:]
    if start == 0 or any(entry.get("role") == "user" for entry in newest):
        return newest
    said = next((i for i in range(start - 1, -1, -1) if entries[i].get("role") == "user"), None)
    if said is None:
        return newest
    while newest and size + sizes[said] > limit:  # room for it: the oldest others leave
        size -= sizes[len(entries) - len(newest)]
        newest = newest[1:]
    return [entries[said], *newest] if size + sizes[said] <= limit else newest


def _entry_bytes(entry: dict[str, Any]) -> int:
    return len(json.dumps(entry, ensure_ascii=False).encode("utf-8", "replace")) + 2


# Steps (a folder of a path, with its lstat; a link's resolution counted by its depth) spent
# respelling one tool call's paths: on the hook's loop, where its budget cannot cut a blocking
# call short. Past them, the rest of the call's paths are matched as given.
MAX_RESPELL_LOOKUPS = 2_048


def _spelled_under(path: str, root: str, room: list[int] | None = None) -> str:
    """`path` spelled under `root` when it reaches the root through another spelling of it: a
    symlink to the checkout (`~/code` → `/Volumes/work/code`), macOS's `/tmp` for `/private/tmp`,
    `$CLAUDE_PROJECT_DIR` one way and the tool's path the other. Matching is lexical (no file
    system in `search.toolcall`), so such a path left the root and met no card; the hook, which
    runs beside the files, looks. Only the root's part is respelled: a symlink inside the
    checkout keeps the name the call gave it, as a file anchor names it. `room`: the steps left
    for the call (`MAX_RESPELL_LOOKUPS`), spent here."""
    room = [MAX_RESPELL_LOOKUPS] if room is None else room
    if "\n" in path or len(path) > 1024 or not os.path.isabs(path):
        return path
    if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
        return path
    room[0] -= root.count(os.sep)  # the root's own resolution
    if room[0] < 0:
        return path
    try:
        parts = Path(path).parts
        found = _root_ancestor(parts, os.path.realpath(root), room)
        if found:
            return str(Path(root, *parts[found:]))
    except (OSError, ValueError):
        pass  # unreadable or malformed: matched as given
    return path


def _root_ancestor(parts: tuple[str, ...], real_root: str, room: list[int]) -> int:
    """How many of `parts` (an absolute path's) name the deepest ancestor whose real path is
    `real_root`; 0 for none, or past `room`, or through a link loop. Each ancestor's real path
    is resolved from the one above it, in one walk down: a realpath per ancestor resolves each
    again from the top, quadratic in the depth."""
    real, found, missing = parts[0], 0, False
    for depth in range(1, len(parts) - 1):  # the ancestors, not the path itself
        room[0] -= 1  # a step, with or without its look-up
        if room[0] < 0:
            return 0
        if parts[depth] == os.pardir:
            real, missing = os.path.dirname(real), False  # as realpath goes up a level
        else:
            real = os.path.join(real, parts[depth])
            if not missing:  # below a missing folder nothing exists: no look-up
                try:
                    link = stat.S_ISLNK(os.lstat(real).st_mode)
                except OSError:
                    link, missing = False, True
                if link:
                    room[0] -= real.count(os.sep)
                    real = os.path.realpath(real)
                    if room[0] < 0 or os.path.islink(real):  # a loop: nothing is reached
                        return 0
        if real == real_root:
            found = depth + 1  # the deepest one, as a look from the path upwards finds first
    return found


def _respelled(
    arguments: dict[str, Any], root: str, room: list[int] | None = None
) -> dict[str, Any]:
    """The call's top-level string arguments, and strings in a top-level list (`paths`), spelled
    under `root` (`_spelled_under`) within the call's `room` of look-ups; a command's text is
    matched as given."""
    room = [MAX_RESPELL_LOOKUPS] if room is None else room

    def respell(value: Any) -> Any:
        if isinstance(value, str):
            return _spelled_under(value, root, room)
        if isinstance(value, list):
            return [_spelled_under(v, root, room) if isinstance(v, str) else v for v in value]
        return value

    return {key: respell(value) for key, value in arguments.items()}


def _clipped(value: Any, room: list[int] | None = None) -> Any:
    """`value` with every string cut to what lesson matching reads of it, and all of them
    together to `MAX_REQUEST_CHARS` (`room`: what is left of it; the strings past it are cut to
    nothing: matching reads the call's text in order, and far less of it). The payload's nesting
    is bounded by `loads`."""
    room = [MAX_REQUEST_CHARS] if room is None else room
    if isinstance(value, str):
        clipped = _clip(value)[: room[0]]
        room[0] -= len(clipped)
        return clipped
    if isinstance(value, dict):
        return {key: _clipped(item, room) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item, room) for item in value]
    return value


def _clip(text: str) -> str:
    """`text` cut to `MAX_ARGUMENT_CHARS`, at a line end; past the cut, a patch or diff keeps
    its file headers: matching reads every one of them (`search.toolcall`), and a Codex
    apply_patch's second file often starts after a first file's long hunk."""
    if len(text) <= MAX_ARGUMENT_CHARS:
        return text
    head = text[:MAX_ARGUMENT_CHARS]
    if "*** Begin Patch" not in head and "\n+++ " not in text:
        return head
    cut = head.rfind("\n") + 1
    headers = [
        line
        for line in text[cut:].splitlines()
        if line.startswith(PATCH_HEADERS) and len(line) <= MAX_HEADER_CHARS
    ][:MAX_PATCH_FILES]
    return head[:cut] + "".join(f"{line}\n" for line in headers)


def _conversation(payload: Mapping[str, Any]) -> str | None:
    """What "once per conversation" counts for a tool call: the agent's session, or within it a
    subagent's own context. Claude Code sends a subagent's calls with the parent's `session_id`
    and an `agent_id`; the model there has seen none of the cards the main conversation was
    given, nor the main one those a subagent was given."""
    session = _session(payload)
    agent = payload.get("agent_id")
    if session is None or not isinstance(agent, str) or not agent:
        return session
    return f"{session}/agent/{agent}"


async def _pre_tool_use(
    door: Door, payload: Mapping[str, Any], options: HookOptions
) -> dict[str, Any] | None:
    tool = payload.get("tool_name")
    arguments = payload.get("tool_input")
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        log.warning("hook_input_unusable", hook="PreToolUse", detail="no tool_name/tool_input")
        return None
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    step = payload.get("tool_use_id")
    root = workspace_root(cwd, options.workspace_root, os.environ)
    if root and os.path.isabs(root):
        room = [MAX_RESPELL_LOOKUPS]  # the call's, shared by its cwd and its arguments
        cwd = _spelled_under(cwd, root, room) if cwd else cwd
        arguments = _respelled(arguments, root, room)
    request: dict[str, Any] = {
        "tool": tool,
        "arguments": _clipped(arguments),
        "cwd": cwd,
        # A root that is not absolute (a relative `cwd` it was found from) would be refused:
        # matching goes on without one, as it did.
        "workspace_root": root if root and os.path.isabs(root) else None,
        "conversation": _conversation(payload),
        "step": step if isinstance(step, str) and step else None,
    }
    if options.bank:
        request["bank"] = options.bank
    request["max_chars"] = options.max_context_chars
    result = await door.call("memory::lessons::match", request)
    return _context("PreToolUse", result.get("message"))


EVENTS: dict[str, HookEvent] = {
    event.name: event
    for event in (
        HookEvent(
            "session-start",
            "SessionStart",
            "a session starts, resumes, is cleared or compacted: the bank's rules section, as "
            "additionalContext",
            _session_start,
        ),
        HookEvent(
            "user-prompt-submit",
            "UserPromptSubmit",
            "the user sends a prompt: the memories recalled for it, as additionalContext",
            _user_prompt_submit,
        ),
        HookEvent(
            "pre-tool-use",
            "PreToolUse",
            "before a tool runs: the lesson cards its paths and names meet, as additionalContext",
            _pre_tool_use,
        ),
        HookEvent(
            "stop",
            "Stop",
            "the agent finished its turn: the turn's messages from the transcript, to capture "
            "(prints nothing)",
            _stop,
        ),
    )
}


def add_parser(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    hook = sub.add_parser(
        "hook",
        parents=[common],
        help="answer a coding agent's hook (Claude Code, Codex) from stdin",
        description="Read the agent's hook JSON on stdin and print its reply on stdout. Never "
        "fails the agent: on any problem at run time it prints nothing and exits 0 (only a "
        "command line it cannot parse exits 1). Events: "
        + "; ".join(f"{e.name} ({e.agent_event}): {e.help}" for e in EVENTS.values()),
    )
    hook.add_argument("event", choices=sorted(EVENTS), help="the hook event")
    hook.add_argument(
        "--bank", type=bank_option, help="bank to read (default: the configured default bank)"
    )
    hook.add_argument(
        "--workspace-root",
        help=f"what anchors are relative to (default: ${PROJECT_DIR_ENV}, else the git root "
        "above the hook's cwd, else its cwd)",
    )
    hook.add_argument(
        "--max-context-chars",
        type=_positive,
        default=MAX_CONTEXT_CHARS,
        help=f"the most characters of context one hook hands the agent (default "
        f"{MAX_CONTEXT_CHARS:,}: Claude Code shows the model only a preview past 10,000, Codex "
        "past its additionalContextLimit, 2,500 tokens by default)",
    )


def bank_option(value: str) -> str:
    """`--bank`'s value (the hooks', `memory-worker mcp`'s), checked as the command line is read:
    a name no bank can have (`Main`, or empty from an unset variable) is a typo in the agent's
    settings, which exits 1 for the agent to report. Checked while a hook ran, it failed open
    like a passing problem, and the hook went on giving no memory with nothing but a log line to
    say why; an empty one made `mcp` serve every bank instead of the one it was to be pinned to."""
    try:
        return check_name(value, "bank")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _read_payload(stream: TextIO | None) -> dict[str, Any] | None:
    if stream is None:  # run with its stdin closed: `sys.stdin` is None
        log.warning("hook_input_unreadable", error="stdin is closed")
        return None
    # The bytes, decoded as UTF-8 (what JSON is): the text layer decodes in the locale's encoding,
    # which on Windows (cp1252) garbles or refuses whatever is not ASCII in the prompt.
    reader = getattr(stream, "buffer", stream)  # a caller's StringIO has no bytes: read as text
    try:
        raw = reader.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            log.warning("hook_input_too_large", limit_bytes=MAX_INPUT_BYTES)
            return None
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
        # A byte order mark is no JSON: PowerShell pipes one once `$OutputEncoding` is UTF-8,
        # and a payload saved by a Windows editor starts with one (`call --batch` and `import`
        # read past it too).
        text = text.removeprefix("\ufeff")
    except OSError as exc:  # a read that fails (EIO, a non-blocking stdin): no input
        log.warning("hook_input_unreadable", error=str(exc))
        return None
    except UnicodeDecodeError as exc:  # other bytes than UTF-8 were sent
        log.warning("hook_input_not_utf8", error=str(exc))
        return None
    try:
        payload = loads(text, "hook input")  # bounded nesting: a deep payload is not a crash
    except InvalidInput as exc:
        log.warning("hook_input_not_json", error=str(exc))
        return None
    if not isinstance(payload, dict):
        log.warning("hook_input_not_an_object")
        return None
    return payload


WithDoor = Callable[..., Awaitable[int]]  # cli._with_door(args, command, work, *, caller, …)


async def run(
    args: argparse.Namespace,
    with_door: WithDoor,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    *,
    budget_s: float = HOOK_BUDGET_S,
    abandon: Callable[[], None] | None = None,
) -> int:
    """`memory-worker hook EVENT`: always exit status 0; a reply only when there is one.
    `abandon` (the program's own run) ends the process when the budget ran out: what was still
    running in a worker thread (a read of a stalled file) cannot be cancelled, and `asyncio.run`
    waits for every such thread on its way out."""
    event = EVENTS[args.event]
    out = stdout or sys.stdout
    payload = _read_payload(stdin or sys.stdin)
    if payload is None:
        return 0
    sent = payload.get("hook_event_name")
    if isinstance(sent, str) and sent != event.agent_event:
        log.warning("hook_event_mismatch", command=event.name, received=sent)
        return 0
    options = HookOptions(
        bank=args.bank,
        workspace_root=args.workspace_root,
        max_context_chars=args.max_context_chars,
    )

    async def work(door: Door) -> int:
        reply = await event.handle(door, payload, options)
        if reply is not None:
            # ASCII escapes: stdout is written in the locale's encoding (a Windows pipe's code
            # page), which cannot carry every character of a memory; the agent parses JSON.
            out.write(json.dumps(reply) + "\n")
            out.flush()
        return 0

    # Fail-open: whatever happens, the agent's prompt or tool call goes ahead (without memory).
    try:
        async with asyncio.timeout(budget_s):
            await with_door(
                args,
                f"memory-worker hook {event.name}",
                work,
                caller=_caller(payload),
                lock_wait_s=min(HOOK_LOCK_WAIT_S, budget_s),
                catch_up_s=0.0,  # the turn's budget is its query's: the CLI's recall catches up
            )
    except TimeoutError:
        log.warning("hook_timed_out", hook=event.agent_event, budget_s=budget_s)
        if abandon is not None:
            abandon()
    except WorkerError as exc:  # a held data dir, a bad payload: expected, one line
        log.warning("hook_failed", hook=event.agent_event, error=str(exc))
    except Exception:  # a bug: its traceback on stderr, still never the agent's problem
        log.exception("hook_failed", hook=event.agent_event)
    return 0
