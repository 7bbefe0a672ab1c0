"""A reference model of acknowledged operations over a whole data dir, shared by the fast suite and
the campaign (`bench/reliability.py`).

The model holds what a restarted writer must find: every bank with its description, rules and
memories (history included), and how many times each bank name went to `.trash`. A random operation
is always valid against the model, so every one must succeed. After a SIGKILL the state found must
be the acknowledged one plus a prefix of the operations that were in flight, each applied whole.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memory_worker.core.text import fingerprint

__all__ = [
    "BANK_POOL",
    "BankModel",
    "Op",
    "Rec",
    "World",
    "diff",
    "import_op",
    "next_op",
    "observe",
    "outcomes",
    "trash_counts",
]

BANK_POOL = ("main", "work", "notes", "ops-log", "blog")
RULE_POOL = ("style", "tone", "facts")
MAX_BANKS = 4
LIST_PAGE = 500


@dataclass(frozen=True)
class Rec:
    """What the model tracks of one memory id."""

    text: str
    live: bool = True
    pinned: bool = False
    superseded_by: str | None = None
    corroboration: int = 0


@dataclass(frozen=True)
class BankModel:
    description: str = ""
    rules: dict[str, str] = field(default_factory=dict)
    memories: dict[str, Rec] = field(default_factory=dict)


@dataclass(frozen=True)
class World:
    banks: dict[str, BankModel] = field(default_factory=dict)
    trashed: dict[str, int] = field(default_factory=dict)  # bank name → folders in .trash


@dataclass(frozen=True)
class Op:
    kind: str
    function_id: str
    payload: dict[str, Any]
    effect: Callable[[World], World]
    saves: str | None = None  # the id a save must answer with

    def apply(self, world: World) -> World:
        return self.effect(world)


# --- effects -----------------------------------------------------------------------------------


def _with_bank(world: World, name: str, bank: BankModel) -> World:
    return replace(world, banks={**world.banks, name: bank})


def _set_memory(world: World, bank: str, memory_id: str, **changes: Any) -> World:
    model = world.banks[bank]
    memories = {**model.memories, memory_id: replace(model.memories[memory_id], **changes)}
    return _with_bank(world, bank, replace(model, memories=memories))


def _changer(bank: str, memory_id: str, **changes: Any) -> Callable[[World], World]:
    return lambda world: _set_memory(world, bank, memory_id, **changes)


# --- operations --------------------------------------------------------------------------------


def _save_new(bank: str, text: str, pinned: bool) -> Op:
    memory_id = fingerprint(text)

    def effect(world: World) -> World:
        model = world.banks[bank]
        memories = {**model.memories, memory_id: Rec(text, pinned=pinned)}
        return _with_bank(world, bank, replace(model, memories=memories))

    payload = {"bank": bank, "text": text, "pinned": pinned}
    return Op("save", "memory::save", payload, effect, saves=memory_id)


def _resave(bank: str, memory_id: str, rec: Rec) -> Op:
    """The same text again (other case): reinforced when live, brought back when retired."""

    def effect(world: World) -> World:
        current = world.banks[bank].memories[memory_id]
        return _set_memory(
            world,
            bank,
            memory_id,
            live=True,
            superseded_by=None,
            corroboration=current.corroboration + 1,
        )

    payload = {"bank": bank, "text": rec.text.upper()}
    return Op("resave", "memory::save", payload, effect, saves=memory_id)


def _supersede(bank: str, target: str, winner: str, reinforce: bool) -> Op:
    def effect(world: World) -> World:
        memories = world.banks[bank].memories
        gained = memories[winner].corroboration + memories[target].corroboration + 1
        world = _set_memory(world, bank, target, live=False, superseded_by=winner)
        if reinforce and not memories[winner].pinned:
            world = _set_memory(world, bank, winner, corroboration=gained)
        return world

    payload = {"bank": bank, "id": target, "superseded_by": winner, "reinforce": reinforce}
    return Op("supersede", "memory::supersede", payload, effect)


def _rule_set(bank: str, name: str, content: str) -> Op:
    def effect(world: World) -> World:
        model = world.banks[bank]
        rules = {**model.rules, name: content}
        if not content:
            rules.pop(name)
        return _with_bank(world, bank, replace(model, rules=rules))

    kind = "rule-set" if content else "rule-remove"
    payload = {"bank": bank, "name": name, "content": content}
    return Op(kind, "memory::rule::set", payload, effect)


def _bank_create(name: str, description: str) -> Op:
    def effect(world: World) -> World:
        return _with_bank(world, name, BankModel(description=description))

    payload = {"name": name, "description": description}
    return Op("bank-create", "memory::bank::create", payload, effect)


def _bank_delete(name: str) -> Op:
    def effect(world: World) -> World:
        banks = {k: v for k, v in world.banks.items() if k != name}
        trashed = {**world.trashed, name: world.trashed.get(name, 0) + 1}
        return World(banks, trashed)

    return Op("bank-delete", "memory::bank::delete", {"name": name}, effect)


def next_op(  # noqa: C901 - one branch per kind of operation
    rng: random.Random, world: World, numbers: Iterator[int], *, descriptions: bool = True
) -> Op:
    """A random operation valid against `world` (every one must succeed). Without `descriptions`
    new banks get none: a create cut short then looks the same whether or not it wrote one."""
    banks = sorted(world.banks)
    free = [name for name in BANK_POOL if name not in world.banks]
    if not banks:
        name = rng.choice(free)
        return _bank_create(name, f"Bank {next(numbers)} for {name}" if descriptions else "")
    bank = rng.choice(banks)
    memories = world.banks[bank].memories
    live = sorted(i for i, rec in memories.items() if rec.live)
    supersedable = [i for i in live if not memories[i].pinned]
    weighted = {"save": 8, "rule-set": 2}
    if memories:
        weighted["resave"] = 2
    if live:
        weighted.update(update=3, delete=2, pin=3)
    if supersedable and len(live) > 1:
        weighted["supersede"] = 4
    if world.banks[bank].rules:
        weighted["rule-remove"] = 1
    if free and len(banks) < MAX_BANKS:
        weighted["bank-create"] = 1
    if len(banks) > 1:
        weighted["bank-delete"] = 1
    kinds = list(weighted)
    kind = rng.choices(kinds, weights=[weighted[k] for k in kinds])[0]
    number = next(numbers)
    if kind == "save":
        text = f"Fact {number} in {bank}: the user keeps note {rng.random():.6f}"
        return _save_new(bank, text, pinned=rng.random() < 0.2)
    if kind == "resave":
        memory_id = rng.choice(sorted(memories))
        return _resave(bank, memory_id, memories[memory_id])
    if kind == "supersede":
        target = rng.choice(supersedable)
        winner = rng.choice([i for i in live if i != target])
        return _supersede(bank, target, winner, reinforce=rng.random() < 0.6)
    if kind == "rule-set":
        content = f"# Rule {number}\n\nAnswer in {rng.choice(('English', 'Portuguese'))}.\n"
        return _rule_set(bank, rng.choice(RULE_POOL), content)
    if kind == "rule-remove":
        return _rule_set(bank, rng.choice(sorted(world.banks[bank].rules)), "")
    if kind == "bank-create":
        name = rng.choice(free)
        return _bank_create(name, f"Bank {number} for {name}" if descriptions else "")
    if kind == "bank-delete":
        return _bank_delete(bank)
    memory_id = rng.choice(live)
    if kind == "update":
        text = f"Fact {number} in {bank}: revised note {rng.random():.6f}"
        payload: dict[str, Any] = {"bank": bank, "id": memory_id, "text": text}
        return Op("update", "memory::update", payload, _changer(bank, memory_id, text=text))
    if kind == "delete":
        payload = {"bank": bank, "id": memory_id}
        return Op("delete", "memory::delete", payload, _changer(bank, memory_id, live=False))
    pinned = not memories[memory_id].pinned
    payload = {"bank": bank, "id": memory_id, "pinned": pinned}
    return Op("pin", "memory::pin", payload, _changer(bank, memory_id, pinned=pinned))


def import_op(
    rng: random.Random, world: World, numbers: Iterator[int], bank: str, count: int
) -> tuple[list[dict[str, Any]], Callable[[World], World]]:
    """Rows for `memory-worker import` into the existing `bank` (some retired, some pinned,
    some corroborated) and the effect of importing all of them."""
    rows: list[dict[str, Any]] = []
    added: dict[str, Rec] = {}
    for _ in range(count):
        number = next(numbers)
        text = f"Imported fact {number} for {bank}: the user noted {rng.random():.6f}"
        row: dict[str, Any] = {
            "text": text,
            "tags": ["imported"],
            "corroboration": rng.randint(0, 3),
            "pinned": rng.random() < 0.1,
            "created_at": 1_700_000_000_000 + number,
        }
        retired = rng.random() < 0.2
        if retired:
            row["invalid_at"] = row["created_at"] + 1
        rows.append(row)
        added[fingerprint(text)] = Rec(
            text, live=not retired, pinned=row["pinned"], corroboration=row["corroboration"]
        )

    def effect(world: World) -> World:
        model = world.banks[bank]
        return _with_bank(world, bank, replace(model, memories={**model.memories, **added}))

    return rows, effect


# --- what a process finds ----------------------------------------------------------------------

_TRASHED = re.compile(r"^(?P<name>.+)-\d{13}(?:-\d+)?$")


def trash_counts(data_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        entries = os.listdir(data_dir / ".trash")
    except FileNotFoundError:
        return counts
    for entry in entries:
        match = _TRASHED.match(entry)
        name = match.group("name") if match else entry
        counts[name] = counts.get(name, 0) + 1
    return counts


def observe(call: Callable[[str, dict[str, Any]], Any], data_dir: Path) -> World:
    """Everything a writer serves, history included, read through its public functions."""
    banks: dict[str, BankModel] = {}
    for info in call("memory::bank::list", {})["banks"]:
        name = info["name"]
        rules = {
            r["name"]: r["content"] for r in call("memory::rule::list", {"bank": name})["rules"]
        }
        memories: dict[str, Rec] = {}
        offset = 0
        while True:
            page = call(
                "memory::list",
                {"bank": name, "include_superseded": True, "limit": LIST_PAGE, "offset": offset},
            )
            for m in page["memories"]:
                memories[m["id"]] = Rec(
                    text=m["text"],
                    live="invalid_at" not in m,
                    pinned=m["pinned"],
                    superseded_by=m.get("superseded_by"),
                    corroboration=m["corroboration"],
                )
            offset += len(page["memories"])
            if not page["memories"] or offset >= page["total"]:
                break
        banks[name] = BankModel(info["description"], rules, memories)
    return World(banks, trash_counts(data_dir))


def outcomes(acked: World, in_flight: list[Callable[[World], World]]) -> list[World]:
    """The states a restart may find: the acknowledged one plus each prefix of what was in
    flight, every operation applied whole."""
    states = [acked]
    for effect in in_flight:
        states.append(effect(states[-1]))
    return states


def diff(expected: World, seen: World, limit: int = 6) -> list[str]:
    """A short, readable list of differences (for failure messages and the defect log)."""
    out: list[str] = []
    for name in sorted(set(expected.banks) | set(seen.banks)):
        a, b = expected.banks.get(name), seen.banks.get(name)
        if a is None or b is None:
            out.append(
                f"bank {name}: expected {'absent' if a is None else 'present'}, found "
                f"{'absent' if b is None else 'present'}"
            )
            continue
        if a.description != b.description:
            out.append(f"bank {name}: description {a.description!r} != {b.description!r}")
        if a.rules != b.rules:
            out.append(f"bank {name}: rules {sorted(a.rules)} != {sorted(b.rules)} (or content)")
        for memory_id in sorted(set(a.memories) | set(b.memories)):
            ra, rb = a.memories.get(memory_id), b.memories.get(memory_id)
            if ra != rb:
                out.append(f"bank {name}: memory {memory_id}: {ra} != {rb}")
    if expected.trashed != seen.trashed:
        out.append(f"trash {expected.trashed} != {seen.trashed}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])
