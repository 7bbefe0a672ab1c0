"""What the console's settings panel shows: every configuration field with its description,
constraints, default and effective value, and whether (and why not) it can be edited from here.

The fields come from `Settings`' own JSON schema (the one the configuration worker publishes), so a
new field shows up with no console change. `data_dir` is never editable from a browser: it moves
the whole store, so it stays a file or flag decision.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from memory_worker.core.config import Settings, parse_settings
from memory_worker.core.errors import InvalidInput

__all__ = ["NOT_FROM_CONSOLE", "describe", "revision", "validate_changes"]

# data_dir moves the whole store; allowed_hosts is who may reach the server at all (and a list,
# which the panel's inputs do not edit): both stay a file or flag decision.
NOT_FROM_CONSOLE = frozenset({"data_dir", "allowed_hosts"})
# `enum`: a field that takes one of a few words (a `Literal`) is picked from them, not typed.
_KEPT = ("type", "description", "default", "minimum", "maximum", "exclusiveMinimum", "enum")


@functools.cache
def _schema() -> dict[str, dict[str, Any]]:
    properties: dict[str, dict[str, Any]] = Settings.model_json_schema()["properties"]
    kept = {name: {k: v for k, v in p.items() if k in _KEPT} for name, p in properties.items()}
    for name, entry in kept.items():
        # A list's default is made by a factory, which the JSON schema leaves out: the panel
        # said "Default: undefined".
        entry.setdefault(
            "default", Settings.model_fields[name].get_default(call_default_factory=True)
        )
    return kept


def revision(settings: Settings) -> str:
    """An opaque tag of the settings in effect: a panel that read it saves only over what it
    showed (`expected_revision`), never over a change made since (another tab, the CLI, a hand
    edit the file watcher applied). Of the values, not the file's text: a comment edited by hand
    makes no open panel stale."""
    canonical = json.dumps(settings.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def describe(
    settings: Settings,
    *,
    mode: str,
    editable: bool,
    reason: str,
    source: str | None,
    data_dir: str | None = None,
) -> dict[str, Any]:
    """The panel's whole view. `editable`: whether this home may write the settings at all;
    `reason` says why not (or where the edits go). `data_dir`: the data dir being served, shown
    as that field's value — `--data-dir` or $MEMORY_DATA_DIR wins over the file's `data_dir`, and
    the file's value sent a person looking for their memories to a folder never used."""
    served = {"data_dir": data_dir} if data_dir is not None else {}
    fields = [
        {
            "name": name,
            **schema,
            "value": served.get(name, getattr(settings, name)),
            "editable": editable and name not in NOT_FROM_CONSOLE,
        }
        for name, schema in _schema().items()
    ]
    return {
        "mode": mode,
        "editable": editable,
        "reason": reason,
        "source": source,
        "revision": revision(settings),
        "fields": fields,
    }


def validate_changes(settings: Settings, changes: object) -> dict[str, Any]:
    """The changed fields, checked against the model (types, ranges): raises `InvalidInput`
    through `parse_settings`; a field the console may not edit is refused the same way."""
    if not isinstance(changes, dict) or not changes:
        raise InvalidInput("`values` must be a non-empty object of setting → value")
    refused = sorted(set(changes) & NOT_FROM_CONSOLE)
    if refused:
        raise InvalidInput(
            f"{', '.join(refused)} cannot be changed from the console: edit the settings file or "
            "pass --data-dir"
        )
    merged = parse_settings({**settings.model_dump(), **changes}, source="settings")
    return {name: getattr(merged, name) for name in changes}
