"""Property tests (hypothesis) over every public payload and the store's invariants.

Every example runs on its own data dir inside a fresh temp dir, in its own event loop
(`asyncio.run`): examples share nothing, and a rejected call can be checked byte for byte against
the files it must not have touched — inside the data dir and next to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import SaveRequest
from memory_worker.core.config import Settings
from memory_worker.core.errors import (
    ERROR_CODES,
    BankNotFound,
    Conflict,
    InvalidInput,
    MemoryNotFound,
    WorkerError,
)
from memory_worker.core.models import MAX_INT, Anchors, Confidence, Memory, Provenance
from memory_worker.core.text import fingerprint, normalize
from memory_worker.storage.store import Store

from .fakes import FixedClock, RecordingEmitter

HOLDER = {"pid": os.getpid(), "kind": "test", "command": "pytest tests/test_properties.py"}
DAY_MS = 86_400_000
# Rejections that must leave every file as it was (`storage` is the disk's verdict, not ours).
REJECTIONS = (InvalidInput, BankNotFound, MemoryNotFound, Conflict)
FUNCTIONS_WITH_FIELDS = [spec.id for spec in catalog.CATALOG if spec.request.model_fields]
FIELDLESS_FUNCTIONS = [spec.id for spec in catalog.CATALOG if not spec.request.model_fields]

# The autouse env fixture is function-scoped; sharing it across a test's examples is harmless.
SHARED_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _service(data: Path, clock: FixedClock) -> MemoryService:
    store = Store.open(data, holder=HOLDER)
    return MemoryService(store, Settings(), emitter=RecordingEmitter(), clock=clock)


async def _reopen(service: MemoryService, clock: FixedClock) -> MemoryService:
    root = service.store.root
    await service.store.close()
    return _service(root, clock)


@contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mw-props-") as tmp:
        yield Path(tmp)


def _snapshot(root: Path, *, skip: Path | None = None) -> dict[str, bytes | None]:
    """Every entry under `root`: relative path → bytes (None for a directory). The data dir's
    `.lock` is left out: it records the holder and is rewritten by every open."""
    out: dict[str, bytes | None] = {}
    for path in root.rglob("*"):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        rel = path.relative_to(root).as_posix()
        if rel == ".lock":
            continue
        out[rel] = None if path.is_dir() else path.read_bytes()
    return out


def _log_revisions_increase(data: Path) -> None:
    """In every bank's log, each id's revisions strictly increase in file order."""
    for log in data.glob("*/memories.jsonl"):
        last: dict[str, int] = {}
        for line in log.read_bytes().splitlines():
            record = json.loads(line)
            previous = last.get(record["id"])
            assert previous is None or record["revision"] > previous, (log, record["id"])
            last[record["id"]] = record["revision"]


# --- the seeded data dir every fuzz example starts from --------------------------------------

TEA = "The user drinks green tea every morning"
PINNED = "Ana maintains the iii blog"
DELETED = "The deploy runs on Fridays"
OLD = "The office is on Rua Augusta"
NEW = "The office is on Avenida Paulista"
BLOG = "Posts go out on Tuesday mornings"
SEED_IDS = tuple(fingerprint(text) for text in (TEA, PINNED, DELETED, OLD, NEW, BLOG))


async def _seed(data: Path) -> None:
    service = _service(data, FixedClock())

    async def call(function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await catalog.call(service, function_id, payload)

    try:
        await call("memory::save", {"text": TEA, "tags": ["tea", "morning"], "entities": ["user"]})
        await call("memory::save", {"text": TEA})
        await call("memory::save", {"text": PINNED, "pinned": True, "entities": ["ana"]})
        await call("memory::save", {"text": DELETED})
        await call("memory::delete", {"id": fingerprint(DELETED)})
        await call("memory::save", {"text": OLD})
        await call("memory::save", {"text": NEW})
        await call("memory::supersede", {"id": fingerprint(OLD), "superseded_by": fingerprint(NEW)})
        await call("memory::rule::set", {"name": "style", "content": "Answer briefly."})
        await call("memory::bank::create", {"name": "blog", "description": "The iii blog"})
        await call("memory::save", {"bank": "blog", "text": BLOG, "tags": ["blog"]})
        await call("memory::rule::set", {"bank": "blog", "name": "tone", "content": "Be concise."})
        listed = await call("memory::list", {"include_superseded": True})
        blog = await call("memory::list", {"bank": "blog"})
        ids = {m["id"] for m in listed["memories"]} | {m["id"] for m in blog["memories"]}
        assert ids == set(SEED_IDS)
    finally:
        await service.store.close()


@pytest.fixture(scope="module", name="seeded")
def _seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("seeded") / "data"
    asyncio.run(_seed(data))
    return data


# --- payload strategies ----------------------------------------------------------------------

# Fixed huge strings (generating 1 MB per example would dominate the run time).
HUGE = (
    "a" * 1_000_000,
    "tea " * 250_000,
    "记忆🙂é" * 80_000,
    "password=hunter2 " * 60_000,
    "\ud800" + "x" * 1_000_000,
)
NASTY = (
    "",
    " ",
    "\t\n",
    "\x00",
    "nul\x00byte",
    "\x1b[2J\x07bell",
    "\r\n\r\n",
    "\u0085\u2028\u2029",
    "\ud800",
    "lone \udfff surrogate",
    "\u202eevil\u202c",
    "مرحبا بالذاكرة",
    "זיכרון עמיד",
    "用户喜欢喝绿茶",
    "ユーザーは紅茶が好き",
    "사용자는 차를 좋아한다",
    "🙂🚀👩‍👩‍👧‍👦",
    "e\u0301\u0301\u0301",
    "../evil",
    "..",
    ".",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "~",
    ".trash",
    ".lock",
    ".hidden",
    "con",
    "nul",
    "CON",
    "aux",
    "true",
    "null",
    "[]",
    "{}",
    "NaN",
    "-1",
    "1e309",
    "x" * 65,
    "password=hunter2",
    "Bearer abcdefghijklmnopqrstuvwxyz0123456789",
)
VALID_TEXTS = (
    TEA,
    TEA.upper(),
    PINNED,
    DELETED,
    OLD,
    NEW,
    BLOG,
    "tea",
    "green tea morning",
    "ana blog",
    "The user lives in Lisbon",
    "office",
    "   padded  text  ",
)
NAMES = (
    "main",
    "blog",
    "fresh-bank",
    "doctor-200000",
    "style",
    "tone",
    "",
    " ",
    "Main",
    "../evil",
    "../../evil",
    "..",
    "/etc/passwd",
    "a/b",
    ".trash",
    ".lock",
    "con",
    "nul",
    "x" * 64,
    "x" * 65,
)
IDS = (*SEED_IDS, "fp0000000000000000", SEED_IDS[0].upper(), "../evil", "", ".lock")
NUMBERS = (
    -1,
    -(2**70),
    0,
    1,
    3,
    499,
    500,
    501,
    2**31,
    2**63,
    2**64,
    2**70,
    2**1100,
    10**400,
    FixedClock.START_MS,
    1.0,
    1.5,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
)
DEEP = ([[[[["x"]]]]], {"text": {"text": {"text": {"text": {"text": "x"}}}}}, [[], {}], [{}])

strings = st.one_of(
    st.sampled_from((*VALID_TEXTS, *NASTY, *HUGE)),
    st.text(st.characters(exclude_categories=()), max_size=40),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.sampled_from(NUMBERS), strings
)
junk = st.one_of(
    st.sampled_from(DEEP),
    st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=8,
    ),
)
label_lists = st.one_of(st.lists(strings, max_size=10), strings)
flags = st.one_of(st.booleans(), st.sampled_from(("true", "false", "yes", "0", 1, 0, 2, "")))
numbers = st.one_of(
    st.integers(-3, 600), st.sampled_from(NUMBERS), st.integers(0, 2 * FixedClock.START_MS)
)
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "bank": st.sampled_from(NAMES),
    "name": st.sampled_from(NAMES),
    "id": st.sampled_from(IDS),
    "superseded_by": st.sampled_from(IDS),
    "entities": label_lists,
    "tags": label_lists,
    "pinned": flags,
    "reinforce": flags,
    "include_superseded": flags,
    "limit": numbers,
    "offset": numbers,
    "as_of": numbers,
    "mode": st.sampled_from(("hybrid", "lexical", "semantic", "HYBRID", " lexical", "fuzzy")),
}
# Values every function accepts, so that most calls get past validation and reach the store.
good_labels = st.lists(st.sampled_from(("tea", "Blog", "ana", "user", "morning")), max_size=3)
GOOD: dict[str, st.SearchStrategy[Any]] = {
    "bank": st.sampled_from(("main", "blog", "fresh-bank")),
    "name": st.sampled_from(("blog", "main", "fresh-bank", "style", "tone", "new-rule")),
    "id": st.sampled_from(SEED_IDS),
    "superseded_by": st.sampled_from(SEED_IDS),
    "entities": good_labels,
    "tags": good_labels,
    "pinned": st.booleans(),
    "reinforce": st.booleans(),
    "include_superseded": st.booleans(),
    "limit": st.integers(0, 20),
    "offset": st.integers(0, 5),
    "as_of": st.integers(FixedClock.START_MS - DAY_MS, FixedClock.START_MS + DAY_MS),
    "mode": st.sampled_from(("hybrid", "lexical", "semantic")),
    "tag": st.sampled_from(("tea", "blog", "morning")),
    "session_id": st.sampled_from(("s-1", "session 2")),
}
FIELDS = sorted({name for spec in catalog.CATALOG for name in spec.request.model_fields})


def _value(field: str) -> st.SearchStrategy[Any]:
    kinds = {
        "good": GOOD.get(field, st.sampled_from(VALID_TEXTS)),
        "hostile": PLAUSIBLE.get(field, strings),
        "junk": junk,
    }
    # Most values are good, so that most calls reach the store; the rest are hostile or junk.
    mix = st.sampled_from(("good",) * 7 + ("hostile",) * 2 + ("junk",))
    return mix.flatmap(kinds.__getitem__)


# Every field of every function is drawn, and some are dropped: a function ignores the others
# as unknown keys. The engine's `_caller_worker_id` and a few random keys ride along.
payloads = st.builds(
    lambda values, dropped, extra: {
        **extra,
        **{k: v for k, v in values.items() if k not in dropped},
    },
    st.fixed_dictionaries(
        {field: _value(field) for field in FIELDS},
        optional={"_caller_worker_id": st.one_of(st.sampled_from(("engine", "\ud800")), junk)},
    ),
    st.sets(st.sampled_from(FIELDS), max_size=10),
    st.dictionaries(st.text(max_size=8), junk, max_size=2),
)


# --- every public function, fuzzed -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    result: dict[str, Any] | WorkerError
    before: dict[str, bytes | None]
    after: dict[str, bytes | None]


async def _call_once(data: Path, function_id: str, payload: object) -> Outcome:
    service = _service(data, FixedClock())
    before = _snapshot(data)
    result: dict[str, Any] | WorkerError
    try:
        try:
            result = await catalog.call(service, function_id, payload)
        except WorkerError as err:
            result = err
    finally:
        await service.store.close()
    return Outcome(result, before, _snapshot(data))


def _fuzz_once(seeded: Path, function_id: str, payload: object) -> str:
    """Call `function_id` once on a copy of `seeded`, check the outcome, and name it."""
    with _scratch() as root:
        # Two levels below the watched root, so `..` and `../..` escapes both land in view.
        data = root / "parent" / "data"
        shutil.copytree(seeded, data)
        (root / "neighbour.txt").write_bytes(b"not the worker's")
        (root / "parent" / "sibling.txt").write_bytes(b"not the worker's either")
        outside = _snapshot(root, skip=data)
        outcome = asyncio.run(_call_once(data, function_id, payload))
        assert _snapshot(root, skip=data) == outside, "a call wrote outside its data dir"
    result = outcome.result
    if isinstance(result, WorkerError):
        assert result.code in ERROR_CODES
        assert str(result).startswith(f"{result.code}: ")
        if isinstance(result, REJECTIONS):
            assert outcome.after == outcome.before, f"rejected with {result} but files changed"
        return f"{function_id}: {result.code}"
    assert isinstance(result, dict)
    # The bus can carry it: strict JSON, and no lone surrogate (utf-8 encoding would fail).
    json.dumps(result, allow_nan=False, ensure_ascii=False).encode()
    return f"{function_id}: ok"


@pytest.mark.parametrize("function_id", FUNCTIONS_WITH_FIELDS)
@settings(max_examples=30, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(payload=payloads)
@example(payload={"query": "tea", "as_of": 2**1100})  # once an OverflowError in recency()
def test_every_function_returns_a_dict_or_a_coded_error_and_rejections_change_nothing(
    seeded: Path, function_id: str, payload: dict[str, Any]
) -> None:
    event(_fuzz_once(seeded, function_id, payload))


@pytest.mark.parametrize("function_id", FIELDLESS_FUNCTIONS)
@settings(max_examples=4, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(payload=payloads)
def test_functions_without_fields_ignore_whatever_they_are_sent(
    seeded: Path, function_id: str, payload: dict[str, Any]
) -> None:
    event(_fuzz_once(seeded, function_id, payload))


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::save", ["not", "an", "object"]),
        ("memory::save", "text=hello"),
        ("memory::save", 42),
        ("memory::list", None),
        ("memory::save", {"text": 10**5000}),  # past Python's int→str digit limit
        ("memory::list", {"limit": 10**5000, "offset": 10**5000}),
        ("memory::save", {"text": "valid text", "tags": [[[[["deep"]]]]]}),
        ("memory::rule::set", {"name": "big", "content": "r" * 1_000_000}),
        ("memory::rule::set", {"name": "../evil", "content": "escape"}),
        ("memory::bank::create", {"name": "../evil"}),
        ("memory::bank::delete", {"name": ".."}),
        ("memory::bank::delete", {"name": ".trash"}),
        ("memory::supersede", {"id": SEED_IDS[0], "superseded_by": SEED_IDS[0]}),
        ("memory::supersede", {"id": SEED_IDS[1], "superseded_by": SEED_IDS[0]}),
        ("memory::update", {"id": SEED_IDS[0], "text": NEW}),
        ("memory::pin", {"id": SEED_IDS[2], "pinned": True}),
        ("memory::unknown", {}),
    ],
)
def test_extreme_payloads_get_a_result_or_a_coded_error_that_changes_nothing(
    seeded: Path, function_id: str, payload: object
) -> None:
    _fuzz_once(seeded, function_id, payload)


# --- record round-trip -----------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
ms = st.integers(min_value=0, max_value=MAX_INT)
optional_ms = st.none() | ms
label_tuples = st.lists(texts, max_size=4).map(tuple)
memories = st.builds(
    Memory,
    id=texts,
    text=texts,
    entities=label_tuples,
    tags=label_tuples,
    confidence=st.sampled_from(Confidence),
    corroboration=ms,
    pinned=st.booleans(),
    source=st.none()
    | st.builds(
        Provenance,
        session_id=st.none() | texts,
        entry_id=st.none() | texts,
        agent=st.none() | texts,
    ),
    created_at=ms,
    updated_at=ms,
    stated_at=optional_ms,
    invalid_at=optional_ms,
    superseded_by=st.none() | texts,
    revision=ms,
    category=st.none() | texts,
    subject=st.none() | texts,
    context=st.none() | texts,
    intention=st.none() | texts,
    title=st.none() | texts,
    recommendation=st.none() | texts,
    anchors=st.none()
    | st.builds(
        Anchors,
        files=label_tuples,
        folders=label_tuples,
        identifiers=label_tuples,
        keyword_groups=st.lists(label_tuples, max_size=3).map(tuple),
    ),
    evidence=st.none() | label_tuples,
    expires_at=optional_ms,
    access_count=optional_ms,
    last_accessed_at=optional_ms,
)


@settings(max_examples=200, deadline=None)
@given(memory=memories)
def test_every_valid_record_survives_its_jsonl_line(memory: Memory) -> None:
    line = memory.to_line()
    assert b"\n" not in line
    assert Memory.model_validate_json(line) == memory


# --- last-wins replay ------------------------------------------------------------------------

POOL = (
    "The user drinks green tea",
    "the USER  drinks green\ttea",
    "Ana maintains the iii blog",
    "Deploys run on Fridays",
    "The office is in Lisbon",
)
TAG_POOL = ("tea", "work", "blog")
QUERIES = ("green tea", "ana blog", "fridays office lisbon", "user")
slot = st.integers(0, 7)
tag_sets = st.lists(st.sampled_from(TAG_POOL), max_size=2)
operations = st.one_of(
    st.tuples(st.just("save"), st.integers(0, len(POOL) - 1), tag_sets, st.booleans()),
    st.tuples(
        st.just("update"),
        slot,
        st.none() | st.integers(0, len(POOL) - 1),
        st.none() | tag_sets,
        st.none() | st.booleans(),
    ),
    st.tuples(st.just("delete"), slot),
    st.tuples(st.just("pin"), slot, st.booleans()),
    st.tuples(st.just("supersede"), slot, slot, st.booleans()),
    st.tuples(st.just("tick"), st.integers(1, 3 * DAY_MS)),
)
programs = st.lists(operations, max_size=25)
Op = tuple[Any, ...]


class Runner:
    """Drives a service through a program, naming memories by their order of creation."""

    def __init__(self, data: Path) -> None:
        self.clock = FixedClock()
        self.service = _service(data, self.clock)
        self.ids: list[str] = []

    def _pick(self, slot: int) -> str:
        return self.ids[slot % len(self.ids)] if self.ids else "fp0000000000000000"

    def _payload(self, op: Op) -> tuple[str, dict[str, Any]]:
        kind = op[0]
        if kind == "save":
            return "memory::save", {"text": POOL[op[1]], "tags": op[2], "pinned": op[3]}
        if kind == "update":
            changes = {
                "text": None if op[2] is None else POOL[op[2]],
                "tags": op[3],
                "pinned": op[4],
            }
            return "memory::update", {
                "id": self._pick(op[1]),
                **{k: v for k, v in changes.items() if v is not None},
            }
        if kind == "delete":
            return "memory::delete", {"id": self._pick(op[1])}
        if kind == "pin":
            return "memory::pin", {"id": self._pick(op[1]), "pinned": op[2]}
        target, winner = self._pick(op[1]), self._pick(op[2])
        return "memory::supersede", {"id": target, "superseded_by": winner, "reinforce": op[3]}

    async def step(self, op: Op) -> object:
        if op[0] == "tick":
            self.clock.advance(op[1])
            return None
        function_id, payload = self._payload(op)
        try:
            result = await catalog.call(self.service, function_id, payload)
        except REJECTIONS as err:  # `main` is not materialized until its first save
            return str(err)
        memory_id = result["memory"]["id"]
        if function_id == "memory::save" and memory_id not in self.ids:
            self.ids.append(memory_id)
        return result

    async def reopen(self) -> None:
        self.service = await _reopen(self.service, self.clock)

    async def state(self) -> dict[str, Any]:
        service = self.service
        listing = await catalog.call(
            service, "memory::list", {"include_superseded": True, "limit": 500}
        )
        recalls = [
            await catalog.call(service, "memory::recall", {"query": query, "limit": 100, **extra})
            for query in QUERIES
            for extra in ({}, {"include_superseded": True}, {"mode": "lexical"})
        ]
        tags = await catalog.call(service, "memory::tags", {})
        banks = await catalog.call(service, "memory::bank::list", {})
        return {"list": listing, "recall": recalls, "tags": tags, "banks": banks}

    async def close(self) -> None:
        await self.service.store.close()


async def _replay_round_trip(data: Path, program: list[Op]) -> tuple[dict[str, Any], ...]:
    runner = Runner(data)
    try:
        for op in program:
            await runner.step(op)
        before = await runner.state()
        await runner.reopen()
        return before, await runner.state()
    finally:
        await runner.close()


@settings(max_examples=40, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(program=programs)
def test_reopening_the_store_replays_exactly_the_state_it_had(program: list[Op]) -> None:
    with _scratch() as root:
        before, after = asyncio.run(_replay_round_trip(root / "data", program))
        _log_revisions_increase(root / "data")
    assert after == before


# The save after the reopen resurrects a different record than it would without the reopen: two
# retired records share the text, RAM remembers the one retired last, replay the one written first.
RESURRECTION = [
    ("save", 0, [], False),  # a: text T
    ("update", 0, 3, None, None),  # a: text U
    ("save", 0, [], False),  # b: text T (a new, salted id)
    ("delete", 1),  # b retired
    ("update", 0, 0, None, None),  # a: text T again (its live twin is gone)
    ("delete", 0),  # a retired: both retired records read T
    ("reopen",),
    ("save", 1, [], False),  # T again: which one comes back?
]


async def _run(data: Path, program: list[Op], *, reopens: bool) -> tuple[list[object], Any]:
    runner = Runner(data)
    try:
        outcomes = []
        for op in program:
            if op[0] == "reopen":
                if reopens:
                    await runner.reopen()
                continue
            outcomes.append(await runner.step(op))
        return outcomes, await runner.state()
    finally:
        await runner.close()


@settings(max_examples=40, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(
    program=st.lists(st.one_of(operations, st.just(("reopen",))), max_size=25),
)
@example(program=RESURRECTION)
def test_a_reopen_anywhere_is_invisible_to_every_later_call(program: list[Op]) -> None:
    with _scratch() as root:
        straight = asyncio.run(_run(root / "straight", program, reopens=False))
        reopened = asyncio.run(_run(root / "reopened", program, reopens=True))
    assert reopened == straight


async def _reads_back(data: Path, function_id: str, payload: dict[str, Any], read: str) -> None:
    """What `read` returns after `function_id` is the same before and after a reopen; and a call
    refused as `invalid_input` left `read`'s answer as it was, before and after the reopen."""
    clock = FixedClock()
    service = _service(data, clock)
    try:
        untouched = await catalog.call(service, read, {})
        try:
            await catalog.call(service, function_id, payload)
        except InvalidInput:
            event("refused")
            assert await catalog.call(service, read, {}) == untouched
        before = await catalog.call(service, read, {})
        service = await _reopen(service, clock)
        assert await catalog.call(service, read, {}) == before
    finally:
        await service.store.close()


contents = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(content=contents)
@example(content="0\r")  # read back as "0\n": the rule file is read with newline translation
def test_a_rule_reads_back_unchanged_after_a_reopen(content: str) -> None:
    with _scratch() as root:
        payload = {"name": "style", "content": content}
        asyncio.run(_reads_back(root / "data", "memory::rule::set", payload, "memory::rule::list"))


@settings(max_examples=60, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(description=contents)
@example(description="a\x85b")  # read back as "a b": YAML folds U+0085 (NEL) as a line break
def test_a_bank_description_reads_back_unchanged_after_a_reopen(description: str) -> None:
    with _scratch() as root:
        payload = {"name": "blog", "description": description}
        asyncio.run(
            _reads_back(root / "data", "memory::bank::create", payload, "memory::bank::list")
        )


@settings(max_examples=60, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(text=contents, labels=st.lists(contents, max_size=3))
def test_a_saved_memory_reads_back_unchanged_after_a_reopen(text: str, labels: list[str]) -> None:
    with _scratch() as root:
        payload = {"text": text, "entities": labels, "tags": labels[::-1]}
        asyncio.run(_reads_back(root / "data", "memory::save", payload, "memory::list"))


# --- fingerprint findability -----------------------------------------------------------------

WORDS = ("user", "likes", "green", "tea", "café", "ação", "lisbon", "blog", "iii", "fridays")
sentences = st.lists(st.sampled_from(WORDS), min_size=2, max_size=6).map(" ".join)
RESTATEMENTS = (
    str.upper,
    str.title,
    lambda s: "  " + s.replace(" ", " \t  ") + "\n",
    lambda s: s.replace(" ", "\u00a0"),
)


async def _edit_then_resave(data: Path, first: str, edits: list[str], variant: str) -> None:
    clock = FixedClock()
    service = _service(data, clock)
    try:
        saved = await service.save(SaveRequest(text=first))
        memory_id = saved.memory.id
        for text in edits:
            clock.advance()
            await catalog.call(service, "memory::update", {"id": memory_id, "text": text})
        current = (await catalog.call(service, "memory::get", {"id": memory_id}))["memory"]
        for reopened in (False, True):
            if reopened:
                service = await _reopen(service, clock)
            clock.advance()
            again = await service.save(SaveRequest(text=variant))
            assert (again.created, again.memory.id) == (False, memory_id)
            assert again.memory.corroboration == current["corroboration"] + 1
            assert again.memory.text == current["text"]
            current = again.memory.model_dump()
        listing = await catalog.call(service, "memory::list", {"include_superseded": True})
        assert [m["id"] for m in listing["memories"]] == [memory_id]
    finally:
        await service.store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(
    first=sentences,
    edits=st.lists(sentences, min_size=1, max_size=3),
    restate=st.sampled_from(RESTATEMENTS),
)
def test_an_edited_text_is_found_by_its_new_fingerprint(
    first: str, edits: list[str], restate: Any
) -> None:
    variant = restate(edits[-1])
    assert normalize(variant) == normalize(edits[-1])
    with _scratch() as root:
        asyncio.run(_edit_then_resave(root / "data", first, edits, variant))


# --- concurrency -----------------------------------------------------------------------------

CONCURRENT_POOL = (
    "The user drinks green tea",
    "the user drinks  GREEN tea",
    "THE USER DRINKS GREEN TEA ",
    "Ana maintains the iii blog",
    "ana\tmaintains the iii BLOG",
    "Deploys run on Fridays",
    "The office is in Lisbon",
)


async def _save_concurrently(data: Path, picks: list[int]) -> None:
    clock = FixedClock()
    service = _service(data, clock)
    try:
        texts = [CONCURRENT_POOL[i] for i in picks]
        saved = await asyncio.gather(*(service.save(SaveRequest(text=t)) for t in texts))
        wanted = Counter(normalize(t) for t in texts)
        created = Counter(normalize(r.memory.text) for r in saved if r.created)
        assert created == Counter(dict.fromkeys(wanted, 1))  # one creation per distinct text
        listing = await catalog.call(service, "memory::list", {"include_superseded": True})
        memories = listing["memories"]
        by_text: dict[str, set[str]] = {}
        for memory in memories:
            by_text.setdefault(normalize(memory["text"]), set()).add(memory["id"])
        assert {text: len(ids) for text, ids in by_text.items()} == dict.fromkeys(wanted, 1)
        assert sum(m["corroboration"] + 1 for m in memories) == len(texts)
        for memory in memories:
            assert memory["corroboration"] + 1 == wanted[normalize(memory["text"])]
        before = await catalog.call(service, "memory::list", {"include_superseded": True})
        service = await _reopen(service, clock)
        assert await catalog.call(service, "memory::list", {"include_superseded": True}) == before
    finally:
        await service.store.close()
    _log_revisions_increase(data)


@settings(max_examples=10, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(picks=st.lists(st.integers(0, len(CONCURRENT_POOL) - 1), min_size=64, max_size=64))
def test_64_concurrent_saves_neither_duplicate_nor_lose_a_reinforcement(picks: list[int]) -> None:
    with _scratch() as root:
        asyncio.run(_save_concurrently(root / "data", picks))
