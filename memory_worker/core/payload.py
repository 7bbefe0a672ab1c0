"""Decoding a caller's JSON, bounded: every edge (REST, `trigger`, `call --batch`, `import`, the
bus) turns raw text into a payload here or checks an already decoded one with `check_depth`.

A payload is an object of scalars and short lists, so nesting past `MAX_DEPTH` is refused as
`invalid_input` before anything recursive (the decoder, validation, a log line) could hit
Python's recursion limit, and so is a payload of more than `MAX_VALUES` values in all, before
validation spends a Python call on each (110,000 tags once held the event loop for seconds);
`NaN` and `Infinity` are not JSON and are refused too, and so is a number past a float's range
(`1e400` decodes as infinity, which no door could pass on as JSON). Linear in the size of the
input, and the check stops at the first value past a limit.

Decoded text may still hold a lone surrogate (a `"\ud83d"` escape: a JavaScript string cut
inside an emoji), which has no UTF-8 form: `utf8_safe` is what an edge hands on instead where
the text must be encoded (a model's tokenizer, a capture job).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from memory_worker.core.errors import InvalidInput

__all__ = ["MAX_DEPTH", "MAX_VALUES", "check_depth", "loads", "utf8_safe"]

MAX_DEPTH = 32  # an honest payload nests 3 deep (object → list → string); 32 leaves room
MAX_VALUES = 10_000  # an honest call carries a few dozen (text, 8 tags, 8 entities, …)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads(raw: bytes | str, what: str, *, max_values: int | None = MAX_VALUES) -> object:
    """Decode `raw` (UTF-8) or raise `InvalidInput("<what> is not valid JSON: …")`.
    `max_values=None`: only the nesting is checked here, the count left to the caller (a call's
    own budget: `catalog.check_size`)."""
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidInput(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    check_depth(value, what, max_values=max_values)
    return value


# Exact types that are neither containers nor floats: nothing to check in them.
_LEAVES = frozenset({str, int, bool, type(None)})


def check_depth(
    value: object, what: str = "payload", *, max_values: int | None = MAX_VALUES
) -> None:
    """Refuse containers nested more than `MAX_DEPTH` deep, more than `max_values` values in all
    (None: any number), or a float that is not finite (iterative: never recursion itself)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            raise InvalidInput(f"{what} holds more than {max_values} values")
        if type(node) in _LEAVES:  # most values: skip the ABC check (every call checks these)
            continue
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            if isinstance(node, float) and not math.isfinite(node):
                raise InvalidInput(
                    f"{what} holds {node}: a JSON number is finite and at most 1.8e308 in size"
                )
            continue
        if depth > MAX_DEPTH:
            raise InvalidInput(f"{what} is nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a pair was decoded to one character already


def utf8_safe(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, so it has a UTF-8 form; the same
    string when it had one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text
