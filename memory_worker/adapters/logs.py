"""Structured logs (structlog) to stderr, one JSON object per line, so stdout stays the answer.

With `lazy`, structlog itself is imported, and configured, when the first record at the chosen
level is written (`storage.logger`): a one-shot command that logs nothing never loads it. Only
for a process whose every logger is `storage.logger`'s: memory-consolidate's modules (a sibling
package, which may not import storage) log through structlog directly, so a process that runs
them configures it at once."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import IO, TextIO, cast

from memory_worker.storage import logger

__all__ = ["configure_logging", "log_level"]


def log_level(value: str) -> str:
    """An argparse `type` for `--log-level`: a level name `logging` knows (any case). Another was
    a `KeyError` traceback when logging was configured, not the usage error every other bad
    option is."""
    if value.upper() not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"{value!r} is not one of debug, info, warning, error")
    return value


class _Sink:
    """The log's stream, whose failure is no one's: a reader gone (`serve 2>&1 | head`, a log
    collector that died: `BrokenPipeError`), a terminal closed (EIO) or a stream closed under
    it. Each line was written where it was logged, so the error came out of whatever was
    logging: a refused call answered a plain-text 500, and the SIGTERM handler, which logs
    `stopping` before it stops, never stopped the server. Such a line is dropped."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        # What reached the stream ends inside a line: a record's text without its newline, or
        # the part of one a full non-blocking pipe took (EAGAIN). The next record starts a line
        # of its own: glued to the cut one, a JSON-lines reader lost it too.
        self._mid_line = False

    def write(self, text: str) -> int:
        if self._mid_line and not text.startswith("\n"):
            text = "\n" + text
        try:
            written = self._stream.write(text)
        except BlockingIOError:
            # A full non-blocking pipe. Part of this line, or of one its buffer held, may go
            # out later whatever `characters_written` says: at worst the next line follows an
            # empty one.
            self._mid_line = True
            return 0
        except (OSError, ValueError):  # ValueError: a closed stream; nothing was written
            return 0
        self._mid_line = not text.endswith("\n")
        return written

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


def configure_logging(level: str = "warning", *, lazy: bool = False) -> None:
    threshold = logging.getLevelNamesMapping()[level.upper()]
    stream = _Sink(sys.stderr)  # as it is now, as configuring at once would have bound it

    def apply() -> None:
        import structlog

        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(threshold),
            # `write` and `flush` are all structlog's printer calls on it.
            logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, stream)),
            cache_logger_on_first_use=False,
        )

    logger.configure(threshold, apply)
    if not lazy:
        apply()
        logger.configure(threshold, None)
