"""Where the data dir is: the flag, then `$MEMORY_DATA_DIR`, then the configured `data_dir`.

Apart from `core.config` (pydantic, the whole settings model) because a one-shot CLI call must
find the data dir before it knows whether a server holds it: a call forwarded to that server (a
coding agent's hook, once per prompt) never builds or validates the settings, and without them
it never imports pydantic (~50 ms of such a process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

__all__ = ["COMPOSE_DIR_ENV", "DATA_DIR_ENV", "DEFAULT_DATA_DIR", "resolve_data_dir"]

DATA_DIR_ENV = "MEMORY_DATA_DIR"
COMPOSE_DIR_ENV = "III_COMPOSE_DIR"
DEFAULT_DATA_DIR = "data/memory"  # the `data_dir` setting's default


class Configured(Protocol):
    """What the resolution reads of the settings."""

    @property
    def data_dir(self) -> str: ...


def resolve_data_dir(
    flag: str | None, settings: Configured | None, env: Mapping[str, str] | None = None
) -> Path:
    """flag → $MEMORY_DATA_DIR (both relative to the cwd) → config `data_dir` (relative to
    $III_COMPOSE_DIR when set, else the cwd). `settings` None: no configuration file, the
    default `data_dir`."""
    env = os.environ if env is None else env
    explicit = flag or env.get(DATA_DIR_ENV)
    if explicit:  # typed by a person: relative to where they are
        return Path(explicit).expanduser().absolute()
    path = Path(settings.data_dir if settings is not None else DEFAULT_DATA_DIR).expanduser()
    if not path.is_absolute():
        base = env.get(COMPOSE_DIR_ENV)
        path = (Path(base) if base else Path.cwd()) / path
    return path
