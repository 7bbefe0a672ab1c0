"""A bank made for a write (a save, an import, a rule naming a bank that does not exist yet) that a
crash kept from landing: removed at the next open, as a failed first write removes it in-process
(`Store.discard_if_empty`).

The bank's folder is renamed into place before the write that needed it, and a kill between the
two left an empty bank for good, though the call that made it was never answered. Such a folder
carries `MARKER` (holding the `bank.yaml` it was made with) until that write, or any other change
of the bank, has landed (`settle`). At open (`sweep`) a marked folder in which nothing landed
(its `bank.yaml` as made, no rule, a log without one whole write) goes; one where something did
keeps everything and loses its marker. A bank made by `memory::bank::create` is never marked: its
caller was told it exists. The leading dot keeps the marker out of the watcher's view.
"""

from __future__ import annotations

import os
from pathlib import Path

from memory_worker.core.errors import StorageError
from memory_worker.storage import files
from memory_worker.storage.bank_file import BANK_FILE
from memory_worker.storage.counts import COUNTS_FILE
from memory_worker.storage.log import MEMORIES_FILE, interrupted_tail
from memory_worker.storage.logger import get_logger
from memory_worker.storage.rules import RULES_DIR

__all__ = ["MARKER", "mark", "settle", "sweep"]

log = get_logger(__name__)

MARKER = ".made-for-a-write"
# What such a folder may hold when nothing of the write landed: the derived counts are written at
# every close, whatever the log says.
_SKELETON = frozenset({MARKER, BANK_FILE, RULES_DIR, MEMORIES_FILE, COUNTS_FILE})


def mark(staging: Path, bank_file: bytes, *, within: Path) -> None:
    """Mark a bank folder being built (before its rename into place) as made for a write."""
    files.atomic_write(staging / MARKER, bank_file, within=within)


def settle(path: Path, *, within: Path) -> None:
    """Something landed in the bank at `path`: it stays (blocking; `StorageError`)."""
    files.remove_file(path / MARKER, within=within)


def sweep(root: Path, names: list[str]) -> list[str]:
    """At open, before the banks are listed (blocking): remove each folder among `names` that is
    marked and holds nothing that landed, and settle the other marked ones. Returns the names
    removed. A folder that cannot be judged or removed is kept (logged): never data."""
    removed: list[str] = []
    for name in names:
        path = root / name
        if not os.path.lexists(path / MARKER):
            continue
        try:
            if _nothing_landed(path, root):
                files.remove_tree(path)
                files.fsync_dir(root)
                removed.append(name)
                log.warning("unfinished_bank_removed", bank=name)
            else:
                settle(path, within=root)
        except (OSError, StorageError) as exc:
            log.error("unfinished_bank_kept", bank=name, error=str(exc))
    return removed


def _nothing_landed(path: Path, root: Path) -> bool:
    if not set(os.listdir(path)) <= _SKELETON:
        return False
    made = files.read_bytes(path / MARKER, within=root)
    if (
        not os.path.lexists(path / BANK_FILE)
        or files.read_bytes(path / BANK_FILE, within=root) != made
    ):
        return False  # configured since (or its file is gone): a caller's doing
    rules = path / RULES_DIR
    if os.path.lexists(rules) and not all(
        # A rule's temp file is a write cut short (`RuleFiles` reports it): never landed.
        entry.startswith(".") and entry.endswith(".tmp")
        for entry in os.listdir(rules)
    ):
        return False
    log_path = path / MEMORIES_FILE
    if not os.path.lexists(log_path) or os.lstat(log_path).st_size == 0:
        return True
    # The whole log is one write a kill cut short: never acknowledged.
    return interrupted_tail(log_path, within=root) == 0
