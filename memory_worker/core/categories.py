"""A memory's category as a small integer code: the lexical index's `category` column, and the
counts a bank leaves for listing. Fixed codes, no per-index table: a category outside these
(none is accepted) never has a TTL. Here, not in the search package that keeps the column: the
storage layer counts a bank from its records with the same codes without importing the search
package (numpy's indexes), which a one-shot save never builds."""

from __future__ import annotations

from collections import defaultdict

__all__ = ["CATEGORY_CODES", "CODE_OF", "OTHER_CATEGORY", "category_code"]

CATEGORY_CODES = {
    "fact": 0, "preference": 1, "procedure": 2, "context": 3, "correction": 4, "lesson": 5,
}  # fmt: skip
OTHER_CATEGORY = len(CATEGORY_CODES)


def category_code(category: str | None) -> int:
    """`category`'s code in the index's `category` column (a memory saved without one is a
    fact)."""
    return CODE_OF[category]


# `category_code` as one dict look-up (a bulk load maps a million through it in C); a category
# outside the codes (none is accepted) is added once, as other.
CODE_OF: defaultdict[str | None, int] = defaultdict(lambda: OTHER_CATEGORY, {None: 0})
CODE_OF.update(CATEGORY_CODES)
