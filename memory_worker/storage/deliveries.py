"""Which lesson revisions each conversation was given, kept under the data dir (no engine).

One small JSON file per conversation, `<data_dir>/.lessons-delivered/<sha256 of its id>.json`,
replaced atomically on every delivery. One file per conversation rather than one shared log because
outside iii every coding-agent hook call is a new process: it reads its own conversation's file
(a few hundred bytes) instead of replaying everybody's history, and a crash mid-write leaves the
previous file whole. The data dir's lock means one process writes at a time, so the RAM copy a
long-lived server keeps in front stays true. Conversations untouched for `RETENTION_DAYS` are
pruned (once per process, at its first delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from memory_worker.core.errors import StorageError
from memory_worker.storage import files
from memory_worker.storage.logger import get_logger

__all__ = ["DELIVERIES_DIR", "MAX_KEYS_PER_CONVERSATION", "FileDeliveries", "erase_delivered"]

log = get_logger(__name__)

DELIVERIES_DIR = ".lessons-delivered"  # a dot name: never taken for a bank, never watched
MAX_KEYS_PER_CONVERSATION = 4096  # oldest first out: a conversation never needs more cards
RETENTION_DAYS = 30  # a coding session is over long before; a later one may get the cards again
CACHE_CONVERSATIONS = 1024


def _file_name(conversation: str) -> str:
    return hashlib.sha256(conversation.encode("utf-8", "surrogatepass")).hexdigest()[:32] + ".json"


def _without(bank: str, ids: Collection[str]) -> Callable[[dict[str, str]], dict[str, str]]:
    """A ledger less the keys of memories `ids` of `bank` (`<bank>/<id>@<revision>`)."""
    gone = {f"{bank}/{memory_id}" for memory_id in ids}
    return lambda delivered: {
        k: v for k, v in delivered.items() if k.rpartition("@")[0] not in gone
    }


def erase_delivered(root: Path, bank: str, ids: Collection[str]) -> int:
    """Take the keys of memories `ids` of `bank` out of every conversation's file under `root`
    (blocking; `memory::forget-subject`): a key holds the memory's id, a fingerprint of its words,
    kept up to `RETENTION_DAYS` after they were erased. A file that cannot be read goes whole (it
    costs a re-delivery). Each keeps its time (its retention is its own). Returns the files
    changed."""
    if not ids:
        return 0
    keep = _without(bank, ids)
    folder = root / DELIVERIES_DIR
    try:
        found = list(os.scandir(folder))
    except OSError:
        return 0
    entries = [entry for entry in found if entry.name.endswith(".json")]
    changed = _erase_in_temps(root, bank, ids, [e for e in found if e.name.endswith(".tmp")])
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                # Planted: ours are files. Removed as an unreadable one, the unlink failed the
                # erasure half way (its log rewritten, nothing announced, the other files kept).
                continue
            times = entry.stat(follow_symlinks=False)
            raw = json.loads(files.read_text(path, within=root))
        except (OSError, ValueError, RecursionError, StorageError):
            raw = None
        delivered = raw.get("delivered") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(delivered, dict):
            files.remove_file(path, within=root)
            changed += 1
            continue
        left = keep(delivered)
        if len(left) == len(delivered):
            continue
        data = json.dumps({**raw, "delivered": left}, ensure_ascii=False, separators=(",", ":"))
        files.atomic_write(path, data.encode(), within=root)
        with contextlib.suppress(OSError):
            os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns), follow_symlinks=False)
        changed += 1
    return changed


def _erase_in_temps(
    root: Path, bank: str, ids: Collection[str], temps: list[os.DirEntry[str]]
) -> int:
    """Remove the temp files of ledger writes (`files.atomic_write`'s) that hold a key of `ids`:
    a write killed before its rename left one for good (nothing else reads or prunes them), with
    the ids in it. One still under way is a delivery the erasure would undo anyway (the service
    makes them wait for each other), so failing its rename costs a re-delivery, nothing more."""
    needles = [f"{bank}/{memory_id}@".encode() for memory_id in ids]
    removed = 0
    for entry in temps:
        path = Path(entry.path)
        try:
            raw = files.read_bytes(path, within=root)
        except StorageError:
            continue  # gone meanwhile (renamed into place: a ledger the next erasure reads)
        if any(needle in raw for needle in needles):
            files.remove_file(path, within=root)
            removed += 1
    return removed


class FileDeliveries:
    """The `Deliveries` port on files: `delivered` → `{lesson key: step}`, `record` replaces it."""

    def __init__(self, root: Path) -> None:
        self.folder = root / DELIVERIES_DIR
        self._cache: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._pruned = False

    def __repr__(self) -> str:
        return f"<FileDeliveries {str(self.folder)!r} cached={len(self._cache)}>"

    async def delivered(self, conversation: str) -> dict[str, str]:
        cached = self._cache.get(conversation)
        if cached is None:
            cached = await asyncio.to_thread(self._read, conversation)
            self._remember(conversation, cached)
        return dict(cached)

    async def record(self, conversation: str, delivered: Mapping[str, str]) -> None:
        """Persist `delivered` (the whole mapping) before RAM believes it."""
        kept = dict(delivered)
        if len(kept) > MAX_KEYS_PER_CONVERSATION:
            kept = dict(list(kept.items())[-MAX_KEYS_PER_CONVERSATION:])
        await asyncio.to_thread(self._write, conversation, kept)
        self._remember(conversation, kept)
        if not self._pruned:
            self._pruned = True
            await asyncio.to_thread(self._prune)

    async def forget(self, conversation: str) -> None:
        self._cache.pop(conversation, None)
        try:
            await asyncio.to_thread(files.remove_file, self.folder / _file_name(conversation))
        except StorageError as exc:  # the file outlives the session: it is pruned later
            log.warning("deliveries_forget_failed", error=str(exc))

    async def erase(self, bank: str, ids: Collection[str]) -> None:
        """`erase_delivered`, and the same keys out of RAM (first: a later delivery writes its
        conversation's whole ledger back from there)."""
        self.erase_cached(bank, ids)
        await asyncio.to_thread(erase_delivered, self.folder.parent, bank, ids)

    def erase_cached(self, bank: str, ids: Collection[str]) -> None:
        """The keys of memories `ids` of `bank` out of RAM only: the files lost them already (an
        erasure finished by a bank's load, `erasure.resume`)."""
        if not ids:
            return
        keep = _without(bank, ids)
        for conversation, delivered in list(self._cache.items()):
            self._cache[conversation] = keep(delivered)

    def _remember(self, conversation: str, delivered: dict[str, str]) -> None:
        self._cache[conversation] = delivered
        self._cache.move_to_end(conversation)
        while len(self._cache) > CACHE_CONVERSATIONS:
            self._cache.popitem(last=False)

    def _read(self, conversation: str) -> dict[str, str]:
        path = self.folder / _file_name(conversation)
        if not path.exists():
            return {}
        try:
            raw = json.loads(files.read_text(path))
        except (ValueError, RecursionError):
            # A damaged file (a hand edit, a disk fault) costs re-delivery, never the call.
            log.warning("deliveries_unreadable", path=str(path))
            return {}
        delivered = raw.get("delivered") if isinstance(raw, dict) else None
        if not isinstance(delivered, dict) or raw.get("conversation") != conversation:
            return {}
        return {str(k): v for k, v in delivered.items() if isinstance(v, str)}

    def _write(self, conversation: str, delivered: dict[str, str]) -> None:
        try:
            self.folder.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create {self.folder}: {exc.strerror or exc}") from exc
        else:
            # The new folder's entry durable before a delivery inside it counts as kept (a power
            # loss took the folder and the record with it: a lesson given a second time).
            files.fsync_dir(self.folder.parent)
        body = {
            "conversation": conversation,
            "delivered": delivered,
            "updated_at": int(time.time() * 1000),
        }
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        files.atomic_write(self.folder / _file_name(conversation), data)

    def _prune(self) -> None:
        horizon = time.time() - RETENTION_DAYS * 86_400
        try:
            entries = list(os.scandir(self.folder))
        except OSError:
            return
        for entry in entries:
            try:
                if entry.name.endswith(".json") and entry.stat().st_mtime < horizon:
                    os.unlink(entry.path)
            except OSError:
                continue
