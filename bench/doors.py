"""What each door costs: one `memory::recall` on a bank of N memories, answered in-process,
forwarded to the server holding the data dir, over MCP through `/mcp`, over MCP through a
`memory-worker mcp` stdio process (which opens the data dir for each call), and a coding agent's
UserPromptSubmit hook as the agent runs it (a new process per prompt, forwarded to the server).
Prints a table, exits 0.

    .venv/bin/python bench/doors.py [--memories 2000] [--calls 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from memory_worker.adapters.doors import LocalDoor, RemoteDoor
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

ENV = {**os.environ, "MEMORY_EMBEDDER": "none"}
WORDS = "tea garden kiln glaze mug shop deploy friday river bicycle oolong fig plum lisbon".split()


def _row(i: int) -> dict[str, object]:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(6)]
    return {"text": f"The user note {i}: " + " ".join(words), "entities": ["user"]}


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{statistics.median(ordered) * 1000:8.2f} {p90 * 1000:8.2f}"


async def _seed(root: Path, n: int) -> None:
    store = Store.open(root, holder={"pid": os.getpid(), "kind": "cli"})
    service = MemoryService(store, Settings())
    await service.import_records("main", [_row(i) for i in range(n)])
    await service.close()
    await store.close()


async def _timed(calls: int, fn) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(calls):
        started = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - started)
    return out


async def main(n: int, calls: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="doors-")) / "data"
    await _seed(root, n)
    query = {"query": "tea garden kiln", "limit": 5}
    results: dict[str, list[float]] = {}

    store = Store.open(root, holder={"pid": os.getpid(), "kind": "cli"})
    service = MemoryService(store, Settings())
    local = LocalDoor(service, Caller.human("bench"))
    results["in-process (catalog.call)"] = await _timed(
        calls, lambda i: local.call("memory::recall", query)
    )
    await service.close()
    await store.close()

    server = StandaloneServer(Settings(), root, port=0)
    url = await server.start()
    try:
        async with RemoteDoor(url, Caller.human("cli")) as remote:
            results["forwarded (RemoteDoor → REST)"] = await _timed(
                calls, lambda i: remote.call("memory::recall", query)
            )
        async with Client(f"{url}/mcp") as client:
            results["MCP streamable HTTP (/mcp)"] = await _timed(
                calls, lambda i: client.call_tool("memory_recall", query)
            )
        prompt = {
            "session_id": "bench",
            "transcript_path": "/dev/null",
            "cwd": "/tmp",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "what about the tea garden",
        }
        hook = [sys.executable, "-m", "memory_worker", "hook", "user-prompt-submit"]

        async def run_hook(i: int) -> None:
            proc = await asyncio.create_subprocess_exec(
                *hook,
                "--data-dir",
                str(root),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=ENV,
            )
            out, _ = await proc.communicate(json.dumps(prompt).encode())
            assert b"additionalContext" in out, out

        results["hook user-prompt-submit (new process, forwarded)"] = await _timed(
            max(calls // 8, 3), run_hook
        )
    finally:
        await server.close()

    argv = [sys.executable, "-m", "memory_worker", "mcp", "--data-dir", str(root)]
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=ENV)) as client:
        results["MCP stdio (opens the data dir per call)"] = await _timed(
            calls, lambda i: client.call_tool("memory_recall", query)
        )

    load = os.getloadavg()[0]
    cores = os.cpu_count()
    print(f"memory_recall on {n} memories, {calls} calls; load average {load:.1f}, {cores} cores")
    print(f"{'door':52} {'p50 ms':>8} {'p90 ms':>8}")
    for name, samples in results.items():
        print(f"{name:52} {_ms(samples)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(main(args.memories, args.calls))
