"""Live extraction: a real model behind an OpenAI-compatible endpoint, through the real pass.

Used by `bench/extraction_eval.py --live http://…/v1`. Three parts, each through
`memory_worker.harness.extractor.Extractor` (the production prompt, parser, write rules and
redaction) with `memory_worker.adapters.openai_chat.OpenAIChatCompleter` (the production client)
and in-memory transcript and state ports:

- `fixtures`: the 42 scripted conversations of `bench/fixtures/extraction/`, with the model's
  own replies instead of the recorded ones, scored by `extraction_eval`'s own checks.
- `locomo`: conversations of LoCoMo (`../shared/datasets/locomo/locomo10.json`, read in place),
  the first `--sessions` sessions of each. Speaker A is the user and speaker B the assistant; an
  exchange (A's message(s), then B's reply) is one turn, so one pass, as production runs it. A
  bank per conversation carries over from session to session. The reference is LoCoMo's
  per-session `observation` facts about speaker A; facts about speaker B (the "assistant") are
  counted apart. The split is fixed by conversation id (`SPLIT`): prompts are tuned on `tune`,
  figures reported on `report`.
- `echo`: the junk test. A 50-turn coding session whose assistant restates its instructions,
  its boot file (with a secret in it) and the bank's memories in nearly every reply; the user
  states three new facts along the way. Memories written per turn are the figure.

Matching a captured memory to a reference fact (`Matcher`): "The user" → speaker A's name and
"the assistant" → speaker B's, then the cosine of the local all-MiniLM-L6-v2 embeddings; a pair
matches at `MATCH_COSINE` or above. A memory is also compared with speaker B's facts under B's
name (the model often writes what B said as "The user …"); when that scores higher, it is
counted as about speaker B. The threshold was calibrated by hand (docs/BENCHMARKS.md,
"Live extraction"); `--calibrate OUT` writes every captured memory with its best reference and
score for such a check.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_worker.app.service import MemoryService
from memory_worker.app.wire import ListRequest, RuleSetRequest, SaveRequest
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.core.extraction import parse_reply
from memory_worker.storage.store import Store

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10.json"
if not LOCOMO.exists():  # a worktree sits one level deeper than the main checkout
    LOCOMO = Path("/work/shared/datasets/locomo/locomo10.json")

# Fixed by conversation id: alternate ids of the file's order.
SPLIT = {
    "tune": ("conv-26", "conv-41", "conv-43", "conv-47", "conv-49"),
    "report": ("conv-30", "conv-42", "conv-44", "conv-48", "conv-50"),
}
MATCH_COSINE = 0.60  # calibrated by hand, see docs/BENCHMARKS.md
DUPLICATE_COSINE = 0.88  # a new memory this close to one already live is a duplicate
BANK = "main"
HOLDER = {"kind": "bench", "command": "bench/extraction_eval.py --live"}
MESSAGE_GAP_MS = 30_000
_KNOWN_LINE = re.compile(r"^m\d+: ", re.MULTILINE)


# --- the client wrapper ----------------------------------------------------------------------


@dataclass
class CallLog:
    calls: int = 0
    failed: int = 0  # the endpoint raised (timeout, error status, cut off)
    unreadable: int = 0  # a reply with no JSON the parser could read
    skipped_items: int = 0  # items inside a readable reply the parser had to skip
    seconds: float = 0.0
    replies: list[str] = field(default_factory=list)

    def add(self, other: CallLog) -> None:
        self.calls += other.calls
        self.failed += other.failed
        self.unreadable += other.unreadable
        self.skipped_items += other.skipped_items
        self.seconds += other.seconds


class Counting:
    """The production client, with every call counted and every reply parsed once more the way
    the pass parses it (to count what could not be read)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.log = CallLog()

    def fresh(self, unit: str = "") -> CallLog:
        """A new call log for the next unit (a LoCoMo session, the echo session); a replaying
        inner completer switches to that unit's recorded replies."""
        self.log = CallLog()
        self.unit(unit)
        return self.log

    def unit(self, name: str) -> None:
        """The next calls are unit `name`'s (a scripted conversation: `fixture/<name>`), in the
        same call log: a replaying inner completer switches to that unit's recorded replies."""
        if hasattr(self.inner, "unit"):
            self.inner.unit(name)

    async def complete(self, system_prompt: str, user_text: str) -> str:
        log = self.log
        log.calls += 1
        started = time.monotonic()
        try:
            reply = await self.inner.complete(system_prompt, user_text)
        except SiblingUnavailable:
            log.failed += 1
            raise
        finally:
            log.seconds += time.monotonic() - started
        known = len(_KNOWN_LINE.findall(user_text.split("NEW MESSAGES", 1)[0]))
        decisions = parse_reply(reply, known)
        log.unreadable += not decisions.readable
        log.skipped_items += decisions.skipped
        log.replies.append(reply)
        return reply


class Replayer:
    """Answers each unit's calls with the replies a live run recorded, in order (`--replay`):
    the same model output applied by the current write rules. Not a live run: the known
    memories shown may differ from what the model saw, so a ref can point elsewhere."""

    EMPTY = '{"memories": [], "rules": []}'

    def __init__(self, replies: dict[str, list[str]]) -> None:
        self.replies = replies
        self.queue: list[str] = []
        self.short = 0  # calls past the end of a unit's recording

    def unit(self, name: str) -> None:
        self.queue = list(self.replies.get(name, []))

    async def complete(self, system_prompt: str, user_text: str) -> str:
        if not self.queue:
            self.short += 1
            return self.EMPTY
        return self.queue.pop(0)


def recorded_replies(report: dict[str, Any]) -> dict[str, list[str]]:
    """unit -> replies of a `--json` report of a live run."""
    out: dict[str, list[str]] = {}
    for result in report.get("fixtures", {}).get("results", []):
        out[f"fixture/{result['name']}"] = result["replies"]
    for session in report.get("locomo", {}).get("sessions", []):
        out[f"{session['conversation']}/s{session['session']}"] = session["replies"]
    if "replies" in report.get("echo", {}):
        out["echo"] = report["echo"]["replies"]
    return out


# --- in-memory ports -------------------------------------------------------------------------


class Transcript:
    def __init__(self) -> None:
        self.entries: dict[str, list[dict[str, Any]]] = {}

    def append(self, session_id: str, message: dict[str, Any]) -> None:
        entries = self.entries.setdefault(session_id, [])
        entries.append({"entry_id": f"e{len(entries) + 1:05d}", "message": message})

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        return list(self.entries.get(session_id, [])), None


class KV:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], Any] = {}

    async def get(self, scope: str, key: str) -> Any:
        return self.data.get((scope, key))

    async def set(self, scope: str, key: str, value: Any) -> None:
        self.data[(scope, key)] = value

    async def delete(self, scope: str, key: str) -> None:
        self.data.pop((scope, key), None)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def message(role: str, text: str, at_ms: int) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": at_ms}


# --- one bank through many turns -------------------------------------------------------------


@dataclass
class Change:
    """What one turn (or session) did to the bank."""

    created: list[Any] = field(default_factory=list)  # Memory
    reinforced: list[Any] = field(default_factory=list)  # the memory after
    reinforcements: int = 0  # corroboration added, restatements within the session included
    superseded: list[tuple[Any, Any]] = field(default_factory=list)  # (old, its replacement)
    rules_added: list[str] = field(default_factory=list)


class Bench:
    """A temp data dir, the real service and the real extractor over in-memory ports."""

    def __init__(self, root: Path, name: str, inner: Counting, settings: Settings) -> None:
        from memory_worker.harness.extractor import Extractor

        self.store = Store.open(root / name, holder=HOLDER)
        self.clock = Clock()
        self.service = MemoryService(self.store, settings, clock=self.clock)
        self.transcript = Transcript()
        self.kv = KV()
        self.inner = inner
        self.extractor = Extractor(self.service, self.transcript, inner, self.kv)
        self.errors: list[str] = []

    async def close(self) -> None:
        await self.service.settle()
        await self.store.close()

    async def snapshot(self) -> dict[str, Any]:
        listing = await self.service.list_memories(
            ListRequest(bank=BANK, include_superseded=True, limit=500)
        )
        return {m.id: m for m in listing.memories}

    def learned(self) -> list[str]:
        found = self.store.find(BANK)
        rule = found.rule("learned") if found is not None else None
        lines = rule.content.splitlines() if rule is not None else []
        return [line[2:] for line in lines if line.startswith("- ")]

    async def turn(self, session_id: str, messages: list[dict[str, Any]], turn_id: str) -> None:
        from memory_worker.app.seams import ExtractJob

        for item in messages:
            self.transcript.append(session_id, item)
        self.clock.now_ms = max(int(m["timestamp"]) for m in messages) + 60_000
        job = ExtractJob(session_id=session_id, bank=BANK, turn_id=turn_id)
        try:
            await self.extractor.extract(job, BANK)
        except Exception as exc:  # the queue would retry; here the turn is lost and counted
            self.errors.append(f"{session_id}/{turn_id}: {type(exc).__name__}: {exc}")

    @staticmethod
    def diff(before: dict[str, Any], after: dict[str, Any], rules: tuple[list[str], list[str]]):  # type: ignore[no-untyped-def]
        change = Change()
        for memory_id, now in after.items():
            old = before.get(memory_id)
            if old is None:
                change.created.append(now)
            start = old.corroboration if old is not None else 0  # a new memory starts at 0
            if now.corroboration > start:
                change.reinforced.append(now)
                change.reinforcements += now.corroboration - start
            if old is not None and old.live and not now.live:
                change.superseded.append((now, after.get(now.superseded_by or "")))
        change.created.sort(key=lambda m: (m.created_at, m.id))
        change.rules_added = [line for line in rules[1] if line not in rules[0]]
        return change


# --- matching --------------------------------------------------------------------------------


class Matcher:
    """Cosine of MiniLM embeddings after naming the speakers (cached per text)."""

    def __init__(self) -> None:
        from memory_worker.adapters.local_embedder import LocalEmbedder

        self.embedder = LocalEmbedder.default()
        self.cache: dict[str, Any] = {}

    def vectors(self, texts: list[str]) -> Any:
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, vector in zip(missing, self.embedder.embed_sync(missing), strict=True):
                self.cache[text] = np.asarray(vector, dtype=np.float32)
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts])

    def scores(self, left: list[str], right: list[str]) -> Any:
        import numpy as np

        if not left or not right:
            return np.zeros((len(left), len(right)), dtype=np.float32)
        return self.vectors(left) @ self.vectors(right).T


def one_to_one(scores: Any) -> list[tuple[int, int]]:
    """Pairs (row, column) scoring at least `MATCH_COSINE`, each row and column used once,
    best pairs first: one memory covers one reference fact."""
    pairs = sorted(
        (
            (float(scores[i][j]), i, j)
            for i in range(scores.shape[0])
            for j in range(scores.shape[1])
            if scores[i][j] >= MATCH_COSINE
        ),
        reverse=True,
    )
    rows: set[int] = set()
    cols: set[int] = set()
    out = []
    for _, i, j in pairs:
        if i not in rows and j not in cols:
            rows.add(i)
            cols.add(j)
            out.append((i, j))
    return out


def named(text: str, user: str, assistant: str) -> str:
    """ "The user's dog" → "Caroline's dog": the reference names the speakers."""
    text = re.sub(r"\b(the )?user's\b", f"{user}'s", text, flags=re.I)
    text = re.sub(r"\b(the )?user\b", user, text, flags=re.I)
    text = re.sub(r"\b(the )?assistant's\b", f"{assistant}'s", text, flags=re.I)
    return re.sub(r"\b(the )?assistant\b", assistant, text, flags=re.I)


# --- LoCoMo ----------------------------------------------------------------------------------


def locomo_when(raw: str) -> int:
    stamp = datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def locomo_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text", ""))
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def locomo_turns(conv: dict[str, Any], number: int) -> list[list[dict[str, Any]]]:
    """Session `number` as turns: speaker A's message(s), then speaker B's reply."""
    talk = conv["conversation"]
    user = talk["speaker_a"]
    start = locomo_when(talk[f"session_{number}_date_time"])
    turns: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for i, item in enumerate(talk[f"session_{number}"]):
        role = "user" if item["speaker"] == user else "assistant"
        if role == "user" and current and current[-1]["role"] == "assistant":
            turns.append(current)
            current = []
        current.append(message(role, locomo_text(item), start + i * MESSAGE_GAP_MS))
    if current:
        turns.append(current)
    return turns


def references(conv: dict[str, Any], number: int, speaker: str) -> list[str]:
    facts = conv["observation"].get(f"session_{number}_observation", {}).get(speaker, [])
    return [str(f[0]) for f in facts if isinstance(f, list) and f]


@dataclass
class LocomoSession:
    conversation: str
    session: int
    turns: int
    references: list[str]
    other: list[str]
    change: Change
    calls: CallLog
    errors: list[str]


async def run_locomo(
    data: list[dict[str, Any]],
    ids: tuple[str, ...],
    sessions: int,
    inner: Counting,
    settings: Settings,
    root: Path,
    progress: Any,
) -> list[LocomoSession]:
    out = []
    by_id = {c["sample_id"]: c for c in data}
    for conv_id in ids:
        conv = by_id[conv_id]
        bench = Bench(root, conv_id, inner, settings)
        try:
            for number in range(1, sessions + 1):
                if f"session_{number}" not in conv["conversation"]:
                    break
                before, rules_before = await bench.snapshot(), bench.learned()
                calls = inner.fresh(f"{conv_id}/s{number}")
                errors_before = len(bench.errors)
                turns = locomo_turns(conv, number)
                for t, messages in enumerate(turns, start=1):
                    await bench.turn(f"{conv_id}-s{number}", messages, f"t{t}")
                change = Bench.diff(before, await bench.snapshot(), (rules_before, bench.learned()))
                talk = conv["conversation"]
                out.append(
                    LocomoSession(
                        conv_id,
                        number,
                        len(turns),
                        references(conv, number, talk["speaker_a"]),
                        references(conv, number, talk["speaker_b"]),
                        change,
                        calls,
                        bench.errors[errors_before:],
                    )
                )
                progress(
                    f"locomo {conv_id} session {number}: {len(turns)} turns, "
                    f"{len(change.created)} created, {calls.calls} calls, "
                    f"{calls.seconds:.0f} s"
                )
        finally:
            await bench.close()
    return out


@dataclass
class Judged:
    """One captured memory against the references."""

    conversation: str
    session: int
    text: str
    best: str
    score: float
    verdict: str  # match | other-speaker | unmatched


def judge_locomo(
    results: list[LocomoSession], data: list[dict[str, Any]], matcher: Matcher
) -> tuple[dict[str, Any], list[Judged]]:
    by_id = {c["sample_id"]: c for c in data}
    judged: list[Judged] = []
    totals = {
        "sessions": len(results),
        "turns": 0,
        "references": 0,
        "found": 0,
        "created": 0,
        "matched": 0,
        "other_speaker": 0,
        "unmatched": 0,
        "reinforced": 0,
        "duplicates": 0,
        "superseded": 0,
        "rules_added": 0,
        "calls": 0,
        "failed": 0,
        "unreadable": 0,
        "skipped_items": 0,
        "seconds": 0.0,
    }
    earlier_refs: dict[str, list[str]] = {}
    live_texts: dict[str, list[str]] = {}
    for r in results:
        talk = by_id[r.conversation]["conversation"]
        user, other = talk["speaker_a"], talk["speaker_b"]
        refs_so_far = earlier_refs.setdefault(r.conversation, [])
        refs_so_far.extend(r.references)
        bank_texts = live_texts.setdefault(r.conversation, [])
        created = [named(m.text, user, other) for m in r.change.created]
        touched = created + [named(m.text, user, other) for m in r.change.reinforced]
        touched += [named(new.text, user, other) for _, new in r.change.superseded if new]
        # recall: a reference of this session is found when a memory made or restated now fits
        found = len(one_to_one(matcher.scores(r.references, touched)))
        # precision: each created memory against every user fact so far, then the assistant's
        mine = matcher.scores(created, refs_so_far)
        # a fact of the other speaker that the model wrote as "The user …" is theirs, not
        # invented: compare it with their facts under their name
        swapped = [named(m.text, other, user) for m in r.change.created]
        theirs = matcher.scores(swapped, r.other)
        earlier = bank_texts + created  # row i may only look at columns before len(bank) + i
        dup = matcher.scores(created, earlier)
        for i in range(len(created)):
            best_i = int(mine[i].argmax()) if refs_so_far else -1
            best = float(mine[i][best_i]) if best_i >= 0 else 0.0
            other_best = float(theirs[i].max()) if r.other else 0.0
            if max(best, other_best) < MATCH_COSINE:
                verdict = "unmatched"
            elif other_best > best:
                verdict = "other-speaker"
            else:
                verdict = "match"
            judged.append(
                Judged(
                    r.conversation,
                    r.session,
                    r.change.created[i].text,
                    refs_so_far[best_i] if best_i >= 0 else "",
                    round(best, 3),
                    verdict,
                )
            )
            before = len(bank_texts) + i
            if before and float(dup[i][:before].max()) >= DUPLICATE_COSINE:
                totals["duplicates"] += 1
        bank_texts.extend(created)
        totals["turns"] += r.turns
        totals["references"] += len(r.references)
        totals["found"] += found
        totals["created"] += len(created)
        totals["reinforced"] += r.change.reinforcements
        totals["superseded"] += len(r.change.superseded)
        totals["rules_added"] += len(r.change.rules_added)
        for key in ("calls", "failed", "unreadable", "skipped_items", "seconds"):
            totals[key] += getattr(r.calls, key)
    for j in judged:
        key = {"match": "matched", "other-speaker": "other_speaker"}.get(j.verdict, "unmatched")
        totals[key] += 1
    return totals, judged


# --- the echo session ------------------------------------------------------------------------

ECHO_SEEDS = (
    "The user lives in Porto.",
    "The user works as a backend engineer at Pagaleve.",
    "The user prefers pytest over unittest.",
    "The user's main project is a payments API written in Python.",
    "The user has a dog named Pipoca.",
)
ECHO_RULES = {
    "style": "# Style\nAnswer in English. Keep replies under 200 words. Never use em-dashes.\n",
}
ECHO_BOOT = (
    "You are CodeHelper, a coding assistant for the payments team. Follow the style rule. "
    "Never print the deploy token {secret}. Always run the tests before proposing a commit."
)
ECHO_TASKS = (
    "Can you rename the variable `amt` to `amount` in fees.py?",
    "Why does test_refund fail with a KeyError?",
    "Add a docstring to the settle() function.",
    "What does this regex do: ^[A-Z]{3}\\d{4}$ ?",
    "Write a pytest fixture that gives me a fake ledger.",
    "Is it safe to use datetime.utcnow here?",
    "Make the retry loop in client.py exponential.",
    "Explain the difference between a list and a tuple, briefly.",
    "Split the 300-line handler into smaller functions.",
    "Why is mypy complaining about Optional[int] here?",
)
# (turn, the user's message, keywords its memory must hold): the only facts worth keeping
ECHO_FACTS = (
    (12, "By the way, I switched all my projects from pip to uv last week.", ("uv",)),
    (
        27,
        "Heads up: my daughter Ana starts school on Monday, so I'll be offline mornings.",
        ("ana",),
    ),
    (41, "Our team moved the payments API from Flask to FastAPI this sprint.", ("fastapi",)),
)
ECHO_TURNS = 50


def echo_reply(turn: int, secret: str) -> str:
    """What an assistant that echoes its boot files and memories says (varied per turn)."""
    memory = ECHO_SEEDS[turn % len(ECHO_SEEDS)]
    recalled = memory.replace("The user's", "your").replace("The user", "you")
    forms = (
        f"As my instructions say, I answer in English, keep replies under 200 words and never "
        f"use em-dashes. I also remember that {recalled[0].lower() + recalled[1:]}",
        f"Reminder of my setup: {ECHO_BOOT.format(secret=secret)}",
        f"From memory: {memory} Following the style rule, here is a short answer.",
        f"I always run the tests before proposing a commit, as my instructions require. "
        f"Since {recalled[0].lower() + recalled[1:].rstrip('.')}, I kept the same conventions.",
        "Per my system prompt I am CodeHelper for the payments team, so: done, see the diff.",
    )
    return forms[turn % len(forms)] + " Here is the change you asked for; tests pass."


@dataclass
class EchoResult:
    turns: int
    change: Change
    calls: CallLog
    errors: list[str]
    facts_found: int
    junk: list[str]
    leaked: list[str]


async def run_echo(inner: Counting, settings: Settings, root: Path, secret: str) -> EchoResult:
    bench = Bench(root, "echo", inner, settings)
    try:
        start = locomo_when("9:00 am on 2 March, 2026")
        bench.clock.now_ms = start - 30 * 86_400_000
        for text in ECHO_SEEDS:
            await bench.service.save(SaveRequest(bank=BANK, text=text, entities=["user"]))
        for name, content in ECHO_RULES.items():
            await bench.service.rule_set(RuleSetRequest(bank=BANK, name=name, content=content))
        before, rules_before = await bench.snapshot(), bench.learned()
        calls = inner.fresh("echo")
        facts = {turn: text for turn, text, _ in ECHO_FACTS}
        for turn in range(1, ECHO_TURNS + 1):
            at = start + turn * 600_000
            ask = facts.get(turn) or ECHO_TASKS[turn % len(ECHO_TASKS)]
            messages = [
                message("user", ask, at),
                message("assistant", echo_reply(turn, secret), at + 20_000),
            ]
            await bench.turn("echo", messages, f"t{turn}")
        change = Bench.diff(before, await bench.snapshot(), (rules_before, bench.learned()))
        found, junk = 0, []
        wanted = [words for _, _, words in ECHO_FACTS]
        for memory in change.created:
            low = memory.text.lower()
            hit = next((w for w in wanted if all(k in low for k in w)), None)
            if hit is None:
                junk.append(memory.text)
            else:
                wanted.remove(hit)
                found += 1
        leaked = [
            str(p.relative_to(root))
            for p in sorted((root / "echo").rglob("*"))
            if p.is_file() and secret.encode() in p.read_bytes()
        ]
        return EchoResult(ECHO_TURNS, change, calls, bench.errors, found, junk, leaked)
    finally:
        await bench.close()


# --- the whole live run ----------------------------------------------------------------------


def load_locomo(path: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def temp_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="extraction-live-"))


def remove(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
