"""The lines of a patch that name its files: Codex `apply_patch` headers and unified diff headers.

Shared by lesson matching (`search.toolcall` reads the paths from them) and the coding-agent hook
(`adapters.agent_hooks` keeps them past its cut of a long argument). Plain constants in a module
of their own: a hook forwarded to the server must not import the matcher (its lesson rules load
the memory models, pydantic and the stemmers, over 100 ms a prompt).
"""

from __future__ import annotations

__all__ = ["DIFF_HEADERS", "PATCH_FILE_HEADERS"]

PATCH_FILE_HEADERS = (
    "*** Add File: ",
    "*** Update File: ",
    "*** Delete File: ",
    "*** Move to: ",
)
DIFF_HEADERS = ("+++ ", "--- ")
