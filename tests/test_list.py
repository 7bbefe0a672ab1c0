"""`memory::list` at scale (issue 12): the bank keeps its listing order and its filtered listings
between writes (`storage.listing`), and every answer stays the one a sort of the whole bank per
page gave: newest `updated_at` first, ties by id, each filter, `total`, TTL expiry, and paging
across writes that land between pages."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.errors import Conflict, MemoryNotFound
from memory_worker.core.models import Memory
from memory_worker.core.retention import past_ttl
from memory_worker.core.subjects import in_scope
from memory_worker.core.transitions import new_memory
from memory_worker.search.ranking import kind_of
from memory_worker.storage.listing import MIN_REPLAYED, Listings, listing_key, newest_first
from memory_worker.storage.store import Store

from .fakes import FixedClock

PERSON = Caller.human("cli")
AGENT = Caller.for_agent("bus", session_id="s1")
WORDS = ("tea", "cat", "oslo", "chess", "rust", "piano", "kayak", "bread")
TAGS = ("red", "blue", "green")
CATEGORIES = (None, "fact", "preference", "context", "procedure")
SUBJECTS = (None, "Ana", "ana", "Bruno")


async def call(
    service: MemoryService, function_id: str, caller: Caller = PERSON, **payload: Any
) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload, caller)


def _sorted_whole_bank(
    service: MemoryService, store: Store, payload: dict[str, Any], caller: Caller
) -> tuple[list[str], int]:
    """The answer as `memory::list` gave it before issue 12's change: every record filtered,
    the whole bank sorted, then sliced (ids of the page, total)."""
    bank = store.find("main")
    assert bank is not None
    tag, category = payload.get("tag"), payload.get("category")
    history = bool(payload.get("include_superseded"))
    scoped, subject = service.scope_of(bank, payload.get("subject"), caller)
    rows = [
        m
        for m in bank.memories.values()
        if (history or m.live)
        and (tag is None or tag in m.tags)
        and (category is None or kind_of(m) == category)
        and (not scoped or in_scope(m.subject, subject))
    ]
    retention, now_ms = service.bank_settings(bank).retention, service.clock()
    if retention and not history:
        rows = [m for m in rows if not past_ttl(m, retention, now_ms)]
    rows.sort(key=lambda m: (-m.updated_at, m.id))
    offset, limit = payload.get("offset", 0), payload.get("limit", 50)
    return [m.id for m in rows[offset : offset + limit]], len(rows)


async def _random_write(
    service: MemoryService, store: Store, clock: FixedClock, rng: random.Random
) -> None:
    """One write of a random kind; the clock moves by 0 to 2 ms first (0: a tie on
    `updated_at`, ordered by id), now and then by days (a `context` memory passes its TTL)."""
    if rng.random() < 0.03:
        clock.advance_days(rng.choice((1, 3)))
    else:
        clock.advance(rng.choice((0, 0, 1, 2)))
    bank = store.find("main")
    records = list(bank.memories.values()) if bank is not None else []
    live = sorted(m.id for m in records if m.live)
    unpinned = sorted(m.id for m in records if m.live and not m.pinned)  # a pin refuses these
    kind = rng.random() if live else 0.0
    if kind < 0.45:
        payload: dict[str, Any] = {
            "text": f"The user likes {rng.choice(WORDS)} and {rng.choice(WORDS)}",
            "tags": rng.sample(TAGS, rng.randint(0, 2)),
            "pinned": rng.random() < 0.1,
        }
        if (category := rng.choice(CATEGORIES)) is not None:
            payload["category"] = category
        if (subject := rng.choice(SUBJECTS)) is not None:
            payload["subject"] = subject
        await call(service, "memory::save", **payload)  # a repeated text reinforces
    elif kind < 0.6:
        tags = rng.sample(TAGS, rng.randint(0, 2))
        await call(service, "memory::update", id=rng.choice(live), tags=tags)
    elif kind < 0.75 and unpinned:
        await call(service, "memory::delete", id=rng.choice(unpinned))
    elif kind < 0.85:
        await call(service, "memory::pin", id=rng.choice(live), pinned=rng.random() < 0.5)
    elif unpinned and len(live) >= 2:
        old = rng.choice(unpinned)
        new = rng.choice([i for i in live if i != old])
        await call(service, "memory::supersede", id=old, superseded_by=new)


def _random_listing(rng: random.Random, size: int) -> dict[str, Any]:
    payload: dict[str, Any] = {"offset": rng.randint(0, size + 2), "limit": rng.randint(0, 12)}
    if rng.random() < 0.3:
        payload["offset"] = 0
    if rng.random() < 0.3:
        payload["tag"] = rng.choice(TAGS)
    if rng.random() < 0.3:
        payload["category"] = rng.choice(("fact", "preference", "context", "procedure"))
    if rng.random() < 0.3:
        payload["subject"] = rng.choice(("Ana", "ANA", "Bruno", "Carla"))
    if rng.random() < 0.25:
        payload["include_superseded"] = True
    return payload


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_page_is_the_one_a_sort_of_the_whole_bank_gave(
    service: MemoryService, store: Store, clock: FixedClock, seed: int
) -> None:
    """Random writes (saves, reinforcements, updates, deletes, pins, supersedes, TTL expiry,
    ties on `updated_at`) with random pages between them, by a person and by an agent, in a
    subject-scoped bank with a TTL: each page and total is the old full sort's."""
    rng = random.Random(seed)
    await call(
        service, "memory::bank::create", name="main", subject_scoping=True,
        retention={"context": 2},
    )  # fmt: skip
    compared = 0
    for _ in range(140):
        # One past its TTL is retired first: the write is refused, and nothing changed.
        with contextlib.suppress(Conflict, MemoryNotFound):
            await _random_write(service, store, clock, rng)
        for _ in range(rng.randint(0, 4)):
            await service.settle()  # a reap a read asked for lands before the reference reads
            if rng.random() < 0.05:
                clock.advance_days(1)  # some `context` memories pass their TTL, unreaped yet
            bank = store.find("main")
            assert bank is not None
            payload = {"bank": "main", **_random_listing(rng, len(bank.memories))}
            caller = rng.choice((PERSON, AGENT))
            want = _sorted_whole_bank(service, store, payload, caller)
            got = await call(service, "memory::list", caller, **payload)
            assert ([m["id"] for m in got["memories"]], got["total"]) == want, payload
            compared += 1
    assert compared > 150


async def test_list_is_newest_first_with_ties_by_id_after_changes_between_pages(
    service: MemoryService, store: Store, clock: FixedClock
) -> None:
    """Records saved in one millisecond come by id; a page read after an update moved one to
    the front, and after a delete, shows the order of that moment, `total` with it."""
    ids = [(await call(service, "memory::save", text=f"note {w}"))["memory"]["id"] for w in WORDS]
    by_id = sorted(ids)
    first = await call(service, "memory::list", limit=3)
    assert [m["id"] for m in first["memories"]] == by_id[:3] and first["total"] == len(ids)
    clock.advance()
    await call(service, "memory::update", id=by_id[5], tags=["moved"])
    second = await call(service, "memory::list", limit=3, offset=0)
    assert [m["id"] for m in second["memories"]] == [by_id[5], *by_id[:2]]
    await call(service, "memory::delete", id=by_id[0])
    third = await call(service, "memory::list", limit=50)
    assert [m["id"] for m in third["memories"]] == [by_id[5], *by_id[1:5], *by_id[6:]]
    assert third["total"] == len(ids) - 1
    history = await call(service, "memory::list", include_superseded=True, limit=1)
    assert history["total"] == len(ids)
    assert [m["id"] for m in history["memories"]] == [by_id[0]]  # its tombstone is the newest


async def test_a_filtered_listing_sees_the_write_that_landed_after_it_was_kept(
    service: MemoryService, clock: FixedClock
) -> None:
    first = await call(service, "memory::save", text="The user likes tea", tags=["drink"])
    assert (await call(service, "memory::list", tag="drink"))["total"] == 1
    clock.advance()
    second = await call(service, "memory::save", text="The user likes coffee", tags=["drink"])
    listed = await call(service, "memory::list", tag="drink")
    assert [m["id"] for m in listed["memories"]] == [
        second["memory"]["id"],
        first["memory"]["id"],
    ]
    clock.advance()
    await call(service, "memory::update", id=first["memory"]["id"], tags=["food"])
    listed = await call(service, "memory::list", tag="drink")
    assert [m["id"] for m in listed["memories"]] == [second["memory"]["id"]]


async def test_a_listing_past_a_ttl_leaves_the_expired_out_before_they_are_reaped(
    service: MemoryService, clock: FixedClock
) -> None:
    await call(service, "memory::bank::create", name="main", retention={"context": 1})
    await call(service, "memory::save", bank="main", text="The user is in Oslo", category="context")
    await call(service, "memory::save", bank="main", text="The user likes tea")
    assert (await call(service, "memory::list", bank="main"))["total"] == 2  # the order is kept
    clock.advance_days(1)
    clock.advance(1)  # older than its one-day TTL (seed 004: "older than")
    listed = await call(service, "memory::list", bank="main")
    assert [m["text"] for m in listed["memories"]] == ["The user likes tea"]
    assert listed["total"] == 1
    await service.settle()


def _memory(memory_id: str, updated_at: int, *, live: bool = True) -> Memory:
    record = new_memory(memory_id, memory_id, now_ms=updated_at)
    return record if live else record.model_copy(update={"invalid_at": updated_at})


def _order(listings: Listings, held: dict[str, Memory], *, history: bool) -> Sequence[Memory]:
    return listings.order(held.values(), history=history)


def test_a_kept_order_moves_each_changed_record_and_matches_a_fresh_sort() -> None:
    rng = random.Random(7)
    held = {f"m{i:03}": _memory(f"m{i:03}", rng.randint(0, 20)) for i in range(300)}
    listings = Listings()
    for history in (True, False):
        assert list(_order(listings, held, history=history)) == newest_first(
            m for m in held.values() if history or m.live
        )
    for _ in range(200):
        memory_id = rng.choice(sorted(held))
        record = _memory(memory_id, rng.randint(0, 40), live=rng.random() < 0.7)
        listings.changed(held.get(memory_id), record, len(held))
        held[memory_id] = record
        history = rng.random() < 0.5
        want = sorted((m for m in held.values() if history or m.live), key=listing_key)
        assert list(_order(listings, held, history=history)) == want


def test_newest_first_is_the_tuple_keys_order() -> None:
    rng = random.Random(3)
    records = [_memory(f"id{rng.randint(0, 10**6)}-{i}", rng.randint(0, 5)) for i in range(500)]
    assert newest_first(records) == sorted(records, key=lambda m: (-m.updated_at, m.id))


def test_a_filtered_listing_is_kept_until_the_next_change() -> None:
    listings = Listings()
    built: list[int] = []

    def build() -> list[int]:
        built.append(1)
        return [len(built)]

    assert listings.view("k", build) == [1] and listings.view("k", build) == [1]
    listings.changed(None, _memory("a", 1), 1)
    assert listings.view("k", build) == [2]


def test_a_kept_order_is_sorted_afresh_after_more_changes_than_a_sort_costs() -> None:
    rng = random.Random(11)
    held = {f"m{i:03}": _memory(f"m{i:03}", rng.randint(0, 20)) for i in range(300)}
    listings = Listings()
    _order(listings, held, history=False)
    for i in range(MIN_REPLAYED + 50):  # past the changes a kept order replays
        memory_id = f"m{rng.randrange(400):03}"
        record = _memory(memory_id, 100 + i, live=rng.random() < 0.8)
        listings.changed(held.get(memory_id), record, len(held))
        held[memory_id] = record
    want = sorted((m for m in held.values() if m.live), key=listing_key)
    assert list(_order(listings, held, history=False)) == want


def test_a_change_the_kept_order_cannot_place_sends_it_to_a_fresh_sort() -> None:
    held = {f"m{i}": _memory(f"m{i}", i) for i in range(5)}
    listings = Listings()
    _order(listings, held, history=True)
    stranger = _memory("m2", 2)  # equal to the one held, but not the object the order holds
    record = _memory("m2", 9)
    listings.changed(stranger, record, len(held))
    held["m2"] = record
    assert [m.id for m in _order(listings, held, history=True)] == ["m2", "m4", "m3", "m1", "m0"]
