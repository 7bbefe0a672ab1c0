"""In-process helpers shared by the reliability tests and `bench/reliability.py`: a seeded data dir,
what callers see of a store, a file-layer fault injector, and a disk grep for secrets."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.text import fingerprint
from memory_worker.storage.store import Store

from ..fakes import FixedClock, RecordingEmitter

__all__ = [
    "BLOG",
    "HOLDER",
    "NEW",
    "OLD",
    "PINNED",
    "SEED_IDS",
    "TEA",
    "WRITE_PATHS",
    "Injector",
    "answers",
    "disk_texts",
    "on_disk",
    "open_service",
    "seed",
    "write_through",
]

HOLDER = {"pid": os.getpid(), "kind": "test", "command": "pytest tests/reliability"}

TEA = "The user drinks green tea every morning"
PINNED = "Ana maintains the iii blog"
OLD = "The office is on Rua Augusta"
NEW = "The office is on Avenida Paulista"
BLOG = "Posts go out on Tuesday mornings"
SEED_IDS = {text: fingerprint(text) for text in (TEA, PINNED, OLD, NEW, BLOG)}


def open_service(
    data: Path, clock: FixedClock | None = None, emitter: RecordingEmitter | None = None
) -> MemoryService:
    store = Store.open(data, holder=HOLDER)
    return MemoryService(store, Settings(), emitter=emitter, clock=clock or FixedClock())


async def seed(data: Path) -> None:
    """`main` (tea with tags, a pinned memory, an old and a new office, rule `style`) and `blog`."""
    service = open_service(data)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory::save", {"text": TEA, "tags": ["tea", "morning"], "entities": ["user"]}),
        ("memory::save", {"text": PINNED, "pinned": True, "entities": ["ana"]}),
        ("memory::save", {"text": OLD}),
        ("memory::save", {"text": NEW}),
        ("memory::rule::set", {"name": "style", "content": "Answer briefly."}),
        ("memory::bank::create", {"name": "blog", "description": "The iii blog"}),
        ("memory::save", {"bank": "blog", "text": BLOG, "tags": ["blog"]}),
    ]
    try:
        for function_id, payload in calls:
            await catalog.call(service, function_id, payload)
    finally:
        await service.store.close()


def _without_rule_mtimes(value: Any) -> Any:
    """A rule's `updated_at` is its file's mtime; everything else must match exactly."""
    if isinstance(value, dict):
        is_rule = "content" in value and "name" in value
        return {
            k: _without_rule_mtimes(v)
            for k, v in value.items()
            if not (is_rule and k == "updated_at")
        }
    if isinstance(value, list | tuple):
        return [_without_rule_mtimes(v) for v in value]
    return value


async def answers(service: MemoryService) -> dict[str, Any]:
    """What callers see: the bank list, and each bank's rules and memories with history."""
    banks = await catalog.call(service, "memory::bank::list", {})
    out: dict[str, Any] = {"banks": banks}
    for info in banks["banks"]:
        name = info["name"]
        rules = await catalog.call(service, "memory::rule::list", {"bank": name})
        memories = await catalog.call(
            service, "memory::list", {"bank": name, "include_superseded": True, "limit": 500}
        )
        out[name] = {"rules": rules, "memories": memories}
    return dict(_without_rule_mtimes(out))


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class Injector:
    """Fails the k-th call of one `os` function (k=0 only counts) with `OSError(code)`.

    `point` is `fsync`, `write`, `write-partial` (the k-th write stores half its bytes, the next
    one fails: a disk filling up mid-record), `replace`, `rename`, `mkdir`, `open` (opens for
    writing only), `unlink` or `ftruncate`. `where` narrows the calls that count to those whose
    path (for fd arguments, the file the fd is open on) it accepts.
    """

    def __init__(
        self, point: str, k: int, code: int, where: Callable[[str], bool] | None = None
    ) -> None:
        self.point, self.k, self.code = point, k, code
        self.name = "write" if point == "write-partial" else point
        self.where = where
        self.calls = 0
        self.fired = False
        self._real = getattr(os, self.name)

    def __enter__(self) -> Injector:
        setattr(os, self.name, self._wrapper)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(os, self.name, self._real)

    def _counts(self, args: tuple[Any, ...]) -> bool:
        if self.name == "open" and not (len(args) > 1 and args[1] & _WRITE_FLAGS):
            return False  # reads are not a fault point
        if self.where is None:
            return True
        target = args[0]
        path = _fd_path(target) if isinstance(target, int) else os.fsdecode(target)
        return self.where(path)

    def _wrapper(self, *args: Any, **kwargs: Any) -> Any:
        if not self._counts(args):
            return self._real(*args, **kwargs)
        self.calls += 1
        if self.point == "write-partial":
            if self.calls == self.k and len(args[1]) > 1:
                self.fired = True
                return self._real(args[0], bytes(args[1])[: len(args[1]) // 2])
            if self.fired and self.calls == self.k + 1:
                raise OSError(self.code, os.strerror(self.code))
        elif self.calls == self.k:
            self.fired = True
            raise OSError(self.code, os.strerror(self.code))
        return self._real(*args, **kwargs)


def is_dir(path: str) -> bool:
    return os.path.isdir(path)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def disk_texts(data: Path) -> list[tuple[str, str]]:
    """Each file under `data` with its text in lower case: raw bytes, each decoded JSON line (so an
    escaped value counts) and decoded YAML (so a folded value counts)."""
    out = []
    for path in sorted(data.rglob("*")):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        texts = [raw.decode("utf-8", "replace")]
        if path.suffix == ".jsonl":
            for line in raw.splitlines():
                with contextlib.suppress(ValueError):
                    texts.extend(_strings(json.loads(line)))
        elif path.suffix == ".yaml":
            with contextlib.suppress(yaml.YAMLError):
                texts.extend(_strings(yaml.safe_load(raw)))
        out.append((path.relative_to(data).as_posix(), "\n".join(texts).lower()))
    return out


def on_disk(data: Path | list[tuple[str, str]], secret: str) -> list[str]:
    """Files under `data` (or an index from `disk_texts`) that hold `secret`, in any case."""
    index = disk_texts(data) if isinstance(data, Path) else data
    needle = secret.lower()
    return [path for path, text in index if needle in text]


# --- every write path a caller has -----------------------------------------------------------

WRITE_PATHS = (
    "save.text",
    "save.entities",
    "save.tags",
    "save.session_id",
    "update.text",
    "update.entities",
    "update.tags",
    "rule.content",
    "bank.description",
    "import.text",
    "import.entities",
    "import.tags",
    "import.source.session_id",
    "import.source.agent",
    "import.source.entry_id",
    "supersede.reason",
)


async def write_through(service: MemoryService, path: str, value: str, n: int) -> str:
    """Send `value` through one write path (`WRITE_PATHS`) of bank `main`; returns what the worker
    stored there (a reason is not stored: it rides on the events only)."""
    carrier = f"Carrier memory number {n} about tea"
    kind, _, field = path.partition(".")
    if kind == "save":
        payload: dict[str, Any] = {"text": carrier}
        payload[field] = [value] if field in ("entities", "tags") else value
        memory = (await catalog.call(service, "memory::save", payload))["memory"]
        if field == "session_id":
            return str(memory.get("source", {}).get("session_id", ""))
        return str(memory[field] if field == "text" else memory[field][0])
    if kind == "update":
        saved = await catalog.call(service, "memory::save", {"text": carrier})
        change = {field: value if field == "text" else [value]}
        payload = {"id": saved["memory"]["id"], **change}
        memory = (await catalog.call(service, "memory::update", payload))["memory"]
        return str(memory[field] if field == "text" else memory[field][0])
    if kind == "rule":
        await catalog.call(service, "memory::rule::set", {"name": f"rule-{n}", "content": value})
        rule = service.store.get("main").rule(f"rule-{n}")
        return rule.content if rule is not None else ""
    if kind == "bank":
        payload = {"name": f"bank-{n}", "description": value}
        created = await catalog.call(service, "memory::bank::create", payload)
        return str(created["bank"]["description"])
    if kind == "supersede":
        a = await catalog.call(service, "memory::save", {"text": carrier})
        b = await catalog.call(service, "memory::save", {"text": carrier + " and coffee"})
        ids = {"id": a["memory"]["id"], "superseded_by": b["memory"]["id"]}
        await catalog.call(service, "memory::supersede", {**ids, "reason": value})
        return value
    row: dict[str, Any] = {"text": carrier}
    if field == "text":
        row["text"] = value
    elif field in ("entities", "tags"):
        row[field] = [value]
    else:
        row["source"] = {field.split(".")[1]: value}
    bank = service.store.get("main")
    before = set(bank.memories)
    await service.import_records("main", [row])
    stored = next((m for i, m in bank.memories.items() if i not in before), None)
    if stored is None:
        return ""
    if field == "text":
        return stored.text
    if field in ("entities", "tags"):
        return str(getattr(stored, field)[0])
    return str(getattr(stored.source, field.split(".")[1], "") or "")
