"""What a tool call names: the root-relative paths, whole identifiers and words lessons match on.

Deterministic and local: only the call's own text is read — no model, no network, no file-system
lookup. Native path fields come first; shell commands add their arguments (`cd dir && …` moves the
working directory for what follows), patch and diff headers their files, globs their literal
folder. Every path is read against the tool's working directory and, when relative, as written
from the workspace root; lexically normalized, and dropped when it leaves the root. An opaque
script that never names its files names nothing.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from memory_worker.core.lessons import (
    IDENTIFIER,
    MAX_IDENTIFIER_CHARS,
    nfc,
    normalize_path,
    topic_words,
)
from memory_worker.core.patch_headers import DIFF_HEADERS, PATCH_FILE_HEADERS

__all__ = ["Signals", "ancestors", "is_absolute", "signals"]

# Bounds on what one call is read for: a Write of a whole file must not cost the step a scan of
# megabytes. Paths come first (they are short); text beyond these limits adds no identifiers.
MAX_SCAN_CHARS_PER_VALUE = 8_192
MAX_SCAN_CHARS = 32_768
MAX_SHELL_CHARS = 8_192
MAX_DEPTH = 6  # nested argument objects (MultiEdit `edits`, MCP payloads)
MAX_PATHS = 64
MAX_PATH_CHARS = 1024  # a longer string is no path

# Native path fields of the coding agents' tools (Claude Code Read/Edit/Write/NotebookEdit/LS,
# Grep/Glob `path`, iii shell `path`, Codex list_dir `dir_path`, generic MCP file tools, Serena's
# `relative_path`).
_PATH_KEYS = frozenset(
    {
        "file_path",
        "dir_path",
        "relative_path",
        "filePath",
        "filepath",
        "notebook_path",
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "dir",
        "directory",
        "folder",
        "target_file",
        "source",
        "destination",
        "old_path",
        "new_path",
        "from",
        "to",
    }
)
_COMMAND_KEYS = frozenset({"command", "cmd", "script"})  # a shell command line (or a patch)
_ARGV_KEYS = frozenset({"args", "argv"})  # iii `shell::exec {command, args}`
_CWD_KEYS = frozenset({"cwd", "workdir", "working_directory", "workingDirectory"})
_GLOB_KEYS = frozenset({"glob", "include"})
# Free text (file contents, edit strings, regexes, prompts): read for names and words, never taken
# for a path (code is full of `a/b`).
_TEXT_KEYS = frozenset(
    {
        "content",
        "old_string",
        "new_string",
        # Anthropic's text editor tool, the MCP filesystem server's edit_file
        "old_str",
        "new_str",
        "file_text",
        "insert_text",
        "oldText",
        "newText",
        "new_source",
        "text",
        "pattern",
        "query",
        "prompt",
        "description",
        "message",
        "body",
        "stdin",
        "todos",
    }
)
# Options and ids of the agents' own tools (Claude Code Grep `output_mode: content`, `type: js`,
# Task `subagent_type`, NotebookEdit `cell_type`/`edit_mode`, TodoWrite `status`, shell ids):
# taken for paths, `content` or `js` would meet every lesson anchored to a folder of that name.
_OPTION_KEYS = frozenset(
    {
        "output_mode",
        "type",
        "subagent_type",
        "cell_type",
        "edit_mode",
        "cell_id",
        "status",
        "activeForm",
        "bash_id",
        "shell_id",
    }
)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
# Codex on Windows runs `["powershell.exe", "-Command", script]` (cmd: `["cmd", "/c", …]`): the
# script is a command line whose backslashes separate path components.
_WINDOWS_SHELLS = frozenset({"powershell", "pwsh", "cmd"})
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&", "\n"})
# Compared lowercased: PowerShell's and cmd's command names are case-insensitive.
_CD = frozenset({"cd", "pushd", "chdir", "set-location", "sl", "push-location"})
_GLOB_CHARS = frozenset("*?[{")


@dataclass(frozen=True, slots=True)
class Signals:
    """What one tool call names: root-relative paths (in the order found), whole identifiers and
    lowercase words."""

    paths: tuple[str, ...] = ()
    identifiers: frozenset[str] = frozenset()
    words: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Reader:
    root: str | None  # the workspace root, absolute, posix
    cwd: str | None  # the working directory, root-relative ("" = the root); None = unknown
    glob_pattern: bool  # the tool's `pattern` is a path glob (Glob), not a regex (Grep)
    glob_base: str | None = None  # where a glob starts: the tool's `path`, else the cwd
    paths: dict[str, None] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    heredocs: dict[str, str] = field(default_factory=dict)  # marker word → here-document body
    scanned: int = 0

    def text(self, value: str) -> None:
        if self.scanned >= MAX_SCAN_CHARS:
            return
        piece = value[: min(MAX_SCAN_CHARS_PER_VALUE, MAX_SCAN_CHARS - self.scanned)]
        self.scanned += len(piece)
        self.texts.append(self._without_root(piece))

    def _without_root(self, piece: str) -> str:
        """`piece` without the workspace root's own spelling: every absolute path in every call
        carries it, so its folder names (`/srv/bedrock-region`) would be words of each call and
        meet a keyword group or identifier no call is about."""
        root = self.root
        if root is None or len(root) < 2:
            return piece
        spelled = piece.replace("\\", "/") if "\\" in piece else piece
        if _drive_path(root):
            # On a drive, as `_under_root` reads it: in any case, and Git Bash's `/c/…` too.
            msys = f"/{root[0]}{root[2:]}"
            folded = spelled.casefold()
            if root.casefold() not in folded and msys.casefold() not in folded:
                return piece
            either = f"(?i:{re.escape(root)}|{re.escape(msys)})"
            return re.sub(either + r"(?![\w.-])", " ", spelled)
        if root not in spelled:
            return piece
        return re.sub(re.escape(root) + r"(?![\w.-])", " ", spelled)  # not `/srv/repo2`

    def path(
        self, raw: str, cwd: str | None = None, *, glob: bool = False, strict: bool = False
    ) -> None:
        """Record the root-relative readings of `raw`: against the working directory and, for a
        relative path, as written from the root. `strict` for a string that is only maybe a path
        (an argument of unknown meaning): then one with spaces or `=` is taken for text."""
        if len(self.paths) >= MAX_PATHS:
            return
        raw = raw.strip().strip("\"'")
        if glob:
            raw = _glob_prefix(raw)
        if not _pathlike(raw) or (strict and _NOT_A_PATH.search(raw) is not None):
            return
        for candidate in _resolve(raw, self.cwd if cwd is None else cwd, self.root):
            self.paths.setdefault(candidate)

    def resolve_dir(self, raw: str, cwd: str | None) -> str | None:
        """The root-relative directory `cd raw` lands in from `cwd`: `_OUTSIDE` out of the
        workspace, None when unknown."""
        raw = raw.strip().strip("\"'")
        if not _pathlike(raw):
            return None
        if _absolute(raw):
            return _dir_of(raw, self.root)
        if cwd is None or cwd == _OUTSIDE:
            return cwd  # unknown stays unknown; out of the workspace, a relative `cd` stays out
        if self.root is not None:  # `cd ../repo/proto` may climb out and back in
            return _dir_of(posixpath.join(self.root, cwd, raw.replace("\\", "/")), self.root)
        joined = posixpath.normpath(posixpath.join(cwd or ".", raw.replace("\\", "/")))
        return "" if joined == "." else normalize_path(joined) or _OUTSIDE


def _absolute(raw: str) -> bool:
    return raw.startswith(("/", "\\")) or (len(raw) >= 2 and raw[1] == ":" and raw[0].isalpha())


def is_absolute(raw: str) -> bool:
    """Whether `raw` is an absolute path, POSIX or Windows (`/srv/repo`, `C:\\repo`): what a
    workspace root must be."""
    return _absolute(raw.strip())


# A working directory known to lie out of the workspace (no root-relative path is `..`): a relative
# path read there names none of its files.
_OUTSIDE = ".."
_SHELL_PUNCTUATION = frozenset("<>|&;()")
_NOT_A_PATH = re.compile(r"\s|=")  # in a string of unknown meaning: words, assignments


def _pathlike(raw: str) -> bool:
    """Could name a file (quoted shell words and native path fields may hold spaces)."""
    return (
        bool(raw)
        and len(raw) <= MAX_PATH_CHARS
        and raw[0] not in "~-$"
        and "://" not in raw  # a URL
        and "\n" not in raw
        and not raw.isdigit()
        and not _SHELL_PUNCTUATION.issuperset(raw)  # `>`, `2>&1`'s pieces: redirections
    )


def _glob_prefix(pattern: str) -> str:
    """The literal folder a glob starts from (`proto/**/*.proto` → `proto`), "" when none."""
    parts = pattern.replace("\\", "/").split("/")
    literal: list[str] = []
    for part in parts[:-1]:
        if _GLOB_CHARS.intersection(part):
            break
        literal.append(part)
    else:
        if not _GLOB_CHARS.intersection(parts[-1]):
            literal.append(parts[-1])
    return "/".join(literal)


def _under_root(raw: str, root: str | None) -> str | None:
    """An absolute path as root-relative; None outside the root (or with no root to compare)."""
    if root is None:
        return None
    path = _on_drive(posixpath.normpath(nfc(raw.replace("\\", "/"))), root)
    if _same_path(path, root):
        return None  # the root itself: every folder anchor would contain it
    prefix = root.rstrip("/") + "/"
    if not _same_path(path[: len(prefix)], prefix):
        return None
    return normalize_path(path[len(prefix) :])


def _same_path(a: str, b: str) -> bool:
    """Whether two normalized absolute paths name the same place. Behind a drive letter (Windows)
    case is not significant: an editor's `c:\\repo` and the agent's `C:\\repo` are one root."""
    if a == b:
        return True
    return _drive_path(b) and a.casefold() == b.casefold()


def _drive_path(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


def _on_drive(path: str, root: str) -> str:
    """`path` as Windows spells it when the root is on a drive: Git Bash (Claude Code's shell on
    Windows) writes `C:\\repo` as `/c/repo`."""
    letter = path[1:2]
    if _drive_path(root) and path[:1] == "/" and letter.isalpha() and path[2:3] in ("", "/"):
        return f"{letter}:{path[2:] or '/'}"
    return path


def _dir_of(raw: str, root: str | None) -> str | None:
    """An absolute directory as root-relative: "" for the root itself, `_OUTSIDE` out of the
    workspace, None with no root to compare."""
    if root is None:
        return None
    if _same_path(_on_drive(posixpath.normpath(nfc(raw.replace("\\", "/"))), root), root):
        return ""
    rel = _under_root(raw, root)
    return _OUTSIDE if rel is None else rel


def _resolve(raw: str, cwd: str | None, root: str | None) -> Iterator[str]:
    if _absolute(raw):
        rel = _under_root(raw, root)
        if rel is not None:
            yield rel
        return
    if cwd == _OUTSIDE:
        return  # `cd /tmp && cat README.md` reads no README.md of the workspace
    if cwd:
        joined = normalize_path(posixpath.join(cwd, raw.replace("\\", "/")))
        if joined is not None:
            yield joined
    own = normalize_path(raw)
    if own is not None:
        yield own


def _is_patch(text: str) -> bool:
    """An `apply_patch` body: Codex sends it as a shell command, as the argument of
    `["apply_patch", body]`, or as the `input` of its apply_patch tool."""
    return text.lstrip().startswith("*** Begin Patch")


def _patch_paths(text: str) -> list[str]:
    """Files named by an `apply_patch` body (`*** Update File: p`) or a unified diff (`+++ b/p`)."""
    found: list[str] = []
    for line in text.splitlines():
        for header in PATCH_FILE_HEADERS:
            if line.startswith(header):
                found.append(line[len(header) :].strip())
                break
        else:
            if line.startswith(DIFF_HEADERS):
                target = line[4:].split("\t", 1)[0].strip()
                if target != "/dev/null":
                    found.append(target[2:] if target[:2] in ("a/", "b/") else target)
    return found


# One shell token: an operator, a word (quotes and escapes kept inside it), or a redirection.
_SHELL_TOKEN = re.compile(
    r"[ \t\r]*(?:"
    r"(&&|\|\||;;|\|&|[;&|()\n])"  # an operator
    r"|((?:[^\s;&|()<>'\"\\]|\\.|'[^']*'|\"(?:[^\"\\]|\\.)*\")+)"  # a word
    r"|([<>]+&?\d*)"  # a redirection
    r"|(.))",  # anything else (an unbalanced quote)
    re.S,
)
_QUOTES = frozenset("'\"\\")


# A word whose every backslash comes before a letter, digit or `_`, and no quote: such a
# backslash escapes nothing in a POSIX shell, so no one writes it there; it is a Windows path
# (`proto\user.proto`, `C:\repo\src`: a command line for PowerShell or cmd, Codex on
# Windows), whose backslashes are separators. `my\ notes.md` stays an escaped space.
_WINDOWS_WORD = re.compile(r"[^\\'\"]*(?:\\\w[^\\'\"]*)+")


def _unquote(word: str) -> str:
    if _QUOTES.isdisjoint(word):
        return word
    if _WINDOWS_WORD.fullmatch(word):
        return word.replace("\\", "/")
    try:
        return "".join(shlex.split(word, comments=False, posix=True))
    except ValueError:
        return word


def _shell_words(command: str) -> list[str]:
    """Tokens of a command line: words unquoted, `&&`/`;`/`|`/newlines as separators. A regex
    rather than `shlex`, which is several times slower and gives up on an unbalanced quote."""
    out: list[str] = []
    for operator, word, _redirect, _other in _SHELL_TOKEN.findall(command[:MAX_SHELL_CHARS]):
        if operator:
            out.append(operator)
        elif word:
            out.append(_unquote(word))
    return out


# A here-document's operator (`<<EOF`, `<<-'EOF'`, `<< "EOF"`; not a `<<<` here-string): its body
# runs from the next line to the line holding only the delimiter, or to the end of the text.
_HEREDOC = re.compile(
    r"(?<!<)<<(?!<)(-?)[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\?([A-Za-z_][\w.-]*))"
)
_HEREDOC_MARK = "\x00"  # starts the word left where a here-document was: no shell word does
MAX_HEREDOCS = 16  # per call: each is a marker word and a body read on its own


def _cut_heredocs(reader: _Reader, command: str) -> str:
    """`command` without its here-documents' bodies: each operator becomes a marker word whose
    body `reader.heredocs` keeps. A body is data on stdin, not arguments: Codex's
    `apply_patch <<'EOF'` carries a whole patch, whose code lines read as words would be taken
    for paths (and a file named with a space would be split in two)."""
    if "<<" not in command:
        return command
    lines = command.split("\n")
    out: list[str] = []
    index = size = 0
    while index < len(lines):
        room = MAX_HEREDOCS - len(reader.heredocs)
        if size > MAX_SHELL_CHARS or room <= 0:  # past what is read as words: left as it is
            out.append("\n".join(lines[index:]))
            break
        pending: list[tuple[str, str, bool]] = []

        def mark(match: re.Match[str], pending: list[tuple[str, str, bool]] = pending) -> str:
            key = f"{_HEREDOC_MARK}{len(reader.heredocs) + len(pending)}"
            delimiter = match.group(2) or match.group(3) or match.group(4)
            pending.append((key, delimiter, bool(match.group(1))))
            return f" {key} "

        line, reach = lines[index], MAX_SHELL_CHARS - size + 1
        out.append(_HEREDOC.sub(mark, line[:reach], count=room) + line[reach:])
        size += len(out[-1]) + 1
        index += 1
        for key, delimiter, tabs in pending:
            end = _body_end(lines, index, delimiter, tabs=tabs)
            reader.heredocs[key] = "\n".join(lines[index:end])
            index = end + 1
    return "\n".join(out)


def _body_end(lines: list[str], start: int, delimiter: str, *, tabs: bool) -> int:
    """The index of the line closing a here-document begun at `start`; `len(lines)` when none
    does. `<<-` lets the delimiter line be indented with tabs."""
    if tabs:
        return next(
            (at for at in range(start, len(lines)) if lines[at].lstrip("\t") == delimiter),
            len(lines),
        )
    try:
        return lines.index(delimiter, start)
    except ValueError:
        return len(lines)


def _is_diff(text: str) -> bool:
    return "\n+++ " in "\n" + text


def _read_shell(reader: _Reader, command: str, cwd: str | None, depth: int = 0) -> None:
    """Paths in a shell command line: `cd dir && …` moves the working directory for what follows;
    every other argument that could be a path is tried as one (an opaque script that never names
    its files cannot be traced). A patch or diff names its files, also fed as a here-document."""
    if _is_patch(command):
        for target in _patch_paths(command):
            reader.path(target, cwd)
        return
    before = len(reader.heredocs)
    command = _cut_heredocs(reader, command)
    if len(reader.heredocs) == before and _is_diff(command):
        for target in _patch_paths(command):
            reader.path(target, cwd)
        return
    segment: list[str] = []
    for word in [*_shell_words(command), ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        cwd = _read_argv(reader, segment, cwd, depth)
        segment = []


def _read_argv(reader: _Reader, argv: list[str], cwd: str | None, depth: int = 0) -> str | None:
    """One simple command: returns the working directory after it (changed only by `cd`)."""
    while argv and "=" in argv[0] and not argv[0].startswith("="):
        argv = argv[1:]  # `FOO=1 make gen`: environment assignments
    if not argv:
        return cwd
    name = _command_name(argv[0])
    if name in _CD:
        # `cd -- dir`, PowerShell `Set-Location -Path dir`, cmd `cd /d C:\dir`: options skipped.
        target = next((a for a in argv[1:] if not a.startswith("-") and a.lower() != "/d"), None)
        if target is None:
            return None
        reader.path(target, cwd)
        return reader.resolve_dir(target, cwd)
    if name in _SHELLS and depth < 2:
        for flag, script in itertools.pairwise(argv[1:]):
            if flag.startswith("-") and "c" in flag:
                _read_shell(reader, script, cwd, depth + 1)
                return cwd
    if name in _WINDOWS_SHELLS and depth < 2:
        line = _windows_script(name, argv[1:])
        if line is not None:
            # Backslashes there are separators, never escapes (PowerShell's is a backtick).
            _read_shell(reader, line.replace("\\", "/"), cwd, depth + 1)
            return cwd
    if "/" in argv[0]:
        reader.path(argv[0], cwd)  # `./scripts/gen.sh`
    for arg in argv[1:]:
        _read_arg(reader, arg, cwd, depth)
    _read_git_revision_paths(reader, name, argv[1:], cwd)
    return cwd


# Git commands reading a file at a revision as `<rev>:<path>` (`git show HEAD~1:proto/a.proto`,
# `git diff main:a.py b.py`, `git show :a.py` for the index, `:2:a.py` a merge stage): the path
# is the file's, from the repository's top (`./…` from the working directory, which the reader
# tries as well). Read whole, `HEAD~1:proto/a.proto` named no file of the workspace. A path
# starting with `/` is `:/message` (a commit found by its message), not a file.
_GIT_REVISION_READERS = frozenset(
    {"show", "diff", "difftool", "cat-file", "blame", "log", "grep", "ls-tree", "rev-parse"}
)
_GIT_REV_PATH = re.compile(r"[^\s:]*:(?:[0-3]:)?([^\s:/][^\s:]*)")
# `git -C dir show …`, `git -c key=value diff …`: options before the subcommand taking a value.
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def _read_git_revision_paths(reader: _Reader, name: str, args: list[str], cwd: str | None) -> None:
    """The files a git command reads at a revision (`git show HEAD~1:proto/a.proto`)."""
    if name != "git" or _git_subcommand(args) not in _GIT_REVISION_READERS:
        return
    for arg in args:
        found = None if arg.startswith("-") else _GIT_REV_PATH.fullmatch(arg)
        if found is not None:
            reader.path(found.group(1), cwd)


def _git_subcommand(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _GIT_VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _command_name(word: str) -> str:
    """A command's name as compared: its file name, lowercased, without `.exe`
    (`C:\\Windows\\System32\\cmd.exe` → `cmd`, `/bin/bash` → `bash`)."""
    name = posixpath.basename(word.replace("\\", "/")).lower()
    return name[:-4] if name.endswith(".exe") else name


def _windows_script(name: str, args: list[str]) -> str | None:
    """The command line a PowerShell (`-Command`, `-c`) or cmd (`/c`, `/k`) argv runs: the words
    after the flag, joined as both shells join them; None when there is none."""
    for at, arg in enumerate(args):
        flag = arg.lower()
        if name == "cmd":
            found = flag in ("/c", "/k")
        else:
            found = len(flag) >= 2 and flag[0] in "-/" and "-command".startswith("-" + flag[1:])
        if found:
            return " ".join(args[at + 1 :]) or None
    return None


def _read_arg(reader: _Reader, arg: str, cwd: str | None, depth: int = 0) -> None:
    """One argument of a command: a patch body (Codex `["apply_patch", body]`) names its files,
    `--flag=path` its value, any other may itself be a path; a here-document only when it is a
    patch or diff (any other is read as the script it most likely is)."""
    if arg.startswith(_HEREDOC_MARK):
        body = reader.heredocs.get(arg, "")
        if _is_patch(body) or _is_diff(body):
            for target in _patch_paths(body):
                reader.path(target, cwd)
        elif depth < 2:  # a script on stdin (`python3 - <<'EOF'`, `bash <<EOF`): read as before
            _read_shell(reader, body, cwd, depth + 1)
        return
    if _is_patch(arg):
        for target in _patch_paths(arg):
            reader.path(target, cwd)
        return
    if arg.startswith("--") and "=" in arg:
        arg = arg.split("=", 1)[1]
    reader.path(arg, cwd)
    bare = _without_position(arg)
    if bare != arg and ("/" in bare or "." in bare):
        reader.path(bare, cwd)


def _without_position(arg: str) -> str:
    """A test id's or a position's file (`tests/test_api.py::test_login`, `src/app.py:12:3`): the
    file itself is what an anchor names. String scans, not a regex: an argument of thousands of
    `:1` must cost linear time."""
    if len(arg) > MAX_PATH_CHARS:
        return arg  # too long to be a path (`_pathlike`)
    head, sep, _ = arg.partition("::")
    if sep:
        return head
    while True:
        head, sep, tail = arg.rpartition(":")
        if not sep or not (tail.isascii() and tail.isdigit()):
            return arg
        arg = head


def _read_string(reader: _Reader, value: str, key: str) -> None:
    reader.text(value)
    if key in _PATH_KEYS:
        reader.path(value)
    elif key in _COMMAND_KEYS:
        _read_shell(reader, value, reader.cwd)
    elif key in _GLOB_KEYS or (key == "pattern" and reader.glob_pattern):
        reader.path(value, reader.glob_base, glob=True)
    elif key not in _TEXT_KEYS and _is_patch(value):
        for target in _patch_paths(value):
            reader.path(target)
    elif key not in _CWD_KEYS and key not in _TEXT_KEYS and key not in _OPTION_KEYS:
        reader.path(value, strict=True)  # an argument that may itself be a path


def _argv(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _walk(reader: _Reader, value: object, key: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        _read_string(reader, value, key)
    elif key in _COMMAND_KEYS and _argv(value):
        # Codex `shell {command: ["bash", "-lc", "cd proto && make gen"]}`: an argv.
        _read_argv(reader, value, reader.cwd)
        reader.text(" ".join(value))
    elif isinstance(value, Mapping):
        for child_key, child in value.items():
            _walk(reader, child, str(child_key), depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(reader, item, key, depth + 1)


def _root(workspace_root: str | None, cwd: str | None) -> str | None:
    for candidate in (workspace_root, cwd):
        if candidate and _absolute(candidate.strip()):
            return posixpath.normpath(nfc(candidate.strip().replace("\\", "/")))
    return None


def _start_cwd(cwd: str | None, root: str | None) -> str | None:
    if not cwd or not cwd.strip():
        return ""
    cwd = cwd.strip()
    if _absolute(cwd):
        return _dir_of(cwd, root)
    if posixpath.normpath(cwd.replace("\\", "/")) == ".":
        return ""  # `.`, `./`, `src/..`: the root itself (not a path inside it, yet known)
    return normalize_path(cwd) or _OUTSIDE  # `..`: above the root


def signals(
    tool: str,
    arguments: Mapping[str, object],
    *,
    cwd: str | None = None,
    workspace_root: str | None = None,
) -> Signals:
    """The paths, identifiers and words of one tool call.

    `cwd` is the tool's working directory (absolute, or relative to the root); a `cwd`/`workdir`
    argument overrides it. `workspace_root` (absolute) is what anchors are relative to; omitted, it
    is `cwd`. Relative paths are read against the working directory and, as written, from the root.
    """
    root = _root(workspace_root, cwd)
    reader = _Reader(root=root, cwd=_start_cwd(cwd, root), glob_pattern="glob" in tool.lower())
    override = next(
        (v for k, v in arguments.items() if k in _CWD_KEYS and isinstance(v, str) and v.strip()),
        None,
    )
    if override is not None:
        reader.cwd = (
            _start_cwd(override, root)
            if _absolute(override)
            else reader.resolve_dir(override, reader.cwd)
        )
    base = arguments.get("path")
    if isinstance(base, str):
        # Where a Glob's pattern, and a Grep's `glob` filter (Codex grep_files' `include`),
        # start: the searched folder, not the working directory.
        reader.glob_base = reader.resolve_dir(base, reader.cwd)
    argv = next((v for k, v in arguments.items() if k in _ARGV_KEYS and isinstance(v, list)), None)
    command = arguments.get("command")
    if argv is not None and isinstance(command, str):
        # iii `shell::exec {command: "make", args: ["-C", "proto"]}`: one argv, never re-split.
        words = [command, *(a for a in argv if isinstance(a, str))]
        _read_argv(reader, words, reader.cwd)
        reader.text(" ".join(words))
        rest = {k: v for k, v in arguments.items() if k != "command" and k not in _ARGV_KEYS}
    else:
        rest = dict(arguments)
    # Native path fields take priority (seed 002): read first, they are never crowded out of the
    # scan's bounds by long edit strings the model happened to write before them.
    for key, value in sorted(rest.items(), key=lambda item: str(item[0]) not in _PATH_KEYS):
        _walk(reader, value, str(key), 0)
    return _finish(reader)


def _finish(reader: _Reader) -> Signals:
    identifiers: set[str] = set()
    for text in reader.texts:
        identifiers.update(IDENTIFIER.findall(text))
    identifiers = {name for name in identifiers if len(name) <= MAX_IDENTIFIER_CHARS}
    words: set[str] = set()
    for name in identifiers:
        words.update(topic_words(name))
    return Signals(tuple(reader.paths), frozenset(identifiers), frozenset(words))


def ancestors(path: str) -> Iterator[str]:
    """`a/b/c` → `a/b/c`, `a/b`, `a`: the path itself (a folder the call names) and every folder
    it lies in, whole components only."""
    yield path
    end = path.rfind("/")
    while end > 0:
        path = path[:end]
        yield path
        end = path.rfind("/")
