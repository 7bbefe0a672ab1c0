"""Other systems' memories, read as `memory::import` records (`memory-worker import --from`).

- `mem0`: what mem0's `get_all()` / export gives — a JSON list, or an object whose `results`
  (or `memories`) is one — of `{"id", "memory", "categories", "metadata", "created_at",
  "updated_at", "user_id", …}`. The text is `memory`; `categories` become tags; the times (ISO
  8601 or epoch) are kept; mem0's id is kept as the record's provenance entry (our ids are
  content fingerprints, so the same fact from two systems is one memory).
- `markdown`: a folder of markdown memory files (a coding agent's memory folder, an Obsidian
  notes folder) or one file. A file's list items are its memories, one each (nested items join
  their parent); a file without list items gives one memory per paragraph (the paragraphs
  beside a file's lists are left out, counted as `not_a_list_item`). Headings, code
  blocks and a front matter block are never memories; each memory is tagged with its file's
  name, and dated by the file's modification time. Hidden files and folders inside the folder
  (an Obsidian vault's `.trash/` and `.obsidian/`, `.git/`) are not read.

An item a memory cannot hold (longer than `MAX_TEXT_CHARS`, shorter than `MIN_TEXT_CHARS`) is
left out and counted, never cut silently into something it did not say.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_worker.core.errors import InvalidInput

# `core.transitions` (the memory limits) is imported where a record is read, not here: every
# command's parser names FORMATS, and a forwarded call should not load the memory models for it.

__all__ = ["BOM", "FORMATS", "Foreign", "read_foreign"]

FORMATS = ("memory-worker", "mem0", "markdown")
BOM = "\ufeff"  # the UTF-8 byte order mark, as decoded text
_MAX_FILES = 10_000
_MAX_FILE_BYTES = 4 * 1024 * 1024
_LIST_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(.*)$")
# What a tag made of a name keeps: letters and digits of every alphabet (a tag is Unicode, as a
# save stores it), `_` and `-`; the rest (spaces, punctuation) becomes `-`.
_TAG_CHARS = re.compile(r"[^\w-]+")
# CommonMark's other markup that is no memory: a setext heading's underline (the paragraph above it
# is the heading) and a thematic break (`***`, `- - -`).
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# An ATX heading: one to six `#`, then a space or the line's end. `#todo call the plumber` (an
# Obsidian tag) and `#2 on the list` are text.
_ATX_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")


@dataclass
class Foreign:
    """What a foreign export gave: import records, where in the export each one is (`origins`,
    what a refusal of that record names: the import's own record numbers skip what was left
    out, and say nothing of a folder's files), and how many items were left out (why)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, text: str, where: str, **fields: Any) -> None:
        from memory_worker.core.transitions import MAX_TEXT_CHARS, MIN_TEXT_CHARS

        text = " ".join(text.split())
        if len(text) < MIN_TEXT_CHARS:
            self.skipped["too_short"] = self.skipped.get("too_short", 0) + 1
        elif len(text) > MAX_TEXT_CHARS:
            self.skipped["too_long"] = self.skipped.get("too_long", 0) + 1
        else:
            self.records.append({"text": text, **fields})
            self.origins.append(where)

    def left_out(self, paragraphs: int) -> None:
        """Paragraphs of a markdown file with lists: its list items are its memories."""
        if paragraphs:
            self.skipped["not_a_list_item"] = self.skipped.get("not_a_list_item", 0) + paragraphs


def _ms(value: object) -> int | None:
    """A time in ms, or None — the memory is imported without it — when the value is not one a
    record can hold: unreadable, not finite (`1e400` reads as infinity), before 1970 or after
    9999 (a record's times are bounded by `MAX_TIME_MS`; one bad time must not refuse them all)."""
    from memory_worker.core.models import MAX_TIME_MS

    ms: float
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value > 0:
        ms = value * 1000 if value < 10**11 else value  # seconds or ms
    elif isinstance(value, str) and value.strip():
        try:
            stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if stamp.tzinfo is None:  # a naive time is read as UTC (what mem0 stores)
            stamp = stamp.replace(tzinfo=UTC)
        ms = stamp.timestamp() * 1000
    else:
        return None
    return int(ms) if 0 <= ms <= MAX_TIME_MS else None


def _tag(value: object) -> str | None:
    # Composed first, as a save stores a tag (NFKC): a macOS file name is decomposed, and a
    # combining accent is no letter.
    name = unicodedata.normalize("NFKC", str(value).strip()).lower()
    tag = _TAG_CHARS.sub("-", name).strip("-")
    return tag[:64] or None


def _mem0(path: Path) -> Foreign:
    from memory_worker.core.transitions import MAX_LABELS

    try:
        document = json.loads(_read(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"{path} is not JSON: {exc}") from None
    items = document
    if isinstance(document, dict):
        items = document.get("results", document.get("memories"))
    if not isinstance(items, list):
        raise InvalidInput(f"{path}: expected a list of memories or an object with `results`")
    out = Foreign()
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise InvalidInput(f"{path}: item {number} is not an object")
        text = item.get("memory", item.get("text", item.get("content")))
        if not isinstance(text, str):
            raise InvalidInput(f"{path}: item {number} has no `memory` text")
        categories = item.get("categories") or []
        tags = [t for c in categories if (t := _tag(c))] if isinstance(categories, list) else []
        fields: dict[str, Any] = {"tags": list(dict.fromkeys(tags))[:MAX_LABELS]}
        created = _ms(item.get("created_at"))
        updated = _ms(item.get("updated_at")) or created
        if created is not None:
            fields["created_at"] = created
            fields["stated_at"] = created
        if updated is not None and (created is None or updated >= created):
            # mem0 sets `updated_at` when it rewrites the text: the fact as it reads now was
            # stated then.
            fields["updated_at"] = fields["stated_at"] = updated
        if isinstance(item.get("id"), str) and item["id"]:
            fields["source"] = {"entry_id": item["id"][:128], "agent": "mem0"}
        out.add(text, f"{path}: item {number}", **fields)
    return out


def _prose(text: str) -> list[str]:
    """A markdown file's lines without front matter, headings (ATX and setext), fenced code,
    HTML and Obsidian (`%%`) comments and thematic breaks."""
    lines = _without_front_matter(text.splitlines())
    kept: list[str] = []
    fenced = comment = hidden = False
    for line in lines:
        if hidden or (not fenced and not comment and "%%" in line):
            rest, hidden = _outside_obsidian_comments(line, hidden)
            if rest is None:
                continue
            line = rest
        if comment or (not fenced and line.lstrip().startswith("<!--")):
            rest, comment = _after_comments(line, comment)
            if rest is None:
                continue
            line = rest
        stripped = line.lstrip()
        # What is left out at the top level (not inside a list item) ends the paragraph or
        # item before it, as a blank line does: the text after it is no continuation.
        ends = [""] if line[:1] not in (" ", "\t") else []
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            kept.extend(ends)
        elif fenced:
            continue
        elif _ATX_HEADING.match(stripped):
            kept.extend(ends)
        elif _SETEXT_UNDERLINE.match(line) and _paragraph_line(kept):
            while _paragraph_line(kept):  # the paragraph it underlines is a heading
                kept.pop()
            kept.append("")
        elif _THEMATIC_BREAK.match(line):
            kept.extend(ends)
        else:
            kept.append(line)
    return kept


def _after_comments(line: str, comment: bool) -> tuple[str | None, bool]:
    """What `line` holds after the HTML comments it starts with (or, `comment`, the one open
    since an earlier line) and whether a comment is still open: None when nothing is left. The
    text after a `-->` is what the person wrote (a browser shows it), never part of the comment;
    `<!-->` and `<!--->` are whole comments, as in CommonMark."""
    rest = line
    while True:
        if not comment and rest.lstrip().startswith("<!--"):
            rest = rest.lstrip()[2:]  # from the `--` on: `<!-->` closes itself
            comment = True
        if not comment:
            break
        end = rest.find("-->")
        if end < 0:
            return None, True
        rest, comment = rest[end + 3 :], False
    rest = rest.strip()
    # At the line's own indent: a list item's continuation stays one.
    return (line[: len(line) - len(line.lstrip())] + rest if rest else None), False


def _without_front_matter(lines: list[str]) -> list[str]:
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
        if end is not None:
            return lines[end + 1 :]
    return lines


def _outside_obsidian_comments(line: str, hidden: bool) -> tuple[str | None, bool]:
    """What `line` holds outside Obsidian's `%%…%%` comments (`hidden`: one is open since an
    earlier line), and whether one is still open: None when nothing is left. Hidden from the
    note as an HTML comment is, it is no memory either."""
    parts = line.split("%%")
    rest = "".join(part for i, part in enumerate(parts) if (i % 2 == 0) != hidden)
    hidden = hidden != (len(parts) % 2 == 0)  # each `%%` opens or closes one
    return (rest.rstrip() if rest.strip() else None), hidden


def _paragraph_line(kept: list[str]) -> bool:
    """Whether the last line kept is a top-level paragraph's (what a setext underline makes a
    heading): not blank, not a list item, not indented (a list item's continuation)."""
    return bool(kept) and kept[-1][:1] not in ("", " ", "\t") and not _LIST_ITEM.match(kept[-1])


def _blocks(text: str) -> tuple[list[list[str]], int]:
    """A markdown file's memories as lines: its list items (nested items and indented
    continuations joined to their top-level item), else its paragraphs; and how many paragraphs
    were left out beside its lists (counted in the report, never dropped without a word)."""
    kept = _prose(text)
    has_list = any(_LIST_ITEM.match(line) for line in kept)
    items: list[list[str]] = []
    current: list[str] | None = None
    left_out = 0
    outside = False  # in a paragraph left out (a file with lists)
    for line in kept:
        match = _LIST_ITEM.match(line)
        if not has_list:
            if not line.strip():
                current = None
            elif current is None and (line[:1] == "\t" or line.startswith("    ")):
                continue  # an indented code block (a paragraph's own lines may be indented)
            elif current is None:
                current = [line.strip()]
                items.append(current)
            else:
                current.append(line.strip())
        elif match and not match.group(1):  # a top-level item starts a memory
            current = [match.group(2)]
            items.append(current)
            outside = False
        elif current is not None and (match or line.strip()):
            # A nested item, an indented line or an unindented one straight after (CommonMark's
            # lazy continuation: a wrapped item's next line) goes on with the item.
            current.append(match.group(2) if match else line.strip())
        elif line.strip():  # prose beside the lists (an introduction, a note): no memory
            left_out += not outside
            outside = True
        else:
            current = None
            outside = False
    return items, left_out


def _markdown(path: Path) -> Foreign:
    out = Foreign()
    if _is_stdin(path):  # one document, with no file name to tag it by nor time to date it
        try:
            text = _read(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read the standard input: {exc}") from None
        blocks, left_out = _blocks(text)
        out.left_out(left_out)
        for number, block in enumerate(blocks, start=1):
            out.add(" ".join(part for part in block if part), f"item {number}", tags=[])
        return out
    if path.is_dir():
        # A hidden entry inside the folder is not the person's notes: Obsidian keeps deleted
        # notes in `.trash/` and its own files in `.obsidian/`, a clone has `.git/`. The folder
        # named itself may be hidden (`~/.claude/memory`): only the parts below it count.
        paths = sorted(
            p
            for p in path.rglob("*.md")
            if p.is_file()
            and not p.is_symlink()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    else:
        paths = [path]
    if len(paths) > _MAX_FILES:
        raise InvalidInput(f"{path} holds more than {_MAX_FILES} markdown files")
    for file in paths:
        try:
            if file.stat().st_size > _MAX_FILE_BYTES:
                out.skipped["file_too_large"] = out.skipped.get("file_too_large", 0) + 1
                continue
            text = _read(file)
            stamp = _ms(file.stat().st_mtime)  # None before 1970: imported undated
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read {file}: {exc}") from None
        tag = _tag(file.stem)
        blocks, left_out = _blocks(text)
        out.left_out(left_out)
        for number, block in enumerate(blocks, start=1):
            joined = " ".join(part for part in block if part)
            fields = {"tags": [tag] if tag else [], "created_at": stamp, "stated_at": stamp}
            out.add(joined, f"{file}: item {number}", **fields)
    return out


def _read(path: Path) -> str:
    """A file's text (`-`: the standard input's) without the UTF-8 byte order mark Windows
    editors write first: left in, it hid a first list item's `- ` and front matter's `---`, and
    JSON refuses it."""
    text = sys.stdin.read() if _is_stdin(path) else path.read_text(encoding="utf-8")
    return text.removeprefix(BOM)


def _is_stdin(path: Path) -> bool:
    return str(path) == "-"  # `memory-worker import - --from …`, as for the default format


def read_foreign(path: Path, fmt: str) -> Foreign:
    """Import records from another system's export at `path` (`-`: the standard input)."""
    if fmt == "mem0":
        return _mem0(path)
    if fmt == "markdown":
        if not _is_stdin(path) and not path.exists():
            raise InvalidInput(f"{path} does not exist")
        return _markdown(path)
    raise InvalidInput(f"unknown import format {fmt!r}; formats: {', '.join(FORMATS)}")
