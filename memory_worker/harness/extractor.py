"""The extraction pass: one finished turn's new messages → one completion → writes.

1. Read the session's messages after its cursor (state scope `memory_cursor`), walking every page
   (`session::messages` is oldest first, so the new turn is on the last page), keeping at most
   `extraction_window` user/assistant messages and skipping our own `<memory …>` blocks. A cursor
   that is never met (a branch switch, trimmed history) falls back to the tail.
2. Redact secrets in the excerpt BEFORE anything leaves the worker.
3. Show the model what the bank already holds about it (the top recall hits, with refs).
4. One completion (`router::complete`, or the `extraction_endpoint`), with the prompt version
   `extraction_prompt` names; the reply is parsed leniently (`extraction.parse_reply`).
5. Apply, at most `max_memories_per_turn` memory writes: add (fingerprint-deduped: a repeat
   reinforces), restate (reinforce), correct (save the new text, supersede the old with the
   reason; a pinned memory is never touched). A restatement counts only when the user's own
   words carry it (`grounded`), and a new fact or a correction only when it is the user's
   (`the_users`: not the assistant's news or echo); standing instructions are appended to the bank's
   auto-managed `learned` rule, deduped by fingerprint, never touching hand-written rules (one
   only the assistant's lines carry is not the user's: dropped).
6. Only when every write has landed does the cursor move: a failure raises, the queue retries,
   and fingerprints make the retry reinforce instead of duplicate.

With a `PassJournal` (the capture queue outside an engine), the reply and the memories the model
was shown are recorded durably before the first write; a pass that finds a recorded decision
(its earlier attempt crashed after deciding) applies THAT decision, against the same memories,
and skips every write whose memory changed after the decision (the crashed attempt wrote it), so
a turn is never applied twice.

Past 500 lines on purpose: one extraction pass (cursor, window, redaction, the completion, the
write rules for add / restate / correct / learned rule, provenance and the journal) is one
sequence whose ordering is the correctness argument; split, the order would be spread out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import respond
from memory_worker.app.ports import Completer, KeyValue, TranscriptSource
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import (
    GetRequest,
    GetResponse,
    RecallRequest,
    RecallResponse,
    RuleListRequest,
    RuleListResponse,
    RuleSetRequest,
    SaveRequest,
    SaveResponse,
    SupersedeRequest,
)
from memory_worker.core.errors import (
    BankNotFound,
    Conflict,
    InvalidInput,
    ProseReply,
    SiblingUnavailable,
)
from memory_worker.core.extraction import (
    MAX_REPLY_CHARS,
    Add,
    Correct,
    Decisions,
    Line,
    parse_reply,
    render_request,
    system_prompt,
)
from memory_worker.core.injection import LEARNED_RULE, message_text
from memory_worker.core.lanes import goal_text, window_text
from memory_worker.core.models import Confidence, Memory, Rule
from memory_worker.core.redact import redact
from memory_worker.core.text import USER_ENTITY, fingerprint, language, normalize, terms, tokenize
from memory_worker.core.transitions import MAX_LABELS, redact_line
from memory_worker.storage.logger import get_logger

__all__ = [
    "CURSOR_SCOPE",
    "LEARNED_HEADER",
    "LEARNED_RULE",
    "MAX_RULES_PER_TURN",
    "Decision",
    "Extractor",
    "PassJournal",
    "grounded",
    "merge_learned",
    "said_terms",
]

log = get_logger(__name__)

CURSOR_SCOPE = "memory_cursor"
LEARN_ATTEMPTS = 3  # a learned-rule write raced by edits is merged again this many times
LEARNED_HEADER = (
    "# Learned\n"
    "Standing instructions captured from conversations. Edit or delete freely: extraction only "
    "appends lines it has not seen.\n"
)
MAX_RULES_PER_TURN = 3
KNOWN_SHOWN = 10  # known memories shown to the model
MAX_PAGES = 10_000
MIN_EXCERPT_CHARS = 20  # "ok", "thanks": not worth a model call…
MIN_STATEMENT_WORDS = 2  # …unless a person said at least this many words ("I'm vegan.")
# A fact about the person speaking, wherever the model put the words ("Since March 2026, the
# user lives in Porto.", "User's sister…", "A usuária…", "O utilizador…"), or kept in the
# person's own first person, as a small model copies it ("I live…", "My sister…", "Eu moro…"):
# it carries the `user` entity.
_ABOUT_USER = re.compile(
    r"\bthe user\b|^user(?:'s|’s)?\b"
    r"|\b(?:o|a|do|da|ao|à)\s+(?:usu[aá]ri[oa]|utilizador(?:a)?)\b|^(?:usu[aá]ri[oa]|utilizador(?:a)?)\b"
    r"|^(?:i|i['’](?:m|ve|d|ll)|my|(?-i:[Ee]u)|meu|minha|meus|minhas)\s",  # not "EU law …"
    re.IGNORECASE,
)
MEMORY_PREFIX = "<memory "
MAX_SCANNED = 500  # new messages held while walking; the window is chosen from these
PROSE_SHOWN_CHARS = 200  # of a reply in prose, what its error (a dead job's reason) quotes
PROSE_REPLY = "router::complete replied in prose"  # how a `ProseReply`'s message starts
GROUNDING_SHARE = 0.25  # of a restated memory's content terms the user's words must carry
DONE_KEPT = 64  # turns remembered as extracted (as many as a session record keeps turns)
REDACTED_MARK = "[REDACTED:"  # a removed secret: never worth remembering or obeying
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_QUOTES = re.compile("[\"'“”‘’«»`]")
_CLOSING = ".!;。！ "
# A password or PIN stated with its value: "the wifi password is sunflower.", "PIN: 4821",
# "a senha do banco é 'girassol'" (the noun, a few words naming what it is for, then one word
# ending the clause, or a quoted value). Not "passwords are stored in a manager", "the password
# is too short".
_STATES_SECRET = re.compile(
    r"\b(?:pass(?:word|phrase|code)|passwd|senha|palavra[- ]passe|(?-i:PIN))s?\b"
    r"(?:\s+(?:for|to|of|on|at|d[oa]s?|de|para|n[oa]s?)(?:\s+[^\s:=]+){1,3}?)?"
    r"(?:\s*[:=]|\s+(?:is|was|are|were|é|era|foi|são))\s*"
    r"(?:[\"'“‘`][^\"'”’`\n]{1,100}[\"'”’`]"
    r"|[^\s\"'“”‘’`.,;!?][^\s\"'“”‘’`]*?(?=\s*$|[.,;!?]|\s+(?:and|or|but|e|ou|mas)\b))",
    re.IGNORECASE,
)
_NOT_EVIDENCE = frozenset({"user"})  # every fact about the person carries it: it points nowhere


def _instruction_key(line: str) -> str:
    """The fingerprint of one instruction: its list marker, closing punctuation and its quotes
    (apostrophes too: `Don't`, `Don’t`) left out. A model restating an instruction varies them
    from turn to turn (`'Certainly'.`, `"Certainly"`, `“Certainly”!`, `Certainly`), and each
    variant became a new line."""
    text = _QUOTES.sub("", _BULLET.sub("", line)).strip().rstrip(_CLOSING).strip()
    return fingerprint(text)


def _instructions(content: str) -> set[str]:
    """The keys of a rule's lines (`_instruction_key`)."""
    return {_instruction_key(line) for line in content.splitlines() if line.strip()}


def merge_learned(
    existing: str,
    additions: list[str],
    limit: int = MAX_RULES_PER_TURN,
    elsewhere: Sequence[str] = (),
) -> str | None:
    """The `learned` rule with up to `limit` NEW `additions` appended as `- <text>` lines: one
    whose fingerprint is already there (hand edits included), or a line of another of the
    bank's rules (`elsewhere`: the agent is told it already), neither lands nor uses up a slot.
    None when nothing is new."""
    seen = _instructions(existing)  # a hand edit may have made `- x` into `* x` or `1. x`
    for content in elsewhere:
        seen |= _instructions(content)
    new: list[str] = []
    for addition in additions:
        text = _BULLET.sub("", addition).strip()  # a model's own "- x" is the line "x"
        key = _instruction_key(text)
        if text and key not in seen and len(new) < limit:
            seen.add(key)
            new.append(f"- {text}")
    if not new:
        return None
    base = existing.rstrip() + "\n" if existing.strip() else LEARNED_HEADER
    return base + "\n".join(new) + "\n"


def _window(lines: list[Line], size: int) -> list[Line]:
    """At most `size` messages, chronological: the user's own messages first (the facts are in
    what the person said — a long agentic turn must not push them out), then the newest rest."""
    if len(lines) <= size:
        return lines
    users = [i for i, line in enumerate(lines) if line.role == "user"]
    chosen = set(users[-size:])
    for i in range(len(lines) - 1, -1, -1):
        if len(chosen) >= size:
            break
        chosen.add(i)
    return [lines[i] for i in sorted(chosen)]


def _fact_key(text: str) -> str:
    """A fact's text as restatements are matched: case, spacing and its closing punctuation
    aside ("The user likes tea." / "the user likes tea" / "The user likes tea!" are one fact)."""
    return normalize(text).rstrip(_CLOSING)


def _carries_secret(text: str) -> bool:
    """A fact or rule about a secret (raw, or already a redaction marker) is not worth keeping:
    stored, it would only ever read `[REDACTED:…]`. Nor one stating a password or a PIN in plain
    words: redaction leaves `the password is swordfish` (a word, it reads like prose), and the
    prompt's "never keep passwords" was all that kept it out of the bank, and of every session's
    system prompt as a learned rule."""
    return REDACTED_MARK in redact(text).text or _STATES_SECRET.search(text) is not None


def said_terms(lines: list[Line]) -> frozenset[str]:
    """The content terms of what the user said in the excerpt (the only source of facts)."""
    return frozenset(terms(" ".join(line.text for line in lines if line.role == "user")))


def echoed_terms(lines: list[Line]) -> frozenset[str]:
    """The content terms of everything else in the excerpt (the assistant's lines, tool output)."""
    return frozenset(terms(" ".join(line.text for line in lines if line.role != "user")))


def _content(text: str) -> set[str]:
    return {term for term in terms(text) if term != USER_ENTITY and not term.isdigit()}


def _carried(text: str, words: frozenset[str]) -> int:
    """How many of `text`'s content terms `words` carries, each word read in either language
    when only the other's stem is among `words` (as a query is read against a bank): a
    Portuguese turn's fact written in English ("Porto" → `porto`) and the user's words
    ("o Porto" → `port`) are stemmed by their own languages."""
    own = {term for term in terms(text, words.__contains__) if term != USER_ENTITY}
    return len({term for term in own if not term.isdigit()} & words)


def grounded(text: str, said: frozenset[str]) -> bool:
    """Whether the user's own words carry `text`: at least a quarter of its content terms (one at
    least), leaving out `user` and numbers (dates the model computed are not in the words).

    Measured with a real 1.5B model (docs/BENCHMARKS.md, "Live extraction"): it restated the
    same known memory on nearly every turn, and restated memories the assistant had echoed, so
    corroboration counted the model's habit, not the user. A restatement, or a correction that
    would retire a memory, must be visible in what the user said."""
    own = _content(text)
    if not own:
        return False
    return _carried(text, said) >= max(1, math.ceil(len(own) * GROUNDING_SHARE))


def the_users(
    text: str, said: frozenset[str], echoed: frozenset[str], *, inferred: bool = False
) -> bool:
    """Whether a NEW fact comes from the user: their words carry it (`grounded`; not asked of a
    fact the model marked as its own conclusion), and carry no less of it than the other lines
    of the excerpt do.

    Measured with a real 1.5B model (docs/BENCHMARKS.md, "Live extraction"): a quarter of the
    facts it wrote were the assistant's ("The user started a new job as a Financial Analyst"
    when the assistant said "I started a new job…"), its boot file ("The user is CodeHelper…")
    or a memory it echoed. The prompt says so and a small model does not follow it."""
    if not inferred and not grounded(text, said):
        return False
    return _carried(text, said) >= _carried(text, echoed)


def _not_the_users(
    rule: str, said: frozenset[str], echoed: frozenset[str], said_language: str
) -> bool:
    """Whether a standing instruction is only in the other lines of the excerpt: the assistant's
    own words, or what it quoted (a README, a web page: "always run install.sh first"), none of
    it in what the user said. Such a line went to the `learned` rule and so into every later
    session's system prompt. Not asked to be `grounded`, and not asked at all of a rule in
    another language than the user's words: the user's instruction in Portuguese, written by
    the model in English (as the assistant confirmed it), shares no word with it and is still
    the user's."""
    if language(tokenize(rule)) != said_language:
        return False
    return _carried(rule, said) == 0 and _carried(rule, echoed) > 0


def _split_known(
    decisions: Decisions, known: list[Memory], said: frozenset[str], echoed: frozenset[str]
) -> tuple[list[int], list[Add]]:
    """(memories to reinforce, facts to add): an "add" of a text already known is a restatement;
    a restatement the user's words do not carry is dropped, and so is a new fact that is not
    the user's (`the_users`); a fact carrying a redaction marker is not worth keeping."""
    by_text = {_fact_key(memory.text): i for i, memory in enumerate(known)}
    restates = list(dict.fromkeys(decisions.restates))
    adds: list[Add] = []
    once: set[str] = set()  # a fact the reply repeats is written once: it corroborates nothing
    for add in decisions.adds:
        key = _fact_key(add.text)
        if key in once:
            continue
        once.add(key)
        again = by_text.get(key)
        if again is None:
            if not _carries_secret(add.text) and the_users(
                add.text, said, echoed, inferred=add.inferred
            ):
                adds.append(add)
        elif again not in restates:
            restates.append(again)
    return [i for i in restates if grounded(known[i].text, said)], adds


def _general(fact: Add) -> bool:
    """Whether a fact is about no one in particular. "General" is the model's word: a fact that
    speaks of the user is about the person speaking whatever it says (written general, it was in
    everyone's recall of a bank partitioned by person)."""
    return fact.general and not _ABOUT_USER.search(fact.text)


class _Own:
    """`_save`'s default subject: the fact's own reading (general, else the speaker)."""


_OWN = _Own()


@dataclass(frozen=True, slots=True)
class _Cursor:
    """A session's extraction progress (state scope `memory_cursor`). `entry`: the furthest entry
    a pass read up to; `done`: the `until`s of recent passes, so a redelivered or late job is
    recognised even once the cursor went past its turn."""

    entry: str | None = None
    done: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Span:
    """What a pass reads: its lines, the entry the cursor moves to, and the turn's `until`."""

    lines: list[Line]
    end: str | None
    until: str | None


class _Origin:
    """Provenance of what one pass writes: the session, the agent that ran the turn (named by
    the harness, else the model that answered) and, per fact, the message it came from."""

    def __init__(self, job: ExtractJob, lines: list[Line], read_at: int) -> None:
        self.session_id = job.session_id
        self.subject = job.subject
        # When the oldest word the pass reads was said: an erasure since wins (`Caller.read_at`).
        self.read_at = read_at
        answered = [line.model for line in lines if line.model]
        self.agent = job.agent or (answered[-1] if answered else None)
        self._lines = [(line, frozenset(terms(line.text)) - _NOT_EVIDENCE) for line in lines]
        # The association lanes: the window the pass read is every fact's context.
        self.context = window_text(line.text for line in lines)
        # The language the person spoke in (their standing instructions are judged in it).
        self.said_language = language(
            tokenize(" ".join(line.text for line in lines if line.role == "user"))
        )
        # When the pass finishes a journaled decision: the decision's time (see `_written_since`).
        self.since: int | None = None

    def intention_of(self, fact: Add) -> str | None:
        """The fact's goal lane: the model's reading, else the person's message it came from
        (the one sharing most of its words, the newest on a tie; else their last message)."""
        if fact.intention:
            return fact.intention
        wanted = frozenset(terms(fact.text)) - _NOT_EVIDENCE
        said = [(len(wanted & words), at, line) for at, (line, words) in enumerate(self._lines)]
        said = [item for item in said if item[2].role == "user"]
        if not said:
            return None
        best = max(said, key=lambda item: (item[0], item[1]))
        return goal_text(best[2].text)

    def entry_of(self, text: str) -> str | None:
        """The message a fact most likely came from: the one sharing most of its content words
        (the person's own messages first on a tie, then the newest), else the turn's last
        message from the person."""
        wanted = frozenset(terms(text)) - _NOT_EVIDENCE
        best: tuple[int, int, int] | None = None
        entry: str | None = None
        for at, (line, words) in enumerate(self._lines):
            rank = (len(wanted & words), line.role == "user", at)
            if line.entry_id is not None and (best is None or rank > best):
                best, entry = rank, line.entry_id
        if best is not None and best[0] == 0:
            said = [line.entry_id for line, _ in self._lines if line.role == "user"]
            entry = said[-1] if said else entry
        return entry

    def caller(self, fact: Add | None = None) -> Caller:
        """Extraction acts on its own: what it saves was read from the session's conversation
        (or, the model says, inferred from it), with the entry it came from."""
        if fact is None:
            return Caller.internal(
                "extraction",
                session_id=self.session_id,
                confidence=Confidence.EXTRACTED,
                read_at=self.read_at,
            )
        return Caller.internal(
            "extraction",
            session_id=self.session_id,
            agent=self.agent,
            entry_id=self.entry_of(fact.text),
            confidence=Confidence.INFERRED if fact.inferred else Confidence.EXTRACTED,
            read_at=self.read_at,
        )


def _said_by(lines: Sequence[Line], queued_at: int | None, *, bounded: bool = True) -> int:
    """When the oldest of `lines` was said, as far as can be told: the earliest of their own dates
    and the time their turn's job was queued (every word was said by then; a turn an erasure
    happened in the middle of dates its first words before it). 0 when neither is known (a job
    queued before jobs carried `at`, undated messages): before any erasure, as it may have been.

    The dates are the client's clock, `queued_at` the worker's. A line dated after `queued_at`
    (`bounded`: the job reads no further than its turn, all said by then) shows the client's
    clock ahead by that much at least: every date is read back by it. Taken as they were, Ana's
    words said before her erasure read as said after it and were saved. Read back so, a date is
    still no earlier than when its words were said: no word said after an erasure is refused."""
    known = [line.at_ms for line in lines if line.at_ms is not None]
    if queued_at is not None:
        # More than a day ahead is no clock's drift but a wrong date (a unit mistaken): left out.
        known = [at for at in known if at - queued_at <= MAX_CLOCK_AHEAD_MS]
        ahead = max(known, default=queued_at) - queued_at if bounded else 0
        known = [at - ahead for at in known] if ahead > 0 else known
        known.append(queued_at)
    return min(known, default=0)


MAX_CLOCK_AHEAD_MS = 24 * 3600 * 1000


def _model_of(message: dict[str, Any]) -> str | None:
    """`provider/model` of an assistant message: what answered the turn."""
    model = message.get("model")
    if not isinstance(model, str) or not model.strip():
        return None
    provider = message.get("provider")
    prefix = f"{provider.strip()}/" if isinstance(provider, str) and provider.strip() else ""
    return f"{prefix}{model.strip()}"


SECONDS_BEFORE = 10**11  # as milliseconds, 1973; as seconds, the year 5138: it was seconds


def _at_ms(message: dict[str, Any]) -> int | None:
    """The message's date in ms; one given in Unix seconds (a client of `POST /capture`) is read
    as such, not as a date in January 1970 that "yesterday" would be counted from."""
    value = message.get("timestamp")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value * 1000) if value < SECONDS_BEFORE else int(value)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a pass decided before writing: the reply, the ids of the memories shown (in the
    order the reply's refs count them) and when (ms, the service's clock)."""

    reply: str
    known: tuple[str, ...]
    at_ms: int


class PassJournal(Protocol):
    """Where a pass records its decision before writing (the capture queue)."""

    def recorded(self) -> Decision | None:
        """The decision an earlier attempt of this pass recorded, if any."""
        ...

    async def record(self, decision: Decision) -> None:
        """Make `decision` durable; it returns before any write is made because of it."""
        ...


class Extractor:
    def __init__(
        self,
        service: MemoryService,
        transcript: TranscriptSource,
        completer: Completer,
        kv: KeyValue,
        journal: PassJournal | None = None,
    ) -> None:
        self._service = service
        self._transcript = transcript
        self._completer = completer
        self._kv = kv
        self._journal = journal
        # One pass per session at a time (a retry, a lagging queue and an inline job can
        # overlap): each reads the cursor the previous one left, so it never moves backwards.
        # The lock and how many passes hold or wait for it: it is dropped only when none does
        # (a released lock is unlocked while its next waiter has not woken yet; dropped then, a
        # pass arriving in between would take a new lock and run beside that waiter).
        self._sessions: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def _session(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._sessions.setdefault(session_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._sessions[session_id]

    async def extract(self, job: ExtractJob, bank: str) -> int:
        """One pass for `job.session_id` into `bank`; the number of memory and rule writes."""
        async with self._session(job.session_id):
            return await self._extract(job, bank)

    async def pass_over(self, job: ExtractJob) -> None:
        """Move the cursor past the turn, reading nothing out: the turn ran without memory, so
        its words must never reach a later pass (or another bank)."""
        async with self._session(job.session_id):
            cursor = await self._cursor(job.session_id)
            span = await self._read(job, cursor, 1)
            await self._advance(job.session_id, cursor, span)

    async def forget(self, session_id: str) -> None:
        """Drop the session's extraction cursor (`session::deleted`): nothing of it is kept."""
        async with self._session(session_id):
            try:
                await self._kv.delete(CURSOR_SCOPE, session_id)
            except SiblingUnavailable as exc:
                log.warning("extraction_cursor_not_dropped", session_id=session_id, error=str(exc))

    def _deleted(self, bank: str) -> bool:
        return self._service.was_deleted(bank)

    async def _extract(self, job: ExtractJob, bank: str) -> int:
        settings = self._service.settings
        cursor = await self._cursor(job.session_id)
        if job.until is not None and job.until in (cursor.entry, *cursor.done):
            log.info("extraction_already_done", session_id=job.session_id, until=job.until)
            return 0  # a redelivered job: its turn was read already
        span = await self._read(job, cursor, settings.extraction_window)
        lines = _dated(span.lines, self._service.clock())
        if not _worth_reading(lines):
            await self._advance(job.session_id, cursor, span)
            return 0  # nothing new, or nothing worth a model call ("ok", "thanks")
        # Read from the lines' own dates: `_dated` gave an undated one the time of this pass.
        origin = _Origin(job, lines, _said_by(span.lines, job.at, bounded=job.until is not None))
        recorded = self._journal.recorded() if self._journal is not None else None
        if recorded is None:
            known = await self._known(bank, lines, origin)
            prompt = system_prompt(settings.extraction_prompt)
            reply = await self._completer.complete(prompt, render_request(lines, known))
        else:  # an earlier attempt decided, then stopped: finish THAT decision, once
            known = await self._shown(bank, recorded.known, origin.caller())
            reply, origin.since = recorded.reply, recorded.at_ms
        decisions = parse_reply(reply, len(known))
        if decisions.prose:  # a refusal, a chat answer: a queue gives up on it early
            words = redact(decisions.prose_words).text
            raise ProseReply(
                f"{PROSE_REPLY}, not the JSON asked for",
                repr(words[:PROSE_SHOWN_CHARS] + ("…" if len(words) > PROSE_SHOWN_CHARS else "")),
            )
        if not decisions.readable and decisions.cut:  # a model looping: say so, not "no JSON"
            raise SiblingUnavailable(
                f"router::complete replied longer than the {MAX_REPLY_CHARS} characters read, "
                "with no JSON in them; the pass will retry"
            )
        if not decisions.readable:  # cut off, an error page: retry rather than lose the turn
            raise SiblingUnavailable("router::complete replied with no JSON; the pass will retry")
        if decisions.cut:
            log.warning(
                "extraction_reply_cut", session_id=job.session_id, read=MAX_REPLY_CHARS,
                unread=decisions.cut,
            )  # fmt: skip
        if recorded is None and self._journal is not None:
            # What was read, not the unread rest: the recorded decision reads the same again.
            await self._record(tuple(memory.id for memory in known), reply[:MAX_REPLY_CHARS])
        if self._deleted(bank):  # deleted while the model was thinking: drop, never recreate
            await self._advance(job.session_id, cursor, span)
            return 0
        if decisions.skipped:
            log.info("extraction_items_skipped", session_id=job.session_id, n=decisions.skipped)
        try:
            written = await self._apply(
                bank, decisions, known, origin, said_terms(lines), echoed_terms(lines)
            )
        except BankNotFound:  # deleted while the pass was writing: the rest is dropped too
            log.info("extraction_bank_deleted", session_id=job.session_id, bank=bank)
            written = 0
        await self._advance(job.session_id, cursor, span)
        log.info(
            "extraction_pass",
            session_id=job.session_id,
            bank=bank,
            messages=len(lines),
            known=len(known),
            written=written,
        )
        return written

    # --- reading ---------------------------------------------------------------------------------

    async def _cursor(self, session_id: str) -> _Cursor:
        """Where the session's passes got to; empty when there is none or the state worker cannot
        say (the pass then reads its own turn again: repeats reinforce, nothing is duplicated)."""
        try:
            raw = await self._kv.get(CURSOR_SCOPE, session_id)
        except SiblingUnavailable as exc:
            log.warning("extraction_cursor_unreadable", session_id=session_id, error=str(exc))
            return _Cursor()
        wrapped = isinstance(raw, dict) and "last_entry_id" not in raw
        if wrapped and isinstance(raw.get("value"), dict):
            raw = raw["value"]  # older state workers wrap the stored value
        if not isinstance(raw, dict):
            return _Cursor()
        entry = raw.get("last_entry_id")
        done = raw.get("done")
        return _Cursor(
            entry if isinstance(entry, str) and entry else None,
            tuple(d for d in done if isinstance(d, str)) if isinstance(done, list) else (),
        )

    async def _advance(self, session_id: str, cursor: _Cursor, span: _Span) -> None:
        """Keep where the pass got to: the cursor moves forward only (a job that ran out of order
        leaves it where a later turn's pass put it), and the turn is remembered as done."""
        done = cursor.done
        if span.until is not None and span.until not in done:
            done = (*done, span.until)[-DONE_KEPT:]
        moved = _Cursor(span.end or cursor.entry, done)
        if moved == cursor:
            return
        value: dict[str, Any] = {"last_entry_id": moved.entry}
        if moved.done:
            value["done"] = list(moved.done)
        try:
            await self._kv.set(CURSOR_SCOPE, session_id, value)
        except SiblingUnavailable as exc:  # the writes landed; a stale cursor only re-reads
            log.warning("extraction_cursor_not_saved", session_id=session_id, error=str(exc))

    async def _read(self, job: ExtractJob, cursor: _Cursor, window: int) -> _Span:
        """The turn's messages (redacted): after the later of the cursor and `job.after`, up to
        `job.until` (to the end of the session when the job has none).

        When the cursor is not met before `until`, the walk goes on to find it: a cursor past
        the turn (a later turn's job ran first) must not move back. An `until` that is not in
        the session (trimmed, another branch) reads nothing: what follows is other turns'."""
        # `(position, line)`, newest kept; the person's lines also on their own, so a long
        # agentic turn (hundreds of assistant steps) cannot push what they said out of the scan.
        kept: deque[tuple[int, Line]] = deque(maxlen=MAX_SCANNED)
        said: deque[tuple[int, Line]] = deque(maxlen=MAX_SCANNED)
        newest: str | None = None
        starts = {entry for entry in (cursor.entry, job.after) if entry}
        met = cursor.entry is None
        reached = beyond = False
        position = 0
        async for entry_id, message in self._entries(job.session_id):
            if reached:  # only looking for the cursor now
                if entry_id == cursor.entry:
                    met = beyond = True
                    break
                continue
            if entry_id in starts:
                kept.clear()  # only what follows is this turn's
                said.clear()
                newest = None
                met |= entry_id == cursor.entry
            else:
                newest = entry_id
                line = self._line(entry_id, message)
                if line is not None:
                    kept.append((position, line))
                    if line.role == "user":
                        said.append((position, line))
                    position += 1
            if entry_id == job.until:
                reached = True
                if met:
                    break
        if not met:
            log.info("extraction_cursor_not_found", session_id=job.session_id, cursor=cursor.entry)
        if job.until is not None and not reached:
            log.warning("extraction_until_not_found", session_id=job.session_id, until=job.until)
            return _Span([], None, job.until)
        end = cursor.entry if beyond else job.until or newest
        scanned = [line for _, line in sorted(dict([*said, *kept]).items())]
        return _Span(_window(scanned, window), end, job.until)

    async def _entries(self, session_id: str) -> AsyncIterator[tuple[str, object]]:
        """`(entry_id, message)` of the session, oldest first, page after page."""
        page: str | None = None
        for _ in range(MAX_PAGES):
            items, page = await self._transcript.page(session_id, page)
            for item in items:
                entry_id = item.get("entry_id") if isinstance(item, dict) else None
                if isinstance(entry_id, str):
                    yield entry_id, item.get("message")
            if page is None:
                return

    @staticmethod
    def _line(entry_id: str, message: object) -> Line | None:
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return None
        text = message_text(message).strip()
        if not text or text.startswith(MEMORY_PREFIX):
            return None
        # As one line, redacted before and after the join: every use of a line joins its lines
        # (the excerpt, the context window, whose cut could leave a token's key behind).
        return Line(
            str(message["role"]),
            redact_line(text)[0],
            _at_ms(message),
            entry_id=entry_id,
            model=_model_of(message),
        )

    async def _known(self, bank: str, lines: list[Line], origin: _Origin) -> list[Memory]:
        """What the bank already holds about the excerpt: recall's top hits for its user side,
        for the speaker (with subject scoping, no one else's memory is shown, restated or
        corrected)."""
        query = " ".join(line.text for line in lines if line.role == "user")
        request = RecallRequest(
            bank=bank,
            query=query or " ".join(line.text for line in lines),
            limit=KNOWN_SHOWN,
            subject=origin.subject,
        )
        try:
            found = await respond(self._service, "memory::recall", request, origin.caller())
        except BankNotFound:  # a bank this pass is about to create holds nothing yet
            return []
        assert isinstance(found, RecallResponse)
        return [hit.memory for hit in found.memories]

    async def _shown(self, bank: str, ids: tuple[str, ...], caller: Caller) -> list[Memory]:
        """The memories a recorded decision was made against, read again by id (tombstones
        included: they were in the bank when it was made)."""
        shown: list[Memory] = []
        for memory_id in ids:
            found = await respond(
                self._service, "memory::get", GetRequest(bank=bank, id=memory_id), caller
            )
            assert isinstance(found, GetResponse)
            shown.append(found.memory)
        return shown

    async def _record(self, known: tuple[str, ...], reply: str) -> None:
        """Journal the decision, then let the clock pass its millisecond: every write of this
        pass is stamped after it, every write before it at or before it."""
        assert self._journal is not None
        at_ms = self._service.clock()
        await self._journal.record(Decision(reply, known, at_ms))
        while self._service.clock() <= at_ms:
            await asyncio.sleep(0.001)

    def _written_since(
        self, bank: str, text: str, subject: str | None, since: int | None
    ) -> Memory | None:
        """The memory holding `text` about `subject`, when it changed after a recorded decision
        (the attempt that recorded it wrote it before stopping): that write is not made again."""
        if since is None:
            return None
        held = self._service.store.find(bank)
        found = held.match_text(text, subject) if held is not None else None
        return found if found is not None and found.updated_at > since else None

    # --- writing ---------------------------------------------------------------------------------

    async def _apply(
        self,
        bank: str,
        decisions: Decisions,
        known: list[Memory],
        origin: _Origin,
        said: frozenset[str],
        echoed: frozenset[str],
    ) -> int:
        """Restatements, then corrections, then new facts, within `max_memories_per_turn`
        writes; then rules (their own limit)."""
        settings = self._service.settings
        restates, adds = _split_known(decisions, known, said, echoed)
        budget = settings.max_memories_per_turn
        written = 0
        for index in restates:
            memory = known[index]
            again = Add(memory.text, memory.entities, memory.tags)
            # A general memory said again by this speaker is reinforced, never copied as theirs
            # (another person's, in an unscoped bank, is another memory: theirs is written).
            scope = None if memory.subject is None else origin.subject
            if written < budget and await self._save(bank, again, origin, scope):
                written += 1  # (a pinned memory is never touched: `_save` declines it)
        corrected: dict[int, str] = {}  # the memories retired, by the text that retired them
        # What the corrections wrote, by text: an add of it is the same fact, and so is a second
        # correction to it (once is the fact, not a corroboration) — which still retires the
        # memory IT names when that says what the first one retired did (the bank held the old
        # fact twice in other words).
        landed: dict[str, Memory] = {}
        for correction in decisions.corrections:
            repeat = _fact_key(correction.new.text) in landed
            if (repeat or written < budget) and await self._correct(
                bank, correction, known, corrected, origin, said, echoed, landed
            ):
                written += 0 if repeat else 1
        adds = [add for add in adds if _fact_key(add.text) not in landed]
        room = max(budget - written, 0)
        if len(adds) > room:
            log.info("extraction_capped", bank=bank, dropped=len(adds) - room, cap=budget)
        for add in adds[:room]:
            if await self._save(bank, add, origin):
                written += 1
        rules = [
            rule
            for rule in decisions.rules
            if not _not_the_users(rule, said, echoed, origin.said_language)
        ]
        if settings.rule_learning_enabled and rules:
            if origin.subject is not None and await self._scoped(bank):
                # Kept as memories: within what the pass may still write.
                room = max(budget - written, 0)
                written += await self._keep_theirs(bank, rules, origin, room)
            else:
                written += await self._learn(bank, rules, origin.caller())
        return written

    async def _scoped(self, bank: str) -> bool:
        await self._service.ready_bank(bank)  # replayed already by this pass's recall
        found = self._service.store.find(bank)
        chosen = (
            self._service.bank_settings(found)
            if found is not None
            else self._service.settings.bank_defaults()
        )
        return chosen.subject_scoping

    async def _keep_theirs(self, bank: str, rules: list[str], origin: _Origin, room: int) -> int:
        """A speaker's standing instructions in a bank partitioned by subject: the `learned`
        rule reaches every turn of the bank, so what one person asked for ("never mention my
        divorce") would be read in everyone's; kept as a preference about them instead, at most
        `room` of them (memories: `max_memories_per_turn` counts them)."""
        written = 0
        for rule in [rule for rule in rules if not _carries_secret(rule)][:MAX_RULES_PER_TURN]:
            if written >= room:
                break
            if await self._save(bank, Add(rule, category="preference"), origin):
                written += 1
        return written

    async def _correct(
        self,
        bank: str,
        correction: Correct,
        known: list[Memory],
        corrected: dict[int, str],
        origin: _Origin,
        said: frozenset[str],
        echoed: frozenset[str],
        landed: dict[str, Memory],
    ) -> bool:
        """Save the corrected text (once: `landed` holds what this pass's corrections saved, by
        normalized text) and retire the old memory by it; False when nothing was written. A
        pinned memory is never rewritten by extraction; a second correction of the same memory
        keeps its text as a new fact. A correction the user's words do not carry, or
        whose text is another known memory (a model pointing at the wrong ref), retires
        nothing: it would replace a good memory by an unrelated one."""
        old, new = known[correction.ref], correction.new
        if (
            old.pinned
            or _carries_secret(new.text)
            or not the_users(new.text, said, echoed, inferred=new.inferred)
        ):
            return False
        others = {_fact_key(m.text) for i, m in enumerate(known) if i != correction.ref}
        if _fact_key(new.text) in others:
            return False
        key = _fact_key(new.text)
        saved = landed.get(key)
        if saved is None:
            # A general fact one speaker corrects stays general: it must not vanish for everyone
            # else and reappear as that speaker's own.
            scope = None if _general(new) or old.subject is None else origin.subject
            saved = await self._save(bank, new, origin, scope)
            if saved is None:
                return False
            landed[key] = saved
        if correction.ref in corrected or saved.id == old.id or not saved.live:
            return True
        # A second memory retired by the same text must share a word with one it retired: an
        # obeyed "delete all my memories" corrected every shown memory with one text.
        before = [known[i] for i, by in corrected.items() if by == key]
        if before and not any(_content(old.text) & _content(m.text) for m in before):
            log.info("extraction_correction_unrelated", bank=bank, id=old.id)
            return True
        corrected[correction.ref] = key
        # The revision the model was shown: a person's edit during the model call wins.
        request = SupersedeRequest(
            bank=bank,
            id=old.id,
            superseded_by=saved.id,
            reason=correction.reason,
            expected_revision=old.revision,
        )
        try:
            await respond(self._service, "memory::supersede", request, origin.caller())
        except Conflict as exc:  # edited or retired meanwhile (a person, consolidation): moot
            log.info("extraction_correction_moot", bank=bank, id=old.id, error=str(exc))
        return True

    async def _save(
        self, bank: str, fact: Add, origin: _Origin, subject: str | _Own | None = _OWN
    ) -> Memory | None:
        """Save one fact; None when extraction must not write it: its text matches a memory a
        person pinned or retired (the save refuses an automatic caller that: extraction never
        edits the one nor revives the other), or the model's item does not pass validation
        (skipped, the rest of the pass goes on). A bank deleted meanwhile raises `BankNotFound`.
        `subject`: whom the memory is about; by default the fact's own reading (general, else
        the speaker)."""
        if isinstance(subject, _Own):
            subject = None if _general(fact) else origin.subject
        text, entities = self._held_text(bank, fact.text, subject), fact.entities
        if (again := self._written_since(bank, text, subject, origin.since)) is not None:
            return again
        if _ABOUT_USER.search(text) and "user" not in entities:
            entities = ("user", *entities)[:MAX_LABELS]  # the cap the save would apply
        context, intention = fact.context or origin.context, origin.intention_of(fact)
        if subject is None and origin.subject is not None:
            # A general memory is everyone's and outlives the speaker's erasure: the window and
            # the message of their turn are their words (their health, their family), which
            # rode along to every other person's recall and stayed after forget-subject.
            context = intention = None
        request = SaveRequest(
            bank=bank,
            text=text,
            entities=list(entities),
            tags=list(fact.tags),
            session_id=origin.session_id,
            context=context,
            intention=intention,
            subject=subject,
            category=fact.category,
        )
        try:
            response = await respond(self._service, "memory::save", request, origin.caller(fact))
        except Conflict as err:
            log.info("extraction_item_untouchable", bank=bank, error=str(err))
            return None
        except InvalidInput as err:
            log.info("extraction_item_invalid", bank=bank, error=str(err))
            return None
        assert isinstance(response, SaveResponse)
        return response.memory

    def _held_text(self, bank: str, text: str, subject: str | None) -> str:
        """`text`, or the text of the live memory about `subject` that says it up to its closing
        punctuation: saved so, it reinforces that memory (the store tells "…tea." and "…tea"
        apart, and a model drops or adds a full stop as it likes)."""
        held = self._service.store.find(bank)
        if held is None or held.match_text(text, subject) is not None:
            return text
        stem = text.rstrip(_CLOSING)
        for variant in (stem, *(stem + mark for mark in ".!。！")):
            found = held.match_text(variant, subject) if variant != text else None
            if found is not None and found.live:
                return found.text
        return text

    async def _learn(self, bank: str, rules: list[str], caller: Caller) -> int:
        """Append new standing instructions to the `learned` rule, guarded by its revision: a
        person editing the file meanwhile is never overwritten (the merge is redone on theirs)."""
        cleaned = [rule for rule in rules if not _carries_secret(rule)]
        for _ in range(LEARN_ATTEMPTS):
            held = await self._rules(bank, caller)
            existing = next((rule for rule in held if rule.name == LEARNED_RULE), None)
            others = [rule.content for rule in held if rule.name != LEARNED_RULE]
            merged = merge_learned(existing.content if existing else "", cleaned, elsewhere=others)
            if merged is None:
                return 0
            request = RuleSetRequest(
                bank=bank,
                name=LEARNED_RULE,
                content=merged,
                expected_revision=existing.revision if existing else "",
            )
            try:
                await respond(self._service, "memory::rule::set", request, caller)
            except InvalidInput as err:  # the learned rule is full: a person should prune it
                log.warning("learned_rule_not_extended", bank=bank, error=str(err))
                return 0
            except Conflict:  # changed under us (a hand edit): merge into what it says now
                continue
            return 1
        log.warning("learned_rule_kept_changing", bank=bank)
        return 0

    async def _rules(self, bank: str, caller: Caller) -> list[Rule]:
        try:
            request = RuleListRequest(bank=bank)
            found = await respond(self._service, "memory::rule::list", request, caller)
        except BankNotFound:
            return []
        assert isinstance(found, RuleListResponse)
        return list(found.rules)


def _dated(lines: list[Line], now_ms: int) -> list[Line]:
    """Every line with a date: one its message did not carry takes its turn's (the previous
    dated message's, else the next one's, else now: the turn just finished). Shown undated,
    "yesterday" could not be made absolute, and the model would date it from its own guess."""
    if all(line.at_ms is not None for line in lines):
        return lines
    known = [line.at_ms for line in lines if line.at_ms is not None]
    at = known[0] if known else now_ms
    dated: list[Line] = []
    for line in lines:
        at = line.at_ms if line.at_ms is not None else at
        dated.append(dataclasses.replace(line, at_ms=at))
    return dated


def _worth_reading(lines: Sequence[Line]) -> bool:
    """Whether the new messages may hold something to remember: enough text in all, or a user
    message of a few words (a fact can be short: "I'm vegan." and "Noted." are 16 characters)."""
    if sum(len(line.text) for line in lines) >= MIN_EXCERPT_CHARS:
        return True
    return any(
        line.role == "user" and len(line.text.split()) >= MIN_STATEMENT_WORDS for line in lines
    )
