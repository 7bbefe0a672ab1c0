"""What the console's settings panel shows: every configuration field with its description,
constraints, default and effective value, and whether (and why not) it can be edited from here.

The fields come from `Settings` itself, so a new field shows up with no console change. `data_dir`
is never editable from a browser: it moves the whole store, so it stays a file or flag decision.
"""

from __future__ import annotations

from typing import Any

from annotated_types import Ge, Gt, Le, Lt

from memory_worker.core.config import Settings, parse_settings
from memory_worker.core.errors import InvalidInput

__all__ = ["NOT_FROM_CONSOLE", "describe", "validate_changes"]

NOT_FROM_CONSOLE = frozenset({"data_dir"})

_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _constraints(metadata: list[Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    for item in metadata:
        if isinstance(item, Ge):
            found["minimum"] = float(item.ge)  # type: ignore[arg-type]
        elif isinstance(item, Gt):
            found["exclusive_minimum"] = float(item.gt)  # type: ignore[arg-type]
        elif isinstance(item, Le):
            found["maximum"] = float(item.le)  # type: ignore[arg-type]
        elif isinstance(item, Lt):
            found["exclusive_maximum"] = float(item.lt)  # type: ignore[arg-type]
    return found


def describe(
    settings: Settings, *, mode: str, editable: bool, reason: str, source: str | None
) -> dict[str, Any]:
    """The panel's whole view. `editable`: whether this home may write the settings at all;
    `reason` says why not (or where the edits go)."""
    fields = []
    for name, field in Settings.model_fields.items():
        kind = _TYPES.get(field.annotation, "string") if isinstance(field.annotation, type) else ""
        fields.append(
            {
                "name": name,
                "type": kind or "string",
                "description": field.description or "",
                "default": field.default,
                "value": getattr(settings, name),
                "editable": editable and name not in NOT_FROM_CONSOLE,
                **_constraints(field.metadata),
            }
        )
    return {
        "mode": mode,
        "editable": editable,
        "reason": reason,
        "source": source,
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
