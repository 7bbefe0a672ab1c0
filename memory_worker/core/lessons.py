"""Lesson cards: their fields' checks and normal forms, the card text, packing cards in a budget.

A lesson is a memory with `category: "lesson"`, a `title`, a `recommendation` and `anchors`
(literal root-relative files and folders, whole identifiers, groups of 2-4 specific keywords). The
CARD (title and recommendation) is all a model is shown; evidence and provenance stay on the
record. Anchors are normalized here, once, at admission, so matching a tool call is a handful of
exact lookups.
Budgets count approximate tokens: one token per 4 UTF-8 bytes, card framing included.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memory_worker.core.errors import InvalidInput
from memory_worker.core.models import Anchors, Memory
from memory_worker.core.redact import redact
from memory_worker.core.text import STOPWORDS, collapse_whitespace

__all__ = [
    "BYTES_PER_TOKEN",
    "CATEGORIES",
    "IDENTIFIER",
    "LESSON",
    "MAX_RECOMMENDATION_BYTES",
    "MAX_TITLE_BYTES",
    "Card",
    "LessonBlock",
    "anchor_set",
    "anchors_from",
    "card_key",
    "is_lesson",
    "lesson_key",
    "nfc",
    "normalize_path",
    "prepare_anchors",
    "prepare_card",
    "prepare_category",
    "prepare_evidence",
    "prepare_recommendation",
    "prepare_title",
    "render_card",
    "render_lessons",
    "split_words",
    "tokens",
    "topic_words",
]

LESSON = "lesson"
# The categories a memory may carry: the record's documented set plus lessons.
CATEGORIES = frozenset({"fact", "preference", "procedure", "context", "correction", LESSON})

MAX_TITLE_BYTES = 96  # seed 002: a card's title
MAX_RECOMMENDATION_BYTES = 640  # seed 002: a card's recommendation
MIN_CARD_CHARS = 3
MAX_ANCHORS_PER_KIND = 32  # a card about more than this is not about anything in particular
MAX_PATH_CHARS = 512
MAX_IDENTIFIER_CHARS = 128
MIN_GROUP_TERMS = 2  # one broad word alone never retrieves a card
MAX_GROUP_TERMS = 4
MIN_TERM_CHARS = 3  # "db", "io": too broad to be a specific term
MAX_EVIDENCE = 16
# Values given, duplicates and blanks included, bounded before each is redacted and normalized
# (as entities and tags): one path repeated to fill a request held the event loop for seconds.
MAX_RAW_ANCHORS = 4 * MAX_ANCHORS_PER_KIND
MAX_RAW_EVIDENCE = 4 * MAX_EVIDENCE
MAX_EVIDENCE_CHARS = 300
BYTES_PER_TOKEN = 4

# A name in code or configuration: `configure_bedrock`, `CLAUDE_CODE_USE_BEDROCK`, `MemoryService`.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Topic words of a name: snake_case parts, camelCase humps (`HTTPServer` → http, server), digits
# kept on the word they follow (`sha256`, `utf8`).
_WORD = re.compile(r"[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+")
# A word with digits inside it, in one case (`k8s`, `i18n`, `e2e`, `utf8mb4`, `K8S`, the `K8s`
# of `useK8sClient`): `_WORD` cuts it after its digits (`k8` + `s`), so it is a topic word whole
# as well, and a keyword may name it.
_JOINED = re.compile(
    r"[A-Z]?[a-z]+(?:[0-9]+[a-z]+)+[0-9]*"
    r"|[A-Z][0-9]+[a-z]+(?:[0-9]+[a-z]+)*[0-9]*"
    r"|[A-Z]+(?:[0-9]+[A-Z]+)+[0-9]*(?![a-z])"
)
# A name's letters and digits run together between underscores (`GitHub`, `OAuth`, `PostgreSQL`,
# the `GitHub` of `GitHub_TOKEN`): text spells a brand or a product so, in camel case, where a
# keyword writes it as one word (`github`). Split at its humps alone (`git` + `hub`), a group
# naming it never met the text that does.
_RUN = re.compile(r"[A-Za-z0-9]+")
_GLOB = re.compile(r"[*?\[\]{}]")
# A position (`src/app.py:42`, `:42:7`) or a test id (`tests/test_api.py::test_login`) after a
# path: a Read or an Edit names the file alone, so an anchor spelled so never matches, and the
# position goes stale with the next edit (seed 002) — it belongs in evidence.
_POSITIONED = re.compile(r"(?:::.*|(?::\d+)+)$", re.S)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# `src/app.py:42` in a card goes stale with the next edit above line 42 (seed 002: admission
# detects literal file:line pointers); evidence is where positions belong.
# Build and config files are cited as often as code: extension-less well-known names too
# (`Makefile:12`); a host's port (`localhost:8080`, `example.com:443`) is no such name.
_POSITION = re.compile(
    r"(?<![\w/:.])(?:[\w.-]+/)*(?:[\w.-]+\.(?i:py|pyi|ts|tsx|mts|cts|js|jsx|mjs|cjs|rs|go|java|kt|"
    r"kts|c|h|cc|cpp|hpp|cs|fs|vb|m|mm|rb|php|swift|scala|sbt|groovy|gradle|clj|dart|zig|nim|jl|r|"
    r"pl|pm|ps1|proto|sql|sh|bash|zsh|yaml|yml|json|jsonc|toml|xml|md|mdx|rst|txt|ini|cfg|conf|"
    r"properties|lua|ex|exs|erl|hs|ml|elm|vue|svelte|astro|css|scss|sass|less|html|tf|tfvars|"
    r"hcl|nix|bzl|cmake|mod|sum|lock|graphql|gql|ipynb|dockerfile|tex)|(?:GNUmakefile|Makefile|"
    r"Dockerfile|Containerfile|Justfile|Rakefile|Gemfile|Podfile|Procfile|Vagrantfile|Jenkinsfile|"
    r"Brewfile|Caddyfile|Taskfile|BUILD|WORKSPACE)):\d+"
)


def is_lesson(memory: Memory) -> bool:
    return memory.category == LESSON and memory.anchors is not None


def card_key(memory: Memory) -> tuple[object, ...] | None:
    """What a lesson delivers and is matched by (None for any other memory): two records merge
    only when this is the same."""
    if memory.category != LESSON:
        return None
    return (memory.title, memory.recommendation, anchor_set(memory.anchors))


def anchor_set(anchors: Anchors | None) -> tuple[frozenset[object], ...] | None:
    """What anchors match on: the order they were listed in is no part of a card."""
    if anchors is None:
        return None
    return (
        frozenset(anchors.files),
        frozenset(anchors.folders),
        frozenset(anchors.identifiers),
        frozenset(anchors.keyword_groups),
    )


def lesson_key(bank: str, memory: Memory) -> str:
    """What "delivered once per conversation" counts: a bank's id at one revision (seed 002: "An
    ID/revision is supplied once per provider conversation"; a new revision, a pin's included,
    is supplied again, as the card names its revision)."""
    return f"{bank}/{memory.id}@{memory.revision}"


def tokens(text: str) -> int:
    """Approximate tokens of `text`: UTF-8 bytes / 4, rounded up."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


@lru_cache(maxsize=65_536)
def split_words(name: str) -> tuple[str, ...]:
    """The lowercase topic words of an identifier (`CLAUDE_CODE_USE_BEDROCK` → claude, code, use,
    bedrock; `configureBedrock` → configure, bedrock)."""
    return tuple(word.lower() for word in _WORD.findall(name))


@lru_cache(maxsize=65_536)
def topic_words(name: str) -> tuple[str, ...]:
    """What a keyword group matches in an identifier: `split_words`, each word with digits
    inside it whole (`deploy_k8s` → deploy, k8, s, k8s), and each run between underscores whole
    (`GitHubActions` → git, hub, actions, githubactions; `OAuth_token` → o, auth, oauth, token).
    A lowerCamel name run together is a term too (`useEffect` → use, effect, useeffect): a
    keyword naming a hook or an API (`useeffect`, `localstorage`) means just that, so `makeFile`
    also meets a `makefile` keyword (a near miss kept, where splitting silenced such keywords)."""
    parts = split_words(name)
    whole = (word.lower() for word in (*_JOINED.findall(name), *_RUN.findall(name)))
    return parts + tuple(dict.fromkeys(word for word in whole if word not in parts))


def normalize_path(raw: str) -> str | None:
    """A root-relative path in one spelling (`./a//b/../c/` → `a/c`), or None when it is empty,
    absolute, or climbs out of the root. Lexical only: nothing is looked up on disk."""
    path = nfc(raw.strip().replace("\\", "/"))
    if not path or path.startswith("/") or _drive(path):
        return None
    path = posixpath.normpath(path)
    if path == "." or path == ".." or path.startswith("../"):
        return None
    return path


def nfc(text: str) -> str:
    """`text` composed (NFC): macOS hands out decomposed file names (`e` + U+0301) where a model
    or a person types `é`, and an anchor compares as exact text."""
    if text.isascii() or unicodedata.is_normalized("NFC", text):
        return text
    return unicodedata.normalize("NFC", text)


def _drive(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


# --- admission -------------------------------------------------------------------------------


def _check_unicode(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{field} contains invalid Unicode (a lone surrogate)") from None


def _check_text(value: str, field: str) -> None:
    """A card's text as `transitions.check_unicode` (which imports this module) holds every other
    text: valid UTF-8 and no NUL. The card is injected into a model's context and printed by hooks
    and terminals, which a NUL cuts short. (Anchors refuse it among the control characters.)"""
    _check_unicode(value, field)
    if "\x00" in value:
        raise InvalidInput(f"{field} contains a NUL character")


def _redact_line(raw: str) -> tuple[str, list[str]]:
    """As `transitions.redact_line` (which imports this module): collapsed to one line, redacted
    before and after, since a key and its value on two lines are one once joined."""
    first = redact(raw)
    line = collapse_whitespace(first.text)
    if line == first.text:  # nothing joined: redacting again finds nothing new
        return line, list(first.labels)
    second = redact(line)
    return second.text, sorted({*first.labels, *second.labels})


def _card_text(raw: str, field: str, max_bytes: int, *, one_line: bool) -> tuple[str, list[str]]:
    _check_text(raw, field)
    if one_line:
        text, labels = _redact_line(raw)
    else:
        redaction = redact(raw)
        text, labels = redaction.text.strip(), list(redaction.labels)
    if len(text) < MIN_CARD_CHARS:
        raise InvalidInput(f"{field} must be at least {MIN_CARD_CHARS} characters")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidInput(f"{field} must be at most {max_bytes} UTF-8 bytes (got {size})")
    position = _POSITION.search(text)
    if position is not None:
        raise InvalidInput(
            f"{field} cites a source position ({position.group(0)}); name the file and the "
            "identifier instead (positions go stale with the next edit) and keep positions in "
            "evidence"
        )
    return text, labels


def prepare_title(raw: str) -> tuple[str, list[str]]:
    """One line, redacted, at most 96 UTF-8 bytes; returns the title and the redaction labels."""
    return _card_text(raw, "title", MAX_TITLE_BYTES, one_line=True)


def prepare_recommendation(raw: str) -> tuple[str, list[str]]:
    """Redacted, trimmed, at most 640 UTF-8 bytes; returns it and the redaction labels."""
    return _card_text(raw, "recommendation", MAX_RECOMMENDATION_BYTES, one_line=False)


def prepare_evidence(values: Iterable[str]) -> tuple[tuple[str, ...], list[str]]:
    """Evidence pointers (a commit, a file:line, a session entry): redacted, one line each,
    deduplicated, bounded. Stored with the lesson, never injected."""
    given = _bounded(values, MAX_RAW_EVIDENCE, "evidence", MAX_EVIDENCE)
    out: list[str] = []
    labels: list[str] = []
    for raw in given:
        _check_text(raw, "evidence")
        value, found = _redact_line(raw)
        labels.extend(found)
        if not value or value in out:
            continue
        if len(value) > MAX_EVIDENCE_CHARS:
            raise InvalidInput(
                f"each evidence item must be at most {MAX_EVIDENCE_CHARS} characters"
            )
        out.append(value)
    if len(out) > MAX_EVIDENCE:
        raise InvalidInput(f"at most {MAX_EVIDENCE} evidence items (got {len(out)})")
    return tuple(out), labels


def _no_secret(raw: str, kind: str) -> None:
    """Anchors are stored and matched verbatim, so a secret cannot be redacted out of one: refuse
    it instead."""
    labels = redact(raw).labels
    if labels:
        raise InvalidInput(f"{kind} must not hold a secret (looks like {', '.join(labels)})")


def _anchor_path(raw: str, kind: str) -> str:
    _check_unicode(raw, kind)
    _no_secret(raw, kind)
    text = raw.strip()
    if len(text) > MAX_PATH_CHARS:
        raise InvalidInput(f"each of {kind} must be at most {MAX_PATH_CHARS} characters")
    if _GLOB.search(text):
        raise InvalidInput(
            f"{kind} are literal paths, not patterns ({text!r}); anchor the folder instead"
        )
    if _CONTROL.search(text):
        raise InvalidInput(f"{kind} must not hold a control character, got {text!r}")
    bare = _POSITIONED.sub("", text)
    if bare != text:
        raise InvalidInput(
            f"{kind} name a file or folder, not a position in one ({text!r}); anchor "
            f"{bare!r} and keep the position in evidence"
        )
    # `~/…` (home), `$VAR/…` and URLs are not paths in the workspace: a tool call never names
    # them as one, so such an anchor would never match.
    if text.replace("\\", "/").startswith(("/", "~", "$")) or _drive(text) or "://" in text:
        raise InvalidInput(f"{kind} must be root-relative (like proto/user.proto), got {text!r}")
    path = normalize_path(text)
    if path is None:
        raise InvalidInput(f"{kind} must name a path inside the workspace, got {text!r}")
    return path


def _identifier(raw: str) -> str:
    _check_unicode(raw, "identifiers")
    _no_secret(raw, "identifiers")
    name = raw.strip()
    if len(name) > MAX_IDENTIFIER_CHARS or not IDENTIFIER.fullmatch(name):
        raise InvalidInput(
            f"identifiers are names like configure_bedrock or CLAUDE_CODE_USE_BEDROCK (ASCII "
            f"letters, digits and _, at most {MAX_IDENTIFIER_CHARS} characters), got {name!r}"
        )
    if len(split_words(name)) < 2:
        raise InvalidInput(
            f"identifier {name!r} is a single word, too broad to anchor a lesson; use a compound "
            "name or a keyword group of 2-4 specific terms"
        )
    return name


def _term(raw: str) -> str:
    _check_unicode(raw, "keyword_groups")
    term = raw.strip().lower()
    # A term is a word a call's names give (`topic_words`): one of their snake or camel words,
    # or a run of letters and digits whole (`k8s`, `GitHub` → github), never several of them
    # (`user_name`, `k8-s`: a call's words are never joined across `_` or `-`).
    if split_words(raw.strip()) != (term,) and term not in topic_words(raw.strip()):
        raise InvalidInput(
            f"each keyword is one word of ASCII letters and digits as a call spells it "
            f"(user_name reads as user name; a call's words are read as ASCII runs), got {raw!r}"
        )
    # Two characters are a name when a letter and a digit (`s3`, `v8`), a broad word when not.
    named = len(term) == 2 and term[0].isalpha() and term[1].isdigit()
    if (len(term) < MIN_TERM_CHARS and not named) or term in STOPWORDS or term.isdigit():
        raise InvalidInput(f"keyword {raw!r} is too broad to be a specific term")
    return term


def _group(raw: Sequence[str]) -> tuple[str, ...]:
    terms = sorted({_term(term) for term in raw})  # repeated words never add
    if not MIN_GROUP_TERMS <= len(terms) <= MAX_GROUP_TERMS:
        raise InvalidInput(
            f"a keyword group needs {MIN_GROUP_TERMS}-{MAX_GROUP_TERMS} distinct specific terms, "
            f"got {list(raw)!r}"
        )
    return tuple(terms)


def _bounded(values: Iterable[Any], limit: int, kind: str, shown: int) -> list[Any]:
    """`values` as a list, refused when more were given than `limit` (before any is checked)."""
    given = list(itertools.islice(values, limit + 1))
    if len(given) > limit:
        raise InvalidInput(f"{kind}: at most {shown} (got more than {limit} values)")
    return given


def _unique(values: Iterable[str], kind: str) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(values))
    if len(out) > MAX_ANCHORS_PER_KIND:
        raise InvalidInput(f"at most {MAX_ANCHORS_PER_KIND} {kind} per lesson (got {len(out)})")
    return out


def prepare_anchors(
    files: Iterable[str] = (),
    folders: Iterable[str] = (),
    identifiers: Iterable[str] = (),
    keyword_groups: Iterable[Sequence[str]] = (),
) -> Anchors:
    """Checked, normalized and deduplicated anchors (at least one); raises `InvalidInput`."""
    files = _bounded(files, MAX_RAW_ANCHORS, "files", MAX_ANCHORS_PER_KIND)
    folders = _bounded(folders, MAX_RAW_ANCHORS, "folders", MAX_ANCHORS_PER_KIND)
    identifiers = _bounded(identifiers, MAX_RAW_ANCHORS, "identifiers", MAX_ANCHORS_PER_KIND)
    groups = _bounded(keyword_groups, MAX_RAW_ANCHORS, "keyword_groups", MAX_ANCHORS_PER_KIND)
    anchors = Anchors(
        files=_unique((_anchor_path(p, "files") for p in files), "files"),
        folders=_unique((_anchor_path(p, "folders") for p in folders), "folders"),
        identifiers=_unique((_identifier(n) for n in identifiers), "identifiers"),
        keyword_groups=tuple(
            dict.fromkeys(
                _group(_bounded(g, MAX_RAW_ANCHORS, "a keyword group's terms", MAX_GROUP_TERMS))
                for g in groups
            )
        ),  # groups compare as sorted tuples
    )
    if len(anchors.keyword_groups) > MAX_ANCHORS_PER_KIND:
        raise InvalidInput(f"at most {MAX_ANCHORS_PER_KIND} keyword_groups per lesson")
    if anchors.count() == 0:
        raise InvalidInput(
            "a lesson needs at least one anchor: files, folders, identifiers or keyword_groups"
        )
    return anchors


@dataclass(frozen=True, slots=True)
class Card:
    """A save's category and, for a lesson, its checked card fields."""

    category: str | None = None
    title: str | None = None
    recommendation: str | None = None
    anchors: Anchors | None = None
    evidence: tuple[str, ...] | None = None


def prepare_category(raw: str | None) -> str | None:
    if raw is None or not raw.strip():
        return None
    category = raw.strip().lower()
    if category not in CATEGORIES:
        raise InvalidInput(f"category must be one of {', '.join(sorted(CATEGORIES))}, got {raw!r}")
    return category


def prepare_card(
    category: str | None,
    title: str | None,
    recommendation: str | None,
    anchors: Mapping[str, Any] | None,
    evidence: Sequence[str],
) -> tuple[Card, list[str]]:
    """The category and lesson fields of a save, checked whole; returns them and the redaction
    labels. A lesson needs all three card fields; the others must not carry any."""
    kind = prepare_category(category)
    if kind != LESSON:
        if title is not None or recommendation is not None or anchors is not None or evidence:
            raise InvalidInput(
                "title, recommendation, anchors and evidence are lesson fields: set category to "
                "lesson"
            )
        return Card(category=kind), []
    if title is None or recommendation is None or anchors is None:
        raise InvalidInput("a lesson needs title, recommendation and anchors")
    clean_title, labels = prepare_title(title)
    clean_recommendation, more = prepare_recommendation(recommendation)
    kept, evidence_labels = prepare_evidence(evidence)
    card = Card(
        category=LESSON,
        title=clean_title,
        recommendation=clean_recommendation,
        anchors=anchors_from(anchors),
        evidence=kept or None,
    )
    return card, [*labels, *more, *evidence_labels]


def _items(value: Any, *, words: bool = False) -> list[str]:
    """A list of strings as a request may give it: a list, or one string (comma-separated; for a
    keyword group, words too)."""
    if value is None:
        return []
    if isinstance(value, str):
        parts = value.replace(",", " ").split() if words else value.split(",")
        return [part.strip() for part in parts if part.strip()]
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    raise InvalidInput(f"expected a list of strings, got {type(value).__name__}")


def anchors_from(raw: Mapping[str, Any]) -> Anchors:
    """`prepare_anchors` over a mapping as a request or an import row gives it."""
    unknown = set(raw) - {"files", "folders", "identifiers", "keyword_groups"}
    if unknown:
        raise InvalidInput(f"unknown anchor kinds {sorted(unknown)}")
    return prepare_anchors(
        files=_items(raw.get("files")),
        folders=_items(raw.get("folders")),
        identifiers=_items(raw.get("identifiers")),
        keyword_groups=[_items(g, words=True) for g in _items_raw(raw.get("keyword_groups"))],
    )


def _items_raw(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]  # one group given alone


# --- the injected text -----------------------------------------------------------------------


def render_card(memory: Memory) -> str:
    """One card: its id and revision (so a receipt can name it), the title, the recommendation."""
    return (
        f'<lesson id="{memory.id}" revision="{memory.revision}">\n'
        f"{memory.title}\n{memory.recommendation}\n</lesson>\n"
    )


def _envelope(bank: str) -> tuple[str, str]:
    return (
        f'<memory lessons="{bank}">\n'
        "Lessons from earlier work on the files and names this step touches. Each is given once "
        "per conversation; follow it unless the code in front of you says otherwise.\n",
        "</memory>",
    )


@dataclass(frozen=True, slots=True)
class LessonBlock:
    message: str | None
    included: list[Memory]


def render_lessons(
    bank: str, cards: Sequence[Memory], budget_tokens: int, max_chars: int | None = None
) -> LessonBlock:
    """The `<memory lessons=…>` message: complete cards in the given order while the whole message
    stays within `budget_tokens` and, when given, `max_chars` characters (a coding agent's cap,
    counted as it counts: in characters, not in tokens of 4 bytes). A card that does not fit is
    skipped (it stays eligible for a later match) and smaller ones after it are still tried."""
    head, tail = _envelope(bank)
    budget = budget_tokens * BYTES_PER_TOKEN - len(head.encode()) - len(tail.encode())
    chars = None if max_chars is None else max_chars - len(head) - len(tail)
    parts: list[str] = []
    included: list[Memory] = []
    for memory in cards:
        card = render_card(memory)
        size = len(card.encode("utf-8"))
        if size > budget or (chars is not None and len(card) > chars):
            continue
        budget -= size
        if chars is not None:
            chars -= len(card)
        parts.append(card)
        included.append(memory)
    if not included:
        return LessonBlock(None, [])
    return LessonBlock(head + "".join(parts) + tail, included)
