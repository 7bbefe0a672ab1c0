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
