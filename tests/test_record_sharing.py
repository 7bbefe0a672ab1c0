"""Replayed records share one set of given field names (RAM), and that sharing never lets a change
of one record reach another."""

from __future__ import annotations

from pathlib import Path

from memory_worker.core.models import Confidence, Memory
from memory_worker.storage.log import encode, read_all


def record(i: int) -> Memory:
    return Memory(
        id=f"fp{i:016x}", text=f"note {i}", confidence=Confidence.EXTRACTED,
        created_at=1000 + i, updated_at=1000 + i,
    )  # fmt: skip


def test_replayed_records_share_their_field_set_and_copies_do_not(tmp_path: Path) -> None:
    log = tmp_path / "memories.jsonl"
    log.write_bytes(b"".join(encode([record(i)]) for i in range(3)))
    first, second, third = read_all(log)[0]
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    given = set(first.__pydantic_fields_set__)

    retired = first.model_copy(update={"invalid_at": 5, "superseded_by": "fpother"})

    assert "invalid_at" in retired.model_fields_set
    assert second.model_fields_set == third.model_fields_set == given
    assert [r.to_line() for r in (first, second, third)] == [record(i).to_line() for i in range(3)]


def test_a_record_kept_in_ram_reads_as_the_one_validated_from_its_line(tmp_path: Path) -> None:
    # `shared_fields` rebuilds each replayed record around a key-sharing dict: every field, dump,
    # copy and the frozen guard must read exactly as the record validated from the same line.
    import pytest
    from pydantic import ValidationError

    from memory_worker.core.models import Provenance
    from memory_worker.storage.log import shared_fields

    full = record(7).model_copy(
        update={"source": Provenance(session_id="s1"), "tags": ("a", "b"), "subject": "ann"}
    )
    log = tmp_path / "memories.jsonl"
    log.write_bytes(encode([full]))
    (kept,) = read_all(log)[0]
    fresh = Memory.model_validate_json(full.to_line())
    assert kept == fresh and kept.to_line() == fresh.to_line()
    assert {n: getattr(kept, n) for n in Memory.model_fields} == dict(fresh)
    assert kept.model_fields_set == fresh.model_fields_set
    assert shared_fields(kept) == kept
    with pytest.raises(ValidationError):
        kept.text = "changed"  # type: ignore[misc]
    edited = kept.model_copy(update={"text": "other"})
    assert edited.text == "other" and kept.text == fresh.text
