"""The lesson matcher: each rule of seed 002's "Indexing and retrieval" as a table, and properties.

Each case is a set of lessons (id → anchors), one tool call, and the `(id, score)` list the matcher
must return — order included (score descending, then id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_worker.core.lessons import prepare_anchors
from memory_worker.core.models import Anchors
from memory_worker.search.lessons import (
    FILE_SCORE,
    FOLDER_SCORE,
    GROUP_SCORE,
    IDENTIFIER_SCORE,
    LessonIndex,
)
from memory_worker.search.toolcall import signals

ROOT = "/work/repo"


def _anchors(spec: dict[str, Any]) -> Anchors:
    return prepare_anchors(
        files=spec.get("files", ()),
        folders=spec.get("folders", ()),
        identifiers=spec.get("identifiers", ()),
        keyword_groups=spec.get("groups", ()),
    )


LESSONS: dict[str, dict[str, Any]] = {
    "proto-file": {"files": ["proto/user.proto"]},
    "proto-folder": {"folders": ["proto"]},
    "api-folder": {"folders": ["svc/api"]},
    "bedrock-ident": {"identifiers": ["configure_bedrock", "CLAUDE_CODE_USE_BEDROCK"]},
    "bedrock-group": {"groups": [["bedrock", "region"]]},
    "gen-group": {"groups": [["proto", "stubs", "regenerate"]]},
    "camel-ident": {"identifiers": ["MemoryService"]},
    "notes": {"files": ["docs/my notes.md"]},
    "site-content": {"folders": ["content"]},
    "js-folder": {"folders": ["js"]},
    "api-test": {"files": ["tests/test_api.py"]},
    "readme": {"files": ["README.md"]},
    "resume": {"files": ["docs/r\u00e9sum\u00e9 notes.md"]},
    "k8s-group": {"groups": [["k8s", "helm"]]},
    "s3-group": {"groups": [["aws", "s3"]]},
    "i18n-group": {"groups": [["i18n", "e2e"]]},
    "github-group": {"groups": [["github", "actions"]]},
    "oauth-group": {"groups": [["oauth", "token"]]},
    "makefile-group": {"groups": [["makefile", "target"]]},
    "setup-group": {"groups": [["setup", "fixture"]]},
    "useeffect-group": {"groups": [["useeffect", "load"]]},
    "macos-group": {"groups": [["macos", "codesign"]]},
    "everything": {
        "files": ["proto/user.proto"],
        "folders": ["proto"],
        "identifiers": ["configure_bedrock"],
        "groups": [["bedrock", "region"]],
    },
}


# Only in the cases naming them.
_ASKED_FOR = frozenset(
    {"notes", "site-content", "js-folder", "api-test", "resume", "readme"}
    | {"k8s-group", "s3-group", "i18n-group", "github-group"}
    | {"oauth-group", "makefile-group", "setup-group", "macos-group", "useeffect-group"}
)


@dataclass(frozen=True)
class Case:
    name: str
    tool: str
    arguments: dict[str, Any]
    expected: list[tuple[str, int]]
    cwd: str | None = ROOT
    root: str | None = ROOT
    lessons: tuple[str, ...] = field(default=tuple(n for n in LESSONS if n not in _ASKED_FOR))


CASES = [
    # --- scores and "each card scores its strongest match once" --------------------------------
    Case(
        "exact file beats containing folder; a card with both scores its best once",
        "Read",
        {"file_path": f"{ROOT}/proto/user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a sibling file only gets the folder",
        "Read",
        {"file_path": f"{ROOT}/proto/order.proto"},
        [("everything", FOLDER_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "ties sort by lesson id",
        "Read",
        {"file_path": "proto/a.proto"},
        [("a", FOLDER_SCORE), ("b", FOLDER_SCORE), ("c", FOLDER_SCORE)],
        lessons=("c", "a", "b"),
    ),
    Case(
        "whole identifier in a search pattern",
        "Grep",
        {"pattern": "def configure_bedrock\\(", "path": f"{ROOT}/src"},
        [("bedrock-ident", IDENTIFIER_SCORE), ("everything", IDENTIFIER_SCORE)],
    ),
    Case(
        "identifiers are case-sensitive and whole",
        "Grep",
        {"pattern": "CONFIGURE_BEDROCK|configure_bedrock_v2"},
        [],
    ),
    Case(
        "an identifier matches inside an environment assignment",
        "Bash",
        {"command": "CLAUDE_CODE_USE_BEDROCK=1 claude -p hello"},
        [("bedrock-ident", IDENTIFIER_SCORE)],
    ),
    Case(
        "camelCase identifier matched whole",
        "Edit",
        {"file_path": "src/app.py", "old_string": "MemoryService(store)", "new_string": "x"},
        [("camel-ident", IDENTIFIER_SCORE)],
    ),
    # --- keyword groups --------------------------------------------------------------------------
    Case(
        "all terms of a group, from plain words",
        "Grep",
        {"pattern": "bedrock region"},
        [("bedrock-group", GROUP_SCORE), ("everything", GROUP_SCORE)],
    ),
    Case(
        "one term of a group is not enough: a broad single word never matches",
        "Grep",
        {"pattern": "bedrock"},
        [],
    ),
    Case(
        "repeated words never add: one word said three times is still one term",
        "Grep",
        {"pattern": "bedrock bedrock bedrock"},
        [],
    ),
    Case(
        "identifiers split into snake words feed the groups",
        "Edit",
        {"file_path": "src/x.py", "old_string": "BEDROCK_REGION = 'us'", "new_string": ""},
        [("bedrock-group", GROUP_SCORE), ("everything", GROUP_SCORE)],
    ),
    Case(
        "identifiers split into camel words feed the groups",
        "Grep",
        {"pattern": "regenerateProtoStubs"},
        [("gen-group", GROUP_SCORE)],
    ),
    Case(
        "a group's terms may come from different places of one call",
        "Bash",
        {"command": "make regenerate", "description": "refresh the proto stubs"},
        [("gen-group", GROUP_SCORE)],
    ),
    Case(
        "a stronger match of the same card wins over its group",
        "Grep",
        {"pattern": "configure_bedrock region"},
        [
            ("bedrock-ident", IDENTIFIER_SCORE),
            ("everything", IDENTIFIER_SCORE),  # its group matches too: the identifier wins
            ("bedrock-group", GROUP_SCORE),  # `configure_bedrock` split gives "bedrock"
        ],
    ),
    # Terms that mix letters and digits are one word on both sides (`k8s`, not k8 + s).
    Case(
        "a term with digits inside, from a shell argument",
        "Bash",
        {"command": "kubectl --context k8s-prod rollout restart && helm list"},
        [("k8s-group", GROUP_SCORE)],
        lessons=("k8s-group", "s3-group", "i18n-group"),
    ),
    Case(
        "a term with digits inside, from a path and an upper-case name",
        "Edit",
        {
            "file_path": f"{ROOT}/deploy/k8s/values.yaml",
            "old_string": "HELM_TIMEOUT: 5m",
            "new_string": "",
        },
        [("k8s-group", GROUP_SCORE)],
        lessons=("k8s-group", "s3-group", "i18n-group"),
    ),
    Case(
        "a two-character term of a letter and a digit, and terms inside camel and snake names",
        "Bash",
        {"command": "aws s3 cp build s3://bucket && npm run test:e2e -- --grep useI18nHook"},
        [("i18n-group", GROUP_SCORE), ("s3-group", GROUP_SCORE)],
        lessons=("k8s-group", "s3-group", "i18n-group"),
    ),
    Case(
        "the pieces of such a term are not the term: k8 and s never make k8s",
        "Bash",
        {"command": "echo k8 s && helm version"},
        [],
        lessons=("k8s-group", "s3-group", "i18n-group"),
    ),
    # A name written in camel case is also its words run together: `GitHub`, `OAuth`,
    # `PostgreSQL` are how text spells the terms `github`, `oauth`, `postgresql`.
    Case(
        "a term spelled in camel case in the call (GitHub) is the term (github)",
        "Bash",
        {"command": "gh run list", "description": "Check the GitHub Actions runs"},
        [("github-group", GROUP_SCORE)],
        lessons=("github-group", "bedrock-group"),
    ),
    Case(
        "a brand's camel spelling in a name is the term too: OAuth_token is oauth",
        "Grep",
        {"pattern": "OAuth_token", "path": f"{ROOT}/src"},
        [("oauth-group", GROUP_SCORE)],
        lessons=("oauth-group",),
    ),
    Case(
        "a brand led by a word and an acronym (macOS) is the term",
        "Bash",
        {"command": "codesign --verify app", "description": "Sign the app for macOS"},
        [("macos-group", GROUP_SCORE)],
        lessons=("macos-group",),
    ),
    # A lowerCamel name run together is a term too: a keyword naming a React hook or a browser
    # API (`useeffect`, `localstorage`) means the name a call writes `useEffect`. (So `makeFile`
    # also meets a `makefile` keyword: a near miss kept, where splitting silenced such keywords.)
    Case(
        "a lowerCamel name run together is the term: useEffect names the useeffect keyword",
        "Edit",
        {
            "file_path": f"{ROOT}/src/App.jsx",
            "old_string": "useEffect(() => load(), [])",
            "new_string": "useEffect(() => load(id), [id])",
        },
        [("useeffect-group", GROUP_SCORE)],
        lessons=("useeffect-group",),
    ),
    Case(
        "the terms written as a call spells them still match: Makefile, setup",
        "Bash",
        {"command": "make -f Makefile target && python setup.py fixture"},
        [("makefile-group", GROUP_SCORE), ("setup-group", GROUP_SCORE)],
        lessons=("makefile-group", "setup-group"),
    ),
    Case(
        "its camel pieces are not the term: git and hub never make github",
        "Bash",
        {"command": "git log", "description": "the hub of the actions"},
        [],
        lessons=("github-group",),
    ),
    # --- folders, component by component ---------------------------------------------------------
    Case(
        "a folder named by the call itself matches",
        "LS",
        {"path": f"{ROOT}/proto"},
        [("everything", FOLDER_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a folder prefix that is not a whole component does not match",
        "Read",
        {"file_path": f"{ROOT}/proto2/user.proto"},
        [],
    ),
    Case(
        "folders are root-relative: a nested folder of the same name does not match",
        "Read",
        {"file_path": f"{ROOT}/vendor/proto/user.proto"},
        [],
    ),
    Case(
        "a deep path matches a multi-component folder",
        "Write",
        {"file_path": f"{ROOT}/svc/api/handlers/users.go", "content": "package handlers"},
        [("api-folder", FOLDER_SCORE)],
    ),
    Case(
        "svc/apiary is not inside svc/api",
        "Read",
        {"file_path": f"{ROOT}/svc/apiary/x.go"},
        [],
    ),
    # --- paths against the working directory and the root ----------------------------------------
    Case(
        "relative path resolved against the tool's cwd",
        "Read",
        {"file_path": "user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
        cwd=f"{ROOT}/proto",
    ),
    Case(
        "relative path read from the workspace root too",
        "Read",
        {"file_path": "proto/user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
        cwd=f"{ROOT}/svc",
    ),
    Case(
        "dot segments are resolved lexically",
        "Read",
        {"file_path": "./../proto/./user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
        cwd=f"{ROOT}/svc",
    ),
    Case(
        "an absolute path outside the workspace matches nothing",
        "Read",
        {"file_path": "/etc/proto/user.proto"},
        [],
    ),
    Case(
        "with no cwd and no root, a relative path is root-relative",
        "Read",
        {"file_path": "proto/user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
        cwd=None,
        root=None,
    ),
    # --- shell forms ----------------------------------------------------------------------------
    Case(
        "cd dir && … moves the working directory for what follows",
        "Bash",
        {"command": "cd proto && protoc --go_out=. user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "cd with an absolute directory, then a relative argument",
        "Bash",
        {"command": f"cd {ROOT}/svc/api; go test ./handlers/..."},
        [("api-folder", FOLDER_SCORE)],
    ),
    Case(
        "arguments that are paths",
        "Bash",
        {"command": "git diff --stat -- proto/user.proto | head -20"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "--flag=path arguments",
        "Bash",
        {"command": "buf lint --path=proto/user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "git's <rev>:<path> names the file at that revision (a path from the repository's top)",
        "Bash",
        {"command": "cd svc && git show HEAD~1:proto/user.proto && git diff main:proto/user.proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a colon elsewhere names no path after it (a port, an npm script, a volume, :/message)",
        "Bash",
        {"command": "npm run test:proto && docker run -v proto:/app x && git show :/proto"},
        [],
    ),
    Case(
        "bash -lc 'cd … && …' as an argv (Codex shell)",
        "shell",
        {"command": ["bash", "-lc", "cd svc/api && make test"]},
        [("api-folder", FOLDER_SCORE)],
    ),
    Case(
        "iii shell::exec {command, args, cwd}",
        "shell::exec",
        {"command": "cat", "args": ["user.proto"], "cwd": "proto"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a Codex apply_patch body names its files",
        "apply_patch",
        {"command": f"*** Begin Patch\n*** Update File: {ROOT}/proto/user.proto\n@@\n+x\n"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a Codex apply_patch run through the shell tool as an argv names its files",
        "shell",
        {"command": ["apply_patch", "*** Begin Patch\n*** Update File: proto/user.proto\n+x\n"]},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "a Codex apply_patch tool's input names its files",
        "apply_patch",
        {"input": "*** Begin Patch\n*** Add File: docs/my notes.md\n+x\n*** End Patch\n"},
        [("notes", FILE_SCORE)],
        lessons=("notes",),
    ),
    Case(
        "a unified diff names its files",
        "Bash",
        {"command": "git apply <<'EOF'\n--- a/proto/user.proto\n+++ b/proto/user.proto\n"},
        [("everything", FILE_SCORE), ("proto-file", FILE_SCORE), ("proto-folder", FOLDER_SCORE)],
    ),
    Case(
        "Codex apply_patch in a shell heredoc: the files it names, never its body's words",
        "shell",
        {
            "command": [
                "bash",
                "-lc",
                "cd docs && apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: my notes.md\n"
                "+see content/ and js/ for the pages\n*** End Patch\nEOF\n",
            ]
        },
        [("notes", FILE_SCORE)],
        lessons=("notes", "site-content", "js-folder"),
    ),
    Case(
        "a pytest node id names its test file",
        "Bash",
        {"command": "python -m pytest -q tests/test_api.py::test_login -x"},
        [("api-test", FILE_SCORE)],
        lessons=("api-test",),
    ),
    Case(
        "a file:line argument names its file",
        "Bash",
        {"command": "code -g proto/user.proto:12:3"},
        [("proto-file", FILE_SCORE)],
        lessons=("proto-file",),
    ),
    Case(
        "a Windows drive letter in another case is the same root",
        "Read",
        {"file_path": "c:\\work\\repo\\proto\\user.proto"},
        [("proto-file", FILE_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file",),
    ),
    # Codex on Windows runs commands in PowerShell (`["powershell.exe", "-Command", …]`, or a
    # command line it hands PowerShell), cmd too, where a backslash separates path components.
    Case(
        "Codex on Windows: a PowerShell -Command argv names its files, backslashes and all",
        "shell",
        {
            "command": [
                "powershell.exe",
                "-NoProfile",
                "-Command",
                "Get-Content proto\\user.proto",
            ],
            "workdir": "C:\\work\\repo",
        },
        [("proto-file", FILE_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file",),
    ),
    Case(
        "a cmd /c argv is a command line: cd /d, then a file relative to it",
        "shell",
        {"command": ["cmd.exe", "/c", "cd /d C:\\work\\repo\\proto && type user.proto"]},
        [("proto-file", FILE_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file",),
    ),
    Case(
        "a PowerShell command line: Set-Location, then a file relative to it",
        "shell_command",
        {"command": "Set-Location proto; Get-Content -Path user.proto"},
        [("proto-file", FILE_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file",),
    ),
    Case(
        "a Windows path in a command line keeps its separators, absolute or relative",
        "Bash",
        {"command": "Get-Content C:\\work\\repo\\proto\\user.proto; type proto\\user.proto"},
        [("proto-file", FILE_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file",),
    ),
    Case(
        "a Windows path is no prefix trap either: proto2\\ is not proto\\",
        "Bash",
        {"command": "Get-Content proto2\\user.proto; type .\\protos\\user.proto"},
        [],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file", "proto-folder"),
    ),
    Case(
        "Git Bash on Windows spells the root's drive /c/: the same file",
        "Bash",
        {"command": "cat /c/work/repo/proto/user.proto && cd /c/work/repo/svc/api && ls"},
        [("proto-file", FILE_SCORE), ("api-folder", FOLDER_SCORE)],
        cwd="C:\\work\\repo",
        root="C:\\work\\repo",
        lessons=("proto-file", "api-folder"),
    ),
    Case(
        "nor is it in another case or as Git Bash spells it on Windows",
        "Bash",
        {"command": "cat /c/srv/bedrock-region/README.md c:\\srv\\bedrock-region\\x.md"},
        [],
        cwd="C:\\srv\\bedrock-region",
        root="C:\\srv\\bedrock-region",
    ),
    Case(
        "a shell word with an escaped space is still one POSIX path",
        "Bash",
        {"command": "cat docs/my\\ notes.md"},
        [("notes", FILE_SCORE)],
        lessons=("notes",),
    ),
    Case(
        "the workspace's own location is no word of the call",
        "Read",
        {"file_path": "/srv/bedrock-region/README.md"},
        [],
        cwd="/srv/bedrock-region",
        root="/srv/bedrock-region",
    ),
    Case(
        "a working directory of `.` is the root, and `cd` moves from it",
        "Bash",
        {"command": "cd proto && cat user.proto"},
        [("proto-file", FILE_SCORE)],
        cwd=".",
        lessons=("proto-file",),
    ),
    Case(
        "a decomposed (NFD) spelling of an anchored file is the same file",
        "Read",
        {"file_path": f"{ROOT}/docs/re\u0301sume\u0301 notes.md"},
        [("resume", FILE_SCORE)],
        lessons=("resume",),
    ),
    Case(
        "native path fields come first, whatever the order the model wrote the keys in",
        "MultiEdit",
        {
            "edits": [{"old_string": "a = 1\n" * 2000, "new_string": "b = 2\n" * 2000}] * 2,
            "file_path": f"{ROOT}/src/configure_bedrock.py",
        },
        [("bedrock-ident", IDENTIFIER_SCORE)],
        lessons=("bedrock-ident",),
    ),
    Case(
        "after `cd` out of the workspace a relative path names none of its files",
        "Bash",
        {"command": "cd /tmp/scratch && cat README.md; cd .. && cat README.md"},
        [],
        lessons=("readme",),
    ),
    Case(
        "a `cd` that climbs out and back in is still in the workspace",
        "Bash",
        {"command": "cd ../repo/proto && cat user.proto"},
        [("proto-file", FILE_SCORE)],
        lessons=("proto-file",),
    ),
    Case(
        "a glob starts from its literal folder",
        "Glob",
        {"pattern": "**/*.go", "path": f"{ROOT}/svc/api"},
        [("api-folder", FOLDER_SCORE)],
    ),
    Case(
        "a Grep's glob filter starts from its path too, as Codex grep_files' include does",
        "Grep",
        {"pattern": "message", "path": f"{ROOT}/proto", "glob": "user.proto"},
        [("proto-file", FILE_SCORE)],
        lessons=("proto-file",),
    ),
    Case(
        "an opaque script that never names its files matches nothing",
        "Bash",
        {"command": "./run-everything.sh"},
        [],
    ),
    Case(
        "a native path field may hold spaces, and so may a quoted shell word",
        "Bash",
        {"command": "cat 'docs/my notes.md'", "description": "show proto/user.proto notes"},
        [("notes", FILE_SCORE)],
        lessons=("notes",),
    ),
    Case(
        "an argument of unknown meaning with spaces is text, not a path",
        "mcp__tool",
        {"note": "docs/my notes.md"},
        [],
        lessons=("notes",),
    ),
    Case(
        "a tool's own options are not folders: Grep output_mode content, type js",
        "Grep",
        {"pattern": "render", "path": f"{ROOT}/svc", "output_mode": "content", "type": "js"},
        [],
        lessons=("site-content", "js-folder"),
    ),
    Case(
        "nor are the edit strings of the text editor and MCP filesystem tools",
        "mcp__filesystem__edit_file",
        {
            "path": f"{ROOT}/Makefile",
            "edits": [{"oldText": "proto/old.proto", "newText": "proto/user.proto"}],
        },
        [],
        lessons=("proto-file",),
    ),
    Case(
        "an Anthropic text editor str_replace: its strings are text, its path the file",
        "str_replace_based_edit_tool",
        {
            "command": "str_replace",
            "path": f"{ROOT}/docs/my notes.md",
            "old_str": "proto/user.proto",
            "new_str": "proto/order.proto",
        },
        [("notes", FILE_SCORE)],
        lessons=("notes", "proto-file"),
    ),
    Case(
        "Codex list_dir's dir_path and Serena's relative_path are native path fields",
        "list_dir",
        {"dir_path": f"{ROOT}/docs", "relative_path": "docs/my notes.md"},
        [("notes", FILE_SCORE)],
        lessons=("notes",),
    ),
    Case(
        "file contents are never taken for paths",
        "Write",
        {"file_path": f"{ROOT}/README.md", "content": "see proto/user.proto"},
        [],
    ),
]


def _index(names: tuple[str, ...]) -> LessonIndex:
    index = LessonIndex()
    for name in names:
        index.add(name, _anchors(LESSONS.get(name, {"folders": ["proto"]})))
    return index


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_matcher_table(case: Case) -> None:
    found = signals(case.tool, case.arguments, cwd=case.cwd, workspace_root=case.root)
    assert _index(case.lessons).match(found) == case.expected


def test_the_four_scores_are_ordered_as_the_seed_says() -> None:
    assert FILE_SCORE > FOLDER_SCORE > IDENTIFIER_SCORE > GROUP_SCORE


def test_remove_forgets_every_anchor_and_readding_works() -> None:
    index = _index(tuple(LESSONS))
    for name in LESSONS:
        index.remove(name)
    assert len(index) == 0
    assert index.anchor_count == 0
    assert index._files == index._folders == index._identifiers == index._groups == {}
    assert index._keyed == index._settled == {}
    assert not index._term_use
    index.add("proto-file", _anchors(LESSONS["proto-file"]))
    found = signals("Read", {"file_path": "proto/user.proto"})
    assert index.match(found) == [("proto-file", FILE_SCORE)]


def test_readding_with_new_anchors_replaces_the_old_ones() -> None:
    index = LessonIndex()
    index.add("x", _anchors({"files": ["a/b.py"]}))
    index.add("x", _anchors({"folders": ["c"]}))
    assert index.match(signals("Read", {"file_path": "a/b.py"})) == []
    assert index.match(signals("Read", {"file_path": "c/d.py"})) == [("x", FOLDER_SCORE)]
    assert index.anchor_count == 1


def test_a_common_term_does_not_collect_every_group_that_uses_it() -> None:
    index = LessonIndex()
    # "aaa" sorts first, so while every count is zero each new group is filed under it; the
    # bucket is re-keyed as it grows and the groups move to their rarer terms.
    for n in range(200):
        index.add(f"g{n:03}", _anchors({"groups": [["aaa", f"rare{n}"]]}))
    assert len(index._groups.get("aaa", {})) < LessonIndex.REKEY_AT
    assert index.match(signals("Grep", {"pattern": "aaa rare7"})) == [("g007", GROUP_SCORE)]
    assert index.match(signals("Grep", {"pattern": "aaa"})) == []
    for n in range(200):
        index.remove(f"g{n:03}")
    assert index._groups == index._keyed == {}


# --- properties ------------------------------------------------------------------------------

_SEGMENTS = st.sampled_from(["proto", "svc", "api", "src", "user.proto", "a.go", "x"])
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=4).map("/".join)
_IDENTS = st.sampled_from(["configure_bedrock", "MemoryService", "CLAUDE_CODE_USE_BEDROCK", "a_b"])
_TERMS = st.sampled_from(["bedrock", "region", "proto", "stubs", "regenerate", "deploy", "canary"])
_ANCHORS = st.fixed_dictionaries(
    {
        "files": st.lists(_PATHS, max_size=2),
        "folders": st.lists(_PATHS, max_size=2),
        "identifiers": st.lists(_IDENTS, max_size=2),
        "groups": st.lists(st.lists(_TERMS, min_size=2, max_size=4, unique=True), max_size=2),
    }
).filter(lambda spec: any(spec.values()))
_LESSON_SETS = st.dictionaries(st.text("abcdef", min_size=1, max_size=4), _ANCHORS, max_size=12)
_CALLS = st.fixed_dictionaries(
    {
        "file_path": _PATHS,
        "command": st.lists(st.one_of(_PATHS, _IDENTS, _TERMS), max_size=6).map(" ".join),
        "pattern": st.lists(st.one_of(_IDENTS, _TERMS), max_size=4).map(" ".join),
    }
)


def _build(lessons: dict[str, dict[str, Any]], order: list[str]) -> LessonIndex:
    index = LessonIndex()
    for name in order:
        index.add(name, _anchors(lessons[name]))
    return index


@settings(max_examples=200, deadline=None)
@given(lessons=_LESSON_SETS, call=_CALLS, data=st.data())
def test_matching_is_deterministic_and_independent_of_insertion_order(
    lessons: dict[str, dict[str, Any]], call: dict[str, str], data: st.DataObject
) -> None:
    names = list(lessons)
    shuffled = data.draw(st.permutations(names))
    found = signals("Bash", call, cwd=ROOT)
    first = _build(lessons, names).match(found)
    assert first == _build(lessons, list(shuffled)).match(found)
    assert first == _build(lessons, names).match(signals("Bash", call, cwd=ROOT))
    assert first == sorted(first, key=lambda item: (-item[1], item[0]))
    assert len({lesson_id for lesson_id, _ in first}) == len(first)  # each card once


@settings(max_examples=200, deadline=None)
@given(lessons=_LESSON_SETS, call=_CALLS, data=st.data())
def test_matching_is_independent_of_argument_order_and_of_churn(
    lessons: dict[str, dict[str, Any]], call: dict[str, str], data: st.DataObject
) -> None:
    names = list(lessons)
    index = _build(lessons, names)
    reversed_call = dict(reversed(list(call.items())))
    expected = index.match(signals("Bash", call, cwd=ROOT))
    assert index.match(signals("Bash", reversed_call, cwd=ROOT)) == expected
    # Removing and re-adding any subset leaves the same answers.
    churn = data.draw(st.lists(st.sampled_from(names), unique=True) if names else st.just([]))
    for name in churn:
        index.remove(name)
    for name in churn:
        index.add(name, _anchors(lessons[name]))
    assert index.match(signals("Bash", call, cwd=ROOT)) == expected
