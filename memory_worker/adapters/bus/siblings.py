"""The sibling workers as the core's ports see them: each a thin client over one SDK connection.

Every call has its own timeout and maps the bus's failures onto our error codes: the core never
sees `iii.InvocationError`. `function_not_found` means "that sibling is not installed", which each
client turns into its documented degradation (no session metadata, inline jobs, lexical recall).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from iii import InvocationError
from iii.iii import III

from memory_worker.core.config import Settings
from memory_worker.core.coordinates import MAX_COORDINATE
from memory_worker.core.errors import SiblingUnavailable
from memory_worker.storage.logger import get_logger
from memory_worker.storage.vectors import router_model

__all__ = [
    "FUNCTION_NOT_FOUND",
    "NOT_FOUND",
    "SCHEMA_INVALID",
    "BusCall",
    "ConfigClient",
    "QueueClient",
    "RouterCompleter",
    "RouterEmbedder",
    "SessionsClient",
    "StateClient",
    "TranscriptClient",
    "check_connected",
    "expand_placeholders",
    "never_connected",
    "probe_siblings",
]

log = get_logger(__name__)

FUNCTION_NOT_FOUND = "function_not_found"
NOT_FOUND = "NOT_FOUND"  # configuration: the id is absent (exact, uppercase; nothing else is)
# configuration: the stored value fails the entry's schema (ours, registered over another's).
SCHEMA_INVALID = "SCHEMA_INVALID"
EXTRACTION_QUEUE = "memory-extraction"
QUEUE_NAMESPACE = "default"  # the queue worker's: `engine::queue::enqueue` is held only there
QUEUE_CONFIG = {"max_retries": 3, "backoff_ms": 2000}
SESSION_TIMEOUT_MS = 2000
STATE_TIMEOUT_MS = 2000
EMBED_TIMEOUT_MS = 20_000  # backfill batches; the query path has its own shorter budget
EMBED_RETRY_AFTER_S = 30.0  # after a failure, do not ask again on every save
CONFIG_TIMEOUT_MS = 5000
REGISTER_WAIT_S = 30.0  # how long the SDK's `register_worker` waits for its first connection
CONFIG_ATTEMPTS = 3
PROBE_TIMEOUT_MS = 3000
# The configuration worker's placeholders: `${NAME}` or `${NAME:default}`; a string that is one
# lone placeholder takes the JSON type of what it expands to (`"${LIMIT:6}"` is the number 6).
_PLACEHOLDER = re.compile(r"\$\{([^}:]+)(?::([^}]*))?\}")
_LONE_PLACEHOLDER = re.compile(r"^\s*\$\{[^}]*\}\s*$")


def never_connected(client: III, waited_s: float) -> bool:
    """Whether `register_worker` (which took `waited_s`) gave up waiting for the engine: it
    returns the client either way and keeps retrying, and every call then timed out naming a
    sibling (the configuration worker), not the address. A connection made and dropped since
    (a short wait, the state no longer `connected`) is the SDK's to restore, as before."""
    return client.get_connection_state() != "connected" and waited_s >= REGISTER_WAIT_S - 1.0


def check_connected(client: III, url: str, waited_s: float, advice: str = "") -> None:
    """`SiblingUnavailable` naming `url` when the engine never answered (`never_connected`)."""
    if never_connected(client, waited_s):
        raise SiblingUnavailable(
            f"no iii engine answers at {url} (waited {REGISTER_WAIT_S:g} s): start the engine, "
            f"or correct --engine / $III_URL{advice}"
        )


class BusCall:
    """`trigger_async` with a timeout, from any event loop."""

    def __init__(self, client: III) -> None:
        self.client = client

    async def __call__(
        self, function_id: str, payload: dict[str, Any], timeout_ms: int, **extra: Any
    ) -> Any:
        request = {"function_id": function_id, "payload": payload, "timeout_ms": timeout_ms}
        return await self.client.trigger_async({**request, **extra})


def _unavailable(function_id: str, exc: InvocationError) -> SiblingUnavailable:
    return SiblingUnavailable(f"{function_id} failed ({exc.code}): {exc.message}")


class SessionsClient:
    """`session::get` for bank selection. Without a session-manager there is no session metadata
    (bank selection falls through to the default); a failing one is a failed lookup.

    A session's meta is kept for `META_TTL_S` and dropped at once when `session::meta-updated`
    (or `session::deleted`) says it changed: a turn's first step in a running session then costs
    no round trip. The TTL bounds how stale it can get if such an event were lost."""

    META_TTL_S = 60.0
    META_CACHE = 4096

    def __init__(self, call: BusCall) -> None:
        self._call = call
        self._missing_logged = False
        self.absent = False
        self._metas: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        # Bumped by every invalidation: a reply to a lookup that was in flight across one may
        # predate the change it announced, and must not be kept for the TTL.
        self._invalidations = 0

    def invalidate(self, session_id: str) -> None:
        self._invalidations += 1
        self._metas.pop(session_id, None)

    def invalidate_all(self) -> None:
        """Forget every meta (the connection came back: the `session::meta-updated` events of
        the outage reached nobody, so no kept meta is known to be current)."""
        self._invalidations += 1
        self._metas.clear()

    async def get(self, session_id: str) -> dict[str, Any] | None:
        cached = self._metas.get(session_id)
        if cached is not None and time.monotonic() - cached[0] < self.META_TTL_S:
            return cached[1]
        invalidations = self._invalidations
        meta = await self._fetch(session_id)
        # An unknown session may appear any moment: never cached; nor a reply that may be older
        # than a `session::meta-updated` heard while it was on its way.
        if meta is not None and invalidations == self._invalidations:
            self._metas[session_id] = (time.monotonic(), meta)
            self._metas.move_to_end(session_id)
            while len(self._metas) > self.META_CACHE:
                self._metas.popitem(last=False)
        return meta

    async def _fetch(self, session_id: str) -> dict[str, Any] | None:
        try:
            reply = await self._call("session::get", {"session_id": session_id}, SESSION_TIMEOUT_MS)
        except InvocationError as exc:
            if exc.code == FUNCTION_NOT_FOUND:
                if not self._missing_logged:
                    log.warning("session_manager_absent", detail="no session metadata banks")
                    self._missing_logged = True
                self.absent = True
                return None
            raise _unavailable("session::get", exc) from None
        self.absent = False
        meta = reply.get("meta") if isinstance(reply, dict) else None
        return meta if isinstance(meta, dict) else None


class TranscriptClient:
    """`session::messages`, user and assistant messages only, one page at a time."""

    PAGE = 100

    def __init__(self, call: BusCall) -> None:
        self._call = call

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        payload: dict[str, Any] = {
            "session_id": session_id,
            "limit": self.PAGE,
            "roles": ["user", "assistant"],
        }
        if cursor is not None:
            payload["cursor"] = cursor
        try:
            reply = await self._call("session::messages", payload, 10_000)
        except InvocationError as exc:
            raise _unavailable("session::messages", exc) from None
        items = reply.get("messages") if isinstance(reply, dict) else None
        following = reply.get("next_cursor") if isinstance(reply, dict) else None
        return (
            [item for item in items if isinstance(item, dict)] if isinstance(items, list) else [],
            following if isinstance(following, str) and following else None,
        )


class RouterCompleter:
    """`router::complete` for extraction: `extraction_model`, else the router's first model;
    `extraction_timeout_ms`. A reply that ended in error is raised, not read as text."""

    MAX_OUTPUT_TOKENS = 1024

    def __init__(self, call: BusCall, settings: Callable[[], Settings]) -> None:
        self._call = call
        self._settings = settings
        self._default_model: str | None = None

    async def _model(self) -> str:
        if configured := self._settings().extraction_model:
            return configured
        if self._default_model is None:
            try:
                reply = await self._call("router::models::list", {}, 5000)
            except InvocationError as exc:
                raise _unavailable("router::models::list", exc) from None
            models = reply.get("models") if isinstance(reply, dict) else None
            ids = [m.get("id") for m in models or [] if isinstance(m, dict)]
            if not ids or not isinstance(ids[0], str):
                raise SiblingUnavailable("router::models::list offers no model for extraction")
            self._default_model = ids[0]
            log.info("extraction_model_chosen", model=ids[0])
        return self._default_model

    def _forget_default(self, model: object) -> None:
        """After a failed completion with the router's first model, ask which it is again on
        the next attempt: kept for good, a model the router no longer serves (its providers
        changed) failed every turn's extraction until the worker was restarted."""
        if model == self._default_model:
            self._default_model = None

    async def complete(self, system_prompt: str, user_text: str) -> str:
        settings = self._settings()
        request = {
            "model": await self._model(),
            "system_prompt": system_prompt,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": user_text}],
                    "timestamp": int(time.time() * 1000),
                }
            ],
            "max_output_tokens": self.MAX_OUTPUT_TOKENS,
        }
        try:
            reply = await self._call("router::complete", request, settings.extraction_timeout_ms)
        except InvocationError as exc:
            self._forget_default(request["model"])
            raise _unavailable("router::complete", exc) from None
        message = reply.get("message") if isinstance(reply, dict) else None
        if not isinstance(message, dict):
            raise SiblingUnavailable("router::complete answered without a message")
        stop = message.get("stop_reason")
        if stop in ("error", "aborted", "length"):  # no whole answer: retry, never half-read it
            if stop == "error":
                self._forget_default(request["model"])
            detail = message.get("error_message") or f"stop_reason {stop}"
            raise SiblingUnavailable(f"router::complete gave no complete reply: {detail}")
        parts = message.get("content")
        return "".join(
            part.get("text", "")
            for part in parts or []
            if isinstance(part, dict) and part.get("type") == "text"
        )


class StateClient:
    """The state worker as a `KeyValue`."""

    def __init__(self, call: BusCall) -> None:
        self._call = call
        self._missing_logged = False

    async def _state(self, function_id: str, payload: dict[str, Any]) -> Any:
        """No state worker installed reads as "nothing stored" and writes as no-ops (what each
        session was told then lives in this process only); a failing one is an error."""
        try:
            return await self._call(function_id, payload, STATE_TIMEOUT_MS)
        except InvocationError as exc:
            if exc.code == FUNCTION_NOT_FOUND:
                if not self._missing_logged:
                    log.warning("state_worker_absent", detail="session state kept in RAM only")
                    self._missing_logged = True
                return None
            raise _unavailable(function_id, exc) from None

    async def get(self, scope: str, key: str) -> Any:
        return await self._state("state::get", {"scope": scope, "key": key})

    async def set(self, scope: str, key: str, value: Any) -> None:
        await self._state("state::set", {"scope": scope, "key": key, "value": value})

    async def delete(self, scope: str, key: str) -> None:
        await self._state("state::delete", {"scope": scope, "key": key})


class QueueClient:
    """The durable extraction queue. `enqueue` answers False when there is no queue worker, so
    the caller runs the job inline rather than losing it.

    The queue worker serves `engine::queue::enqueue`, which only `default` may hold: it lives
    there, and so does its `queue::define`. `namespace`: this worker's (None: `default`); the
    queue delivers a job to the namespace its envelope names (as the engine names it for an
    `enqueue` action): without it, a memory worker in a namespace of its own had its turns
    extracted by the one in `default`, into that worker's banks."""

    def __init__(self, call: BusCall, namespace: str | None = None) -> None:
        self._call = call
        self._namespace = namespace

    async def define(self) -> bool:
        """Declare the queue (idempotent); False when no queue worker answers yet."""
        try:
            await self._call(
                "queue::define",
                {"queue": EXTRACTION_QUEUE, "config": QUEUE_CONFIG},
                5000,
                namespace=QUEUE_NAMESPACE,
            )
        except InvocationError as exc:
            log.info("queue_define_failed", code=exc.code, error=exc.message)
            return False
        return True

    async def enqueue(self, function_id: str, data: dict[str, Any], receipt: str) -> bool:
        payload = {
            "queue": EXTRACTION_QUEUE,
            "function_id": function_id,
            "data": data,
            "messageReceiptId": receipt,
        }
        if self._namespace is not None:
            payload["namespace"] = self._namespace
        try:
            await self._call("engine::queue::enqueue", payload, 5000)
        except InvocationError as exc:
            if exc.code != FUNCTION_NOT_FOUND:
                log.warning("enqueue_failed", receipt=receipt, code=exc.code, error=exc.message)
            return False
        return True


class RouterEmbedder:
    """`router::embed` as the semantic arm. After a failure it stays quiet for a while (one
    failed call per `EMBED_RETRY_AFTER_S`, not one per save) and recall runs lexical."""

    def __init__(self, call: BusCall, settings: Callable[[], Settings]) -> None:
        self._call = call
        self._settings = settings
        self._failed_at: float | None = None

    @property
    def model(self) -> str:
        return router_model(self._settings().embedding_model)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._failed_at is not None and time.monotonic() - self._failed_at < EMBED_RETRY_AFTER_S:
            raise SiblingUnavailable("router::embed failed recently; recall runs lexical")
        payload: dict[str, Any] = {"input": list(texts)}
        if model := self._settings().embedding_model:
            payload["model"] = model
        try:
            reply = await self._call("router::embed", payload, EMBED_TIMEOUT_MS)
        except InvocationError as exc:
            self._failed_at = time.monotonic()
            raise _unavailable("router::embed", exc) from None
        except asyncio.CancelledError:  # the caller's own deadline ran out: that is slow too
            self._failed_at = time.monotonic()
            raise
        vectors = reply.get("embeddings") if isinstance(reply, dict) else None
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            self._failed_at = time.monotonic()
            raise SiblingUnavailable("router::embed returned no embeddings for the input")
        embeddings = _embeddings(vectors)
        if embeddings is None:
            self._failed_at = time.monotonic()
            raise SiblingUnavailable(
                "router::embed returned malformed embeddings (each must be a non-empty list of "
                f"finite numbers within ±{MAX_COORDINATE:g}, all of one length)"
            )
        self._failed_at = None
        return embeddings


def _embeddings(vectors: list[Any]) -> list[list[float]] | None:
    """`router::embed`'s vectors as floats, or None when any is not a non-empty list of finite
    numbers of the common length: a NaN or an infinity stored in the index poisons the bank's
    running mean (the centring of every later recall, the typical pair's cosine) for good, and a
    string or a boolean is not a coordinate. Finite is as the index stores it (`MAX_COORDINATE`):
    1e39, or 70,000, is a float here and infinity there."""
    out: list[list[float]] = []
    for vector in vectors:
        if not isinstance(vector, list) or not vector:
            return None
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
            return None
        try:
            row = [float(x) for x in vector]
        except OverflowError:  # an integer past any float (JSON allows 400 digits)
            return None
        # A NaN fails the comparison too.
        in_range = all(-MAX_COORDINATE <= x <= MAX_COORDINATE for x in row)
        if not in_range or len(row) != len(out[0] if out else row):
            return None
        out.append(row)
    return out


class ConfigClient:
    """The configuration worker (built into the engine; always in namespace `default`).

    Hygiene from the reference worker: only the exact code `NOT_FOUND` means "absent" (anything
    else propagates, so a stored value is never overwritten by mistake), seeding never replaces a
    stored value, and each call is retried a few times."""

    def __init__(
        self,
        call: BusCall,
        config_id: str,
        *,
        name: str = "Memory",
        description: str = "Durable agent memory: banks, injection, recall and extraction.",
    ) -> None:
        self._call = call
        self.config_id = config_id
        self.name = name
        self.description = description

    async def _rpc(self, function_id: str, payload: dict[str, Any]) -> Any:
        for attempt in range(1, CONFIG_ATTEMPTS + 1):
            try:
                return await self._call(
                    function_id, payload, CONFIG_TIMEOUT_MS, namespace="default"
                )
            except InvocationError as exc:
                final = exc.code in (NOT_FOUND, FUNCTION_NOT_FOUND, SCHEMA_INVALID)
                if final or attempt == CONFIG_ATTEMPTS:
                    raise
                await asyncio.sleep(0.25 * attempt)
        raise AssertionError("unreachable")

    async def get(self) -> dict[str, Any] | None:
        """The stored value, or None when the id is absent.

        A value stored before our schema replaced another's (the public Rust worker's entry, an
        older version's) may fail ours, and the engine then refuses to serve it expanded. It is
        read raw and expanded here as the engine would: the caller decides what to make of it."""
        try:
            reply = await self._rpc("configuration::get", {"id": self.config_id})
        except InvocationError as exc:
            if exc.code == NOT_FOUND:
                return None
            if exc.code != SCHEMA_INVALID:
                raise
            reply = await self._rpc("configuration::get", {"id": self.config_id, "raw": True})
            if isinstance(reply, dict) and "value" in reply:
                reply = {**reply, "value": expand_placeholders(reply["value"])}
        if not isinstance(reply, dict) or "value" not in reply:
            raise SiblingUnavailable("configuration::get answered without a value")
        value = reply["value"]
        return value if isinstance(value, dict) else None

    async def ensure(self, schema: dict[str, Any], initial: dict[str, Any]) -> None:
        """Register the entry, seeding `initial` only when nothing is stored."""
        entry = {
            "id": self.config_id,
            "name": self.name,
            "description": self.description,
            "schema": schema,
        }
        try:
            await self._rpc("configuration::ensure", {**entry, "initial_value": initial})
            return
        except InvocationError as exc:
            if exc.code != FUNCTION_NOT_FOUND:
                raise
        # An engine older than `ensure`: register, with a value only after get said NOT_FOUND.
        stored = await self.get()
        await self._rpc(
            "configuration::register",
            entry if stored is not None else {**entry, "initial_value": initial},
        )


def expand_placeholders(value: Any) -> Any:
    """`${NAME:default}` expanded through a stored value, as the configuration worker serves it.
    A placeholder with neither an environment value nor a default stays as written (the engine
    would refuse the whole value; here only its field is then refused)."""
    if isinstance(value, dict):
        return {key: expand_placeholders(item) for key, item in value.items()}
    if isinstance(value, list):
        return [expand_placeholders(item) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is not None:
            return found
        return match.group(0) if match.group(2) is None else match.group(2)

    expanded = _PLACEHOLDER.sub(one, value)
    if _LONE_PLACEHOLDER.match(value) and expanded.strip():
        try:
            return json.loads(expanded.strip())
        except ValueError:  # text, not a JSON scalar: the string itself
            pass
    return expanded


async def probe_siblings(call: BusCall) -> list[tuple[str, bool, str]]:
    """Advisory reachability for `memory::doctor`: which sibling answers, and what its absence
    costs. Run concurrently, each bounded by `PROBE_TIMEOUT_MS`."""
    probes: list[tuple[str, str, dict[str, Any], str, str | None]] = [
        (
            "router-reachable",
            "router::models::list",
            {},
            "no llm-router: no extraction after turns (explicit memory::save still works) and no "
            "router::embed, so recall runs lexical only",
            None,
        ),
        (
            "session-manager-reachable",
            "session::get",
            {"session_id": "memory-doctor-probe"},
            "no session-manager: session metadata cannot pick a bank (turns use the turn's "
            "`memory_bank` or default_bank) and extraction cannot read transcripts",
            None,
        ),
        (
            "queue-reachable",
            "queue::define",
            {"queue": EXTRACTION_QUEUE, "config": QUEUE_CONFIG},
            "no queue worker: extraction jobs run inline, so a crash mid-pass is not retried",
            QUEUE_NAMESPACE,
        ),
        (
            "configuration-reachable",
            "configuration::list",
            {},
            "no configuration worker: settings come from the local defaults/YAML and do not "
            "hot-reload from the console",
            None,
        ),
    ]

    async def one(
        name: str, function_id: str, payload: dict[str, Any], cost: str, namespace: str | None
    ) -> tuple[str, bool, str]:
        started = time.perf_counter()
        try:
            await call(function_id, payload, PROBE_TIMEOUT_MS, namespace=namespace)
        except InvocationError as exc:
            return (
                name,
                False,
                f"{function_id} failed ({exc.code}: {exc.message}). Degraded: {cost}",
            )
        ms = (time.perf_counter() - started) * 1000
        return name, True, f"{function_id} answered in {ms:.1f} ms"

    return list(await asyncio.gather(*(one(*probe) for probe in probes)))
