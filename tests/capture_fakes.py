"""A scripted extraction model for capture tests (in-process and in the kill-test worker): each
user line `I like X in my garden` becomes the fact `The user likes X`, and a known memory about
the garden is restated whenever the user mentions it."""

from __future__ import annotations

import asyncio
import json
import re

__all__ = ["GARDEN", "DownModel", "ScriptedModel", "reply_for"]

GARDEN = "The user keeps a vegetable garden"
_LIKE = re.compile(r"user: I like (\w+)")


def reply_for(user_text: str) -> str:
    items: list[dict[str, object]] = [
        {"op": "add", "text": f"The user likes {fruit}", "entities": ["user"]}
        for fruit in _LIKE.findall(user_text)
    ]
    known = re.findall(r"^m(\d+): (.*)$", user_text, re.MULTILINE)
    garden = next((ref for ref, text in known if text.startswith(GARDEN)), None)
    if garden is not None and "garden" in user_text.split("NEW MESSAGES:", 1)[1]:
        items.append({"op": "restate", "ref": f"m{garden}"})
    return json.dumps({"memories": items})


class ScriptedModel:
    """A `Completer`: the reply above, every prompt it was asked kept; `fail` times out first."""

    def __init__(self, fail: int = 0, latency_s: float = 0.0) -> None:
        self.asked: list[str] = []
        self.fail = fail
        self.latency_s = latency_s

    async def complete(self, system_prompt: str, user_text: str) -> str:
        from memory_worker.core.errors import SiblingUnavailable

        self.asked.append(user_text)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)  # the model thinking (the worker's kill window)
        if self.fail > 0:
            self.fail -= 1
            raise SiblingUnavailable("extraction endpoint did not answer within 1000 ms")
        return reply_for(user_text)


class DownModel:
    """A `Completer` whose endpoint nobody answers on for its first `down` calls (counted in
    `asked`), then the scripted reply."""

    def __init__(self, down: int, retry_after_ms: int | None = None) -> None:
        self.down = down
        self.asked = 0
        self.retry_after_ms = retry_after_ms  # what the endpoint says to wait, if anything

    async def complete(self, system_prompt: str, user_text: str) -> str:
        from memory_worker.core.errors import SiblingDown

        self.asked += 1
        if self.asked <= self.down:
            if self.retry_after_ms is not None:
                raise SiblingDown(
                    "extraction endpoint http://127.0.0.1:9/v1 answered 429: slow down",
                    retry_after_ms=self.retry_after_ms,
                )
            raise SiblingDown("extraction endpoint http://127.0.0.1:9/v1 unreachable: ConnectError")
        return reply_for(user_text)
