"""`memory-consolidate` (the sibling's own process) and `memory-worker consolidate` (one pass now).

- `memory-consolidate serve --engine URL` (or `$III_URL`): the worker on the bus (`engine`).
- `memory-consolidate serve --server URL`: the backstop loop as the schedule, against a standalone
  memory server's REST API; the checkpoint in `--state FILE`, the settings in `--config FILE`
  (re-read when it changes; unreadable = inert schedule).
- `memory-consolidate run` / `memory-worker consolidate [--bank B] [--dry-run]`: one pass, printed
  as JSON — through `--server URL`, or in process on the local data dir (and through the server
  that holds the data dir, when a standalone one does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
import yaml

from memory_worker.adapters.consolidate.clients import CONSOLIDATE, FileState, HttpClient
from memory_worker.adapters.consolidate.options import CONFIG_ENV, add_run_arguments
from memory_worker.adapters.doors import LocalDoor, open_door
from memory_worker.adapters.embedders import EmbedderUnavailable, load_local
from memory_worker.adapters.engine_probe import engine_url
from memory_worker.adapters.logs import configure_logging, log_level
from memory_worker.app.ports import Embedder
from memory_worker.consolidate.config import ConsolidateSettings, parse_settings
from memory_worker.consolidate.ports import MemoryClient
from memory_worker.consolidate.runner import Consolidator
from memory_worker.consolidate.schedule import Scheduler
from memory_worker.consolidate.wire import PassReport
from memory_worker.core.config import Settings, load_settings, resolve_data_dir
from memory_worker.core.errors import InvalidInput, WorkerError

__all__ = ["FileSettings", "main", "run_once"]

log = structlog.get_logger(__name__)

STATE_ENV = "MEMORY_CONSOLIDATE_STATE"
FIRST_TICK_S = 45.0  # a machine that was off catches up shortly after boot
BACKSTOP_S = 1800.0  # the schedule when cron is not there (or a tick was lost)
CALL_TIMEOUT_MS = 15_000


class FileSettings:
    """Settings from a YAML file, re-read whenever its mtime changes. Unreadable at first: inert
    (the defaults serve manual runs only); unreadable later: the last good settings stay."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.current = ConsolidateSettings()
        self.inert: str | None = None
        self._mtime: float | None = None
        self._good = path is None
        self.refresh()

    def refresh(self) -> None:
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime
            if mtime == self._mtime:
                return
            raw = yaml.safe_load(self.path.read_text(encoding="utf-8"))
            settings = parse_settings(raw, source=str(self.path))
        except (OSError, yaml.YAMLError, InvalidInput) as exc:
            why = f"{self.path}: {exc}"
            if not self._good:
                self.inert = why
            log.error(
                "consolidate_config_unreadable",
                error=why,
                kept="last good" if self._good else "inert",
            )
            return
        self.current, self.inert, self._mtime, self._good = settings, None, mtime, True

    def settings(self) -> ConsolidateSettings:
        self.refresh()
        return self.current


def _seed(path: str | None) -> ConsolidateSettings:
    if not path:
        return ConsolidateSettings()
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None
    return parse_settings(raw, source=path)


def _dump(value: object) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


# --- one pass now ----------------------------------------------------------------------------


async def _pass(client: MemoryClient, args: argparse.Namespace) -> PassReport:
    settings = _seed(args.consolidate_config)
    dry_run = True if args.dry_run else settings.dry_run
    return await Consolidator(client).run(settings, bank=args.bank, dry_run=dry_run)


async def run_once(args: argparse.Namespace) -> int:
    """One pass; `args.server` (REST), else through the data dir's door (`args.data_dir` /
    `--config`): opened in process, or forwarded to the standalone server holding it."""
    if args.server:
        client = HttpClient(args.server)
        try:
            _dump((await _pass(client, args)).to_wire())
        finally:
            await client.close()
        return 0
    from memory_worker.adapters.cli import embedder_choice  # the one reading of the variable

    # A bad $MEMORY_EMBEDDER is refused here as by every other command (it read as "no
    # embedder": the pass ran without its semantic tier); the model itself is loaded only when
    # the data dir opens in this process, as a pass forwarded to a server uses the server's.
    embedder_choice("local")
    settings = load_settings(Path(args.config) if args.config else None)
    root = resolve_data_dir(args.data_dir, settings)
    async with open_door(
        root,
        lambda: settings,
        CONSOLIDATE,
        command="memory-worker consolidate",
        lock_wait_s=10.0,
        make_embedder=lambda: _embedder(settings),
    ) as door:
        if isinstance(door, LocalDoor) and door.service.embedder is not None:
            # The semantic tier compares every memory's vector: the backlog is embedded first
            # (a server holding the data dir has done that in the background already).
            await door.service.backfill_embeddings()
            await door.service.settle()
        elif door.remote is not None:
            log.info("consolidating_through_server", url=door.remote)
        _dump((await _pass(door, args)).to_wire())
    return 0


def _embedder(settings: Settings) -> Embedder | None:
    """The bank's local model (`embedding_model`) unless `$MEMORY_EMBEDDER` says otherwise:
    without one, no semantic tier."""
    from memory_worker.adapters.cli import embedder_choice

    if embedder_choice("local") != "local" or not settings.embeddings_enabled:
        return None
    try:
        return load_local(settings.embedding_model)
    except EmbedderUnavailable as exc:
        log.warning("embedder_unavailable", detail=str(exc), semantic_tier="off")
        return None


# --- the schedule against a standalone server -------------------------------------------------


async def _serve_rest(args: argparse.Namespace) -> int:
    config = FileSettings(Path(args.config) if args.config else None)
    client = HttpClient(args.server, timeout_s=args.call_timeout_ms / 1000)
    state = FileState(Path(args.state))
    scheduler = Scheduler(Consolidator(client), state, config.settings, inert=lambda: config.inert)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    log.info("serving", mode="rest", server=args.server, state=args.state, inert=config.inert)
    print(f"memory-consolidate scheduling {args.server}", flush=True)

    def announce(outcome: dict[str, Any]) -> None:  # one JSON line per tick on stdout
        print(json.dumps({"tick": outcome}, ensure_ascii=False), flush=True)

    try:
        every_s = args.backstop_s or BACKSTOP_S
        await scheduler.backstop(args.first_tick_s, every_s, stopping, announce)
    finally:
        await client.close()
    return 0


def _check_schedule(args: argparse.Namespace) -> None:
    """The schedule's own numbers, refused before anything starts: a negative (or NaN) backstop
    period made the loop tick with no pause at all, hammering the memory server."""
    for flag, value in (("--first-tick-s", args.first_tick_s), ("--backstop-s", args.backstop_s)):
        if not math.isfinite(value) or value < 0:
            raise InvalidInput(f"{flag} must be a number of seconds, 0 or more (got {value})")
    if args.call_timeout_ms <= 0:
        raise InvalidInput(f"--call-timeout-ms must be above 0 (got {args.call_timeout_ms})")


async def _serve(args: argparse.Namespace) -> int:
    _check_schedule(args)
    if args.server and args.engine:  # ($III_URL beside --server is the environment's, not a pick)
        raise InvalidInput(
            "--engine and --server are two schedules: give --engine URL to run on the engine, "
            "or --server URL to schedule against a standalone memory server"
        )
    if args.server:
        return await _serve_rest(args)
    url = args.engine or os.environ.get("III_URL", "").strip()
    if not url:
        raise InvalidInput("give --engine URL (or $III_URL) or --server URL to schedule against")
    engine_url(url, "--engine" if args.engine else "III_URL")
    from memory_worker.adapters.consolidate.engine import serve_engine

    return await serve_engine(
        url,
        _seed(args.config),
        first_tick_s=args.first_tick_s,
        backstop_s=args.backstop_s,
        call_timeout_ms=args.call_timeout_ms,
    )


def _default_state() -> str:
    base = os.environ.get("III_COMPOSE_DIR")
    return str(Path(base or ".") / "data" / "memory-consolidate" / "state.json")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-consolidate",
        description="Keeps memory banks clean: deterministic dedup on a schedule, supersede-only "
        "through the memory worker's public functions, never touching a pinned memory.",
    )
    parser.add_argument(
        "--log-level", type=log_level, default="info", help="debug, info, warning, error"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the schedule (on the engine, or against --server)")
    serve.add_argument("--engine", metavar="URL", help="engine WebSocket URL (default: $III_URL)")
    serve.add_argument("--server", metavar="URL", help="a standalone memory server's REST URL")
    serve.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get(CONFIG_ENV),
        help="settings YAML: seeds the configuration entry (engine) or is the configuration "
        f"(--server; re-read when it changes). Default: ${CONFIG_ENV}",
    )
    serve.add_argument(
        "--state",
        metavar="FILE",
        default=os.environ.get(STATE_ENV) or _default_state(),
        help=f"checkpoint file with --server (default: ${STATE_ENV}, else "
        "data/memory-consolidate/state.json under $III_COMPOSE_DIR or the working directory)",
    )
    serve.add_argument(
        "--first-tick-s", type=float, default=FIRST_TICK_S, help="first backstop tick after boot"
    )
    serve.add_argument(
        "--backstop-s",
        type=float,
        default=BACKSTOP_S,
        help="seconds between backstop ticks (0: off, cron alone — engine mode only)",
    )
    serve.add_argument(
        "--call-timeout-ms", type=int, default=CALL_TIMEOUT_MS, help="timeout of one memory call"
    )
    run = sub.add_parser("run", help="one pass now, printed as JSON")
    run.add_argument(
        "--data-dir", help="the memory data dir (in process; default as memory-worker)"
    )
    run.add_argument("--config", help="the memory worker's settings YAML (data_dir, embeddings)")
    add_run_arguments(run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    command = _serve if args.command == "serve" else run_once
    try:
        return asyncio.run(command(args))
    except WorkerError as err:
        sys.stderr.write(json.dumps(err.to_dict(), ensure_ascii=False) + "\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
