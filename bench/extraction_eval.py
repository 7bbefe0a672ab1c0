#!/usr/bin/env python3
"""Extraction decisions: scripted conversations with recorded model replies, scored against what
the worker wrote.

Each fixture in `bench/fixtures/extraction/` is a multi-turn conversation and, per turn, the reply
a model gave (or would give) to the worker's one `router::complete` call. Every fixture runs
in-process on its own temp data dir: `Store.open` + `MemoryService` with the fixture's settings,
the seed memories (`save`, `pin`) and rules (`rule_set`), then per turn the turn's messages are
appended to a fake transcript and `memory_worker.extractor.Extractor` runs one pass with fake
ports (transcript pages, a completer that records the request and answers the recorded reply, a
dict key-value store for the cursor). What the worker then holds is scored against `expect`.

    .venv/bin/python bench/extraction_eval.py [--fixture NAME] [--json OUT] [--write-doc]
    .venv/bin/python bench/extraction_eval.py --live ws://127.0.0.1:49134 [--model ID]

Refs: a recorded reply names seed memories as `seed:N` (index into `seed.memories`); before the
reply is handed over, `seed:N` becomes the `mK` label the worker showed the model for that
memory (read back from the `mK: <text>` lines of the request). A seed the worker did not show is
a harness error (the fixture must make it the obvious recall hit), never a silent pass. Secrets
are written `{{secret:NAME}}` (a value of `tests/secret_corpus.py`), so no file here holds a
literal a secret scanner would flag.

Scores, per fixture and in total (micro-averaged): adds precision/recall (a created memory
matches an expected keyword set when all keywords occur in its text, case-insensitively; the
matching is one-to-one), reinforcement and supersede precision/recall over the seed memories,
learned-rule precision/recall over the lines of `rules/learned.md`, secrets leaked (every router
request and every file of the data dir are scanned; must be 0), worker checks (the excerpt holds
each new user/assistant message once with its date, nothing of an earlier turn, at most one call
per turn) and harness errors.

`expect` keys (all optional): `adds` (keyword lists, or `{"keywords": [...], "entities": [...]}`
to also require entities), `allowed` (created memories that cost no precision), `created`
(exact number of memories created), `memory_ops` (exact created + reinforced seeds),
`reinforced`, `superseded`, `untouched`, `may_change` (exact seed texts), `reasons` (keyword lists
each found in one supersede reason), `rules` (keyword lists, one learned line each),
`rule_lines` (exact), `secrets`, `not_sent` (strings no router request may contain), `nothing`.

`--live URL` runs the same conversations against a real `router::complete` through an iii
engine (`memory_worker.bus.siblings.RouterCompleter`); replies are then the model's own and refs
whatever it said. Prints markdown tables and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.app.wire import ListRequest, PinRequest, RuleSetRequest, SaveRequest  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.core.redact import redact  # noqa: E402
from memory_worker.core.text import normalize  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402

FIXTURES = ROOT / "bench" / "fixtures" / "extraction"
DOC_KEY = "extraction-eval"
BANK = "main"
LEARNED = "learned"
PAGE_SIZE = 50
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/extraction_eval.py"}
DAY_MS = 86_400_000
SEED_LEAD_MS = 30 * DAY_MS  # seeds are stated a month before the conversation starts

_SECRET = re.compile(r"\{\{secret:([A-Z0-9_]+)\}\}")
_SEED_REF = re.compile(r"seed:(\d+)")
_SHOWN = re.compile(r"^\s*[-*]?\s*m(\d+)\s*:\s*(.*?)\s*$", re.MULTILINE)
_PINNED = " [pinned]"

TOP_KEYS = {"name", "description", "category", "settings", "seed", "turns", "expect"}
EXPECT_KEYS = {
    "adds": list,
    "allowed": list,
    "created": int,
    "memory_ops": int,
    "reinforced": list,
    "superseded": list,
    "untouched": list,
    "may_change": list,
    "reasons": list,
    "rules": list,
    "rule_lines": int,
    "secrets": list,
    "not_sent": list,
    "nothing": bool,
}
SEED_TEXT_KEYS = ("reinforced", "superseded", "untouched", "may_change")
DIMENSIONS = ("adds", "reinforced", "superseded", "rules")


# --- fixtures --------------------------------------------------------------------------------


class FixtureError(ValueError):
    pass


def secret_values() -> dict[str, str]:
    """NAME -> value of every string constant of `tests/secret_corpus.py`."""
    from tests import secret_corpus

    return {k: v for k, v in vars(secret_corpus).items() if k.isupper() and isinstance(v, str)}


def expand(value: Any, secrets: dict[str, str]) -> Any:
    """`{{secret:NAME}}` -> the corpus value, in every string of a fixture."""
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            if m.group(1) not in secrets:
                raise FixtureError(f"unknown secret {m.group(1)!r}")
            return secrets[m.group(1)]

        return _SECRET.sub(one, value)
    if isinstance(value, list):
        return [expand(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, secrets) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Message:
    role: str
    text: str
    at_ms: int
    raw: dict[str, Any]  # the session::messages `message` as the transcript serves it


@dataclass(frozen=True)
class Turn:
    messages: list[Message]
    reply: str | None  # None: the worker may skip the call; answered `{"memories": []...}`


@dataclass(frozen=True)
class Fixture:
    name: str
    description: str
    category: str
    settings: dict[str, Any]
    seed_memories: list[dict[str, Any]]
    seed_rules: dict[str, str]
    turns: list[Turn]
    expect: dict[str, Any]


def parse_at(raw: str) -> int:
    stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def _message(raw: Any, where: str) -> Message:
    if not isinstance(raw, dict) or not isinstance(raw.get("role"), str):
        raise FixtureError(f"{where}: a message needs a role")
    if not isinstance(raw.get("at"), str):
        raise FixtureError(f"{where}: a message needs `at` (ISO 8601)")
    at_ms = parse_at(raw["at"])
    blocks = raw.get("content")
    if blocks is None:
        if not isinstance(raw.get("text"), str):
            raise FixtureError(f"{where}: a message needs `text` (or raw `content` blocks)")
        blocks = [{"type": "text", "text": raw["text"]}]
    extra = {k: v for k, v in raw.items() if k not in {"role", "text", "at", "content"}}
    message = {"role": raw["role"], "content": blocks, "timestamp": at_ms, **extra}
    text = "\n".join(b["text"] for b in blocks if isinstance(b, dict) and "text" in b)
    return Message(raw["role"], text, at_ms, message)


def _turns(raw: Any, where: str) -> list[Turn]:
    if not isinstance(raw, list) or not raw:
        raise FixtureError(f"{where}: `turns` must be a non-empty list")
    turns = []
    for i, turn in enumerate(raw, start=1):
        if not isinstance(turn, dict) or not isinstance(turn.get("messages"), list):
            raise FixtureError(f"{where} turn {i}: needs `messages`")
        if not turn["messages"]:
            raise FixtureError(f"{where} turn {i}: no messages")
        reply = turn.get("reply")
        if reply is not None and not isinstance(reply, str):
            raise FixtureError(f"{where} turn {i}: `reply` is the model's reply TEXT (a string)")
        msgs = [_message(m, f"{where} turn {i}") for m in turn["messages"]]
        turns.append(Turn(msgs, reply))
    return turns


def _keywords(item: Any, where: str) -> None:
    words = item.get("keywords") if isinstance(item, dict) else item
    ok = isinstance(words, list) and words and all(isinstance(w, str) and w for w in words)
    if not ok:
        raise FixtureError(f"{where}: a keyword set is a non-empty list of strings")
    if isinstance(item, dict):
        ents = item.get("entities", [])
        if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
            raise FixtureError(f"{where}: `entities` must be a list of strings")


def _check_expect(expect: Any, seeds: list[dict[str, Any]], where: str) -> None:
    if not isinstance(expect, dict):
        raise FixtureError(f"{where}: `expect` must be an object")
    for key, value in expect.items():
        kind = EXPECT_KEYS.get(key)
        if kind is None:
            raise FixtureError(f"{where}: unknown expect key {key!r}")
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise FixtureError(f"{where}: expect.{key} must be {kind.__name__}")
    for key in ("adds", "allowed", "reasons", "rules"):
        for item in expect.get(key, []):
            _keywords(item, f"{where} expect.{key}")
    texts = {m["text"] for m in seeds}
    for key in SEED_TEXT_KEYS:
        for text in expect.get(key, []):
            if text not in texts:
                raise FixtureError(f"{where}: expect.{key} names no seed memory: {text!r}")
    for key in ("secrets", "not_sent"):
        if not all(isinstance(s, str) and len(s) >= 6 for s in expect.get(key, [])):
            raise FixtureError(f"{where}: expect.{key} holds strings of 6+ characters")


def _check_seed(seed: Any, where: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    seed = seed or {}
    if not isinstance(seed, dict) or set(seed) - {"memories", "rules"}:
        raise FixtureError(f"{where}: `seed` holds `memories` and `rules` only")
    memories = seed.get("memories", [])
    for m in memories:
        if not isinstance(m, dict) or not isinstance(m.get("text"), str):
            raise FixtureError(f"{where}: a seed memory needs `text`")
        if set(m) - {"text", "pinned", "tags", "entities"}:
            raise FixtureError(f"{where}: unknown seed memory key in {sorted(m)}")
    rules = seed.get("rules", {})
    if not isinstance(rules, dict) or not all(isinstance(v, str) for v in rules.values()):
        raise FixtureError(f"{where}: `seed.rules` maps a rule name to its text")
    return memories, rules


def load_fixture(path: Path, secrets: dict[str, str]) -> Fixture:
    where = path.name
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FixtureError(f"{where}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise FixtureError(f"{where}: a fixture is a JSON object")
    if unknown := set(raw) - TOP_KEYS:
        raise FixtureError(f"{where}: unknown keys {sorted(unknown)}")
    if raw.get("name") != path.stem:
        raise FixtureError(f"{where}: `name` must be the file's stem ({path.stem!r})")
    if not isinstance(raw.get("description"), str) or not raw["description"].strip():
        raise FixtureError(f"{where}: needs a `description`")
    raw = expand(raw, secrets)
    settings = raw.get("settings") or {}
    try:
        Settings(**settings)
    except Exception as exc:
        raise FixtureError(f"{where}: bad settings: {exc}") from None
    memories, rules = _check_seed(raw.get("seed"), where)
    turns = _turns(raw.get("turns"), where)
    _check_expect(raw.get("expect", {}), memories, where)
    for turn in turns:
        for ref in _SEED_REF.findall(turn.reply or ""):
            if int(ref) >= len(memories):
                raise FixtureError(f"{where}: seed:{ref} but only {len(memories)} seed memories")
    return Fixture(
        name=raw["name"],
        description=raw["description"],
        category=str(raw.get("category") or raw["name"].split("-")[0]),
        settings=settings,
        seed_memories=memories,
        seed_rules=rules,
        turns=turns,
        expect=raw.get("expect", {}),
    )


def load_fixtures(directory: Path, only: str | None = None) -> list[Fixture]:
    secrets = secret_values()
    paths = sorted(directory.glob("*.json"))
    if only is not None:
        paths = [p for p in paths if p.stem == only]
        if not paths:
            raise FixtureError(f"no fixture named {only!r} in {directory}")
    return [load_fixture(p, secrets) for p in paths]


# --- the fake ports --------------------------------------------------------------------------


class Transcript:
    """`session::messages` over every role, oldest first, `PAGE_SIZE` items a page, the cursor
    an offset (what the session-manager does)."""

    def __init__(self, page_size: int = PAGE_SIZE) -> None:
        self.entries: dict[str, list[dict[str, Any]]] = {}
        self.page_size = page_size
        self.pages_served = 0

    def append(self, session_id: str, message: dict[str, Any]) -> str:
        entries = self.entries.setdefault(session_id, [])
        entry_id = f"entry-{len(entries) + 1:05d}"
        entries.append({"entry_id": entry_id, "message": json.loads(json.dumps(message))})
        return entry_id

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        self.pages_served += 1
        entries = self.entries.get(session_id, [])
        start = int(cursor or 0)
        end = start + self.page_size
        items = json.loads(json.dumps(entries[start:end]))
        return items, (str(end) if end < len(entries) else None)


class KV:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], Any] = {}

    async def get(self, scope: str, key: str) -> Any:
        return self.data.get((scope, key))

    async def set(self, scope: str, key: str, value: Any) -> None:
        self.data[(scope, key)] = json.loads(json.dumps(value))

    async def delete(self, scope: str, key: str) -> None:
        self.data.pop((scope, key), None)


class RecordingEmitter:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        self.events.append((trigger_type, payload))


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Request:
    turn: int
    system_prompt: str
    user_text: str
    reply: str = ""


def shown_memories(user_text: str) -> dict[str, str]:
    """`mK` -> text of the known-memory lines of a request (` [pinned]` dropped)."""
    known = user_text.split("NEW MESSAGES", 1)[0]
    out = {}
    for m in _SHOWN.finditer(known):
        text = m.group(2)
        if text.endswith(_PINNED):
            text = text[: -len(_PINNED)]
        out[f"m{m.group(1)}"] = text
    return out


class Completer:
    """Records every request; answers the current turn's reply, with `seed:N` mapped onto the
    `mK` label the request showed for seed N (live: asks `inner` instead)."""

    def __init__(self, seeds: list[str], inner: Any = None) -> None:
        self.seeds = seeds  # the stored text of each seed memory
        self.inner = inner
        self.turn = 0
        self.reply: str | None = None
        self.requests: list[Request] = []
        self.errors: list[str] = []

    async def complete(self, system_prompt: str, user_text: str) -> str:
        request = Request(self.turn, system_prompt, user_text)
        self.requests.append(request)
        if self.inner is not None:
            request.reply = await self.inner.complete(system_prompt, user_text)
        elif self.reply is None:
            request.reply = '{"memories": [], "rules": []}'
        else:
            request.reply = self.map_refs(self.reply, user_text)
        return request.reply

    def map_refs(self, reply: str, user_text: str) -> str:
        shown = {normalize(text): label for label, text in shown_memories(user_text).items()}

        def one(m: re.Match[str]) -> str:
            n = int(m.group(1))
            label = shown.get(normalize(self.seeds[n]))
            if label is None:
                self.errors.append(
                    f"turn {self.turn}: seed:{n} ({self.seeds[n]!r}) was not among the "
                    f"{len(shown)} known memories the worker showed"
                )
                return m.group(0)
            return label

        return _SEED_REF.sub(one, reply)


# --- one run ---------------------------------------------------------------------------------


@dataclass
class Score:
    tp: int = 0
    expected: int = 0
    actual: int = 0

    def add(self, other: Score) -> None:
        self.tp += other.tp
        self.expected += other.expected
        self.actual += other.actual

    @property
    def precision(self) -> float | None:
        return self.tp / self.actual if self.actual else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.expected if self.expected else None


@dataclass
class Result:
    name: str
    category: str
    scores: dict[str, Score] = field(default_factory=lambda: {d: Score() for d in DIMENSIONS})
    failures: list[str] = field(default_factory=list)
    worker: list[str] = field(default_factory=list)  # excerpt and call checks
    errors: list[str] = field(default_factory=list)  # harness errors: fix the fixture or harness
    leaked: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)  # what the completer answered, per call
    calls: int = 0

    @property
    def passed(self) -> bool:
        return not (self.failures or self.worker or self.errors or self.leaked)


def matching(
    wanted: Sequence[Any], found: Sequence[tuple[str, Iterable[str]]]
) -> list[tuple[int, int]]:
    """A maximum one-to-one matching of expectations to found `(text, entities)` items (`_fits`),
    by augmenting paths: pairs `(expectation index, item index)`."""
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j, (text, entities) in enumerate(found):
            if j not in seen and _fits(wanted[i], text, entities):
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(wanted)):
        place(i, set())
    return sorted((i, j) for j, i in owner.items())


def _words(item: Any) -> list[str]:
    return [w.lower() for w in (item["keywords"] if isinstance(item, dict) else item)]


def _fits(item: Any, text: str, entities: Iterable[str] = ()) -> bool:
    low = text.lower()
    if not all(w in low for w in _words(item)):
        return False
    need = item.get("entities", []) if isinstance(item, dict) else []
    have = {e.lower() for e in entities}
    return all(e.lower() in have for e in need)


class Run:
    """One fixture on its own data dir."""

    def __init__(
        self,
        fx: Fixture,
        root: Path,
        inner: Any,
        page_size: int,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.fx = fx
        self.settings = Settings(**{**fx.settings, **(overrides or {})})
        self.data_dir = root / fx.name
        self.clock = Clock()
        self.emitter = RecordingEmitter()
        self.transcript = Transcript(page_size)
        self.kv = KV()
        self.inner = inner
        self.result = Result(fx.name, fx.category)
        self.seed_ids: list[str] = []
        self.before: dict[str, Any] = {}
        self.rule_files: dict[str, bytes] = {}

    async def go(self) -> Result:
        from memory_worker.app.seams import ExtractJob
        from memory_worker.harness.extractor import Extractor

        store = Store.open(self.data_dir, holder=HOLDER)
        service = MemoryService(store, self.settings, emitter=self.emitter, clock=self.clock)
        try:
            await self.seed(service)
            completer = Completer([m.text for m in self.before.values()], self.inner)
            extractor = Extractor(service, self.transcript, completer, self.kv)
            session = f"s-{self.fx.name}"
            for number, turn in enumerate(self.fx.turns, start=1):
                for message in turn.messages:
                    self.transcript.append(session, message.raw)
                self.clock.now_ms = max(m.at_ms for m in turn.messages) + 60_000
                completer.turn, completer.reply = number, turn.reply
                job = ExtractJob(session_id=session, bank=BANK, turn_id=f"t{number}")
                try:
                    await extractor.extract(job, BANK)
                except Exception as exc:  # the worker's failure (the queue would retry)
                    self.result.worker.append(
                        f"turn {number}: extract raised {type(exc).__name__}: {exc}"
                    )
            await service.settle()
            self.result.errors += completer.errors
            self.result.calls = len(completer.requests)
            self.result.replies = [r.reply for r in completer.requests]
            self.check_excerpts(completer.requests)
            await self.score(service, completer.requests)
        finally:
            await store.close()
        return self.result

    async def seed(self, service: MemoryService) -> None:
        first = min(m.at_ms for t in self.fx.turns for m in t.messages)
        self.clock.now_ms = first - SEED_LEAD_MS
        for i, seed in enumerate(self.fx.seed_memories):
            self.clock.now_ms += 60_000 * (i + 1)
            saved = await service.save(
                SaveRequest(
                    bank=BANK,
                    text=seed["text"],
                    entities=seed.get("entities", []),
                    tags=seed.get("tags", []),
                )
            )
            memory = saved.memory
            if seed.get("pinned"):
                memory = (
                    await service.pin(PinRequest(bank=BANK, id=memory.id, pinned=True))
                ).memory
            self.seed_ids.append(memory.id)
            self.before[memory.id] = memory
        for name, content in self.fx.seed_rules.items():
            await service.rule_set(RuleSetRequest(bank=BANK, name=name, content=content))
        rules_dir = self.data_dir / BANK / "rules"
        if rules_dir.is_dir():
            self.rule_files = {
                p.name: p.read_bytes() for p in rules_dir.glob("*.md") if p.stem != LEARNED
            }
        self.emitter.events.clear()

    # --- the checks ----------------------------------------------------------------------------

    def check_excerpts(self, requests: list[Request]) -> None:
        """Each pass sends this turn's user/assistant messages, with their dates, once; nothing
        of an earlier turn; at most one call per turn; and nothing `not_sent` names."""
        by_turn: dict[int, list[Request]] = {}
        for request in requests:
            by_turn.setdefault(request.turn, []).append(request)
        earlier: list[str] = []
        for number, turn in enumerate(self.fx.turns, start=1):
            shown = _excerpt_messages(turn)
            sent = by_turn.get(number, [])
            if len(sent) > 1:
                self.result.worker.append(f"turn {number}: {len(sent)} router calls, expected 1")
            if sent:
                self.check_excerpt(number, sent[0].user_text, shown, earlier)
            elif turn.reply is not None:
                self.result.worker.append(f"turn {number}: no router call (the reply went unused)")
            earlier += [text for _, text in shown]
        for needle in self.fx.expect.get("not_sent", []):
            if any(needle in r.user_text or needle in r.system_prompt for r in requests):
                self.result.worker.append(f"sent to the router: {needle!r}")

    def check_excerpt(
        self, number: int, body: str, shown: list[tuple[Message, str]], earlier: list[str]
    ) -> None:
        excerpt = body.split("NEW MESSAGES", 1)[-1]
        window = self.settings.extraction_window
        texts = {text for _, text in shown}
        for message, text in shown:
            if text[:80] in excerpt:
                stamp = datetime.fromtimestamp(message.at_ms / 1000, tz=UTC)
                if f"{stamp:%Y-%m-%d %H:%M}" not in excerpt:
                    self.result.worker.append(
                        f"turn {number}: a message's date {stamp:%Y-%m-%d %H:%M} is not shown"
                    )
            elif len(shown) <= window:
                self.result.worker.append(f"turn {number}: message not sent: {text[:60]!r}")
            elif message.role == "user":
                self.result.worker.append(
                    f"turn {number}: the window ({window} of {len(shown)} messages) dropped the "
                    f"user's message: {text[:60]!r}"
                )
        for text in earlier:
            if len(text) >= 30 and text not in texts and text[:80] in excerpt:
                self.result.worker.append(f"turn {number}: re-sent from earlier: {text[:60]!r}")

    async def score(self, service: MemoryService, requests: list[Request]) -> None:
        listing = await service.list_memories(
            ListRequest(bank=BANK, include_superseded=True, limit=500)
        )
        now = {m.id: m for m in listing.memories}
        created = [m for m in now.values() if m.id not in self.before]
        created.sort(key=lambda m: (m.created_at, m.id))
        self.result.created = [m.text for m in created]
        self.score_adds(created)
        self.score_seeds(now)
        self.score_rules()
        self.check_reasons()
        self.check_counts(created, now)
        self.check_secrets(requests)

    def score_adds(self, created: list[Any]) -> None:
        expect = self.fx.expect
        adds, allowed = expect.get("adds", []), expect.get("allowed", [])
        pairs = matching([*adds, *allowed], [(m.text, m.entities) for m in created])
        hit = {i for i, _ in pairs if i < len(adds)}
        spare = sum(1 for i, _ in pairs if i >= len(adds))
        self.result.scores["adds"] = Score(len(hit), len(adds), len(created) - spare)
        for i, item in enumerate(adds):
            if i not in hit:
                self.result.failures.append(f"no created memory matches {item}")
        matched = {j for _, j in pairs}
        for j, memory in enumerate(created):
            if j not in matched:
                self.result.failures.append(f"unexpected memory: {memory.text!r}")

    def score_seeds(self, now: dict[str, Any]) -> None:
        expect = self.fx.expect
        free = set(expect.get("may_change", []))
        reinforced, retired = set(), set()
        for memory_id, before in self.before.items():
            after = now[memory_id]
            if after.corroboration > before.corroboration:
                reinforced.add(before.text)
            if after.superseded_by is not None or after.invalid_at is not None:
                retired.add(before.text)
        for dim, actual in (("reinforced", reinforced), ("superseded", retired)):
            wanted = set(expect.get(dim, []))
            counted = actual - (free - wanted)
            self.result.scores[dim] = Score(len(wanted & actual), len(wanted), len(counted))
            for text in sorted(wanted - actual):
                self.result.failures.append(f"not {dim}: {text!r}")
            for text in sorted(counted - wanted):
                self.result.failures.append(f"{dim} but should not be: {text!r}")
        for text in expect.get("untouched", []):
            memory_id = next(i for i, m in self.before.items() if m.text == text)
            before, after = self.before[memory_id], now[memory_id]
            if not after.live or after.revision != before.revision or after.text != before.text:
                self.result.failures.append(
                    f"touched: {text!r} (live={after.live}, revision {before.revision}"
                    f"->{after.revision}, corroboration {after.corroboration})"
                )

    def score_rules(self) -> None:
        expect = self.fx.expect
        path = self.data_dir / BANK / "rules" / f"{LEARNED}.md"
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        lines = [line[2:].strip() for line in text.splitlines() if line.startswith("- ")]
        self.result.learned = lines
        wanted = expect.get("rules", [])
        pairs = matching(wanted, [(line, ()) for line in lines])
        self.result.scores["rules"] = Score(len(pairs), len(wanted), len(lines))
        hit = {i for i, _ in pairs}
        for i, item in enumerate(wanted):
            if i not in hit:
                self.result.failures.append(f"no learned rule matches {item}")
        if "rule_lines" in expect and len(lines) != expect["rule_lines"]:
            self.result.failures.append(
                f"learned.md has {len(lines)} lines, expected {expect['rule_lines']}: {lines}"
            )
        rules_dir = self.data_dir / BANK / "rules"
        for name, content in self.rule_files.items():
            after = rules_dir / name
            if not after.is_file() or after.read_bytes() != content:
                self.result.failures.append(f"hand-written rule {name} was changed")

    def check_reasons(self) -> None:
        reasons = [
            str(payload.get("reason", ""))
            for kind, payload in self.emitter.events
            if payload.get("event_type") == "superseded"
        ]
        wanted = self.fx.expect.get("reasons", [])
        pairs = matching(wanted, [(reason, ()) for reason in reasons])
        hit = {i for i, _ in pairs}
        for i, item in enumerate(wanted):
            if i not in hit:
                self.result.failures.append(f"no supersede reason matches {item}: {reasons}")

    def check_counts(self, created: list[Any], now: dict[str, Any]) -> None:
        expect = self.fx.expect
        reinforced = sum(
            1 for i, m in self.before.items() if now[i].corroboration > m.corroboration
        )
        retired = sum(1 for i in self.before if not now[i].live)
        if "created" in expect and len(created) != expect["created"]:
            self.result.failures.append(
                f"{len(created)} memories created, expected {expect['created']}"
            )
        if "memory_ops" in expect and len(created) + reinforced != expect["memory_ops"]:
            self.result.failures.append(
                f"{len(created)} created + {reinforced} reinforced, expected "
                f"{expect['memory_ops']} memory ops"
            )
        if expect.get("nothing") and (created or reinforced or retired or self.result.learned):
            self.result.failures.append(
                f"expected nothing; got {len(created)} created, {reinforced} reinforced, "
                f"{retired} retired, {len(self.result.learned)} learned rules"
            )

    def check_secrets(self, requests: list[Request]) -> None:
        secrets = self.fx.expect.get("secrets", [])
        if not secrets:
            return
        files = [(p, p.read_bytes()) for p in sorted(self.data_dir.rglob("*")) if p.is_file()]
        state = json.dumps({f"{s}/{k}": v for (s, k), v in self.kv.data.items()})
        for secret in secrets:
            places = [
                f"router request of turn {r.turn}"
                for r in requests
                if secret in r.user_text or secret in r.system_prompt
            ]
            places += [
                str(p.relative_to(self.data_dir)) for p, data in files if secret.encode() in data
            ]
            if secret in state:
                places.append("the cursor state")
            if places:
                self.result.leaked.append(f"{secret[:12]}… in {', '.join(places)}")


def _shown_text(text: str) -> str:
    """A message as the excerpt would carry it: redacted, whitespace collapsed."""
    return " ".join(redact(text).text.split())


def _excerpt_messages(turn: Turn) -> list[tuple[Message, str]]:
    """The turn's messages an excerpt must carry (user/assistant text, not our memory blocks)."""
    out = []
    for message in turn.messages:
        text = _shown_text(message.text)
        if message.role in ("user", "assistant") and text and not text.startswith("<memory "):
            out.append((message, text))
    return out


# --- the report ------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def totals(results: list[Result]) -> dict[str, Score]:
    out = {d: Score() for d in DIMENSIONS}
    for r in results:
        for d in DIMENSIONS:
            out[d].add(r.scores[d])
    return out


def table(results: list[Result]) -> str:
    head = ["category", "fixtures", "passed"]
    for d in DIMENSIONS:
        head += [f"{d} P", f"{d} R"]
    head += ["leaked", "worker checks", "harness errors"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.category, []).append(r)
    rows = [*sorted(groups.items()), ("**all**", results)]
    for label, group in rows:
        scores = totals(group)
        cells = [label, str(len(group)), str(sum(r.passed for r in group))]
        for d in DIMENSIONS:
            cells += [_pct(scores[d].precision), _pct(scores[d].recall)]
        cells += [
            str(sum(len(r.leaked) for r in group)),
            str(sum(len(r.worker) for r in group)),
            str(sum(len(r.errors) for r in group)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failure_list(results: list[Result]) -> str:
    out = []
    for r in results:
        if r.passed:
            continue
        out.append(f"- **{r.name}**")
        for kind, items in (
            ("harness error", r.errors),
            ("LEAKED", r.leaked),
            ("worker", r.worker),
            ("decision", r.failures),
        ):
            out += [f"  - {kind}: {item}" for item in items]
    return "\n".join(out) if out else "(every fixture passed)"


def summary(results: list[Result]) -> dict[str, Any]:
    scores = totals(results)
    return {
        "fixtures": len(results),
        "passed": sum(r.passed for r in results),
        **{f"{d}_precision": scores[d].precision for d in DIMENSIONS},
        **{f"{d}_recall": scores[d].recall for d in DIMENSIONS},
        "secrets_leaked": sum(len(r.leaked) for r in results),
        "worker_checks_failed": sum(len(r.worker) for r in results),
        "harness_errors": sum(len(r.errors) for r in results),
    }


# --- the run ---------------------------------------------------------------------------------


async def evaluate(
    fixtures: list[Fixture],
    *,
    inner: Any = None,
    page_size: int = PAGE_SIZE,
    overrides: dict[str, Any] | None = None,
    progress: Any = None,
) -> list[Result]:
    """Every fixture on a fresh temp data dir; `inner` is a live completer (None: recorded);
    `overrides` are settings applied over each fixture's own (e.g. the prompt version)."""
    root = Path(tempfile.mkdtemp(prefix="extraction-eval-"))
    try:
        results = []
        for fx in fixtures:
            if progress is not None:
                progress(f"fixture {fx.name}")
            if hasattr(inner, "unit"):  # a replayed live run: this conversation's own replies
                inner.unit(f"fixture/{fx.name}")
            run = Run(fx, root, inner, page_size, overrides)
            try:
                results.append(await run.go())
            except Exception as exc:  # seeding or scoring broke: a harness error, not a crash
                run.result.errors.append(f"{type(exc).__name__}: {exc}")
                results.append(run.result)
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.asynccontextmanager
async def live_completer(url: str, model: str) -> Any:
    """`RouterCompleter` on an SDK client connected to the engine at `url`."""
    try:
        from iii import InitOptions, register_worker

        from memory_worker.adapters.bus.siblings import BusCall, RouterCompleter
    except ImportError as exc:
        raise SystemExit(
            f"--live needs memory_worker.bus.siblings.RouterCompleter: {exc}"
        ) from None
    options = InitOptions(
        worker_name="memory-extraction-eval",
        otel={"enabled": False},
        enable_metrics_reporting=False,
    )
    client = await asyncio.to_thread(register_worker, url, options)
    settings = Settings(extraction_model=model)
    try:
        yield RouterCompleter(BusCall(client), lambda: settings)
    finally:
        await asyncio.to_thread(client.shutdown)
        with contextlib.suppress(AttributeError):  # shutdown joins the SDK's loop, never closes it
            if not client._thread.is_alive() and not client._loop.is_closed():
                client._loop.close()


def live_key(prompt: str) -> str:
    return f"extraction-live-{prompt.removeprefix('extraction-')}"


async def live_endpoint(args: argparse.Namespace) -> int:
    """`--live http://…/v1`: fixtures, LoCoMo and the echo session through the production
    client and pass (`bench/extraction_live.py`)."""
    live = await live_run(args)
    return live_report(args, live)


@dataclass
class Live:
    parts: list[str]
    started: datetime
    model: str
    fixtures: list[Result] = field(default_factory=list)
    fixture_calls: Any = None
    locomo: list[Any] = field(default_factory=list)
    data: list[dict[str, Any]] = field(default_factory=list)
    ids: tuple[str, ...] = ()
    echo: Any = None


async def live_run(args: argparse.Namespace) -> Live:
    import extraction_live as lv

    from memory_worker.adapters.openai_chat import OpenAIChatCompleter

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := set(parts) - {"fixtures", "locomo", "echo"}:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}")
    settings = Settings(
        extraction_endpoint=args.live,
        extraction_model=args.model,
        extraction_timeout_ms=args.timeout_ms,
        extraction_prompt=args.prompt,
    )
    client = OpenAIChatCompleter(lambda: settings)
    counting = lv.Counting(client)
    if args.replay is not None:  # the recorded replies of a live run, applied by this code
        recorded = json.loads(args.replay.read_text(encoding="utf-8"))
        counting = lv.Counting(lv.Replayer(lv.recorded_replies(recorded)))
    started = datetime.now(UTC)

    def progress(text: str) -> None:
        print(f"  … {text}", file=sys.stderr, flush=True)

    root = lv.temp_root()
    try:
        models = (
            f"replayed from {args.replay.name}: {recorded['meta']['model']}"
            if args.replay is not None
            else await client.model()
        )
        overrides = {"extraction_prompt": args.prompt}
        fixture_results: list[Result] = []
        fixture_calls = lv.CallLog()
        if "fixtures" in parts:
            fixtures = load_fixtures(args.fixtures, args.fixture)
            calls = counting.fresh()
            fixture_results = await evaluate(
                fixtures, inner=counting, overrides=overrides, progress=progress
            )
            fixture_calls = calls
        locomo: list[Any] = []
        data: list[dict[str, Any]] = []
        ids: tuple[str, ...] = ()
        if "locomo" in parts:
            data = lv.load_locomo(args.locomo)
            ids = (
                tuple(args.conversations.split(",")) if args.conversations else lv.SPLIT[args.half]
            )
            locomo = await lv.run_locomo(
                data, ids, args.sessions, counting, Settings(**overrides), root, progress
            )
        echo = None
        if "echo" in parts:
            secret = secret_values()["GITHUB_CLASSIC"]
            progress("echo session (50 turns)")
            echo = await lv.run_echo(counting, Settings(**overrides), root, secret)
    finally:
        await client.aclose()
        lv.remove(root)
    return Live(parts, started, models, fixture_results, fixture_calls, locomo, data, ids, echo)


def live_report(args: argparse.Namespace, live: Live) -> int:
    import extraction_live as lv

    parts, models = live.parts, live.model
    fixture_results, fixture_calls = live.fixtures, live.fixture_calls
    locomo, data, ids, echo = live.locomo, live.data, live.ids, live.echo
    started = live.started
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    report: dict[str, Any] = {"parts": parts}
    finished = datetime.now(UTC)
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "minutes": round((finished - started).total_seconds() / 60, 1),
        "commit": commit(),
        "source": source_digest(),
        "command": shlex.join(["python", "bench/extraction_eval.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_average": load_average(),
        "model": models,
        "prompt": args.prompt,
    }
    report["meta"] = meta
    emit(f"- command: `{meta['command']}`")
    emit(
        f"- taken: {meta['date']} ({meta['minutes']} min) at commit `{meta['commit']}`, "
        f"memory_worker source sha256 `{meta['source']}`"
    )
    emit(f"- machine: {meta['machine']}; load average at the end {meta['load_average']}")
    emit(f"- endpoint model `{models}`, prompt `{args.prompt}`, JSON mode, temperature 0")
    if "fixtures" in parts:
        emit()
        emit(f"#### {len(fixture_results)} scripted conversations, the model's own replies")
        emit()
        emit(table(fixture_results))
        emit()
        emit(calls_line(fixture_calls))
        report["fixtures"] = {
            "summary": summary(fixture_results),
            "results": [
                {
                    "name": r.name,
                    "passed": r.passed,
                    "failures": r.failures,
                    "worker": r.worker,
                    "created": r.created,
                    "learned": r.learned,
                    "replies": r.replies,
                }
                for r in fixture_results
            ],
        }
    if "locomo" in parts:
        matcher = lv.Matcher()
        totals, judged = lv.judge_locomo(locomo, data, matcher)
        emit()
        halves = [h for h, members in lv.SPLIT.items() if set(ids) <= set(members)]
        half = f"the {halves[0]} half" if halves else "both halves"
        sample = "" if halves and set(ids) == set(lv.SPLIT[halves[0]]) else " (a sample)"
        emit(
            f"#### LoCoMo, {half}{sample}: {', '.join(ids)}, "
            f"session{'s 1–' + str(args.sessions) if args.sessions > 1 else ' 1'} of each"
        )
        emit()
        emit(locomo_table(locomo, data, matcher))
        emit()
        emit(calls_line(totals))
        report["locomo"] = {
            "totals": totals,
            "judged": [asdict(j) for j in judged],
            "sessions": [
                {
                    "conversation": r.conversation,
                    "session": r.session,
                    "created": [m.text for m in r.change.created],
                    "reinforced": [m.text for m in r.change.reinforced],
                    "superseded": [[o.text, n.text if n else None] for o, n in r.change.superseded],
                    "rules_added": r.change.rules_added,
                    "errors": r.errors,
                    "replies": r.calls.replies,
                }
                for r in locomo
            ],
        }
        if args.calibrate:
            args.calibrate.write_text(
                "\n".join(json.dumps(asdict(j), ensure_ascii=False) for j in judged) + "\n",
                encoding="utf-8",
            )
    if echo is not None:
        emit()
        emit("#### The echo session: 50 turns, the assistant restating its instructions")
        emit()
        emit(echo_table(echo))
        emit()
        emit(calls_line(echo.calls))
        report["echo"] = {
            "created": [m.text for m in echo.change.created],
            "reinforced": [m.text for m in echo.change.reinforced],
            "rules_added": echo.change.rules_added,
            "junk": echo.junk,
            "leaked": echo.leaked,
            "errors": echo.errors,
            "reinforcements": echo.change.reinforcements,
            "replies": echo.calls.replies,
        }
    if args.json is not None:
        args.json.write_text(
            json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8"
        )
        print(f"\nwrote {args.json}")
    if args.write_doc:
        key = live_key(args.prompt)
        write_doc(args.write_doc, key, "\n".join(lines))
        print(f"updated the {key} section of {args.write_doc}")
    return 0


def calls_line(calls: Any) -> str:
    get = calls.get if isinstance(calls, dict) else lambda k: getattr(calls, k)
    n = get("calls")
    per = get("seconds") / n if n else 0.0
    return (
        f"Calls: {n}, failed {get('failed')}, unreadable replies {get('unreadable')}, "
        f"items skipped {get('skipped_items')}; {per:.1f} s per call."
    )


def locomo_table(results: list[Any], data: list[dict[str, Any]], matcher: Any) -> str:
    import extraction_live as lv

    head = (
        "| conversation | turns | reference facts | found | missed | created | matched | "
        "about speaker B | matching nothing | reinforced | duplicates | superseded | "
        "rules learned | errors |"
    )
    lines = [head, "|" + "---|" * 14]
    groups: dict[str, list[Any]] = {}
    for r in results:
        groups.setdefault(r.conversation, []).append(r)
    rows = [*groups.items(), ("**all**", results)]
    for label, group in rows:
        t, _ = lv.judge_locomo(group, data, matcher)
        errors = sum(len(r.errors) for r in group)
        lines.append(
            f"| {label} | {t['turns']} | {t['references']} | {t['found']} | "
            f"{t['references'] - t['found']} | {t['created']} | {t['matched']} | "
            f"{t['other_speaker']} | {t['unmatched']} | {t['reinforced']} | {t['duplicates']} | "
            f"{t['superseded']} | {t['rules_added']} | {errors} |"
        )
    t, _ = lv.judge_locomo(results, data, matcher)
    recall = t["found"] / t["references"] if t["references"] else 0.0
    precision = t["matched"] / t["created"] if t["created"] else 0.0
    lines += [
        "",
        f"Reference facts found: {recall:.2f}; created memories matching a reference fact "
        f"about the user: {precision:.2f}; created memories per turn: "
        f"{t['created'] / max(t['turns'], 1):.2f}.",
    ]
    return "\n".join(lines)


def echo_table(echo: Any) -> str:
    created = len(echo.change.created)
    junk = len(echo.junk)
    lines = [
        "| turns | memories created | per turn | the 3 user facts found | junk created | "
        "junk per turn | echoed memories reinforced | rules learned | secrets leaked | errors |",
        "|" + "---|" * 10,
        f"| {echo.turns} | {created} | {created / echo.turns:.3f} | {echo.facts_found} | {junk} | "
        f"{junk / echo.turns:.3f} | {echo.change.reinforcements} | "
        f"{len(echo.change.rules_added)} | {len(echo.leaked)} | {len(echo.errors)} |",
    ]
    if echo.junk:
        lines += ["", "Junk created: " + "; ".join(f"“{t}”" for t in echo.junk[:8])]
    if echo.change.rules_added:
        lines += ["", "Rules learned: " + "; ".join(f"“{t}”" for t in echo.change.rules_added)]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    if args.live and args.live.startswith(("http://", "https://")):
        return await live_endpoint(args)
    fixtures = load_fixtures(args.fixtures, args.fixture)
    lines: list[str] = []

    to_stdout = args.json is not None and str(args.json) == "-"  # then stdout is the JSON only

    def emit(text: str = "") -> None:
        print(text, flush=True, file=sys.stderr if to_stdout else sys.stdout)
        lines.append(text)

    if args.live:
        async with live_completer(args.live, args.model or "") as inner:
            results = await evaluate(fixtures, inner=inner, page_size=args.page_size)
        mode = f"live: router::complete through {args.live}, model {args.model or '(default)'}"
    else:
        results = await evaluate(fixtures, page_size=args.page_size)
        mode = "recorded replies (seed:N refs mapped onto the labels the worker showed)"
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "source": source_digest(),
        "command": shlex.join(["python", "bench/extraction_eval.py", *sys.argv[1:]]),
        "machine": machine(),
        "load_average": load_average(),
        "mode": mode,
    }
    emit(f"- command: `{meta['command']}`")
    emit(
        f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
        f"`{meta['source']}`"
    )
    emit(f"- machine: {meta['machine']}; load average at start {meta['load_average']}")
    where = args.fixtures.resolve()
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    emit(f"- {len(fixtures)} fixtures from `{shown}/`; mode: {mode}")
    emit()
    emit(table(results))
    emit()
    emit("Failures:")
    emit()
    emit(failure_list(results))
    report = {
        "meta": meta,
        "summary": summary(results),
        "fixtures": [
            {**asdict(r), "passed": r.passed, "scores": {d: asdict(s) for d, s in r.scores.items()}}
            for r in results
        ],
    }
    if args.json is not None:
        text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        if to_stdout:
            sys.stdout.write(text)
        else:
            args.json.write_text(text, encoding="utf-8")
            print(f"\nwrote {args.json}")
    if args.write_doc:
        write_doc(args.write_doc, DOC_KEY, "\n".join(lines))
        print(f"updated the {DOC_KEY} section of {args.write_doc}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", metavar="NAME", help="run only this fixture (file stem)")
    parser.add_argument(
        "--fixtures", type=Path, default=FIXTURES, metavar="DIR", help="the fixtures directory"
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="OUT",
        help="also write JSON here (-: stdout, the tables go to stderr)",
    )
    parser.add_argument(
        "--page-size", type=int, default=PAGE_SIZE, help="items per transcript page (default 50)"
    )
    parser.add_argument(
        "--live",
        metavar="URL",
        help="a real model: an OpenAI-compatible endpoint (http://…/v1) through the production "
        "client, or an iii engine (ws://…) through router::complete",
    )
    parser.add_argument("--model", default="", help="live mode: the extraction model id")
    parser.add_argument(
        "--prompt",
        default="extraction-v2",
        choices=("extraction-v1", "extraction-v2"),
        help="endpoint mode: the prompt version (the extraction_prompt setting)",
    )
    parser.add_argument(
        "--parts", default="fixtures,locomo,echo", help="endpoint mode: which parts to run"
    )
    parser.add_argument(
        "--half", default="report", choices=("tune", "report"), help="endpoint mode: LoCoMo half"
    )
    parser.add_argument("--conversations", default="", help="endpoint mode: LoCoMo ids (a,b)")
    parser.add_argument(
        "--sessions", type=int, default=2, help="endpoint mode: LoCoMo sessions per conversation"
    )
    parser.add_argument("--locomo", type=Path, default=None, help="the LoCoMo file")
    parser.add_argument(
        "--timeout-ms", type=int, default=600_000, help="endpoint mode: per-call timeout"
    )
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="JSON",
        help="endpoint mode: answer with the replies a live run recorded in its --json report "
        "(the same model output through this code's write rules; no model is asked)",
    )
    parser.add_argument(
        "--calibrate",
        type=Path,
        metavar="OUT",
        help="endpoint mode: write each captured LoCoMo memory with its best reference (JSONL)",
    )
    add_write_doc_option(parser, DOC_KEY)
    args = parser.parse_args()
    endpoint_mode = bool(args.live and args.live.startswith(("http://", "https://")))
    key = live_key(args.prompt) if endpoint_mode else DOC_KEY
    check_doc_region(parser, args.write_doc, key)
    if endpoint_mode and args.locomo is None:
        import extraction_live

        args.locomo = extraction_live.LOCOMO
    configure_logging("warning")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(main_async(args))
    except FixtureError as exc:
        parser.error(str(exc))
    return 130


if __name__ == "__main__":
    sys.exit(main())
