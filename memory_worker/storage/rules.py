"""A bank's `rules/` folder: one markdown file per rule, read at load, written atomically.

RAM follows the disk, never the other way round: after every write or removal (failed ones too —
a rename may have landed whose directory sync did not) the rule is re-read from its file, so a
reboot changes nothing a caller was told. A link (the `rules/` folder, or a rule file) is never
followed: reported at load, refused on write, so no rule reads or replaces a file elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from pathlib import Path

from memory_worker.core.errors import Conflict, StorageError
from memory_worker.core.models import Rule
from memory_worker.storage import files
from memory_worker.storage.damage import Damage, DurabilityWarnings
from memory_worker.storage.logger import get_logger

__all__ = ["RULES_DIR", "RuleFiles", "revision_of"]

RULES_DIR = "rules"
_SUFFIX = ".md"
# The temp file of a rule write (`files.atomic_write`) that never reached its rename.
_LEFTOVER = re.compile(r"\.[^/]+\.md\.[0-9a-f]{8}\.tmp")

log = get_logger(__name__)


def revision_of(content: str) -> str:
    """A rule's revision: derived from its bytes, so it survives restarts and a hand edit changes
    it like any write (no counter to keep beside the file)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def _rule(name: str, content: str, path: Path) -> Rule:
    return Rule(
        name=name, content=content, updated_at=_mtime_ms(path), revision=revision_of(content)
    )


def _mtime_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return 0


class RuleFiles:
    """The rules of one bank, by name."""

    def __init__(
        self, bank: str, folder: Path, warnings: DurabilityWarnings, *, within: Path | None = None
    ) -> None:
        self._bank = bank
        self._folder = folder
        self._within = within  # the data dir: no folder from it down to a rule may be a link
        self._warnings = warnings
        self._rules: dict[str, Rule] = {}
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._rules)

    def load(self) -> list[Damage]:
        """Read every rule file (blocking); returns what was skipped."""
        damage: list[Damage] = []
        folder = self._folder
        if files.is_link(folder):
            return [Damage(RULES_DIR, f"{files.planted(folder).message}; no rule was read")]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name) if folder.is_dir() else []
        except OSError as exc:
            if files.is_transient(exc):
                raise
            return [Damage(RULES_DIR, f"unreadable: {exc.strerror or exc}")]
        for entry in entries:
            if entry.is_symlink():
                if entry.name.endswith(_SUFFIX) or entry.name.startswith("."):
                    reason = f"{files.planted(entry.path).message}; not read as a rule"
                    damage.append(Damage(f"{RULES_DIR}/{entry.name}", reason))
                continue
            if entry.name.startswith("."):
                if entry.name.endswith(".tmp") and not self._leftover_removed(entry):
                    damage.append(
                        Damage(
                            f"{RULES_DIR}/{entry.name}",
                            "leftover temp file of an interrupted "
                            "rule write (the rule itself is intact); safe to delete",
                        )
                    )
                continue
            if not entry.name.endswith(_SUFFIX) or not entry.is_file(follow_symlinks=False):
                continue
            path = Path(entry.path)
            try:
                _check_name(entry.name)
                content = files.read_text(path, within=self._within)
            except StorageError as exc:
                if files.is_transient(exc):
                    raise  # out of descriptors: the load fails (and is retried), no rule lost
                shown = os.fsencode(entry.name).decode("utf-8", "backslashreplace")
                damage.append(Damage(f"{RULES_DIR}/{shown}", exc.message))
                continue
            name = entry.name[: -len(_SUFFIX)]
            self._rules[name] = _rule(name, content, path)
        return damage

    def _leftover_removed(self, entry: os.DirEntry[str]) -> bool:
        """Remove `entry` when it is the temp file of one of our rule writes that never reached
        its rename (`files.atomic_write`'s `.<name>.md.<hex>.tmp`: a process killed mid-write;
        never acknowledged, the rule file still the truth), as a bank's load removes its log's
        (`files.remove_replacements`). Left for a person, as damage, when it is not one
        (another shape, not a plain file) or cannot be removed."""
        if not _LEFTOVER.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
            return False
        try:
            os.unlink(entry.path)
        except OSError:
            return False
        log.info("rule_write_leftover_removed", bank=self._bank, file=entry.name)
        return True

    def all(self) -> list[Rule]:
        return [self._rules[name] for name in sorted(self._rules)]

    def get(self, name: str) -> Rule | None:
        return self._rules.get(name)

    def contents(self) -> dict[str, str]:
        return {name: rule.content for name, rule in self._rules.items()}

    @property
    def busy(self) -> bool:
        """A write is in flight: the folder is ours mid-change."""
        return self._lock.locked()

    async def drain(self) -> None:
        async with self._lock:
            pass

    async def set(
        self,
        name: str,
        content: str,
        *,
        refusal: str | None = None,
        expected_revision: str | None = None,
    ) -> bool:
        """Write `rules/<name>.md` atomically, or remove it when `content` is blank; returns whether
        the rule changed (its content, or whether it exists), compared under the lock: of calls
        writing the same text at once, only the first changes anything. `refusal`: why the bank
        takes no writes now (checked under the lock, so a write never slips past a freeze).
        `expected_revision`: the revision the caller read ("" for none); checked against the file
        itself under the lock, so a hand edit that RAM has not seen yet is a conflict too."""
        path = self._folder / f"{name}{_SUFFIX}"
        async with self._lock:
            before = self._rules.get(name)
            if refusal is not None:
                raise StorageError(f"bank {self._bank} cannot be written: {refusal}")
            if expected_revision is not None:
                await asyncio.to_thread(self._check_revision, name, path, expected_revision)
            removing = not content.strip()
            try:
                if removing:
                    await asyncio.to_thread(files.remove_file, path, within=self._within)
                else:
                    data = content.encode("utf-8")
                    await asyncio.to_thread(_write_rule, path, data, self._within)
            except files.UnsyncedChange as exc:
                change = f"rule {name} {'removed' if removing else 'written'}"
                self._warnings.note(self._bank, change, exc)
                raise
            finally:
                self._sync(name, path)
            after = self._rules.get(name)
            return (before.content if before else None) != (after.content if after else None)

    @staticmethod
    def _check_revision(name: str, path: Path, expected: str) -> None:
        try:
            current = revision_of(files.read_text(path)) if path.exists() else ""
        except StorageError:
            current = "unreadable"
        if current != expected:
            now = f"at revision {current}" if current else "absent"
            wanted = f"expected {expected}" if expected else "expected it not to exist"
            raise Conflict(
                f"stale revision: rule {name} is {now}, {wanted}; read it again and retry"
            )

    def _sync(self, name: str, path: Path) -> None:
        try:
            content = files.read_text(path, within=self._within)
        except StorageError:
            self._rules.pop(name, None)
            return
        self._rules[name] = _rule(name, content, path)

    def on_disk(self) -> dict[str, str]:
        """The rules `load()` would read (same filter, unreadable files skipped alike): what a
        hand edit is detected against. Blocking."""
        folder = self._folder
        try:
            entries = list(os.scandir(folder)) if files.is_real_dir(folder) else []
        except OSError:
            return {}
        found: dict[str, str] = {}
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(_SUFFIX):
                continue
            if not _utf8(entry.name):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    text = files.read_text(Path(entry.path), within=self._within)
                    found[entry.name[: -len(_SUFFIX)]] = text
            except (OSError, StorageError):
                continue
        return found


def _check_name(name: str) -> None:
    if not _utf8(name):
        raise StorageError("its name is not UTF-8 (rename it); not read as a rule")


def _utf8(name: str) -> bool:
    """Whether a file name decoded to text (a byte that is not UTF-8 becomes a lone surrogate,
    which no answer or system prompt can carry: every JSON reader refuses it)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _write_rule(path: Path, data: bytes, within: Path | None) -> None:
    files.check_folders(path.parent.parent, within)
    try:
        path.parent.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
    else:
        # A bank without `rules/` (made by hand, or by an older worker): the new folder's entry
        # must be durable before a rule inside it is acknowledged, or a power loss takes the
        # folder, and the rule with it. A failed sync takes the folder back out, so the call
        # changes nothing and a retry makes (and syncs) it again.
        try:
            files.fsync_dir(path.parent.parent)
        except StorageError:
            with contextlib.suppress(OSError):
                path.parent.rmdir()
            raise
    files.atomic_write(path, data, within=within)
