"""Replayed records share one set of given field names (RAM), and that sharing never lets a change
of one record reach another."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def _lines() -> list[bytes]:
    """Lines of every shape a log holds: bare, every optional field, a batch, a legacy line
    without checksum, keys the model ignores, and the instants a compact record shares."""
    from memory_worker.core.models import Anchors, Provenance

    bare = record(1)
    full = record(2).model_copy(
        update={
            "source": Provenance(session_id="s1", entry_id="e1", agent="a"),
            "entities": ("Ana",), "tags": ("a", "b"), "subject": "ann", "stated_at": 1002,
            "category": "fact", "context": "c", "intention": "i", "title": "t",
            "recommendation": "r", "anchors": Anchors(files=("a.py",)), "evidence": ("x",),
            "expires_at": 9, "access_count": 3, "last_accessed_at": 4, "revision": 2,
            "invalid_at": 7, "superseded_by": "fpz", "invalid_reason": "evicted",
        }
    )  # fmt: skip
    lines = [encode([bare]).rstrip(b"\n"), encode([full]).rstrip(b"\n")]
    lines += encode([record(3), record(4)]).splitlines()  # batch tags
    lines.append(record(5).to_line())  # no checksum
    lines.append(record(6).to_line()[:-1] + b',"unknown":{"deep":[1,2]},"stated_at":null}')
    return lines


def test_records_validated_straight_from_their_fields_equal_the_models_own() -> None:
    # A boot validates a records snapshot's lines with Memory's field schema and builds the
    # compact record itself (`log._fields_validator`): value for value, field set for field set,
    # it is what the model's validator gives, and `shared_fields` of it.
    from memory_worker.storage import log as log_module

    assert log_module._fields_validator() is not None  # Memory's schema is the plain shape
    lines = _lines()
    data = b"\n".join(lines) + b"\n"
    starts, ends, at = [], [], 0
    for line in lines:
        starts.append(at)
        ends.append(at + len(line))
        at += len(line) + 1

    direct = log_module.records_at(data, starts, ends, compact=True)
    plain = log_module.records_at(data, starts, ends, compact=False)

    assert direct is not None and plain is not None
    assert list(direct) == list(plain)
    for kept, fresh in zip(direct.values(), plain.values(), strict=True):
        assert type(kept) is Memory
        assert kept == fresh and kept.to_line() == fresh.to_line()
        assert {n: getattr(kept, n) for n in Memory.model_fields} == dict(fresh)
        assert kept.model_fields_set == fresh.model_fields_set
        assert kept.__pydantic_extra__ is None and kept.__pydantic_private__ is None
        assert kept == log_module.shared_fields(fresh)
    first, *_, last = direct.values()
    assert first.__pydantic_fields_set__ is direct["fp0000000000000003"].__pydantic_fields_set__
    assert last.stated_at is None and "stated_at" in last.model_fields_set


def test_a_line_the_model_refuses_is_refused_straight_from_its_fields() -> None:
    from memory_worker.storage.log import records_at

    good = record(1).to_line()
    for bad in (
        good.replace(b'"created_at":1001', b'"created_at":-1'),  # out of range
        good.replace(b'"confidence":"extracted"', b'"confidence":"sure"'),  # not an enum value
        good.replace(b'"text":"note 1",', b""),  # a required field missing
        good.replace(b'"tags":[]', b'"tags":"a"'),  # wrong type
        good[:-1],  # not JSON
        b"[]",
    ):
        for compact in (True, False):
            assert records_at(bad, [0], [len(bad)], compact=compact) is None, bad


def test_a_field_schema_that_cannot_stand_alone_falls_back_to_the_models_validator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Should Memory's schema ever keep a part outside its `model-fields` (a definitions ref),
    # the straight path is not built and a boot validates through the model, as before.
    from memory_worker.storage import log as log_module

    real = Memory.__pydantic_core_schema__
    fields = {"type": "model-field", "schema": {"type": "definition-ref", "schema_ref": "gone"}}
    broken = {**real, "schema": {"type": "model-fields", "fields": {"id": fields}}}
    monkeypatch.setattr(Memory, "__pydantic_core_schema__", broken)
    log_module._fields_validator.cache_clear()
    try:
        assert log_module._fields_validator() is None
        lines = [record(i).to_line() for i in range(2)]
        data = b"\n".join(lines)
        found = log_module.records_at(data, [0, len(lines[0]) + 1], [len(lines[0]), len(data)])
    finally:
        monkeypatch.undo()
        log_module._fields_validator.cache_clear()
    assert found is not None
    assert [r.to_line() for r in found.values()] == lines
    first, second = found.values()
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
