"""What a stored embedding's coordinates may be: one bound, shared by the index that rounds them,
the sidecar that reads them back and the adapters that receive them from another process."""

from __future__ import annotations

__all__ = ["MAX_COORDINATE"]

# The largest coordinate a stored vector keeps: the index rounds each one as float16
# (`search.index.LexicalIndex(half_precision=True)`), where 70,000 is already infinity, stored
# for good in the running mean and every later recall's centring. float16's largest finite
# value, written out so this module needs no numpy (a one-shot save imports it).
MAX_COORDINATE = 65504.0
