"""An in-process double of the iii engine, speaking its WebSocket protocol.

No engine binary can run on our machines (reference ``iii-engine.md`` §4), so wire-level tests
run real ``iii-sdk`` clients against this server instead. It implements the mock-engine subset
of §5.3 over the message catalogue of §2.3 and the invocation and trigger semantics of §2.4/§2.5:

- ``workerregistered`` without ``features``, so the SDK turns observe and local dispatch off and
  every call crosses the wire (even a worker calling its own function);
- namespaces as engine 0.23 has them (``engine/src/engine/mod.rs``): a connection's registrations
  are buffered until its ``engine::workers::register`` fixes its namespace (or a grace period
  files them under ``default``); one live worker per ``(namespace, name)`` — a second one gets
  ``registrationrejected`` ``WORKER_NAMESPACE_CONFLICT`` and is disconnected, its buffered
  registrations dropped; functions are keyed by ``(namespace, function_id)`` and owned by one
  live connection — a second live one gets ``FUNCTION_NAMESPACE_CONFLICT`` for that id (its
  connection and other functions stay) and calls keep going to the first owner; an owner that has
  gone away is replaced; routing is strict: the call's ``namespace``, else ``default``, never a
  fallback (the SDK fills in its own namespace);
- function / trigger-type / binding registration, parking of bindings whose provider is absent,
  forwarding to providers and replay when a provider (re)registers (trigger types are keyed by
  id alone: every test runs in ``default``);
- request/response routing with fresh engine invocation ids (a ``void`` call's target gets
  one too, as from the engine, and its answer is dropped), ``void`` fan-out, ``enqueue``
  through the ``engine::queue::enqueue`` provider, ``_caller_worker_id`` injection;
- engine builtins ``engine::workers::register|list``, ``engine::functions::list|info``,
  ``engine::triggers::info`` and the configuration worker that real engines embed
  (``configuration::ensure|register|get|set|list|schema`` plus the engine-fanned-out
  ``configuration`` trigger type, §6.4), with the real engine's error codes, and its
  ``ttl_seconds`` (``config_ttl_s``): an entry whose last ``configuration`` binding naming it
  went away (unbound, or its owner disconnected) is deleted once that long passes without a new
  one, firing ``configuration:deleted``;
- the ``cron`` trigger type (the iii-cron worker's): bindings ``{expression,
  condition_function_id?}`` are validated (6 or 7 fields) and fired by the TEST with
  ``fire_cron()``, never by a clock, with the cron worker's payload ``{trigger, job_id,
  scheduled_time, actual_time}``.

The server runs its own asyncio loop in a daemon thread, so synchronous tests and SDK clients
(each with its own loop thread) can all use it. Engine state is mutated on that loop under a
``threading.Condition``; test hooks read it under the same lock and wait on it (no polling).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import threading
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

JSON = dict[str, Any]
T = TypeVar("T")

#: Trigger types the engine itself provides and fans out (bindings never go to a worker).
ENGINE_TRIGGER_TYPES = frozenset({"configuration", "cron"})
QUEUE_ENQUEUE = "engine::queue::enqueue"
WORKERS_REGISTER = "engine::workers::register"
DEFAULT_NAMESPACE = "default"
FUNCTION_NAMESPACE_CONFLICT = "FUNCTION_NAMESPACE_CONFLICT"
WORKER_NAMESPACE_CONFLICT = "WORKER_NAMESPACE_CONFLICT"
#: Messages whose effect depends on the connection's namespace: held until it is known.
BUFFERED = frozenset(
    {
        "registerfunction",
        "unregisterfunction",
        "registertriggertype",
        "unregistertriggertype",
        "registertrigger",
        "unregistertrigger",
    }
)
#: How long registrations wait for ``engine::workers::register`` (the engine's default is 5 s).
NAMESPACE_GRACE_S = 5.0
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CONFIG_ID = re.compile(r"^[a-z0-9_-]{1,64}$")
_ENV_VAR = re.compile(r"\$\{([^}:]+)(?::([^}]*))?\}")
_LONE_PLACEHOLDER = re.compile(r"^\s*\$\{[^}]*\}\s*$")


class EngineError(Exception):
    """A builtin's failure, answered to the caller as ``{code, message}`` like the engine does."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def body(self) -> JSON:
        return {"code": self.code, "message": self.message}


# ── configuration worker (built into the engine, reference §6.4) ───────────────────────────


def expand_env(value: Any) -> tuple[Any, list[str]]:
    """``${VAR:default}`` expansion as the engine's configuration store reads values.

    A string that is one lone placeholder is re-typed (``"${PORT:3111}"`` → ``3111``); names with
    no env value and no default are returned so ``get`` can fail with ``EXPAND_FAILED``.
    """
    missing: list[str] = []

    def leaf(text: str) -> Any:
        def sub(match: re.Match[str]) -> str:
            env = os.environ.get(match.group(1))
            if env is not None:
                return env
            if match.group(2) is not None:
                return match.group(2)
            missing.append(match.group(1))
            return match.group(0)

        out = _ENV_VAR.sub(sub, text)
        if _LONE_PLACEHOLDER.match(text) and out.strip():
            with contextlib.suppress(ValueError):
                return json.loads(out.strip())
        return out

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return leaf(node)
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        return node

    return walk(value), missing


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def schema_errors(value: Any, schema: Any, path: str = "$") -> list[str]:
    """A small JSON Schema subset (type, enum, const, bounds, properties, required,
    additionalProperties, items, anyOf); unknown keywords are accepted, never rejected."""
    if not isinstance(schema, dict):
        return []
    errors = _scalar_errors(value, schema, path)
    if errors:
        return errors
    if isinstance(value, dict):
        errors += _object_errors(value, schema, path)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{index}]")
    if "anyOf" in schema and not any(not schema_errors(value, s, path) for s in schema["anyOf"]):
        errors.append(f"{path}: matches none of anyOf")
    return errors


def _scalar_errors(value: Any, schema: JSON, path: str) -> list[str]:
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_TYPES.get(name, lambda _v: True)(value) for name in names):
            return [f"{path}: {value!r} is not of type {expected}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{path}: {value!r} is not one of {schema['enum']}"]
    if "const" in schema and value != schema["const"]:
        return [f"{path}: {value!r} is not {schema['const']!r}"]
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and "minimum" in schema and value < schema["minimum"]:
        return [f"{path}: {value} is less than {schema['minimum']}"]
    if number and "maximum" in schema and value > schema["maximum"]:
        return [f"{path}: {value} is greater than {schema['maximum']}"]
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        return [f"{path}: string shorter than {schema['minLength']}"]
    return []


def _object_errors(value: JSON, schema: JSON, path: str) -> list[str]:
    errors = [
        f"{path}: {key!r} is required" for key in schema.get("required", []) if key not in value
    ]
    properties: JSON = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            errors += schema_errors(item, properties[key], f"{path}.{key}")
        elif extra is False:
            errors.append(f"{path}: additional property {key!r} is not allowed")
        elif isinstance(extra, dict):
            errors += schema_errors(item, extra, f"{path}.{key}")
    return errors


class ConfigStore:
    """The engine's configuration registry: entries ``{id, name, description, schema, value,
    metadata}`` and the events each mutation fans out (``configuration:registered|updated``).

    Mirrors the engine's semantics: ``ensure`` seeds only a null/absent value, ``register``
    replaces the definition and overwrites the value only when ``initial_value`` is given,
    ``set`` on an unknown id is ``NOT_REGISTERED``, ``get`` on one is ``NOT_FOUND``.
    """

    def __init__(self) -> None:
        self.entries: dict[str, JSON] = {}

    @staticmethod
    def _check_id(config_id: Any) -> str:
        if not isinstance(config_id, str) or not _CONFIG_ID.match(config_id):
            raise EngineError(
                "INVALID_ID",
                f"invalid configuration id '{config_id}': must match [a-z0-9_-]{{1,64}}",
            )
        return config_id

    @staticmethod
    def _validate(value: Any, schema: Any) -> None:
        applied, missing = expand_env(value)
        errors = [] if missing else schema_errors(applied, schema)
        if errors:
            raise EngineError("SCHEMA_INVALID", "schema validation failed: " + "; ".join(errors))

    @staticmethod
    def event(entry: JSON, event_type: str, old_value: Any, new_value: Any) -> JSON:
        payload = {
            "type": "configuration",
            "event_type": event_type,
            "id": entry["id"],
            "name": entry["name"],
            "description": entry["description"],
            "schema": entry["schema"],
            "old_value": None if old_value is None else expand_env(old_value)[0],
            "new_value": None if new_value is None else expand_env(new_value)[0],
        }
        if entry.get("metadata") is not None:
            payload["metadata"] = entry["metadata"]
        return payload

    def _define(self, data: JSON, value: Any) -> JSON:
        entry = {
            "id": data["id"],
            "name": str(data.get("name", "")),
            "description": str(data.get("description", "")),
            "schema": data.get("schema"),
            "value": value,
        }
        if data.get("metadata") is not None:
            entry["metadata"] = data["metadata"]
        return entry

    def register(self, data: JSON, events: list[JSON]) -> JSON:
        config_id = self._check_id(data.get("id"))
        prior = self.entries.get(config_id)
        if data.get("initial_value") is not None:
            self._validate(data["initial_value"], data.get("schema"))
            value = data["initial_value"]
        else:
            value = prior["value"] if prior else None
        entry = self._define(data, value)
        self.entries[config_id] = entry
        kind = "configuration:updated" if prior else "configuration:registered"
        events.append(self.event(entry, kind, prior["value"] if prior else None, value))
        return copy.deepcopy(entry)

    def ensure(self, data: JSON, events: list[JSON]) -> JSON:
        config_id = self._check_id(data.get("id"))
        prior = self.entries.get(config_id)
        stored = prior["value"] if prior else None
        seed = data.get("initial_value")
        if stored is not None:
            action, value = "preserved", stored
        elif seed is not None:
            self._validate(seed, data.get("schema"))
            action, value = "seeded", seed
        else:
            action, value = "registered", None
        entry = self._define(data, value)
        self.entries[config_id] = entry
        kind = "configuration:updated" if prior else "configuration:registered"
        events.append(self.event(entry, kind, stored, value))
        return {"action": action, "entry": copy.deepcopy(entry)}

    def set(self, data: JSON, events: list[JSON]) -> JSON:
        config_id = self._check_id(data.get("id"))
        entry = self.entries.get(config_id)
        if entry is None:
            raise EngineError(
                "NOT_REGISTERED",
                f"configuration '{config_id}' is not registered; "
                "call configuration::register first",
            )
        if entry.get("schema") is None:
            raise EngineError("SCHEMA_UNAVAILABLE", f"configuration '{config_id}' has no schema")
        value = data.get("value")
        self._validate(value, entry["schema"])
        old_value = entry["value"]
        entry["value"] = value
        events.append(self.event(entry, "configuration:updated", old_value, value))
        return {"old_value": copy.deepcopy(old_value), "new_value": copy.deepcopy(value)}

    def delete(self, config_id: str, events: list[JSON]) -> None:
        """Drop an entry (the TTL expiry, or its file deleted under the fs adapter); an unknown
        id is a no-op, as ``expire_configuration`` has it."""
        entry = self.entries.pop(config_id, None)
        if entry is not None:
            events.append(self.event(entry, "configuration:deleted", entry["value"], None))

    def get(self, data: JSON) -> JSON:
        entry = self._lookup(data)
        if data.get("raw"):
            return {"id": entry["id"], "value": copy.deepcopy(entry["value"])}
        applied, missing = expand_env(entry["value"])
        if missing:
            raise EngineError(
                "EXPAND_FAILED",
                f"configuration '{entry['id']}' references unset environment variable(s) "
                f"with no default: {', '.join(missing)}",
            )
        errors = schema_errors(applied, entry["schema"]) if entry.get("schema") else []
        if errors:
            raise EngineError("SCHEMA_INVALID", "schema validation failed: " + "; ".join(errors))
        return {"id": entry["id"], "value": applied}

    def schema(self, data: JSON) -> JSON:
        return self._view(self._lookup(data))

    def list(self) -> JSON:
        return {"configurations": [self._view(self.entries[key]) for key in sorted(self.entries)]}

    def _lookup(self, data: JSON) -> JSON:
        entry = self.entries.get(str(data.get("id")))
        if entry is None:
            raise EngineError("NOT_FOUND", f"configuration '{data.get('id')}' not found")
        return entry

    @staticmethod
    def _view(entry: JSON) -> JSON:
        return copy.deepcopy({key: val for key, val in entry.items() if key != "value"})


def cron_config_error(config: Any) -> str | None:
    """Why the cron worker refuses a binding config, or None (engine 0.23 ``cron.rs``): only a
    missing or empty ``expression``, or one the ``cron`` crate cannot parse (6 or 7 fields,
    seconds first); other keys are ignored, as the engine reads only the two it knows."""
    expression = config.get("expression") if isinstance(config, dict) else None
    if not isinstance(expression, str) or not expression:
        return "Cron expression is required"
    fields = len(expression.split())
    if fields not in (6, 7):
        return (
            f"Invalid cron expression '{expression}': expected 6 or 7 fields (seconds first), "
            f"got {fields}"
        )
    return None


def _config_binding_matches(config: Any, event: JSON) -> bool:
    config = config if isinstance(config, dict) else {}
    wanted_id = config.get("configuration_id")
    if wanted_id is not None and wanted_id != event["id"]:
        return False
    event_types = config.get("event_types")
    return not event_types or event["event_type"] in event_types


def _watched_config(binding: _Binding) -> str | None:
    """The configuration id a ``configuration`` binding names (the TTL counts those), else None."""
    config = binding.msg.get("config")
    if binding.trigger_type != "configuration" or not isinstance(config, dict):
        return None
    watched = config.get("configuration_id")
    return watched if isinstance(watched, str) else None


# ── connection-level state ─────────────────────────────────────────────────────────────────


@dataclass(eq=False)
class _Conn:
    ws: ServerConnection
    worker_id: str
    name: str | None = None
    alive: bool = True
    #: fixed by ``engine::workers::register`` (or the grace period); None while unknown
    namespace: str | None = None
    #: the namespace being applied to the buffered registrations (while they drain)
    resolving: str | None = None
    #: registration messages waiting for the namespace, in arrival order
    buffer: list[JSON] = field(default_factory=list)
    grace: asyncio.TimerHandle | None = None

    @property
    def label(self) -> str:
        return self.name or self.worker_id

    @property
    def ns(self) -> str:
        return self.namespace or self.resolving or DEFAULT_NAMESPACE


@dataclass(eq=False)
class _Binding:
    msg: JSON
    owner: _Conn
    #: parked (no provider) | delivered (sent to provider) | active (acked) | rejected
    state: str = "parked"
    provider: _Conn | None = None
    error: JSON | None = None

    @property
    def trigger_type(self) -> str:
        return str(self.msg.get("trigger_type", ""))


@dataclass(eq=False)
class _Pending:
    caller: _Conn | None
    caller_invocation_id: str | None
    caller_function_id: str
    target: _Conn
    #: set when this call hands an ``enqueue`` to the queue provider
    receipt: str | None = None


def _halted(pending: _Pending) -> JSON:
    """What a caller gets when the worker serving its call goes away: the engine halts the
    invocation (`halt_invocation`); an enqueue wraps that failure of the queue provider as its
    own `enqueue_error` ("<code>: <message>")."""
    if pending.receipt:
        return {"code": "enqueue_error", "message": "invocation_stopped: Invocation stopped"}
    return {"code": "invocation_stopped", "message": "Invocation stopped"}


def _not_found(function_id: str, namespace: str | None, elsewhere: Sequence[str] = ()) -> JSON:
    hint = f" It is registered in namespace(s): {', '.join(elsewhere)}." if elsewhere else ""
    return {
        "code": "function_not_found",
        "message": f"Function {function_id} not found in namespace "
        f"{namespace or DEFAULT_NAMESPACE}.{hint}",
    }


def _inject_caller(data: Any, caller: _Conn) -> Any:
    if isinstance(data, dict):
        return {**data, "_caller_worker_id": caller.worker_id}
    return data


class EngineDouble:
    """The engine double: ``with EngineDouble() as engine: connect to engine.url``.

    Test hooks (all thread-safe, for the test thread): ``frames``, ``functions()``,
    ``wait_function``, ``registration_count``, ``bindings``, ``wait_binding``, ``rejections``,
    ``wait_rejection``, ``workers``, ``wait_worker``, ``connection_count``, ``wait_frame``,
    ``drop_connections``, ``drop_worker``, ``holding_connections``, ``set_delay``,
    ``set_config``, ``config_value``, ``fire_cron``, ``errors``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        namespace_grace_s: float = NAMESPACE_GRACE_S,
        config_ttl_s: float = 0.0,
    ) -> None:
        self._host = host
        self._grace_s = namespace_grace_s
        #: the configuration worker's ``ttl_seconds`` (0, its default, keeps entries for ever)
        self._config_ttl_s = config_ttl_s
        #: configuration id → the pending expiry of an entry no binding names any more
        self._config_expiry: dict[str, asyncio.TimerHandle] = {}
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._closed = False
        #: while set, new worker sockets are refused at the handshake (an engine still booting)
        self._holding = False
        self._port = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._conns: list[_Conn] = []
        #: (namespace, function_id) → (owner, registerfunction message)
        self._functions: dict[tuple[str, str], tuple[_Conn, JSON]] = {}
        self._registrations: Counter[str] = Counter()
        #: (namespace, worker name) → the live connection holding that name
        self._names: dict[tuple[str, str], _Conn] = {}
        self._trigger_types: dict[str, tuple[_Conn, JSON]] = {}
        self._bindings: dict[str, _Binding] = {}
        self._pending: dict[str, _Pending] = {}
        self._delays: dict[str, float] = {}
        self._frames: list[tuple[str, _Conn, JSON]] = []
        self._workers: list[JSON] = []
        self._rejections: list[JSON] = []
        self._errors: list[str] = []
        #: invocations the engine itself sends (cron firings): invocation id → its answer
        self._engine_calls: dict[str, asyncio.Future[JSON]] = {}
        self.config = ConfigStore()
        self._builtins: dict[str, Callable[[_Conn, JSON, list[JSON]], Any]] = {
            WORKERS_REGISTER: lambda _c, _d, _e: None,  # handled by `_on_worker_announce`
            "engine::workers::list": lambda _c, _d, _e: {"workers": copy.deepcopy(self._workers)},
            "engine::functions::list": self._b_functions_list,
            "engine::functions::info": self._b_functions_info,
            "engine::triggers::info": self._b_triggers_info,
            "configuration::register": lambda _c, d, e: self.config.register(d, e),
            "configuration::ensure": lambda _c, d, e: self.config.ensure(d, e),
            "configuration::set": lambda _c, d, e: self.config.set(d, e),
            "configuration::get": lambda _c, d, _e: self.config.get(d),
            "configuration::schema": lambda _c, d, _e: self.config.schema(d),
            "configuration::list": lambda _c, _d, _e: self.config.list(),
        }
        self._dispatch: dict[str, Callable[[_Conn, JSON], Coroutine[Any, Any, None]]] = {
            "registerfunction": self._on_register_function,
            "unregisterfunction": self._on_unregister_function,
            "registertriggertype": self._on_register_trigger_type,
            "unregistertriggertype": self._on_unregister_trigger_type,
            "registertrigger": self._on_register_trigger,
            "unregistertrigger": self._on_unregister_trigger,
            "triggerregistrationresult": self._on_trigger_registration_result,
            "invokefunction": self._on_invoke,
            "invocationresult": self._on_invocation_result,
            "reattach": self._on_reattach,
        }

    # ── lifecycle ──────────────────────────────────────────────────────────────────────────

    def __enter__(self) -> EngineDouble:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("engine double is not started")
        return f"ws://{self._host}:{self._port}"

    def start(self) -> EngineDouble:
        if self._thread is not None:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="engine-double", daemon=True
        )
        self._thread.start()
        self._server = self._call(self._start_server())
        self._port = int(next(iter(self._server.sockets)).getsockname()[1])
        return self

    async def _start_server(self) -> Server:
        return await serve(
            self._handle,
            self._host,
            0,
            max_size=MAX_MESSAGE_BYTES,
            process_request=self._admit,
        )

    def _admit(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse a worker's handshake (503) while ``holding_connections`` is in force: its SDK
        counts a failed attempt and retries after its backoff, as against an engine restarting."""
        with self._cond:
            holding = self._holding
        if holding and not request.path.rstrip("/").endswith("/otel"):
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "engine double holding\n")
        return None

    def close(self) -> None:
        """Close every socket and the server, stop the loop and join its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._shutdown(), timeout=15)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()

    async def _shutdown(self) -> None:
        for expiry in self._config_expiry.values():
            expiry.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close(close_connections=True)
            await self._server.wait_closed()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        if self._loop is None or self._loop.is_closed():
            coro.close()
            raise RuntimeError("engine double is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ── connection handling ────────────────────────────────────────────────────────────────

    async def _handle(self, ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else "/"
        if path.rstrip("/").endswith("/otel"):
            with contextlib.suppress(ConnectionClosed):
                async for _frame in ws:
                    pass
            return
        conn = _Conn(ws=ws, worker_id=str(uuid.uuid4()))
        with self._cond:
            self._conns.append(conn)
            self._cond.notify_all()
        loop = asyncio.get_running_loop()
        conn.grace = loop.call_later(
            self._grace_s, lambda: self._spawn(self._resolve(conn, DEFAULT_NAMESPACE))
        )
        try:
            await self._send(
                conn,
                {
                    "type": "workerregistered",
                    "worker_id": conn.worker_id,
                    "reattach_token": str(uuid.uuid4()),
                },
            )
            async for raw in ws:
                await self._receive(conn, raw)
        except ConnectionClosed:
            pass
        finally:
            await self._disconnect(conn)

    async def _receive(self, conn: _Conn, raw: str | bytes) -> None:
        if isinstance(raw, bytes) or not conn.alive:
            return  # OTLP frames on the main socket, or a retired connection's tail
        try:
            msg = json.loads(raw)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        self._record("in", conn, msg)
        kind = str(msg.get("type"))
        if kind in BUFFERED and conn.namespace is None:
            conn.buffer.append(msg)  # applied once the namespace is known, in order
            return
        await self._handle_message(conn, msg)

    async def _handle_message(self, conn: _Conn, msg: JSON) -> None:
        handler = self._dispatch.get(str(msg.get("type")))
        if handler is None:
            return  # unknown types are ignored, like the engine does
        try:
            await handler(conn, msg)
        except Exception:
            with self._cond:
                self._errors.append(traceback.format_exc())
                self._cond.notify_all()

    async def _resolve(self, conn: _Conn, namespace: str) -> None:
        """Fix the connection's namespace and apply what it sent before, in arrival order.
        Messages arriving meanwhile join the back of the queue, so nothing overtakes."""
        if conn.namespace is not None or conn.resolving is not None or not conn.alive:
            return
        if conn.grace is not None:
            conn.grace.cancel()
            conn.grace = None
        conn.resolving = namespace
        while conn.buffer and conn.alive:
            await self._handle_message(conn, conn.buffer.pop(0))
        conn.namespace = namespace

    def _record(self, direction: str, conn: _Conn, msg: JSON) -> None:
        with self._cond:
            self._frames.append((direction, conn, copy.deepcopy(msg)))
            self._cond.notify_all()

    async def _send(self, conn: _Conn, msg: JSON) -> None:
        if not conn.alive:
            return
        self._record("out", conn, msg)
        with contextlib.suppress(ConnectionClosed):
            await conn.ws.send(json.dumps(msg))

    async def _answer(
        self,
        caller: _Conn | None,
        invocation_id: str | None,
        function_id: str,
        *,
        result: Any = None,
        error: JSON | None = None,
    ) -> None:
        if caller is None or not invocation_id:
            return
        msg: JSON = {
            "type": "invocationresult",
            "invocation_id": invocation_id,
            "function_id": function_id,
        }
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        await self._send(caller, msg)

    async def _disconnect(self, conn: _Conn) -> None:
        """Drop what the connection owned; park bindings of its trigger types; fail its calls."""
        with self._cond:
            if not conn.alive:
                return
            conn.alive = False
            conn.buffer.clear()  # registrations still waiting die with the connection
            if conn.grace is not None:
                conn.grace.cancel()
            self._conns = [c for c in self._conns if c is not conn]
            for key in [k for k, (owner, _) in self._functions.items() if owner is conn]:
                del self._functions[key]
            for key in [k for k, owner in self._names.items() if owner is conn]:
                del self._names[key]
            for tid in [t for t, (owner, _) in self._trigger_types.items() if owner is conn]:
                del self._trigger_types[tid]
            for binding in self._bindings.values():
                if binding.provider is conn:
                    binding.state, binding.provider = "parked", None
            owned = [b for b in self._bindings.values() if b.owner is conn]
            for binding in owned:
                del self._bindings[str(binding.msg.get("id"))]
            failed = [p for p in self._pending.values() if p.target is conn]
            self._pending = {
                key: p
                for key, p in self._pending.items()
                if p.target is not conn and p.caller is not conn
            }
            self._cond.notify_all()
        for binding in owned:
            if binding.provider is not None:
                await self._send(binding.provider, self._unregister_msg(binding))
            self._config_binding_gone(binding)
        for pending in failed:
            error = _halted(pending)
            await self._answer(
                pending.caller,
                pending.caller_invocation_id,
                pending.caller_function_id,
                error=error,
            )

    @staticmethod
    def _unregister_msg(binding: _Binding) -> JSON:
        """What the engine tells a provider (``Message::UnregisterTrigger``): the id and the
        type only — no function, config or metadata (the SDK hands its handler empty ones)."""
        return {
            "type": "unregistertrigger",
            "id": binding.msg.get("id"),
            "trigger_type": binding.trigger_type,
        }

    # ── registration messages ──────────────────────────────────────────────────────────────

    async def _on_reattach(self, conn: _Conn, msg: JSON) -> None:
        previous = msg.get("previous_worker_id")
        with self._cond:
            stale = [c for c in self._conns if c.worker_id == previous and c is not conn]
        for old in stale:  # the engine retires the old connection before the replay lands
            await self._disconnect(old)
            self._spawn(old.ws.close())

    async def _on_register_function(self, conn: _Conn, msg: JSON) -> None:
        """Claim ``(namespace, id)`` (``claim_in``): refused while another LIVE connection owns
        it — only that function, the connection stays — and taken over from one that left."""
        function_id = str(msg.get("id"))
        key = (conn.ns, function_id)
        with self._cond:
            owner = self._functions.get(key)
            builtin = conn.ns == DEFAULT_NAMESPACE and function_id in self._builtins
            reserved = function_id.startswith("engine::") and conn.ns != DEFAULT_NAMESPACE
            taken = owner is not None and owner[0] is not conn and owner[0].alive
            if not (builtin or reserved or taken):
                self._functions[key] = (conn, copy.deepcopy(msg))
                self._registrations[function_id] += 1
            self._cond.notify_all()
        if builtin or reserved or taken:
            rejection: JSON = {
                "type": "registrationrejected",
                "code": FUNCTION_NAMESPACE_CONFLICT,
                "namespace": conn.ns,
                "function_id": function_id,
                "owner_worker_id": owner[0].worker_id if taken and owner is not None else "",
            }
            await self._send(conn, rejection)

    async def _on_unregister_function(self, conn: _Conn, msg: JSON) -> None:
        key = (conn.ns, str(msg.get("id")))
        with self._cond:
            owner = self._functions.get(key)
            if owner is not None and owner[0] is conn:  # release only if it is the owner
                del self._functions[key]
            self._cond.notify_all()

    async def _on_register_trigger_type(self, conn: _Conn, msg: JSON) -> None:
        type_id = str(msg.get("id"))
        if type_id in ENGINE_TRIGGER_TYPES:
            return  # engine-provided; a worker cannot take it over
        with self._cond:
            self._trigger_types[type_id] = (conn, copy.deepcopy(msg))
            replay = [
                b
                for b in self._bindings.values()
                if b.trigger_type == type_id and b.provider is not conn
            ]
            for binding in replay:
                binding.state, binding.provider, binding.error = "delivered", conn, None
            self._cond.notify_all()
        for binding in replay:
            await self._send(conn, binding.msg)

    async def _on_unregister_trigger_type(self, conn: _Conn, msg: JSON) -> None:
        type_id = str(msg.get("id"))
        with self._cond:
            owner = self._trigger_types.get(type_id)
            if owner is None or owner[0] is not conn:
                return
            del self._trigger_types[type_id]
            for binding in self._bindings.values():
                if binding.trigger_type == type_id:
                    binding.state, binding.provider = "parked", None
            self._cond.notify_all()

    async def _on_register_trigger(self, conn: _Conn, msg: JSON) -> None:
        binding = _Binding(msg=copy.deepcopy(msg), owner=conn)
        refusal = cron_config_error(msg.get("config")) if binding.trigger_type == "cron" else None
        if refusal is not None:
            error = {"code": "trigger_registration_failed", "message": refusal}
            with self._cond:
                binding.state, binding.error = "rejected", error
                self._bindings[str(msg.get("id"))] = binding
                self._rejections.append({**copy.deepcopy(msg), "error": error})
                self._cond.notify_all()
            result = {
                "type": "triggerregistrationresult",
                "id": msg.get("id"),
                "trigger_type": binding.trigger_type,
                "function_id": msg.get("function_id"),
                "error": error,
            }
            await self._send(conn, result)
            return
        watched = _watched_config(binding)
        expiry = self._config_expiry.pop(watched, None) if watched is not None else None
        if expiry is not None:
            expiry.cancel()  # a new binding naming the entry keeps it
        with self._cond:
            self._bindings[str(msg.get("id"))] = binding
            if binding.trigger_type in ENGINE_TRIGGER_TYPES:
                binding.state = "active"
            elif binding.trigger_type in self._trigger_types:
                binding.state = "delivered"
                binding.provider = self._trigger_types[binding.trigger_type][0]
            self._cond.notify_all()
        if binding.provider is not None:
            await self._send(binding.provider, binding.msg)

    async def _on_unregister_trigger(self, conn: _Conn, msg: JSON) -> None:
        with self._cond:
            binding = self._bindings.get(str(msg.get("id")))
            if binding is None or binding.owner is not conn:
                return
            del self._bindings[str(msg.get("id"))]
            self._cond.notify_all()
        if binding.provider is not None:
            await self._send(binding.provider, self._unregister_msg(binding))
        self._config_binding_gone(binding)

    async def _on_trigger_registration_result(self, conn: _Conn, msg: JSON) -> None:
        error = msg.get("error")
        with self._cond:
            binding = self._bindings.get(str(msg.get("id")))
            if binding is None or binding.provider is not conn:
                return
            if error:
                binding.state, binding.provider, binding.error = "rejected", None, error
                self._rejections.append({**copy.deepcopy(binding.msg), "error": error})
            else:
                binding.state, binding.error = "active", None
            self._cond.notify_all()
        if error:
            await self._send(binding.owner, msg)

    # ── invocations ────────────────────────────────────────────────────────────────────────

    async def _on_invoke(self, conn: _Conn, msg: JSON) -> None:
        function_id = str(msg.get("function_id", ""))
        raw_action = msg.get("action")
        action: JSON = raw_action if isinstance(raw_action, dict) else {}
        builtin = self._builtins.get(function_id)
        requested = msg.get("namespace")
        if function_id == WORKERS_REGISTER:
            await self._on_worker_announce(conn, msg)
        elif builtin is not None and requested in (None, DEFAULT_NAMESPACE):
            await self._run_builtin(conn, msg, builtin)
        elif action.get("type") == "enqueue":
            await self._enqueue(conn, msg, str(action.get("queue", "")))
        else:
            with self._cond:
                delay = self._delays.get(function_id, 0.0)
            if delay > 0:
                self._spawn(self._forward(conn, msg, delay))
            else:
                await self._forward(conn, msg)

    async def _forward(self, caller: _Conn, msg: JSON, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        function_id = str(msg["function_id"])
        invocation_id = msg.get("invocation_id")
        void = (msg.get("action") or {}).get("type") == "void" or not invocation_id
        out: JSON = {
            "type": "invokefunction",
            "function_id": function_id,
            "data": _inject_caller(msg.get("data"), caller),
        }
        for key in ("metadata", "traceparent", "baggage"):
            if msg.get(key) is not None:
                out[key] = msg[key]
        namespace = msg.get("namespace") or DEFAULT_NAMESPACE  # never the caller's: strict
        with self._cond:
            owner = self._functions.get((namespace, function_id))
            target = owner[0] if owner is not None else None
            elsewhere = sorted(ns for ns, fid in self._functions if fid == function_id)
            if target is not None:
                # A void call too reaches its target with an invocation id (the engine's
                # `handle_invocation` makes one): the target answers and the engine drops it.
                out["invocation_id"] = str(uuid.uuid4())
                self._pending[out["invocation_id"]] = _Pending(
                    caller, None if void else invocation_id, function_id, target
                )
        if target is None:
            if not void:
                error = _not_found(function_id, namespace, elsewhere)
                await self._answer(caller, invocation_id, function_id, error=error)
            return
        await self._send(target, out)

    async def _enqueue(self, caller: _Conn, msg: JSON, queue: str) -> None:
        function_id = str(msg["function_id"])
        invocation_id = msg.get("invocation_id")
        receipt = str(uuid.uuid4())
        envelope: JSON = {
            "queue": queue,
            "function_id": function_id,
            "data": msg.get("data"),
            "messageReceiptId": receipt,
        }
        for key in ("traceparent", "baggage", "namespace"):
            if msg.get(key) is not None:
                envelope[key] = msg[key]
        out: JSON = {"type": "invokefunction", "function_id": QUEUE_ENQUEUE, "data": envelope}
        with self._cond:
            owner = self._functions.get((DEFAULT_NAMESPACE, QUEUE_ENQUEUE))
            if owner is not None and invocation_id:
                out["invocation_id"] = str(uuid.uuid4())
                self._pending[out["invocation_id"]] = _Pending(
                    caller, invocation_id, function_id, owner[0], receipt=receipt
                )
        if owner is None:
            error = {
                "code": "enqueue_error",
                "message": f"Failed to enqueue to queue '{queue}': {QUEUE_ENQUEUE} not found",
            }
            await self._answer(caller, invocation_id, function_id, error=error)
            return
        await self._send(owner[0], out)

    async def _on_invocation_result(self, conn: _Conn, msg: JSON) -> None:
        engine_call = self._engine_calls.pop(str(msg.get("invocation_id")), None)
        if engine_call is not None:
            if not engine_call.done():
                engine_call.set_result(copy.deepcopy(msg))
            return
        with self._cond:
            pending = self._pending.pop(str(msg.get("invocation_id")), None)
        if pending is None:
            return
        error = msg.get("error")
        if pending.receipt is not None:
            if error:
                reason = error.get("message") if isinstance(error, dict) else str(error)
                error = {"code": "enqueue_error", "message": str(reason)}
            result: Any = {"messageReceiptId": pending.receipt}
        else:
            result = msg.get("result")
        await self._answer(
            pending.caller,
            pending.caller_invocation_id,
            pending.caller_function_id,
            result=result,
            error=error or None,
        )

    async def _run_builtin(
        self, conn: _Conn, msg: JSON, builtin: Callable[[_Conn, JSON, list[JSON]], Any]
    ) -> None:
        function_id = str(msg["function_id"])
        raw_data = msg.get("data")
        data: JSON = raw_data if isinstance(raw_data, dict) else {}
        events: list[JSON] = []
        try:
            with self._cond:
                result = builtin(conn, data, events)
                self._cond.notify_all()
        except EngineError as exc:
            await self._answer(conn, msg.get("invocation_id"), function_id, error=exc.body())
            return
        await self._answer(conn, msg.get("invocation_id"), function_id, result=result)
        for event in events:
            await self._fire_configuration(event)

    async def _fire_configuration(self, event: JSON) -> None:
        """Engine-side fan-out of the ``configuration`` trigger type: one void call per match."""
        with self._cond:
            targets = [
                (
                    self._functions.get(
                        (b.msg.get("namespace") or DEFAULT_NAMESPACE, str(b.msg.get("function_id")))
                    ),
                    b.msg.get("metadata"),
                )
                for b in self._bindings.values()
                if b.trigger_type == "configuration"
                and _config_binding_matches(b.msg.get("config"), event)
            ]
        for owner, metadata in targets:
            if owner is None:
                continue
            # `engine.call` (an invocation id; the answer is only logged by the engine)
            out: JSON = {
                "type": "invokefunction",
                "function_id": owner[1]["id"],
                "data": event,
                "invocation_id": str(uuid.uuid4()),
            }
            if metadata is not None:
                out["metadata"] = metadata
            with self._cond:
                self._pending[out["invocation_id"]] = _Pending(
                    None, None, str(owner[1]["id"]), owner[0]
                )
            await self._send(owner[0], out)

    def _config_binding_gone(self, binding: _Binding) -> None:
        """The configuration worker's TTL (``schedule_ttl_expiry``): when the last binding naming
        an entry is gone, the entry is deleted after ``config_ttl_s`` unless one comes back."""
        watched = _watched_config(binding)
        if watched is None or self._config_ttl_s <= 0 or watched in self._config_expiry:
            return
        with self._cond:
            if any(_watched_config(b) == watched for b in self._bindings.values()):
                return
        loop = asyncio.get_running_loop()
        self._config_expiry[watched] = loop.call_later(
            self._config_ttl_s, lambda: self._spawn(self._expire_config(watched))
        )

    async def _expire_config(self, config_id: str) -> None:
        self._config_expiry.pop(config_id, None)
        events: list[JSON] = []
        with self._cond:
            self.config.delete(config_id, events)
            self._cond.notify_all()
        for event in events:
            await self._fire_configuration(event)

    # ── builtins ───────────────────────────────────────────────────────────────────────────

    async def _on_worker_announce(self, conn: _Conn, msg: JSON) -> None:
        """``engine::workers::register``: fixes the connection's namespace, claims its name
        (``claim_worker_name``) and applies the registrations it sent before. A name a different
        LIVE connection holds is fatal: rejected, disconnected, its registrations never applied."""
        raw = msg.get("data")
        data: JSON = raw if isinstance(raw, dict) else {}
        namespace = str(data.get("namespace") or DEFAULT_NAMESPACE)
        name = data.get("name")
        with self._cond:
            holder = self._names.get((namespace, name)) if isinstance(name, str) else None
            rejected = holder is not None and holder is not conn and holder.alive
            if not rejected:
                conn.name = str(name or conn.worker_id)
                if isinstance(name, str):
                    self._names[(namespace, name)] = conn
                self._workers.append({**copy.deepcopy(data), "worker_id": conn.worker_id})
            self._cond.notify_all()
        if rejected:
            assert holder is not None
            rejection: JSON = {
                "type": "registrationrejected",
                "code": WORKER_NAMESPACE_CONFLICT,
                "namespace": namespace,
                "worker_name": name,
                "owner_worker_id": holder.worker_id,
            }
            await self._send(conn, rejection)
            await self._disconnect(conn)
            self._spawn(conn.ws.close(1008, "worker name already held in this namespace"))
            return
        await self._answer(conn, msg.get("invocation_id"), WORKERS_REGISTER, result={})
        await self._resolve(conn, namespace)

    def _function_view(self, msg: JSON) -> JSON:
        return {
            "function_id": msg.get("id"),
            "description": msg.get("description"),
            "request_format": msg.get("request_format"),
            "response_format": msg.get("response_format"),
            "metadata": msg.get("metadata"),
        }

    def _b_functions_list(self, _conn: _Conn, _data: JSON, _events: list[JSON]) -> JSON:
        views = [
            {**self._function_view(msg), "namespace": namespace}
            for (namespace, _fid), (_owner, msg) in self._functions.items()
        ]
        return {"functions": copy.deepcopy(views)}

    def _b_functions_info(self, _conn: _Conn, data: JSON, _events: list[JSON]) -> JSON:
        function_id = str(data.get("function_id"))
        namespace = str(data.get("namespace") or DEFAULT_NAMESPACE)
        owner = self._functions.get((namespace, function_id))
        if owner is None:
            error = _not_found(function_id, namespace)
            raise EngineError(error["code"], error["message"])
        return copy.deepcopy(self._function_view(owner[1]))

    def _b_triggers_info(self, _conn: _Conn, data: JSON, _events: list[JSON]) -> JSON:
        wanted = data.get("trigger_type")
        live = [
            b
            for b in self._bindings.values()
            if b.state == "active" and (wanted is None or b.trigger_type == wanted)
        ]
        return {"trigger_type": wanted, "instance_count": len(live)}

    # ── test hooks ─────────────────────────────────────────────────────────────────────────

    def _wait(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        with self._cond:
            found = self._cond.wait_for(predicate, timeout)
        if not found:
            raise TimeoutError(f"engine double: no {what} within {timeout}s")
        return found

    @property
    def frames(self) -> list[tuple[str, str, JSON]]:
        """Every frame so far as ``(direction "in"|"out", worker name or id, message)``.

        The worker name is the one its ``engine::workers::register`` gave (that call may arrive
        after the worker's first frames), else the engine-assigned worker id.
        """
        with self._cond:
            return [(direction, conn.label, msg) for direction, conn, msg in self._frames]

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions the double raised while handling frames (should be empty)."""
        with self._cond:
            return list(self._errors)

    @property
    def workers(self) -> list[JSON]:
        """The ``engine::workers::register`` data of every connection, in arrival order."""
        with self._cond:
            return copy.deepcopy(self._workers)

    @property
    def rejections(self) -> list[JSON]:
        """Bindings a provider refused: the ``registertrigger`` message plus its ``error``."""
        with self._cond:
            return copy.deepcopy(self._rejections)

    def functions(self, namespace: str = DEFAULT_NAMESPACE) -> dict[str, JSON]:
        """Live functions of a namespace: id → the ``registerfunction`` message as received."""
        with self._cond:
            return {
                fid: copy.deepcopy(msg)
                for (ns, fid), (_owner, msg) in self._functions.items()
                if ns == namespace
            }

    def owner(self, function_id: str, namespace: str = DEFAULT_NAMESPACE) -> str | None:
        """The worker name (else id) serving a function; None when nobody does."""
        with self._cond:
            owner = self._functions.get((namespace, function_id))
            return owner[0].label if owner is not None else None

    def rejections_sent(self, code: str | None = None) -> list[tuple[str, JSON]]:
        """Every ``registrationrejected`` sent, as (worker name or id, message)."""
        with self._cond:
            return [
                (conn.label, copy.deepcopy(msg))
                for direction, conn, msg in self._frames
                if direction == "out"
                and msg.get("type") == "registrationrejected"
                and code in (None, msg.get("code"))
            ]

    def trigger_types(self) -> dict[str, JSON]:
        """Live worker-provided trigger types: id → ``registertriggertype`` message."""
        with self._cond:
            return {tid: copy.deepcopy(msg) for tid, (_owner, msg) in self._trigger_types.items()}

    def registration_count(self, function_id: str) -> int:
        """How many ``registerfunction`` frames for this id were accepted: one per connection
        (the SDK replays every registration after a reconnect; a refused one does not count)."""
        with self._cond:
            return self._registrations[function_id]

    def wait_function(
        self,
        function_id: str,
        timeout: float = 10,
        min_count: int = 1,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> JSON:
        """Wait until the function is live and was registered at least ``min_count`` times
        (``min_count=2`` waits for the replay after a reconnect)."""

        def ready() -> JSON | None:
            owner = self._functions.get((namespace, function_id))
            if owner is None or self._registrations[function_id] < min_count:
                return None
            return copy.deepcopy(owner[1])

        return self._wait(ready, timeout, f"registration #{min_count} of {function_id}")

    def bindings(self, trigger_type: str | None = None) -> list[JSON]:
        """Stored bindings (any state) as their ``registertrigger`` messages plus ``state``."""
        with self._cond:
            return [
                {**copy.deepcopy(b.msg), "state": b.state}
                for b in self._bindings.values()
                if trigger_type is None or b.trigger_type == trigger_type
            ]

    def wait_binding(
        self,
        trigger_type: str,
        function_id: str | None = None,
        timeout: float = 10,
        state: str = "active",
    ) -> JSON:
        """Wait until a binding is in `state`: by default live (acked by its provider, or stored
        for engine types); ``"parked"`` waits for one stored while its provider is absent."""

        def ready() -> JSON | None:
            for b in self._bindings.values():
                if (
                    b.trigger_type == trigger_type
                    and b.state == state
                    and (function_id is None or b.msg.get("function_id") == function_id)
                ):
                    return copy.deepcopy(b.msg)
            return None

        return self._wait(ready, timeout, f"{state} {trigger_type} binding for {function_id}")

    def wait_rejection(
        self, trigger_type: str, function_id: str | None = None, timeout: float = 10
    ) -> JSON:
        """Wait until a provider refused a binding; returns the binding with its ``error``."""

        def ready() -> JSON | None:
            for rejected in self._rejections:
                if rejected.get("trigger_type") == trigger_type and function_id in (
                    None,
                    rejected.get("function_id"),
                ):
                    return copy.deepcopy(rejected)
            return None

        return self._wait(ready, timeout, f"rejected {trigger_type} binding")

    def wait_settled(self, timeout: float = 10) -> None:
        """Wait until no binding is ``delivered`` (forwarded to its provider, the answer not in
        yet). A provider acknowledges a binding once it holds it, so every provider then holds
        what it accepted; and, reading its socket in order, has dropped what was unregistered
        before (a restarted worker's previous bindings)."""

        def ready() -> bool:
            return all(b.state != "delivered" for b in self._bindings.values())

        try:
            self._wait(ready, timeout, "settled bindings")
        except TimeoutError:
            with self._cond:
                waiting = [
                    f"{b.trigger_type} {b.msg.get('function_id')} (provider {b.provider.label})"
                    for b in self._bindings.values()
                    if b.state == "delivered" and b.provider is not None
                ]
            raise TimeoutError(
                f"engine double: within {timeout}s these bindings got no answer from their "
                f"provider: {waiting}"
            ) from None

    def wait_worker(self, name: str, timeout: float = 10, min_count: int = 1) -> JSON:
        """Wait for the ``min_count``-th ``engine::workers::register`` of a worker name."""

        def ready() -> JSON | None:
            seen = [w for w in self._workers if w.get("name") == name]
            return copy.deepcopy(seen[-1]) if len(seen) >= min_count else None

        return self._wait(ready, timeout, f"worker {name} registration #{min_count}")

    def wait_frame(
        self,
        predicate: Callable[[str, str, JSON], bool],
        timeout: float = 10,
        start: int = 0,
    ) -> tuple[str, str, JSON]:
        """Wait for a frame (from index ``start``) satisfying ``predicate(direction, who, msg)``."""

        def ready() -> tuple[str, str, JSON] | None:
            frames = [(d, conn.label, msg) for d, conn, msg in self._frames[start:]]
            return next((f for f in frames if predicate(*f)), None)

        return self._wait(ready, timeout, "matching frame")

    def connection_count(self) -> int:
        """Live worker connections (telemetry sockets excluded)."""
        with self._cond:
            return len(self._conns)

    @contextlib.contextmanager
    def holding_connections(self) -> Iterator[None]:
        """While inside, no worker can (re)connect: a worker dropped meanwhile stays away (its
        SDK keeps retrying) until the block ends; connections already open are left alone."""
        with self._cond:
            self._holding = True
        try:
            yield
        finally:
            with self._cond:
                self._holding = False

    def drop_connections(self) -> int:
        """Close every worker socket from the server side; the SDK reconnects and replays.

        The engine forgets each connection's state before closing it, so the replay lands on
        a clean slate (as ``reattach`` makes a real engine do).
        """
        return self._call(self._drop_all())

    def drop_worker(self, name_or_id: str, timeout: float = 10) -> int:
        """Close the socket(s) of one worker (by name or worker id), as if it crashed.

        Waits until such a worker is connected: its name is only known once its
        ``engine::workers::register`` arrived, which the SDK may send after other frames.
        """

        def connected() -> bool:
            return any(name_or_id in (c.name, c.worker_id) for c in self._conns)

        self._wait(connected, timeout, f"connected worker {name_or_id}")
        return self._call(self._drop_all(name_or_id))

    async def _drop_all(self, who: str | None = None) -> int:
        with self._cond:
            conns = [c for c in self._conns if who is None or who in (c.name, c.worker_id)]
        for conn in conns:
            await self._disconnect(conn)
        await asyncio.gather(*(c.ws.close(1012, "engine double restart") for c in conns))
        return len(conns)

    def fire_cron(
        self, function_id: str | None = None, *, wait: bool = True, timeout: float = 60
    ) -> list[JSON]:
        """Fire every live ``cron`` binding (of ``function_id`` when given) once, as the cron
        worker does when its expression comes due: the bound function gets ``{trigger: "cron",
        job_id, scheduled_time, actual_time}``. With ``wait`` each answer comes back as the
        ``invocationresult`` message (``result`` or ``error``); without, the answer is dropped
        and the list is empty. Raises when no such binding is live."""
        return self._call(self._fire_cron(function_id, wait), timeout=timeout)

    async def _fire_cron(self, function_id: str | None, wait: bool) -> list[JSON]:
        with self._cond:
            targets = [
                (
                    b,
                    self._functions.get(
                        (b.msg.get("namespace") or DEFAULT_NAMESPACE, str(b.msg.get("function_id")))
                    ),
                )
                for b in self._bindings.values()
                if b.trigger_type == "cron"
                and b.state == "active"
                and function_id in (None, b.msg.get("function_id"))
            ]
        live = [(b, owner) for b, owner in targets if owner is not None]
        if not live:
            raise RuntimeError(f"engine double: no live cron binding for {function_id}")
        now = datetime.now(UTC)
        # chrono's `to_rfc3339`: the due time on the second, the firing time as precise as read.
        scheduled, actual = now.replace(microsecond=0).isoformat(), now.isoformat()
        waiting: list[asyncio.Future[JSON]] = []
        for binding, owner in live:
            # `engine.call` with the binding's metadata: an invocation id even unwaited for
            out: JSON = {
                "type": "invokefunction",
                "function_id": binding.msg.get("function_id"),
                "data": {
                    "trigger": "cron",
                    "job_id": binding.msg.get("id"),
                    "scheduled_time": scheduled,
                    "actual_time": actual,
                },
                "invocation_id": str(uuid.uuid4()),
            }
            if binding.msg.get("metadata") is not None:
                out["metadata"] = binding.msg["metadata"]
            if wait:
                future: asyncio.Future[JSON] = asyncio.get_running_loop().create_future()
                self._engine_calls[out["invocation_id"]] = future
                waiting.append(future)
            else:
                with self._cond:
                    self._pending[out["invocation_id"]] = _Pending(
                        None, None, str(out["function_id"]), owner[0]
                    )
            await self._send(owner[0], out)
        return list(await asyncio.gather(*waiting))

    def set_delay(self, function_id: str, seconds: float) -> None:
        """Hold invocations of ``function_id`` this long before forwarding them (0 clears)."""
        with self._cond:
            self._delays[function_id] = seconds

    def set_config(self, config_id: str, value: Any) -> JSON:
        """Same as ``configuration::set`` (fires ``configuration:updated``); raises EngineError."""
        return self._call(self._set_config(config_id, value))

    async def _set_config(self, config_id: str, value: Any) -> JSON:
        events: list[JSON] = []
        with self._cond:
            result = self.config.set({"id": config_id, "value": value}, events)
        for event in events:
            await self._fire_configuration(event)
        return result

    def store_config(self, config_id: str, schema: JSON, value: Any) -> None:
        """An entry another worker registered before this one ran (its schema and value), as
        an engine upgraded in place keeps it; no event fires (nobody is bound yet)."""
        with self._cond:
            self.config.register(
                {"id": config_id, "name": "Memory", "schema": schema, "initial_value": value}, []
            )

    def config_value(self, config_id: str) -> Any:
        """The stored (unexpanded) value of a configuration entry; KeyError when unknown."""
        with self._cond:
            return copy.deepcopy(self.config.entries[config_id]["value"])

    def wait_config(self, config_id: str, *, present: bool = True, timeout: float = 10) -> None:
        """Wait until the configuration entry exists (``present``) or is gone."""
        self._wait(
            lambda: (config_id in self.config.entries) == present,
            timeout,
            f"configuration {config_id} {'registered' if present else 'deleted'}",
        )

    def set_config_ttl(self, seconds: float) -> None:
        """The configuration worker's ``ttl_seconds`` from now on (0 turns expiry off)."""
        with self._cond:
            self._config_ttl_s = seconds

    def delete_config(self, config_id: str) -> None:
        """Delete an entry as the engine does when its file is removed under the fs adapter (or
        its TTL runs out): ``configuration:deleted`` fires."""
        self._call(self._expire_config(config_id))
