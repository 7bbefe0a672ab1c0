"""Decoding a caller's JSON, bounded: every edge (REST, `trigger`, `call --batch`, `import`, the
bus) turns raw text into a payload here or checks an already decoded one with `check_depth`.

A payload is an object of scalars and short lists, so nesting past `MAX_DEPTH` is refused as
`invalid_input` before anything recursive (the decoder, validation, a log line) could hit
Python's recursion limit; `NaN` and `Infinity` are not JSON and are refused too. Linear in the
size of the input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memory_worker.core.errors import InvalidInput

__all__ = ["MAX_DEPTH", "check_depth", "loads"]

MAX_DEPTH = 32  # an honest payload nests 3 deep (object → list → string); 32 leaves room


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads(raw: bytes | str, what: str) -> object:
    """Decode `raw` (UTF-8) or raise `InvalidInput("<what> is not valid JSON: …")`."""
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    check_depth(value, what)
    return value


def check_depth(value: object, what: str = "payload") -> None:
    """Refuse containers nested more than `MAX_DEPTH` deep (iterative: never recursion itself)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth > MAX_DEPTH:
            raise InvalidInput(f"{what} is nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)
