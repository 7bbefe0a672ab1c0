"""Matching lesson cards to a tool call's signals (`search.toolcall`): resident inverted indexes.

    exact root-relative file 1000 > containing folder 800 > whole identifier 700
    > every term of a keyword group 500

Each card scores its strongest match once (repeated words never add); results sort by descending
score, then lesson id. The index is kept up to date record by record (`add`/`remove`), so a bank
keeps it resident and a match costs a few dict lookups (plain dicts beat numpy here: every kind
but keyword groups is an exact string lookup — see `bench/lessons_match.py`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from memory_worker.core.models import Anchors
from memory_worker.search.toolcall import Signals, ancestors

__all__ = [
    "FILE_SCORE",
    "FOLDER_SCORE",
    "GROUP_SCORE",
    "IDENTIFIER_SCORE",
    "LessonIndex",
    "explain",
]

FILE_SCORE = 1000
FOLDER_SCORE = 800
IDENTIFIER_SCORE = 700
GROUP_SCORE = 500

_Entry = tuple[str, frozenset[str]]  # (lesson id, one of its keyword groups)


class LessonIndex:
    """Inverted indexes from anchors to lesson ids, updated one lesson at a time.

    Keyword groups are filed under ONE of their terms — any term works, since every term is
    required — chosen as the term fewest groups use, so a common word never drags a long list of
    groups into every match. Counts change as lessons arrive (the first groups see every count at
    zero), so a bucket that has doubled since it was last looked at moves each of its groups to
    its rarest term now: amortized constant work per add.
    """

    REKEY_AT = 16  # a bucket shorter than this is cheap whatever its key

    def __init__(self) -> None:
        self._files: dict[str, set[str]] = {}
        self._folders: dict[str, set[str]] = {}
        self._identifiers: dict[str, set[str]] = {}
        self._groups: dict[str, dict[_Entry, None]] = {}  # key term → groups filed under it
        self._keyed: dict[_Entry, str] = {}  # each group → the term it is filed under
        self._settled: dict[str, int] = {}  # key term → its bucket's size when last re-keyed
        self._term_use: Counter[str] = Counter()
        self._indexed: dict[str, Anchors] = {}
        self._anchor_count = 0

    def __len__(self) -> int:
        return len(self._indexed)

    def __contains__(self, lesson_id: object) -> bool:
        return lesson_id in self._indexed

    def __repr__(self) -> str:
        return f"<LessonIndex lessons={len(self)} anchors={self._anchor_count}>"

    @property
    def anchor_count(self) -> int:
        return self._anchor_count

    def ids(self) -> Iterable[str]:
        return self._indexed.keys()

    def add(self, lesson_id: str, anchors: Anchors) -> None:
        """Index (or re-index) one lesson's anchors."""
        previous = self._indexed.get(lesson_id)
        if previous is not None:
            if previous == anchors:
                return
            self.remove(lesson_id)
        for path in anchors.files:
            self._files.setdefault(path, set()).add(lesson_id)
        for path in anchors.folders:
            self._folders.setdefault(path, set()).add(lesson_id)
        for name in anchors.identifiers:
            self._identifiers.setdefault(name, set()).add(lesson_id)
        for terms in anchors.keyword_groups:
            self._term_use.update(terms)
        for terms in anchors.keyword_groups:
            entry = (lesson_id, frozenset(terms))
            key = self._rarest(entry[1])
            self._file(entry, key)
            bucket = len(self._groups[key])
            if bucket >= self.REKEY_AT and bucket >= 2 * self._settled.get(key, 0):
                self._rekey(key)
        self._indexed[lesson_id] = anchors
        self._anchor_count += anchors.count()

    def _rarest(self, terms: frozenset[str]) -> str:
        return min(terms, key=lambda term: (self._term_use[term], term))

    def _file(self, entry: _Entry, key: str) -> None:
        self._groups.setdefault(key, {})[entry] = None
        self._keyed[entry] = key

    def _unfile(self, entry: _Entry) -> None:
        key = self._keyed.pop(entry)
        bucket = self._groups[key]
        del bucket[entry]
        if not bucket:
            del self._groups[key]
            self._settled.pop(key, None)

    def _rekey(self, key: str) -> None:
        for entry in list(self._groups[key]):
            rarest = self._rarest(entry[1])
            if rarest != key:
                self._unfile(entry)
                self._file(entry, rarest)
        if key in self._groups:
            self._settled[key] = len(self._groups[key])

    def remove(self, lesson_id: str) -> None:
        anchors = self._indexed.pop(lesson_id, None)
        if anchors is None:
            return
        _drop(self._files, anchors.files, lesson_id)
        _drop(self._folders, anchors.folders, lesson_id)
        _drop(self._identifiers, anchors.identifiers, lesson_id)
        for terms in anchors.keyword_groups:
            self._unfile((lesson_id, frozenset(terms)))
            self._term_use.subtract(terms)
            for term in terms:
                if self._term_use[term] <= 0:
                    del self._term_use[term]
        self._anchor_count -= anchors.count()

    def match(self, found: Signals) -> list[tuple[str, int]]:
        """`(lesson id, score)` of every matching lesson: score descending, then id."""
        best: dict[str, int] = {}
        # Strongest kind first, so `setdefault` keeps each card's best match (it never adds up).
        for path in found.paths:
            for lesson_id in self._files.get(path, ()):
                best.setdefault(lesson_id, FILE_SCORE)
        for path in found.paths:
            for folder in ancestors(path):
                for lesson_id in self._folders.get(folder, ()):
                    best.setdefault(lesson_id, FOLDER_SCORE)
        # Set intersections run in C: a Write of a whole file brings hundreds of names and
        # words, and only the few that are anchors cost a Python-level step.
        identifiers = self._identifiers
        for name in found.identifiers & identifiers.keys():
            for lesson_id in identifiers[name]:
                best.setdefault(lesson_id, IDENTIFIER_SCORE)
        words = found.words
        groups = self._groups
        for word in words & groups.keys():
            for lesson_id, terms in groups[word]:
                if lesson_id not in best and terms <= words:
                    best[lesson_id] = GROUP_SCORE
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))


def explain(anchors: Anchors, found: Signals, score: int) -> str:
    """The anchor behind `score` for a card (`file proto/user.proto`), for receipts and people."""
    if score == FILE_SCORE:
        paths = set(found.paths)
        return next((f"file {p}" for p in anchors.files if p in paths), "file")
    if score == FOLDER_SCORE:
        inside = {folder for path in found.paths for folder in ancestors(path)}
        return next((f"folder {f}" for f in anchors.folders if f in inside), "folder")
    if score == IDENTIFIER_SCORE:
        names = found.identifiers
        return next((f"identifier {n}" for n in anchors.identifiers if n in names), "identifier")
    words = found.words
    return next(
        (f"keywords {' '.join(g)}" for g in anchors.keyword_groups if words.issuperset(g)),
        "keywords",
    )


def _drop(table: dict[str, set[str]], keys: Iterable[str], lesson_id: str) -> None:
    for key in keys:
        ids = table.get(key)
        if ids is not None:
            ids.discard(lesson_id)
            if not ids:
                del table[key]
