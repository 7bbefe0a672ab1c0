"""How a recall ranks (`memory::recall`'s `mode`), apart from the ranking itself: the wire
contract names it, and a process that only saves imports the contract, not the ranking's numpy
columns."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RecallMode"]


class RecallMode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    SEMANTIC = "semantic"
