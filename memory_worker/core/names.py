"""Bank and rule names: they become folder and file names, so they are checked before any path."""

from __future__ import annotations

import re

from memory_worker.core.errors import InvalidInput

__all__ = ["NAME_PATTERN", "check_name"]

NAME_PATTERN = "[a-z0-9][a-z0-9_-]{0,63}"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: object, what: str = "name") -> str:
    """Return `name` when it matches `[a-z0-9][a-z0-9_-]{0,63}` exactly, else raise InvalidInput."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise InvalidInput(f"{what} {shown} must match {NAME_PATTERN}")
    return name
