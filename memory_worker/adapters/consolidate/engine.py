"""`memory-consolidate serve --engine URL`: the sibling on the iii bus.

Boot order:
1. connect as worker `memory-consolidate`; register the configuration entry `memory-consolidate`
   (seeded only when nothing is stored) and read it. When it cannot be read the worker is INERT:
   ticks do nothing, manual runs still work, and nothing is written over the stored value;
2. register `memory-consolidate::run` and `::status` (public), `::on-tick`, `::on-config-change`,
   `::on-item-changed` and `::http` (internal);
3. bind the engine's `cron` trigger (hourly) to `::on-tick`, one `http` route per public function,
   the memory worker's `memory::item-changed` to `::on-item-changed` (an erased memory leaves
   the kept reports, id and text), and, last, the `configuration` trigger;
4. start the backstop loop (first tick shortly after boot, then periodically).
Every memory access is a bus call to the memory worker's public functions; the checkpoint and the
last reports live in the state worker (scope `memory_consolidate`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import warnings
from typing import Any

import structlog
from iii import InitOptions, InvocationError, register_worker
from iii.iii import III
from pydantic import BaseModel, ValidationError

from memory_worker.adapters.bus import catalog as bus_catalog
from memory_worker.adapters.bus.siblings import (
    FUNCTION_NOT_FOUND,
    BusCall,
    ConfigClient,
    StateClient,
    check_connected,
)
from memory_worker.adapters.bus.worker import HTTP_CALLER, bus_caller
from memory_worker.adapters.consolidate.clients import CONSOLIDATE
from memory_worker.adapters.doors import CALLER_HEADER, decode_caller
from memory_worker.adapters.lifecycle import Stoppable, serve_until_signalled
from memory_worker.app.caller import Caller, CallerKind
from memory_worker.app.catalog import json_schema
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.app.seams import HttpEnvelope
from memory_worker.consolidate import catalog
from memory_worker.consolidate.config import CONFIG_ID, ConsolidateSettings, parse_settings
from memory_worker.consolidate.ports import error_from
from memory_worker.consolidate.runner import Consolidator
from memory_worker.consolidate.schedule import Scheduler
from memory_worker.consolidate.wire import RunRequest
from memory_worker.core.errors import HTTP_STATUS, InvalidInput, SiblingUnavailable, WorkerError
from memory_worker.core.models import ItemEvent

__all__ = [
    "CRON_EXPRESSION",
    "READY_LINE",
    "WORKER_NAME",
    "BusMemoryClient",
    "ConsolidateEngine",
    "RouterJudge",
    "settings_schema",
]

log = structlog.get_logger(__name__)

WORKER_NAME = "memory-consolidate"
READY_LINE = "memory-consolidate connected to {url}"  # tests and scripts wait for this line
CRON_EXPRESSION = "0 0 * * * *"  # hourly, 6-field with seconds: the heartbeat, not the interval
TICK_REPLY_S = 20.0  # a tick answers within this; a longer pass goes on in the background
MAX_OUTPUT_TOKENS = 1024
CALLER_METADATA = {"via": CONSOLIDATE.via}  # every memory call's invocation metadata


class _HandlerErrorsLoggedByUs(logging.Filter):
    """The SDK logs every raising handler; ours raise coded answers on purpose (see bus.worker)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Error in handler memory-consolidate::")


def settings_schema() -> dict[str, Any]:
    schema = json_schema(ConsolidateSettings)
    schema["example"] = ConsolidateSettings().model_dump()
    return schema


def _mapped(function_id: str, exc: InvocationError) -> WorkerError:
    """A failed bus call as the memory worker's own error when it sent one (`conflict: …`)."""
    if exc.code == FUNCTION_NOT_FOUND:
        return SiblingUnavailable(f"{function_id}: not registered (is the worker running?)")
    fallback = SiblingUnavailable(f"{function_id} failed ({exc.code}): {exc.message}")
    mapped = error_from(exc.message)
    return fallback if isinstance(mapped, SiblingUnavailable) else mapped


class BusMemoryClient:
    """The memory worker's public functions over the bus, each call bounded."""

    def __init__(self, call: BusCall, timeout_ms: int) -> None:
        self._call = call
        self.timeout_ms = timeout_ms

    async def call(self, function_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            # Says who is calling (`bus_caller`): without it the memory worker takes these calls
            # for a person's, and its automatic guards (no merge across subjects) are off.
            metadata = CALLER_METADATA
            reply = await self._call(function_id, payload, self.timeout_ms, metadata=metadata)
        except InvocationError as exc:
            raise _mapped(function_id, exc) from None
        return reply if isinstance(reply, dict) else {}


class RouterJudge:
    """`router::complete` for the LLM tier: `llm_model`, else the router's first model."""

    def __init__(self, call: BusCall) -> None:
        self._call = call
        self._default_model: str | None = None

    async def _model(self, configured: str) -> str:
        if configured:
            return configured
        if self._default_model is None:
            try:
                reply = await self._call("router::models::list", {}, 5000)
            except InvocationError as exc:
                raise _mapped("router::models::list", exc) from None
            models = reply.get("models") if isinstance(reply, dict) else None
            ids = [m.get("id") for m in models or [] if isinstance(m, dict)]
            if not ids or not isinstance(ids[0], str):
                raise SiblingUnavailable("router::models::list offers no model")
            self._default_model = ids[0]
        return self._default_model

    async def complete(
        self, system_prompt: str, user_text: str, *, model: str, timeout_ms: int
    ) -> str:
        request = {
            "model": await self._model(model),
            "system_prompt": system_prompt,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": user_text}],
                    "timestamp": int(time.time() * 1000),
                }
            ],
            "max_output_tokens": MAX_OUTPUT_TOKENS,
        }
        try:
            reply = await self._call("router::complete", request, timeout_ms)
        except InvocationError as exc:
            raise _mapped("router::complete", exc) from None
        message = reply.get("message") if isinstance(reply, dict) else None
        if not isinstance(message, dict):
            raise SiblingUnavailable("router::complete answered without a message")
        if message.get("stop_reason") in ("error", "aborted", "length"):
            raise SiblingUnavailable(
                f"router::complete gave no complete reply ({message.get('stop_reason')})"
            )
        return "".join(
            part.get("text", "")
            for part in message.get("content") or []
            if isinstance(part, dict) and part.get("type") == "text"
        )


def _request(model: type[BaseModel], data: Any) -> Any:
    # No payload is `{}`; any other that is no object (a REST body the engine parsed to a list, a
    # string, a number) is refused, as at the memory worker's functions: read as `{}`, it ran
    # with every default, a real pass over every bank where a dry run was asked for.
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput(f"payload must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise InvalidInput(f"{where}: {first['msg']}") from None


class ConsolidateEngine(Stoppable):
    """The worker process on the bus: `start()`, `wait()` until `stop()`, `close()`."""

    def __init__(
        self,
        url: str,
        seed: ConsolidateSettings,
        *,
        first_tick_s: float,
        backstop_s: float,
        call_timeout_ms: int,
    ) -> None:
        """`seed`: what a first registration stores (the `--config` file or the defaults);
        `backstop_s` 0 turns the backstop loop off (cron alone then drives the schedule)."""
        super().__init__()
        self.url = url
        self.seed = seed
        self.first_tick_s = first_tick_s
        self.backstop_s = backstop_s
        self.call_timeout_ms = call_timeout_ms
        self.settings = seed
        self.inert_reason: str | None = None
        self.client: III | None = None
        self.scheduler: Scheduler | None = None
        self._config: ConfigClient | None = None
        self._config_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        logging.getLogger("iii.iii").addFilter(_HandlerErrorsLoggedByUs())
        options = InitOptions(
            worker_name=WORKER_NAME,
            worker_description="Background hygiene for memory banks: deterministic dedup on a "
            "schedule, supersede-only, never touching a pinned memory.",
        )
        started = time.monotonic()
        self.client = client = await asyncio.to_thread(register_worker, self.url, options)
        if self.stopping:
            return  # a signal came during the SDK's wait: `close` shuts the client down
        # As the memory worker: the SDK waited 30 s; the configuration read would time out next
        # and leave a worker "inert" for a configuration it never reached, never registered,
        # and (nothing stored to apply) never left inert once the engine came.
        check_connected(client, self.url, time.monotonic() - started)
        call = BusCall(client)
        self._config = ConfigClient(
            call,
            CONFIG_ID,
            name="Memory Consolidate",
            description="memory-consolidate: when banks are cleaned and how conservatively.",
        )
        await self._initial_settings()
        consolidator = Consolidator(BusMemoryClient(call, self.call_timeout_ms), RouterJudge(call))
        self.scheduler = scheduler = Scheduler(
            consolidator,
            StateClient(call),
            lambda: self.settings,
            inert=lambda: self.inert_reason,
        )
        bridge = bus_catalog.Bridge(loop, worker="memory-consolidate worker")
        handlers = {
            catalog.RUN: lambda data, metadata: self._run(data, metadata),
            catalog.STATUS: lambda data, metadata: self._status(data, metadata),
            catalog.ON_TICK: lambda data, _: self._tick(),
            catalog.ON_CONFIG_CHANGE: lambda data, _: self._on_config_change(),
            catalog.ON_ITEM_CHANGED: lambda data, _: self._on_item_changed(data),
            catalog.HTTP: lambda data, metadata: self._http(data, metadata),
        }
        for spec in catalog.FUNCTIONS:
            bus_catalog.register(
                client,
                spec.id,
                bridge.handler(spec.id, handlers[spec.id]),
                description=spec.description,
                request=json_schema(spec.request),
                response=json_schema(spec.response),
                internal=False,
            )
        for function_id, description in _INTERNAL.items():
            bus_catalog.register(
                client,
                function_id,
                bridge.handler(function_id, handlers[function_id]),
                description=description,
                request={"type": "object"},
                response=None,
                internal=True,
                trace_hidden=function_id != catalog.HTTP,
            )
        self._bind(client, "cron", catalog.ON_TICK, {"expression": CRON_EXPRESSION})
        for spec in catalog.FUNCTIONS:
            self._bind(
                client, "http", catalog.HTTP, {"api_path": spec.http_path, "http_method": "POST"}
            )
        # The memory worker provides this type; the engine parks the binding until it is up.
        self._bind(client, ITEM_CHANGED, catalog.ON_ITEM_CHANGED, {})
        if self.backstop_s > 0:
            self._spawn(scheduler.backstop(self.first_tick_s, self.backstop_s, self._stopping))
        self._bind(
            client,
            "configuration",
            catalog.ON_CONFIG_CHANGE,
            # Deleted too: the entry is registered again (`_on_config_change`).
            {
                "configuration_id": CONFIG_ID,
                "event_types": ["configuration:updated", "configuration:deleted"],
            },
        )
        client.add_connection_state_listener(
            lambda state: loop.call_soon_threadsafe(self._on_connection, state)
        )
        log.info(
            "serving",
            mode="engine",
            engine=self.url,
            inert=self.inert_reason,
            backstop_s=self.backstop_s,
            pid=os.getpid(),
        )

    async def close(self) -> None:
        self._stopping.set()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        client, self.client = self.client, None
        if client is not None:
            await asyncio.to_thread(client.shutdown)
        log.info("stopped", passes=self.scheduler.passes if self.scheduler else 0)

    # --- pieces ----------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    @staticmethod
    def _bind(client: III, trigger_type: str, function_id: str, config: dict[str, Any]) -> None:
        with warnings.catch_warnings():  # 0.25 deprecates bindings; cron and http still use them
            warnings.simplefilter("ignore", DeprecationWarning)
            client.register_trigger(
                {"type": trigger_type, "function_id": function_id, "config": config}
            )

    async def _initial_settings(self) -> None:
        """Seed (only when nothing is stored) and read the entry. Unreadable → inert: the seed
        or defaults are used for manual runs only, and never written over the stored value."""
        assert self._config is not None
        try:
            await self._config.ensure(settings_schema(), self.seed.model_dump())
            value = await self._config.get()
        except InvocationError as exc:
            if exc.code == FUNCTION_NOT_FOUND:
                log.warning("configuration_absent", using="local settings")
                return
            self.inert_reason = f"configuration {CONFIG_ID} unreadable ({exc.code}): {exc.message}"
            log.error("configuration_unreadable", reason=self.inert_reason, schedule="off")
            return
        except WorkerError as err:
            self.inert_reason = f"configuration {CONFIG_ID} unreadable: {err}"
            log.error("configuration_unreadable", reason=self.inert_reason, schedule="off")
            return
        if value is None:
            return
        try:
            self.settings = parse_settings(value, source=f"configuration {CONFIG_ID}")
        except InvalidInput as err:
            self.inert_reason = str(err)
            log.error("configuration_unreadable", reason=self.inert_reason, schedule="off")

    async def _on_config_change(self) -> dict[str, Any]:
        """Re-fetch (never trust the event) and apply; a bad value keeps what runs now."""
        assert self._config is not None
        async with self._config_lock:
            try:
                value = await self._config.get()
            except InvocationError as exc:
                raise SiblingUnavailable(f"configuration::get failed: {exc}") from None
            if value is None:
                # Gone (the configuration worker's `ttl_seconds` after an outage, or its file
                # removed): registered again with what runs now, so Settings can edit it. Then
                # read back and applied as any entry: what is stored now is readable (an inert
                # sibling stayed inert on it until a restart), and a value stored meanwhile,
                # which `ensure` keeps, is the one to run on.
                try:
                    await self._config.ensure(settings_schema(), self.settings.model_dump())
                    value = await self._config.get()
                except InvocationError as exc:
                    raise SiblingUnavailable(f"configuration::ensure failed: {exc}") from None
                if value is None:
                    return {"ok": True, "applied": "registered again"}
            settings = parse_settings(value, source=f"configuration {CONFIG_ID}")
            self.settings, self.inert_reason = settings, None
        log.info("configuration_applied", enabled=settings.enabled, dry_run=settings.dry_run)
        return {"ok": True}

    def _on_connection(self, state: str) -> None:
        log.info("engine_connection", state=state, engine=self.url)
        if state == "connected" and not self._stopping.is_set():
            self._spawn(self._refresh_config())

    async def _refresh_config(self) -> None:
        try:
            await self._on_config_change()
        except Exception as exc:
            log.warning("configuration_refresh_failed", error=str(exc))

    async def _on_item_changed(self, data: Any) -> dict[str, Any]:
        """An `erased` memory (forget-subject) leaves the kept reports; every other change is
        the next pass's to see."""
        assert self.scheduler is not None
        if not isinstance(data, dict) or data.get("event_type") != str(ItemEvent.ERASED):
            return {"ok": True}
        bank, memory_id = data.get("bank"), data.get("id")
        if not isinstance(bank, str) or not isinstance(memory_id, str):
            return {"ok": True}
        return {"ok": True, "scrubbed": await self.scheduler.forget(bank, {memory_id})}

    async def _run(
        self, data: Any, metadata: Any = None, caller: Caller | None = None
    ) -> dict[str, Any]:
        """`caller`: who asked (REST's, read from its envelope); else the bus call's own, as
        the memory worker reads it (`bus_caller`: an agent when made inside a harness turn)."""
        assert self.scheduler is not None
        asked = caller or bus_caller(data, metadata)
        agent = asked.kind is CallerKind.AGENT
        report = await self.scheduler.run(_request(RunRequest, data), agent=agent)
        return report.to_wire()

    async def _status(
        self, data: Any = None, metadata: Any = None, caller: Caller | None = None
    ) -> dict[str, Any]:
        assert self.scheduler is not None
        asked = caller or bus_caller(data, metadata)
        return (await self.scheduler.status(agent=asked.kind is CallerKind.AGENT)).to_wire()

    async def _tick(self) -> dict[str, Any]:
        """The cron heartbeat. A pass that outlasts `TICK_REPLY_S` goes on in the background (the
        cron worker does not wait for it; the gate keeps the next tick from starting another)."""
        assert self.scheduler is not None
        task = self._spawn(self.scheduler.tick("cron"))
        done, _ = await asyncio.wait({task}, timeout=TICK_REPLY_S)
        if not done:
            return {"ran": True, "running": True}
        outcome: dict[str, Any] = task.result()
        return outcome

    async def _http(self, envelope: Any, metadata: Any = None) -> dict[str, Any]:
        """REST through the http worker: POST /memory-consolidate/run|status. A person's, unless
        invoked inside a harness turn or its `Memory-Caller` header says an agent's (as the
        memory worker's REST reads it: a claim that only narrows is believed from anyone)."""
        parsed = HttpEnvelope.model_validate(envelope if isinstance(envelope, dict) else {})
        refused = bus_catalog.page_refusal(parsed)  # a page may not start (LLM-paid) merges
        if refused is not None:
            return refused
        path = bus_catalog.http_path_of(parsed)
        try:
            body = bus_catalog.http_body(parsed)  # `null` from a body sent as anything but JSON
            caller = bus_caller(envelope, metadata)
            if caller.kind is not CallerKind.AGENT:
                claim = bus_catalog.header(parsed, CALLER_HEADER)
                caller = decode_caller(claim, trusted=False, default=HTTP_CALLER)
            if path == "memory-consolidate/run":
                result = await self._run(body, caller=caller)
            elif path == "memory-consolidate/status":
                result = await self._status(caller=caller)
            else:
                raise InvalidInput(
                    f"no function at /{path}; use /memory-consolidate/run or /status"
                )
        except WorkerError as err:
            return {"status_code": HTTP_STATUS.get(err.code, 500), "body": {"error": err.to_dict()}}
        return {"status_code": 200, "body": result}


_INTERNAL = {
    catalog.ON_ITEM_CHANGED: "Internal: the memory worker's item events — a memory erased by "
    "memory::forget-subject leaves the kept reports (its group, id and text).",
    catalog.ON_TICK: "Internal: the cron heartbeat (hourly) — runs a consolidation pass when one "
    "is due by the last_run checkpoint; otherwise does nothing.",
    catalog.ON_CONFIG_CHANGE: "Internal: re-reads the memory-consolidate configuration when it "
    "changes and applies it from the next tick or run.",
    catalog.HTTP: "Internal: REST adapter for the http worker — POST /memory-consolidate/run and "
    "/memory-consolidate/status.",
}


async def serve_engine(
    url: str,
    seed: ConsolidateSettings,
    *,
    first_tick_s: float,
    backstop_s: float,
    call_timeout_ms: int,
) -> int:
    """Run until SIGTERM or SIGINT; 0 after a clean close."""
    worker = ConsolidateEngine(
        url,
        seed,
        first_tick_s=first_tick_s,
        backstop_s=backstop_s,
        call_timeout_ms=call_timeout_ms,
    )
    await serve_until_signalled(worker, READY_LINE.format(url=url))
    return 0
