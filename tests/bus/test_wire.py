"""The wire tier (SPEC §5.3): the real worker process on the real `iii-sdk` client, against the
engine double, with fake siblings that are real SDK clients. Each scenario runs end to end:
frames on a WebSocket, the engine's routing, the worker's handlers, its files."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from iii import InvocationError

from memory_worker.adapters import console
from memory_worker.app import catalog
from memory_worker.app.caller import Caller
from memory_worker.app.service import MemoryService
from memory_worker.core.config import Settings
from memory_worker.core.injection import RULES_UPDATE_TAG, message_text
from memory_worker.core.models import BankEvent, ItemEvent
from memory_worker.storage.store import Store
from memory_worker.storage.vectors import VECTORS_FILE, load_vectors

from .conftest import WorkerProcess
from .engine_double import EngineDouble, EngineError
from .siblings import (
    Cli,
    FakeHarness,
    FakeHttp,
    FakeQueue,
    FakeRouter,
    FakeSessions,
    FakeState,
    FakeSubscriber,
    assistant_message,
    envelope,
    function_call,
    function_result,
    meta_changed,
    turn_event,
    user_message,
)

pytestmark = pytest.mark.timeout(600)  # a hang's: a worker start may take two minutes under load

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


@pytest.fixture(name="cli")
def _cli(engine: EngineDouble) -> Any:
    with Cli(engine.url) as cli:
        yield cli


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [message_text(m) for m in messages]


def wait_embedded(bank_dir: Path, memory_id: str, timeout: float = 30.0) -> None:
    """Until the bank's vectors file holds the memory's vector (polling a condition on the
    worker's files, not waiting for work: the embedding takes a round trip to the router)."""
    deadline = time.monotonic() + timeout
    while memory_id not in load_vectors(bank_dir / VECTORS_FILE)[0]:
        assert time.monotonic() < deadline, f"{memory_id} was not embedded in {timeout} s"
        time.sleep(0.02)


class TestRegistration:
    def test_every_function_is_registered_with_its_golden_surface(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        spawn()
        functions = engine.functions()
        for spec in (*catalog.CATALOG, *catalog.SEAMS):
            registered = functions[spec.id]
            golden = json.loads(
                (GOLDEN / "schemas" / f"{spec.id.replace('::', '.')}.json").read_text()
            )
            assert registered["description"] == spec.description
            assert registered["request_format"] == golden["request_schema"]
            assert registered["response_format"] == golden["response_schema"]
            metadata = registered.get("metadata") or {}
            assert bool(metadata.get("internal")) is spec.internal, spec.id
        assert set(engine.trigger_types()) >= {"memory::item-changed", "memory::bank-changed"}
        [hook] = engine.bindings("harness::hook::pre-generate")
        assert hook["config"] == {"priority": 100, "timeout_ms": 3000, "on_error": "fail_open"}
        routes = {b["config"]["api_path"] for b in engine.bindings("http")}
        assert routes == {spec.http_path for spec in catalog.CATALOG}

    def test_each_trigger_types_description_names_every_event_it_delivers(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        """What `iii worker info` and the console show a subscriber: seed 000's bank-changed
        fires when "a bank was created / trashed, or its rules changed", and each event type the
        worker sends on a trigger type is one a subscriber can read about there."""
        spawn()
        described = {tid: msg["description"] for tid, msg in engine.trigger_types().items()}
        for trigger_type, kinds in (
            ("memory::item-changed", ItemEvent),
            ("memory::bank-changed", BankEvent),
        ):
            missing = [kind.value for kind in kinds if kind.value not in described[trigger_type]]
            assert not missing, f"{trigger_type}: {described[trigger_type]!r} omits {missing}"

    def test_the_console_page_is_registered_and_served_through_ui_content(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """One `console:*` trigger per page asset, all pointing at `memory::ui-content`, which
        serves each one's source; the settings panel's read is `memory::ui-settings`."""
        worker = spawn()
        functions = engine.functions()
        for internal in ("memory::ui-content", "memory::ui-settings"):
            assert functions[internal]["metadata"]["internal"] is True
        assert functions["memory::ui-content"]["description"].startswith(
            "Serve the memory worker's injected console UI assets"
        )
        bound = {
            b["config"]["path"]: (kind, b["function_id"])
            for kind in ("console:script", "console:style", "console:module")
            for b in engine.bindings(kind)
        }
        assert bound == {path: (kind, "memory::ui-content") for path, kind in console.bus_assets()}
        page = cli.call("memory::ui-content", {"path": "memory/page.js"})
        assert page["content_type"].startswith("text/javascript")
        assert "export default function setup(host)" in page["content"]
        with pytest.raises(InvocationError) as unknown:
            cli.call("memory::ui-content", {"path": "memory/index.html"})
        assert unknown.value.message.startswith("invalid_input: unknown ui asset")
        view = cli.call("memory::ui-settings", {})
        assert (view["mode"], view["editable"]) == ("engine", False)
        assert "configuration worker" in view["reason"]
        assert [f["name"] for f in view["fields"]][:2] == ["data_dir", "default_bank"]
        # The data dir served (`--data-dir` wins over the configuration's), not the entry's.
        assert view["fields"][0]["value"] == str(worker.data_dir.resolve())

    def test_a_malformed_seam_payload_is_invalid_input_not_an_incident(
        self, spawn: Any, cli: Cli
    ) -> None:
        """`memory::ui-content` without its required `path` (or with a number for it), and a REST
        envelope whose fields have the wrong types, are a caller's mistake: `invalid_input: …`,
        never an `internal:` incident logged as a bug."""
        worker: WorkerProcess = spawn()
        for payload in ({}, {"path": 5}, None):
            with pytest.raises(InvocationError) as bad:
                cli.call("memory::ui-content", payload)
            assert bad.value.message.startswith("invalid_input: "), bad.value.message
        for envelope_ in ({"path": 5}, {"path": "memory/save", "headers": "x", "body": {}}):
            reply = cli.call("memory::http", envelope_)
            assert reply["status_code"] == 400, reply
            assert reply["body"]["error"]["code"] == "invalid_input"
        assert worker.events("handler_failed") == []

    def test_the_worker_says_which_mode_and_why(self, spawn: Any) -> None:
        worker: WorkerProcess = spawn()
        [serving] = worker.events("serving")
        assert serving["mode"] == "engine" and serving["reason"] == "--engine was given"


def _seed_banks(data_dir: Path, texts: dict[str, str]) -> None:
    """One memory in each named bank, written by an in-process store that is then closed."""

    async def write() -> None:
        store = Store.open(data_dir, holder={"pid": 0, "kind": "test"})
        service = MemoryService(store, Settings())
        for name, text in texts.items():
            payload = {"bank": name, "text": text}
            await catalog.call(service, "memory::save", payload, Caller.human("cli"))
        await service.close()
        await store.close()

    asyncio.run(write())


class TestCalls:
    def test_a_worker_on_a_data_dir_of_banks_answers_for_each_as_it_replays_them(
        self, spawn: Any, cli: Cli
    ) -> None:
        worker: WorkerProcess = spawn(start=False)
        texts = {name: f"The {name} team ships on Fridays." for name in ("alpha", "bravo")}
        _seed_banks(worker.data_dir, texts)
        worker.start()  # serving before its banks replay; a call replays the bank it names
        for name, text in texts.items():
            listed = cli.call("memory::list", {"bank": name})
            assert [m["text"] for m in listed["memories"]] == [text]
        banks = cli.call("memory::bank::list", {})["banks"]
        assert {b["name"]: b["memories"] for b in banks} == {"alpha": 1, "bravo": 1}

    def test_trigger_style_save_then_recall(self, spawn: Any, cli: Cli) -> None:
        spawn()
        saved = cli.call_kv("memory::save", "text=The user's cat is called Miso", "tags=pets")
        assert saved["created"] is True and saved["memory"]["tags"] == ["pets"]
        recalled = cli.call_kv("memory::recall", "query=what is my cat called?")
        assert recalled["memories"][0]["memory"]["id"] == saved["memory"]["id"]
        assert recalled["retrieval"] == "bm25-entity"  # no router: lexical, and it says so

    def test_errors_carry_their_code_at_the_start_of_the_message(
        self, spawn: Any, cli: Cli
    ) -> None:
        spawn()
        with pytest.raises(InvocationError) as missing:
            cli.call("memory::get", {"id": "fp-nope"})
        assert missing.value.message.startswith("memory_not_found: ")
        with pytest.raises(InvocationError) as bad:
            cli.call("memory::save", {"text": "x"})
        assert bad.value.message.startswith("invalid_input: ")

    def test_rest_through_the_http_worker(self, engine: EngineDouble, spawn: Any) -> None:
        spawn()
        with FakeHttp(engine.url) as http:
            http.routes.wait(len(catalog.CATALOG))
            saved = http.request("POST", "/memory/save", {"text": "Deploys happen on Tuesdays."})
            assert saved["status_code"] == 200 and saved["body"]["created"] is True
            found = http.request("POST", "/memory/recall", {"query": "when are deploys?"})
            assert found["body"]["memories"][0]["memory"]["text"] == "Deploys happen on Tuesdays."
            missing = http.request("POST", "/memory/get", {"id": "fp-nope"})
            assert missing["status_code"] == 404
            assert missing["body"]["error"]["code"] == "memory_not_found"

    def test_rest_body_the_http_worker_could_not_parse_is_refused(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        """The engine's http worker passes on a body only when it is sent as JSON and parses: any
        other comes as `null`. Read as `{}`, `curl -d` (a form content type) listed the default
        bank instead of the one named, with a 200; it is refused, saying why."""
        spawn()
        with FakeHttp(engine.url) as http:
            http.routes.wait(len(catalog.CATALOG))
            named = json.dumps({"bank": "work"}).encode()
            form = {"Content-Type": "application/x-www-form-urlencoded"}
            as_form = http.request("POST", "/memory/list", raw=named, headers=form)
            assert as_form["status_code"] == 400, as_form
            assert as_form["body"]["error"]["code"] == "invalid_input"
            assert "Content-Type: application/json" in as_form["body"]["error"]["message"]
            as_json = {"Content-Type": "application/json"}
            broken = http.request("POST", "/memory/list", raw=b'{"bank": "work"', headers=as_json)
            assert broken["status_code"] == 400, broken
            assert "not valid JSON" in broken["body"]["error"]["message"]
            empty = http.request("POST", "/memory/bank/list", raw=b"", headers=as_json)
            assert empty["status_code"] == 200, empty  # no body at all is `{}`, as before

    def test_router_present_makes_recall_hybrid_and_doctor_reports_it(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeRouter(engine.url) as router:
            worker: WorkerProcess = spawn()
            saved = cli.call("memory::save", {"text": "The user's cat is called Miso."})
            # A save is embedded in the background, and a new bank's recall runs lexical until
            # its first vectors are in (it says so): wait for the vector the worker keeps.
            wait_embedded(worker.data_dir / "main", saved["memory"]["id"])
            recalled = cli.call("memory::recall", {"query": "cat name"})
            slow = worker.events("query_embedding_failed")  # past its 2 s budget, say
            assert recalled["retrieval"] == "bm25-entity-semantic", slow
            assert router.embed_requests
            checks = {c["name"]: c for c in cli.call("memory::doctor", {})["checks"]}
            assert checks["router-reachable"]["ok"] is True

    def test_router_absent_doctor_says_what_is_degraded(self, spawn: Any, cli: Cli) -> None:
        spawn()
        doctor = cli.call("memory::doctor", {})
        assert doctor["ok"] is True  # sibling checks are advisory
        checks = {c["name"]: c for c in doctor["checks"]}
        assert checks["router-reachable"]["ok"] is False
        assert "lexical" in checks["router-reachable"]["detail"]
        assert checks["queue-reachable"]["ok"] is False
        assert checks["configuration-reachable"]["ok"] is True


class TestHook:
    def test_rules_once_memories_on_step_zero_and_a_rule_change_as_one_update(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness:
            spawn()
            harness.wait_bound("harness::hook::pre-generate")
            cli.call("memory::rule::set", {"name": "style", "content": "Answer tersely."})
            cli.call("memory::save", {"text": "The user's cat is called Miso."})
            window = [user_message("what is my cat called?")]

            first = harness.hook(envelope("s1", "t1", 0, window))
            assert first.errors == []
            assert "Answer tersely." in first.system_prompt
            assert first.system_prompt.startswith("You are helpful.")
            [block] = texts(first.appended)
            assert block.startswith('<memory bank="main"') and "Miso" in block
            assert first.annotations["memory_recalled"] == 1
            window += first.appended

            second = harness.hook(envelope("s1", "t1", 1, window))
            assert second.system_prompt == first.system_prompt and second.appended == []

            cli.call("memory::rule::set", {"name": "style", "content": "Answer at length."})
            window.append(user_message("and my dog?"))
            third = harness.hook(envelope("s1", "t2", 0, window))
            assert third.system_prompt == first.system_prompt  # append-only prefix
            updates = [t for t in texts(third.appended) if t.startswith(RULES_UPDATE_TAG)]
            assert len(updates) == 1 and "Answer at length." in updates[0]
            window += third.appended
            fourth = harness.hook(envelope("s1", "t2", 1, window))
            assert fourth.appended == []

    def test_a_tool_call_earns_its_lesson_on_the_next_step_and_never_again(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness, FakeState(engine.url) as state:
            worker: WorkerProcess = spawn()
            harness.wait_bound("harness::hook::pre-generate")
            saved = cli.call(
                "memory::save",
                {
                    "text": "Editing the proto files needs make gen, or the stubs go stale.",
                    "category": "lesson",
                    "title": "Run make gen after editing protos",
                    "recommendation": "After editing `proto/*.proto`, run `make gen`.",
                    "anchors": {"files": ["proto/user.proto"]},
                },
            )["memory"]
            window = [user_message("rename the user's email field")]

            def lessons(run: Any) -> list[str]:
                return [t for t in texts(run.appended) if t.startswith('<memory lessons="main">')]

            for step in (0, 1):
                run = harness.hook(envelope("s1", "t1", step, window))
                assert run.errors == [] and lessons(run) == []
                window += run.appended
            # What the model did at step 1: read the proto (and the harness ran it).
            window += [function_call("shell::fs::read", path="proto/user.proto"), function_result()]
            second = harness.hook(envelope("s1", "t1", 2, window))
            [block] = lessons(second)
            assert "Run make gen after editing protos" in block
            assert second.annotations["memory_lessons"] == [saved["id"]]
            window += second.appended
            key = f"main/{saved['id']}@{saved['revision']}"
            assert key in state.data["memory_lessons"]["s1"]["delivered"]

            window += [function_call("shell::fs::read", path="proto/user.proto"), function_result()]
            assert lessons(harness.hook(envelope("s1", "t1", 3, window))) == []
            worker.restart()  # what the session was given is in the state worker, not in RAM
            window += [
                user_message("now the phone field"),
                function_call("Read", path="proto/user.proto"),
            ]
            assert lessons(harness.hook(envelope("s1", "t2", 1, window))) == []
            other = [user_message("hi"), function_call("shell::fs::read", path="proto/user.proto")]
            assert len(lessons(harness.hook(envelope("s2", "t1", 1, other)))) == 1

    def test_what_a_session_was_told_survives_a_worker_restart(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness, FakeState(engine.url) as state:
            worker: WorkerProcess = spawn()
            cli.call("memory::rule::set", {"name": "style", "content": "Answer tersely."})
            window = [user_message("hello")]
            first = harness.hook(envelope("s1", "t1", 0, window))
            window += first.appended
            worker.restart()
            assert state.data["memory_sessions"]["s1"]["system"]
            cli.call("memory::rule::set", {"name": "style", "content": "Answer at length."})
            window.append(user_message("again"))
            after = harness.hook(envelope("s1", "t2", 0, window))
            assert after.system_prompt == first.system_prompt
            assert any(t.startswith(RULES_UPDATE_TAG) for t in texts(after.appended))

    def test_session_metadata_picks_the_bank_and_a_failed_lookup_adds_nothing(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness, FakeSessions(engine.url) as sessions:
            spawn()
            cli.call("memory::save", {"text": "Posts go out on Fridays.", "bank": "blog"})
            sessions.add("s1", metadata={"memory_bank": "blog"})
            run = harness.hook(envelope("s1", "t1", 0, [user_message("when do posts go out?")]))
            assert run.annotations["memory_bank"] == "blog"
            assert "Fridays" in texts(run.appended)[0]
            # The session's meta changes, so the worker must ask again — and the ask fails.
            meta_changed(engine, cli, lambda: sessions.set_meta("s1", {"memory_bank": "cooking"}))
            sessions.fail_get = True
            later = harness.hook(envelope("s1", "t2", 0, [user_message("posts?")]))
            assert later.errors == [] and later.appended == []
            assert later.system_prompt == run.system_prompt

    def test_a_call_without_bank_inside_a_turn_acts_on_that_turns_bank(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness:
            spawn()
            turn = envelope("s1", "t1", 0, [user_message("hi")], metadata={"memory_bank": "blog"})
            assert harness.hook(turn).annotations["memory_bank"] == "blog"
            saved = cli.client.trigger(
                {
                    "function_id": "memory::save",
                    "payload": {"text": "Posts go out on Fridays."},
                    "metadata": {"session_id": "s1", "turn_id": "t1"},
                }
            )
            assert saved["created"] is True
            blog = cli.call("memory::list", {"bank": "blog"})["memories"]
            assert [m["text"] for m in blog] == ["Posts go out on Fridays."]
            assert cli.call("memory::list", {})["memories"] == []  # not the default bank
            # A bank named by a number (`iii trigger … bank=0` decodes it) is named, not absent.
            cli.client.trigger(
                {
                    "function_id": "memory::save",
                    "payload": {"bank": 0, "text": "Bank zero holds this."},
                    "metadata": {"session_id": "s1", "turn_id": "t1"},
                }
            )
            zero = cli.call("memory::list", {"bank": "0"})["memories"]
            assert [m["text"] for m in zero] == ["Bank zero holds this."]
            assert len(cli.call("memory::list", {"bank": "blog"})["memories"]) == 1
            # A blank bank names none (the request reads it as omitted), and neither does a
            # call with no payload at all: both still act on the turn's bank, never the default.
            cli.client.trigger(
                {
                    "function_id": "memory::save",
                    "payload": {"bank": "  ", "text": "Drafts are due on Wednesdays."},
                    "metadata": {"session_id": "s1", "turn_id": "t1"},
                }
            )
            assert len(cli.call("memory::list", {"bank": "blog"})["memories"]) == 2
            assert cli.call("memory::list", {})["memories"] == []
            tags = cli.client.trigger(
                {
                    "function_id": "memory::tags",
                    "payload": None,
                    "metadata": {"session_id": "s1", "turn_id": "t1"},
                }
            )
            assert tags["bank"] == "blog"

    def test_a_step_with_nothing_to_inject_still_answers_continue(
        self, spawn: Any, cli: Cli
    ) -> None:
        """Seed 000's HookResponse requires `decision`: a step the hook leaves unchanged (no
        session id, a turn whose bank name is invalid, an envelope it cannot read) is answered
        `{"decision": "continue"}`, never `null`, as every caller of the published schema
        expects."""
        spawn()
        no_memory = envelope("s1", "t1", 0, [user_message("hi")], metadata={"memory_bank": "Bad!"})
        for payload in ({}, None, {"step": -1}, no_memory):
            assert cli.call("memory::hook::pre-generate", payload) == {"decision": "continue"}

    def test_without_a_session_manager_a_sub_agent_uses_its_parents_default_bank(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """No session-manager: no session metadata, so every session's bank is the default
        (seed 000) — a sub-agent's too. Its parent is not a session that "no longer exists":
        nobody can say, and the parent itself runs on the default bank."""
        with FakeHarness(engine.url) as harness:
            spawn()
            cli.call("memory::save", {"text": "Posts go out on Fridays."})
            parent = harness.hook(envelope("p", "pt", 0, [user_message("when do posts go out?")]))
            assert parent.annotations["memory_bank"] == "main"
            child_env = envelope("c", "ct", 0, [user_message("when do posts go out?")])
            child_env["parent"] = {"session_id": "p"}
            child = harness.hook(child_env)
            assert child.annotations.get("memory_bank") == "main"
            assert any("Fridays" in t for t in texts(child.appended))

    def test_a_hanging_sibling_never_blocks_the_turn(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """The session-manager hangs far past the binding's 3 s: the worker's own budget answers
        the hook first (no timeout error at the harness), with `continue` and nothing new."""
        with FakeHarness(engine.url) as harness, FakeSessions(engine.url) as sessions:
            spawn()
            cli.call("memory::save", {"text": "The user prefers tea."})
            sessions.add("s1")
            engine.set_delay("session::get", 30.0)
            run = harness.hook(envelope("s1", "t1", 0, [user_message("tea or coffee?")]))
            assert run.errors == [], "the harness timed out: the hook outlived its own budget"
            assert run.decision == "continue" and len(run.replies) == 1
            assert not any("tea" in t for t in texts(run.appended))

    def test_a_slow_router_after_a_slow_session_manager_still_gets_rules_and_memories(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """Each sibling keeps to its own budget (the session lookup answers in under a second,
        the query embedding is given up after 2 s) but together they outlived the hook's 2.5 s:
        the session's first step got nothing at all, not its rules, not the memory lexical
        recall finds, and its next step changed the system prompt. The query embedding now ends
        where the hook's budget leaves time to finish lexically."""
        with (
            FakeHarness(engine.url) as harness,
            FakeSessions(engine.url) as sessions,
            FakeRouter(engine.url),
        ):
            worker: WorkerProcess = spawn()
            cli.call("memory::rule::set", {"name": "style", "content": "Answer tersely."})
            saved = cli.call("memory::save", {"text": "The user's cat is called Miso."})
            wait_embedded(worker.data_dir / "main", saved["memory"]["id"])  # the semantic arm on
            sessions.add("s1")
            engine.set_delay("session::get", 0.8)
            engine.set_delay("router::embed", 30.0)
            run = harness.hook(envelope("s1", "t1", 0, [user_message("what is my cat called?")]))
            assert run.errors == [] and run.decision == "continue"
            assert "Answer tersely." in run.system_prompt
            assert any("Miso" in t for t in texts(run.appended))
            assert worker.events("hook_over_budget") == []

    def test_a_first_step_whose_session_lookup_failed_keeps_its_system_prompt_after(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """A failed session lookup keeps what the session has: on its first step, nothing. The
        next step froze the rules into the system prompt then, changing the prefix of a running
        session (every prompt cache of it lost); the rules now arrive as the one appended
        update message, as for any session whose section changed."""
        with FakeHarness(engine.url) as harness, FakeSessions(engine.url) as sessions:
            spawn()
            cli.call("memory::rule::set", {"name": "style", "content": "Answer tersely."})
            sessions.add("s1")
            engine.set_delay("session::get", 5.0)  # past the lookup's 2 s: it fails
            first = harness.hook(envelope("s1", "t1", 0, [user_message("hi")]))
            assert first.errors == [] and first.system_prompt == "You are helpful."
            engine.set_delay("session::get", 0)
            window = [user_message("hi"), *first.appended, assistant_message("Hello!")]
            second = harness.hook(envelope("s1", "t1", 1, window))
            assert second.system_prompt == first.system_prompt  # the prefix never changes
            [update] = texts(second.appended)
            assert update.startswith(RULES_UPDATE_TAG) and "Answer tersely." in update

    def test_a_bank_switch_by_set_meta_applies_from_the_next_turn(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with FakeHarness(engine.url) as harness, FakeSessions(engine.url) as sessions:
            spawn()
            cli.call("memory::save", {"text": "Posts go out on Fridays.", "bank": "blog"})
            cli.call("memory::save", {"text": "Risotto needs arborio rice.", "bank": "cooking"})
            sessions.add("s1", metadata={"memory_bank": "blog"})
            first = harness.hook(envelope("s1", "t1", 0, [user_message("posts and risotto?")]))
            assert first.annotations["memory_bank"] == "blog"
            meta_changed(engine, cli, lambda: sessions.set_meta("s1", {"memory_bank": "cooking"}))
            window = [user_message("posts and risotto?"), *first.appended, user_message("rice?")]
            second = harness.hook(envelope("s1", "t2", 0, window))
            assert second.annotations["memory_bank"] == "cooking"
            assert second.system_prompt == first.system_prompt  # the prefix never changes
            assert any("arborio" in t for t in texts(second.appended))


class TestEvents:
    def test_a_bank_filtered_subscriber_gets_exactly_its_banks_events(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        spawn()
        with (
            FakeSubscriber(engine.url, "memory::item-changed", {"bank": "blog"}) as blog,
            FakeSubscriber(engine.url, "memory::item-changed") as everything,
            FakeSubscriber(engine.url, "memory::bank-changed", {"bank": "blog"}) as banks,
        ):
            engine.wait_binding("memory::item-changed", blog.function_id)
            engine.wait_binding("memory::item-changed", everything.function_id)
            engine.wait_binding("memory::bank-changed", banks.function_id)
            cli.call("memory::save", {"text": "Note for the main bank."})
            cli.call("memory::save", {"text": "Posts go out on Fridays.", "bank": "blog"})
            cli.call("memory::save", {"text": "Another main bank note."})
            seen = everything.wait_events(3)
            assert sorted(e["bank"] for e in seen) == ["blog", "main", "main"]
            [event] = blog.wait_events(1)
            assert event["bank"] == "blog" and event["event_type"] == "created"
            assert event["memory"]["text"] == "Posts go out on Fridays."
            assert [e["event_type"] for e in banks.wait_events(1)] == ["created"]
            assert len(blog.events) == 1  # the later main-bank save did not reach it

    def test_a_subject_filtered_subscriber_never_hears_of_another_persons_memories(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        spawn()
        with FakeSubscriber(engine.url, "memory::item-changed", {"subject": "bruno"}) as bruno:
            engine.wait_binding("memory::item-changed", bruno.function_id)
            cli.call(
                "memory::save", {"text": "Ana's spare key is under the mat.", "subject": "ana"}
            )
            cli.call("memory::save", {"text": "The office opens at nine."})
            cli.call("memory::save", {"text": "Bruno likes chess.", "subject": "bruno"})
            seen = bruno.wait_events(2)
            assert [e["memory"]["text"] for e in seen] == [
                "The office opens at nine.",
                "Bruno likes chess.",
            ]
            assert len(bruno.events) == 2  # Ana's save, the first, never reached it

    def test_a_binding_with_an_unknown_key_is_refused(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        spawn()
        with FakeSubscriber(engine.url, "memory::item-changed", {"bnak": "blog"}) as sub:
            rejection = engine.wait_rejection("memory::item-changed", sub.function_id)
            assert "bank" in json.dumps(rejection)


class TestTurns:
    def test_a_finished_turn_becomes_one_queued_job_into_its_bank(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        with (
            FakeHarness(engine.url) as harness,
            FakeQueue(engine.url) as queue,
            FakeSessions(engine.url) as sessions,
        ):
            spawn()
            sessions.add("s1")  # an empty transcript: the pass finds nothing to read
            harness.wait_bound("harness::turn-completed")
            run = harness.hook(
                envelope("s1", "t1", 0, [user_message("hi")], metadata={"memory_bank": "blog"})
            )
            assert run.annotations["memory_bank"] == "blog"
            harness.turn_completed(turn_event("s1", "t1", status="failed"))
            harness.turn_completed(turn_event("s1", "t1", status="failed"))  # redelivered
            [delivery] = queue.wait_done("memx-s1-t1")
            assert delivery.function_id == "memory::extract-job"
            assert delivery.data["bank"] == "blog" and delivery.result["ok"] is True
            queue.wait_idle()
            assert len(queue.enqueued) == 1

    def test_session_deleted_drops_what_the_worker_kept(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        with (
            FakeHarness(engine.url) as harness,
            FakeState(engine.url) as state,
            FakeSessions(engine.url) as sessions,
        ):
            worker: WorkerProcess = spawn()
            sessions.add("s1")
            sessions.deleted_bindings.wait(1)
            harness.hook(envelope("s1", "t1", 0, [user_message("hi")]))
            worker.stop()  # flushes the record's pending write: it is in the state worker now
            assert "s1" in state.data["memory_sessions"]
            state.data["memory_cursor"] = {"s1": {"last_entry_id": "e1"}, "s2": {"x": 1}}
            worker.start()
            engine.wait_binding("session::deleted", "memory::on-session-deleted")
            start = len(engine.frames)
            sessions.delete("s1")
            # The state worker answering the state::delete of each scope: the drops happened.
            for scope in ("memory_sessions", "memory_cursor"):
                _, _, forwarded = engine.wait_frame(
                    lambda d, _w, m, scope=scope: (
                        d == "out"
                        and m.get("type") == "invokefunction"
                        and m.get("function_id") == "state::delete"
                        and (m.get("data") or {}).get("scope") == scope
                    ),
                    start=start,
                )
                engine.wait_frame(
                    lambda d, _w, m, call=forwarded: (
                        d == "in"
                        and m.get("type") == "invocationresult"
                        and m.get("invocation_id") == call.get("invocation_id")
                    ),
                    start=start,
                )
            assert "s1" not in state.data.get("memory_sessions", {})
            assert state.data["memory_cursor"] == {"s2": {"x": 1}}  # its cursor, and only its


class TestConfiguration:
    def test_a_change_hot_reloads_and_a_bad_data_dir_keeps_the_last_good_store(
        self, engine: EngineDouble, spawn: Any, cli: Cli, tmp_path: Path
    ) -> None:
        compose = tmp_path / "compose"
        spawn(env={"III_COMPOSE_DIR": str(compose)}, data_dir_flag=False)
        stored = engine.config_value("memory")
        assert stored["recall_limit"] == 6 and stored["decay_half_life_days"] == 60
        for i in range(4):
            cli.call("memory::save", {"text": f"The user owns guitar number {i}."})
        engine.set_config("memory", {**stored, "recall_limit": 2})
        assert cli.call("memory::on-config-change", {"id": "memory"})["ok"] is True
        assert len(cli.call("memory::recall", {"query": "guitar"})["memories"]) == 2

        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where a directory should be")
        engine.set_config("memory", {**stored, "data_dir": str(blocker / "memory")})
        with pytest.raises(InvocationError) as refused:
            cli.call("memory::on-config-change", {"id": "memory"})
        assert refused.value.message.startswith("storage: ")
        cli.call("memory::save", {"text": "Saved after the bad change."})
        assert (compose / "data" / "memory" / "main" / "memories.jsonl").read_text().count(
            "Saved after the bad change."
        ) == 1

        moved = tmp_path / "elsewhere"
        engine.set_config("memory", {**stored, "data_dir": str(moved)})
        cli.call("memory::on-config-change", {"id": "memory"})
        assert cli.call("memory::bank::list", {})["banks"] == []
        cli.call("memory::save", {"text": "Lands in the new data dir."})
        assert (moved / "main" / "memories.jsonl").exists()

    def test_the_entry_id_follows_iii_config_name(self, engine: EngineDouble, spawn: Any) -> None:
        spawn(env={"III_CONFIG_NAME": "memory-blue"})
        assert engine.config_value("memory-blue")["default_bank"] == "main"
        assert [b["config"]["configuration_id"] for b in engine.bindings("configuration")] == [
            "memory-blue"
        ]

    def test_a_stored_value_is_never_overwritten_by_the_seed(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        worker: WorkerProcess = spawn()
        engine.set_config("memory", {**engine.config_value("memory"), "recall_limit": 3})
        worker.restart()
        assert engine.config_value("memory")["recall_limit"] == 3

    def test_a_value_an_older_worker_stored_that_this_version_refuses_still_starts_it(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """An engine that ran the public Rust worker keeps its entry: `recall_limit: 150` (it
        capped a recall at 100 when called, not in its schema) and keys this version does not
        have. Once our schema replaced its own, the engine's `configuration::get` refused the
        stored value (SCHEMA_INVALID) and the worker stopped at start with
        `sibling_unavailable`. Now it reads the value raw, expands `${VAR:default}` as the
        engine would, takes the nearest allowed value (or the default) for each field it
        refuses, never writes the entry, and doctor names what it adjusted."""
        legacy_schema = {
            "type": "object",
            "properties": {
                "recall_limit": {"type": "integer"},
                "default_bank": {"type": "string"},
                "decay_half_life_days": {"type": "number"},
                "recall_budget_tokens": {"type": "integer"},
                "graph_enabled": {"type": "boolean"},
            },
        }
        legacy = {
            "recall_limit": 150,
            "default_bank": "${LEGACY_BANK_UNSET:team}",
            "decay_half_life_days": 30,
            "recall_budget_tokens": "${LEGACY_BUDGET_UNSET:800}",  # typed as the number
            "graph_enabled": True,
        }
        engine.store_config("memory", legacy_schema, legacy)
        spawn()
        for i in range(8):
            cli.call("memory::save", {"text": f"The user owns guitar number {i}."})
        # Clamped to 100, not the default 6; the bank is the expanded placeholder's default.
        found = cli.call("memory::recall", {"bank": "team", "query": "guitar"})["memories"]
        assert len(found) == 8
        assert engine.config_value("memory") == legacy  # the user's entry is never rewritten
        checks = {c["name"]: c for c in cli.call("memory::doctor", {})["checks"]}
        adjusted = checks["configuration-valid"]
        assert adjusted["ok"] is False
        assert "recall_limit" in adjusted["detail"] and "graph_enabled" in adjusted["detail"]
        assert "decay_half_life_days" not in adjusted["detail"]
        assert "recall_budget_tokens" not in adjusted["detail"]

    def test_a_configuration_worker_that_fails_at_start_stops_it_as_sibling_unavailable(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        """README's Errors table: a sibling that timed out or failed is `sibling_unavailable`.
        The configuration worker failing at start stopped the worker with `internal: cannot read
        configuration …`, a code no client knows (a change event failing the same way already
        said `sibling_unavailable`)."""

        def timed_out(*_args: Any) -> None:
            raise EngineError("TIMEOUT", "invocation timed out after 5000ms")

        engine._builtins["configuration::get"] = timed_out
        worker: WorkerProcess = spawn(start=False)
        code, _out = worker.run_to_exit()
        assert code == 1
        [error] = [
            json.loads(line) for line in worker.log().splitlines() if line.startswith('{"code"')
        ]
        assert error["code"] == "sibling_unavailable"
        assert error["message"].startswith("cannot read configuration memory: TIMEOUT")


class TestShutdown:
    @pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
    def test_a_signal_stops_it_cleanly_and_releases_the_data_dir(
        self, engine: EngineDouble, spawn: Any, sig: int
    ) -> None:
        worker: WorkerProcess = spawn()
        assert worker.stop(sig) == 0
        assert [e["reason"] for e in worker.events("stopping")] == [signal.Signals(sig).name]
        assert worker.events("stopped")
        worker.start()  # the lock was released: a new process opens the same data dir


class TestConnection:
    def test_a_dropped_connection_reregisters_and_keeps_serving(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        spawn()
        cli.call("memory::save", {"text": "Saved before the drop."})
        before = engine.registration_count("memory::save")
        engine.drop_connections()
        engine.wait_function("memory::save", min_count=before + 1, timeout=30)
        engine.wait_binding("configuration", "memory::on-config-change", timeout=30)
        with Cli(engine.url) as again:
            found = again.call("memory::recall", {"query": "saved before the drop"})
        assert found["memories"][0]["memory"]["text"] == "Saved before the drop."

    def test_a_configuration_entry_expired_while_the_worker_was_away_is_registered_again(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """An engine whose configuration worker has a `ttl_seconds` deletes an entry once no
        binding has named it for that long, and the worker's own binding went with its
        connection. Back, it read "absent" and ran on without an entry: the console's Settings
        had nothing to edit and `configuration::set` answered NOT_REGISTERED until a restart."""
        spawn()
        engine.wait_binding("configuration", "memory::on-config-change", timeout=30)
        stored = engine.config_value("memory")
        engine.set_config_ttl(0.2)
        before = engine.registration_count("memory::save")
        with engine.holding_connections():
            assert engine.drop_worker("memory") == 1
            engine.wait_config("memory", present=False)  # expired while the worker is away
        engine.wait_function("memory::save", min_count=before + 1, timeout=30)
        engine.wait_config("memory", timeout=15)
        assert engine.config_value("memory") == stored  # the settings it runs on
        changed = {**stored, "recall_limit": 3}
        assert cli.call("configuration::set", {"id": "memory", "value": changed})

    def test_a_configuration_entry_deleted_while_the_worker_runs_is_registered_again(
        self, engine: EngineDouble, spawn: Any
    ) -> None:
        """The same when the entry goes while the worker is connected (its file deleted under the
        fs adapter): `configuration:deleted` was not listened to."""
        spawn()
        engine.wait_binding("configuration", "memory::on-config-change", timeout=30)
        stored = engine.config_value("memory")
        engine.delete_config("memory")
        engine.wait_config("memory", timeout=15)
        assert engine.config_value("memory") == stored

    def test_a_binding_removed_while_the_worker_was_away_gets_no_more_events(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """While the worker is away the engine parks its bindings, forgets the ones removed
        meanwhile (it has no provider to tell) and, on its return, replays those still held.
        The worker kept the bindings of its previous connection as well: a subscriber that
        unbound during the outage went on hearing of every write."""
        spawn()
        with (
            FakeSubscriber(engine.url, "memory::item-changed") as gone,
            FakeSubscriber(engine.url, "memory::item-changed") as kept,
        ):
            engine.wait_binding("memory::item-changed", gone.function_id)
            engine.wait_binding("memory::item-changed", kept.function_id)
            before = engine.registration_count("memory::save")
            with engine.holding_connections():
                assert engine.drop_worker("memory") == 1
                gone.binding.unregister()  # the engine cannot tell the absent worker
                gone.sync()
            engine.wait_function("memory::save", min_count=before + 1, timeout=30)
            engine.wait_settled(timeout=30)  # the bindings still held are back with the worker
            start = len(engine.frames)
            cli.call("memory::save", {"text": "Saved after the outage."})
            [event] = kept.wait_events(1)
            assert event["memory"]["text"] == "Saved after the outage."
            sent = [
                m.get("function_id")
                for d, _w, m in engine.frames[start:]
                if d == "in" and m.get("type") == "invokefunction"
            ]
            assert kept.function_id in sent
            assert gone.function_id not in sent  # sent with `kept`'s, from the same write
            assert gone.events == []

    def test_a_bank_switched_while_the_worker_was_away_applies_from_the_next_turn(
        self, engine: EngineDouble, spawn: Any, cli: Cli
    ) -> None:
        """A session's meta is cached until `session::meta-updated` says it changed; while the
        worker is away that event reaches nobody. Kept across the outage, the old meta went on
        choosing the session's bank: the next turn was told the old bank's memories and its
        extraction wrote into the bank the user had switched away from."""
        with FakeHarness(engine.url) as harness, FakeSessions(engine.url) as sessions:
            spawn()
            cli.call("memory::save", {"text": "Posts go out on Fridays.", "bank": "blog"})
            cli.call("memory::save", {"text": "Risotto needs arborio rice.", "bank": "cooking"})
            sessions.add("s1", metadata={"memory_bank": "blog"})
            first = harness.hook(envelope("s1", "t1", 0, [user_message("posts and risotto?")]))
            assert first.annotations["memory_bank"] == "blog"
            before = engine.registration_count("memory::save")
            with engine.holding_connections():
                assert engine.drop_worker("memory") == 1
                sessions.set_meta("s1", {"memory_bank": "cooking"})  # heard by nobody
            engine.wait_function("memory::save", min_count=before + 1, timeout=30)
            engine.wait_binding(
                "harness::hook::pre-generate", "memory::hook::pre-generate", timeout=30
            )
            window = [user_message("posts and risotto?"), *first.appended, user_message("rice?")]
            second = harness.hook(envelope("s1", "t2", 0, window))
            assert second.annotations["memory_bank"] == "cooking"
            assert any("arborio" in t for t in texts(second.appended))
            assert not any("Fridays" in t for t in texts(second.appended))
