"""Bulk import of whole records, history included: validated first, written as one batch."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from memory_worker.app.base import clean_subject, redaction_reason
from memory_worker.app.retention import RetentionUseCases
from memory_worker.app.wire import Checked, Flag, Text, TextList
from memory_worker.core import transitions
from memory_worker.core.errors import Conflict, InvalidInput, validation_problem
from memory_worker.core.lessons import Card, prepare_card
from memory_worker.core.models import (
    MAX_INT,
    MAX_TIME_MS,
    Confidence,
    ItemEvent,
    Memory,
    Provenance,
)
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.core.retention import past_ttl
from memory_worker.core.subjects import subject_key
from memory_worker.core.text import normalize
from memory_worker.storage.bank import Bank
from memory_worker.storage.logger import get_logger

__all__ = ["ImportRecord", "ImportReport", "ImportUseCases"]

log = get_logger(__name__)


class ImportRecord(Checked):
    """One line of `memory-worker import`: a whole record, history fields included. Read as a
    request is (`Checked`): a time given as true is refused, not 1 ms past 1970, and seed 004's
    subject pair is the record's `subject`, not dropped with other unknown keys."""

    model_config = ConfigDict(extra="ignore", defer_build=True)  # built by the first import

    id: str | None = Field(default=None, min_length=1, max_length=128)
    # The fields `memory::save` has, typed as it types them: a number is text there (a person
    # named by a user id, a tag `2024`), and an import refused what a save took.
    text: Text
    entities: TextList = Field(default_factory=list)
    tags: TextList = Field(default_factory=list)
    confidence: Confidence = Confidence.STATED
    corroboration: int = Field(default=0, ge=0, le=MAX_INT)
    pinned: Flag = False  # JSON's true or false, as every request's flag
    source: Provenance | None = None
    created_at: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    updated_at: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    stated_at: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    invalid_at: int | None = Field(default=None, ge=0, le=MAX_TIME_MS)
    # Why an automatic path retired it, as `memory::export` writes it: left out, an export
    # imported again appended every such tombstone once more, saying no more why.
    invalid_reason: Literal["evicted", "expired"] | None = None
    superseded_by: str | None = Field(default=None, min_length=1, max_length=128)
    revision: int = Field(default=0, ge=0, le=MAX_INT)
    # A lesson's card (checked as `memory::save` checks it).
    category: Text | None = None
    subject: Text | None = None
    title: Text | None = None
    recommendation: Text | None = None
    anchors: dict[str, Any] | None = None
    evidence: TextList = Field(default_factory=list)
    context: Text | None = None  # association lanes, checked as `memory::save` checks them
    intention: Text | None = None


# A validated import row: the record, its cleaned text, entities and tags, its card, and the
# redaction labels.
_Prepared = tuple["ImportRecord", str, tuple[str, ...], tuple[str, ...], Card, list[str]]


@dataclass(frozen=True, slots=True)
class ImportReport:
    bank: str
    imported: int
    live: int
    redacted: int


class ImportUseCases(RetentionUseCases):
    """Import use cases."""

    async def import_records(
        self, bank_name: str, rows: Sequence[Mapping[str, Any]], *, dry_run: bool = False
    ) -> ImportReport:
        """Append whole records, history included, as one write and one fsync. Every row is
        validated first: one bad row rejects the import and nothing is written. `dry_run` stops
        after the validation (nothing is written, `imported` is 0)."""
        name = check_name(bank_name, "bank")
        now_ms = self.clock()
        prepared: list[_Prepared] = []
        # Rows whose entities or tags were cut to the cap, and the values so left out: warned
        # once for the whole import (one line per row flooded the log of a big one).
        capped_rows = capped_values = 0
        for number, row in enumerate(rows, start=1):
            try:
                item = ImportRecord.model_validate(row)
                text, labels = transitions.prepare_text(item.text)
                entities, entity_labels, entities_dropped = transitions.prepare_labels(
                    item.entities, "entities"
                )
                tags, tag_labels, tags_dropped = transitions.prepare_labels(item.tags, "tags")
                card, card_labels = prepare_card(
                    item.category, item.title, item.recommendation, item.anchors, item.evidence
                )
                source, source_labels = _clean_source(item.source)
                subject, subject_labels = clean_subject(item.subject)
                context, context_labels = transitions.prepare_lane(item.context, "context")
                intention, intention_labels = transitions.prepare_lane(item.intention, "intention")
                item = item.model_copy(
                    update={
                        "source": source,
                        "subject": subject,
                        "context": context,
                        "intention": intention,
                    }
                )
                for field in ("id", "superseded_by"):
                    _check_identifier(getattr(item, field), field)
            except ValidationError as exc:
                raise InvalidInput(f"record {number}: {_first_error(exc)}") from None
            except InvalidInput as exc:
                raise InvalidInput(f"record {number}: {exc.message}") from None
            found = [
                *labels, *entity_labels, *tag_labels, *card_labels, *source_labels,
                *context_labels, *intention_labels, *subject_labels,
            ]  # fmt: skip
            prepared.append((item, text, entities, tags, card, found))
            if entities_dropped or tags_dropped:
                capped_rows += 1
                capped_values += entities_dropped + tags_dropped
        if capped_rows:  # how many, never which: a value left out may be a secret
            log.warning("labels_capped", bank=name, rows=capped_rows, dropped=capped_values)
        if dry_run:
            # Everything the write would refuse, refused now: a forwarded import checks every
            # request this way before it writes the first.
            existing = self.store.find(name)
            if existing is not None:
                _spare_pinned(existing, self._import_records(existing, prepared, now_ms)[0])
            redacted = sum(1 for *_, found in prepared if found)
            return ImportReport(bank=name, imported=0, live=0, redacted=redacted)
        async with self._writing_into(name) as bank:
            # What is past its TTL goes first, as a save does: a text whose memory expired
            # unreaped would be taken for one the bank holds and left out, then reaped.
            await self._reaped_for(bank, anywhere=True)
            records, reasons = self._import_records(bank, prepared, now_ms)
            new = await _not_held(bank, records)
            records, reasons = [records[i] for i in new], [reasons[i] for i in new]
            _spare_pinned(bank, records)
            before = {r.id: bank.latest(r.id) for r in records}
            await bank.commit(records)
        for event, record, reason in _changes(bank, records, before, reasons):
            self._emit_item(event, name, record, reason, before.get(record.id))
        self._embed_soon(bank)
        # A record past its category's TTL is gone the moment it lands, as every read shows it.
        retention, now = self.bank_settings(bank).retention, self.clock()
        return ImportReport(
            bank=name,
            imported=len(records),
            live=sum(
                1
                for r in records
                if bank.get(r.id) == r and r.live and not past_ttl(r, retention, now)
            ),
            redacted=sum(1 for *_, found in prepared if found),
        )

    @staticmethod
    def _import_records(
        bank: Bank, prepared: list[_Prepared], now_ms: int
    ) -> tuple[list[Memory], list[str | None]]:
        """The records to write and each one's redaction reason. A record without an id whose
        text (about the same subject) the bank holds live is that memory, already held: it is
        left out. Given a salted id instead, an export of another system (mem0, a markdown
        folder) imported twice, or a fact the bank already had, became a second memory."""
        records: list[Memory] = []
        reasons: list[str | None] = []
        # The ids this import writes, and the memories without an id it already holds (a text
        # about a subject): the same words twice in one file are one memory, the same words about
        # two people two memories, never one id that the later record overwrites.
        taken = {item.id for item, *_ in prepared if item.id is not None}
        seen: set[tuple[str, str | None]] = set()
        for item, text, entities, tags, card, found in prepared:
            memory_id = item.id
            if memory_id is None:
                held = bank.match_text(text, item.subject)
                if held is not None and held.live:
                    continue
                key = (
                    unicodedata.normalize("NFC", normalize(text)),
                    None if item.subject is None else subject_key(item.subject),
                )
                if key in seen:
                    continue
                seen.add(key)
                memory_id = bank.new_id(text, taken)
                taken.add(memory_id)
            created_at = item.created_at if item.created_at is not None else now_ms
            updated_at = item.updated_at if item.updated_at is not None else created_at
            records.append(
                Memory(
                    id=memory_id,
                    text=text,
                    entities=entities,
                    tags=tags,
                    confidence=item.confidence,
                    corroboration=item.corroboration,
                    pinned=item.pinned,
                    source=item.source,
                    created_at=created_at,
                    updated_at=updated_at,
                    stated_at=item.stated_at,
                    invalid_at=item.invalid_at,
                    # A reason only ever says why a retired record was retired.
                    invalid_reason=item.invalid_reason if item.invalid_at is not None else None,
                    superseded_by=item.superseded_by,
                    revision=item.revision,
                    category=card.category,
                    title=card.title,
                    recommendation=card.recommendation,
                    anchors=card.anchors,
                    evidence=card.evidence,
                    context=item.context,
                    intention=item.intention,
                    subject=item.subject,
                )
            )
            reasons.append(redaction_reason(found))
        return records, reasons


def _check_identifier(value: str | None, field: str) -> None:
    """An id is kept as given (it names the record in every event and every later call), so one
    that is a secret is refused rather than changed: redacting it would merge distinct records."""
    if value is None:
        return
    transitions.check_unicode(value, field)
    found = redact(value).labels
    if found:
        raise InvalidInput(f"{field} looks like a secret ({', '.join(found)}); use another id")


def _clean_source(source: Provenance | None) -> tuple[Provenance | None, tuple[str, ...]]:
    """Provenance is written to disk too: its fields get the same redaction as any other text.
    Returns the labels of what was redacted, so the report counts it."""
    if source is None:
        return None, ()
    fields = {}
    labels: list[str] = []
    for field in ("session_id", "entry_id", "agent"):
        value = getattr(source, field)
        if value is not None:
            transitions.check_unicode(value, f"source.{field}")
            redaction = redact(value)
            fields[field] = redaction.text
            labels.extend(redaction.labels)
    return Provenance(**fields), tuple(labels)


def _first_error(exc: ValidationError) -> str:
    return validation_problem(exc.errors()[0], "record")


def _changes(
    bank: Bank,
    records: Sequence[Memory],
    before: Mapping[str, Memory | None],
    reasons: Sequence[str | None],
) -> list[tuple[ItemEvent, Memory, str | None]]:
    """The item-changed events of an import, in record order: one per memory whose visible
    state it changed (its record now the bank's newest): `created` or `updated` for one now
    live, `superseded` or `deleted` for one it retired. A record that lost to a newer revision
    (history), or that leaves the memory as it was (a re-import), changes nothing anyone sees."""
    last = {r.id: i for i, r in enumerate(records)}  # replay is last-wins too
    out: list[tuple[ItemEvent, Memory, str | None]] = []
    for i, record in enumerate(records):
        if last[record.id] != i or bank.get(record.id) != record:
            continue
        event = transitions.change_event(before[record.id], record)
        if event is not None:
            out.append((event, record, reasons[i]))
    return out


async def _not_held(bank: Bank, records: list[Memory]) -> list[int]:
    """The positions of `records` the log does not already hold as they are: an export imported
    again (a migration run twice) appended every revision a second time, and each memory's
    history listed it twice. RAM holds each memory's latest record (retired ones too): a record
    of an id it does not know, or not older than the latest, is decided there; the log is read
    only for the ids of older revisions (history), which an import of new memories has none of
    (reading it for each of a large import's requests parsed every line imported before)."""
    kept: list[int] = []
    older: list[int] = []
    for i, record in enumerate(records):
        latest = bank.latest(record.id)
        if latest is None or record.revision > latest.revision:
            kept.append(i)
        elif record.revision < latest.revision:
            older.append(i)
        elif record != latest:
            kept.append(i)
    if older:
        ids = {records[i].id for i in older}
        held = {(r.id, r.revision): r for r in await bank.revisions(ids)}
        kept += [i for i in older if held.get((records[i].id, records[i].revision)) != records[i]]
        kept.sort()
    return kept


def _spare_pinned(bank: Bank, records: Sequence[Memory]) -> None:
    """Refuse (`conflict`, nothing written) an import whose record would win over a live pinned
    memory of the bank (a higher or equal revision, as replay decides) and retire it, unpin it
    or change its text: a person pinned it, and only they unpin or edit it. Re-importing the
    same records is fine."""
    for record in records:
        current = bank.latest(record.id)
        if current is None or not (current.live and current.pinned):
            continue
        if record.revision < current.revision:
            continue  # history: the pinned record stays the newest
        if not record.live or not record.pinned or record.text != current.text:
            raise Conflict(
                f"record {record.id} would retire, unpin or rewrite a pinned memory; unpin it "
                "first — nothing was imported"
            )
