"""The destructive and bulk paths SIGKILLed at chosen file operations (`kill_points`): a real CLI
process dies before its k-th write, fsync, rename, unlink or truncate; the next open must serve
the state before the call or the state after it, never a mix, with nothing reported damaged and
every pinned memory untouched.

`KILL_POINTS_ALL=1` kills at every operation of each path, and half-way through each write (the
campaign: a few minutes); by default each test kills at the few operations that decide it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage import erasure
from memory_worker.storage.snapshot import SNAPSHOT_FILE, SNAPSHOT_MIN_LIVE
from memory_worker.storage.store import Store

from ..fakes import FixedClock, RecordingEmitter
from .helpers import HOLDER, NEW, OLD, SEED_IDS, TEA, answers, open_service, seed
from .kill_points import forkserver, reset, run_call_killed, run_killed

ALL = os.environ.get("KILL_POINTS_ALL") == "1"
LEXICAL = {"MEMORY_EMBEDDER": "none"}  # no model to load where no vector is under test


@pytest.fixture(name="context", scope="module")
def _context() -> ForkServerContext:
    return forkserver()


def _timeless(value: Any) -> Any:
    """What callers see, without the clock's readings (each run has its own)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not k.endswith("_at")}
    if isinstance(value, list):  # in order of time: by id instead
        items = [_timeless(v) for v in value]
        if all(isinstance(v, dict) and "id" in v for v in items):
            items.sort(key=lambda v: str(v["id"]))
        return items
    return value


async def _listed(data: Path) -> Any:
    """`memory::bank::list` as a one-shot command answers it: a lazy store, each bank's counts
    from its `.counts.json` while that still matches the log."""
    store = Store.open(data, holder=HOLDER, lazy=True, short_lived=True)
    service = MemoryService(store, Settings(), clock=FixedClock())
    try:
        return await catalog.call(service, "memory::bank::list", {})
    finally:
        await store.close()


async def _seen(data: Path) -> tuple[Any, dict[str, Any]]:
    listed = await _listed(data)
    service = open_service(data)
    try:
        seen = _timeless(await answers(service))
        assert _timeless(listed) == seen["banks"], "the counts files tell another story"
        doctor = await catalog.call(service, "memory::doctor", {})
        (intact,) = [c for c in doctor["checks"] if c["name"] == "files-intact"]
        return seen, intact
    finally:
        await service.store.close()


def seen(data: Path) -> tuple[Any, dict[str, Any]]:
    return asyncio.run(_seen(data))


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(key), b.get(key), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _diff(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {json.dumps(a)[:200]} -> {json.dumps(b)[:200]}"]


def pinned(state: Any) -> dict[str, Any]:
    return {
        m["id"]: m
        for bank, body in state.items()
        if bank != "banks"
        for m in body["memories"]["memories"]
        if m["pinned"]
    }


def campaign(
    context: ForkServerContext,
    tmp_path: Path,
    seeded: Path,
    argv: list[str],
    chosen: Callable[[list[str]], Iterable[int]],
    *,
    extra: Callable[[Path, str], None] | None = None,
) -> dict[str, int]:
    """Kill `memory-worker ARGV` (with `--data-dir`) at each operation `chosen` picks from a whole
    run's trace (k: before the k-th; -k: half-way through the k-th, a write); after each, the
    next open serves the state before or after the call, with every pinned memory as it was.
    Returns how often each was seen."""
    data = tmp_path / "data"
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    reset(seeded, data)
    before, _ = seen(data)
    reset(seeded, data)
    full = [*argv, "--data-dir", str(data)]
    done = run_killed(context, full, 0, scratch=scratch)
    assert done.code == 0, "the call succeeds when not killed"
    after, intact = seen(data)
    assert intact["ok"], intact
    assert before != after, "the call changes something"
    if extra is not None:
        extra(data, "after")
    outcomes = {"before": 0, "after": 0}
    every = [
        *range(1, done.ops + 1),
        *(-k for k, op in enumerate(done.trace, 1) if op[:6] == "write "),
    ]
    points = sorted(set(every) if ALL else set(chosen(done.trace)), key=abs)
    for k in points:
        reset(seeded, data)
        run = run_killed(context, full, abs(k), scratch=scratch, half=k < 0)
        how = "half-way through" if k < 0 else "before"
        where = f"killed {how} operation {abs(k)} of {done.ops} ({done.trace[abs(k) - 1]})"
        assert run.killed, where
        state, intact = seen(data)
        # A rule's temp file a kill cut short is reported until the next rule write (by design).
        assert intact["ok"] or "leftover temp file" in intact["detail"], (where, intact["detail"])
        kept = pinned(state)
        assert {i: kept.get(i) for i in pinned(before)} == pinned(before), where
        if state == before:
            outcomes["before"] += 1
            if extra is not None:
                extra(data, "before")
        elif state == after:
            outcomes["after"] += 1
            if extra is not None:
                extra(data, "after")
        else:
            pytest.fail(
                f"{where}: neither the state before nor after; from before: "
                f"{_diff(before, state)}; from after: {_diff(after, state)}"
            )
    return outcomes


@pytest.fixture(name="seeded", scope="module")
def _seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("seeded") / "data"
    asyncio.run(seed(data))
    return data


def deciding(trace: list[str], *, at_most: int = 6) -> list[int]:
    """The operations that decide a change, spread over the run: just before and just after
    each rename into place or removal, and the first write into each file (whole and torn)."""
    picked: list[int] = []
    written: set[str] = set()
    for k, op in enumerate(trace, 1):
        name, _, path = op.partition(" ")
        if ".lock" in path or "write-probe" in path:
            continue
        if name in ("replace", "rename", "unlink", "rmdir", "ftruncate"):
            picked += [k, k + 1]
        elif name == "write" and path not in written:
            written.add(path)
            picked += [k, -k]
    picked = sorted(set(picked), key=abs)
    if len(picked) <= at_most:
        return picked
    step = len(picked) / at_most
    return [picked[int(i * step)] for i in range(at_most)]


def _seed_then(
    tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, dict[str, Any]]]
) -> Path:
    """`seed`'s data dir, then `calls` made on it."""
    data = tmp_path_factory.mktemp("seeded") / "data"

    async def build() -> None:
        await seed(data)
        service = open_service(data)
        try:
            for function_id, payload in calls:
                await catalog.call(service, function_id, payload)
        finally:
            await service.store.close()

    asyncio.run(build())
    return data


def _new_bank_ops(trace: list[str]) -> list[int]:
    """Past the new bank's rename into place: before the data dir's sync, and the first write
    into the bank cut off before it starts and half-way through."""
    first = next(k for k, op in enumerate(trace, 1) if op.startswith("rename "))
    writes = [k for k, op in enumerate(trace, 1) if k > first and op.startswith("write ")]
    return [first + 1, writes[0], -writes[0]]


@pytest.mark.parametrize("how", ["save", "import", "rule"])
def test_a_write_into_a_new_bank_killed_before_it_lands_leaves_no_bank(
    context: ForkServerContext, tmp_path: Path, seeded: Path, how: str
) -> None:
    """The bank a write makes (a save, an import or a rule naming a bank that does not exist) is
    in place before the write: a kill between them left an empty bank for good, listed by every
    later `bank::list`, though the call that made it was never answered. In-process, a failed
    first write removes it again (`discard_if_empty`); a kill must leave the same."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"Kiwi fact {n}"}) + "\n" for n in range(5)))
    argv = {
        "save": ["trigger", "memory::save", "bank=fresh", "text=The user grows kiwis"],
        "import": ["import", str(rows), "--bank", "fresh"],
        "rule": ["trigger", "memory::rule::set", "bank=fresh", "name=tone", "content=Be warm."],
    }[how]
    outcomes = campaign(context, tmp_path, seeded, argv, _new_bank_ops)
    assert outcomes["before"] > 0, outcomes


def test_an_explicit_create_of_a_bank_a_killed_write_was_making_keeps_it(
    context: ForkServerContext, tmp_path: Path, seeded: Path
) -> None:
    """Not every bank without a memory is a write's leftover: one a caller created (and was
    told so) stays, whatever a kill did after."""
    argv = ["trigger", "memory::bank::create", "name=fresh"]

    def around_the_rename(trace: list[str]) -> list[int]:
        first = next(k for k, op in enumerate(trace, 1) if op.startswith("rename "))
        return [first, first + 1]

    outcomes = campaign(context, tmp_path, seeded, argv, around_the_rename)
    assert outcomes["after"] > 0, outcomes


# --- every destructive or bulk path, killed where it decides ---------------------------------


def test_a_supersede_that_reinforces_killed_anywhere_is_whole_or_absent(
    context: ForkServerContext, tmp_path: Path, seeded: Path
) -> None:
    """Consolidation's one write (`memory::supersede` with `reinforce`): the loser retired and the
    winner reinforced together, or neither."""
    argv = ["trigger", "memory::supersede", f"id={SEED_IDS[OLD]}", f"superseded_by={SEED_IDS[NEW]}"]
    outcomes = campaign(context, tmp_path, seeded, [*argv, "reinforce=true"], deciding)
    assert outcomes["before"] and outcomes["after"], outcomes


def test_an_import_killed_anywhere_lands_whole_or_not_at_all(
    context: ForkServerContext, tmp_path: Path, seeded: Path
) -> None:
    rows = [{"text": f"Imported fact {n} about kiwis", "pinned": n % 7 == 0} for n in range(30)]
    rows.append({"text": OLD, "corroboration": 3})  # one the bank holds: reinforced, once
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["import", str(source), "--bank", "main"]
    outcomes = campaign(context, tmp_path, seeded, argv, deciding)
    assert outcomes["before"] and outcomes["after"], outcomes


@pytest.mark.parametrize(
    ("path", "settings", "argv"),
    [
        ("expiry", {"retention": {"fact": 30}}, ["trigger", "memory::stats", "bank=main"]),
        ("eviction", {"max_memories": 4}, ["trigger", "memory::save", "text=The user walks"]),
    ],
)
def test_an_automatic_retirement_killed_anywhere_is_whole_or_absent_and_spares_the_pinned(
    context: ForkServerContext,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    path: str,
    settings: dict[str, Any],
    argv: list[str],
) -> None:
    """The reaper (the seed's memories were stated weeks before the real clock this CLI reads)
    and a save into a full bank: tombstones in one write with what caused them."""
    seeded = _seed_then(
        tmp_path_factory, [("memory::bank::configure", {"name": "main", **settings})]
    )
    outcomes = campaign(context, tmp_path, seeded, argv, deciding)
    assert outcomes["before"] and outcomes["after"], outcomes


@pytest.mark.parametrize(
    "argv",
    [
        ["trigger", "memory::bank::delete", "name=blog"],
        ["trigger", "memory::bank::configure", "name=blog", 'retention={"fact": 400}'],
        ["trigger", "memory::rule::set", "name=style", "content=Answer at length."],
        ["trigger", "memory::rule::set", "bank=blog", "name=tone", "content=Be warm."],
    ],
    ids=["bank-delete", "bank-configure", "rule-replace", "rule-new"],
)
def test_a_bank_or_rule_file_change_killed_anywhere_is_whole_or_absent(
    context: ForkServerContext, tmp_path: Path, seeded: Path, argv: list[str]
) -> None:
    outcomes = campaign(context, tmp_path, seeded, argv, deciding)
    assert outcomes["before"] and outcomes["after"], outcomes


def test_a_compaction_killed_anywhere_leaves_the_old_log_or_the_new_and_no_temp(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seeded = _seed_then(
        tmp_path_factory,
        [
            ("memory::update", {"id": SEED_IDS[TEA], "text": "The user drinks black tea"}),
            ("memory::update", {"id": SEED_IDS[TEA], "text": "The user drinks mint tea"}),
            ("memory::delete", {"id": SEED_IDS[NEW]}),
        ],
    )
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    reset(seeded, data)
    log = data / "main" / "memories.jsonl"
    old = log.read_bytes()
    before, _ = seen(data)
    argv = ["compact", "--bank", "main", "--horizon-days", "0", "--data-dir", str(data)]
    done = run_killed(context, argv, 0, scratch=scratch)
    assert done.code == 0
    new = log.read_bytes()
    assert len(new) < len(old)
    logs = []
    every = range(1, done.ops + 1)
    for k in every if ALL else deciding(done.trace):
        reset(seeded, data)
        assert run_killed(context, argv, abs(k), scratch=scratch, half=k < 0).killed
        state, intact = seen(data)
        assert intact["ok"] and state == before, k
        assert log.read_bytes() in (old, new), k
        logs.append(log.read_bytes() == new)
        assert not [p.name for p in log.parent.iterdir() if "replacing" in p.name], k
    assert any(logs) and not all(logs), logs


def _bruno_everywhere(tmp_path_factory: pytest.TempPathFactory, *, big: bool) -> Path:
    """Bruno in `main` (three memories, one revised) and in a deleted bank's trashed copy of
    `main`; with `big`, 2,000 more general memories, so a close keeps the derived snapshots."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory::bank::create", {"name": "main"}),
        ("memory::save", {"text": "Bruno owes a plum book", "subject": "bruno"}),
        ("memory::bank::delete", {"name": "main"}),
        ("memory::save", {"text": "Bruno keeps a plum bicycle", "subject": "bruno"}),
        ("memory::save", {"text": "Bruno once lived in plum Lisbon", "subject": "bruno"}),
        ("memory::save", {"text": "The plum tree is Ana's", "pinned": True}),
        ("memory::save", {"bank": "blog", "text": "Bruno writes plum posts", "subject": "bruno"}),
    ]
    data = _seed_then(tmp_path_factory, calls)
    if big:

        async def grow() -> None:
            service = open_service(data)
            try:
                rows = [{"text": f"General note {n} on kiwis"} for n in range(SNAPSHOT_MIN_LIVE)]
                await service.import_records("main", rows)
            finally:
                await service.store.close()

        asyncio.run(grow())
        assert (data / "main" / SNAPSHOT_FILE).exists()
    return data


def _no_trace_of_bruno_in_main(data: Path, when: str) -> None:
    """After: nothing of Bruno's in any file of `main` or its trashed copies (the log, the
    snapshots, the sidecars); before: still there. `blog` is not erased."""
    found = [
        str(p.relative_to(data))
        for p in data.rglob("*")
        if p.is_file() and b"Bruno" in p.read_bytes() and not p.is_relative_to(data / "blog")
    ]
    assert (found == []) is (when == "after"), (when, found)


@pytest.mark.parametrize("big", [False, True], ids=["small", "with-snapshots"])
def test_forget_subject_killed_anywhere_erases_all_or_nothing_and_no_file_brings_it_back(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, big: bool
) -> None:
    seeded = _bruno_everywhere(tmp_path_factory, big=big)
    argv = ["trigger", "memory::forget-subject", "subject=bruno", "confirm=destructive"]

    def points(trace: list[str]) -> list[int]:
        # Before and after the intent lands, and before the log's replacement does; then the
        # last replacements and removals (the intent's, the snapshots a close writes). With
        # snapshots: the log replaced and the old snapshots still there, and the new ones.
        landing = [k for k, op in enumerate(trace, 1) if op[:7] in ("replace", "unlink ")]
        intent = next(k for k in landing if erasure.INTENT_FILE in trace[k - 1])
        log = next(k for k in landing if "replacing" in trace[k - 1])
        if big:
            return [log + 1, *landing[-2:]]
        return [intent, intent + 1, log, *landing[-2:]]

    outcomes = campaign(
        context,
        tmp_path,
        seeded,
        argv,
        points,
        extra=_no_trace_of_bruno_in_main,
    )
    assert outcomes["after"] and (big or outcomes["before"]), outcomes


@pytest.mark.parametrize(
    ("then", "kept"),
    [
        (None, False),
        (("memory::bank::configure", {"name": "fresh", "max_memories": 50}), True),
        (("memory::bank::create", {"name": "fresh"}), True),
    ],
    ids=["nothing", "configured", "created-by-a-caller"],
)
async def test_a_bank_made_for_a_write_that_never_landed_goes_unless_a_caller_changed_it(
    tmp_path: Path, then: tuple[str, dict[str, Any]] | None, kept: bool
) -> None:
    """What a kill leaves between a new bank's folder and its first write, made in-process: the
    next open removes the bank, unless a call that landed changed it meanwhile (its settings,
    or a create its caller was told of)."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        await service.store.ensure("fresh", for_a_write=True)  # the write never comes
        if then is not None:
            await catalog.call(service, *then)
    finally:
        await service.store.close()
    reopened = open_service(data)
    try:
        assert ("fresh" in reopened.store.names()) is kept
        assert not list(data.rglob(".made-for-a-write"))
    finally:
        await reopened.store.close()


def test_an_erasure_finished_by_a_load_that_is_killed_too_is_finished_by_the_next(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Killed past its intent, the erasure is finished by the next load (`erasure.resume`); that
    process killed at any step of the finishing, the one after finishes it all the same."""
    seeded = _bruno_everywhere(tmp_path_factory, big=False)
    scratch, half = tmp_path / "scratch", tmp_path / "half"
    scratch.mkdir()
    reset(seeded, half)
    forget = ["trigger", "memory::forget-subject", "subject=bruno", "confirm=destructive"]
    done = run_killed(context, [*forget, "--data-dir", str(half)], 0, scratch=scratch)
    intent = next(
        k for k, op in enumerate(done.trace, 1) if op[:7] == "replace" and erasure.INTENT_FILE in op
    )
    reset(seeded, half)
    assert run_killed(
        context, [*forget, "--data-dir", str(half)], intent + 2, scratch=scratch
    ).killed
    assert (half / "main" / erasure.INTENT_FILE).exists()
    data = tmp_path / "data"
    reads = ["trigger", "memory::list", "--data-dir", str(data)]
    reset(half, data)
    finishing = run_killed(context, reads, 0, scratch=scratch)
    assert not (data / "main" / erasure.INTENT_FILE).exists()
    erased, _ = seen(data)
    _no_trace_of_bruno_in_main(data, "after")
    every = range(1, finishing.ops + 1)
    for k in every if ALL else deciding(finishing.trace, at_most=5):
        reset(half, data)
        assert run_killed(context, reads, abs(k), scratch=scratch, half=k < 0).killed, k
        state, intact = seen(data)
        assert intact["ok"] and state == erased, k
        _no_trace_of_bruno_in_main(data, "after")


class _EventFile:
    """An `Emitter` that appends each event to a file as it is sent, through Python's file
    objects (never `os.write`: not a kill point), so what a killed process sent is known."""

    def __init__(self, path: str) -> None:
        self.path = path

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        with open(self.path, "ab", buffering=0) as out:
            out.write(json.dumps([trigger_type, payload]).encode() + b"\n")


def _serving(data: str, events: str, act: Callable[[MemoryService], Awaitable[object]]) -> None:
    """`act` done by a server's service over `data`, its events recorded in `events`."""

    async def serve() -> None:
        store = Store.open(Path(data), holder=HOLDER)
        service = MemoryService(store, Settings(), emitter=_EventFile(events), clock=FixedClock())
        try:
            await act(service)
        finally:
            await store.close()

    asyncio.run(serve())


def _forget_announcing(data: str, events: str) -> None:
    """A server's `memory::forget-subject` of Bruno in `main`, its events recorded in `events`."""
    payload = {"subject": "bruno", "confirm": "destructive"}
    _serving(data, events, lambda service: catalog.call(service, "memory::forget-subject", payload))


def _erased_sent(events: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    return [(p["id"], p["event_id"]) for _, p in events if p.get("event_type") == "erased"]


def _sent_in(events: Path) -> list[tuple[str, str]]:
    """The `erased` events recorded in `events` (none when nothing was sent)."""
    lines = events.read_text().splitlines() if events.exists() else []
    return _erased_sent(json.loads(line) for line in lines)


def _forget_killed_at(
    context: ForkServerContext,
    seeded: Path,
    half: Path,
    events: Path,
    scratch: Path,
    step: Callable[[list[str]], int],
) -> set[str]:
    """Bruno's erasure over a copy of `seeded`, run whole once to learn what it erases and its
    file operations, then again into `half`, killed at the one `step` picks from them (before
    it sends anything); returns the ids it erases."""
    reset(seeded, half)
    done = run_call_killed(
        context, _forget_announcing, (str(half), str(events)), 0, scratch=scratch
    )
    erased = {memory_id for memory_id, _ in _sent_in(events)}
    reset(seeded, half)
    events.unlink()
    run = run_call_killed(
        context, _forget_announcing, (str(half), str(events)), step(done.trace), scratch=scratch
    )
    assert run.killed and not events.exists()
    return erased


async def _announced_at_boot(data: Path) -> list[tuple[str, str]]:
    """The `erased` events a server opening `data` sends as it boots its banks."""
    emitter = RecordingEmitter()
    service = open_service(data, emitter=emitter)
    try:
        await service.boot_banks()
        return _erased_sent(emitter.events)
    finally:
        await service.store.close()


def _killed_then_booted(
    context: ForkServerContext,
    call: Callable[[str, str], None],
    data: Path,
    events: Path,
    k: int,
    scratch: Path,
) -> list[tuple[str, str]]:
    """`call` over `data` killed at its `k`th file operation, then a boot: the `erased` events
    the call sent and the boot announced, (memory id, event id) each. A second boot announces
    nothing (announced: never again), and nothing of Bruno's is left in `main`."""
    events.unlink(missing_ok=True)
    run = run_call_killed(context, call, (str(data), str(events)), k, scratch=scratch)
    assert run.killed, k
    sent = _sent_in(events) + asyncio.run(_announced_at_boot(data))
    assert asyncio.run(_announced_at_boot(data)) == [], k
    _no_trace_of_bruno_in_main(data, "after")
    return sent


def _each_once(sent: list[tuple[str, str]], erased: set[str], k: int) -> None:
    """Each erased memory announced under one event id: a repeat is the same event."""
    for memory_id in erased:
        ids = {e for i, e in sent if i == memory_id}
        assert len(ids) == 1, (k, memory_id, ids)


def test_an_erasure_killed_anywhere_announces_each_memory_at_least_once_under_one_event_id(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An erasure leaves nothing of the memories it erased, so its `erased` events are all a
    subscriber (memory-consolidate's last report of the bank) learns it by: killed at any step
    from its intent on, each is sent by it or by the next boot, a repeat with the same
    `event_id`, and the boot after that sends none again. The events were sent after the intent
    was cleared: a kill between the two lost them for good."""
    seeded = _bruno_everywhere(tmp_path_factory, big=False)
    data, scratch, events = tmp_path / "data", tmp_path / "scratch", tmp_path / "events.jsonl"
    scratch.mkdir()
    reset(seeded, data)
    done = run_call_killed(
        context, _forget_announcing, (str(data), str(events)), 0, scratch=scratch
    )
    sent = _sent_in(events)
    erased = {memory_id for memory_id, _ in sent}
    assert len(erased) == len(sent) == 2, sent  # Bruno's two live memories in `main`
    intent = next(
        k for k, op in enumerate(done.trace, 1) if op[:7] == "replace" and erasure.INTENT_FILE in op
    )
    for k in range(intent + 1, done.ops + 1):
        reset(seeded, data)
        sent = _killed_then_booted(context, _forget_announcing, data, events, k, scratch)
        assert {i for i, _ in sent} == erased, (k, done.trace[k - 1], sent)
        _each_once(sent, erased, k)


def test_an_erasure_in_a_deleted_banks_trash_killed_anywhere_is_finished_and_announced(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A deleted bank's trashed copies are never loaded, so nothing finished an erasure there a
    kill cut short, and past a copy's rewrite nothing named the ids it took: their `erased`
    events were lost for good. Killed at any step from its commitment on, the next boot
    finishes it (no trace of Bruno left) and announces what the killed call had not, each
    memory under one `event_id`, and the boot after that nothing."""
    seeded = _bruno_everywhere(tmp_path_factory, big=False)
    gone = tmp_path_factory.mktemp("deleted") / "data"
    reset(seeded, gone)

    async def delete() -> None:
        service = open_service(gone)
        try:
            await catalog.call(service, "memory::bank::delete", {"name": "main"})
        finally:
            await service.store.close()

    asyncio.run(delete())
    data, scratch, events = tmp_path / "data", tmp_path / "scratch", tmp_path / "events.jsonl"
    scratch.mkdir()
    reset(gone, data)
    done = run_call_killed(
        context, _forget_announcing, (str(data), str(events)), 0, scratch=scratch
    )
    sent = _sent_in(events)
    erased = {memory_id for memory_id, _ in sent}
    assert len(erased) == len(sent) == 3, sent  # the book, the bicycle, Lisbon
    _no_trace_of_bruno_in_main(data, "after")
    first = next(
        k
        for k, op in enumerate(done.trace, 1)
        if op[:7] == "replace" and erasure.TRASH_INTENT_FILE in op
    )
    for k in range(first + 1, done.ops + 1):  # from the commitment's rename into place on
        reset(gone, data)
        sent = _killed_then_booted(context, _forget_announcing, data, events, k, scratch)
        assert {i for i, _ in sent} == erased, (k, done.trace[k - 1], sent)
        _each_once(sent, erased, k)
        assert not (data / erasure.TRASH_INTENT_FILE).exists(), k


def _boot_announcing(data: str, events: str) -> None:
    """A server's boot over `data` (`boot_banks`), its events recorded in `events`."""
    _serving(data, events, lambda service: service.boot_banks())


def test_an_erasure_a_boot_finishes_is_announced_at_least_once_though_that_boot_is_killed(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Killed past its intent, the erasure is finished and announced by the next boot; that boot
    killed at any step, the one after announces what it had not, under the same `event_id`s
    (the intent's key). The load cleared the intent before the boot announced: a kill between
    the two lost the events for good."""
    seeded = _bruno_everywhere(tmp_path_factory, big=False)
    half, data, scratch = tmp_path / "half", tmp_path / "data", tmp_path / "scratch"
    events = tmp_path / "events.jsonl"
    scratch.mkdir()

    def past_the_intent(trace: list[str]) -> int:
        written = next(
            k for k, op in enumerate(trace, 1) if op[:7] == "replace" and erasure.INTENT_FILE in op
        )
        return written + 2

    erased = _forget_killed_at(context, seeded, half, events, scratch, past_the_intent)
    reset(half, data)
    booted = run_call_killed(
        context, _boot_announcing, (str(data), str(events)), 0, scratch=scratch
    )
    assert {i for i, _ in _sent_in(events)} == erased
    for k in range(1, booted.ops + 1):
        reset(half, data)
        sent = _killed_then_booted(context, _boot_announcing, data, events, k, scratch)
        assert {i for i, _ in sent} == erased, (k, booted.trace[k - 1], sent)
        _each_once(sent, erased, k)


def _delete_announcing(data: str, events: str) -> None:
    """A server's `memory::bank::delete` of `main`, its events recorded in `events`."""
    _serving(
        data,
        events,
        lambda service: catalog.call(service, "memory::bank::delete", {"name": "main"}),
    )


def test_a_delete_killed_anywhere_still_announces_an_erasure_it_finished(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An erasure killed as it ended (erased, its events not sent: the intent and the outbox
    still there), then its bank deleted: the delete finishes it in the trashed copy and
    announces it. Killed anywhere, the next boot announces what it had not, each memory under
    one `event_id`: the delete removed the copy's intent and outbox before sending, and a
    trashed copy is never loaded, so a kill in between lost the events for good (and one
    before the copy's outbox went left the person's name in `.trash/` for good)."""
    seeded = _bruno_everywhere(tmp_path_factory, big=False)
    half, data, scratch = tmp_path / "half", tmp_path / "data", tmp_path / "scratch"
    events = tmp_path / "events.jsonl"
    scratch.mkdir()

    def at_the_intents_removal(trace: list[str]) -> int:
        return next(
            k for k, op in enumerate(trace, 1) if op[:6] == "unlink" and erasure.INTENT_FILE in op
        )

    erased = _forget_killed_at(context, seeded, half, events, scratch, at_the_intents_removal)
    assert len(erased) == 2  # Bruno's two live memories in `main`
    assert (half / "main" / erasure.OUTBOX_FILE).exists()
    reset(half, data)
    deleted = run_call_killed(
        context, _delete_announcing, (str(data), str(events)), 0, scratch=scratch
    )
    sent = _sent_in(events)
    assert {i for i, _ in sent} >= erased, sent
    for k in range(1, deleted.ops + 1):
        reset(half, data)
        sent = _killed_then_booted(context, _delete_announcing, data, events, k, scratch)
        assert {i for i, _ in sent} >= erased, (k, deleted.trace[k - 1], sent)
        _each_once(sent, erased, k)
        assert not list(data.rglob(erasure.OUTBOX_FILE)), k  # it names Bruno
        assert not (data / erasure.TRASH_INTENT_FILE).exists(), k


def test_a_vector_write_a_kill_tore_is_no_damage(
    context: ForkServerContext, tmp_path: Path, seeded: Path
) -> None:
    """Vectors are derived and appended unsynced: a kill half-way through an append (here the
    embedding backlog a consolidation pass fills first) leaves a last line with no newline. It
    was never whole, its memory is embedded again, and the next append cuts it off; the load
    counted it as damage, so doctor failed `files-intact` ("fix or delete each by hand") after
    nothing but a kill. The log's own cut-short write is set aside, not damage, likewise."""
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    argv = ["consolidate", "--bank", "main", "--dry-run", "--data-dir", str(data)]
    reset(seeded, data)
    before, _ = seen(data)
    done = run_killed(context, argv, 0, scratch=scratch)
    (k,) = [k for k, op in enumerate(done.trace, 1) if op.endswith("/main/vectors.jsonl")]
    reset(seeded, data)
    assert run_killed(context, argv, k, scratch=scratch, half=True).killed
    assert not (data / "main" / "vectors.jsonl").read_bytes().endswith(b"\n"), "torn"
    state, intact = seen(data)
    assert state == before
    assert intact["ok"], intact["detail"]


def test_a_consolidation_pass_killed_anywhere_merges_whole_groups_and_the_next_pass_finishes(
    context: ForkServerContext, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`memory-worker consolidate`: one supersede per loser, each whole. Killed anywhere, every
    memory is live or retired into its group's winner, the pinned one untouched, and the next
    pass ends where an uninterrupted one does."""
    variants = [
        "The user likes green tea.",
        "the user likes green tea",
        "THE USER LIKES GREEN TEA!!",
    ]
    calls: list[tuple[str, dict[str, Any]]] = [
        *(("memory::save", {"text": text}) for text in variants),
        ("memory::save", {"text": "Ana's desk is by the window", "pinned": True}),
        ("memory::save", {"text": "ana's desk is by the window!"}),
    ]
    seeded = _seed_then(tmp_path_factory, calls)
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    argv = ["consolidate", "--data-dir", str(data)]
    reset(seeded, data)
    before, _ = seen(data)
    done = run_killed(context, argv, 0, scratch=scratch, env=LEXICAL)
    assert done.code == 0
    after, _ = seen(data)
    retired = {m["id"]: m.get("superseded_by") for m in after["main"]["memories"]["memories"]}
    assert sum(1 for winner in retired.values() if winner) == 3, retired
    every = range(1, done.ops + 1)
    for k in every if ALL else deciding(done.trace, at_most=3):
        reset(seeded, data)
        assert run_killed(context, argv, abs(k), scratch=scratch, half=k < 0, env=LEXICAL).killed, k
        state, intact = seen(data)
        assert intact["ok"], (k, intact["detail"])
        assert pinned(state) == pinned(before), k
        for memory in state["main"]["memories"]["memories"]:
            # Live, or retired into the winner the whole pass chose: never anything else.
            assert memory.get("superseded_by") in (None, retired[memory["id"]]), (k, memory)
        assert run_killed(context, argv, 0, scratch=scratch, env=LEXICAL).code == 0, k
        assert seen(data)[0] == after, k
