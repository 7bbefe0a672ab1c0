"""The configuration model read from every source (YAML file, configuration worker, console)."""

from __future__ import annotations

import re

import pytest

from memory_worker.adapters.bus.worker import settings_schema
from memory_worker.core.config import Settings, parse_settings, parse_stored_settings
from memory_worker.core.errors import InvalidInput

NUMBER_FIELDS = [
    name for name, field in Settings.model_fields.items() if field.annotation in (int, float)
]


def test_every_number_field_is_covered() -> None:
    assert {"recall_limit", "max_rule_chars", "decay_half_life_days"} <= set(NUMBER_FIELDS)


@pytest.mark.parametrize("name", NUMBER_FIELDS)
@pytest.mark.parametrize("flag", [True, False])
def test_a_number_setting_given_true_or_false_is_refused(name: str, flag: bool) -> None:
    # pydantic would read `recall_budget_tokens: false` as 0 (no memory injected at all) and
    # `recall_limit: true` as 1: a flag names no number, so the value is refused, not guessed.
    with pytest.raises(InvalidInput, match=rf"{name}: .*not true or false"):
        parse_settings({name: flag})


@pytest.mark.parametrize(
    "host", ["memory.lan:8765", "http://memory.lan", "memory.lan/", "my host", "[::1]:80"]
)
def test_an_allowed_host_that_no_host_header_can_match_is_refused(host: str) -> None:
    # The server compares the `Host` header's NAME (port dropped): an entry with a port or a
    # scheme was accepted and then matched nothing, every request refused `403` for good.
    with pytest.raises(InvalidInput, match="allowed_hosts"):
        parse_settings({"allowed_hosts": [host]})


def test_host_names_and_ip_literals_are_allowed_hosts() -> None:
    hosts = ["Memory.LAN", "box-1.example.com.", "192.168.1.5", "::1", "[fe80::1]", "my_host", ""]
    assert parse_settings({"allowed_hosts": hosts}).allowed_hosts == hosts


@pytest.mark.parametrize(
    ("field", "bad", "good"),
    [("default_bank", "My Notes", "main"), ("data_dir", "  ", "data/memory")],
)
def test_the_registered_schema_refuses_what_the_worker_refuses(
    field: str, bad: str, good: str
) -> None:
    # The configuration worker validates `configuration::set` against this schema. A value it
    # stores but the worker refuses is kept out of service (last good), shown as saved, and makes
    # the next restart fail: the schema must refuse it up front.
    schema = settings_schema()["properties"][field]
    pattern = schema.get("pattern")
    assert pattern is not None
    assert re.search(pattern, good) and not re.search(pattern, bad)
    with pytest.raises(InvalidInput):
        parse_settings({field: bad})


def test_a_stored_value_from_another_version_keeps_what_this_one_can_use() -> None:
    """An engine's entry written by the public Rust worker (or another version of ours): what
    this version cannot take as stored is named, and only that field changes."""
    settings, notes = parse_stored_settings(
        {
            "recall_limit": 150,  # past an inclusive bound: the bound
            "extraction_window": 0,
            "max_memories": -5,  # a cap past its bound: 0, uncapped (never a lower cap)
            "graph_enabled": True,  # not ours: ignored
            "default_bank": "team",
        },
        source="configuration",
    )
    assert (settings.recall_limit, settings.extraction_window) == (100, 1)
    assert (settings.max_memories, settings.default_bank) == (0, "team")
    assert [note.split(":")[0] for note in notes] == [
        "recall_limit",
        "extraction_window",
        "max_memories",
        "graph_enabled",
    ]
    assert "150 input should be less than or equal to 100, using 100" in notes[0]


@pytest.mark.parametrize(
    "stored",
    [
        {"decay_half_life_days": -1},  # past a strict bound: no value to take
        {"recall_budget_tokens": "lots"},  # a default is never guessed
        {"conscious_access": "append"},  # a default would widen what agents may do
        {"data_dir": " "},  # nor open another data dir
        {
            "association_weight_content": 0,
            "association_weight_context": 0,
            "association_weight_intention": 0,
        },
        ["recall_limit", 6],
    ],
)
def test_a_stored_value_this_version_cannot_use_is_refused_by_field(stored: object) -> None:
    with pytest.raises(InvalidInput, match="configuration"):
        parse_stored_settings(stored, source="configuration")


def test_the_rust_workers_zero_half_life_runs_as_it_ran_there() -> None:
    """The public Rust worker's `decay_half_life_days` is a u64 its console form let be 0, which
    it ran as a one-day half-life (`max(half_life, 1)`). Refused here, the worker did not start
    on an engine whose entry held it."""
    settings, notes = parse_stored_settings({"decay_half_life_days": 0}, source="configuration")
    assert settings.decay_half_life_days == 1
    assert notes == ["decay_half_life_days: 0 ran as 1 in the Rust worker (max(0, 1)), using 1"]


def test_a_stored_value_this_version_accepts_is_used_as_it_is() -> None:
    assert parse_stored_settings({"recall_limit": 7}, source="configuration")[1] == []
