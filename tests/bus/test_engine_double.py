"""Tests of the engine double and the fake siblings, using only real SDK clients.

They pin what the wire-level integration tests rely on: routing and error codes (reference
§2.4), binding parking/forwarding/rejection (§2.5), enqueue and the queue's retry semantics
(§6.3), the built-in configuration worker and its trigger (§6.4), reconnect and replay (§2.2),
the harness hook chain (§6.6) and session pagination (§6.2).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from iii import InitOptions, InvocationError, register_worker
from iii.iii import III
from websockets.sync.client import connect

from .engine_double import EngineDouble, EngineError
from .siblings import (
    FAST_RECONNECT,
    PRE_GENERATE,
    TURN_COMPLETED,
    Cli,
    FakeHarness,
    FakeHttp,
    FakeQueue,
    FakeRouter,
    FakeSessions,
    FakeState,
    FakeSubscriber,
    SdkWorker,
    assistant_message,
    bind,
    envelope,
    fake_embedding,
    shutdown_client,
    turn_event,
    user_message,
)

pytestmark = pytest.mark.timeout(60)

W = TypeVar("W", bound=SdkWorker)
JSON = dict[str, Any]


@pytest.fixture(name="start")
def _start(engine: EngineDouble) -> Iterator[Callable[..., Any]]:
    """Start a sibling class against the engine; every one is closed before the engine."""
    started: list[SdkWorker] = []

    def start(cls: type[W], *args: Any, **kwargs: Any) -> W:
        worker = cls(engine.url, *args, **kwargs)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in reversed(started):
            worker.close()


@pytest.fixture(name="raw_client")
def _raw_client(engine: EngineDouble) -> Iterator[Callable[[str], III]]:
    """A bare SDK client, for tests that register their own functions."""
    clients: list[III] = []

    def make(name: str) -> III:
        options = InitOptions(
            worker_name=name,
            otel={"enabled": False},
            enable_metrics_reporting=False,
            reconnection_config=FAST_RECONNECT,
        )
        client = register_worker(engine.url, options)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in reversed(clients):
            shutdown_client(client)


@pytest.fixture(name="cli")
def _cli(start: Callable[..., Any]) -> Cli:
    cli: Cli = start(Cli)
    return cli


def _fail_times(n: int, calls: list[JSON]) -> Callable[[JSON], JSON]:
    def handler(data: JSON) -> JSON:
        calls.append(data)
        if len(calls) <= n:
            raise RuntimeError(f"job/failed: attempt {len(calls)}")
        return {"done": len(calls)}

    return handler


# ── routing ───────────────────────────────────────────────────────────────────────────────


def test_invoke_routes_across_clients_and_injects_caller(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    provider = raw_client("provider")
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    provider.register_function(
        "demo::echo", lambda data: {"echo": data}, description="Echo", request_format=schema
    )
    engine.wait_function("demo::echo")

    result = cli.call("demo::echo", {"text": "hi"})

    assert result["echo"]["text"] == "hi"
    assert result["echo"]["_caller_worker_id"] == cli.client.worker_id
    assert engine.functions()["demo::echo"]["request_format"] == schema
    info = cli.info("demo::echo")
    assert info["description"] == "Echo"
    assert info["request_format"] == schema
    listed = cli.call("engine::functions::list")["functions"]
    assert "demo::echo" in {f["function_id"] for f in listed}
    assert engine.wait_worker("provider")["runtime"] == "python"
    kv = Cli.kv_payload(["pinned=true", "tags=blog", "text=42"], base={"text": "x", "n": 1})
    assert kv == {"text": 42, "n": 1, "pinned": True, "tags": "blog"}
    assert cli.call_kv("demo::echo", "text=hi", "n=2")["echo"]["n"] == 2


def test_raw_wire_handshake_ignores_noise(engine: EngineDouble) -> None:
    with connect(engine.url + "/otel") as otel:
        otel.send(b"OTLP{}")
    with connect(engine.url) as ws:
        hello = json.loads(ws.recv(timeout=5))
        assert set(hello) == {"type", "worker_id", "reattach_token"}  # no features: no observe
        assert hello["type"] == "workerregistered"
        ws.send(b"LOGS{}")
        ws.send(json.dumps({"type": "bogus"}))
        ws.send("not json")
        invoke = {"type": "invokefunction", "function_id": "engine::functions::list"}
        ws.send(json.dumps({**invoke, "data": {}, "invocation_id": "inv-1"}))
        reply = json.loads(ws.recv(timeout=5))
        assert engine.connection_count() == 1
    assert reply == {
        "type": "invocationresult",
        "invocation_id": "inv-1",
        "function_id": "engine::functions::list",
        "result": {"functions": []},
    }


def test_unknown_function_and_handler_errors(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    with pytest.raises(InvocationError) as missing:
        cli.call("demo::missing")
    assert missing.value.code == "function_not_found"
    assert missing.value.message == "Function demo::missing not found in namespace default."

    def broken(_data: JSON) -> None:
        raise ValueError("demo/bad_input: nope")

    raw_client("provider").register_function("demo::broken", broken)
    engine.wait_function("demo::broken")
    with pytest.raises(InvocationError) as failed:
        cli.call("demo::broken", {})
    assert failed.value.code == "invocation_failed"
    assert "demo/bad_input" in failed.value.message


def test_delay_hits_caller_timeout(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    raw_client("provider").register_function("demo::slow", lambda data: "late")
    engine.wait_function("demo::slow")
    engine.set_delay("demo::slow", 1.0)
    with pytest.raises(InvocationError) as timed_out:
        cli.call("demo::slow", {}, timeout_ms=100)
    assert timed_out.value.code == "TIMEOUT"
    engine.set_delay("demo::slow", 0)
    assert cli.call("demo::slow", {}) == "late"


def test_target_disconnect_fails_pending_call(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    release = threading.Event()
    raw_client("stuck").register_function("demo::stuck", lambda data: release.wait(10))
    engine.wait_function("demo::stuck")
    start = len(engine.frames)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(cli.call, "demo::stuck", {})
        engine.wait_frame(
            lambda d, who, m: d == "out" and m.get("function_id") == "demo::stuck", start=start
        )
        assert engine.drop_worker("stuck") == 1
        with pytest.raises(InvocationError) as failed:
            pending.result(timeout=10)
        release.set()
    assert (failed.value.code, failed.value.message) == ("invocation_stopped", "Invocation stopped")


def test_void_fan_out_reaches_subscriber(engine: EngineDouble, start: Callable[..., Any]) -> None:
    harness: FakeHarness = start(FakeHarness)
    mine: FakeSubscriber = start(FakeSubscriber, TURN_COMPLETED, {"session_id": "s1"})
    engine.wait_binding(TURN_COMPLETED, mine.function_id)

    assert harness.turn_completed(turn_event("s2", "t0")) == 0
    assert harness.turn_completed(turn_event("s1", "t1")) == 1

    [event] = mine.wait_events(1)
    assert (event["session_id"], event["turn_id"], event["status"]) == ("s1", "t1", "completed")
    assert event["_caller_worker_id"] == harness.client.worker_id
    # As from the engine (`handle_invocation`), the target of a void call gets an invocation id
    # and answers it; the answer goes nowhere (the caller asked for none).
    [void] = [
        m
        for d, _, m in engine.frames
        if d == "out"
        and m.get("type") == "invokefunction"
        and m.get("function_id") == mine.function_id
    ]
    assert void["invocation_id"]
    engine.wait_frame(
        lambda d, _w, m: (
            d == "in"
            and m.get("type") == "invocationresult"
            and m.get("invocation_id") == void["invocation_id"]
        )
    )
    assert not [
        m
        for d, who, m in engine.frames
        if d == "out"
        and who == harness.name
        and m.get("type") == "invocationresult"
        and m.get("function_id") == mine.function_id
    ]


# ── enqueue and the queue worker ──────────────────────────────────────────────────────────


def test_enqueue_retries_then_succeeds(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any], cli: Cli
) -> None:
    queue: FakeQueue = start(FakeQueue)
    calls: list[JSON] = []
    raw_client("jobs").register_function("job::work", _fail_times(2, calls))
    engine.wait_function("job::work")
    assert cli.call("queue::define", {"queue": "q1", "config": {"max_retries": 3}}) == {
        "queue": "q1",
        "changed": True,
    }

    receipt = cli.enqueue("job::work", {"n": 1}, queue="q1")["messageReceiptId"]

    attempts = queue.wait_done(receipt)
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert attempts[-1].result == {"done": 3}
    assert attempts[0].error is not None and "job/failed" in attempts[0].error
    assert queue.dead_letters == []
    assert queue.enqueued[0]["queue"] == "q1"
    assert calls[0]["n"] == 1


def test_enqueue_dead_letters_and_dedupes_receipts(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any], cli: Cli
) -> None:
    queue: FakeQueue = start(FakeQueue)
    calls: list[JSON] = []
    raw_client("jobs").register_function("job::doomed", _fail_times(99, calls))
    raw_client("jobs2").register_function("job::ok", lambda data: {"ok": True})
    engine.wait_function("job::doomed")
    engine.wait_function("job::ok")
    sub: FakeSubscriber = start(FakeSubscriber, "durable:subscriber", {"queue": "q2"})
    engine.wait_binding("durable:subscriber", sub.function_id)
    cli.call("queue::define", {"queue": "q2", "config": {"max_retries": 2, "backoff_ms": 10}})

    doomed = cli.enqueue("job::doomed", {"n": 2}, queue="q2")["messageReceiptId"]
    envelope_ = {"queue": "q2", "function_id": "job::ok", "data": {}, "messageReceiptId": "memx-1"}
    assert cli.call("engine::queue::enqueue", envelope_) == {"messageReceiptId": "memx-1"}
    assert cli.call("engine::queue::enqueue", envelope_) == {"messageReceiptId": "memx-1"}
    queue.wait_idle()

    assert len(queue.wait_done(doomed)) == 2
    [dead] = queue.dead_letters
    assert (dead["receipt"], dead["attempts"]) == (doomed, 2)
    assert [d.function_id for d in queue.delivered].count("job::ok") == 1
    assert len(queue.duplicates) == 1


def test_enqueue_without_queue_worker_is_enqueue_error(cli: Cli) -> None:
    with pytest.raises(InvocationError) as failed:
        cli.enqueue("job::work", {}, queue="q1")
    assert failed.value.code == "enqueue_error"


# ── bindings ──────────────────────────────────────────────────────────────────────────────


def test_binding_parks_until_provider_registers(
    engine: EngineDouble, start: Callable[..., Any]
) -> None:
    config = {"priority": 100, "timeout_ms": 3000, "on_error": "fail_open"}
    hook: FakeSubscriber = start(FakeSubscriber, PRE_GENERATE, config)
    engine.wait_binding(PRE_GENERATE, hook.function_id, state="parked")  # registered async
    assert [b["state"] for b in engine.bindings(PRE_GENERATE)] == ["parked"]

    harness: FakeHarness = start(FakeHarness)

    engine.wait_binding(PRE_GENERATE, hook.function_id)
    [bound] = harness.wait_bound(PRE_GENERATE)
    assert (bound.function_id, bound.config) == (hook.function_id, config)
    info = hook.client.trigger(
        {"function_id": "engine::triggers::info", "payload": {"trigger_type": PRE_GENERATE}}
    )
    assert info["instance_count"] == 1

    # Unbound: the provider is told the binding's id and type, nothing more (engine 0.23's
    # `Message::UnregisterTrigger`), and drops it.
    hook.binding.unregister()
    _d, _who, told = engine.wait_frame(
        lambda d, who, m: d == "out" and who == harness.name and m["type"] == "unregistertrigger"
    )
    assert told == {"type": "unregistertrigger", "id": bound.id, "trigger_type": PRE_GENERATE}
    harness.sync()
    assert harness.pre_generate.all() == []


def test_binding_with_bad_config_is_rejected(
    engine: EngineDouble, start: Callable[..., Any]
) -> None:
    harness: FakeHarness = start(FakeHarness)
    hook: FakeSubscriber = start(FakeSubscriber, PRE_GENERATE, {"priority": 1, "bogus": True})

    rejected = engine.wait_rejection(PRE_GENERATE, hook.function_id)

    assert rejected["error"]["code"] == "trigger_registration_failed"
    assert "bogus" in rejected["error"]["message"]
    assert harness.pre_generate.all() == []
    engine.wait_frame(
        lambda d, who, m: (
            d == "out" and who == hook.name and m["type"] == "triggerregistrationresult"
        )
    )


# ── cron (fired by the test) ──────────────────────────────────────────────────────────────


def test_cron_bindings_fire_only_when_the_test_says_so(
    engine: EngineDouble, raw_client: Callable[[str], III]
) -> None:
    client = raw_client("scheduled")
    fired: list[JSON] = []
    client.register_function("test::tick", lambda data: fired.append(data) or {"ok": len(fired)})
    bind(client, "cron", "test::tick", {"expression": "0 0 * * * *"})
    binding = engine.wait_binding("cron", "test::tick")
    assert fired == []  # no clock: nothing fires by itself

    [answer] = engine.fire_cron("test::tick")

    assert answer["result"] == {"ok": 1}
    [event] = fired
    assert event["trigger"] == "cron" and event["job_id"] == binding["id"]
    # chrono's `to_rfc3339`: the due time on the second, both with an explicit `+00:00`.
    scheduled, actual = event["scheduled_time"], event["actual_time"]
    assert scheduled.endswith("+00:00") and "." not in scheduled and actual.endswith("+00:00")
    assert engine.fire_cron("test::tick", wait=False) == []
    # Unwaited, the firing still carries an invocation id (the engine calls, then drops it).
    _d, _w, unwaited = engine.wait_frame(
        lambda d, _w, m: (
            d == "in" and m.get("type") == "invocationresult" and m.get("result") == {"ok": 2}
        )
    )
    assert unwaited["invocation_id"]


def test_cron_binding_with_a_bad_expression_is_rejected(
    engine: EngineDouble, raw_client: Callable[[str], III]
) -> None:
    client = raw_client("scheduled")
    client.register_function("test::tick", lambda data: {"ok": True})
    bind(client, "cron", "test::tick", {"expression": "0 * * * *"})  # 5 fields: minutes first
    rejected = engine.wait_rejection("cron", "test::tick")
    assert rejected["error"]["code"] == "trigger_registration_failed"
    assert rejected["error"]["message"].startswith("Invalid cron expression '0 * * * *'")
    with pytest.raises(RuntimeError, match="no live cron binding"):
        engine.fire_cron("test::tick")
    # The engine reads only `expression` (and `condition_function_id`): other keys are ignored.
    bind(client, "cron", "test::tick", {"expression": "0 0 * * * *", "timezone": "UTC"})
    engine.wait_binding("cron", "test::tick")


# ── configuration (built into the engine) ─────────────────────────────────────────────────

MEMORY_SCHEMA = {
    "type": "object",
    "properties": {"recall_limit": {"type": "integer", "minimum": 1}},
    "additionalProperties": False,
}


def _entry(initial: Any = None) -> JSON:
    entry: JSON = {"id": "memory", "name": "Memory", "description": "d", "schema": MEMORY_SCHEMA}
    if initial is not None:
        entry["initial_value"] = initial
    return entry


def test_configuration_ttl_deletes_an_entry_once_no_binding_names_it() -> None:
    """The configuration worker's `ttl_seconds`: when the last binding naming an entry goes (its
    owner disconnected), the entry is deleted after the TTL and `configuration:deleted` fires to
    the bindings left (one naming no id does not keep it)."""
    with EngineDouble(config_ttl_s=0.2) as engine:
        with (
            Cli(engine.url) as cli,
            FakeSubscriber(
                engine.url, "configuration", {"event_types": ["configuration:deleted"]}
            ) as everyone,
        ):
            cli.call("configuration::register", _entry({"recall_limit": 6}))
            with FakeSubscriber(
                engine.url, "configuration", {"configuration_id": "memory"}
            ) as owner:
                engine.wait_binding("configuration", owner.function_id)
            engine.wait_config("memory", present=False)
            [event] = everyone.wait_events(1)
            assert (event["event_type"], event["id"]) == ("configuration:deleted", "memory")
            assert (event["old_value"], event["new_value"]) == ({"recall_limit": 6}, None)
            with pytest.raises(InvocationError) as gone:
                cli.call("configuration::get", {"id": "memory"})
            assert gone.value.code == "NOT_FOUND"
        assert engine.errors == []


def test_configuration_builtins_and_trigger(
    engine: EngineDouble, start: Callable[..., Any], cli: Cli
) -> None:
    with pytest.raises(InvocationError) as missing:
        cli.call("configuration::get", {"id": "memory"})
    assert missing.value.code == "NOT_FOUND"
    with pytest.raises(InvocationError) as unregistered:
        cli.call("configuration::set", {"id": "memory", "value": {}})
    assert unregistered.value.code == "NOT_REGISTERED"

    watcher: FakeSubscriber = start(
        FakeSubscriber,
        "configuration",
        {"configuration_id": "memory", "event_types": ["configuration:updated"]},
    )
    engine.wait_binding("configuration", watcher.function_id)

    assert cli.call("configuration::ensure", _entry({"recall_limit": 6}))["action"] == "seeded"
    second = cli.call("configuration::ensure", _entry({"recall_limit": 9}))
    assert second["action"] == "preserved"
    assert cli.call("configuration::get", {"id": "memory"}) == {
        "id": "memory",
        "value": {"recall_limit": 6},
    }

    changed = cli.call("configuration::set", {"id": "memory", "value": {"recall_limit": 3}})
    assert changed == {"old_value": {"recall_limit": 6}, "new_value": {"recall_limit": 3}}
    with pytest.raises(InvocationError) as invalid:
        cli.call("configuration::set", {"id": "memory", "value": {"recall_limit": 0}})
    assert invalid.value.code == "SCHEMA_INVALID"
    engine.set_config("memory", {"recall_limit": "${MEMORY_TEST_LIMIT:4}"})

    # ensure #2 refreshed the entry: an updated event; then set, then set_config.
    events = watcher.wait_events(3)
    assert [e["event_type"] for e in events] == ["configuration:updated"] * 3
    assert events[1]["old_value"] == {"recall_limit": 6}
    assert events[1]["new_value"] == {"recall_limit": 3}
    assert events[2]["new_value"] == {"recall_limit": 4}
    assert cli.call("configuration::get", {"id": "memory"})["value"] == {"recall_limit": 4}
    assert engine.config_value("memory") == {"recall_limit": "${MEMORY_TEST_LIMIT:4}"}

    replaced = cli.call("configuration::register", _entry({"recall_limit": 8}))
    assert replaced["value"] == {"recall_limit": 8}
    listed = cli.call("configuration::list")["configurations"]
    assert [c["id"] for c in listed] == ["memory"] and "value" not in listed[0]
    with pytest.raises(EngineError):
        engine.set_config("unknown", {})


# ── reconnect ─────────────────────────────────────────────────────────────────────────────


def test_drop_connections_reconnects_and_replays(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any], cli: Cli
) -> None:
    raw_client("provider").register_function("demo::echo", lambda data: data["x"])
    harness: FakeHarness = start(FakeHarness)
    hook: FakeSubscriber = start(FakeSubscriber, PRE_GENERATE, {"on_error": "fail_open"})
    engine.wait_function("demo::echo")
    engine.wait_binding(PRE_GENERATE, hook.function_id)

    assert engine.drop_connections() == 4

    engine.wait_function("demo::echo", min_count=2)
    engine.wait_worker(cli.name, min_count=2)
    engine.wait_binding(PRE_GENERATE, hook.function_id)
    assert engine.registration_count("demo::echo") == 2
    assert cli.call("demo::echo", {"x": 7}) == 7
    assert harness.hook(envelope("s1", "t1")).calls == [hook.function_id]


# ── harness hooks ─────────────────────────────────────────────────────────────────────────


def test_harness_hooks_run_in_priority_order_fail_open(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any]
) -> None:
    harness: FakeHarness = start(FakeHarness)
    seen: dict[str, JSON] = {}

    def prompt_hook(env: JSON) -> JSON:
        seen["prompt"] = env
        return {"decision": "continue", "mutations": {"system_prompt": "P1"}}

    def recall_hook(env: JSON) -> JSON:
        seen["recall"] = env
        note = user_message("<memory>likes tea</memory>", ts=1)
        mutations = {"append_messages": [note]}
        return {"decision": "continue", "mutations": mutations, "annotations": {"memory_bank": "b"}}

    def broken_hook(env: JSON) -> JSON:
        seen["broken"] = env
        raise RuntimeError("hook/broken")

    hooks = raw_client("hooks")
    configs = {
        "demo::recall": (recall_hook, 10, "fail_closed"),
        "demo::broken": (broken_hook, 20, "fail_open"),
        "demo::prompt": (prompt_hook, 5, "fail_closed"),
    }
    for function_id, (handler, priority, on_error) in configs.items():
        hooks.register_function(function_id, handler)
        bind(hooks, PRE_GENERATE, function_id, {"priority": priority, "on_error": on_error})
    harness.wait_bound(PRE_GENERATE, n=3)

    run = harness.hook(envelope("s1", "t1", 0, [user_message("hello", ts=0)]))

    assert run.calls == ["demo::prompt", "demo::recall", "demo::broken"]
    assert seen["recall"]["generate"]["system_prompt"] == "P1"
    assert len(seen["broken"]["generate"]["messages"]) == 2
    assert run.system_prompt == "P1"
    assert [m["content"][0]["text"] for m in run.appended] == ["<memory>likes tea</memory>"]
    assert run.annotations == {"memory_bank": "b"}
    assert [(e.function_id, e.code) for e in run.errors] == [("demo::broken", "invocation_failed")]
    assert run.decision == "continue"
    assert seen["prompt"]["point"] == "pre_generate" and seen["prompt"]["turn_id"] == "t1"


def test_harness_fail_closed_timeout_stops_chain(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any]
) -> None:
    harness: FakeHarness = start(FakeHarness)
    hooks = raw_client("hooks")
    hooks.register_function("demo::slow", lambda env: None)
    hooks.register_function("demo::later", lambda env: None)
    bind(hooks, PRE_GENERATE, "demo::slow", {"priority": 1, "timeout_ms": 100})
    bind(hooks, PRE_GENERATE, "demo::later", {"priority": 2})
    harness.wait_bound(PRE_GENERATE, n=2)
    engine.set_delay("demo::slow", 1.0)

    run = harness.hook(envelope("s1", "t1"))

    assert run.calls == ["demo::slow"]
    assert [e.code for e in run.errors] == ["TIMEOUT"]
    assert run.decision == "failed"


# ── session-manager ───────────────────────────────────────────────────────────────────────


def test_sessions_paginate_filter_and_delete(
    engine: EngineDouble, start: Callable[..., Any], cli: Cli
) -> None:
    sessions: FakeSessions = start(FakeSessions)
    turns = [
        user_message(f"u{i}") if i % 2 == 0 else assistant_message(f"a{i}") for i in range(120)
    ]
    sessions.add("s1", metadata={"memory_bank": "work"}, messages=turns)

    pages: list[JSON] = []
    cursor: str | None = None
    while True:
        request: JSON = {"session_id": "s1", "limit": 50}
        if cursor is not None:
            request["cursor"] = cursor
        pages.append(cli.call("session::messages", request))
        cursor = pages[-1].get("next_cursor")
        if cursor is None:
            break
    assert [len(p["messages"]) for p in pages] == [50, 50, 20]
    texts = [e["message"]["content"][0]["text"] for p in pages for e in p["messages"]]
    assert texts[0] == "u0" and texts[-1] == "a119"
    users = cli.call("session::messages", {"session_id": "s1", "roles": ["user"], "limit": 500})
    assert len(users["messages"]) == 60 and "next_cursor" not in users

    meta = cli.call("session::get", {"session_id": "s1"})["meta"]
    assert (meta["metadata"], meta["message_count"]) == ({"memory_bank": "work"}, 120)
    assert cli.call("session::get", {"session_id": "nope"}) is None
    cli.call("session::set-meta", {"session_id": "s1", "metadata": {"memory_bank": "home"}})
    assert sessions.sessions["s1"]["metadata"] == {"memory_bank": "home"}
    sessions.fail_get = True
    with pytest.raises(InvocationError) as down:
        cli.call("session::get", {"session_id": "s1"})
    assert "session/unavailable" in down.value.message

    gone: FakeSubscriber = start(
        FakeSubscriber, "session::deleted", {"metadata": {"memory_bank": "home"}}
    )
    engine.wait_binding("session::deleted", gone.function_id)
    assert sessions.delete("s1") == 1
    assert gone.wait_events(1)[0]["session_id"] == "s1"
    assert ("session::get", {"session_id": "nope"}) in [
        (fid, {k: v for k, v in data.items() if k != "_caller_worker_id"})
        for fid, data in sessions.calls
    ]


# ── state, router, http ───────────────────────────────────────────────────────────────────


def test_state_router_and_http(
    engine: EngineDouble, raw_client: Callable[[str], III], start: Callable[..., Any], cli: Cli
) -> None:
    state: FakeState = start(FakeState)
    assert cli.call("state::get", {"scope": "cur", "key": "s1"}) is None
    assert cli.call("state::set", {"scope": "cur", "key": "s1", "value": 5}) == {
        "old_value": None,
        "new_value": 5,
    }
    assert cli.call("state::list", {"scope": "cur"}) == [5]
    assert state.data == {"cur": {"s1": 5}}

    router: FakeRouter = start(FakeRouter)
    router.script(['["fact"]', lambda request: f"echo {request['model']}"])
    first = cli.call("router::complete", {"model": "m1", "messages": [user_message("x")]})
    assert first["message"]["content"][0]["text"] == '["fact"]'
    assert first["message"]["stop_reason"] == "end"
    assert (
        cli.call("router::complete", {"model": "m2"})["message"]["content"][0]["text"] == "echo m2"
    )
    embedded = cli.call("router::embed", {"input": ["tea time", "tea"]})["embeddings"]
    assert embedded[0] == pytest.approx(fake_embedding("tea time"))
    router.embed_fail = True
    with pytest.raises(InvocationError) as no_embed:
        cli.call("router::embed", {"input": ["x"]})
    assert "router/no_embed_provider" in no_embed.value.message

    http: FakeHttp = start(FakeHttp)
    api = raw_client("api")
    api.register_function("demo::http", lambda req: {"status_code": 201, "body": req["body"]})
    bind(api, "http", "demo::http", {"api_path": "demo/:id", "http_method": "POST"})
    engine.wait_binding("http", "demo::http")
    response = http.request("POST", "/demo/42", {"a": 1})
    assert (response["status_code"], response["body"]) == (201, {"a": 1})
    assert http.request("GET", "/demo/42")["status_code"] == 404


def test_http_envelope_is_the_engine_http_workers(
    raw_client: Callable[[str], III], start: Callable[..., Any], engine: EngineDouble
) -> None:
    """As engine 0.23's http worker builds it: the registered route as `path`, lowercase header
    names, `body` parsed only from a JSON content type (else null: the bytes go to the
    `request_body` channel), and the two channel refs the SDK turns into channel objects."""
    http: FakeHttp = start(FakeHttp)
    api = raw_client("api")
    seen: list[JSON] = []

    def handler(req: JSON) -> JSON:
        seen.append(req)
        return {"status_code": 200, "body": None}

    api.register_function("demo::envelope", handler)
    bind(api, "http", "demo::envelope", {"api_path": "demo/:id", "http_method": "POST"})
    engine.wait_binding("http", "demo::envelope")
    form = {"Content-Type": "application/x-www-form-urlencoded", "X-Confirm": "yes"}
    http.request("POST", "/demo/7", raw=b'{"a": 1}', headers=form)
    http.request("POST", "/demo/7", raw=b'{"a": 1', headers={"Content-Type": "application/json"})
    http.request("POST", "/demo/7", {"a": 1})
    not_json, broken, sent = seen
    assert (not_json["path"], not_json["trigger"]["path"]) == ("demo/:id", "demo/:id")
    assert not_json["path_params"] == {"id": "7"}
    assert not_json["headers"] == {
        "content-type": "application/x-www-form-urlencoded",
        "x-confirm": "yes",
        "content-length": "8",
    }
    assert (not_json["body"], broken["body"], sent["body"]) == (None, None, {"a": 1})
    assert sent["headers"]["content-type"] == "application/json"
    assert {type(sent[key]).__name__ for key in ("request_body", "response")} == {
        "ChannelReader",
        "ChannelWriter",
    }


# ── namespaces and ownership (engine 0.23) ────────────────────────────────────────────────


def _client(engine: EngineDouble, name: str, namespace: str | None = None) -> III:
    options = InitOptions(
        worker_name=name,
        namespace=namespace,
        otel={"enabled": False},
        enable_metrics_reporting=False,
        reconnection_config=FAST_RECONNECT,
    )
    return register_worker(engine.url, options)


def test_a_second_live_owner_of_a_function_is_refused_and_calls_stay_with_the_first(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    first = _client(engine, "first")  # shut down by the test itself, half-way
    try:
        first.register_function("demo::who", lambda _data: "first")
        engine.wait_function("demo::who")
        second = raw_client("second")
        second.register_function("demo::who", lambda _data: "second")
        second.register_function("demo::other", lambda _data: "other")
        engine.wait_function("demo::other")  # the rest of its exports are served
        [(who, rejection)] = engine.rejections_sent("FUNCTION_NAMESPACE_CONFLICT")
        assert who == "second" and rejection["function_id"] == "demo::who"
        assert rejection["owner_worker_id"] == first.worker_id
        assert cli.call("demo::who") == "first" and cli.call("demo::other") == "other"
        assert second.get_connection_state() == "connected"
    finally:
        shutdown_client(first)  # the owner goes away: its id can be taken over
    third = raw_client("third")
    third.register_function("demo::who", lambda _data: "third")
    engine.wait_function("demo::who", min_count=2)
    assert cli.call("demo::who") == "third"


def test_a_second_live_worker_with_the_same_name_is_rejected_and_disconnected(
    engine: EngineDouble, raw_client: Callable[[str], III], cli: Cli
) -> None:
    first = raw_client("twin")
    first.register_function("demo::twin", lambda _data: "first")
    engine.wait_worker("twin")
    clone = _client(engine, "twin")
    try:
        clone.register_function("demo::clone", lambda _data: "clone")
        engine.wait_frame(lambda d, _w, m: d == "out" and m.get("type") == "registrationrejected")
        [(_, rejection)] = engine.rejections_sent("WORKER_NAMESPACE_CONFLICT")
        assert (
            rejection["worker_name"] == "twin" and rejection["owner_worker_id"] == first.worker_id
        )
        assert "function_id" not in rejection
        assert "demo::clone" not in engine.functions()  # its registrations were never applied
        assert cli.call("demo::twin") == "first"
        assert len([w for w in engine.workers if w.get("name") == "twin"]) == 1
    finally:
        shutdown_client(clone)


def test_routing_is_strict_by_namespace(engine: EngineDouble, cli: Cli) -> None:
    analytics = _client(engine, "analytics-worker", namespace="analytics")
    try:
        analytics.register_function("demo::count", lambda _data: 42)
        engine.wait_function("demo::count", namespace="analytics")
        assert "demo::count" not in engine.functions()  # not in default
        with pytest.raises(InvocationError) as missing:
            cli.call("demo::count")
        assert missing.value.code == "function_not_found"
        assert "namespace default" in missing.value.message and "analytics" in missing.value.message
        named = {"function_id": "demo::count", "payload": {}, "namespace": "analytics"}
        assert cli.client.trigger(named) == 42
        # The worker's own implicit calls stay in its namespace (the SDK names it).
        assert analytics.trigger({"function_id": "demo::count", "payload": {}}) == 42
    finally:
        shutdown_client(analytics)
