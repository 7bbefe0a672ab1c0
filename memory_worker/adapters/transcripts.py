"""Coding agents' transcript files, read for capture: the user's and the assistant's words of a
session, oldest first, as `CaptureEntry` dicts (`entry_id`, `role`, `text`, `timestamp` ms).

- Claude Code writes one JSON object a line (`~/.claude/projects/<project>/<session>.jsonl`):
  `type` `user` / `assistant`, `uuid`, `timestamp` (ISO 8601), `message.content` a string or
  content blocks. Only `text` blocks are words: tool calls, tool results, thinking, images are
  not; sub-agent lines (`isSidechain`), meta lines (`isMeta`), compaction summaries
  (`isCompactSummary`), its own notices (`isApiErrorMessage`, model `<synthetic>`) and what the
  agent writes as a user line (`_AGENT_MARKS`) are left out, and so is what an IDE extension
  adds to a prompt (`_IDE_TAGS`).
- Codex writes a rollout JSONL: `{"type": "response_item", "payload": {"type": "message",
  "role", "content": [{"type": "input_text" | "output_text", "text"}]}}`, with a `timestamp`;
  entries are numbered by line, as it gives messages no ids. Its own user messages (environment
  context, AGENTS.md) are left out.
- A Codex hook whose `transcript_path` is null (Codex could not name the rollout) finds the
  session's rollout where Codex keeps them (`codex_rollout`); a session with none (ephemeral)
  gives the turn's words its Stop payload carries (`said`).

Every text is redacted here, before the job is written to the queue on disk or sent anywhere.
Unreadable lines are skipped (a line being written while we read is the usual one).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from memory_worker.core.payload import utf8_safe
from memory_worker.core.redact import redact

__all__ = ["MAX_TRANSCRIPT_BYTES", "codex_rollout", "read_transcript", "said"]

MAX_TRANSCRIPT_BYTES = 64 * 1024 * 1024  # read from the end at most this much of a long session
_TEXT_BLOCKS = ("text", "input_text", "output_text")
# What the agent itself writes as a user message, never the user's words: Claude Code's slash
# command echoes, `!` shell input and output, background task notices and system reminders;
# Codex's environment context, AGENTS.md text, interrupted-turn notes, `!` shell commands with their
# output, skill instructions, subagent notices and Stop hooks' continuation prompts (its
# contextual user fragments, `hook_prompt` carrying attributes). Read as the user's, they
# became memories of a shell listing or of the repository's instructions. Matched exactly at the
# start (a user's own message may begin with `<` or `#` too).
_AGENT_MARKS = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "<system-reminder>",
    "<environment_context>",
    "<user_instructions>",
    "<apps_instructions>",
    "<turn_aborted>",
    "# AGENTS.md instructions",
    "<user_shell_command>",
    "<skill>",
    "<subagent_notification>",
    "<hook_prompt",
    # Claude Code's note that the person stopped a turn (Codex's is `<turn_aborted>`).
    "[Request interrupted by user",
)
# What Claude Code's IDE extensions (VS Code, JetBrains) put beside the user's prompt, in its block
# or in the same text: the file open in the editor and the lines selected in it. Not the user's
# words: the file's path, and a copy of its code, went to extraction as something the user said.
# Cut out wherever they are; the user's words around them stay.
_IDE_TAGS = ("ide_opened_file", "ide_selection")
# The `message.model` Claude Code gives the assistant lines it writes itself.
_SYNTHETIC_MODEL = "<synthetic>"
_MAX_TEXT_CHARS = 20_000
# A message is redacted this far past the cut, then cut: a secret the cut would split (a
# database URL cut between its password and `@host`) no longer reads as one, and its part would
# reach the model. Not the whole message: a pasted log of megabytes would cost the hook seconds.
_REDACT_PAST_CUT_CHARS = 4096
# `core.models.MAX_TIME_MS` (9999-12-31T23:59:59.999Z), not imported: a Stop hook forwarded to
# the server never loads pydantic and the memory models it would bring.
_MAX_TIME_MS = 253_402_300_799_999
# Where Codex keeps its state (`$CODEX_HOME`, else `~/.codex`), and a session's rollout in it:
# `sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl`.
CODEX_HOME_ENV = "CODEX_HOME"
# Codex's session ids are UUIDs: nothing else is looked up (it is put in a file pattern, and only
# a whole UUID cannot also be the end of another session's file name).
_SESSION_ID = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}", re.IGNORECASE)


def _ms(value: object) -> int | None:
    """A line's time in ms, or None (the line is kept, undated) when it has none that a capture
    job can hold: unreadable, not finite (`1e400` decodes as infinity), before 1970 or after
    9999 — one such line must not fail the whole turn's capture."""
    ms: float
    if isinstance(value, int | float) and value > 0:
        ms = value
    elif isinstance(value, str) and value:
        try:
            ms = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000
        except ValueError:
            return None
    else:
        return None
    return int(ms) if 0 <= ms <= _MAX_TIME_MS else None


def _words(content: object) -> str:
    if isinstance(content, str):
        return _without_ide_context(content)
    if isinstance(content, list):
        # Block by block: the agent's own block beside the user's words leaves the words.
        return "\n".join(
            _without_ide_context(block["text"])
            for block in content
            if isinstance(block, dict)
            and block.get("type") in _TEXT_BLOCKS
            and isinstance(block.get("text"), str)
            and not block["text"].lstrip().startswith(_AGENT_MARKS)
        )
    return ""


def _without_ide_context(text: str) -> str:
    """`text` without its `_IDE_TAGS` elements (one pass per tag: a long message with many an
    opening tag and no closing one costs no more than reading it)."""
    if "<ide_" not in text:
        return text
    for tag in _IDE_TAGS:
        opening, closing = f"<{tag}>", f"</{tag}>"
        kept: list[str] = []
        at = 0
        while (start := text.find(opening, at)) != -1:
            end = text.find(closing, start)
            if end == -1:
                break  # no closing tag past here: nothing further is cut
            kept.append(text[at:start])
            at = end + len(closing)
        text = "".join(kept) + text[at:]
    return text


def _claude(line: dict[str, Any]) -> tuple[str, str, str, int | None] | None:
    kind = line.get("type")
    message = line.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        return None
    if line.get("isSidechain") or line.get("isMeta") or line.get("isCompactSummary"):
        return None
    # Claude Code's own notices written as assistant lines (an API error, "No response
    # requested.", a usage limit): never the model's words, they were captured as said by it.
    if line.get("isApiErrorMessage") or message.get("model") == _SYNTHETIC_MODEL:
        return None
    entry_id = line.get("uuid")
    if not isinstance(entry_id, str) or not entry_id:
        return None
    return entry_id, str(kind), _words(message.get("content")), _ms(line.get("timestamp"))


def _codex(line: dict[str, Any], number: int) -> tuple[str, str, str, int | None] | None:
    payload = line.get("payload")
    if line.get("type") != "response_item" or not isinstance(payload, dict):
        return None
    role = payload.get("role")
    if payload.get("type") != "message" or role not in ("user", "assistant"):
        return None
    entry_id = payload.get("id") if isinstance(payload.get("id"), str) else f"line-{number}"
    return str(entry_id), str(role), _words(payload.get("content")), _ms(line.get("timestamp"))


def _entry(line: object, number: int) -> dict[str, Any] | None:
    if not isinstance(line, dict):
        return None
    found = _claude(line) or _codex(line, number)
    return _message(*found) if found is not None else None


def _message(entry_id: str, role: str, text: str, at_ms: int | None) -> dict[str, Any] | None:
    """One message as a capture entry (redacted, cut), or None when it holds no words of the
    user's or the assistant's."""
    # A lone surrogate (a JavaScript string cut inside an emoji, written as a `\ud83d` escape)
    # has no UTF-8 form: the capture job holding it was refused whole, this turn and the next.
    text = utf8_safe(text).strip()
    if not text or text.startswith(_AGENT_MARKS) or text.startswith("<memory "):
        return None
    entry: dict[str, Any] = {
        "entry_id": entry_id[:200],
        "role": role,
        "text": redact(text[: _MAX_TEXT_CHARS + _REDACT_PAST_CUT_CHARS]).text[:_MAX_TEXT_CHARS],
    }
    if at_ms is not None:
        entry["timestamp"] = at_ms
    return entry


def said(turn_id: object, role: str, text: object) -> dict[str, Any] | None:
    """A message a hook's payload carries (Codex's Stop: `last_assistant_message`) as a capture
    entry, read and redacted as a transcript's line is; None when it has no words. Its id is
    the turn's and the text's: the same Stop delivered twice is one entry, a turn that went on
    (a Stop hook asked for more) and stopped again with other words is another."""
    if not isinstance(text, str):
        return None
    # A lone surrogate in the turn's id has no UTF-8 form: the capture job holding it was
    # refused whole, and the turn dropped.
    turn = utf8_safe(turn_id[:100]) if isinstance(turn_id, str) and turn_id else "turn"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return _message(f"{turn}:{role}:{digest}", role, text, None)


def codex_rollout(session_id: str, env: Mapping[str, str]) -> Path | None:
    """The rollout Codex writes for `session_id` (the newest, if several name it), or None."""
    if _SESSION_ID.fullmatch(session_id) is None:
        return None
    try:
        home = Path(env.get(CODEX_HOME_ENV) or Path.home() / ".codex").expanduser()
        found = [
            (path.stat().st_mtime, path)
            for path in (home / "sessions").glob(f"*/*/*/rollout-*-{session_id}.jsonl")
            if path.is_file()
        ]
    except (OSError, RuntimeError):  # no home directory, a folder gone or unreadable: none
        return None
    return max(found)[1] if found else None


def _lines_before(path: Path, offset: int, chunk_bytes: int = 1 << 20) -> int:
    """How many lines end in the first `offset` bytes of the file at `path`."""
    count = 0
    with path.open("rb") as handle:
        while offset > 0:
            chunk = handle.read(min(offset, chunk_bytes))
            if not chunk:
                break
            offset -= len(chunk)
            count += chunk.count(b"\n")
    return count


def read_transcript(path: Path, *, limit: int) -> list[dict[str, Any]]:
    """The last `limit` user/assistant messages of the transcript at `path`, oldest first. The
    lines are decoded from the end and only until `limit` messages are found: a long session's
    transcript runs to tens of MiB, and decoding and redacting all of it took a Stop hook
    seconds past its budget for the few messages it keeps. When none of them is the person's (a
    long agentic turn), the person's last message takes the oldest one's place: extraction
    keeps only what the person said, and the turn's prompt had fallen out of the read."""
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        start = max(size - MAX_TRANSCRIPT_BYTES, 0)
        handle.seek(start)
        raw = handle.read()
    # Codex entries are named by their line number in the file, so the lines before the read are
    # counted (once, not decoded, and only for a Codex rollout): counted from where the read
    # starts, which moves as the file grows, a message would be named anew and the cursor lost.
    before: int | None = 0 if start == 0 else None
    lines = raw.split(b"\n")
    first = 1 if start > 0 else 0  # the first line was cut by where the read started
    kept: list[dict[str, Any]] = []
    spoke = False  # whether a message of the person's is among those kept
    for index in range(len(lines) - 1, first - 1, -1):
        full = len(kept) >= limit
        if full and (spoke or not limit):
            break
        line = lines[index]
        # Past the limit only the person's last message is looked for (`_PERSON`: no line
        # without the word is decoded).
        if not line.strip() or (full and b'"user"' not in line):
            continue
        try:
            decoded = json.loads(line)
        except (ValueError, RecursionError):  # torn, or nested past the decoder's limit
            continue
        if before is None and isinstance(decoded, dict) and decoded.get("type") == "response_item":
            before = _lines_before(path, start)
        entry = _entry(decoded, (before or 0) + index + 1)  # numbered from the file's first line
        if entry is None or (full and entry["role"] != "user"):
            continue
        if full:  # a turn longer than the read: its prompt in place of the oldest message kept
            kept[-1] = entry
        else:
            kept.append(entry)
        spoke |= entry["role"] == "user"
    kept.reverse()
    return kept
