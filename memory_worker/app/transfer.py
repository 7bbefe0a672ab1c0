"""Moving records in and out of a bank as catalog functions: `memory::import`, `memory::export`
and `memory::compact`, so the CLI can forward them to a server holding the data dir (one
writer, many doors) exactly as it forwards any other call.

Export reads the log itself (every revision, tombstones included, in log order): importing it
into an empty bank replays to the same memories, history and all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from memory_worker.app.banks import BankUseCases
from memory_worker.app.base import MAX_DESCRIPTION_CHARS, clean_line
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.imports import ImportUseCases
from memory_worker.app.rules import MAX_RULE_CONTENT_CHARS
from memory_worker.app.wire import (
    CompactRequest,
    CompactResponse,
    ExportRequest,
    ExportResponse,
    ImportRequest,
    ImportResponse,
)
from memory_worker.core import transitions
from memory_worker.core.bank_settings import BankOverrides, parse_overrides
from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.core.models import BankEvent
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.core.subjects import in_scope
from memory_worker.storage.bank import Bank

__all__ = ["TransferUseCases"]


@dataclass(frozen=True, slots=True)
class _Carried:
    """An import's bank description, chosen settings and rules (name, redacted content)."""

    description: str
    settings: BankOverrides
    rules: list[tuple[str, str]]


def _differing(bank: Bank, carried: _Carried) -> list[str]:
    """The carried settings (and description) an existing bank has otherwise: it keeps its own."""
    mine = bank.overrides
    differing = [
        field
        for field in carried.settings.chosen()
        if getattr(mine, field) != getattr(carried.settings, field)
    ]
    if carried.description and carried.description != bank.description:
        differing.insert(0, "description")
    return differing


class TransferUseCases(BankUseCases, ImportUseCases):
    """Import, export and compaction as request/response use cases."""

    async def import_memories(self, req: ImportRequest, caller: Caller = SYSTEM) -> ImportResponse:
        carried = self._carried(req)  # checked before anything is written, a dry run's too
        name = check_name(req.bank, "bank")
        created = False
        if carried is not None and not req.dry_run and self.store.find(name) is None:
            # Made with the export's description and settings before its records land: a bank
            # partitioned by subject, or with caps, takes them under its own rules.
            self._new_name(name, "bank")
            _, created = await self.store.ensure(
                name,
                carried.description,
                limit=self.settings.max_banks,
                overrides=carried.settings,
                for_a_write=True,
            )
        try:
            report = await self.import_records(name, req.records, dry_run=req.dry_run)
        except BaseException:
            if created:  # a failed call changes nothing
                await self.store.discard_if_empty(name)
            raise
        if created:
            await self.store.settle_creation(name)  # its records landed: a kill keeps the bank
        bank = self.store.find(name)
        self._announce_created(bank)
        written: list[str] = []
        kept_rules: list[str] = []
        kept_settings: list[str] = []
        if carried is not None and not req.dry_run and bank is not None:
            if not created:
                kept_settings = _differing(bank, carried)
            for rule, content in carried.rules:
                held = bank.rule(rule)
                if held is not None and held.content == content:
                    continue
                try:
                    # Only where the bank has none: a rule of its own is never overwritten.
                    if held is None and await bank.set_rule(rule, content, expected_revision=""):
                        written.append(rule)
                        continue
                except Conflict:  # written meanwhile by someone else: theirs stays
                    pass
                kept_rules.append(rule)
            if written:
                self._emit_bank(BankEvent.RULES_CHANGED, name)
        return ImportResponse(
            bank=report.bank,
            imported=report.imported,
            live=report.live,
            redacted=report.redacted,
            rules_written=written or None,
            kept_rules=kept_rules or None,
            kept_settings=kept_settings or None,
        )

    def _carried(self, req: ImportRequest) -> _Carried | None:
        """What the import carries besides records (an export's description, settings and
        rules), checked as memory::bank::create and memory::rule::set check them; None when it
        carries none (records alone, as an older export)."""
        if req.description is None and req.settings is None and req.rules is None:
            return None
        description, _ = clean_line(req.description, "description", MAX_DESCRIPTION_CHARS)
        overrides = parse_overrides(req.settings or {}, source="settings")
        rules: list[tuple[str, str]] = []
        for number, rule in enumerate(req.rules or [], start=1):
            try:
                rule_name = self._new_name(rule.name, "rule name")
                transitions.check_unicode(rule.content, "content")
                if len(rule.content) > MAX_RULE_CONTENT_CHARS:
                    raise InvalidInput(
                        f"content must be at most {MAX_RULE_CONTENT_CHARS} characters"
                    )
                content = redact(rule.content).text
                if not content.strip():
                    raise InvalidInput("content is empty (an export never carries an empty rule)")
            except InvalidInput as exc:
                raise InvalidInput(f"rules[{number}]: {exc.message}") from None
            rules.append((rule_name, content))
        if len({rule for rule, _ in rules}) != len(rules):
            raise InvalidInput("rules: a rule name is given twice")
        return _Carried(description or "", overrides, rules)

    async def export(self, req: ExportRequest, caller: Caller = SYSTEM) -> ExportResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        if bank is None:  # the default bank before its first write
            return ExportResponse(bank=name, records=[])
        records = await bank.records()
        # As `memory::history`: in a bank partitioned by subject, an agent's export leaves out
        # every memory that was ever about another person than its turn's speaker (every
        # revision of it: a later one may no longer name them), where it handed over the whole
        # bank's people. A person's, consolidation's keep the whole bank.
        scoped, subject = self.scope_of(bank, caller.speaker if caller.in_turn else None, caller)
        if scoped:
            theirs = {r.id for r in records if not in_scope(r.subject, subject)}
            records = [r for r in records if r.id not in theirs]
        # The bank moves whole: its description, what its bank.yaml chose, and its rules (read
        # at the same level as memory::bank::get and memory::rule::list).
        return ExportResponse(
            bank=name,
            records=records,
            description=bank.description,
            settings=bank.overrides.chosen(),
            rules=bank.rules(),
        )

    async def compact_bank(self, req: CompactRequest, caller: Caller = SYSTEM) -> CompactResponse:
        result = await self.compact(req.bank, horizon_days=req.horizon_days)
        return CompactResponse(bank=check_name(req.bank, "bank"), **asdict(result))
