"""A fake OpenAI-compatible chat-completions server on loopback, for the endpoint client's tests.

Real HTTP (aiohttp on 127.0.0.1, an ephemeral port), scripted replies and failure modes; every
request is recorded (path, headers, JSON body). `async with FakeOpenAI() as server:` starts it and
always stops it. Modes for the next chat calls: `reply(text)`, `fail(status, body)`,
`hang()` (never answers until the server stops), `trickle()` (starts a 200 answer and sends one
blank every 50 ms until the server stops, as a proxy keeping a stalled request alive does),
`cut_off(text)` (finish_reason `length`),
`refuse_json_mode()` (400 naming `response_format`, as an endpoint without JSON mode does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["FakeOpenAI", "Seen"]

TRICKLE_EVERY_S = 0.05


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeOpenAI:
    def __init__(self, models: tuple[str, ...] = ("local-model",)) -> None:
        self.models = models
        self.seen: list[Seen] = []
        self.script: deque[tuple[str, Any]] = deque()
        self.default = '{"memories": [], "rules": []}'
        self.json_mode = True  # False: refuse `response_format` like an older server
        self.reasoning = False  # True: refuse `max_tokens` and `temperature: 0` like o-series
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ---------------------------------------------------------------------------

    def reply(self, text: str) -> None:
        self.script.append(("reply", text))

    def fail(
        self,
        status: int,
        body: str = '{"error": {"message": "boom"}}',
        headers: dict[str, str] | None = None,
    ) -> None:
        self.script.append(("fail", (status, body, headers)))

    def hang(self) -> None:
        self.script.append(("hang", None))

    def trickle(self) -> None:
        self.script.append(("trickle", None))

    def cut_off(self, text: str) -> None:
        self.script.append(("length", text))

    def refuse_json_mode(self) -> None:
        self.json_mode = False

    def reasoning_model(self) -> None:
        """Answer as OpenAI does for its reasoning models (o-series, gpt-5)."""
        self.reasoning = True

    @property
    def chats(self) -> list[Seen]:
        return [s for s in self.seen if s.path.endswith("/chat/completions")]

    # --- the server --------------------------------------------------------------------------

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()  # releases hanging handlers
        if self._runner is not None:
            await self._runner.cleanup()

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.seen.append(Seen(request.method, request.path, dict(request.headers), body))
        return body

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        data = [{"id": m, "object": "model", "owned_by": "test"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not self.json_mode and "response_format" in body:
            message = "Unrecognized request argument supplied: response_format"
            return web.json_response({"error": {"message": message}}, status=400)
        if self.reasoning and "max_tokens" in body:
            message = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            error = {"message": message, "param": "max_tokens", "code": "unsupported_parameter"}
            return web.json_response({"error": error}, status=400)
        if self.reasoning and body.get("temperature", 1) != 1:
            message = (
                "Unsupported value: 'temperature' does not support 0 with this model. "
                "Only the default (1) value is supported."
            )
            error = {"message": message, "param": "temperature", "code": "unsupported_value"}
            return web.json_response({"error": error}, status=400)
        kind, value = self.script.popleft() if self.script else ("reply", self.default)
        if kind == "fail":
            status, text, headers = value
            return web.Response(
                status=status, text=text, content_type="application/json", headers=headers
            )
        if kind == "hang":
            await self._stop.wait()
            return web.json_response({"error": "stopped"}, status=503)
        if kind == "trickle":
            stream = web.StreamResponse(headers={"Content-Type": "application/json"})
            await stream.prepare(request)
            while not self._stop.is_set():
                await stream.write(b" ")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), TRICKLE_EVERY_S)
            return stream
        finish = "length" if kind == "length" else "stop"
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.seen)}",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": value},
                        "finish_reason": finish,
                    }
                ],
            }
        )
