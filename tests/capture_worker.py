"""The kill test's worker: drains a data dir's capture queue with the scripted model, then says
`drained`. Run as `python -m tests.capture_worker DATA_DIR`; killed at random moments by the
test, started again until it drains."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from memory_worker.adapters.logs import configure_logging
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.harness.capture import CaptureRunner
from memory_worker.storage.capture import CaptureQueue
from memory_worker.storage.store import Store

from .capture_fakes import ScriptedModel


async def main(root: Path) -> None:
    store = Store.open(root, holder={"pid": 0, "kind": "cli", "command": "capture_worker"})
    service = MemoryService(store, Settings())
    # A model that takes a moment, as a real one does: kills land inside jobs.
    runner = CaptureRunner(service, CaptureQueue(root), ScriptedModel(latency_s=0.02))
    print("ready", flush=True)
    while runner.queue.pending():
        await runner.run_once()
    print("drained", flush=True)
    await runner.close()
    await service.close()
    await store.close()


if __name__ == "__main__":
    configure_logging("warning")  # on stderr: stdout is the test's
    asyncio.run(main(Path(sys.argv[1])))
