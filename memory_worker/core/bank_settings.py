"""Per-bank settings (seed 004's Memory properties): who a memory is about, how many a bank keeps,
how long each kind lives, how recall blends and filters, and who may touch it.

A bank's `bank.yaml` holds only the settings someone chose for it (`BankOverrides`); every other
field follows the worker's configuration (`Settings.bank_defaults()`), so changing a configured
default reaches every bank that never chose otherwise. `BankSettings` is the effective, complete
view that use cases read and listings show. Pure: no I/O.
"""

# No `from __future__ import annotations`: pydantic evaluates string annotations at import (see
# `app.wire`).
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from memory_worker.core.errors import InvalidInput, validation_problem

__all__ = [
    "CAP_SETTINGS",
    "MAX_RETENTION_DAYS",
    "MAX_WEIGHT",
    "MEMORY_CATEGORIES",
    "SETTING_NAMES",
    "AssociationWeights",
    "BankOverrides",
    "BankSettings",
    "ConsciousAccess",
    "Scope",
    "effective",
    "no_overrides",
    "not_a_flag",
    "not_a_number_flag",
    "parse_overrides",
    "settings_revision",
]

# The kinds of memory seed 004 names; a retention entry names one of them (lessons are anchored
# knowledge delivered by tool calls, and never expire by category).
MEMORY_CATEGORIES = ("fact", "preference", "procedure", "context", "correction")
MAX_RETENTION_DAYS = 36_500  # a century: past it "never" is the honest setting (omit the entry)
# Association weights are relative (seed 004: "normalized if they don't sum to 1"): `{content: 2,
# context: 1}` is a blend of 2/3 and 1/3. Bounded only so their sum stays a finite number.
MAX_WEIGHT = 1_000.0

ConsciousAccess = Literal["none", "read", "read_write"]
Scope = Literal["private", "shared"]

# Built (core schema, validator, serializer) on first use: a one-shot save into a bank that chose
# nothing validates none of these (`no_overrides`, `Settings.bank_defaults` only when a use case
# reads a bank's settings), and building them at import was ~15 ms of every CLI process.
_MODEL = ConfigDict(frozen=True, extra="forbid", defer_build=True)
# Counts are u64 on the wire; `models.MAX_INT` is the same bound, but models imports this module.
MAX_INT = 2**63 - 1
CAP_SETTINGS = ("max_memories", "max_per_subject")


def not_a_flag(value: Any) -> Any:
    """A cap is a count (a `mode="before"` validator of `CAP_SETTINGS`). pydantic reads `true` as
    1: `max_memories=true` would cap a bank at one memory, and every save would evict one."""
    if isinstance(value, bool):
        raise ValueError("must be a whole number (0 = unlimited), not true or false")
    return value


def not_a_number_flag(value: Any) -> Any:
    """A weight or threshold is a number (a `mode="before"` validator): pydantic reads `true` as
    1.0, and `relevance_threshold=true` would leave every recall of the bank empty."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


class AssociationWeights(BaseModel):
    """Blend weights of the three association lanes at recall time; normalized when they do not
    sum to 1 (seed 004), so any non-negative weights say the blend (`{content: 2, context: 1}`
    is 2/3 and 1/3)."""

    model_config = _MODEL

    content: float = Field(
        default=1.0, ge=0, le=MAX_WEIGHT, description="Weight of sim(query, memory content)."
    )
    context: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of sim(current conversation window, the memory's stored context).",
    )
    intention: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of sim(current turn goal, the memory's stored intention).",
    )

    _numbers = field_validator("content", "context", "intention", mode="before")(not_a_number_flag)

    @field_validator("content", "context", "intention")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="after")
    def _some_weight(self) -> "AssociationWeights":
        if self.content + self.context + self.intention <= 0:
            raise ValueError("at least one association weight must be above 0")
        return self


_SCOPING = (
    "When true, memories are partitioned by WHO they are about: recall, injection, list, tags and "
    "preview for a subject surface only general memories (no subject) plus that subject's own. "
    "When false, subjects are still recorded but recall ignores them."
)
_MAX_MEMORIES = (
    "Maximum live memories in the bank; 0 = unlimited. At the cap a new memory evicts the "
    "least-accessed, oldest non-pinned memory of the general pool (tombstone reason `evicted`, "
    "an event)."
)
_MAX_PER_SUBJECT = (
    "Per-subject cap when subject_scoping is on; 0 = unlimited. Eviction stays within the "
    "subject's own rows, so one chatty person cannot evict another's memories or the general pool."
)
_RETENTION = (
    "Per-category TTL in days (`{context: 30}`): the reaper tombstones older memories of that "
    "category (reason `expired`, never a pinned one). Categories without an entry never expire."
)
_WEIGHTS = "Blend weights of the content / context / intention lanes at recall time."
_THRESHOLD = "Minimum blended similarity for recall (0 = return everything, 1 = exact match only)."
_ACCESS = (
    "Memory tools an agent's conscious mind gets: none, read (recall/search), read_write (also "
    "store, update, delete)."
)
_SCOPE = (
    "Declared sharing intent: private (one agent's own memory) or shared (team knowledge bonded "
    "by several agents)."
)


class BankSettings(BaseModel):
    """A bank's effective settings: what it chose in `bank.yaml`, the configuration for the rest."""

    model_config = _MODEL

    subject_scoping: bool = Field(default=False, description=_SCOPING)
    max_memories: int = Field(default=10_000, ge=0, le=MAX_INT, description=_MAX_MEMORIES)
    max_per_subject: int = Field(default=200, ge=0, le=MAX_INT, description=_MAX_PER_SUBJECT)
    retention: dict[str, StrictInt] = Field(default_factory=dict, description=_RETENTION)
    association_weights: AssociationWeights = Field(
        default_factory=AssociationWeights, description=_WEIGHTS
    )
    relevance_threshold: float = Field(default=0.0, ge=0, le=1, description=_THRESHOLD)
    conscious_access: ConsciousAccess = Field(default="read_write", description=_ACCESS)
    scope: Scope = Field(default="private", description=_SCOPE)

    _caps = field_validator(*CAP_SETTINGS, mode="before")(not_a_flag)
    _threshold = field_validator("relevance_threshold", mode="before")(not_a_number_flag)

    @field_validator("retention")
    @classmethod
    def _retention(cls, value: dict[str, int]) -> dict[str, int]:
        return _check_retention(value)

    @field_validator("relevance_threshold")
    @classmethod
    def _threshold_finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


SETTING_NAMES: tuple[str, ...] = tuple(BankSettings.model_fields)


def _check_retention(value: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    given: dict[str, str] = {}  # each category's key as the caller spelled it
    for category, days in value.items():
        key = category.strip().lower()
        if key in given:
            # Categories compare caselessly: two spellings of one were kept as whichever came
            # last, silently dropping the other's days.
            raise ValueError(
                f"retention names category {key!r} twice ({given[key]!r} and {category!r}); "
                "keep one"
            )
        given[key] = category
        if key not in MEMORY_CATEGORIES:
            raise ValueError(
                f"retention names unknown category {category!r}; one of "
                f"{', '.join(MEMORY_CATEGORIES)}"
            )
        if (
            isinstance(days, bool)
            or not isinstance(days, int)
            or not 1 <= days <= MAX_RETENTION_DAYS
        ):
            raise ValueError(
                f"retention.{key} must be a whole number of days from 1 to {MAX_RETENTION_DAYS}"
            )
        out[key] = days
    return dict(sorted(out.items()))


class BankOverrides(BaseModel):
    """The settings a bank chose (what `bank.yaml` holds besides its description); None: follow
    the configuration."""

    model_config = _MODEL

    subject_scoping: bool | None = None
    max_memories: int | None = Field(default=None, ge=0, le=MAX_INT)
    max_per_subject: int | None = Field(default=None, ge=0, le=MAX_INT)
    retention: dict[str, StrictInt] | None = None
    association_weights: AssociationWeights | None = None
    relevance_threshold: float | None = Field(default=None, ge=0, le=1)
    conscious_access: ConsciousAccess | None = None
    scope: Scope | None = None

    _caps = field_validator(*CAP_SETTINGS, mode="before")(not_a_flag)
    _threshold = field_validator("relevance_threshold", mode="before")(not_a_number_flag)

    @field_validator("retention")
    @classmethod
    def _retention(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        return None if value is None else _check_retention(value)

    @field_validator("relevance_threshold")
    @classmethod
    def _threshold_finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    def chosen(self) -> dict[str, Any]:
        """The fields set, as plain data (what `bank.yaml` stores)."""
        return self.model_dump(mode="json", exclude_none=True)

    def merged(self, changes: Mapping[str, Any]) -> "BankOverrides":
        """These overrides with `changes` applied: a value sets a field, None returns it to the
        configured default. Raises `InvalidInput` naming every bad field; nothing is changed."""
        return parse_overrides({**self.chosen(), **changes}, source="bank settings")


def no_overrides() -> BankOverrides:
    """A bank that chose nothing: equal to `BankOverrides()`, made without validating (there is
    nothing to validate), so the model is not built for it."""
    return BankOverrides.model_construct()


def parse_overrides(raw: Mapping[str, Any], *, source: str) -> BankOverrides:
    """`raw` (bank.yaml's keys, or a request's) as overrides; `InvalidInput` on any bad field."""
    if not raw:
        return no_overrides()
    try:
        return BankOverrides.model_validate(dict(raw))
    except (ValidationError, ValueError) as exc:
        raise InvalidInput(f"{source}: {_describe(exc)}") from None


def _describe(exc: ValidationError | ValueError) -> str:
    if not isinstance(exc, ValidationError):
        return str(exc)
    return "; ".join(validation_problem(err, "settings") for err in exc.errors()[:5])


SETTINGS_REVISION_CHARS = 16  # 64 bits of SHA-256: two states of one bank never collide in practice


def settings_revision(description: str, overrides: BankOverrides) -> str:
    """An opaque tag of what a bank's `bank.yaml` holds (its description and chosen settings),
    the settings' counterpart of a memory's `revision`: a caller that read it can ask a change
    to apply only if nothing changed since (`memory::bank::configure`'s
    `expected_settings_revision`). Derived from the content, not counted, so a hand edit of
    `bank.yaml` changes it too, and the file keeps the format every reader of it knows."""
    # A bank that chose nothing is not validated to say so (see `no_overrides`).
    chosen = overrides.chosen() if overrides.model_fields_set else {}
    canonical = json.dumps([description, chosen], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:SETTINGS_REVISION_CHARS]


def effective(defaults: BankSettings, overrides: BankOverrides) -> BankSettings:
    """What a bank runs with: its own choices over the configured defaults."""
    chosen = {name: getattr(overrides, name) for name in overrides.model_fields_set}
    chosen = {name: value for name, value in chosen.items() if value is not None}
    return defaults.model_copy(update=chosen) if chosen else defaults
