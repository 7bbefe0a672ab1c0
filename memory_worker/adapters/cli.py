"""`memory-worker`: the embedded CLI. A thin layer over `MemoryService` and the catalog.

Commands open the data dir in-process (taking its lock), run, and close. Results go to stdout as
JSON; errors go to stderr as JSON `{code, message}` with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import structlog

from memory_worker.adapters import agent_hooks
from memory_worker.adapters.logs import configure_logging
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import Embedder
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings, load_settings, resolve_data_dir
from memory_worker.core.errors import InvalidInput, WorkerError
from memory_worker.storage.store import Store

log = structlog.get_logger(__name__)

__all__ = ["main", "parse_assignments"]

CONFIG_ENV = "MEMORY_CONFIG"
EMBEDDER_ENV = "MEMORY_EMBEDDER"
DEFAULT_ENGINE_URL = "ws://127.0.0.1:49134"  # the engine's worker port, as the SDK defaults
DEFAULT_COMPACT_HORIZON_DAYS = 30.0  # a month of history stays readable in memory::history
CLI_CALLER = Caller.human("cli")  # a person at the machine: the owner of the data dir
ENGINE_PROBE_TIMEOUT_S = 0.5
CLI_LOCK_WAIT_S = 10.0  # another short CLI call holding the dir is waited for, a server is not


def parse_assignments(pairs: Sequence[str], base: str | None = None) -> dict[str, Any]:
    """`iii trigger` argument rules: `--json` gives a base object that `k=v` pairs override; each
    value is JSON-decoded when possible, else kept as a string."""
    payload: dict[str, Any] = {}
    if base:
        try:
            decoded = json.loads(base)
        except ValueError as exc:
            raise InvalidInput(f"--json is not valid JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise InvalidInput("--json must be a JSON object")
        payload.update(decoded)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"expected key=value, got {pair!r}")
        try:
            payload[key] = json.loads(raw)
        except ValueError:
            payload[key] = raw
    return payload


def _dump(value: object, stream: TextIO, *, pretty: bool = False) -> None:
    stream.write(json.dumps(value, ensure_ascii=False, indent=2 if pretty else None) + "\n")
    stream.flush()


def _fail(err: WorkerError) -> int:
    _dump(err.to_dict(), sys.stderr)
    return 1


def _settings(args: argparse.Namespace) -> Settings:
    path = args.config or os.environ.get(CONFIG_ENV)
    return load_settings(Path(path) if path else None)


def _open(args: argparse.Namespace, settings: Settings, command: str) -> Store:
    root = resolve_data_dir(args.data_dir, settings)
    holder = {
        "pid": os.getpid(),
        "kind": "cli",
        "command": command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    # Lazy: a one-shot command replays only the banks it names (`memory::bank::list` reads their
    # counts files), so one line appended to one bank of a hundred costs that bank alone.
    return Store.open(root, holder=holder, lock_wait_s=CLI_LOCK_WAIT_S, lazy=True)


def _embedder_choice(default: str) -> str:
    choice = os.environ.get(EMBEDDER_ENV, default).strip().lower()
    if choice not in ("local", "router", "none"):
        raise InvalidInput(f"${EMBEDDER_ENV} must be local, router or none, not {choice!r}")
    return choice


def _embedder(settings: Settings, *, default: str, lazy: bool = False) -> Embedder | None:
    """The local embedder when chosen: `$MEMORY_EMBEDDER` = `local`, `router` or `none`; by default
    a standalone server and one-shot commands use the local model `embedding_model` names (empty:
    the default), engine mode asks `router::embed` (returns None here: the bus adapter builds it).
    `lazy`: loaded on first use, so a one-shot command that embeds nothing never pays for it. A
    name the local embedder does not have gets an `UnavailableEmbedder` saying so (recall
    lexical, doctor explains), never another model."""
    choice = _embedder_choice(default)
    if choice != "local" or not settings.embeddings_enabled:
        return None
    from memory_worker.adapters.embedders import (
        EmbedderUnavailable,
        LazyEmbedder,
        UnavailableEmbedder,
        load_local,
        resolve_local,
    )

    try:
        resolve_local(settings.embedding_model)
    except EmbedderUnavailable as exc:
        log.error("embedding_model_refused", detail=str(exc), retrieval="bm25-entity")
        return UnavailableEmbedder(settings.embedding_model, str(exc))
    try:
        if lazy:
            return LazyEmbedder(settings.embedding_model)
        return load_local(settings.embedding_model)
    except EmbedderUnavailable as exc:
        log.warning("embedder_unavailable", detail=str(exc), retrieval="bm25-entity")
        return None


def _embedder_for(default: str) -> Callable[[Settings], Embedder | None] | None:
    """What a settings change loads (`Reconfigurer`): the local model it names, when the local
    embedder is the one in use; None when the embedder follows the settings itself."""
    if _embedder_choice(default) != "local":
        return None
    return lambda settings: _embedder(settings, default=default)


async def _with_service(args: argparse.Namespace, command: str, work: Any) -> int:
    settings = _settings(args)
    # A one-shot command embeds queries over the vectors a server made, never what it writes (the
    # server embeds those in the background): a recall gets the semantic arm, an import stays fast.
    embedder = _embedder(settings, default="local", lazy=True)
    store = await asyncio.to_thread(_open, args, settings, command)
    service = MemoryService(store, settings, embedder=embedder, embed_writes=False)
    try:
        result: int = await work(service)
        await service.settle()  # the vectors of what this command saved land before it exits
        return result
    finally:
        await service.close()
        await store.close()


# --- commands ----------------------------------------------------------------------------------


def _trigger_help(function_id: str) -> int:
    spec = catalog.find(function_id)
    print(f"{spec.id}\n\n{spec.description}\n\nRequest schema:")
    _dump(catalog.json_schema(spec.request), sys.stdout, pretty=True)
    return 0


async def _trigger(args: argparse.Namespace) -> int:
    if args.help_function:
        return _trigger_help(args.function)
    catalog.find(args.function)  # an unknown function fails before the data dir is opened
    payload = parse_assignments(args.pairs, args.json)

    async def work(service: MemoryService) -> int:
        result = await catalog.call(service, args.function, payload, CLI_CALLER)
        _dump(result, sys.stdout, pretty=True)
        return 0

    return await _with_service(args, f"memory-worker trigger {args.function}", work)


async def _batch_line(service: MemoryService, line: str) -> dict[str, Any]:
    try:
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InvalidInput(f"not a JSON line: {exc}") from None
        if not isinstance(item, dict) or not isinstance(item.get("function_id"), str):
            raise InvalidInput('each line must be {"function_id": "...", "payload": {...}}')
        result = await catalog.call(service, item["function_id"], item.get("payload"), CLI_CALLER)
        return {"result": result}
    except WorkerError as err:
        return {"error": err.to_dict()}


async def _call(args: argparse.Namespace) -> int:
    source = sys.stdin if args.batch == "-" else None

    async def work(service: MemoryService) -> int:
        stream = source or Path(args.batch).open(encoding="utf-8")  # noqa: SIM115 - closed below
        try:
            while True:
                # One line at a time, answered before the next is read: a pipe can drive it.
                line = await asyncio.to_thread(stream.readline)
                if not line:
                    return 0
                if line.strip():
                    _dump(await _batch_line(service, line), sys.stdout)
        finally:
            if stream is not sys.stdin:
                stream.close()

    if source is None and not Path(args.batch).is_file():
        raise InvalidInput(f"batch file {args.batch} does not exist")
    return await _with_service(args, "memory-worker call --batch", work)


def _read_records(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InvalidInput(f"{path}:{number} is not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise InvalidInput(f"{path}:{number} is not a JSON object")
        rows.append(row)
    return rows


async def _import(args: argparse.Namespace) -> int:
    rows = _read_records(args.file)

    async def work(service: MemoryService) -> int:
        report = await service.import_records(args.bank, rows)
        _dump(
            {
                "bank": report.bank,
                "imported": report.imported,
                "live": report.live,
                "redacted": report.redacted,
            },
            sys.stdout,
            pretty=True,
        )
        return 0

    return await _with_service(args, f"memory-worker import --bank {args.bank}", work)


async def _compact(args: argparse.Namespace) -> int:
    async def work(service: MemoryService) -> int:
        report = await service.compact(args.bank, horizon_days=args.horizon_days)
        _dump({"bank": args.bank, **dataclasses.asdict(report)}, sys.stdout, pretty=True)
        return 0

    return await _with_service(args, f"memory-worker compact --bank {args.bank}", work)


def _engine_answers(url: str, timeout_s: float = ENGINE_PROBE_TIMEOUT_S) -> bool:
    parsed = urlsplit(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 80), timeout_s
        ):
            return True
    except OSError:
        return False


def choose_mode(
    standalone: bool, engine: str | None, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """(engine URL or None for standalone, why): `--standalone` → `--engine` → `$III_URL` → an
    engine answering at the default address → standalone."""
    if standalone:
        return None, "--standalone was given"
    if engine:
        return engine, "--engine was given"
    if url := env.get("III_URL", "").strip():
        return url, "III_URL is set"
    if _engine_answers(DEFAULT_ENGINE_URL):
        return DEFAULT_ENGINE_URL, f"an engine answers at {DEFAULT_ENGINE_URL}"
    return None, f"no engine answers at {DEFAULT_ENGINE_URL} (and no --engine or III_URL)"


async def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    url, reason = choose_mode(args.standalone, args.engine, os.environ)
    if url is not None:
        from memory_worker.adapters.bus.worker import (
            serve_engine,  # the SDK is imported only in engine mode
        )

        return await serve_engine(
            url,
            settings,
            data_dir_flag=args.data_dir,
            embedder=_embedder(settings, default="router"),
            embedder_for=_embedder_for("router"),
            router_embeddings=_embedder_choice("router") == "router",
            reason=reason,
        )
    from memory_worker.adapters.standalone import (
        serve,  # aiohttp is imported only by the command that serves
    )

    data_dir = resolve_data_dir(args.data_dir, settings)
    embedder = _embedder(settings, default="local")
    config_path = args.config or os.environ.get(CONFIG_ENV)
    return await serve(
        settings,
        data_dir,
        host=args.host,
        port=args.port,
        embedder=embedder,
        embedder_for=_embedder_for("local"),
        reason=reason,
        config_path=Path(config_path) if config_path else None,
        data_dir_flag=args.data_dir,
    )


# --- parser ------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        help="data dir (default: $MEMORY_DATA_DIR, config, "
        "$III_COMPOSE_DIR/data/memory, ./data/memory)",
    )
    common.add_argument("--config", help=f"YAML settings file (default: ${CONFIG_ENV})")
    common.add_argument("--log-level", default="warning", help="debug, info, warning, error")

    parser = argparse.ArgumentParser(
        prog="memory-worker",
        description="Durable cross-session memory for AI agents: banks of rules and memories.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    trigger = sub.add_parser(
        "trigger",
        parents=[common],
        add_help=False,
        help="call one memory function, like `iii trigger`",
        description="Call one function: memory-worker trigger FUNCTION [k=v ...] [--json '{...}']",
    )
    trigger.add_argument("function", help="function id, e.g. memory::save")
    trigger.add_argument("pairs", nargs="*", help="payload fields as key=value (JSON values)")
    trigger.add_argument("--json", help="base payload as a JSON object; key=value pairs override")
    trigger.add_argument(
        "-h",
        "--help",
        dest="help_function",
        action="store_true",
        help="print the function's description and request schema",
    )

    call = sub.add_parser("call", parents=[common], help="run many calls in one process")
    call.add_argument(
        "--batch",
        required=True,
        metavar="FILE|-",
        help='JSON lines {"function_id", "payload"}; one answer line per input',
    )

    imp = sub.add_parser("import", parents=[common], help="bulk import whole memory records")
    imp.add_argument(
        "file", metavar="FILE.jsonl", help="records, one JSON object a line (- = stdin)"
    )
    imp.add_argument("--bank", required=True, help="bank to import into (created when missing)")

    agent_hooks.add_parser(sub, common)
    compact = sub.add_parser(
        "compact",
        parents=[common],
        help="drop a bank's old superseded revisions from its log (crash-safe rewrite)",
        description="Rewrite a bank's memories.jsonl without the superseded revisions written "
        "before the horizon. Every memory keeps its latest revision or tombstone, so recall, list "
        "and get answer the same; memory::history gets shorter. A log with damaged lines is "
        "refused (repair them first).",
    )
    compact.add_argument("--bank", required=True, help="bank to compact")
    compact.add_argument(
        "--horizon-days",
        type=float,
        default=DEFAULT_COMPACT_HORIZON_DAYS,
        help="keep every revision written within this many days "
        f"(default {DEFAULT_COMPACT_HORIZON_DAYS:g}; 0 keeps only the latest of each memory)",
    )

    sub.add_parser(
        "permissions",
        help="print iii-permissions.yaml as the function catalog decides it",
        description="Print the agent permission manifest generated from the function catalog "
        "(each function's policy: allowed to agents, human-owned, internal, or approval).",
    )

    # Not `parents=[common]`: argparse shares parent actions, so a serve-only default of
    # --log-level would change every command's.
    serve = sub.add_parser(
        "serve",
        help="run the worker as a long-lived local service",
        description="Serve the memory functions until SIGTERM/SIGINT. Engine mode (an engine is "
        "given or answers): every function on the iii bus, the harness hooks and events. "
        "Standalone mode: REST on 127.0.0.1, POST /memory/<function path> (e.g. /memory/save) "
        "and GET /healthz.",
    )
    serve.add_argument(
        "--data-dir",
        help="data dir (default: $MEMORY_DATA_DIR, config, "
        "$III_COMPOSE_DIR/data/memory, ./data/memory)",
    )
    serve.add_argument("--config", help=f"YAML settings file (default: ${CONFIG_ENV})")
    serve.add_argument("--log-level", default="info", help="debug, info, warning, error")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8765, help="port to listen on (0 = any free)")
    serve.add_argument(
        "--engine",
        metavar="URL",
        help=f"engine WebSocket URL (default: $III_URL, then {DEFAULT_ENGINE_URL} if it answers)",
    )
    serve.add_argument(
        "--standalone", action="store_true", help="serve local REST even when an engine answers"
    )
    return parser


async def _hook(args: argparse.Namespace) -> int:
    return await agent_hooks.run(args, _with_service)


async def _permissions(args: argparse.Namespace) -> int:
    """Print `iii-permissions.yaml` as the catalog decides it."""
    sys.stdout.write(catalog.render_permissions())
    return 0


_COMMANDS = {
    "trigger": _trigger,
    "call": _call,
    "import": _import,
    "hook": _hook,
    "serve": _serve,
    "permissions": _permissions,
    "compact": _compact,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if (
        extra
        and args.command == "trigger"
        and all("=" in e and not e.startswith("-") for e in extra)
    ):
        args.pairs = [*args.pairs, *extra]  # key=value pairs given after an option
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    configure_logging(getattr(args, "log_level", "warning"))
    try:
        return asyncio.run(_COMMANDS[args.command](args))
    except WorkerError as err:
        return _fail(err)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
