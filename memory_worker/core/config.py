"""Worker settings: every configuration field with its default, and loading them from YAML.

Unknown keys are rejected so a typo fails loudly instead of silently keeping a default. Relative
`data_dir` values resolve against `$III_COMPOSE_DIR` when set, else the process's working directory.
"""

# No `from __future__ import annotations`: pydantic evaluates string annotations at import (see
# `app.wire`).
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from memory_worker.core.bank_settings import (
    CAP_SETTINGS,
    MAX_WEIGHT,
    AssociationWeights,
    BankSettings,
    not_a_flag,
    not_a_number_flag,
)
from memory_worker.core.data_dir import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from memory_worker.core.errors import InvalidInput, validation_problem
from memory_worker.core.names import NAME_PATTERN
from memory_worker.core.payload import check_depth

__all__ = [
    "DATA_DIR_ENV",
    "Settings",
    "load_settings",
    "parse_settings",
    "parse_stored_settings",
    "resolve_data_dir",
    "settings_from_text",
]


# The number fields besides the caps: pydantic reads `true` as 1 and `false` as 0, so
# `recall_budget_tokens: false` would silently inject no memory and `recall_limit: true` one.
_NUMBER_SETTINGS = (
    "recall_limit",
    "recall_budget_tokens",
    "extraction_window",
    "extraction_timeout_ms",
    "max_memories_per_turn",
    "max_rule_chars",
    "decay_half_life_days",
    "max_banks",
    "lesson_injection_tokens",
    "lesson_hook_tokens",
    "association_weight_content",
    "association_weight_context",
    "association_weight_intention",
    "relevance_threshold",
)


class Settings(BaseModel):
    """Memory worker configuration. Every field hot-reloads; `data_dir` reopens the store."""

    # Built on first validation, not at import: with no configuration file there is nothing to
    # validate (`load_settings(None)`), and a one-shot CLI call then never builds it (~20 ms).
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    data_dir: str = Field(
        default=DEFAULT_DATA_DIR,
        description="Where banks live. Relative paths resolve against $III_COMPOSE_DIR when set, "
        "else the working directory. Changing it reopens the store (the last good one is kept if "
        "the new one cannot be opened).",
        # In the registered schema too: the configuration worker then refuses a blank one at
        # `configuration::set` instead of storing a value this worker refuses (and boots on).
        # (Anchored, so a form that matches the whole value reads it the same way.)
        json_schema_extra={"pattern": r"^\s*\S[\s\S]*$"},
    )
    default_bank: str = Field(
        default="main",
        description="Bank used when neither the turn, the session nor the call names one. "
        "Materializes on first write.",
        json_schema_extra={"pattern": f"^{NAME_PATTERN}$"},  # see data_dir's
    )
    inject_rules: bool = Field(
        default=True, description="Inject the bank's rules into each session's system prompt."
    )
    inject_memories: bool = Field(
        default=True, description="Append recalled memories on the first step of each turn."
    )
    recall_limit: int = Field(
        default=6, ge=1, le=100, description="Max memories injected per turn; default recall limit."
    )
    recall_budget_tokens: int = Field(
        default=1200,
        ge=0,
        description="Token budget of the injected memory block (about 4 UTF-8 bytes a token).",
    )
    extraction_enabled: bool = Field(
        default=True, description="Extract memories in the background after each completed turn."
    )
    extraction_model: str = Field(
        default="",
        description="Model for extraction; empty uses the router's first model (with "
        "`extraction_endpoint`: the endpoint's first listed model).",
    )
    extraction_endpoint: str = Field(
        default="",
        description="Base URL of an OpenAI-compatible chat-completions endpoint for extraction "
        "(a local llama.cpp or Ollama server, or a hosted API), e.g. http://127.0.0.1:8088/v1; "
        "empty uses router::complete on the engine.",
    )
    extraction_api_key_env: str = Field(
        default="MEMORY_EXTRACTION_API_KEY",
        description="Name of the environment variable holding the endpoint's API key (sent as a "
        "bearer token; the key itself is never stored or logged). Unset or empty sends none.",
    )
    extraction_prompt: Literal["extraction-v1", "extraction-v2"] = Field(
        default="extraction-v2",
        description="Extraction prompt version (memory_worker/core/prompts/<version>.md).",
    )
    extraction_window: int = Field(
        default=12, ge=1, le=200, description="Max new user/assistant messages read per pass."
    )
    extraction_timeout_ms: int = Field(
        default=60_000,
        ge=1000,
        description="Timeout of the extraction completion call (router::complete or the endpoint).",
    )
    max_memories_per_turn: int = Field(
        default=8, ge=0, le=50, description="Max memories one extraction pass may write."
    )
    rule_learning_enabled: bool = Field(
        default=True,
        description="Append standing instructions heard in chat to the bank's `learned` rule.",
    )
    max_rule_chars: int = Field(
        default=6000, ge=0, description="Character budget of the rules injected per session."
    )
    decay_half_life_days: float = Field(
        default=60.0,
        gt=0,
        description="Recency half-life of recall scores, measured from when a fact was last "
        "stated.",
    )
    embeddings_enabled: bool = Field(
        default=True,
        description="Fuse a semantic signal into recall when an embedder answers; turning it on "
        "embeds what was saved meanwhile first.",
    )
    embedding_model: str = Field(
        default="",
        description="Embedding model. Local embedder: multilingual-e5-small-enpt-q4 (empty, the "
        "default; alias e5) or all-minilm-l6-v2-int8 (alias minilm, needs the embed extra); "
        "another name is refused. Under an engine, the model router::embed is asked for (empty: "
        "the router's default). A change re-embeds every bank in the background; until a bank is "
        "done its recall runs without the semantic arm.",
    )
    max_banks: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Most banks a data dir may hold: creating one more is refused (`conflict`). "
        "Folders a person adds by hand still load.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Extra host names the standalone server answers to (the `Host` header), "
        "besides localhost, 127.0.0.1, [::1] and the address it listens on; any other name is "
        "refused, which is what stops DNS rebinding.",
    )
    require_token: bool = Field(
        default=False,
        description="Require the bearer token (`<data_dir>/.token`) on loopback too; it is "
        "always required when the standalone server listens beyond loopback.",
    )
    inject_lessons: bool = Field(
        default=True,
        description="Append the lesson cards matching a turn's tool calls on its later steps "
        "(and answer a coding agent's PreToolUse hook with them).",
    )
    # Seed 002's two budgets: `nodeInjectionTokens` (a step of a turn) and `hookInjectionTokens`
    # (one native tool callback), 16000 and 8000 by default.
    lesson_injection_tokens: int = Field(
        default=16_000,
        ge=1,
        le=64_000,
        description="Token budget of the lesson cards delivered for one step of a turn (the "
        "pre-generate hook; about 4 UTF-8 bytes a token, card framing included, 1 through "
        "64000); a card that does not fit stays eligible.",
    )
    lesson_hook_tokens: int = Field(
        default=8000,
        ge=1,
        le=64_000,
        description="Token budget of the lesson cards delivered for one tool call "
        "(memory::lessons::match: a coding agent's PreToolUse hook; 1 through 64000); a card "
        "that does not fit stays eligible.",
    )

    # Defaults of the per-bank settings (`memory::bank::configure` changes one bank's).
    subject_scoping: bool = Field(
        default=False,
        description="Default of each bank's subject_scoping: recall for a subject surfaces only "
        "general memories plus that subject's own.",
    )
    max_memories: int = Field(
        default=10_000,
        ge=0,
        description="Default of each bank's max_memories (live memories kept; 0 = unlimited). At "
        "the cap a new memory evicts the least-accessed, oldest non-pinned one, recorded.",
    )
    max_per_subject: int = Field(
        default=200,
        ge=0,
        description="Default of each bank's max_per_subject (per-subject cap with subject_scoping; "
        "0 = unlimited).",
    )
    association_weight_content: float = Field(
        default=1.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Default content-lane weight of recall's blend.",
    )
    association_weight_context: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Default context-lane weight of recall's blend.",
    )
    association_weight_intention: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WEIGHT,
        description="Default intention-lane weight of recall's blend.",
    )
    relevance_threshold: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Default of each bank's relevance_threshold (minimum blended similarity).",
    )
    conscious_access: Literal["none", "read", "read_write"] = Field(
        default="read_write",
        description="Default of each bank's conscious_access: the memory tools agents get (none, "
        "read, read_write).",
    )
    scope: Literal["private", "shared"] = Field(
        default="private", description="Default of each bank's declared scope (private, shared)."
    )

    def bank_defaults(self) -> BankSettings:
        """The settings a bank has when it chose none (a bank's `bank.yaml` overrides them).
        When no configuration chose any of them they are the fields' declared defaults, which a
        test checks validate to the same settings: made without validating, so a one-shot call
        with no configuration file builds neither model."""
        weights: dict[str, Any] = {
            "content": self.association_weight_content,
            "context": self.association_weight_context,
            "intention": self.association_weight_intention,
        }
        values: dict[str, Any] = {
            "subject_scoping": self.subject_scoping,
            "max_memories": self.max_memories,
            "max_per_subject": self.max_per_subject,
            "relevance_threshold": self.relevance_threshold,
            "conscious_access": self.conscious_access,
            "scope": self.scope,
        }
        if self.model_fields_set.isdisjoint(_BANK_DEFAULTS):
            association = AssociationWeights.model_construct(**weights)
            return BankSettings.model_construct(association_weights=association, **values)
        return BankSettings(association_weights=AssociationWeights(**weights), **values)

    @model_validator(mode="after")
    def _some_association_weight(self) -> "Settings":
        weights = (
            self.association_weight_content,
            self.association_weight_context,
            self.association_weight_intention,
        )
        if sum(weights) <= 0:
            raise ValueError("at least one association_weight_* must be above 0")
        return self

    _caps = field_validator(*CAP_SETTINGS, mode="before")(not_a_flag)
    _numbers = field_validator(*_NUMBER_SETTINGS, mode="before")(not_a_number_flag)

    @field_validator("data_dir")
    @classmethod
    def _data_dir_is_a_path(cls, value: str) -> str:
        # A cleared field would resolve to the working (or compose) directory itself and open
        # whatever folders sit there as banks.
        if not value.strip():
            raise ValueError("must be a path (empty would put the banks in the working directory)")
        return value

    @field_validator("default_bank")
    @classmethod
    def _default_bank_is_a_name(cls, value: str) -> str:
        # Accepted, a bad name would silently turn memory off for every session that names no
        # bank (no memory, never another bank) and refuse every call that names none.
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"must be a bank name matching {NAME_PATTERN}")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_are_names(cls, value: list[str]) -> list[str]:
        # The server compares the `Host` header's name, its port dropped: an entry with a port,
        # a scheme or a path matched no request, and the server refused every one with 403.
        for host in value:
            if host.strip() and not _is_host(host.strip()):
                raise ValueError(
                    f"{host!r} is not a host name or IP address (no scheme, port or path)"
                )
        return value

    @field_validator("extraction_endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str) -> str:
        value = value.strip()
        if value and not re.match(r"https?://[^\s/]+", value):
            raise ValueError("must be an http:// or https:// URL, or empty")
        return value.rstrip("/")

    @field_validator("extraction_api_key_env")
    @classmethod
    def _env_is_a_name(cls, value: str) -> str:
        # A NAME, never the key: a value that looks like a key is refused before it is stored.
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
            raise ValueError("must be an environment variable name (letters, digits, _)")
        return value


_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})")


def _is_host(host: str) -> bool:
    """A name a `Host` header can carry without its port: a DNS name or an IP literal."""
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(literal)
    except ValueError:
        return literal == host and _HOST_NAME.fullmatch(host) is not None
    return True


# The fields `bank_defaults` reads.
_BANK_DEFAULTS = frozenset(
    {
        "subject_scoping",
        "max_memories",
        "max_per_subject",
        "association_weight_content",
        "association_weight_context",
        "association_weight_intention",
        "relevance_threshold",
        "conscious_access",
        "scope",
    }
)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, dict):
        return {k: _expand(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, env) for v in value]
    return value


def parse_settings(raw: object, *, source: str = "configuration") -> Settings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source}: expected a mapping of settings")
    check_depth(raw, source)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(validation_problem(err, "(root)") for err in exc.errors())
        raise InvalidInput(f"{source}: {problems}") from None


# A number past one of these bounds is brought to the bound (`recall_limit: 150` was a limit of
# 100 where the public Rust worker capped it at call time).
_CLAMPED_BOUNDS = {"less_than_equal": "le", "greater_than_equal": "ge"}
# Values the public Rust worker accepted and ran as another: its `decay_half_life_days` is a u64
# whose console form allows 0, and recency divides by `max(half_life, 1)`. Taken as it ran there;
# refused, the worker did not start on an engine whose entry held it.
_AS_THE_RUST_WORKER_RAN = {("decay_half_life_days", 0): 1}


def parse_stored_settings(raw: object, *, source: str) -> tuple[Settings, list[str]]:
    """Settings from a value another version stored (the public Rust worker's entry, an older or
    newer one of ours), with a note for each field used otherwise than stored: a key this
    version does not have is ignored, a number past an inclusive bound takes the bound, a value
    the Rust worker ran as another (`_AS_THE_RUST_WORKER_RAN`) takes that one. Nothing
    else is guessed (a default could widen access, lower a cap that then evicts, or open another
    data dir): any other refusal is `parse_settings`'s, naming every field."""
    try:
        return parse_settings(raw, source=source), []
    except InvalidInput as refused:
        if not isinstance(raw, dict):
            raise
        error = refused
    try:
        Settings.model_validate(raw)
    except ValidationError as exc:
        problems = exc.errors()
    else:  # refused as a whole (nested too deeply), not field by field
        raise error
    kept = dict(raw)
    notes: list[str] = []
    for problem in problems:
        field = problem["loc"][0] if len(problem["loc"]) == 1 else None
        bound = _CLAMPED_BOUNDS.get(problem["type"])
        if not isinstance(field, str) or field not in kept:
            raise error
        stored = kept[field]
        ran = _AS_THE_RUST_WORKER_RAN.get((field, stored)) if type(stored) is int else None
        if problem["type"] == "extra_forbidden":
            del kept[field]
            notes.append(f"{field}: not a setting of this version, ignored")
        elif ran is not None:
            kept[field] = ran
            notes.append(
                f"{field}: {stored!r} ran as {ran!r} in the Rust worker "
                f"(max({stored!r}, {ran!r})), using {ran!r}"
            )
        elif bound is not None:
            stored, kept[field] = kept[field], (problem.get("ctx") or {})[bound]
            notes.append(f"{field}: {stored!r} {problem['msg'].lower()}, using {kept[field]!r}")
        else:
            raise error
    return parse_settings(kept, source=source), notes


def load_settings(path: Path | None, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a YAML file (`${VAR}` expanded), or the defaults when `path` is None (equal
    to `Settings()`, made without validating them: they are the model's own defaults)."""
    if path is None:
        return Settings.model_construct()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:  # saved in another encoding: refused like bad YAML
        raise InvalidInput(
            f"config {path} is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from None
    return settings_from_text(text, str(path), env)


def settings_from_text(text: str, source: str, env: Mapping[str, str] | None = None) -> Settings:
    """The settings a file holding `text` would load (`load_settings`), before it is written."""
    import yaml  # a call with no configuration file never loads the parser

    env = os.environ if env is None else env
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"config {source} is not valid YAML: {exc}") from exc
    except RecursionError:  # the YAML parser recurses: a deeply nested file is refused, not fatal
        raise InvalidInput(f"config {source} is nested too deeply") from None
    return parse_settings(_expand(raw, env), source=source)
