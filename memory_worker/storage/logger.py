"""Structured logs without importing structlog until a record is written.

Every module that logs does `log = get_logger(__name__)`; the logger imports structlog (~15-25 ms:
its dev renderer, tracebacks, stdlib and greenlet support) only when a record passes the level
`adapters.logs.configure_logging` chose, and applies that configuration then, once. A one-shot
CLI call that logs nothing at its level (a save: `store_opened` is info, the CLI's level is
warning) never imports it. What is written is what structlog would have written had it been
configured at once: the same processors, renderer, level and stream.

No configuration (a library caller, a test): every record goes to structlog as it stands.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Logger", "configure", "get_logger", "reset"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "exception": 40}
_lock = threading.Lock()
# The least level written (0: every record), and what configures structlog before the first one.
_state: dict[str, Any] = {"threshold": 0, "pending": None}


def configure(threshold: int, apply: Callable[[], None] | None) -> None:
    """Write records of `threshold` and above; `apply` (None: structlog is configured already)
    configures structlog, run before the first record is written."""
    with _lock:
        _state["threshold"], _state["pending"] = threshold, apply


def reset() -> None:
    """Back to no configuration (tests reset structlog between them, and this with it)."""
    with _lock:
        _state["threshold"], _state["pending"] = 0, None


class Logger:
    """The subset of structlog's bound logger the worker uses, by name."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def _emit(self, method: str, event: str, fields: dict[str, Any]) -> None:
        if _LEVELS[method] < _state["threshold"]:
            return
        if _state["pending"] is not None:
            with _lock:  # held while configuring: no other thread writes through structlog first
                apply = _state["pending"]
                if apply is not None:
                    apply()
                    _state["pending"] = None
        import structlog  # first use: see the module docstring

        getattr(structlog.get_logger(self._name), method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (call it inside `except`)."""
        self._emit("exception", event, fields)


def get_logger(name: str) -> Logger:
    return Logger(name)
