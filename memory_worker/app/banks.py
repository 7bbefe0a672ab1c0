"""Banks as named scopes: create, list, trash, compact, reload, and a person's hand edits picked
up."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from memory_worker.app.access import AccessLevel
from memory_worker.app.base import (
    HAND_EDIT_REASON,
    MAX_DESCRIPTION_CHARS,
    clean_line,
    hand_changes,
)
from memory_worker.app.caller import SYSTEM, Caller, CallerKind
from memory_worker.app.embedding import EmbeddingWork
from memory_worker.app.wire import (
    BankConfigureRequest,
    BankConfigureResponse,
    BankCreateRequest,
    BankCreateResponse,
    BankDeleteRequest,
    BankDeleteResponse,
    BankGetRequest,
    BankGetResponse,
    BankListRequest,
    BankListResponse,
    ReloadRequest,
    ReloadResponse,
)
from memory_worker.core.bank_settings import (
    SETTING_NAMES,
    BankOverrides,
    effective,
    parse_overrides,
    settings_revision,
)
from memory_worker.core.compaction import DAY_MS, compaction_plan
from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.core.models import BankEvent, BankInfo, Memory
from memory_worker.core.names import check_name
from memory_worker.core.subjects import count_by_subject
from memory_worker.storage.bank import Bank, Rewrite
from memory_worker.storage.logger import get_logger

__all__ = ["BankUseCases"]

log = get_logger(__name__)


class BankUseCases(EmbeddingWork):
    """Bank use cases."""

    def access_level(self, bank: str) -> AccessLevel:
        """What agents may do on `bank` (C22): its bank.yaml's `conscious_access`, else the
        configured default (also for a bank that does not exist yet)."""
        found = self.store.find(bank)
        chosen = self.bank_settings(found) if found is not None else self.settings.bank_defaults()
        return AccessLevel(chosen.conscious_access)

    async def bank_create(
        self, req: BankCreateRequest, caller: Caller = SYSTEM
    ) -> BankCreateResponse:
        """Idempotent: creating a bank that exists changes nothing. Settings given for one that
        exists must be what it already has (`conflict` otherwise: `memory::bank::configure`
        changes settings, never a create that happens to run second)."""
        name = check_name(req.name, "bank")
        if self.store.find(name) is None:
            self._new_name(name, "bank")
        description, labels = clean_line(req.description, "description", MAX_DESCRIPTION_CHARS)
        chosen = {f: getattr(req, f) for f in SETTING_NAMES if getattr(req, f) is not None}
        overrides = parse_overrides(chosen, source="memory::bank::create")
        bank, created = await self.store.ensure(
            name, description or "", limit=self.settings.max_banks, overrides=overrides
        )
        if not created:
            # A bank a write is making, its write still in flight: this caller is told it
            # exists, so a kill before that write lands must not remove it.
            await self.store.settle_creation(name)
            mine = bank.overrides
            differing = [f for f in overrides.chosen() if getattr(mine, f) != getattr(overrides, f)]
            if differing:
                raise Conflict(
                    f"bank {name} exists with other {', '.join(differing)}; change its settings "
                    "with memory::bank::configure"
                )
        self._announce_created(bank)  # made here, or by a write still in flight that may fail
        return BankCreateResponse(bank=self._info(bank), created=created, redacted=list(labels))

    async def bank_get(self, req: BankGetRequest, caller: Caller = SYSTEM) -> BankGetResponse:
        bank = self.store.get(check_name(req.name, "bank"))
        return BankGetResponse(bank=self._as_seen_by(self._info(bank), bank, caller))

    def _scoped_for(self, info: BankInfo, caller: Caller) -> bool:
        """Whether `caller` sees less of the bank `info` shows than its whole counts: an agent in
        a bank partitioned by subject."""
        settings = info.settings
        return caller.kind is CallerKind.AGENT and settings is not None and settings.subject_scoping

    def _as_seen_by(self, info: BankInfo, bank: Bank, caller: Caller) -> BankInfo:
        """`info` as `caller` may see it: an agent in a bank partitioned by subject counts the
        general memories and its turn's speaker's (as its `memory::stats` does), never how many
        people the bank knows of and how much about them."""
        if not self._scoped_for(info, caller):
            return info
        scoped, subject = self.scope_of(bank, caller.speaker if caller.in_turn else None, caller)
        live = self.live_in_view(bank, scoped, subject)
        about = count_by_subject(m.subject for m in live if m.subject is not None)
        counts = {"memories": len(live), "pinned": sum(m.pinned for m in live)}
        return info.model_copy(update={**counts, "subjects": len(about)})

    async def bank_configure(
        self, req: BankConfigureRequest, caller: Caller = SYSTEM
    ) -> BankConfigureResponse:
        """Change a bank's settings: a field given sets it, a field given as null returns it to
        the configured default, a field omitted stays. Checked whole before `bank.yaml` is
        replaced (atomically); announced as a `configured` bank event when anything changed."""
        given = req.model_fields_set
        changes = {f: getattr(req, f) for f in SETTING_NAMES if f in given}
        if not changes and "description" not in given:
            raise InvalidInput(
                f"configure needs at least one of description, {', '.join(SETTING_NAMES)}"
            )
        name = check_name(req.name, "bank")
        description = req.description
        labels: tuple[str, ...] = ()
        if "description" in given:
            description, labels = clean_line(req.description, "description", MAX_DESCRIPTION_CHARS)
            # Given empty or null: cleared. `clean_line` answers None for both, which below
            # reads as "omitted", so a description could never be removed once set.
            description = description or ""
        bank = self.store.get(name)
        bank.overrides.merged(changes)  # checked whole before anything waits or is written

        expected = req.expected_settings_revision

        def update(old: str, chosen: BankOverrides) -> tuple[str, BankOverrides]:
            # Checked under the settings lock, on what the bank has when the write's turn comes:
            # a caller that read an older state (another tab, the CLI, a hand edit since) is
            # refused rather than overwriting a change it never saw.
            if expected is not None and settings_revision(old, chosen) != expected:
                raise Conflict(
                    f"stale settings: bank {name} is at settings_revision "
                    f"{settings_revision(old, chosen)}, expected {expected}; read them again "
                    "(memory::bank::get) and retry"
                )
            # Over what the bank has when the write's turn comes: a configure racing this one
            # (with no expected revision) keeps its change.
            merged: BankOverrides = chosen.merged(changes)
            return (old if description is None else description), merged

        (old_description, old), (new_description, new) = await bank.configure(update)
        defaults = self.settings.bank_defaults()
        before, after = effective(defaults, old), effective(defaults, new)
        changed = [f for f in SETTING_NAMES if getattr(before, f) != getattr(after, f)]
        if new_description != old_description:
            changed.insert(0, "description")
        if "association_weights" in changed:
            self._embed_soon(bank)  # a lane that gained a weight gets its vectors now
        if changed:
            self._emit_bank(BankEvent.CONFIGURED, name)
        return BankConfigureResponse(bank=self._info(bank), changed=changed, redacted=list(labels))

    async def bank_list(self, req: BankListRequest, caller: Caller = SYSTEM) -> BankListResponse:
        # Summaries, not banks: a one-shot CLI lists a hundred banks without replaying them.
        summaries = [
            await self.store.summary(name, self._counts_hold) for name in self.store.names()
        ]
        banks = [self._info(s) for s in summaries if s is not None]
        if caller.kind is CallerKind.AGENT:
            # A bank at `none` gives agents nothing — not its name, nor its counts.
            banks = [
                b
                for b in banks
                if b.settings is None
                or AccessLevel(b.settings.conscious_access) is not AccessLevel.NONE
            ]
            seen = []
            for info in banks:
                if self._scoped_for(info, caller):
                    # A listing peeks at counts files: the rows are needed to count a scope.
                    await self.ready_bank(info.name)
                    bank = self.store.find(info.name)
                    if bank is None:  # gone or broken meanwhile: nothing there to read
                        continue
                    info = self._as_seen_by(info, bank, caller)
                seen.append(info)
            banks = seen
        return BankListResponse(banks=banks)

    async def bank_delete(
        self, req: BankDeleteRequest, caller: Caller = SYSTEM
    ) -> BankDeleteResponse:
        name = check_name(req.name, "bank")
        bank = self.store.find(name)
        target = await self.store.trash(name, self.clock())
        self._emit_bank(BankEvent.TRASHED, name)
        if bank is not None:  # an unfinished erasure the delete finished in the trashed copy,
            # or one not yet announced: committed at the data dir's root before the move
            await self._finish_erasures_in_trash(name)
        return BankDeleteResponse(ok=True, trashed_to=str(target))

    async def compact(self, bank_name: str, *, horizon_days: float) -> Rewrite:
        """Drop from a bank's log the revisions superseded more than `horizon_days` ago (every
        memory keeps its latest revision or tombstone, and what it said at the horizon: nothing
        recall, list or get answers changes, nor what `as_of` a moment within the horizon finds;
        `memory::history` gets shorter). Announced as a `compacted` bank event."""
        if horizon_days < 0:
            raise InvalidInput("horizon_days must be 0 or more")
        name = check_name(bank_name, "bank")
        bank = self.store.get(name)
        horizon_ms = self.clock() - int(horizon_days * DAY_MS)
        result = await bank.rewrite(lambda records: compaction_plan(records, horizon_ms=horizon_ms))
        # A compaction changes no memory, but the log it read may hold a hand edit the watcher
        # had not picked up: RAM follows it now and no reload will, so it is announced here.
        await self._announce_adopted(name, bank.take_adopted())
        log.info(
            "bank_compacted",
            bank=name,
            lines_before=result.lines_before,
            lines_after=result.lines_after,
            bytes_before=result.bytes_before,
            bytes_after=result.bytes_after,
        )
        self._emit_bank(BankEvent.COMPACTED, name)
        return result

    async def reload(self, req: ReloadRequest, caller: Caller = SYSTEM) -> ReloadResponse:
        """Replay the whole data dir, and announce what changed in the banks anyone has seen
        since boot (a bank never replayed yet was shown to no one), as the watcher does."""
        named = set(self.store.names())
        old = self.store.loaded()
        count = await self.store.reload()
        # What each old bank showed once the reload froze and drained it: a write in flight when
        # the reload began landed in it and announced itself, and is no hand edit.
        seen = {bank.name: _Seen.of(bank) for bank in old}
        after = {bank.name: bank for bank in self.store.loaded()}
        for bank in old:
            self._carry_expired_report(bank.name, bank, after.get(bank.name))
        for name in list(self._embedding):
            await self._stop_embedding(name)
        for bank in after.values():  # memories added by hand included
            self._embed_soon(bank)
        for name in sorted(seen.keys() | after.keys()):
            if name in seen and name not in after:  # gone, or now unreadable (doctor says so)
                outcome = "broken" if name in self.store.broken else "removed"
            elif name in seen:
                outcome = "reloaded"
            elif name not in named:  # new since boot (one replayed for the first time is not)
                outcome = "added"
            else:
                continue
            await self._announce(name, seen.get(name), after.get(name), outcome)
        for bank in after.values():  # one nobody had replayed since boot is announced too
            await self._announce_late_erasures(bank)
        return ReloadResponse(ok=True, banks=count)

    async def reload_bank(self, name: str) -> str:
        """Pick up a hand edit of one bank's folder (the data-dir watcher calls this): reload it,
        re-embed it in the background, and announce what changed (`_announce`). Returns the
        store's outcome: "reloaded" | "added" | "removed" | "unchanged" | "broken" | "deferred"
        (out of file descriptors: RAM kept as it was, retried later)."""
        before = self.store.find(name)
        outcome = await self.store.reload_bank(name)
        if outcome in ("unchanged", "deferred"):
            return outcome
        # Read once the reload froze and drained it, not before: a write in flight then landed
        # in it (and announced itself), so it is no hand edit to announce again.
        seen = _Seen.of(before) if before is not None else None
        await self._stop_embedding(name)
        bank = self.store.find(name)
        self._carry_expired_report(name, before, bank)
        if bank is not None:
            self._embed_soon(bank)
        rules_changed = await self._announce(name, seen, bank, outcome)
        log.info(
            "bank_reloaded",
            bank=name,
            outcome=outcome,
            memories=bank.live_count() if bank is not None else 0,
            rules=len(bank.rules()) if bank is not None else 0,
            rules_changed=rules_changed,
            # each logged at load
            damage=sum(not d.kept for d in bank.damage) if bank is not None else 0,
            error=self.store.broken.get(name),
        )
        return outcome

    async def _stop_embedding(self, name: str) -> None:
        """A running embed task holds the bank object a reload replaced: stopped, so the new
        one is embedded (`_embed_soon` waits for a running task, which would go on with the old
        bank and store its vectors there)."""
        task = self._embedding.pop(name, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _announce(
        self, name: str, seen: _Seen | None, bank: Bank | None, outcome: str
    ) -> bool:
        """What subscribers can act on after a reload from disk: `created` for a folder that
        appeared, `trashed` for one that vanished (the bank is gone either way, whether or not it
        went through `.trash`), `rules-changed` when its rules differ, `configured` when its
        `bank.yaml` (description, settings) does, and one item-changed event per memory a hand
        edit of its log changed. Returns whether the rules changed."""
        rules = {r.name: r.content for r in bank.rules()} if bank is not None else {}
        old_rules = seen.rules if seen is not None else {}
        if outcome == "added":
            self._emit_bank(BankEvent.CREATED, name)
        elif outcome == "removed" and seen is not None:
            self._emit_bank(BankEvent.TRASHED, name)
        # What an interrupted erasure erased as the bank loaded is no hand edit: it is announced
        # as the erasure's own (`erased`, no text), never as a `deleted` carrying the text.
        erased = await self._announce_late_erasures(bank) if bank is not None else set()
        if outcome != "reloaded" or seen is None or bank is None:
            return rules != old_rules
        if rules != old_rules:
            self._emit_bank(BankEvent.RULES_CHANGED, name)
        if (bank.description, bank.overrides) != seen.file:  # bank.yaml by hand
            self._emit_bank(BankEvent.CONFIGURED, name)
        # Compared off the loop (a second a million records), on a copy: writes may land
        # meanwhile, and each announces itself.
        now = dict(bank.memories)
        for event, memory in await asyncio.to_thread(hand_changes, seen.memories, now):
            if memory.id not in erased:
                # What it was before: moved to another subject by hand, the views it left hear
                # it (`moved`), as for `memory::update`.
                was = seen.memories.get(memory.id)
                self._emit_item(event, name, memory, HAND_EDIT_REASON, was)
        return rules != old_rules


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a bank showed before a reload replaced it: what the announcement compares."""

    memories: dict[str, Memory]
    rules: dict[str, str]
    file: tuple[str, BankOverrides]

    @classmethod
    def of(cls, bank: Bank) -> _Seen:
        return cls(
            bank.shown(),  # (a bank broken by a line that no longer reads: the other records)
            {r.name: r.content for r in bank.rules()},
            (bank.description, bank.overrides),
        )
