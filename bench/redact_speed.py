"""What redaction costs per text, for this checkout or another one side by side:

    .venv/bin/python bench/redact_speed.py [--code PATH ...]

Each `--code` is a checkout whose `memory_worker.core.redact` is timed in a fresh interpreter on
the same texts: the corpus sentences of `tests/secret_corpus.py` (secret-heavy), 2,000 characters of
English prose and of Chinese (a memory's longest), and a 64 KB rule. Best of 5 rounds, microseconds
per text. Prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r"""
import importlib.util, sys, time
sys.path.insert(0, sys.argv[1])
from memory_worker.core.redact import redact
spec = importlib.util.spec_from_file_location("corpus", sys.argv[2] + "/tests/secret_corpus.py")
corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus)  # this checkout's corpus, whichever code is timed
texts = [s for _, s, _ in corpus.SECRETS] + corpus.LOOKALIKES
prose = ("The user prefers green tea in the morning and writes blog posts about distributed "
         "systems on Tuesdays. " * 20)[:2000]
cjk = ("用户喜欢早上喝绿茶，每周二写关于分布式系统的博客文章。" * 80)[:2000]
rule = ("# Style\nAnswer briefly. Use British spelling. Never use em-dashes.\n" * 900)[:64000]
cases = (("corpus sentences", texts, 20), ("2,000 characters of prose", [prose], 200),
         ("2,000 characters of Chinese", [cjk], 200), ("64 KB rule", [rule], 5))
for name, items, rounds in cases:
    best = 1e9
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            for text in items:
                redact(text)
        best = min(best, (time.perf_counter() - started) / (rounds * len(items)))
    print(f"{name}\t{best * 1e6:.1f}")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", action="append", help="another checkout to time (repeatable)")
    args = parser.parse_args(argv)
    checkouts = [ROOT, *(Path(c).resolve() for c in args.code or [])]
    columns: list[dict[str, str]] = []
    for code in checkouts:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(code), str(ROOT)],
            capture_output=True,
            text=True,
            check=True,
            cwd="/",
        ).stdout
        columns.append(dict(line.split("\t") for line in out.strip().splitlines()))
    names = list(columns[0])
    width = max(map(len, names))
    print(f"{'µs per text':<{width}}  " + "  ".join(f"{c.name[:16]:>16}" for c in checkouts))
    for name in names:
        print(f"{name:<{width}}  " + "  ".join(f"{col.get(name, '-'):>16}" for col in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
