"""One re-baseline switch per golden family: `UPDATE_GOLDENS=recall` rewrites only the recall
snapshot, `UPDATE_GOLDENS=schemas,injection` those two, `UPDATE_GOLDENS=all` every family. An
intended change re-baselines what it meant to change and nothing else rides along unreviewed."""

from __future__ import annotations

import os

__all__ = ["FAMILIES", "updating"]

FAMILIES = ("schemas", "injection", "recall", "vectors")
ENV = "UPDATE_GOLDENS"


def updating(family: str) -> bool:
    """Whether this run re-baselines `family`.

    Raises:
        ValueError: `UPDATE_GOLDENS` names something that is not a family (`1` included: say which).
    """
    assert family in FAMILIES, family
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return False
    wanted = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = wanted - {*FAMILIES, "all"}
    if unknown:
        raise ValueError(
            f"{ENV}={raw!r}: name the golden families to re-baseline ({', '.join(FAMILIES)}, "
            f"or all), not {', '.join(sorted(unknown))}"
        )
    return "all" in wanted or family in wanted
