"""The wire models of the internal seams: what the harness, the queue, session-manager, the
configuration worker, the http worker and the console send to this worker, and what it answers.

They follow seed 000's published reference (titles, field names, defaults, descriptions; additions
allowed). Requests ignore what they do not read; answers allow extra fields (a seam may say more
than the seed's `{ok}`, e.g. which job was queued). `catalog.SEAMS` names each function with its
models, so the bus registers them, the golden schemas pin them and the permission manifest denies
them from one table.
"""

# No `from __future__ import annotations`: pydantic evaluates string annotations at import (see
# `app.wire`).
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Ack",
    "ConfigAck",
    "ConfigChanged",
    "ExtractJob",
    "GenerateInput",
    "HookEnvelope",
    "HookResponse",
    "HttpEnvelope",
    "HttpReply",
    "Mutations",
    "SessionDeleted",
    "TurnCompleted",
    "UiContentInput",
    "UiContentResult",
    "UiSettingsInput",
    "UiSettingsResult",
]

# Built (core schema, validator, serializer) on first use, not at import: the catalog names them
# in `SEAMS`, and a one-shot CLI call, which imports the catalog, uses none of them.
_DEFERRED = ConfigDict(defer_build=True)
_READS = ConfigDict(extra="ignore", **_DEFERRED)
_ANSWERS = ConfigDict(extra="allow", **_DEFERRED)


class GenerateInput(BaseModel):
    model_config = _READS
    system_prompt: str | None = ""
    messages: Any = Field(
        default=None,
        description="Transcript messages as assembled so far — the window this step sends, "
        "persisted notices (earlier rules updates included) replayed in place (schema-free: "
        "shapes belong to the router).",
    )


class HookEnvelope(BaseModel):
    """Envelope the harness posts to `pre-generate` hooks. Only the fields this worker reads are
    typed; everything else is ignored."""

    model_config = ConfigDict(extra="ignore", title="PreGenerateInput", **_DEFERRED)
    session_id: str | None = ""
    turn_id: str | None = Field(
        default=None, description="The turn this step belongs to; its bank is recorded under it."
    )
    step: int | None = Field(
        default=0, ge=0, description="Step within the turn; 0 is the step that opens it."
    )
    metadata: Any = Field(
        default=None,
        description="Turn metadata (`harness::send` options.metadata); `memory_bank` here "
        "overrides the session-level selection for this turn.",
    )
    parent: Any = Field(default=None, description="Set on a sub-agent's step (its parent link).")
    generate: GenerateInput | None = None

    @property
    def messages(self) -> list[Any]:
        messages = self.generate.messages if self.generate else None
        return messages if isinstance(messages, list) else []

    @property
    def base_prompt(self) -> str:
        return (self.generate.system_prompt if self.generate else None) or ""


class Mutations(BaseModel):
    model_config = _ANSWERS
    append_messages: list[Any]
    system_prompt: str | None = None


class HookResponse(BaseModel):
    """Hook reply: `continue` with optional mutations (never deny — memory is an enrichment, not a
    gate)."""

    model_config = _ANSWERS
    decision: str
    mutations: Mutations | None = None
    annotations: dict[str, Any] | None = None


class TurnCompleted(BaseModel):
    """`harness::turn-completed` payload (the fields this worker reads)."""

    model_config = ConfigDict(extra="ignore", title="TurnCompletedInput", **_DEFERRED)
    session_id: str | None = ""
    turn_id: str | None = None
    status: str | None = None
    parent: Any = Field(
        default=None, description="Set on a sub-agent's turn (its live parent link)."
    )
    parent_session_id: str | None = Field(
        default=None, description="Set on a parentless spawn's turn (its display parent)."
    )
    timestamp: int | None = None
    agent: Any = Field(
        default=None,
        description="The agent that ran the turn, when the harness names it: recorded in the "
        "provenance of what extraction writes.",
    )
    metadata: Any = Field(
        default=None,
        description="The turn's metadata; `memory_subject` names who was speaking (else the "
        "session's metadata does): what extraction writes from the turn is about them.",
    )


class ExtractJob(BaseModel):
    """One durable extraction job (the `data` of a queue message)."""

    model_config = ConfigDict(extra="ignore", title="ExtractJobInput", **_DEFERRED)
    session_id: str
    bank: str | None = Field(
        default=None,
        description="The bank the turn was injected with. Absent: resolved when the job runs "
        "(the worker never saw the turn, or the job predates this).",
    )
    skip: bool = Field(
        default=False,
        description="The turn ran without memory (an invalid or deleted bank): the job only "
        "steps the cursor past it.",
    )
    until: str | None = Field(
        default=None,
        description="The turn's last user/assistant entry: the pass reads no further.",
    )
    after: str | None = Field(
        default=None,
        description="The previous finished turn's last entry: the pass reads nothing up to it "
        "(a job that runs late or out of order never reads another turn's messages). Absent: "
        "from the session's extraction cursor.",
    )
    turn_id: str | None = None
    status: str | None = None
    agent: str | None = Field(
        default=None,
        description="The agent that ran the turn (`harness::turn-completed` `agent`), recorded "
        "in the provenance of what the pass writes; absent: the model that answered.",
    )
    subject: str | None = Field(
        default=None,
        description="Who was speaking in the turn (turn metadata `memory_subject`, else the "
        "session's): the memories the pass writes are about them, and only general memories and "
        "theirs are shown to the model. Absent: the session's, asked when the job runs "
        "(a failed lookup retries; none: general memories).",
    )
    at: int | None = Field(
        default=None,
        description="When the turn completed (ms): its words were said by then. A subject erased "
        "since (`memory::forget-subject`) gets nothing the pass reads written about them.",
    )


class SessionDeleted(BaseModel):
    """`session::deleted` payload (the field this worker reads)."""

    model_config = ConfigDict(extra="ignore", title="SessionDeletedInput", **_DEFERRED)
    session_id: str | None = ""


class ConfigChanged(BaseModel):
    """Internal `memory::on-config-change` trigger payload. The handler re-fetches the
    authoritative configuration (trusting `new_value` from a discoverable bus function would let
    any caller inject config)."""

    model_config = ConfigDict(extra="ignore", title="OnConfigChangeEvent", **_DEFERRED)
    id: str | None = Field(
        default=None,
        description="Configuration id that changed (advisory; the handler re-fetches).",
    )


class Ack(BaseModel):
    """`ok`, and what the seam did when it says more (`queued`/`inline` job receipt, `skipped`
    with the reason, the `bank` and `written` count of an extraction pass)."""

    model_config = ConfigDict(extra="allow", title="AckResponse", **_DEFERRED)
    ok: bool


class ConfigAck(BaseModel):
    model_config = ConfigDict(extra="allow", title="OnConfigChangeResponse", **_DEFERRED)
    ok: bool


class UiContentInput(BaseModel):
    """Input of the content function: the console asks for one asset by path."""

    model_config = _READS
    path: str = Field(description="The asset path from the trigger config (e.g. `state/page.js`).")


class UiContentResult(BaseModel):
    """Output of the content function."""

    model_config = _ANSWERS
    content: str = Field(description="The asset source, verbatim.")
    content_type: str = Field(description="MIME type the console should serve the asset with.")


class UiSettingsInput(BaseModel):
    """No fields: the worker answers for its own configuration entry."""

    model_config = _READS


class UiSettingsResult(BaseModel):
    """The settings panel: every configuration field with its description and effective value."""

    model_config = _ANSWERS


class HttpEnvelope(BaseModel):
    """What the http worker posts to a bound function (the fields read)."""

    model_config = _READS
    path: str | None = None
    body: Any = None
    headers: dict[str, Any] | None = Field(
        default=None, description="Request headers (`X-Confirm` for a destructive call)."
    )
    trigger: dict[str, Any] | None = None


class HttpReply(BaseModel):
    """The http worker's reply: the function's result, or `{error: {code, message}}`."""

    model_config = _ANSWERS
    status_code: int
    body: Any = None
