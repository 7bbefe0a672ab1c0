"""Docs and manifests stay true to the code: README tables, the example config, permissions,
the worker manifest, and a docstring plus `__all__` in every module."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import yaml

from memory_worker.app.catalog import CATALOG, SEAMS, render_permissions
from memory_worker.consolidate import catalog as consolidate_catalog
from memory_worker.consolidate.config import ConsolidateSettings, parse_settings
from memory_worker.core.config import Settings, load_settings
from memory_worker.core.errors import ERROR_CODES, HTTP_STATUS

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


def _error_rows() -> dict[str, str]:
    """Each row of README's Errors section: code -> its HTTP status cell."""
    section = README.read_text(encoding="utf-8").split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells[1] if len(cells) >= 3 else ""
    return rows


def _rest_refusals() -> set[tuple[int | None, str]]:
    """(status, code) of every error a REST door answers outside the catalog's codes: each
    `_error(status, "code", …)` and `Refusal(status, "code", …)` in the adapters, and each
    `{"code": "…"}` written out whole (the connection cap's 503, its status in the raw bytes)."""
    found: set[tuple[int | None, str]] = set()
    for path in (PACKAGE / "adapters").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and len(node.args) >= 2:
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                status, code = node.args[0], node.args[1]
                if (
                    name in {"_error", "Refusal"}
                    and isinstance(status, ast.Constant)
                    and isinstance(code, ast.Constant)
                ):
                    found.add((status.value, code.value))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == "code"
                        and isinstance(value, ast.Constant)
                    ):
                        found.add((None, value.value))
    return found


def test_readme_errors_table_names_every_code_a_door_answers_with_its_http_status() -> None:
    """A user matching on `code` (or on the HTTP status) finds every code REST can answer: the
    catalog's own, and the ones the server answers before a function runs (`unauthorized`,
    `not_found`, …), which the table left out."""
    rows = _error_rows()
    expected = {(status, code) for code, status in HTTP_STATUS.items()} | _rest_refusals()
    missing = sorted({code for _, code in expected if code not in rows})
    assert not missing, f"README.md's Errors section has no row for these codes: {missing}"
    wrong = sorted(
        (code, status, rows[code])
        for status, code in expected
        if status is not None and str(status) not in rows[code]
    )
    assert not wrong, f"README.md's Errors rows miss the HTTP status (code, status, cell): {wrong}"


def test_readme_states_the_code_s_own_figures() -> None:
    """The numbers a user plans around are the ones the code uses. The README said a failed
    event send is "tried again up to 5 times": it is tried 5 times in all (4 retries)."""
    from memory_worker.adapters import agent_hooks, standalone
    from memory_worker.adapters.bus import events
    from memory_worker.adapters.console.feed import MAX_CLIENTS
    from memory_worker.core import transitions
    from memory_worker.storage import capture

    readme = " ".join(README.read_text(encoding="utf-8").split())
    delays = ", ".join(f"{events.BACKOFF_S * 2**i:g} s" for i in range(events.MAX_ATTEMPTS - 1))
    attempts = events.MAX_ATTEMPTS
    phrases = [
        f"tried again up to {attempts - 1} times ({attempts} attempts in all)",
        f"doubling backoff ({delays})",
        f"({capture.MAX_ATTEMPTS} attempts, then the job is kept as dead)",
        f"at most {MAX_CLIENTS} tabs",
        f"request head within {standalone.IDLE_TIMEOUT_S:g} s",
        f"its body within {standalone.BODY_TIMEOUT_S:g} s",
        f"a body is at most {standalone.MAX_BODY_BYTES // 2**20} MiB",
        f"past {standalone.MAX_CONNECTIONS} open connections",
        f"at most {agent_hooks.MAX_CONTEXT_CHARS:,} characters of context",
        f"text at least {transitions.MIN_TEXT_CHARS} and at most {transitions.MAX_TEXT_CHARS:,}",
        f"at most {transitions.MAX_LABELS} distinct tags and {transitions.MAX_LABELS} entities",
        f"a list of more than {transitions.MAX_RAW_LABELS} values is `invalid_input`",
        f"{transitions.MAX_LABEL_CHARS} characters each",
    ]
    missing = [phrase for phrase in phrases if phrase not in readme]
    assert not missing, f"README.md does not state these figures as the code has them: {missing}"


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


# --- README commands ---------------------------------------------------------------------------


def _shell_commands(body: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, a quote open over several lines
    kept whole, `&&` chains split, comments cut."""
    import shlex

    commands: list[list[str]] = []
    pending = ""
    for line in body.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            tokens = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on on the next line
            continue
        pending = ""
        command: list[str] = []
        for token in [*tokens, "&&"]:
            if token == "&&":
                commands.append(command)
                command = []
            else:
                command.append(token)
    return commands


def _json_commands(value: object) -> list[dict[str, Any]]:
    """Every object holding a `command` in a JSON block: a hook's (a command line) or an MCP
    server's (a program, and its `args`)."""
    if isinstance(value, list):
        return [found for item in value for found in _json_commands(item)]
    if not isinstance(value, dict):
        return []
    here = [value] if isinstance(value.get("command"), str) else []
    return here + [found for item in value.values() for found in _json_commands(item)]


def _readme_command_lines() -> list[list[str]]:
    """Every `memory-worker …` / `memory-consolidate …` command the README shows: in its shell
    blocks, the hook and MCP server commands of its JSON blocks (`command` + `args`), and the TOML
    block's `command` + `args`."""
    import shlex
    import tomllib

    readme = README.read_text(encoding="utf-8")
    commands: list[list[str]] = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", readme, re.S):
        if lang == "bash":
            commands += _shell_commands(body)
        elif lang == "json":
            commands += [
                [*shlex.split(entry["command"]), *entry.get("args", [])]
                for entry in _json_commands(json.loads(body))
            ]
        elif lang == "toml":
            for server in tomllib.loads(body)["mcp_servers"].values():
                commands.append([server["command"], *server["args"]])
    picked = []
    for command in commands:
        if "--" in command:  # `claude mcp add memory -- /path/to/memory-worker mcp …`
            command = command[command.index("--") + 1 :]
        if command and Path(command[0]).name in {"memory-worker", "memory-consolidate"}:
            # A synopsis's optional parts (`[--bank B] [--dry-run]`) are given, as a user would.
            argv = [token.strip("[]") for token in command[1:]]
            picked.append([Path(command[0]).name, *argv])
    return picked


def test_every_readme_command_line_is_one_the_clis_accept() -> None:
    """A README command copied into a shell parses: its subcommand, options and hook events
    exist, and a `trigger` names a catalog function with `key=value` pairs that decode."""
    from memory_worker.adapters import cli
    from memory_worker.adapters.consolidate import cli as consolidate_cli

    commands = _readme_command_lines()
    assert len(commands) >= 20, commands  # the extraction itself still finds them
    refused: list[str] = []
    for program, *argv in commands:
        try:
            if program == "memory-consolidate":
                with contextlib.redirect_stderr(io.StringIO()):
                    consolidate_cli._parser().parse_args(argv)
                continue
            args, extra = cli._parser().parse_known_args(argv)
            if args.command == "trigger":
                args.pairs = [*args.pairs, *extra]
                extra = []
                assert args.function in CATALOG_IDS, f"unknown function {args.function}"
                cli.parse_assignments(args.pairs, args.json)
            assert not extra, f"unrecognized arguments: {extra}"
        except (Exception, SystemExit) as exc:
            refused.append(f"{program} {' '.join(argv)}: {exc}")
    assert not refused, "README commands the CLI refuses:\n" + "\n".join(refused)
