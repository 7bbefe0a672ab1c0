"""Pure state transitions of a memory record: save, update, tombstone, pin, supersede.

Each takes the current record (or None) and the request's values and returns the next record to
commit, or raises. No I/O, no clock: `now_ms` is passed in, so every invariant is testable with
values. Invariants: revisions only grow; a re-save never unpins; pinned records are never retired by
supersede; resurrection continues the revision counter so the tombstone cannot win replay; a
counter never passes `MAX_INT` (replay would refuse the line): corroboration saturates, and a
record at the last revision refuses further changes (`conflict`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.core.lessons import LESSON, anchor_set
from memory_worker.core.models import MAX_INT, Anchors, Confidence, ItemEvent, Memory, Provenance
from memory_worker.core.redact import MARKER_PREFIX, redact
from memory_worker.core.subjects import same_subject
from memory_worker.core.text import collapse_whitespace

__all__ = [
    "BLANK",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "MAX_LANE_CHARS",
    "MAX_REASON_CHARS",
    "MAX_TEXT_CHARS",
    "MIN_TEXT_CHARS",
    "Labels",
    "change_event",
    "check_revision",
    "check_unicode",
    "new_memory",
    "normalize_label",
    "pin",
    "prepare_label",
    "prepare_labels",
    "prepare_lane",
    "prepare_reason",
    "prepare_text",
    "redact_line",
    "reinforce",
    "save",
    "stored_labels",
    "supersede",
    "tombstone",
    "union_dropped",
    "update",
]

MIN_TEXT_CHARS = 3  # shorter is noise ("ok", "y")
MAX_TEXT_CHARS = 2_000  # a memory is one self-contained statement, not a document
MAX_LABELS = 8  # entities and tags each; more dilutes the signal and bloats every line
MAX_LABEL_CHARS = 64
MAX_REASON_CHARS = 500
# The association lanes (C21): a window summary is a few lines, a goal one sentence. Longer input
# is refused (an explicit save) or cut before it gets here (extraction).
MAX_LANE_CHARS = {"context": 1_000, "intention": 300}
# What a value may measure before redaction: a secret is replaced by a shorter marker, so the
# limits above apply after it, but the work done on the way is bounded by these.
MAX_RAW_TEXT_CHARS = 16 * MAX_TEXT_CHARS
MAX_RAW_LABEL_CHARS = 16 * MAX_LABEL_CHARS
MAX_RAW_LABELS = 4 * MAX_LABELS  # values given, duplicates and blanks included

_TRUST = {Confidence.INFERRED: 0, Confidence.EXTRACTED: 1, Confidence.STATED: 2}
_MARKER = re.compile(re.escape(MARKER_PREFIX) + r"[^\[\]]*\]")
# What `str.strip()` trims, and the invisible characters a paste brings along at a text's edges
# (zero-width space, word joiner, byte-order mark): as blank as a space, so a text of nothing else
# is too short, and one wrapped in them is the text it shows (not a look-alike duplicate).
# Zero-width (non-)joiners are left: they shape emoji and scripts such as Persian.
BLANK = (
    "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # str.isspace(), all of it
    "\u200b\u2060\ufeff"
)


def check_unicode(value: str, field: str) -> None:
    """Text the disk, every event and every edge can carry: valid UTF-8 and no NUL (a NUL cuts
    C strings and many terminals and tools short)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{field} contains invalid Unicode (a lone surrogate)") from None
    if "\x00" in value:
        raise InvalidInput(f"{field} contains a NUL character")


def change_event(previous: Memory | None, record: Memory) -> ItemEvent | None:
    """The event a change that did not go through a mutation (an import, a hand edit) makes of
    `previous` becoming `record`, as the mutations announce theirs: `created` / `updated` for a
    memory live now, `superseded` / `deleted` for one live before and not now; None when nothing
    anyone sees changed (the same record, or a memory that was not live and still is not)."""
    if previous == record:
        return None
    was_live = previous is not None and previous.live
    if record.live:
        return ItemEvent.UPDATED if was_live else ItemEvent.CREATED
    if was_live:
        return ItemEvent.SUPERSEDED if record.superseded_by else ItemEvent.DELETED
    return None


def check_revision(record: Memory, expected: int | None) -> None:
    """Optimistic concurrency: a caller that read revision `expected` may only change the record
    while it is still at that revision (None: no guard)."""
    if expected is not None and record.revision != expected:
        raise Conflict(
            f"stale revision: memory {record.id} is at revision {record.revision}, "
            f"expected {expected}; read it again and retry"
        )


def prepare_text(raw: str, field: str = "text") -> tuple[str, tuple[str, ...]]:
    """Redact secrets, trim, and check the length; returns the text and the redaction labels."""
    if len(raw) > MAX_RAW_TEXT_CHARS:  # refused before any work: the cost of a call is bounded
        raise InvalidInput(f"{field} must be at most {MAX_TEXT_CHARS} characters (got {len(raw)})")
    check_unicode(raw, field)
    redaction = redact(raw)
    text = redaction.text.strip(BLANK)
    if len(text) < MIN_TEXT_CHARS:
        raise InvalidInput(f"{field} must be at least {MIN_TEXT_CHARS} characters")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidInput(f"{field} must be at most {MAX_TEXT_CHARS} characters (got {len(text)})")
    return text, redaction.labels


def redact_line(raw: str) -> tuple[str, tuple[str, ...]]:
    """`raw` as a one-line field stores it (whitespace collapsed), redacted before and after the
    collapse: before, where a token cut by a line break is joined back up; after, because a key
    and its value on two lines (`Authorization: Bearer`, then the token) are one once joined."""
    first = redact(raw)
    line = collapse_whitespace(first.text)
    if line == first.text:  # nothing joined: redacting again finds nothing new
        return line, first.labels
    second = redact(line)
    return second.text, tuple(sorted({*first.labels, *second.labels}))


def prepare_lane(raw: str | None, lane: str) -> tuple[str | None, tuple[str, ...]]:
    """A `context` or `intention`: redacted like text, whitespace collapsed, length-checked;
    None or blank is no lane."""
    if raw is None:
        return None, ()
    limit = MAX_LANE_CHARS[lane]
    if len(raw) > 16 * limit:  # refused before any work, as a text is: a call's cost is bounded
        raise InvalidInput(f"{lane} must be at most {limit} characters (got {len(raw)})")
    check_unicode(raw, lane)
    value, labels = redact_line(raw)
    value = value.strip(BLANK)  # invisible edges go as spaces do, as a text's and a tag's
    if not value:
        return None, ()
    if len(value) > limit:
        raise InvalidInput(f"{lane} must be at most {limit} characters (got {len(value)})")
    return value, labels


def normalize_label(value: str) -> str:
    """A tag or entity as stored, and as a filter compares it: Unicode compatibility-composed
    (NFKC), whitespace collapsed, lowercase — except the `[REDACTED:<label>]` markers, which read
    the same everywhere. NFKC because a label is matched by equality: "café" typed composed or
    decomposed, or "ＡＰＩ" in an IME's full-width mode, is one label to a person (recall's terms
    fold the same way), not two tags that look alike and miss each other's filter."""
    # Invisible edges go as spaces do: a tag of only a zero-width space is no tag.
    text = collapse_whitespace(_compose(value)).strip(BLANK)
    parts: list[str] = []
    at = 0
    for match in _MARKER.finditer(text):
        parts += (text[at : match.start()].lower(), match.group())
        at = match.end()
    parts.append(text[at:].lower())
    return "".join(parts)


# Tags repeat across a bank: each distinct one is normalized once (bounded: a log of a million
# distinct tags costs a normalization per miss, never memory without end).
_stored_label = lru_cache(maxsize=16_384)(normalize_label)


def stored_labels(values: tuple[str, ...]) -> tuple[str, ...]:
    """Tags read from a log line the worker did not write (edited by hand) as every write path
    stores them: normalized (`normalize_label`), blanks dropped, deduplicated, first kept; the
    same tuple when that changes nothing. Not redacted nor capped: reading a file changes what
    it says no further than its form (seed 000: tags are stored normalized, and `memory::tags`
    is the filter source of `list` and `recall`, whose filters are normalized)."""
    stored = tuple(dict.fromkeys(filter(None, map(_stored_label, values))))
    return values if stored == values else stored


def _compose(value: str) -> str:
    """NFKC, as `normalize_label` stores a label (ASCII, the common case, is left as it is)."""
    return value if value.isascii() else unicodedata.normalize("NFKC", value)


def prepare_label(raw: str | None, field: str = "tag") -> str | None:
    """One label as stored (a `tag` filter, say): composed, redacted, then `normalize_label`;
    None for no label (None, or blank as `""` is: a filter of spaces filters nothing)."""
    if not raw:
        return None
    check_unicode(raw, field)
    return normalize_label(redact_line(_compose(raw))[0]) or None


class Labels(NamedTuple):
    """Entities or tags as stored (`prepare_labels`), the redactions made in them, and how many
    distinct values past the cap were left out (0: none)."""

    values: tuple[str, ...]
    redacted: tuple[str, ...]
    dropped: int


def prepare_labels(values: Sequence[str], field: str) -> Labels:
    """Entities or tags: redacted, whitespace-collapsed, lowercased (redaction markers kept as
    written), deduplicated (first occurrence kept), capped at the first `MAX_LABELS` distinct
    values (seed 000: tags are "capped like entities"; the caller reports `dropped`, so nothing
    is cut silently). Linear in what was given, which is bounded before any work: more than
    `MAX_RAW_LABELS` values (duplicates and blanks included) is refused unread."""
    if len(values) > MAX_RAW_LABELS:
        raise InvalidInput(
            f"{field} takes at most {MAX_RAW_LABELS} values, of which the first {MAX_LABELS} "
            f"distinct are kept (got {len(values)})"
        )
    out: dict[str, None] = {}  # ordered and O(1) membership
    past: set[str] = set()  # distinct values past the cap: validated alike, then left out
    labels: set[str] = set()
    for raw in values:
        if len(raw) > MAX_RAW_LABEL_CHARS:
            raise InvalidInput(f"each of {field} must be at most {MAX_LABEL_CHARS} characters")
        check_unicode(raw, field)
        # Composed first, so a full-width key reads as the key it is; redacted before
        # lowercasing, which would hide key shapes.
        redacted, found = redact_line(_compose(raw))
        value = normalize_label(redacted)
        if not value or value in out:
            continue
        if len(value) > MAX_LABEL_CHARS:
            raise InvalidInput(f"each of {field} must be at most {MAX_LABEL_CHARS} characters")
        if len(out) < MAX_LABELS:
            out[value] = None
            labels.update(found)  # a secret in a value left out was not stored: none to name
        else:
            past.add(value)
    return Labels(tuple(out), tuple(sorted(labels)), len(past))


def prepare_reason(raw: str | None) -> str | None:
    """A supersede's `reason`: redacted, trimmed, capped at `MAX_REASON_CHARS` (seed 000), never
    refused for its length. Only the first `MAX_RAW_TEXT_CHARS` are read (redaction's work stays
    bounded), cut at a whitespace so no token is split for redaction to miss (a single word that
    long is no reason: none is carried)."""
    if raw is None:
        return None
    if len(raw) > MAX_RAW_TEXT_CHARS:
        head = raw[:MAX_RAW_TEXT_CHARS]
        cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        raw = head[:cut] if cut > 0 else ""
    check_unicode(raw, "reason")
    reason = redact(raw).text.strip()[:MAX_REASON_CHARS].strip()
    return reason or None


def _next_revision(record: Memory) -> int:
    """The revision after `record`'s: every change needs one higher, and there is none past
    `MAX_INT` (a line holding it would be acknowledged, then refused at replay)."""
    if record.revision >= MAX_INT:
        raise Conflict(
            f"memory {record.id} is at the last revision ({MAX_INT}); save its text as a new "
            "memory and supersede this one"
        )
    return record.revision + 1


def _count(*parts: int) -> int:
    """A corroboration count: a sum that stops at `MAX_INT` (more observations than that is
    still "very many")."""
    return min(sum(parts), MAX_INT)


def _merged(old: tuple[str, ...], new: tuple[str, ...]) -> list[str]:
    merged = list(old)
    merged.extend(value for value in new if value not in old)
    return merged


def _union(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_merged(old, new)[:MAX_LABELS])


def union_dropped(old: tuple[str, ...], new: tuple[str, ...]) -> int:
    """How many values `_union(old, new)` leaves out at the cap (0: none): the caller warns of
    them as it warns of a request's own list cut (`labels_capped`)."""
    return max(0, len(_merged(old, new)) - MAX_LABELS)


def new_memory(
    memory_id: str,
    text: str,
    *,
    entities: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    pinned: bool = False,
    confidence: Confidence = Confidence.STATED,
    source: Provenance | None = None,
    category: str | None = None,
    title: str | None = None,
    recommendation: str | None = None,
    anchors: Anchors | None = None,
    evidence: tuple[str, ...] | None = None,
    context: str | None = None,
    intention: str | None = None,
    subject: str | None = None,
    now_ms: int,
) -> Memory:
    return Memory(
        id=memory_id,
        text=text,
        entities=entities,
        tags=tags,
        confidence=confidence,
        pinned=pinned,
        source=source,
        created_at=now_ms,
        updated_at=now_ms,
        stated_at=now_ms,
        category=category,
        title=title,
        recommendation=recommendation,
        anchors=anchors,
        evidence=evidence,
        context=context,
        intention=intention,
        subject=subject,
    )


def _card(memory: Memory) -> tuple[object, ...]:
    return (memory.category, memory.title, memory.recommendation, memory.anchors, memory.evidence)


def _same_card(a: Memory, b: Memory) -> bool:
    """The same card, whatever order its anchors were listed in."""
    return (
        _card(a)[:3] == _card(b)[:3]
        and anchor_set(a.anchors) == anchor_set(b.anchors)
        and a.evidence == b.evidence
    )


def _merged_card(existing: Memory, fresh: Memory) -> dict[str, object]:
    """The card fields a re-save keeps. A save that names no category reinforces whatever card the
    text has; a lesson saved over a different card (or a card over a lesson) would overwrite
    another writer's lesson unseen, so it is refused: that change is `update` with a revision."""
    if fresh.category is None or _same_card(fresh, existing):
        return {}
    if not existing.live:
        return dict(
            zip(
                ("category", "title", "recommendation", "anchors", "evidence"),
                _card(fresh),
                strict=True,
            )
        )
    if LESSON in (existing.category, fresh.category):
        raise Conflict(
            f"memory {existing.id} already holds this text with a different card (revision "
            f"{existing.revision}); change it with memory::update and expected_revision"
        )
    return {"category": existing.category or fresh.category}


def reinforce(existing: Memory, *, now_ms: int) -> Memory:
    """The fact was observed again: corroboration+1, and it counts as freshly stated."""
    return existing.model_copy(
        update={
            "corroboration": _count(existing.corroboration, 1),
            "updated_at": max(now_ms, existing.updated_at),
            "stated_at": max(now_ms, existing.last_stated_at),
            "revision": _next_revision(existing),
        }
    )


def save(
    existing: Memory | None,
    fresh: Memory,
) -> tuple[Memory, ItemEvent, bool]:
    """Save `fresh` (a new record built by `new_memory`) against the record with the same text.

    Returns `(record, event, created)`: a new record; a live match reinforced (tags and entities
    unioned, never unpinned, trust only raised); or a retired match resurrected with its revision
    counter continued.
    """
    if existing is None:
        return fresh, ItemEvent.CREATED, True
    now_ms = fresh.updated_at
    card = _merged_card(existing, fresh)
    merged = reinforce(existing, now_ms=now_ms).model_copy(
        update={
            "entities": _union(existing.entities, fresh.entities),
            "tags": _union(existing.tags, fresh.tags),
            "pinned": existing.pinned or fresh.pinned,
            "confidence": max(existing.confidence, fresh.confidence, key=_TRUST.__getitem__),
            "source": existing.source or fresh.source,
            # The situation a fact was first formed in stays its own; a record without one
            # takes the re-observation's.
            "context": existing.context or fresh.context,
            "intention": existing.intention or fresh.intention,
            **card,
        }
    )
    if existing.live:
        return merged, ItemEvent.UPDATED, False
    # Live again: why it was retired (`expired`, `evicted`) no longer describes it, and must not
    # be read later as the reason for a person's delete or a supersede.
    resurrected = merged.model_copy(
        update={"invalid_at": None, "superseded_by": None, "invalid_reason": None}
    )
    return resurrected, ItemEvent.CREATED, True


def update(
    existing: Memory,
    *,
    now_ms: int,
    text: str | None = None,
    entities: tuple[str, ...] | None = None,
    tags: tuple[str, ...] | None = None,
    pinned: bool | None = None,
    title: str | None = None,
    recommendation: str | None = None,
    anchors: Anchors | None = None,
    evidence: tuple[str, ...] | None = None,
    subject: str | None = None,
    category: str | None = None,
    context: str | None = None,
    intention: str | None = None,
) -> Memory | None:
    """Replace the given fields; None when nothing would change. A text edit counts as a new
    statement (`stated_at`); pin, tag, entity, subject, category, lane and card edits do not.
    `subject=""` makes the memory general, `context=""` / `intention=""` remove that lane. A
    retired record is refused, as `pin` refuses it: only a re-save brings it back."""
    if not existing.live:
        raise Conflict(f"memory {existing.id} is retired; save its text again to bring it back")
    changes: dict[str, object] = {}
    if subject is not None and (subject or None) != existing.subject:
        changes["subject"] = subject or None
    if category is not None and category != existing.category:
        changes["category"] = category
    changes.update(_lane_changes(existing, context=context, intention=intention))
    changes.update(_card_changes(existing, title, recommendation, anchors, evidence))
    if text is not None and text != existing.text:
        changes["text"] = text
        changes["stated_at"] = max(now_ms, existing.last_stated_at)
    if entities is not None and entities != existing.entities:
        changes["entities"] = entities
    if tags is not None and tags != existing.tags:
        changes["tags"] = tags
    if pinned is not None and pinned != existing.pinned:
        changes["pinned"] = pinned
    if not changes:
        return None
    changes["updated_at"] = max(now_ms, existing.updated_at)
    changes["revision"] = _next_revision(existing)
    return existing.model_copy(update=changes)


def _card_changes(
    existing: Memory,
    title: str | None,
    recommendation: str | None,
    anchors: Anchors | None,
    evidence: tuple[str, ...] | None,
) -> dict[str, object]:
    """The lesson fields an update changes (None: unchanged). Anchors are a set to match on (as a
    re-save compares them), and no evidence is None (as a save stores it): the same card written
    again is no new revision, which every conversation would be handed again."""
    changes: dict[str, object] = {}
    for field, value in (("title", title), ("recommendation", recommendation)):
        if value is not None and value != getattr(existing, field):
            changes[field] = value
    if anchors is not None and anchor_set(anchors) != anchor_set(existing.anchors):
        changes["anchors"] = anchors
    if evidence is not None and (evidence or None) != existing.evidence:
        changes["evidence"] = evidence or None
    return changes


def _lane_changes(existing: Memory, **lanes: str | None) -> dict[str, str | None]:
    """The association lanes an update changes: a text replaces the lane, "" removes it, None
    leaves it."""
    return {
        lane: text or None
        for lane, text in lanes.items()
        if text is not None and (text or None) != getattr(existing, lane)
    }


def tombstone(existing: Memory, *, now_ms: int, reason: str | None = None) -> Memory | None:
    """Retire the record (it leaves recall, stays on disk); None when it is already retired.
    `reason`: why an automatic path retired it (`evicted`, `expired`), kept on the record."""
    if not existing.live:
        return None
    changes: dict[str, object] = {
        "invalid_at": max(now_ms, existing.created_at),
        "updated_at": max(now_ms, existing.updated_at),
        "revision": _next_revision(existing),
        # Always this retirement's own reason (None for a delete): a record brought back by an
        # older version still carries its earlier `expired` or `evicted`.
        "invalid_reason": reason,
    }
    return existing.model_copy(update=changes)


def pin(existing: Memory, pinned: bool, *, now_ms: int) -> Memory | None:
    if not existing.live:
        raise Conflict(f"memory {existing.id} is retired; save its text again to bring it back")
    return update(existing, now_ms=now_ms, pinned=pinned)


def supersede(
    target: Memory, winner: Memory, *, reinforce_winner: bool, now_ms: int
) -> tuple[Memory, Memory | None]:
    """Retire `target` in favour of `winner`. With `reinforce_winner` (a merge) a non-pinned winner
    absorbs the target's observations; returns `(retired, reinforced_winner_or_None)`."""
    if target.id == winner.id:
        raise InvalidInput("a memory cannot supersede itself")
    if not winner.live:
        raise Conflict(f"superseded_by {winner.id} is not live")
    if target.pinned:
        raise Conflict(f"memory {target.id} is pinned; unpin it first")
    if not target.live:
        raise Conflict(f"memory {target.id} is already retired")
    retired = target.model_copy(
        update={
            "invalid_at": max(now_ms, target.created_at),
            "superseded_by": winner.id,
            "invalid_reason": None,  # superseded, not expired or evicted (see `tombstone`)
            "updated_at": max(now_ms, target.updated_at),
            "revision": _next_revision(target),
        }
    )
    if not reinforce_winner or winner.pinned:
        return retired, None
    update = {
        "corroboration": _count(winner.corroboration, target.corroboration, 1),
        "stated_at": max(winner.last_stated_at, target.last_stated_at),
        "confidence": max(winner.confidence, target.confidence, key=_TRUST.__getitem__),
        "updated_at": max(now_ms, winner.updated_at),
        "revision": _next_revision(winner),
    }
    if same_subject(winner.subject, target.subject):
        # What only the retired record knew, kept as a re-save of the same text keeps it: the
        # trust only raised, and the lanes and provenance where the survivor has none. Across
        # subjects (a person's explicit merge) only the observation counts: one person's lanes,
        # entities, tags and session copied onto another's memory would surface in their recalls
        # and outlive the first one's erasure (forget-subject takes only their own records).
        update |= {
            "tags": _union(winner.tags, target.tags),
            "entities": _union(winner.entities, target.entities),
            "source": winner.source or target.source,
            "context": winner.context or target.context,
            "intention": winner.intention or target.intention,
        }
    return retired, winner.model_copy(update=update)
