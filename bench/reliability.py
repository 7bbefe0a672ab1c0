"""The reliability campaign (issue 6): attack the worker for minutes and print what survived.

    .venv/bin/python bench/reliability.py [--quick] [--seed N] [--kills N] [--payloads N]
                                          [--bus-kills N] [--only SECTIONS] [--json OUT]

Sections, in this order (the kill section forks writers, so it runs while this process still has a
single thread):
1. kills — SIGKILL `memory-worker call --batch -` (forked from this process, which already imported
   the worker, plus a share started as real interpreters) and `memory-worker import` at seeded
   random moments over a mixed stream (saves, updates, supersedes, pins, deletes, rule writes, bank
   create/delete, imports), restarting each time and comparing what the restart serves with a
   reference model (`tests/reliability/model.py`): the acknowledged state plus a prefix of what was
   in flight, each operation whole.
2. big import — (full run only) a ~55 MB import killed the moment its log starts to grow: is the
   import all-or-nothing when the kill lands inside its one write()?
3. faults — EIO / ENOSPC injected at the k-th call of each file-layer function (`os.fsync`,
   `os.write` partial then failing, `os.replace`, `os.rename`, `os.mkdir`, `os.open`, `os.unlink`,
   `os.ftruncate`) for every operation; then RAM must be unchanged, the next write intact, and a
   reopen must serve what RAM served. Plus unusable data dirs at start.
4. fuzz — generated payloads through every public function via `catalog.call` on a scratch copy of a
   seeded data dir: a result or a coded error, nothing written outside the data dir (audit hook),
   rejected calls and reads change nothing, a reopen replays what RAM held.
5. secrets — the corpus of `tests/secret_corpus.py` through every write path: a secret whose value
   is on disk afterwards is missed; a look-alike stored changed is a false positive.
6. bus — `memory-worker serve --engine` on the engine double of the wire tests, SIGKILLed while
   `iii trigger`-style clients save through the engine, then restarted: every acknowledged save is
   served, each unanswered one whole or absent, nothing damaged (last: it starts threads).
7–12. browser, planted, lock, overflow, dos, bypass — the hardening sections of issue 11
   (`bench/attacks.py`, which says what each attacks): run before the bus section.

Exits 0 and prints a table; `--json OUT` keeps every figure and every defect example.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import attacks  # noqa: E402 - bench/ is on sys.path when this script runs

from memory_worker.app import catalog  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.core.errors import (  # noqa: E402
    ERROR_CODES,
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    StorageError,
    WorkerError,
)
from memory_worker.core.text import collapse_whitespace  # noqa: E402
from memory_worker.core.transitions import normalize_label  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402
from tests import test_properties as property_tests  # noqa: E402
from tests.fakes import FixedClock, RecordingEmitter  # noqa: E402
from tests.reliability.helpers import (  # noqa: E402
    BLOG,
    HOLDER,
    NEW,
    OLD,
    PINNED,
    SEED_IDS,
    TEA,
    WRITE_PATHS,
    Injector,
    answers,
    disk_texts,
    on_disk,
    seed,
    write_through,
)
from tests.reliability.model import (  # noqa: E402
    World,
    diff,
    import_op,
    next_op,
    observe,
    outcomes,
)
from tests.reliability.procs import Child, Mode, ProcessFailed, Writer  # noqa: E402
from tests.secret_corpus import LOOKALIKES, SECRETS  # noqa: E402

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
REJECTIONS = (InvalidInput, BankNotFound, MemoryNotFound, Conflict)


@dataclass
class Report:
    seed: int
    quick: bool
    started: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    defects: dict[str, dict[str, Any]] = field(default_factory=dict)

    def defect(self, key: str, description: str, example: Any) -> None:
        entry = self.defects.setdefault(
            key, {"description": description, "count": 0, "examples": []}
        )
        entry["count"] += 1
        if len(entry["examples"]) < 3:
            entry["examples"].append(example)


def spin(seconds: float) -> None:
    """Busy-wait `seconds`: the kill lands at a chosen moment (this is not waiting for work)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# === 1. kills ===

RESET_EVERY = 40  # cycles per data dir: keeps every log small so boots stay fast


def _log_sizes(data: Path) -> dict[str, int]:
    sizes = {}
    for log in data.glob("*/memories.jsonl"):
        with contextlib.suppress(OSError):
            sizes[log.parent.name] = log.stat().st_size
    return sizes


def _aimed_kill(child: Child, data: Path, deadline_s: float = 2.0) -> tuple[str, bool]:
    """Kill the moment any bank log changes size (the write has started; its fsync and answer
    have not necessarily happened), or when the deadline passes. Returns how, and whether the
    process was still alive when the signal went."""
    before = _log_sizes(data)
    end = time.monotonic() + deadline_s
    label = "aimed-miss"
    while time.monotonic() < end and child.alive():
        now = _log_sizes(data)  # a log that appears empty has not been written to yet
        if any(size != before.get(bank, 0) for bank, size in now.items()):
            label = "aimed-hit"
            break
    alive = child.alive()
    child.kill()
    return label, alive


def _classify_mismatch(kinds: list[str], states: list[World], seen: World) -> tuple[str, str]:
    """Name what went wrong when a restart matches no allowed state."""
    if kinds == ["import"]:
        return (
            "kill-torn-import",
            "an import killed mid-way is half applied after the restart (a prefix of its records; "
            "replay keeps every complete line of a multi-record write)",
        )
    for kind, state in zip(kinds, states[1:], strict=True):
        found = diff(state, seen, limit=10_000)
        if kind == "bank-create" and found and all("description" in line for line in found):
            return (
                "kill-partial-bank-create",
                "a bank::create killed mid-way left the bank without its description (the folder "
                "exists before bank.yaml is written)",
            )
    return (
        "kill-state-mismatch",
        "after a SIGKILL the restarted writer served a state that is neither the acknowledged "
        "one nor it plus a prefix of the whole in-flight operations",
    )


def _check_last(
    data: Path,
    root: Path,
    world: World,
    in_flight: list[Callable[[World], World]],
    kinds: list[str],
    unverified: int,
    stats: Counter[str],
    report: Report,
    mode: Mode,
) -> int:
    """Restart once more and compare with the model; returns the acknowledged count still
    unverified (0 once checked)."""
    with Writer(data, cwd=root, mode=mode) as reader:
        seen = observe(reader.result, data)
        states = outcomes(world, in_flight)
        if seen in states:
            stats["mutations-verified"] += unverified
        else:
            key, description = _classify_mismatch(kinds, states, seen)
            report.defect(
                key, description, {"in_flight": kinds, "diff": [diff(s, seen, 3) for s in states]}
            )
        stats["verified-states"] += 1
        reader.close()
    return 0


def kill_campaign(  # noqa: C901 - one attack loop reads best in one piece
    rng: random.Random, root: Path, target: int, report: Report
) -> None:
    numbers = itertools.count()
    stats: Counter[str] = Counter()
    acked_kinds: Counter[str] = Counter()
    cut_kinds: Counter[str] = Counter()
    data = root / "kills-0"
    world = World()
    in_flight: list[Callable[[World], World]] = []
    in_flight_kinds: list[str] = []
    cycle_in_dir = 0
    kills = 0
    unverified = 0  # acknowledged since the last restart's check
    started = time.perf_counter()
    while kills < target:
        if cycle_in_dir >= RESET_EVERY:
            # The last kill in this data dir is checked too, by a clean reader, before moving on.
            unverified = _check_last(
                data,
                root,
                world,
                in_flight,
                in_flight_kinds,
                unverified,
                stats,
                report,
                mode="fork",
            )
            shutil.rmtree(data)
            data = root / f"kills-{kills}"
            world, in_flight, in_flight_kinds, cycle_in_dir = World(), [], [], 0
            unverified = 0
        cycle_in_dir += 1
        mode: Mode = "spawn" if rng.random() < 0.03 else "fork"
        stats[f"writers-{mode}"] += 1
        writer = Writer(data, cwd=root, mode=mode)
        try:
            if rng.random() < 0.08 and in_flight == []:
                # Killed while booting (replaying, taking the lock): nothing may change.
                spin(rng.uniform(0, 0.004 if mode == "fork" else 0.8))
                was_alive = writer.alive()
                writer.kill()
                kills += was_alive
                stats["killed-at-boot"] += was_alive
                continue
            seen = observe(writer.result, data)
            states = outcomes(world, in_flight)
            if seen in states:
                landed = states.index(seen)
                stats["mutations-verified"] += unverified
                unverified = 0
                stats["in-flight-landed"] += landed
                stats["in-flight-lost"] += len(in_flight) - landed
                stats["verified-states"] += 1
            else:
                key, description = _classify_mismatch(in_flight_kinds, states, seen)
                report.defect(
                    key,
                    description,
                    {
                        "in_flight": in_flight_kinds,
                        "diff_from_each_allowed_state": [diff(s, seen, limit=3) for s in states],
                    },
                )
            unverified = 0
            world, in_flight, in_flight_kinds = seen, [], []
            if cycle_in_dir % 20 == 0:
                doctor = writer.result("memory::doctor", {})
                (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
                detail = intact["detail"]
                if not intact["ok"] and "memories.jsonl" in detail:
                    # A write a kill cut short is at the log's end, set aside at the next load:
                    # damage left in the log after a kill is a defect.
                    report.defect(
                        "damage-after-kill",
                        "a SIGKILL left a damaged memories.jsonl line that doctor reports",
                        detail[:300],
                    )
                elif not intact["ok"]:
                    stats["doctor-reported-leftover-temp-files"] += 1  # expected: reported
                elif "an interrupted write at its end" in detail:
                    stats["interrupted-writes-set-aside"] += 1  # expected: cut short, moved out
            if world.banks and rng.random() < 0.12:
                writer.close()
                killed, world, in_flight, in_flight_kinds = _import_cycle(
                    rng, root, data, world, numbers, mode, stats
                )
                kills += killed
                unverified += int(not killed)
                continue
            for _ in range(rng.randint(0, 10)):
                op = next_op(rng, world, numbers)
                answer = writer.call(op.function_id, op.payload)
                if "result" not in answer or (
                    op.saves is not None and answer["result"]["memory"]["id"] != op.saves
                ):
                    report.defect(
                        "valid-op-failed",
                        "an operation valid against the model was refused",
                        {"op": op.function_id, "payload": op.payload, "answer": answer},
                    )
                    raise ProcessFailed("resync")
                world = op.apply(world)
                stats["mutations-acked"] += 1
                unverified += 1
                acked_kinds[op.kind] += 1
            predicted = world
            for _ in range(rng.randint(1, 4)):
                op = next_op(rng, predicted, numbers)
                writer.send(op.function_id, op.payload)
                in_flight.append(op.effect)
                in_flight_kinds.append(op.kind)
                predicted = op.apply(predicted)
            how = rng.choice(("now", "spin", "spin", "answers", "aimed"))
            if how == "spin":
                spin(rng.uniform(0, 0.012))
            elif how == "answers":
                for _ in range(rng.randint(0, len(in_flight) - 1)):
                    answer = writer.read_answer()
                    assert "result" in answer, answer
                    world = in_flight.pop(0)(world)
                    acked_kinds[in_flight_kinds.pop(0)] += 1
                    stats["mutations-acked"] += 1
                    unverified += 1
            if how == "aimed":
                stats[_aimed_kill(writer, data)[0]] += 1
            for kind in in_flight_kinds:
                cut_kinds[kind] += 1
            writer.kill()
            kills += 1
            stats[f"kill-{how}"] += 1
        except ProcessFailed as exc:
            if str(exc) != "resync":
                report.defect("writer-failed", "a writer crashed or stopped answering", str(exc))
            writer.kill()
            writer = Writer(data, cwd=root, mode="fork")
            world, in_flight, in_flight_kinds = observe(writer.result, data), [], []
            writer.kill()
        finally:
            writer.kill()
    # The last state is checked once more, by a real interpreter.
    _check_last(data, root, world, in_flight, in_flight_kinds, unverified, stats, report, "spawn")
    report.figures["kills"] = {
        "kills": kills,
        "seconds": round(time.perf_counter() - started, 1),
        **dict(sorted(stats.items())),
        "acked_by_kind": dict(sorted(acked_kinds.items())),
        "cut_in_flight_by_kind": dict(sorted(cut_kinds.items())),
    }


def _import_cycle(
    rng: random.Random,
    root: Path,
    data: Path,
    world: World,
    numbers: Iterator[int],
    mode: str,
    stats: Counter[str],
) -> tuple[int, World, list[Callable[[World], World]], list[str]]:
    """Run `memory-worker import` into an existing bank and kill it at a random moment; the next
    restart must find all of its records or none. Returns whether a live process was killed, and
    the model: acknowledged state, in-flight effects and their kinds."""
    bank = rng.choice(sorted(world.banks))
    rows, effect = import_op(rng, world, numbers, bank, rng.choice((1, 3, 20, 80, 200)))
    source = root / "import.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    child = Child(
        ["import", str(source), "--bank", bank, "--data-dir", str(data)],
        cwd=root,
        mode="spawn" if mode == "spawn" else "fork",
        stdin=False,
    )
    if rng.random() < 0.5:
        outcome, was_alive = _aimed_kill(child, data)
    else:
        spin(rng.uniform(0, 0.9 if mode == "spawn" else 0.03))
        outcome, was_alive = "spin", child.alive()
        child.kill()
    stats[f"import-{outcome}-{'killed' if was_alive else 'finished'}"] += 1
    stats["imports-killed"] += was_alive
    stats["imports"] += 1
    stats["import-rows"] += len(rows)
    if was_alive:
        return 1, world, [effect], ["import"]
    stats["mutations-acked"] += 1
    return 0, effect(world), [], []


# === 2. a big import killed inside its write() ===


def big_import(rng: random.Random, root: Path, rows: int, attempts: int, report: Report) -> None:
    data = root / "big-import"
    results = []
    words = "alpha beta gamma delta user likes tea coffee lisbon porto blog deploy office".split()
    source = root / "big.jsonl"
    with source.open("w") as out:
        for i in range(rows):
            text = f"Big import record {i}: " + " ".join(rng.choice(words) for _ in range(300))
            out.write(json.dumps({"text": text[:1990], "tags": ["big"]}) + "\n")
    for attempt in range(attempts):
        shutil.rmtree(data, ignore_errors=True)
        with Writer(data, cwd=root, mode="fork") as writer:
            writer.result("memory::bank::create", {"name": "big"})
            writer.close()
        child = Child(
            ["import", str(source), "--bank", "big", "--data-dir", str(data)],
            cwd=root,
            mode="fork",
            stdin=False,
        )
        outcome, _ = _aimed_kill(child, data, deadline_s=300)
        with Writer(data, cwd=root, mode="fork") as reader:
            present = reader.result("memory::list", {"bank": "big", "limit": 1})["total"]
            doctor = reader.result("memory::doctor", {})
            reader.close()
        intact = next(c for c in doctor["checks"] if c["name"] == "files-intact")
        log_bytes = (data / "big" / "memories.jsonl").stat().st_size
        results.append(
            {
                "attempt": attempt,
                "kill": outcome,
                "rows": rows,
                "present_after_restart": present,
                "log_bytes": log_bytes,
                "damage": intact["detail"][:200] if not intact["ok"] else "",
            }
        )
        if 0 < present < rows:
            report.defect(
                "torn-import",
                "an import killed inside its one write() is half applied after restart: "
                "replay keeps every complete line of a multi-record commit",
                results[-1],
            )
    report.figures["big_import"] = results


# === 3. storage faults ===

FAULT_OPS: list[tuple[str, str, dict[str, Any]]] = [
    ("save-new", "memory::save", {"text": "The user moved to Porto"}),
    ("save-reinforce", "memory::save", {"text": TEA.upper()}),
    ("save-new-bank", "memory::save", {"bank": "fresh", "text": "A fresh bank fact"}),
    ("update", "memory::update", {"id": SEED_IDS[TEA], "text": "The user drinks black tea"}),
    ("delete", "memory::delete", {"id": SEED_IDS[TEA]}),
    ("pin", "memory::pin", {"id": SEED_IDS[TEA], "pinned": True}),
    ("supersede", "memory::supersede", {"id": SEED_IDS[OLD], "superseded_by": SEED_IDS[NEW]}),
    (
        "supersede-reinforce",
        "memory::supersede",
        {"id": SEED_IDS[OLD], "superseded_by": SEED_IDS[NEW], "reinforce": True},
    ),
    ("rule-new", "memory::rule::set", {"name": "tone", "content": "Be warm."}),
    ("rule-overwrite", "memory::rule::set", {"name": "style", "content": "Answer at length."}),
    ("rule-remove", "memory::rule::set", {"name": "style", "content": ""}),
    ("rule-new-bank", "memory::rule::set", {"bank": "fresh", "name": "tone", "content": "Hi."}),
    ("bank-create", "memory::bank::create", {"name": "fresh", "description": "A fresh bank"}),
    ("bank-delete", "memory::bank::delete", {"name": "blog"}),
    ("bank-delete-main", "memory::bank::delete", {"name": "main"}),
    ("import", "import", {"bank": "main"}),
    ("import-new-bank", "import", {"bank": "fresh"}),
    ("doctor", "memory::doctor", {}),
    ("reload", "memory::reload", {}),
]
IMPORT_ROWS: list[dict[str, Any]] = [
    {"text": "Imported fact one", "tags": ["imp"]},
    {"text": "Imported fact two", "invalid_at": 5, "created_at": 1},
    {"text": "Imported fact three", "pinned": True},
]
FAULT_POINTS = (
    "fsync",
    "write",
    "write-partial",
    "replace",
    "rename",
    "mkdir",
    "open",
    "unlink",
    "ftruncate",
)


async def _run_op(service: MemoryService, function_id: str, payload: dict[str, Any]) -> Any:
    if function_id == "import":
        return await service.import_records(payload["bank"], IMPORT_ROWS)
    return await catalog.call(service, function_id, payload)


async def fault_trial(  # noqa: C901 - every check of one trial, in order
    seeded: Path, scratch: Path, op: tuple[str, str, dict[str, Any]], point: str, k: int, code: int
) -> tuple[bool, list[str], int, bool]:
    """Returns (fired, violations, calls counted, failed-but-applied)."""
    _, function_id, payload = op
    outcome: dict[str, bool] = {}
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(seeded, scratch)
    clock = FixedClock()
    clock.advance(10_000)
    store = Store.open(scratch, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=clock)
    problems: list[str] = []
    try:
        before = await answers(service)
        with Injector(point, k, code) as injector:
            failed: WorkerError | None = None
            try:
                result = await _run_op(service, function_id, payload)
                # (Path.mkdir(exist_ok=True) absorbs a failing mkdir of a folder that exists.)
                absorbed = point == "mkdir"
                if (
                    function_id == "memory::doctor"
                    and injector.fired
                    and result["ok"]
                    and not absorbed
                ):
                    problems.append("doctor reported ok although a fault hit its roundtrip")
                if function_id == "memory::doctor":
                    left = [
                        p.relative_to(scratch).as_posix()
                        for p in (*scratch.glob("doctor-*"), *scratch.glob(".trash/doctor-*"))
                    ]
                    if left:
                        problems.append(f"doctor left its scratch bank behind: {left}")
            except StorageError as err:
                failed = err
            except WorkerError as err:
                problems.append(f"a fault surfaced as {err.code}, not storage: {err}")
            except Exception as exc:
                problems.append(f"uncaught {type(exc).__name__}: {exc}")
        if k == 0 or not injector.fired:
            return False, [], injector.calls, False
        if failed is not None:
            if not str(failed).startswith("storage: "):
                problems.append(f"storage error text {failed}")
            # After the point of no return (the rename done, its directory fsync failed) the
            # worker reports `storage` with the change made and RAM following the disk: allowed
            # when the reopen below agrees, counted apart.
            applied = await answers(service) != before
            outcome["applied-then-reported"] = applied
        # The next write must land intact, in every bank the caller still sees.
        clock.advance(1000)
        for info in (await catalog.call(service, "memory::bank::list", {}))["banks"]:
            text = f"After the fault, {info['name']} still takes writes"
            try:
                await catalog.call(service, "memory::save", {"bank": info["name"], "text": text})
            except StorageError as err:
                if "until memory::reload" in err.message:
                    await catalog.call(service, "memory::reload", {})
                    try:
                        await catalog.call(
                            service, "memory::save", {"bank": info["name"], "text": text}
                        )
                    except WorkerError as again:
                        problems.append(f"bank {info['name']} refuses writes after reload: {again}")
                else:
                    problems.append(f"listed bank {info['name']} refuses writes afterwards: {err}")
        live = await answers(service)
        await store.close()
        store = Store.open(scratch, holder=HOLDER)
        service = MemoryService(store, Settings(), clock=clock)
        replayed = await answers(service)
        if replayed != live:
            where = sorted(k for k in set(live) | set(replayed) if live.get(k) != replayed.get(k))
            problems.append(
                f"a reopen serves another state than RAM did ({'failed' if failed else 'ok'} "
                f"call{', applied' if outcome.get('applied-then-reported') else ''}; differs in "
                f"{where})"
            )
        return True, problems, injector.calls, outcome.get("applied-then-reported", False)
    finally:
        await store.close()


async def fault_campaign(root: Path, report: Report, quick: bool) -> None:
    seeded = root / "fault-seed"
    await seed(seeded)
    scratch = root / "fault-scratch"
    per_point: dict[str, Counter[str]] = defaultdict(Counter)
    started = time.perf_counter()
    codes = (errno.EIO,) if quick else (errno.EIO, errno.ENOSPC)
    for op in FAULT_OPS:
        for point in FAULT_POINTS:
            _, _, total, _ = await fault_trial(seeded, scratch, op, point, 0, errno.EIO)
            for k in range(1, total + 1):
                for code in codes:
                    fired, problems, _, applied = await fault_trial(
                        seeded, scratch, op, point, k, code
                    )
                    if not fired:
                        continue
                    per_point[point]["injected"] += 1
                    per_point[point]["applied-then-reported"] += applied
                    per_point[point]["violations"] += bool(problems)
                    for problem in problems:
                        key = f"fault:{op[0]}:{point}:{problem.split(':')[0][:60]}"
                        report.defect(
                            key,
                            f"{op[0]} with {point} failing ({errno.errorcode[code]}) at call {k}: "
                            + problem,
                            {"op": op[0], "point": point, "k": k, "errno": errno.errorcode[code]},
                        )
    start_faults = await _start_faults(root)
    for name, ok in start_faults.items():
        per_point["data-dir-at-start"]["injected"] += 1
        if not ok:
            per_point["data-dir-at-start"]["violations"] += 1
            report.defect(
                f"start:{name}", f"unusable data dir at start ({name}) was not fatal", name
            )
    report.figures["faults"] = {
        "seconds": round(time.perf_counter() - started, 1),
        "by_point": {p: dict(c) for p, c in sorted(per_point.items())},
        "injected": sum(c["injected"] for c in per_point.values()),
        "violations": sum(c["violations"] for c in per_point.values()),
    }


async def _start_faults(root: Path) -> dict[str, bool]:
    """Each way a data dir can be unusable at start must raise `storage`, never open RAM-only."""
    blocker = root / "a-regular-file"
    blocker.write_text("not a folder")
    (root / "dangling").unlink(missing_ok=True)
    (root / "dangling").symlink_to(blocker / "data")
    cases = {
        "under-a-regular-file": blocker / "data",
        "is-a-regular-file": blocker,
        "dangling-symlink": root / "dangling",
    }
    out = {}
    for name, path in cases.items():
        try:
            store = Store.open(path, holder=HOLDER)
        except StorageError:
            out[name] = True
        else:
            await store.close()
            out[name] = False
    with Injector("open", 1, errno.EROFS):
        try:
            store = Store.open(root / "read-only", holder=HOLDER)
        except StorageError:
            out["read-only-filesystem"] = True
        else:
            await store.close()
            out["read-only-filesystem"] = False
    return out


# === 4. fuzz ===

# The hostile strings of the property tests, plus the name doctor once took for a scratch bank.
NASTY = (*property_tests.NASTY, "doctor-210000")
HUGE = property_tests.HUGE
NAMES = (*property_tests.NAMES, "doctor-210000", "doctor-210001")
NUMBERS = (*property_tests.NUMBERS, 2**63 - 1)
WORDS = (
    "user",
    "tea",
    "blog",
    "ana",
    "office",
    "lisbon",
    "porto",
    "morning",
    "café",
    "ação",
    "记忆",
    "🙂",
    "the",
    "o",
    "de",
    "Friday",
    "deploy",
)
FIELDS = sorted({name for spec in catalog.CATALOG for name in spec.request.model_fields})
READS = {
    "memory::get",
    "memory::list",
    "memory::tags",
    "memory::recall",
    "memory::preview",
    "memory::rule::list",
    "memory::bank::list",
    "memory::doctor",
    "memory::reload",
}


class Fuzzer:
    def __init__(self, rng: random.Random, clock: FixedClock) -> None:
        self.rng = rng
        self.clock = clock
        self.ids: list[str] = list(SEED_IDS.values())

    def text(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        if r < 0.8:
            return rng.choice((TEA, PINNED, OLD, NEW, BLOG, TEA.upper(), "  padded  text  "))
        if r < 0.997:
            return rng.choice(NASTY)
        return rng.choice(HUGE)

    def chars(self) -> str:
        rng = self.rng
        ranges = (
            (0, 0x7F),
            (0x80, 0x7FF),
            (0x590, 0x6FF),
            (0x4E00, 0x9FFF),
            (0x1F300, 0x1FAFF),
            (0xD800, 0xDFFF),
            (0, 0x10FFFF),
        )
        lo, hi = rng.choice(ranges)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(0, 30)))

    def junk(self, depth: int = 0) -> Any:
        rng = self.rng
        r = rng.random()
        if depth < 4 and r < 0.2:
            return [self.junk(depth + 1) for _ in range(rng.randint(0, 3))]
        if depth < 4 and r < 0.35:
            return {self.chars()[:6]: self.junk(depth + 1) for _ in range(rng.randint(0, 3))}
        if r < 0.5:
            return rng.choice(NUMBERS)
        if r < 0.6:
            return rng.choice((None, True, False))
        if r < 0.65:
            return [[[[["deep"]]]]]
        return self.chars()

    def good(self, name: str) -> Any:  # noqa: C901 - one plain value per field
        rng = self.rng
        if name in ("bank",):
            if rng.random() < 0.05:  # the name doctor's scratch bank gets at this instant
                return f"doctor-{self.clock() % 1_000_000:06d}"
            return rng.choice(("main", "blog", "fresh-bank", None))
        if name == "name":
            return rng.choice(("blog", "main", "fresh-bank", "style", "tone", "new-rule"))
        if name in ("id", "superseded_by"):
            return rng.choice(self.ids)
        if name in ("entities", "tags"):
            return [
                rng.choice(("tea", "Blog", "ana", "user", "morning"))
                for _ in range(rng.randint(0, 3))
            ]
        if name in ("pinned", "reinforce", "include_superseded"):
            return rng.random() < 0.5
        if name in ("limit", "offset"):
            return rng.randint(0, 20)
        if name == "as_of":
            return FixedClock.START_MS + rng.randint(-86_400_000, 86_400_000)
        if name == "mode":
            return rng.choice(("hybrid", "lexical", "semantic"))
        if name == "tag":
            return rng.choice(("tea", "blog", "morning"))
        if name == "session_id":
            return rng.choice(("s-1", "session 2"))
        if name in ("description", "reason"):
            return rng.choice(("The iii blog", "merged", ""))
        return self.text()

    def hostile(self, name: str) -> Any:
        rng = self.rng
        if name in ("bank", "name"):
            return rng.choice(NAMES)
        if name in ("id", "superseded_by"):
            return rng.choice(("fp0000000000000000", self.ids[0].upper(), "../evil", "", ".lock"))
        if name in ("entities", "tags"):
            return (
                [self.text() for _ in range(rng.randint(0, 10))]
                if rng.random() < 0.8
                else self.text()
            )
        if name in ("pinned", "reinforce", "include_superseded"):
            return rng.choice(("true", "false", "yes", "0", 1, 0, 2, ""))
        if name in ("limit", "offset", "as_of"):
            return rng.choice(NUMBERS)
        if name == "mode":
            return rng.choice(("HYBRID", " lexical", "fuzzy"))
        return self.chars() if rng.random() < 0.5 else self.text()

    def payload(self, spec: catalog.FunctionSpec) -> object:
        rng = self.rng
        if rng.random() < 0.02:
            return rng.choice((["not", "an", "object"], "text=hello", 42, None, 1.5))
        out: dict[str, Any] = {}
        for name in spec.request.model_fields:
            if rng.random() < 0.15:
                continue
            r = rng.random()
            out[name] = (
                self.good(name) if r < 0.7 else self.hostile(name) if r < 0.9 else self.junk()
            )
        if rng.random() < 0.2:
            out["_caller_worker_id"] = rng.choice(("engine", "\ud800", self.junk()))
        if rng.random() < 0.1:
            out[self.chars()[:8]] = self.junk()
        return out

    def learn(self, result: Any) -> None:
        memory = result.get("memory") if isinstance(result, dict) else None
        if (
            isinstance(memory, dict)
            and memory.get("id")
            and len(self.ids) < 200
            and memory["id"] not in self.ids
        ):
            self.ids.append(memory["id"])


class Audit:
    """Records every write-ish file event (open for writing, mkdir, rename/replace, remove,
    rmtree, truncate, link) while armed."""

    EVENTS = frozenset(
        {
            "os.mkdir",
            "os.rename",
            "os.remove",
            "os.rmdir",
            "shutil.rmtree",
            "os.truncate",
            "os.link",
            "os.symlink",
            "os.chmod",
            "os.chown",
            "os.utime",
        }
    )

    def __init__(self) -> None:
        self.armed = False
        self.events: list[tuple[str, str]] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event == "open":
            path, _, flags = args
            if isinstance(flags, int) and flags & WRITE_FLAGS and isinstance(path, (str, bytes)):
                self.events.append((event, os.path.abspath(os.fsdecode(path))))
            return
        if event not in self.EVENTS:
            return
        # (path, ..., dir_fd) shapes: remove/rmdir (path, dir_fd), mkdir (path, mode, dir_fd),
        # rename (src, dst, src_dir_fd, dst_dir_fd); shutil.rmtree works through dir fds.
        pairs: list[tuple[Any, Any]] = []
        if event in ("os.remove", "os.rmdir"):
            pairs = [(args[0], args[1])]
        elif event == "os.mkdir":
            pairs = [(args[0], args[2])]
        elif event in ("os.rename", "os.link", "os.symlink"):
            pairs = [
                (args[0], args[2] if len(args) > 2 else None),
                (args[1], args[3] if len(args) > 3 else None),
            ]
        else:
            pairs = [(args[0], None)]
        for path, dir_fd in pairs:
            if not isinstance(path, (str, bytes, os.PathLike)):
                continue
            path = os.fsdecode(path)
            if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
                with contextlib.suppress(OSError):
                    path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            self.events.append((event, os.path.abspath(path)))


def _digest(store: Store) -> tuple[Any, ...]:
    """A cheap fingerprint of everything RAM serves: RAM changes only through a commit (the log
    grows), a rule write or a bank appearing or going."""
    out = []
    for name in store.names():
        bank = store.find(name)
        assert bank is not None
        log = bank.path / "memories.jsonl"
        size = log.stat().st_size if log.exists() else 0
        rules = tuple((r.name, r.content) for r in bank.rules())
        out.append((name, bank.description, size, len(bank.memories), bank.live_count(), rules))
    return tuple(out)


async def fuzz_campaign(  # noqa: C901 - one loop, one check per invariant
    rng: random.Random, root: Path, target: int, report: Report
) -> None:
    seeded = root / "fuzz-seed"
    await seed(seeded)
    audit = Audit()
    clock = FixedClock()
    fuzzer = Fuzzer(rng, clock)
    outcomes_seen: Counter[str] = Counter()
    per_function: Counter[str] = Counter()
    weights = [
        0.25 if spec.id in ("memory::doctor", "memory::reload") else 1.0 for spec in catalog.CATALOG
    ]
    parent = root / "fuzz"
    data = parent / "scratch" / "data"
    store: Store | None = None
    started = time.perf_counter()
    reopens = 0

    async def fresh() -> tuple[Store, MemoryService]:
        shutil.rmtree(parent, ignore_errors=True)
        shutil.copytree(seeded, data)
        (parent / "neighbour.txt").write_text("not the worker's")
        s = Store.open(data, holder=HOLDER)
        return s, MemoryService(s, Settings(), emitter=RecordingEmitter(), clock=clock)

    store, service = await fresh()
    allowed = str(data.resolve())
    try:
        for n in range(target):
            if n and n % 5000 == 0:
                await store.close()
                fuzzer.ids = list(SEED_IDS.values())
                store, service = await fresh()
            elif n and n % 500 == 0:
                live = _digest(store)
                await store.close()
                store = Store.open(data, holder=HOLDER)
                service = MemoryService(store, Settings(), emitter=RecordingEmitter(), clock=clock)
                reopens += 1
                if _digest(store) != live:
                    report.defect("fuzz-replay", "a reopen served another state than RAM", n)
            clock.advance(rng.choice((0, 0, 1, 1000, 86_400_000)))
            spec = rng.choices(catalog.CATALOG, weights=weights)[0]
            payload = fuzzer.payload(spec)
            before = _digest(store)
            audit.events.clear()
            audit.armed = True
            try:
                result: Any = await catalog.call(service, spec.id, payload)
                error: WorkerError | None = None
            except WorkerError as err:
                result, error = None, err
            except Exception as exc:
                audit.armed = False
                report.defect(
                    f"fuzz-uncaught:{spec.id}:{type(exc).__name__}",
                    f"{spec.id} raised {type(exc).__name__} instead of a result or a coded error",
                    {
                        "payload": repr(payload)[:300],
                        "error": traceback.format_exc(limit=-3)[-600:],
                    },
                )
                outcomes_seen["uncaught"] += 1
                continue
            finally:
                audit.armed = False
            per_function[spec.id] += 1
            outside = [e for e in audit.events if not e[1].startswith(allowed)]
            if outside:
                report.defect(
                    "fuzz-outside",
                    "a call wrote outside its data dir",
                    {"function": spec.id, "payload": repr(payload)[:300], "events": outside[:3]},
                )
            after = _digest(store)
            if error is not None:
                outcomes_seen[error.code] += 1
                if error.code not in ERROR_CODES or not str(error).startswith(f"{error.code}: "):
                    report.defect(
                        "fuzz-code", "an error without a known code prefix", str(error)[:200]
                    )
                if isinstance(error, StorageError):
                    report.defect(
                        f"fuzz-storage:{spec.id}",
                        "a storage error with a healthy disk",
                        {"payload": repr(payload)[:300], "error": str(error)[:300]},
                    )
                if isinstance(error, REJECTIONS) and (after != before or audit.events):
                    report.defect(
                        f"fuzz-rejected-changed:{spec.id}",
                        "a rejected call changed state or touched files",
                        {
                            "payload": repr(payload)[:300],
                            "error": str(error)[:200],
                            "events": audit.events[:3],
                        },
                    )
            else:
                outcomes_seen["ok"] += 1
                try:
                    json.dumps(result, allow_nan=False, ensure_ascii=False).encode()
                except (ValueError, UnicodeEncodeError) as exc:
                    report.defect(f"fuzz-wire:{spec.id}", "a result the bus cannot carry", str(exc))
                fuzzer.learn(result)
                if spec.id in READS and after != before:
                    report.defect(
                        f"fuzz-read-changed:{spec.id}",
                        f"{spec.id} (a read or maintenance call) changed what the banks hold",
                        {
                            "payload": repr(payload)[:300],
                            "before": repr(before)[:400],
                            "after": repr(after)[:400],
                        },
                    )
    finally:
        await store.close()
    report.figures["fuzz"] = {
        "payloads": sum(per_function.values()) + outcomes_seen["uncaught"],
        "seconds": round(time.perf_counter() - started, 1),
        "reopens_checked": reopens,
        "outcomes": dict(outcomes_seen.most_common()),
        "per_function": dict(sorted(per_function.items())),
    }


# === 5. secrets ===


async def secrets_campaign(  # noqa: C901 - one table, path by path
    root: Path, report: Report
) -> None:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for path in WRITE_PATHS:
        data = root / "secrets" / path
        store = Store.open(data, holder=HOLDER)
        emitter = RecordingEmitter()
        service = MemoryService(store, Settings(), emitter=emitter, clock=FixedClock())
        try:
            await catalog.call(service, "memory::save", {"text": "The bank exists"})
            for n, (label, sentence, secret) in enumerate(SECRETS):
                try:
                    await write_through(service, path, sentence, n)
                except InvalidInput:
                    table[path]["rejected"] += 1  # too long as a label once redacted: not stored
                if any(
                    secret.lower() in json.dumps(p, ensure_ascii=False).lower()
                    for _, p in emitter.events
                ):
                    report.defect(
                        f"secret-event:{path}",
                        "a secret value in an emitted event",
                        {"path": path, "label": label},
                    )
                emitter.clear()
            for lookalike in LOOKALIKES:
                n = len(SECRETS) + LOOKALIKES.index(lookalike)
                try:
                    stored = await write_through(service, path, lookalike, n)
                except InvalidInput:
                    table[path]["lookalike-rejected"] += 1
                    continue
                expected = lookalike.strip()
                if path.endswith(("entities", "tags")):
                    # As the worker stores any label (NFKC, lowercased, a redaction marker kept
                    # as written): that is not a secret rule changing the look-alike.
                    expected = normalize_label(lookalike)
                elif path in ("bank.description", "save.session_id"):
                    expected = collapse_whitespace(lookalike)
                elif path == "rule.content" or path.startswith("import.source"):
                    expected = lookalike
                if path != "supersede.reason" and stored != expected:
                    table[path]["false-positives"] += 1
                    report.defect(
                        "secret-false-positive",
                        "a look-alike was changed on a write path",
                        {"path": path, "lookalike": lookalike, "stored": stored},
                    )
                else:
                    table[path]["lookalikes-kept"] += 1
        finally:
            await store.close()
        disk = disk_texts(data)
        for label, _, secret in SECRETS:
            files = on_disk(disk, secret)
            if files:
                table[path]["missed"] += 1
                report.defect(
                    f"secret-missed:{path}",
                    f"a secret written through {path} is on disk",
                    {"label": label, "files": files[:3]},
                )
            else:
                table[path]["caught"] += 1
    report.figures["secrets"] = {
        "corpus": {"secrets": len(SECRETS), "lookalikes": len(LOOKALIKES)},
        "paths": {path: dict(counts) for path, counts in table.items()},
        "caught": sum(c["caught"] for c in table.values()),
        "missed": sum(c["missed"] for c in table.values()),
        "false_positives": sum(c["false-positives"] for c in table.values()),
    }


# === 6. bus ===

BUS_WRITERS = 3


def _bus_writer(
    cli_class: Any,
    url: str,
    tag: str,
    cond: Any,
    acked: list[tuple[str, str]],
    unknown: list[str],
) -> None:
    """Save one new text after another through the engine until a call fails (the worker died):
    each answered save goes to `acked`, the failed one to `unknown` (it may or may not have
    landed)."""
    with cli_class(url) as cli:
        for k in itertools.count():
            text = f"Bus fact {tag}-{k} about the morning tea"
            try:
                answer = cli.call("memory::save", {"text": text}, 5_000)
            except Exception:
                with cond:
                    unknown.append(text)
                    cond.notify_all()
                return
            with cond:
                acked.append((answer["memory"]["id"], text))
                cond.notify_all()


def bus_campaign(  # noqa: C901 - one attack loop reads best in one piece
    rng: random.Random, root: Path, target: int, report: Report
) -> None:
    """SIGKILL `memory-worker serve --engine` (engine mode, on the engine double of the wire
    tests) while `iii trigger`-style clients save through the engine; restart it and check that
    every acknowledged save is served, each in-flight one whole or absent, nothing damaged.
    Threads (the double's loop, the SDK clients): this section runs after every forking one."""
    import threading

    from memory_worker.core.text import fingerprint
    from memory_worker.storage.bank import Bank
    from tests.bus.conftest import WorkerProcess
    from tests.bus.engine_double import EngineDouble
    from tests.bus.siblings import Cli

    stats: Counter[str] = Counter()
    acknowledged: dict[str, str] = {}  # id → text, over every cycle
    started = time.perf_counter()
    data = root / "bus-data"
    with EngineDouble() as engine:
        worker = WorkerProcess(
            engine, data, root / "bus-worker.log", env={"MEMORY_EMBEDDER": "none"}
        ).start()
        try:
            with Cli(engine.url) as checker:
                for cycle in range(target):
                    cond = threading.Condition()
                    acked: list[tuple[str, str]] = []
                    unknown: list[str] = []  # sent, no answer: in flight when the worker died

                    threads = [
                        threading.Thread(
                            target=_bus_writer,
                            args=(Cli, engine.url, f"{cycle}-{n}", cond, acked, unknown),
                            daemon=True,
                        )
                        for n in range(BUS_WRITERS)
                    ]
                    for thread in threads:
                        thread.start()
                    wanted = rng.randint(0, 40)
                    with cond:
                        cond.wait_for(lambda: len(acked) >= wanted, timeout=30)  # noqa: B023
                    spin(rng.uniform(0, 0.004))
                    worker.kill()  # SIGKILL, then reaped
                    for thread in threads:
                        thread.join(30)
                    stats["kills"] += 1
                    try:
                        worker.start()
                    except AssertionError as exc:
                        report.defect("bus-restart", "the worker did not restart", str(exc)[-300:])
                        return
                    stats["acknowledged"] += len(acked)
                    for memory_id, text in acked:
                        acknowledged[memory_id] = text
                        try:
                            got = checker.call("memory::get", {"id": memory_id})["memory"]["text"]
                        except Exception as exc:
                            got = f"error: {exc}"
                        if got == text:
                            stats["verified-after-restart"] += 1
                        else:
                            report.defect(
                                "bus-ack-lost",
                                "a save acknowledged over the bus is not served after a SIGKILL "
                                "and restart",
                                {"cycle": cycle, "id": memory_id, "got": got[:200]},
                            )
                    for text in unknown:
                        try:
                            checker.call("memory::get", {"id": fingerprint(text)})
                            stats["in-flight-landed"] += 1
                        except Exception:
                            stats["in-flight-absent"] += 1
                    doctor = checker.call("memory::doctor", {})
                    intact = next(c for c in doctor["checks"] if c["name"] == "files-intact")
                    if not intact["ok"]:
                        report.defect(
                            "bus-damage",
                            "a SIGKILL of the engine-mode worker left damage doctor reports",
                            intact["detail"][:300],
                        )
        finally:
            with contextlib.suppress(Exception):
                worker.stop()
        if engine.errors:
            report.defect("bus-engine-double", "the engine double itself failed", engine.errors[:3])
    replayed = Bank.load("main", data / "main")  # the last word: what the next boot replays
    missing = [i for i in acknowledged if (m := replayed.get(i)) is None or not m.live]
    if missing:
        report.defect(
            "bus-ack-lost-at-replay",
            "a save acknowledged over the bus is not in the log a boot replays",
            missing[:3],
        )
    if replayed.damage:
        report.defect("bus-damage", "damage in the log after the bus kills", replayed.damage[:3])
    stats["replayed-acknowledged"] = len(acknowledged) - len(missing)
    report.figures["bus"] = {"seconds": round(time.perf_counter() - started, 1), **stats}


# === report ===


ROOT_CAUSES = {
    "multi-record-commit": "a multi-record write (import, supersede+reinforce) is not atomic on "
    "replay: a torn write leaves a prefix of its records",
    "bank-create-not-atomic": "a bank is made folder-first: a create (or a write into a new bank) "
    "cut short or failing leaves a bank behind, without its description",
    "rename-then-dir-fsync": "a rule write / bank delete whose directory fsync fails after the "
    "rename reports `storage`, but the change is on disk while RAM keeps the old state",
    "doctor-scratch-bank": "doctor's scratch bank `doctor-<ms mod 10^6>` is a user bank name: "
    "doctor trashes and deletes a user bank that has it (D4)",
    "doctor-roundtrip-fault": "doctor answers ok although a storage fault hit its own roundtrip, "
    "or leaves its scratch bank behind when the roundtrip fails",
    "import-source-unredacted": "`import` writes `source.session_id/agent/entry_id` unredacted",
    "other": "other",
}


def root_cause(key: str) -> str:
    if key in ("kill-torn-import", "torn-import") or key == "damage-after-kill":
        return "multi-record-commit"
    if key == "kill-partial-bank-create":
        return "bank-create-not-atomic"
    if key.startswith("secret-missed:import.source"):
        return "import-source-unredacted"
    if key == "fuzz-read-changed:memory::doctor":  # a read-only call changed the user's banks
        return "doctor-scratch-bank"
    if key.startswith("fault:doctor:"):  # a fault inside doctor's own scratch roundtrip
        return "doctor-roundtrip-fault"
    if key.startswith("fault:"):
        op = key.split(":")[1]
        if op in ("save-new-bank", "rule-new-bank", "import-new-bank", "bank-create"):
            return "bank-create-not-atomic"
        if op.startswith(("rule-", "bank-delete")):
            return "rename-then-dir-fsync"
    return "other"


def print_table(report: Report) -> None:  # noqa: C901 - one table, section by section
    f = report.figures
    kills = f.get("kills", {})
    fuzz = f.get("fuzz", {})
    faults = f.get("faults", {})
    secrets = f.get("secrets", {})
    bus = f.get("bus", {})
    rows = [
        ("kills survived (SIGKILL, restarted, state checked)", kills.get("kills", 0)),
        (
            "  of them writers at boot / imports killed",
            f"{kills.get('killed-at-boot', 0)} / {kills.get('imports-killed', 0)}",
        ),
        ("restarts checked against the reference model", kills.get("verified-states", 0)),
        ("mutations acknowledged and verified", kills.get("mutations-verified", 0)),
        (
            "in-flight operations landed / lost (whole)",
            f"{kills.get('in-flight-landed', 0)} / {kills.get('in-flight-lost', 0)}",
        ),
        ("payloads fuzzed (every public function)", fuzz.get("payloads", 0)),
        ("storage faults injected", faults.get("injected", 0)),
        ("  fault trials with a violated invariant", faults.get("violations", 0)),
        (
            "secrets caught / missed (value on disk)",
            f"{secrets.get('caught', 0)} / {secrets.get('missed', 0)}",
        ),
        ("look-alike false positives", secrets.get("false_positives", 0)),
        *attacks.rows(f),
        ("engine-mode worker SIGKILLs (bus), restarted", bus.get("kills", 0)),
        (
            "  saves acked over the bus / served after restart",
            f"{bus.get('acknowledged', 0)} / {bus.get('verified-after-restart', 0)}",
        ),
        ("defects found (distinct)", len(report.defects)),
    ]
    width = max(len(r[0]) for r in rows)
    print(
        f"\nreliability campaign, seed {report.seed}, {'quick' if report.quick else 'full'} run, "
        f"started {report.started}"
    )
    print("-" * (width + 14))
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10}")
    print("-" * (width + 14))
    if faults:
        print(
            "faults by point: "
            + ", ".join(
                f"{p} {c.get('injected', 0)} ({c.get('violations', 0)} bad, "
                f"{c.get('applied-then-reported', 0)} applied then reported)"
                for p, c in faults["by_point"].items()
            )
        )
    if secrets:
        print("secrets by path (caught/missed/rejected-as-too-long, look-alike false positives):")
        for path, c in secrets["paths"].items():
            print(
                f"  {path:<26} {c.get('caught', 0)}/{c.get('missed', 0)}/{c.get('rejected', 0)}, "
                f"fp {c.get('false-positives', 0)}"
            )
    for name in ("big_import",):
        for row in f.get(name, []):
            print(f"big import: {row}")
    causes: Counter[str] = Counter()
    for key, entry in report.defects.items():
        causes[root_cause(key)] += entry["count"]
    report.figures["root_causes"] = {ROOT_CAUSES[c]: n for c, n in causes.items()}
    if causes:
        print("\ndefects by root cause (occurrences):")
        for cause, count in causes.most_common():
            print(f"- {cause} ({count}x): {ROOT_CAUSES[cause]}")
    if report.defects:
        print("\ndefects:")
        for key, entry in report.defects.items():
            print(f"- [{entry['count']}x] {key}: {entry['description']}")
            print(
                "    e.g. "
                + json.dumps(entry["examples"][0], ensure_ascii=False, default=str)[:400]
            )
    for section in ("kills", "fuzz", "bus", *attacks.SECTIONS):
        if section in f:
            print(f"\n{section}: {json.dumps(f[section], default=str)[:1500]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about a minute)")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--kills", type=int, help="SIGKILLs (default 2000; quick 120)")
    parser.add_argument("--payloads", type=int, help="fuzzed payloads (default 120000; quick 5000)")
    parser.add_argument("--big-import-rows", type=int, default=30_000)
    parser.add_argument("--json", help="write every figure and defect example to this file")
    parser.add_argument("--bus-kills", type=int, help="engine-mode SIGKILLs (default 40; quick 5)")
    parser.add_argument(
        "--only",
        help="comma-separated sections: kills,big,faults,fuzz,secrets,"
        + ",".join(attacks.SECTIONS)
        + ",bus",
    )
    parser.add_argument("--banks", type=int, help="empty banks for the RSS figure (10000)")
    args = parser.parse_args(argv)
    kills = args.kills if args.kills is not None else (120 if args.quick else 2000)
    payloads = args.payloads if args.payloads is not None else (5000 if args.quick else 120_000)
    bus_kills = args.bus_kills if args.bus_kills is not None else (5 if args.quick else 40)
    everything = ["kills", "big", "faults", "fuzz", "secrets", *attacks.SECTIONS, "bus"]
    sections = set((args.only or ",".join(everything)).split(","))
    if args.quick:
        sections.discard("big")
    report = Report(seed=args.seed, quick=args.quick)
    report.started = datetime.now(UTC).isoformat(timespec="seconds")
    rng = random.Random(args.seed)
    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mw-reliability-") as tmp:
        root = Path(tmp)
        if "kills" in sections:  # first: it forks, so this process must still be single-threaded
            kill_campaign(random.Random(rng.random()), root, kills, report)
            print(f"kills done in {time.perf_counter() - begun:.0f}s", flush=True)
        if "big" in sections:
            big_import(random.Random(rng.random()), root, args.big_import_rows, 2, report)
            print(f"big import done in {time.perf_counter() - begun:.0f}s", flush=True)
        if "faults" in sections:
            asyncio.run(fault_campaign(root, report, args.quick))
            print(f"faults done in {time.perf_counter() - begun:.0f}s", flush=True)
        if "fuzz" in sections:
            asyncio.run(fuzz_campaign(random.Random(rng.random()), root, payloads, report))
            print(f"fuzz done in {time.perf_counter() - begun:.0f}s", flush=True)
        if "secrets" in sections:
            asyncio.run(secrets_campaign(root, report))
            print(f"secrets done in {time.perf_counter() - begun:.0f}s", flush=True)
        hardening = sections & set(attacks.SECTIONS)
        if hardening:
            found = attacks.Findings()
            banks = args.banks or (1000 if args.quick else 10_000)
            attacks.run(hardening, random.Random(rng.random()), root, args.quick, banks, found)
            report.figures.update(found.figures)
            report.defects.update(found.defects)
        if "bus" in sections:  # last: it starts threads (the engine double, SDK clients)
            bus_campaign(random.Random(rng.random()), root, bus_kills, report)
    report.figures["seconds"] = round(time.perf_counter() - begun, 1)
    report.figures["python"] = sys.version.split()[0]
    print_table(report)
    print(f"\ntotal {report.figures['seconds']}s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "seed": report.seed,
                    "quick": report.quick,
                    "started": report.started,
                    "figures": report.figures,
                    "defects": report.defects,
                },
                indent=2,
                default=str,
                ensure_ascii=False,
            )
        )
    return 0


if __name__ == "__main__":
    import structlog

    # The fault section makes the worker log every refused write: keep the table readable.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(50))
    sys.exit(main())
