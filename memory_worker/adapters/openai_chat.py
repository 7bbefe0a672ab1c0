"""Extraction through an OpenAI-compatible chat-completions endpoint (`extraction_endpoint`).

The `Completer` port over `POST <endpoint>/chat/completions`: a local llama.cpp or Ollama server
or a hosted API, with the same prompt, parser and write rules as `router::complete`. Invariants:
- The API key is read from the environment variable NAMED by `extraction_api_key_env` at each
  call and only ever placed in the request's `Authorization` header: never stored, never logged
  (an error body is redacted before it reaches a log line or an exception).
- JSON mode (`response_format: {"type": "json_object"}`) is asked for; an endpoint that refuses
  the field (400/422 naming it) is asked again without it, and remembered per endpoint. So are
  `max_tokens` (then sent as `max_completion_tokens`) and `temperature`, which OpenAI's
  reasoning models refuse.
- Every failure — connect, timeout (`extraction_timeout_ms`), an error status, a reply cut off
  by its token limit, no message — raises `SiblingUnavailable`, so the pass retries like a
  failed `router::complete`. Nothing listening, a gateway or rate limit answering for the
  model (502, 503, 504, 429), or a key or model refused (401, 403, 404), raises its
  `SiblingDown`: the same for any turn, so the capture queue pauses instead of spending the
  turn's attempts.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from memory_worker.adapters.own_servers import own_servers_only
from memory_worker.app.ports import Completer
from memory_worker.core.config import Settings
from memory_worker.core.errors import SiblingDown, SiblingUnavailable
from memory_worker.core.redact import redact
from memory_worker.storage.logger import get_logger

__all__ = ["MAX_OUTPUT_TOKENS", "EndpointOrRouter", "OpenAIChatCompleter"]

log = get_logger(__name__)

MAX_OUTPUT_TOKENS = 1024  # as router::complete: a pass writes at most a few short sentences
ERROR_SNIPPET_CHARS = 200  # how much of an error body a log line or exception carries
# The gateway or the server speaks, not the model, or the configuration is wrong (a key refused,
# a model or path unknown): the same answer for every turn, so the capture queue pauses until it
# changes rather than every queued turn spending its attempts and dying within minutes.
DOWN_STATUSES = frozenset({401, 403, 404, 429, 502, 503, 504})
_NOT_CHAT = re.compile(r"embed|rerank|whisper|tts|dall-e|moderation", re.I)


class OpenAIChatCompleter:
    """One chat completion per call against `settings().extraction_endpoint`."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        *,
        env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._env = os.environ if env is None else env
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        # endpoint -> the request fields it refused (`_refused_field`): asked without them since
        self._refused: dict[str, set[str]] = {}
        self._default_model: dict[str, str] = {}  # endpoint -> first model it lists
        self.calls = 0

    def __repr__(self) -> str:
        endpoint = self._settings().extraction_endpoint
        return f"OpenAIChatCompleter(endpoint={_shown(endpoint)!r}, calls={self.calls})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # Timeouts are per request (the setting hot-reloads); never read proxies or netrc
            # from the environment: the endpoint is exactly what the configuration says. A local
            # endpoint's port another account took (while llama.cpp restarts) is sent nothing:
            # not the key, not the person's turns, and its answer is no memory (`own_servers`).
            transport = self._transport if self._transport is not None else own_servers_only()
            self._client = httpx.AsyncClient(transport=transport, trust_env=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _headers(self, settings: Settings) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        name = settings.extraction_api_key_env
        key = self._env.get(name, "").strip() if name else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def _request(
        self, method: str, url: str, settings: Settings, body: dict[str, Any] | None = None
    ) -> httpx.Response:
        timeout = settings.extraction_timeout_ms / 1000
        try:
            # httpx's timeout bounds each read, not the exchange: an endpoint (or a proxy before
            # it) sending a blank now and then while the model is stuck would hold the pass
            # forever. The whole request is bounded too.
            async with asyncio.timeout(timeout):
                return await self._http().request(
                    method, url, json=body, headers=self._headers(settings), timeout=timeout
                )
        except (httpx.TimeoutException, TimeoutError):
            limit = settings.extraction_timeout_ms
            raise SiblingUnavailable(
                f"extraction endpoint {_shown(url)} did not answer within {limit} ms"
            ) from None
        except httpx.ConnectError as exc:  # refused, unresolved: nobody there for any turn
            raise SiblingDown(
                f"extraction endpoint {_shown(url)} unreachable: {type(exc).__name__}"
            ) from None
        except httpx.HTTPError as exc:
            raise SiblingUnavailable(
                f"extraction endpoint {_shown(url)} unreachable: {type(exc).__name__}"
            ) from None

    async def model(self) -> str:
        """The model id the next call asks for (the endpoint's first one when none is set)."""
        settings = self._settings()
        if not settings.extraction_endpoint:
            raise SiblingUnavailable("no extraction_endpoint is configured")
        return await self._model(settings.extraction_endpoint, settings)

    async def _model(self, endpoint: str, settings: Settings) -> str:
        if settings.extraction_model:
            return settings.extraction_model
        if endpoint not in self._default_model:
            response = await self._request("GET", f"{endpoint}/models", settings)
            body = _json_body(response, f"{endpoint}/models")
            data = body.get("data") if isinstance(body, dict) else None
            listed = [m.get("id") for m in data or [] if isinstance(m, dict)]
            ids: list[str] = [i for i in listed if isinstance(i, str) and i]
            # A model that cannot chat (an embedding model Ollama lists first when it was pulled
            # last, a speech or image one) answers every turn with an error: the first that can.
            chat = [i for i in ids if not _NOT_CHAT.search(i)]
            if not ids:
                raise SiblingUnavailable(f"{_shown(endpoint)}/models lists no model for extraction")
            self._default_model[endpoint] = (chat or ids)[0]
            log.info(
                "extraction_model_chosen",
                endpoint=_shown(endpoint),
                model=self._default_model[endpoint],
            )
        return self._default_model[endpoint]

    async def complete(self, system_prompt: str, user_text: str) -> str:
        settings = self._settings()
        endpoint = settings.extraction_endpoint
        if not endpoint:
            raise SiblingUnavailable("no extraction_endpoint is configured")
        url = f"{endpoint}/chat/completions"
        body: dict[str, Any] = {
            "model": await self._model(endpoint, settings),
            "messages": [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": user_text},
            ],
            "temperature": 0,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "stream": False,
        }
        body["response_format"] = {"type": "json_object"}
        refused = self._refused.setdefault(endpoint, set())
        _adjust(body, refused)
        self.calls += 1
        response = await self._request("POST", url, settings, body)
        # A field the endpoint refuses (400/422 naming it) is dropped or renamed and the call
        # made again, once per field; remembered for the endpoint.
        while (field := _refused_field(response, body)) is not None and field not in refused:
            refused.add(field)
            log.info(
                "extraction_field_refused",
                endpoint=_shown(endpoint),
                field=field,
                status=response.status_code,
            )
            _adjust(body, refused)
            response = await self._request("POST", url, settings, body)
        return _reply_text(_json_body(response, url), url)


def _shown(url: str) -> str:
    """The endpoint as a log line or an error names it: a password in the URL (basic auth to a
    proxy, `https://user:password@host/v1`) is redacted, as the key is never shown."""
    return redact(url).text


def _snippet(response: httpx.Response) -> str:
    text = " ".join(response.text.split())[:ERROR_SNIPPET_CHARS]
    return redact(text).text


# What a reasoning model's `max_completion_tokens` must hold: its thinking counts against it, and
# the output budget alone cut nearly every reply off.
MAX_COMPLETION_TOKENS = 4 * MAX_OUTPUT_TOKENS


def _refused_field(response: httpx.Response, body: dict[str, Any]) -> str | None:
    """The field of `body` a 400/422 `response` refuses, if any: `response_format` named, or
    `max_tokens` / `temperature` named as unsupported (a `max_tokens` too large for a small
    context is the turn's own failure, not a reason to ask every later turn for more)."""
    if response.status_code not in (400, 422):
        return None
    text = response.text
    lowered = text.lower()
    unsupported = "unsupported" in lowered or "not support" in lowered
    if "response_format" in body and "response_format" in text:
        return "response_format"
    if "max_tokens" in body and "max_tokens" in text and "max_completion_tokens" in text:
        return "max_tokens"
    if "temperature" in body and "temperature" in text and unsupported:
        return "temperature"
    return None


def _adjust(body: dict[str, Any], refused: set[str]) -> None:
    """`body` without the fields the endpoint refused (`max_tokens` becomes
    `max_completion_tokens`, the name reasoning models take)."""
    for field in refused:
        value = body.pop(field, None)
        if field == "max_tokens" and value is not None:
            body["max_completion_tokens"] = MAX_COMPLETION_TOKENS


def _json_body(response: httpx.Response, url: str) -> Any:
    if response.status_code >= 400:
        message = (
            f"extraction endpoint {_shown(url)} answered {response.status_code}: "
            f"{_snippet(response)}"
        )
        if response.status_code in DOWN_STATUSES:
            raise SiblingDown(message, retry_after_ms=_retry_after_ms(response))
        raise SiblingUnavailable(message)
    try:
        return response.json()
    except ValueError:
        raise SiblingUnavailable(
            f"extraction endpoint {_shown(url)} answered {response.status_code} with no JSON: "
            f"{_snippet(response)}"
        ) from None


def _retry_after_ms(response: httpx.Response) -> int | None:
    """`Retry-After` (seconds, or an HTTP date) in ms; None when absent or unreadable."""
    raw = response.headers.get("retry-after", "").strip()
    if raw.isdigit():
        return int(raw) * 1000
    try:
        at = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:  # an HTTP date is GMT, and one written without a zone is read so
        at = at.replace(tzinfo=UTC)
    return max(int((at - datetime.now(UTC)).total_seconds() * 1000), 0)


def _reply_text(body: Any, url: str) -> str:
    choices = body.get("choices") if isinstance(body, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        raise SiblingUnavailable(f"extraction endpoint {_shown(url)} answered without a message")
    if choice.get("finish_reason") == "length":  # cut off: retry, never half-read it
        raise SiblingUnavailable(
            f"extraction endpoint {_shown(url)} cut the reply off at its token limit"
        )
    content = message.get("content")
    if isinstance(content, list):  # some servers answer content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if not isinstance(content, str):
        raise SiblingUnavailable(
            f"extraction endpoint {_shown(url)} answered a message with no text"
        )
    return content


class EndpointOrRouter:
    """The extraction completer the worker holds: the OpenAI-compatible endpoint while
    `extraction_endpoint` is set, else `fallback` (`router::complete`); chosen per call, so a
    configuration change applies from the next pass."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        fallback: Completer,
        endpoint: OpenAIChatCompleter | None = None,
    ) -> None:
        self._settings = settings
        self._fallback = fallback
        self.endpoint = endpoint or OpenAIChatCompleter(settings)

    async def complete(self, system_prompt: str, user_text: str) -> str:
        chosen: Completer = (
            self.endpoint if self._settings().extraction_endpoint else self._fallback
        )
        return await chosen.complete(system_prompt, user_text)

    async def aclose(self) -> None:
        await self.endpoint.aclose()
