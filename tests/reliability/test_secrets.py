"""Secrets: every secret of the corpus, sent through every write path, is absent from every file
under the data dir afterwards (and from every event); look-alikes are stored unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_worker.app import catalog
from memory_worker.app.ports import ITEM_CHANGED
from memory_worker.core.errors import InvalidInput
from memory_worker.core.text import collapse_whitespace
from memory_worker.core.transitions import normalize_label

from ..fakes import FixedClock, RecordingEmitter
from ..secret_corpus import LOOKALIKES, SECRETS
from .helpers import WRITE_PATHS, disk_texts, on_disk, open_service, write_through

LABELS = (
    "save.entities",
    "save.tags",
    "update.entities",
    "update.tags",
    "import.entities",
    "import.tags",
)
ONE_LINE = ("bank.description", "save.session_id")


@pytest.mark.parametrize("path", WRITE_PATHS)
async def test_no_secret_reaches_the_disk_or_an_event_through_any_write_path(
    tmp_path: Path, path: str
) -> None:
    data = tmp_path / "data"
    emitter = RecordingEmitter()
    service = open_service(data, FixedClock(), emitter)
    try:
        await catalog.call(service, "memory::save", {"text": "The bank exists"})
        for n, (_, sentence, _) in enumerate(SECRETS):
            try:
                await write_through(service, path, sentence, n)
            except InvalidInput as err:  # too long for a label once redacted: nothing stored
                assert path in LABELS, err
    finally:
        await service.store.close()
    events = json.dumps([payload for _, payload in emitter.events], ensure_ascii=False).lower()
    disk = disk_texts(data)
    leaks = {
        label: on_disk(disk, secret) or "an event"
        for label, _, secret in SECRETS
        if on_disk(disk, secret) or secret.lower() in events
    }
    assert not leaks, f"{len(leaks)} of {len(SECRETS)} secrets kept through {path}: {leaks}"


@pytest.mark.parametrize("path", [p for p in WRITE_PATHS if p != "supersede.reason"])
async def test_lookalikes_are_stored_unchanged_through_every_write_path(
    tmp_path: Path, path: str
) -> None:
    service = open_service(tmp_path / "data")
    changed = []
    try:
        await catalog.call(service, "memory::save", {"text": "The bank exists"})
        for n, lookalike in enumerate(LOOKALIKES):
            expected = lookalike.strip()
            if path in LABELS:  # lowercased, a redaction marker kept as written
                expected = normalize_label(lookalike)
            elif path in ONE_LINE:
                expected = collapse_whitespace(lookalike)
            elif path == "rule.content" or path.startswith("import.source"):
                expected = lookalike
            try:
                stored = await write_through(service, path, lookalike, n)
            except InvalidInput:
                assert path in LABELS and len(expected) > 64
                continue
            if stored != expected:
                changed.append((lookalike, stored))
    finally:
        await service.store.close()
    assert not changed, f"{len(changed)} look-alikes changed through {path}: {changed[:3]}"


# --- the fields around the text (issue 11) ----------------------------------------------------

TOKEN_NAME = "xoxb-123456789012-123456789012-abcdefghij1234567890abcd"  # a valid bank name


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::bank::create", {"name": TOKEN_NAME}),
        ("memory::save", {"bank": TOKEN_NAME, "text": "The user likes tea"}),
        ("memory::rule::set", {"bank": TOKEN_NAME, "name": "style", "content": "Be brief."}),
        ("memory::rule::set", {"name": TOKEN_NAME, "content": "Be brief."}),
    ],
    ids=["bank-create", "save-new-bank", "rule-new-bank", "rule-name"],
)
async def test_a_token_shaped_name_never_becomes_a_folder_or_file(
    tmp_path: Path, function_id: str, payload: dict[str, object]
) -> None:
    """A bank or rule name becomes a folder or file name and rides every event: one shaped like
    a secret is refused (`invalid_input`), nothing is created."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        with pytest.raises(InvalidInput, match="looks like a secret"):
            await catalog.call(service, function_id, payload)
    finally:
        await service.store.close()
    assert not on_disk(disk_texts(data), TOKEN_NAME)
    assert not [p for p in data.rglob("*") if TOKEN_NAME in p.name]


@pytest.mark.parametrize("field", ["id", "superseded_by"])
async def test_an_import_id_that_is_a_secret_is_refused(tmp_path: Path, field: str) -> None:
    data = tmp_path / "data"
    service = open_service(data)
    _, _, secret = next(s for s in SECRETS if s[0] == "github-token")
    try:
        with pytest.raises(InvalidInput, match=f"record 1: {field} looks like a secret"):
            await service.import_records("main", [{"text": "The user likes tea", field: secret}])
    finally:
        await service.store.close()
    assert not on_disk(disk_texts(data), secret)


async def test_redactions_of_the_side_fields_are_reported(tmp_path: Path) -> None:
    """`redacted` names what was taken out of `session_id` and a bank's description too, and an
    import counts a row whose `source` held a secret."""
    _, _, secret = next(s for s in SECRETS if s[0] == "github-token")
    service = open_service(tmp_path / "data")
    try:
        saved = await catalog.call(
            service, "memory::save", {"text": "The user likes tea", "session_id": secret}
        )
        created = await catalog.call(
            service, "memory::bank::create", {"name": "work", "description": f"uses {secret}"}
        )
        report = await service.import_records(
            "main", [{"text": "The user likes coffee", "source": {"agent": secret}}]
        )
    finally:
        await service.store.close()
    assert saved["redacted"] == ["github-token"]
    assert created["redacted"] == ["github-token"]
    assert report.redacted == 1


async def test_an_update_that_redacts_the_subject_names_it(tmp_path: Path) -> None:
    """A save names what it took out of `subject`; an update of the subject must too, in its
    answer and in the `updated` event's reason (it reported nothing: the labels were dropped)."""
    _, _, secret = next(s for s in SECRETS if s[0] == "github-token")
    emitter = RecordingEmitter()
    service = open_service(tmp_path / "data", FixedClock(), emitter)
    try:
        saved = await catalog.call(service, "memory::save", {"text": "The user likes tea"})
        emitter.clear()
        payload = {"id": saved["memory"]["id"], "subject": f"alice {secret}"}
        updated = await catalog.call(service, "memory::update", payload)
    finally:
        await service.store.close()
    assert updated["memory"]["subject"] == "alice [REDACTED:github-token]"
    assert updated["redacted"] == ["github-token"]
    [event] = emitter.of(ITEM_CHANGED)
    assert event["event_type"] == "updated" and event["reason"] == "redacted: github-token"


async def test_an_import_that_redacts_only_the_subject_counts_it(tmp_path: Path) -> None:
    """As a save does, an import names what it took out of a record's `subject`: the report
    counts the row and its `created` event carries the labels (it counted nothing)."""
    _, _, secret = next(s for s in SECRETS if s[0] == "github-token")
    emitter = RecordingEmitter()
    service = open_service(tmp_path / "data", FixedClock(), emitter)
    try:
        row = {"text": "The user likes tea", "subject": f"alice {secret}"}
        report = await service.import_records("main", [row])
    finally:
        await service.store.close()
    assert report.redacted == 1
    [event] = emitter.of(ITEM_CHANGED)
    assert event["memory"]["subject"] == "alice [REDACTED:github-token]"
    assert event["reason"] == "redacted: github-token"


TOKEN = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
SPLIT = f"Authorization: Bearer\n{TOKEN}"  # a header and its token on two lines


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::save", {"text": "The user likes tea", "context": SPLIT}),
        ("memory::save", {"text": "The user likes tea", "intention": SPLIT}),
        ("memory::save", {"text": "The user likes tea", "tags": [SPLIT]}),
        ("memory::save", {"text": "The user likes tea", "entities": [SPLIT]}),
        ("memory::save", {"text": "The user likes tea", "subject": SPLIT}),
        ("memory::save", {"text": "The user likes tea", "session_id": SPLIT}),
        (
            "memory::save",
            {
                "text": "Regenerate the client after editing the proto",
                "category": "lesson",
                "title": SPLIT,
                "recommendation": "Run make proto after editing it.",
                "anchors": {"files": ["proto/user.proto"]},
                "evidence": [SPLIT],
            },
        ),
        ("memory::bank::create", {"name": "work", "description": SPLIT}),
    ],
    ids=[
        "context",
        "intention",
        "tags",
        "entities",
        "subject",
        "session_id",
        "lesson",
        "description",
    ],
)
async def test_a_one_line_field_is_redacted_as_it_is_stored(
    tmp_path: Path, function_id: str, payload: dict[str, object]
) -> None:
    """A one-line field is stored with its whitespace collapsed: a header and its token on two
    lines become `Authorization: Bearer <token>` on one, which must be redacted as one (it was
    stored as it read, and the answer named nothing)."""
    data = tmp_path / "data"
    service = open_service(data)
    try:
        answer = await catalog.call(service, function_id, payload)
    finally:
        await service.store.close()
    assert answer["redacted"] == ["bearer-token"]
    assert not on_disk(disk_texts(data), TOKEN)
