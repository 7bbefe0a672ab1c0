"""Subjects (C19): the one normal form of who a memory is about, as stored and compared; and
whom a question or a memory's words speak of (recall's "the speaker's own facts"). Pure.

Apart from `core.text`, whose bytes are part of the snapshots' analyzer digest (this module only
calls its tokenizer): a subject is never analysed into terms.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from itertools import pairwise

from memory_worker.core.text import FIRST_PERSON, USER_ENTITY, asks, tokenize

__all__ = [
    "about_someone_else",
    "asks_about_speaker",
    "count_by_subject",
    "in_scope",
    "normalize_subject",
    "of_subject",
    "same_subject",
    "subject_key",
]


def _invisible(char: str) -> bool:
    """A format character (Unicode category Cf): zero-width space, (non-)joiner, word joiner,
    byte-order mark, soft hyphen, direction marks. Nothing a reader sees of a name."""
    return unicodedata.category(char) == "Cf"


def normalize_subject(value: str) -> str:
    """A subject as stored: Unicode NFC, without the invisible characters at its edges (a name
    pasted with a zero-width space or a byte-order mark along; at an edge they shape nothing).
    The same name typed precomposed or decomposed ("José": é, or e and a combining accent, as
    macOS file names and some keyboards send it) is one person — for recall's scope, the caps,
    and the right to be forgotten, which otherwise erased nothing of the other spelling and
    reported success. "" for a name of nothing else: no one."""
    value = unicodedata.normalize("NFC", value)
    if value.isascii():
        return value
    start, end = 0, len(value)
    while start < end and (_invisible(value[start]) or value[start].isspace()):
        start += 1
    while end > start and (_invisible(value[end - 1]) or value[end - 1].isspace()):
        end -= 1
    return value[start:end]


@lru_cache(maxsize=4096)
def subject_key(value: str) -> str:
    """What every spelling of one subject compares as: Unicode canonical caseless matching
    (casefold over the canonical decomposition, recomposed), without format characters
    (category Cf, as Unicode's own caseless identifier matching drops the default ignorables).
    "Ana", "ana" and "ANA" are one person: forgetting "ana" left every memory about "Ana" in
    place and reported success, and a cap counted them as two people; "Ana" copied with a
    zero-width space or joiner inside was someone else too. Only comparison uses it; a subject
    is stored as given (`normalize_subject`). Cached: a bank knows few subjects and scoped
    reads compare every row."""
    if not value.isascii():  # no format character is ASCII
        # Spaces an invisible character stood between are one, as a stored name's are.
        value = " ".join("".join(char for char in value if not _invisible(char)).split())
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", value).casefold())


def same_subject(a: str | None, b: str | None) -> bool:
    """Whether `a` and `b` name the same subject (None: a general memory, only itself)."""
    if a is None or b is None:
        return a is b
    return a == b or subject_key(a) == subject_key(b)


def of_subject(stored: str | None, subject: str) -> bool:
    """Whether a record's `stored` subject is `subject`, in any case or normal form: a record
    written before subjects were normalised, or typed in another case, still belongs to its
    person, to be found and forgotten."""
    return stored is not None and same_subject(stored, subject)


def in_scope(stored: str | None, subject: str | None) -> bool:
    """Whether a scoped read for `subject` (None: no one speaking) sees a record about `stored`:
    a general memory, or one about that same person in any spelling."""
    return stored is None or same_subject(stored, subject)


def count_by_subject(subjects: Iterable[str]) -> dict[str, int]:
    """How many of `subjects` name each person: one entry per subject whatever its spellings
    ("Ana" and "ana" were two people in the stats), under the spelling most of theirs are
    stored with (ties: the first in sorted order), sorted by it."""
    spellings: dict[str, Counter[str]] = defaultdict(Counter)
    for subject in subjects:
        spellings[subject_key(subject)][subject] += 1
    counted = {min(seen, key=lambda s: (-seen[s], s)): seen.total() for seen in spellings.values()}
    return dict(sorted(counted.items()))


# --- Whom a question and a memory speak of (recall's "the speaker's own facts") ---------------

# The speaker as the subject of a question ("what foods am I allergic to?", "where do I work?",
# "eu como peixe?"; "I'm" and "I've" tokenize to "i"). Not "me", "mim", "comigo": "remind me
# when…", "quem mora comigo?" ask about something or someone else.
_SPEAKER = frozenset("i myself eu".split())
# The speaker as an owner: "my partner's birthday", "when is my dog due at the vet?", "da minha
# mãe" ask about someone or something of theirs, which a memory may name without them.
_SPEAKER_OWNS = frozenset("my mine meu minha meus minhas".split())
# "Should I…", "can I…": a question for advice, not about the speaker.
_ADVICE = frozenset("can could should shall may might must would".split())
# "How do I deploy?", "como eu faço…": a question for a procedure, answered by the tools and
# people it names (a coding agent's questions are mostly these), not by the speaker's own facts.
_PROCEDURE = frozenset({"how", "como"})
# An article before a memory's grammatical subject ("The platform team…", "A Beatriz…").
_ARTICLES = frozenset("the a an o as os".split())
# How a memory names the person talking: the words `core.text.terms` reads as `user`.
_USER_WORDS = FIRST_PERSON | frozenset({"user", "users", "usuário", "usuária", "utilizador"})


def asks_about_speaker(question: str) -> bool:
    """Whether `question` asks about the person asking it: a question (a question mark: a hook's
    prompt, "I need the login bug fixed", is a request) whose subject they are ("am I…", "do
    I…", "eu…"), nothing of theirs being ("my…", "meu…"), and not for advice ("should I…", "can
    I…": the answer is often another's rule). Recall prefers the user's own facts to another's
    for it (`search.ranking._others_demoted`)."""
    if not asks(question):
        return False
    tokens = tokenize(question)
    if _SPEAKER_OWNS.intersection(tokens) or _SPEAKER.isdisjoint(tokens):
        return False
    if asks_how(question):  # "eu como carne?" is about the speaker; "como faço…?" is not
        return False
    return not any(token in _ADVICE and following == "i" for token, following in pairwise(tokens))


def asks_how(question: str) -> bool:
    """Whether `question` asks for a procedure ("how do I run the tests?", "como faço o
    deploy?"): its "I" is whoever does it, not a person the answer is about."""
    tokens = tokenize(question)
    return bool(tokens) and tokens[0] in _PROCEDURE


def about_someone_else(text: str, entities: Iterable[str]) -> bool:
    """Whether a memory is about someone or something else than the user by name: its
    grammatical subject, the first word past an article, is one of its entities ("Marta is
    allergic to cats.", "A Beatriz não come glúten."), and it neither names the user nor carries
    the `user` entity. A memory naming no one ("Prefers tabs.") is about no one else, nor is one
    that only mentions a name ("Deploys go through ArgoCD.": a fact about deploys)."""
    named = [entity.casefold() for entity in entities]
    if not named or USER_ENTITY in named:
        return False
    tokens = tokenize(text)
    if not _USER_WORDS.isdisjoint(tokens):
        return False
    subject = next((token for token in tokens if token not in _ARTICLES), None)
    return subject is not None and any(subject in tokenize(entity) for entity in named)
