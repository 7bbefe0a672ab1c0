"""The configuration model read from every source (YAML file, configuration worker, console)."""

from __future__ import annotations

import re

import pytest

from memory_worker.adapters.bus.worker import settings_schema
from memory_worker.core.config import Settings, parse_settings
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
