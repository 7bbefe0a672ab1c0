"""The extraction eval as a regression gate for the worker's decisions (`bench/extraction_eval.py`).

Every scripted conversation of `bench/fixtures/extraction/` runs in-process against the real
extractor with its recorded model replies; the worker must leak no secret, the harness must have
nothing to complain about, and adds, supersedes and learned rules must keep their recall.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # extraction_eval imports its siblings by name
MIN_FIXTURES = 25
MIN_RECALL = 0.9


def _load_eval() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "extraction_eval", ROOT / "bench" / "extraction_eval.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


ev = _load_eval()


@pytest.fixture(name="fixtures", scope="module")
def _fixtures() -> list[Any]:
    loaded: list[Any] = ev.load_fixtures(ev.FIXTURES)
    return loaded


def test_every_fixture_loads_and_validates(fixtures: list[Any]) -> None:
    files = sorted(p.stem for p in ev.FIXTURES.glob("*.json"))
    assert len(files) >= MIN_FIXTURES
    assert [f.name for f in fixtures] == files
    for fx in fixtures:
        assert fx.turns and all(t.messages for t in fx.turns), fx.name


async def test_the_worker_decides_as_the_fixtures_expect(fixtures: list[Any]) -> None:
    results = await ev.evaluate(fixtures)
    summary = ev.summary(results)
    report = ev.failure_list(results)
    assert summary["harness_errors"] == 0, report
    assert summary["secrets_leaked"] == 0, report
    # Every fixture passes, as docs/BENCHMARKS.md reports: a fixture left behind by a deliberate
    # change of the worker's decisions makes the eval print failures nobody reads as such.
    assert summary["passed"] == summary["fixtures"], report
    for dim in ("adds", "superseded", "rules"):
        recall = summary[f"{dim}_recall"]
        assert recall is not None and recall >= MIN_RECALL, f"{dim} recall {recall}\n{report}"


async def test_a_seed_ref_the_worker_did_not_show_is_a_harness_error(tmp_path: Path) -> None:
    fixture = json.loads((ev.FIXTURES / "correct-moved-city.json").read_text(encoding="utf-8"))
    fixture["seed"]["memories"].append({"text": "Quantum chromodynamics describes gluons."})
    fixture["turns"][0]["reply"] = fixture["turns"][0]["reply"].replace("seed:0", "seed:2")
    (tmp_path / "correct-moved-city.json").write_text(json.dumps(fixture), encoding="utf-8")
    [result] = await ev.evaluate(ev.load_fixtures(tmp_path))
    assert any("seed:2" in error for error in result.errors)
    assert not result.passed


async def test_a_wrong_expectation_fails_and_a_leak_is_caught(tmp_path: Path) -> None:
    fixture = json.loads((ev.FIXTURES / "secret-jwt.json").read_text(encoding="utf-8"))
    message = fixture["turns"][0]["messages"][0]
    message["text"] += " My locker code is zebra-42-quux."  # no secret shape: not redacted
    fixture["expect"]["secrets"].append("zebra-42-quux")
    fixture["expect"]["adds"].append(["locker"])
    (tmp_path / "secret-jwt.json").write_text(json.dumps(fixture), encoding="utf-8")
    [result] = await ev.evaluate(ev.load_fixtures(tmp_path))
    assert result.leaked and "router request" in result.leaked[0]
    assert result.scores["adds"].recall == 0.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.pop("description"), "description"),
        (lambda f: f.update(extra=1), "unknown keys"),
        (lambda f: f["expect"].update(superseded=["no such seed"]), "names no seed"),
        (lambda f: f["expect"].update(adds=[[]]), "keyword set"),
        (lambda f: f["expect"].update(created="1"), "expect.created"),
        (lambda f: f.update(settings={"max_memories_per_turn": -1}), "bad settings"),
        (lambda f: f["turns"][0].update(reply={"memories": []}), "reply"),
        (lambda f: f["turns"][0].update(reply="{{secret:NOPE}}"), "unknown secret"),
        (lambda f: f["turns"][0].update(reply='[{"op": "restate", "ref": "seed:9"}]'), "seed:9"),
    ],
)
def test_a_malformed_fixture_is_rejected(tmp_path: Path, change: Any, message: str | None) -> None:
    fixture = json.loads((ev.FIXTURES / "correct-moved-city.json").read_text(encoding="utf-8"))
    change(fixture)
    path = tmp_path / "correct-moved-city.json"
    path.write_text(json.dumps(fixture), encoding="utf-8")
    with pytest.raises(ev.FixtureError, match=message):
        ev.load_fixture(path, ev.secret_values())


async def test_live_mode_runs_every_part_through_the_endpoint_client(tmp_path: Path) -> None:
    """`--live http://…` against a fake OpenAI-compatible server: the fixtures, a LoCoMo session
    and the echo session each go through the production client (one call per turn), and the
    report counts what the replies did (here: one junk memory and one learned rule per bank)."""
    import argparse

    import extraction_live as lv

    from .openai_server import FakeOpenAI

    if not lv.LOCOMO.exists():
        pytest.skip(f"LoCoMo is not at {lv.LOCOMO}")
    pytest.importorskip("onnxruntime", reason="the matcher needs the local embedder")
    async with FakeOpenAI() as server:
        server.default = json.dumps(
            {
                "memories": [{"op": "add", "text": "The user went to a support group."}],
                "rules": ["Always be kind."],
            }
        )
        args = argparse.Namespace(
            live=server.url,
            model="",
            prompt="extraction-v2",
            parts="fixtures,locomo,echo",
            half="tune",
            conversations="conv-26",
            sessions=1,
            locomo=lv.LOCOMO,
            timeout_ms=5000,
            fixtures=ev.FIXTURES,
            fixture="correct-moved-city",
            json=tmp_path / "live.json",
            write_doc=None,
            calibrate=tmp_path / "cal.jsonl",
            replay=None,
        )
        assert await ev.live_endpoint(args) == 0
    conv = {c["sample_id"]: c for c in lv.load_locomo(lv.LOCOMO)}["conv-26"]
    turns = len(lv.locomo_turns(conv, 1))
    assert len(server.chats) == 1 + turns + lv.ECHO_TURNS
    assert all(c.body["response_format"] == {"type": "json_object"} for c in server.chats)
    report = json.loads((tmp_path / "live.json").read_text(encoding="utf-8"))
    assert report["meta"]["model"] == "local-model"
    totals = report["locomo"]["totals"]
    assert totals["created"] == 1 and totals["calls"] == turns
    # the text is written on the first turn where it is the user's (their words carry it, and
    # carry no less of it than the other speaker's do) and reinforced on every later such turn
    from memory_worker.core.extraction import Line
    from memory_worker.harness.extractor import echoed_terms, said_terms, the_users

    text = "The user went to a support group."
    carried = []
    for turn in lv.locomo_turns(conv, 1):
        lines = [Line(m["role"], m["content"][0]["text"], 0) for m in turn]
        carried.append(the_users(text, said_terms(lines), echoed_terms(lines)))
    assert 1 < sum(carried) < len(carried)
    assert totals["reinforced"] == sum(carried) - 1
    # nobody in the coding session says it: the model's reply writes nothing there
    assert report["echo"]["junk"] == []
    assert report["echo"]["rules_added"] == ["Always be kind."]
    assert report["echo"]["leaked"] == []
    assert (tmp_path / "cal.jsonl").read_text(encoding="utf-8").count("\n") == 1


def test_live_matching_names_the_speakers_and_pairs_one_to_one() -> None:
    import extraction_live as lv
    import numpy as np

    assert lv.named("The user's dog likes the assistant.", "Jon", "Gina") == "Jon's dog likes Gina."
    assert lv.named("User moved; the user is happy.", "Jon", "Gina") == "Jon moved; Jon is happy."
    scores = np.array([[0.9, 0.8], [0.85, 0.1], [0.2, 0.3]])
    # the best pair first (0,0); row 1 then has only column 0, taken; row 0's 0.8 is not reused
    assert lv.one_to_one(scores) == [(0, 0)]
    assert lv.one_to_one(np.array([[0.7, 0.9], [0.95, 0.1]])) == [(1, 0), (0, 1)]


def test_a_locomo_session_becomes_turns_of_user_then_assistant() -> None:
    import extraction_live as lv

    conv = {
        "conversation": {
            "speaker_a": "Jon",
            "speaker_b": "Gina",
            "session_1_date_time": "4:04 pm on 20 January, 2023",
            "session_1": [
                {"speaker": "Gina", "text": "Hi!"},
                {"speaker": "Jon", "text": "Hey."},
                {"speaker": "Jon", "text": "I lost my job.", "blip_caption": "a desk"},
                {"speaker": "Gina", "text": "Oh no."},
                {"speaker": "Jon", "text": "Bye."},
            ],
        }
    }
    turns = lv.locomo_turns(conv, 1)
    roles = [[m["role"] for m in turn] for turn in turns]
    assert roles == [["assistant"], ["user", "user", "assistant"], ["user"]]
    assert turns[1][1]["content"][0]["text"] == "I lost my job. [shares a photo: a desk]"
    stamps = [m["timestamp"] for turn in turns for m in turn]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5


async def test_a_recorded_live_run_replays_through_the_current_write_rules(
    tmp_path: Path,
) -> None:
    """`--replay` answers each unit's calls with the recorded replies, in order, and asks no
    model (the endpoint given is never contacted)."""
    import argparse

    import extraction_live as lv

    echo_reply = '{"memories": [{"op": "add", "text": "The user switched to uv."}], "rules": []}'
    said_at = 11  # the echo session's turn 12: where the user says it
    replies = [lv.Replayer.EMPTY] * said_at + [echo_reply]
    recorded = {"meta": {"model": "m"}, "echo": {"replies": replies}}
    (tmp_path / "run.json").write_text(json.dumps(recorded), encoding="utf-8")
    args = argparse.Namespace(
        live="http://127.0.0.1:9/v1", model="", prompt="extraction-v2", parts="echo",
        half="tune", conversations="", sessions=1, locomo=lv.LOCOMO, timeout_ms=1000,
        fixtures=ev.FIXTURES, fixture=None, json=tmp_path / "out.json", write_doc=None,
        calibrate=None, replay=tmp_path / "run.json",
    )  # fmt: skip
    assert await ev.live_endpoint(args) == 0
    out = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert out["echo"]["created"] == ["The user switched to uv."]
    assert out["echo"]["replies"][said_at] == echo_reply
    rest = out["echo"]["replies"][:said_at] + out["echo"]["replies"][said_at + 1 :]
    assert rest == [lv.Replayer.EMPTY] * (lv.ECHO_TURNS - 1)
    assert out["meta"]["model"] == "replayed from run.json: m"
