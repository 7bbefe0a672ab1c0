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
# Ours is a few hundred bytes (a 500-character description, a dozen settings). A bigger one was
# not written by us, and YAML 1.1 reads a long `1:2:3:…` scalar as a base-60 number in time
# quadratic in its length: a planted 200 KB value held a bank's load (and a server's boot) 2.4 s.
MAX_BANK_FILE_BYTES = 64 * 1024


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
        raw = files.read_bytes(path, within=within, at_most=MAX_BANK_FILE_BYTES)
    except StorageError as exc:
        if files.is_transient(exc):
            raise
        return BankFile("", no_overrides(), f"{exc.message}; description and settings ignored")
    if len(raw) > MAX_BANK_FILE_BYTES:
        problem = f"larger than {MAX_BANK_FILE_BYTES // 1024} KiB; description and settings ignored"
        return BankFile("", no_overrides(), problem)
    if raw == PLAIN_BANK_FILE:
        return BankFile("", no_overrides())
    import yaml  # only a bank.yaml with something in it needs the parser

    text = raw.decode("utf-8", errors="replace")
    broken = None
    try:
        data = yaml.safe_load(text)
    # Nested too deep is unreadable, not fatal; so is an integer past Python's digit limit
    # (ValueError from the int constructor, not a YAMLError): the bank failed to load.
    except (yaml.YAMLError, RecursionError, ValueError):
        # Each top-level entry read on its own: a slip in one (a description edited to "Ana's
        # notes: private") dropped every setting, the bank's `conscious_access` and
        # `subject_scoping` with it, so agents could read and write a bank at `none` and every
        # person's memories surfaced for everyone.
        data = _entries(text)
        broken = "not valid YAML; only the entries that read on their own apply"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return BankFile("", no_overrides(), "not a mapping; description and settings ignored")
    # Absent (`_entries` dropped an entry that did not read) is read again as written too.
    description = _description(data.get("description", _ABSENT), text)
    chosen = {key: v for key, v in data.items() if key != "description"}
    try:
        overrides = parse_overrides(chosen, source=BANK_FILE)
    except InvalidInput as exc:
        # Only the settings that are wrong are ignored: one typo dropping them all lifted the
        # bank's access level (`conscious_access`) and its partition by person.
        problem = f"settings ignored: {exc.message}"
        kept = _valid_part(chosen)
        if kept.conscious_access == "none" and chosen.get("conscious_access") != "none":
            problem += "; agents are held at conscious_access none until it is fixed"
        return BankFile(description, kept, f"{broken}; {problem}" if broken else problem)
    return BankFile(description, overrides, broken)


_ABSENT = object()  # no `description` entry read (none written, or one that did not read)


def _description(value: object, text: str) -> str:
    """The description `value` as written in `text`. The public Rust worker wrote the file with
    serde_yaml, which speaks YAML 1.2: a date (`2024-01-05`), `1_000` or `12:30` is a string
    there and left unquoted, while this parser (YAML 1.1) reads a date, 1000 and 750 — the
    description was lost, and gone from the file at the bank's next `configure`. Such a
    scalar is read again as its text; null or a mapping is no description."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, dict | list):
        return ""
    # `value` is a scalar YAML 1.1 resolved to another type, or _ABSENT: read as its text.
    import yaml

    try:  # BaseLoader: every scalar as its text, nothing resolved (nor constructed)
        raw = yaml.load(text, Loader=yaml.BaseLoader)
    except (yaml.YAMLError, RecursionError):
        raw = _entries(text, as_written=True)
    written = raw.get("description") if isinstance(raw, dict) else None
    return written if isinstance(written, str) else ""


def _entries(text: str, *, as_written: bool = False) -> dict[object, object]:
    """The top-level entries of a `bank.yaml` that is not YAML as a whole, each parsed alone (a
    line at the margin starts one; the indented lines, list items and comments under it are
    its own); those that do not parse are left out. `as_written`: every scalar as its text."""
    import yaml

    chunks: list[list[str]] = []
    for line in text.splitlines():
        if not chunks or line[:1] not in ("", " ", "\t", "#", "-"):
            chunks.append([line])
        else:
            chunks[-1].append(line)
    data: dict[object, object] = {}
    for chunk in chunks:
        try:
            joined = "\n".join(chunk)
            entry = (
                yaml.load(joined, Loader=yaml.BaseLoader) if as_written else yaml.safe_load(joined)
            )
        except (yaml.YAMLError, RecursionError, ValueError):
            continue
        if isinstance(entry, dict):
            data.update(entry)
    return data


def _valid_part(chosen: dict[str, object]) -> BankOverrides:
    """The settings of `chosen` that are valid each on its own (none if together they are not).
    An access level that does not read is `none`, not the configured default: whoever wrote one
    meant to set it, and a typo (`conscious_access: None`, YAML's `no`) must not hand agents
    every memory tool (seed 004's involuntary stance until the file is fixed)."""
    kept: dict[str, object] = {}
    for key, value in chosen.items():
        try:
            parse_overrides({key: value}, source=BANK_FILE)
        except InvalidInput:
            if key == "conscious_access":
                kept[key] = "none"
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
