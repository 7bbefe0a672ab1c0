"""`memory-worker hook pre-tool-use` (adapters.agent_hooks): a coding agent's PreToolUse JSON on
stdin, the documented `hookSpecificOutput.additionalContext` reply on stdout, once per session, and
never a failure the agent would see."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import agent_hooks, cli
from memory_worker.search import toolcall
from memory_worker.storage.store import Store

LESSON = {
    "text": "Editing the proto files needs make gen, or the checked-in stubs go stale.",
    "category": "lesson",
    "title": "Run make gen after editing protos",
    "recommendation": "After editing `proto/*.proto`, run `make gen` and commit the stubs.",
    "anchors": {"files": ["proto/user.proto"]},
}


@pytest.fixture(name="repo")
def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "svc").mkdir()
    return repo


@pytest.fixture(name="data")
def _data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    data = tmp_path / "data"
    assert (
        cli.main(["trigger", "memory::save", "--data-dir", str(data), "--json", json.dumps(LESSON)])
        == 0
    )
    capsys.readouterr()
    return data


def _hook(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    payload: Any,
    *extra: str,
) -> tuple[int, str]:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = cli.main(["hook", "pre-tool-use", "--data-dir", str(data), *extra])
    captured = capsys.readouterr()
    _errors.append(captured.err)
    return code, captured.out


_errors: list[str] = []  # stderr of each hook run, newest last


def _claude(repo: Path, tool: str, tool_input: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A PreToolUse payload as Claude Code sends it."""
    return {
        "session_id": "sess-1",
        "transcript_path": str(repo / "t.jsonl"),
        "cwd": str(repo),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": "toolu_01",
        **extra,
    }


def test_a_read_of_an_anchored_file_gets_the_card_as_additional_context(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    payload = _claude(repo, "Read", {"file_path": str(repo / "proto" / "user.proto")})
    code, out = _hook(monkeypatch, capsys, data, payload)
    assert code == 0
    reply = json.loads(out)
    assert list(reply) == ["hookSpecificOutput"]
    assert reply["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    context = reply["hookSpecificOutput"]["additionalContext"]
    assert context.startswith('<memory lessons="main">')
    assert "Run make gen after editing protos" in context
    assert set(reply["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
@pytest.mark.parametrize("cwd_through_link", [True, False])
def test_a_path_through_a_symlink_to_the_checkout_still_meets_its_card(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    repo: Path,
    tmp_path: Path,
    cwd_through_link: bool,
) -> None:
    """The agent runs in the checkout by one spelling and names the file by another (a symlink
    to it, macOS's /tmp for /private/tmp): seed 002 resolves paths against the working
    directory and the workspace root, and the same file met no card. A path elsewhere still
    meets none."""
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    link = tmp_path / "link"
    link.symlink_to(repo, target_is_directory=True)
    cwd, named = (link, repo) if cwd_through_link else (repo, link)
    payload = _claude(cwd, "Read", {"file_path": str(named / "proto" / "user.proto")})
    code, out = _hook(monkeypatch, capsys, data, payload)
    assert (
        code == 0 and "Run make gen" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    )
    elsewhere = tmp_path / "other" / "proto" / "user.proto"
    payload = _claude(cwd, "Read", {"file_path": str(elsewhere)}, session_id="sess-2")
    assert _hook(monkeypatch, capsys, data, payload) == (0, "")


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_respelling_a_calls_paths_costs_few_lookups_and_reaches_deep_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The respelling runs on the hook's loop, where its budget (`HOOK_BUDGET_S`) cannot cut it
    short: a realpath per ancestor cost lstats quadratic in a string's depth (80 ms for one long
    slash-heavy argument on a local disk, minutes for a call with many, far more on a network
    file system). Bounded now for the whole call; and a file more than 64 folders below the
    link (the ancestors looked at were the 64 deepest) is respelled too."""
    repo = tmp_path / "repo"
    repo.mkdir()
    link = tmp_path / "link"
    link.symlink_to(repo, target_is_directory=True)
    below = Path(*["d"] * 70, "x.py")
    lookups: list[object] = []
    lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        lookups.append(path)
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    slashy = "/" + "a/" * 500  # a regex, a pasted URL path, one line of code
    arguments = {"file_path": str(link / below), **{f"arg{i}": slashy for i in range(10)}}
    respelled = agent_hooks._respelled(arguments, str(repo))
    assert respelled["file_path"] == str(repo / below)
    assert all(respelled[f"arg{i}"] == slashy for i in range(10))
    assert len(lookups) <= 5_000


def test_inject_lessons_off_means_no_card_from_the_hook(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    repo: Path,
    tmp_path: Path,
) -> None:
    """`inject_lessons: false` turns the cards off for a coding agent's hook as for the harness's;
    an agent asking `memory::lessons::match` itself still gets them."""
    config = tmp_path / "config.yaml"
    config.write_text("inject_lessons: false\n", encoding="utf-8")
    payload = _claude(repo, "Read", {"file_path": str(repo / "proto" / "user.proto")})
    assert _hook(monkeypatch, capsys, data, payload, "--config", str(config)) == (0, "")
    asked = {"tool": "Read", "arguments": {"file_path": "proto/user.proto"}}
    argv = ["trigger", "memory::lessons::match", "--json", json.dumps(asked)]
    assert cli.main([*argv, "--data-dir", str(data), "--config", str(config)]) == 0
    assert json.loads(capsys.readouterr().out)["matched"] == 1


def test_the_card_is_given_once_per_session_and_again_to_a_retried_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    read = {"file_path": str(repo / "proto" / "user.proto")}
    first = _hook(monkeypatch, capsys, data, _claude(repo, "Read", read))[1]
    assert _hook(monkeypatch, capsys, data, _claude(repo, "Read", read))[1] == first  # same call
    later = _claude(repo, "Read", read, tool_use_id="toolu_02")
    assert _hook(monkeypatch, capsys, data, later) == (0, "")
    other = _claude(repo, "Read", read, session_id="sess-2", tool_use_id="toolu_03")
    assert _hook(monkeypatch, capsys, data, other)[1] == first


def test_a_subagent_is_its_own_conversation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    """Claude Code runs a subagent (Task, Explore) in a context of its own and sends its tool
    calls with the parent's `session_id` plus an `agent_id`: a card the subagent was given never
    reached the main conversation, which must still get it (and each subagent its own)."""
    read = {"file_path": str(repo / "proto" / "user.proto")}
    explorer = _claude(repo, "Read", read, agent_id="a1", agent_type="Explore")
    first = _hook(monkeypatch, capsys, data, explorer)[1]
    assert "Run make gen" in first
    again = _claude(repo, "Read", read, agent_id="a1", tool_use_id="toolu_02")
    assert _hook(monkeypatch, capsys, data, again) == (0, "")  # once per subagent
    main = _claude(repo, "Edit", {**read, "old_string": "a", "new_string": "b"}, tool_use_id="t3")
    assert "Run make gen" in _hook(monkeypatch, capsys, data, main)[1]
    other = _claude(repo, "Read", read, agent_id="a2", tool_use_id="toolu_04")
    assert "Run make gen" in _hook(monkeypatch, capsys, data, other)[1]


@pytest.mark.parametrize(
    ("tool", "tool_input", "cwd"),
    [
        ("Bash", {"command": "cd proto && buf lint user.proto"}, "."),
        ("Edit", {"file_path": "proto/user.proto", "old_string": "a", "new_string": "b"}, "."),
        ("Grep", {"pattern": "message User", "path": "../proto/user.proto"}, "svc"),
        # Codex: apply_patch carries the patch body in tool_input.command.
        (
            "apply_patch",
            {"command": "*** Begin Patch\n*** Update File: proto/user.proto\n@@\n-a\n+b\n"},
            ".",
        ),
        # Codex on Windows: a PowerShell argv, or a command line PowerShell runs.
        (
            "shell",
            {"command": ["powershell.exe", "-Command", "Get-Content proto\\user.proto"]},
            ".",
        ),
        ("shell_command", {"command": "Set-Location proto; Get-Content .\\user.proto"}, "."),
    ],
)
def test_claude_code_and_codex_tool_shapes_are_read(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    repo: Path,
    tool: str,
    tool_input: dict[str, Any],
    cwd: str,
) -> None:
    payload = _claude(repo, tool, tool_input, cwd=str((repo / cwd).resolve()))
    code, out = _hook(monkeypatch, capsys, data, payload)
    assert (
        code == 0 and "Run make gen" in json.loads(out)["hookSpecificOutput"]["additionalContext"]
    )


def test_the_workspace_root_is_the_git_root_above_the_cwd(repo: Path) -> None:
    assert agent_hooks.workspace_root(str(repo / "svc"), None, {}) == str(repo)
    assert agent_hooks.workspace_root(str(repo), None, {"CLAUDE_PROJECT_DIR": "/p"}) == "/p"
    assert agent_hooks.workspace_root(str(repo), "/x", {"CLAUDE_PROJECT_DIR": "/p"}) == "/x"


def test_a_workspace_root_given_with_a_tilde_or_relative_is_the_folder_it_names(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    tmp_path: Path,
) -> None:
    """`--workspace-root=~/work` (no shell expands a tilde after `=`) or `--workspace-root .` is
    the folder it names, as `--data-dir` is: it was taken for no root at all, so the hook's cwd
    (a subfolder, in a checkout without `.git`) became the root and a Read of the anchored file
    above it met nothing."""
    home = tmp_path / "home"
    work = home / "work"
    (work / "svc").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_PROJECT_DIR", raising=False)
    read = {"file_path": str(work / "proto" / "user.proto")}
    payload = _claude(work, "Read", read, cwd=str(work / "svc"), session_id="tilde")
    code, out = _hook(monkeypatch, capsys, data, payload, "--workspace-root=~/work")
    assert code == 0 and "Run make gen" in out
    monkeypatch.chdir(work)
    payload = _claude(work, "Read", read, cwd=str(work / "svc"), session_id="dot")
    code, out = _hook(monkeypatch, capsys, data, payload, "--workspace-root", ".")
    assert code == 0 and "Run make gen" in out


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        {"hook_event_name": "PreToolUse", "session_id": "s"},  # no tool
        {"hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {"file_path": "x"}},
    ],
)
def test_unusable_input_prints_nothing_and_exits_0(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    payload: Any,
) -> None:
    assert _hook(monkeypatch, capsys, data, payload) == (0, "")


def test_stdin_that_is_not_utf8_prints_nothing_and_exits_0(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: Path,
    repo: Path,
) -> None:
    """Python decodes stdin strictly under a UTF-8 locale (macOS's en_US.UTF-8): a Latin-1 byte
    in the agent's JSON must not escape as a traceback."""
    raw = json.dumps(_claude(repo, "Read", {"file_path": "proto/user.proto"})).encode()
    raw = raw.replace(b"user.proto", b"caf\xe9.proto")
    stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="strict")
    monkeypatch.setattr("sys.stdin", stdin)
    code = cli.main(["hook", "pre-tool-use", "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (0, "")
    assert "hook_input_not_utf8" in captured.err


class _BrokenStdin(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(5, "Input/output error")


@pytest.mark.parametrize("stdin", [None, io.TextIOWrapper(io.BufferedReader(_BrokenStdin()))])
def test_a_stdin_that_is_closed_or_cannot_be_read_prints_nothing_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, stdin: Any
) -> None:
    """A hook run with its stdin closed (`sys.stdin` is None) or failing to read was an
    `AttributeError` / `OSError` traceback with exit status 1, not the promised silent 0."""
    monkeypatch.setattr("sys.stdin", stdin)
    code = cli.main(["hook", "session-start", "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (0, "")
    assert "hook_input_unreadable" in captured.err


def test_the_reply_reaches_an_agent_whose_pipe_is_not_utf8(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Python writes a pipe in the locale's encoding (Windows' cp1252): a memory's `→` or `東京`
    must still reach the agent, not turn the whole reply into nothing."""
    data = tmp_path / "data"
    fact = {"text": "The user flies Lisbon → 東京 every spring"}
    saving = ["trigger", "memory::save", "--data-dir", str(data), "--json", json.dumps(fact)]
    assert cli.main(saving) == 0
    capsys.readouterr()
    prompt = {
        "session_id": "s",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "where does the user fly every spring",
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(prompt)))
    pipe = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(pipe, encoding="cp1252", newline="\n"))
    code = cli.main(["hook", "user-prompt-submit", "--data-dir", str(data)])
    sys.stdout.flush()
    assert code == 0, capsys.readouterr().err
    reply = json.loads(pipe.getvalue().decode("cp1252"))
    assert fact["text"] in reply["hookSpecificOutput"]["additionalContext"]


def test_the_prompt_is_read_as_utf8_whatever_the_locale(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The agent writes its JSON in UTF-8; Python would decode stdin in the locale's encoding
    (Windows' cp1252, where `東`'s bytes are not even defined) and the prompt got no memory."""
    data = tmp_path / "data"
    saving = ["trigger", "memory::save", "--data-dir", str(data), "--json"]
    assert cli.main([*saving, json.dumps({"text": "The user moved to 東京 in 2024"})]) == 0
    capsys.readouterr()
    prompt = {
        "session_id": "s",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "when did I move to 東京",
    }
    raw = json.dumps(prompt, ensure_ascii=False).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="cp1252"))
    code = cli.main(["hook", "user-prompt-submit", "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert code == 0 and captured.out, captured.err
    reply = json.loads(captured.out)
    assert "The user moved to 東京 in 2024" in reply["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("bank", ["Main", "../x", ""])
def test_a_bank_name_no_bank_can_have_is_a_typo_in_the_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, bank: str
) -> None:
    """`--bank Main` can never name a bank: like any other typo on the hook's command line it
    exits 1 with `{code, message}` on stderr, which the agent reports. It exited 0 with a log
    line nobody reads, so a misspelt setting went on giving no memory without a word."""
    prompt = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(prompt)))
    data = tmp_path / "data"
    code = cli.main(["hook", "user-prompt-submit", "--bank", bank, "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input" and "--bank" in error["message"]
    assert not data.exists()  # refused before anything was opened


def test_a_byte_order_mark_before_the_json_is_read_past(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A UTF-8 byte order mark ahead of the hook's JSON (what PowerShell pipes once
    `$OutputEncoding` is `[Text.Encoding]::UTF8`, or a payload saved by a Windows editor) is no
    JSON: the hook printed nothing, where `call --batch` and `import` read the same bytes."""
    data = tmp_path / "data"
    saving = ["trigger", "memory::save", "--data-dir", str(data), "--json"]
    assert cli.main([*saving, json.dumps({"text": "The user keeps bees on the roof"})]) == 0
    capsys.readouterr()
    prompt = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "my bees"}
    raw = b"\xef\xbb\xbf" + json.dumps(prompt).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
    code = cli.main(["hook", "user-prompt-submit", "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert code == 0 and captured.out, captured.err
    reply = json.loads(captured.out)
    assert "The user keeps bees on the roof" in reply["hookSpecificOutput"]["additionalContext"]


def test_a_data_dir_held_by_a_process_without_a_url_fails_open_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    holder = {"pid": os.getpid(), "kind": "serve", "command": "memory-worker serve"}
    store = Store.open(data, holder=holder)
    try:
        payload = _claude(repo, "Read", {"file_path": str(repo / "proto" / "user.proto")})
        code, out = _hook(monkeypatch, capsys, data, payload)
        assert (code, out) == (0, "")
        assert "hook_failed" in _errors[-1] and "in use by" in _errors[-1]  # logged, not shown
    finally:
        asyncio.run(store.close())


def test_a_tool_argument_is_sent_as_far_as_lesson_matching_reads_it() -> None:
    assert agent_hooks.MAX_ARGUMENT_CHARS == toolcall.MAX_SCAN_CHARS_PER_VALUE


def test_a_long_patch_still_names_every_file_it_touches(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    """Codex's apply_patch edits several files in one body: a first file's long hunk must not
    push the next file's header out of what the hook sends to be matched."""
    hunk = "".join(f"+line {n} of the new handler\n" for n in range(600))  # ~17 KB
    patch = (
        f"*** Begin Patch\n*** Update File: svc/handler.py\n@@\n{hunk}"
        "*** Update File: proto/user.proto\n@@\n-a\n+b\n*** End Patch\n"
    )
    assert len(patch) > agent_hooks.MAX_ARGUMENT_CHARS
    for n, command in enumerate([patch, ["apply_patch", patch]]):
        payload = _claude(repo, "apply_patch", {"command": command}, session_id=f"s-{n}")
        code, out = _hook(monkeypatch, capsys, data, payload)
        assert code == 0 and out, _errors[-1]
        assert "Run make gen" in json.loads(out)["hookSpecificOutput"]["additionalContext"]


def test_every_event_has_a_command_and_an_agent_event_name() -> None:
    assert set(agent_hooks.EVENTS) == {
        "session-start",
        "user-prompt-submit",
        "pre-tool-use",
        "stop",
    }
    for name, event in agent_hooks.EVENTS.items():
        assert event.name == name and event.agent_event and event.help


def test_a_hook_waits_out_another_commands_recall_catching_its_bank_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path, repo: Path
) -> None:
    """A PreToolUse hook beside a parallel MCP recall that holds the data dir while it embeds
    what its bank lacks (up to `cli.CATCH_UP_S`, plus loading the model): waited for 1 s, the
    hook came back empty; the lesson card reaches the agent once the recall lets go (1.5 s)."""
    from memory_worker.storage import files

    from .test_lock import _cli_holder, _QueueClock

    clock = _QueueClock(data, [(1.5, None)])  # the recall holds the dir 1.5 s
    clock.hold(_cli_holder(1))
    monkeypatch.setattr(files, "time", clock)
    try:
        payload = _claude(repo, "Read", {"file_path": str(repo / "proto" / "user.proto")})
        code, out = _hook(monkeypatch, capsys, data, payload)
    finally:
        clock.close()
    assert code == 0 and "make gen" in out, _errors[-1]
    assert clock.now >= 1.5
