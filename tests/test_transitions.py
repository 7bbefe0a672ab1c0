from __future__ import annotations

import pytest

from memory_worker.core import transitions
from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.core.models import Confidence, ItemEvent, Memory

NOW = 1_000_000


def _memory(text: str = "The user likes tea", **changes: object) -> Memory:
    base = transitions.new_memory("fp0000000000000001", text, now_ms=NOW)
    return base.model_copy(update=changes)


class TestPrepare:
    def test_text_is_trimmed_and_bounded(self) -> None:
        assert transitions.prepare_text("  hello world  ") == ("hello world", ())
        with pytest.raises(InvalidInput, match="at least 3"):
            transitions.prepare_text("  a ")
        with pytest.raises(InvalidInput, match="at most 2000"):
            transitions.prepare_text("x" * 2001)

    def test_lone_surrogates_are_refused(self) -> None:
        with pytest.raises(InvalidInput, match="surrogate"):
            transitions.prepare_text("bad \ud800 text")

    def test_labels_are_lowercased_and_deduplicated(self) -> None:
        values = ["Blog", "blog", " iii ", "", *[f"t{i}" for i in range(6)], "T5"]
        labels, redacted, _ = transitions.prepare_labels(values, "tags")
        assert labels == ("blog", "iii", "t0", "t1", "t2", "t3", "t4", "t5")
        assert redacted == ()

    def test_more_labels_than_the_cap_keep_the_first_and_count_the_rest(self) -> None:
        """Seed 000 caps tags "like entities": the first eight distinct are kept and the rest
        counted for the caller to report (issue 11: never cut without a word). A secret only in a
        value left out is not named: nothing of it was stored."""
        token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
        values = [*(f"T{i}" for i in range(8)), "t0", f"t{token}", "t9"]
        labels = transitions.prepare_labels(values, "tags")
        assert labels == (tuple(f"t{i}" for i in range(8)), (), 2)
        with pytest.raises(InvalidInput, match="at most 32 values"):
            transitions.prepare_labels([f"t{i}" for i in range(33)], "tags")

    def test_a_redaction_marker_in_a_label_keeps_its_exact_form(self) -> None:
        token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
        labels, redacted, _ = transitions.prepare_labels([f"Deploy {token}", token], "tags")
        assert labels == ("deploy [REDACTED:github-token]", "[REDACTED:github-token]")
        assert redacted == ("github-token",)
        assert transitions.prepare_label(f"DEPLOY {token}") == "deploy [REDACTED:github-token]"

    def test_overlong_label_is_refused(self) -> None:
        with pytest.raises(InvalidInput, match="at most 64"):
            transitions.prepare_labels(["x" * 65], "tags")

    def test_reason_is_trimmed_and_capped(self) -> None:
        assert transitions.prepare_reason("  dup  ") == "dup"
        assert transitions.prepare_reason("   ") is None
        assert len(transitions.prepare_reason("r" * 900) or "") == 500


class TestSave:
    def test_new_text_creates_revision_zero(self) -> None:
        fresh = _memory()
        record, event, created = transitions.save(None, fresh)
        assert (record, event, created) == (fresh, ItemEvent.CREATED, True)
        assert record.revision == 0 and record.stated_at == NOW

    def test_live_resave_reinforces_unions_tags_and_never_unpins(self) -> None:
        existing = _memory(pinned=True, tags=("a",), corroboration=2, revision=3)
        fresh = transitions.new_memory(existing.id, existing.text, tags=("b",), now_ms=NOW + 5)
        record, event, created = transitions.save(existing, fresh)
        assert event is ItemEvent.UPDATED and not created
        assert record.corroboration == 3 and record.revision == 4
        assert record.pinned and record.tags == ("a", "b")
        assert record.updated_at == record.stated_at == NOW + 5

    def test_explicit_resave_raises_trust_but_never_lowers_it(self) -> None:
        extracted = _memory(confidence=Confidence.EXTRACTED)
        fresh = transitions.new_memory(extracted.id, extracted.text, now_ms=NOW + 1)
        assert transitions.save(extracted, fresh)[0].confidence is Confidence.STATED
        inferred_fresh = fresh.model_copy(update={"confidence": Confidence.INFERRED})
        stated = _memory()
        assert transitions.save(stated, inferred_fresh)[0].confidence is Confidence.STATED

    def test_resave_of_retired_memory_resurrects_it_and_continues_revision(self) -> None:
        retired = _memory(invalid_at=NOW + 1, superseded_by="fpother", revision=7)
        fresh = transitions.new_memory(retired.id, retired.text, now_ms=NOW + 9)
        record, event, created = transitions.save(retired, fresh)
        assert event is ItemEvent.CREATED and created
        assert record.live and record.superseded_by is None
        assert record.revision == 8


class TestUpdateDeletePin:
    def test_text_edit_bumps_revision_and_stated_at(self) -> None:
        record = transitions.update(_memory(), now_ms=NOW + 10, text="The user likes coffee")
        assert record is not None
        assert record.revision == 1 and record.stated_at == NOW + 10

    def test_tag_edit_does_not_count_as_a_new_statement(self) -> None:
        record = transitions.update(_memory(), now_ms=NOW + 10, tags=("x",))
        assert record is not None and record.stated_at == NOW and record.updated_at == NOW + 10

    def test_update_that_changes_nothing_returns_none(self) -> None:
        memory = _memory()
        assert transitions.update(memory, now_ms=NOW + 1, text=memory.text, pinned=False) is None

    def test_tombstone_sets_invalid_at_once(self) -> None:
        dead = transitions.tombstone(_memory(), now_ms=NOW + 3)
        assert dead is not None and dead.invalid_at == NOW + 3 and dead.revision == 1
        assert transitions.tombstone(dead, now_ms=NOW + 4) is None

    def test_pinning_a_retired_memory_is_a_conflict(self) -> None:
        with pytest.raises(Conflict, match="retired"):
            transitions.pin(_memory(invalid_at=NOW), True, now_ms=NOW + 1)


class TestSupersede:
    def test_retires_target_with_pointer(self) -> None:
        target, winner = _memory(), _memory("The user likes green tea", id="fp2")
        retired, absorbed = transitions.supersede(
            target, winner, reinforce_winner=False, now_ms=NOW + 1
        )
        assert retired.superseded_by == "fp2" and retired.invalid_at == NOW + 1
        assert absorbed is None

    def test_merge_absorbs_observations(self) -> None:
        target = _memory(corroboration=2, tags=("a",))
        winner = _memory("The user likes green tea", id="fp2", corroboration=1)
        _, absorbed = transitions.supersede(target, winner, reinforce_winner=True, now_ms=NOW + 1)
        assert absorbed is not None
        assert absorbed.corroboration == 4 and absorbed.tags == ("a",) and absorbed.revision == 1

    def test_pinned_survivor_is_never_written(self) -> None:
        winner = _memory("other", id="fp2", pinned=True)
        _, absorbed = transitions.supersede(_memory(), winner, reinforce_winner=True, now_ms=NOW)
        assert absorbed is None

    @pytest.mark.parametrize(
        ("target", "winner", "error"),
        [
            (_memory(pinned=True), _memory("w", id="fp2"), "pinned"),
            (_memory(invalid_at=NOW), _memory("w", id="fp2"), "already retired"),
            (_memory(), _memory("w", id="fp2", invalid_at=NOW), "not live"),
        ],
    )
    def test_refusals_are_conflicts(self, target: Memory, winner: Memory, error: str) -> None:
        with pytest.raises(Conflict, match=error):
            transitions.supersede(target, winner, reinforce_winner=False, now_ms=NOW)

    def test_self_supersede_is_invalid(self) -> None:
        memory = _memory()
        with pytest.raises(InvalidInput):
            transitions.supersede(memory, memory, reinforce_winner=False, now_ms=NOW)
