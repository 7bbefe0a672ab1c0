"""Per-bank settings: chosen in `bank.yaml` by create/configure, the configuration for the rest,
validated whole (a bad value changes nothing), shown by list/get, announced when changed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.ports import BANK_CHANGED
from memory_worker.app.service import MemoryService
from memory_worker.core.bank_settings import (
    MEMORY_CATEGORIES,
    BankOverrides,
    effective,
    parse_overrides,
)
from memory_worker.core.config import Settings
from memory_worker.core.errors import BankNotFound, Conflict, Forbidden, InvalidInput
from memory_worker.storage.bank_file import (
    PLAIN_BANK_FILE,
    BankFile,
    read_bank_file,
    render_bank_file,
)
from memory_worker.storage.store import Store

from .fakes import FixedClock, RecordingEmitter

DEFAULTS = Settings().bank_defaults().model_dump(mode="json")


async def call(service: MemoryService, function_id: str, **payload: Any) -> dict[str, Any]:
    return await catalog.call(service, function_id, payload)


def _yaml(data_dir: Path, bank: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((data_dir / bank / "bank.yaml").read_text())
    return data


class TestDefaults:
    async def test_a_bank_that_chose_nothing_shows_the_configured_defaults(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        created = await call(service, "memory::bank::create", name="team")
        assert created["bank"]["settings"] == DEFAULTS
        assert _yaml(data_dir, "team") == {"description": ""}  # nothing chosen, nothing written

    async def test_a_changed_default_reaches_banks_that_never_chose(
        self, store: Store, clock: FixedClock
    ) -> None:
        first = MemoryService(store, Settings(), clock=clock)
        await call(first, "memory::bank::create", name="quiet")
        await call(first, "memory::bank::create", name="loud", max_memories=50)
        tuned = MemoryService(store, Settings(max_memories=300, subject_scoping=True), clock=clock)
        banks = {
            b["name"]: b["settings"] for b in (await call(tuned, "memory::bank::list"))["banks"]
        }
        assert banks["quiet"]["max_memories"] == 300 and banks["quiet"]["subject_scoping"]
        assert banks["loud"]["max_memories"] == 50  # its own choice wins


class TestCreate:
    async def test_settings_given_at_create_are_kept_in_bank_yaml_and_survive_a_restart(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(
            service,
            "memory::bank::create",
            name="family",
            description="Home",
            subject_scoping=True,
            max_per_subject=20,
            retention={"Context": 30},
            association_weights={"content": 0.6, "context": 0.3, "intention": 0.1},
            conscious_access="read",
            scope="shared",
        )
        assert _yaml(data_dir, "family") == {
            "description": "Home",
            "subject_scoping": True,
            "max_per_subject": 20,
            "retention": {"context": 30},
            "association_weights": {"content": 0.6, "context": 0.3, "intention": 0.1},
            "conscious_access": "read",
            "scope": "shared",
        }
        await service.store.reload()  # as a restart: every bank replayed from its folder
        shown = (await call(service, "memory::bank::get", name="family"))["bank"]
        assert shown["description"] == "Home"
        assert shown["settings"] == {
            **DEFAULTS,
            "subject_scoping": True,
            "max_per_subject": 20,
            "retention": {"context": 30},
            "association_weights": {"content": 0.6, "context": 0.3, "intention": 0.1},
            "conscious_access": "read",
            "scope": "shared",
        }

    async def test_create_again_with_the_same_settings_is_idempotent(
        self, service: MemoryService
    ) -> None:
        await call(service, "memory::bank::create", name="b", max_memories=5)
        again = await call(service, "memory::bank::create", name="b", max_memories=5)
        assert not again["created"]

    async def test_create_of_an_existing_bank_with_other_settings_is_a_conflict(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="b", max_memories=5)
        before = (data_dir / "b" / "bank.yaml").read_bytes()
        with pytest.raises(Conflict, match=r"exists with other max_memories.*configure"):
            await call(service, "memory::bank::create", name="b", max_memories=6)
        assert (data_dir / "b" / "bank.yaml").read_bytes() == before

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("retention", {"gossip": 3}, "unknown category 'gossip'"),
            ("retention", {"context": 0}, "whole number of days"),
            ("retention", {"context": True}, "retention.context: Input should be a valid integer"),
            ("max_memories", -1, "greater than or equal to 0"),
            ("relevance_threshold", 1.5, "less than or equal to 1"),
            ("conscious_access", "admin", "conscious_access"),
            ("scope", "public", "scope"),
            ("association_weights", {"content": 0, "context": 0, "intention": 0}, "above 0"),
            ("association_weights", {"content": 0.5, "mood": 0.5}, "mood"),
        ],
    )
    async def test_a_bad_setting_is_invalid_input_and_creates_nothing(
        self, service: MemoryService, data_dir: Path, field: str, value: object, message: str
    ) -> None:
        with pytest.raises(InvalidInput, match=message):
            await call(service, "memory::bank::create", name="b", **{field: value})
        assert not (data_dir / "b").exists()


class TestConfigure:
    async def test_configure_sets_resets_with_null_and_keeps_what_it_omits(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="b", scope="shared")
        emitter.clear()
        out = await call(
            service, "memory::bank::configure", name="b", max_memories=7, retention={"context": 2}
        )
        assert out["changed"] == ["max_memories", "retention"]
        assert out["bank"]["settings"]["scope"] == "shared"  # omitted: kept
        assert _yaml(data_dir, "b") == {
            "description": "",
            "max_memories": 7,
            "retention": {"context": 2},
            "scope": "shared",
        }
        reset = await call(service, "memory::bank::configure", name="b", max_memories=None)
        assert reset["changed"] == ["max_memories"]
        assert reset["bank"]["settings"]["max_memories"] == DEFAULTS["max_memories"]
        assert "max_memories" not in _yaml(data_dir, "b")
        assert emitter.of(BANK_CHANGED) == [
            {"event_type": "configured", "bank": "b", "event_id": ANY},
            {"event_type": "configured", "bank": "b", "event_id": ANY},
        ]

    async def test_two_configures_at_once_both_land(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        """A person caps the bank in the console while a script sets its access level: each
        changes one field and keeps the others. Merged before the other's write landed, the
        second write put back what the first had replaced (the cap lost, though answered as
        changed), and each answered and announced as changed only what it asked."""
        await call(service, "memory::bank::create", name="b", description="notes")
        emitter.clear()
        capped, locked = await asyncio.gather(
            call(service, "memory::bank::configure", name="b", max_memories=7),
            call(service, "memory::bank::configure", name="b", conscious_access="read"),
        )
        assert capped["changed"] == ["max_memories"]
        assert locked["changed"] == ["conscious_access"]
        assert _yaml(data_dir, "b") == {
            "description": "notes",
            "max_memories": 7,
            "conscious_access": "read",
        }
        got = (await call(service, "memory::bank::get", name="b"))["bank"]["settings"]
        assert (got["max_memories"], got["conscious_access"]) == (7, "read")
        assert len(emitter.of(BANK_CHANGED)) == 2

    async def test_a_configure_from_a_stale_read_is_a_conflict_and_changes_nothing(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        """Two tabs (or a tab and the CLI) read the bank's settings, then each saves its edit
        with the `settings_revision` it read: the first lands, the second was made on a state
        that is gone and is refused whole, rather than silently writing over the first."""
        await call(service, "memory::bank::create", name="b", description="notes")
        read = (await call(service, "memory::bank::get", name="b"))["bank"]["settings_revision"]
        first = await call(
            service,
            "memory::bank::configure",
            name="b",
            max_memories=7,
            expected_settings_revision=read,
        )
        assert first["changed"] == ["max_memories"]
        assert first["bank"]["settings_revision"] not in (None, read)
        emitter.clear()
        written = (data_dir / "b" / "bank.yaml").read_bytes()
        with pytest.raises(Conflict, match=r"stale settings: bank b .*expected " + read):
            await call(
                service,
                "memory::bank::configure",
                name="b",
                max_memories=9,
                description="other",
                expected_settings_revision=read,
            )
        assert (data_dir / "b" / "bank.yaml").read_bytes() == written
        assert emitter.of(BANK_CHANGED) == []
        # Read again, the same edit applies.
        fresh = first["bank"]["settings_revision"]
        again = await call(
            service,
            "memory::bank::configure",
            name="b",
            max_memories=9,
            expected_settings_revision=fresh,
        )
        assert again["changed"] == ["max_memories"]

    async def test_two_configures_from_one_read_at_once_one_lands_one_is_refused(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="b")
        read = (await call(service, "memory::bank::get", name="b"))["bank"]["settings_revision"]
        outcomes = await asyncio.gather(
            call(service, "memory::bank::configure", name="b", max_memories=7,
                 expected_settings_revision=read),
            call(service, "memory::bank::configure", name="b", max_memories=9,
                 expected_settings_revision=read),
            return_exceptions=True,
        )  # fmt: skip
        refused = [o for o in outcomes if isinstance(o, Conflict)]
        landed = [o for o in outcomes if isinstance(o, dict)]
        assert (len(refused), len(landed)) == (1, 1)
        kept = landed[0]["bank"]["settings"]["max_memories"]
        assert _yaml(data_dir, "b")["max_memories"] == kept

    async def test_a_hand_edit_of_bank_yaml_makes_an_earlier_read_stale(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="b")
        read = (await call(service, "memory::bank::get", name="b"))["bank"]["settings_revision"]
        (data_dir / "b" / "bank.yaml").write_text("description: ''\nsubject_scoping: true\n")
        assert await service.reload_bank("b") == "reloaded"
        with pytest.raises(Conflict, match="stale settings"):
            await call(
                service,
                "memory::bank::configure",
                name="b",
                subject_scoping=False,
                expected_settings_revision=read,
            )
        assert _yaml(data_dir, "b")["subject_scoping"] is True

    async def test_the_settings_revision_is_the_same_on_every_read_and_after_a_no_op(
        self, service: MemoryService
    ) -> None:
        """An unchanged bank keeps its tag (a list, a get, a configure that changed nothing),
        so a tab that read it is never refused for nothing."""
        await call(service, "memory::bank::create", name="b", max_memories=7)
        got = (await call(service, "memory::bank::get", name="b"))["bank"]["settings_revision"]
        listed = (await call(service, "memory::bank::list"))["banks"]
        assert [b["settings_revision"] for b in listed if b["name"] == "b"] == [got]
        same = await call(
            service,
            "memory::bank::configure",
            name="b",
            max_memories=7,
            expected_settings_revision=got,
        )
        assert (same["changed"], same["bank"]["settings_revision"]) == ([], got)

    async def test_a_reload_waits_for_a_configure_in_flight_and_reads_what_it_wrote(
        self, service: MemoryService, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`memory::reload` (or a hand edit's reload) freezes the bank and drains what is being
        written before it reads the folder again. A `bank.yaml` write under way was not waited
        for: the reload read the old file, and the bank it installed kept the old settings (a
        bank just set to `conscious_access: none` still open to agents) while the file and the
        configure's answer said otherwise."""
        from memory_worker.storage import bank as bank_module

        await call(service, "memory::bank::create", name="b")
        bank = service.store.get("b")
        entered, release = threading.Event(), threading.Event()
        real_write = bank_module.write_bank_file

        def held_write(*args: Any, **kwargs: Any) -> None:
            entered.set()
            release.wait(30)
            real_write(*args, **kwargs)

        monkeypatch.setattr(bank_module, "write_bank_file", held_write)
        configuring = asyncio.create_task(
            call(service, "memory::bank::configure", name="b", conscious_access="none")
        )
        assert await asyncio.to_thread(entered.wait, 10)
        draining = asyncio.create_task(bank.drain())
        await asyncio.sleep(0)  # a drain with nothing to wait for is over by now
        drained_early = draining.done()
        release.set()
        await draining
        assert (await configuring)["changed"] == ["conscious_access"]
        assert not drained_early  # the write under way was waited for
        await call(service, "memory::reload")
        got = (await call(service, "memory::bank::get", name="b"))["bank"]["settings"]
        assert got["conscious_access"] == "none"

    async def test_a_configure_that_changes_nothing_writes_and_announces_nothing(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="b", max_memories=7)
        before = (data_dir / "b" / "bank.yaml").stat().st_mtime_ns
        emitter.clear()
        out = await call(service, "memory::bank::configure", name="b", max_memories=7)
        assert out["changed"] == []
        assert emitter.of(BANK_CHANGED) == []
        assert (data_dir / "b" / "bank.yaml").stat().st_mtime_ns == before

    async def test_configure_changes_the_description_too(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="b", description="old")
        out = await call(service, "memory::bank::configure", name="b", description="new one")
        assert out["changed"] == ["description"]
        assert out["bank"]["description"] == "new one"
        assert _yaml(data_dir, "b")["description"] == "new one"

    @pytest.mark.parametrize("cleared", ["", "   ", None])
    async def test_configure_clears_a_description_given_empty_or_null(
        self, service: MemoryService, data_dir: Path, cleared: str | None
    ) -> None:
        """A description given empty (the console's field emptied) or null (back to the default,
        none) is cleared; only an omitted one stays."""
        await call(service, "memory::bank::create", name="b", description="old")
        out = await call(service, "memory::bank::configure", name="b", description=cleared)
        assert out["changed"] == ["description"]
        assert out["bank"]["description"] == ""
        assert _yaml(data_dir, "b").get("description", "") == ""

    async def test_a_bad_value_among_good_ones_changes_nothing(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="b")
        before = (data_dir / "b" / "bank.yaml").read_bytes()
        emitter.clear()
        with pytest.raises(InvalidInput, match="retention"):
            await call(
                service,
                "memory::bank::configure",
                name="b",
                max_memories=3,
                retention={"feelings": 1},
            )
        assert (data_dir / "b" / "bank.yaml").read_bytes() == before
        assert (await call(service, "memory::bank::get", name="b"))["bank"]["settings"] == DEFAULTS
        assert emitter.events == []

    @pytest.mark.parametrize(
        "change",
        [
            {"relevance_threshold": True},
            {"association_weights": {"content": True}},
            {"association_weights": {"content": 1, "context": False}},
        ],
    )
    async def test_a_flag_for_a_number_is_refused_not_read_as_one_or_zero(
        self, service: MemoryService, data_dir: Path, change: dict[str, Any]
    ) -> None:
        # `relevance_threshold=true` read as 1.0 would make every recall of the bank come back
        # empty ("exact match only"): a flag names no number.
        await call(service, "memory::bank::create", name="b")
        before = (data_dir / "b" / "bank.yaml").read_bytes()
        with pytest.raises(InvalidInput, match="not true or false"):
            await call(service, "memory::bank::configure", name="b", **change)
        with pytest.raises(InvalidInput, match="not true or false"):
            await call(service, "memory::bank::create", name="c", **change)
        assert (data_dir / "b" / "bank.yaml").read_bytes() == before

    async def test_configure_with_no_field_is_invalid_input(self, service: MemoryService) -> None:
        await call(service, "memory::bank::create", name="b")
        with pytest.raises(InvalidInput, match="at least one of description, subject_scoping"):
            await call(service, "memory::bank::configure", name="b")

    async def test_configure_of_a_missing_bank_is_bank_not_found_and_creates_nothing(
        self, service: MemoryService, data_dir: Path
    ) -> None:
        with pytest.raises(BankNotFound):
            await call(service, "memory::bank::configure", name="ghost", max_memories=3)
        assert not (data_dir / "ghost").exists()

    async def test_configure_is_denied_to_agents(self) -> None:
        assert catalog.find("memory::bank::configure").policy is catalog.Policy.HUMANS


class TestBankFile:
    async def test_a_hand_edit_with_a_bad_setting_is_damage_and_the_defaults_apply(
        self, store: Store, service: MemoryService, data_dir: Path
    ) -> None:
        await call(service, "memory::bank::create", name="b", max_memories=9)
        (data_dir / "b" / "bank.yaml").write_text("description: d\nmax_memories: lots\n")
        assert store.get("b").disk_changed()
        assert await store.reload_bank("b") == "reloaded"
        bank = store.get("b")
        assert bank.description == "d" and bank.overrides == BankOverrides()
        assert any("settings ignored" in d.describe() for d in bank.damage)

    async def test_a_bad_setting_by_hand_does_not_drop_the_banks_other_choices(
        self, store: Store, service: MemoryService, data_dir: Path
    ) -> None:
        """One typo in bank.yaml (`max_memories: 10k`) threw away every setting the bank chose:
        an agent held to `conscious_access: read` could write again, and a bank partitioned by
        person (`subject_scoping`) showed everyone's memories to everyone. The bad key is
        ignored and reported; the others still apply."""
        await call(service, "memory::bank::create", name="b")
        (data_dir / "b" / "bank.yaml").write_text(
            "description: d\nconscious_access: read\nsubject_scoping: true\nmax_memories: 10k\n"
            "colour: blue\n"
        )
        assert await store.reload_bank("b") == "reloaded"
        bank = store.get("b")
        assert bank.overrides.conscious_access == "read"
        assert bank.overrides.subject_scoping is True and bank.overrides.max_memories is None
        reported = " ".join(d.describe() for d in bank.damage)
        assert "max_memories" in reported and "colour" in reported

    async def test_a_hand_edit_that_breaks_the_yaml_keeps_the_banks_other_choices(
        self, store: Store, service: MemoryService, data_dir: Path
    ) -> None:
        """A description edited to `Ana's notes: private` is no longer YAML (a second `: ` in a
        plain value): the whole file was ignored, so a bank at `conscious_access: none`,
        partitioned by person, let any agent read and write it and showed Ana's memories to
        everyone. Each top-level entry that still reads on its own applies; the rest is damage."""
        await call(
            service,
            "memory::bank::create",
            name="b",
            subject_scoping=True,
            conscious_access="none",
            retention={"context": 30},
        )
        await call(service, "memory::save", bank="b", text="Ana likes green tea.", subject="Ana")
        (data_dir / "b" / "bank.yaml").write_text(
            "description: Ana's notes: private\nsubject_scoping: true\n"
            "conscious_access: none\nretention:\n  context: 30\n"
        )
        assert await store.reload_bank("b") == "reloaded"
        bank = store.get("b")
        assert bank.overrides.conscious_access == "none"
        assert bank.overrides.subject_scoping is True
        assert bank.overrides.retention == {"context": 30}
        assert any("YAML" in d.describe() for d in bank.damage)
        agent = Caller.for_agent("mcp")
        with pytest.raises(Forbidden):
            await catalog.call(service, "memory::recall", {"bank": "b", "query": "tea"}, agent)

    @pytest.mark.parametrize("written", ["None", "no", "read-only", "[read]"])
    async def test_an_access_level_that_does_not_read_holds_agents_at_none(
        self, store: Store, service: MemoryService, data_dir: Path, written: str
    ) -> None:
        """`conscious_access: None` (the seed's word capitalised), `no` (YAML's false) or a typo
        was ignored, and the bank ran on the configured default (`read_write`): a person who
        meant to take memory tools away from agents gave them every one. What cannot be read
        is the seed's involuntary stance, `none`, reported as damage until it is fixed."""
        await call(service, "memory::bank::create", name="b", conscious_access="read")
        (data_dir / "b" / "bank.yaml").write_text(f"description: d\nconscious_access: {written}\n")
        assert await store.reload_bank("b") == "reloaded"
        bank = store.get("b")
        assert bank.overrides.conscious_access == "none"
        assert any("conscious_access" in d.describe() for d in bank.damage)
        agent = Caller.for_agent("mcp")
        with pytest.raises(Forbidden, match="conscious_access: none"):
            await catalog.call(service, "memory::list", {"bank": "b"}, agent)

    async def test_a_valid_hand_edit_is_picked_up_and_announced(
        self, service: MemoryService, data_dir: Path, emitter: RecordingEmitter
    ) -> None:
        await call(service, "memory::bank::create", name="b")
        emitter.clear()
        (data_dir / "b" / "bank.yaml").write_text("description: ''\nsubject_scoping: true\n")
        assert await service.reload_bank("b") == "reloaded"
        got = await call(service, "memory::bank::get", name="b")
        assert got["bank"]["settings"]["subject_scoping"] is True
        assert emitter.of(BANK_CHANGED) == [
            {"event_type": "configured", "bank": "b", "event_id": ANY}
        ]


_weights = st.fixed_dictionaries(
    {},
    optional={
        "content": st.floats(0.1, 1),
        "context": st.floats(0, 1),
        "intention": st.floats(0, 1),
    },
)
_overrides = st.fixed_dictionaries(
    {},
    optional={
        "subject_scoping": st.booleans(),
        "max_memories": st.integers(0, 2**63 - 1),
        "max_per_subject": st.integers(0, 10**6),
        "retention": st.dictionaries(st.sampled_from(MEMORY_CATEGORIES), st.integers(1, 36_500)),
        "association_weights": _weights.filter(lambda w: w.get("content", 1.0) > 0),
        "relevance_threshold": st.floats(0, 1),
        "conscious_access": st.sampled_from(["none", "read", "read_write"]),
        "scope": st.sampled_from(["private", "shared"]),
    },
)


def test_a_plain_bank_yaml_is_what_rendering_no_description_and_no_choice_writes(
    tmp_path: Path,
) -> None:
    # `read_bank_file` answers that file without the YAML parser: it must read as the parser does.
    rendered = render_bank_file("", BankOverrides())
    path = tmp_path / "bank.yaml"
    path.write_bytes(rendered)
    assert rendered == PLAIN_BANK_FILE
    assert read_bank_file(path) == BankFile("", BankOverrides())
    assert yaml.safe_load(rendered) == {"description": ""}
    path.write_bytes(b"description: ''\nmax_memories: 5\n")  # anything more: parsed
    assert read_bank_file(path).overrides == BankOverrides(max_memories=5)


class TestProperties:
    # Descriptions as the service stores them: whitespace collapsed (`clean_short`).
    @given(raw=_overrides, description=st.text(max_size=40).map(lambda t: " ".join(t.split())))
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def test_any_valid_choice_round_trips_through_bank_yaml(
        self, raw: dict[str, Any], description: str, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        overrides = parse_overrides(raw, source="test")
        path = tmp_path_factory.mktemp("b") / "bank.yaml"
        path.write_bytes(render_bank_file(description, overrides))
        found = read_bank_file(path)
        assert found.problem is None
        assert found.overrides == overrides and found.description == description
        shown = effective(Settings().bank_defaults(), overrides)
        for name, value in overrides.chosen().items():
            assert getattr(shown, name).__eq__(getattr(overrides, name)) or value is None

    @given(junk=st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=5)))
    @settings(max_examples=100, deadline=None)
    def test_arbitrary_keys_are_refused_with_a_coded_error_never_a_crash(
        self, junk: dict[str, Any]
    ) -> None:
        try:
            parsed = parse_overrides(junk, source="test")
        except InvalidInput as exc:
            assert str(exc).startswith("invalid_input: test: ")
        else:
            assert set(parsed.chosen()) <= set(junk)
