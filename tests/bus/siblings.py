"""Fake sibling workers, each a real ``iii-sdk`` client connected to an engine (the double).

They model the contracts of reference ``iii-engine.md`` §6 closely enough for the memory
worker's integration tests, and they exercise the real SDK code paths while doing it:

- ``Cli``: what ``iii trigger`` is, one client sending ``invokefunction`` (§3.6);
- ``FakeHarness``: provider of ``harness::hook::pre-generate`` and ``harness::turn-completed``,
  running hooks the way the harness does (§6.6, §6.7);
- ``FakeSessions``: session-manager's ``session::*`` functions and ``session::deleted`` (§6.2);
- ``FakeQueue``: the standalone queue worker (``engine::queue::enqueue``, ``queue::define``,
  ``durable:subscriber``, retries with backoff, dead letters, receipt dedupe) (§6.3);
- ``FakeState``: the state worker's ``state::get|set|delete|list`` (§6.5);
- ``FakeRouter``: llm-router's ``router::complete|embed|models::list`` (§6.1);
- ``FakeHttp``: the http worker, a provider of ``http`` bindings invoking bound functions with
  the HTTP envelope (§3.7, §6.8);
- ``FakeSubscriber``: any worker binding a function to a trigger type and recording events.

Providers use the legacy trigger-type model (§2.5, §3.4), which 0.25 deprecates but every
sibling still speaks; the ``DeprecationWarning`` is silenced locally. Every class must be closed
(``close()`` or ``with``): the SDK runs a non-daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import math
import re
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self, TypeAlias

from iii import InitOptions, InvocationError, TriggerAction, register_worker
from iii.iii import III
from iii.triggers import Trigger, TriggerConfig, TriggerHandler
from iii_helpers.observability import ReconnectionConfig

from memory_worker.adapters.cli import parse_assignments

JSON = dict[str, Any]
Binding: TypeAlias = TriggerConfig[Any]

#: Reconnect fast after ``EngineDouble.drop_connections`` (the SDK default starts at 1 s).
FAST_RECONNECT = ReconnectionConfig(initial_delay_ms=50, max_delay_ms=500, jitter_factor=0.1)


def now_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def legacy_triggers() -> Iterator[None]:
    """Trigger types and bindings are deprecated in 0.25 but remain the interop path (§1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def shutdown_client(client: III) -> None:
    """Shut an SDK client down and close its event loop.

    ``III.shutdown`` stops and joins the loop thread but never closes the loop, which later
    surfaces as ``ResourceWarning: unclosed event loop`` — an error under our warning filters.
    """
    client.shutdown()
    if not client._thread.is_alive() and not client._loop.is_closed():
        client._loop.close()


def bind(
    client: III,
    trigger_type: str,
    function_id: str,
    config: JSON,
    metadata: JSON | None = None,
) -> Trigger:
    """``register_trigger`` (a binding, §3.5) without the 0.25 deprecation noise."""
    request: JSON = {"type": trigger_type, "function_id": function_id, "config": config}
    if metadata is not None:
        request["metadata"] = metadata
    with legacy_triggers():
        return client.register_trigger(request)


def keys_only(*allowed: str) -> Callable[[JSON], None]:
    """A binding-config validator refusing unknown keys, as the siblings' deny-unknown-fields."""

    def validate(config: JSON) -> None:
        unknown = sorted(set(config) - set(allowed))
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; allowed: {sorted(allowed)}")

    return validate


class BindingStore(TriggerHandler[Any]):
    """A provider's side of bindings (§2.5): validated, stored by id, waitable from tests.

    The SDK calls ``register_trigger`` on its loop when the engine forwards a
    ``registertrigger``; raising makes the SDK answer ``trigger_registration_failed``.
    """

    def __init__(self, validate: Callable[[JSON], None] | None = None) -> None:
        self._validate = validate or keys_only()
        self._cond = threading.Condition()
        self._bindings: dict[str, Binding] = {}

    async def register_trigger(self, config: Binding) -> None:
        raw = {} if config.config is None else config.config
        if not isinstance(raw, dict):
            raise ValueError("binding config must be an object")
        self._validate(raw)
        stored = config.model_copy(update={"config": copy.deepcopy(raw)})
        with self._cond:
            self._bindings[config.id] = stored
            self._cond.notify_all()

    async def unregister_trigger(self, config: Binding) -> None:
        with self._cond:
            self._bindings.pop(config.id, None)
            self._cond.notify_all()

    def all(self) -> list[Binding]:
        with self._cond:
            return list(self._bindings.values())

    def wait(self, n: int = 1, timeout: float = 10) -> list[Binding]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._bindings) >= n, timeout):
                raise TimeoutError(f"fewer than {n} bindings after {timeout}s")
            return list(self._bindings.values())


class SdkWorker:
    """One real SDK client with a unique worker name (§3.1); subclasses register in ``_setup``.

    The constructor returns once the engine has processed every registration: ``sync()`` makes
    a round trip on the same socket, after the registration frames.
    """

    prefix = "sibling"

    def __init__(
        self, url: str, *, name: str | None = None, invocation_timeout_ms: int = 10_000
    ) -> None:
        self.name = name or f"{self.prefix}-{uuid.uuid4().hex[:8]}"
        options = InitOptions(
            worker_name=self.name,
            otel={"enabled": False},
            enable_metrics_reporting=False,
            invocation_timeout_ms=invocation_timeout_ms,
            reconnection_config=FAST_RECONNECT,
        )
        self.client: III = register_worker(url, options)
        self._closed = False
        try:
            self._setup()
            self.sync()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        """Register functions, trigger types and bindings (subclasses)."""

    def sync(self) -> None:
        """Round-trip through the engine so everything sent before has been processed."""
        self.client.trigger({"function_id": "engine::functions::list", "payload": {}})

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            shutdown_client(self.client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _provide(self, type_id: str, description: str, store: BindingStore) -> None:
        """On the SDK's loop, as the memory worker does (`provide_trigger_types`): called from
        this thread, the SDK sends the registration before it stores `store`, and a binding
        parked at the engine (the memory worker bound before we came) replayed in between is
        dropped unanswered."""

        async def register() -> None:
            with legacy_triggers():
                self.client.register_trigger_type(
                    {"id": type_id, "description": description}, store
                )

        asyncio.run_coroutine_threadsafe(register(), self.client._loop).result(timeout=30)

    def _bind(
        self, trigger_type: str, function_id: str, config: JSON, metadata: JSON | None = None
    ) -> Trigger:
        return bind(self.client, trigger_type, function_id, config, metadata)

    @staticmethod
    def _request(binding: Binding, payload: Any, **extra: Any) -> JSON:
        request: JSON = {"function_id": binding.function_id, "payload": payload, **extra}
        if binding.metadata is not None:
            request["metadata"] = binding.metadata
        if binding.namespace is not None:
            request["namespace"] = binding.namespace
        return request

    def _fire(self, binding: Binding, payload: Any) -> None:
        """Fire-and-forget delivery to one binding, as providers fan out (§3.4)."""
        self.client.trigger(self._request(binding, payload, action=TriggerAction.Void()))


# ── CLI ───────────────────────────────────────────────────────────────────────────────────


class Cli(SdkWorker):
    """``iii trigger``: a client that sends one ``invokefunction`` per command (§3.6)."""

    prefix = "iii-cli"

    def sync(self) -> None:
        """Nothing registered, nothing to wait for."""

    def call(self, function_id: str, payload: Any = None, timeout_ms: int = 10_000) -> Any:
        """Invoke and return the result; raises ``iii.InvocationError``."""
        request = {"function_id": function_id, "payload": {} if payload is None else payload}
        return self.client.trigger({**request, "timeout_ms": timeout_ms})

    def call_kv(self, function_id: str, *tokens: str, base: JSON | None = None) -> Any:
        """``iii trigger <fn> k=v …`` with an optional ``--json`` base object."""
        return self.call(function_id, self.kv_payload(tokens, base))

    def call_void(self, function_id: str, payload: Any = None) -> None:
        self.client.trigger(
            {"function_id": function_id, "payload": payload, "action": TriggerAction.Void()}
        )

    def enqueue(self, function_id: str, payload: Any, queue: str, timeout_ms: int = 10_000) -> JSON:
        """``TriggerAction.Enqueue``: returns ``{messageReceiptId}``."""
        action = TriggerAction.Enqueue(queue=queue)
        request = {"function_id": function_id, "payload": payload, "action": action}
        result: JSON = self.client.trigger({**request, "timeout_ms": timeout_ms})
        return result

    def info(self, function_id: str) -> JSON:
        """``engine::functions::info``: what ``iii trigger <fn> -h`` shows."""
        result: JSON = self.call("engine::functions::info", {"function_id": function_id})
        return result

    @staticmethod
    def kv_payload(tokens: tuple[str, ...] | list[str], base: JSON | None = None) -> JSON:
        """``iii trigger``'s argument rules, which our own CLI implements too: each ``k=v``
        becomes a key, its value JSON-decoded when possible, else a string."""
        return parse_assignments(list(tokens), json.dumps(base) if base is not None else None)


# ── harness ───────────────────────────────────────────────────────────────────────────────

PRE_GENERATE = "harness::hook::pre-generate"
TURN_COMPLETED = "harness::turn-completed"


def user_message(text: str, ts: int | None = None) -> JSON:
    """An AgentMessage as the harness writes user turns."""
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "timestamp": ts or now_ms(),
    }


def assistant_message(text: str, ts: int | None = None) -> JSON:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end",
        "model": "fake-model",
        "provider": "fake",
        "timestamp": ts or now_ms(),
    }


def function_call(function_id: str, ts: int | None = None, **arguments: Any) -> JSON:
    """The assistant message of a step whose model called one function."""
    return {
        "role": "assistant",
        "content": [
            {
                "type": "function_call",
                "id": "call-1",
                "function_id": function_id,
                "arguments": arguments,
            }
        ],
        "stop_reason": "function_call",
        "model": "fake-model",
        "provider": "fake",
        "timestamp": ts or now_ms(),
    }


def function_result(text: str = "ok", ts: int | None = None) -> JSON:
    """The harness's record of a function call's result (its own role, not a user message)."""
    return {
        "role": "function_result",
        "function_call_id": "call-1",
        "function_id": "shell::fs::read",
        "content": [{"type": "text", "text": text}],
        "details": {},
        "is_error": False,
        "timestamp": ts or now_ms(),
    }


def envelope(
    session_id: str,
    turn_id: str,
    step: int = 0,
    messages: list[JSON] | None = None,
    system_prompt: str = "You are helpful.",
    metadata: JSON | None = None,
) -> JSON:
    """The ``pre_generate`` hook envelope (§6.6)."""
    env: JSON = {
        "point": "pre_generate",
        "session_id": session_id,
        "turn_id": turn_id,
        "step": step,
        "depth": 0,
        "generate": {
            "system_prompt": system_prompt,
            "messages": list(messages or []),
            "model": "fake-model",
            "provider": "fake",
            "functions_generation": 0,
            "tools": [],
            "expose": [],
        },
    }
    if metadata is not None:
        env["metadata"] = metadata
    return env


def turn_event(
    session_id: str,
    turn_id: str,
    status: str = "completed",
    parent_session_id: str | None = None,
    **extra: Any,
) -> JSON:
    """A ``harness::turn-completed`` payload (§6.7)."""
    payload: JSON = {"session_id": session_id, "turn_id": turn_id, "status": status}
    payload["timestamp"] = now_ms()
    if parent_session_id is not None:
        payload["parent"] = {"session_id": parent_session_id}
    return {**payload, **extra}


@dataclass
class HookError:
    function_id: str
    code: str
    message: str


@dataclass
class HookRun:
    """What one pre-generate pass produced; ``decision`` is continue|deny|hold|failed."""

    system_prompt: str
    calls: list[str] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    errors: list[HookError] = field(default_factory=list)
    appended: list[JSON] = field(default_factory=list)
    annotations: JSON = field(default_factory=dict)
    decision: str = "continue"
    reason: str | None = None


def _validate_hook_config(config: JSON) -> None:
    keys_only("priority", "timeout_ms", "on_error")(config)
    if config.get("on_error", "fail_closed") not in ("fail_open", "fail_closed"):
        raise ValueError(f"on_error must be fail_open or fail_closed, got {config['on_error']!r}")
    if not isinstance(config.get("priority", 0), int):
        raise ValueError("priority must be an integer")
    timeout_ms = config.get("timeout_ms", 5000)
    if not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise ValueError("timeout_ms must be a positive integer")


class FakeHarness(SdkWorker):
    """The harness's hook and turn events (§6.6, §6.7), driven explicitly by the test."""

    prefix = "harness"

    def __init__(self, url: str, **kwargs: Any) -> None:
        self.pre_generate = BindingStore(_validate_hook_config)
        self.turn_completed_bindings = BindingStore(keys_only("session_id", "parent_session_id"))
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        self._provide(PRE_GENERATE, "Hooks run before each generate step", self.pre_generate)
        self._provide(TURN_COMPLETED, "A turn finished", self.turn_completed_bindings)

    def _store(self, trigger_type: str) -> BindingStore:
        stores = {PRE_GENERATE: self.pre_generate, TURN_COMPLETED: self.turn_completed_bindings}
        return stores[trigger_type]

    def wait_bound(self, trigger_type: str, n: int = 1, timeout: float = 10) -> list[Binding]:
        return self._store(trigger_type).wait(n, timeout)

    def hook(self, env: JSON) -> HookRun:
        """Run every pre-generate binding in ascending priority, each seeing the previous
        hook's system prompt and the messages appended so far."""
        env = copy.deepcopy(env)
        base_messages = list(env["generate"]["messages"])
        run = HookRun(system_prompt=env["generate"]["system_prompt"])
        ordered = sorted(self.pre_generate.all(), key=lambda b: b.config.get("priority", 0))
        for binding in ordered:
            env["generate"]["system_prompt"] = run.system_prompt
            env["generate"]["messages"] = base_messages + run.appended
            if not self._run_one(binding, env, run):
                break
        return run

    def _run_one(self, binding: Binding, env: JSON, run: HookRun) -> bool:
        """One hook call; False stops the chain."""
        timeout_ms = binding.config.get("timeout_ms", 5000)
        run.calls.append(binding.function_id)
        try:
            reply = self.client.trigger(
                self._request(binding, copy.deepcopy(env), timeout_ms=timeout_ms)
            )
            if reply is not None and not isinstance(reply, dict):
                raise InvocationError("harness/invalid_reply", f"hook replied {reply!r}")
        except InvocationError as exc:
            run.errors.append(HookError(binding.function_id, exc.code, exc.message))
            if binding.config.get("on_error", "fail_closed") == "fail_open":
                return True
            run.decision = "failed"
            return False
        run.replies.append(reply)
        if reply is None:
            return True
        decision = reply.get("decision", "continue")
        if decision in ("deny", "hold"):
            run.decision, run.reason = decision, reply.get("reason")
            return False
        mutations = reply.get("mutations") or {}
        if isinstance(mutations.get("system_prompt"), str):
            run.system_prompt = mutations["system_prompt"]
        run.appended.extend(mutations.get("append_messages") or [])
        run.annotations.update(reply.get("annotations") or {})
        return True

    def turn_completed(self, payload: JSON) -> int:
        """Fire ``harness::turn-completed`` to every matching binding; returns how many."""
        parent = (payload.get("parent") or {}).get("session_id")
        fired = 0
        for binding in self.turn_completed_bindings.all():
            config = binding.config
            if config.get("session_id") not in (None, payload.get("session_id")):
                continue
            if config.get("parent_session_id") not in (None, parent):
                continue
            self._fire(binding, payload)
            fired += 1
        return fired


# ── session-manager ───────────────────────────────────────────────────────────────────────


def meta_changed(engine: Any, cli: Cli, change: Callable[[], Any]) -> None:
    """Run `change` (a `session::set-meta`) and return once the memory worker has handled the
    resulting `session::meta-updated`, so its next turn sees the new meta.

    Waiting for the engine to forward the event is not enough: the SDK starts a fire-and-forget
    handler one task later than a call's, so a call right behind it can overtake it. One round
    trip through the worker after the event was forwarded closes that gap."""
    engine.wait_binding("session::meta-updated", "memory::on-session-meta-updated")
    start = len(engine.frames)
    change()
    engine.wait_frame(
        lambda d, _w, m: (
            d == "out"
            and m.get("type") == "invokefunction"
            and m.get("function_id") == "memory::on-session-meta-updated"
        ),
        start=start,
    )
    cli.call("memory::bank::list", {})


SESSION_DELETED = "session::deleted"
SESSION_META_UPDATED = "session::meta-updated"


class FakeSessions(SdkWorker):
    """In-memory session-manager (§6.2): meta, paginated messages, ``session::deleted`` and
    ``session::meta-updated`` (fired by ``session::set-meta`` and ``set_meta``)."""

    prefix = "session-manager"

    def __init__(self, url: str, **kwargs: Any) -> None:
        self._lock = threading.Lock()
        self.sessions: dict[str, JSON] = {}
        self.entries: dict[str, list[JSON]] = {}
        self.calls: list[tuple[str, JSON]] = []
        self.fail_get = False
        self.deleted_bindings = BindingStore(keys_only("session_id", "metadata"))
        self.meta_bindings = BindingStore(keys_only("session_id"))
        self._entry_seq = 0
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        self._provide(SESSION_DELETED, "A session was deleted", self.deleted_bindings)
        self._provide(SESSION_META_UPDATED, "A session's meta changed", self.meta_bindings)
        register = self.client.register_function
        register("session::get", self._get, description="Read a session's meta")
        register("session::messages", self._messages, description="Page a session's messages")
        register("session::set-meta", self._set_meta, description="Update a session's meta")
        register("session::list", self._list, description="List sessions")

    # test-side API

    def add(
        self,
        session_id: str,
        metadata: JSON | None = None,
        messages: list[JSON] | None = None,
        parent_session_id: str | None = None,
        forked_from: str | None = None,
    ) -> JSON:
        """Create a session (and append ``messages``); returns its meta."""
        stamp = now_ms()
        meta: JSON = {
            "session_id": session_id,
            "title": "",
            "description": "",
            "status": "idle",
            "metadata": copy.deepcopy(metadata) if metadata is not None else {},
            "created_at": stamp,
            "updated_at": stamp,
            "message_count": 0,
        }
        if parent_session_id is not None:
            meta["parent_session_id"] = parent_session_id
        if forked_from is not None:
            meta["forked_from"] = forked_from
        with self._lock:
            self.sessions[session_id] = meta
            self.entries[session_id] = []
        for message in messages or []:
            self.append(session_id, message)
        return copy.deepcopy(meta)

    def append(self, session_id: str, message: JSON) -> str:
        """Append one AgentMessage; returns its entry id."""
        with self._lock:
            self._entry_seq += 1
            entry_id = f"entry-{self._entry_seq:06d}"
            self.entries[session_id].append(
                {"entry_id": entry_id, "message": copy.deepcopy(message)}
            )
            meta = self.sessions[session_id]
            meta["message_count"] = len(self.entries[session_id])
            meta["updated_at"] = now_ms()
        return entry_id

    def delete(self, session_id: str) -> int:
        """Delete a session and fire ``session::deleted`` to matching bindings; returns count."""
        with self._lock:
            meta = self.sessions.pop(session_id, None)
            self.entries.pop(session_id, None)
        metadata = (meta or {}).get("metadata") or {}
        fired = 0
        for binding in self.deleted_bindings.all():
            config = binding.config
            if config.get("session_id") not in (None, session_id):
                continue
            wanted = config.get("metadata") or {}
            if any(metadata.get(key) != value for key, value in wanted.items()):
                continue
            self._fire(binding, {"session_id": session_id, "timestamp": now_ms()})
            fired += 1
        return fired

    # functions

    def _record(self, function_id: str, data: JSON) -> None:
        with self._lock:
            self.calls.append((function_id, copy.deepcopy(data)))

    def _meta(self, session_id: Any) -> JSON:
        meta = self.sessions.get(str(session_id))
        if meta is None:
            raise ValueError(f"session/not_found: no session {session_id}")
        return meta

    async def _get(self, data: JSON) -> JSON | None:
        self._record("session::get", data)
        if self.fail_get:
            raise RuntimeError("session/unavailable: session store is down (fake)")
        with self._lock:
            meta = self.sessions.get(str(data.get("session_id")))
            return None if meta is None else {"meta": copy.deepcopy(meta)}

    async def _messages(self, data: JSON) -> JSON:
        self._record("session::messages", data)
        limit = max(1, min(int(data.get("limit") or 50), 500))
        roles = data.get("roles")
        start = int(str(data.get("cursor") or "0"))
        with self._lock:
            self._meta(data.get("session_id"))
            entries = [
                copy.deepcopy(e)
                for e in self.entries[str(data["session_id"])]
                if not roles or e["message"].get("role") in roles
            ]
        page: JSON = {"messages": entries[start : start + limit]}
        if start + limit < len(entries):
            page["next_cursor"] = str(start + limit)
        return page

    async def _set_meta(self, data: JSON) -> JSON:
        self._record("session::set-meta", data)
        with self._lock:
            meta = self._meta(data.get("session_id"))
            for key in ("title", "description", "metadata"):
                if key in data:
                    meta[key] = copy.deepcopy(data[key])
            meta["updated_at"] = now_ms()
            reply = {"meta": copy.deepcopy(meta)}
        event = {"session_id": meta["session_id"], "meta": reply["meta"], "timestamp": now_ms()}
        for binding in self.meta_bindings.all():
            if binding.config.get("session_id") in (None, meta["session_id"]):
                await self.client.trigger_async(
                    self._request(binding, event, action=TriggerAction.Void())
                )
        return reply

    def set_meta(self, session_id: str, metadata: JSON) -> JSON:
        """``session::set-meta`` from the test: replaces the metadata, fires meta-updated."""
        reply: JSON = self.client.trigger(
            {
                "function_id": "session::set-meta",
                "payload": {"session_id": session_id, "metadata": metadata},
            }
        )
        return reply

    async def _list(self, data: JSON) -> JSON:
        self._record("session::list", data)
        with self._lock:
            return {"sessions": copy.deepcopy(list(self.sessions.values()))}


# ── queue ─────────────────────────────────────────────────────────────────────────────────

DURABLE_SUBSCRIBER = "durable:subscriber"


def _validate_subscriber(config: JSON) -> None:
    keys_only("queue", "topic", "max_retries", "backoff_ms", "condition_function_id")(config)
    if not config.get("queue") and not config.get("topic"):
        raise ValueError("durable:subscriber needs a queue or a topic")


@dataclass
class Delivery:
    """One delivery attempt of a job."""

    receipt: str
    function_id: str
    data: Any
    attempt: int
    result: Any = None
    error: str | None = None


@dataclass
class _Job:
    receipt: str
    queue: str
    function_id: str
    data: Any
    #: where the target lives: the envelope's ``namespace`` (absent: ``default``), as the engine
    #: fills it in for an ``enqueue`` action from a worker in a namespace
    namespace: str | None = None


class FakeQueue(SdkWorker):
    """The standalone queue worker (§6.3): enqueue with receipt dedupe, delivery by invoking
    the target, retries with exponential backoff (``backoff_scale`` shrinks time), DLQ.

    ``max_retries`` is the number of delivery attempts before dead-lettering, as in the queue
    worker's docs; it comes from ``queue::define``, else the subscriber binding, else 3.
    """

    prefix = "queue"

    def __init__(
        self,
        url: str,
        *,
        backoff_scale: float = 0.01,
        delivery_timeout_ms: int = 10_000,
        **kwargs: Any,
    ) -> None:
        self.backoff_scale = backoff_scale
        self.delivery_timeout_ms = delivery_timeout_ms
        self._cond = threading.Condition()
        self.queues: dict[str, JSON] = {}
        self.enqueued: list[JSON] = []
        self.duplicates: list[JSON] = []
        self.delivered: list[Delivery] = []
        self.dead_letters: list[JSON] = []
        self._receipts: set[str] = set()
        self._done: set[str] = set()
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: list[_Job] | None = None  # jobs accepted but not delivered yet (queue lag)
        self.subscribers = BindingStore(_validate_subscriber)
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        self._provide(DURABLE_SUBSCRIBER, "Durable queue/topic subscription", self.subscribers)
        register = self.client.register_function
        register("engine::queue::enqueue", self._enqueue, description="Enqueue a job")
        register("queue::define", self._define, description="Define a named queue")
        register("iii::durable::publish", self._publish, description="Publish to a topic")

    def close(self) -> None:
        if not self._closed and self.client._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._cancel_tasks(), self.client._loop)
            future.result(timeout=5)
        super().close()

    async def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # functions

    async def _enqueue(self, data: JSON) -> JSON:
        queue, function_id = data.get("queue"), data.get("function_id")
        if not queue or not function_id:
            raise ValueError("queue/invalid_input: queue and function_id are required")
        receipt = str(data.get("messageReceiptId") or uuid.uuid4())
        if self._accept(data, receipt):
            namespace = data.get("namespace")
            job = _Job(receipt, str(queue), str(function_id), data.get("data"))
            job.namespace = namespace if isinstance(namespace, str) and namespace else None
            self._start(job)
        return {"messageReceiptId": receipt}

    def _accept(self, envelope: JSON, receipt: str) -> bool:
        """Record the job; False for a receipt seen before (accepted, never redelivered)."""
        with self._cond:
            if receipt in self._receipts:
                self.duplicates.append(copy.deepcopy(envelope))
                return False
            self._receipts.add(receipt)
            self.enqueued.append(copy.deepcopy(envelope))
            self._in_flight += 1
            return True

    async def _define(self, data: JSON) -> JSON:
        queue = str(data.get("queue") or "")
        if not queue:
            raise ValueError("queue/invalid_input: queue is required")
        config = copy.deepcopy(data.get("config") or {})
        with self._cond:
            changed = self.queues.get(queue) != config
            self.queues[queue] = config
        return {"queue": queue, "changed": changed}

    async def _publish(self, data: JSON) -> JSON:
        topic = data.get("topic") or data.get("queue")
        message_id = str(uuid.uuid4())
        subscribers = [
            b
            for b in self.subscribers.all()
            if topic in (b.config.get("topic"), b.config.get("queue"))
        ]
        for binding in subscribers:
            receipt = f"{message_id}:{binding.function_id}"
            job_envelope = {
                "queue": topic,
                "function_id": binding.function_id,
                "data": data.get("data"),
            }
            if self._accept(job_envelope, receipt):
                self._start(_Job(receipt, str(topic), binding.function_id, data.get("data")))
        return {"messageId": message_id, "subscribers": len(subscribers)}

    # delivery (on the SDK loop)

    def _start(self, job: _Job) -> None:
        with self._cond:
            if self._held is not None:
                self._held.append(job)
                self._cond.notify_all()
                return
        self._begin(job)

    def _begin(self, job: _Job) -> None:
        task = asyncio.ensure_future(self._deliver(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _policy(self, job: _Job) -> tuple[int, int]:
        with self._cond:
            defined = dict(self.queues.get(job.queue) or {})
        on_queue = [
            b
            for b in self.subscribers.all()
            if job.queue in (b.config.get("queue"), b.config.get("topic"))
        ]
        exact = [b for b in on_queue if b.function_id == job.function_id]
        bound = (exact or on_queue or [None])[0]
        bound_config: JSON = bound.config if bound is not None else {}
        policy: JSON = {"max_retries": 3, "backoff_ms": 1000, **bound_config, **defined}
        return int(policy["max_retries"]), int(policy["backoff_ms"])

    async def _deliver(self, job: _Job) -> None:
        max_retries, backoff_ms = self._policy(job)
        attempts = max(1, max_retries)
        try:
            for attempt in range(1, attempts + 1):
                if await self._attempt(job, attempt):
                    return
                if attempt < attempts:
                    delay_s = backoff_ms * 2 ** (attempt - 1) / 1000 * self.backoff_scale
                    await asyncio.sleep(delay_s)
            with self._cond:
                last = self.delivered[-1].error if self.delivered else None
                self.dead_letters.append(
                    {
                        "receipt": job.receipt,
                        "queue": job.queue,
                        "function_id": job.function_id,
                        "data": job.data,
                        "attempts": attempts,
                        "error": last,
                    }
                )
        finally:
            with self._cond:
                self._in_flight -= 1
                self._done.add(job.receipt)
                self._cond.notify_all()

    async def _attempt(self, job: _Job, attempt: int) -> bool:
        request = {"function_id": job.function_id, "payload": copy.deepcopy(job.data)}
        if job.namespace is not None:
            request["namespace"] = job.namespace
        delivery = Delivery(job.receipt, job.function_id, copy.deepcopy(job.data), attempt)
        try:
            delivery.result = await self.client.trigger_async(
                {**request, "timeout_ms": self.delivery_timeout_ms}
            )
        except InvocationError as exc:
            delivery.error = f"{exc.code}: {exc.message}"
        with self._cond:
            self.delivered.append(delivery)
            self._cond.notify_all()
        return delivery.error is None

    # test-side API

    def hold(self) -> None:
        """Accept jobs but deliver none until released: a lagging queue, under test control."""
        with self._cond:
            if self._held is None:
                self._held = []

    def held(self) -> list[str]:
        """Receipts of the jobs waiting, oldest first."""
        with self._cond:
            return [job.receipt for job in self._held or []]

    def release(self, receipt: str) -> None:
        """Deliver one held job now (the others keep waiting)."""
        with self._cond:
            held = self._held or []
            job = next((j for j in held if j.receipt == receipt), None)
            if job is None:
                raise KeyError(f"no held job {receipt}; held: {[j.receipt for j in held]}")
            held.remove(job)
        self.client._loop.call_soon_threadsafe(self._begin, job)

    def resume(self) -> None:
        """Stop holding: every held job is delivered, in the order it arrived."""
        with self._cond:
            held, self._held = self._held or [], None
        for job in held:
            self.client._loop.call_soon_threadsafe(self._begin, job)

    def wait_held(self, n: int = 1, timeout: float = 10) -> list[str]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._held or []) >= n, timeout):
                raise TimeoutError(f"fewer than {n} held jobs after {timeout}s")
            return [job.receipt for job in self._held or []]

    def wait_idle(self, timeout: float = 10) -> None:
        """Wait until no job is pending, retrying or in flight."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._in_flight == 0, timeout):
                raise TimeoutError(f"queue still busy after {timeout}s ({self._in_flight} jobs)")

    def wait_done(self, receipt_id: str, timeout: float = 10) -> list[Delivery]:
        """Wait until a job succeeded or was dead-lettered; returns its delivery attempts."""
        with self._cond:
            if not self._cond.wait_for(lambda: receipt_id in self._done, timeout):
                raise TimeoutError(f"job {receipt_id} not finished after {timeout}s")
            return [d for d in self.delivered if d.receipt == receipt_id]


# ── state ─────────────────────────────────────────────────────────────────────────────────


class FakeState(SdkWorker):
    """The state worker (§6.5): ``data[scope][key]``; ``fail = True`` makes every call raise."""

    prefix = "state"

    def __init__(self, url: str, **kwargs: Any) -> None:
        self._lock = threading.Condition()
        self.data: dict[str, dict[str, Any]] = {}
        self.fail = False
        super().__init__(url, **kwargs)

    def wait_value(
        self, scope: str, key: str, predicate: Callable[[Any], bool] = bool, timeout: float = 10
    ) -> Any:
        """Wait until ``data[scope][key]`` satisfies ``predicate``; returns a copy of it."""

        def ready() -> bool:
            return predicate(self.data.get(scope, {}).get(key))

        with self._lock:
            if not self._lock.wait_for(ready, timeout):
                found = self.data.get(scope, {}).get(key)
                raise TimeoutError(f"state {scope}/{key} is {found!r} after {timeout}s")
            return copy.deepcopy(self.data[scope][key])

    def _setup(self) -> None:
        register = self.client.register_function
        register("state::get", self._get, description="Read a value")
        register("state::set", self._set, description="Write a value")
        register("state::delete", self._delete, description="Delete a value")
        register("state::list", self._list, description="List a scope's values")

    def _check(self) -> None:
        if self.fail:
            raise RuntimeError("state/unavailable: state store is down (fake)")

    async def _get(self, data: JSON) -> Any:
        self._check()
        with self._lock:
            return copy.deepcopy(self.data.get(str(data["scope"]), {}).get(str(data["key"])))

    async def _set(self, data: JSON) -> JSON:
        self._check()
        with self._lock:
            scope = self.data.setdefault(str(data["scope"]), {})
            old_value = scope.get(str(data["key"]))
            scope[str(data["key"])] = copy.deepcopy(data.get("value"))
            self._lock.notify_all()
        return {"old_value": old_value, "new_value": data.get("value")}

    async def _delete(self, data: JSON) -> Any:
        self._check()
        with self._lock:
            return self.data.get(str(data["scope"]), {}).pop(str(data["key"]), None)

    async def _list(self, data: JSON) -> list[Any]:
        self._check()
        with self._lock:
            return copy.deepcopy(list(self.data.get(str(data["scope"]), {}).values()))


# ── llm-router ────────────────────────────────────────────────────────────────────────────

ScriptItem = str | JSON | Callable[[JSON], "str | JSON"]
EMBED_DIM = 64


def fake_embedding(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Deterministic hashed bag-of-words vector, L2-normalised: shared words ⇒ closer."""
    vector = [0.0] * dim
    for token in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        vector[digest[0] % dim] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


class FakeRouter(SdkWorker):
    """llm-router (§6.1): scripted ``router::complete``, deterministic ``router::embed``.

    ``script([...])`` queues replies: a string (the reply text), a dict (the whole reply), or a
    callable of the request returning either. When the script runs out, ``default_reply``.
    """

    prefix = "llm-router"

    def __init__(self, url: str, **kwargs: Any) -> None:
        self._lock = threading.Lock()
        self._script: list[ScriptItem] = []
        self.default_reply = "[]"
        self.requests: list[JSON] = []
        self.embed_requests: list[JSON] = []
        self.fail = False
        self.embed_fail = False
        #: what ``router::models::list`` offers; with ``only_listed`` a completion naming another
        #: model is refused, as a router whose providers were changed refuses a model now gone
        self.models = ["fake-model"]
        self.only_listed = False
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        register = self.client.register_function
        register("router::complete", self._complete, description="Complete a conversation")
        register("router::embed", self._embed, description="Embed texts")
        register("router::models::list", self._models, description="List models")

    def script(self, items: list[ScriptItem]) -> None:
        with self._lock:
            self._script.extend(items)

    @staticmethod
    def reply(text: str, model: str = "fake-model", stop_reason: str = "end") -> JSON:
        message = {
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason,
            "model": model,
            "provider": "fake",
            "timestamp": now_ms(),
        }
        return {"message": message, "provider": "fake", "model": model}

    async def _complete(self, data: JSON) -> JSON:
        if self.only_listed and data.get("model") not in self.models:
            raise ValueError(f"router/model_not_found: no provider serves {data.get('model')!r}")
        with self._lock:
            self.requests.append(copy.deepcopy(data))
            item: ScriptItem = self._script.pop(0) if self._script else self.default_reply
        if self.fail:
            raise RuntimeError("router/unavailable: no provider reachable (fake)")
        if callable(item):
            item = item(data)
        if isinstance(item, dict):
            return item
        return self.reply(str(item), model=str(data.get("model") or "fake-model"))

    async def _embed(self, data: JSON) -> JSON:
        with self._lock:
            self.embed_requests.append(copy.deepcopy(data))
        if self.embed_fail:
            raise RuntimeError("router/no_embed_provider: no embedding provider configured (fake)")
        texts = data.get("input")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError("router/invalid_input: input must be a non-empty list of strings")
        vectors = [fake_embedding(text) for text in texts]
        return {"provider": "fake", "model": "fake-embed", "embeddings": vectors}

    async def _models(self, _data: JSON) -> JSON:
        return {"models": [{"id": model, "provider": "fake"} for model in self.models]}


# ── generic subscriber ───────────────────────────────────────────────────────────────────


class FakeSubscriber(SdkWorker):
    """A worker binding one function of its own to ``trigger_type``; records what arrives."""

    prefix = "subscriber"

    def __init__(
        self,
        url: str,
        trigger_type: str,
        config: JSON | None = None,
        metadata: JSON | None = None,
        **kwargs: Any,
    ) -> None:
        self.trigger_type = trigger_type
        self.config = config or {}
        self.metadata = metadata
        self.function_id = f"test::subscriber::{uuid.uuid4().hex[:8]}"
        self._cond = threading.Condition()
        self._events: list[JSON] = []
        self.metadatas: list[Any] = []
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        self.client.register_function(self.function_id, self._on_event)
        self.binding = self._bind(self.trigger_type, self.function_id, self.config, self.metadata)

    async def _on_event(self, data: Any, metadata: Any = None) -> JSON:
        with self._cond:
            self._events.append(data)
            self.metadatas.append(metadata)
            self._cond.notify_all()
        return {"ok": True}

    @property
    def events(self) -> list[JSON]:
        with self._cond:
            return list(self._events)

    def wait_events(self, n: int = 1, timeout: float = 10) -> list[JSON]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._events) >= n, timeout):
                raise TimeoutError(f"{len(self._events)} of {n} events after {timeout}s")
            return list(self._events)


# ── http ──────────────────────────────────────────────────────────────────────────────────


def _match_path(pattern: str, path: str) -> JSON | None:
    """``memory/:bank/items`` vs ``/memory/b1/items`` → ``{"bank": "b1"}``; None if no match."""
    want, got = pattern.strip("/").split("/"), path.strip("/").split("/")
    if len(want) != len(got):
        return None
    params: JSON = {}
    for expected, actual in zip(want, got, strict=True):
        if expected.startswith(":"):
            params[expected[1:]] = actual
        elif expected != actual:
            return None
    return params


class FakeHttp(SdkWorker):
    """The http worker (§3.7): provider of ``http`` bindings; ``request`` plays one request.

    The envelope is the one the engine's built-in http worker builds (``rest_api/views.rs``,
    engine 0.23): ``path`` and ``trigger.path`` are the route as registered (``api_path``), not
    the URL; header names are lowercase (one value each); ``body`` is the request parsed as JSON
    only when its ``Content-Type`` says ``application/json`` and it parses, else ``null`` (the
    raw bytes go to the ``request_body`` channel only); ``request_body``/``response`` are channel
    refs, which the SDK hands the handler as channel objects."""

    prefix = "http"

    def __init__(self, url: str, **kwargs: Any) -> None:
        validate = keys_only(
            "api_path", "http_method", "condition_function_id", "middleware_function_ids"
        )
        self.routes = BindingStore(validate)
        super().__init__(url, **kwargs)

    def _setup(self) -> None:
        self._provide("http", "HTTP route", self.routes)

    @staticmethod
    def _channel(direction: str) -> JSON:
        return {
            "channel_id": uuid.uuid4().hex,
            "access_key": uuid.uuid4().hex,
            "direction": direction,
        }

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
    ) -> JSON:
        """Invoke the bound function with the HTTP envelope; returns status_code/headers/body.

        ``body`` is sent as a JSON client sends it (``Content-Type: application/json`` unless
        ``headers`` name another); ``raw`` sends those bytes as they are."""
        sent = {name.lower(): value for name, value in (headers or {}).items()}
        if raw is None and body is not None:
            raw = json.dumps(body).encode()
            sent.setdefault("content-type", "application/json")
        if raw is not None:
            sent["content-length"] = str(len(raw))
        parsed: Any = None
        if raw and "application/json" in sent.get("content-type", ""):
            with contextlib.suppress(ValueError):
                parsed = json.loads(raw)
        for binding in self.routes.all():
            if str(binding.config.get("http_method", "GET")).upper() != method.upper():
                continue
            api_path = str(binding.config.get("api_path", ""))
            params = _match_path(api_path, path)
            if params is None:
                continue
            envelope = {
                "path": api_path,
                "method": method.upper(),
                "path_params": params,
                "query_params": dict(query or {}),
                "headers": sent,
                "body": parsed,
                "trigger": {"type": "http", "path": api_path, "method": method.upper()},
                "request_body": self._channel("read"),
                "response": self._channel("write"),
            }
            try:
                reply = self.client.trigger(self._request(binding, envelope))
            except InvocationError as exc:
                error = {"code": exc.code, "message": exc.message}
                return {"status_code": 500, "headers": {}, "body": {"error": error}}
            reply = reply if isinstance(reply, dict) else {}
            return {
                "status_code": reply.get("status_code", 200),
                "headers": reply.get("headers") or {},
                "body": reply.get("body", {}),
            }
        error = {"code": "not_found", "message": f"no route for {method} {path}"}
        return {"status_code": 404, "headers": {}, "body": {"error": error}}


class TurnSiblings:
    """The siblings a turn's extraction meets under an engine: the harness, session-manager, the
    queue, the router and the state worker (the `sib` fixture of the bus tests)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.harness = FakeHarness(engine.url)
        self.sessions = FakeSessions(engine.url)
        self.queue = FakeQueue(engine.url)
        self.router = FakeRouter(engine.url)
        self.state = FakeState(engine.url)

    def close(self) -> None:
        for sibling in (self.harness, self.sessions, self.queue, self.router, self.state):
            sibling.close()


def finish_turn(sib: TurnSiblings, session_id: str, turn_id: str) -> str:
    """The harness's turn-completed for `turn_id`: the receipt of the job it queues."""
    sib.harness.wait_bound("harness::turn-completed")
    sib.harness.turn_completed(turn_event(session_id, turn_id))
    return f"memx-{session_id}-{turn_id}"


def as_agent(cli: Cli, function_id: str, payload: JSON, session_id: str = "s1") -> Any:
    """`function_id` called as an agent does inside turn t1 of `session_id` (the call's metadata
    names them)."""
    return cli.client.trigger(
        {
            "function_id": function_id,
            "payload": payload,
            "metadata": {"session_id": session_id, "turn_id": "t1"},
        }
    )
