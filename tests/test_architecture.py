"""The import picture of STYLE.md, enforced: the core never reaches for an adapter.

Every module of `memory_worker/` is parsed with `ast` (imports inside functions and under
`TYPE_CHECKING` count too) and checked against `RULES`. A module missing from `RULES` fails: a new
module needs a conscious decision about where it sits.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "memory_worker"
PACKAGE = "memory_worker"

# What only adapters may touch: our own edge modules and the transport/CLI libraries.
ADAPTER_MODULES = ("cli", "bus", "watch", "logs", "standalone", "settings_file")
ADAPTER_LIBRARIES = frozenset({"iii", "httpx", "aiohttp", "watchfiles", "websockets", "argparse"})

LEAVES = frozenset({"errors", "models", "text", "names"})


@dataclass(frozen=True)
class Rule:
    """What one module may import.

    `internal` / `external`: the allowed `memory_worker` modules / third-party top-level packages,
    or None for "any" (still minus the forbidden ones). The standard library is always allowed,
    except `argparse` for the core. `core` forbids the adapter modules and libraries.
    """

    core: bool
    internal: frozenset[str] | None = None
    external: frozenset[str] | None = None


def _core(internal: set[str] | None = None, external: set[str] | None = None) -> Rule:
    return Rule(
        core=True,
        internal=None if internal is None else frozenset(internal),
        external=None if external is None else frozenset(external),
    )


ADAPTER = Rule(core=False)

RULES: dict[str, Rule] = {
    # Leaves: stdlib, pydantic and each other.
    "errors": _core(set(LEAVES), {"pydantic"}),
    "models": _core(set(LEAVES), {"pydantic"}),
    # The analyzer stems with PyStemmer (C Snowball stemmers), imported as `Stemmer`.
    "text": _core(set(LEAVES), {"pydantic", "Stemmer"}),
    "names": _core(set(LEAVES), {"pydantic"}),
    # Pure, no dependencies at all: compiled regexes over text.
    "redact": _core(set(), set()),
    # Pure numeric: numpy values never leave these two.
    "index": _core(set(LEAVES), {"numpy"}),
    # Vector sidecar: numpy matrix of embeddings plus its file format.
    "vectors": _core(None, {"numpy", "pydantic"}),
    "scoring": _core(set(LEAVES), {"numpy"}),
    # The only module doing file I/O: stdlib plus the error types it translates OSError into.
    "files": _core({"errors"}, set()),
    # The rest of the core: anything but the adapters.
    "recall": _core(),
    "transitions": _core(),
    "injection": _core(),
    "config": _core(),
    "ports": _core(),
    "wire": _core(),
    "bank": _core(),
    "store": _core(),
    "service": _core(),
    "catalog": _core(),
    # The harness seams as use cases: per-session state, bank selection, the hook, the turn
    # pipeline, hot reload. They speak to siblings only through `ports`.
    "sessions": _core(),
    "selection": _core(),
    "pregenerate": _core(),
    "turns": _core(),
    "reconfigure": _core(),
    # Extraction: pure prompt + reply parsing, and the background pass (through ports).
    "extraction": _core(),
    "extractor": _core(),
    # The package re-exports the public surface. Importing any core module runs it first, so it
    # must not pull an adapter in either.
    "__init__": _core(),
    # Adapters: the only places the bus, HTTP, file watching, logging setup and argparse live.
    "__main__": ADAPTER,
    "cli": ADAPTER,
    "logs": ADAPTER,
    "watch": ADAPTER,
    "standalone": ADAPTER,
    "settings_file": ADAPTER,
    "bus": ADAPTER,
    "bus.catalog": ADAPTER,
    "bus.worker": ADAPTER,
    "bus.siblings": ADAPTER,
    "bus.events": ADAPTER,
    "bus.hooks": ADAPTER,
    # The optional local embedder (`embed` extra): an edge to the ONNX runtime, like an adapter,
    # whose runtimes load lazily so that the package never needs them.
    "local_embedder": Rule(
        core=False,
        internal=frozenset({"errors"}),
        external=frozenset({"numpy", "onnxruntime", "tokenizers"}),
    ),
}

STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def _module_name(path: Path) -> str:
    """`memory_worker/bus/worker.py` → `bus.worker`; a package `__init__` → the package name."""
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _package_of(module: str, path: Path) -> list[str]:
    """The package a module's relative imports are resolved against (as parts below the root)."""
    parts = [] if module == "__init__" else module.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _is_submodule(parts: list[str]) -> bool:
    target = PACKAGE_DIR.joinpath(*parts) if parts else PACKAGE_DIR
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def _internal_name(parts: list[str]) -> str:
    return ".".join(parts) if parts else "__init__"


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(internal modules, external top-level packages) that `path` imports anywhere."""
    module = _module_name(path)
    package = _package_of(module, path)
    internal: set[str] = set()
    external: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


def _forbidden_internal(name: str) -> bool:
    return name.split(".")[0] in ADAPTER_MODULES or name == "__main__"


def _violations(module: str, rule: Rule, internal: set[str], external: set[str]) -> list[str]:
    problems: list[str] = []
    internal = internal - {module}
    if rule.core:
        problems += [
            f"imports adapter module memory_worker.{m}"
            for m in sorted(internal)
            if _forbidden_internal(m)
        ]
        problems += [f"imports adapter library {m}" for m in sorted(external & ADAPTER_LIBRARIES)]
    if rule.internal is not None:
        extra = sorted(m for m in internal - rule.internal if not _forbidden_internal(m))
        problems += [f"imports memory_worker.{m} (allowed: {sorted(rule.internal)})" for m in extra]
    if rule.external is not None:
        third_party = {m for m in external if m not in STDLIB} - ADAPTER_LIBRARIES
        extra = sorted(third_party - rule.external)
        problems += [f"imports {m} (allowed: stdlib + {sorted(rule.external)})" for m in extra]
    return problems


MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_module_respects_the_import_picture(path: Path) -> None:
    module = _module_name(path)
    rule = RULES.get(module)
    assert rule is not None, (
        f"memory_worker/{path.relative_to(PACKAGE_DIR)} has no entry in RULES of "
        "tests/test_architecture.py: decide whether it is a leaf, pure core, use case or adapter, "
        "and add it"
    )
    internal, external = _imports(path)
    problems = _violations(module, rule, internal, external)
    assert not problems, f"memory_worker/{module}: " + "; ".join(problems)


def test_every_leaf_and_core_module_named_in_the_brief_has_a_core_rule() -> None:
    core = {
        "errors", "models", "text", "names", "redact", "index", "scoring", "recall",
        "transitions", "injection", "config", "ports", "wire", "files", "bank", "store",
        "service", "catalog",
    }  # fmt: skip
    assert all(RULES[name].core for name in core)
    assert not any(
        rule.core for name, rule in RULES.items() if name.split(".")[0] in ADAPTER_MODULES
    )


# --- the checker itself ----------------------------------------------------------------------


class TestChecker:
    """The rules catch what they should on hand-made import sets."""

    def test_core_importing_the_cli_or_a_transport_library_is_reported(self) -> None:
        problems = _violations("service", RULES["service"], {"cli", "bus.worker"}, {"httpx"})
        assert problems == [
            "imports adapter module memory_worker.bus.worker",
            "imports adapter module memory_worker.cli",
            "imports adapter library httpx",
        ]

    def test_argparse_counts_as_an_adapter_library_even_though_it_is_stdlib(self) -> None:
        assert _violations("config", RULES["config"], set(), {"argparse"}) == [
            "imports adapter library argparse"
        ]

    def test_a_leaf_importing_a_non_leaf_or_numpy_is_reported(self) -> None:
        problems = _violations("models", RULES["models"], {"errors", "store"}, {"numpy", "re"})
        assert problems == [
            "imports memory_worker.store (allowed: ['errors', 'models', 'names', 'text'])",
            "imports numpy (allowed: stdlib + ['pydantic'])",
        ]

    def test_adapters_may_import_anything(self) -> None:
        assert _violations("cli", RULES["cli"], {"service", "logs"}, {"argparse", "iii"}) == []

    def test_relative_imports_resolve_to_modules(self) -> None:
        internal, external = _imports(PACKAGE_DIR / "catalog.py")
        assert {"wire", "errors", "service"} <= internal
        assert "pydantic" in external
