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
