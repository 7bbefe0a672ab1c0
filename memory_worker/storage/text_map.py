"""The exact-text map: `text_key` of a normalized text → the ids whose text it is.

A bank asks it on every save (is this text already a memory?). It holds keys, not texts, so RAM
does not hold every text twice; the bank checks the texts themselves. A key's ids are the one id
(a str: the common case, no list per memory) or a list of several, in the order they were added.

A boot from `.records.npz` hands it every record's key at once (`bulk`): they are kept as one
sorted uint64 array with the ids beside it (~20 bytes a memory instead of ~90 for a dict entry
and its int key), and every key changed since lives in a small dict that overrides the base.
Read as a `Mapping`, both layouts give the same entries, so a bulk-filled map equals one filled
id by id.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["TextMap"]

_NONE: tuple[str, ...] = ()


class TextMap(Mapping[int, str | list[str]]):
    def __init__(self) -> None:
        self._keys: npt.NDArray[np.uint64] = np.empty(0, np.uint64)  # sorted, repeats adjacent
        self._ids: list[str] = []  # aligned with `_keys`; equal keys in the order added
        self._distinct = 0  # distinct keys in the base
        # Keys changed since the bulk fill, with their whole entry (None: no id left).
        self._changed: dict[int, str | list[str] | None] = {}

    @classmethod
    def bulk(cls, keys: Sequence[int] | npt.NDArray[np.uint64], ids: Sequence[str]) -> TextMap:
        """The map of `ids[i]` under `keys[i]`, as `add` in that order would leave it."""
        if len(keys) != len(ids):
            raise ValueError("one key per id")
        found = cls()
        array = np.asarray(keys, np.uint64)
        order = np.argsort(array, kind="stable")  # equal keys keep the order they came in
        found._keys = array[order]
        # The ids put in key order from C (an object array's gather), back as a list.
        found._ids = np.asarray(ids, dtype=object)[order].tolist() if len(ids) else []
        sorted_keys = found._keys
        found._distinct = int(np.count_nonzero(sorted_keys[1:] != sorted_keys[:-1])) + (
            1 if sorted_keys.size else 0
        )
        return found

    def ids(self, key: int) -> Sequence[str]:
        """The ids whose normalized text has `key`, oldest first; () for none."""
        if key in self._changed:
            entry = self._changed[key]
            if entry is None:
                return _NONE
            return (entry,) if isinstance(entry, str) else entry
        return self._base(key)

    def _base(self, key: int) -> Sequence[str]:
        if not self._ids:
            return _NONE
        keys = self._keys
        probe = np.uint64(key)
        start = int(keys.searchsorted(probe))
        size = len(self._ids)
        if start == size or keys[start] != probe:
            return _NONE
        if start + 1 == size or keys[start + 1] != probe:
            return self._ids[start : start + 1]  # one id (nearly always): no second search
        end = int(keys.searchsorted(probe, side="right"))
        return self._ids[start:end]

    def add(self, key: int, memory_id: str) -> None:
        """`memory_id`'s text has `key` (no change when it is already listed)."""
        held = list(self.ids(key))
        if memory_id not in held:
            held.append(memory_id)
        self._set(key, held)

    def remove(self, key: int, memory_id: str) -> None:
        """`memory_id`'s text no longer has `key` (no change when it was not listed)."""
        held = list(self.ids(key))
        if memory_id in held:
            held.remove(memory_id)
            self._set(key, held)

    def _set(self, key: int, held: list[str]) -> None:
        entry: str | list[str] | None = held[0] if len(held) == 1 else held or None
        if entry is None and not self._base(key):
            self._changed.pop(key, None)  # nothing to override
        else:
            self._changed[key] = entry

    def key_of(self) -> dict[str, int]:
        """id → its key, for every id listed."""
        found = dict(zip(self._ids, self._keys.tolist(), strict=True))
        for key in self._changed:
            for memory_id in self._base(key):
                del found[memory_id]
        for key, entry in self._changed.items():
            for memory_id in _listed(entry):
                found[memory_id] = key
        return found

    # --- Mapping: key → its one id or its list of ids ------------------------------------------

    def __getitem__(self, key: int) -> str | list[str]:
        held = self.ids(key)
        if not held:
            raise KeyError(key)
        return held[0] if len(held) == 1 else list(held)

    def __iter__(self) -> Iterator[int]:
        base = self._keys.tolist()
        for i, key in enumerate(base):
            if (i == 0 or base[i - 1] != key) and key not in self._changed:
                yield key
        for key, entry in self._changed.items():
            if entry is not None:
                yield key

    def __len__(self) -> int:
        overridden = sum(1 for key in self._changed if self._base(key))
        live_changes = sum(1 for entry in self._changed.values() if entry is not None)
        return self._distinct - overridden + live_changes


def _listed(entry: str | list[str] | None) -> Sequence[str]:
    if entry is None:
        return _NONE
    return (entry,) if isinstance(entry, str) else entry
