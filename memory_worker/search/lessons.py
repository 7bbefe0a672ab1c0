"""Matching lesson cards to a tool call: the call's signals and the resident inverted indexes.

Deterministic and local: no model call, no network, no file-system lookup — only the call's own
text. A call yields root-relative paths (native path fields, shell arguments, patch headers,
resolved against the tool's working directory and the workspace root), the whole identifiers in its
text, and its words (identifiers split into snake/camel words). Scores:

    exact root-relative file 1000 > containing folder 800 > whole identifier 700
    > every term of a keyword group 500

Each card scores its strongest match once (repeated words never add); results sort by descending
score, then lesson id. The index is kept up to date record by record (`add`/`remove`), so a bank
keeps it resident and a match costs a few dict lookups.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from memory_worker.core.lessons import IDENTIFIER, MAX_IDENTIFIER_CHARS, normalize_path, split_words
from memory_worker.core.models import Anchors

__all__ = [
    "FILE_SCORE",
    "FOLDER_SCORE",
    "GROUP_SCORE",
    "IDENTIFIER_SCORE",
    "LessonIndex",
    "Signals",
    "explain",
    "signals",
]

FILE_SCORE = 1000
FOLDER_SCORE = 800
IDENTIFIER_SCORE = 700
GROUP_SCORE = 500

# Bounds on what one call is read for: a Write of a whole file must not cost the step a scan of
# megabytes. Paths come first (they are short); text beyond these limits adds no identifiers.
MAX_SCAN_CHARS_PER_VALUE = 8_192
MAX_SCAN_CHARS = 32_768
MAX_SHELL_CHARS = 8_192
MAX_DEPTH = 6  # nested argument objects (MultiEdit `edits`, MCP payloads)
MAX_PATHS = 64

# Native path fields of the coding agents' tools (Claude Code Read/Edit/Write/NotebookEdit/LS,
# Grep/Glob `path`, iii shell `path`, generic MCP file tools).
_PATH_KEYS = frozenset(
    {
        "file_path",
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
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&", "\n"})
_CD = frozenset({"cd", "pushd"})
_GLOB_CHARS = frozenset("*?[{")
_PATCH_HEADERS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")
_DIFF_HEADERS = ("+++ ", "--- ")


@dataclass(frozen=True, slots=True)
class Signals:
    """What one tool call names: root-relative paths (in the order found), whole identifiers and
    lowercase words."""

    paths: tuple[str, ...] = ()
    identifiers: frozenset[str] = frozenset()
    words: frozenset[str] = frozenset()


# --- reading a tool call ---------------------------------------------------------------------


@dataclass(slots=True)
class _Reader:
    root: str | None  # the workspace root, absolute, posix
    cwd: str | None  # the working directory, root-relative ("" = the root); None = unknown
    glob_pattern: bool  # the tool's `pattern` is a path glob (Glob), not a regex (Grep)
    glob_base: str | None = None  # where such a pattern starts: the tool's `path`, else the cwd
    paths: dict[str, None] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    scanned: int = 0

    def text(self, value: str) -> None:
        if self.scanned >= MAX_SCAN_CHARS:
            return
        piece = value[: min(MAX_SCAN_CHARS_PER_VALUE, MAX_SCAN_CHARS - self.scanned)]
        self.scanned += len(piece)
        self.texts.append(piece)

    def path(self, raw: str, cwd: str | None = None, *, glob: bool = False) -> None:
        """Record the root-relative readings of `raw`: against the working directory and, for a
        relative path, as written from the root."""
        if len(self.paths) >= MAX_PATHS:
            return
        raw = raw.strip().strip("\"'")
        if glob:
            raw = _glob_prefix(raw)
        if not _pathlike(raw):
            return
        for candidate in _resolve(raw, self.cwd if cwd is None else cwd, self.root):
            self.paths.setdefault(candidate)

    def resolve_dir(self, raw: str, cwd: str | None) -> str | None:
        """The root-relative directory `cd raw` lands in from `cwd`; None when unknown."""
        raw = raw.strip().strip("\"'")
        if not _pathlike(raw):
            return None
        if _absolute(raw):
            return _under_root(raw, self.root)
        if cwd is None:
            return None
        joined = posixpath.normpath(posixpath.join(cwd or ".", raw.replace("\\", "/")))
        return "" if joined == "." else normalize_path(joined)


def _absolute(raw: str) -> bool:
    return raw.startswith(("/", "\\")) or (len(raw) >= 2 and raw[1] == ":" and raw[0].isalpha())


_SHELL_PUNCTUATION = frozenset("<>|&;()")
_NOT_A_PATH = re.compile(r"\s|://|=")  # words with spaces, URLs, assignments


def _pathlike(raw: str) -> bool:
    return (
        bool(raw)
        and len(raw) <= 1024
        and raw[0] not in "~-$"
        and _NOT_A_PATH.search(raw) is None
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
    path = posixpath.normpath(raw.replace("\\", "/"))
    if path == root:
        return None  # the root itself: every folder anchor would contain it
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    return normalize_path(path[len(prefix) :])


def _resolve(raw: str, cwd: str | None, root: str | None) -> Iterator[str]:
    if _absolute(raw):
        rel = _under_root(raw, root)
        if rel is not None:
            yield rel
        return
    if cwd:
        joined = normalize_path(posixpath.join(cwd, raw.replace("\\", "/")))
        if joined is not None:
            yield joined
    own = normalize_path(raw)
    if own is not None:
        yield own


def _patch_paths(text: str) -> list[str]:
    """Files named by an `apply_patch` body (`*** Update File: p`) or a unified diff (`+++ b/p`)."""
    found: list[str] = []
    for line in text.splitlines():
        for header in _PATCH_HEADERS:
            if line.startswith(header):
                found.append(line[len(header) :].strip())
                break
        else:
            if line.startswith(_DIFF_HEADERS):
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


def _unquote(word: str) -> str:
    if _QUOTES.isdisjoint(word):
        return word
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


def _read_shell(reader: _Reader, command: str, cwd: str | None, depth: int = 0) -> None:
    """Paths in a shell command line: `cd dir && …` moves the working directory for what follows;
    every other argument that could be a path is tried as one (an opaque script that never names
    its files cannot be traced)."""
    if command.lstrip().startswith("*** Begin Patch") or "\n+++ " in command:
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
    name = posixpath.basename(argv[0])
    if name in _CD:
        target = next((a for a in argv[1:] if not a.startswith("-")), None)
        if target is None:
            return None
        reader.path(target, cwd)
        return reader.resolve_dir(target, cwd)
    if name in _SHELLS and depth < 2:
        for flag, script in itertools.pairwise(argv[1:]):
            if flag.startswith("-") and "c" in flag:
                _read_shell(reader, script, cwd, depth + 1)
                return cwd
    if "/" in argv[0]:
        reader.path(argv[0], cwd)  # `./scripts/gen.sh`
    for arg in argv[1:]:
        if arg.startswith("--") and "=" in arg:
            arg = arg.split("=", 1)[1]
        reader.path(arg, cwd)
    return cwd


def _read_string(reader: _Reader, value: str, key: str) -> None:
    reader.text(value)
    if key in _PATH_KEYS:
        reader.path(value)
    elif key in _COMMAND_KEYS:
        _read_shell(reader, value, reader.cwd)
    elif key in _GLOB_KEYS or (key == "pattern" and reader.glob_pattern):
        reader.path(value, reader.glob_base, glob=True)
    elif key not in _CWD_KEYS and key not in _TEXT_KEYS:
        reader.path(value)  # an argument that is itself a path


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
            return posixpath.normpath(candidate.strip().replace("\\", "/"))
    return None


def _start_cwd(cwd: str | None, root: str | None) -> str | None:
    if not cwd or not cwd.strip():
        return ""
    cwd = cwd.strip()
    if _absolute(cwd):
        if root is not None and posixpath.normpath(cwd.replace("\\", "/")) == root:
            return ""
        return _under_root(cwd, root)
    return normalize_path(cwd)


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
    if reader.glob_pattern and isinstance(base, str):
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
    for key, value in rest.items():
        _walk(reader, value, str(key), 0)
    return _finish(reader)


def _finish(reader: _Reader) -> Signals:
    identifiers: set[str] = set()
    for text in reader.texts:
        identifiers.update(IDENTIFIER.findall(text))
    identifiers = {name for name in identifiers if len(name) <= MAX_IDENTIFIER_CHARS}
    words: set[str] = set()
    for name in identifiers:
        words.update(split_words(name))
    return Signals(tuple(reader.paths), frozenset(identifiers), frozenset(words))


# --- the index -------------------------------------------------------------------------------


def _ancestors(path: str) -> Iterator[str]:
    """`a/b/c` → `a/b/c`, `a/b`, `a`: the path itself (a folder the call names) and every folder
    it lies in, whole components only."""
    yield path
    end = path.rfind("/")
    while end > 0:
        path = path[:end]
        yield path
        end = path.rfind("/")


_Entry = tuple[str, frozenset[str]]  # (lesson id, one of its keyword groups)


class LessonIndex:
    """Inverted indexes from anchors to lesson ids, updated one lesson at a time.

    Keyword groups are filed under ONE of their terms — any term works, since every term is
    required — chosen as the term fewest groups use, so a common word never drags a long list of
    groups into every match. Counts change as lessons arrive (the first groups see every count at
    zero), so a bucket that has doubled since it was last looked at moves each of its groups to
    its rarest term now: amortized constant work per add.
    """

    REKEY_AT = 16  # a bucket shorter than this is cheap whatever its key

    def __init__(self) -> None:
        self._files: dict[str, set[str]] = {}
        self._folders: dict[str, set[str]] = {}
        self._identifiers: dict[str, set[str]] = {}
        self._groups: dict[str, dict[_Entry, None]] = {}  # key term → groups filed under it
        self._keyed: dict[_Entry, str] = {}  # each group → the term it is filed under
        self._settled: dict[str, int] = {}  # key term → its bucket's size when last re-keyed
        self._term_use: Counter[str] = Counter()
        self._indexed: dict[str, Anchors] = {}
        self._anchor_count = 0

    def __len__(self) -> int:
        return len(self._indexed)

    def __contains__(self, lesson_id: object) -> bool:
        return lesson_id in self._indexed

    def __repr__(self) -> str:
        return f"<LessonIndex lessons={len(self)} anchors={self._anchor_count}>"

    @property
    def anchor_count(self) -> int:
        return self._anchor_count

    def ids(self) -> Iterable[str]:
        return self._indexed.keys()

    def add(self, lesson_id: str, anchors: Anchors) -> None:
        """Index (or re-index) one lesson's anchors."""
        previous = self._indexed.get(lesson_id)
        if previous is not None:
            if previous == anchors:
                return
            self.remove(lesson_id)
        for path in anchors.files:
            self._files.setdefault(path, set()).add(lesson_id)
        for path in anchors.folders:
            self._folders.setdefault(path, set()).add(lesson_id)
        for name in anchors.identifiers:
            self._identifiers.setdefault(name, set()).add(lesson_id)
        for terms in anchors.keyword_groups:
            self._term_use.update(terms)
        for terms in anchors.keyword_groups:
            entry = (lesson_id, frozenset(terms))
            key = self._rarest(entry[1])
            self._file(entry, key)
            bucket = len(self._groups[key])
            if bucket >= self.REKEY_AT and bucket >= 2 * self._settled.get(key, 0):
                self._rekey(key)
        self._indexed[lesson_id] = anchors
        self._anchor_count += anchors.count()

    def _rarest(self, terms: frozenset[str]) -> str:
        return min(terms, key=lambda term: (self._term_use[term], term))

    def _file(self, entry: _Entry, key: str) -> None:
        self._groups.setdefault(key, {})[entry] = None
        self._keyed[entry] = key

    def _unfile(self, entry: _Entry) -> None:
        key = self._keyed.pop(entry)
        bucket = self._groups[key]
        del bucket[entry]
        if not bucket:
            del self._groups[key]
            self._settled.pop(key, None)

    def _rekey(self, key: str) -> None:
        for entry in list(self._groups[key]):
            rarest = self._rarest(entry[1])
            if rarest != key:
                self._unfile(entry)
                self._file(entry, rarest)
        if key in self._groups:
            self._settled[key] = len(self._groups[key])

    def remove(self, lesson_id: str) -> None:
        anchors = self._indexed.pop(lesson_id, None)
        if anchors is None:
            return
        _drop(self._files, anchors.files, lesson_id)
        _drop(self._folders, anchors.folders, lesson_id)
        _drop(self._identifiers, anchors.identifiers, lesson_id)
        for terms in anchors.keyword_groups:
            self._unfile((lesson_id, frozenset(terms)))
            self._term_use.subtract(terms)
            for term in terms:
                if self._term_use[term] <= 0:
                    del self._term_use[term]
        self._anchor_count -= anchors.count()

    def match(self, found: Signals) -> list[tuple[str, int]]:
        """`(lesson id, score)` of every matching lesson: score descending, then id."""
        best: dict[str, int] = {}
        # Strongest kind first, so `setdefault` keeps each card's best match (it never adds up).
        for path in found.paths:
            for lesson_id in self._files.get(path, ()):
                best.setdefault(lesson_id, FILE_SCORE)
        for path in found.paths:
            for folder in _ancestors(path):
                for lesson_id in self._folders.get(folder, ()):
                    best.setdefault(lesson_id, FOLDER_SCORE)
        # Set intersections run in C: a Write of a whole file brings hundreds of names and
        # words, and only the few that are anchors cost a Python-level step.
        identifiers = self._identifiers
        for name in found.identifiers & identifiers.keys():
            for lesson_id in identifiers[name]:
                best.setdefault(lesson_id, IDENTIFIER_SCORE)
        words = found.words
        groups = self._groups
        for word in words & groups.keys():
            for lesson_id, terms in groups[word]:
                if lesson_id not in best and terms <= words:
                    best[lesson_id] = GROUP_SCORE
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def explain(anchors: Anchors, found: Signals, score: int) -> str:
    """The anchor behind `score` for a card (`file proto/user.proto`), for receipts and people."""
    if score == FILE_SCORE:
        paths = set(found.paths)
        return next((f"file {p}" for p in anchors.files if p in paths), "file")
    if score == FOLDER_SCORE:
        inside = {folder for path in found.paths for folder in _ancestors(path)}
        return next((f"folder {f}" for f in anchors.folders if f in inside), "folder")
    if score == IDENTIFIER_SCORE:
        names = found.identifiers
        return next((f"identifier {n}" for n in anchors.identifiers if n in names), "identifier")
    words = found.words
    return next(
        (f"keywords {' '.join(g)}" for g in anchors.keyword_groups if words.issuperset(g)),
        "keywords",
    )


def _drop(table: dict[str, set[str]], keys: Iterable[str], lesson_id: str) -> None:
    for key in keys:
        ids = table.get(key)
        if ids is not None:
            ids.discard(lesson_id)
            if not ids:
                del table[key]
