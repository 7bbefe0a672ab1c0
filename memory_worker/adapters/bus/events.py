"""The two trigger types this worker provides, `memory::item-changed` and `memory::bank-changed`.

The engine does not fan out events of worker-provided types: it forwards each binding here
(`register_trigger`), and we fire every matching binding ourselves as a fire-and-forget (`Void`)
call. Delivery is at-least-once and unordered: a send that fails is tried again, up to
`MAX_ATTEMPTS` times with a doubling backoff, carrying the same `event_id` (subscribers dedupe on
it); it never slows the write that caused it. A binding's config is `{bank?, subject?}`; anything
else is refused, which the engine reports to whoever bound it. A binding for a subject gets the
events of general memories and of that subject's own, never another person's (subject scoping).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from iii import TriggerAction
from iii.iii import III
from iii.triggers import TriggerConfig, TriggerHandler

from memory_worker.app.base import PREVIOUS_SUBJECT, clean_subject, left_view
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.core.errors import InvalidInput
from memory_worker.core.names import check_name
from memory_worker.core.subjects import same_subject
from memory_worker.storage.logger import get_logger

__all__ = [
    "BACKOFF_S",
    "MAX_ATTEMPTS",
    "TRIGGER_TYPES",
    "BindingTable",
    "BusEmitter",
    "forget_bindings_on_reconnect",
    "provide_trigger_types",
]

log = get_logger(__name__)

MAX_ATTEMPTS = 5  # per binding and event: a reconnect of the SDK takes ~1-2 s
BACKOFF_S = 0.25  # before the 2nd attempt; doubled each time (0.25 + 0.5 + 1 + 2 ≈ 4 s in all)

CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "BindingConfig",
    "description": "Config accepted by both trigger types.",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "bank": {"type": ["string", "null"], "description": "Only deliver events for this bank."},
        "subject": {
            "type": ["string", "null"],
            "description": "Only deliver events of general memories and of this subject's own.",
        },
    },
}

# What `iii worker info` and the console show a subscriber: every `event_type` the worker sends on
# each (`ItemEvent`, `BankEvent`), named as it arrives.
TRIGGER_TYPES: dict[str, str] = {
    ITEM_CHANGED: "A memory was created, updated, superseded, deleted, or erased (by "
    "memory::forget-subject: its `memory` carries only its id and subject) in a memory bank. "
    "Payload: { event_type, bank, memory, reason? } (reason on consolidation changes, and "
    "`redacted: <labels>` when secrets were redacted on save/update). An update that gave the "
    "memory another subject carries `previous_subject` to bindings without a subject; a "
    "binding for the subject it left gets `moved` instead (its id and that subject, no text). "
    "Bind console/live views here.",
    BANK_CHANGED: "A memory bank was created or trashed, its rules changed (rules-changed), its "
    "description or settings changed (configured), or its log was compacted (compacted). "
    "Payload: { event_type, bank }.",
}


_Filter = tuple[str | None, str | None]  # (bank, subject); None: any


def _bank_filter(trigger_type: str, config: object) -> _Filter:
    """The binding's (bank, subject) filters; `InvalidInput` on anything but `{bank?, subject?}`."""
    if config is None:
        return None, None
    if not isinstance(config, dict):
        raise InvalidInput(
            f"{trigger_type} binding config must be an object like {{bank?, subject?}}"
        )
    unknown = sorted(set(config) - {"bank", "subject"})
    if unknown:
        raise InvalidInput(
            f"{trigger_type} binding config accepts only `bank` and `subject`; got {unknown}"
        )
    bank, subject = config.get("bank"), config.get("subject")
    if bank is not None and not isinstance(bank, str):
        raise InvalidInput(f"{trigger_type} binding `bank` must be a string")
    # Cleaned as a memory's subject is stored (whitespace collapsed, NFC): compared to it.
    only = clean_subject(subject)[0] if isinstance(subject, str) else None
    if subject is not None and only is None:
        raise InvalidInput(f"{trigger_type} binding `subject` must be a non-empty string")
    return check_name(bank, "bank") if bank is not None else None, only


def subject_of(payload: dict[str, Any]) -> str | None:
    """Who an event is about: its memory's subject (or, for an erasure, the subject named)."""
    memory = payload.get("memory")
    subject = memory.get("subject") if isinstance(memory, dict) else payload.get("subject")
    return subject if isinstance(subject, str) else None


class BindingTable(TriggerHandler[Any]):
    """The live bindings of one trigger type. Called on the SDK's loop, read on ours: a lock."""

    def __init__(self, trigger_type: str) -> None:
        self.trigger_type = trigger_type
        self._lock = threading.Lock()
        self._bindings: dict[str, tuple[TriggerConfig[Any], _Filter]] = {}

    async def register_trigger(self, config: TriggerConfig[Any]) -> None:
        bank, subject = _bank_filter(self.trigger_type, config.config)
        with self._lock:
            self._bindings[config.id] = (config, (bank, subject))
        log.info(
            "binding_added",
            type=self.trigger_type,
            function_id=config.function_id,
            bank=bank,
            subject=subject,
        )

    async def unregister_trigger(self, config: TriggerConfig[Any]) -> None:
        with self._lock:
            self._bindings.pop(config.id, None)

    def clear(self) -> None:
        with self._lock:
            self._bindings.clear()

    def matching(self, bank: str, subject: str | None = None) -> list[TriggerConfig[Any]]:
        """Bindings for an event of `bank` about `subject` (None: a general memory)."""
        return [binding for binding, _ in self.routes(bank, subject)]

    def routes(
        self, bank: str, subject: str | None = None
    ) -> list[tuple[TriggerConfig[Any], bool]]:
        """`matching`, each with whether the binding views one subject (`{subject}`)."""
        with self._lock:
            return [
                (b, only_subject is not None)
                for b, (only_bank, only_subject) in self._bindings.values()
                if only_bank in (None, bank)
                and (subject is None or only_subject is None or same_subject(only_subject, subject))
            ]


async def provide_trigger_types(client: III, tables: dict[str, BindingTable]) -> None:
    """Register `TRIGGER_TYPES`, each with the table that holds its bindings, on the SDK's loop.

    The engine answers a trigger type's registration by replaying at once the bindings it parked
    while no provider was there (after every restart: the consolidation sibling's). iii-sdk 0.25's
    `register_trigger_type` sends the registration first and stores the handler after, on the
    caller's thread, while its own loop thread reads the socket: a replay read in between finds
    no handler and is dropped unanswered, so that binding got no event until its owner rebound.
    On the SDK's loop the store happens before the loop can send or read anything."""

    def register() -> None:
        with warnings.catch_warnings():  # 0.25 deprecates trigger types; siblings still use them
            warnings.simplefilter("ignore", DeprecationWarning)
            for trigger_type, description in TRIGGER_TYPES.items():
                client.register_trigger_type(
                    {
                        "id": trigger_type,
                        "description": description,
                        "trigger_request_format": CONFIG_SCHEMA,
                    },
                    tables[trigger_type],
                )

    async def on_sdk_loop() -> None:
        register()

    # The SDK has no public handle on its loop; `_loop` is the one its socket is read on.
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(on_sdk_loop(), client._loop))


def forget_bindings_on_reconnect(client: III, tables: dict[str, BindingTable]) -> None:
    """Drop every binding held when a lost connection comes back. While this worker is away
    the engine parks its bindings, forgets those removed meanwhile (it has no provider to tell)
    and replays the ones still held once the trigger types are registered again: kept, the old
    ones went on firing for subscribers that had unbound, or re-bound with another filter.
    The SDK reports `connected` on its own thread before it replays our registrations and
    before it reads a frame, so the replayed bindings all land in the emptied tables."""
    away = False

    def on_state(state: str) -> None:
        nonlocal away
        if state != "connected":
            away = True
        elif away:
            away = False
            for table in tables.values():
                table.clear()
            log.info("bindings_reset", reason="reconnected; the engine replays the live ones")

    client.add_connection_state_listener(on_state)


class BusEmitter:
    """The core's `Emitter` over the bus: each event becomes one `Void` call per matching
    binding, sent in the background from the service's loop."""

    def __init__(
        self,
        client: III,
        tables: dict[str, BindingTable],
        *,
        backoff_s: float = BACKOFF_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._tables = tables
        self._backoff_s = backoff_s
        self._sleep = sleep
        self._sending: set[asyncio.Task[None]] = set()

    def emit(self, trigger_type: str, payload: dict[str, Any]) -> None:
        table = self._tables.get(trigger_type)
        if table is None:
            return
        bank = str(payload.get("bank", ""))
        routes = table.routes(bank, subject_of(payload))
        # A memory moved to another subject: a subject's view learns nobody else's name from
        # its event, and the views it left hear that it left (`left_view`), not what it says.
        notice = left_view(payload)
        scoped = payload
        if notice is not None:
            scoped = {k: v for k, v in payload.items() if k != PREVIOUS_SUBJECT}
        for binding, one_subject in routes:
            self._send(trigger_type, binding, scoped if one_subject else payload)
        if notice is not None:
            told = {binding.id for binding, _ in routes}
            for binding, _ in table.routes(bank, subject_of(notice)):
                if binding.id not in told:
                    self._send(trigger_type, binding, notice)

    def _send(
        self, trigger_type: str, binding: TriggerConfig[Any], payload: dict[str, Any]
    ) -> None:
        task = asyncio.create_task(self._deliver(trigger_type, binding, payload))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _deliver(
        self, trigger_type: str, binding: TriggerConfig[Any], payload: dict[str, Any]
    ) -> None:
        request: dict[str, Any] = {
            "function_id": binding.function_id,
            "payload": payload,
            "action": TriggerAction.Void(),
        }
        if binding.namespace:
            request["namespace"] = binding.namespace
        if binding.metadata:
            request["metadata"] = binding.metadata
        delay_s = self._backoff_s
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await self._client.trigger_async(request)
                return
            except Exception as exc:  # fire-and-forget: a subscriber's trouble is not the writer's
                last = attempt == MAX_ATTEMPTS
                log.warning(
                    "event_delivery_dropped" if last else "event_delivery_retried",
                    type=trigger_type,
                    function_id=binding.function_id,
                    event_id=payload.get("event_id"),
                    attempt=attempt,
                    error=str(exc),
                )
            if attempt < MAX_ATTEMPTS:
                await self._sleep(delay_s)
                delay_s *= 2

    async def flush(self) -> None:
        """Wait for in-flight deliveries (shutdown)."""
        while pending := list(self._sending):
            await asyncio.gather(*pending, return_exceptions=True)
