"""Subjects (C19): the one normal form of who a memory is about, as stored and compared. Pure.

Apart from `core.text`, whose bytes are part of the snapshots' analyzer digest: a subject is never
analysed into terms.
"""

from __future__ import annotations

import unicodedata

__all__ = ["normalize_subject", "of_subject"]


def normalize_subject(value: str) -> str:
    """A subject as stored and compared: Unicode NFC. The same name typed precomposed or
    decomposed ("José": é, or e and a combining accent, as macOS file names and some keyboards
    send it) is one person — for recall's scope, the caps, and the right to be forgotten, which
    otherwise erased nothing of the other spelling and reported success."""
    return unicodedata.normalize("NFC", value)


def of_subject(stored: str | None, subject: str) -> bool:
    """Whether a record's `stored` subject is `subject` (in normal form): a record written
    before subjects were normalised still belongs to its person, to be found and forgotten."""
    return stored is not None and (stored == subject or normalize_subject(stored) == subject)
