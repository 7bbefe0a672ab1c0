"""The layers of `memory_worker/`, enforced: an import may only point down.

    core → search → storage → app → harness → adapters

beside it one sibling package, `consolidate` (memory-consolidate), which may import `core` and
itself only (it reaches memories through the memory worker's public functions, never its code) and
is imported by `adapters` only.

Every module is parsed with `ast` (imports inside functions and under `TYPE_CHECKING` count too).
Its package decides its layer; it may import its own layer and the ones below, and only the
third-party packages its layer is allowed. A package missing from `LAYERS` fails: a new room needs
a conscious decision about where it sits. DESIGN.md draws the same picture.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import memory_worker

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "memory_worker"
PACKAGE = "memory_worker"

# Transport, file watching and argument parsing: only adapters may touch them.
ADAPTER_LIBRARIES = frozenset(
    {"iii", "httpx", "aiohttp", "watchfiles", "websockets", "argparse", "mcp", "onnxruntime"}
)


@dataclass(frozen=True)
class Layer:
    """One package: its height (an import may only reach the same height or lower) and the
    third-party packages it may use (None: any). A sibling (`only` set) stands beside the chain:
    it may import only the packages in `only` (and itself), and only `adapters` import it."""

    height: int
    external: frozenset[str] | None
    only: frozenset[str] | None = None


_CORE_LIBS = frozenset({"pydantic", "Stemmer", "yaml", "orjson"})
_SEARCH_LIBS = _CORE_LIBS | {"numpy"}
_SERVICE_LIBS = _SEARCH_LIBS | {"structlog"}

LAYERS: dict[str, Layer] = {
    # Pure decisions over values: records, text, redaction, transitions, injection rendering,
    # extraction prompt and parsing, settings. No I/O beyond reading its own package data.
    "core": Layer(0, _CORE_LIBS),
    # Lexical postings, ranking columns and the fused score: numpy arrays that never leave it.
    "search": Layer(1, _SEARCH_LIBS),
    # Files, the lock, the log, rules, sidecars, one bank in RAM, the bank registry.
    "storage": Layer(2, _SERVICE_LIBS),
    # The use cases: the catalog and its one call entry, the wire models, the service.
    "app": Layer(3, _SERVICE_LIBS),
    # The harness seams as use cases: sessions, bank selection, the hook, turns, extraction.
    "harness": Layer(4, _SERVICE_LIBS),
    # CLI, REST, the bus, the watcher, logging setup, the local embedder: anything goes.
    "adapters": Layer(5, None),
    # memory-consolidate's plan, pass and schedule: talks to the memory worker only through its
    # public functions (a MemoryClient the adapters provide), so it imports the core and itself.
    "consolidate": Layer(3, _SERVICE_LIBS, only=frozenset({"core"})),
}
SIBLINGS = frozenset(name for name, layer in LAYERS.items() if layer.only is not None)

# The package root: `__init__` re-exports the public surface (so it must not pull an adapter in:
# importing any module runs it first), `__main__` is the `python -m` entry.
ROOT_MODULES: dict[str, Layer] = {
    "__init__": Layer(4, _SERVICE_LIBS),
    "__main__": Layer(5, None),
}

# Finer rules inside the core: the leaves use only each other, redaction uses nothing at all.
LEAVES = frozenset(
    {
        "core.errors",
        "core.models",
        "core.confidence",
        "core.text",
        "core.names",
        "core.bank_settings",
    }
)
ONLY_INTERNAL: dict[str, frozenset[str]] = {
    **{leaf: LEAVES for leaf in LEAVES},
    "core.redact": frozenset(),
}

STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def _module_name(path: Path) -> str:
    """`memory_worker/adapters/bus/worker.py` → `adapters.bus.worker`; `__init__` → its package."""
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _layer_of(module: str) -> Layer | None:
    return ROOT_MODULES.get(module) or LAYERS.get(module.split(".")[0])


def _package_of(module: str, path: Path) -> list[str]:
    """The package a module's relative imports are resolved against (as parts below the root)."""
    parts = [] if module == "__init__" else module.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _is_submodule(parts: list[str]) -> bool:
    target = PACKAGE_DIR.joinpath(*parts) if parts else PACKAGE_DIR
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def _internal_name(parts: list[str]) -> str:
    return ".".join(parts) if parts else "__init__"


def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(internal modules, external top-level packages) that `path` imports anywhere."""
    module = _module_name(path)
    package = _package_of(module, path)
    internal: set[str] = set()
    external: set[str] = set()
    for node in ast.walk(_TREES.get(path) or _parsed(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head, *rest = alias.name.split(".")
                if head == PACKAGE:
                    internal.add(_internal_name(rest))
                else:
                    external.add(head)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                head, *rest = (node.module or "").split(".")
                if head != PACKAGE:
                    external.add(head)
                    continue
                base = rest
            else:
                up = node.level - 1
                base = (package[: len(package) - up] if up else list(package)) + (
                    node.module.split(".") if node.module else []
                )
            for alias in node.names:
                candidate = [*base, alias.name]
                internal.add(_internal_name(candidate if _is_submodule(candidate) else base))
    return internal, external


def _violations(module: str, internal: set[str], external: set[str]) -> list[str]:
    layer = _layer_of(module)
    assert layer is not None
    problems: list[str] = []
    package = module.split(".")[0]
    for target in sorted(internal - {module}):
        target_layer = _layer_of(target)
        target_package = target.split(".")[0]
        if target_layer is None:
            problems.append(f"imports memory_worker.{target}, which sits in no layer")
        elif layer.only is not None and target_package not in layer.only | {package}:
            problems.append(
                f"imports memory_worker.{target}; {package} may import only "
                f"{sorted(layer.only)} and itself"
            )
        elif target_package in SIBLINGS and package not in (target_package, "adapters"):
            problems.append(
                f"imports memory_worker.{target}; only adapters import {target_package}"
            )
        elif target_layer.height > layer.height and layer.only is None:
            problems.append(f"imports memory_worker.{target}, a layer above it")
    allowed_internal = ONLY_INTERNAL.get(module)
    if allowed_internal is not None:
        extra = sorted(internal - {module} - allowed_internal)
        problems += [
            f"imports memory_worker.{m} (allowed: {sorted(allowed_internal)})" for m in extra
        ]
    if layer.external is not None:
        third_party = {m for m in external if m not in STDLIB} | (external & ADAPTER_LIBRARIES)
        allowed = frozenset() if module == "core.redact" else layer.external
        problems += [
            f"imports {m} (allowed here: {sorted(allowed)})" for m in sorted(third_party - allowed)
        ]
    return problems


MODULES = sorted(PACKAGE_DIR.rglob("*.py"))
# Parsed at collection, before any test runs: CPython 3.11.7's `ast.parse` can fail with
# "SystemError: AST constructor recursion depth mismatch" once earlier tests in the process left
# its recursion bookkeeping off (seen after tests/test_lazy_index.py and test_lazy_banks.py ran
# in one process), which would fail this check for no fault of the module it reads.
_TREES = {path: _parsed(path) for path in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_module_imports_only_its_own_layer_and_below(path: Path) -> None:
    module = _module_name(path)
    assert _layer_of(module) is not None, (
        f"memory_worker/{path.relative_to(PACKAGE_DIR)} sits in no layer of "
        "tests/test_architecture.py: put it in one of the packages of LAYERS (or add a package "
        "there, and to docs/DESIGN.md)"
    )
    internal, external = _imports(path)
    problems = _violations(module, internal, external)
    assert not problems, f"memory_worker/{module}: " + "; ".join(problems)


def test_every_package_on_disk_is_a_layer_and_every_layer_has_a_tenant() -> None:
    on_disk = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert on_disk == set(LAYERS)


def test_design_map_names_every_layer_in_order() -> None:
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    chain = [name for name in LAYERS if name not in SIBLINGS]
    picture = " → ".join(sorted(chain, key=lambda name: LAYERS[name].height))
    assert picture in design, f"docs/DESIGN.md should draw the layers as `{picture}`"
    for sibling in SIBLINGS:
        assert f"`{sibling}`" in design, f"docs/DESIGN.md should name the sibling `{sibling}`"


# --- the checker itself ----------------------------------------------------------------------


class TestChecker:
    """The rules catch what they should on hand-made import sets."""

    def test_an_import_pointing_up_is_reported(self) -> None:
        problems = _violations("storage.bank", {"app.service", "core.models"}, set())
        assert problems == ["imports memory_worker.app.service, a layer above it"]

    def test_core_importing_a_transport_library_or_numpy_is_reported(self) -> None:
        problems = _violations("core.injection", set(), {"httpx", "numpy", "re"})
        assert problems == [
            "imports httpx (allowed here: ['Stemmer', 'orjson', 'pydantic', 'yaml'])",
            "imports numpy (allowed here: ['Stemmer', 'orjson', 'pydantic', 'yaml'])",
        ]

    def test_argparse_counts_as_an_adapter_library_even_though_it_is_stdlib(self) -> None:
        assert _violations("app.catalog", set(), {"argparse"}) == [
            "imports argparse (allowed here: "
            "['Stemmer', 'numpy', 'orjson', 'pydantic', 'structlog', 'yaml'])"
        ]

    def test_a_leaf_importing_a_non_leaf_is_reported(self) -> None:
        problems = _violations("core.models", {"core.errors", "core.transitions"}, set())
        assert problems == [
            "imports memory_worker.core.transitions (allowed: ['core.bank_settings', "
            "'core.confidence', 'core.errors', 'core.models', 'core.names', 'core.text'])"
        ]

    def test_the_sibling_may_import_only_the_core_and_itself(self) -> None:
        problems = _violations(
            "consolidate.runner", {"core.errors", "consolidate.plan", "app.catalog"}, set()
        )
        assert problems == [
            "imports memory_worker.app.catalog; consolidate may import only ['core'] and itself"
        ]

    def test_only_adapters_import_the_sibling(self) -> None:
        assert _violations("harness.turns", {"consolidate.plan"}, set()) == [
            "imports memory_worker.consolidate.plan; only adapters import consolidate"
        ]
        assert _violations("adapters.cli", {"consolidate.runner"}, set()) == []

    def test_adapters_may_import_anything(self) -> None:
        assert _violations("adapters.cli", {"app.service", "adapters.logs"}, {"argparse"}) == []

    def test_relative_and_absolute_imports_resolve_to_modules(self) -> None:
        internal, external = _imports(PACKAGE_DIR / "app" / "catalog.py")
        assert {"app.wire", "core.errors", "app.service"} <= internal
        assert "pydantic" in external


def test_importing_the_package_loads_no_layer_until_a_name_is_used() -> None:
    """`import memory_worker.<module>` runs the package's `__init__` first: it must not pull in
    the whole service (a coding agent's hook starts a process per prompt)."""
    probe = (
        "import sys, memory_worker as m\n"
        "before = 'memory_worker.app.service' in sys.modules\n"
        "names = [getattr(m, name) for name in m.__all__]\n"
        "print(before, 'memory_worker.app.service' in sys.modules, len(names))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["False", "True", str(len(memory_worker.__all__))]
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        memory_worker.nothing_here  # noqa: B018 - the lookup is the test
