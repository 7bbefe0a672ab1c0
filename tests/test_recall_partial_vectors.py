"""A bank whose memories are not all embedded yet (saved by a process that does not embed, or in
flight in a server) keeps its semantic arm: a memory without a vector stands in its lexical
relevance for its semantic one (`ranking._stand_in_for_missing_vectors`), instead of counting as
unrelated and losing the whole semantic weight to its embedded peers."""

from __future__ import annotations

from memory_worker.core.models import Confidence, Memory
from memory_worker.search.index import LexicalIndex
from memory_worker.search.ranking import RecallMode, RecallQuery, indexed, rank

from .fakes import FakeEmbedder

FILLER = [f"The user mentioned topic number {i} at lunch" for i in range(12)]


def _bank(texts: dict[str, str], unembedded: set[str]) -> tuple[dict[str, Memory], LexicalIndex]:
    embedder = FakeEmbedder()
    memories: dict[str, Memory] = {}
    index = LexicalIndex()
    for mid, text in texts.items():
        memory = Memory(
            id=mid, text=text, confidence=Confidence.STATED, created_at=1, updated_at=1
        )  # fmt: skip
        memories[mid] = memory
        index.add_doc(indexed(memory))
        if mid not in unembedded:
            index.set_vector(mid, embedder.vector(text))
    return memories, index


def _ask(memories: dict[str, Memory], index: LexicalIndex, text: str) -> list[str]:
    query = RecallQuery(
        text=text, limit=5, now_ms=2, half_life_days=60.0, mode=RecallMode.HYBRID,
        vector=tuple(FakeEmbedder().vector(text)),
    )  # fmt: skip
    return [hit.memory.id for hit in rank(memories, index, query)]


TEXTS = {
    "beagle": "Pipoca the beagle is the dog of the user",
    "puppy": "The dog of the neighbour is a puppy that barks",
    **{f"f{i}": text for i, text in enumerate(FILLER)},
}


def test_a_memory_without_a_vector_that_says_what_was_asked_is_not_ranked_down() -> None:
    memories, index = _bank(TEXTS, unembedded={"beagle"})
    assert _ask(memories, index, "beagle dog")[0] == "beagle"


def test_with_every_vector_the_arm_ranks_as_before() -> None:
    """The stand-in is only for missing vectors: a fully embedded bank is ranked as it was."""
    memories, index = _bank(TEXTS, unembedded=set())
    assert index.all_embedded()
    assert _ask(memories, index, "beagle dog")[0] == "beagle"
    _, partial_index = _bank(TEXTS, unembedded={"beagle"})
    assert not partial_index.all_embedded()
