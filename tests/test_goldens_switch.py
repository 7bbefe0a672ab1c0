"""`UPDATE_GOLDENS`: seed 000 and the SPEC re-baseline with `UPDATE_GOLDENS=1` (the test run
chosen limits what is rewritten); a family's name re-baselines that family alone."""

from __future__ import annotations

import pytest

from .goldens import ENV, FAMILIES, updating


@pytest.mark.parametrize("value", ["1", "true", "all"])
def test_the_seeds_switch_rebaselines_every_snapshot(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV, value)
    assert all(updating(family) for family in ("schemas", "injection", "recall"))


def test_recorded_vectors_are_rerecorded_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectors are the live model's, an input to the snapshot, not a result of the code."""
    monkeypatch.setenv(ENV, "1")
    assert not updating("vectors")
    monkeypatch.setenv(ENV, "vectors")
    assert updating("vectors") and not updating("recall")


@pytest.mark.parametrize("value", ["", " ", "0"])
def test_unset_or_off_rebaselines_nothing(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV, value)
    assert not any(updating(family) for family in FAMILIES)


def test_a_family_names_itself_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "schemas,injection")
    assert [f for f in FAMILIES if updating(f)] == ["schemas", "injection"]


def test_an_unknown_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "recal")
    with pytest.raises(ValueError, match="recal"):
        updating("recall")
