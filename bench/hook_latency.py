#!/usr/bin/env python3
"""The `harness::hook::pre-generate` round trip over the bus at 10k memories, p50/p90/p99/max.

SPEC §4: "pre-generate over the bus p50 ≤ 5 ms without embeddings". The bank `main` holds
10,000 memories (the deterministic Zipf corpus of `bench/recall_speed.py`, restated over the past
year, imported with `memory-worker import`) and 3 rules. The real worker (`memory-worker serve
--engine`, a subprocess started by the wire tests' `WorkerProcess`, embeddings off, log level
debug so it logs each hook's own duration) runs against the engine double of the wire tests, with
the fake siblings as real `iii-sdk` clients in this process: a harness driving the hook, a
session-manager and a state worker (the hook asks both), an llm-router and a CLI. Scenarios:

- in-process: `PreGenerate.run` on a `MemoryService` over the same data dir (opened before the
  worker, which then holds the lock), no bus at all, on a turn's first step (section + recall) and
  on a later step (section only);
- transport: a CLI call of a trivial sibling function (`router::models::list` on the fake router)
  and of a trivial worker function (`memory::rule::list`), through the engine double;
- the hook over the bus, as the harness runs it: step 0 of a fresh session (session::get and
  state::get asked on the way, memories recalled) — the row the bar is about; step 0 of a fresh
  session whose turn names its bank (no session::get); step 1 of the same session (section only);
- in worker: the step-0 and step-1 durations the worker logged for the measured hooks.

Bus scenarios run interleaved, one of each per round, so load drifting on the machine hits them
alike; step-0 queries are drawn from the corpus distribution. A second pass runs each bus
scenario alone, `CPU_CALLS` times in a row, and divides the CPU time of the worker process (all
its threads, from /proc/PID/task/*/schedstat) and of this process (engine double, siblings,
harness) by the calls.

    .venv/bin/python bench/hook_latency.py [--quick] [--memories N] [--n N] [--seed S]
        [--json OUT] [--write-doc [PATH]]

Prints markdown tables and exits 0. Everything (worker, engine, siblings, temp dir) is torn down
even on error; a hook that errors or injects nothing stops the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recall_speed import NOW_MS, SEED, Corpus, pct  # noqa: E402
from runinfo import (  # noqa: E402
    add_write_doc_option,
    check_doc_region,
    commit,
    load_average,
    machine,
    source_digest,
    write_doc,
)

from memory_worker.adapters.logs import configure_logging  # noqa: E402
from memory_worker.app.service import MemoryService  # noqa: E402
from memory_worker.core.config import Settings  # noqa: E402
from memory_worker.harness.pregenerate import PreGenerate  # noqa: E402
from memory_worker.harness.selection import BankResolver  # noqa: E402
from memory_worker.harness.sessions import SessionState  # noqa: E402
from memory_worker.storage.store import Store  # noqa: E402
from tests.bus.conftest import WorkerProcess  # noqa: E402
from tests.bus.engine_double import EngineDouble  # noqa: E402
from tests.bus.siblings import (  # noqa: E402
    PRE_GENERATE,
    Cli,
    FakeHarness,
    FakeRouter,
    FakeSessions,
    FakeState,
    HookRun,
    assistant_message,
    envelope,
    user_message,
)

BANK = "main"
MEMORIES = 10_000
N = 500
WARMUP = 50
CPU_CALLS = 100  # calls per scenario in the CPU pass (at most --n)
QUICK = {"memories": 1_000, "n": 100, "warmup": 20}
BAR_HOOK_P50_MS = 5.0
TAGS = ("work", "family", "travel", "health", "preferences", "project", "food", "finance")
HOLDER = {"pid": os.getpid(), "kind": "bench", "command": "bench/hook_latency.py"}
# Embeddings off twice over: `MEMORY_EMBEDDER=none` (no embedder at all) and the configuration the
# worker seeds from this YAML.
WORKER_CONFIG = "embeddings_enabled: false\n"
SYSTEM_PROMPT = (
    "You are a careful assistant working with one user over many sessions. Answer directly, show "
    "your reasoning only when asked, and say so when you do not know. Use the tools you are given "
    "when they help; never invent their results."
)
RULES = {
    "style": "Answer in British English. Keep answers under 200 words unless the user asks for "
    "more detail, and prefer short paragraphs to bullet lists.",
    "privacy": "Never repeat secrets, passwords or tokens back to the user, even when they appear "
    "in earlier messages. Refer to them as 'the secret you shared'.",
    "workflow": "Before editing code, restate the change in one sentence. Run the tests after "
    "every change and report the command you ran and its result.",
}

# Row order and labels of the latency table.
SCENARIOS = {
    "direct0": "in-process `PreGenerate.run`, step 0 (section + recall)",
    "direct1": "in-process `PreGenerate.run`, step 1 (section only)",
    "router": "bus: CLI → `router::models::list` (fake router)",
    "worker": "bus: CLI → `memory::rule::list` (worker)",
    "hook0": "bus: hook step 0, fresh session",
    "hook0_bank": "bus: hook step 0, fresh session, turn names its bank",
    "hook1": "bus: hook step 1, same session",
    "hook0_next": "bus: hook step 0, next turn of a running session",
    "inner0": "in worker: hook step 0, fresh session (its own log)",
    "inner0_next": "in worker: hook step 0, next turn (its own log)",
    "inner1": "in worker: hook step 1 (its own log)",
}


class _NoDeprecationNotice(logging.Filter):
    """The fake siblings use the legacy trigger types on purpose (see tests/bus/siblings.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is deprecated and will be removed" not in record.getMessage()


def ms_since(started_ns: int) -> float:
    return (time.perf_counter_ns() - started_ns) / 1e6


def stats(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50": pct(samples, 0.5),
        "p90": pct(samples, 0.9),
        "p99": pct(samples, 0.99),
        "max": max(samples),
    }


def worker_cpu_ns(pid: int) -> int:
    """CPU time of every live thread of process `pid` (`/proc/…/task/*/schedstat`, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text(encoding="ascii").split()[0])
    return total


# --- the data dir ----------------------------------------------------------------------------


def records(corpus: Corpus, count: int, now_ms: int) -> list[dict[str, Any]]:
    """The corpus's memories, restated relative to `now_ms` (the worker ranks on its own clock),
    30% of them tagged."""
    rows = corpus.memories(count)
    for row in rows:
        created = now_ms - (NOW_MS - int(row["created_at"]))
        row["created_at"] = row["updated_at"] = created
        if corpus.rng.random() < 0.3:
            row["tags"] = [TAGS[int(corpus.rng.integers(0, len(TAGS)))]]
    return rows


def worker_env() -> dict[str, str]:
    drop = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_URL", "III_COMPOSE_DIR", "III_CONFIG_NAME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"MEMORY_EMBEDDER": "none", "OTEL_ENABLED": "false"})
    return env


def build_data_dir(root: Path, count: int, seed: int) -> tuple[Path, Corpus, float]:
    """`memory-worker import` of `count` memories into bank `main`, then 3 rule files."""
    corpus = Corpus(seed)
    data_dir = root / "data"
    source = root / "memories.jsonl"
    now_ms = int(time.time() * 1000)
    with source.open("w", encoding="utf-8") as fh:
        for row in records(corpus, count, now_ms):
            fh.write(json.dumps(row) + "\n")
    dirs = ("--data-dir", str(data_dir))
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memory_worker", "import", str(source), "--bank", BANK, *dirs],
        capture_output=True,
        text=True,
        env=worker_env(),
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"memory-worker import failed ({done.returncode}):\n{done.stderr}")
    import_s = time.perf_counter() - started
    rules = data_dir / BANK / "rules"
    rules.mkdir(parents=True, exist_ok=True)
    for name, content in RULES.items():
        (rules / f"{name}.md").write_text(content + "\n", encoding="utf-8")
    return data_dir, corpus, import_s


# --- in-process baseline ---------------------------------------------------------------------


async def measure_direct(data_dir: Path, queries: list[str], warmup: int) -> dict[str, list[float]]:
    """`PreGenerate.run` on step 0 then step 1 of fresh sessions, no bus: no session-manager,
    no state worker, no embedder (what the hook computes, and nothing else)."""
    store = await asyncio.to_thread(Store.open, data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(embeddings_enabled=False))
    try:
        state = SessionState(None)
        resolver = BankResolver(
            None, state, lambda: service.store, lambda: service.settings.default_bank
        )
        hook = PreGenerate(service, resolver, state)
        out: dict[str, list[float]] = {"direct0": [], "direct1": []}

        async def timed(env: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
            started = time.perf_counter_ns()
            reply = await hook.run(env)
            return ms_since(started), reply

        for i, query in enumerate(queries):
            if i == warmup:
                gc.collect()
            session = f"direct-{i}"
            window = [user_message(query)]
            first_ms, reply = await timed(envelope(session, "t1", 0, window, SYSTEM_PROMPT))
            if reply is None or "mutations" not in reply:
                raise SystemExit(f"the in-process hook injected nothing for {query!r}: {reply}")
            window += [*reply["mutations"]["append_messages"], assistant_message("Checking.")]
            later_ms, _ = await timed(envelope(session, "t1", 1, window, SYSTEM_PROMPT))
            if i >= warmup:
                out["direct0"].append(first_ms)
                out["direct1"].append(later_ms)
        return out
    finally:
        await service.close()
        await store.close()


# --- over the bus ----------------------------------------------------------------------------


def checked(run: HookRun, what: str) -> HookRun:
    """A hook run that failed or fell back is not a measurement of the hook: stop the bench."""
    if run.errors or run.calls != ["memory::hook::pre-generate"]:
        raise SystemExit(f"{what}: the hook did not run cleanly: calls {run.calls}, {run.errors}")
    return run


# One of each per round, in order (`hook0_next` continues the session `hook0` opened).
BUS = ("router", "worker", "hook0_bank", "hook0", "hook1", "hook0_next")


class BusOps:
    """The bus scenarios as calls of round `i`; `hook1(i)` continues the session of `hook0(i)`."""

    def __init__(self, harness: FakeHarness, cli: Cli, queries: list[str], prefix: str) -> None:
        self.harness, self.cli, self.queries, self.prefix = harness, cli, queries, prefix
        self.windows: dict[int, tuple[list[Any], HookRun]] = {}
        self.recalled: list[int] = []
        self.retrieval: Counter[str] = Counter()

    def router(self, _i: int) -> None:
        self.cli.call("router::models::list", {})

    def worker(self, _i: int) -> None:
        self.cli.call("memory::rule::list", {"bank": BANK})

    def hook0_bank(self, i: int) -> None:
        window = [user_message(self.queries[i])]
        env = envelope(f"{self.prefix}b-{i}", "t1", 0, window, SYSTEM_PROMPT, {"memory_bank": BANK})
        checked(self.harness.hook(env), "step 0 with a named bank")

    def hook0(self, i: int) -> None:
        window = [user_message(self.queries[i])]
        env = envelope(f"{self.prefix}s-{i}", "t1", 0, window, SYSTEM_PROMPT)
        run = checked(self.harness.hook(env), "step 0")
        if not run.appended or not all(rule in run.system_prompt for rule in RULES.values()):
            raise SystemExit(f"step 0 injected no memories or lost a rule: {run}")
        self.windows[i] = ([*window, *run.appended, assistant_message("Checking.")], run)
        self.recalled.append(int(run.annotations.get("memory_recalled", 0)))
        self.retrieval[str(run.annotations.get("memory_retrieval", "none"))] += 1

    def hook1(self, i: int) -> None:
        window, first = self.windows.pop(i)
        env = envelope(f"{self.prefix}s-{i}", "t1", 1, window, SYSTEM_PROMPT)
        later = checked(self.harness.hook(env), "step 1")
        if later.appended or later.system_prompt != first.system_prompt:
            raise SystemExit(f"step 1 changed what the session sees: {later}")
        nxt = self.queries[(i + 1) % len(self.queries)]
        self.windows[i] = ([*window, assistant_message("Done."), user_message(nxt)], first)

    def hook0_next(self, i: int) -> None:
        """The common case: a new turn in a running session (its meta and record are known)."""
        window, first = self.windows.pop(i)
        env = envelope(f"{self.prefix}s-{i}", "t2", 0, window, SYSTEM_PROMPT)
        run = checked(self.harness.hook(env), "next turn")
        if run.system_prompt != first.system_prompt:
            raise SystemExit(f"the next turn changed the prefix: {run}")


def measure_bus(
    engine: EngineDouble, worker: WorkerProcess, queries: list[str], warmup: int, cpu_n: int
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Latency of every bus scenario, interleaved round by round; then CPU per call, each
    scenario in a block of `cpu_n` calls: the worker process's (its threads' schedstat) and this
    process's, which hosts the engine double, the fake siblings, the harness and the CLI."""
    out: dict[str, list[float]] = {key: [] for key in BUS}
    facts: dict[str, Any] = {}
    assert worker.proc is not None
    pid = worker.proc.pid
    with contextlib.ExitStack() as stack:
        harness = stack.enter_context(FakeHarness(engine.url))
        sessions = stack.enter_context(FakeSessions(engine.url))
        for i in range(len(queries)):  # running sessions the session-manager knows
            sessions.add(f"s-{i}")
            sessions.add(f"cpu-s-{i}")
        stack.enter_context(FakeState(engine.url))
        stack.enter_context(FakeRouter(engine.url))
        cli = stack.enter_context(Cli(engine.url))
        harness.wait_bound(PRE_GENERATE)

        ops = BusOps(harness, cli, queries, "")
        first_frame = 0
        for i in range(len(queries)):
            if i == warmup:
                gc.collect()
                first_frame = len(engine.frames)
                del ops.recalled[:]
                ops.retrieval.clear()
            for key in BUS:
                started = time.perf_counter_ns()
                getattr(ops, key)(i)
                if i >= warmup:
                    out[key].append(ms_since(started))
        facts["recalled"], facts["retrieval"] = ops.recalled, dict(ops.retrieval)

        # What the worker asked the engine while measured (its nested round trips).
        asked: Counter[str] = Counter()
        for direction, label, msg in engine.frames[first_frame:]:
            if direction == "in" and label == "memory" and msg.get("type") == "invokefunction":
                asked[str(msg.get("function_id"))] += 1
        facts["worker_calls"] = dict(asked)

        cpu: dict[str, dict[str, float]] = {}
        ops = BusOps(harness, cli, queries, "cpu-")
        for key in BUS:
            gc.collect()
            worker_before, here_before = worker_cpu_ns(pid), time.process_time_ns()
            started = time.perf_counter_ns()
            for i in range(cpu_n):
                getattr(ops, key)(i)
            cpu[key] = {
                "wall": ms_since(started) / cpu_n,
                "worker": (worker_cpu_ns(pid) - worker_before) / 1e6 / cpu_n,
                "here": (time.process_time_ns() - here_before) / 1e6 / cpu_n,
            }
        facts["cpu"] = cpu
    out.update(inner_durations(worker, warmup))
    return out, facts


def inner_durations(worker: WorkerProcess, warmup: int) -> dict[str, list[float]]:
    """The worker logs each hook's own duration (`hook` event, debug level): bus minus that is
    transport into and out of the worker."""
    inner: dict[str, list[float]] = {"inner0": [], "inner0_next": [], "inner1": []}
    for event in worker.events("hook"):
        session = str(event.get("session_id", ""))
        if session.startswith("s-") and int(session[2:]) >= warmup:
            if event.get("step") != 0:
                key = "inner1"
            else:
                key = "inner0_next" if event.get("turn_id") == "t2" else "inner0"
            inner[key].append(float(event["ms"]))
    return inner


# --- report ----------------------------------------------------------------------------------


def report(results: dict[str, list[float]], facts: dict[str, Any], n: int) -> str:
    head = ["scenario", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "|".join("---:" for _ in head[1:]) + "|"]
    table = {key: stats(samples) for key, samples in results.items() if samples}
    for key, label in SCENARIOS.items():
        if key in table:
            s = table[key]
            lines.append(
                f"| {label} | {s['n']} | {s['p50']:.3f} | {s['p90']:.3f} | {s['p99']:.3f} "
                f"| {s['max']:.3f} |"
            )
    cpu = facts["cpu"]
    cpu_n = facts["cpu_calls"]
    lines += [
        "",
        f"CPU per call, each bus scenario run alone ({cpu_n} calls in a row): the worker process "
        "(all its threads) and the bench process (engine double, fake siblings, harness, CLI).",
        "",
        "| scenario | wall ms/call | worker CPU ms/call | bench process CPU ms/call |",
        "|---|---:|---:|---:|",
    ]
    for key in BUS:
        c = cpu[key]
        lines.append(
            f"| {SCENARIOS[key]} | {c['wall']:.3f} | {c['worker']:.3f} | {c['here']:.3f} |"
        )
    hook0 = table["hook0"]["p50"]
    ok = "ok" if hook0 <= BAR_HOOK_P50_MS else "MISS"
    per_round = {k: v / n for k, v in sorted(facts["worker_calls"].items())}
    calls = ", ".join(f"`{k}` {v:.2f}" for k, v in per_round.items()) or "none"
    nxt = table["hook0_next"]["p50"]
    ok_next = "ok" if nxt <= BAR_HOOK_P50_MS else "MISS"
    notes = [
        f"- hook over the bus p50 ≤ {BAR_HOOK_P50_MS:g} ms without embeddings (step 0, fresh "
        f"session): {hook0:.3f} ms = {hook0 / BAR_HOOK_P50_MS:.2f} × the bar, {ok}",
        f"- the same, next turn of a running session (the common case): {nxt:.3f} ms = "
        f"{nxt / BAR_HOOK_P50_MS:.2f} × the bar, {ok_next}",
        f"- step 0 injected {statistics.mean(facts['recalled']):.1f} memories on average "
        f"(retrieval {facts['retrieval']})",
        f"- calls the worker made through the engine per measured round (4 hooks and 1 "
        f"`memory::rule::list`): {calls}",
    ]
    if "inner0" in table:
        inside = table["inner0"]["p50"]
        notes.append(
            f"- step 0 p50: {inside:.3f} ms inside the worker's hook (recall and its session::get "
            f"and state::get round trips included), {hook0 - inside:.3f} ms getting the envelope "
            f"to the worker and its reply back; a bare sibling round trip is "
            f"{table['router']['p50']:.3f} ms and the in-process hook "
            f"{table['direct0']['p50']:.3f} ms"
        )
    return "\n".join([*lines, "", "SPEC §4 bar:", *notes])


def run(args: argparse.Namespace, root: Path) -> tuple[str, dict[str, Any]]:
    started = time.perf_counter()
    data_dir, corpus, import_s = build_data_dir(root, args.memories, args.seed)
    queries = corpus.queries(args.warmup + args.n)
    print(f"  imported {args.memories:,} memories in {import_s:.1f} s", flush=True)

    results = asyncio.run(measure_direct(data_dir, queries, args.warmup))
    print(f"  in-process hook measured ({time.perf_counter() - started:.1f} s)", flush=True)

    config = root / "worker.yaml"
    config.write_text(WORKER_CONFIG, encoding="utf-8")
    # Every SDK client writes a marker under ~/.iii/run (how `iii ps` finds workers): keep them
    # in the temp dir, with the rest of the run.
    home = root / "home"
    home.mkdir()
    saved_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    engine = EngineDouble().start()
    worker: WorkerProcess | None = None
    try:
        worker = WorkerProcess(
            engine,
            data_dir,
            root / "worker.log",
            {**worker_env(), "HOME": str(home)},
            ("--config", str(config)),
        )
        boot_started = time.perf_counter()
        worker.start()
        boot_s = time.perf_counter() - boot_started
        print(f"  worker ready in {boot_s:.1f} s", flush=True)
        cpu_n = min(args.n, CPU_CALLS)
        bus, facts = measure_bus(engine, worker, queries, args.warmup, cpu_n)
        facts["cpu_calls"] = cpu_n
        results.update(bus)
        if engine.errors:
            raise SystemExit("the engine double failed:\n" + "\n".join(engine.errors))
    finally:
        if worker is not None and worker.proc is not None:
            with contextlib.suppress(Exception):
                worker.stop()  # SIGTERM: a clean close; killed if it does not exit in time
            worker.kill()
        engine.close()
        if saved_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved_home
    print(f"  bus measured ({time.perf_counter() - started:.1f} s)", flush=True)
    facts["worker_boot_s"] = boot_s
    return report(results, facts, args.n), {"results": results, "facts": facts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000 memories, n 100")
    parser.add_argument("--memories", type=int, help=f"memories in the bank ({MEMORIES:,})")
    parser.add_argument("--n", type=int, help=f"measured rounds per scenario ({N})")
    parser.add_argument("--warmup", type=int, help=f"unmeasured rounds first ({WARMUP})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"corpus seed ({SEED})")
    parser.add_argument("--json", type=Path, help="also write the raw samples as JSON here")
    add_write_doc_option(parser, "hook-latency")
    args = parser.parse_args()
    check_doc_region(parser, args.write_doc, "hook-latency")
    defaults = QUICK if args.quick else {"memories": MEMORIES, "n": N, "warmup": WARMUP}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.memories < 1 or args.n < 1 or args.warmup < 0:
        parser.error("--memories and --n must be at least 1, --warmup at least 0")
    configure_logging("warning")
    logging.getLogger("iii.iii").addFilter(_NoDeprecationNotice())

    root = Path(tempfile.mkdtemp(prefix="hook-latency-"))
    meta = {
        "command": shlex.join(["python", "bench/hook_latency.py", *sys.argv[1:]]),
        "commit": commit(),
        "source": source_digest(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_before": load_average(),
    }
    print(
        f"hook latency: {args.memories:,} memories, {args.n} measured rounds after "
        f"{args.warmup} warm-up rounds, seed {args.seed}"
    )
    try:
        table, raw = run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta["load_after"] = load_average()
    body = "\n".join(
        [
            f"- command: `{meta['command']}`",
            f"- taken: {meta['date']} at commit `{meta['commit']}`, memory_worker source sha256 "
            f"`{meta['source']}`",
            f"- machine: {meta['machine']}",
            f"- load average before {meta['load_before']}, after {meta['load_after']} "
            "(other work on the machine skews timings)",
            f"- bank `{BANK}`: {args.memories:,} memories (seed {args.seed}, stated over the past "
            f"year), {len(RULES)} rules; embeddings off; worker boot "
            f"{raw['facts']['worker_boot_s']:.1f} s; {args.n} measured rounds after "
            f"{args.warmup} warm-up rounds",
            "",
            table,
        ]
    )
    print()
    print(body)
    if args.json:
        meta.update(vars(args) | {"json": str(args.json), "write_doc": str(args.write_doc)})
        raw["facts"]["retrieval"] = dict(raw["facts"]["retrieval"])
        args.json.write_text(json.dumps({"meta": meta, **raw}, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    if args.write_doc:
        write_doc(args.write_doc, "hook-latency", body)
        print(f"updated the hook-latency section of {args.write_doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
