"""What the association lanes (C21) hold, built the same way at store and at recall time.

A memory's `context` is the conversation window it was formed in and its `intention` the user's
message it came from; a recall's are the current window and the latest user message. Building
both sides with one function keeps them comparable: the lane asks "was this memory formed in a
situation like this one", which only works when both situations are written alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from memory_worker.core.text import collapse_whitespace
from memory_worker.core.transitions import MAX_LANE_CHARS

__all__ = ["EMBED_CHARS", "LANES", "embedding_text", "goal_text", "window_text"]

# The lanes, each a `Memory` field (`search.lanes` indexes them). Here, not only there: the
# storage layer names them without importing the search package (numpy's indexes), which a
# one-shot save never builds.
LANES = ("context", "intention")

CUT = " …"
# What of a lane is embedded: its newest characters. A small local model reads a 1000-character
# window in about a second on a loaded CPU (a query-time window is embedded inside the hook's
# budget), and the newest lines are the situation closest to the fact; the lexical half of the
# lane still reads the whole window.
EMBED_CHARS = 320


def window_text(messages: Iterable[str], limit: int = MAX_LANE_CHARS["context"]) -> str | None:
    """The conversation window as one lane text of at most `limit` characters: the messages in
    order, whitespace collapsed, the NEWEST kept whole when they do not all fit (a long early
    message is cut at its start). None when there is nothing."""
    kept: list[str] = []
    room = limit
    for text in reversed([collapse_whitespace(m) for m in messages]):
        if not text:
            continue
        need = len(text) + (1 if kept else 0)
        if need <= room:
            kept.append(text)
            room -= need
            continue
        if room > len(CUT) + 16:  # a useful tail of the older message still fits
            kept.append(CUT.strip() + " " + text[-(room - len(CUT) - (1 if kept else 0)) :])
        break
    return " ".join(reversed(kept)) or None


def goal_text(message: str | None, limit: int = MAX_LANE_CHARS["intention"]) -> str | None:
    """The turn's goal as the person put it: their message, cut to `limit` characters."""
    text = collapse_whitespace(message or "")
    if not text:
        return None
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def embedding_text(text: str, limit: int = EMBED_CHARS) -> str:
    """The part of a lane text that is embedded: the newest `limit` characters, from a word
    start. Both sides use it, so a stored lane and a recall's compare alike."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    space = tail.find(" ")
    return tail[space + 1 :] if 0 <= space < limit // 4 else tail
