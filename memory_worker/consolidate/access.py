"""An agent's use of `memory-consolidate::run|status`, held to its banks' `conscious_access` (C22).

The sibling reaches memories as the automatic `consolidate` caller, which the memory worker never
holds to an access level: without a check here an agent at `none` or `read` started a pass that
retires memories in the bank (supersede, the `learned` rule), and read every bank's last report,
texts of every subject included. So, as at the memory worker's own functions: a run needs
`read_write` on each bank it covers, a look at status `read` (the banks at `none` are left out).
A report of a subject-scoped bank keeps its counts but not its groups for an agent: they quote
memories about people other than the one the agent speaks with. People (the CLI, REST, the
console) and the schedule are not agents: nothing here applies to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_worker.consolidate.ports import MemoryClient
from memory_worker.consolidate.wire import BankReport
from memory_worker.core.errors import Forbidden

__all__ = ["AgentView", "agent_view"]

_RANK = {"none": 0, "read": 1, "read_write": 2}


@dataclass(frozen=True, slots=True)
class AgentView:
    """What an agent may do on each bank there is: its level, and whether it is scoped."""

    levels: dict[str, str]
    scoped: frozenset[str]

    def may(self, bank: str, need: str) -> bool:
        return _RANK.get(self.levels.get(bank, "none"), 0) >= _RANK[need]

    def check_write(self, banks: list[str]) -> None:
        """`forbidden` unless every bank of the pass lets agents write (the first that does not
        is named, with the same words the memory worker's own refusal uses)."""
        for bank in banks:
            if self.may(bank, "read_write"):
                continue
            if self.may(bank, "read"):
                raise Forbidden(
                    f"bank {bank} lets agents read only (conscious_access: read); "
                    "memory-consolidate::run changes memory and is refused"
                )
            raise Forbidden(
                f"bank {bank} gives agents no memory tools (conscious_access: none); "
                "memory-consolidate::run is refused — its memory works through the hook and "
                "extraction only"
            )

    def shown(self, report: BankReport) -> BankReport:
        """`report` as an agent may read it: a scoped bank's without its groups (their texts)."""
        if report.bank not in self.scoped or not report.groups:
            return report
        return report.model_copy(update={"groups": []})


async def agent_view(memory: MemoryClient) -> AgentView:
    """Every bank's level, from `memory::bank::list` (the effective settings: bank.yaml, else the
    configured default). A bank listed without settings (broken) gives agents nothing."""
    listed = await memory.call("memory::bank::list", {})
    levels: dict[str, str] = {}
    scoped: set[str] = set()
    for info in listed.get("banks", []):
        if not isinstance(info, dict) or not isinstance(info.get("name"), str):
            continue
        chosen = info.get("settings")
        chosen = chosen if isinstance(chosen, dict) else {}
        level = chosen.get("conscious_access")
        levels[info["name"]] = level if isinstance(level, str) and level in _RANK else "none"
        if chosen.get("subject_scoping") is True:
            scoped.add(info["name"])
    return AgentView(levels, frozenset(scoped))
