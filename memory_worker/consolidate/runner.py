"""One consolidation pass: read each bank through the memory worker's public functions, plan, merge
what may be merged, ask the LLM tier when it is on, and report.

Invariants:
- every write is `memory::supersede {reinforce: true, reason, expected_revision,
  expected_winner_revision}` (or, for a promotion, `memory::rule::set` with the rule's revision):
  the memory worker refuses a pinned, retired or changed record (loser or winner), so a plan made
  on a stale read changes nothing it should not;
- the per-run budget spans every bank; what it postpones is counted as `capped`;
- a dry run reads and plans only (no supersede, no rule write, no LLM call);
- nothing is retried inside a pass: an error is reported, and the pass is then not checkpointed, so
  the next tick plans again from what the memory worker holds by then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from memory_worker.consolidate.config import ConsolidateSettings
from memory_worker.consolidate.judge import (
    LEARNED_RULE,
    MAX_GROUPS_OFFERED,
    MAX_PROMOTIONS_OFFERED,
    merge_learned,
    parse_reply,
    render_request,
    system_prompt,
)
from memory_worker.consolidate.plan import Group, Row, Tier, plan_exact, plan_semantic, reason
from memory_worker.consolidate.ports import Completer, MemoryClient
from memory_worker.consolidate.wire import BankReport, GroupReport, LlmReport, PassReport
from memory_worker.core.errors import (
    BankNotFound,
    InvalidInput,
    SiblingUnavailable,
    StorageError,
    WorkerError,
)
from memory_worker.core.names import check_name

__all__ = ["LIST_PAGE", "MAX_REPORTED_GROUPS", "Budget", "Consolidator", "system_ms"]

log = structlog.get_logger(__name__)

LIST_PAGE = 500  # memory::list's largest page
MAX_REPORTED_GROUPS = 100  # a report lists this many groups per bank; the counts stay exact


def system_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Budget:
    """Supersedes left for this pass, across all banks."""

    remaining: int
    # A budget of 0 is the setting's "report-only" (consolidate.example.yaml), not a pass
    # postponed: counted as capped, it would never checkpoint and would rerun every hour.
    report_only: bool = field(init=False)

    def __post_init__(self) -> None:
        self.report_only = self.remaining <= 0

    def take(self) -> bool:
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


class _Abort(Exception):
    """The memory worker stopped answering: the rest of this bank is not attempted."""


@dataclass
class _Bank:
    """One bank's pass in progress."""

    name: str
    dry_run: bool
    report: BankReport
    rows: list[Row] = field(default_factory=list)
    revisions: dict[str, int] = field(default_factory=dict)
    retired: set[str] = field(default_factory=set)
    groups: list[GroupReport] = field(default_factory=list)
    reported: dict[int, int] = field(default_factory=dict)  # id(Group) → index in `groups`
    errors: list[str] = field(default_factory=list)
    merged: int = 0
    capped: int = 0


class Consolidator:
    """Runs passes; holds no state between them (the checkpoint is the scheduler's)."""

    def __init__(
        self,
        memory: MemoryClient,
        completer: Completer | None = None,
        clock: Callable[[], int] = system_ms,
    ) -> None:
        self.memory = memory
        self.completer = completer
        self.clock = clock

    async def banks(self, settings: ConsolidateSettings, bank: str | None) -> list[str]:
        """The banks a pass covers: the allowlist (empty = every bank) ∩ what exists, or `bank`."""
        listed = await self.memory.call("memory::bank::list", {})
        names = sorted(
            str(info["name"])
            for info in listed.get("banks", [])
            if isinstance(info, dict) and isinstance(info.get("name"), str)
        )
        allowed = set(settings.banks)
        if bank is not None:
            # A name no bank can have is the caller's mistake, as at every memory function, not
            # a bank that is missing (a 404 told the person it had been deleted).
            check_name(bank, "bank")
            if allowed and bank not in allowed:
                raise InvalidInput(
                    f"bank {bank} is not in memory-consolidate's `banks` allowlist "
                    f"({', '.join(sorted(allowed))})"
                )
            if bank not in names:
                raise BankNotFound(bank)
            return [bank]
        return [name for name in names if not allowed or name in allowed]

    async def run(
        self,
        settings: ConsolidateSettings,
        *,
        bank: str | None = None,
        dry_run: bool = False,
        only: list[str] | None = None,
    ) -> PassReport:
        """One pass over `bank` (None: every bank `banks` lists), or exactly the banks `only`
        names (an agent's, checked against them: a bank listed again could be one made since)."""
        started = self.clock()
        clock_start = time.perf_counter()
        budget = Budget(settings.max_supersedes_per_run)
        names = only if only is not None else await self.banks(settings, bank)
        reports = [await self._bank(name, settings, dry_run, budget) for name in names]
        return PassReport(
            dry_run=dry_run,
            started_at=started,
            duration_ms=round((time.perf_counter() - clock_start) * 1000, 1),
            banks=reports,
            superseded=sum(r.merged for r in reports),
        )

    # --- one bank ---------------------------------------------------------------------------

    async def _bank(
        self, name: str, settings: ConsolidateSettings, dry_run: bool, budget: Budget
    ) -> BankReport:
        began = time.perf_counter()
        report = BankReport(bank=name, at=self.clock(), dry_run=dry_run, semantic="off")
        state = _Bank(name, dry_run, report)
        semantic = "off"
        llm: LlmReport | None = None
        groups: list[Group] = []
        expired = 0
        try:
            if not dry_run:
                expired = await self._expire(state)
            await self._scan(state)
            groups = plan_exact(state.rows)
            if settings.semantic_enabled:
                found, semantic = await self._semantic(state, groups, settings)
                groups += found
            for group in groups:
                await self._apply(state, group, budget)
            if settings.llm_assist_enabled:
                llm = await self._llm(state, groups, settings, budget)
        except _Abort:
            pass
        except WorkerError as err:
            state.errors.append(str(err))
        log.info(
            "bank_consolidated",
            bank=name,
            scanned=len(state.rows),
            groups=len(groups),
            merged=state.merged,
            capped=state.capped,
            errors=len(state.errors),
            dry_run=dry_run,
        )
        return state.report.model_copy(
            update={
                "scanned": len(state.rows),
                "groups": state.groups[:MAX_REPORTED_GROUPS],
                "groups_found": len(state.groups),
                "merged": state.merged,
                "report_only": sum(g.action == "report-only" for g in state.groups),
                "skipped_pinned": sum(len(g.skipped_pinned) for g in state.groups),
                "expired": expired,
                "capped": state.capped,
                "semantic": semantic,
                "llm": llm,
                "errors": state.errors,
                "duration_ms": round((time.perf_counter() - began) * 1000, 1),
            }
        )

    async def _expire(self, state: _Bank) -> int:
        """Run the memory worker's retention reaper on this bank before reading it: the reaper
        lives with the files (`memory::stats`), the schedule is this sibling's. A memory worker
        that predates `memory::stats` has no retention: nothing to run."""
        try:
            stats = await self._call(state, "memory::stats", {"bank": state.name})
        except InvalidInput:
            return 0
        expired = stats.get("expired") if isinstance(stats, dict) else None
        return len(expired) if isinstance(expired, list) else 0

    async def _call(self, state: _Bank, function_id: str, payload: dict[str, Any]) -> Any:
        """A memory call whose transport failure ends this bank's pass (reported once), as does
        the bank deleted meanwhile: nothing more of it can be merged, each merge left was still
        tried, and a report held one `bank_not_found` line per group."""
        try:
            return await self.memory.call(function_id, payload)
        except (SiblingUnavailable, StorageError, BankNotFound) as err:
            state.errors.append(f"{function_id}: {err}")
            raise _Abort from None

    async def _scan(self, state: _Bank) -> None:
        """Every live memory, page by page. A row that does not decode is an error, so a partial
        read is never mistaken for a complete one (the pass is then not checkpointed)."""
        seen: dict[str, Row] = {}
        offset = 0
        while True:
            page = await self._call(
                state,
                "memory::list",
                {"bank": state.name, "limit": LIST_PAGE, "offset": offset},
            )
            items = page.get("memories") if isinstance(page, dict) else None
            total = page.get("total") if isinstance(page, dict) else None
            if not isinstance(items, list) or not isinstance(total, int):
                state.errors.append("memory::list answered without memories and total")
                break
            for raw in items:
                try:
                    row = Row.from_wire(raw)
                except ValueError as exc:
                    state.errors.append(f"unreadable memory in the listing: {exc}")
                    continue
                seen[row.id] = row  # a record that moved between pages is read once
            offset += len(items)
            if not items or offset >= total:
                break
        state.rows = sorted(seen.values(), key=lambda r: r.id)
        state.revisions = {row.id: row.revision for row in state.rows}

    async def _semantic(
        self, state: _Bank, exact: list[Group], settings: ConsolidateSettings
    ) -> tuple[list[Group], str]:
        """Near-duplicate candidates from `memory::recall` mode `semantic`, one query per memory
        (newest first, at most `semantic_max_queries`). Exact losers are left out (they merge into
        their winner anyway), and so are pairs already reported as one reorder group."""
        losers = {r.id for g in exact if g.tier is Tier.EXACT for r in g.losers}
        reorder_of = {m.id: g.winner.id for g in exact if g.tier is Tier.REORDER for m in g.members}
        candidates = [r for r in state.rows if r.id not in losers]
        queried = sorted(candidates, key=lambda r: (-r.created_at, r.id))
        status = "ran"
        if len(queried) > settings.semantic_max_queries:
            queried, status = queried[: settings.semantic_max_queries], "partial"
        known = {r.id for r in candidates}
        neighbours: dict[str, dict[str, float]] = {}
        for row in queried:
            query: dict[str, Any] = {
                "bank": state.name,
                "query": row.text,
                "mode": "semantic",
                "limit": settings.semantic_neighbours + 1,
            }
            if row.subject is not None:
                # In a scoped bank, its own subject's memories and general ones: only those can
                # merge with it, and another person's must not crowd them out.
                query["subject"] = row.subject
            answer = await self._call(state, "memory::recall", query)
            if answer.get("retrieval") != "semantic":
                return [], "unavailable"
            found: dict[str, float] = {}
            for hit in answer.get("memories", []):
                memory = hit.get("memory") if isinstance(hit, dict) else None
                other = memory.get("id") if isinstance(memory, dict) else None
                score = hit.get("score") if isinstance(hit, dict) else None
                if other not in known or other == row.id or not isinstance(score, int | float):
                    continue
                if reorder_of.get(other) is not None and reorder_of.get(other) == reorder_of.get(
                    row.id
                ):
                    continue
                found[str(other)] = float(score)
            neighbours[row.id] = found
        return plan_semantic(candidates, neighbours, settings.semantic_threshold), status

    async def _apply(
        self, state: _Bank, group: Group, budget: Budget, replaces: Group | None = None
    ) -> None:
        """Merge a writable group's losers into its winner within the budget and report the group
        (in place of the report of `replaces`, the report-only group the LLM tier confirmed)."""
        merged: list[str] = []
        capped = 0
        planned_only = state.dry_run or budget.report_only
        try:
            if group.writable and not planned_only:
                for loser in group.losers:
                    if loser.id in state.retired or group.winner.id in state.retired:
                        continue  # already merged by an earlier group of this pass
                    if not budget.take():
                        capped += 1
                        continue
                    if await self._supersede(state, loser, group.winner, reason(group)):
                        merged.append(loser.id)
        finally:
            # Also when the bank's pass ends here (`_Abort`): what this group merged before is
            # retired, and is counted and reported as such.
            self._account(state, group, merged, capped, planned_only, replaces)

    def _account(
        self,
        state: _Bank,
        group: Group,
        merged: list[str],
        capped: int,
        planned_only: bool,
        replaces: Group | None,
    ) -> None:
        state.merged += len(merged)
        state.capped += capped
        report = _group_report(group, merged, capped, planned_only)
        if replaces is not None and id(replaces) in state.reported:
            state.groups[state.reported[id(replaces)]] = report
        else:
            state.reported[id(group)] = len(state.groups)
            state.groups.append(report)

    async def _supersede(self, state: _Bank, loser: Row, winner: Row, why: str) -> bool:
        payload = {
            "bank": state.name,
            "id": loser.id,
            "superseded_by": winner.id,
            "reinforce": True,
            "reason": why,
            "expected_revision": state.revisions.get(loser.id, loser.revision),
            # The plan chose the winner for what it said when listed; an edit since voids it.
            "expected_winner_revision": state.revisions.get(winner.id, winner.revision),
        }
        try:
            answer = await self._call(state, "memory::supersede", payload)
        except WorkerError as err:  # stale, pinned or retired since the listing: plan again later
            state.errors.append(f"supersede {loser.id} → {winner.id}: {err}")
            return False
        state.retired.add(loser.id)
        if isinstance(answer, dict) and answer.get("reinforced"):
            state.revisions[winner.id] = state.revisions.get(winner.id, winner.revision) + 1
        return True

    # --- the LLM tier -----------------------------------------------------------------------

    async def _llm(
        self, state: _Bank, groups: list[Group], settings: ConsolidateSettings, budget: Budget
    ) -> LlmReport:
        if state.dry_run:
            return LlmReport(status="off", detail="dry run")
        if budget.report_only:  # a promotion is a write too
            return LlmReport(status="off", detail="report-only (max_supersedes_per_run is 0)")
        if self.completer is None:
            return LlmReport(status="skipped", detail="no router to ask (no engine)")
        offered = [g for g in groups if not g.writable and g.losers and g.judgeable][
            :MAX_GROUPS_OFFERED
        ]
        threshold = settings.promote_corroboration_threshold
        candidates = sorted(
            (
                r
                for r in state.rows
                if threshold
                and r.corroboration >= threshold
                and r.id not in state.retired
                # The learned rule reaches every conversation of the bank and is no one's: a
                # memory about one person must not become everyone's instruction (a scoped bank),
                # nor a line their erasure cannot take back (forget-subject takes only their
                # memories), whatever the bank's scoping.
                and r.subject is None
            ),
            key=lambda r: (-r.corroboration, r.id),
        )[:MAX_PROMOTIONS_OFFERED]
        if not offered and not candidates:
            return LlmReport(status="idle")
        try:
            reply = await self.completer.complete(
                system_prompt(),
                render_request(offered, candidates),
                model=settings.llm_model,
                timeout_ms=settings.llm_timeout_ms,
            )
            verdict = parse_reply(reply, len(offered), {r.id for r in candidates})
        except (WorkerError, ValueError) as exc:
            log.warning("llm_tier_skipped", bank=state.name, error=str(exc))
            return LlmReport(status="skipped", detail=str(exc))
        promoted = 0
        if verdict.promotions:
            try:
                promoted = await self._promote(state, [line for _, line in verdict.promotions])
            except WorkerError as err:
                return LlmReport(status="skipped", detail=f"learned rule not written: {err}")
        merged_before = state.merged
        for index in verdict.merge_groups:
            confirmed = offered[index]
            writable = Group(
                Tier.LLM,
                confirmed.winner,
                confirmed.losers,
                confirmed.skipped_pinned,
                True,
                f"the LLM judge confirmed a {confirmed.tier} group ({confirmed.why})",
                confirmed.score,
            )
            await self._apply(state, writable, budget, replaces=confirmed)
        return LlmReport(
            status="ran",
            merged=state.merged - merged_before,
            promoted=promoted,
            ignored=verdict.ignored,
        )

    async def _promote(self, state: _Bank, lines: list[str]) -> int:
        """Append the promoted lines to the bank's `learned` rule, guarded by its revision."""
        listed = await self.memory.call("memory::rule::list", {"bank": state.name})
        rule = next(
            (
                r
                for r in listed.get("rules", [])
                if isinstance(r, dict) and r.get("name") == LEARNED_RULE
            ),
            None,
        )
        content = str(rule.get("content", "")) if rule else ""
        merged, added = merge_learned(content, lines)
        if merged is None:
            return 0
        payload: dict[str, Any] = {"bank": state.name, "name": LEARNED_RULE, "content": merged}
        revision = rule.get("revision") if rule else ""
        if isinstance(revision, str):
            payload["expected_revision"] = revision
        await self.memory.call("memory::rule::set", payload)
        return added


def _group_report(group: Group, merged: list[str], capped: int, planned: bool) -> GroupReport:
    if not group.losers:
        action = "skipped"
    elif not group.writable:
        action = "report-only"
    elif planned:
        action = "planned"
    elif merged and len(merged) == len(group.losers):
        action = "merged"
    elif merged:
        action = "partial"
    elif capped:
        action = "capped"
    else:
        action = "unchanged"  # every attempt failed (see the errors) or was merged already
    return GroupReport(
        tier=str(group.tier),
        action=action,
        why=group.why,
        winner_id=group.winner.id,
        winner_text=group.winner.text,
        loser_ids=[r.id for r in group.losers],
        loser_texts=[r.text for r in group.losers],
        merged_ids=merged,
        skipped_pinned=[r.id for r in group.skipped_pinned],
        score=None if group.score is None else round(group.score, 4),
    )
