"""What coding agents store and ask for: code identifiers, paths and the like, through
`memory::recall` (hybrid and lexical, with and without an embedder)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.storage.store import Store

from .fakes import FakeEmbedder, FixedClock, RecordingEmitter

# A coding agent's bank: a few memories about the person, a few about the code.
BANK = (
    "The user lives in Porto",
    "The user likes pizza on Fridays",
    "The user prefers tabs over spaces",
    "Use get_user_by_id in UserService to load an account",
    "user_id is a UUID column in the accounts table",
    "The account models are defined in src/users/models.py",
)


@pytest.fixture(name="recall", params=["plain", "embedded"])
async def _recall(
    request: pytest.FixtureRequest, store: Store, clock: FixedClock, emitter: RecordingEmitter
) -> AsyncIterator[Any]:
    embedder = FakeEmbedder() if request.param == "embedded" else None
    service = MemoryService(store, Settings(), emitter=emitter, clock=clock, embedder=embedder)
    ids = {}
    for text in BANK:
        saved = await catalog.call(service, "memory::save", {"text": text})
        ids[saved["memory"]["id"]] = text
    await service.settle()  # every memory embedded before the first recall

    async def recall(query: str, mode: str) -> list[str]:
        found = await catalog.call(service, "memory::recall", {"query": query, "mode": mode})
        return [ids[hit["memory"]["id"]] for hit in found["memories"]]

    recall.embedded = embedder is not None  # type: ignore[attr-defined]
    yield recall


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("query", ["user_id", "get_user_by_id", "src/users/models.py"])
async def test_an_identifier_naming_user_does_not_recall_every_memory_about_the_user(
    recall: Any, mode: str, query: str
) -> None:
    """The tokenizer split `user_id` into `user` + `id`, and `user` is the person talking: an
    identifier or a path with "user" in it matched every memory about the user."""
    found = await recall(query, mode)
    about_the_user = [text for text in found if text.startswith("The user ")]
    assert about_the_user == [], (query, mode)


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("get_user_by_id", "Use get_user_by_id in UserService to load an account"),
        ("user_id", "user_id is a UUID column in the accounts table"),
    ],
)
async def test_a_stored_identifier_comes_first_for_a_query_naming_it(
    recall: Any, mode: str, query: str, text: str
) -> None:
    """Another memory sharing a part of the identifier (`id`) ranked above the one that holds
    it verbatim."""
    found = await recall(query, mode)
    assert found[:1] == [text], (query, mode, found)


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("getUserById", "Use get_user_by_id in UserService to load an account"),
        ("userId", "user_id is a UUID column in the accounts table"),
    ],
)
async def test_an_identifier_is_found_whatever_its_case_convention(
    recall: Any, mode: str, query: str, text: str
) -> None:
    """`getUserById` and `get_user_by_id` name the same thing (in JavaScript's convention and
    in Python's): a camelCase name was one opaque word, found only by itself spelled whole."""
    found = await recall(query, mode)
    if recall.embedded and mode == "hybrid":
        # The fake embedder hashes whole words to 32 axes: "getuserbyid" shares one with "the"
        # and "userid" one with "in", so its arm ranks by collisions here, not by meaning: the
        # words alone must still bring the memory in.
        assert text in found, (query, mode, found)
    else:
        assert found[:1] == [text], (query, mode, found)


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize(("query", "text"), [("🍕", "Friday is 🍕 night"), ("✅", "Staging ✅")])
async def test_an_emoji_finds_the_memory_holding_it(
    service: MemoryService, mode: str, query: str, text: str
) -> None:
    """An emoji was no term at all (the tokenizer keeps letters and digits): asked for alone,
    recall found nothing, though a memory held it verbatim."""
    wanted = await catalog.call(service, "memory::save", {"text": text})
    await catalog.call(service, "memory::save", {"text": "Friday is the release day on staging"})
    found = await catalog.call(service, "memory::recall", {"query": query, "mode": mode})
    ids = [hit["memory"]["id"] for hit in found["memories"]]
    assert ids[:1] == [wanted["memory"]["id"]], ids


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("query", ["İstanbul", "istanbul", "Istanbul", "ISTANBUL"])
async def test_a_turkish_capital_i_is_a_letter_of_its_word(
    service: MemoryService, mode: str, query: str
) -> None:
    """ "İ".lower() is "i" and a combining dot, which the tokenizer cut the word at: "İstanbul"
    was "i" (the person talking, a first-person word) and "stanbul", so the memory was about
    the user, matched by every question about them, and "istanbul" did not find it."""
    offsite = {"text": "The team offsite is in İstanbul"}
    wanted = await catalog.call(service, "memory::save", offsite)
    await catalog.call(service, "memory::save", {"text": "The user lives in Porto"})
    found = await catalog.call(service, "memory::recall", {"query": query, "mode": mode})
    ids = [hit["memory"]["id"] for hit in found["memories"]]
    assert ids == [wanted["memory"]["id"]], (query, mode)


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("version", ["3.11.7", "3.7.11"])
async def test_a_version_number_finds_its_own_release_first(
    service: MemoryService, mode: str, version: str
) -> None:
    """`3.11.7` and `3.7.11` have the same parts: a query naming one tied with the other, and
    which came first was up to the memories' ids."""
    ids = {}
    for number in ("3.11.7", "3.7.11"):
        saved = await catalog.call(service, "memory::save", {"text": f"Some hosts run {number}"})
        ids[saved["memory"]["id"]] = number
    found = await catalog.call(service, "memory::recall", {"query": version, "mode": mode})
    assert [ids[hit["memory"]["id"]] for hit in found["memories"]][:1] == [version]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
@pytest.mark.parametrize("language", ["C#", "C++", "F#"])
async def test_a_language_named_with_a_symbol_finds_its_own_memory_first(
    service: MemoryService, mode: str, language: str
) -> None:
    """`C#`, `C++` and `F#` were all one letter, `c` or `f`: a query naming one tied with the
    others, and which came first was up to the memories' ids."""
    ids = {}
    for name in ("C#", "C++", "F#", "F"):
        saved = await catalog.call(service, "memory::save", {"text": f"The engine is in {name}"})
        ids[saved["memory"]["id"]] = name
    found = await catalog.call(service, "memory::recall", {"query": language, "mode": mode})
    assert [ids[hit["memory"]["id"]] for hit in found["memories"]][:1] == [language]


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
async def test_a_name_joined_by_a_double_colon_finds_its_memory_first(
    service: MemoryService, mode: str
) -> None:
    """`memory::recall` (`std::vector`, `Foo::bar`) was only its parts, which a memory using
    both words apart shares: the one naming it ranked under it."""
    wanted = await catalog.call(service, "memory::save", {"text": "The hook calls memory::recall"})
    other = "Recall a memory with recall, save it with memory::save, then recall again"
    await catalog.call(service, "memory::save", {"text": other})
    found = await catalog.call(service, "memory::recall", {"query": "memory::recall", "mode": mode})
    ids = [hit["memory"]["id"] for hit in found["memories"]]
    assert ids[:1] == [wanted["memory"]["id"]]
