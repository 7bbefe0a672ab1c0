"""Request and response models of `memory-consolidate::run` and `memory-consolidate::status`.

Requests ignore unknown keys (the engine adds `_caller_worker_id`); responses drop null fields, and
a bank report omits zero counts and empty lists so a clean bank reads as a short line.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict

__all__ = [
    "BankReport",
    "GroupReport",
    "LlmReport",
    "PassReport",
    "Request",
    "Response",
    "RunRequest",
    "StatusRequest",
    "StatusResponse",
]


class Request(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Response(BaseModel):
    model_config = ConfigDict(frozen=True)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


class GroupReport(Response):
    tier: str = Field(description="`exact`, `reorder`, `semantic` or `llm`.")
    action: str = Field(
        description="`merged` (every loser retired), `partial` (some were), `planned` (a dry "
        "run would merge it), `report-only` (a person or the LLM tier decides), `capped` (the "
        "per-run budget ran out; the next pass continues), `unchanged` (every attempt failed, see "
        "the errors), or `skipped` (every other member is pinned)."
    )
    why: str = Field(description="The rule that fired, or what stopped a merge.")
    winner_id: str
    winner_text: str
    loser_ids: list[str] = Field(default_factory=list)
    loser_texts: list[str] = Field(default_factory=list)
    merged_ids: list[str] = Field(
        default_factory=list, description="Losers actually retired into the winner by this pass."
    )
    skipped_pinned: list[str] = Field(
        default_factory=list, description="Pinned members: never retired by any automatic path."
    )
    score: float | None = Field(default=None, description="Lowest cosine in a semantic group.")


class LlmReport(Response):
    status: str = Field(
        description="`off` (disabled or a dry run), `idle` (nothing to ask), `ran`, or "
        "`skipped` (the call or its reply failed: nothing from it was written).",
    )
    detail: str | None = None
    merged: int = Field(default=0, ge=0, description="Report-only groups it confirmed, merged.")
    promoted: int = Field(
        default=0, ge=0, description="Standing instructions appended to the `learned` rule."
    )
    ignored: int = Field(
        default=0, ge=0, description="Answers about groups or ids it was not offered (dropped)."
    )


class BankReport(Response):
    bank: str
    at: int = Field(default=0, ge=0, description="When the pass reached this bank, epoch ms.")
    dry_run: bool = False
    scanned: int = Field(default=0, ge=0, description="Live memories read.")
    groups: list[GroupReport] = Field(default_factory=list)
    groups_found: int = Field(default=0, ge=0)
    merged: int = Field(default=0, ge=0, description="Memories retired into a survivor.")
    report_only: int = Field(default=0, ge=0, description="Groups left for a person to decide.")
    skipped_pinned: int = Field(default=0, ge=0, description="Pinned members left untouched.")
    expired: int = Field(
        default=0,
        ge=0,
        description="Memories the memory worker's retention reaper retired first (`memory::stats`; "
        "not in a dry run).",
    )
    capped: int = Field(
        default=0, ge=0, description="Merges the per-run budget postponed to the next pass."
    )
    semantic: str = Field(
        default="",
        description="`ran`, `unavailable` (the bank has no embedder: no semantic tier), `off`, "
        "or `partial` (`semantic_max_queries` reached).",
    )
    llm: LlmReport | None = None
    errors: list[str] = Field(default_factory=list)
    duration_ms: float = Field(default=0.0, ge=0)


class PassReport(Response):
    """One pass over one or every bank."""

    dry_run: bool = False
    started_at: int = Field(default=0, ge=0, description="Epoch ms.")
    duration_ms: float = Field(default=0.0, ge=0)
    banks: list[BankReport] = Field(default_factory=list)
    superseded: int = Field(default=0, ge=0, description="Memories retired by this pass.")
    checkpointed: bool = Field(
        default=False,
        description="Whether `last_run` moved: only after a complete pass over every bank with no "
        "error and nothing capped.",
    )
    errors: list[str] = Field(default_factory=list, description="Errors outside any one bank.")

    def to_wire(self) -> dict[str, Any]:
        out = super().to_wire()
        out.setdefault("banks", [])
        out.setdefault("superseded", 0)
        out.setdefault("checkpointed", False)
        out.setdefault("dry_run", False)
        return out


class RunRequest(Request):
    bank: str | None = Field(
        default=None,
        description="One bank; omitted: every bank of the `banks` allowlist (empty = all).",
    )
    # A JSON boolean only, as the memory worker's flags: read leniently, `"no"` or `0` ran a
    # pass that writes.
    dry_run: Annotated[bool, Strict()] | None = Field(
        default=None,
        description="Plan and report without writing (no LLM call either); omitted: the "
        "configured `dry_run`.",
    )


class StatusRequest(Request):
    pass


class StatusResponse(Response):
    enabled: bool = Field(description="Whether scheduled passes run (manual runs always do).")
    inert: bool = Field(
        default=False,
        description="True when the configuration could not be read: the schedule stays off "
        "(never defaults over a stored value) until a readable one arrives.",
    )
    inert_reason: str | None = None
    interval_hours: float
    dry_run: bool
    last_run: int | None = Field(default=None, description="Last complete pass, epoch ms.")
    due: bool = Field(description="Whether the next tick would run a pass.")
    next_due_at: int | None = Field(default=None, description="Epoch ms; null when never run.")
    running: bool = False
    banks: dict[str, BankReport] = Field(
        default_factory=dict, description="The last report of each bank, by bank name."
    )
    error: str | None = Field(default=None, description="Why `last_run` could not be read.")

    def to_wire(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_none=True)
        out["banks"] = {name: report.to_wire() for name, report in self.banks.items()}
        return out
