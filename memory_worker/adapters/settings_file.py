"""Hot reload of the YAML settings file when there is no engine (standalone mode), and the
console's edits of it.

The same fields as the configuration worker's entry; an edit is applied like a configuration change
(`Reconfigurer`). A file that does not parse, or a `data_dir` that cannot be opened, is logged and
the last good settings and store stay in service: a typo never takes a running worker down.

`write_values` changes only the lines of the keys it sets (their comments, every other line and the
order stay as the person wrote them), checks the result parses to what was asked, and replaces the
file atomically.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import watchfiles
import yaml

from memory_worker.core.config import Settings, load_settings
from memory_worker.core.errors import InvalidInput, WorkerError
from memory_worker.storage import files
from memory_worker.storage.logger import get_logger

__all__ = ["SettingsFileWatcher", "rewrite", "write_values"]

log = get_logger(__name__)

DEBOUNCE_MS = 100


class SettingsFileWatcher:
    def __init__(self, path: Path, apply: Callable[[Settings], Awaitable[object]]) -> None:
        self.path = path.absolute()
        self._apply = apply
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.attempts = 0  # edits seen, applied or not (tests wait on `changed`)
        self.applied = 0  # of which took effect
        self.changed = asyncio.Condition()

    async def start(self) -> None:
        """Returns once the watch is in place: an edit made right after is seen."""
        self._task = asyncio.create_task(self._run(), name="memory-settings-watch")
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._task.done():
            await self._task  # it failed to start: say why

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        # The parent directory, not the file: editors replace files by rename. A file that is a
        # symbolic link (a dotfiles checkout, a mounted ConfigMap) is edited where it points, so
        # that folder is watched too, and a link that now points elsewhere counts as an edit.
        target = _target(self.path)
        folders = dict.fromkeys([self.path.parent, target.parent])
        changes_of = watchfiles.awatch(
            *folders, stop_event=self._stop, debounce=DEBOUNCE_MS, recursive=False
        )
        # The generator's first step creates the watch before it first waits; a callback
        # scheduled now runs after that step (the same trick as `watch.DataDirWatcher`).
        asyncio.get_running_loop().call_soon(self._ready.set)
        async for changes in changes_of:
            now = _target(self.path)
            touched = {Path(changed).absolute() for _, changed in changes}
            if now != target or not touched.isdisjoint({self.path, now}):
                target = now
                await self.reload()

    async def reload(self) -> None:
        try:
            # Bytes: a file in another encoding is `load_settings`'s to refuse, not an exception
            # that would end this watch (and every later edit with it).
            if not (await asyncio.to_thread(self.path.read_bytes)).strip():
                # An editor mid-save, or a truncated file: "all defaults" would move data_dir.
                raise InvalidInput(f"{self.path} is empty")
            settings = await asyncio.to_thread(load_settings, self.path)
            outcome = await self._apply(settings)
        except (WorkerError, OSError) as err:
            log.error("settings_rejected", path=str(self.path), error=str(err), kept="last good")
            outcome = None
        else:
            log.info("settings_file_applied", path=str(self.path), outcome=str(outcome))
        async with self.changed:
            self.attempts += 1
            self.applied += outcome is not None
            self.changed.notify_all()


def _target(path: Path) -> Path:
    """Where `path` leads once every symbolic link is followed (itself when it is none)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: watched as it is, refused when read
        return path


# What YAML reads as a character inside a quoted value but `str.splitlines` takes for a line end
# (`json.dumps` escapes the other ones, every control character): written raw, the next edit cut
# the line there and kept the rest as a line of its own, a key the console may not set.
_LINE_ENDS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _scalar(value: object) -> str:
    """`value` as a one-line JSON scalar (JSON is YAML)."""
    return json.dumps(value, ensure_ascii=False).translate(_LINE_ENDS)


_KEY_LINE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)[ \t]*:(?P<rest>.*?)(?P<end>\r?\n)?$")


def _comment(rest: str) -> str:
    """The trailing ` # comment` of a `key: value` line's remainder, kept on rewrite."""
    for match in re.finditer(r"[ \t]+#", rest):
        try:
            yaml.safe_load(rest[: match.start()] or "null")
        except yaml.YAMLError:
            continue  # the `#` sits inside a quoted value
        return rest[match.start() :]
    return ""


def rewrite(text: str, values: Mapping[str, object]) -> str:
    """`text` with each top-level `key:` line set to its new value (JSON is YAML, so values are
    written as JSON scalars); a key the file lacks is appended. An indented continuation of a
    replaced key (a block scalar) goes with it."""
    left = dict(values)
    out: list[str] = []
    replacing = False
    for line in text.splitlines(keepends=True):
        if replacing and line[:1] in (" ", "\t"):
            continue
        replacing = False
        match = _KEY_LINE.match(line)
        if match and match["key"] in left:
            value = _scalar(left.pop(match["key"]))
            out.append(f"{match['key']}: {value}{_comment(match['rest'])}\n")
            replacing = True
            continue
        out.append(line)
    if left and out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    out += [f"{key}: {_scalar(value)}\n" for key, value in left.items()]
    return "".join(out)


def write_values(
    path: Path, values: Mapping[str, object], check: Callable[[str], object] | None = None
) -> None:
    """Set `values` in the settings file at `path` (created when missing). Raises `InvalidInput`
    when the file does not hold a mapping or the edit would not read back as asked, or when
    `check` (given the whole new text) raises it; nothing is written then. Blocking: run it in a
    thread."""
    # A link (a dotfiles checkout) is followed: the file it points to is edited, the link kept.
    path = _target(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    updated = rewrite(text, values)
    try:
        parsed = yaml.safe_load(updated)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} would not parse after the edit: {exc}") from None
    if not isinstance(parsed, dict) or any(parsed.get(k) != v for k, v in values.items()):
        raise InvalidInput(f"{path} is not a flat mapping of settings the console can edit")
    if check is not None:
        check(updated)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(updated)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    # The console answers "saved" on return: the rename itself must survive a power loss.
    files.fsync_dir(path.parent)
