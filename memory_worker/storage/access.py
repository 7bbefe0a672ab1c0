"""The `access.jsonl` sidecar: how often and how lately each memory was recalled or injected.

Derived data, like `vectors.jsonl`: recall must never write the log (an fsynced append per read
would make every turn a disk flush), so each counted recall (a person's or an agent's, or a turn's
injection) appends one unsynced line naming the ids it returned, `{"at": <ms>, "ids": [...]}`.
A crash may lose the last few lines: eviction then sees a memory as slightly less used than it
was, which is the price of reads that never wait on a disk.
Loading folds the lines into counts, and rewrites the file one line per id when it has grown to
many times that (so it stays proportional to the bank, not to its traffic).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, ItemsView, Iterable
from dataclasses import dataclass
from pathlib import Path

from memory_worker.core.errors import StorageError
from memory_worker.storage import files

__all__ = ["ACCESS_FILE", "Access", "AccessStats"]

ACCESS_FILE = "access.jsonl"
_COMPACT_FACTOR = 4  # lines per tracked id past which a load folds the file
# Ids a line may hold as they are (the worker's fingerprints): nothing JSON would escape.
_PLAIN_IDS = re.compile(r"[A-Za-z0-9_.:,-]*")  # over the ids joined by commas


@dataclass(frozen=True, slots=True)
class Access:
    count: int
    last_ms: int


class AccessStats:
    def __init__(self, path: Path, *, within: Path | None = None) -> None:
        self.path = path
        self.within = within  # the data dir: no link below it is followed
        self._file = files.UnsyncedAppender(path, within=within)  # opened on the first bump
        # id → (count, last ms): plain tuples, made on every recall (an `Access` is made only
        # for who asks, `get`: building a frozen dataclass per returned id was half a bump).
        self._stats: dict[str, tuple[int, int]] = {}
        # Told which ids' counts changed (None: any may have): the bank's eviction order.
        self.on_change: Callable[[Iterable[str] | None], None] | None = None

    def __len__(self) -> int:
        return len(self._stats)

    def get(self, memory_id: str) -> Access | None:
        found = self._stats.get(memory_id)
        return None if found is None else Access(*found)

    def items(self) -> ItemsView[str, tuple[int, int]]:
        """Every counted id with its (count, last ms) (a live view: do not hold it across a
        recall)."""
        return self._stats.items()

    def load(self) -> int:
        """Fold the file into counts (blocking); unreadable lines are skipped (derived data).
        Returns how many lines it had."""
        lines = 0
        try:
            found = list(files.iter_lines(self.path, within=self.within))
        except StorageError as exc:  # a planted link: derived data, counts start over
            if files.is_transient(exc):
                raise
            found = []
        for _, line, _ in found:
            lines += 1
            try:
                row = json.loads(line)
                at, ids = int(row["at"]), row["ids"]
                counts = row.get("n")
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
            if not isinstance(ids, list):
                continue
            for i, memory_id in enumerate(ids):
                if isinstance(memory_id, str):
                    n = counts[i] if isinstance(counts, list) and i < len(counts) else 1
                    self._add(memory_id, int(n), at)
        if lines > _COMPACT_FACTOR * max(len(self._stats), 1):
            self._rewrite(self._stats)
        if self.on_change is not None:
            self.on_change(None)
        return lines

    def _add(self, memory_id: str, n: int, at_ms: int) -> None:
        old = self._stats.get(memory_id)
        if old is None:
            self._stats[memory_id] = (n, at_ms)
        else:
            self._stats[memory_id] = (old[0] + n, max(old[1], at_ms))

    def bump(self, ids: Iterable[str], now_ms: int) -> None:
        """Count one access of each of `ids` (blocking but unsynced: one small append). A failed
        append loses only these counts: the read it belongs to has already been answered."""
        unique = list(dict.fromkeys(ids))
        if not unique:
            return
        stats = self._stats
        for memory_id in unique:
            old = stats.get(memory_id)
            stats[memory_id] = (1, now_ms) if old is None else (old[0] + 1, max(old[1], now_ms))
        if self.on_change is not None:
            self.on_change(unique)
        line = _line(now_ms, unique)
        # Derived data: a failed append loses these counts from the file, RAM keeps them.
        with contextlib.suppress(StorageError):
            self._file.append(line)

    def absorb(self, source: str, into: str) -> None:
        """Add `source`'s counts to `into`'s (blocking but unsynced, as `bump`): a merge's survivor
        was used whenever the duplicate it absorbed was, and eviction goes by accesses. One line
        `{"at": <source's last>, "ids": [into], "n": [count]}`, folded at load like any other."""
        found = self._stats.get(source)
        if found is None or source == into:
            return
        count, last_ms = found
        self._add(into, count, last_ms)
        if self.on_change is not None:
            self.on_change([into])
        line = json.dumps({"at": last_ms, "ids": [into], "n": [count]}, separators=(",", ":"))
        with contextlib.suppress(StorageError):  # derived data: RAM keeps the counts
            self._file.append(line.encode() + b"\n")

    def holds_file_open(self) -> bool:
        """Whether the file is open for appends now (at most `files.MAX_OPEN_APPENDERS` are)."""
        return self._file.is_open

    def close(self) -> None:
        """Let go of the file kept open for appends (a later bump opens it again). Not from
        `_rewrite`, which `forget` runs off the event loop: a descriptor closed there while a
        recall appends could be reused by another open. The replaced file is seen by the next
        append (`UnsyncedAppender`), which opens the new one."""
        self._file.close()

    def forget(self, ids: Iterable[str]) -> None:
        """Drop `ids` from RAM and the file (blocking): erased memories leave no trace here."""
        gone = set(ids)
        if not gone & (set(self._stats) | self._ids_on_disk()):
            return
        self._stats = {i: a for i, a in self._stats.items() if i not in gone}
        if self.on_change is not None:
            self.on_change(gone)
        self._rewrite(self._stats)

    def _ids_on_disk(self) -> set[str]:
        found: set[str] = set()
        for _, line, _ in files.iter_lines(self.path, within=self.within):
            try:
                ids = json.loads(line).get("ids")
            except (ValueError, AttributeError, RecursionError):
                continue
            if isinstance(ids, list):
                found.update(i for i in ids if isinstance(i, str))
        return found

    def _rewrite(self, stats: dict[str, tuple[int, int]]) -> None:
        by_time: dict[int, list[tuple[str, int]]] = {}
        for memory_id, (count, last_ms) in stats.items():
            by_time.setdefault(last_ms, []).append((memory_id, count))
        lines = [
            json.dumps(
                {"at": at, "ids": [i for i, _ in rows], "n": [n for _, n in rows]},
                separators=(",", ":"),
            ).encode()
            + b"\n"
            for at, rows in sorted(by_time.items())
        ]
        files.replace_with(self.path, lines, lambda _: None, within=self.within)


def _line(now_ms: int, ids: list[str]) -> bytes:
    """`{"at":<ms>,"ids":[...]}` and a newline, as `json.dumps` writes it (compact): formatted
    directly when every id is plain (`_PLAIN_IDS`), else by `json.dumps`."""
    if ids and type(now_ms) is int and _PLAIN_IDS.fullmatch(",".join(ids)):
        joined = '","'.join(ids)
        return f'{{"at":{now_ms},"ids":["{joined}"]}}\n'.encode()
    return json.dumps({"at": now_ms, "ids": ids}, separators=(",", ":")).encode() + b"\n"
