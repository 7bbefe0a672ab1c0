"""The engine's ownership rules (engine 0.23, `engine/src/engine/mod.rs` `claim_in` and
`claim_worker_name`) as the real worker meets them: one live memory worker per name and
namespace, functions owned by one live worker, a worker back from a drop owning its own again."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import WorkerProcess
from .engine_double import WORKER_NAMESPACE_CONFLICT, EngineDouble
from .siblings import Cli, FakeHarness, FakeQueue, envelope, turn_event, user_message

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load


def test_a_second_memory_worker_is_refused_and_the_first_keeps_serving(
    engine: EngineDouble, spawn: Any
) -> None:
    first: WorkerProcess = spawn()
    with Cli(engine.url) as cli, FakeHarness(engine.url) as harness:
        saved = cli.call("memory::save", {"text": "The user keeps bees on the roof."})
        second: WorkerProcess = spawn(start=False)
        code, out = second.run_to_exit()
        assert code == 1 and "memory-worker connected" not in out
        [(_, rejection)] = engine.rejections_sent(WORKER_NAMESPACE_CONFLICT)
        assert rejection["worker_name"] == "memory" and rejection["namespace"] == "default"
        [failed] = second.events("worker_failed")
        assert "another live worker" in failed["error"] and failed["error"].startswith("conflict")
        assert not second.data_dir.exists() or not any(second.data_dir.iterdir())
        # Nothing of the second one reached the engine: one owner, one hook binding, its banks.
        [memory] = [w for w in engine.workers if w.get("name") == "memory"]
        assert rejection["owner_worker_id"] == memory["worker_id"]
        assert len(engine.bindings("harness::hook::pre-generate")) == 1
        recalled = cli.call("memory::recall", {"query": "bees"})["memories"]
        assert [m["memory"]["id"] for m in recalled] == [saved["memory"]["id"]]
        run = harness.hook(envelope("s1", "t1", messages=[user_message("what about my bees?")]))
        assert run.calls == ["memory::hook::pre-generate"] and not run.errors
    assert first.proc is not None and first.proc.poll() is None


def test_a_worker_that_reconnects_after_a_drop_takes_its_functions_back(
    engine: EngineDouble, spawn: Any
) -> None:
    worker: WorkerProcess = spawn()
    with Cli(engine.url) as cli:
        saved = cli.call("memory::save", {"text": "The user keeps bees on the roof."})
        assert engine.drop_worker("memory") == 1
        engine.wait_function("memory::save", min_count=2)  # the replay was accepted
        engine.wait_binding("configuration", "memory::on-config-change")
        assert engine.rejections_sent() == []
        assert engine.owner("memory::save") == "memory"
        got = cli.call("memory::get", {"id": saved["memory"]["id"]})
        assert got["memory"]["text"] == "The user keeps bees on the roof."
    assert worker.proc is not None and worker.proc.poll() is None


def test_a_worker_in_its_own_namespace_runs_its_own_extraction_jobs(
    engine: EngineDouble, spawn: Any
) -> None:
    """A second memory worker given its own namespace (what a refused one is told to do) queues
    each finished turn through `engine::queue::enqueue`, which lives in `default`. The envelope
    named no namespace, so the queue delivered the job to `default`'s `memory::extract-job`: the
    other worker read the turn and wrote what it found into ITS data dir and banks."""
    with FakeQueue(engine.url) as queue, Cli(engine.url) as cli:
        spawn()  # the memory worker of namespace `default`
        spawn(env={"III_NAMESPACE": "blue", "III_WORKER_NAME": "memory-blue"})
        engine.wait_function("memory::on-turn-completed", namespace="blue")
        start = len(engine.frames)
        cli.client.trigger(
            {
                "function_id": "memory::on-turn-completed",
                "payload": turn_event("s1", "t1"),
                "namespace": "blue",
            }
        )
        queue.wait_done("memx-s1-t1")
        delivered = [
            who
            for direction, who, msg in engine.frames[start:]
            if direction == "out"
            and msg.get("type") == "invokefunction"
            and msg.get("function_id") == "memory::extract-job"
        ]
        assert delivered and set(delivered) == {"memory-blue"}, delivered
        # The queue worker is in `default` (it serves `engine::queue::enqueue`): doctor found
        # no `queue::define` in `blue` and said jobs ran inline.
        doctor = cli.client.trigger(
            {"function_id": "memory::doctor", "payload": {}, "namespace": "blue"}
        )
        checks = {c["name"]: c for c in doctor["checks"]}
        assert checks["queue-reachable"]["ok"] is True, checks["queue-reachable"]
