"""The speaker's own facts (`Fusion.others`): a question about the person asking it ("what am I
allergic to?", "eu como glúten?") prefers the user's facts to another's ("Beatriz is allergic to
shellfish."), which cannot answer it however well their words match. A question naming someone
else, asking about something of the speaker's ("my cat's…"), or a memory naming no one, a memory
with a subject (someone's own), rank as without the rule. A held-out household, written for this
rule and never tuned on (the golden persona's `old-05` is where it was found)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_worker.core.models import Confidence, Memory
from memory_worker.core.subjects import about_someone_else, asks_about_speaker
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallQuery, indexed, rank
from memory_worker.search.scoring import DEFAULT_FUSION, Fusion

NOW_MS = int(datetime(2023, 3, 1, tzinfo=UTC).timestamp() * 1000)
# The named-entity rule (`Fusion.unnamed`, tests/test_recall_named_entity.py) off on both sides:
# with `others` off, a first-person question is its ("I" names the user), which would blur this.
ON = Fusion(unnamed=1.0)
OFF = Fusion(others=1.0, unnamed=1.0)


def _memory(mid: str, text: str, entities: tuple[str, ...], subject: str | None = None) -> Memory:
    return Memory(
        id=mid,
        text=text,
        entities=entities,
        subject=subject,
        confidence=Confidence.STATED,
        created_at=NOW_MS - 30 * 86_400_000,
        updated_at=NOW_MS - 30 * 86_400_000,
    )


HOUSEHOLD = (
    _memory("peanut", "The user has been allergic to peanuts since he was a child.", ("user",)),
    _memory("shellfish", "Beatriz is allergic to shellfish.", ("beatriz",)),
    _memory("sister", "The user's sister Beatriz lives in Coimbra.", ("user", "beatriz")),
    _memory("padel", "The user plays padel on Wednesday evenings at the club.", ("user",)),
    _memory("tennis", "Beatriz plays tennis.", ("beatriz",)),
    _memory("gluten", "A Beatriz não come glúten.", ("beatriz",)),
    _memory(
        "meat", "O usuário não come carne vermelha desde 2020, por causa do colesterol.", ("user",)
    ),
    _memory("deworm", "Miso's deworming is due on 2023-03-10.", ("miso",)),
    _memory("tabs", "Prefers tabs over spaces.", ()),
    _memory("tabs_team", "The platform team prefers tabs.", ("platform team",)),
)
# Unrelated memories, so the questions' words are rare in the bank, as in a real one.
FILLER = tuple(
    _memory(f"f{i}", f"The user noted item {i}: groceries, bus times and the weather.", ("user",))
    for i in range(30)
)


def _scores(
    text: str, fusion: Fusion = ON, memories: tuple[Memory, ...] = HOUSEHOLD
) -> dict[str, float]:
    """Hit id -> score, best first."""
    by_id = {m.id: m for m in (*memories, *FILLER)}
    index = LexicalIndex()
    index.add_many(indexed(m) for m in by_id.values())
    query = RecallQuery(text=text, limit=5, now_ms=NOW_MS, half_life_days=60.0, fusion=fusion)
    return {hit.memory.id: hit.score for hit in rank(by_id, index, query)}


def _rank(text: str, fusion: Fusion = ON, memories: tuple[Memory, ...] = HOUSEHOLD) -> list[str]:
    return list(_scores(text, fusion, memories))


@pytest.mark.parametrize(
    ("question", "mine", "theirs"),
    [
        ("what am I allergic to?", "peanut", "shellfish"),
        ("eu como carne ou glúten?", "meat", "gluten"),
    ],
)
def test_a_question_about_the_speaker_puts_their_fact_above_anothers(
    question: str, mine: str, theirs: str
) -> None:
    # Without the rule another's shorter, better-matching sentence wins: the trap.
    off = _rank(question, OFF)
    assert off.index(theirs) < off.index(mine)
    ranked = _rank(question)
    assert ranked.index(mine) < ranked.index(theirs)  # demoted, not hidden


def test_a_weak_match_of_the_speakers_own_fact_rises_though_not_always_above() -> None:
    # The held-out miss: "Beatriz plays tennis." matches "play" in four words, the user's padel
    # sentence in nine; at 0.6 of its score another's fact still leads (and the sister's memory,
    # which names the user, is not another's). The rule lifts the user's fact; it is no trump.
    off, ranked = _rank("which sport do I play?", OFF), _rank("which sport do I play?")
    assert ranked.index("padel") < off.index("padel")
    assert ranked.index("tennis") < ranked.index("padel")


@pytest.mark.parametrize(
    "question",
    [
        "what is Beatriz allergic to?",  # names someone else
        "when is my cat's deworming due?",  # something of the speaker's
        "does my sister play tennis?",
        "what does the platform team prefer?",
    ],
)
def test_other_questions_rank_as_without_the_rule(question: str) -> None:
    assert _rank(question) == _rank(question, OFF)


def test_a_memory_naming_no_one_keeps_its_score() -> None:
    # "Prefers tabs over spaces." names no one (an agent's shorthand for the user's); the
    # platform team's preference is another's.
    on, off = _scores("do I prefer tabs?"), _scores("do I prefer tabs?", OFF)
    assert on["tabs"] == off["tabs"]
    assert on["tabs_team"] == pytest.approx(DEFAULT_FUSION.others * off["tabs_team"])


def test_a_memory_with_a_subject_is_someones_own_and_keeps_its_score() -> None:
    # In a scoped bank "I" is whoever is speaking: Beatriz's own memory may be theirs.
    own = tuple(
        _memory(m.id, m.text, m.entities, subject="Beatriz") if m.id == "shellfish" else m
        for m in HOUSEHOLD
    )
    assert _rank("what am I allergic to?", memories=own) == _rank(
        "what am I allergic to?", OFF, memories=own
    )


def test_who_a_question_and_a_memory_speak_of() -> None:
    assert asks_about_speaker("What foods am I allergic to?")
    assert asks_about_speaker("I'm on call this week?")
    assert asks_about_speaker("quando eu me formei?")
    assert not asks_about_speaker("remind me when the release is?")
    assert not asks_about_speaker("I need the login bug fixed")  # a request, not a question
    assert not asks_about_speaker("should I deploy on a Friday?")  # advice
    assert not asks_about_speaker("what's my blood type?")
    assert not asks_about_speaker("when do I see my mother?")
    assert not asks_about_speaker("What did Caroline research?")
    assert about_someone_else("Marta is allergic to cats.", ["marta"])
    assert not about_someone_else("The user's partner is Marta.", ["marta"])
    assert not about_someone_else("Marta and I met in 2022.", ["marta"])
    assert not about_someone_else("O usuário mora com a Marta.", ["marta"])
    assert not about_someone_else("Marta is allergic to cats.", ["User", "marta"])
    assert not about_someone_else("Prefers tabs over spaces.", [])
    assert about_someone_else("A Beatriz não come glúten.", ["beatriz"])
    assert about_someone_else("The platform team prefers tabs.", ["platform team"])


def test_a_question_for_a_procedure_and_a_fact_about_a_thing_are_left_alone() -> None:
    # A coding agent's questions are mostly "how do I…": the tools they name answer them, and a
    # memory only mentioning a name is a fact about its own subject (deploys), not another's.
    assert not asks_about_speaker("how do I run the tests?")
    assert not asks_about_speaker("como eu faço o deploy?")
    assert asks_about_speaker("eu como carne?")  # "como" the verb: about the speaker
    assert not about_someone_else("Deploys go through ArgoCD since March.", ["argocd"])
    assert not about_someone_else("Tests run with pytest -x in CI.", ["pytest", "ci"])


@pytest.mark.parametrize("question", ["which sport do I play?", "do I prefer tabs?"])
def test_the_named_entity_rule_leaves_a_question_about_the_speaker_to_this_one(
    question: str,
) -> None:
    # "I" names the user, whom another's fact does not carry: `others` already weighs that, and
    # both at once (0.6 × 0.9) would make the speaker's own a trump.
    assert _scores(question, DEFAULT_FUSION) == _scores(question, ON)
