"""The command-line options of one consolidation pass, shared by `memory-consolidate run` and
`memory-worker consolidate` (kept apart so building the memory-worker parser imports nothing
heavy)."""

from __future__ import annotations

import argparse
import os

__all__ = ["CONFIG_ENV", "add_run_arguments"]

CONFIG_ENV = "MEMORY_CONSOLIDATE_CONFIG"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bank", help="one bank (default: every bank of the allowlist)")
    parser.add_argument(
        "--dry-run", action="store_true", help="plan and report without writing anything"
    )
    parser.add_argument(
        "--server", metavar="URL", help="a standalone memory server, e.g. http://127.0.0.1:8765"
    )
    parser.add_argument(
        "--consolidate-config",
        metavar="FILE",
        default=os.environ.get(CONFIG_ENV),
        help=f"memory-consolidate settings YAML (default: ${CONFIG_ENV}, else the defaults)",
    )
