"""Lesson card fields (core.lessons): admission, normal forms, the card text, budget packing."""

from __future__ import annotations

from typing import Any

import pytest

from memory_worker.core.errors import InvalidInput
from memory_worker.core.lessons import (
    BYTES_PER_TOKEN,
    LESSON,
    MAX_RECOMMENDATION_BYTES,
    MAX_TITLE_BYTES,
    normalize_path,
    prepare_anchors,
    prepare_evidence,
    prepare_recommendation,
    prepare_title,
    render_card,
    render_lessons,
    split_words,
    tokens,
    topic_words,
)
from memory_worker.core.models import Anchors, Confidence, Memory


def _card(n: int, recommendation: str = "Run make gen afterwards.", revision: int = 0) -> Memory:
    return Memory(
        id=f"fp{n:016x}",
        text=f"lesson {n}",
        confidence=Confidence.STATED,
        created_at=0,
        updated_at=0,
        category=LESSON,
        title=f"Lesson {n}",
        recommendation=recommendation,
        anchors=Anchors(files=("proto/user.proto",)),
        revision=revision,
    )


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("configure_bedrock", ("configure", "bedrock")),
        ("CLAUDE_CODE_USE_BEDROCK", ("claude", "code", "use", "bedrock")),
        ("MemoryService", ("memory", "service")),
        ("configureBedrockRegion", ("configure", "bedrock", "region")),
        ("HTTPServer", ("http", "server")),
        ("sha256_digest", ("sha256", "digest")),
        ("__init__", ("init",)),
    ],
)
def test_identifiers_split_into_snake_and_camel_words(name: str, words: tuple[str, ...]) -> None:
    assert split_words(name) == words


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ("proto/user.proto", "proto/user.proto"),
        ("./proto//user.proto", "proto/user.proto"),
        ("proto/", "proto"),
        ("a/b/../c", "a/c"),
        ("proto\\user.proto", "proto/user.proto"),
        ("/abs/path", None),
        ("C:/x", None),
        ("../outside", None),
        (".", None),
        ("", None),
        # macOS hands out decomposed names (NFD); a model or a person types composed ones.
        ("docs/cafe\u0301.md", "docs/caf\u00e9.md"),
    ],
)
def test_paths_have_one_root_relative_spelling(raw: str, path: str | None) -> None:
    assert normalize_path(raw) == path


def test_anchors_are_normalized_deduplicated_and_groups_sorted() -> None:
    anchors = prepare_anchors(
        files=["./proto/user.proto", "proto/user.proto"],
        folders=["svc/api/"],
        identifiers=["configure_bedrock", "configure_bedrock"],
        keyword_groups=[["Region", "bedrock"], ["bedrock", "region"]],
    )
    assert anchors == Anchors(
        files=("proto/user.proto",),
        folders=("svc/api",),
        identifiers=("configure_bedrock",),
        keyword_groups=(("bedrock", "region"),),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "at least one anchor"),
        ({"files": ["/etc/passwd"]}, "root-relative"),
        ({"files": ["../x.py"]}, "inside the workspace"),
        ({"folders": ["."]}, "inside the workspace"),
        ({"files": ["proto/*.proto"]}, "not patterns"),
        ({"identifiers": ["config"]}, "single word"),
        ({"identifiers": ["has space"]}, "identifiers are names"),
        ({"identifiers": ["x" * 129 + "_y"]}, "identifiers are names"),
        ({"keyword_groups": [["bedrock"]]}, "2-4 distinct"),
        ({"keyword_groups": [["bedrock", "Bedrock"]]}, "2-4 distinct"),  # repeats never add
        ({"keyword_groups": [["alpha", "beta", "gamma", "delta", "omega"]]}, "2-4 distinct"),
        ({"keyword_groups": [["the", "bedrock"]]}, "too broad"),
        ({"keyword_groups": [["db", "bedrock"]]}, "too broad"),
        ({"keyword_groups": [["2024", "bedrock"]]}, "too broad"),
        ({"keyword_groups": [["make gen", "proto"]]}, "one word"),
        ({"files": [f"f{n}.py" for n in range(33)]}, "at most 32 files"),
        ({"files": ["keys/sk-ant-api03-" + "a" * 40]}, "must not hold a secret"),
        # Paths no tool call can name as root-relative: a lesson admitted with one never fires.
        ({"files": ["~/.aws/config"]}, "root-relative"),
        ({"folders": ["$HOME/src"]}, "root-relative"),
        ({"files": ["https://example.com/api.md"]}, "root-relative"),
        ({"files": ["src/app\npy"]}, "control character"),
        ({"folders": ["src\x00"]}, "control character"),
        # A position or a test id in a file is no path a Read or an Edit names (seed 002:
        # admission detects file:line pointers; positions go stale and belong in evidence).
        ({"files": ["src/app.py:42"]}, "not a position in one"),
        ({"files": ["src/app.py:42:7"]}, "not a position in one"),
        ({"files": ["Makefile:12"]}, "not a position in one"),
        ({"files": ["tests/test_api.py::test_login"]}, "not a position in one"),
    ],
)
def test_bad_anchors_are_refused_with_a_reason(kwargs: dict[str, list[str]], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        prepare_anchors(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"files": ["proto/user.proto"] * 100_000},
        {"identifiers": ["configure_bedrock"] * 100_000},
        {"keyword_groups": [["bedrock", "region"]] * 100_000},
    ],
)
def test_a_flood_of_anchors_is_refused_before_any_is_checked(kwargs: dict[str, Any]) -> None:
    """As entities and tags: what was given is bounded before each value is redacted and
    normalized (a 1 MiB request of one path repeated held the event loop for seconds)."""
    with pytest.raises(InvalidInput, match="at most"):
        prepare_anchors(**kwargs)


def test_a_flood_of_evidence_is_refused_before_any_is_checked() -> None:
    with pytest.raises(InvalidInput, match="at most"):
        prepare_evidence(["source:3f2a9c1"] * 100_000)


@pytest.mark.parametrize("term", ["user_name", "k8-s", "proto.stubs"])
def test_a_keyword_no_call_could_name_is_refused(term: str) -> None:
    """A call's words are never joined across `_`, `-` or `.`: such a term would be admitted
    and never match."""
    with pytest.raises(InvalidInput, match="one word"):
        prepare_anchors(keyword_groups=[[term, "timeout"]])
    assert prepare_anchors(keyword_groups=[["Bedrock", "REGION"]]).keyword_groups == (
        ("bedrock", "region"),
    )


@pytest.mark.parametrize(
    ("term", "word"),
    [
        ("HTTPServer", "httpserver"),
        ("OAuth", "oauth"),
        ("GitHub", "github"),
        ("K8sClient", "k8sclient"),
        ("macOS", "macos"),
        ("iOS", "ios"),
    ],
)
def test_a_camel_keyword_is_the_word_a_call_spelling_it_gives(term: str, word: str) -> None:
    """Text spells `GitHub`, `OAuth`, `PostgreSQL` in camel case, a keyword in one word: a call's
    words hold each such name whole as well as split (`topic_words`), so the term is admitted
    lowercased and both spellings meet it."""
    assert len(split_words(term)) > 1
    assert word in topic_words(term)
    assert prepare_anchors(keyword_groups=[[term, "timeout"]]).keyword_groups == (
        tuple(sorted((word, "timeout"))),
    )


@pytest.mark.parametrize(
    ("group", "terms"),
    [
        (["k8s", "helm"], ("helm", "k8s")),
        (["K8S", "helm"], ("helm", "k8s")),
        (["i18n", "e2e"], ("e2e", "i18n")),
        (["aws", "s3"], ("aws", "s3")),
        (["ec2", "utf8mb4", "sha256"], ("ec2", "sha256", "utf8mb4")),
    ],
)
def test_a_keyword_mixing_letters_and_digits_is_one_term(
    group: list[str], terms: tuple[str, ...]
) -> None:
    """`k8s`, `i18n`, `e2e`, `s3` are specific terms a call names as written: they were refused
    as two words (`k8` + `s`) or, for `s3`, as too short to be specific."""
    assert prepare_anchors(keyword_groups=[group]).keyword_groups == (terms,)


@pytest.mark.parametrize("term", ["io", "42", "2024", "8s", "k8-s", "v1.2", "K8s-Client"])
def test_short_words_numbers_and_pieces_stay_refused(term: str) -> None:
    with pytest.raises(InvalidInput, match=r"too broad|one word"):
        prepare_anchors(keyword_groups=[[term, "helm"]])


def test_title_is_one_line_redacted_and_bounded_in_bytes() -> None:
    assert prepare_title("  Run   make gen\nafter protos ") == ("Run make gen after protos", [])
    assert len(prepare_title("é" * (MAX_TITLE_BYTES // 2))[0].encode()) == MAX_TITLE_BYTES
    with pytest.raises(InvalidInput, match="at most 96 UTF-8 bytes"):
        prepare_title("é" * (MAX_TITLE_BYTES // 2 + 1))
    text, labels = prepare_title("Use key sk-ant-api03-" + "a" * 40)
    assert "sk-ant" not in text
    assert labels


def test_recommendation_keeps_lines_and_is_bounded_in_bytes() -> None:
    text, _ = prepare_recommendation("  line one\nline two  ")
    assert text == "line one\nline two"
    prepare_recommendation("x" * MAX_RECOMMENDATION_BYTES)
    with pytest.raises(InvalidInput, match="at most 640 UTF-8 bytes"):
        prepare_recommendation("x" * (MAX_RECOMMENDATION_BYTES + 1))
    with pytest.raises(InvalidInput, match="at least 3"):
        prepare_recommendation("  x ")


@pytest.mark.parametrize(
    "text",
    [
        "See proto/user.proto:42 first",
        "In src/app.py:10:3 the call",
        "bank.py:120 holds it",
        # Build and config files are cited as often as code.
        "The gen target at Makefile:12 needs protoc",
        "Dockerfile:3 pins the base image",
        "infra/main.tf:30 sets the region",
        "go.mod:5 pins the toolchain",
        "android/build.gradle:20 sets minSdk",
        "pom.xml:40 holds the plugin",
        "lib/main.dart:10 starts the app",
        "analysis.R:7 loads the data",
    ],
)
def test_cards_citing_source_positions_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="source position"):
        prepare_recommendation(text)


@pytest.mark.parametrize(
    "text", ["Serve on localhost:8080", "see https://example.com:443/x", "at 12:30 daily"]
)
def test_ports_and_times_are_not_source_positions(text: str) -> None:
    assert prepare_recommendation(text)[0] == text


def test_evidence_is_redacted_deduplicated_and_may_hold_positions() -> None:
    evidence, labels = prepare_evidence(["source:abc123", "proto/user.proto:42", "source:abc123"])
    assert evidence == ("source:abc123", "proto/user.proto:42")
    assert labels == []
    with pytest.raises(InvalidInput, match="at most 16 evidence"):
        prepare_evidence([f"e{n}" for n in range(17)])


def test_a_card_shows_id_revision_title_and_recommendation_only() -> None:
    card = render_card(_card(1, revision=3))
    assert card == (
        '<lesson id="fp0000000000000001" revision="3">\n'
        "Lesson 1\nRun make gen afterwards.\n</lesson>\n"
    )
    assert "proto/user.proto" not in card  # anchors and evidence stay on the record


def test_packing_counts_the_whole_message_in_tokens_of_four_bytes() -> None:
    cards = [_card(n) for n in range(3)]
    full = render_lessons("main", cards, 10_000)
    assert full.message is not None
    assert full.included == cards
    exact = tokens(full.message)
    assert render_lessons("main", cards, exact).included == cards
    assert len(render_lessons("main", cards, exact - 1).included) == 2
    assert render_lessons("main", cards, 1) == render_lessons("main", [], 10_000)
    assert render_lessons("main", [], 10_000).message is None
    assert tokens("abcd") == 1 and tokens("abcde") == 2 and tokens("é") == 1
    assert BYTES_PER_TOKEN == 4


def test_a_card_that_does_not_fit_is_skipped_and_smaller_later_ones_still_fit() -> None:
    big = _card(1, recommendation="y" * 600)
    small = [_card(2), _card(3)]
    budget = tokens(render_lessons("main", small, 10_000).message or "")
    block = render_lessons("main", [big, *small], budget)
    assert block.included == small
    assert block.message is not None and tokens(block.message) <= budget
