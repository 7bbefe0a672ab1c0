"""The coding-agent hooks hand at most `--max-context-chars` (9,000 by default) characters of
context per event. Past 10,000 characters Claude Code saves a hook's context to a file and shows
the model a 2 KB preview; Codex does the same past its token limit. What does not fit is left
out as over a budget, and is not recorded as handed: a later prompt or tool call hands it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import agent_hooks, cli
from memory_worker.core import transitions
from memory_worker.core.injection import fit_section, render_memories, render_section
from memory_worker.core.models import Hit, Memory, Rule

SESSION = "sess-cap"
TOPICS = ("kiln", "glaze", "clay", "wheel", "mug", "bowl", "plate", "vase", "cup", "jug")


@pytest.fixture(name="data")
def _data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(name="config")
def _config(tmp_path: Path) -> Path:
    """Budgets far past an agent's cap: only the hook's own limit keeps the context inside."""
    config = tmp_path / "memory.yaml"
    config.write_text(
        "max_rule_chars: 60000\nrecall_budget_tokens: 20000\nrecall_limit: 40\n"
        "lesson_hook_tokens: 30000\n"
    )
    return config


@pytest.fixture(name="where")
def _where(data: Path, config: Path) -> list[str]:
    """The data dir and configuration every command of a test is run with."""
    return ["--data-dir", str(data), "--config", str(config)]


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str = "",
) -> str:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def _call(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
    function: str,
    payload: dict[str, Any],
) -> dict[str, Any]:
    out = _run(monkeypatch, capsys, ["trigger", function, *where, "--json", json.dumps(payload)])
    return dict(json.loads(out))


def _told(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
    event: str,
    body: dict[str, Any],
    *extra: str,
) -> str | None:
    agent_event = agent_hooks.EVENTS[event].agent_event
    payload = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": agent_event, **body}
    out = _run(monkeypatch, capsys, ["hook", event, *where, *extra], json.dumps(payload))
    if not out.strip():
        return None
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


def _memories(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    for n, topic in enumerate(TOPICS * 3):
        text = f"Pottery note {n} about the {topic}: " + f"the {topic} studio detail {n}. " * 30
        _call(monkeypatch, capsys, where, "memory::save", {"text": text})


def test_each_prompt_hands_what_fits_and_the_next_one_the_rest(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
) -> None:
    _memories(monkeypatch, capsys, where)
    prompt = {"prompt": "pottery note studio detail kiln glaze clay wheel mug bowl"}
    seen: set[str] = set()
    for _ in range(6):
        told = _told(monkeypatch, capsys, where, "user-prompt-submit", prompt)
        if told is None:
            break
        assert len(told) <= agent_hooks.MAX_CONTEXT_CHARS
        lines = {line for line in told.splitlines() if line.startswith("- [")}
        assert lines and not lines & seen  # nothing handed twice
        seen |= lines
    assert len(seen) > 10  # the ones cut from a prompt were handed by the next ones


def test_lesson_cards_fit_the_cap_and_the_rest_come_with_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
) -> None:
    for n in range(40):
        card = {
            "text": f"Lesson {n} about the proto files. " + "Regenerate the stubs first. " * 40,
            "category": "lesson",
            "title": f"Proto rule {n}",
            "recommendation": f"After editing protos, run make gen variant {n}. " * 8,
            "anchors": {"files": ["proto/user.proto"]},
        }
        _call(monkeypatch, capsys, where, "memory::save", card)
    call = {"tool_name": "Read", "tool_input": {"file_path": "/repo/proto/user.proto"}}
    first = _told(monkeypatch, capsys, where, "pre-tool-use", {**call, "tool_use_id": "t1"})
    assert first is not None and len(first) <= agent_hooks.MAX_CONTEXT_CHARS
    second = _told(monkeypatch, capsys, where, "pre-tool-use", {**call, "tool_use_id": "t2"})
    assert second is not None and len(second) <= agent_hooks.MAX_CONTEXT_CHARS
    titles = [
        {f"Proto rule {n}" for n in range(40) if f"Proto rule {n}\n" in text or
         f"Proto rule {n}<" in text or f"Proto rule {n} " in text}
        for text in (first, second)
    ]  # fmt: skip
    assert titles[0] and titles[1] and not titles[0] & titles[1]


def test_the_session_start_section_and_its_memories_share_the_cap(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
) -> None:
    _memories(monkeypatch, capsys, where)
    for n in range(8):
        rule = {"name": f"style-{n}", "content": f"Rule {n}: answer plainly. " * 120}
        _call(monkeypatch, capsys, where, "memory::rule::set", rule)
    started = _told(monkeypatch, capsys, where, "session-start", {"source": "startup"})
    assert started is not None and len(started) <= agent_hooks.MAX_CONTEXT_CHARS
    assert "## style-0" in started and "omitted" in started
    compacted = _told(
        monkeypatch,
        capsys,
        where,
        "session-start",
        {"source": "compact"},
        "--max-context-chars",
        "5000",
    )
    assert compacted is not None and len(compacted) <= 5000


def test_a_smaller_cap_is_honoured(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: list[str],
) -> None:
    _memories(monkeypatch, capsys, where)
    prompt = {"prompt": "pottery note studio detail kiln glaze"}
    told = _told(
        monkeypatch, capsys, where, "user-prompt-submit", prompt, "--max-context-chars", "2500"
    )
    assert told is not None and len(told) <= 2500 and "- [" in told


def test_a_cap_that_is_not_a_positive_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    code = cli.main(["hook", "session-start", "--data-dir", str(data), "--max-context-chars", "0"])
    assert code == 1 and "max-context-chars" in capsys.readouterr().err


def _memory(n: int, text: str) -> Memory:
    return transitions.new_memory(f"fp{n:016x}", text, now_ms=1_793_491_200_000)


@pytest.mark.parametrize("cap", [300, 1000, 4000])
def test_the_memory_block_never_passes_max_chars(cap: int) -> None:
    hits = [Hit(_memory(n, f"memory {n} " + "ü" * (n * 37 % 400)), 1.0) for n in range(60)]
    block = render_memories("main", hits, 100_000, 0, max_chars=cap)
    assert block.message is not None and len(block.message) <= cap
    fuller = render_memories("main", hits, 100_000, 0, max_chars=cap + 2000)
    assert fuller.message is not None and len(fuller.included) > len(block.included)


@pytest.mark.parametrize("cap", [50, 900, 3000, 8000])
def test_the_section_never_passes_max_chars_and_cuts_rules_as_a_budget_would(cap: int) -> None:
    rules = [Rule(name=f"r{n}", content=f"rule {n} " * 200, updated_at=1) for n in range(10)]
    section = fit_section("main", rules, 60_000, cap)
    assert len(section.text) <= cap and section.truncated
    untouched = fit_section("main", rules, 60_000, 1_000_000)
    assert untouched == render_section("main", rules, 60_000)


def test_a_rule_cut_at_the_hook_cap_names_no_budget_nobody_set() -> None:
    """A rule cut to fit the hook's cap said "over the 2814 char injection budget — trim it in
    the memory page": a budget of a number no setting holds (the bank's is 6,000, which the
    rule was under), sending the person to trim a rule that fits."""
    rules = [Rule(name="style", content="Write short sentences. " * 200, updated_at=1)]
    section = fit_section("main", rules, 6_000, 3_000)
    assert section.truncated and len(section.text) <= 3_000
    assert "[rule truncated: over this agent's hook context limit]" in section.text
    assert "char injection budget" not in section.text
    plain = render_section("main", rules, 2_000)  # over the bank's own budget: as before
    assert "over the 2000 char injection budget — trim it in the memory page" in plain.text
