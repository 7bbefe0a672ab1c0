"""The exact-text map (`storage.text_map.TextMap`): filled in bulk at a boot and changed key by key
after, it must answer, and read as a mapping, exactly as the id-by-id dict it replaced."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_worker.storage.text_map import TextMap

KEYS = st.sampled_from([0, 1, 7, 2**63, 2**64 - 1])  # repeats on purpose; the widest keys too
IDS = st.sampled_from(["fpa", "fpb", "fpc", "fpd"])
OPS = st.lists(st.tuples(st.booleans(), KEYS, IDS), max_size=30)


def reference_add(found: dict[int, str | list[str]], key: int, memory_id: str) -> None:
    held = found.get(key)
    if held is None:
        found[key] = memory_id
    elif isinstance(held, str):
        if held != memory_id:
            found[key] = [held, memory_id]
    elif memory_id not in held:
        held.append(memory_id)


def reference_remove(found: dict[int, str | list[str]], key: int, memory_id: str) -> None:
    held = found.get(key)
    if held is None:
        return
    if isinstance(held, str):
        if held == memory_id:
            del found[key]
    elif memory_id in held:
        held.remove(memory_id)
        if len(held) == 1:
            found[key] = held[0]


def ids_of(found: dict[int, str | list[str]], key: int) -> list[str]:
    held = found.get(key)
    return [] if held is None else [held] if isinstance(held, str) else list(held)


@settings(max_examples=300, deadline=None)
@given(
    base=st.lists(st.tuples(KEYS, st.integers(0, 40)), max_size=12, unique_by=lambda kv: kv[1]),
    ops=OPS,
)
def test_a_bulk_filled_map_then_changed_reads_as_the_dict_filled_id_by_id(
    base: list[tuple[int, int]], ops: list[tuple[bool, int, str]]
) -> None:
    ids = [f"fp{n}" for _, n in base]  # distinct ids, as a bank's records are
    keys = [key for key, _ in base]
    expected: dict[int, str | list[str]] = {}
    for key, memory_id in zip(keys, ids, strict=True):
        reference_add(expected, key, memory_id)
    found = TextMap.bulk(keys, ids)
    assert dict(found) == expected and len(found) == len(expected)
    for adding, key, memory_id in ops:
        (reference_add if adding else reference_remove)(expected, key, memory_id)
        (found.add if adding else found.remove)(key, memory_id)
        assert list(found.ids(key)) == ids_of(expected, key)
    assert dict(found) == expected and len(found) == len(expected)
    assert sorted(found) == sorted(expected)
    listed = [(i, k) for k in expected for i in ids_of(expected, k)]
    if len({i for i, _ in listed}) == len(listed):  # a bank's id has one text, so one key
        assert found.key_of() == dict(listed)


def test_an_empty_map_has_nothing() -> None:
    found = TextMap.bulk([], [])
    assert not found.ids(5) and dict(found) == {} and found.key_of() == {}
    found.remove(5, "fpa")
    assert len(found) == 0
