"""Extraction, the pure part: the prompt, what the model is shown, and how its reply is read.

The reply contract (prompt `extraction-v1`, `prompts/extraction-v1.md`) is one JSON object
`{"memories": [op, …], "rules": [str, …]}` with ops `add {text, entities, tags, confidence?}`,
`restate {ref}` and `correct {ref, text, entities, tags, reason, confidence?}`; refs are the
`m<N>` labels of the known memories shown; `confidence: "inferred"` marks a fact the model
derived rather than read (absent: `extracted`); an add or correct may carry the association
lanes `context` (the situation it came up in) and `intention` (what the user was trying to do),
under any prompt version — absent, the extractor writes them from the window itself. Parsing
is lenient — code fences, prose around the JSON, a reasoning model's thinking before it, comments
and trailing commas in it, a bare list (= memories), the object wrapped, keys in any case or the
turn's language, op synonyms; failing all else, curly quotes, bare keys, the JSON encoded twice
— and never raises: what cannot be read is skipped and counted. A reply cut off inside its JSON
is not read at all (`readable` False: the pass is retried); nor one in prose (`prose`: a
refusal, which a queue gives up on early), unless all it says is that there is nothing to keep
(`null`, "Nothing to remember.": the empty answer). Only the first `MAX_REPLY_CHARS` of a reply
are read (`cut` counts the rest).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from memory_worker.core.bank_settings import MEMORY_CATEGORIES
from memory_worker.core.lanes import goal_text
from memory_worker.core.models import Memory, local_datetime
from memory_worker.core.payload import utf8_safe
from memory_worker.core.redact import redact
from memory_worker.core.transitions import MAX_LABEL_CHARS, MAX_LABELS, MAX_LANE_CHARS

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_REPLY_CHARS",
    "PROMPT_VERSION",
    "PROMPT_VERSIONS",
    "Add",
    "Correct",
    "Decisions",
    "Line",
    "parse_reply",
    "render_request",
    "system_prompt",
]

PROMPT_VERSIONS = ("extraction-v1", "extraction-v2")  # files in prompts/; old ones are kept
PROMPT_VERSION = "extraction-v2"  # the default (`extraction_prompt` chooses)
MAX_MESSAGE_CHARS = 2000  # one message's share of the excerpt; longer ones are cut (marked)
HEAD_SHARE = 0.6  # of a cut message's share, what its start keeps (its end the rest)
WORD_SLACK = 80  # how far a cut moves back (or on) to fall between two words
MAX_TEXT_CHARS = 300
# What of a reply is read: a real one is a few KB; past this it is a model looping or an
# endpoint answering garbage, and reading a megabyte of it held the event loop for seconds.
MAX_REPLY_CHARS = 256 * 1024
# A reply that is only "nothing" said without the JSON (`null`, `None`, "Nothing to
# remember.", "Nothing in this conversation is worth remembering."): the answer asked for, not
# a refusal. Whole replies only, one sentence of these forms and no more (quotes, backticks and
# a closing stop aside): "Nothing to remember, but …" or "… except her name." is prose still.
_EN_PLACE = r"(?: here| (?:in|from) (?:this|the) (?:conversation|exchange|chat|transcript|turn))?"
_EN_WORTH = (
    r"(?:worth (?:remembering|saving|keeping|storing|memorizing|noting)"
    r"|to (?:remember|save|keep|store|extract|memorize|note))"
)
_PT_PLACE = r"(?: aqui| [nd](?:esta|essa|a) conversa)?"
_PT_VERB = r"(?:lembrar|guardar|memorizar|extrair|salvar|registrar)"
_PT_WORTH = (
    rf"(?:(?:a|para) {_PT_VERB}|(?:que )?(?:vale|valha) a pena {_PT_VERB}"
    r"|digno de (?:ser )?(?:lembrado|guardado|memorizado|registrado))"
)
_NOTHING = re.compile(
    "|".join(
        (
            r"null|none|nothing|nada|no (?:new )?memories|nenhuma (?:nova )?mem[oó]ria",
            rf"nothing(?: new)?{_EN_PLACE}(?: is)? {_EN_WORTH}{_EN_PLACE}",
            rf"there(?: is|'s) nothing(?: new)? {_EN_WORTH}{_EN_PLACE}",
            rf"(?:there are )?no (?:new )?(?:memories|facts)(?: are)? {_EN_WORTH}{_EN_PLACE}",
            rf"(?:this|the) (?:conversation|exchange|chat) (?:contains|has) nothing(?: new)? "
            rf"{_EN_WORTH}",
            rf"i (?:found|see|have) nothing(?: new)? {_EN_WORTH}{_EN_PLACE}",
            rf"nada(?: de novo| novo)?{_PT_PLACE} {_PT_WORTH}{_PT_PLACE}",
            rf"n[ãa]o (?:h[áa]|tem|existe) nada(?: de novo| novo)? {_PT_WORTH}{_PT_PLACE}",
            rf"nenhuma (?:nova )?mem[oó]ria (?:a|para) {_PT_VERB}{_PT_PLACE}",
            rf"(?:esta|essa|a) conversa n[ãa]o (?:tem|cont[ée]m) nada(?: de novo| novo)? "
            rf"{_PT_WORTH}",
        )
    )
)
_NOTHING_MAX_CHARS = 120  # longer than any of those forms: longer replies say something else
EXTRACTED_CATEGORIES = frozenset(MEMORY_CATEGORIES)
_CONTRACT = frozenset({"memories", "rules"})  # the reply object's keys
_ITEM = frozenset({"op", "text", "memory", "fact", "content"})  # one op's keys (see `_add`)
_JSON_ESCAPES = frozenset('"\\/bfnrtu')  # what may follow a backslash in a JSON string
_COMMENT_AFTER = re.compile(r"[\s,\[\]{}]")  # what a comment in a reply's JSON follows
_MAY_CLEAN = re.compile(r"//|/\*|\\|,\s*[\]}]")  # what `_cleaned` may change, anywhere
_CURLY_QUOTES = "\u201c\u201d\u201e"  # “ ” „: a string's quotes in a loose reading
_BARE_KEY = re.compile(r"([^\W\d]\w*)\s*:")  # `op:` (any script's letters: `memórias:`)
# Where an object or an array may start: a bracket followed by what can follow it in JSON, or
# by the end (a reply cut off there). Any other bracket fails at its next character, and each
# failure costs an exception: a megabyte of `{{{{` was a million of them.
_VALUE_START = re.compile(r'\{(?=\s*(?:["}]|\Z))|\[(?=\s*(?:[\[\]{"0-9tfnNI-]|\Z))')
# `_decode_at`'s first window, and how near its end a failure may be the window's own (a cut
# `tru|e`, `-Infinit|y`, `\u12|34`) rather than the text's.
FIRST_WINDOW = 256
WINDOW_MARGIN = 16
# A reasoning model's thinking, written into the reply by a server that does not split it off
# (llama.cpp, vLLM, older Ollama): it drafts JSON too, and the answer is what follows it. A
# chat template that opens the block itself leaves only its close in the reply.
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_THINKING_END = re.compile(r"</(?:think|thinking|reasoning)>", re.I)
_THINKING_START = re.compile(r"<(?:think|thinking|reasoning)>", re.I)
# gpt-oss (the "harmony" format): `<|channel|>analysis<|message|>…<|end|><|start|>assistant
# <|channel|>final<|message|>{…}<|return|>`; its analysis drafts JSON like any thinking.
_FINAL_CHANNEL = re.compile(r"<\|channel\|>\s*final\b.*?<\|message\|>", re.S)
_HARMONY_TOKEN = re.compile(r"<\|[a-z_]+\|>")
_OP_KEYS = ("op", "action", "event", "operation", "type")
_REF_KEYS = ("ref", "id", "memory_id")
_REF = re.compile(r"\s*\[?\s*[mM]?(\d+)\s*\]?\s*")
_REF_LINE = re.compile(r"\s*\[?[mM](\d+)\]?\s*:")  # `m3: <its text>`, copied whole
_RULE_KEYS = ("text", "rule", "instruction", "content")  # where an instruction object holds it
_OPS = {
    "add": "add",
    "new": "add",
    "create": "add",
    "restate": "restate",
    "reinforce": "restate",
    "same": "restate",
    "repeat": "restate",
    "correct": "correct",
    "update": "correct",
    "supersede": "correct",
    "replace": "correct",
    # A model answering a Portuguese turn may write the contract in Portuguese too.
    "adicionar": "add",
    "novo": "add",
    "nova": "add",
    "reafirmar": "restate",
    "repetir": "restate",
    "corrigir": "correct",
    "atualizar": "correct",
    "substituir": "correct",
}
# Other names a model gives the contract's keys (its own word for them, or the turn's language):
# read as the contract's, which wins when both are there.
_KEY_ALIASES = {
    "facts": "memories",
    "memorias": "memories",
    "memórias": "memories",
    "fatos": "memories",
    "factos": "memories",
    "regras": "rules",
    "instructions": "rules",
    "instrucoes": "rules",
    "instruções": "rules",
    "texto": "text",
    "fato": "text",
    "facto": "text",
    "entidades": "entities",
    "etiquetas": "tags",
    "motivo": "reason",
    "razao": "reason",
    "razão": "reason",
    "categoria": "category",
}


@functools.cache
def system_prompt(version: str = PROMPT_VERSION) -> str:
    """The prompt file without its design notes (the leading HTML comment)."""
    if version not in PROMPT_VERSIONS:
        raise ValueError(f"unknown extraction prompt {version!r}")
    text = resources.files(__package__).joinpath(f"prompts/{version}.md").read_text("utf-8")
    return re.sub(r"\A\s*<!--.*?-->\s*", "", text, flags=re.S)


@dataclass(frozen=True, slots=True)
class Line:
    """One transcript message as the model sees it (already redacted); `entry_id` and `model`
    (what answered, on assistant messages) are provenance, never shown."""

    role: str
    text: str
    at_ms: int | None
    entry_id: str | None = None
    model: str | None = None


def _stamp(ms: int | None) -> str:
    if ms is None:
        return "[date unknown]"
    return local_datetime(ms).strftime("[%Y-%m-%d %H:%M]")


def render_request(lines: list[Line], known: list[Memory]) -> str:
    """The user message: the known memories with refs, then the new messages with their dates."""
    # Redacted too: a memory edited on disk by hand loads as written, and what leaves the
    # worker for the model must carry no secret whatever its source.
    shown = [
        f"m{i}: {redact(' '.join(memory.text.split())).text}{' [pinned]' if memory.pinned else ''}"
        for i, memory in enumerate(known, start=1)
    ]
    excerpt = []
    for line in lines:
        # Redacted again once joined: a key and its value on two lines (`Authorization: Bearer`
        # then the token) read as one assignment on one line, and must not reach the model so.
        text = _excerpt(redact(" ".join(line.text.split())).text)
        excerpt.append(f"{_stamp(line.at_ms)} {line.role}: {text}")
    return (
        "KNOWN MEMORIES:\n"
        + ("\n".join(shown) if shown else "(none)")
        + "\n\nNEW MESSAGES:\n"
        + "\n".join(excerpt)
    )


def _excerpt(text: str) -> str:
    """A message within its share of the request: past `MAX_MESSAGE_CHARS`, its start and its
    end (`HEAD_SHARE` of the budget, then the rest), each cut between words (never half a
    redaction marker), the middle marked. Kept from its start only, a log pasted and then
    "anyway, I moved to Porto" lost the fact, and an answer its closing summary."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    head = text[: int(MAX_MESSAGE_CHARS * HEAD_SHARE)]
    tail = text[len(text) - (MAX_MESSAGE_CHARS - len(head)) :]
    if (space := head.rfind(" ", len(head) - WORD_SLACK)) > 0:
        head = head[:space]
    if 0 <= (space := tail.find(" ", 0, WORD_SLACK)) < len(tail) - 1:
        tail = tail[space + 1 :]
    return f"{head} [… {len(text) - len(head) - len(tail)} characters cut …] {tail}"


@dataclass(frozen=True, slots=True)
class Add:
    text: str
    entities: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    inferred: bool = False  # derived by the model rather than stated in the conversation
    category: str = "fact"  # the model's kind for it; anything it cannot name is a fact
    general: bool = False  # not about the person speaking (a shared fact: no subject)
    context: str | None = None  # the model's summary of the situation (association lane)
    intention: str | None = None  # the model's reading of what the user was trying to do


@dataclass(frozen=True, slots=True)
class Correct:
    ref: int  # index into the known memories (0-based)
    new: Add
    reason: str


@dataclass
class Decisions:
    adds: list[Add] = field(default_factory=list)
    restates: list[int] = field(default_factory=list)  # indices into the known memories
    corrections: list[Correct] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    skipped: int = 0  # items that could not be read
    readable: bool = True  # False: no JSON in the reply at all (cut off, an error page, prose)
    # An unreadable reply's words when they made no attempt at the JSON (a refusal, a chat
    # answer): asking again is unlikely to help, as it is for a reply cut off mid-way.
    prose_words: str = ""
    cut: int = 0  # characters of the reply past `MAX_REPLY_CHARS`, left unread

    @property
    def empty(self) -> bool:
        return not (self.adds or self.restates or self.corrections or self.rules)

    @property
    def prose(self) -> bool:
        return bool(self.prose_words)


def _walk(
    text: str, *, loose: bool = False, comments: bool = True
) -> Iterator[tuple[int, str, str]]:
    """The one lenient reader of a reply's JSON: each character of `text` as JSON reads it,
    `(where, what to write for it, kind)`. Kinds: `code` (outside strings), `open` and `close`
    (a string's quotes), `text` (inside one), `drop` (a backslash JSON does not know: markdown's
    `my\\_notes.md`, `\\$40`, which some models write into JSON and which failed the whole
    object, every fact of it lost). Comments (`// …` to the line's end, `/* … */`) are not
    walked: a model annotates its JSON so, and read as text one failed the object it was in and
    only the `[]` after it was found. A `//` or `/*` counts only after a space, a comma or a
    bracket (never `https://` in prose). Text already walked is walked again with `comments`
    False: a comment's removal can bring a `/*` next to a bracket.

    `loose` reads what is not JSON but says one thing only, tried when nothing else was read:
    curly quotes (“key”: “value”, as a chat front end or a word processor "smartens" them) as a
    string's quotes (a straight `"` inside one escaped), and a key left bare (`{op: "add"}`,
    JavaScript's object syntax) quoted."""
    in_string = escaped = False
    closers = '"'  # what ends the string being read
    after_open = False  # in loose mode: only blanks since a `{` or a `,` (a bare key may start)
    at, size = 0, len(text)
    while at < size:
        char = text[at]
        if in_string:
            if escaped:
                escaped = False
                if char not in _JSON_ESCAPES:
                    yield at - 1, "", "drop"  # (its backslash, taken back)
            elif char == "\\":
                escaped = True
            elif char in closers:
                in_string = False
                yield at, '"', "close"
                at += 1
                continue
            elif char == '"':  # loose: a straight quote inside a curly-quoted string
                yield at, '\\"', "text"
                at += 1
                continue
            yield at, char, "text"
            at += 1
            continue
        if char == '"' or (loose and char in _CURLY_QUOTES):
            in_string, closers = True, '"' if char == '"' else _CURLY_QUOTES
            yield at, '"', "open"
        elif (
            comments
            and text.startswith(("//", "/*"), at)
            and _COMMENT_AFTER.match(text[at - 1] if at else " ")
        ):
            closing = "\n" if text[at + 1] == "/" else "*/"
            end = text.find(closing, at + 2)
            at = size if end < 0 else end + (0 if closing == "\n" else len(closing))
            continue
        elif loose and after_open and (key := _BARE_KEY.match(text, at)) is not None:
            yield at, f'"{key.group(1)}"', "code"
            at = key.end(1)
            after_open = False
            continue
        else:
            yield at, char, "code"
        if loose and not char.isspace():
            after_open = char in "{,"
        at += 1


def _cleaned(text: str, *, loose: bool = False) -> str:
    """`text` as `_walk` reads it, with every comma that closes nothing dropped (`[a, b,]`,
    `{"k": 1,}`): small models write JSON so, and the whole reply must not be lost to it."""
    if not (loose or _MAY_CLEAN.search(text)):
        return text  # no comment, backslash or trailing comma anywhere: nothing to do
    out: list[str] = []
    comma = -1  # where in `out` a comma is that only blanks (or comments) have followed
    for _, char, kind in _walk(text, loose=loose):
        if kind == "drop":
            out.pop()
            continue
        if kind == "code":
            if char in "]}" and comma >= 0:
                del out[comma]
            if char == ",":
                comma = len(out)
            elif not char.isspace():
                comma = -1
        else:
            comma = -1
        out.append(char)
    return "".join(out)


def _answer(reply: str) -> str:
    """The reply without a reasoning model's thinking."""
    if "<|channel|>" in reply:  # gpt-oss's channels, left in by a server that did not parse them
        finals = list(_FINAL_CHANNEL.finditer(reply))
        # The answer is the final channel's message; with none, it was cut off while thinking.
        reply = _HARMONY_TOKEN.sub(" ", reply[finals[-1].end() :]) if finals else ""
    reply = _THINKING.sub(" ", reply)
    ends = list(_THINKING_END.finditer(reply))
    reply = reply[ends[-1].end() :] if ends else reply
    opened = _THINKING_START.search(reply)  # never closed: cut off while thinking, no answer
    return reply[: opened.start()] if opened else reply


def _folded(value: dict[Any, Any]) -> dict[str, Any]:
    """`value` with its keys lowercased, and other names for them read as the contract's: a
    model writes `Memories`, `Text`, `OP` or `memórias` as readily as the contract's spelling,
    and a key missed loses the turn's facts without a trace."""
    folded: dict[str, Any] = {}
    for key, item in value.items():
        folded.setdefault(str(key).strip().lower(), item)
    for key, item in list(folded.items()):
        if key in _KEY_ALIASES:
            folded.setdefault(_KEY_ALIASES[key], item)
    return folded


def _json_values(reply: str) -> list[Any]:
    """Every top-level JSON object or array found in the reply's answer, in order (fences and
    prose around them ignored); else what a looser reading finds (`_walk`'s `loose`: curly
    quotes, bare keys), else the answer encoded twice (a JSON string holding the JSON: as a
    string, it was searched for brackets and at best its inner `[]` found)."""
    answer = _answer(reply)
    found = _values(answer)
    if any(found):
        return found
    loose = _values(answer, loose=True)
    if any(loose):
        return loose
    inner = _encoded_twice(answer)
    if inner is not None and any(twice := _values(inner)):
        return twice
    return found


def _encoded_twice(text: str) -> str | None:
    """The first JSON string in `text`, when it is one that holds an object or an array."""
    start = text.find('"')
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder(strict=False).raw_decode(text, start)
    except ValueError:
        return None
    return value if isinstance(value, str) and value.strip()[:1] in ("{", "[") else None


def _values(text: str, *, loose: bool = False) -> list[Any]:
    """Every top-level JSON object or array in `text`, read as `_cleaned` reads it. A reply cut
    off inside one (it ran out before the value closed: a token limit the server did not
    report) gives that value with its whole items only (`_whole_items`), and nothing when it
    has none: read from within, the cut value's entity lists were taken for a list of facts,
    and a cut op's fields for a whole op. A raw line break or tab inside a string (a model
    writing a long fact over two lines) is read as part of it, as strict JSON would not."""
    text = _cleaned(text, loose=loose)
    end_of_text = len(text.rstrip())
    decoder = json.JSONDecoder(strict=False)
    found: list[Any] = []
    index = 0
    while (opens := _VALUE_START.search(text, index)) is not None:
        start = opens.start()
        try:
            value, end, failure = _decode_at(decoder, text, start)
        except ValueError:
            index = start + 1
            continue
        except RecursionError:  # `[[[[…` past the decoder's depth: a model looping, no answer
            return found if any(found) else []
        if failure is not None:
            if end >= end_of_text or failure.startswith("Unterminated string"):
                # Cut off: what follows is inside this value. Its whole items are kept.
                salvaged = _whole_items(text[start:])
                return [*found, salvaged] if salvaged is not None else found if any(found) else []
            index = start + 1
            continue
        found.append(_folded(value) if isinstance(value, dict) else value)
        index = end
    if not any(found):  # nothing, or only the `[]` inside a reply that is not JSON
        literal = _python_literal(text)
        return found if literal is None else [literal]
    return found


def _decode_at(decoder: json.JSONDecoder, text: str, start: int) -> tuple[Any, int, str | None]:
    """`decoder.raw_decode(text, start)` as `(value, end, None)`, or `(None, where, why)` when it
    fails there. Read in a window from `start` that grows fourfold until the answer is the
    text's: a `JSONDecodeError` counts the lines of all its document before the failure, so
    read in place, each of the brackets `_values` tries cost the text before it, and a hostile
    or looping megabyte of `{{{{` held the event loop some ten minutes. A window's failure is
    the text's unless it is at the window's end or is an unterminated string."""
    size = FIRST_WINDOW
    while True:
        window = text[start : start + size]
        try:
            value, end = decoder.raw_decode(window)
        except json.JSONDecodeError as err:
            if start + size >= len(text) or (
                err.pos < len(window) - WINDOW_MARGIN
                and not err.msg.startswith("Unterminated string")
            ):
                return None, start + err.pos, err.msg
            size *= 4
            continue
        return value, start + end, None


def _whole_items(cut: str) -> Any:
    """A JSON value the reply ran out in, up to the last whole item of its own list or of a list
    it holds (`"memories": [op, op, <cut>`, `"rules": ["…", <cut>`), closed there and read; None
    when no item was whole. A cut op is never read: its missing fields (`"about"`, the rest of
    its text) could make another fact of it."""
    stack: list[str] = []
    whole: tuple[int, str] | None = None  # where the last whole item ends, and what closes there
    for at, char in _marks(cut):
        if char in "{[":
            stack.append(char)
            continue
        if char != '"' and (not stack or stack.pop() != ("{" if char == "}" else "[")):
            return None
        if len(stack) <= 2 and stack[-1:] == ["["]:
            whole = (at + 1, "".join("]" if c == "[" else "}" for c in reversed(stack)))
    if whole is None:
        return None
    try:
        value = json.loads(cut[: whole[0]] + whole[1], strict=False)
    except (ValueError, RecursionError):
        return None
    return _folded(value) if isinstance(value, dict) else value


def _marks(text: str) -> Iterator[tuple[int, str]]:
    """Where JSON's brackets open and close in `text` (already `_cleaned`), and where its
    strings end (`"`)."""
    for at, char, kind in _walk(text, comments=False):
        if kind == "close" or (kind == "code" and char in "{[]}"):
            yield at, char


def _python_literal(text: str) -> Any:
    """The reply as a Python literal (`{'memories': [...], 'rules': []}`, `True`, `None`): what a
    small model writes when it mixes JSON up with Python. None when it is not one."""
    opens = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not opens:
        return None
    start = min(opens)
    end = text.rfind("}" if text[start] == "{" else "]")
    try:
        with warnings.catch_warnings():  # `\d` in a string: not the reply's fault, nor a log line
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text[start : end + 1])
    # SystemError too: CPython 3.11's parser can raise it ("AST constructor recursion depth
    # mismatch") after a deep nesting; a reply it cannot read is simply not read.
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, SystemError):
        return None
    if isinstance(value, dict):
        return _folded(value)
    return value if isinstance(value, list) else None


def _strings(raw: object, limit: int = MAX_LABELS) -> tuple[str, ...]:
    """Labels a model suggested, kept only when they are labels (short, one line): a bad one is
    dropped here rather than failing the whole pass at the store's validation. Not lowercased
    here: the store redacts first (a key's shape depends on its case), then lowercases."""
    if isinstance(raw, str):  # "porto, ana": a model's list written as one string
        raw = raw.split(",")
    if not isinstance(raw, list):
        return ()
    out = [
        " ".join(item.split())
        for item in raw
        if isinstance(item, str)
        and item.strip()
        and len(item.strip()) <= MAX_LABEL_CHARS
        and utf8_safe(item) == item  # half an emoji is no name: the store refuses it
    ]
    first: dict[str, str] = {}
    for item in out:
        first.setdefault(item.lower(), item)  # "Porto" and "porto" are one label
    return tuple(first.values())[:limit]


def _ref(raw: object, known: int) -> int | None:
    """`m3` (or `3`, `M3`, `[m3]`, the whole shown line `m3: The user …` a model copied) →
    index 2, when it names a shown memory."""
    text = str(raw) if raw is not None else ""
    match = _REF.fullmatch(text) or _REF_LINE.match(text)
    if match is None:
        return None
    index = int(match.group(1)) - 1
    return index if 0 <= index < known else None


def _text(raw: object) -> str | None:
    if not isinstance(raw, str):
        return None
    # A lone surrogate (`\ud83d`, half an emoji a model escaped) has no UTF-8 form: the store
    # refuses the text, and one such instruction failed the whole `learned` rule's merge.
    text = utf8_safe(" ".join(raw.split()))
    if len(text) < 3:
        return None
    return text[:MAX_TEXT_CHARS]


def _inferred(item: dict[str, Any]) -> bool:
    """`"confidence": "inferred"` (or `"inferred": true`): the model derived the fact rather than
    read it in the conversation. Anything else, absent included, is `extracted`."""
    confidence = item.get("confidence")
    return item.get("inferred") is True or (
        isinstance(confidence, str) and confidence.strip().lower() == "inferred"
    )


def _lane(raw: object, lane: str) -> str | None:
    """A lane the model wrote, cut to the lane's length (never a reason to drop the fact)."""
    if not isinstance(raw, str) or len(raw.strip()) < 3:
        return None
    return goal_text(utf8_safe(raw), MAX_LANE_CHARS[lane])


def _category(raw: object) -> str:
    """The model's category when it is one of the five kinds; anything else (absent, misspelt,
    `lesson`: lessons are authored, not extracted) is a fact."""
    kind = raw.strip().lower() if isinstance(raw, str) else ""
    return kind if kind in EXTRACTED_CATEGORIES else "fact"


def _general(item: dict[str, Any]) -> bool:
    """`"about": "general"` (or `"general": true`): a fact about no one in particular."""
    about = item.get("about")
    return item.get("general") is True or (
        isinstance(about, str) and about.strip().lower() == "general"
    )


def _add(item: dict[str, Any]) -> Add | None:
    text = _text(item.get("text") or item.get("memory") or item.get("fact") or item.get("content"))
    if text is None:
        return None
    return Add(
        text,
        _strings(item.get("entities")),
        _strings(item.get("tags"), 3),
        _inferred(item),
        _category(item.get("category")),
        _general(item),
        context=_lane(item.get("context") or item.get("situation"), "context"),
        intention=_lane(
            item.get("intention") or item.get("goal") or item.get("purpose"), "intention"
        ),
    )


def _op(item: dict[str, Any]) -> str | None:
    """The item's op: under `op`, or the key another memory system's prompt taught the model
    (`action`, `event`, `operation`; `type` when it holds an op, not a kind of fact). Read as
    an add, an `{"action": "correct", "ref": …}` left the memory it corrects live."""
    named = False  # an op none of ours (`zap`, mem0's `NONE` / `DELETE`): the item is skipped
    for key in _OP_KEYS:
        raw = item.get(key)
        if isinstance(raw, str) and raw.strip().lower() in _OPS:
            return _OPS[raw.strip().lower()]
        named |= key in item and key != "type"
    return None if named else "add"


def _payload(values: list[Any]) -> dict[str, Any]:
    """The contract's object, wherever it is (a `{}` in the prose before it is not it); else a
    bare list of ops, else ops written one object after another. The contract's object wrapped
    in a list (`[{"memories": …}]`, as a prompt asking for an array taught the model) or in an
    envelope (`{"result": {"memories": …}}`) is it too."""
    inner = [i for v in values for i in (v.values() if isinstance(v, dict) else v)]
    wrapped = [_folded(i) for i in inner if isinstance(i, dict)]
    candidates = [*values, *wrapped]
    found = next((v for v in candidates if isinstance(v, dict) and _CONTRACT & v.keys()), None)
    if found is not None:
        return found
    ops = [v for v in values if isinstance(v, dict) and _ITEM & v.keys()]
    return {"memories": next((v for v in values if isinstance(v, list)), ops)}


def parse_reply(reply: str, known: int) -> Decisions:
    """The model's decisions; `known` is how many memories were shown (refs beyond are ignored)."""
    # Past `MAX_REPLY_CHARS`, read as a reply cut off there is: its whole items kept.
    decisions = Decisions(cut=max(0, len(reply) - MAX_REPLY_CHARS))
    reply = reply[:MAX_REPLY_CHARS]
    values = _json_values(reply)
    if not values:
        return _without_json(reply, decisions)
    payload = _payload(values)
    items = _decoded(payload.get("memories"))
    if isinstance(items, dict | str):  # one op or one fact, not in a list
        items = [items]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):  # `"memories": ["The user …"]`: a fact as plain text is an add
            item = {"op": "add", "text": item}
        if not isinstance(item, dict):
            decisions.skipped += 1
            continue
        item = _folded(item)
        # The older contract's way of saying "standing instruction" (`kind`), or a model's
        # (`type`, `op`): read as an add, an instruction became a memory and no rule.
        if any(_named(item.get(key)) == "rule" for key in ("kind", *_OP_KEYS)):
            if rule := _rule_text(item):
                decisions.rules.append(rule)
            else:
                decisions.skipped += 1
            continue
        op = _op(item)
        ref = _ref(next((item[k] for k in _REF_KEYS if item.get(k) is not None), None), known)
        if op == "restate" and ref is not None:
            decisions.restates.append(ref)
        elif op == "correct" and ref is not None and (new := _add(item)) is not None:
            reason = _text(item.get("reason")) or "corrected in conversation"
            decisions.corrections.append(Correct(ref, new, reason))
        elif op in ("add", "correct") and (add := _add(item)) is not None:
            # A correction naming no shown memory (a ref out of range, or none) retires nothing,
            # but what the user now says is still a fact: kept as one, not lost with the ref.
            decisions.adds.append(add)
        else:
            decisions.skipped += 1
    _read_rules(_decoded(payload.get("rules")), decisions)
    return decisions


def _decoded(raw: object) -> object:
    """A list or an object written as a JSON string (`"memories": "[{\\"op\\": …}]"`, encoded
    twice) as what it holds: read as a string, it was kept as the text of one fact."""
    if not isinstance(raw, str) or raw.strip()[:1] not in ("[", "{"):
        return raw
    try:
        value = json.loads(raw, strict=False)
    except (ValueError, RecursionError):
        return raw
    return value if isinstance(value, list | dict) else raw


def _without_json(reply: str, decisions: Decisions) -> Decisions:
    """A reply in which no JSON was found: the empty answer when it says only that (`null`,
    "Nothing to remember."), else unreadable (cut off, an error page, prose: the turn is
    retried, or given up on early when it is prose)."""
    if not _says_nothing(reply):
        decisions.readable = False
        decisions.prose_words = _prose(reply)
    return decisions


def _says_nothing(reply: str) -> bool:
    """The reply's answer is only `null`, `None` or "Nothing to remember." (or the like, in
    English or Portuguese): the model had nothing to keep and said so without the JSON."""
    answer = " ".join(_answer(reply).split()).strip("`'\"").rstrip(".!").strip().lower()
    answer = answer.replace("\u2019", "'")  # "there’s", as a chat front end types it
    return len(answer) <= _NOTHING_MAX_CHARS and _NOTHING.fullmatch(answer) is not None


def _prose(reply: str) -> str:
    """The reply's answer, when it is words with no attempt at JSON in them (no bracket, no code
    fence, not an introduction cut off before its JSON: `Here are the memories:`); else ""."""
    answer = " ".join(_answer(reply).split())
    if not answer or any(mark in answer for mark in "{[`") or answer.endswith(":"):
        return ""
    return answer


def _read_rules(rules: object, decisions: Decisions) -> None:
    if isinstance(rules, str):  # one instruction, not in a list
        rules = [rules]
    for rule in rules if isinstance(rules, list) else []:
        text = _rule_text(_folded(rule)) if isinstance(rule, dict) else _text(rule)
        if text is not None:
            decisions.rules.append(text)
        else:
            decisions.skipped += 1


def _named(raw: object) -> str:
    return raw.strip().lower() if isinstance(raw, str) else ""


def _rule_text(item: dict[str, Any]) -> str | None:
    """An instruction written as an object: under `text`, or the name a model gives it
    (`{"rule": …}`, `{"instruction": …}`); skipped as unreadable, the user's instruction was
    lost."""
    return _text(next((item[k] for k in _RULE_KEYS if isinstance(item.get(k), str)), None))
