"""Error types with stable wire codes.

`str(err)` is always `"<code>: <message>"`: the bus only carries a message for Python
handlers, so callers match on the prefix. The core raises these; each edge (bus, CLI, REST)
translates once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ERROR_CLASSES",
    "ERROR_CODES",
    "HTTP_STATUS",
    "BankNotFound",
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "MemoryNotFound",
    "ProseReply",
    "SiblingDown",
    "SiblingUnavailable",
    "StorageError",
    "WorkerError",
    "loggable",
    "validation_problem",
]


class WorkerError(Exception):
    """Base of every error the worker reports to a caller."""

    code = "internal"

    def __init__(self, message: str) -> None:
        message = _encodable(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def _encodable(message: str) -> str:
    """A message every edge can write out: a lone surrogate echoed from a caller's input (an id,
    a name) becomes its `\\udXXX` escape instead of failing the answer that carries it."""
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        return message.encode("utf-8", "backslashreplace").decode("utf-8")
    return message


class InvalidInput(WorkerError):
    """Bad request shape or values: names, text length, types."""

    code = "invalid_input"


class BankNotFound(WorkerError):
    """A read or mutation names a bank that does not exist."""

    code = "bank_not_found"


class MemoryNotFound(WorkerError):
    """The id is unknown in the bank."""

    code = "memory_not_found"


class Conflict(WorkerError):
    """Well-formed, but the state forbids it (pinned, retired, duplicate text, locked dir)."""

    code = "conflict"


class Forbidden(WorkerError):
    """An agent asked for more than its bank's `conscious_access` allows: none, read, read_write."""

    code = "forbidden"


class StorageError(WorkerError):
    """The disk refused: unwritable data dir, failed write or fsync, unreadable bank."""

    code = "storage"


class SiblingUnavailable(WorkerError):
    """A sibling worker (router, session-manager, queue, state) is missing, timed out or failed."""

    code = "sibling_unavailable"


class SiblingDown(SiblingUnavailable):
    """Nothing answers at the sibling's address at all (refused, unresolved, a gateway saying
    it is down or busy): the same for every request, so a retry queue pauses as a whole instead
    of charging the failure to the job at hand. Same wire code as its parent. `retry_after_ms`:
    how long the sibling said to wait (a rate limit's `Retry-After`), when it said."""

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class ProseReply(SiblingUnavailable):
    """The extraction model answered in words, with no attempt at the JSON it was asked for (a
    refusal, a chat answer): not a transient failure, so a retry queue gives up early instead
    of asking the same thing for its every attempt. Same wire code as its parent.

    `words`, the reply quoted (a dead capture job's recorded reason), may quote the memories the
    model was shown: `loggable` leaves them out of log lines."""

    def __init__(self, message: str, words: str = "") -> None:
        super().__init__(f"{message}: {words}" if words else message)
        self.without_words = message


def loggable(exc: BaseException) -> str:
    """`str(exc)` for a log line: no memory text in logs, so a reply in prose is named, not
    quoted (it may repeat what the model was shown)."""
    if isinstance(exc, ProseReply):
        return f"{exc.code}: {exc.without_words}"
    return str(exc)


# Every stable code and its class: what a client reading `code: message` (a forwarded call, a
# sibling's reply) turns back into the same exception.
ERROR_CLASSES: dict[str, type[WorkerError]] = {
    cls.code: cls
    for cls in (
        InvalidInput,
        BankNotFound,
        MemoryNotFound,
        Conflict,
        Forbidden,
        StorageError,
        SiblingUnavailable,
    )
}

ERROR_CODES: dict[str, str] = {
    code: (cls.__doc__ or "").strip() for code, cls in ERROR_CLASSES.items()
}

# The HTTP status each code maps to, for both REST edges (standalone and the http worker).
HTTP_STATUS: dict[str, int] = {
    InvalidInput.code: 400,
    BankNotFound.code: 404,
    MemoryNotFound.code: 404,
    Conflict.code: 409,
    Forbidden.code: 403,
    StorageError.code: 503,
    SiblingUnavailable.code: 503,
}


def validation_problem(err: Mapping[str, Any], whole: str) -> str:
    """One of pydantic's validation errors (`ValidationError.errors()`) as `field: what is
    wrong`; `whole` names a problem of no one field. A check of ours raises `ValueError` in its
    own words, which pydantic reports as "Value error, …": the words are given as they are, and
    when the check is the whole request's (no field), they name their field themselves."""
    where = ".".join(str(part) for part in err.get("loc", ()))
    message = str(err.get("msg", ""))
    if err.get("type") == "value_error":
        message = message.removeprefix("Value error, ")
        if not where:
            return message
    return f"{where or whole}: {message}"
