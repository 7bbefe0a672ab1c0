"""Structured logs (structlog) to stderr, one JSON object per line, so stdout stays the answer.

With `lazy`, structlog itself is imported, and configured, when the first record at the chosen
level is written (`storage.logger`): a one-shot command that logs nothing never loads it. Only
for a process whose every logger is `storage.logger`'s: memory-consolidate's modules (a sibling
package, which may not import storage) log through structlog directly, so a process that runs
them configures it at once."""

from __future__ import annotations

import argparse
import logging
import sys

from memory_worker.storage import logger

__all__ = ["configure_logging", "log_level"]


def log_level(value: str) -> str:
    """An argparse `type` for `--log-level`: a level name `logging` knows (any case). Another was
    a `KeyError` traceback when logging was configured, not the usage error every other bad
    option is."""
    if value.upper() not in logging.getLevelNamesMapping():
        raise argparse.ArgumentTypeError(f"{value!r} is not one of debug, info, warning, error")
    return value


def configure_logging(level: str = "warning", *, lazy: bool = False) -> None:
    threshold = logging.getLevelNamesMapping()[level.upper()]
    stream = sys.stderr  # as it is now, as configuring at once would have bound it

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
            logger_factory=structlog.PrintLoggerFactory(file=stream),
            cache_logger_on_first_use=False,
        )

    logger.configure(threshold, apply)
    if not lazy:
        apply()
        logger.configure(threshold, None)
