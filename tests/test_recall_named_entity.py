"""Memories of the named entity (`Fusion.unnamed`): a question naming someone ("What pets does
Nate have?") is answered by memories about them, so a returned memory carrying none of the
entities the question names ranks at `unnamed` of its score: the other speaker's "Nate, your
pets…" no longer sits above Nate's own words on its own words. A question naming no entity ranks
as without the rule. Written for this rule, never tuned on (the figures: docs/BENCHMARKS.md
"Memories of the named entity")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import DEFAULT_FUSION, Fusion

NOW_MS = int(datetime(2023, 3, 1, tzinfo=UTC).timestamp() * 1000)
OFF = Fusion(unnamed=1.0)


def _memory(mid: str, text: str, speaker: str) -> Memory:
    return Memory(
        id=mid,
        text=text,
        entities=(speaker,),
        confidence=Confidence.EXTRACTED,
        created_at=NOW_MS - 30 * 86_400_000,
        updated_at=NOW_MS - 30 * 86_400_000,
    )


# A chat of two, each turn carrying its speaker as its entity (as a transcript import saves it).
CHAT = (
    _memory("his_dog", "Nate: we got a new addition to the family, Max, a pet dog.", "nate"),
    _memory("her_praise", "Joanna: Aww Nate, pets! Your pets are so cute, Nate!", "joanna"),
    _memory("her_script", "Joanna: I finished my screenplay about pets and loss.", "joanna"),
    _memory("his_games", "Nate: I won my second video game tournament.", "nate"),
    *(
        _memory(f"f{i}", f"{name}: chatting about the weather and the bus {i}.", name)
        for i, name in enumerate(("nate", "joanna") * 12)
    ),
)


def _scores(
    text: str, fusion: Fusion = DEFAULT_FUSION, memories: Sequence[Memory] = CHAT
) -> dict[str, float]:
    """Hit id -> score, best first, over `memories` (the chat of two by default)."""
    by_id = {m.id: m for m in memories}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    query = RecallQuery(text=text, limit=5, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion)
    return {hit.memory.id: hit.score for hit in rank(by_id, index, query)}


def test_the_named_persons_own_memory_outranks_anothers_that_matches_more_words() -> None:
    ranked = list(_scores("What pets does Nate have?"))
    assert ranked.index("his_dog") < ranked.index("her_praise")
    # Without the rule the other speaker's turn, "pets" twice and the name in its words, led.
    off = list(_scores("What pets does Nate have?", OFF))
    assert off.index("her_praise") < off.index("his_dog")


def test_a_memory_without_the_named_entity_keeps_that_share_of_its_score() -> None:
    on, off = _scores("What pets does Nate have?"), _scores("What pets does Nate have?", OFF)
    assert on["his_dog"] == off["his_dog"]  # Nate's own: untouched
    assert on["her_praise"] == DEFAULT_FUSION.unnamed * off["her_praise"]
    assert DEFAULT_FUSION.unnamed < 1.0


def test_a_question_naming_no_entity_ranks_as_without_the_rule() -> None:
    assert _scores("Who has pets?") == _scores("Who has pets?", OFF)


def test_a_question_naming_both_speakers_demotes_neither() -> None:
    both = "Do Nate and Joanna like pets?"
    assert _scores(both) == _scores(both, OFF)


def _project_scores(text: str, fusion: Fusion = DEFAULT_FUSION) -> dict[str, float]:
    """A coding agent's bank: the user's preferences carry the entity `user`, the project's facts
    the tools they name (as extraction tags them), and one note was saved by hand, untagged."""

    def note(mid: str, text: str, *entities: str) -> Memory:
        return Memory(
            id=mid,
            text=text,
            entities=entities,
            confidence=Confidence.EXTRACTED,
            created_at=NOW_MS - 86_400_000,
            updated_at=NOW_MS - 86_400_000,
        )

    memories = [
        note("tests", "Tests run with make test from the repo root.", "make"),
        note("deploy", "Deploys go through the staging pipeline first.", "staging"),
        note("prefers", "The user prefers running tests verbose.", "user"),
        note("by_hand", "Flaky tests get a retry label before anyone reruns them."),
        *(note(f"n{i}", f"Lint rule {i} covers imports.", "ruff") for i in range(9)),
    ]
    return _scores(text, fusion, memories)


def test_a_procedure_questions_i_does_not_score_the_projects_memories_down() -> None:
    # "How do I run the tests?": its "I" reads as the user, but the answer is how the project
    # runs them, a memory tagged with the tool, not the user; it keeps its whole score.
    for question in ("How do I run the tests?", "como eu rodo os testes?"):
        assert _project_scores(question) == _project_scores(question, OFF), question


def test_a_question_about_the_users_own_things_still_prefers_their_memories() -> None:
    # "my…" asks about something of theirs (not about them: `Fusion.others` is for that).
    question = "What is my preference for tests?"
    on, off = _project_scores(question), _project_scores(question, OFF)
    assert on["prefers"] == off["prefers"]
    assert on["tests"] == DEFAULT_FUSION.unnamed * off["tests"]


def test_a_memory_tagged_with_no_one_keeps_its_whole_score() -> None:
    # Saved by hand or imported untagged, it says nothing of whom it is about: not another's.
    question = "What is my preference for tests?"
    on, off = _project_scores(question), _project_scores(question, OFF)
    assert "by_hand" in off and on["by_hand"] == off["by_hand"]
