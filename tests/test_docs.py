"""Docs and manifests stay true to the code: README tables, the example config, permissions,
the worker manifest, and a docstring plus `__all__` in every module."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import yaml

from memory_worker.app.catalog import CATALOG, SEAMS, render_permissions
from memory_worker.consolidate import catalog as consolidate_catalog
from memory_worker.consolidate.config import ConsolidateSettings, parse_settings
from memory_worker.core.config import Settings, load_settings
from memory_worker.core.errors import ERROR_CODES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memory_worker"
README = ROOT / "README.md"
CONFIG_EXAMPLE = ROOT / "config.example.yaml"
CONSOLIDATE_EXAMPLE = ROOT / "consolidate.example.yaml"
PERMISSIONS = ROOT / "iii-permissions.yaml"
WORKER_MANIFEST = ROOT / "iii.worker.yaml"
SEED_REFERENCE = ROOT / "golden" / "api-reference.seed.json"

CATALOG_IDS = {spec.id for spec in CATALOG}
# memory-consolidate's functions: its own worker, documented beside ours.
CONSOLIDATE_IDS = {spec.id for spec in consolidate_catalog.FUNCTIONS}


def _seed_internal_ids() -> set[str]:
    seed = json.loads(SEED_REFERENCE.read_text(encoding="utf-8"))
    return {fn["name"] for fn in seed["functions"] if (fn.get("metadata") or {}).get("internal")}


SEED_INTERNAL = _seed_internal_ids()


# --- README ----------------------------------------------------------------------------------


def _readme_table_names() -> set[str]:
    """Every backticked name on a README table row (a line starting with `|`)."""
    names: set[str] = set()
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("|"):
            names.update(re.findall(r"`([^`]+)`", line))
    return names


def test_readme_has_a_table_row_for_every_function() -> None:
    missing = sorted((CATALOG_IDS | CONSOLIDATE_IDS) - _readme_table_names())
    assert not missing, f"README.md has no table row naming these functions: {missing}"


def test_readme_has_a_table_row_for_every_error_code() -> None:
    missing = sorted(set(ERROR_CODES) - _readme_table_names())
    assert not missing, f"README.md has no table row naming these error codes: {missing}"


# --- config.example.yaml ---------------------------------------------------------------------


def _example_keys() -> dict[str, Any]:
    raw = yaml.safe_load(CONFIG_EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(raw, dict), "config.example.yaml must be a mapping"
    return raw


def test_config_example_parses_into_the_default_settings() -> None:
    assert load_settings(CONFIG_EXAMPLE, env={}) == Settings()


def test_config_example_names_every_setting() -> None:
    """Each field is a real key (a commented-out line does not count), and nothing else is."""
    keys = set(_example_keys())
    fields = set(Settings.model_fields)
    assert not fields - keys, f"config.example.yaml lacks keys: {sorted(fields - keys)}"
    assert not keys - fields, f"config.example.yaml has unknown keys: {sorted(keys - fields)}"


def test_config_example_values_are_the_defaults() -> None:
    raw = _example_keys()
    defaults = {
        name: info.get_default(call_default_factory=True)
        for name, info in Settings.model_fields.items()
    }
    wrong = {
        name: (raw[name], default)
        for name, default in defaults.items()
        if name in raw and (raw[name] != default or type(raw[name]) is not type(default))
    }
    assert not wrong, (
        f"config.example.yaml values differ from the defaults (value, default): {wrong}"
    )


def _commented_keys(path: Path) -> dict[str, str]:
    """Each key of an example file -> the comment block right above it, on one line."""
    comment: list[str] = []
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            comment.append(line.lstrip("#").strip())
        elif match := re.match(r"([a-z_][a-z0-9_]*):", line):
            found[match.group(1)] = " ".join(" ".join(comment).split())
            comment = []
        elif not line.strip():
            comment = []
    return found


def test_consolidate_example_is_every_field_at_its_default_with_its_description() -> None:
    raw = yaml.safe_load(CONSOLIDATE_EXAMPLE.read_text(encoding="utf-8"))
    assert parse_settings(raw, source="consolidate.example.yaml") == ConsolidateSettings()
    assert set(raw) == set(ConsolidateSettings.model_fields)
    found = _commented_keys(CONSOLIDATE_EXAMPLE)
    wrong = {
        name: found.get(name)
        for name, info in ConsolidateSettings.model_fields.items()
        if found.get(name) != " ".join((info.description or "").split())
    }
    assert not wrong, f"comment above these keys is not the field description: {wrong}"


def test_readme_documents_every_consolidate_setting() -> None:
    readme = README.read_text(encoding="utf-8")
    missing = [name for name in ConsolidateSettings.model_fields if f"`{name}`" not in readme]
    assert not missing, f"README.md does not name these memory-consolidate settings: {missing}"


def test_config_example_comments_each_key_with_its_description() -> None:
    """The comment block right above each key is the field's description, so the example never
    drifts from the schema the console renders."""
    comment: list[str] = []
    found: dict[str, str] = {}
    for line in CONFIG_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            comment.append(line.lstrip("#").strip())
        elif match := re.match(r"([a-z_][a-z0-9_]*):", line):
            found[match.group(1)] = " ".join(" ".join(comment).split())
            comment = []
        elif not line.strip():
            comment = []
    wrong = {
        name: found.get(name)
        for name, info in Settings.model_fields.items()
        if found.get(name) != " ".join((info.description or "").split())
    }
    assert not wrong, f"comment above these keys is not the field description: {wrong}"


# --- iii-permissions.yaml --------------------------------------------------------------------

# The agent set that seed 000 grants ("agents get memory::recall, memory::save, memory::get,
# memory::list, memory::update, memory::delete, memory::pin"): the one fact the catalog's policy
# is checked against here, so a policy change that widens it cannot slip through.
SEED_AGENT_SET = {
    "memory::recall",
    "memory::save",
    "memory::get",
    "memory::list",
    "memory::update",
    "memory::delete",
    "memory::pin",
}
BUS_INTERNAL = {spec.id for spec in SEAMS}


def _permission_rules() -> tuple[list[str], list[str]]:
    data = yaml.safe_load(PERMISSIONS.read_text(encoding="utf-8"))
    assert data.get("version") == 1, "iii-permissions.yaml must say version: 1"
    rules = data.get("rules")
    assert isinstance(rules, list) and all(isinstance(r, str) for r in rules), rules
    allowed = [r for r in rules if not r.startswith("!")]
    denied = [r[1:] for r in rules if r.startswith("!")]
    return allowed, denied


def test_permissions_file_is_what_the_catalog_generates() -> None:
    rendered = render_permissions()
    assert PERMISSIONS.read_text(encoding="utf-8") == rendered, (
        "iii-permissions.yaml differs from the catalog's policy: regenerate it with "
        "`.venv/bin/memory-worker permissions > iii-permissions.yaml`"
    )


def test_agents_get_exactly_the_seed_agent_set() -> None:
    allowed, _ = _permission_rules()
    assert set(allowed) == SEED_AGENT_SET
    assert {spec.id for spec in CATALOG if spec.agents} == SEED_AGENT_SET


def test_every_internal_seam_of_the_seed_and_the_bus_is_denied() -> None:
    _, denied = _permission_rules()
    assert set(denied) >= SEED_INTERNAL | BUS_INTERNAL


def test_permission_ids_are_known_functions_and_not_repeated() -> None:
    allowed, denied = _permission_rules()
    rules = allowed + denied
    unknown = sorted(set(rules) - CATALOG_IDS - SEED_INTERNAL - BUS_INTERNAL)
    assert not unknown, f"iii-permissions.yaml names functions that do not exist: {unknown}"
    assert len(rules) == len(set(rules)), sorted({r for r in rules if rules.count(r) > 1})


def test_deny_rules_come_before_allow_rules() -> None:
    """First match wins, so every deny is listed ahead of the allows (a later glob stays safe)."""
    data = yaml.safe_load(PERMISSIONS.read_text(encoding="utf-8"))
    kinds = ["deny" if r.startswith("!") else "allow" for r in data["rules"]]
    assert kinds == sorted(kinds, key=lambda kind: kind != "deny")


# --- iii.worker.yaml -------------------------------------------------------------------------


def test_worker_manifest() -> None:
    manifest = yaml.safe_load(WORKER_MANIFEST.read_text(encoding="utf-8"))
    assert manifest["iii"] == "v1"
    assert manifest["name"] == "memory"
    assert manifest["language"] == "python"
    assert manifest["manifest"] == "pyproject.toml"
    assert manifest["license"] == "Apache-2.0"
    assert manifest["description"].strip()
    dependencies = manifest["dependencies"]
    assert {"configuration", "session-manager", "llm-router", "state", "queue"} <= set(dependencies)
    assert manifest["scripts"]["start"] == "memory-worker serve"


# --- modules ---------------------------------------------------------------------------------


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    for node in tree.body if lazy else ():  # PEP 562: names typed under TYPE_CHECKING, loaded late
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            names.update(
                alias.asname or alias.name
                for child in node.body
                if isinstance(child, ast.ImportFrom)
                for alias in child.names
            )
    return names


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            assert isinstance(value, ast.List | ast.Tuple), "__all__ must be a literal list"
            return [ast.literal_eval(elt) for elt in value.elts]
    return None


def test_every_module_has_a_docstring_and_all() -> None:
    problems: list[str] = []
    for path in _modules():
        name = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not (ast.get_docstring(tree) or "").strip():
            problems.append(f"{name}: no module docstring")
        exported = _declared_all(tree)
        if exported is None:
            problems.append(f"{name}: no __all__")
            continue
        undefined = sorted(set(exported) - _top_level_names(tree))
        if undefined:
            problems.append(f"{name}: __all__ names undefined {undefined}")
    assert not problems, "\n".join(problems)


# --- docs/DESIGN.md ----------------------------------------------------------------------------

DESIGN = ROOT / "docs" / "DESIGN.md"


def _design_table_modules() -> set[str]:
    """`layer.module` for every backticked module on a row of DESIGN.md's module table (a row's
    first cell names its layer, or is empty for the layer above it)."""
    listed: set[str] = set()
    layer = None
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) < 3:
            continue
        if cells[0].startswith("`"):
            layer = cells[0].split("`")[1]
        if layer is not None:
            listed.update(f"{layer}.{name}" for name in re.findall(r"`([a-z0-9_.]+)`", cells[1]))
    return listed


def _package_modules() -> set[str]:
    """`layer.module` of every module under a layer package (a subpackage by its own name)."""
    found: set[str] = set()
    for path in _modules():
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if len(parts) < 2:
            continue  # the package's own __init__
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) >= 2:
            found.add(".".join(parts))
    return found


def test_design_module_table_lists_every_module_and_only_real_ones() -> None:
    listed = _design_table_modules()
    actual = _package_modules()
    # A subpackage is covered by its modules' rows (`adapters.bus` by `bus.worker`, …).
    covered = {name.rsplit(".", 1)[0] for name in listed} | listed
    missing = sorted(name for name in actual if name not in covered)
    stale = sorted(listed - actual)
    assert not missing, f"docs/DESIGN.md's module table has no row for {missing}"
    assert not stale, f"docs/DESIGN.md's module table names modules that do not exist: {stale}"


def test_readme_dependencies_table_gives_a_reason_for_every_pinned_package() -> None:
    """README's Dependencies table names every package pyproject.toml pins (the build backend,
    the dependencies and every extra's), each on a row with its reason."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = [*project["build-system"]["requires"], *project["project"]["dependencies"]]
    for extra in project["project"]["optional-dependencies"].values():
        requirements += extra
    pinned = {
        re.split(r"[=\[<>~! ]", requirement, maxsplit=1)[0].lower()
        for requirement in requirements
        if not requirement.startswith("memory-worker")
    }
    readme = README.read_text(encoding="utf-8")
    table = readme.split("## Dependencies", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    named = {
        word.lower()
        for row in rows
        for word in re.findall(r"[A-Za-z0-9][A-Za-z0-9_.-]*", row.split("|")[1])
    }
    missing = sorted(pinned - named)
    assert not missing, f"README.md's Dependencies table gives no reason for {missing}"


def test_readme_who_may_call_what_names_every_human_owned_and_approval_function() -> None:
    """The section says which functions agents are denied and which wait for an operator's
    approval; it left out `memory::import`, `memory::compact`, `memory::lessons::match` and
    `memory::export`, which `iii-permissions.yaml` does list."""
    from memory_worker.app.catalog import Policy

    readme = README.read_text(encoding="utf-8")
    section = readme.split("## Who may call what", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(memory::[a-z:-]+)`", section))
    policed = {spec.id for spec in CATALOG if spec.policy in (Policy.HUMANS, Policy.APPROVAL)}
    bank_functions = {"memory::bank::create", "memory::bank::configure", "memory::bank::delete"}
    missing = sorted(policed - named - bank_functions)  # "Bank creation, configuration and …"
    assert not missing, f"README.md's 'Who may call what' does not name {missing}"
