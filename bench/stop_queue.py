#!/usr/bin/env python3
"""What a coding agent's Stop hook costs over a long session with no server running: each turn
appends a user and an assistant message (`--chars` characters each) to a Claude Code transcript,
then `memory-worker hook stop` runs, a fresh process per tree as the agent runs it, in this tree
and in `--before DIR` (e.g. `git archive <commit> | tar -x -C DIR`), each tree with its own data
dir, the trees' order flipped every turn. The Stop's time is measured in its process around
`cli.main` (interpreter start-up left out), with the process's peak RSS; then, in the same
process, the queue's replay alone (`CaptureQueue` opened and closed: the part that grows with
the file).

Prints a markdown table every `--every` turns: the capture queue's file size, the median Stop and
replay times of the last `--every` turns and their peak RSS, per tree. Exits 0.

    .venv/bin/python bench/stop_queue.py --before /tmp/before [--turns 120] [--every 20]
        [--chars 1500] [--write-doc [PATH]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    load_average,
    run_header,
    write_doc,
)

DOC_KEY = "stop-queue"
CAPTURE_FILE = ".capture.jsonl"  # storage.capture's (not imported: either tree's)
PROBE = """
import io, json, resource, sys, time
from memory_worker.adapters import cli
payload, data, tree = sys.argv[1], sys.argv[2], sys.argv[3]
assert cli.__file__.startswith(tree), cli.__file__  # the tree asked for
sys.stdin = io.StringIO(payload)
started = time.perf_counter()
code = cli.main(["hook", "stop", "--data-dir", data])
took = time.perf_counter() - started
assert code == 0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from pathlib import Path
from memory_worker.storage.capture import CaptureQueue
started = time.perf_counter()
CaptureQueue(Path(data)).close()  # the part of a Stop that grows with the file: its replay
replay = time.perf_counter() - started
print(json.dumps({"s": took, "rss_mb": rss, "replay_s": replay}))
"""


def message(kind: str, uuid: str, text: str) -> dict[str, object]:
    """One Claude Code transcript line."""
    content: object = text if kind == "user" else [{"type": "text", "text": text}]
    return {
        "type": kind,
        "uuid": uuid,
        "sessionId": "bench-session",
        "timestamp": "2026-11-30T10:00:00.000Z",
        "message": {"role": kind, "content": content},
    }


def said(n: int, kind: str, chars: int) -> str:
    words = f"turn {n} {kind}: the build deploys with make, the fuses are in box {n}. "
    return (words * (chars // len(words) + 1))[:chars]


def run_stop(tree: Path, tmp: Path, data: Path, transcript: Path) -> dict[str, float]:
    payload = json.dumps(
        {
            "session_id": "bench-session",
            "transcript_path": str(transcript),
            "cwd": str(tmp),
            "hook_event_name": "Stop",
        }
    )
    # From the temp dir: `python -c` puts the working directory first on the path, and from a
    # checkout that would import the checkout's code whatever PYTHONPATH says.
    done = subprocess.run(
        [sys.executable, "-c", PROBE, payload, str(data), str(tree)],
        cwd=tmp,
        env={
            "PYTHONPATH": str(tree),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp),
            # An endpoint nobody answers on: configured, so the turn is queued (no server runs it).
            "MEMORY_CONFIG": str(tmp / "memory.yaml"),
            "MEMORY_EMBEDDER": "none",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--every", type=int, default=20, help="turns between table rows")
    parser.add_argument("--chars", type=int, default=1500, help="characters of each message")
    add_write_doc_option(parser, DOC_KEY)
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, DOC_KEY)
    trees = {"before": args.before.resolve(), "after": ROOT}
    load_before = load_average()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="stop-queue-") as name:
        tmp = Path(name)
        (tmp / "memory.yaml").write_text("extraction_endpoint: http://127.0.0.1:9/v1\n")
        transcript = tmp / "session.jsonl"
        window: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
        for n in range(1, args.turns + 1):
            with transcript.open("a") as out:
                for kind in ("user", "assistant"):
                    line = message(kind, f"{kind[0]}{n}", said(n, kind, args.chars))
                    out.write(json.dumps(line) + "\n")
            order = list(trees) if n % 2 else list(reversed(trees))
            for tree in order:
                window[tree].append(run_stop(trees[tree], tmp, tmp / f"data-{tree}", transcript))
            if n % args.every and n != args.turns:
                continue
            cells = [f"{n}", f"{transcript.stat().st_size / 1024:,.0f}"]
            for tree in trees:
                size = (tmp / f"data-{tree}" / CAPTURE_FILE).stat().st_size
                stops = window[tree]
                cells += [
                    f"{size / 1024:,.0f}",
                    f"{statistics.median(s['s'] for s in stops) * 1000:,.0f}",
                    f"{statistics.median(s['replay_s'] for s in stops) * 1000:,.0f}",
                    f"{max(s['rss_mb'] for s in stops):,.0f}",
                ]
                window[tree] = []
            rows.append("| " + " | ".join(cells) + " |")
            print(rows[-1], file=sys.stderr, flush=True)  # progress
    lines = [
        *run_header("bench/stop_queue.py", load_before),
        f"- session: {args.turns} turns, 2 messages of {args.chars:,} characters each; a Stop "
        "hook after each, no server running",
        "",
        "| turn | transcript KB | before: queue KB | before: Stop ms | before: replay ms "
        "| before: peak RSS MB | after: queue KB | after: Stop ms | after: replay ms "
        "| after: peak RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    body = "\n".join(lines)
    print(body)
    if args.write_doc is not None:
        write_doc(args.write_doc, DOC_KEY, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
