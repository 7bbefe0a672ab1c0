"""Process death: SIGKILL a real `memory-worker call --batch -` at seeded random moments of a mixed
stream (saves, updates, supersedes, pins, deletes, rule writes, bank create/delete) and an import
mid-way; every restart must boot and serve exactly the acknowledged state plus a prefix of what was
in flight, each operation whole (`model.outcomes`). The campaign (`bench/reliability.py`) runs the
same attack thousands of times.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path

import pytest

from .model import Op, World, diff, import_op, next_op, observe, outcomes
from .procs import Child, Writer

ROUNDS = 3


def settle(acked: World, in_flight: list[Op], seen: World) -> World:
    states = outcomes(acked, [op.effect for op in in_flight])
    if seen in states:
        return seen
    pytest.fail(
        "the restarted writer serves a state that is neither the acknowledged one nor it plus a "
        f"prefix of the whole in-flight operations {[op.kind for op in in_flight]}; differences "
        f"from each allowed state: {[diff(state, seen, limit=3) for state in states]}"
    )


def kill_moment(rng: random.Random) -> None:
    """Choose when the signal lands: at once, or a few milliseconds into the work (this sleep
    picks the moment of the attack; it does not wait for any work to finish)."""
    delay = rng.choice((0.0, rng.uniform(0, 0.004), rng.uniform(0, 0.02)))
    if delay:
        time.sleep(delay)


@pytest.mark.parametrize("seed", [6, 1906])
def test_acknowledged_mutations_survive_sigkill_of_a_mixed_stream_and_of_an_import(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    numbers = itertools.count()
    data = tmp_path / "data"
    world: World = World()
    in_flight: list[Op] = []
    for _ in range(ROUNDS):
        with Writer(data, cwd=tmp_path) as writer:
            world = settle(world, in_flight, observe(writer.result, data))
            for _ in range(rng.randint(6, 14)):
                op = next_op(rng, world, numbers)
                answer = writer.call(op.function_id, op.payload)
                assert "result" in answer, (op.function_id, op.payload, answer)
                if op.saves is not None:
                    assert answer["result"]["memory"]["id"] == op.saves
                world = op.apply(world)
            # One to three lines sent and never answered: cut off wherever they stand. A bank
            # created here has no description: a create cut short is pinned by its own test
            # (test_faults.py), which this one must not make flaky.
            in_flight, predicted = [], world
            for _ in range(rng.randint(1, 3)):
                op = next_op(rng, predicted, numbers, descriptions=False)
                writer.send(op.function_id, op.payload)
                in_flight.append(op)
                predicted = op.apply(predicted)
            kill_moment(rng)
            writer.kill()

    # An import killed mid-way: all of its records after the restart, or none.
    with Writer(data, cwd=tmp_path) as writer:
        world = settle(world, in_flight, observe(writer.result, data))
        assert writer.close() == 0
    bank = rng.choice(sorted(world.banks))
    rows, effect = import_op(rng, world, numbers, bank, 40)
    source = tmp_path / "import.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    log = data / bank / "memories.jsonl"
    size = log.stat().st_size if log.exists() else 0
    kept = log.with_name("interrupted-writes.jsonl")  # earlier rounds' cut writes, set aside
    kept_size = kept.stat().st_size if kept.exists() else 0
    with Child(
        ["import", str(source), "--bank", bank, "--data-dir", str(data)],
        cwd=tmp_path,
        mode="spawn",
        stdin=False,
    ) as importer:
        # Kill the moment the log starts to grow: inside the import's write or before its fsync.
        deadline = time.monotonic() + 20
        while importer.alive() and time.monotonic() < deadline:
            if (log.stat().st_size if log.exists() else 0) != size:
                break
        finished = not importer.alive()
        importer.kill()
    in_flight = [] if finished else [Op("import", "import", {}, effect)]
    world = effect(world) if finished else world

    with Writer(data, cwd=tmp_path) as reader:
        final = settle(world, in_flight, observe(reader.result, data))
        imported = sum(1 for row in rows if row["text"] in _texts(final, bank))
        assert imported in (0, len(rows))
        doctor = reader.result("memory::doctor", {})
        (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
        # A kill inside the import's write leaves its lines short at the log's end: the load
        # sets them aside (never acknowledged), so the log ends whole and nothing is damage.
        assert intact["ok"], intact["detail"]
        set_aside = (kept.stat().st_size if kept.exists() else 0) != kept_size
        note = f"{bank}/memories.jsonl: an interrupted write at its end"
        assert (note in intact["detail"]) is set_aside, intact["detail"]
        assert reader.close() == 0


def _texts(world: World, bank: str) -> set[str]:
    return {rec.text for rec in world.banks[bank].memories.values()}
