"""The wire surface is pinned: golden schemas per function, catalog shape, and the seed contract.

`golden/schemas/<id>.json` is what each catalog entry publishes; `UPDATE_GOLDENS=schemas` rewrites
them after an intended change, so a renamed field never ships without a reviewed diff. The seed
contract compares our schemas with the published API reference
(`golden/api-reference.seed.json`, copied verbatim from the user's seed document): names,
descriptions, defaults and required fields are kept; additions are allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memory_worker.adapters.bus import events
from memory_worker.app import catalog, functions
from memory_worker.app.catalog import CATALOG, SEAMS, FunctionSpec, SeamSpec
from memory_worker.core.errors import InvalidInput

from .goldens import updating

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_SCHEMAS = ROOT / "golden" / "schemas"
SEED_REFERENCE = ROOT / "golden" / "api-reference.seed.json"
UPDATE = updating("schemas")
REBASELINE = "UPDATE_GOLDENS=schemas .venv/bin/python -m pytest tests/test_catalog.py"

_SEGMENT = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


# --- helpers ---------------------------------------------------------------------------------


def _golden_path(function_id: str) -> Path:
    return GOLDEN_SCHEMAS / f"{function_id.replace('::', '.')}.json"


Spec = FunctionSpec | SeamSpec
EVERY = (*CATALOG, *SEAMS)  # what the worker registers: public functions and internal seams


def _snapshot(spec: Spec) -> dict[str, Any]:
    return {
        "function_id": spec.id,
        "description": spec.description,
        "internal": spec.internal,
        "policy": str(spec.policy),
        "hints": {
            "read_only": spec.hints.read_only,
            "destructive": spec.hints.destructive,
            "idempotent": spec.hints.idempotent,
        },
        "request_schema": catalog.json_schema(spec.request),
        "response_schema": catalog.json_schema(spec.response),
    }


def _render(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _load_seed() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SEED_REFERENCE.read_text(encoding="utf-8"))
    return data


SEED = _load_seed()
SEED_FUNCTIONS: dict[str, dict[str, Any]] = {fn["name"]: fn for fn in SEED["functions"]}
SEED_INTERNAL = {
    name for name, fn in SEED_FUNCTIONS.items() if (fn.get("metadata") or {}).get("internal")
}
SEED_PUBLIC = sorted(set(SEED_FUNCTIONS) - SEED_INTERNAL)
SEED_NAMES = sorted(SEED_FUNCTIONS)
BY_ID: dict[str, Spec] = {spec.id: spec for spec in EVERY}


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow `$ref` into `definitions` and unwrap `allOf`/`anyOf`/`oneOf` wrappers around one
    non-null schema (pydantic's Optional is `anyOf: [{…}, {"type": "null"}]`)."""
    seen = 0
    while seen < 32:
        seen += 1
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            node = root.get("definitions", {}).get(name) or root.get("$defs", {}).get(name) or {}
            continue
        for key in ("allOf", "anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list):
                real = [b for b in branches if b.get("type") != "null"]
                if len(real) == 1 and "enum" not in real[0]:
                    node = real[0]
                    break
        else:
            return node
    raise AssertionError(f"schema wrappers nest too deep: {node}")


def _description(node: dict[str, Any]) -> str | None:
    """The description written on a property, looking through wrappers but not through `$ref`
    (a referenced model's own docstring is not the property's description)."""
    if isinstance(node.get("description"), str):
        return str(node["description"])
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key) or []:
            if "$ref" not in branch and isinstance(branch.get("description"), str):
                return str(branch["description"])
    return None


def _ref_name(node: dict[str, Any]) -> str | None:
    """The definition a property points at (directly, through wrappers, or as array items)."""
    if isinstance(node.get("$ref"), str):
        return str(node["$ref"]).rsplit("/", 1)[-1]
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key) or []:
            name = _ref_name(branch)
            if name:
                return name
    items = node.get("items")
    if isinstance(items, dict):
        return _ref_name(items)
    return None


def _enum_values(node: dict[str, Any]) -> set[Any] | None:
    """Values of an enum schema, whether `enum: [...]` or schemars' `oneOf` of one-value enums."""
    if isinstance(node.get("enum"), list):
        return set(node["enum"])
    if isinstance(node.get("oneOf"), list):
        values: set[Any] = set()
        for branch in node["oneOf"]:
            if not isinstance(branch.get("enum"), list):
                return None
            values.update(branch["enum"])
        return values
    return None


_ABSENT = object()


def _our_default(model: type[BaseModel], name: str, node: dict[str, Any]) -> Any:
    if "default" in node:
        return node["default"]
    info = model.model_fields.get(name)
    if info is None or info.is_required():
        return _ABSENT
    value = info.get_default(call_default_factory=True, validated_data={})
    return value.value if hasattr(value, "value") else value  # StrEnum defaults compare as text


def _defaults_equal(seed: Any, ours: Any) -> bool:
    if seed is None:
        return ours is None or ours is _ABSENT
    if isinstance(seed, list) and isinstance(ours, list | tuple):
        return list(seed) == list(ours)
    return bool(seed == ours)


@dataclass
class _Compare:
    """Walks a seed schema against ours and collects every contract problem found."""

    seed_root: dict[str, Any]
    our_root: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    visited: set[str] = field(default_factory=set)

    def object(self, where: str, seed: dict[str, Any], ours: dict[str, Any]) -> None:
        seed_desc, our_desc = seed.get("description"), ours.get("description")
        if isinstance(seed_desc, str) and (
            not isinstance(our_desc, str) or _collapse(seed_desc) != _collapse(our_desc)
        ):
            self.problems.append(
                f"{where}: description differs\n    seed: {seed_desc!r}\n    ours: {our_desc!r}"
            )
        seed_values, our_values = _enum_values(seed), _enum_values(ours)
        if seed_values is not None:
            missing_values = seed_values - (our_values or set())
            if missing_values:
                self.problems.append(f"{where}: enum values missing: {sorted(missing_values)}")
        our_props: dict[str, Any] = ours.get("properties") or {}
        for name, seed_prop in (seed.get("properties") or {}).items():
            path = f"{where}.{name}"
            if name not in our_props:
                self.problems.append(f"{path}: missing (seed has it)")
                continue
            self.property(path, seed_prop, our_props[name])

    def property(self, where: str, seed: dict[str, Any], ours: dict[str, Any]) -> None:
        seed_desc = _description(seed)
        if seed_desc is not None:
            our_desc = _description(ours)
            if our_desc is None or _collapse(seed_desc) != _collapse(our_desc):
                self.problems.append(
                    f"{where}: description differs\n    seed: {seed_desc!r}\n    ours: {our_desc!r}"
                )
        seed_ref = _ref_name(seed)
        if seed_ref is None or seed_ref in self.visited:
            return
        self.visited.add(seed_ref)
        our_ref = _ref_name(ours)
        if our_ref is None:
            self.problems.append(f"{where}: seed points at definition {seed_ref}, ours at none")
            return
        seed_def = self.seed_root.get("definitions", {}).get(seed_ref, {})
        our_def = _resolve({"$ref": f"#/definitions/{our_ref}"}, self.our_root)
        self.object(f"definitions.{seed_ref}", seed_def, our_def)


def _request_problems(function_id: str) -> list[str]:
    spec = BY_ID[function_id]
    seed = SEED_FUNCTIONS[function_id]["request_schema"]
    ours = catalog.json_schema(spec.request)
    walk = _Compare(seed, ours)
    walk.object(f"{function_id} request", seed, ours)
    our_props: dict[str, Any] = ours.get("properties") or {}
    for name, seed_prop in (seed.get("properties") or {}).items():
        if name not in our_props or "default" not in seed_prop:
            continue
        mine = _our_default(spec.request, name, our_props[name])
        if not _defaults_equal(seed_prop["default"], mine):
            shown = "(none)" if mine is _ABSENT else repr(mine)
            walk.problems.append(
                f"{function_id} request.{name}: default differs: seed {seed_prop['default']!r}, "
                f"ours {shown}"
            )
    seed_required = set(seed.get("required") or [])
    our_required = set(ours.get("required") or [])
    if seed_required != our_required:
        walk.problems.append(
            f"{function_id} request: required differs: seed {sorted(seed_required)}, "
            f"ours {sorted(our_required)}"
        )
    return walk.problems


def _response_problems(function_id: str) -> list[str]:
    spec = BY_ID[function_id]
    seed = SEED_FUNCTIONS[function_id]["response_schema"]
    ours = catalog.json_schema(spec.response)
    walk = _Compare(seed, ours)
    walk.object(f"{function_id} response", seed, ours)
    missing = set(seed.get("required") or []) - set(ours.get("required") or [])
    if missing:
        walk.problems.append(
            f"{function_id} response: the seed always returns {sorted(missing)}; ours does "
            "not require them"
        )
    return walk.problems


def _report(problems: list[str]) -> str:
    return "seed contract broken:\n  " + "\n  ".join(problems)


# --- golden schema snapshots -----------------------------------------------------------------


@pytest.mark.parametrize("spec", EVERY, ids=lambda spec: spec.id)
def test_golden_schema_matches_the_catalog(spec: Spec) -> None:
    """The published id, description and schemas of each function equal its reviewed snapshot."""
    path = _golden_path(spec.id)
    rendered = _render(_snapshot(spec))
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
        return
    assert path.is_file(), (
        f"{path.relative_to(ROOT)} is missing: create it with `{REBASELINE}` and review it"
    )
    stored = path.read_text(encoding="utf-8")
    assert stored == rendered, (
        f"{spec.id} no longer matches {path.relative_to(ROOT)}. If the change is intended, "
        f"re-baseline with `{REBASELINE}` and review the diff."
    )


def test_no_orphan_golden_schemas() -> None:
    """Every golden schema file is produced by some catalog entry (stale files are removed)."""
    expected = {_golden_path(spec.id).name for spec in EVERY}
    orphans = sorted(p.name for p in GOLDEN_SCHEMAS.glob("*.json") if p.name not in expected)
    assert not orphans, (
        f"golden/schemas has files no catalog function produces: {orphans}; delete them"
    )


def test_golden_files_are_pretty_printed_with_trailing_newline() -> None:
    """Goldens are indent=2 JSON ending in one newline, so diffs stay reviewable."""
    for path in sorted(GOLDEN_SCHEMAS.glob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert text == _render(json.loads(text)), f"{path.name} is not canonical indent=2 JSON"


# --- catalog shape ---------------------------------------------------------------------------


def test_function_ids_are_unique() -> None:
    ids = [spec.id for spec in EVERY]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("spec", EVERY, ids=lambda spec: spec.id)
def test_function_id_is_memory_namespaced_kebab_case(spec: Spec) -> None:
    """`memory::` prefix, then `::`-separated kebab-case segments (never `_`)."""
    segments = spec.id.split("::")
    assert segments[0] == "memory" and len(segments) >= 2, spec.id
    bad = [s for s in segments[1:] if not _SEGMENT.fullmatch(s)]
    assert not bad, f"{spec.id}: segments {bad} are not kebab-case"


@pytest.mark.parametrize("spec", EVERY, ids=lambda spec: spec.id)
def test_function_has_description_and_object_schemas(spec: Spec) -> None:
    assert spec.description.strip(), f"{spec.id} has no description"
    assert catalog.json_schema(spec.request)["type"] == "object"
    assert catalog.json_schema(spec.response)["type"] == "object"


def test_http_path_mirrors_the_function_id() -> None:
    assert BY_ID["memory::rule::set"].http_path == "memory/rule/set"


def test_the_light_id_table_is_the_catalog_in_order() -> None:
    """`app.functions` (what a forwarded call checks its id against, without the catalog) names
    exactly the catalog's public functions, and refuses the rest with `find`'s own message."""
    assert tuple(spec.id for spec in CATALOG) == functions.FUNCTION_IDS
    with pytest.raises(InvalidInput) as light:
        functions.check_known("memory::nope")
    with pytest.raises(InvalidInput) as full:
        catalog.find("memory::nope")
    assert str(light.value) == str(full.value)
    functions.check_known("memory::recall")  # a known one passes


# --- seed contract ---------------------------------------------------------------------------


def test_seed_reference_copy_is_canonical() -> None:
    """The committed seed copy is indent=2 JSON with a trailing newline, keys in seed order."""
    text = SEED_REFERENCE.read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"
    assert set(SEED) == {"functions", "triggers"}


def test_every_seed_function_is_in_the_catalog_public_or_internal() -> None:
    missing = [name for name in SEED_NAMES if name not in BY_ID]
    assert not missing, f"seed functions missing from the catalog: {missing}"
    assert {spec.id for spec in SEAMS} >= SEED_INTERNAL
    assert {spec.id for spec in CATALOG} >= set(SEED_PUBLIC)


def test_seed_functions_in_the_catalog_keep_their_internal_flag() -> None:
    wrong = [
        spec.id
        for spec in EVERY
        if spec.id in SEED_FUNCTIONS and spec.internal != (spec.id in SEED_INTERNAL)
    ]
    assert not wrong, f"internal flag differs from the seed reference for {wrong}"


@pytest.mark.parametrize("function_id", SEED_NAMES)
def test_catalog_description_equals_the_seed(function_id: str) -> None:
    spec = BY_ID.get(function_id)
    if spec is None:
        pytest.fail(f"{function_id} is missing from the catalog")
    assert spec.description == SEED_FUNCTIONS[function_id]["description"]


@pytest.mark.parametrize("function_id", SEED_NAMES)
def test_request_keeps_the_seed_fields_descriptions_defaults_and_required(
    function_id: str,
) -> None:
    if function_id not in BY_ID:
        pytest.fail(f"{function_id} is missing from the catalog")
    problems = _request_problems(function_id)
    assert not problems, _report(problems)


def test_published_request_schemas_state_every_default_the_seed_states() -> None:
    """A client built from the schema we publish (the bus registration, MCP's `inputSchema`)
    reads a field's default there, not from our models: each default the seed states is
    written in it (`memory::save`'s `entities` and `tags` defaults `[]` were not: a list's
    default comes from a factory, which pydantic leaves out of the schema)."""
    missing: list[str] = []
    for name in SEED_NAMES:
        spec = BY_ID.get(name)
        if spec is None:
            continue
        ours = catalog.json_schema(spec.request).get("properties") or {}
        seed_props = SEED_FUNCTIONS[name]["request_schema"].get("properties") or {}
        for field_name, seed_prop in seed_props.items():
            if "default" not in seed_prop or field_name not in ours:
                continue
            if ours[field_name].get("default", _ABSENT) != seed_prop["default"]:
                missing.append(f"{name} request.{field_name}: seed {seed_prop['default']!r}")
    assert not missing, missing


@pytest.mark.parametrize("function_id", SEED_NAMES)
def test_response_keeps_the_seed_fields_and_descriptions(function_id: str) -> None:
    if function_id not in BY_ID:
        pytest.fail(f"{function_id} is missing from the catalog")
    problems = _response_problems(function_id)
    assert not problems, _report(problems)


_JSON_TYPES = {"string": str, "boolean": bool, "number": float, "integer": int, "null": type(None)}


def _admitted(node: Any, root: dict[str, Any], depth: int = 0) -> frozenset[str] | None:
    """The JSON types a schema node admits, through `$ref` and `allOf`/`anyOf`/`oneOf`; None for
    any value (`true`, `{}`, or a node that names no type)."""
    if not isinstance(node, dict) or depth > 32:
        return None
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return _admitted(root.get("definitions", {}).get(name), root, depth + 1)
    kinds = node.get("type")
    if isinstance(kinds, str | list):
        return frozenset([kinds] if isinstance(kinds, str) else kinds)
    if isinstance(node.get("enum"), list):
        return frozenset(
            next(k for k, t in _JSON_TYPES.items() if type(value) is t) for value in node["enum"]
        )
    found: set[str] = set()
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key) or []:
            kinds_of = _admitted(branch, root, depth + 1)
            if kinds_of is None:
                return None
            found |= kinds_of
    return frozenset(found) or None


def _named(kinds: frozenset[str] | None) -> str:
    return "any value" if kinds is None else "/".join(sorted(kinds))


def _within(narrow: frozenset[str] | None, wide: frozenset[str] | None) -> bool:
    """Whether every value of `narrow`'s types is one of `wide`'s (an integer is a number)."""
    if wide is None:
        return True
    if narrow is None:
        return False
    return all(kind in wide or (kind == "integer" and "number" in wide) for kind in narrow)


def _type_problems(
    where: str, seed: Any, ours: Any, roots: tuple[dict[str, Any], dict[str, Any]], *, asked: bool
) -> list[str]:
    """Where a seed client's value is refused (`asked`: a request, ours must admit at least what
    the seed admits, and no higher `minimum`) or ours answers a type its schema does not name
    (a response), down every property, array item and referenced definition."""
    seed_root, our_root = roots
    seed_types, our_types = _admitted(seed, seed_root), _admitted(ours, our_root)
    fits = _within(seed_types, our_types) if asked else _within(our_types, seed_types)
    problems = (
        [] if fits else [f"{where}: seed admits {_named(seed_types)}, ours {_named(our_types)}"]
    )
    seed_node, our_node = _resolve(seed, seed_root), _resolve(ours, our_root)
    floor, our_floor = seed_node.get("minimum"), our_node.get("minimum")
    if asked and isinstance(our_floor, int | float) and (floor is None or our_floor > floor):
        problems.append(f"{where}: seed's minimum {floor}, ours {our_floor}")
    for name, seed_prop in (seed_node.get("properties") or {}).items():
        mine = (our_node.get("properties") or {}).get(name)
        if mine is not None:  # a missing field is `test_…_keep_the_seed_fields…`'s to report
            problems += _type_problems(f"{where}.{name}", seed_prop, mine, roots, asked=asked)
    if isinstance(seed_node.get("items"), dict) and isinstance(our_node.get("items"), dict):
        problems += _type_problems(
            f"{where}[]", seed_node["items"], our_node["items"], roots, asked=asked
        )
    return problems


@pytest.mark.parametrize("function_id", SEED_NAMES)
def test_a_seed_client_is_neither_refused_nor_surprised_by_a_type(function_id: str) -> None:
    """A client built from the seed sends the types its request schema admits (`null` where a
    field is nullable, an integer from 0) and reads the types its response schema names: ours
    admit at least those, and answer no other (the contract tests above compare names,
    descriptions, defaults and required fields, not types)."""
    spec = BY_ID.get(function_id)
    if spec is None:
        pytest.fail(f"{function_id} is missing from the catalog")
    problems: list[str] = []
    for key, model, asked in (
        ("request_schema", spec.request, True),
        ("response_schema", spec.response, False),
    ):
        seed, ours = SEED_FUNCTIONS[function_id][key], catalog.json_schema(model)
        problems += _type_problems(f"{function_id} {key}", seed, ours, (seed, ours), asked=asked)
    assert not problems, _report(problems)


@pytest.mark.parametrize("trigger", SEED["triggers"], ids=lambda trigger: trigger["name"])
def test_a_seed_binding_config_is_accepted_as_the_seed_describes_it(
    trigger: dict[str, Any],
) -> None:
    """Each trigger type of the seed is provided, with a binding config that admits every field
    of the seed's (`{bank}`, a string or null) under its description."""
    assert trigger["name"] in events.TRIGGER_TYPES
    seed, ours = trigger["invocation_schema"], events.CONFIG_SCHEMA
    problems = _type_problems(trigger["name"], seed, ours, (seed, ours), asked=True)
    walk = _Compare(seed, ours)
    walk.object(f"{trigger['name']} binding config", seed, ours)
    assert not problems + walk.problems, _report(problems + walk.problems)


def _variant_descriptions(node: dict[str, Any]) -> dict[Any, str]:
    """Per-value descriptions of an enum written as `oneOf` of one-value enums (schemars style)."""
    found: dict[Any, str] = {}
    for branch in node.get("oneOf") or []:
        values = branch.get("enum")
        if (
            isinstance(values, list)
            and len(values) == 1
            and isinstance(branch.get("description"), str)
        ):
            found[values[0]] = branch["description"]
    return found


def test_enum_values_keep_their_seed_descriptions() -> None:
    """Where the seed documents each enum value (e.g. `Confidence`), our schema documents it too."""
    problems: dict[str, str] = {}
    for name in SEED_NAMES:
        if name not in BY_ID:
            continue
        for key, model in (
            ("request_schema", BY_ID[name].request),
            ("response_schema", BY_ID[name].response),
        ):
            seed_defs = SEED_FUNCTIONS[name][key].get("definitions", {})
            ours = catalog.json_schema(model)
            for def_name, seed_def in seed_defs.items():
                wanted = _variant_descriptions(seed_def)
                if not wanted or def_name in problems:
                    continue
                have = _variant_descriptions(ours.get("definitions", {}).get(def_name, {}))
                wrong = {
                    value: (text, have.get(value))
                    for value, text in wanted.items()
                    if have.get(value) is None or _collapse(have[value]) != _collapse(text)
                }
                if wrong:
                    problems[def_name] = "; ".join(
                        f"{value!r}: seed {seed!r}, ours {mine!r}"
                        for value, (seed, mine) in wrong.items()
                    )
    assert not problems, "enum value descriptions differ from the seed:\n  " + "\n  ".join(
        f"definitions.{name}: {detail}" for name, detail in problems.items()
    )


# --- the comparator itself -------------------------------------------------------------------


def _walk(seed: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    walk = _Compare(seed, ours)
    walk.object("x", seed, ours)
    return walk.problems


class TestComparator:
    """The seed comparator sees through pydantic's wrappers and still catches real drift."""

    SEED_DEFS: dict[str, Any] = {  # noqa: RUF012 - a read-only fixture
        "definitions": {
            "Item": {
                "description": "An item.",
                "properties": {"a": {"description": "The a.", "type": "string"}},
            }
        },
        "properties": {
            "item": {"allOf": [{"$ref": "#/definitions/Item"}], "description": "One item."},
            "items": {"items": {"$ref": "#/definitions/Item"}, "type": "array"},
        },
    }

    def _ours(self, a_desc: str = "The a.", item_desc: str = "One item.") -> dict[str, Any]:
        return {
            "definitions": {
                "Item": {
                    "description": "An  item.",
                    "properties": {"a": {"description": a_desc, "type": "string"}, "b": {}},
                }
            },
            "properties": {
                "item": {"$ref": "#/definitions/Item", "description": item_desc},
                "items": {"items": {"$ref": "#/definitions/Item"}, "type": "array"},
                "extra": {"type": "string"},
            },
        }

    def test_wrappers_whitespace_and_additions_are_accepted(self) -> None:
        assert _walk(self.SEED_DEFS, self._ours()) == []

    def test_a_changed_nested_description_is_reported(self) -> None:
        problems = _walk(self.SEED_DEFS, self._ours(a_desc="Another a."))
        assert len(problems) == 1 and "definitions.Item.a" in problems[0]

    def test_a_changed_property_description_is_reported(self) -> None:
        problems = _walk(self.SEED_DEFS, self._ours(item_desc="Other."))
        assert len(problems) == 1 and "x.item" in problems[0]

    def test_a_type_a_seed_client_sends_or_reads_is_checked(self) -> None:
        seed = {"properties": {"n": {"type": ["integer", "null"], "minimum": 0}}}
        nullable = {
            "properties": {"n": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}}
        }
        narrowed = {"properties": {"n": {"type": "integer", "minimum": 1}}}
        assert _type_problems("x", seed, nullable, (seed, nullable), asked=True) == []
        refused = _type_problems("x", seed, narrowed, (seed, narrowed), asked=True)
        assert [p.split(":")[0] for p in refused] == ["x.n", "x.n"]  # the null, the minimum
        answered = {"properties": {"n": {"type": ["integer", "string"]}}}
        assert _type_problems("x", seed, answered, (seed, answered), asked=False) != []
        assert _type_problems("x", seed, narrowed, (seed, narrowed), asked=False) == []

    def test_a_missing_property_is_reported(self) -> None:
        ours = self._ours()
        del ours["properties"]["items"]
        assert _walk(self.SEED_DEFS, ours) == ["x.items: missing (seed has it)"]

    def test_optional_anyof_resolves_to_its_schema(self) -> None:
        root = {"definitions": {"P": {"type": "object"}}}
        node = {"anyOf": [{"$ref": "#/definitions/P"}, {"type": "null"}]}
        assert _resolve(node, root) == {"type": "object"}
        assert _ref_name(node) == "P"

    def test_null_default_equals_absent_and_empty_list_equals_factory_list(self) -> None:
        assert _defaults_equal(None, _ABSENT) and _defaults_equal(None, None)
        assert _defaults_equal([], []) and not _defaults_equal([], None)
        assert not _defaults_equal(False, _ABSENT)


def _all_seed_definitions() -> Iterator[str]:
    for fn in SEED_FUNCTIONS.values():
        for key in ("request_schema", "response_schema"):
            yield from (fn.get(key) or {}).get("definitions", {})


def test_seed_definitions_we_compare_are_reached() -> None:
    """Every definition a public seed function uses is visited by the contract walk."""
    reached: set[str] = set()
    expected: set[str] = set()
    for name in SEED_NAMES:
        if name not in BY_ID:
            continue
        for key in ("request_schema", "response_schema"):
            seed = SEED_FUNCTIONS[name][key]
            expected.update(seed.get("definitions", {}))
            ours = catalog.json_schema(
                BY_ID[name].request if key == "request_schema" else BY_ID[name].response
            )
            walk = _Compare(seed, ours)
            walk.object(name, seed, ours)
            reached.update(walk.visited)
    assert expected - reached == set(), f"definitions never compared: {sorted(expected - reached)}"
    assert {
        "Memory",
        "BankInfo",
        "Rule",
        "DoctorCheck",
        "TagCount",
        "ScoredMemory",
        "PreviewMemory",
        "Provenance",
        "Confidence",
        "RecallMode",
    } <= set(_all_seed_definitions())
