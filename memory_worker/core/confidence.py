"""`Confidence`: how a memory entered the store.

A module of its own, importing no pydantic at run time: `app.caller` carries a confidence, and a
call forwarded to the server that holds the data dir (a one-shot CLI call, a coding agent's hook)
builds a caller without loading the memory models. `core.models` re-exports it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue

__all__ = ["Confidence"]


class Confidence(StrEnum):
    """How a memory entered the store."""

    EXTRACTED = "extracted"
    INFERRED = "inferred"
    STATED = "stated"

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: Any, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "description": cls.__doc__,
            "oneOf": [
                {"description": meaning, "enum": [value], "type": "string"}
                for value, meaning in _CONFIDENCE_MEANINGS.items()
            ],
        }


_CONFIDENCE_MEANINGS = {
    "extracted": "Stated directly in the source conversation.",
    "inferred": "Derived by the extraction model rather than stated verbatim.",
    "stated": "Saved explicitly by an agent or a human (highest trust).",
}
