"""`bank.yaml`: a bank's description and the settings it chose, one small YAML mapping.

Read tolerantly (a hand edit that breaks it is reported as damage and the bank runs on its
configured defaults, never refused; a wrong setting is ignored alone, the others apply), written
atomically (temp file, fsync, rename), so a crash leaves the old file or the new one. Only chosen
settings are written: the others follow the configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memory_worker.core.bank_settings import BankOverrides, no_overrides, parse_overrides
from memory_worker.core.errors import InvalidInput, StorageError
from memory_worker.storage import files

__all__ = ["BANK_FILE", "BankFile", "read_bank_file", "render_bank_file", "write_bank_file"]

BANK_FILE = "bank.yaml"
# What `render_bank_file` writes for a bank with no description and no chosen setting (a test
# keeps them equal): the common case, read without importing the YAML parser (~20 ms of a
# one-shot process: the module and the regular expressions it compiles at import).
PLAIN_BANK_FILE = b"description: ''\n"


@dataclass(frozen=True, slots=True)
class BankFile:
    description: str
    overrides: BankOverrides
    problem: str | None = None  # why (part of) the file was ignored, for the damage report


def read_bank_file(path: Path, *, within: Path | None = None) -> BankFile:
    """What `path` says; an absent file is an empty description with no choices. Blocking. A
    link planted there (or above it, below `within`) is reported, never followed; running out of
    file descriptors says nothing about the file and raises (`StorageError`)."""
    if not os.path.lexists(path):
        return BankFile("", no_overrides())
    try:
        raw = files.read_bytes(path, within=within)
    except StorageError as exc:
        if files.is_transient(exc):
            raise
        return BankFile("", no_overrides(), f"{exc.message}; description and settings ignored")
    if raw == PLAIN_BANK_FILE:
        return BankFile("", no_overrides())
    import yaml  # only a bank.yaml with something in it needs the parser

    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except (yaml.YAMLError, RecursionError):  # nested too deep is unreadable, not fatal
        return BankFile("", no_overrides(), "not valid YAML; description and settings ignored")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return BankFile("", no_overrides(), "not a mapping; description and settings ignored")
    value = data.get("description")
    description = value if isinstance(value, str) else ""
    chosen = {key: v for key, v in data.items() if key != "description"}
    try:
        overrides = parse_overrides(chosen, source=BANK_FILE)
    except InvalidInput as exc:
        # Only the settings that are wrong are ignored: one typo dropping them all lifted the
        # bank's access level (`conscious_access`) and its partition by person.
        return BankFile(description, _valid_part(chosen), f"settings ignored: {exc.message}")
    return BankFile(description, overrides)


def _valid_part(chosen: dict[str, object]) -> BankOverrides:
    """The settings of `chosen` that are valid each on its own (none if together they are not)."""
    kept = {}
    for key, value in chosen.items():
        try:
            parse_overrides({key: value}, source=BANK_FILE)
        except InvalidInput:
            continue
        kept[key] = value
    try:
        return parse_overrides(kept, source=BANK_FILE)
    except InvalidInput:
        return no_overrides()


def render_bank_file(description: str, overrides: BankOverrides) -> bytes:
    import yaml  # see `read_bank_file`

    body = {"description": description, **overrides.chosen()}
    return yaml.safe_dump(body, allow_unicode=True, sort_keys=False).encode()


def write_bank_file(
    path: Path, description: str, overrides: BankOverrides, *, within: Path | None = None
) -> None:
    """Replace `path` atomically (blocking; `StorageError` on failure, the old file intact)."""
    files.atomic_write(path, render_bank_file(description, overrides), within=within)
