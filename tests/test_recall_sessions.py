"""Session support (`Fusion.session`): among a recall's best hits, a memory whose conversation
holds other strong matches gains a share of the best of them, so a session that answers the
question in several turns outranks a lone match elsewhere. It reorders sessions only: within one
the order stays, a memory saved outside any session gains nothing, and 0 turns it off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_worker.app.caller import Caller
from memory_worker.app.catalog import call
from memory_worker.app.service import MemoryService
from memory_worker.core.models import Confidence, Memory, Provenance
from memory_worker.search import ranking
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import Fusion

from .boots import session

NOW_MS = 1_800_000_000_000
HUMAN = Caller.human("cli")


def _memory(mid: str, text: str, session_id: str | None, at: int = 0) -> Memory:
    return Memory(
        id=mid,
        text=text,
        confidence=Confidence.STATED,
        created_at=NOW_MS - 1000 + at,
        updated_at=NOW_MS - 1000 + at,
        source=Provenance(session_id=session_id) if session_id else None,
    )


# The lone match says every word of the question; the trip's turns each say two of them.
LONE = _memory("lone", "The garden party in Lisbon was on a Sunday afternoon", "other")
TRIP = (
    _memory("trip-1", "We flew to Lisbon for the garden festival", "trip", 1),
    _memory("trip-2", "The party by the river in Lisbon was lovely", "trip", 2),
    _memory("trip-3", "Lisbon had the best garden cafe we ever saw", "trip", 3),
)
# Unrelated memories, so the question's words are rare in the bank, as in a real one.
FILLER = tuple(
    _memory(f"f{i}", f"Note {i}: the weather, the groceries and the bus times", None)
    for i in range(30)
)
QUERY = "the garden party in lisbon"


def _rank(memories: list[Memory], fusion: Fusion, limit: int = 10) -> list[tuple[str, float]]:
    memories = [*memories, *FILLER]
    by_id = {m.id: m for m in memories}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in memories)
    query = RecallQuery(text=QUERY, limit=limit, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion)
    return [(hit.memory.id, hit.score) for hit in rank(by_id, index, query)]


def _without_sessions(memory: Memory) -> Memory:
    return memory.model_copy(update={"source": None})


def test_a_session_with_several_matches_rises_over_a_lone_match() -> None:
    off = _rank([LONE, *TRIP], Fusion(session=0.0))
    on = _rank([LONE, *TRIP], Fusion(session=1.0, session_strong=0.0))
    assert off[0][0] == "lone"  # by its own words alone, the lone match is best
    assert [mid for mid, _ in on].index("trip-2") < [mid for mid, _ in on].index("lone")


def test_the_order_within_a_session_never_changes() -> None:
    off = [mid for mid, _ in _rank([LONE, *TRIP], Fusion(session=0.0)) if mid != "lone"]
    for strength in (0.1, 0.5, 1.0):
        fusion = Fusion(session=strength, session_strong=0.0)
        on = [mid for mid, _ in _rank([LONE, *TRIP], fusion) if mid != "lone"]
        assert on == off


def test_memories_outside_any_session_are_untouched() -> None:
    bare = [_without_sessions(m) for m in (LONE, *TRIP)]
    assert _rank(bare, Fusion(session=1.0, session_strong=0.0)) == _rank(bare, Fusion(session=0.0))


def test_the_support_is_the_best_other_score_of_the_session() -> None:
    """Each trip turn gains `session` × the best score among the other two."""
    off = dict(_rank([LONE, *TRIP], Fusion(session=0.0)))
    on = dict(_rank([LONE, *TRIP], Fusion(session=0.5, session_strong=0.0)))
    (low, low_id), (mid, mid_id), (high, high_id) = sorted((off[m.id], m.id) for m in TRIP)
    assert on[high_id] == high + 0.5 * mid
    assert on[mid_id] == mid + 0.5 * high
    assert on[low_id] == low + 0.5 * high
    assert on["lone"] == off["lone"]  # alone in its session


def test_two_weak_hits_lend_each_other_nothing() -> None:
    """Support needs the better of the two to be a strong hit (`session_strong` of the best
    score): the trip's turns, none of them that strong against the lone match, stay as they
    were; with a lower bar they rise."""
    off = dict(_rank([LONE, *TRIP], Fusion(session=0.0)))
    best = max(off.values())
    assert all(off[m.id] < 0.99 * best for m in TRIP)
    gated = dict(_rank([LONE, *TRIP], Fusion(session=0.5, session_strong=0.99)))
    assert gated == off
    low_bar = dict(_rank([LONE, *TRIP], Fusion(session=0.5, session_strong=0.1)))
    assert all(low_bar[m.id] > off[m.id] for m in TRIP)


def test_a_hit_the_session_lifts_from_past_the_limit_is_returned() -> None:
    """The best `session_pool` are ordered, not just `limit`: a turn ranked under the limit by
    its own score enters when its session's support lifts it."""
    others = [
        _memory(f"x{i}", f"garden party number {i} in lisbon park", f"s{i}") for i in range(6)
    ]
    memories = [*others, *TRIP]
    off = [mid for mid, _ in _rank(memories, Fusion(session=0.0), limit=3)]
    on = [mid for mid, _ in _rank(memories, Fusion(session=1.0, session_strong=0.0), limit=3)]
    assert not any(mid.startswith("trip") for mid in off)
    assert any(mid.startswith("trip") for mid in on)


def test_recall_through_the_call_entry_applies_it(tmp_path: Path) -> None:
    """The default recall ranks with session support: the same memories imported through the
    public call into a bank with their sessions and one without score the trip's turns higher
    in the first (a question its first turn answers best, which makes it a strong hit), the
    lone match (alone in its session) the same in both."""

    async def work(service: MemoryService) -> dict[str, dict[str, float]]:
        scores = {}
        for bank, memories in (
            ("with", (LONE, *TRIP)),
            ("without", [_without_sessions(m) for m in (LONE, *TRIP)]),
        ):
            records = [m.model_dump(mode="json", exclude_none=True) for m in (*memories, *FILLER)]
            await call(service, "memory::import", {"bank": bank, "records": records}, HUMAN)
            asked = {"bank": bank, "query": "the garden festival in lisbon"}
            out = await call(service, "memory::recall", asked, HUMAN)
            scores[bank] = {hit["memory"]["id"]: hit["score"] for hit in out["memories"]}
        return scores

    scores = session(tmp_path, work)
    assert scores["with"]["lone"] == scores["without"]["lone"]
    for memory in TRIP:
        assert scores["with"][memory.id] > scores["without"][memory.id]


def test_a_recall_for_more_than_the_session_pool_gets_its_limit() -> None:
    """Support reorders the best `session_pool` only; the hits past them are still returned: a
    recall asking for 60 of 80 matches gets 60, the same 60 as without support."""
    turns = [
        _memory(f"g{i:02d}", f"garden party story {i} in lisbon", f"s{i % 7}", i) for i in range(80)
    ]
    on = _rank(turns, Fusion(session_pool=40), limit=60)
    off = _rank(turns, Fusion(session=0.0), limit=60)
    assert len(on) == len(off) == 60
    assert {mid for mid, _ in on} == {mid for mid, _ in off}


def test_a_tie_at_the_session_pools_edge_is_broken_as_the_final_order_breaks_it() -> None:
    """Which of the hits tied at the last place of the best `session_pool` gain support goes by
    the final order's tie-break (newest, then id), not by where they sit in the index: the same
    memories indexed in another order give the same answer, and the trip's tied turn, past the
    pool's last place by its id, gains nothing."""
    best = _memory("a-best", "lisbon garden party", "trip")
    tied = [_memory(f"t{i:03d}", "garden party notes", f"s{i}") for i in range(60)]
    tied[30] = _memory("t030", "garden party notes", "trip")
    memories = [best, *tied]
    fusion = Fusion(session=0.5, session_strong=0.0, session_pool=10)

    def ranked(order: list[Memory]) -> list[tuple[str, float]]:
        by_id = {m.id: m for m in order}
        index = LexicalIndex()
        index.add_many(indexed(m) for m in order)
        query = RecallQuery(text=QUERY, limit=40, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion)
        return [(hit.memory.id, hit.score) for hit in rank(by_id, index, query)]

    forward = ranked(memories)
    assert ranked(memories[::-1]) == forward
    assert ranked([*memories[30:], *memories[:30]]) == forward
    assert [mid for mid, _ in forward][:3] == ["a-best", "t000", "t001"]
    assert dict(forward)["t030"] == dict(forward)["t000"]  # past the edge: no support


def test_support_never_turns_a_sessions_order_into_a_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two turns of a session an ulp apart gain each other's score: rounded, the sums may tie,
    and a tie goes to the newer turn. The better one stays first."""
    older = _memory("older", "lisbon garden", "trip", 0)
    newer = _memory("newer", "lisbon garden", "trip", 5)
    by_id = {m.id: m for m in (older, newer)}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    just_under = float(np.nextafter(1.0, 0.0))  # the older turn a shade better

    def scores(pool: ranking.Pool, *_: object) -> np.ndarray:
        memories = pool.memories(list(range(len(pool))))
        return np.array([1.0 if m.id == "older" else just_under for m in memories])

    monkeypatch.setattr(ranking, "_scores", scores)
    query = RecallQuery(
        text="lisbon garden", limit=2, now_ms=NOW_MS, half_life_days=60.0,
        fusion=Fusion(session=0.15, session_strong=0.0),
    )  # fmt: skip
    assert [hit.memory.id for hit in rank(by_id, index, query)] == ["older", "newer"]


def test_a_retired_turn_is_still_a_turn_of_its_session() -> None:
    """History (`include_superseded`) and time travel (`as_of`, when it was live) rank a retired
    record as a turn of the session it was said in: it gains its session's support as the live
    turns do, and lends its own."""
    retired = _memory("trip-0", "Our Lisbon garden party tickets", "trip").model_copy(
        update={"invalid_at": NOW_MS - 500}
    )
    memories = [LONE, *TRIP, retired, *FILLER]
    by_id = {m.id: m for m in memories}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in memories if m.invalid_at is None)
    for history in ({"include_superseded": True}, {"as_of": NOW_MS - 600}):

        def scores(fusion: Fusion, history: dict[str, Any] = history) -> dict[str, float]:
            query = RecallQuery(
                text=QUERY, limit=10, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion, **history
            )
            return {hit.memory.id: hit.score for hit in rank(by_id, index, query)}

        off = scores(Fusion(session=0.0))
        on = scores(Fusion(session=0.5, session_strong=0.0))
        best_other = max(off[m.id] for m in TRIP)
        assert on["trip-0"] == off["trip-0"] + 0.5 * best_other
        assert all(on[m.id] >= off[m.id] + 0.5 * min(off["trip-0"], best_other) for m in TRIP)
