"""The OpenAI-compatible extraction client against a fake endpoint over real HTTP: the request it
sends, JSON mode and its fallback, the model choice, the API key (sent, never logged or raised),
every failure as `sibling_unavailable`, and a whole extraction pass through it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from typing import Any

import pytest
from structlog.testing import capture_logs

from memory_worker.adapters.openai_chat import EndpointOrRouter, OpenAIChatCompleter
from memory_worker.app.seams import ExtractJob
from memory_worker.app.service import MemoryService
from memory_worker.app.wire import ListRequest
from memory_worker.core.config import Settings, parse_settings
from memory_worker.core.errors import InvalidInput, SiblingDown, SiblingUnavailable
from memory_worker.harness.extractor import CURSOR_SCOPE, Extractor

from .fakes import FakeKeyValue
from .openai_server import FakeOpenAI
from .other_accounts import (
    as_root_on_linux,
    listening_as_another_account,
    skip_unless_accounts_are_told,
)
from .secret_corpus import OPENAI_PROJECT

KEY_ENV = "TEST_EXTRACTION_KEY"
T0 = 1_772_445_600_000  # 2026-03-02 10:00 UTC


class Settable:
    """A settings source a test can change between calls (hot reload)."""

    def __init__(self, **fields: Any) -> None:
        self.value = Settings(**fields)

    def __call__(self) -> Settings:
        return self.value

    def set(self, **fields: Any) -> None:
        self.value = self.value.model_copy(update=fields)


def client_for(
    server: FakeOpenAI, env: dict[str, str] | None = None, **fields: Any
) -> tuple[OpenAIChatCompleter, Settable]:
    settings = Settable(extraction_endpoint=server.url, extraction_api_key_env=KEY_ENV, **fields)
    return OpenAIChatCompleter(settings, env=env or {}), settings


async def test_a_reply_comes_back_and_the_request_is_openai_shaped() -> None:
    async with FakeOpenAI() as server:
        server.reply('{"memories": [], "rules": ["Answer in Portuguese."]}')
        client, _ = client_for(server, {KEY_ENV: "local-key-123"}, extraction_model="qwen")
        try:
            text = await client.complete("SYSTEM", "USER TEXT")
        finally:
            await client.aclose()
    assert text == '{"memories": [], "rules": ["Answer in Portuguese."]}'
    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["Authorization"] == "Bearer local-key-123"
    assert seen.body["model"] == "qwen"
    assert seen.body["messages"] == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": "USER TEXT"},
    ]
    assert seen.body["response_format"] == {"type": "json_object"}
    assert seen.body["temperature"] == 0 and seen.body["stream"] is False
    assert seen.body["max_tokens"] > 0


async def test_without_a_model_setting_the_endpoints_first_model_is_asked_once() -> None:
    async with FakeOpenAI(models=("first-model", "second-model")) as server:
        client, _ = client_for(server)
        try:
            await client.complete("S", "U")
            await client.complete("S", "U")
        finally:
            await client.aclose()
    assert [s.path for s in server.seen] == [
        "/v1/models",
        "/v1/chat/completions",
        "/v1/chat/completions",
    ]
    assert {s.body["model"] for s in server.chats} == {"first-model"}


async def test_without_a_model_setting_an_embedding_model_listed_first_is_passed_over() -> None:
    """Ollama lists every pulled model, an embedding model first when it was pulled last: asked
    to chat, it answers 400 on every turn, and every queued turn died."""
    async with FakeOpenAI(models=("nomic-embed-text:latest", "qwen2.5:7b-instruct")) as server:
        client, _ = client_for(server)
        try:
            await client.complete("S", "U")
        finally:
            await client.aclose()
    assert [s.body["model"] for s in server.chats] == ["qwen2.5:7b-instruct"]


async def test_no_key_in_the_environment_sends_no_authorization() -> None:
    async with FakeOpenAI() as server:
        client, _ = client_for(server, {"SOME_OTHER_VAR": "x"})
        try:
            await client.complete("S", "U")
        finally:
            await client.aclose()
    assert "Authorization" not in server.chats[0].headers


async def test_the_key_is_sent_but_never_logged_nor_raised() -> None:
    """An endpoint that echoes the key in its error body: the exception and the logs carry
    the redaction marker, never the key."""
    async with FakeOpenAI() as server:
        server.fail(401, json.dumps({"error": f"invalid api key {OPENAI_PROJECT}"}))
        client, _ = client_for(server, {KEY_ENV: OPENAI_PROJECT})
        try:
            with capture_logs() as logs, pytest.raises(SiblingUnavailable) as raised:
                await client.complete("S", "U")
        finally:
            await client.aclose()
    assert server.chats[0].headers["Authorization"] == f"Bearer {OPENAI_PROJECT}"
    assert "401" in str(raised.value) and "[REDACTED:" in str(raised.value)
    assert OPENAI_PROJECT not in str(raised.value)
    assert OPENAI_PROJECT not in repr(client)
    assert OPENAI_PROJECT not in json.dumps(logs, default=str)


async def test_an_endpoint_without_json_mode_is_asked_again_without_it_and_remembered() -> None:
    async with FakeOpenAI() as server:
        server.refuse_json_mode()
        server.reply('{"memories": []}')
        server.reply('{"memories": [], "rules": []}')
        client, _ = client_for(server, extraction_model="m")
        try:
            first = await client.complete("S", "U")
            second = await client.complete("S", "U")
        finally:
            await client.aclose()
    assert (first, second) == ('{"memories": []}', '{"memories": [], "rules": []}')
    asked = ["response_format" in s.body for s in server.chats]
    assert asked == [True, False, False]  # refused once, then never asked again


async def test_a_reasoning_model_refusing_max_tokens_and_temperature_is_asked_as_it_wants() -> None:
    """OpenAI's reasoning models (o-series, gpt-5) answer 400 to `max_tokens` and to a
    temperature other than 1: every capture turn failed until it died. The request is made
    again as the error names, and that is remembered for the endpoint."""
    async with FakeOpenAI() as server:
        server.reasoning_model()
        server.reply('{"memories": []}')
        server.reply('{"memories": [], "rules": []}')
        client, _ = client_for(server, extraction_model="o4-mini")
        try:
            first = await client.complete("S", "U")
            second = await client.complete("S", "U")
        finally:
            await client.aclose()
    assert (first, second) == ('{"memories": []}', '{"memories": [], "rules": []}')
    last = server.chats[-1].body
    assert "max_tokens" not in last and "temperature" not in last
    assert last["max_completion_tokens"] >= 1024 and last["response_format"]
    assert len(server.chats) == 4  # refused twice, then asked right at once


async def test_a_max_tokens_too_large_for_the_context_is_the_turns_failure_only() -> None:
    async with FakeOpenAI() as server:
        too_large = "max_tokens (1024) plus the prompt exceed the context size (2048 tokens)"
        server.fail(400, json.dumps({"error": {"message": too_large}}))
        client, _ = client_for(server, extraction_model="m")
        try:
            with pytest.raises(SiblingUnavailable, match="answered 400"):
                await client.complete("S", "U")
            await client.complete("S", "U")
        finally:
            await client.aclose()
    assert [("max_tokens" in s.body, "temperature" in s.body) for s in server.chats] == [
        (True, True),
        (True, True),
    ]


async def test_a_hanging_endpoint_times_out_as_sibling_unavailable() -> None:
    async with FakeOpenAI() as server:
        server.hang()
        client, _ = client_for(server, extraction_model="m", extraction_timeout_ms=1000)
        try:
            with pytest.raises(SiblingUnavailable, match="within 1000 ms"):
                await client.complete("S", "U")
        finally:
            await client.aclose()


async def test_an_endpoint_that_trickles_bytes_still_times_out_within_the_setting() -> None:
    """The timeout is the whole call's, not one read's: an endpoint (or a proxy before it) that
    sends a byte now and then while the model is stuck kept a capture pass waiting forever."""
    async with FakeOpenAI() as server:
        server.trickle()
        client, _ = client_for(server, extraction_model="m", extraction_timeout_ms=1000)
        try:
            async with asyncio.timeout(15):  # the bug's hang, bounded for the suite
                with pytest.raises(SiblingUnavailable, match="within 1000 ms"):
                    await client.complete("S", "U")
        finally:
            await client.aclose()


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (lambda s: s.fail(500, '{"error": "overloaded"}'), "answered 500"),
        (lambda s: s.fail(200, "<html>proxy page</html>"), "no JSON"),
        (lambda s: s.fail(200, '{"choices": []}'), "without a message"),
        (lambda s: s.fail(200, '{"choices": [{"message": {"content": null}}]}'), "no text"),
        (lambda s: s.cut_off('{"memories": [{"op": "add", "te'), "token limit"),
    ],
)
async def test_every_failed_answer_is_sibling_unavailable(script: Any, message: str) -> None:
    async with FakeOpenAI() as server:
        script(server)
        client, _ = client_for(server, extraction_model="m")
        try:
            with pytest.raises(SiblingUnavailable, match=message):
                await client.complete("S", "U")
        finally:
            await client.aclose()


async def test_an_unreachable_endpoint_is_down_not_a_failure_of_the_turn() -> None:
    async with FakeOpenAI() as server:
        url = server.url
    client = OpenAIChatCompleter(lambda: Settings(extraction_endpoint=url, extraction_model="m"))
    try:
        with pytest.raises(SiblingDown, match="unreachable"):
            await client.complete("S", "U")
    finally:
        await client.aclose()


@as_root_on_linux
async def test_a_local_endpoints_port_another_account_took_is_sent_nothing() -> None:
    """A local endpoint (llama.cpp, Ollama on 127.0.0.1) restarting lets any account take its
    port: its program was sent the API key and the person's turns, and its answer was written
    into their bank as memories. The connection is refused before anything is sent, and the
    endpoint is down (the queue waits) as when nothing listens there."""
    skip_unless_accounts_are_told()
    pid, port, pipe = listening_as_another_account()
    key = "sk-local-" + "k" * 24
    settings = Settings(
        extraction_endpoint=f"http://127.0.0.1:{port}/v1",
        extraction_model="m",
        extraction_api_key_env=KEY_ENV,
    )
    client = OpenAIChatCompleter(lambda: settings, env={KEY_ENV: key})
    try:
        with pytest.raises(SiblingDown, match="unreachable"):
            await client.complete("S", "my bank PIN is 4321")
    finally:
        await client.aclose()
        # The child accepts one connection, then stops listening: this one ends it when the
        # client's was closed unsent (refused when the client's was served).
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            pass
        with os.fdopen(pipe, "rb") as reports:
            received = await asyncio.to_thread(reports.read)
        await asyncio.to_thread(os.waitpid, pid, 0)
    assert received == b""  # not the key, not the turn


@pytest.mark.parametrize(
    ("status", "down"),
    [
        (502, True),
        (503, True),
        (504, True),
        (429, True),
        (401, True),
        (403, True),
        (404, True),
        (500, False),
        (400, False),
    ],
)
async def test_a_gateway_or_busy_status_is_down_and_another_error_is_the_turns(
    status: int, down: bool
) -> None:
    """A proxy answering 502/503/504 for a stopped model, or a rate limit, says the same for any
    turn, and so does a key refused (401/403) or a model or path the endpoint does not know
    (404): the capture queue pauses until someone fixes it, instead of every queued turn
    spending its attempts and dying within minutes. A 500 or a 400 may be this turn's own (a
    prompt too long), so it spends an attempt."""
    async with FakeOpenAI() as server:
        server.fail(status, '{"error": "nope"}')
        client, _ = client_for(server, extraction_model="m")
        try:
            with pytest.raises(SiblingUnavailable, match=f"answered {status}") as raised:
                await client.complete("S", "U")
            assert isinstance(raised.value, SiblingDown) is down
        finally:
            await client.aclose()


async def test_a_rate_limits_retry_after_is_carried_with_the_failure() -> None:
    """A 429 (or 503) saying when to come back: the capture queue asked again after its own
    first delay (5 s, then 10 s, …), each early question another request against the limit."""
    async with FakeOpenAI() as server:
        server.fail(429, '{"error": "slow down"}', headers={"Retry-After": "120"})
        server.fail(503, '{"error": "busy"}', headers={"Retry-After": "soon"})
        past = "Wed, 21 Oct 2015 07:28:00 GMT"  # an HTTP date gone by: ask again now
        server.fail(429, '{"error": "slow down"}', headers={"Retry-After": past})
        client, _ = client_for(server, extraction_model="m")
        try:
            with pytest.raises(SiblingDown) as raised:
                await client.complete("S", "U")
            assert raised.value.retry_after_ms == 120_000
            with pytest.raises(SiblingDown) as raised:
                await client.complete("S", "U")
            assert raised.value.retry_after_ms is None  # unreadable: the queue's own delay
            with pytest.raises(SiblingDown) as raised:
                await client.complete("S", "U")
            assert raised.value.retry_after_ms == 0
        finally:
            await client.aclose()


async def test_a_password_in_the_endpoint_url_is_never_logged_nor_raised() -> None:
    """An endpoint behind basic auth (`https://user:password@host/v1`): the failure a capture
    pass keeps in `.capture.jsonl` and logs names the endpoint with the password redacted."""
    password = "Sup3r-s3cret-pw"
    async with FakeOpenAI(models=("m",)) as server:
        url = server.url.replace("://", f"://alice:{password}@", 1)
    client = OpenAIChatCompleter(lambda: Settings(extraction_endpoint=url))
    try:
        with capture_logs() as logs, pytest.raises(SiblingUnavailable) as raised:
            await client.complete("S", "U")
    finally:
        await client.aclose()
    assert "unreachable" in str(raised.value) and "[REDACTED:" in str(raised.value)
    assert password not in str(raised.value)
    assert password not in repr(client)
    assert password not in json.dumps(logs, default=str)


async def test_no_endpoint_configured_is_sibling_unavailable() -> None:
    client = OpenAIChatCompleter(Settings)
    with pytest.raises(SiblingUnavailable, match="no extraction_endpoint"):
        await client.complete("S", "U")


class Router:
    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, system_prompt: str, user_text: str) -> str:
        self.calls += 1
        return '{"memories": [], "rules": []}'


async def test_the_endpoint_is_chosen_per_call_from_the_settings() -> None:
    async with FakeOpenAI() as server:
        router = Router()
        settings = Settable(extraction_model="m")
        chooser = EndpointOrRouter(settings, router)
        try:
            await chooser.complete("S", "U")
            settings.set(extraction_endpoint=server.url)
            await chooser.complete("S", "U")
            settings.set(extraction_endpoint="")
            await chooser.complete("S", "U")
        finally:
            await chooser.aclose()
    assert router.calls == 2 and len(server.chats) == 1


class Transcript:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def say(self, role: str, text: str) -> None:
        message = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": T0}
        self.items.append({"entry_id": f"e{len(self.items) + 1}", "message": message})

    async def page(
        self, session_id: str, cursor: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        return list(self.items), None


async def test_an_extraction_pass_through_the_endpoint_writes_and_retries(
    service: MemoryService,
) -> None:
    """The real pass: the turn reaches the endpoint redacted, the reply lands as a memory; a
    failing endpoint leaves the cursor where it was, so the retry reads the turn again."""
    chat, kv = Transcript(), FakeKeyValue()
    chat.say("user", f"I live in Porto now. My token is {OPENAI_PROJECT}, keep it safe.")
    chat.say("assistant", "Noted, Porto it is.")
    async with FakeOpenAI() as server:
        service.settings = service.settings.model_copy(
            update={"extraction_endpoint": server.url, "extraction_model": "m"}
        )
        client = OpenAIChatCompleter(lambda: service.settings)
        extractor = Extractor(service, chat, client, kv)
        job = ExtractJob(session_id="s1")
        server.fail(503, '{"error": "loading model"}')
        server.reply(
            json.dumps(
                {
                    "memories": [
                        {"op": "add", "text": "The user lives in Porto.", "entities": ["porto"]}
                    ],
                    "rules": [],
                }
            )
        )
        try:
            with pytest.raises(SiblingUnavailable, match="503"):
                await extractor.extract(job, "main")
            assert await kv.get(CURSOR_SCOPE, "s1") is None
            written = await extractor.extract(job, "main")
        finally:
            await client.aclose()
    assert written == 1
    sent = server.chats[-1].body["messages"]
    assert "I live in Porto now" in sent[1]["content"]
    assert OPENAI_PROJECT not in json.dumps(server.chats[0].body)
    assert "[REDACTED:" in sent[1]["content"]
    listed = await service.list_memories(ListRequest(bank="main"))
    [memory] = listed.memories
    assert memory.text == "The user lives in Porto." and "user" in memory.entities
    assert (await kv.get(CURSOR_SCOPE, "s1")) == {"last_entry_id": "e2"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extraction_endpoint": "127.0.0.1:8088"}, "extraction_endpoint"),
        ({"extraction_endpoint": "ftp://host/v1"}, "extraction_endpoint"),
        ({"extraction_api_key_env": OPENAI_PROJECT}, "extraction_api_key_env"),
        ({"extraction_api_key_env": "MY KEY"}, "extraction_api_key_env"),
        ({"extraction_prompt": "extraction-v9"}, "extraction_prompt"),
    ],
)
def test_bad_endpoint_settings_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_settings(fields)


def test_the_endpoint_setting_is_normalised() -> None:
    settings = parse_settings({"extraction_endpoint": " http://127.0.0.1:8088/v1/ "})
    assert settings.extraction_endpoint == "http://127.0.0.1:8088/v1"
