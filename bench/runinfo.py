"""What every benchmark report records next to its figures: commit, source digest, machine, load;
and the in-place update of a marked region of docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def source_digest() -> str:
    """sha256 of the package's source files: tells apart runs at one commit with edits on top."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "memory_worker").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> str:
    """CPU count and model, RAM, OS and Python: what a reader needs to weigh the figures."""
    model, mem_gb = platform.processor() or "unknown CPU", 0.0
    with contextlib.suppress(OSError):
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        model = next(
            (x.split(":", 1)[1].strip() for x in info.splitlines() if x.startswith("model name")),
            model,
        )
        meminfo = Path("/proc/meminfo").read_text(encoding="ascii", errors="replace")
        mem_gb = int(meminfo.split("MemTotal:")[1].split()[0]) / 1024 / 1024
    return (
        f"{os.cpu_count()} CPUs ({model}), {mem_gb:.0f} GB RAM, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def run_header(script: str, load_before: str) -> list[str]:
    """The lines a process-level benchmark's report opens with: its command (`script` and this
    process's arguments), when and at which commit, the machine, and the load around the run."""
    command = shlex.join(["python", script, *sys.argv[1:]])
    return [
        f"- command: `{command}`",
        f"- taken: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit `{commit()}`",
        f"- machine: {machine()}",
        f"- load average before {load_before}, after {load_average()} (a shared machine)",
    ]


def write_doc(path: Path, key: str, body: str) -> None:
    """Replace the `<!-- key:begin -->` … `<!-- key:end -->` region of `path` with `body`."""
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    text = path.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{path} has no {begin} ... {end} region to replace")
    path.write_text(f"{text[:i]}{begin}\n{body}\n{text[j:]}", encoding="utf-8")


def add_write_doc_option(parser: argparse.ArgumentParser, key: str) -> None:
    """`--write-doc [PATH]`: also replace the `key` region of docs/BENCHMARKS.md (or PATH)."""
    parser.add_argument(
        "--write-doc",
        type=Path,
        nargs="?",
        const=ROOT / "docs" / "BENCHMARKS.md",
        metavar="PATH",
        help=f"also replace the {key} region of docs/BENCHMARKS.md (or PATH) with this run",
    )


def check_doc_region(parser: argparse.ArgumentParser, path: Path | None, key: str) -> None:
    """Fail before the run, not after it, when `path` lacks the `key` markers."""
    if path is None:
        return
    doc = path.read_text(encoding="utf-8") if path.is_file() else ""
    if f"<!-- {key}:begin -->" not in doc or f"<!-- {key}:end -->" not in doc:
        parser.error(f"{path} has no <!-- {key}:begin/end --> markers")
