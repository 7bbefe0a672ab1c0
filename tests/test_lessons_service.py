"""Lessons through the catalog (app.lessons, app.memories): cards saved, updated, retired and listed
as memories; `memory::lessons::match` delivering each revision once per conversation, across a
restart, within the budget; the ledger on files and on the state worker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.lessons import DELIVERIES_SCOPE, KeyValueDeliveries, ToolCall
from memory_worker.app.recall import RECALL_MAX_LIMIT
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.errors import Conflict, InvalidInput, SiblingUnavailable
from memory_worker.core.lessons import tokens
from memory_worker.storage.deliveries import DELIVERIES_DIR, FileDeliveries
from memory_worker.storage.store import Store

from .fakes import FakeKeyValue, FixedClock, RecordingEmitter
from .syncs import recorded_syncs

HOLDER = {"pid": os.getpid(), "kind": "test", "command": "pytest tests/test_lessons_service.py"}
ROOT = "/home/dev/repo"

PROTO: dict[str, Any] = {
    "text": "Editing the proto files needs make gen, or the checked-in Go stubs go stale.",
    "category": "lesson",
    "title": "Run make gen after editing protos",
    "recommendation": "After editing `proto/*.proto`, run `make gen` and commit the stubs.",
    "anchors": {"files": ["proto/user.proto"], "folders": ["./proto/"]},
    "evidence": ["source:3f2a9c1", "proto/user.proto:12"],
}
BEDROCK: dict[str, Any] = {
    "text": "Bedrock needs the region set before configure_bedrock runs.",
    "category": "lesson",
    "title": "Set the Bedrock region first",
    "recommendation": "Export AWS_REGION before calling `configure_bedrock`.",
    "anchors": {"identifiers": ["configure_bedrock"], "keyword_groups": ["bedrock region"]},
}
BEDROCK_GROUPS = [["bedrock", "region"], ["aws", "sdk", "region"]]
READ_PROTO = {"tool": "Read", "arguments": {"file_path": f"{ROOT}/proto/user.proto"}, "cwd": ROOT}


async def _call(service: MemoryService, function_id: str, payload: dict[str, Any]) -> Any:
    return await catalog.call(service, function_id, payload)


async def _match(service: MemoryService, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = await _call(service, "memory::lessons::match", {**READ_PROTO, **extra})
    return result


def _log(data_dir: Path, bank: str = "main") -> bytes:
    path = data_dir / bank / "memories.jsonl"
    return path.read_bytes() if path.exists() else b""


async def test_a_lesson_is_a_memory_with_a_card_anchors_and_evidence(
    service: MemoryService,
) -> None:
    saved = await _call(service, "memory::save", PROTO)
    memory = saved["memory"]
    assert saved["created"] is True
    assert memory["category"] == "lesson"
    assert memory["title"] == PROTO["title"]
    assert memory["anchors"] == {
        "files": ["proto/user.proto"],
        "folders": ["proto"],  # normalized at admission
        "identifiers": [],
        "keyword_groups": [],
    }
    assert memory["evidence"] == PROTO["evidence"]
    plain = await _call(service, "memory::save", {"text": "The user drinks green tea"})
    assert "anchors" not in plain["memory"] and "category" not in plain["memory"]
    listed = await _call(service, "memory::list", {"category": "lesson"})
    assert [m["id"] for m in listed["memories"]] == [memory["id"]]
    assert listed["total"] == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"title": None}, "needs title, recommendation and anchors"),
        ({"anchors": {}}, "at least one anchor"),
        ({"anchors": {"file": ["x.py"]}}, "Extra inputs are not permitted"),
        ({"anchors": {"identifiers": ["config"]}}, "too broad"),
        # A call's names and words are read as ASCII runs: the refusal says so, not "letters".
        ({"anchors": {"identifiers": ["größe_berechnen"]}}, r"ASCII letters, digits and _"),
        ({"anchors": {"keyword_groups": [["geração", "stubs"]]}}, r"ASCII letters and digits"),
        ({"title": "x" * 97}, "at most 96 UTF-8 bytes"),
        ({"recommendation": "See proto/user.proto:12."}, "source position"),
        ({"anchors": {"files": ["proto/user.proto:12"]}}, "not a position in one"),
        ({"category": "lessons"}, "category must be one of"),
        # A NUL cuts C strings, terminals and tools short: refused in a card as in any text.
        ({"title": "Run make\x00 gen"}, "title contains a NUL character"),
        ({"recommendation": "Run\x00 make gen."}, "recommendation contains a NUL character"),
        ({"evidence": ["source:3f2a9c1\x00"]}, "evidence contains a NUL character"),
    ],
)
async def test_a_bad_lesson_is_refused_and_nothing_is_written(
    service: MemoryService, data_dir: Path, change: dict[str, Any], message: str
) -> None:
    payload = {k: v for k, v in {**PROTO, **change}.items() if v is not None}
    with pytest.raises(InvalidInput, match=message):
        await _call(service, "memory::save", payload)
    assert not (data_dir / "main").exists()


async def test_a_nul_in_an_updated_card_field_is_refused_and_changes_nothing(
    service: MemoryService, data_dir: Path
) -> None:
    saved = await _call(service, "memory::save", PROTO)
    before = _log(data_dir)
    for field in ("title", "recommendation"):
        with pytest.raises(InvalidInput, match=f"{field} contains a NUL character"):
            await _call(
                service, "memory::update", {"id": saved["memory"]["id"], field: "Make\x00 gen"}
            )
    with pytest.raises(InvalidInput, match="evidence contains a NUL character"):
        await _call(
            service, "memory::update", {"id": saved["memory"]["id"], "evidence": ["a\x00b"]}
        )
    assert _log(data_dir) == before


async def test_an_update_may_name_a_lessons_own_category(service: MemoryService) -> None:
    """A client that writes a read record back (category included) changes a lesson's card; it
    was refused as if the lesson were a plain memory being made one. A plain memory still cannot
    become a lesson by an update."""
    saved = (await _call(service, "memory::save", PROTO))["memory"]
    change = {"id": saved["id"], "category": "lesson", "title": "Regenerate after proto edits"}
    updated = (await _call(service, "memory::update", change))["memory"]
    assert (updated["category"], updated["title"]) == ("lesson", change["title"])
    assert updated["revision"] == saved["revision"] + 1
    plain = await _call(service, "memory::save", {"text": "The user drinks green tea"})
    with pytest.raises(InvalidInput, match="becomes a lesson by memory::save"):
        await _call(service, "memory::update", {"id": plain["memory"]["id"], "category": "lesson"})


async def test_lesson_fields_belong_to_lessons(service: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="lesson fields"):
        await _call(service, "memory::save", {"text": "plain memory", "title": "A title"})
    plain = await _call(service, "memory::save", {"text": "The user drinks green tea"})
    with pytest.raises(InvalidInput, match="not a lesson"):
        await _call(service, "memory::update", {"id": plain["memory"]["id"], "title": "x y z"})


async def test_secrets_are_redacted_from_every_card_field(service: MemoryService) -> None:
    secret = "sk-ant-api03-" + "a" * 40
    saved = await _call(
        service,
        "memory::save",
        {
            **PROTO,
            "title": f"Key {secret}",
            "recommendation": f"Use {secret} for it",
            "evidence": [f"token={secret}"],
        },
    )
    line = json.dumps(saved["memory"])
    assert secret not in line
    assert saved["redacted"]


async def test_saving_the_same_text_as_another_card_is_a_conflict_that_changes_nothing(
    service: MemoryService, data_dir: Path
) -> None:
    first = await _call(service, "memory::save", PROTO)
    again = await _call(service, "memory::save", PROTO)  # the same card: a reinforcement
    assert again["created"] is False
    assert again["memory"]["corroboration"] == 1
    before = _log(data_dir)
    with pytest.raises(Conflict, match="different card"):
        await _call(service, "memory::save", {**PROTO, "title": "Another writer's title"})
    assert _log(data_dir) == before
    plain = await _call(service, "memory::save", {"text": PROTO["text"]})  # no card: reinforce
    assert plain["memory"]["title"] == first["memory"]["title"]


async def test_the_same_anchors_in_another_order_are_the_same_card(service: MemoryService) -> None:
    """Anchors are a set to match on: saving the same lesson again with its files or keyword
    groups listed in another order reinforces it; it is no other writer's card."""
    card = {**BEDROCK, "anchors": {"files": ["a/x.py", "b/y.py"], "keyword_groups": BEDROCK_GROUPS}}
    await _call(service, "memory::save", card)
    reordered = {"files": ["b/y.py", "./a/x.py"], "keyword_groups": BEDROCK_GROUPS[::-1]}
    again = await _call(service, "memory::save", {**card, "anchors": reordered})
    assert again["created"] is False
    assert again["memory"]["corroboration"] == 1


async def test_an_update_naming_the_same_card_changes_nothing_and_is_not_delivered_again(
    service: MemoryService, data_dir: Path, emitter: RecordingEmitter
) -> None:
    """An update whose anchors are the card's own listed in another order (or that clears
    evidence the card does not have) changes nothing: no revision, no event, no line, and a
    conversation that was given the card is not given it again."""
    card = {**PROTO, "anchors": {"files": ["proto/user.proto", "proto/a.proto"]}, "evidence": []}
    saved = (await _call(service, "memory::save", card))["memory"]
    assert (await _match(service, conversation="c1"))["cards"]
    before, events = _log(data_dir), len(emitter.events)
    same = {"files": ["proto/a.proto", "./proto/user.proto"]}
    for change in ({"anchors": same}, {"evidence": []}):
        updated = await _call(service, "memory::update", {"id": saved["id"], **change})
        assert updated["memory"]["revision"] == saved["revision"]
    assert _log(data_dir) == before
    assert len(emitter.events) == events
    again = await _match(service, conversation="c1")
    assert again["cards"] == [] and again["already_delivered"] == 1


async def test_match_returns_the_card_only_never_anchors_or_evidence(
    service: MemoryService,
) -> None:
    saved = (await _call(service, "memory::save", PROTO))["memory"]
    result = await _match(service)
    [card] = result["cards"]
    assert card == {
        "id": saved["id"],
        "revision": saved["revision"],
        "title": PROTO["title"],
        "recommendation": PROTO["recommendation"],
        "score": 1000,
        "matched": "file proto/user.proto",
    }
    message = result["message"]
    assert message.startswith('<memory lessons="main">') and message.endswith("</memory>")
    assert PROTO["title"] in message and PROTO["recommendation"] in message
    assert "source:3f2a9c1" not in message and PROTO["text"] not in message
    assert result["paths"] == ["proto/user.proto"]
    assert (result["matched"], result["already_delivered"], result["withheld"]) == (1, 0, 0)


async def test_arguments_given_as_json_text_are_the_object_they_spell(
    service: MemoryService,
) -> None:
    """A tool call's arguments as providers carry them (OpenAI's `function.arguments`, a model
    filling an MCP tool's object parameter as a string) are JSON text: unambiguously that
    object, so read as it (the pre-generate hook already reads them so). Text that spells no
    object is still `invalid_input`."""
    await _call(service, "memory::save", PROTO)
    text = json.dumps(READ_PROTO["arguments"])
    found = await _call(service, "memory::lessons::match", {**READ_PROTO, "arguments": text})
    assert [c["matched"] for c in found["cards"]] == ["file proto/user.proto"]
    for bad in ("proto/user.proto", "[1, 2]", "{" * 100_000, '{"a": NaN}'):
        with pytest.raises(InvalidInput, match="arguments"):
            await _call(service, "memory::lessons::match", {**READ_PROTO, "arguments": bad})


@pytest.mark.parametrize("root", ["~/repo", "repo", "./repo", "$HOME/repo"])
async def test_a_workspace_root_that_is_not_absolute_is_refused(
    service: MemoryService, root: str
) -> None:
    """`workspace_root` is what absolute paths are read against: one that is not absolute was
    dropped unseen (the cwd taken instead), so a client sending `~/repo` got no card for any
    absolute path and no word why. It is `invalid_input`, and nothing is recorded."""
    await _call(service, "memory::save", PROTO)
    with pytest.raises(InvalidInput, match="workspace_root"):
        await _match(service, workspace_root=root, conversation="c1")
    assert [c["id"] for c in (await _match(service, conversation="c1"))["cards"]]


async def test_a_call_that_names_nothing_anchored_gets_nothing(service: MemoryService) -> None:
    await _call(service, "memory::save", PROTO)
    result = await _call(
        service, "memory::lessons::match", {"tool": "Read", "arguments": {"file_path": "README.md"}}
    )
    assert result["cards"] == [] and "message" not in result and result["matched"] == 0


async def test_a_lesson_about_one_person_reaches_no_other_conversation(
    service: MemoryService,
) -> None:
    """Subject scoping (seed 004): a tool call's speaker is not known, so the hook and agents get
    general lessons only; a person asking with no subject sees the whole bank."""
    await _call(service, "memory::bank::create", {"name": "main", "subject_scoping": True})
    anas = (await _call(service, "memory::save", {**PROTO, "subject": "ana"}))["memory"]
    general = {**BEDROCK, "anchors": {"folders": ["proto"]}}
    shared = (await _call(service, "memory::save", general))["memory"]
    for n, caller in enumerate((Caller.internal("hook"), Caller.for_agent("mcp"))):
        result = await catalog.call(
            service, "memory::lessons::match", {**READ_PROTO, "conversation": f"s{n}"}, caller
        )
        assert [c["id"] for c in result["cards"]] == [shared["id"]]
        assert result["matched"] == 1
    owner = await catalog.call(service, "memory::lessons::match", READ_PROTO, Caller.human("cli"))
    assert [c["id"] for c in owner["cards"]] == [anas["id"], shared["id"]]


async def test_each_revision_is_delivered_once_per_conversation(service: MemoryService) -> None:
    saved = (await _call(service, "memory::save", PROTO))["memory"]
    assert len((await _match(service, conversation="c1"))["cards"]) == 1
    repeat = await _match(service, conversation="c1")
    assert repeat["cards"] == [] and repeat["already_delivered"] == 1
    assert len((await _match(service, conversation="c2"))["cards"]) == 1  # another conversation
    assert len((await _match(service))["cards"]) == 1  # no conversation: nothing is recorded
    await _call(
        service,
        "memory::update",
        {"id": saved["id"], "recommendation": "Run `make gen`, then `make lint`."},
    )
    fresh = await _match(service, conversation="c1")  # a new revision may be delivered again
    [card] = fresh["cards"]
    assert card["revision"] == saved["revision"] + 1
    assert (await _match(service, conversation="c1"))["cards"] == []


async def test_a_retried_step_gets_the_same_cards_again(service: MemoryService) -> None:
    await _call(service, "memory::save", PROTO)
    first = await _match(service, conversation="c1", step="turn-1:2")
    retry = await _match(service, conversation="c1", step="turn-1:2")
    assert retry["cards"] == first["cards"] and len(first["cards"]) == 1
    later = await _match(service, conversation="c1", step="turn-1:3")
    assert later["cards"] == [] and later["already_delivered"] == 1


async def test_delivery_once_per_conversation_survives_a_restart(
    data_dir: Path, clock: FixedClock
) -> None:
    store = Store.open(data_dir, holder=HOLDER)
    service = MemoryService(store, Settings(), clock=clock)
    await _call(service, "memory::save", PROTO)
    assert len((await _match(service, conversation="c1"))["cards"]) == 1
    await store.close()
    assert len(list((data_dir / DELIVERIES_DIR).iterdir())) == 1
    store = Store.open(data_dir, holder=HOLDER)
    reopened = MemoryService(store, Settings(), clock=clock)
    try:
        after = await _match(reopened, conversation="c1")
        assert after["cards"] == [] and after["already_delivered"] == 1
        assert len((await _match(reopened, conversation="c2"))["cards"]) == 1
        assert reopened.store.names() == ["main"]  # the ledger's folder is no bank
    finally:
        await store.close()


async def _two_cards_past_one_budget(store: Store, clock: FixedClock) -> int:
    """Two cards meeting `READ_PROTO` saved; a budget (tokens) that holds one of them, not both."""
    long = {**BEDROCK, "anchors": {"files": ["proto/user.proto"]}, "recommendation": "z" * 600}
    roomy = MemoryService(store, Settings(), clock=clock)
    await _call(roomy, "memory::save", PROTO)
    await _call(roomy, "memory::save", long)
    both = await _match(roomy)
    assert len(both["cards"]) == 2
    return tokens(both["message"]) - 1


async def test_budget_packs_complete_cards_and_a_withheld_one_stays_eligible(
    store: Store, clock: FixedClock
) -> None:
    one_card_budget = await _two_cards_past_one_budget(store, clock)
    tight = MemoryService(store, Settings(lesson_hook_tokens=one_card_budget), clock=clock)
    first = await _match(tight, conversation="c1")
    assert len(first["cards"]) == 1 and first["withheld"] == 1
    assert tokens(first["message"]) <= one_card_budget
    second = await _match(tight, conversation="c1")  # the withheld card's turn
    assert len(second["cards"]) == 1 and second["cards"] != first["cards"]
    assert second["already_delivered"] == 1
    third = await _match(tight, conversation="c1")
    assert third["cards"] == [] and third["already_delivered"] == 2


async def test_max_chars_counts_characters_a_message_exactly_that_long_is_delivered(
    service: MemoryService,
) -> None:
    """`max_chars` is the message's length in characters (Claude Code's preview cap): a card
    whose message is exactly that long is delivered, one character less withholds it — even
    when the length is no multiple of 4 and the card's text is not ASCII."""
    card = {**PROTO, "recommendation": PROTO["recommendation"] + " Ver a secção «geração»."}
    await _call(service, "memory::save", card)
    message = (await _match(service))["message"]
    assert len(message.encode("utf-8")) > len(message) and len(message) % 4 != 0
    exact = await _match(service, max_chars=len(message))
    assert exact.get("message") == message and exact["withheld"] == 0
    short = await _match(service, max_chars=len(message) - 1)
    assert "message" not in short and short["withheld"] == 1


def test_the_two_lesson_budgets_default_to_seed_002s() -> None:
    """`nodeInjectionTokens` 16000 for a step of a turn, `hookInjectionTokens` 8000 a tool call."""
    settings = Settings()
    assert (settings.lesson_injection_tokens, settings.lesson_hook_tokens) == (16_000, 8000)


async def test_a_step_of_a_turn_packs_within_its_own_budget_a_tool_call_within_the_hooks(
    store: Store, clock: FixedClock
) -> None:
    one_card = await _two_cards_past_one_budget(store, clock)
    steps = Settings(lesson_injection_tokens=10 * one_card, lesson_hook_tokens=one_card)
    service = MemoryService(store, steps, clock=clock)
    hook = await _match(service)
    assert len(hook["cards"]) == 1 and hook["withheld"] == 1
    call = ToolCall(READ_PROTO["tool"], READ_PROTO["arguments"], ROOT, ROOT)
    step = await service.deliver_lessons("main", [call], for_step=True)
    assert len(step.cards) == 2
    hooks = Settings(lesson_injection_tokens=one_card, lesson_hook_tokens=10 * one_card)
    service = MemoryService(store, hooks, clock=clock)
    assert len((await _match(service))["cards"]) == 2
    step = await service.deliver_lessons("main", [call], for_step=True)
    assert len(step.cards) == 1


async def test_cards_sort_by_score_then_id_and_each_counts_its_best_match(
    service: MemoryService,
) -> None:
    await _call(service, "memory::save", PROTO)
    await _call(service, "memory::save", {**BEDROCK, "anchors": {"folders": ["proto"]}})
    third = {**BEDROCK, "text": "Another proto lesson entirely", "anchors": {"folders": ["proto"]}}
    await _call(service, "memory::save", third)
    cards = (await _match(service))["cards"]
    assert [c["score"] for c in cards] == [1000, 800, 800]
    assert [c["id"] for c in cards[1:]] == sorted(c["id"] for c in cards[1:])


async def test_a_retired_lesson_stops_matching_and_updated_anchors_apply_at_once(
    service: MemoryService, data_dir: Path, clock: FixedClock
) -> None:
    proto = (await _call(service, "memory::save", PROTO))["memory"]
    bedrock = (await _call(service, "memory::save", BEDROCK))["memory"]
    grep = {"tool": "Grep", "arguments": {"pattern": "def configure_bedrock"}}
    assert len((await _call(service, "memory::lessons::match", grep))["cards"]) == 1
    await _call(service, "memory::delete", {"id": proto["id"]})
    assert (await _match(service))["cards"] == []
    await _call(
        service, "memory::update", {"id": bedrock["id"], "anchors": {"files": ["proto/user.proto"]}}
    )
    assert (await _call(service, "memory::lessons::match", grep))["cards"] == []
    [card] = (await _match(service))["cards"]
    assert card["id"] == bedrock["id"]
    # What replay rebuilds is what the live bank held.
    await service.store.close()
    store = Store.open(data_dir, holder=HOLDER)
    try:
        reopened = MemoryService(store, Settings(), clock=clock)
        [again] = (await _match(reopened))["cards"]
        assert again["id"] == bedrock["id"]
        assert (await _call(reopened, "memory::lessons::match", grep))["cards"] == []
    finally:
        await store.close()


async def test_lessons_are_not_handed_out_as_ambient_recall(service: MemoryService) -> None:
    await _call(service, "memory::save", PROTO)
    await _call(service, "memory::save", {"text": "The user edits proto files on Mondays"})
    preview = await _call(service, "memory::preview", {"query": "editing the proto files"})
    texts = [m["memory"]["text"] for m in preview["memories"]]
    assert texts == ["The user edits proto files on Mondays"]
    recall = await _call(service, "memory::recall", {"query": "editing the proto files"})
    assert PROTO["text"] in [m["memory"]["text"] for m in recall["memories"]]  # still searchable


async def test_however_many_lessons_outrank_them_a_turn_still_gets_its_memories(
    service: MemoryService, clock: FixedClock
) -> None:
    """A coding agent's bank soon holds more lessons than one recall returns: ranked past, they
    must not leave the turn with nothing (nor empty its ambient floor)."""
    fact = "Kubernetes deploys of the billing service need a canary."
    await _call(service, "memory::save", {"text": fact})
    clock.advance(60_000)  # the lessons are newer: recency ranks them first, floor included
    now = service.clock()
    cards = [
        {
            **BEDROCK,
            "created_at": now,
            "updated_at": now,
            "text": f"Kubernetes billing service deploy lesson w{n}x about canary deploys",
            "title": f"Canary lesson {n}",
            "anchors": {"folders": [f"svc{n}"]},
        }
        for n in range(2 * RECALL_MAX_LIMIT)
    ]
    await service.import_records("main", cards)
    query = "how do kubernetes deploys of the billing service work? canary?"
    preview = await _call(service, "memory::preview", {"query": query})
    assert [m["memory"]["text"] for m in preview["memories"]] == [fact]


async def test_the_state_worker_keeps_deliveries_under_an_engine(
    store: Store, clock: FixedClock, emitter: RecordingEmitter
) -> None:
    kv = FakeKeyValue()
    service = MemoryService(
        store, Settings(), emitter=emitter, clock=clock, deliveries=KeyValueDeliveries(kv)
    )
    saved = (await _call(service, "memory::save", PROTO))["memory"]
    assert len((await _match(service, conversation="s1", step="t1:2"))["cards"]) == 1
    [(key, step)] = kv.data[(DELIVERIES_SCOPE, "s1")]["delivered"].items()
    assert (key, step) == (f"main/{saved['id']}@{saved['revision']}", "t1:2")
    # A fresh process (empty cache) reads the same record from the state worker.
    restarted = MemoryService(store, Settings(), clock=clock, deliveries=KeyValueDeliveries(kv))
    assert (await _match(restarted, conversation="s1"))["cards"] == []
    assert not (store.root / DELIVERIES_DIR).exists()


async def test_a_state_worker_that_cannot_answer_hands_out_nothing_new(
    store: Store, clock: FixedClock
) -> None:
    kv = FakeKeyValue()
    service = MemoryService(store, Settings(), clock=clock, deliveries=KeyValueDeliveries(kv))
    await _call(service, "memory::save", PROTO)
    kv.fail = True
    with pytest.raises(SiblingUnavailable):
        await _match(service, conversation="s1")
    kv.fail = False
    assert len((await _match(service, conversation="s1"))["cards"]) == 1  # still eligible


async def test_forgetting_a_conversation_lets_it_be_given_the_cards_again(
    service: MemoryService,
) -> None:
    await _call(service, "memory::save", PROTO)
    assert len((await _match(service, conversation="c1"))["cards"]) == 1
    await service.forget_deliveries("c1")
    assert len((await _match(service, conversation="c1"))["cards"]) == 1


async def test_a_compaction_hands_the_memories_again_but_never_the_lesson_cards(
    service: MemoryService,
) -> None:
    """Seed 002: "Compaction does not reset this deduplication". A coding agent's SessionStart
    after a compaction previews with `fresh` (its standing memories are handed anew); that
    forgot the lesson cards too, so every card the session was given came again."""
    await _call(service, "memory::save", PROTO)
    await _call(
        service, "memory::save", {"text": "The user prefers tabs over spaces", "pinned": True}
    )
    assert len((await _match(service, conversation="c1"))["cards"]) == 1
    handed = {"query": "", "conversation": "c1"}
    assert (await _call(service, "memory::preview", handed))["memories"]
    assert not (await _call(service, "memory::preview", handed))["memories"]
    after = await _call(service, "memory::preview", {**handed, "fresh": True})
    assert [m["memory"]["text"] for m in after["memories"]] == ["The user prefers tabs over spaces"]
    again = await _match(service, conversation="c1")
    assert again["cards"] == [] and again["already_delivered"] == 1


async def test_two_writers_never_silently_overwrite_a_lesson(
    service: MemoryService, data_dir: Path
) -> None:
    saved = (await _call(service, "memory::save", PROTO))["memory"]
    seen = saved["revision"]  # both writers read this revision
    first = await _call(
        service,
        "memory::update",
        {"id": saved["id"], "expected_revision": seen, "title": "Run make gen, then make lint"},
    )
    assert first["memory"]["revision"] == seen + 1
    before = _log(data_dir)
    with pytest.raises(Conflict, match=f"stale revision: memory {saved['id']} is at revision"):
        await _call(
            service,
            "memory::update",
            {"id": saved["id"], "expected_revision": seen, "anchors": {"folders": ["api"]}},
        )
    with pytest.raises(Conflict, match="stale revision"):
        await _call(service, "memory::delete", {"id": saved["id"], "expected_revision": seen})
    assert _log(data_dir) == before  # nothing changed
    [card] = (await _match(service))["cards"]  # the first writer's card, still anchored
    assert card["title"] == "Run make gen, then make lint"
    retired = await _call(
        service, "memory::delete", {"id": saved["id"], "expected_revision": seen + 1}
    )
    assert "invalid_at" in retired["memory"]
    assert (await _match(service))["cards"] == []
    history = await _call(service, "memory::history", {"id": saved["id"]})
    assert [r["revision"] for r in history["revisions"]] == [seen, seen + 1, seen + 2]
    with pytest.raises(Conflict, match="stale revision"):  # a stale snapshot cannot revive it
        await _call(
            service,
            "memory::update",
            {"id": saved["id"], "expected_revision": seen + 1, "title": "Back from the dead"},
        )


async def test_an_imported_lesson_keeps_its_card_and_a_bad_one_rejects_the_import(
    service: MemoryService, data_dir: Path
) -> None:
    with pytest.raises(InvalidInput, match=r"record 2: .*too broad"):
        await service.import_records(
            "main", [PROTO, {**BEDROCK, "anchors": {"identifiers": ["config"]}}]
        )
    assert not (data_dir / "main").exists()
    report = await service.import_records("main", [PROTO, BEDROCK])
    assert report.imported == 2
    [card] = (await _match(service))["cards"]
    assert card["title"] == PROTO["title"] and card["matched"] == "file proto/user.proto"


async def test_a_log_rewrite_that_erases_a_lesson_takes_it_out_of_the_index(
    service: MemoryService,
) -> None:
    proto = (await _call(service, "memory::save", PROTO))["memory"]
    await _call(service, "memory::save", {**BEDROCK, "anchors": {"folders": ["proto"]}})
    bank = service.store.get("main")
    await bank.rewrite(lambda records: [r for r in records if r.id != proto["id"]])
    [card] = (await _match(service))["cards"]
    assert card["id"] != proto["id"] and card["score"] == 800
    assert proto["id"] not in bank.lessons


async def test_the_deliveries_folder_made_by_a_first_delivery_is_synced_into_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The folder's entry durable before its first record counts as kept: a power loss took the
    # folder and the record with it, and a lesson was given a second time.
    deliveries = FileDeliveries(tmp_path)
    events = recorded_syncs(monkeypatch)
    await deliveries.record("conversation-1", {"main/lesson@1": "1"})
    made = (tmp_path / DELIVERIES_DIR).resolve()
    assert ("fsync", str(tmp_path.resolve())) in events
    assert events.index(("fsync", str(tmp_path.resolve()))) < events.index(
        ("replace", str(made / next(p.name for p in made.iterdir())))
    )
    events.clear()
    await deliveries.record("conversation-2", {"main/lesson@1": "1"})
    assert ("fsync", str(tmp_path.resolve())) not in events  # made once, synced once
