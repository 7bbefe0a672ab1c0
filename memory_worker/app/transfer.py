"""Moving records in and out of a bank as catalog functions: `memory::import`, `memory::export`
and `memory::compact`, so the CLI can forward them to a server holding the data dir (one
writer, many doors) exactly as it forwards any other call.

Export reads the log itself (every revision, tombstones included, in log order): importing it
into an empty bank replays to the same memories, history and all.
"""

from __future__ import annotations

from dataclasses import asdict

from memory_worker.app.banks import BankUseCases
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.imports import ImportUseCases
from memory_worker.app.wire import (
    CompactRequest,
    CompactResponse,
    ExportRequest,
    ExportResponse,
    ImportRequest,
    ImportResponse,
)
from memory_worker.core.names import check_name
from memory_worker.core.subjects import in_scope

__all__ = ["TransferUseCases"]


class TransferUseCases(BankUseCases, ImportUseCases):
    """Import, export and compaction as request/response use cases."""

    async def import_memories(self, req: ImportRequest, caller: Caller = SYSTEM) -> ImportResponse:
        report = await self.import_records(req.bank, req.records, dry_run=req.dry_run)
        return ImportResponse(
            bank=report.bank, imported=report.imported, live=report.live, redacted=report.redacted
        )

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
        return ExportResponse(bank=name, records=records)

    async def compact_bank(self, req: CompactRequest, caller: Caller = SYSTEM) -> CompactResponse:
        result = await self.compact(req.bank, horizon_days=req.horizon_days)
        return CompactResponse(bank=check_name(req.bank, "bank"), **asdict(result))
