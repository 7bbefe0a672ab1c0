"""Rules: the always-injected markdown files of a bank, written atomically, removed when emptied."""

from __future__ import annotations

from memory_worker.app.base import ServiceBase
from memory_worker.app.caller import SYSTEM, Caller
from memory_worker.app.wire import (
    RuleListRequest,
    RuleListResponse,
    RuleSetRequest,
    RuleSetResponse,
)
from memory_worker.core import transitions
from memory_worker.core.errors import Conflict, InvalidInput
from memory_worker.core.models import BankEvent
from memory_worker.core.names import check_name
from memory_worker.core.redact import redact
from memory_worker.storage.logger import get_logger

__all__ = ["RuleUseCases"]

log = get_logger(__name__)

MAX_RULE_CONTENT_CHARS = 65_536  # rules are injected whole; a bigger file is a mistake


class RuleUseCases(ServiceBase):
    """Rule use cases."""

    async def rule_list(self, req: RuleListRequest, caller: Caller = SYSTEM) -> RuleListResponse:
        name = self._name(req.bank)
        bank = self._readable(name)
        return RuleListResponse(bank=name, rules=bank.rules() if bank is not None else [])

    async def rule_set(self, req: RuleSetRequest, caller: Caller = SYSTEM) -> RuleSetResponse:
        name = self._name(req.bank)
        rule = check_name(req.name, "rule name")
        existing = self.store.find(name)
        if existing is None or existing.rule(rule) is None:
            self._new_name(rule, "rule name")  # a new file name; an existing rule stays editable
        transitions.check_unicode(req.content, "content")
        if len(req.content) > MAX_RULE_CONTENT_CHARS:
            raise InvalidInput(f"content must be at most {MAX_RULE_CONTENT_CHARS} characters")
        redaction = redact(req.content)
        expected = req.expected_revision
        if not redaction.text.strip():
            bank = self.store.find(name)
            if bank is None:  # removing from a bank that does not exist creates nothing
                if expected:
                    raise Conflict(
                        f"stale revision: rule {rule} is absent (bank {name} does not exist), "
                        f"expected {expected}"
                    )
                return RuleSetResponse(ok=True, exists=False)
            # Whether it changed is decided under the rule's lock: of removals racing, one only.
            if await bank.set_rule(rule, "", expected_revision=expected):
                self._emit_bank(BankEvent.RULES_CHANGED, name)
            return RuleSetResponse(ok=True, exists=False)
        if expected and self.store.find(name) is None:  # decided before a bank is made for it
            raise Conflict(
                f"stale revision: rule {rule} is absent (bank {name} does not exist), "
                f"expected {expected}"
            )
        async with self._writing_into(name, caller) as bank:
            changed = await bank.set_rule(rule, redaction.text, expected_revision=expected)
        written = bank.rule(rule)
        if changed:  # the same text again (or racing another call's) changed nothing
            self._emit_bank(BankEvent.RULES_CHANGED, name)
        return RuleSetResponse(
            ok=True,
            exists=True,
            revision=written.revision if written is not None else None,
            redacted=list(redaction.labels),
        )
