"""When a pass runs: the checkpoint, the due rule, the run gate, and the backstop loop.

- `last_run` (`{ms}`, state scope `memory_consolidate`) is written only after a complete pass over
  every bank with no error and nothing capped; an errored or capped pass stays due.
- Due means `now − last_run + slack ≥ interval`, with `slack = min(5 min, interval / 10)`, so a
  heartbeat that fires a little early does not push the pass back a whole hour. A `last_run` a
  little in the future (clock skew) is not due; one more than an interval ahead was written by a
  clock that has since been set back, and is due (else the schedule, and retention with it, would
  stop until the clock caught up with it). `status` uses the same rule.
- One gate: a tick (cron or backstop) and a manual run never overlap, and a tick re-checks `due`
  under the gate, so two ticks in a row run one pass.
- Inert: while the configuration cannot be read, ticks do nothing (never a pass on defaults the
  person did not choose); manual runs still work.
- The last reports quote memories: a tick that runs no pass (not due, disabled, inert) takes out
  of them what the memory worker no longer holds (`_prune`), as an `erased` event does (`forget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from typing import Any

import structlog

from memory_worker.consolidate.access import AgentView, agent_view
from memory_worker.consolidate.config import ConsolidateSettings
from memory_worker.consolidate.ports import StateStore
from memory_worker.consolidate.runner import Consolidator, system_ms
from memory_worker.consolidate.wire import (
    BankReport,
    GroupReport,
    PassReport,
    RunRequest,
    StatusResponse,
)
from memory_worker.core.errors import (
    ERROR_CLASSES,
    BankNotFound,
    MemoryNotFound,
    SiblingUnavailable,
    WorkerError,
)

__all__ = [
    "LAST_REPORT",
    "LAST_RUN",
    "SCOPE",
    "SLACK_MAX_MS",
    "Scheduler",
    "interval_ms",
    "is_due",
    "next_due_at",
    "slack_ms",
]

log = structlog.get_logger(__name__)

SCOPE = "memory_consolidate"
LAST_RUN = "last_run"
LAST_REPORT = "last_report"
SLACK_MAX_MS = 300_000
HOUR_MS = 3_600_000
_MEMORY_ID = re.compile(r"\bfp[0-9a-f]{16}\b")  # a content-fingerprint id (`core.text.fingerprint`)


def interval_ms(hours: float) -> int:
    return int(hours * HOUR_MS)


def slack_ms(interval: int) -> int:
    return min(SLACK_MAX_MS, interval // 10)


def is_due(now_ms: int, last_ms: int | None, hours: float) -> bool:
    if last_ms is None:
        return True
    elapsed = now_ms - last_ms
    interval = interval_ms(hours)
    if elapsed < 0:
        # A checkpoint from the future: skew between clocks waits for it, but one further ahead
        # than a whole interval cannot be a pass this clock has seen (it was set back).
        return -elapsed > interval
    return elapsed + slack_ms(interval) >= interval


def next_due_at(last_ms: int | None, hours: float) -> int | None:
    if last_ms is None:
        return None
    interval = interval_ms(hours)
    return last_ms + interval - slack_ms(interval)


def _ms(value: Any) -> int | None:
    """`{ms}` as stored; older engines wrap the value as `{value: …}`."""
    if isinstance(value, dict) and "value" in value and "ms" not in value:
        value = value["value"]
    if isinstance(value, dict):
        value = value.get("ms")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class Scheduler:
    """Owns the gate, the checkpoint and the last reports; runs passes through a `Consolidator`."""

    def __init__(
        self,
        consolidator: Consolidator,
        state: StateStore | None,
        settings: Callable[[], ConsolidateSettings],
        *,
        inert: Callable[[], str | None] = lambda: None,
        clock: Callable[[], int] = system_ms,
    ) -> None:
        """`state` None: no state worker (the checkpoint then lives in this process only);
        `inert()` returns why the configuration is unreadable, or None."""
        self.consolidator = consolidator
        self.state = state
        self.settings = settings
        self.inert = inert
        self.clock = clock
        self.gate = asyncio.Lock()
        self._last_run: int | None = None  # what this process checkpointed (state may lag)
        self._reports: dict[str, BankReport] = {}
        self.passes = 0

    def __repr__(self) -> str:
        return (
            f"Scheduler(passes={self.passes}, running={self.gate.locked()}, "
            f"last_run={self._last_run})"
        )

    # --- checkpoint -------------------------------------------------------------------------

    async def last_run(self) -> int | None:
        """The last complete pass; raises `SiblingUnavailable` when the state worker fails."""
        stored = None if self.state is None else _ms(await self.state.get(SCOPE, LAST_RUN))
        known = [ms for ms in (stored, self._last_run) if ms is not None]
        return max(known) if known else None

    async def _checkpoint(self, started_ms: int) -> None:
        self._last_run = started_ms
        if self.state is not None:
            await self.state.set(SCOPE, LAST_RUN, {"ms": started_ms})

    async def reports(self) -> dict[str, BankReport]:
        stored, _ = await self._stored_reports()
        return {**stored, **self._reports}

    async def _stored_reports(self) -> tuple[dict[str, BankReport], set[str]]:
        """The bank reports the state worker holds, and the banks whose report there does not
        read as one of ours. The public Rust sibling kept `{dry_run, banks: [BankReport]}` under
        the same key, a list whose groups lack our fields: read as a mapping, it failed status,
        a one-bank run and an erasure's scrub until a pass over every bank replaced it."""
        stored: dict[str, BankReport] = {}
        unreadable: set[str] = set()
        if self.state is None:
            return stored, unreadable
        raw = await self.state.get(SCOPE, LAST_REPORT)
        if isinstance(raw, dict) and "value" in raw and "banks" not in raw:
            raw = raw["value"]  # older engines wrap what state::get returns
        banks = raw.get("banks") if isinstance(raw, dict) else None
        if isinstance(banks, list):  # the Rust sibling's: each report names its bank
            banks = {r["bank"]: r for r in banks if isinstance(r, dict) and "bank" in r}
        for name, report in banks.items() if isinstance(banks, dict) else ():
            try:
                stored[str(name)] = BankReport.model_validate(report)
            except ValueError:
                unreadable.add(str(name))
        return stored, unreadable

    async def _keep_reports(self, report: PassReport, *, every_bank: bool) -> None:
        """Keep each bank's last report. `every_bank`: the pass covered every bank there is, so
        a bank it did not report is gone (deleted, or out of the allowlist): its report, which
        names what it held, goes too (kept, a deleted bank's memory texts stayed for good)."""
        if every_bank:
            self._reports.clear()
        for bank in report.banks:
            self._reports[bank.bank] = bank
        if self.state is None:
            return
        try:
            merged = dict(self._reports) if every_bank else await self.reports()
            await self.state.set(
                SCOPE,
                LAST_REPORT,
                {"banks": {name: r.to_wire() for name, r in sorted(merged.items())}},
            )
        except WorkerError as err:  # the reports are a view; the checkpoint decides what runs
            log.warning("report_not_stored", error=str(err))

    async def forget(self, bank: str, memory_ids: set[str]) -> bool:
        """Take the memories an erasure destroyed (`memory::forget-subject`) out of the kept
        reports, texts and ids (`_without_erased`): a person who asked to be forgotten is not
        read back from the last pass's report until the next pass reaches their bank. Under the
        gate, so a pass that read them before the erasure stores its report first. True when a
        report named one of them, or one that could not be read (another version's) left the
        state."""
        async with self.gate:
            unreadable: set[str] = set()
            try:
                stored, unreadable = await self._stored_reports()
                reports = {**stored, **self._reports}
            except WorkerError as err:  # the stored copy is unreadable: scrub ours at least
                log.warning("report_not_scrubbed", bank=bank, error=str(err))
                reports = dict(self._reports)
            report = reports.get(bank)
            scrubbed = None if report is None else _without_erased(report, memory_ids)
            # A stored report of this bank that cannot be read (another version's) cannot be
            # scrubbed either: it leaves, with whatever texts it holds.
            if scrubbed is None and bank not in unreadable:
                return False
            if scrubbed is not None:
                self._reports[bank] = reports[bank] = scrubbed
            await self._store_reports(reports, bank=bank)
            return True

    async def _prune(self) -> bool:
        """Take out of the kept reports what the memory worker no longer holds (under the gate):
        `forget` hears of an erasure through its `erased` events, which only the bus carries. A
        schedule against a standalone server (`serve --server`, its reports in a file) never
        heard one, nor did a sibling that was down when the erasure ran: the person's texts and
        ids stayed until the bank's next pass (a day later by default, never with the schedule
        off). Asked of each id a report names (`memory::get`, a read: no access is counted) at
        every tick that runs no pass; a pass reads every bank again anyway. A bank deleted since
        loses its report, as a pass over every bank drops it. True when a report changed."""
        try:
            stored, _ = await self._stored_reports()
        except WorkerError as err:
            log.warning("reports_not_checked", error=str(err))
            return False
        reports = {**stored, **self._reports}
        changed = False
        for bank, report in sorted(reports.items()):
            try:
                gone = await self._gone(bank, report)
            except BankNotFound:
                del reports[bank]
                self._reports.pop(bank, None)
                changed = True
                continue
            except SiblingUnavailable as err:  # the worker is away: the next tick asks again
                log.warning("reports_not_checked", bank=bank, error=str(err))
                break
            except WorkerError as err:
                # This bank only (one that failed to load is `storage` until it is repaired):
                # ending here left every bank named after it unscrubbed for as long.
                log.warning("reports_not_checked", bank=bank, error=str(err))
                continue
            scrubbed = _without_erased(report, gone) if gone else None
            if scrubbed is not None:
                reports[bank] = self._reports[bank] = scrubbed
                changed = True
        if changed:
            await self._store_reports(reports)
        return changed

    async def _store_reports(self, reports: dict[str, BankReport], **where: str) -> None:
        """The kept reports, scrubbed, in place of the stored ones (a failure is logged: the
        next scrub tries again)."""
        if self.state is None:
            return
        try:
            await self.state.set(
                SCOPE,
                LAST_REPORT,
                {"banks": {name: r.to_wire() for name, r in sorted(reports.items())}},
            )
        except WorkerError as err:
            log.warning("report_not_scrubbed", error=str(err), **where)

    async def _gone(self, bank: str, report: BankReport) -> set[str]:
        """The memories `report` names (its groups', and the ids its errors quote) that the
        memory worker no longer has in `bank`."""
        named = {
            memory_id
            for group in report.groups
            for memory_id in (group.winner_id, *group.loser_ids, *group.skipped_pinned)
        }
        named.update(_MEMORY_ID.findall(" ".join(report.errors)))
        gone: set[str] = set()
        for memory_id in sorted(named):
            try:
                await self.consolidator.memory.call("memory::get", {"bank": bank, "id": memory_id})
            except MemoryNotFound:
                gone.add(memory_id)
        return gone

    # --- passes -----------------------------------------------------------------------------

    async def run(
        self, request: RunRequest, *, scheduled: bool = False, agent: bool = False
    ) -> PassReport:
        """A manual run (`memory-consolidate::run`): waits for the gate, then one pass. `agent`:
        an agent asked, held to `read_write` on every bank the pass covers (`access`)."""
        if not agent:
            async with self.gate:
                return await self._pass(request, scheduled=scheduled)
        await self._agent_may_run(request)  # refused at once, not after a running pass
        async with self.gate:
            # Again once the gate is ours (a level changed while a pass ran holds), and the pass
            # covers the banks checked, not a listing made again: a bank made in between, at
            # `none` or scoped, was consolidated for the agent and shown to it.
            view, checked = await self._agent_may_run(request)
            report = await self._pass(request, scheduled=scheduled, only=checked)
        return report.model_copy(update={"banks": [view.shown(b) for b in report.banks]})

    async def _agent_may_run(self, request: RunRequest) -> tuple[AgentView, list[str]]:
        """`forbidden` unless an agent may write every bank `request` covers; else what it may
        see of each bank (`AgentView`) and those banks."""
        view = await agent_view(self.consolidator.memory)
        checked = await self.consolidator.banks(self.settings(), request.bank)
        view.check_write(checked)
        return view, checked

    async def _pass(
        self, request: RunRequest, *, scheduled: bool, only: list[str] | None = None
    ) -> PassReport:
        settings = self.settings()
        dry_run = settings.dry_run if request.dry_run is None else request.dry_run
        report = await self.consolidator.run(
            settings, bank=request.bank, dry_run=dry_run, only=only
        )
        self.passes += 1
        await self._keep_reports(report, every_bank=request.bank is None)
        complete = request.bank is None and (not dry_run or scheduled)
        clean = all(not b.errors and not b.capped for b in report.banks) and not report.errors
        if not (complete and clean):
            return report
        try:
            await self._checkpoint(report.started_at)
        except WorkerError as err:
            return report.model_copy(update={"errors": [*report.errors, f"checkpoint: {err}"]})
        return report.model_copy(update={"checkpointed": True})

    async def tick(self, source: str) -> dict[str, Any]:
        """One heartbeat (cron or backstop): a pass if one is due, else nothing but `_prune`."""
        settings = self.settings()
        if (why := self.inert()) is not None:
            async with self.gate:
                await self._prune()
            return {"ran": False, "reason": f"inert: {why}"}
        if not settings.enabled:
            async with self.gate:
                await self._prune()
            return {"ran": False, "reason": "disabled"}
        async with self.gate:
            try:
                last = await self.last_run()
            except WorkerError as err:
                log.warning("tick_skipped", source=source, error=str(err))
                return {"ran": False, "reason": f"last_run unreadable: {err}"}
            if not is_due(self.clock(), last, settings.interval_hours):
                await self._prune()
                return {
                    "ran": False,
                    "reason": "not due",
                    "next_due_at": next_due_at(last, settings.interval_hours),
                }
            log.info("pass_due", source=source, last_run=last)
            try:
                report = await self._pass(RunRequest(), scheduled=True)
            except WorkerError as err:  # the bank list itself failed: stays due
                log.warning("pass_failed", source=source, error=str(err))
                return {"ran": False, "reason": f"pass failed: {err}"}
        return {
            "ran": True,
            "superseded": report.superseded,
            "checkpointed": report.checkpointed,
            "banks": len(report.banks),
        }

    async def status(self, *, agent: bool = False) -> StatusResponse:
        """The schedule and the last reports. `agent`: only the banks it may read (`access`)."""
        view = await agent_view(self.consolidator.memory) if agent else None
        settings = self.settings()
        why = self.inert()
        error: str | None = None
        try:
            last = await self.last_run()
            reports = await self.reports()
        except WorkerError as err:
            last, reports, error = self._last_run, dict(self._reports), str(err)
        if view is not None:
            reports = {n: view.shown(r) for n, r in reports.items() if view.may(n, "read")}
        due = (
            why is None and settings.enabled and is_due(self.clock(), last, settings.interval_hours)
        )
        return StatusResponse(
            enabled=settings.enabled,
            inert=why is not None,
            inert_reason=why,
            interval_hours=settings.interval_hours,
            dry_run=settings.dry_run,
            last_run=last,
            due=due,
            next_due_at=next_due_at(last, settings.interval_hours),
            running=self.gate.locked(),
            banks=reports,
            error=error,
        )

    async def backstop(
        self,
        first_s: float,
        every_s: float,
        stopping: asyncio.Event,
        on_tick: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """The schedule without (or besides) cron: a tick soon after boot — a machine that was off
        catches up — then one every `every_s`, each outcome handed to `on_tick`. Returns when
        `stopping` is set."""
        delay = first_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=delay)
            if stopping.is_set():
                return
            try:
                outcome = await self.tick("backstop")
                log.info("backstop_tick", **outcome)
                if on_tick is not None:
                    on_tick(outcome)
            except Exception:  # a bug must not end the schedule; it is logged with its trace
                log.exception("backstop_tick_failed")
            delay = every_s


def _without_erased(report: BankReport, memory_ids: set[str]) -> BankReport | None:
    """`report` without what it held of `memory_ids` (erased), or None when it names none of
    them. An id is a fingerprint of its text (a guess is confirmed by hashing it), so the erasure
    takes the ids with the texts: a group naming one of them leaves the list (it is about the
    person erased: only memories of one subject are grouped), its counts stay in the bank's
    totals; and so does the quoted guard finding (`numbers differ (4821 / 4812)`) with it. An
    error naming one keeps what failed and its code: a merge that landed during the erasure was
    refused with a conflict naming whom it erased."""
    groups = [group for group in report.groups if not _names_any(group, memory_ids)]
    errors = [_without_detail(error, memory_ids) for error in report.errors]
    if len(groups) == len(report.groups) and errors == report.errors:
        return None
    return report.model_copy(update={"groups": groups, "errors": errors})


def _names_any(group: GroupReport, memory_ids: set[str]) -> bool:
    members = (group.winner_id, *group.loser_ids, *group.merged_ids, *group.skipped_pinned)
    return not memory_ids.isdisjoint(members)


def _without_detail(error: str, memory_ids: set[str]) -> str:
    """`error` (`what failed: code: message`) without its message, and with each of
    `memory_ids` it names left out, when it names one; unchanged otherwise."""
    named = [memory_id for memory_id in memory_ids if memory_id in error]
    if not named:
        return error
    head, _, rest = error.partition(": ")
    for memory_id in named:
        head = head.replace(memory_id, "(erased)")
    code = rest.partition(": ")[0]
    kept = f"{head}: {code}" if code in ERROR_CLASSES else head
    return f"{kept} (its message went with an erased memory)"
