"""The `memory-worker` CLI as a real subprocess: trigger, call --batch, import, data-dir resolution.

The process helpers at the top (`cli_env`, `run_cli`, `BatchProcess`) are shared with test_crash and
test_lock.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.app.wire import BankConfigureRequest, RecallRequest
from memory_worker.core.config import Settings, load_settings, resolve_data_dir
from memory_worker.core.errors import InvalidInput
from memory_worker.core.text import fingerprint

from .syncs import recorded_syncs

ISOLATED_VARS = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL")
ANSWER_TIMEOUT_S = 60.0  # a hang's: the first answer includes a cold start (15 s under load)
RUN_TIMEOUT_S = 60.0  # one command: ~1.5 s idle, 26 s measured at load 25 on 2 cores
SIDE_BY_SIDE_S = 15.0  # more per command run beside others (~1.2 s of CPU each to import)


# --- process helpers -------------------------------------------------------------------------


def cli_env(**overrides: str) -> dict[str, str]:
    """The test process's environment without any variable that picks a data dir or config."""
    env = {key: value for key, value in os.environ.items() if key not in ISOLATED_VARS}
    env.update(overrides)
    return env


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "memory_worker", *args]


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    def result(self) -> Any:
        assert self.code == 0, f"exit {self.code}; stderr: {self.stderr}"
        return json.loads(self.stdout)

    def error(self) -> dict[str, str]:
        """The one JSON object a failed command writes to stderr (and nothing on stdout)."""
        assert self.code == 1, f"exit {self.code}; stdout: {self.stdout}; stderr: {self.stderr}"
        assert self.stdout == ""
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, f"stderr is not one JSON line: {self.stderr!r}"
        error = json.loads(lines[0])
        assert set(error) == {"code", "message"}
        return error


def start_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli_command(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=cwd,
        env=cli_env() if env is None else env,
    )


def finish(proc: subprocess.Popen[str], timeout: float = RUN_TIMEOUT_S) -> Outcome:
    """Wait for a started command; killed (and reaped) if it overruns."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Outcome(proc.returncode, stdout, stderr)


def finish_all(procs: Sequence[subprocess.Popen[str]]) -> list[Outcome]:
    """Wait for commands started side by side, under one deadline that grows with their number.
    They share the machine's cores: on a loaded 2-core machine sixteen cold interpreters (~1.2 s of
    CPU each just to import) all finish after about a minute, together, so a fixed cap per
    process failed the first one waited for. Whatever still runs at the deadline is killed."""
    deadline = time.monotonic() + RUN_TIMEOUT_S + SIDE_BY_SIDE_S * len(procs)
    try:
        # `communicate` gives up at once on a zero timeout, even with the output ready to read.
        return [finish(proc, max(1.0, deadline - time.monotonic())) for proc in procs]
    finally:
        kill_all(procs)


def kill_all(procs: Iterable[subprocess.Popen[str]]) -> None:
    """Kill and reap whatever still runs (a test that failed half way leaves nothing behind)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Outcome:
    """Run one command to completion. `cwd` is always a temp dir, so the default `./data/memory`
    can never land in the repository."""
    return finish(start_cli(*args, cwd=cwd, env=env))


def run_many(commands: list[tuple[str, ...]], *, cwd: Path) -> list[Outcome]:
    """Run independent commands side by side (the suite stays fast on two cores)."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for args in commands:
            procs.append(start_cli(*args, cwd=cwd))
        return finish_all(procs)
    finally:
        kill_all(procs)


class BatchProcess:
    """`memory-worker call --batch -` driven through pipes, one line at a time.

    `call()` writes one request and reads exactly one answer line back, with a deadline, so a
    missing flush fails the test instead of hanging it. Always used as a context manager: the
    process is killed and reaped on the way out.
    """

    def __init__(self, data_dir: Path, *, cwd: Path) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            cli_command("call", "--batch", "-", "--data-dir", str(data_dir)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
            env=cli_env(),
            bufsize=0,
        )
        self._pending = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def __enter__(self) -> BatchProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with self.proc:  # closes the pipes and reaps the process
            pass
        self._stderr.close()

    def write_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        data = (line + "\n").encode()
        while data:
            written = self.proc.stdin.write(data)
            data = data[written or 0 :]

    def send(self, function_id: str, payload: dict[str, Any] | None = None) -> None:
        self.write_line(json.dumps({"function_id": function_id, "payload": payload or {}}))

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def read_answer(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        """The next answer line; fails if none arrives in time or more than one is waiting."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    pytest.fail(f"no answer line within {timeout}s; stderr: {self.stderr_text()}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    pytest.fail(f"batch process exited early; stderr: {self.stderr_text()}")
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        assert self._pending == b"", "more than one answer arrived for one request"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, function_id: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(function_id, payload)
        return self.read_answer()

    def result(self, function_id: str, payload: dict[str, Any] | None = None) -> Any:
        answer = self.call(function_id, payload)
        assert "result" in answer, answer
        return answer["result"]

    def kill(self) -> None:
        """SIGKILL, no goodbye: whatever was in flight is cut off where it stood."""
        self.proc.kill()
        self.proc.wait(RUN_TIMEOUT_S)

    def close(self, timeout: float = RUN_TIMEOUT_S) -> int:
        """End of input: the process answers what is left and exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout)


def batch_file_answers(path: Path, data_dir: Path, *, cwd: Path) -> list[dict[str, Any]]:
    outcome = run_cli("call", "--batch", str(path), "--data-dir", str(data_dir), cwd=cwd)
    assert outcome.code == 0, outcome.stderr
    return [json.loads(line) for line in outcome.stdout.splitlines()]


def write_batch(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> Path:
    lines = [json.dumps({"function_id": fid, "payload": payload}) for fid, payload in calls]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- one-shot commands, run side by side ---------------------------------------------------------
#
# Each case is one command in a folder of its own (its cwd, so a default `./data/memory` stays
# there). They are independent, so the module starts them all at once and each test checks its
# own outcome: on two cores that halves the wall time of the file.


@dataclass(frozen=True)
class Ran:
    outcome: Outcome
    cwd: Path


def _one_shot_commands(root: Path) -> dict[str, tuple[tuple[str, ...], dict[str, str] | None]]:
    def folder(name: str) -> Path:
        path = root / name
        path.mkdir()
        return path

    def data(name: str) -> str:
        return str(root / name / "data")

    cases: dict[str, tuple[tuple[str, ...], dict[str, str] | None]] = {}

    def case(name: str, *args: str, env: dict[str, str] | None = None) -> Path:
        cases[name] = (args, env)
        return folder(name)

    base = json.dumps({"text": "replaced by the pair", "tags": ["from-json"], "entities": ["blog"]})
    case(
        "coerce",
        "trigger",
        "memory::save",
        "text=The user writes about distributed systems",
        "tags=blog",
        "pinned=true",
        "_caller_worker_id=worker-1",
        "colour=blue",
        "--json",
        base,
        "--data-dir",
        data("coerce"),
    )
    case(
        "coerce-number",
        "trigger",
        "memory::save",
        "text=12345",
        "--data-dir",
        data("coerce-number"),
    )
    case(
        "coerce-decimal",
        "trigger",
        "memory::save",
        "text=1.10",
        "--data-dir",
        data("coerce-decimal"),
    )
    case(
        "options-first",
        "trigger",
        "memory::save",
        "--data-dir",
        data("options-first"),
        "--json",
        '{"tags": "x"}',
        "text=The user likes long walks",
    )

    for name, args in {
        "blank-text": ("memory::save", "text=  "),
        "unknown-id": ("memory::get", "id=nope"),
        "unknown-bank": ("memory::list", "bank=nope"),
    }.items():
        case(name, "trigger", *args, "--data-dir", data(name))
    case("unknown-function", "trigger", "memory::frobnicate", "x=1")  # default ./data/memory
    case("help", "trigger", "memory::save", "-h")

    blocker = root / "blocker"
    blocker.write_text("a regular file, not a folder", encoding="utf-8")
    case(
        "unwritable",
        "trigger",
        "memory::save",
        "text=The user likes tea",
        "--data-dir",
        str(blocker / "data"),
    )

    save = ("trigger", "memory::save", "text=The user likes long walks")
    case(
        "flag-beats-env",
        *save,
        "--data-dir",
        data("flag-beats-env"),
        env=cli_env(MEMORY_DATA_DIR=str(root / "flag-beats-env" / "ignored")),
    )
    case(
        "env-beats-default",
        *save,
        env=cli_env(MEMORY_DATA_DIR=str(root / "env-beats-default" / "from-env")),
    )
    config = case(
        "config-file",
        *save,
        "--config",
        str(root / "config-file" / "memory.yaml"),
        env=cli_env(III_COMPOSE_DIR=str(root / "config-file" / "compose")),
    )
    (config / "memory.yaml").write_text("data_dir: from-config\n", encoding="utf-8")

    batch = case(
        "batch-file",
        "call",
        "--batch",
        str(root / "batch-file" / "calls.jsonl"),
        "--data-dir",
        data("batch-file"),
    )
    (batch / "calls.jsonl").write_text(
        "\n".join(
            [
                json.dumps({"function_id": "memory::save", "payload": {"text": "The user runs"}}),
                "",
                "not json at all",
                json.dumps({"function_id": "memory::list", "payload": {}}),
                json.dumps({"function_id": "memory::list", "payload": {"bank": "nope"}}),
                json.dumps({"function_id": "memory::tags"}),  # the payload may be omitted
            ]
        )
        + "\n",
        encoding="utf-8",
    )

    not_utf8 = case(
        "batch-not-utf8",
        "call",
        "--batch",
        str(root / "batch-not-utf8" / "calls.jsonl"),
        "--data-dir",
        data("batch-not-utf8"),
    )
    (not_utf8 / "calls.jsonl").write_bytes(
        b'{"function_id": "memory::save", "payload": {"text": "The user likes tea"}}\n'
        b'{"function_id": "memory::save", "payload": {"text": "The user likes caf\xe9"}}\n'
        b'{"function_id": "memory::list", "payload": {}}\n'
    )
    latin1 = case(
        "import-not-utf8",
        "import",
        str(root / "import-not-utf8" / "records.jsonl"),
        "--bank",
        "fresh",
        "--data-dir",
        data("import-not-utf8"),
    )
    (latin1 / "records.jsonl").write_bytes(b'{"text": "The user likes caf\xe9"}\n')
    case(
        "numeric-bank",
        "trigger",
        "memory::save",
        "bank=2024",
        "text=The user likes tea",
        "--data-dir",
        data("numeric-bank"),
    )

    bad = case(
        "bad-import",
        "import",
        str(root / "bad-import" / "records.jsonl"),
        "--bank",
        "fresh",
        "--data-dir",
        data("bad-import"),
    )
    rows = [{"text": "The user likes hiking"}, {"text": "The user owns a bike"}, {"text": "ab"}]
    (bad / "records.jsonl").write_text(
        "\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8"
    )
    return cases


@pytest.fixture(scope="module", name="one_shots")
def _one_shots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    root = tmp_path_factory.mktemp("one-shots")
    commands = _one_shot_commands(root)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, (args, env) in commands.items():
            procs[name] = start_cli(*args, cwd=root / name, env=env)
        outcomes = finish_all(list(procs.values()))
        return {
            name: Ran(outcome, root / name) for name, outcome in zip(procs, outcomes, strict=True)
        }
    finally:
        kill_all(procs.values())


# --- trigger ---------------------------------------------------------------------------------


def test_quickstart_saved_memory_is_recalled_first_by_a_paraphrased_question(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    saved = run_cli(
        "trigger",
        "memory::save",
        "text=User publishes blog posts on Tuesday mornings",
        "pinned=true",
        "tags=blog",
        "--data-dir",
        data,
        cwd=tmp_path,
    ).result()
    assert saved["created"] is True
    assert saved["memory"]["text"] == "User publishes blog posts on Tuesday mornings"

    recalled = run_cli(
        "trigger",
        "memory::recall",
        "query=when do I publish articles",
        "--data-dir",
        data,
        cwd=tmp_path,
    ).result()
    assert recalled["bank"] == "main"
    assert recalled["memories"], recalled
    assert recalled["memories"][0]["memory"]["id"] == saved["memory"]["id"]
    assert recalled["memories"][0]["memory"]["pinned"] is True


def test_a_one_shot_recall_catches_its_bank_up_and_gets_the_semantic_arm(
    tmp_path: Path,
) -> None:
    """A one-shot command never embeds what it writes (a server does, in the background), so a
    data dir no server ever held recalled by words alone for good. Its recall now embeds what the
    bank lacks first (within `CATCH_UP_S`), keeps those vectors, and fuses the semantic arm:
    a Portuguese question finds an English memory it shares no word with."""
    data = tmp_path / "data"
    saved = run_cli(
        "trigger", "memory::save", "text=The user's dog is a beagle named Pipoca",
        "--data-dir", str(data), cwd=tmp_path,
    ).result()  # fmt: skip
    run_cli(
        "trigger", "memory::save", "text=The user's favourite colour is green",
        "--data-dir", str(data), cwd=tmp_path,
    ).result()  # fmt: skip
    assert not (data / "main" / "vectors.jsonl").exists()
    question = ("trigger", "memory::recall", "query=que raça é o meu cachorro?")
    found = run_cli(*question, "--data-dir", str(data), cwd=tmp_path).result()
    assert found["retrieval"] == "bm25-entity-semantic"
    assert [hit["memory"]["id"] for hit in found["memories"]][:1] == [saved["memory"]["id"]]
    assert len((data / "main" / "vectors.jsonl").read_text().splitlines()) == 2
    off = run_cli(
        *question, "--data-dir", str(data), cwd=tmp_path, env=cli_env(MEMORY_EMBEDDER="none")
    ).result()
    assert off["retrieval"] == "bm25-entity"


def test_a_one_shot_recall_re_embeds_vectors_of_an_older_build_of_its_model(
    tmp_path: Path,
) -> None:
    """The local model's name carries its build (weights and alignment digests), so an upgrade
    re-embeds what was stored. With no server, a recall left every bank an older build had
    embedded to that build — a model no process runs any more — and recalled by words alone
    for good after an upgrade."""
    data = tmp_path / "data"
    saved = run_cli(
        "trigger", "memory::save", "text=The user's dog is a beagle named Pipoca",
        "--data-dir", str(data), cwd=tmp_path,
    ).result()  # fmt: skip
    question = ("trigger", "memory::recall", "query=que raça é o meu cachorro?")
    assert run_cli(*question, "--data-dir", str(data), cwd=tmp_path).result()["retrieval"] == (
        "bm25-entity-semantic"
    )
    vectors = data / "main" / "vectors.jsonl"
    [row] = [json.loads(line) for line in vectors.read_text().splitlines()]
    base = row["model"].rsplit("-", 2)[0]
    assert base == "multilingual-e5-small-enpt-q4"
    row["model"] = f"{base}-00000000-xl0000"  # what the release before embedded with
    vectors.write_text(json.dumps(row) + "\n")
    found = run_cli(*question, "--data-dir", str(data), cwd=tmp_path).result()
    assert found["retrieval"] == "bm25-entity-semantic"
    assert [hit["memory"]["id"] for hit in found["memories"]][:1] == [saved["memory"]["id"]]


def test_trigger_arguments_are_coerced_like_iii_trigger(one_shots: dict[str, Ran]) -> None:
    memory = one_shots["coerce"].outcome.result()["memory"]
    assert memory["text"] == "The user writes about distributed systems"  # k=v beats --json
    assert memory["tags"] == ["blog"]  # a bare word becomes a one-item list
    assert memory["entities"] == ["blog"]  # kept from the --json base
    assert memory["pinned"] is True  # JSON-decoded, not the string "true"
    assert "colour" not in memory and "_caller_worker_id" not in memory  # unknown keys ignored


def test_a_number_given_as_text_is_stored_as_text(one_shots: dict[str, Ran]) -> None:
    assert one_shots["coerce-number"].outcome.result()["memory"]["text"] == "12345"


def test_a_decimal_given_as_text_is_stored_as_typed(one_shots: dict[str, Ran]) -> None:
    """`text=1.10` (a version) is "1.10": JSON-decoded then written back it was "1.1"."""
    assert one_shots["coerce-decimal"].outcome.result()["memory"]["text"] == "1.10"


def test_a_json_payload_read_from_a_windows_file_keeps_its_byte_order_mark_out() -> None:
    """`--json "$(cat payload.json)"` of a file a Windows editor saved starts with a byte order
    mark: refused `Unexpected UTF-8 BOM` (and, as the first argument, taken for a `key=value`),
    where `import` and `call --batch` read past it."""
    given = '\ufeff{"text": "The user drinks mate", "tags": ["tea"]}'
    expected = {"text": "The user drinks mate", "tags": ["tea"]}
    assert cli.parse_assignments([], given) == expected
    assert cli.parse_assignments([given, "pinned=true"]) == expected | {"pinned": True}


def test_the_payload_may_be_one_json_object_argument() -> None:
    """`trigger memory::save '{"text": …}'`, as many CLIs take a payload, was refused ("expected
    key=value"); or, with an "=" inside the JSON, read as a junk key and silently ignored."""
    payload = cli.parse_assignments(['{"text": "a=b", "tags": ["x"]}', "pinned=true"])
    assert payload == {"text": "a=b", "tags": ["x"], "pinned": True}
    with pytest.raises(InvalidInput, match="once"):
        cli.parse_assignments(['{"text": "a"}'], '{"text": "b"}')
    with pytest.raises(InvalidInput, match="the JSON argument is not valid JSON"):
        cli.parse_assignments(["{not json"])


def test_a_decimal_typed_for_a_number_field_is_that_number() -> None:
    payload = cli.parse_assignments(["relevance_threshold=0.50", "as_of=1.7e12", "limit=5"])
    assert payload == {"relevance_threshold": "0.50", "as_of": 1.7e12, "limit": 5}
    assert BankConfigureRequest.model_validate(payload | {"name": "b"}).relevance_threshold == 0.5
    assert RecallRequest.model_validate(payload | {"query": "q"}).as_of == 1_700_000_000_000


def test_a_number_given_as_a_bank_names_that_bank(one_shots: dict[str, Ran]) -> None:
    """`bank=2024` is bank "2024", as `memory::bank::create name=2024` makes it."""
    ran = one_shots["numeric-bank"]
    assert ran.outcome.result()["memory"]["text"] == "The user likes tea"
    assert (ran.cwd / "data" / "2024" / "memories.jsonl").is_file()


def test_a_supersede_reason_past_any_length_is_capped_not_refused(tmp_path: Path) -> None:
    """Seed 000: a supersede's `reason` is "Trimmed, capped at 500 chars". A long one (a judge's
    whole explanation) was refused past 32,000 characters, as `invalid_input: reason must be
    at most 500 characters`, which a 600-character reason was not."""
    data = str(tmp_path / "data")
    old, new = "The user drinks tea daily", "Every day the user drinks tea"
    for text in (old, new):
        run_cli(
            "trigger", "--data-dir", data, "memory::save", f"text={text}", cwd=tmp_path
        ).result()
    retired = run_cli(
        "trigger",
        "--data-dir",
        data,
        "memory::supersede",
        f"id={fingerprint(old)}",
        f"superseded_by={fingerprint(new)}",
        "reason=" + "near-duplicate " * 3_000,
        cwd=tmp_path,
    ).result()["memory"]
    assert retired["superseded_by"] == fingerprint(new) and "invalid_at" in retired


def test_options_may_come_before_the_key_value_pairs(one_shots: dict[str, Ran]) -> None:
    ran = one_shots["options-first"]
    memory = ran.outcome.result()["memory"]
    assert (memory["text"], memory["tags"]) == ("The user likes long walks", ["x"])


@pytest.mark.parametrize(
    ("case", "code", "needle"),
    [
        ("blank-text", "invalid_input", "text"),
        ("unknown-id", "memory_not_found", "nope"),
        ("unknown-bank", "bank_not_found", "nope"),
    ],
)
def test_a_failed_trigger_exits_1_with_one_json_error_on_stderr(
    one_shots: dict[str, Ran], case: str, code: str, needle: str
) -> None:
    error = one_shots[case].outcome.error()
    assert error["code"] == code
    assert needle in error["message"]


def test_an_unknown_function_is_refused_before_the_data_dir_is_created(
    one_shots: dict[str, Ran],
) -> None:
    ran = one_shots["unknown-function"]
    error = ran.outcome.error()
    assert error["code"] == "invalid_input"
    assert "memory::frobnicate" in error["message"]
    assert "memory::save" in error["message"]  # it names the known ones
    assert not (ran.cwd / "data").exists()


def test_trigger_help_prints_description_and_request_schema_without_touching_disk(
    one_shots: dict[str, Ran],
) -> None:
    ran = one_shots["help"]
    stdout = ran.outcome.stdout
    assert ran.outcome.code == 0, ran.outcome.stderr
    assert stdout.startswith("memory::save\n")
    assert "Content-fingerprinted" in stdout  # the catalog description
    schema = json.loads(stdout[stdout.index("{") :])
    assert "text" in schema["properties"]
    assert "text" in schema["required"]
    assert not (ran.cwd / "data").exists()


# --- call --batch ----------------------------------------------------------------------------


def test_batch_over_a_pipe_answers_each_line_before_the_next_is_written(tmp_path: Path) -> None:
    with BatchProcess(tmp_path / "data", cwd=tmp_path) as batch:
        saved = batch.call("memory::save", {"text": "The user drinks oolong tea", "tags": "tea"})
        memory_id = saved["result"]["memory"]["id"]
        assert saved["result"]["created"] is True

        batch.write_line("{this is not json")
        malformed = batch.read_answer()
        assert malformed["error"]["code"] == "invalid_input"
        assert set(malformed["error"]) == {"code", "message"}

        batch.write_line(json.dumps({"payload": {}}))  # no function_id
        assert batch.read_answer()["error"]["code"] == "invalid_input"

        missing = batch.call("memory::get", {"id": "nope"})
        assert missing["error"]["code"] == "memory_not_found"
        assert set(missing) == {"error"}

        assert batch.call("memory::nothing", {})["error"]["code"] == "invalid_input"

        again = batch.result("memory::save", {"text": "the user drinks   OOLONG tea"})
        assert again["created"] is False  # the batch went on after the errors
        assert again["memory"]["corroboration"] == 1

        got = batch.result("memory::get", {"id": memory_id})
        assert got["memory"]["tags"] == ["tea"]
        assert batch.close() == 0


def test_batch_file_answers_every_line_in_order(one_shots: dict[str, Ran]) -> None:
    outcome = one_shots["batch-file"].outcome
    assert outcome.code == 0, outcome.stderr
    answers = [json.loads(line) for line in outcome.stdout.splitlines()]
    assert len(answers) == 5  # the blank line is skipped, every other line answered
    assert answers[0]["result"]["created"] is True
    assert answers[1]["error"]["code"] == "invalid_input"
    assert answers[2]["result"]["total"] == 1
    assert answers[2]["result"]["memories"][0]["text"] == "The user runs"
    assert answers[3]["error"]["code"] == "bank_not_found"
    assert answers[4]["result"] == {"bank": "main", "tags": []}


def test_an_import_through_batch_or_json_is_held_to_the_imports_own_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2,500 records (12,500 values in all) import in one call over REST; the batch line and
    `--json` refused them for the size of the whole line."""
    rows = [
        {"text": f"The user wrote note {n} about {n % 97}", "tags": ["a", "b"]} for n in range(2500)
    ]
    calls = write_batch(
        tmp_path / "calls.jsonl",
        [
            ("memory::import", {"bank": "notes", "records": rows}),
            ("memory::stats", {"bank": "notes"}),
        ],
    )
    code = cli.main(["call", "--batch", str(calls), "--data-dir", str(tmp_path / "data")])
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert answers[0].get("result", answers[0])["imported"] == 2500, answers[0]
    assert cli.parse_assignments(["bank=notes"], json.dumps({"records": rows}))["records"] == rows


def test_a_batch_line_that_is_not_utf8_is_answered_and_the_others_run(
    one_shots: dict[str, Ran],
) -> None:
    outcome = one_shots["batch-not-utf8"].outcome
    assert outcome.code == 0, outcome.stderr
    answers = [json.loads(line) for line in outcome.stdout.splitlines()]
    assert [answer.get("error", {}).get("code") for answer in answers] == [
        None,
        "invalid_input",
        None,
    ]
    assert [m["text"] for m in answers[2]["result"]["memories"]] == ["The user likes tea"]


# --- import ----------------------------------------------------------------------------------

T0 = 1_700_000_000_000  # 2023-11-14
DAY = 86_400_000
PORTO = "The user moved to Porto in March 2024"
LISBON = "The user lives in Lisbon near the river"
EDITED = "The user prefers trains over planes for trips under 600 km"
SECRET_TEXT = "The staging database login uses password=" + "Tr0ub4dor" + "-horse-42"


def _import_rows() -> list[dict[str, Any]]:
    porto_id, lisbon_id, edited_id = fingerprint(PORTO), fingerprint(LISBON), fingerprint(EDITED)
    return [
        {
            "id": porto_id,
            "text": PORTO,
            "entities": ["porto"],
            "tags": ["home", "moves"],
            "confidence": "extracted",
            "corroboration": 3,
            "pinned": True,
            "source": {"session_id": "s-42", "entry_id": "e-7", "agent": "chat"},
            "created_at": T0 + 100 * DAY,
            "updated_at": T0 + 120 * DAY,
            "stated_at": T0 + 110 * DAY,
            "revision": 2,
        },
        {
            "id": lisbon_id,
            "text": LISBON,
            "entities": ["lisbon"],
            "tags": ["home"],
            "confidence": "stated",
            "corroboration": 1,
            "created_at": T0,
            "updated_at": T0 + 100 * DAY,
            "stated_at": T0,
            "invalid_at": T0 + 100 * DAY,
            "superseded_by": porto_id,
            "revision": 1,
        },
        # Two revisions of one id, the newer one first: last-wins goes by revision, not position.
        {
            "id": edited_id,
            "text": EDITED,
            "created_at": T0,
            "updated_at": T0 + 5 * DAY,
            "revision": 1,
        },
        {
            "id": edited_id,
            "text": "The user prefers trains",
            "created_at": T0,
            "updated_at": T0,
            "revision": 0,
        },
        {"text": SECRET_TEXT, "created_at": T0 + 2 * DAY},
    ]


@pytest.fixture(scope="module", name="imported")
def _imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One import; then one fresh process asking everything the import tests check; then a second
    import with a bad row into the same bank."""
    root = tmp_path_factory.mktemp("imported")
    data = root / "data"
    source = root / "records.jsonl"
    source.write_text("\n".join(json.dumps(row) for row in _import_rows()) + "\n", encoding="utf-8")
    report = run_cli(
        "import", str(source), "--bank", "travel", "--data-dir", str(data), cwd=root
    ).result()
    calls = [
        ("memory::get", {"bank": "travel", "id": fingerprint(PORTO)}),
        ("memory::get", {"bank": "travel", "id": fingerprint(LISBON)}),
        ("memory::get", {"bank": "travel", "id": fingerprint(EDITED)}),
        ("memory::list", {"bank": "travel"}),
        ("memory::list", {"bank": "travel", "include_superseded": True}),
        (
            "memory::recall",
            {"bank": "travel", "query": "where does the user live lisbon", "as_of": T0 + 50 * DAY},
        ),
        (
            "memory::recall",
            {"bank": "travel", "query": "where does the user live lisbon", "as_of": T0 + 150 * DAY},
        ),
    ]
    answers = batch_file_answers(write_batch(root / "calls.jsonl", calls), data, cwd=root)
    for answer in answers:
        assert "result" in answer, answer
    results = [answer["result"] for answer in answers]

    log = data / "travel" / "memories.jsonl"
    log_before = log.read_bytes()
    second = root / "second.jsonl"
    second.write_text(
        json.dumps({"text": "The user owns a bike"})
        + "\n"
        + json.dumps({"text": "The user has a cat", "corroboration": -1})
        + "\n",
        encoding="utf-8",
    )
    refused = run_cli("import", str(second), "--bank", "travel", "--data-dir", str(data), cwd=root)
    return {
        "data": data,
        "report": report,
        "porto": results[0]["memory"],
        "lisbon": results[1]["memory"],
        "edited": results[2]["memory"],
        "live": results[3],
        "history": results[4],
        "recall_before": results[5],
        "recall_after": results[6],
        "refused": refused,
        "log_unchanged": log.read_bytes() == log_before,
    }


def test_an_export_of_a_thousand_memories_imports_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    notes = (json.dumps({"text": f"The user wrote note {n} about {n % 97}"}) for n in range(1000))
    rows.write_text("".join(f"{line}\n" for line in notes))
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    assert cli.main(["import", str(rows), "--bank", "main", "--data-dir", first]) == 0
    exported = tmp_path / "main.jsonl"
    assert cli.main(["export", "--bank", "main", "--data-dir", first, "-o", str(exported)]) == 0
    capsys.readouterr()
    code = cli.main(["import", str(exported), "--bank", "main", "--data-dir", second])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["imported"] == 1000


def _bank_of(data: str, capsys: pytest.CaptureFixture[str], bank: str) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["trigger", "memory::bank::get", f"name={bank}", "--data-dir", data]) == 0
    info: dict[str, Any] = json.loads(capsys.readouterr().out)["bank"]
    assert cli.main(["trigger", "memory::rule::list", f"bank={bank}", "--data-dir", data]) == 0
    info["rules"] = {r["name"]: r["content"] for r in json.loads(capsys.readouterr().out)["rules"]}
    return info


def test_a_bank_moves_with_its_settings_and_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export carried the memory records only: imported elsewhere, the bank lost its rules
    (injected into every session), its description and what its bank.yaml chose — its
    partition by person and its agents' access level among them."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    create = '{"name": "work", "description": "Work notes", "subject_scoping": true, '
    create += '"conscious_access": "read", "max_memories": 50}'
    steps = [
        ["trigger", "memory::bank::create", "--json", create],
        ["trigger", "memory::rule::set", "bank=work", "name=style", "content=# Style\nFormal."],
        ["trigger", "memory::save", "bank=work", "text=Ana runs the Monday standup", "subject=ana"],
        ["trigger", "memory::save", "bank=work", "text=The build takes ten minutes"],
    ]
    for argv in steps:
        assert cli.main([*argv, "--data-dir", first]) == 0
    capsys.readouterr()
    exported = tmp_path / "work.jsonl"
    assert cli.main(["export", "--bank", "work", "--data-dir", first, "-o", str(exported)]) == 0
    assert json.loads(capsys.readouterr().out) == {"bank": "work", "records": 2, "rules": 1}
    assert cli.main(["import", str(exported), "--bank", "work", "--data-dir", second]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["imported"] == 2 and report["rules_written"] == ["style"]
    moved, original = _bank_of(second, capsys, "work"), _bank_of(first, capsys, "work")
    assert moved["description"] == "Work notes" and moved["rules"] == {"style": "# Style\nFormal."}
    assert moved["settings"] == original["settings"] and moved["memories"] == 2
    assert moved["settings"]["subject_scoping"] and moved["settings"]["conscious_access"] == "read"


def test_an_export_imported_into_a_bank_of_its_own_never_overwrites_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target bank exists with settings and a rule of its own: the records land, the bank
    keeps what it chose and its rule, and the answer names what was not taken."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    for data, access, content in ((first, "read", "Formal."), (second, "none", "Casual.")):
        create = f'{{"name": "work", "conscious_access": "{access}"}}'
        assert (
            cli.main(["trigger", "memory::bank::create", "--json", create, "--data-dir", data]) == 0
        )
        rule = ["trigger", "memory::rule::set", "bank=work", "name=style", f"content={content}"]
        assert cli.main([*rule, "--data-dir", data]) == 0
    extra = ["trigger", "memory::rule::set", "bank=work", "name=tools", "content=Use uv."]
    assert cli.main([*extra, "--data-dir", first]) == 0
    save = ["trigger", "memory::save", "bank=work", "text=The build takes ten minutes"]
    assert cli.main([*save, "--data-dir", first]) == 0
    exported = tmp_path / "work.jsonl"
    assert cli.main(["export", "--bank", "work", "--data-dir", first, "-o", str(exported)]) == 0
    capsys.readouterr()
    assert cli.main(["import", str(exported), "--bank", "work", "--data-dir", second]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["imported"] == 1 and report["rules_written"] == ["tools"]
    assert report["kept_rules"] == ["style"] and report["kept_settings"] == ["conscious_access"]
    kept = _bank_of(second, capsys, "work")
    assert kept["settings"]["conscious_access"] == "none"
    assert kept["rules"] == {"style": "Casual.", "tools": "Use uv."}


def test_two_exports_joined_into_one_file_are_refused_by_their_bank_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second export's bank line was read as a record and refused as "record 2: text:
    Field required": the error now names the bank line, and nothing is written."""
    rows = tmp_path / "rows.jsonl"
    bank_line = json.dumps({"bank_export": {"bank": "work", "description": "Work notes"}})
    record = json.dumps({"text": "The build takes ten minutes"})
    rows.write_text("\n".join([bank_line, record, bank_line, record]) + "\n")
    data = str(tmp_path / "data")
    assert cli.main(["import", str(rows), "--bank", "work", "--data-dir", data]) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input"
    assert "JSON line 3 is a bank_export line" in error["message"]
    assert not (tmp_path / "data" / "work").exists()


def test_an_export_carrying_a_bad_rule_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    bank_line = {"bank_export": {"bank": "work", "rules": [{"name": "../x", "content": "Hi"}]}}
    rows.write_text(json.dumps(bank_line) + "\n" + json.dumps({"text": "A fact"}) + "\n")
    data = str(tmp_path / "data")
    assert cli.main(["import", str(rows), "--bank", "work", "--data-dir", data]) == 1
    assert json.loads(capsys.readouterr().err)["code"] == "invalid_input"
    assert not (tmp_path / "data" / "work").exists()


@pytest.mark.parametrize("command", ["trigger", "export"])
def test_an_answer_to_a_stream_that_is_not_utf8_is_escaped_json_not_a_crash(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """Standard output in another encoding (`PYTHONIOENCODING=ascii`, a Latin-1 locale, a
    Windows pipe) cannot carry "São Paulo" or "你好": the save was done, then its answer crashed
    with a traceback and exit status 1."""
    data = str(tmp_path / "data")
    text = "The user lives in São Paulo and says 你好"
    argv = {
        "trigger": ["trigger", "memory::save", f"text={text}", "--data-dir", data],
        "export": ["export", "--bank", "main", "--data-dir", data],
    }
    if command == "export":
        assert cli.main(argv["trigger"]) == 0
    capsys.readouterr()
    raw = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(raw, encoding="ascii"))
    assert cli.main(argv[command]) == 0
    sys.stdout.flush()
    out = raw.getvalue().decode("ascii")  # every character escaped
    if command == "trigger":
        assert json.loads(out)["memory"]["text"] == text
    else:
        assert [json.loads(line)["text"] for line in out.splitlines()] == [text]


def test_an_export_to_a_file_that_cannot_be_written_is_one_json_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    capsys.readouterr()
    target = tmp_path / "missing" / "main.jsonl"
    code = cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(target)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (1, "")
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input"
    assert str(target) in error["message"]


def test_an_export_that_fails_midway_leaves_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk halfway through: a partial export would import as a partial bank without a
    word. The file is written beside its name and renamed in whole, or not at all."""
    data = str(tmp_path / "data")
    for text in ("The user likes tea", "The user likes jazz", "The user has a cat"):
        assert cli.main(["trigger", "memory::save", f"text={text}", "--data-dir", data]) == 0
    target = tmp_path / "main.jsonl"
    target.write_text("the previous export\n", encoding="utf-8")
    capsys.readouterr()
    written = 0
    real = cli._json_text

    def disk_fills(value: Any, stream: Any, **kwargs: Any) -> str:
        nonlocal written
        written += 1
        if written == 2:
            raise OSError(28, "No space left on device")
        return real(value, stream, **kwargs)

    monkeypatch.setattr(cli, "_json_text", disk_fills)
    code = cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(target)])
    assert code == 1 and "No space left" in json.loads(capsys.readouterr().err)["message"]
    assert target.read_text(encoding="utf-8") == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "main.jsonl"]


def test_an_export_to_a_file_is_synced_before_and_after_its_rename(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export answered ok was renamed over its name unsynced: a power loss could leave an
    empty (or old) file where a backup had been reported, often taken just before a bank is
    deleted. Its bytes are fsynced before the rename, its folder after."""
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    out = tmp_path / "out"
    out.mkdir()
    target = out / "main.jsonl"
    capsys.readouterr()
    events = recorded_syncs(monkeypatch)
    code = cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(target)])
    capsys.readouterr()
    assert code == 0
    mine = [e for e in events if e[1].startswith(str(out))]
    renamed = mine.index(("replace", str(target)))
    assert any(kind == "fsync" and what != str(out) for kind, what in mine[:renamed]), mine
    assert ("fsync", str(out)) in mine[renamed:], mine


def test_import_preserves_whole_records_with_their_history(imported: dict[str, Any]) -> None:
    assert imported["report"] == {"bank": "travel", "imported": 5, "live": 3, "redacted": 1}
    porto = imported["porto"]
    assert porto == {
        "id": fingerprint(PORTO),
        "text": PORTO,
        "entities": ["porto"],
        "tags": ["home", "moves"],
        "confidence": "extracted",
        "corroboration": 3,
        "pinned": True,
        "source": {"session_id": "s-42", "entry_id": "e-7", "agent": "chat"},
        "created_at": T0 + 100 * DAY,
        "updated_at": T0 + 120 * DAY,
        "stated_at": T0 + 110 * DAY,
        "revision": 2,
    }
    lisbon = imported["lisbon"]
    assert lisbon["invalid_at"] == T0 + 100 * DAY
    assert lisbon["superseded_by"] == fingerprint(PORTO)
    assert (lisbon["revision"], lisbon["corroboration"], lisbon["stated_at"]) == (1, 1, T0)
    edited = imported["edited"]
    assert (edited["text"], edited["revision"]) == (EDITED, 1)  # the higher revision won


def test_an_imported_retired_record_is_history_not_live(imported: dict[str, Any]) -> None:
    live_ids = {m["id"] for m in imported["live"]["memories"]}
    history_ids = {m["id"] for m in imported["history"]["memories"]}
    assert fingerprint(LISBON) not in live_ids
    assert fingerprint(LISBON) in history_ids
    assert imported["live"]["total"] == 3
    assert imported["history"]["total"] == 4  # one row per id: two revisions are one record
    assert history_ids - live_ids == {fingerprint(LISBON)}


def test_recall_as_of_sees_a_retired_import_only_while_it_was_true(
    imported: dict[str, Any],
) -> None:
    before = [hit["memory"]["id"] for hit in imported["recall_before"]["memories"]]
    after = [hit["memory"]["id"] for hit in imported["recall_after"]["memories"]]
    assert before[:1] == [fingerprint(LISBON)]
    assert fingerprint(PORTO) not in before  # not created yet at that time
    assert fingerprint(LISBON) not in after


def test_a_secret_in_an_imported_text_is_redacted_on_disk(imported: dict[str, Any]) -> None:
    on_disk = (imported["data"] / "travel" / "memories.jsonl").read_text(encoding="utf-8")
    assert "Tr0ub4dor" not in on_disk
    assert "[REDACTED:password]" in on_disk


def test_one_bad_row_rejects_the_whole_import_and_creates_nothing(
    one_shots: dict[str, Ran],
) -> None:
    ran = one_shots["bad-import"]
    error = ran.outcome.error()
    assert error["code"] == "invalid_input"
    assert "record 3" in error["message"]
    assert "text" in error["message"]
    assert not (ran.cwd / "data" / "fresh").exists()


def test_an_import_file_that_is_not_utf8_is_invalid_input_and_creates_nothing(
    one_shots: dict[str, Ran],
) -> None:
    ran = one_shots["import-not-utf8"]
    error = ran.outcome.error()
    assert error["code"] == "invalid_input"
    assert "records.jsonl" in error["message"] and "utf-8" in error["message"]
    assert not (ran.cwd / "data" / "fresh").exists()


def test_a_bad_row_leaves_an_existing_bank_log_unchanged(imported: dict[str, Any]) -> None:
    error = imported["refused"].error()
    assert error["code"] == "invalid_input"
    assert "record 2" in error["message"]
    assert "corroboration" in error["message"]
    assert imported["log_unchanged"]


# --- data dir --------------------------------------------------------------------------------


def _config(path: Path, data_dir: str) -> Settings:
    path.write_text(f"data_dir: {data_dir}\n", encoding="utf-8")
    return load_settings(path)


class TestDataDirResolution:
    def test_flag_beats_env_config_and_compose_dir(self, tmp_path: Path) -> None:
        settings = _config(tmp_path / "c.yaml", str(tmp_path / "from-config"))
        env = {"MEMORY_DATA_DIR": str(tmp_path / "from-env"), "III_COMPOSE_DIR": str(tmp_path)}
        assert resolve_data_dir(str(tmp_path / "flag"), settings, env) == tmp_path / "flag"

    def test_env_beats_config_and_compose_dir(self, tmp_path: Path) -> None:
        settings = _config(tmp_path / "c.yaml", str(tmp_path / "from-config"))
        env = {"MEMORY_DATA_DIR": str(tmp_path / "from-env"), "III_COMPOSE_DIR": str(tmp_path)}
        assert resolve_data_dir(None, settings, env) == tmp_path / "from-env"

    def test_config_beats_compose_dir(self, tmp_path: Path) -> None:
        settings = _config(tmp_path / "c.yaml", str(tmp_path / "from-config"))
        env = {"III_COMPOSE_DIR": str(tmp_path / "compose")}
        assert resolve_data_dir(None, settings, env) == tmp_path / "from-config"

    def test_compose_dir_beats_the_working_directory(self, tmp_path: Path) -> None:
        env = {"III_COMPOSE_DIR": str(tmp_path / "compose")}
        assert resolve_data_dir(None, Settings(), env) == tmp_path / "compose" / "data" / "memory"

    def test_working_directory_is_the_last_resort(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        assert resolve_data_dir(None, Settings(), {}) == tmp_path / "data" / "memory"

    def test_relative_config_data_dir_resolves_against_the_compose_dir(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        settings = _config(tmp_path / "c.yaml", "banks/here")
        compose = tmp_path / "compose"
        assert resolve_data_dir(None, settings, {"III_COMPOSE_DIR": str(compose)}) == (
            compose / "banks" / "here"
        )
        assert resolve_data_dir(None, settings, {}) == tmp_path / "banks" / "here"

    def test_config_values_expand_environment_variables(self, tmp_path: Path) -> None:
        (tmp_path / "c.yaml").write_text("data_dir: ${HOME_BASE}/mem\n", encoding="utf-8")
        settings = load_settings(tmp_path / "c.yaml", {"HOME_BASE": str(tmp_path)})
        assert resolve_data_dir(None, settings, {}) == tmp_path / "mem"


@pytest.mark.parametrize("option", ["--data-dir", "--config"])
def test_an_empty_path_option_is_refused_not_taken_as_absent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    option: str,
) -> None:
    """`--data-dir "$DIR"` with DIR unset wrote to `$MEMORY_DATA_DIR` (or ./data/memory)."""
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "from-env"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", option, ""]) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input" and f"argument {option}: is empty" in error["message"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["trigger"], ["trigger", "memory::save", "--no-such-option"], ["no-such-command"]],
)
def test_a_usage_error_is_one_json_error_with_status_1(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """SPEC §3: an error goes to stderr as JSON `{code, message}` with exit status 1 — a command
    line the parser refuses too (argparse printed its usage text and exited 2, which a coding
    agent's hook runner reads as "block this action")."""
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input" and error["message"].startswith("memory-worker")
    assert captured.out == ""


@pytest.mark.parametrize(
    ("argv", "typo"),
    [
        (["hook", "session-start", "--bnak", "main"], "--bnak"),
        (["export", "--bank", "main", "--ouput", "x.jsonl"], "--ouput"),
        (["trigger", "memory::doctor", "--dat-dir", "x"], "--dat-dir"),
    ],
)
def test_an_unknown_option_points_at_its_own_commands_help(
    argv: list[str], typo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped option of a command sent the user to `memory-worker -h`, which lists the
    commands and none of that command's options; the command's own `-h` does."""
    assert cli.main(argv) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input" and typo in error["message"]
    assert error["message"].startswith(f"memory-worker {argv[0]}: unrecognized arguments")
    assert error["message"].endswith(f"(see `memory-worker {argv[0]} -h`)")


# Command lines of every command, good and refused, for the parser built for their command alone.
_COMMAND_LINES = [
    *(
        [name, *tail]
        for name in cli._COMMAND_PARSERS
        for tail in ([], ["-h"], ["--no-such-option"], ["--data-dir", ""], ["--log-level", "loud"])
    ),
    ["trigger", "memory::save", "text=a", "--json", '{"bank": "b"}', "tags=[1]", "--data-dir", "d"],
    ["trigger", "memory::recall", "-h"],
    ["trigger", "memory::save", "--config", "c.yaml", "text=after-an-option"],
    ["call", "--batch", "-", "--log-level", "debug"],
    ["import", "x.jsonl", "--bank", "b", "--from", "mem0"],
    ["import", "x.jsonl", "--bank", "b", "--from", "nope"],
    ["export", "--bank", "b", "-o", "out.jsonl"],
    ["mcp", "--tools", "approval", "--bank", "b"],
    ["mcp", "--tools", "everything"],
    ["hook", "user-prompt-submit", "--bank", "b", "--max-context-chars", "12"],
    ["hook", "stop", "--max-context-chars", "0"],
    ["hook", "no-such-event"],
    ["hook", "pre-tool-use", "--workspace-root", "/w", "extra"],
    ["consolidate", "--bank", "b"],
    ["compact", "--bank", "b", "--horizon-days", "soon"],
    ["serve", "--standalone", "--port", "0", "--engine", "ws://x"],
    ["serve", "--port", "eighty"],
]


def _parsed(parser: cli._Parser, argv: list[str]) -> tuple[str, object]:
    """What a parser makes of a command line: its namespace and extra words, its refusal, or
    the help it printed."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            args, extra = parser.parse_known_args(argv)
    except cli._UsageError as exc:
        return "refused", str(exc)
    except SystemExit as exited:
        return "exited", (exited.code, out.getvalue())
    fields = vars(args)
    if "command_help" in fields:  # a bound method of each parser: compare what it prints
        fields["command_help"] = fields["command_help"]()
    return "parsed", (fields, extra)


@pytest.mark.parametrize("argv", _COMMAND_LINES, ids=" ".join)
def test_a_command_line_parses_the_same_with_only_its_commands_parser(argv: list[str]) -> None:
    """A process builds the parser of the command its command line names, not all eleven (~4-5
    ms of every hook's start): the namespace, the refusal's text and the help are the same."""
    only = cli._parser(argv[0])
    assert set(only.commands) == {argv[0]}
    assert _parsed(only, argv) == _parsed(cli._parser(), argv)


def test_a_command_builds_its_own_parser_only_and_help_lists_every_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[set[str]] = []
    whole = cli._parser

    def recording(*args: Any) -> cli._Parser:
        parser = whole(*args)
        built.append(set(parser.commands))
        return parser

    monkeypatch.setattr(cli, "_parser", recording)
    assert cli.main(["hook", "no-such-event"]) == 1
    assert cli.main(["--data-dir", "x", "hook"]) == 1  # no command first: the whole parser
    assert json.loads(capsys.readouterr().err.splitlines()[-1])["message"].startswith(
        "memory-worker: --data-dir goes after the command"
    )
    with pytest.raises(SystemExit):
        cli.main(["-h"])
    listed = capsys.readouterr().out
    assert all(f"    {name}" in listed for name in cli._COMMAND_PARSERS)
    assert built == [{"hook"}, set(cli._COMMAND_PARSERS), set(cli._COMMAND_PARSERS)]


def test_cli_honours_the_data_dir_flag_over_the_env(one_shots: dict[str, Ran]) -> None:
    ran = one_shots["flag-beats-env"]
    assert ran.outcome.result()["created"] is True
    assert (ran.cwd / "data" / "main" / "memories.jsonl").is_file()
    assert not (ran.cwd / "ignored").exists()


def test_cli_honours_the_env_over_the_default(one_shots: dict[str, Ran]) -> None:
    ran = one_shots["env-beats-default"]
    assert ran.outcome.result()["created"] is True
    assert (ran.cwd / "from-env" / "main" / "memories.jsonl").is_file()
    assert not (ran.cwd / "data").exists()


def test_cli_resolves_a_relative_config_data_dir_against_the_compose_dir(
    one_shots: dict[str, Ran],
) -> None:
    ran = one_shots["config-file"]
    assert ran.outcome.result()["created"] is True
    assert (ran.cwd / "compose" / "from-config" / "main" / "memories.jsonl").is_file()
    assert not (ran.cwd / "data").exists()


def test_an_unwritable_data_dir_fails_with_storage_naming_the_path(
    one_shots: dict[str, Ran],
) -> None:
    error = one_shots["unwritable"].outcome.error()
    assert error["code"] == "storage"
    blocker = one_shots["unwritable"].cwd.parent / "blocker"
    assert str(blocker / "data") in error["message"]
    # What is in the way, not the OS's "File exists" for the folder it could not make there.
    assert error["message"].endswith(f": {blocker} is a file, not a folder")


def test_trigger_help_without_a_function_prints_the_commands_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memory-worker trigger -h`, as every other command's `-h`, prints how to call it; it was
    a usage error naming the missing function (exit status 1)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["trigger", "-h"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: memory-worker trigger")
    assert "FUNCTION" in captured.out or "function" in captured.out
    assert captured.err == "" and list(tmp_path.iterdir()) == []


def test_every_command_takes_the_data_dir_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: "Every command takes `--data-dir`" — `permissions` refused it (and `--config`)
    as unrecognized arguments, exit status 1, so a script passing it to every command failed."""
    data = str(tmp_path / "data")
    assert cli.main(["permissions", "--data-dir", data, "--config", str(tmp_path / "m.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.strip()


@pytest.mark.parametrize(
    "argv",
    [
        ["--data-dir", "DATA", "trigger", "memory::tags"],
        ["--data-dir=DATA", "export", "--bank", "main"],
        ["--config", "m.yaml", "mcp"],
        ["--log-level", "debug", "permissions"],
    ],
)
def test_an_option_given_before_the_command_is_named_and_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """README: "Every command takes `--data-dir`" — written before the command, as `git -C`
    takes it, it was refused as "argument command: invalid choice: '/tmp/…/data'": the data
    dir read as a command's name, and nothing said where the option goes."""
    argv = [a.replace("DATA", str(tmp_path / "data")) for a in argv]
    option = argv[0].split("=", 1)[0]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input" and "invalid choice" not in error["message"]
    assert f"{option} goes after the command" in error["message"]
    assert captured.out == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["trigger", "memory::doctor"], ["serve"], ["permissions"]])
def test_an_unknown_log_level_is_one_json_error_with_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """SPEC §3: an error is JSON `{code, message}` on stderr, exit status 1. `--log-level
    verbose` was a `KeyError` traceback, before anything else ran."""
    argv = [*command, "--log-level", "verbose", "--data-dir", str(tmp_path / "data")]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    error = json.loads(captured.err)
    assert error["code"] == "invalid_input" and "--log-level" in error["message"]
    assert captured.out == "" and not (tmp_path / "data").exists()


class _ClosedPipe(io.StringIO):
    """A stdout whose reader went away (`memory-worker export | head -1`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_an_answer_to_a_reader_that_went_away_ends_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export | head -1` was a `BrokenPipeError` traceback on stderr with exit status 1; a
    closed pipe is the reader's choice, not a failure: no traceback, the status a command
    ended by SIGPIPE has (141)."""
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert cli.main(["export", "--bank", "main", "--data-dir", data]) == 141
    assert capsys.readouterr().err == ""


def test_serve_help_says_where_it_listens_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    """README: the standalone REST service listens on 127.0.0.1, `--port` default 8765 — what a
    new user opens in a browser. `serve -h` named neither default."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "-h"])
    assert exited.value.code == 0
    usage = " ".join(capsys.readouterr().out.split())
    assert "(default 127.0.0.1)" in usage and "(default 8765;" in usage


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("2", "2")])
def test_a_server_loads_numpy_with_one_blas_thread_unless_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str | None, expected: str
) -> None:
    """A server multiplies query vectors by a bank's matrix on every semantic recall. With a BLAS
    thread per core, on two cores shared with the event loop and the embedder's thread, the
    product's tail grew to several milliseconds (p99 8 ms against 1.3 ms with one thread, one
    core busy): every command asks for one before numpy loads, a value in the environment is
    kept."""
    seen: list[str | None] = []

    async def serve(args: Any) -> int:
        seen.append(os.environ.get(cli.BLAS_THREADS_ENV))
        return 0

    monkeypatch.setenv(cli.BLAS_THREADS_ENV, "placeholder")  # restored after the test
    if given is None:
        monkeypatch.delenv(cli.BLAS_THREADS_ENV)
    else:
        monkeypatch.setenv(cli.BLAS_THREADS_ENV, given)
    monkeypatch.setitem(cli._COMMANDS, "serve", serve)
    assert cli.main(["serve", "--standalone", "--data-dir", str(tmp_path / "data")]) == 0
    assert seen == [expected]


def test_an_export_to_a_device_or_pipe_writes_into_it_instead_of_replacing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o /dev/stdout`, `-o >(gzip > x.gz)` or a link to a device: the name is not a file to
    replace by renaming a temp file over it (as root that put a regular file where /dev/null
    was; as anyone else the temp file cannot even be made in /dev)."""
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    capsys.readouterr()
    link = tmp_path / "sink"
    link.symlink_to(os.devnull)
    code = cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(link)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out) == {"bank": "main", "records": 1}
    assert link.is_symlink() and link.resolve() == Path(os.devnull).resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "sink"]
    # `/dev/stdout` with stdout redirected to a file: a link to a regular file, written through.
    shell_file = tmp_path / "out.jsonl"
    shell_file.write_text("", encoding="utf-8")
    link.unlink()
    link.symlink_to(shell_file)
    assert cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(link)]) == 0
    assert link.is_symlink()
    lines = shell_file.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["The user likes tea"]


def test_an_export_to_dev_stdout_writes_the_records_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export -o /dev/stdout > out.jsonl`: the name is stdout's own file; opened again it was
    truncated and the summary line written over the records (an import then refused it)."""
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    capsys.readouterr()
    out = tmp_path / "out.jsonl"
    link = tmp_path / "stdout"  # what /dev/stdout is: a link to the descriptor's file
    link.symlink_to(out)
    with out.open("w", encoding="utf-8") as stream:
        monkeypatch.setattr("sys.stdout", stream)
        assert cli.main(["export", "--bank", "main", "--data-dir", data, "-o", str(link)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["text"] for line in lines] == ["The user likes tea"]


@pytest.mark.parametrize("command", ["trigger", "export"])
def test_an_answer_stdout_cannot_take_is_one_json_error(
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`> /dev/full`, a full disk, an I/O error: a coded error on stderr and exit 1, not a
    traceback (only a closed pipe is the reader's choice)."""
    data = str(tmp_path / "data")
    assert cli.main(["trigger", "memory::save", "text=The user likes tea", "--data-dir", data]) == 0
    capsys.readouterr()

    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("sys.stdout", Full())
    argv = {
        "trigger": ["trigger", "memory::list", "--data-dir", data],
        "export": ["export", "--bank", "main", "--data-dir", data],
    }
    assert cli.main(argv[command]) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input"
    assert "No space left on device" in error["message"]


def test_a_batch_from_a_pipe_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`call --batch <(make-requests)`: the shell passes a pipe's name (/dev/fd/63), not a
    regular file; it was refused as a file that "does not exist"."""
    import threading

    fifo = tmp_path / "requests"
    os.mkfifo(fifo)
    line = {"function_id": "memory::save", "payload": {"text": "The user likes tea"}}

    def feed() -> None:
        with fifo.open("w", encoding="utf-8") as stream:
            stream.write(json.dumps(line) + "\n")

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        code = cli.main(["call", "--batch", str(fifo), "--data-dir", str(tmp_path / "data")])
    finally:
        if writer.is_alive():  # never opened: a reader of our own lets the writer finish
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            writer.join(10)
            os.close(fd)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["result"]["memory"]["text"] == "The user likes tea"
    assert cli.main(["call", "--batch", str(tmp_path)]) == 1
    assert "is a directory" in json.loads(capsys.readouterr().err)["message"]
