"""Bad input that used to escape the error contract (issue 11): every one now gets a coded error
that changes nothing, on every edge, and the next call still runs."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app import catalog
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings, parse_settings
from memory_worker.core.errors import BankNotFound, Conflict, InvalidInput
from memory_worker.storage.bank import Bank

from .rawhttp import request

JSON = {"Content-Type": "application/json"}
LONE = "\ud800"  # a lone surrogate: valid in a JSON string escape, not in UTF-8


@pytest.fixture(name="server")
async def _server(data_dir: Path) -> AsyncIterator[StandaloneServer]:
    server = StandaloneServer(Settings(), data_dir, port=0)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def _post(server: StandaloneServer, path: str, body: str) -> Any:
    assert server.url is not None
    return await asyncio.to_thread(request, server.url, "POST", path, body, headers=JSON)


# --- lone surrogates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/memory/get", ""),
        ("/memory/update", ', "text": "The user likes tea"'),
        ("/memory/delete", ""),
        ("/memory/pin", ', "pinned": true'),
        ("/memory/supersede", ', "superseded_by": "fp0000000000000000"'),
    ],
)
async def test_a_lone_surrogate_echoed_in_an_error_is_a_json_answer(
    server: StandaloneServer, path: str, extra: str
) -> None:
    """The id is echoed in `memory_not_found: <id> in bank main`; encoding that as UTF-8 used to
    fail the answer itself (aiohttp's plain-text 500)."""
    assert server.service is not None
    await catalog.call(server.service, "memory::save", {"text": "The user likes tea"})
    answer = await _post(server, path, '{"id": "fp\\ud800"' + extra + "}")
    assert answer.headers["content-type"].startswith("application/json")
    assert (answer.status, answer.code) == (404, "memory_not_found"), answer.body
    assert "\\ud800" in answer.json()["error"]["message"]


def test_a_lone_surrogate_in_a_batch_line_is_answered_and_the_next_line_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = tmp_path / "calls.jsonl"
    lines = [
        '{"function_id": "memory::get", "payload": {"id": "fp\\ud800"}}',
        '{"function_id": "memory::save", "payload": {"text": "fp\\ud800 tea"}}',
        json.dumps({"function_id": "memory::save", "payload": {"text": "The user likes tea"}}),
    ]
    batch.write_text("\n".join(lines) + "\n")
    code = cli.main(["call", "--batch", str(batch), "--data-dir", str(tmp_path / "data")])
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [a.get("error", {}).get("code") for a in answers] == [
        "memory_not_found",
        "invalid_input",
        None,
    ]
    assert answers[2]["result"]["created"] is True


@pytest.mark.parametrize(
    "row",
    [
        {"id": "fp" + LONE, "text": "The user likes tea"},
        {"text": "The user likes tea", "superseded_by": "fp" + LONE},
        {"text": "The user likes tea", "source": {"agent": LONE}},
        {"text": "The user likes tea", "tags": [LONE]},
    ],
    ids=["id", "superseded_by", "source.agent", "tags"],
)
async def test_a_lone_surrogate_in_an_import_is_invalid_input(
    service: MemoryService, row: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput, match="record 1"):
        await service.import_records("main", [row])
    assert service.store.names() == []


# --- import lines ------------------------------------------------------------------------------


def test_import_splits_lines_at_newlines_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """U+2028, U+2029, U+0085, a form feed or a vertical tab inside a JSON string are valid JSON;
    `str.splitlines` cut the record there and refused the file."""
    texts = [
        f"The user wrote note {n}{sep}across lines"
        for n, sep in enumerate("\u2028\u2029\x85\x0c\x0b\x1c")
    ]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\r\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in texts) + "\n")
    data = tmp_path / "data"
    code = cli.main(["import", str(rows), "--bank", "main", "--data-dir", str(data)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["imported"] == len(texts)
    code = cli.main(["trigger", "memory::list", "--data-dir", str(data)])
    listed = json.loads(capsys.readouterr().out)
    assert sorted(m["text"] for m in listed["memories"]) == sorted(texts)


# --- NaN, NUL ----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", ['{"text": NaN}', '{"text": Infinity}', '{"text": -Infinity}'])
async def test_nan_is_not_saved_as_text_over_rest(server: StandaloneServer, body: str) -> None:
    answer = await _post(server, "/memory/save", body)
    assert (answer.status, answer.code) == (400, "invalid_input")
    assert server.service is not None and server.service.store.names() == []


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_nan_from_an_already_decoded_payload_is_invalid_input(
    service: MemoryService, value: float
) -> None:
    with pytest.raises(InvalidInput):
        await catalog.call(service, "memory::save", {"text": value})
    with pytest.raises(InvalidInput):
        await catalog.call(service, "memory::recall", {"query": value})


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::recall", {"query": "tea", "limit": True}),
        ("memory::list", {"offset": False}),
        ("memory::delete", {"id": "fpx", "expected_revision": True}),
        ("memory::bank::create", {"name": "b", "max_memories": True}),
    ],
)
async def test_true_or_false_for_a_number_is_invalid_input(
    service: MemoryService, function_id: str, payload: dict[str, Any]
) -> None:
    """`limit=true` (as `iii trigger` decodes it) names no number: refused, never read as 1."""
    with pytest.raises(InvalidInput, match="not true or false"):
        await catalog.call(service, function_id, payload)
    assert service.store.names() == []


@pytest.mark.parametrize(
    ("function_id", "payload", "message"),
    [
        (
            "memory::recall",
            {"query": "tea", "limit": True},
            "limit: must be a number, not true or false",
        ),
        (
            "memory::save",
            {"text": "Likes jazz", "subject_type": "member"},
            "subject: subject_type and subject_id must be provided together",
        ),
        (
            "memory::bank::create",
            {"name": "b", "association_weights": {"content": 0}},
            "association_weights: at least one association weight must be above 0",
        ),
    ],
)
async def test_a_validators_refusal_reads_as_its_own_words(
    service: MemoryService, function_id: str, payload: dict[str, Any], message: str
) -> None:
    """What a request's own check says, as it says it: every door answered "payload: Value
    error, limit: must be a number, not true or false" (pydantic's wrapping of it)."""
    with pytest.raises(InvalidInput) as refused:
        await catalog.call(service, function_id, payload)
    assert str(refused.value) == f"invalid_input: {message}"


def test_a_settings_files_refusal_reads_as_the_checks_own_words() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_settings({"extraction_endpoint": "foo"}, source="m.yaml")
    assert str(refused.value) == (
        "invalid_input: m.yaml: extraction_endpoint: must be an http:// or https:// URL, or empty"
    )


@pytest.mark.parametrize("field", ["created_at", "stated_at", "corroboration", "revision"])
async def test_true_or_false_for_an_imported_records_number_is_invalid_input(
    service: MemoryService, field: str
) -> None:
    """A record's `"created_at": true` was imported as 1 ms past 1970 (and `revision: true` as
    revision 1), where a request's `limit=true` is refused: the same rule for a record."""
    records = [{"text": "The user likes green tea.", field: True}]
    with pytest.raises(InvalidInput) as refused:
        await catalog.call(service, "memory::import", {"bank": "main", "records": records})
    assert (
        str(refused.value)
        == f"invalid_input: record 1: {field}: must be a number, not true or false"
    )
    assert service.store.names() == []


def _flag_fields() -> list[tuple[str, str]]:
    """Every (function, field) of the catalog whose request field is a boolean."""
    found = []
    for spec in catalog.CATALOG:
        for name in spec.request.model_fields:
            schema = catalog.json_schema(spec.request)["properties"].get(name, {})
            kinds = schema.get("type", [s.get("type") for s in schema.get("anyOf", [])])
            if "boolean" in (kinds if isinstance(kinds, list) else [kinds]):
                found.append((spec.id, name))
    return found


FLAG_FIELDS = _flag_fields()


def test_the_boolean_fields_are_found() -> None:
    assert ("memory::save", "pinned") in FLAG_FIELDS
    assert ("memory::list", "include_superseded") in FLAG_FIELDS
    assert len(FLAG_FIELDS) >= 9


@pytest.mark.parametrize("value", ["yes", "true", 1])
@pytest.mark.parametrize(("function_id", "field"), FLAG_FIELDS)
async def test_a_string_or_a_number_for_a_boolean_is_invalid_input(
    service: MemoryService, function_id: str, field: str, value: object
) -> None:
    """Seed 000 types these fields `boolean`: `pinned: "yes"` over a JSON door read as true
    (pydantic's lax mode), and `include_superseded: "no"` as false. Refused, naming the field;
    `pinned=true` from the command line is JSON's true (`test_cli`)."""
    with pytest.raises(InvalidInput, match=rf"(invalid_input: |; ){field}: "):
        await catalog.call(service, function_id, {field: value})
    assert service.store.names() == []


async def test_a_string_for_a_boolean_is_invalid_input_over_rest(server: StandaloneServer) -> None:
    answer = await _post(server, "/memory/save", '{"text": "The user likes tea", "pinned": "yes"}')
    assert (answer.status, answer.code) == (400, "invalid_input"), answer.body
    assert "pinned" in answer.json()["error"]["message"]
    assert server.service is not None and server.service.store.names() == []


async def test_a_string_for_an_imported_records_pinned_is_invalid_input(
    service: MemoryService,
) -> None:
    """An import record's `pinned` is the same flag: `"no"` read as false, `"yes"` as true."""
    records = [{"text": "The user likes tea", "pinned": "no"}]
    with pytest.raises(InvalidInput, match="pinned"):
        await catalog.call(service, "memory::import", {"bank": "main", "records": records})
    assert service.store.names() == []


def test_pinned_true_from_the_command_line_is_still_true(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    code = cli.main(["trigger", "memory::save", "text=The user likes tea", "pinned=true",
                     "--data-dir", data])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["memory"]["pinned"] is True
    code = cli.main(["trigger", "memory::list", "--json", '{"include_superseded": false}',
                     "--data-dir", data])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["total"] == 1


HUGE = '{"text": "The user likes tea", "weight": 1e400}'  # 1e400 decodes as infinity


async def test_a_number_past_a_floats_range_is_invalid_input_even_where_it_is_ignored(
    server: StandaloneServer,
) -> None:
    """Infinity has no JSON form, so no door can pass it on: accepted in-process, it was refused
    once forwarded; now every edge refuses it, whatever field it is in."""
    answer = await _post(server, "/memory/save", HUGE)
    assert (answer.status, answer.code) == (400, "invalid_input")
    assert server.service is not None and server.service.store.names() == []
    with pytest.raises(InvalidInput, match="inf"):
        await catalog.call(server.service, "memory::save", json.loads(HUGE))
    assert server.service.store.names() == []


def test_a_number_past_a_floats_range_in_trigger_json_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["trigger", "memory::save", "--json", HUGE,
                     "--data-dir", str(tmp_path / "data")])  # fmt: skip
    error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (code, error["code"]) == (1, "invalid_input")
    assert not (tmp_path / "data").exists()


def test_nan_in_trigger_json_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["trigger", "memory::save", "--json", '{"text": NaN}',
                     "--data-dir", str(tmp_path / "data")])  # fmt: skip
    error = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (code, error["code"]) == (1, "invalid_input")


@pytest.mark.parametrize(
    ("function_id", "payload"),
    [
        ("memory::save", {"text": "The user\x00 likes tea"}),
        ("memory::save", {"text": "The user likes tea", "tags": ["te\x00a"]}),
        ("memory::save", {"text": "The user likes tea", "entities": ["\x00"]}),
        ("memory::save", {"text": "The user likes tea", "session_id": "s\x001"}),
        ("memory::rule::set", {"name": "style", "content": "Be\x00 brief."}),
        ("memory::bank::create", {"name": "work", "description": "W\x00rk"}),
    ],
    ids=["text", "tags", "entities", "session_id", "rule", "description"],
)
async def test_a_nul_character_is_refused(
    service: MemoryService, function_id: str, payload: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput, match="NUL"):
        await catalog.call(service, function_id, payload)
    assert service.store.names() == []


async def test_a_nul_character_is_refused_in_an_update_and_an_import(
    service: MemoryService,
) -> None:
    saved = await catalog.call(service, "memory::save", {"text": "The user likes tea"})
    with pytest.raises(InvalidInput, match="NUL"):
        await catalog.call(
            service, "memory::update", {"id": saved["memory"]["id"], "text": "tea\x00 time"}
        )
    with pytest.raises(InvalidInput, match="NUL"):
        await service.import_records("main", [{"text": "The user\x00 likes coffee"}])
    listed = await catalog.call(service, "memory::list", {"include_superseded": True})
    assert [m["text"] for m in listed["memories"]] == ["The user likes tea"]


# --- state ---------------------------------------------------------------------------------


async def test_update_of_a_deleted_memory_is_refused_like_pin(service: MemoryService) -> None:
    saved = await catalog.call(service, "memory::save", {"text": "The user likes tea"})
    memory_id = saved["memory"]["id"]
    deleted = await catalog.call(service, "memory::delete", {"id": memory_id})
    for function_id, payload in (
        ("memory::update", {"id": memory_id, "text": "The user likes coffee"}),
        ("memory::update", {"id": memory_id, "tags": ["drinks"]}),
        ("memory::pin", {"id": memory_id, "pinned": True}),
    ):
        with pytest.raises(Conflict, match="retired"):
            await catalog.call(service, function_id, payload)
    got = await catalog.call(service, "memory::get", {"id": memory_id})
    assert got["memory"] == deleted["memory"]


async def test_two_concurrent_deletes_of_one_bank_one_wins_one_finds_no_bank(
    service: MemoryService,
) -> None:
    await catalog.call(service, "memory::bank::create", {"name": "work"})
    outcomes = await asyncio.gather(
        catalog.call(service, "memory::bank::delete", {"name": "work"}),
        catalog.call(service, "memory::bank::delete", {"name": "work"}),
        return_exceptions=True,
    )
    assert sum(isinstance(o, dict) and o["ok"] for o in outcomes) == 1
    assert sum(isinstance(o, BankNotFound) for o in outcomes) == 1
    assert service.store.durability.total == 0  # no false "power loss could undo it"
    doctor = await catalog.call(service, "memory::doctor", {})
    warnings = next(c for c in doctor["checks"] if c["name"] == "durability-warnings")
    assert warnings["ok"] is True


async def test_sixteen_concurrent_doctors_each_pass(service: MemoryService) -> None:
    """They ran in the same millisecond and picked the same scratch bank: 11 of 16 failed."""
    answers = await asyncio.gather(
        *(catalog.call(service, "memory::doctor", {}) for _ in range(16))
    )
    failed = [c["detail"] for a in answers for c in a["checks"] if c["required"] and not c["ok"]]
    assert failed == []
    assert service.store.names() == []  # every scratch bank removed


async def test_a_stale_rule_write_into_a_missing_bank_touches_no_file(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the campaign's fuzzer: the bank was made (a folder created and removed again)
    before the revision check refused the write."""
    made: list[str] = []
    real = Bank.create

    def create(name: str, *args: Any, **kwargs: Any) -> Bank:
        made.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(Bank, "create", create)
    payload = {"bank": "work", "name": "style", "content": "Be brief.", "expected_revision": "x"}
    with pytest.raises(Conflict, match="stale revision"):
        await catalog.call(service, "memory::rule::set", payload)
    assert made == []
    assert sorted(p.name for p in service.store.root.iterdir()) == [".lock"]
