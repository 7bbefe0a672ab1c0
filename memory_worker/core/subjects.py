"""Subjects (C19): the one normal form of who a memory is about, as stored and compared. Pure.

Apart from `core.text`, whose bytes are part of the snapshots' analyzer digest: a subject is never
analysed into terms.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
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
