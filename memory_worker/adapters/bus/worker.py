"""`memory-worker serve` in engine mode: the worker on the real `iii-sdk` client.

Boot order (each step needs the previous one):
1. connect; register the configuration entry (seeded, never overwriting) and read it — the
   settings decide the data dir;
2. open the store (unwritable or held elsewhere is fatal: never a RAM-only worker);
3. provide the trigger types (the emitter holds their bindings), then register every function;
4. bind the seams (pre-generate hook, turn-completed, session::deleted, http routes) — the engine
   parks a binding until its provider registers, so the order of siblings does not matter;
5. start the data-dir watcher and the embedding backfill; declare the extraction queue;
6. bind the configuration trigger LAST, so a change cannot race the boot.
Then it serves until SIGTERM/SIGINT, and closes in reverse: stop taking calls, finish background
work, drain the banks, release the lock.

The service lives on this process's main loop; SDK handlers hop onto it (`Bridge`). On every
reconnect the SDK replays our registrations by itself; we re-read the configuration, since it may
have changed while we were away, and forget what the outage's lost events may have made stale (the
sessions' metas; the bindings of our trigger types, which the engine replays).

Past 500 lines on purpose: `EngineWorker` is the one place the SDK meets the service
(registration, the bridge, configuration on every reconnect, the seams' handlers); the
catalog's tables, events and sibling clients live in their own modules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from iii import InitOptions, InvocationError, RegistrationRejectedError, register_worker
from iii.iii import III
from pydantic import ValidationError

from memory_worker.adapters import console
from memory_worker.adapters.bus import catalog as bus_catalog
from memory_worker.adapters.bus.events import (
    TRIGGER_TYPES,
    BindingTable,
    BusEmitter,
    forget_bindings_on_reconnect,
    provide_trigger_types,
)
from memory_worker.adapters.bus.siblings import (
    FUNCTION_NOT_FOUND,
    BusCall,
    ConfigClient,
    QueueClient,
    RouterCompleter,
    RouterEmbedder,
    SessionsClient,
    StateClient,
    TranscriptClient,
    check_connected,
    probe_siblings,
)
from memory_worker.adapters.console.settings_view import describe
from memory_worker.adapters.lifecycle import (
    SHORT_HOLDER_WAIT_S,
    Stoppable,
    serve_until_signalled,
)
from memory_worker.adapters.openai_chat import EndpointOrRouter
from memory_worker.adapters.watch import DataDirWatcher
from memory_worker.app import catalog
from memory_worker.app.caller import BUS, Caller, CallerKind
from memory_worker.app.lessons import KeyValueDeliveries
from memory_worker.app.ports import Embedder
from memory_worker.app.reconfigure import Applied, Reconfigurer
from memory_worker.app.seams import UiContentInput
from memory_worker.app.service import MemoryService
from memory_worker.core.config import (
    Settings,
    parse_settings,
    parse_stored_settings,
    resolve_data_dir,
)
from memory_worker.core.errors import Conflict, InvalidInput, SiblingUnavailable, WorkerError
from memory_worker.harness.extractor import Extractor
from memory_worker.harness.pregenerate import PreGenerate, TurnSituations
from memory_worker.harness.selection import BankResolver
from memory_worker.harness.sessions import SessionState
from memory_worker.harness.turns import TurnPipeline
from memory_worker.storage.logger import get_logger
from memory_worker.storage.store import Store

HTTP_CALLER = Caller.human("http")  # REST through the engine's http worker


def bus_caller(data: Any, metadata: Any) -> Caller:
    """Who made a bus call: an agent when it was made inside a harness turn (the invocation
    metadata names its session); an automatic path when the metadata says so (`via`:
    memory-consolidate's calls say `consolidate`); else whoever drives the bus for a person (the
    console, `iii trigger`, another worker) — an owner, like the CLI."""
    worker = data.get("_caller_worker_id") if isinstance(data, dict) else None
    context = metadata if isinstance(metadata, dict) else {}
    session, turn = context.get("session_id"), context.get("turn_id")
    if isinstance(session, str) and session:
        return Caller.for_agent(
            BUS,
            worker_id=worker if isinstance(worker, str) else None,
            session_id=session,
            turn_id=turn if isinstance(turn, str) else None,
        )
    via = context.get("via")
    if isinstance(via, str) and (automatic := Caller.internal(via)).automatic:
        # Believed from anyone (the engine stamps only a worker id, not a name): in place of a
        # person it only turns guards on — never a pinned, retired or other subject's memory,
        # never a deleted bank. Never in place of an agent, whose access level it would skip.
        return automatic
    return Caller.human(BUS)


__all__ = ["CONFIG_ID_ENV", "DEFAULT_CONFIG_ID", "HOOK_BINDING", "READY_LINE", "EngineWorker"]

log = get_logger(__name__)

WORKER_NAME = "memory"
CONFIG_ID_ENV = "III_CONFIG_NAME"
DEFAULT_CONFIG_ID = "memory"
READY_LINE = "memory-worker connected to {url}"  # scripts and tests wait for this line
HOOK_BINDING = {"priority": 100, "timeout_ms": 3000, "on_error": "fail_open"}
QUEUE_DEFINE_FIRST_RETRY_S = 2.0
QUEUE_DEFINE_MAX_RETRY_S = 60.0


class _Refusals(logging.Filter):
    """Sees the engine refusing this worker. The SDK's only signal for a refused function is a
    log line (it keeps the connection and carries on), and for a refused worker name the same
    plus a dead client: both come here as `(code, namespace, what, owner)`. The line itself is
    kept."""

    PREFIXES = ("Function registration rejected", "Worker registration rejected")

    def __init__(self, on_refusal: Callable[[str, str, str, str], None]) -> None:
        super().__init__()
        self._on_refusal = on_refusal

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(record.msg, str)
            and record.msg.startswith(self.PREFIXES)
            and isinstance(args, tuple)
            and len(args) == 4
        ):
            code, namespace, what, owner = (str(arg) for arg in args)
            self._on_refusal(code, namespace, what, owner)
        return True


def refusal(code: str, namespace: str, what: str, owner: str) -> Conflict:
    """The error a refused worker stops with: which worker holds what, and what to do."""
    if code == "FUNCTION_NAMESPACE_CONFLICT":
        held = f"function {what} is served by another live worker ({owner or 'the engine'})"
    else:
        held = f"another live worker ({owner}) is named {what}"
    return Conflict(
        f"the engine refused this worker: {held} in namespace {namespace or 'default'}; a second "
        "memory worker would split the banks between two data dirs — stop the other one, or give "
        "this one its own namespace (III_NAMESPACE)"
    )


class _HandlerErrorsLoggedByUs(logging.Filter):
    """The SDK logs a traceback for every handler that raised. Ours raise domain errors by design
    (`memory_not_found: …` is an answer, not an incident), and a real bug is already logged by
    `Bridge` with its incident id: drop the SDK's duplicate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Error in handler memory::")


def config_id() -> str:
    return os.environ.get(CONFIG_ID_ENV, "").strip() or DEFAULT_CONFIG_ID


def settings_schema() -> dict[str, Any]:
    """The configuration form: every field with its description, defaults as the example."""
    schema = catalog.json_schema(Settings)
    schema["example"] = Settings().model_dump()
    return schema


class EngineWorker(Stoppable):
    def __init__(
        self,
        url: str,
        seed: Settings,
        *,
        data_dir_flag: str | None = None,
        embedder: Embedder | None = None,
        embedder_for: Callable[[Settings], Embedder | None] | None = None,
        router_embeddings: bool = True,
        reason: str = "",
    ) -> None:
        """`seed`: the settings a first registration stores (YAML file or defaults);
        `data_dir_flag`: `--data-dir`/`MEMORY_DATA_DIR`, which wins over the configuration;
        `embedder`: a local embedder; without one, `router::embed` when `router_embeddings`
        (`MEMORY_EMBEDDER=none` turns the semantic arm off altogether)."""
        super().__init__()
        self.url = url
        self.seed = seed
        self.data_dir_flag = data_dir_flag
        self.local_embedder = embedder
        self.embedder_for = embedder_for  # what a configuration change loads (a local model)
        self.router_embeddings = router_embeddings
        self.reason = reason
        self.client: III | None = None
        self.service: MemoryService | None = None
        self._config: ConfigClient | None = None
        self._reconfigure: Reconfigurer | None = None
        self._watcher: DataDirWatcher | None = None
        self._pipeline: TurnPipeline | None = None
        self._completer: EndpointOrRouter | None = None
        self._state: SessionState | None = None
        self._sessions: SessionsClient | None = None
        self._emitter: BusEmitter | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._config_lock = asyncio.Lock()
        self._config_notes: list[str] = []  # what of the stored entry was not used as it is
        self.failure: WorkerError | None = None  # why the worker stopped on its own, if it did
        self._log_filters: list[logging.Filter] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def fail(self, error: WorkerError) -> None:
        """Stop because of `error` (the first one wins); `serve_engine` exits with it."""
        if self.failure is None:
            self.failure = error
            log.error("worker_failed", error=str(error))
        self.stop(str(error))

    async def start(self) -> None:
        """Raises `Conflict` when the engine refuses this worker (its name or its functions are
        held by another live worker)."""
        try:
            await self._start()
        except RegistrationRejectedError as exc:
            raise refusal(exc.code, exc.namespace, exc.worker_name, exc.owner_worker_id) from None

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()

        def refused(code: str, namespace: str, what: str, owner: str) -> None:  # SDK thread
            loop.call_soon_threadsafe(self.fail, refusal(code, namespace, what, owner))

        self._log_filters = [_HandlerErrorsLoggedByUs(), _Refusals(refused)]
        for log_filter in self._log_filters:
            logging.getLogger("iii.iii").addFilter(log_filter)
        options = InitOptions(
            worker_name=WORKER_NAME,
            worker_description="Durable cross-session memory: banks of rules and memories, "
            "recalled per turn, stored as plain files.",
        )
        started = time.monotonic()
        self.client = client = await asyncio.to_thread(register_worker, self.url, options)
        if self.stopping:
            return  # a signal came during the SDK's wait: `close` shuts the client down
        # The SDK waited 30 s and keeps retrying, but each call below would time out in turn and
        # the start then failed naming the configuration worker, not the engine address.
        check_connected(
            client,
            self.url,
            time.monotonic() - started,
            " (without either, `serve` looks for one at the default address and serves "
            "standalone REST when none answers)",
        )
        call = BusCall(client)
        self._config = ConfigClient(call, config_id())
        settings = await self._initial_settings()
        self.local_embedder = await self._embedder_at_start(settings)
        data_dir = resolve_data_dir(self.data_dir_flag, settings)
        # Lazy: the banks are replayed once every function is registered (`boot_banks` below).
        store = await asyncio.to_thread(
            Store.open,
            data_dir,
            holder=self._holder(),
            lock_wait_s=SHORT_HOLDER_WAIT_S,
            lazy=True,
        )

        tables = {trigger_type: BindingTable(trigger_type) for trigger_type in TRIGGER_TYPES}
        forget_bindings_on_reconnect(client, tables)
        await provide_trigger_types(client, tables)
        self._emitter = BusEmitter(client, tables)
        service = MemoryService(
            store,
            settings,
            emitter=self._emitter,
            embedder=self.local_embedder,
            siblings=lambda: self._sibling_checks(call),
            # What lessons each session was given lives beside what its prompt was told.
            deliveries=KeyValueDeliveries(StateClient(call)),
        )
        if service.embedder is None and self.router_embeddings:
            service.embedder = RouterEmbedder(call, lambda: service.settings)
        self.service = service
        self._state = state = SessionState(StateClient(call))
        self._sessions = sessions = SessionsClient(call)
        resolver = BankResolver(
            sessions,
            state,
            lambda: service.store,
            lambda: service.settings.default_bank,
        )
        situations = TurnSituations()  # the hook reads each turn's, its agent's saves use it
        hook = PreGenerate(service, resolver, state, situations=situations)
        # The SDK's own namespace (no explicit one is given: `III_NAMESPACE`, else `default`).
        queue = QueueClient(call, os.environ.get("III_NAMESPACE", "").strip() or None)
        self._completer = completer = EndpointOrRouter(
            lambda: service.settings, RouterCompleter(call, lambda: service.settings)
        )
        transcript = TranscriptClient(call)
        extractor = Extractor(service, transcript, completer, StateClient(call))
        self._pipeline = pipeline = TurnPipeline(
            service, resolver, state, queue, extractor, transcript
        )
        self._reconfigure = Reconfigurer(
            service,
            lambda s: resolve_data_dir(self.data_dir_flag, s),
            lambda path: Store.open(path, holder=self._holder()),
            self.embedder_for,
        )

        async def public(spec: catalog.FunctionSpec, data: Any, metadata: Any) -> Any:
            # A call without `bank` inside a turn acts on that turn's bank. (`bank=0` from `iii
            # trigger` names bank "0": only a missing or blank one is unnamed, as the request
            # reads it; no payload at all is `{}`.)
            data = {} if data is None else data
            named = data.get("bank") if isinstance(data, dict) else None
            unnamed = isinstance(data, dict) and (
                named is None or (isinstance(named, str) and not named.strip())
            )
            if unnamed and "bank" in spec.request.model_fields:
                bank = await resolver.for_call(metadata)
                data = {**data, "bank": bank} if bank else data
            data, caller = await turn_call(spec, data, metadata, resolver, situations)
            return await catalog.call(service, spec.id, data, caller)

        async def http(data: Any, metadata: Any) -> Any:
            # Invoked from inside a harness turn it is that agent's call, as every other function
            # is (the permission manifest denies it to agents; this holds where none is loaded):
            # made as a direct one, for the turn's bank and speaker. It ran as an agent outside
            # any turn, whose read may name anyone in a bank partitioned by subject.
            asked = bus_caller(data, metadata)
            in_turn = asked.kind is CallerKind.AGENT

            async def through(spec: catalog.FunctionSpec, body: Any, caller: Caller) -> Any:
                if in_turn:  # a `Memory-Caller` claim can only say "an agent": this one
                    return await public(spec, body, metadata)
                return await catalog.call(service, spec.id, body, caller)

            default = asked if in_turn else HTTP_CALLER
            return await bus_catalog.http_reply(
                data, through, default, allowed_hosts=service.settings.allowed_hosts
            )

        bridge = bus_catalog.Bridge(loop)
        bus_catalog.register_public(client, bridge, public)
        bus_catalog.register_internal(
            client,
            bridge,
            {
                "memory::hook::pre-generate": lambda data, _: _hook_reply(hook.run(data)),
                "memory::on-turn-completed": lambda data, _: pipeline.on_turn_completed(data),
                "memory::extract-job": lambda data, _: pipeline.extract_job(data),
                "memory::on-session-deleted": lambda data, _: self._session_gone(data, sessions),
                "memory::on-session-meta-updated": lambda data, _: _forget_meta(data, sessions),
                "memory::on-config-change": lambda data, _: self._on_config_change(),
                bus_catalog.HTTP_FUNCTION: http,
                bus_catalog.UI_CONTENT: lambda data, _: _ui_content(data),
                bus_catalog.UI_SETTINGS: lambda data, _: self._ui_settings(),
            },
        )
        self._bind_seams(client)
        self._bind_console(client)
        self._watcher = DataDirWatcher(lambda: service)
        await self._watcher.start()
        # Every bank replayed, embedded and swept, one at a time while calls are answered.
        self._spawn(service.boot_banks())
        self._spawn(self._define_queue(queue))
        self._bind(
            client,
            "configuration",
            "memory::on-config-change",
            {
                "configuration_id": self._config.config_id,
                # Deleted too: the entry is registered again (`_on_config_change`).
                "event_types": ["configuration:updated", "configuration:deleted"],
            },
        )
        client.add_connection_state_listener(
            lambda state: loop.call_soon_threadsafe(self._on_connection, state)
        )
        log.info(
            "serving",
            mode="engine",
            reason=self.reason,
            engine=self.url,
            data_dir=str(store.root),
            config_id=self._config.config_id,
            pid=os.getpid(),
        )

    async def close(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            await self._watcher.stop()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._pipeline is not None:
            await self._pipeline.close()
        if self._completer is not None:
            await self._completer.aclose()
        if self._state is not None:
            await self._state.flush()
        if self._emitter is not None:
            await self._emitter.flush()
        client, self.client = self.client, None
        if client is not None:
            await asyncio.to_thread(client.shutdown)  # no new calls reach us after this
        service, self.service = self.service, None
        if service is not None:
            await service.close()
            await service.store.close()
            log.info("stopped", data_dir=str(service.store.root))
        for log_filter in self._log_filters:
            logging.getLogger("iii.iii").removeFilter(log_filter)

    # --- pieces ----------------------------------------------------------------------------------

    def _holder(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "kind": "serve",
            "command": "memory-worker serve (engine mode)",
            "url": self.url,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    def _bind(client: III, trigger_type: str, function_id: str, config: dict[str, Any]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            client.register_trigger(
                {"type": trigger_type, "function_id": function_id, "config": config}
            )

    def _bind_seams(self, client: III) -> None:
        self._bind(
            client, "harness::hook::pre-generate", "memory::hook::pre-generate", HOOK_BINDING
        )
        self._bind(client, "harness::turn-completed", "memory::on-turn-completed", {})
        self._bind(client, "session::deleted", "memory::on-session-deleted", {})
        self._bind(client, "session::meta-updated", "memory::on-session-meta-updated", {})
        for spec in catalog.CATALOG:
            self._bind(
                client,
                "http",
                bus_catalog.HTTP_FUNCTION,
                {"api_path": spec.http_path, "http_method": "POST"},
            )

    def _bind_console(self, client: III) -> None:
        """One `console:*` trigger per page asset, all served by `memory::ui-content`. The page is
        an accessory: a refused registration is logged, never fatal."""
        for path, trigger_type in console.bus_assets():
            try:
                self._bind(client, trigger_type, bus_catalog.UI_CONTENT, {"path": path})
            except Exception as exc:
                log.warning("console_asset_not_registered", path=path, error=str(exc))

    async def _ui_settings(self) -> dict[str, Any]:
        assert self.service is not None and self._config is not None
        entry = self._config.config_id
        return describe(
            self.service.settings,
            mode="engine",
            editable=False,
            reason=f"Under iii the configuration worker owns these settings (entry `{entry}`): "
            "edit them in the iii console's Settings; every change applies live, and this page "
            "shows it on its next refresh.",
            source=entry,
            data_dir=str(self.service.store.root),
        )

    async def _session_gone(self, data: Any, sessions: SessionsClient) -> dict[str, Any]:
        await _forget_meta(data, sessions)
        assert self._pipeline is not None
        return await self._pipeline.on_session_deleted(data)

    async def _embedder_at_start(self, settings: Settings) -> Embedder | None:
        """The local embedder the stored configuration asks for. The one given was loaded from
        the seed (the YAML file) before the engine could be asked; when the stored entry names
        another model, or turns embeddings off or on, that one was used until the next change."""
        chosen = (settings.embeddings_enabled, settings.embedding_model)
        if self.embedder_for is None or chosen == (
            self.seed.embeddings_enabled,
            self.seed.embedding_model,
        ):
            return self.local_embedder
        return await asyncio.to_thread(self.embedder_for, settings)

    async def _initial_settings(self) -> Settings:
        """Register the configuration entry (seeding `self.seed` only when nothing is stored) and
        read it. Without a configuration worker the seed applies (and says so)."""
        assert self._config is not None
        try:
            await self._config.ensure(settings_schema(), self.seed.model_dump())
            value = await self._config.get()
        except InvocationError as exc:
            if exc.code != FUNCTION_NOT_FOUND:  # it exists but failed: never guess the settings
                # A sibling failing, with its stable code (as a change event's re-fetch says it).
                raise SiblingUnavailable(
                    f"cannot read configuration {self._config.config_id}: {exc}"
                ) from None
            log.warning("configuration_absent", error=str(exc), using="local settings")
            return self.seed
        if value is None:
            return self.seed
        settings, self._config_notes = parse_stored_settings(value, source="configuration")
        if self._config_notes:  # an older worker's entry: start on what we can use of it
            log.warning(
                "configuration_adjusted", adjusted=self._config_notes, kept="the stored value"
            )
        return settings

    async def _sibling_checks(self, call: BusCall) -> list[tuple[str, bool, str]]:
        """The siblings' probes, and what of the stored configuration this worker could not use
        as it is (until someone saves it again in the console's Settings)."""
        checks = await probe_siblings(call)
        if self._config_notes:
            assert self._config is not None
            detail = (
                f"configuration entry `{self._config.config_id}` holds values this version "
                f"refuses; started on: {'; '.join(self._config_notes)}. Save the entry in the "
                "iii console's Settings to store values this version accepts."
            )
            checks.append(("configuration-valid", False, detail))
        return checks

    async def _on_config_change(self) -> dict[str, Any]:
        """Re-fetch (never trust the event's payload) and apply; a bad value keeps the last good
        settings and store, and the error goes back to whoever changed it."""
        assert self._config is not None and self._reconfigure is not None
        async with self._config_lock:  # fetch and apply as one: a slower older fetch never wins
            try:
                value = await self._config.get()
            except InvocationError as exc:
                # A sibling erroring: its stable code, as the router's or the queue's would be.
                raise SiblingUnavailable(f"configuration::get failed: {exc}") from None
            if value is None:
                # The entry is gone: deleted by the configuration worker's `ttl_seconds` once no
                # binding named it (ours goes with our connection: an outage longer than the
                # TTL), or its file removed. Keep running on what we have, and register it
                # again with those settings: else the console's Settings had nothing to edit
                # and every `configuration::set` was NOT_REGISTERED until a restart. Then read
                # back and applied as any entry: a value stored meanwhile, which `ensure` keeps,
                # is the one to run on, and the entry holds no value this version refused now.
                try:
                    await self._config.ensure(settings_schema(), self._running().model_dump())
                    value = await self._config.get()
                except InvocationError as exc:
                    raise SiblingUnavailable(f"configuration::ensure failed: {exc}") from None
                if value is None:
                    return {"ok": True, "applied": "registered again"}
            try:
                settings = parse_settings(value, source="configuration")
                applied = await self._reconfigure.apply(settings)
            except WorkerError as err:
                log.error("configuration_rejected", error=str(err), kept="last good")
                raise
            self._config_notes = []  # the entry as stored is this version's now
            if applied is Applied.REOPENED and self._watcher is not None:
                await self._watcher.restart()  # follow the new data dir at once
        return {"ok": True, "applied": str(applied)}

    def _running(self) -> Settings:
        return self.service.settings if self.service is not None else self.seed

    def _on_connection(self, state: str) -> None:
        log.info("engine_connection", state=state, engine=self.url)
        if state == "failed" and not self._stopping.is_set():  # the SDK gave up for good
            self.fail(WorkerError(f"the connection to {self.url} failed for good"))
        if state == "connected" and self.service is not None and not self._stopping.is_set():
            if self._sessions is not None:
                # Before any call of the new connection is served (this runs first on our loop).
                self._sessions.invalidate_all()
            self._spawn(self._refresh_config())

    async def _refresh_config(self) -> None:
        try:
            await self._on_config_change()
        except Exception as exc:
            log.warning("configuration_refresh_failed", error=str(exc))

    async def _define_queue(self, queue: QueueClient) -> None:
        """Declare the extraction queue, retrying with a capped backoff for as long as we run: a
        queue worker that starts later is picked up (until then jobs run inline)."""
        delay = QUEUE_DEFINE_FIRST_RETRY_S
        while not await queue.define():
            await asyncio.sleep(delay)
            delay = min(delay * 2, QUEUE_DEFINE_MAX_RETRY_S)


async def _hook_reply(reply: Awaitable[dict[str, Any] | None]) -> dict[str, Any]:
    """The hook's answer on the wire. Seed 000's `HookResponse` requires `decision`: a step left
    unchanged is a bare `continue` (as the harness reads `null`), never `null` itself."""
    answer = await reply
    return {"decision": "continue"} if answer is None else answer


async def _ui_content(data: Any) -> dict[str, str]:
    try:
        request = UiContentInput.model_validate(data if isinstance(data, dict) else {})
    except ValidationError as exc:  # a caller's mistake (no `path`), not a bug of ours
        raise InvalidInput(f"ui-content payload: path: {exc.errors()[0]['msg']}") from None
    return console.ui_content(request.path)


_SAVE = "memory::save"  # the one write whose omitted `subject` means the turn's speaker
_SUBJECT_PAIR = ("subject_type", "subject_id")  # seed 004's other way to name `subject`


async def turn_call(
    spec: catalog.FunctionSpec,
    data: Any,
    metadata: Any,
    resolver: BankResolver,
    situations: TurnSituations | None = None,
) -> tuple[Any, Caller]:
    """The payload and caller of a public bus call. Inside a turn, an agent's call is for the
    person speaking in it: a read sees what subject scoping lets them see whatever subject the
    agent names (an agent must not read one person's memories in another's turn), a save
    without a subject is about them, and a change by id reaches no other person's memory. An
    update without `subject` leaves the memory's own (omitted means unchanged: it was moved to
    the speaker, out of every other person's sight). A save carries the turn's window and goal
    as its hook read them (`situations`), for the association lanes."""
    caller = bus_caller(data, metadata)
    fields = spec.request.model_fields
    if caller.kind is not CallerKind.AGENT or caller.session_id is None:
        return data, caller
    # The session's meta (cached). A failed lookup is nobody for a read (general memories
    # only); a write raises it: a save about nobody is general, in every person's recall.
    strict = not spec.hints.read_only
    speaker = await resolver.subject(caller.session_id, metadata, strict=strict)
    caller = caller.speaking_for(speaker)
    situation = situations.of(caller.session_id, caller.turn_id) if situations else None
    if spec.id == _SAVE and situation is not None:
        lanes, read_at = situation
        caller = caller.in_situation(lanes.context, lanes.intention, read_at)
    if not isinstance(data, dict) or "subject" not in fields:
        return data, caller
    # Seed 004's `subject_type`/`subject_id` name a subject as `subject` does (the request reads
    # them as one): a read drops them with it, and a save naming someone by them keeps them.
    if spec.hints.read_only:
        data = {key: value for key, value in data.items() if key not in _SUBJECT_PAIR}
        data["subject"] = speaker
    elif spec.id == _SAVE and all(data.get(key) is None for key in ("subject", *_SUBJECT_PAIR)):
        data = {**data, "subject": speaker}
    return data, caller


async def _forget_meta(data: Any, sessions: SessionsClient) -> dict[str, Any]:
    session_id = data.get("session_id") if isinstance(data, dict) else None
    if isinstance(session_id, str):
        sessions.invalidate(session_id)
    return {"ok": True}


async def serve_engine(
    url: str,
    seed: Settings,
    *,
    data_dir_flag: str | None,
    embedder: Embedder | None,
    router_embeddings: bool,
    reason: str,
    embedder_for: Callable[[Settings], Embedder | None] | None = None,
) -> int:
    """Run engine mode until SIGTERM or SIGINT; exit status 0 after a clean close."""
    worker = EngineWorker(
        url,
        seed,
        data_dir_flag=data_dir_flag,
        embedder=embedder,
        embedder_for=embedder_for,
        router_embeddings=router_embeddings,
        reason=reason,
    )
    await serve_until_signalled(worker, READY_LINE.format(url=url))
    if worker.failure is not None:
        raise worker.failure  # after a clean close: the data dir is released
    return 0
