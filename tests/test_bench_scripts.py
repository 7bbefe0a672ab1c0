"""The benchmark scripts (`bench/`) against rot: each still imports against today's package, and
what a few of them measure is what their tables say (a record the product reads, a bank that
exists, a defect that is one). They run on the product team's machines with no other test; none
of this runs a benchmark."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # the scripts import their siblings by name, as when run
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py"))

TURNS = [
    f"Speaker {i}: we talked about the tea garden, the kiln and the river walk number {i}"
    for i in range(30)
]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_bench_script_imports_and_its_help_runs(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(name)
    main = getattr(module, "main", None)
    if main is None:
        return  # a library of the others (runinfo, embed_cache, extraction_live)
    params = list(inspect.signature(main).parameters)
    if inspect.iscoroutinefunction(main) or params not in ([], ["argv"]):
        # Its command line is read under `if __name__ == "__main__":`: as a person runs it.
        done = subprocess.run(
            [sys.executable, str(BENCH / f"{name}.py"), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "usage:" in done.stdout
        return
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py", "--help"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


async def test_lanes_stores_the_turns_as_locomo_does(tmp_path: Path) -> None:
    """bench/lanes.py's "off" rows are bench/locomo.py's turn level: the same records (the
    session a turn was said in included: ranking reads a question's answers from it), plus the
    window each turn was formed in."""
    import lanes
    import locomo

    docs = [
        locomo.Doc(
            f"D1:{i}", text, "Ana", 1_700_000_000_000 + i, frozenset({f"D1:{i}"}), "session_1"
        )
        for i, text in enumerate(TURNS[:3])
    ]
    conv = locomo.Conversation("conv-x", 1_700_000_100_000, turns=docs)
    holder = lanes.Bank(tmp_path, "x", None)
    try:
        await holder.fill("c0", conv)
        bank = holder.store.get("c0")
        assert bank is not None
        for doc in docs:
            stored = bank.memories[locomo._memory_id(doc.key)]
            expected = locomo.row("c0", locomo._memory_id(doc.key), doc)
            assert stored.source is not None
            assert stored.source.session_id == expected["source"]["session_id"]
            assert list(stored.entities) == expected["entities"]
            assert stored.context  # the lane's window is still stored
    finally:
        await holder.store.close()


def _existing_bank_of_each_save(calls: list[tuple[Path, list[str]]], empty: Path) -> list[str]:
    """The saves of `calls` (data dir, trigger arguments) that name a bank their data dir lacks
    (an empty data dir's save is meant to create its bank)."""
    wrong = []
    for data_dir, args in calls:
        if args[0] != "memory::save" or data_dir == empty:
            continue
        bank = next(a.removeprefix("bank=") for a in args if a.startswith("bank="))
        if not (data_dir / bank).is_dir():
            wrong.append(f"{bank} in {sorted(p.name for p in data_dir.iterdir())}")
    return wrong


async def test_growth_cli_rows_save_into_one_of_the_banks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import growth

    calls: list[tuple[Path, list[str]]] = []

    def run(argv: list[str], **_: Any) -> None:
        args = argv[2:]
        calls.append((Path(args[args.index("--data-dir") + 1]), args))

    monkeypatch.setattr(growth.subprocess, "run", run)
    await growth.measure_cli(tmp_path, TURNS, banks=2, total=20)
    assert calls
    assert not _existing_bank_of_each_save(calls, tmp_path / "empty")


def test_boot_ab_cli_rows_save_into_one_of_the_banks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boot_ab

    calls: list[tuple[Path, list[str]]] = []

    def cli(tree: Path, args: list[str]) -> float:
        calls.append((Path(args[args.index("--data-dir") + 1]), args))
        return 0.001

    monkeypatch.setattr(boot_ab, "cli", cli)
    args = argparse.Namespace(banks=2, per_bank=5, cli_rounds=1)
    rows = boot_ab.cli_table(args, ROOT, ROOT, tmp_path, TURNS)
    assert len(rows) == 3
    assert not _existing_bank_of_each_save(calls, tmp_path / "empty")


async def test_reliability_keeps_lookalike_labels_as_the_worker_stores_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tag or entity is stored composed (NFKC) and lowercased, full-width text included: that
    is not a secret rule changing a look-alike, so no defect."""
    import reliability

    monkeypatch.setattr(reliability, "WRITE_PATHS", ("save.tags", "update.entities"))
    monkeypatch.setattr(reliability, "SECRETS", reliability.SECRETS[:2])
    report = reliability.Report(seed=1, quick=True)
    await reliability.secrets_campaign(tmp_path, report)
    assert "secret-false-positive" not in report.defects, report.defects
    assert not [key for key in report.defects if key.startswith("secret-missed")]


async def test_recall_speed_times_saves_that_evict_nothing_at_every_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its save column must be one operation at every size ("cost independent of bank size"):
    a bank past the default cap (10,000: its 10k and 100k rows) made every timed save an
    eviction too, while the 1k row's saved only. Here the default cap is lowered below the
    bank so that a small run shows it."""
    import functools

    import recall_speed

    from memory_worker.core.config import Settings

    evicted: list[int] = []
    real_call = recall_speed.call

    async def call(service: Any, function_id: str, payload: Any, *rest: Any) -> Any:
        out = await real_call(service, function_id, payload, *rest)
        if function_id == "memory::save":
            evicted.append(len(out.get("evicted") or []))
        return out

    monkeypatch.setattr(recall_speed, "call", call)
    monkeypatch.setattr(recall_speed, "Settings", functools.partial(Settings, max_memories=40))
    for name, value in (("SAVES", 4), ("WRITERS", 2), ("SAVES_PER_WRITER", 2), ("BOOT_RUNS", 1)):
        monkeypatch.setattr(recall_speed, name, value)
    corpus = recall_speed.Corpus()
    out = await recall_speed.measure(60, corpus, corpus.queries(25), tmp_path)
    assert out["save_p50_ms"] > 0 and evicted
    assert not any(evicted), f"saves evicted {sum(evicted)} memories"


async def test_a_replayed_live_run_answers_each_fixture_with_its_recorded_replies() -> None:
    """`extraction_eval.py --live URL --replay JSON` (fixtures are among its default parts) must
    answer each scripted conversation with what the model said to it in the recorded run; it
    answered every fixture with an empty reply and reported that as the model's own."""
    import extraction_eval as ev
    import extraction_live as lv

    # One of the conversation's five facts, as a model that found only it would answer.
    reply = (
        '{"memories": [{"op": "add", "text": "The ledgerline project uses Postgres 16.", '
        '"entities": ["ledgerline", "postgres"]}], "rules": []}'
    )
    recorded = {"fixtures": {"results": [{"name": "facts-project-stack", "replies": [reply]}]}}
    counting = lv.Counting(lv.Replayer(lv.recorded_replies(recorded)))
    [result] = await ev.evaluate(
        ev.load_fixtures(ev.FIXTURES, "facts-project-stack"), inner=counting
    )
    assert result.replies == [reply]
    assert result.created == ["The ledgerline project uses Postgres 16."]
