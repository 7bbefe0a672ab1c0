"""A bank's records in `memory::list`'s order (newest `updated_at` first, ties by id), kept
across reads so a page costs what it returns, not a sort of the bank (issue 12).

The consolidation pass, the console and REST page through a bank 500 at a time: sorting the
whole bank for every page made reading a 50k bank quadratic (~18 s for one pass). The order is
sorted once, on first use; each record that lands after is then moved into place by a binary
search and one list insert or delete (a `memmove` in C), so writes between pages (a hook saving
while a pass reads) do not send the next page back to a full sort. Filtered listings (a tag, a
category, a subject) are a pass over that order, kept until the next record lands.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import attrgetter
from typing import Any, TypeVar

from memory_worker.core.models import Memory

__all__ = ["Listings", "listing_key", "newest_first"]

T = TypeVar("T")

# Changes kept to replay into a built order (an eighth of the bank, within these bounds): past
# them a fresh sort is cheaper than moving each record (an import's worth). Each move is a
# binary search and a `memmove` of the list (most land at its front: a new record is the
# newest): ~70 µs at 50k memories, ~0.4 ms at 500k, where a sort takes ~0.3 s and ~3 s.
MIN_REPLAYED = 256
MAX_REPLAYED = 2048
# Filtered listings kept per bank between changes: a pass pages through one or two at a time.
MAX_VIEWS = 8

_ID = attrgetter("id")
_UPDATED_AT = attrgetter("updated_at")


def listing_key(memory: Memory) -> tuple[int, str]:
    """`memory::list`'s sort key: newest `updated_at` first, then id."""
    return (-memory.updated_at, memory.id)


def newest_first(records: Iterable[Memory]) -> list[Memory]:
    """`records` sorted by `listing_key`. Two stable sorts (by id, then by `updated_at`
    reversed, which keeps equal elements in order) give the same order as the tuple key at
    about half its cost: no tuple is built per record."""
    rows = list(records)
    rows.sort(key=_ID)
    rows.sort(key=_UPDATED_AT, reverse=True)
    return rows


class Listings:
    """One bank's kept listing orders: every record (`history`), and the live ones."""

    def __init__(self) -> None:
        self._orders: dict[bool, list[Memory]] = {}  # history? → its records by `listing_key`
        # (record replaced or None, record now held) since the orders were last brought up to date.
        self._changes: list[tuple[Memory | None, Memory]] = []
        self._views: dict[Hashable, Any] = {}  # filtered listings as of the last change

    def changed(self, previous: Memory | None, record: Memory, size: int) -> None:
        """`record` (the object the bank now holds) replaced `previous` in a bank of `size`."""
        self._views.clear()
        if not self._orders:
            return
        self._changes.append((previous, record))
        if len(self._changes) > min(MAX_REPLAYED, max(MIN_REPLAYED, size // 8)):
            self.clear()

    def clear(self) -> None:
        """Forget everything kept: the bank's records were replaced whole."""
        self._orders.clear()
        self._changes.clear()
        self._views.clear()

    def order(self, records: Iterable[Memory], *, history: bool) -> Sequence[Memory]:
        """The bank's records (`history`) or its live ones, by `listing_key`. `records`: every
        record the bank holds now (read only when the order is built afresh). Valid until the
        next change; never to be changed by the caller."""
        if self._changes and not self._catch_up():
            self.clear()
        rows = self._orders.get(history)
        if rows is None:
            rows = newest_first(r for r in records if history or r.live)
            self._orders[history] = rows
        return rows

    def view(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()` kept under `key` until the next change (a filtered listing)."""
        if key in self._views:
            found: T = self._views[key]
            return found
        while len(self._views) >= MAX_VIEWS:
            del self._views[next(iter(self._views))]
        made = self._views[key] = build()
        return made

    def _catch_up(self) -> bool:
        """Move each changed record to its place in every built order; False when an order
        did not hold a replaced record where its key says (it is then sorted afresh)."""
        changes, self._changes = self._changes, []
        for previous, record in changes:
            for history, rows in self._orders.items():
                if previous is not None and (history or previous.live):
                    at = bisect_left(rows, listing_key(previous), key=listing_key)
                    if at == len(rows) or rows[at] is not previous:
                        return False
                    del rows[at]
                if history or record.live:
                    insort(rows, record, key=listing_key)
        return True
