"""The catalog's function ids without the catalog: what a forwarded call needs to know.

A one-shot command whose data dir is held by a server (`memory-worker trigger`, a coding agent's
hook: a new process each time) only names a function and posts its payload; the server validates
it. Importing `app.catalog` for that would load every request and response model and the whole
service (most of a second of CPU per process), so this module holds the ids alone, in catalog
order, and imports nothing heavier than `core.errors`. tests/test_catalog.py keeps it equal to
`catalog.CATALOG`.
"""

from __future__ import annotations

from memory_worker.core.errors import InvalidInput

__all__ = ["FUNCTION_IDS", "check_known", "http_path"]

FUNCTION_IDS: tuple[str, ...] = (
    "memory::bank::create",
    "memory::bank::list",
    "memory::bank::get",
    "memory::bank::configure",
    "memory::bank::delete",
    "memory::save",
    "memory::get",
    "memory::history",
    "memory::list",
    "memory::update",
    "memory::delete",
    "memory::pin",
    "memory::supersede",
    "memory::forget-subject",
    "memory::stats",
    "memory::tags",
    "memory::recall",
    "memory::preview",
    "memory::lessons::match",
    "memory::rule::list",
    "memory::rule::set",
    "memory::doctor",
    "memory::import",
    "memory::export",
    "memory::compact",
    "memory::reload",
)
_KNOWN = frozenset(FUNCTION_IDS)


def check_known(function_id: str) -> None:
    """`invalid_input` for an id the catalog does not have (the message `catalog.find` gives)."""
    if function_id not in _KNOWN:
        raise InvalidInput(f"unknown function {function_id!r}; known: {', '.join(FUNCTION_IDS)}")


def http_path(function_id: str) -> str:
    """`memory::rule::set` → `memory/rule/set`, as the iii http triggers name it."""
    return function_id.replace("::", "/")
