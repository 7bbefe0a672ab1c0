"""One re-baseline switch per golden family: `UPDATE_GOLDENS=recall` rewrites only the recall
snapshot, `UPDATE_GOLDENS=schemas,injection` those two, `UPDATE_GOLDENS=all` every family. An
intended change re-baselines what it meant to change and nothing else rides along unreviewed.
`UPDATE_GOLDENS=1` is seed 000's and the SPEC's switch: every snapshot the tests run touch (the
test selection limits it, as `UPDATE_GOLDENS=1 … --test recall_quality` does in the seed); the
recorded vectors are re-recorded only when named, being the live model's output, not the code's.
"""

from __future__ import annotations

import os

__all__ = ["FAMILIES", "updating"]

FAMILIES = ("schemas", "injection", "recall", "vectors")
ENV = "UPDATE_GOLDENS"


SNAPSHOTS = ("schemas", "injection", "recall")  # what `1` re-baselines
ON = frozenset({"1", "true", "yes"})
OFF = frozenset({"0", "false", "no"})


def updating(family: str) -> bool:
    """Whether this run re-baselines `family`.

    Raises:
        ValueError: `UPDATE_GOLDENS` names something that is neither a family nor on or off.
    """
    assert family in FAMILIES, family
    raw = os.environ.get(ENV, "").strip().lower()
    if not raw or raw in OFF:
        return False
    if raw in ON:
        return family in SNAPSHOTS
    wanted = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = wanted - {*FAMILIES, "all"}
    if unknown:
        raise ValueError(
            f"{ENV}={raw!r}: name the golden families to re-baseline ({', '.join(FAMILIES)}, "
            f"all, or 1 for every snapshot), not {', '.join(sorted(unknown))}"
        )
    return "all" in wanted or family in wanted
