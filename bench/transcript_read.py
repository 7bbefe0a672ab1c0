#!/usr/bin/env python3
"""What a Stop hook pays to read a long session: `read_transcript(limit)` over a generated Claude
Code transcript of `--mib` MiB (user and assistant turns of ~2.4 KB), in this tree and in
`--before DIR` (e.g. `git archive <commit> | tar -x -C DIR`), each round a fresh process per tree,
the trees' order flipped every round. Prints a markdown table of the medians and exits 0.

    .venv/bin/python bench/transcript_read.py --before /tmp/before [--mib 38] [--rounds 3]
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

from runinfo import load_average, run_header  # noqa: E402

PROBE = """
import sys, time
from pathlib import Path
from memory_worker.adapters import transcripts
path, limit, tree = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
assert transcripts.__file__.startswith(tree), transcripts.__file__  # the tree asked for
started = time.perf_counter()
kept = transcripts.read_transcript(path, limit=limit)
print(time.perf_counter() - started, len(kept))
"""


def write_transcript(path: Path, mib: float) -> int:
    """A transcript of about `mib` MiB; returns its number of lines."""
    words = " ".join(["deploy the build with make and check the path of the file"] * 40)
    lines = 0
    with path.open("w") as out:
        while out.tell() < mib * 1024 * 1024:
            kind = "user" if lines % 2 == 0 else "assistant"
            line = {
                "type": kind,
                "uuid": f"u{lines}",
                "timestamp": "2026-11-30T10:00:00Z",
                "message": {"content": words},
            }
            out.write(json.dumps(line) + "\n")
            lines += 1
    return lines


def run(tree: Path, path: Path, limit: int) -> float:
    # From the transcript's folder: `python -c` puts the working directory first on the path,
    # and from a checkout that would import the checkout's code whatever PYTHONPATH says.
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(limit), str(tree)],
        cwd=path.parent,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the old source tree")
    parser.add_argument("--mib", type=float, default=38.0)
    parser.add_argument("--limit", type=int, default=40, help="messages kept (the hook's)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"before": args.before, "after": ROOT}
    load_before = load_average()
    times: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="transcript-") as tmp:
        path = Path(tmp) / "session.jsonl"
        lines = write_transcript(path, args.mib)
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                times[name].append(run(trees[name], path, args.limit))
    print("\n".join(run_header("bench/transcript_read.py", load_before)))
    print(f"- transcript: {args.mib:g} MiB, {lines:,} lines; limit {args.limit}")
    print()
    print("| tree | read_transcript median s | rounds s |")
    print("|---|---:|---|")
    for name, runs in times.items():
        spread = " / ".join(f"{t:.3f}" for t in runs)
        print(f"| {name} | {statistics.median(runs):.3f} | {spread} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
