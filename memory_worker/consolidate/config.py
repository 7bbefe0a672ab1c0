"""`memory-consolidate` settings: every field with its default and what it does.

Unknown keys are rejected (a typo fails loudly instead of silently keeping a default). The same
model is the configuration entry `memory-consolidate` on the engine and the YAML file of a
standalone schedule; every field applies from the next tick or run.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory_worker.core.errors import InvalidInput
from memory_worker.core.names import NAME_PATTERN, check_name

__all__ = ["CONFIG_ID", "ConsolidateSettings", "parse_settings"]

CONFIG_ID = "memory-consolidate"


class ConsolidateSettings(BaseModel):
    """How and when memory-consolidate cleans banks. Every field hot-reloads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Run scheduled passes (the hourly cron tick and the backstop loop). Manual "
        "runs (`memory-consolidate::run`, `memory-worker consolidate`) work either way.",
    )
    interval_hours: float = Field(
        default=24.0,
        ge=0.1,
        le=8760.0,
        description="Hours between scheduled passes, counted from the last complete pass "
        "(`last_run` in the state worker); a machine that was off catches up at its next tick.",
    )
    dry_run: bool = Field(
        default=False,
        description="Scheduled passes only plan and report; nothing is written.",
    )
    banks: list[str] = Field(
        default_factory=list,
        description="Banks to consolidate; empty means every bank. A manual run naming a bank "
        "outside a non-empty list is refused.",
    )

    @field_validator("banks")
    @classmethod
    def _bank_names(cls, value: list[str]) -> list[str]:
        # A name no bank can have (`Main`, `my bank`) would match nothing: every scheduled pass
        # would cover no bank, retention's sweep included, and checkpoint as if it had.
        for name in value:
            try:
                check_name(name, "bank")
            except InvalidInput:
                raise ValueError(f"{name!r} is not a bank name ({NAME_PATTERN})") from None
        return value

    max_supersedes_per_run: int = Field(
        default=200,
        ge=0,
        le=100_000,
        description="Most memories one pass may retire, across all banks; the rest waits for the "
        "next pass (a capped pass stays due). 0 makes every pass report-only.",
    )
    semantic_enabled: bool = Field(
        default=True,
        description="Propose near-duplicates with `memory::recall` mode `semantic` when the "
        "bank has an embedder.",
    )
    semantic_threshold: float = Field(
        default=0.92,
        ge=0.5,
        le=1.0,
        description="Cosine at or above which two memories are near-duplicate candidates. They "
        "merge only when they also agree on every number, date, name, negation and polarity word "
        "and keep their shared words in order; otherwise they are report-only. Measured with the "
        "default local model: 80 of 114 labelled duplicates and 71 of 179 look-alikes reach "
        "0.92 — the guards, not the cosine, keep merges precise (docs/BENCHMARKS.md).",
    )
    semantic_neighbours: int = Field(
        default=5,
        ge=1,
        le=50,
        description="Nearest memories asked for per memory in the semantic tier.",
    )
    semantic_max_queries: int = Field(
        default=1000,
        ge=0,
        description="Most semantic recalls per bank and pass (newest memories first); the "
        "report says `partial` when a bank has more.",
    )
    llm_assist_enabled: bool = Field(
        default=False,
        description="After the deterministic tiers, one `router::complete` per bank confirms "
        "report-only groups and promotes often-restated standing instructions into the "
        "`learned` rule. Never on a dry run; any failure skips it with nothing written.",
    )
    llm_model: str = Field(
        default="", description="Model for the LLM tier; empty uses the router's first model."
    )
    llm_timeout_ms: int = Field(
        default=60_000, ge=1000, description="Timeout of the LLM tier's router::complete call."
    )
    promote_corroboration_threshold: int = Field(
        default=4,
        ge=0,
        description="A memory observed this many more times (corroboration) is offered to the "
        "LLM tier for promotion into the `learned` rule; 0 disables promotion.",
    )


def parse_settings(raw: object, *, source: str) -> ConsolidateSettings:
    """Validated settings; `invalid_input` naming every bad field otherwise."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source}: expected a mapping of settings")
    try:
        return ConsolidateSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{source}: {problems}") from None
