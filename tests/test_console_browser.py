"""The console in a real browser: headless Chromium (Debian's package) driven by Playwright,
against a real `memory-worker serve` on a temp data dir.

Every wait is on a condition (Playwright's auto-waiting `expect`, or a readiness line), never a
sleep. Each test works in its own bank so the module can share one server. Skips (with the reason)
only when no Chromium or no Playwright is installed; CI installs both.

`UPDATE_SCREENSHOTS=1` rewrites the panel screenshots under docs/console/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from .processes import read_line

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed (pip install '.[dev]')"
)
expect = playwright_api.expect

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "console"
UPDATE_SHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = (
    60.0  # a bound, not a wait: a cold interpreter on a loaded 2-core machine (as tests/served.py)
)
_ISOLATED = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}

expect.set_options(timeout=10_000)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    data_dir: Path
    config: Path

    def call(self, function_id: str, payload: dict[str, Any] | None = None) -> Any:
        """A call from another door (as curl or an agent would): not through the page."""
        request = urllib.request.Request(
            f"{self.url}/{function_id.replace('::', '/')}",
            data=json.dumps(payload or {}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with _OPENER.open(request, timeout=10) as response:
            return json.loads(response.read())


def _serve(root: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], str]:
    """`memory-worker serve --standalone` on `root`'s data dir and settings; its URL once ready.
    Its stderr goes on (appended) in `root/serve.stderr`."""
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
    env["MEMORY_EMBEDDER"] = "none"  # lexical: fast and deterministic scores
    with (root / "serve.stderr").open("ab") as stderr:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "memory_worker", "serve", "--standalone"),
                *("--port", str(port), "--data-dir", str(root / "data")),
                *("--config", str(root / "memory.yaml")),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            bufsize=0,
        )
    try:
        line = read_line(proc, time.monotonic() + START_TIMEOUT_S)
        url = line.removeprefix("memory-worker serving on ")
        # The next line is for a person: where the console is.
        assert (
            read_line(proc, time.monotonic() + START_TIMEOUT_S)
            == f"console: open {url}/ in a browser"
        )
    except BaseException:
        _stop(proc)
        raise
    return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.fixture(name="server", scope="module")
def _server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("console")
    config = root / "memory.yaml"
    config.write_text("# the console test's settings\nrecall_limit: 6  # per turn\n")
    proc, url = _serve(root)
    try:
        yield Server(proc, url, root / "data", config)
    finally:
        _stop(proc)
    assert "Traceback" not in (root / "serve.stderr").read_text()


@pytest.fixture(name="browser", scope="module")
def _browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run does)")
    with playwright_api.sync_playwright() as driver:
        # A fresh temporary profile per launch (Playwright's own), removed at close.
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Tab:
    """One page plus everything it did: errors, and every request it sent."""

    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    refusals: set[int] = field(default_factory=lambda: {409})  # statuses the test provokes


@pytest.fixture(name="open_tab")
def _open_tab(browser: Any, server: Server) -> Iterator[Any]:
    contexts: list[Any] = []
    tabs: list[Tab] = []

    def open_tab(
        bank: str,
        panel: str = "memories",
        *,
        viewport: dict[str, int] = DESKTOP,
        query: str = "",
        context: Any = None,
    ) -> Tab:
        if context is None:
            context = browser.new_context(viewport=viewport)
            contexts.append(context)
        page = context.new_page()
        tab = Tab(page)
        page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
        page.on("console", lambda msg: _console_error(tab, msg))
        page.on("request", lambda request: tab.requests.append(request))
        page.goto(f"{server.url}/{query}#/bank/{bank}/{panel}")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "live")
        expect(page.locator(".mw-bank-name")).to_have_text(bank)
        tabs.append(tab)
        return tab

    yield open_tab
    for context in contexts:
        context.close()
    for tab in tabs:
        assert tab.errors == [], tab.errors


def _console_error(tab: Tab, message: Any) -> None:
    """Every console error fails the test, except Chromium's line for a call the test makes fail
    on purpose (`Tab.refusals`): a stale revision is answered 409 (the page shows it as a
    conflict), a bad setting 400 in the one test that sends one."""
    if message.type == "error" and not any(
        f"status of {status}" in message.text for status in tab.refusals
    ):
        tab.errors.append(message.text)


def _bank(server: Server, name: str) -> str:
    server.call("memory::bank::create", {"name": name})
    return name


def _save(server: Server, bank: str, text: str, **extra: Any) -> Any:
    return server.call("memory::save", {"bank": bank, "text": text, **extra})


def _rule(server: Server, bank: str, name: str, content: str) -> Any:
    return server.call("memory::rule::set", {"bank": bank, "name": name, "content": content})


def _row(page: Any, text: str) -> Any:
    return page.locator(".mw-memory").filter(has=page.locator(".mw-memory-text", has_text=text))


# --- banks ---------------------------------------------------------------------------------------


def test_a_bank_created_in_the_rail_is_selected_and_deleted_to_trash_after_confirming(
    server: Server, open_tab: Any
) -> None:
    tab = open_tab(_bank(server, "rail-start"))
    page = tab.page
    page.get_by_label("New bank name").fill("Travel Plans")
    expect(page.get_by_label("New bank name")).to_have_value("travel-plans")
    page.get_by_role("button", name="Create").click()
    expect(page.locator(".mw-bank-name")).to_have_text("travel-plans")
    rail = page.locator(".mw-bank-button", has_text="travel-plans")
    expect(rail).to_have_attribute("aria-current", "true")
    assert "travel-plans" in {b["name"] for b in server.call("memory::bank::list")["banks"]}

    page.get_by_role("button", name="Delete bank…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text('Move bank "travel-plans" to the trash?')
    dialog.get_by_role("button", name="Cancel").click()  # cancelling changes nothing
    expect(dialog).to_have_count(0)
    assert "travel-plans" in {b["name"] for b in server.call("memory::bank::list")["banks"]}

    page.get_by_role("button", name="Delete bank…").click()
    page.get_by_role("dialog").get_by_role("button", name="Move to trash").click()
    expect(rail).to_have_count(0)
    banks = [b["name"] for b in server.call("memory::bank::list")["banks"]]
    assert "travel-plans" not in banks
    assert any(p.name.startswith("travel-plans-") for p in (server.data_dir / ".trash").iterdir())
    # The workspace moves on to the first remaining bank, as at start…
    expect(page.locator(".mw-bank-name")).to_have_text(banks[0])
    label = page.locator(".mw-bank-label", has_text=re.compile(f"^{re.escape(banks[0])}$"))
    shown = page.locator(".mw-bank-button").filter(has=label)
    expect(shown).to_have_attribute("aria-current", "true")
    # …and nothing asks about the deleted bank again, not even the refresh its own "trashed"
    # event sets off (CI saw those answered 404). A later event is waited for, so that refresh
    # has run by the time the requests are read.
    _bank(server, "rail-after")
    expect(page.locator(".mw-bank-button", has_text="rail-after")).to_have_count(1)
    [delete] = [i for i, r in enumerate(tab.requests) if r.url.endswith("/memory/bank/delete")]
    asked = [r.url for r in tab.requests[delete + 1 :] if "travel-plans" in (r.post_data or "")]
    assert asked == []


def test_rail_counts_follow_changes_made_elsewhere(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "counts")
    page = open_tab(bank).page
    counts = page.locator(".mw-bank-button", has_text=bank).locator(".mw-bank-meta")
    expect(counts).to_have_text("0 memories · 0 pinned · 0 rules")
    _save(server, bank, "Counts move live", pinned=True)
    _rule(server, bank, "tone", "Be brief.")
    expect(counts).to_have_text("1 memory · 1 pinned · 1 rule")


def test_a_change_seen_while_the_bank_list_is_in_flight_still_reaches_the_rail(
    server: Server, open_tab: Any
) -> None:
    """The order a loaded machine produces: a second change arrives while the rail's list call
    for the first is still out, so that call's answer predates it. The rail must ask again
    rather than keep the older answer. The test forces the order: the first list call is
    answered by the server at once, the rule is written, and only then is the answer delivered."""
    bank = _bank(server, "counts-late")
    page = open_tab(bank, "rules").page
    counts = page.locator(".mw-bank-button", has_text=bank).locator(".mw-bank-meta")
    expect(counts).to_have_text("0 memories · 0 pinned · 0 rules")
    held: list[tuple[Any, Any]] = []
    holding = True

    def hold(route: Any) -> None:
        if not holding:
            route.continue_()
            return
        held.append((route, route.fetch()))  # the server's answer now, before the rule exists
        if len(held) == 1:
            _rule(server, bank, "tone", "Be brief.")  # the change the answer does not know

    page.route("**/memory/bank/list", hold)
    _save(server, bank, "Counts move live", pinned=True)
    # The rule's live event has been handled (its rules refresh drew the card) while the list
    # call was still out.
    expect(page.locator(".mw-rule[data-rule='tone']")).to_have_count(1)
    holding = False
    for route, answer in held:
        route.fulfill(response=answer)
    expect(counts).to_have_text("1 memory · 1 pinned · 1 rule")


def test_bank_settings_are_shown_and_an_edit_lands_in_bank_yaml(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "family")
    tab = open_tab(bank)
    tab.refusals.add(400)  # the bad retention below is refused on purpose
    page = tab.page
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text('Settings of bank "family"')
    expect(dialog.get_by_label("max memories (0 = unlimited)")).to_have_value("10000")
    dialog.get_by_role("checkbox").check()
    dialog.get_by_label("Retention days per category").fill("context=30")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog).to_have_count(0)
    settings = server.call("memory::bank::get", {"name": bank})["bank"]["settings"]
    assert settings["subject_scoping"] is True and settings["retention"] == {"context": 30}
    text = (server.data_dir / bank / "bank.yaml").read_text()
    assert "subject_scoping: true" in text and "max_memories" not in text  # only what changed

    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Retention days per category").fill("gossip=3")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog).to_contain_text("invalid_input")  # refused whole: the dialog stays, says why
    dialog.get_by_role("button", name="Close").click()
    assert server.call("memory::bank::get", {"name": bank})["bank"]["settings"]["retention"] == {
        "context": 30
    }


def test_a_bank_settings_save_from_a_stale_dialog_is_refused_and_offers_a_reload(
    server: Server, open_tab: Any
) -> None:
    """Two tabs open one bank's settings; the first saves, then the second: its dialog was
    read before the first's change, so its save is refused (nothing overwritten), the dialog
    says why and offers a reload showing what is there now, from which a save lands."""
    bank = _bank(server, "settings-two-tabs")
    first, second = open_tab(bank).page, open_tab(bank).page
    dialogs = []
    for page in (first, second):
        page.get_by_role("button", name="Settings…").click()
        dialogs.append(page.get_by_role("dialog"))
        expect(dialogs[-1].get_by_label("max memories (0 = unlimited)")).to_have_value("10000")
    dialogs[0].get_by_label("max memories (0 = unlimited)").fill("50")
    dialogs[0].get_by_role("button", name="Save settings").click()
    expect(dialogs[0]).to_have_count(0)

    stale = dialogs[1]
    stale.get_by_label("max memories (0 = unlimited)").fill("70")
    stale.get_by_role("button", name="Save settings").click()
    expect(stale).to_contain_text("changed elsewhere")
    settings = server.call("memory::bank::get", {"name": bank})["bank"]["settings"]
    assert settings["max_memories"] == 50  # the first tab's change was not overwritten

    stale.get_by_role("button", name="Reload settings").click()
    fresh = second.get_by_role("dialog")
    expect(fresh.get_by_label("max memories (0 = unlimited)")).to_have_value("50")
    expect(fresh.get_by_role("button", name="Reload settings")).to_be_hidden()
    fresh.get_by_label("max memories (0 = unlimited)").fill("70")
    fresh.get_by_role("button", name="Save settings").click()
    expect(fresh).to_have_count(0)
    settings = server.call("memory::bank::get", {"name": bank})["bank"]["settings"]
    assert settings["max_memories"] == 70


def test_a_memorys_subject_and_category_are_shown(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "people")
    _save(server, bank, "Ana plays the cello.", subject="ana", category="preference")
    page = open_tab(bank).page
    row = _row(page, "Ana plays the cello.")
    expect(row.locator(".mw-memory-meta")).to_contain_text("about ana")
    expect(row.locator(".mw-memory-meta")).to_contain_text("preference")


# --- rules ---------------------------------------------------------------------------------------


def test_a_rule_written_in_the_editor_is_saved_and_emptying_it_deletes_after_confirming(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "rules-edit")
    page = open_tab(bank, "rules").page
    page.get_by_label("New rule name").fill("Tone Of Voice")
    page.get_by_role("button", name="Add rule").click()
    editor = page.get_by_label("Rule tone-of-voice")
    expect(editor).to_be_focused()
    editor.fill("# Tone\nWarm, brief, no exclamation marks.")
    card = page.locator(".mw-rule[data-rule='tone-of-voice']")
    expect(card.locator(".mw-rule-state")).to_have_text("unsaved changes")
    editor.press("Control+s")  # the keyboard save
    expect(card).to_have_attribute("data-status", "clean")
    [rule] = server.call("memory::rule::list", {"bank": bank})["rules"]
    assert rule["content"] == "# Tone\nWarm, brief, no exclamation marks."

    editor.fill("")
    card.get_by_role("button", name="Save").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete rule").click()
    expect(card).to_have_count(0)
    assert server.call("memory::rule::list", {"bank": bank})["rules"] == []


def test_the_learned_rule_is_marked_auto_managed(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "learned")
    _rule(server, bank, "learned", "- Use metric units.")
    _rule(server, bank, "style", "Short.")
    page = open_tab(bank, "rules").page
    expect(page.locator(".mw-rule[data-rule='learned'] .mw-badge-auto")).to_have_text(
        "auto-managed"
    )
    expect(page.locator(".mw-rule[data-rule='style'] .mw-badge-auto")).to_have_count(0)


def test_two_tabs_editing_one_rule_the_second_save_is_refused_with_a_visible_conflict(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "two-tabs")
    _rule(server, bank, "style", "Original.")
    first = open_tab(bank, "rules").page
    second = open_tab(bank, "rules").page
    first.get_by_label("Rule style").fill("First tab's version.")
    second.get_by_label("Rule style").fill("Second tab's version.")
    first.get_by_label("Rule style").press("Control+s")
    expect(first.locator(".mw-rule[data-rule='style']")).to_have_attribute("data-status", "clean")

    second.get_by_label("Rule style").press("Control+s")
    card = second.locator(".mw-rule[data-rule='style']")
    expect(card).to_have_attribute("data-status", "conflict")
    expect(card.get_by_role("alert")).to_contain_text("stale revision")
    expect(second.get_by_label("Rule style")).to_have_value("Second tab's version.")  # kept
    [rule] = server.call("memory::rule::list", {"bank": bank})["rules"]
    assert rule["content"] == "First tab's version."  # nothing was overwritten silently

    card.get_by_role("button", name="Compare with theirs").click()
    expect(card.locator(".mw-theirs")).to_have_text("First tab's version.")
    card.get_by_role("button", name="Overwrite with mine").click()  # a conscious overwrite
    expect(card).to_have_attribute("data-status", "clean")
    [rule] = server.call("memory::rule::list", {"bank": bank})["rules"]
    assert rule["content"] == "Second tab's version."


# --- memories ------------------------------------------------------------------------------------


def test_save_search_pin_edit_and_delete_a_memory(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "crud")
    _save(server, bank, "The office plant needs water on Mondays")
    page = open_tab(bank).page
    page.get_by_label("New memory text").fill("The user drinks green tea every afternoon")
    page.get_by_label("New memory tags").fill("drinks, habits")
    page.get_by_role("button", name="Save memory").click()
    row = _row(page, "green tea")
    expect(row).to_have_count(1)
    expect(page.locator(".mw-memory").first).to_contain_text("green tea")  # newest first
    expect(row.locator(".mw-memory-labels")).to_contain_text("#drinks")

    page.keyboard.press("Escape")
    page.locator("body").press("/")  # the search shortcut
    expect(page.get_by_label("Search memories")).to_be_focused()
    page.get_by_label("Search memories").fill("what tea does the user drink")
    page.get_by_label("Search memories").press("Enter")
    expect(page.locator(".mw-summary")).to_contain_text("retrieval bm25-entity")
    expect(page.locator(".mw-memory")).to_have_count(1)
    expect(row.locator(".mw-score-text")).to_have_text(re.compile(r"^\d+\.\d+$"))
    page.get_by_label("Search memories").fill("")
    page.get_by_label("Search memories").press("Enter")
    expect(page.locator(".mw-memory")).to_have_count(2)

    row.get_by_role("button", name="Pin").click()
    expect(row.locator(".mw-badge-pin")).to_have_text("pinned")
    expect(row.get_by_role("button", name="Unpin")).to_have_attribute("aria-pressed", "true")

    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user drinks jasmine tea every afternoon")
    page.get_by_role("button", name="Save", exact=True).click()
    edited = _row(page, "jasmine tea")
    expect(edited.locator(".mw-memory-meta")).to_contain_text("rev 2")
    memories = server.call("memory::list", {"bank": bank})["memories"]
    assert "The user drinks jasmine tea every afternoon" in [m["text"] for m in memories]

    edited.get_by_role("button", name="Unpin").click()  # a pinned memory is not deleted
    expect(edited.locator(".mw-badge-pin")).to_have_count(0)
    edited.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("jasmine tea")
    dialog.get_by_role("button", name="Delete memory").click()
    expect(edited).to_have_count(0)
    assert [m["text"] for m in server.call("memory::list", {"bank": bank})["memories"]] == [
        "The office plant needs water on Mondays"
    ]
    page.get_by_text("show history").click()  # the tombstone is still there, marked
    expect(_row(page, "jasmine tea").locator(".mw-badge-retired")).to_have_text("deleted")


def test_a_memory_is_superseded_by_another_picked_in_its_dialog_after_confirming(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "supersede")
    old = _save(server, bank, "The user lives in Lisbon")["memory"]
    new = _save(server, bank, "The user moved to Porto in May")["memory"]
    _save(server, bank, "The user drinks green tea")
    page = open_tab(bank).page
    row = _row(page, "Lisbon")
    row.get_by_role("button", name="Supersede…").click()
    picker = page.get_by_role("dialog", name="Mark this memory as superseded")
    expect(picker).to_contain_text("The user lives in Lisbon")
    expect(picker.get_by_role("radio")).to_have_count(2)  # the others, never itself
    picker.get_by_label("Find the memory that replaces it").fill("Porto")
    expect(picker.get_by_role("radio")).to_have_count(1)
    picker.get_by_role("radio", name="The user moved to Porto in May").check()
    picker.get_by_label("Reason (optional)").fill("moved house")
    picker.get_by_role("button", name="Supersede…").click()
    confirm = page.get_by_role("dialog", name="Supersede this memory?")
    expect(confirm).to_contain_text("The user lives in Lisbon")
    expect(confirm).to_contain_text("The user moved to Porto in May")
    confirm.get_by_role("button", name="Cancel").click()  # cancelling changes nothing
    expect(confirm).to_have_count(0)
    got = server.call("memory::get", {"bank": bank, "id": old["id"]})["memory"]
    assert got.get("invalid_at") is None

    picker.get_by_role("button", name="Supersede…").click()
    page.get_by_role("dialog", name="Supersede this memory?").get_by_role(
        "button", name="Supersede"
    ).click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(row).to_have_count(0)  # out of the live list
    got = server.call("memory::get", {"bank": bank, "id": old["id"]})["memory"]
    assert got["superseded_by"] == new["id"] and got["invalid_at"] is not None
    page.get_by_role("checkbox", name="show history").check()
    expect(row.locator(".mw-badge-retired")).to_have_text(f"superseded by {new['id']}")


def test_a_pinned_memory_offers_no_supersede(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "supersede-pinned")
    _save(server, bank, "Keep this one forever", pinned=True)
    page = open_tab(bank).page
    expect(_row(page, "Keep this one").get_by_role("button", name="Supersede…")).to_be_disabled()


def test_a_supersede_confirmed_after_the_replacement_changed_is_refused(
    server: Server, open_tab: Any
) -> None:
    """The replacement was edited while the dialog showed its old text: retiring the memory into
    a fact it no longer states is refused (its revision moved), and nothing is retired."""
    bank = _bank(server, "supersede-stale")
    old = _save(server, bank, "The meeting is on Tuesday")["memory"]
    new = _save(server, bank, "The meeting moved to Thursday")["memory"]
    page = open_tab(bank).page
    _row(page, "on Tuesday").get_by_role("button", name="Supersede…").click()
    picker = page.get_by_role("dialog", name="Mark this memory as superseded")
    picker.get_by_role("radio", name="The meeting moved to Thursday").check()
    server.call("memory::update", {"bank": bank, "id": new["id"], "text": "The meeting is off"})
    picker.get_by_role("button", name="Supersede…").click()
    page.get_by_role("dialog", name="Supersede this memory?").get_by_role(
        "button", name="Supersede"
    ).click()
    expect(picker).to_contain_text("stale revision")
    got = server.call("memory::get", {"bank": bank, "id": old["id"]})["memory"]
    assert got.get("invalid_at") is None
    picker.get_by_role("button", name="Cancel").click()
    expect(picker).to_have_count(0)


def test_tag_chips_filter_the_list(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "tags")
    server.call("memory::save", {"bank": bank, "text": "Posts go out on Fridays", "tags": ["blog"]})
    server.call("memory::save", {"bank": bank, "text": "Gym on Tuesdays", "tags": ["health"]})
    page = open_tab(bank).page
    expect(page.locator(".mw-memory")).to_have_count(2)
    page.locator(".mw-chips .mw-chip", has_text="#blog").click()
    expect(page.locator(".mw-memory")).to_have_count(1)
    expect(page.locator(".mw-memory-text")).to_have_text("Posts go out on Fridays")
    page.locator(".mw-chips .mw-chip", has_text="#blog").click()
    expect(page.locator(".mw-memory")).to_have_count(2)


def test_paging_walks_the_bank_newest_first(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "paging")
    for i in range(55):
        server.call("memory::save", {"bank": bank, "text": f"Numbered fact {i:02d} for paging"})
    page = open_tab(bank).page
    expect(page.locator(".mw-memory")).to_have_count(50)
    expect(page.locator(".mw-memory-text").first).to_have_text("Numbered fact 54 for paging")
    expect(page.locator(".mw-page-text")).to_have_text("1–50 of 55")
    page.get_by_role("button", name="Older →").click()
    expect(page.locator(".mw-memory")).to_have_count(5)
    expect(page.locator(".mw-memory-text").last).to_have_text("Numbered fact 00 for paging")


def test_each_row_shows_entities_tags_corroboration_confidence_time_and_session(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "row-meta")
    payload = {
        "bank": bank,
        "text": "Ana leads the billing project",
        "entities": ["ana"],
        "tags": ["work"],
        "session_id": "sess-1234567890abcdef",
    }
    server.call("memory::save", payload)
    server.call("memory::save", payload)  # the same text again: reinforced
    page = open_tab(bank).page
    row = _row(page, "billing project")
    expect(row.locator(".mw-entity")).to_have_text("ana")
    expect(row.locator(".mw-memory-labels")).to_contain_text("#work")
    meta = row.locator(".mw-memory-meta")
    expect(meta).to_contain_text("saved explicitly")
    expect(meta).to_contain_text("seen ×2")
    expect(meta).to_contain_text("just now")
    expect(meta).to_contain_text("session sess-1234567")


def test_a_memory_saved_elsewhere_appears_live_without_a_reload(
    server: Server, open_tab: Any
) -> None:
    """Saved with the CLI while the server holds the data dir: the CLI forwards the call to the
    server (one writer, many doors), and the open tab shows it live."""
    bank = _bank(server, "live")
    page = open_tab(bank).page
    page.evaluate("window.__sameDocument = true")
    saved = subprocess.run(
        [
            *(sys.executable, "-m", "memory_worker", "trigger", "memory::save"),
            *(f"bank={bank}", "text=Saved by another door while the tab is open"),
            *("--data-dir", str(server.data_dir)),
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in _ISOLATED},
        timeout=60,
        check=False,
    )
    assert saved.returncode == 0, saved.stderr
    expect(_row(page, "another door")).to_have_count(1)
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_live_arrivals_never_move_the_row_being_edited(server: Server, open_tab: Any) -> None:
    """While a row is being edited, memories arriving live are held and counted in the summary
    line (a fixed-height slot): nothing on the page moves, the draft and its focus stay; ending
    the edit lets them in."""
    bank = _bank(server, "no-shift")
    _save(server, bank, "A memory being edited right now")
    page = open_tab(bank).page
    row = _row(page, "being edited")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("My unsaved draft")
    watched = ".mw-header, .mw-tabs, .mw-save, .mw-search-row, .mw-summary, .mw-memory, .mw-edit"
    rects = (
        f"() => [...document.querySelectorAll('{watched}')]"
        ".map(e => JSON.stringify(e.getBoundingClientRect()))"
    )
    before = page.evaluate(rects)
    page.evaluate(
        """() => { window.__shifts = 0; new PerformanceObserver(list => { for (const e of
        list.getEntries()) if (!e.hadRecentInput) { window.__shifts += e.value;
        window.__why = (window.__why || []).concat(e.sources.map(x => (x.node && (x.node.className
        || x.node.nodeName)) + ' ' + JSON.stringify([x.previousRect, x.currentRect]))) } })
        .observe({type: 'layout-shift'}) }"""
    )
    for i in range(5):
        _save(server, bank, f"Live arrival number {i} while editing")
    expect(page.locator(".mw-bank-counts")).to_contain_text("6 memories")
    expect(page.locator(".mw-held")).to_have_text("5 new memories — show")
    assert page.evaluate(rects) == before
    assert page.evaluate("window.__shifts") == 0, page.evaluate("window.__why")
    expect(page.get_by_label("Edit memory text")).to_have_value("My unsaved draft")
    expect(page.get_by_label("Edit memory text")).to_be_focused()
    page.locator(".mw-editing").get_by_role("button", name="Cancel").click()
    expect(page.locator(".mw-memory")).to_have_count(6)
    expect(page.locator(".mw-held")).to_be_hidden()


def test_a_memorys_history_lists_every_revision(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "history")
    saved = _save(server, bank, "The user lives in Lisbon")
    memory_id = saved["memory"]["id"]
    server.call(
        "memory::update", {"bank": bank, "id": memory_id, "text": "The user lives in Porto"}
    )
    server.call("memory::pin", {"bank": bank, "id": memory_id, "pinned": True})
    page = open_tab(bank).page
    row = _row(page, "Porto")
    row.get_by_role("button", name="History").click()
    history = row.locator(".mw-history")
    expect(history.locator(".mw-revision")).to_have_count(3)
    expect(history.locator(".mw-history-title")).to_have_text("3 revisions, oldest first")
    kinds = history.locator(".mw-revision-kind")
    expect(kinds).to_have_text(["created", "text edited", "pinned"])
    expect(history.locator(".mw-revision").first).to_contain_text("The user lives in Lisbon")
    server.call("memory::pin", {"bank": bank, "id": memory_id, "pinned": False})
    expect(history.locator(".mw-revision")).to_have_count(4)  # an open history follows live


def test_an_edit_against_a_stale_revision_is_refused_and_the_draft_kept(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "stale-edit")
    saved = _save(server, bank, "The meeting is on Thursday")
    page = open_tab(bank).page
    row = _row(page, "meeting")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The meeting is on Friday")
    server.call("memory::update", {"bank": bank, "id": saved["memory"]["id"], "tags": ["work"]})
    page.get_by_role("button", name="Save", exact=True).click()
    editing = page.locator(".mw-editing")
    expect(editing.get_by_role("alert")).to_contain_text("stale revision")
    expect(page.get_by_label("Edit memory text")).to_have_value("The meeting is on Friday")
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert memory["text"] == "The meeting is on Thursday"
    rebase = editing.get_by_role("button", name="Load latest (keep my text)")
    rebase.click()
    expect(rebase).to_be_hidden()  # rebased on the revision read from the server
    editing.get_by_role("button", name="Save", exact=True).click()  # now knowingly over rev 1
    expect(_row(page, "on Friday")).to_have_count(1)
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert (memory["text"], memory["tags"]) == ("The meeting is on Friday", ["work"])


def test_a_live_refresh_landing_after_load_latest_does_not_bring_the_conflict_back(
    server: Server, open_tab: Any
) -> None:
    """The order a loaded machine produces (CI hit it): the other writer's change reaches the
    list only after the person has been refused and has loaded the latest. That late refresh
    carries the very revision the draft was just rebased on, so it must not say "changed
    elsewhere" again. The test holds the list's answers to force that order."""
    bank = _bank(server, "late-refresh")
    saved = _save(server, bank, "The train leaves at nine")
    tab = open_tab(bank)
    page = tab.page
    row = _row(page, "train leaves")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The train leaves at ten")
    held: list[Any] = []
    holding = True

    def hold(route: Any) -> None:  # answered only when the test lets go
        if holding:
            held.append(route)
        else:
            route.continue_()

    page.route("**/memory/list", hold)
    with page.expect_request("**/memory/list"):  # the live refresh the change below sets off
        server.call("memory::update", {"bank": bank, "id": saved["memory"]["id"], "tags": ["rail"]})
    editing = page.locator(".mw-editing")
    editing.get_by_role("button", name="Save", exact=True).click()
    expect(editing.get_by_role("alert")).to_contain_text("stale revision")
    rebase = editing.get_by_role("button", name="Load latest (keep my text)")
    rebase.click()
    expect(rebase).to_be_hidden()
    assert held, "the live refresh was not held"
    holding = False
    for route in held:
        route.continue_()
    expect(editing.locator(".mw-memory-labels")).to_contain_text("#rail")  # the late list landed
    expect(rebase).to_be_hidden()
    expect(editing.get_by_role("alert")).to_be_hidden()
    expect(page.get_by_label("Edit memory text")).to_have_value("The train leaves at ten")
    editing.get_by_role("button", name="Save", exact=True).click()
    expect(_row(page, "at ten")).to_have_count(1)
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert (memory["text"], memory["tags"]) == ("The train leaves at ten", ["rail"])


# --- preview, settings, doctor -------------------------------------------------------------------


def test_preview_shows_the_section_and_the_memories_in_order_with_ambient_ones_marked(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "preview")
    _rule(server, bank, "style", "Answer in one line.")
    _save(server, bank, "The user's dog is called Rex", pinned=True)
    _save(server, bank, "Invoices are due on the 5th")
    page = open_tab(bank, "preview").page
    page.get_by_label("Message to preview").fill("what is my dog called?")
    page.get_by_role("button", name="Preview", exact=True).click()
    result = page.locator(".mw-preview-result")
    expect(result.locator(".mw-summary")).to_contain_text("Retrieval bm25-entity")
    expect(result.locator("summary").first).to_have_text("System prompt gets: 1 rule")
    result.locator("summary").first.click()
    expect(result.locator(".mw-pre").first).to_contain_text("Answer in one line.")
    items = result.locator(".mw-preview-memory")
    expect(items.first).to_contain_text("Rex")
    expect(items.first.locator(".mw-score-text")).to_have_text(re.compile(r"^\d+\.\d+$"))
    preview = server.call("memory::preview", {"bank": bank, "query": "what is my dog called?"})
    assert [m["memory"]["text"] for m in preview["memories"]] == [
        t.strip() for t in items.locator(".mw-memory-text").all_inner_texts()
    ]
    ambient = sum(1 for m in preview["memories"] if m["score"] == 0)
    expect(result.locator(".mw-badge-ambient")).to_have_count(ambient)


def test_a_live_rerun_of_the_preview_keeps_the_message_being_typed(
    server: Server, open_tab: Any
) -> None:
    """A change elsewhere re-runs the last preview, and leaves the person's next message, half
    typed in the box, as they typed it."""
    bank = _bank(server, "preview-typing")
    _save(server, bank, "The user's dog is called Rex")
    page = open_tab(bank, "preview").page
    box = page.get_by_label("Message to preview")
    box.fill("what is my dog called?")
    page.get_by_role("button", name="Preview", exact=True).click()
    items = page.locator(".mw-preview-result .mw-preview-memory")
    expect(items.first).to_contain_text("Rex")
    box.fill("and where does the user li")
    _save(server, bank, "The user's dog Rex sleeps on the sofa")
    expect(items.filter(has_text="sleeps on the sofa")).to_have_count(1)  # the re-run landed
    expect(box).to_have_value("and where does the user li")


def test_another_bank_opens_on_an_empty_preview(server: Server, open_tab: Any) -> None:
    """The message box belongs to the bank's preview: picking another bank empties it with the
    result, so no message typed for one bank is previewed against the next by mistake."""
    first, second = _bank(server, "preview-first"), _bank(server, "preview-second")
    _save(server, second, "Memories of the second bank")
    page = open_tab(first, "preview").page
    page.get_by_label("Message to preview").fill("a message meant for the first bank")
    page.locator(".mw-bank-button", has_text=second).click()
    expect(page.locator(".mw-bank-name")).to_have_text(second)
    expect(page.get_by_label("Message to preview")).to_have_value("")


def test_settings_show_every_field_and_an_edit_lands_in_the_config_file(
    server: Server, open_tab: Any
) -> None:
    page = open_tab(_bank(server, "settings"), "settings").page
    expect(page.locator(".mw-banner")).to_have_attribute("data-editable", "true")
    expect(page.locator(".mw-setting")).to_have_count(len(json.loads(_settings_names())))
    expect(page.locator(".mw-setting[data-name='data_dir'] input")).to_be_disabled()
    expect(page.locator(".mw-setting[data-name='recall_limit']")).to_contain_text(
        "Max memories injected per turn"
    )
    page.locator("#mw-setting-recall_limit").fill("9")
    _save_settings(page, "recall_limit")
    expect(page.get_by_role("button", name="Save settings")).to_be_disabled()
    text = server.config.read_text()
    assert "recall_limit: 9  # per turn\n" in text
    assert text.startswith("# the console test's settings\n")  # the person's comments stay
    server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def _settings_names() -> str:
    from memory_worker.core.config import Settings

    return json.dumps(list(Settings.model_fields))


def test_doctor_lists_its_checks_with_what_each_degradation_means(
    server: Server, open_tab: Any
) -> None:
    page = open_tab(_bank(server, "doctor"), "doctor").page
    expect(page.locator(".mw-verdict")).to_have_attribute("data-ok", "true")
    writable = page.locator(".mw-check-item[data-check='data-dir-writable']")
    expect(writable).to_contain_text("required")
    embeddings = page.locator(".mw-check-item[data-check='embeddings']")
    expect(embeddings).to_have_class(re.compile("mw-warn"))  # MEMORY_EMBEDDER=none here
    expect(embeddings).to_contain_text("What this means: Without an embedder recall is lexical")
    # Every check says what it guards: `extraction` (off here: no engine, no endpoint) and
    # `planted-links` came with none, so a failing extraction said nothing of what it costs.
    expect(page.locator(".mw-check-item")).not_to_have_count(0)
    expect(page.locator(".mw-check-item:not(:has(.mw-check-meaning))")).to_have_count(0)
    extraction = page.locator(".mw-check-item[data-check='extraction']")
    expect(extraction).to_contain_text("What this means: Nothing said in a conversation")


# --- safety --------------------------------------------------------------------------------------


def test_memory_and_rule_text_is_shown_as_text_never_as_html(server: Server, open_tab: Any) -> None:
    bank = _bank(server, "xss")
    hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    server.call("memory::save", {"bank": bank, "text": f"{hostile} remember this"})
    server.call("memory::rule::set", {"bank": bank, "name": "evil", "content": hostile})
    tab = open_tab(bank)
    page = tab.page
    row = _row(page, "remember this")
    expect(row.locator(".mw-memory-text")).to_have_text(f"{hostile} remember this")
    page.locator("#mw-tab-rules").click()
    expect(page.get_by_label("Rule evil")).to_have_value(hostile)
    page.locator("#mw-tab-preview").click()
    page.get_by_label("Message to preview").fill("remember this")
    page.get_by_role("button", name="Preview", exact=True).click()
    expect(page.locator(".mw-preview-memory").first).to_contain_text("<img src=x")
    assert page.locator("[data-iii-ui='memory'] img, [data-iii-ui='memory'] script").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_every_call_is_a_same_origin_json_post_and_no_token_rides_a_url(
    server: Server, open_tab: Any
) -> None:
    bank = _bank(server, "wire")
    tab = open_tab(bank)
    tab.page.get_by_label("New memory text").fill("Wire discipline memory")
    tab.page.get_by_role("button", name="Save memory").click()
    expect(_row(tab.page, "Wire discipline")).to_have_count(1)
    calls = [r for r in tab.requests if r.resource_type in ("fetch", "xhr")]
    assert calls, "the page made no calls"
    for request in calls:
        assert request.url.startswith(server.url + "/"), request.url
        assert request.method == "POST", request.url
        assert request.headers.get("content-type") == "application/json", request.url
    for request in tab.requests:
        assert "token" not in request.url.lower(), request.url


def test_a_401_asks_for_the_token_once_and_every_call_then_carries_it(
    server: Server, browser: Any
) -> None:
    """The page's side of the token: a 401 → one prompt → `Authorization: Bearer` on every later
    call, the token in sessionStorage only. The guard asks for the server's real token (its data
    dir's `.token`), since the server itself refuses a wrong one even on loopback."""
    token = (server.data_dir / ".token").read_text().strip()
    context = browser.new_context(viewport=DESKTOP)
    seen: list[dict[str, str]] = []

    def guard(route: Any) -> None:
        headers = route.request.headers
        seen.append(headers)
        if headers.get("authorization") != f"Bearer {token}":
            route.fulfill(
                status=401,
                content_type="application/json",
                body=json.dumps(
                    {"error": {"code": "unauthorized", "message": "a bearer token is required"}}
                ),
            )
        else:
            route.continue_()

    try:
        context.route(re.compile(r".*/(memory|console/(events|settings))(/.*)?$"), guard)
        page = context.new_page()
        page.goto(f"{server.url}/#/bank/main/memories")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("a bearer token is required")
        dialog.get_by_label("Access token").fill(token)
        dialog.get_by_role("button", name="Continue").click()
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "live")
        expect(page.get_by_role("dialog")).to_have_count(0)  # asked once, not per call
        assert page.evaluate("sessionStorage.getItem('memory-worker.token')") == token
        assert page.evaluate("localStorage.length") == 0
        assert seen[-1].get("authorization") == f"Bearer {token}"
        assert token not in page.url
    finally:
        context.close()


def test_a_token_prompt_cancelled_is_not_asked_again_and_the_refusals_say_how(
    server: Server, browser: Any
) -> None:
    """Cancel on the token prompt (the person does not have it at hand): the calls still in
    flight, the stream's retries and every later call each opened it again, within seconds and
    however often it was dismissed. Refused calls now say so, and how to be asked again."""
    context = browser.new_context(viewport=DESKTOP)
    refusal = {"error": {"code": "unauthorized", "message": "a bearer token is required"}}
    try:
        context.route(
            re.compile(r".*/(memory|console/(events|settings))(/.*)?$"),
            lambda route: route.fulfill(
                status=401, content_type="application/json", body=json.dumps(refusal)
            ),
        )
        page = context.new_page()
        page.goto(f"{server.url}/#/bank/main/memories")
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("a bearer token is required")
        dialog.get_by_role("button", name="Cancel").click()
        expect(page.locator(".mw-rail .mw-rail-status")).to_have_text(
            "Could not list banks: unauthorized: a bearer token is required"
            " (reload the page to enter the access token)"
        )
        page.get_by_role("button", name="Reload from disk").click()  # one more refused call
        expect(page.locator(".mw-toast", has_text="memory::reload: unauthorized")).to_have_count(1)
        expect(page.get_by_role("dialog")).to_have_count(0)
    finally:
        context.close()


def test_polling_takes_over_when_the_live_stream_is_unavailable(
    server: Server, browser: Any
) -> None:
    bank = _bank(server, "polling")
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.route("**/console/events", lambda route: route.abort())
        page = context.new_page()
        page.goto(f"{server.url}/?poll_ms=300#/bank/{bank}/memories")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "polling")
        expect(page.locator(".mw-mode-text")).to_have_text("polling")
        _save(server, bank, "Found by the polling fallback")
        expect(_row(page, "polling fallback")).to_have_count(1)
    finally:
        context.close()


# --- narrow width and screenshots ----------------------------------------------------------------


PANELS = ("rules", "memories", "preview", "settings", "doctor")


def _seed_showcase(server: Server) -> str:
    bank = "showcase"
    if bank in {b["name"] for b in server.call("memory::bank::list")["banks"]}:
        return bank
    server.call("memory::bank::create", {"name": bank, "description": "screenshots"})
    server.call("memory::bank::create", {"name": "work"})
    server.call(
        "memory::rule::set",
        {
            "bank": bank,
            "name": "style",
            "content": "# Style\nFormal register. No em-dashes.\nAnswer in the user's language.",
        },
    )
    server.call(
        "memory::rule::set",
        {
            "bank": bank,
            "name": "learned",
            "content": "- Prefer metric units.\n- Never schedule meetings before 10:00.",
        },
    )
    for text, extra in (
        (
            "The user publishes blog posts on Tuesday mornings",
            {"tags": ["blog"], "pinned": True, "entities": ["user"]},
        ),
        (
            "Ana leads the billing project",
            {"entities": ["ana"], "tags": ["work"], "session_id": "sess-7f3a9c21b0"},
        ),
        ("The user's dog is called Rex", {"entities": ["user", "rex"], "tags": ["family"]}),
        ("Invoices are due on the 5th of each month", {"tags": ["work", "billing"]}),
    ):
        server.call("memory::save", {"bank": bank, "text": text, **extra})
    server.call(
        "memory::save",
        {
            "bank": bank,
            "text": "Ana leads the billing project",
            "entities": ["ana"],
            "tags": ["work"],
        },
    )
    return bank


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_panel_is_readable_without_sideways_scrolling(
    server: Server, open_tab: Any, viewport: dict[str, int]
) -> None:
    bank = _seed_showcase(server)
    page = open_tab(bank, "rules", viewport=viewport).page
    width = "desktop" if viewport is DESKTOP else "phone"
    for panel in PANELS:
        page.locator(f"#mw-tab-{panel}").click()
        if panel == "preview":
            page.get_by_label("Message to preview").fill("when do I publish posts?")
            page.get_by_role("button", name="Preview", exact=True).click()
            expect(page.locator(".mw-preview-memory").first).to_be_visible()
            page.locator(".mw-preview-result summary").first.click()
        elif panel == "doctor":
            expect(page.locator(".mw-check-item").first).to_be_visible()
        elif panel == "settings":
            expect(page.locator(".mw-setting").first).to_be_visible()
        elif panel == "memories":
            expect(page.locator(".mw-memory").first).to_be_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{panel} at {width} scrolls sideways by {overflow}px"
        if UPDATE_SHOTS:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"{panel}-{width}.png"), full_page=True)


def _consolidation_status(bank: str) -> dict[str, Any]:
    """What `memory-consolidate::status` answers (its `to_wire` form) after a pass over `bank`
    and another bank: one exact group merged, one reorder left for a person."""
    return {
        "enabled": True,
        "interval_hours": 24.0,
        "dry_run": False,
        "due": False,
        "last_run": 1_700_000_000_000,
        "banks": {
            bank: {
                "bank": bank,
                "at": 1_700_000_000_000,
                "scanned": 12,
                "groups_found": 2,
                "merged": 1,
                "report_only": 1,
                "groups": [
                    {
                        "tier": "exact",
                        "action": "merged",
                        "why": "same text after normalizing case and spaces",
                        "winner_id": "m1",
                        "winner_text": "The user prefers tea",
                        "loser_ids": ["m2"],
                        "loser_texts": ["the user prefers  TEA"],
                        "merged_ids": ["m2"],
                    },
                    {
                        "tier": "reorder",
                        "action": "report-only",
                        "why": "the same words in another order (word order can flip meaning)",
                        "winner_id": "m3",
                        "winner_text": "Ana reports to Bruno",
                        "loser_ids": ["m4"],
                        "loser_texts": ["Bruno reports to Ana"],
                    },
                ],
                "errors": ["memory m9: conflict: stale revision"],
            },
            "other-bank": {"bank": "other-bank", "at": 1, "scanned": 3, "merged": 7},
        },
    }


def test_the_consolidation_tab_shows_what_the_last_pass_merged_and_why(
    server: Server, browser: Any, open_tab: Any
) -> None:
    """Read-only, from the sibling's own `memory-consolidate::status` (here answered for it, as
    a transport that reaches the sibling would): this bank's groups, what was kept, what was
    retired into it or left for a person, and the rule that fired; another bank's report is not
    shown. The read is a same-origin JSON POST like every other call."""
    bank = _bank(server, "consolidated")
    context = browser.new_context(viewport=PHONE)
    try:
        answer = json.dumps(_consolidation_status(bank))
        context.route(
            f"{server.url}/memory-consolidate/status",
            lambda route: route.fulfill(content_type="application/json", body=answer),
        )
        tab = open_tab(bank, "consolidation", context=context)
        page = tab.page
        panel = page.locator(".mw-consolidation")
        expect(panel).to_have_attribute("data-state", "shown")
        expect(panel.locator(".mw-consolidation-schedule")).to_contain_text("every 24 h")
        summary = panel.locator(".mw-consolidation-summary")
        expect(summary).to_contain_text("12 memories read")
        expect(summary).to_contain_text("1 merged")
        expect(summary).to_contain_text("1 left for a person")
        merged = panel.locator(".mw-consolidation-group[data-action='merged']")
        expect(merged).to_contain_text("The user prefers tea")
        expect(merged).to_contain_text("retired into it")
        expect(merged).to_contain_text("Why: same text after normalizing case and spaces")
        left = panel.locator(".mw-consolidation-group[data-action='report-only']")
        expect(left).to_contain_text("left for a person")
        expect(left).to_contain_text("Bruno reports to Ana")
        expect(left).to_contain_text("not retired")
        expect(panel.locator(".mw-consolidation-errors")).to_contain_text("stale revision")
        expect(panel).not_to_contain_text("7 merged")  # another bank's report
        # Read-only: no control in the panel but its refresh.
        assert panel.get_by_role("button").all_inner_texts() == ["Refresh"]
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the consolidation panel scrolls sideways by {overflow}px"
        reads = [r for r in tab.requests if r.url.endswith("/memory-consolidate/status")]
        assert reads and all(r.method == "POST" for r in reads)
        assert all(r.headers["content-type"] == "application/json" for r in reads)
    finally:
        context.close()


def test_a_bank_named_like_an_object_property_has_no_consolidation_report_of_its_own(
    server: Server, browser: Any, open_tab: Any
) -> None:
    """The sibling's reports are a JSON object keyed by bank name; a bank named `constructor` (a
    valid name) that no pass reported on must say so, not read the object's inherited
    `constructor` (a function) as its report and show a pass of nothing at an unknown time."""
    bank = _bank(server, "constructor")
    context = browser.new_context(viewport=PHONE)
    try:
        answer = json.dumps(_consolidation_status("another"))
        context.route(
            f"{server.url}/memory-consolidate/status",
            lambda route: route.fulfill(content_type="application/json", body=answer),
        )
        panel = open_tab(bank, "consolidation", context=context).page.locator(".mw-consolidation")
        expect(panel).to_have_attribute("data-state", "shown")
        expect(panel.locator(".mw-consolidation-summary")).to_have_text(
            "No consolidation pass has reported on this bank yet."
        )
    finally:
        context.close()


def test_the_consolidation_tab_says_when_no_consolidation_sibling_answers(
    server: Server, open_tab: Any
) -> None:
    """The standalone server does not host memory-consolidate: the tab says so and where the
    reports come from, rather than showing an empty list as if nothing had ever been merged."""
    tab = open_tab(_bank(server, "unconsolidated"))
    tab.refusals.add(404)  # the standalone server's answer for the sibling's path
    page = tab.page
    page.locator("#mw-tab-consolidation").click()
    panel = page.locator(".mw-consolidation")
    expect(panel).to_have_attribute("data-state", "absent")
    expect(panel).to_contain_text("memory-consolidate sibling does not answer")
    expect(panel.locator(".mw-consolidation-group")).to_have_count(0)


# --- the iii home --------------------------------------------------------------------------------

# A stand-in for the iii console around page.js: an import map for `react` (a stub that runs one
# function component with useRef/useEffect), and a `host` whose bus client forwards each trigger
# to the real server's REST route, so the very modules the iii console loads run end to end.
_REACT_STUB = """
export function createElement(type, props) { return { type, props: props || {} } }
export function useRef(value) { return { current: value } }
const effects = []
export function useEffect(fn) { effects.push(fn) }
export function __render(element, container) {
  const node = element.type(element.props)
  const div = document.createElement(node.type)
  div.className = node.props.className
  node.props.ref.current = div
  container.append(div)
  const cleanups = effects.splice(0).map((fn) => fn())
  return () => cleanups.forEach((fn) => fn && fn())
}
"""
_III_HOST_PAGE = """<!doctype html><html><head>
<script type="importmap">{"imports": {"react": "/iii-test/react.js"}}</script>
<link rel="stylesheet" href="/console/styles.css"></head>
<body><div data-iii-ui="memory" id="pane"></div>
<script type="module">
import setup from '/console/page.js'
import { __render } from 'react'
const handlers = new Map()
const bindings = []
window.__iii = { handlers, bindings, calls: [], dirty: [] }
const iii = {
  browserId: 'tab-1',
  connectionState: 'connected',
  async trigger(fn, payload) {
    window.__iii.calls.push(fn)
    if (fn === 'memory::ui-settings') return { mode: 'engine', editable: false, source: 'memory',
      reason: 'owned by the configuration worker', fields: [{ name: 'recall_limit',
      type: 'integer', description: 'Max memories injected per turn.', default: 6, value: 6,
      editable: false }] }
    const r = await fetch('/' + fn.replaceAll('::', '/'), { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(payload) })
    const body = await r.json()
    if (!r.ok) throw new Error(body.error.code + ': ' + body.error.message)
    return body
  },
  on(id, fn) { handlers.set(id, fn); return () => handlers.delete(id) },
  registerTrigger(t) { bindings.push(t); return () => {} },
  addConnectionStateListener() { return () => {} },
}
const pages = []
setup({ iii, pages: { register: (p) => pages.push(p) } })
window.__iii.pages = pages.map((p) => ({ id: p.id, title: p.title }))
window.__iii.unmount = __render(pages[0].render({ setDirty: (d) => window.__iii.dirty.push(d) }),
  document.getElementById('pane'))
</script></body></html>"""


def test_the_iii_home_registers_the_page_and_runs_it_over_the_bus_client(
    server: Server, browser: Any
) -> None:
    bank = _bank(server, "iii-home")
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.route(
            f"{server.url}/iii-test/page.html",
            lambda route: route.fulfill(content_type="text/html", body=_III_HOST_PAGE),
        )
        context.route(
            f"{server.url}/iii-test/react.js",
            lambda route: route.fulfill(content_type="text/javascript", body=_REACT_STUB),
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/iii-test/page.html")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "live")
        assert page.evaluate("window.__iii.pages") == [{"id": "memory", "title": "Memory"}]
        bindings = page.evaluate("window.__iii.bindings")
        assert sorted(b["type"] for b in bindings) == [
            "memory::bank-changed",
            "memory::item-changed",
        ]
        assert all(b["function_id"].startswith("iii::memory-ui::") for b in bindings)
        page.locator(".mw-bank-button", has_text=bank).click()
        expect(page.locator(".mw-bank-name")).to_have_text(bank)
        assert page.evaluate("location.hash") == ""  # under iii the console owns the URL

        saved = _save(server, bank, "Delivered by a bus binding")
        handler = next(b["function_id"] for b in bindings if b["type"] == "memory::item-changed")
        page.evaluate(
            "([id, payload]) => window.__iii.handlers.get(id)(payload)",
            [handler, {"event_type": "created", "bank": bank, "memory": saved["memory"]}],
        )
        page.locator("#mw-tab-memories").click()
        expect(_row(page, "bus binding")).to_have_count(1)
        page.locator("#mw-tab-settings").click()
        expect(page.locator(".mw-banner")).to_have_attribute("data-editable", "false")
        assert "memory::ui-settings" in page.evaluate("window.__iii.calls")

        page.locator("#mw-tab-rules").click()
        page.get_by_label("New rule name").fill("draft")
        page.get_by_role("button", name="Add rule").click()
        page.get_by_label("Rule draft").fill("# draft\nunsaved")
        assert page.evaluate("window.__iii.dirty.at(-1)") == "memory"  # the host's dirty guard
        page.evaluate("window.__iii.unmount()")
        assert page.locator(".mw-header").count() == 0  # unmounting leaves nothing behind
        assert errors == []
    finally:
        context.close()


def test_a_hand_edit_of_a_rule_file_reaches_the_open_editor(server: Server, open_tab: Any) -> None:
    """A clean editor follows the file; a dirty one keeps the person's text and says so."""
    bank = _bank(server, "hand-edit")
    _rule(server, bank, "style", "Before the hand edit.")
    _rule(server, bank, "tone", "Tone before.")
    page = open_tab(bank, "rules").page
    page.get_by_label("Rule tone").fill("My draft of tone.")
    rules = server.data_dir / bank / "rules"
    (rules / "style.md").write_text("Edited in a text editor.")
    (rules / "tone.md").write_text("Tone edited by hand.")
    expect(page.get_by_label("Rule style")).to_have_value("Edited in a text editor.")
    tone = page.locator(".mw-rule[data-rule='tone']")
    expect(tone.get_by_role("alert")).to_contain_text("changed elsewhere")
    expect(page.get_by_label("Rule tone")).to_have_value("My draft of tone.")


def test_a_shared_banks_rail_row_and_a_memorys_lanes(server: Server, open_tab: Any) -> None:
    """C21/C22 in the console: the rail says a bank is shared and what agents may do with it; a
    memory shows its goal and context (whole on hover)."""
    server.call(
        "memory::bank::create", {"name": "team", "scope": "shared", "conscious_access": "read"}
    )
    window = "we were booking flights to Rome for the spring trip " * 3
    _save(server, "team", "Sofia prefers the window seat.", context=window, intention="book seats")
    page = open_tab("team").page
    counts = page.locator(".mw-bank-button", has_text="team").locator(".mw-bank-meta")
    expect(counts).to_have_text("1 memory · 0 pinned · 0 rules · shared · agents: read only")
    meta = _row(page, "Sofia prefers the window seat.").locator(".mw-memory-meta")
    expect(meta).to_contain_text("goal: book seats")
    lane = meta.locator(".mw-lane", has_text="context:")
    expect(lane).to_have_attribute(
        "title", f"context — the conversation it was formed in: {window.strip()}"
    )


# --- second review: keyboard, long labels, drafts, right-to-left ---------------------------------


def test_the_search_shortcut_works_on_a_page_just_loaded(server: Server, open_tab: Any) -> None:
    """The placeholder says "press / from anywhere": right after the page loads nothing has
    focus (the key goes to <body>, outside the console's root), and the shortcut must still
    reach the search box."""
    bank = _bank(server, "slash-fresh")
    page = open_tab(bank, "rules").page
    assert page.evaluate("document.activeElement === document.body")
    page.keyboard.press("/")
    expect(page.get_by_label("Search memories")).to_be_focused()
    expect(page.get_by_label("Search memories")).to_have_value("")  # the "/" was not typed


def test_a_long_tag_or_entity_never_makes_the_page_scroll_sideways(
    server: Server, open_tab: Any
) -> None:
    """Tags and entities may be 64 characters with no space: as chips and badges they wrap
    inside the row instead of pushing the page wider than a phone."""
    bank = _bank(server, "long-labels")
    _save(server, bank, "A memory with long labels", tags=["t" * 64], entities=["e" * 64])
    page = open_tab(bank, viewport=PHONE).page
    expect(_row(page, "long labels")).to_have_count(1)
    expect(page.locator(".mw-memories .mw-chips .mw-chip")).to_have_count(1)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the memories panel scrolls sideways by {overflow}px"


def test_a_tags_only_edit_is_unsaved_work_the_page_guards(server: Server, open_tab: Any) -> None:
    """Changing only a memory's tags in its edit form is an unsaved edit like changing its text:
    switching banks asks before discarding it."""
    bank = _bank(server, "tag-draft")
    _bank(server, "tag-draft-other")
    _save(server, bank, "A memory whose tags are being edited")
    page = open_tab(bank).page
    _row(page, "tags are being edited").get_by_role("button", name="Edit").click()
    page.locator(".mw-editing").get_by_label("Tags").fill("travel, urgent")
    page.locator(".mw-bank-button", has_text="tag-draft-other").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Discard unsaved changes?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.locator(".mw-bank-name")).to_have_text(bank)
    expect(page.locator(".mw-editing").get_by_label("Tags")).to_have_value("travel, urgent")


def test_right_to_left_text_is_laid_out_right_to_left(server: Server, open_tab: Any) -> None:
    """A memory or rule in Hebrew or Arabic takes its direction from its own text (`dir=auto`):
    laid out left to right, its punctuation lands on the wrong side."""
    bank = _bank(server, "rtl")
    _save(server, bank, "המשתמש מעדיף תה ירוק!")
    _save(server, bank, "The user likes green tea 🍵")
    _rule(server, bank, "tone", "ענה בעברית.")
    page = open_tab(bank).page
    direction = "e => getComputedStyle(e).direction"
    assert _row(page, "תה ירוק").locator(".mw-memory-text").evaluate(direction) == "rtl"
    assert _row(page, "green tea").locator(".mw-memory-text").evaluate(direction) == "ltr"
    page.locator("#mw-tab-rules").click()
    assert page.get_by_label("Rule tone").evaluate(direction) == "rtl"


def test_a_record_with_a_timestamp_past_javascripts_range_does_not_blank_the_list(
    server: Server, open_tab: Any
) -> None:
    """Timestamps are u64 on disk; a hand-edited record (or one from another implementation)
    may carry one no JavaScript Date can hold. That row shows without a date; every other row
    still shows (a RangeError used to abort the whole list: "Could not load memories")."""
    bank = _bank(server, "far-future")
    _save(server, bank, "An ordinary memory beside it")
    record = _save(server, bank, "A memory from the far future")["memory"]
    record.update(updated_at=10**16, revision=1)
    with (server.data_dir / bank / "memories.jsonl").open("a", encoding="utf-8") as lines:
        lines.write(json.dumps(record) + "\n")
    server.call("memory::reload")
    page = open_tab(bank).page
    expect(page.locator(".mw-memory")).to_have_count(2)
    expect(page.locator(".mw-summary")).to_contain_text("2 memories")


def test_escape_in_a_rule_editor_never_throws_the_draft_away_unasked(
    server: Server, open_tab: Any
) -> None:
    """Esc is pressed for many reasons (closing a menu, out of habit); in the rule editor it
    reverted a whole unsaved draft at once, with no undo. It now asks first."""
    bank = _bank(server, "rule-esc")
    _rule(server, bank, "tone", "Be brief.")
    page = open_tab(bank, "rules").page
    editor = page.get_by_label("Rule tone")
    editor.fill("Be brief.\nA long draft that took a while to write.")
    editor.press("Escape")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Discard")
    dialog.get_by_role("button", name="Cancel").click()
    expect(editor).to_have_value("Be brief.\nA long draft that took a while to write.")
    expect(page.locator(".mw-rule[data-rule='tone']")).to_have_attribute("data-status", "dirty")
    editor.press("Escape")
    page.get_by_role("dialog").get_by_role("button", name="Discard my changes").click()
    expect(editor).to_have_value("Be brief.")
    expect(page.locator(".mw-rule[data-rule='tone']")).to_have_attribute("data-status", "clean")


def test_a_malformed_link_still_opens_the_console(server: Server, browser: Any) -> None:
    """A hand-typed or truncated link (`#/bank/%E0%A4/…`: not valid percent-encoding) opens the
    console on its first bank; decoding it threw and the page never loaded a bank."""
    bank = _bank(server, "malformed-link")
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/#/bank/%E0%A4/memories")
        first = server.call("memory::bank::list")["banks"][0]["name"]
        expect(page.locator(".mw-bank-name")).to_have_text(first)
        expect(page.locator(".mw-bank-button", has_text=bank)).to_have_count(1)
        assert errors == []
    finally:
        context.close()


def test_escape_in_a_memory_edit_asks_before_dropping_a_changed_draft(
    server: Server, open_tab: Any
) -> None:
    """Esc ends an untouched edit at once; with the text changed it asks first (it dropped the
    draft unasked)."""
    bank = _bank(server, "memory-esc")
    _save(server, bank, "The user walks the dog at seven")
    page = open_tab(bank).page
    row = _row(page, "walks the dog")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").press("Escape")  # nothing changed: closes at once
    expect(page.locator(".mw-editing")).to_have_count(0)
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user walks the dog at eight, not seven")
    page.get_by_label("Edit memory text").press("Escape")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Discard")
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_label("Edit memory text")).to_have_value(
        "The user walks the dog at eight, not seven"
    )
    page.get_by_label("Edit memory text").press("Escape")
    page.get_by_role("dialog").get_by_role("button", name="Discard my changes").click()
    expect(page.locator(".mw-editing")).to_have_count(0)
    expect(row.locator(".mw-memory-text")).to_have_text("The user walks the dog at seven")


def _save_settings(page: Any, changed: str) -> None:
    """The settings panel's Save pressed, and its toast naming `changed` seen."""
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".mw-toast")).to_contain_text(f"Saved {changed}")


def _fail_rule_lists(tab: Tab) -> None:
    """From now on this tab's `memory::rule::list` calls are answered 503 (a restarting server)."""
    tab.refusals.add(503)
    tab.page.route(
        "**/memory/rule/list",
        lambda route: route.fulfill(
            status=503,
            content_type="application/json",
            body=json.dumps({"error": {"code": "unavailable", "message": "restarting"}}),
        ),
    )


def test_a_failed_compare_or_overwrite_says_so(server: Server, open_tab: Any) -> None:
    """The conflict notice's buttons each read the rule first: when that read fails, the person
    is told (they did nothing visible at all)."""
    bank = _bank(server, "rule-offline")
    _rule(server, bank, "tone", "Original.")
    tab = open_tab(bank, "rules")
    page = tab.page
    page.get_by_label("Rule tone").fill("Mine.")
    _rule(server, bank, "tone", "Theirs.")
    card = page.locator(".mw-rule[data-rule='tone']")
    expect(card.get_by_role("button", name="Compare with theirs")).to_be_visible()
    _fail_rule_lists(tab)
    # Only the buttons' own notices: the tab's live refresh of the rules (the other writer's
    # change event) may fail too, and say so in a toast of its own ("Rules: …").
    failed = page.locator(
        ".mw-toast-error", has_text="Rule tone: could not read the saved rule: unavailable"
    )
    card.get_by_role("button", name="Compare with theirs").click()
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text("unavailable: restarting")
    card.get_by_role("button", name="Overwrite with mine").click()
    expect(failed).to_have_count(2)
    assert server.call("memory::rule::list", {"bank": bank})["rules"][0]["content"] == "Theirs."
    expect(page.get_by_label("Rule tone")).to_have_value("Mine.")


def test_a_saved_rule_stays_on_screen_when_the_re_read_after_saving_fails(
    server: Server, open_tab: Any
) -> None:
    """After a save the editor re-reads the rule; that read failing does not mean the rule was
    deleted (the card vanished with a "deleted" toast while the rule sat on disk)."""
    bank = _bank(server, "rule-reread")
    _rule(server, bank, "tone", "Original.")
    tab = open_tab(bank, "rules")
    page = tab.page
    _fail_rule_lists(tab)
    page.get_by_label("Rule tone").fill("Saved while the list fails.")
    page.get_by_label("Rule tone").press("Control+s")
    card = page.locator(".mw-rule[data-rule='tone']")
    expect(page.locator(".mw-toast", has_text='Rule "tone" saved')).to_have_count(1)
    expect(card).to_have_attribute("data-status", "clean")
    expect(page.get_by_label("Rule tone")).to_have_value("Saved while the list fails.")
    assert server.call("memory::rule::list", {"bank": bank})["rules"][0]["content"] == (
        "Saved while the list fails."
    )
    page.get_by_label("Rule tone").fill("Saved again on the revision the save answered.")
    page.get_by_label("Rule tone").press("Control+s")  # not refused as stale
    expect(page.locator(".mw-toast", has_text='Rule "tone" saved')).to_have_count(2)


def test_a_lesson_shows_its_title_recommendation_and_anchors(server: Server, open_tab: Any) -> None:
    """A lesson's card (title and recommendation) is all a model is shown, and its anchors are
    what earns it: the console showed neither, only the text and a "lesson" badge."""
    bank = _bank(server, "lessons")
    _save(
        server,
        bank,
        "Tests fail on a fresh database until migrations ran",
        category="lesson",
        title="Migrate <b>first</b>",
        recommendation="Run alembic upgrade head before pytest in services/api.",
        anchors={
            "files": ["services/api/alembic.ini"],
            "identifiers": ["run_migrations"],
            "keyword_groups": [["alembic", "pytest"]],
        },
    )
    page = open_tab(bank).page
    row = _row(page, "fresh database")
    expect(row).to_contain_text("Migrate <b>first</b>")  # as text, never as markup
    expect(row).to_contain_text("Run alembic upgrade head before pytest in services/api.")
    expect(row).to_contain_text("services/api/alembic.ini")
    expect(row).to_contain_text("run_migrations")
    expect(row).to_contain_text("alembic pytest")
    expect(row.locator("b")).to_have_count(0)


def test_a_memory_of_emoji_within_the_limit_can_be_edited(server: Server, open_tab: Any) -> None:
    """The worker counts a memory's 2,000 characters as code points; a browser's `maxlength`
    counts UTF-16 units, two per emoji. A valid memory of 1,100 emoji could not be saved after an
    edit (the browser blocked the form, no call went out) and a pasted one was cut short."""
    bank = _bank(server, "emoji")
    _save(server, bank, "Emoji diary: " + "🎉" * 1100)
    page = open_tab(bank).page
    row = page.locator(".mw-memory").first
    row.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit memory text")
    editor.press("End")
    editor.press("Backspace")
    page.locator(".mw-editing").get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".mw-editing")).to_have_count(0)
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert memory["text"] == "Emoji diary: " + "🎉" * 1099
    page.get_by_label("New memory text").fill("Emoji again: " + "🎉" * 1100)
    assert page.get_by_label("New memory text").input_value() == "Emoji again: " + "🎉" * 1100


def test_under_iii_a_memory_draft_is_reported_to_the_hosts_dirty_guard(
    server: Server, browser: Any
) -> None:
    """Under iii the host's guard is the only one (no beforeunload): typing in a memory's edit
    form must report it dirty, as typing in a rule editor does (only opening the form reported,
    and it reported clean)."""
    bank = _bank(server, "iii-draft")
    _save(server, bank, "A memory edited inside the iii console")
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.route(
            f"{server.url}/iii-test/page.html",
            lambda route: route.fulfill(content_type="text/html", body=_III_HOST_PAGE),
        )
        context.route(
            f"{server.url}/iii-test/react.js",
            lambda route: route.fulfill(content_type="text/javascript", body=_REACT_STUB),
        )
        page = context.new_page()
        page.goto(f"{server.url}/iii-test/page.html")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "live")
        page.locator(".mw-bank-button", has_text=bank).click()
        page.locator("#mw-tab-memories").click()
        _row(page, "inside the iii console").get_by_role("button", name="Edit").click()
        page.get_by_label("Edit memory text").fill("A changed draft, not saved yet")
        assert page.evaluate("window.__iii.dirty.at(-1)") == "memory"
        page.locator(".mw-editing").get_by_label("Tags").fill("")  # still the changed text
        assert page.evaluate("window.__iii.dirty.at(-1)") == "memory"
        page.locator(".mw-editing").get_by_role("button", name="Cancel").click()
        assert page.evaluate("window.__iii.dirty.at(-1)") is False
        page.evaluate("window.__iii.unmount()")
    finally:
        context.close()


def test_enter_that_confirms_an_input_method_candidate_does_not_save(
    server: Server, open_tab: Any
) -> None:
    """Japanese or Chinese is typed through an input method: Enter confirms the candidate (a
    keydown with `isComposing`). In the "remember something" box it saved the half-typed memory."""
    bank = _bank(server, "ime")
    page = open_tab(bank).page
    page.get_by_label("New memory text").fill("ユーザーは緑茶が好き")
    saves = page.evaluate(
        """() => {
        let saves = 0
        const real = window.fetch
        window.fetch = (...args) => {
          if (String(args[0]).includes('/memory/save')) saves += 1
          return real(...args)
        }
        try {
          document.querySelector('.mw-save-text').dispatchEvent(new KeyboardEvent('keydown',
            { key: 'Enter', isComposing: true, bubbles: true, cancelable: true }))
        } finally {
          window.fetch = real
        }
        return saves
      }"""
    )
    assert saves == 0
    expect(page.get_by_label("New memory text")).to_have_value("ユーザーは緑茶が好き")
    page.get_by_label("New memory text").press("Enter")  # a plain Enter still saves
    expect(_row(page, "緑茶")).to_have_count(1)


def test_a_link_to_another_bank_opened_in_the_same_tab_is_followed(
    server: Server, open_tab: Any
) -> None:
    """A bookmark or pasted link that differs only in its `#/bank/…` part does not reload the
    page: the console follows it (it stayed on the old bank under the new address)."""
    first = _bank(server, "hash-first")
    second = _bank(server, "hash-second")
    page = open_tab(first).page
    page.evaluate(f"location.hash = '#/bank/{second}/rules'")
    expect(page.locator(".mw-bank-name")).to_have_text(second)
    expect(page.locator("#mw-tab-rules")).to_have_attribute("aria-selected", "true")


# --- third review: what the seed says the console shows ------------------------------------------


def test_a_banks_description_is_shown_and_edited_in_its_settings(
    server: Server, open_tab: Any
) -> None:
    """Seed 000: a bank's description is the "human description shown in listings and the
    console". It is shown as text (never HTML) and edited in the bank's settings."""
    server.call(
        "memory::bank::create", {"name": "described", "description": "Notes for <b>Rome</b>"}
    )
    page = open_tab("described").page
    expect(page.locator(".mw-bank-description")).to_have_text("Notes for <b>Rome</b>")
    rail_row = page.locator(".mw-bank-button", has_text="described")
    expect(rail_row).to_have_attribute("title", "Notes for <b>Rome</b>")
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("description", exact=True).fill("The spring trip")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog).to_have_count(0)
    bank = server.call("memory::bank::get", {"name": "described"})["bank"]
    assert bank["description"] == "The spring trip"
    expect(page.locator(".mw-bank-description")).to_have_text("The spring trip")


def test_a_history_says_why_an_automatic_path_retired_a_memory(
    server: Server, open_tab: Any
) -> None:
    """A memory evicted at capacity (or expired by retention) is not "deleted": its history's
    last revision says `evicted`, as the record's `invalid_reason` does."""
    server.call("memory::bank::create", {"name": "capped", "max_memories": 1})
    _save(server, "capped", "The first fact, evicted at capacity")
    _save(server, "capped", "The second fact, kept")
    page = open_tab("capped").page
    page.get_by_text("show history").click()
    row = _row(page, "The first fact")
    row.get_by_role("button", name="History").click()
    kinds = row.locator(".mw-history .mw-revision-kind")
    expect(kinds).to_have_text(["created", "evicted"])


def test_a_long_rule_name_never_makes_the_rules_panel_scroll_sideways(
    server: Server, open_tab: Any
) -> None:
    """A rule name may be 64 characters with no break: its card's title wraps on a phone."""
    bank = _bank(server, "long-rule-name")
    _rule(server, bank, "r" * 64, "Keep answers short.")
    page = open_tab(bank, "rules", viewport=PHONE).page
    expect(page.locator(".mw-rule-name")).to_have_text("r" * 64 + ".md")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the rules panel scrolls sideways by {overflow}px"


def test_rules_over_the_injection_budget_are_named_in_the_rules_panel(
    server: Server, open_tab: Any
) -> None:
    """A rule set past `max_rule_chars` (6000 here) is saved whole but cut in every new
    session's system prompt ("trim it in the memory page", says the marker): the rules panel
    names the rules cut or left out, and the note goes once they fit."""
    bank = _bank(server, "over-budget")
    _rule(server, bank, "alpha", "Answer in Portuguese. " * 20)
    _rule(server, bank, "beta", "é" * 7000)
    page = open_tab(bank, "rules").page
    note = page.locator(".mw-rule-budget")
    expect(note).to_be_visible()
    expect(note).to_contain_text("max_rule_chars")
    expect(note).to_contain_text("beta")
    expect(note).not_to_contain_text("alpha")
    page.get_by_label("Rule beta").fill("Keep it short.")
    page.locator(".mw-rule[data-rule='beta']").get_by_role("button", name="Save").click()
    expect(note).to_be_hidden()


def test_an_accented_name_typed_for_a_rule_or_bank_keeps_its_letters(
    server: Server, open_tab: Any
) -> None:
    """Names are `[a-z0-9_-]`: a Portuguese name typed key by key folds its accents ("ação" →
    "acao", as `slugify` does) instead of turning each accented letter into a dash."""
    page = open_tab(_bank(server, "accents"), "rules").page
    page.get_by_label("New rule name").press_sequentially("Regras Ação")
    expect(page.get_by_label("New rule name")).to_have_value("regras-acao")
    page.get_by_role("button", name="Add rule").click()
    expect(page.locator(".mw-rule-name")).to_have_text(["regras-acao.md"])
    page.get_by_label("New bank name").press_sequentially("Família")
    expect(page.get_by_label("New bank name")).to_have_value("familia")


def test_a_refused_save_or_create_is_said_once_and_throws_nothing(
    server: Server, open_tab: Any
) -> None:
    """A memory over 2,000 characters is refused by the worker: the toast says why, the text
    stays in the box, and no uncaught error is left behind in the page."""
    tab = open_tab(_bank(server, "refused-save"))
    tab.refusals.add(400)
    page = tab.page
    page.get_by_label("New memory text").fill("y" * 2500)
    page.get_by_role("button", name="Save memory").click()
    expect(page.locator(".mw-toast")).to_contain_text("at most 2000 characters")
    expect(page.get_by_label("New memory text")).to_have_value("y" * 2500)
    page.route(
        "**/memory/bank/create",
        lambda route: route.fulfill(
            status=400,
            content_type="application/json",
            body='{"error": {"code": "invalid_input", "message": "too many banks"}}',
        ),
    )
    page.get_by_label("New bank name").fill("one-too-many")
    page.get_by_role("button", name="Create").click()
    expect(page.locator(".mw-toast", has_text="too many banks")).to_have_count(1)
    expect(page.get_by_label("New bank name")).to_have_value("one-too-many")
    assert tab.errors == []


def test_a_memory_deleted_elsewhere_while_edited_keeps_the_draft_on_screen(
    server: Server, open_tab: Any
) -> None:
    """Another door deletes the memory a person is editing: the row stays with their draft and
    says so (as a rule deleted elsewhere does), instead of vanishing with the text typed."""
    bank = _bank(server, "deleted-while-edited")
    _save(server, bank, "The user walks to work")
    saved = _save(server, bank, "The user drives a blue car")
    page = open_tab(bank).page
    _row(page, "blue car").get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user drives a red car now")
    server.call("memory::delete", {"bank": bank, "id": saved["memory"]["id"]})
    edited = page.locator(".mw-memory.mw-editing")
    expect(edited.get_by_role("alert")).to_contain_text("no longer in this list")
    expect(page.get_by_label("Edit memory text")).to_have_value("The user drives a red car now")
    edited.get_by_role("button", name="Cancel").click()
    expect(page.locator(".mw-memory")).to_have_count(1)  # gone once the edit ends


def test_with_a_hundred_banks_a_bank_picked_low_in_the_rail_is_shown_in_view(
    server: Server, open_tab: Any
) -> None:
    """A data dir with 100 banks: the rail scrolls on its own, so the bank picked near its
    bottom opens in view (the whole page scrolled with it, and the workspace sat far above)."""
    first, second = _bank(server, "crowd-first"), _bank(server, "crowd-second")

    def crowded(route: Any) -> None:
        answer = route.fetch()
        banks = answer.json()["banks"]
        fakes = [{**banks[0], "name": f"crowd-{i:03d}"} for i in range(100)]
        route.fulfill(response=answer, json={"banks": fakes + banks})

    tab = open_tab(first)
    page = tab.page
    page.route("**/memory/bank/list", crowded)
    page.get_by_role("button", name="Reload from disk").click()
    expect(page.locator(".mw-bank-item")).to_have_count(
        len(server.call("memory::bank::list")["banks"]) + 100
    )
    page.locator(".mw-bank-button", has_text=second).click()
    expect(page.locator(".mw-bank-name")).to_have_text(second)
    expect(page.locator(".mw-bank-name")).to_be_in_viewport()
    # A live refresh still inside `crowded` as the tab closes raised "Response has been
    # disposed", reported against whichever test ran next.
    page.unroute_all(behavior="ignoreErrors")


def test_a_bank_deleted_elsewhere_while_open_is_left_for_a_remaining_one(
    server: Server, open_tab: Any
) -> None:
    """Another door moves the open bank to the trash: the page says so and moves on to a
    remaining bank, as after a delete made here, instead of staying on a bank that is gone (whose
    save box and "Add rule" would create it anew)."""
    bank = _bank(server, "doomed")
    _save(server, bank, "This bank is about to go")
    tab = open_tab(bank)
    # A read the page sent just before the trashing reached it (a poll, a refetch) is answered
    # 404: Chromium logs it; what the test asks is that the page then moves on.
    tab.refusals.add(404)
    page = tab.page
    expect(_row(page, "about to go")).to_have_count(1)
    server.call("memory::bank::delete", {"name": bank})
    expect(
        page.locator(".mw-toast", has_text='Bank "doomed" was moved to the trash')
    ).to_have_count(1)
    expect(page.locator(".mw-bank-name")).not_to_have_text(bank)
    expect(page.locator(".mw-bank-button", has_text=bank)).to_have_count(0)
    # The heading leaves the bank at once; the address follows when the next bank is chosen,
    # after the bank list is read again (asserted at once, it raced that read under load).
    expect(page).not_to_have_url(re.compile("doomed"))


def test_a_text_edit_keeps_tags_and_entities_that_hold_a_comma(
    server: Server, open_tab: Any
) -> None:
    """The edit form shows tags and entities joined by commas; saving only the text sent them
    split back on commas, so `Acme, Inc.` became two entities and the tag `a,b` two tags."""
    bank = _bank(server, "comma-labels")
    _save(
        server,
        bank,
        "The user works at Acme, Inc. in Lisbon",
        entities=["Acme, Inc.", "Lisbon"],
        tags=["q3,q4", "work"],
    )
    page = open_tab(bank).page
    row = _row(page, "Acme")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user works at Acme, Inc. in Porto")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(_row(page, "Porto").locator(".mw-memory-meta")).to_contain_text("rev 1")
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert memory["entities"] == ["acme, inc.", "lisbon"]
    assert memory["tags"] == ["q3,q4", "work"]


def test_a_settings_save_that_succeeds_clears_the_earlier_refusal(
    server: Server, open_tab: Any
) -> None:
    tab = open_tab(_bank(server, "settings-retry"), "settings")
    tab.refusals.add(400)
    page = tab.page
    notice = page.locator(".mw-settings .mw-notice")
    page.locator("#mw-setting-default_bank").fill("Not A Bank")
    page.get_by_role("button", name="Save settings").click()
    expect(notice).to_contain_text("Not saved: invalid_input")
    page.locator("#mw-setting-default_bank").fill("main")
    page.locator("#mw-setting-recall_limit").fill("8")
    _save_settings(page, "recall_limit")
    expect(notice).to_be_hidden()  # it said "Not saved" over a saved setting
    server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_delete_confirmed_for_one_text_is_refused_after_the_memory_changed(
    server: Server, open_tab: Any
) -> None:
    """The dialog names the text being deleted; a change made elsewhere while it is open must
    not be deleted on that confirmation, unseen: the delete carries the revision it showed."""
    bank = _bank(server, "delete-stale")
    saved = _save(server, bank, "The user parks on level 3 of the garage")
    page = open_tab(bank).page
    _row(page, "level 3").get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("level 3")
    server.call(
        "memory::update",
        {"bank": bank, "id": saved["memory"]["id"], "text": "The user parks on level 5 now"},
    )
    expect(_row(page, "level 5").locator(".mw-memory-meta")).to_contain_text("rev 1")
    dialog.get_by_role("button", name="Delete memory").click()
    expect(page.locator(".mw-toast", has_text="Not done")).to_contain_text("stale revision")
    memories = server.call("memory::list", {"bank": bank})["memories"]
    assert [m["text"] for m in memories] == ["The user parks on level 5 now"]


def test_the_bank_dialogs_fit_a_phone(server: Server, open_tab: Any) -> None:
    """The settings dialog's subject-scoping line ran off its right edge on a phone (cut
    mid-sentence, the dialog scrolling sideways), as did a 64-character bank name in a title."""
    bank = _bank(server, "b" * 64)
    page = open_tab(bank, viewport=PHONE).page
    wider = "(d) => d.scrollWidth - d.clientWidth"
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("subject scoping")
    assert dialog.evaluate(wider) <= 0, "the bank settings dialog scrolls sideways"
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)
    page.get_by_role("button", name="Delete bank…").click()
    expect(dialog).to_contain_text("to the trash")
    assert dialog.evaluate(wider) <= 0, "the delete-bank dialog scrolls sideways"
    dialog.get_by_role("button", name="Cancel").click()


def test_allowed_hosts_says_its_own_default_and_why_it_is_not_editable(
    server: Server, open_tab: Any
) -> None:
    """It read "Default: undefined" (a list's default is made by a factory, so the schema has
    none) and "it moves the whole store", which is data_dir's reason, not this field's."""
    page = open_tab(_bank(server, "settings-hosts"), "settings").page
    row = page.locator(".mw-setting[data-name='allowed_hosts']")
    expect(row).to_contain_text("Default: [].")
    expect(row).not_to_contain_text("undefined")
    expect(row).not_to_contain_text("moves the whole store")
    expect(page.locator(".mw-setting[data-name='data_dir']")).to_contain_text(
        "moves the whole store"
    )


def test_a_rule_delete_confirmed_is_refused_after_the_rule_changed_elsewhere(
    server: Server, open_tab: Any
) -> None:
    """Extraction appends to `learned` while its delete dialog is open: the editor behind it
    shows the new line, and the confirmation given for the old text must not delete it."""
    bank = _bank(server, "rule-delete-stale")
    _rule(server, bank, "learned", "- Use metric units.")
    page = open_tab(bank, "rules").page
    card = page.locator(".mw-rule[data-rule='learned']")
    card.get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete rule")
    _rule(server, bank, "learned", "- Use metric units.\n- Answer in Portuguese.")
    expect(page.get_by_label("Rule learned")).to_have_value(re.compile("Portuguese"))
    dialog.get_by_role("button", name="Delete rule").click()
    expect(card.get_by_role("alert")).to_contain_text("Not deleted: stale revision")
    [rule] = server.call("memory::rule::list", {"bank": bank})["rules"]
    assert rule["content"] == "- Use metric units.\n- Answer in Portuguese."


def test_load_latest_takes_the_other_writers_text_when_only_tags_were_edited(
    server: Server, open_tab: Any
) -> None:
    """Two tabs: one edits only a memory's tags while the other changes its text. "Load latest
    (keep my text)" kept the untouched old text, so saving the tags silently put it back."""
    bank = _bank(server, "rebase-text")
    saved = _save(server, bank, "The standup is at 9:30", tags=["work"])
    page = open_tab(bank).page
    _row(page, "standup").get_by_role("button", name="Edit").click()
    page.get_by_label("Tags", exact=True).fill("work, meetings")
    server.call(
        "memory::update",
        {"bank": bank, "id": saved["memory"]["id"], "text": "The standup is at 10:00"},
    )
    editing = page.locator(".mw-editing")
    rebase = editing.get_by_role("button", name="Load latest (keep my text)")
    rebase.click()
    expect(rebase).to_be_hidden()
    expect(page.get_by_label("Edit memory text")).to_have_value("The standup is at 10:00")
    editing.get_by_role("button", name="Save", exact=True).click()
    expect(_row(page, "10:00").locator(".mw-memory-meta")).to_contain_text("rev 2")
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert (memory["text"], memory["tags"]) == ("The standup is at 10:00", ["work", "meetings"])


def test_the_search_shortcut_works_on_a_phone_that_opened_on_the_bank_list(
    server: Server, browser: Any
) -> None:
    """A narrow window opened with no link starts on the bank list, the workspace hidden: `/`
    moved focus to a search box nobody could see, and nothing happened on screen."""
    _bank(server, "slash-narrow")
    context = browser.new_context(viewport=PHONE)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "live")
        expect(page.locator(".mw-root")).to_have_attribute("data-view", "banks")
        expect(page.locator(".mw-bank-button").first).to_be_visible()
        page.keyboard.press("/")
        search = page.get_by_label("Search memories")
        expect(search).to_be_visible()
        expect(search).to_be_focused()
        assert errors == []
    finally:
        context.close()


def test_pinning_the_memory_being_edited_does_not_refuse_the_edit(
    server: Server, open_tab: Any
) -> None:
    """Pin stays on the row while its edit form is open: this tab's own pin was taken for a
    change made elsewhere, and the draft's save was refused as stale."""
    bank = _bank(server, "pin-while-editing")
    saved = _save(server, bank, "The user's locker code is on the fridge")
    page = open_tab(bank).page
    row = page.locator(f".mw-memory[data-id='{saved['memory']['id']}']")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user's locker code is in the drawer")
    row.get_by_role("button", name="Pin").click()
    expect(row.locator(".mw-badge-pin")).to_have_text("pinned")
    expect(row.get_by_role("alert")).to_be_hidden()
    row.get_by_role("button", name="Save", exact=True).click()
    expect(_row(page, "drawer").locator(".mw-memory-meta")).to_contain_text("rev 2")
    [memory] = server.call("memory::list", {"bank": bank})["memories"]
    assert (memory["text"], memory["pinned"]) == ("The user's locker code is in the drawer", True)


def test_the_settings_panel_shows_a_change_made_elsewhere_when_opened_again(
    server: Server, open_tab: Any
) -> None:
    """The settings were read once per page: after another tab (or a hand edit of the file)
    changed one, the panel went on showing the old value, and setting it back to what it showed
    was impossible (the form saw no change, Save stayed disabled)."""
    page = open_tab(_bank(server, "settings-elsewhere"), "settings").page
    field = page.locator("#mw-setting-recall_limit")
    expect(field).to_have_value("6")
    page.get_by_role("tab", name="Memories").click()
    try:
        server.call("console::settings::set", {"values": {"recall_limit": 9}})  # another tab
        page.get_by_role("tab", name="Settings").click()
        expect(field).to_have_value("9")
        field.fill("6")
        _save_settings(page, "recall_limit")
        assert "recall_limit: 6" in server.config.read_text()
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_settings_save_from_a_stale_panel_is_refused_and_offers_a_reload(
    server: Server, open_tab: Any
) -> None:
    """Two tabs show the settings; the first saves `recall_limit`, then the second, which still
    shows the old value: refused (not written over the first), said so, with a reload that shows
    what is in effect, from which the save lands."""
    bank = _bank(server, "settings-stale")
    first, second = open_tab(bank, "settings").page, open_tab(bank, "settings").page
    try:
        for page in (first, second):
            expect(page.locator("#mw-setting-recall_limit")).to_have_value("6")
        first.locator("#mw-setting-recall_limit").fill("7")
        _save_settings(first, "recall_limit")
        second.locator("#mw-setting-recall_limit").fill("9")
        second.get_by_role("button", name="Save settings").click()
        expect(second.locator(".mw-settings .mw-notice")).to_contain_text("changed elsewhere")
        assert "recall_limit: 7" in server.config.read_text()  # the first save stands

        second.get_by_role("button", name="Reload settings").click()
        expect(second.locator("#mw-setting-recall_limit")).to_have_value("7")
        expect(second.locator(".mw-settings .mw-notice")).to_be_hidden()
        second.locator("#mw-setting-recall_limit").fill("9")
        _save_settings(second, "recall_limit")
        assert "recall_limit: 9" in server.config.read_text()
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_long_search_or_lane_with_no_space_never_makes_the_page_scroll_sideways(
    server: Server, open_tab: Any
) -> None:
    """A memory's context lane (shown up to 60 characters) and the search line ("N results for
    “…”") hold what was written or typed, which can be a URL or a path with no space: on a phone
    each pushed the page wider than the screen."""
    bank = _bank(server, "long-lane")
    _save(server, bank, "A memory formed in a long context", context="c" * 300)
    page = open_tab(bank, viewport=PHONE).page
    expect(_row(page, "long context").locator(".mw-lane")).to_have_count(1)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"a long context lane scrolls the page sideways by {overflow}px"
    page.get_by_label("Search memories").fill("https://example.com/" + "a" * 120)
    page.get_by_label("Search memories").press("Enter")
    expect(page.locator(".mw-summary")).to_contain_text("results for")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"a long search scrolls the page sideways by {overflow}px"


def test_an_unsaved_setting_does_not_hold_up_switching_banks(server: Server, open_tab: Any) -> None:
    """The settings are the server's, not a bank's: switching banks with one typed but unsaved
    asked "Discard unsaved changes? … in bank X", discarded nothing when confirmed, and asked
    again at every later switch."""
    first, second = _bank(server, "settings-switch-a"), _bank(server, "settings-switch-b")
    page = open_tab(first, "settings").page
    field = page.locator("#mw-setting-recall_limit")
    expect(field).to_have_value("6")
    field.fill("7")
    page.locator(".mw-bank-button", has_text=second).click()
    expect(page.locator(".mw-bank-name")).to_have_text(second)
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(field).to_have_value("7")  # still the person's to save
    assert "recall_limit: 6" in server.config.read_text()


# From now on each settings read is answered by the server at once but handed to the page only at
# `window.__release()` (a slow server, a loaded machine). `fetch` is looked up at each call, so
# wrapping it reaches the page's transport; the answer handed over is already read, so whatever
# the page does with it runs before the next thing the browser is asked to do. A held read marks
# the page (`html[data-held]`, `_HELD`): a selector is waited for without `eval`, which the
# console's CSP refuses (`wait_for_function("…")` failed so whenever its first check was false,
# as on a loaded machine).
_HOLD_SETTINGS_READS = """() => {
  const real = window.fetch
  const held = []
  window.__release = () => held.splice(0).forEach((release) => release())
  window.fetch = (url, options) => String(url).endsWith('/console/settings')
    ? real(url, options).then((response) => response.json()).then((answer) => new Promise(
        (resolve) => {
          held.push(() => resolve({ ok: true, status: 200, json: async () => answer }))
          document.documentElement.dataset.held = String(held.length)
        }))
    : real(url, options)
}"""
_HELD = "html[data-held]"


def test_a_settings_read_landing_after_a_field_was_clicked_keeps_the_focus_for_typing(
    server: Server, open_tab: Any
) -> None:
    """A settings read (the tab opened again, a live resync) redrew the whole form: landing after
    the person had clicked into a field but before they typed, it took the field (and the focus)
    out of the page, and what they typed next went nowhere."""
    page = open_tab(_bank(server, "settings-slow-read"), "settings").page
    field = page.locator("#mw-setting-recall_limit")
    expect(field).to_have_value("6")
    page.evaluate(_HOLD_SETTINGS_READS)
    page.get_by_role("tab", name="Doctor").click()
    try:
        server.call("console::settings::set", {"values": {"recall_limit": 9}})  # another tab
        page.get_by_role("tab", name="Settings").click()  # read again on opening: held
        expect(page.locator(_HELD)).to_have_count(1)
        field.click()
        page.evaluate("window.__release()")
        expect(field).to_have_value("9")  # the read landed: nothing typed yet, so it shows
        page.keyboard.press("Backspace")
        page.keyboard.type("7")
        expect(field).to_have_value("7")
        expect(field).to_be_focused()
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_settings_read_landing_as_a_field_takes_the_focus_keeps_what_is_filled_in(
    server: Server, open_tab: Any
) -> None:
    """The flake of the settings-switch test above, made certain: Playwright's fill focuses the
    field, then types; the live resync's read (slow on a loaded machine) landed in between,
    redrew the form, and the "7" went to a field no longer in the page (it read "6" again)."""
    first, second = _bank(server, "settings-focus-a"), _bank(server, "settings-focus-b")
    page = open_tab(first, "settings").page
    field = page.locator("#mw-setting-recall_limit")
    expect(field).to_have_value("6")
    page.evaluate(_HOLD_SETTINGS_READS)
    page.evaluate(
        "document.addEventListener('focusin', (event) => {"
        " if (event.target.id === 'mw-setting-recall_limit') window.__release() })"
    )
    page.get_by_role("tab", name="Doctor").click()
    page.get_by_role("tab", name="Settings").click()  # read again on opening: held
    expect(page.locator(_HELD)).to_have_count(1)
    field.fill("7")  # its focus lets the read land, before its typing
    page.locator(".mw-bank-button", has_text=second).click()
    expect(page.locator(".mw-bank-name")).to_have_text(second)
    expect(field).to_have_value("7")


def test_raising_max_rule_chars_in_settings_clears_the_rules_over_budget_note(
    server: Server, open_tab: Any
) -> None:
    """The rules panel's budget note follows `max_rule_chars`: raised in the Settings tab, the
    Rules tab went on naming the rules "cut or left out" (no rule changed, so nothing re-read)."""
    bank = _bank(server, "budget-raised")
    _rule(server, bank, "long", "ok " * 2500)  # 7,500 characters, past the 6,000 default
    page = open_tab(bank, "rules").page
    note = page.locator(".mw-rule-budget")
    expect(note).to_contain_text("long.md")
    try:
        page.get_by_role("tab", name="Settings").click()
        page.locator("#mw-setting-max_rule_chars").fill("9000")
        _save_settings(page, "max_rule_chars")
        page.get_by_role("tab", name="Rules").click()
        expect(note).to_be_hidden()
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_preview_opened_again_after_a_settings_change_shows_what_a_turn_gets_now(
    server: Server, open_tab: Any
) -> None:
    """The preview is "what a turn would get": after `recall_limit` was lowered in the Settings
    tab, going back to Preview still listed the turn's memories as they were before."""
    bank = _bank(server, "preview-settings")
    for pet in ("dog Rex", "cat Tom", "parrot Kiwi"):
        _save(server, bank, f"The user's pet {pet} eats at noon")
    page = open_tab(bank, "preview").page
    page.get_by_label("Message to preview").fill("when do the user's pets eat?")
    page.get_by_role("button", name="Preview", exact=True).click()
    items = page.locator(".mw-preview-result .mw-preview-memory")
    expect(items).to_have_count(3)
    try:
        page.get_by_role("tab", name="Settings").click()
        page.locator("#mw-setting-recall_limit").fill("1")
        _save_settings(page, "recall_limit")
        page.get_by_role("tab", name="Preview").click()
        expect(items).to_have_count(1)
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_link_to_a_bank_in_the_trash_opened_in_the_same_tab_is_not_followed(
    server: Server, open_tab: Any
) -> None:
    """A bookmark of a bank since moved to the trash, opened in a tab already on the console,
    opened the gone bank (404s behind "does not exist", its save boxes ready to create it anew),
    where the same link opened fresh starts on a remaining bank."""
    here, gone = _bank(server, "hash-stays"), _bank(server, "hash-trashed")
    server.call("memory::bank::delete", {"name": gone})
    page = open_tab(here).page
    page.evaluate(f"location.hash = '#/bank/{gone}/rules'")
    expect(page.locator(".mw-toast")).to_contain_text(f'Bank "{gone}" does not exist')
    expect(page.locator(".mw-bank-name")).to_have_text(here)
    expect(page.locator("#mw-tab-rules")).to_have_attribute("aria-selected", "true")
    assert page.evaluate("location.hash") == f"#/bank/{here}/rules"


def test_a_link_to_a_bank_in_the_trash_opened_fresh_says_where_it_landed(
    server: Server, browser: Any
) -> None:
    """The same bookmark opened in a new tab started on another bank without a word: the person
    read (and saved into) that bank as the one their link named."""
    _bank(server, "fresh-link-stays")
    gone = _bank(server, "fresh-link-trashed")
    server.call("memory::bank::delete", {"name": gone})
    first = server.call("memory::bank::list")["banks"][0]["name"]
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto(f"{server.url}/#/bank/{gone}/rules")
        expect(page.locator(".mw-bank-name")).to_have_text(first)
        expect(page.locator(".mw-toast")).to_contain_text(
            f'Bank "{gone}" does not exist (any more); showing "{first}"'
        )
        expect(page).to_have_url(re.compile(re.escape(f"#/bank/{first}/rules") + "$"))
    finally:
        context.close()


def test_a_memorys_age_keeps_up_with_the_clock_on_a_page_left_open(
    server: Server, browser: Any, open_tab: Any
) -> None:
    """ "updated just now" was worked out once, when the row was drawn: on a page left open (a
    quiet bank, no change to redraw it) a memory saved hours ago still said "just now"."""
    bank = _bank(server, "ages")
    _save(server, bank, "The user waters the plants on Sundays")
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.clock.install()  # the page's clock, moved on by hand below; it flows meanwhile
        page = open_tab(bank, context=context).page
        when = _row(page, "waters the plants").locator(".mw-memory-meta time")
        expect(when).to_have_text("just now")
        # Three hours on, no timer fired by the jump (the live stream stays up, nothing to
        # redraw the row); the person comes back to the tab.
        later = page.evaluate("Date.now()") / 1000 + 3 * 3600
        page.clock.set_system_time(datetime.fromtimestamp(later, UTC))
        page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
        expect(when).to_have_text("3 hours ago")
    finally:
        context.close()


def test_text_with_windows_line_ends_is_not_taken_for_an_unsaved_edit(
    server: Server, open_tab: Any
) -> None:
    """A rule file or memory written with `\\r\\n` (Notepad; seed 003: "edit them in any
    editor"): a text box reads it back with `\\n`, so an untouched edit counted as changed (Esc
    asked to discard, a bank switch warned), and a rule typed back to what is saved stayed
    "unsaved changes"."""
    bank = _bank(server, "crlf")
    _save(server, bank, "The user's shopping list:\r\nmilk\r\nbread")
    _rule(server, bank, "style", "# Style\r\nShort answers.\r\n")
    page = open_tab(bank, "rules").page
    editor = page.get_by_label("Rule style")
    expect(editor).to_have_value("# Style\nShort answers.\n")
    editor.press("End")
    editor.press("x")
    card = page.locator(".mw-rule[data-rule='style']")
    expect(card).to_have_attribute("data-status", "dirty")
    editor.press("Backspace")  # back to what is saved
    expect(card).to_have_attribute("data-status", "clean")
    page.get_by_role("tab", name="Memories").click()
    row = _row(page, "shopping list")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").press("Escape")  # nothing changed: closes at once
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.locator(".mw-editing")).to_have_count(0)


def test_keyboard_focus_returns_to_the_row_when_its_edit_ends(
    server: Server, open_tab: Any
) -> None:
    """Ending a memory's edit (Esc, Cancel, a save) removed the form holding the focus: it fell
    to the page's <body>, and someone on a keyboard started again from the top of the page."""
    bank = _bank(server, "edit-focus")
    saved = _save(server, bank, "The user takes the 8:15 train")
    page = open_tab(bank).page
    row = page.locator(f".mw-memory[data-id='{saved['memory']['id']}']")
    edit = row.get_by_role("button", name="Edit")
    edit.click()
    page.get_by_label("Edit memory text").press("Escape")
    expect(edit).to_be_focused()
    edit.press("Enter")
    page.get_by_label("Edit memory text").fill("The user takes the 8:45 train")
    row.get_by_role("button", name="Save", exact=True).press("Enter")
    expect(row.locator(".mw-memory-text")).to_have_text("The user takes the 8:45 train")
    expect(edit).to_be_focused()


def test_keyboard_focus_moves_to_the_next_row_when_the_focused_one_is_deleted(
    server: Server, open_tab: Any
) -> None:
    """Deleting a memory removed the row holding the focus (its Delete button): the focus fell to
    the page's <body>, and someone on a keyboard started again from the top of the page."""
    bank = _bank(server, "delete-focus")
    older = _save(server, bank, "The user parks on level two")
    _save(server, bank, "The user parks on level three")
    page = open_tab(bank).page
    newest = _row(page, "level three")
    newest.get_by_role("button", name="Delete").press("Enter")
    page.get_by_role("dialog").get_by_role("button", name="Delete memory").press("Enter")
    expect(newest).to_have_count(0)
    next_row = page.locator(f".mw-memory[data-id='{older['memory']['id']}']")
    expect(next_row.get_by_role("button", name="Delete")).to_be_focused()


def test_the_search_shortcut_leaves_an_open_dialog_alone(server: Server, open_tab: Any) -> None:
    """`/` pressed while a dialog asks something (a delete, a discard) switched the page behind
    it to the memories tab; the dialog's question is then about a rule no longer on screen."""
    bank = _bank(server, "slash-dialog")
    _rule(server, bank, "tone", "Be brief.")
    page = open_tab(bank, "rules").page
    page.locator(".mw-rule[data-rule='tone']").get_by_role("button", name="Delete…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text('Delete rule "tone"?')
    page.keyboard.press("/")
    expect(page.locator("#mw-tab-rules")).to_have_attribute("aria-selected", "true")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)


# --- review C: erasures, and a bank setting set back to its default ------------------------------


def test_an_erasure_elsewhere_takes_the_erased_memories_off_the_page_at_once(
    server: Server, open_tab: Any
) -> None:
    """`memory::forget-subject` from another door while a person edits one of that subject's
    memories: every erased row leaves the page live, the one being edited too. The list was
    holding live changes back (an edit open) and the erasure brought older rows into the page,
    so the erased rows — their destroyed text on screen, one in an edit box — stayed."""
    bank = _bank(server, "erased-live")
    for i in range(51):
        _save(server, bank, f"General note number {i} about the office")
    _save(server, bank, "Rui lives at Rua Augusta 12", subject="rui")
    _save(server, bank, "Rui takes his coffee without sugar", subject="rui")
    page = open_tab(bank).page
    erased = page.locator(".mw-memory").filter(has_text=re.compile("Rua Augusta|Rui takes"))
    expect(erased).to_have_count(2)
    _row(page, "without sugar").get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("Rui takes his coffee with sugar now")
    forgotten = server.call(
        "memory::forget-subject", {"bank": bank, "subject": "rui", "confirm": "destructive"}
    )
    assert len(forgotten["erased"]) == 2
    expect(erased).to_have_count(0)
    expect(page.get_by_label("Edit memory text")).to_have_count(0)
    expect(page.locator(".mw-toast", has_text="erased")).to_have_count(1)
    expect(page.locator(".mw-memory")).to_have_count(50)  # the page refilled from older ones


def test_a_bank_setting_emptied_in_its_dialog_returns_to_the_configured_default(
    server: Server, open_tab: Any
) -> None:
    """The API takes null for "back to the configured default"; the dialog sent 0 for an
    emptied threshold or weight (three emptied weights were refused: "at least one association
    weight must be above 0"), an empty mapping for an emptied retention, and had no way back
    for access or scope. An emptied field, or "configured default", now sends null."""
    bank = _bank(server, "back-to-default")
    server.call(
        "memory::bank::configure",
        {
            "name": bank,
            "relevance_threshold": 0.3,
            "max_memories": 50,
            "retention": {"context": 30},
            "association_weights": {"content": 0.5, "context": 0.5, "intention": 0.0},
            "conscious_access": "read",
            "scope": "shared",
        },
    )
    page = open_tab(bank).page
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("configured default")  # the dialog says how
    for label in ("relevance threshold", "max memories", "Retention days", "weights: "):
        for box in dialog.get_by_label(label).all():
            box.fill("")
    for name in ("conscious access", "scope"):
        picker = dialog.get_by_role("combobox", name=re.compile(f"^{name}"))
        picker.select_option(label="configured default")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog).to_have_count(0)
    settings = server.call("memory::bank::get", {"name": bank})["bank"]["settings"]
    fresh = _bank(server, "back-to-default-fresh")
    assert settings == server.call("memory::bank::get", {"name": fresh})["bank"]["settings"]
    chosen = (server.data_dir / bank / "bank.yaml").read_text()
    for key in ("relevance_threshold", "max_memories", "retention", "association_weights"):
        assert key not in chosen, chosen
    assert "conscious_access" not in chosen and "scope" not in chosen, chosen


def test_emptying_only_some_weights_says_what_to_do_and_sends_nothing(
    server: Server, open_tab: Any
) -> None:
    """The three weights are one setting: one emptied alone has no default of its own to take
    (the model's 1/0/0 is not the configured blend), so the dialog says so instead of sending
    a 0 that the worker takes, or refuses in words about another thing."""
    bank = _bank(server, "some-weights")
    tab = open_tab(bank)
    page = tab.page
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("weights: context").fill("")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog.locator(".mw-rail-status")).to_contain_text("all three weights")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)
    assert not [r for r in tab.requests if r.url.endswith("/memory/bank/configure")]


def test_a_semantic_search_without_an_embedder_says_so_rather_than_that_nothing_matches(
    server: Server, open_tab: Any
) -> None:
    """Semantic mode on a worker with no embedder compares nothing (`semantic-unavailable`):
    the page said "Nothing in this bank matches that search" over a bank that holds the very
    word, sending the person to rephrase instead of to another mode."""
    bank = _bank(server, "no-embedder")
    _save(server, bank, "The user drinks café com leite every morning")
    page = open_tab(bank).page
    page.get_by_label("Retrieval mode").select_option("semantic")
    page.get_by_label("Search memories").fill("café")
    page.get_by_label("Search memories").press("Enter")
    expect(page.locator(".mw-summary")).to_have_attribute("data-retrieval", "semantic-unavailable")
    empty = page.locator(".mw-memories .mw-empty")
    expect(empty).to_contain_text("no embedder")
    expect(empty).to_contain_text("hybrid or lexical")
    page.get_by_label("Retrieval mode").select_option("lexical")
    expect(_row(page, "café com leite")).to_have_count(1)
    expect(empty).to_be_hidden()


def test_on_a_phone_the_keyboard_focus_follows_between_the_bank_list_and_a_bank(
    server: Server, open_tab: Any
) -> None:
    """A narrow window shows the bank list or a bank, never both. Picking a bank (or going back
    with "← Banks") from the keyboard hid the very button that had the focus: it fell to <body>,
    and the next Tab after going back left the page altogether."""
    bank = _bank(server, "phone-keys")
    page = open_tab(bank, viewport=PHONE).page
    page.get_by_role("button", name="← Banks").press("Enter")
    label = page.locator(".mw-bank-label", has_text=re.compile(f"^{bank}$"))
    rail_button = page.locator(".mw-bank-button").filter(has=label)
    expect(rail_button).to_be_focused()
    rail_button.press("Enter")
    expect(page.locator(".mw-rail")).to_be_hidden()
    expect(page.locator("#mw-tab-memories")).to_be_focused()


def test_an_erasure_takes_the_erased_persons_name_out_of_the_preview_suggestions(
    server: Server, open_tab: Any
) -> None:
    """The preview suggests messages from the bank's tags and entities, worked out once when
    the bank opened: after `memory::forget-subject` the erased memories' entity ("tell me about
    Rui") stayed offered on the page, a name the erasure removed everywhere else."""
    bank = _bank(server, "erased-suggestions")
    _save(server, bank, "The office opens at nine", entities=["office"])
    _save(server, bank, "Rui was born in Braga", subject="rui", entities=["Rui"])
    page = open_tab(bank, "preview").page
    suggestions = page.get_by_label("Suggested messages")
    expect(suggestions.get_by_role("button", name="tell me about Rui")).to_have_count(1)
    server.call(
        "memory::forget-subject", {"bank": bank, "subject": "rui", "confirm": "destructive"}
    )
    expect(suggestions.get_by_role("button", name="tell me about Rui")).to_have_count(0)
    expect(suggestions.get_by_role("button", name="tell me about office")).to_have_count(1)


def test_a_setting_with_fixed_choices_is_picked_from_them_in_the_settings_panel(
    server: Server, open_tab: Any
) -> None:
    """`extraction_prompt`, `conscious_access` and `scope` take one of a few words: the panel
    gave a free text box, where the person had to guess them (the prompt versions are named
    nowhere on the page) and learn of a typo only from a refusal."""
    page = open_tab(_bank(server, "settings-choices"), "settings").page
    prompt = page.locator("#mw-setting-extraction_prompt")
    expect(prompt).to_have_js_property("tagName", "SELECT")
    expect(prompt.locator("option")).to_have_text(["extraction-v1", "extraction-v2"])
    expect(prompt).to_have_value("extraction-v2")
    expect(page.locator("#mw-setting-conscious_access option")).to_have_text(
        ["none", "read", "read_write"]
    )
    try:
        prompt.select_option("extraction-v1")
        _save_settings(page, "extraction_prompt")
        assert 'extraction_prompt: "extraction-v1"' in server.config.read_text()
    finally:
        server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was


def test_a_search_that_fills_its_limit_says_more_may_match(server: Server, open_tab: Any) -> None:
    """A search shows at most 50 hits: over a bank where 60 memories hold the word the page said
    "50 results", as if those were all that matched."""
    bank = _bank(server, "search-limit")
    for i in range(60):
        _save(server, bank, f"Budget line number {i} for the spring trip")
    _save(server, bank, "Just one memory about the cello")
    page = open_tab(bank).page
    search = page.get_by_label("Search memories")
    search.fill("budget")
    search.press("Enter")
    summary = page.locator(".mw-memories .mw-summary")
    expect(summary).to_contain_text("the best 50 results for “budget”")
    expect(summary).to_contain_text("more may match")
    search.fill("cello")
    search.press("Enter")
    expect(summary).to_contain_text("1 result for “cello”")
    expect(summary).not_to_contain_text("more may match")


# --- review I2: the console as a person meets it -------------------------------------------------


def test_a_history_shortened_by_compaction_does_not_call_its_oldest_kept_revision_created(
    server: Server, open_tab: Any
) -> None:
    """`memory::compact` drops a memory's older revisions: what its history then starts with is
    a later revision (here an edit, then a pin), which the page called "created"."""
    bank = _bank(server, "compacted")
    memory_id = _save(server, bank, "The office is at Rua Augusta 10")["memory"]["id"]
    server.call(
        "memory::update", {"bank": bank, "id": memory_id, "text": "The office is at Rua Augusta 12"}
    )
    server.call("memory::pin", {"bank": bank, "id": memory_id, "pinned": True})
    server.call("memory::compact", {"bank": bank, "horizon_days": 0})
    row = _row(open_tab(bank).page, "Rua Augusta 12")
    row.get_by_role("button", name="History").click()
    history = row.locator(".mw-history")
    expect(history.locator(".mw-revision")).to_have_count(1)
    expect(history.locator(".mw-revision-kind")).not_to_have_text("created")
    expect(history.locator(".mw-revision-kind")).to_contain_text("earlier revisions compacted")
    expect(history.locator(".mw-history-title")).to_contain_text("earlier ones compacted")


def test_typing_in_an_edit_goes_on_when_a_memory_above_is_deleted_elsewhere(
    server: Server, open_tab: Any
) -> None:
    """A row leaving above the one being edited moved every row below it (each re-inserted), the
    edit box with them: it lost the focus, and what the person typed next went nowhere."""
    bank = _bank(server, "edit-typing")
    _save(server, bank, "The user parks on level two")
    _save(server, bank, "The user parks on level three")
    page = open_tab(bank).page
    rows = page.locator(".mw-memory")
    expect(rows).to_have_count(2)
    above, edited = rows.nth(0).get_attribute("data-id"), rows.nth(1).get_attribute("data-id")
    text = rows.nth(1).locator(".mw-memory-text").inner_text()
    page.locator(f".mw-memory[data-id='{edited}']").get_by_role("button", name="Edit").click()
    box = page.get_by_label("Edit memory text")
    box.press("End")
    page.keyboard.type(" near")
    server.call("memory::delete", {"bank": bank, "id": above})
    expect(rows).to_have_count(1)
    page.keyboard.type(" the lift")
    expect(box).to_have_value(f"{text} near the lift")
    expect(box).to_be_focused()


def test_keyboard_focus_follows_a_row_that_pinning_moves_to_the_top(
    server: Server, open_tab: Any
) -> None:
    """The list is newest change first: a row pinned (or edited) moves to the top, and the move
    took the focus off its button, to the page's <body>."""
    bank = _bank(server, "pin-focus")
    _save(server, bank, "The user parks on level two")
    _save(server, bank, "The user parks on level three")
    page = open_tab(bank).page
    rows = page.locator(".mw-memory")
    expect(rows).to_have_count(2)
    older = rows.nth(1).get_attribute("data-id")  # the second row, whichever the list put there
    page.locator(f".mw-memory[data-id='{older}']").get_by_role("button", name="Pin").press("Enter")
    expect(page.locator(".mw-memory").first).to_have_attribute("data-id", older)
    unpin = page.locator(f".mw-memory[data-id='{older}']").get_by_role("button", name="Unpin")
    expect(unpin).to_be_focused()


def test_a_number_typed_with_an_exponent_is_saved_as_typed_not_cut_at_the_e(
    server: Server, open_tab: Any
) -> None:
    """`1e4` is a number the browser's number box takes (10000): read with `parseInt` it was 1,
    saved as such — every rule cut to one character, a bank capped at one memory — with the
    toast saying all went well."""
    bank = _bank(server, "exponent")
    page = open_tab(bank, "settings").page
    box = page.locator("#mw-setting-max_rule_chars")
    expect(box).not_to_have_value("")
    box.fill("1e4")
    _save_settings(page, "max_rule_chars")
    text = server.config.read_text()
    server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was
    assert "max_rule_chars: 10000" in text

    page.get_by_role("tab", name="Memories").click()  # the bank's own header, with its Settings…
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("max memories (0 = unlimited)").fill("2e3")
    dialog.get_by_role("button", name="Save settings").click()
    expect(dialog).to_have_count(0)
    settings = server.call("memory::bank::get", {"name": bank})["bank"]["settings"]
    assert settings["max_memories"] == 2000


def test_a_retention_that_is_not_a_whole_number_of_days_is_refused_not_cut(
    server: Server, open_tab: Any
) -> None:
    """`context=30 days` or `context=7.5` was read with `parseInt` (30, 7) and saved: a value
    the person never gave. It goes to the worker as typed, whose refusal the dialog shows."""
    bank = _bank(server, "retention-typed")
    tab = open_tab(bank)
    tab.refusals.add(400)  # refused on purpose
    page = tab.page
    page.get_by_role("button", name="Settings…").click()
    dialog = page.get_by_role("dialog")
    for typed in ("context=30 days", "context=7.5", "context="):
        dialog.get_by_label("Retention days per category").fill(typed)
        dialog.get_by_role("button", name="Save settings").click()
        expect(dialog.locator(".mw-rail-status")).to_contain_text("invalid_input")
        dialog.locator(".mw-rail-status").evaluate("e => { e.textContent = '' }")
    dialog.get_by_role("button", name="Close").click()
    assert server.call("memory::bank::get", {"name": bank})["bank"]["settings"]["retention"] == {}


def test_a_tag_picked_outside_the_top_chips_shows_its_own_count(
    server: Server, open_tab: Any
) -> None:
    """The chips show the 30 most used tags; one picked from a row beyond them was added as a chip
    counting 0, beside a list of the memories it tags."""
    bank = _bank(server, "many-tags")
    for n in range(30):
        for copy in ("first", "second"):
            _save(server, bank, f"Topic {n} note, the {copy}", tags=[f"topic-{n}"])
    _save(server, bank, "The one note about a rare topic", tags=["rare"])
    page = open_tab(bank).page
    expect(page.locator("#mw-panel-memories .mw-chips > .mw-chip")).to_have_count(30)
    _row(page, "rare topic").get_by_role("button", name="#rare").click()
    expect(page.locator(".mw-summary")).to_contain_text("1 memory tagged #rare")
    expect(page.locator("#mw-panel-memories .mw-chip[data-tag='rare']")).to_have_text("#rare 1")


def test_a_bank_deleted_while_the_tab_only_polls_is_left_for_a_remaining_one(
    server: Server, browser: Any
) -> None:
    """No live stream (a reconnect after a server restart, a proxy that holds it, every live slot
    taken): the trash event never reaches the tab, and a resync refetched the bank list but left
    the page on the bank that is gone, its save box and "Add rule" ready to create it anew (as
    after a data dir swapped for another, which only says "resync")."""
    bank = _bank(server, "polled-away")
    _save(server, bank, "This bank goes while nobody streams")
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.route("**/console/events", lambda route: route.abort())
        page = context.new_page()
        page.goto(f"{server.url}/?poll_ms=300#/bank/{bank}/memories")
        expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "polling")
        expect(_row(page, "nobody streams")).to_have_count(1)
        server.call("memory::bank::delete", {"name": bank})
        expect(page.locator(".mw-bank-button", has_text=bank)).to_have_count(0)
        expect(
            page.locator(".mw-toast", has_text=f'Bank "{bank}" is not there any more')
        ).to_have_count(1)
        expect(page.locator(".mw-bank-name")).not_to_have_text(bank)
        expect(page).not_to_have_url(re.compile(re.escape(bank)))  # set once the next is chosen
    finally:
        context.close()


def test_keyboard_focus_stays_on_the_pager_at_the_last_page(server: Server, open_tab: Any) -> None:
    """ "Older →" pressed onto the last page is disabled there: the focus on it fell to the
    page's <body>. It moves to "← Newer", so the keyboard can page back."""
    bank = _bank(server, "pager-focus")
    for n in range(51):
        _save(server, bank, f"Paged note number {n}")
    page = open_tab(bank).page
    older = page.get_by_role("button", name="Older →")
    expect(page.locator(".mw-page-text")).to_have_text("1–50 of 51")
    older.press("Enter")
    expect(page.locator(".mw-page-text")).to_have_text("51–51 of 51")
    expect(older).to_be_disabled()
    newer = page.get_by_role("button", name="← Newer")
    expect(newer).to_be_focused()
    newer.press("Enter")
    expect(page.locator(".mw-page-text")).to_have_text("1–50 of 51")
    expect(older).to_be_focused()


def test_a_live_rerun_of_the_preview_keeps_the_keyboard_focus_on_its_section(
    server: Server, open_tab: Any
) -> None:
    """A change elsewhere re-runs the preview and redraws it: the sections opened stayed open,
    but the one opened from the keyboard lost the focus, to the page's <body>."""
    bank = _bank(server, "preview-focus")
    _save(server, bank, "The user's cat is called Mia")
    page = open_tab(bank, "preview").page
    page.get_by_label("Message to preview").fill("what is my cat called?")
    page.get_by_role("button", name="Preview", exact=True).click()
    result = page.locator(".mw-preview-result")
    message = result.locator("summary", has_text="Appended message")
    message.press("Enter")
    expect(result.locator("details").last).to_have_attribute("open", "")
    _save(server, bank, "The user's cat Mia sleeps in the sun")
    expect(result.locator(".mw-preview-memory", has_text="sleeps in the sun")).to_have_count(1)
    expect(message).to_be_focused()
    expect(result.locator("details").last).to_have_attribute("open", "")


def test_a_search_within_a_tag_says_the_tag_it_is_limited_to(server: Server, open_tab: Any) -> None:
    """A search runs within the tag chip pressed (recall's `tag`): the list said "tagged #x", a
    search's line and its empty state did not, so a search that found nothing in the tag read
    as nothing in the bank."""
    bank = _bank(server, "search-in-tag")
    _save(server, bank, "The invoice run is on Fridays", tags=["billing"])
    _save(server, bank, "The deploy window is on Fridays", tags=["ops"])
    page = open_tab(bank).page
    page.locator("#mw-panel-memories .mw-chip[data-tag='billing']").click()
    expect(page.locator("#mw-panel-memories .mw-summary")).to_contain_text("tagged #billing")
    search = page.get_by_label("Search memories")
    search.fill("Fridays")
    search.press("Enter")
    summary = page.locator("#mw-panel-memories .mw-summary")
    expect(summary).to_contain_text("1 result for “Fridays” tagged #billing")
    search.fill("deploy window")
    search.press("Enter")
    expect(summary).to_contain_text("0 results for “deploy window” tagged #billing")
    expect(page.locator("#mw-panel-memories .mw-empty")).to_have_text(
        "Nothing tagged #billing matches that search."
    )


def test_keyboard_focus_goes_to_the_bank_shown_after_deleting_one(
    server: Server, open_tab: Any
) -> None:
    """ "Delete bank…" is disabled while no bank is shown: pressed from the keyboard, the focus on
    it fell to the page's <body>. It goes to the bank shown next, in the rail."""
    _bank(server, "aaa-kept")
    bank = _bank(server, "focus-deleted")
    page = open_tab(bank).page
    page.get_by_role("button", name="Delete bank…").press("Enter")
    page.get_by_role("dialog").get_by_role("button", name="Move to trash").press("Enter")
    expect(page.locator(".mw-bank-name")).not_to_have_text(bank)
    expect(page.locator(".mw-bank-button[aria-current='true']")).to_be_focused()


def test_a_button_pressed_from_the_keyboard_that_disables_itself_keeps_the_focus_near(
    server: Server, open_tab: Any
) -> None:
    """A rule's Save, the Settings tab's "Save settings" and the Doctor's "Run checks" are
    disabled by their own press (while saving or running, or after): the focus on them fell to
    the page's <body>. It goes to the editor, to the field saved, back to the button."""
    bank = _bank(server, "self-disabling")
    _rule(server, bank, "tone", "Be brief.\n")
    page = open_tab(bank, "rules").page
    editor = page.get_by_label("Rule tone")
    editor.fill("Be very brief.\n")
    page.locator(".mw-rule[data-rule='tone']").get_by_role("button", name="Save").press("Enter")
    expect(page.locator(".mw-toast", has_text='Rule "tone" saved')).to_have_count(1)
    expect(editor).to_be_focused()

    page.get_by_role("tab", name="Settings").click()
    field = page.locator("#mw-setting-recall_limit")
    field.fill("7")
    page.get_by_role("button", name="Save settings").press("Enter")
    expect(page.locator(".mw-toast", has_text="Saved recall_limit")).to_have_count(1)
    server.config.write_text("recall_limit: 6\n")  # leave the shared server as it was
    expect(field).to_be_focused()

    page.get_by_role("tab", name="Doctor").click()
    verdict = page.locator(".mw-verdict")
    expect(verdict).not_to_have_text("Running…")
    run = page.get_by_role("button", name="Run checks")
    run.press("Enter")
    expect(run).to_be_enabled()
    expect(verdict).not_to_have_text("Running…")
    expect(run).to_be_focused()


def test_revert_and_load_latest_pressed_from_the_keyboard_hand_the_focus_to_the_draft(
    server: Server, open_tab: Any
) -> None:
    """A rule's Revert (disabled once reverted) and a memory edit's "Load latest" (hidden once
    loaded) took the focus with them, to the page's <body>: it goes to the text being edited."""
    bank = _bank(server, "revert-focus")
    _rule(server, bank, "tone", "Be brief.\n")
    memory_id = _save(server, bank, "The user drinks green tea")["memory"]["id"]
    page = open_tab(bank, "rules").page
    editor = page.get_by_label("Rule tone")
    editor.fill("Be long-winded.\n")
    page.locator(".mw-rule[data-rule='tone']").get_by_role("button", name="Revert").press("Enter")
    expect(editor).to_have_value("Be brief.\n")
    expect(editor).to_be_focused()

    page.get_by_role("tab", name="Memories").click()
    row = page.locator(f".mw-memory[data-id='{memory_id}']")
    row.get_by_role("button", name="Edit").click()
    box = page.get_by_label("Edit memory text")
    box.fill("The user drinks jasmine tea")
    server.call("memory::update", {"bank": bank, "id": memory_id, "tags": ["drinks"]})
    load = row.get_by_role("button", name="Load latest (keep my text)")
    load.press("Enter")
    expect(load).to_be_hidden()
    expect(box).to_be_focused()
    expect(box).to_have_value("The user drinks jasmine tea")


def test_leaving_the_page_asks_first_when_a_new_memory_is_typed_but_not_saved(
    server: Server, open_tab: Any
) -> None:
    """A memory typed in "Remember something…" and not saved yet was lost without a word when
    the tab was closed or reloaded (a rule or memory draft asks). A bank switch does not ask: the
    box keeps its text across banks, so nothing would be discarded."""
    bank = _bank(server, "unsaved-new")
    _bank(server, "unsaved-new-other")
    page = open_tab(bank).page
    page.get_by_label("New memory text").fill("The user's passport expires in May")
    page.locator(".mw-bank-button", has_text="unsaved-new-other").click()
    expect(page.locator(".mw-bank-name")).to_have_text("unsaved-new-other")
    expect(page.get_by_label("New memory text")).to_have_value("The user's passport expires in May")
    with page.expect_event("dialog") as asked:
        page.close(run_before_unload=True)
    assert asked.value.type == "beforeunload"
    asked.value.dismiss()


def test_the_pager_writes_its_numbers_as_the_summary_does(server: Server, open_tab: Any) -> None:
    """Past a thousand memories the summary said "1,001 memories" and the pager "of 1001"."""
    bank = "thousand"
    records = [{"text": f"Imported note number {n}"} for n in range(1001)]
    server.call("memory::import", {"bank": bank, "records": records})
    page = open_tab(bank).page
    summary = page.locator("#mw-panel-memories .mw-summary")
    expect(summary).to_contain_text(re.compile(r"1\D?001 memories"))  # the locale's separator
    total = summary.inner_text().split(" memories")[0]
    expect(page.locator(".mw-page-text")).to_have_text(f"1–50 of {total}")


def test_deleting_a_pinned_memory_says_it_is_pinned_before_asking(
    server: Server, open_tab: Any
) -> None:
    """Pinned is the person's "keep this": the delete dialog asked about a pinned memory exactly
    as about any other, the pin (hidden behind the dialog) unmentioned."""
    bank = _bank(server, "pinned-delete")
    _save(server, bank, "The user's blood type is O negative", pinned=True)
    page = open_tab(bank).page
    _row(page, "blood type").get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete this pinned memory?")
    expect(dialog).to_contain_text("It is pinned")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)


def test_a_bank_list_that_failed_is_said_in_the_rail_not_taken_for_no_banks(
    server: Server, browser: Any
) -> None:
    """The bank list refused (a wrong token, a restarting server): the rail said so, and the bank
    selected next wrote "No banks yet" over it, which read as an empty data dir; a later selection
    also wiped the error off a list that had stopped being true."""
    bank = _bank(server, "rail-failed")
    context = browser.new_context(viewport=DESKTOP)
    try:
        # No live stream either (as with a refused token): no resync lists the banks again.
        context.route("**/console/events", lambda route: route.abort())
        context.route(
            "**/memory/bank/list",
            lambda route: route.fulfill(
                status=503,
                content_type="application/json",
                body=json.dumps({"error": {"code": "unavailable", "message": "restarting"}}),
            ),
        )
        page = context.new_page()
        page.goto(f"{server.url}/#/bank/{bank}/memories")
        expect(page.locator(".mw-bank-name")).to_have_text(bank)
        status = page.locator(".mw-rail .mw-rail-status")
        expect(status).to_have_text("Could not list banks: unavailable: restarting")
        context.unroute("**/memory/bank/list")
        page.get_by_role("button", name="Reload from disk").click()
        expect(page.locator(".mw-bank-button", has_text=bank)).to_have_count(1)
        expect(status).to_have_text("")
    finally:
        context.close()


def test_a_server_stopped_under_an_open_page_is_said_offline_and_the_page_comes_back_live(
    browser: Any, tmp_path: Path
) -> None:
    """The server stopped (a restart, a crash) under an open page: the indicator said "polling"
    ("refreshing every 15 s") while nothing answered, as when only the live stream is blocked;
    only a toast after a click told the person their page had stopped being true. It says
    "offline" at once, and "live" again when the server is back (on the same port)."""
    (tmp_path / "memory.yaml").write_text("recall_limit: 6\n")
    proc, url = _serve(tmp_path)
    context = browser.new_context(viewport=DESKTOP)
    try:
        call = Server(proc, url, tmp_path / "data", tmp_path / "memory.yaml").call
        call("memory::save", {"bank": "main", "text": "Written before the restart"})
        page = context.new_page()
        page.goto(f"{url}/#/bank/main/memories")
        indicator = page.locator(".mw-indicator")
        expect(indicator).to_have_attribute("data-mode", "live")
        expect(_row(page, "before the restart")).to_have_count(1)
        _stop(proc)
        # Found out at the stream's next retry (2 s, then 4 s), or at the latest the 15 s poll.
        expect(indicator).to_have_attribute("data-mode", "offline", timeout=20_000)
        expect(page.locator(".mw-mode-text")).to_have_text("offline")
        assert "does not answer" in (indicator.get_attribute("title") or "")
        proc, _ = _serve(tmp_path, int(url.rsplit(":", 1)[1]))
        # The stream's next retry (its back-off starts at 2 s) finds the server again.
        expect(indicator).to_have_attribute("data-mode", "live", timeout=60_000)
        call("memory::save", {"bank": "main", "text": "Written after the restart"})
        expect(_row(page, "after the restart")).to_have_count(1)
    finally:
        context.close()
        _stop(proc)
    assert "Traceback" not in (tmp_path / "serve.stderr").read_text()


def test_a_rule_add_that_fails_keeps_the_name_typed(server: Server, open_tab: Any) -> None:
    """*Add rule* refused for a reason other than the rule being there already (a restarting
    server): the toast said why and the name typed was emptied anyway, where a refused bank
    create keeps its name to try again."""
    tab = open_tab(_bank(server, "rule-add-fails"), "rules")
    tab.refusals.add(503)
    page = tab.page
    page.route(
        "**/memory/rule/set",
        lambda route: route.fulfill(
            status=503,
            content_type="application/json",
            body=json.dumps({"error": {"code": "unavailable", "message": "restarting"}}),
        ),
    )
    page.get_by_label("New rule name").fill("deploy-checklist")
    page.get_by_role("button", name="Add rule").click()
    expect(page.locator(".mw-toast", has_text="unavailable: restarting")).to_have_count(1)
    expect(page.get_by_label("New rule name")).to_have_value("deploy-checklist")
    expect(page.locator(".mw-rule-name")).to_have_count(0)


def test_ctrl_s_in_a_memory_edit_saves_it_as_in_the_rules_editor(
    server: Server, open_tab: Any
) -> None:
    """Ctrl/⌘-S saves a rule being edited; in a memory's edit it was the browser's own "Save page
    as", the edit left unsaved."""
    bank = _bank(server, "edit-ctrl-s")
    saved = _save(server, bank, "The user drinks green tea")
    page = open_tab(bank).page
    row = page.locator(f".mw-memory[data-id='{saved['memory']['id']}']")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").fill("The user drinks oolong tea")
    page.get_by_label("Edit memory text").press("Control+s")
    expect(row.locator(".mw-memory-text")).to_have_text("The user drinks oolong tea")
    expect(page.get_by_label("Edit memory text")).to_have_count(0)
    expect(row.get_by_role("button", name="Edit")).to_be_focused()
    stored = server.call("memory::get", {"bank": bank, "id": saved["memory"]["id"]})["memory"]
    assert stored["text"] == "The user drinks oolong tea"


def test_a_deleted_memory_is_restored_from_its_row_under_show_history(
    server: Server, open_tab: Any
) -> None:
    """The delete dialog says the record stays on disk and in its history, and the API brings a
    retired memory back when its text is saved again: the page had no way back, every button on
    a deleted row disabled. *Restore* does it, the tags and the pin kept."""
    bank = _bank(server, "restore")
    saved = _save(server, bank, "The user's passport expires in May", tags=["travel"], pinned=True)
    page = open_tab(bank).page
    row = page.locator(f".mw-memory[data-id='{saved['memory']['id']}']")
    row.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete memory").click()
    expect(row).to_have_count(0)
    page.get_by_text("show history").click()
    expect(row).to_have_class(re.compile(r"\bmw-retired\b"))
    row.get_by_role("button", name="Restore").press("Enter")
    expect(row).not_to_have_class(re.compile(r"\bmw-retired\b"))
    expect(row.get_by_role("button", name="Restore")).to_be_hidden()
    expect(row.get_by_role("button", name="Edit")).to_be_focused()
    row.get_by_role("button", name="History").click()
    expect(row.locator(".mw-revision-kind").last).to_have_text("restored")
    page.get_by_text("show history").click()
    expect(row).to_have_count(1)
    memory = server.call("memory::get", {"bank": bank, "id": saved["memory"]["id"]})["memory"]
    assert memory.get("invalid_at") is None
    assert (memory["tags"], memory["pinned"]) == (["travel"], True)


def test_rules_that_cannot_be_read_are_said_in_their_panel_not_in_a_toast_per_refresh(
    server: Server, open_tab: Any
) -> None:
    """The rules list failing (a server down or restarting) was a toast "Rules: …" at every
    refresh, on every tab: one each poll (15 s) for as long as the server was down. It is said
    once, in the Rules panel, until a read succeeds."""
    bank = _bank(server, "rules-unreadable")
    _rule(server, bank, "tone", "Formal.")
    tab = open_tab(bank, "memories")
    page = tab.page
    _fail_rule_lists(tab)
    reload = page.get_by_role("button", name="Reload from disk")
    for _ in range(2):  # two refreshes of every panel, the Rules one failing each time
        reload.click()
        expect(page.locator(".mw-toast", has_text="Reloaded")).to_have_count(1)
        page.locator(".mw-toast", has_text="Reloaded").evaluate("e => e.remove()")
    page.get_by_role("tab", name="Rules").click()
    note = page.locator(".mw-rule-load")
    expect(note).to_have_text("Could not load the rules: unavailable: restarting")
    expect(page.locator(".mw-toast", has_text="Rules:")).to_have_count(0)
    page.unroute("**/memory/rule/list")
    reload.click()
    expect(page.get_by_label("Rule tone")).to_have_value("Formal.")
    expect(note).to_be_hidden()


def _restore_row(page: Any, memory_id: str) -> Any:
    """The row of `memory_id` under *show history* (where a retired record has *Restore*)."""
    page.get_by_text("show history").click()
    row = page.locator(f".mw-memory[data-id='{memory_id}']")
    expect(row).to_have_class(re.compile(r"\bmw-retired\b"))
    return row


def _polling_page(server: Server, browser: Any, bank: str) -> tuple[Any, Any]:
    """A page whose live stream is blocked and whose poll is the default 15 s: what another door
    does meanwhile reaches it only when the test says so."""
    context = browser.new_context(viewport=DESKTOP)
    context.route("**/console/events", lambda route: route.abort())
    page = context.new_page()
    page.goto(f"{server.url}/#/bank/{bank}/memories")
    expect(page.locator(".mw-indicator")).to_have_attribute("data-mode", "polling")
    return context, page


def test_restore_pressed_twice_saves_once(server: Server, open_tab: Any) -> None:
    """A double click on *Restore* sent two saves: the second counted as the memory seen again
    (corroboration + 1, a "reinforced" revision) and said "Memory restored" twice."""
    bank = _bank(server, "restore-twice")
    saved = _save(server, bank, "The user's gym is open until ten")["memory"]
    server.call("memory::delete", {"bank": bank, "id": saved["id"]})
    tab = open_tab(bank)
    page = tab.page
    row = _restore_row(page, saved["id"])
    row.get_by_role("button", name="Restore").dblclick()
    expect(row).not_to_have_class(re.compile(r"\bmw-retired\b"))
    saves = [r for r in tab.requests if r.url.endswith("/memory/save")]
    assert len(saves) == 1
    memory = server.call("memory::get", {"bank": bank, "id": saved["id"]})["memory"]
    assert memory["revision"] == saved["revision"] + 2  # the delete, then one restore


def test_restore_of_a_text_another_memory_now_holds_says_so(server: Server, open_tab: Any) -> None:
    """The deleted memory's text is now another live memory's (edited to it): the save reinforced
    that one, the deleted record stayed deleted, and the toast said "Memory restored"."""
    bank = _bank(server, "restore-held")
    gone = _save(server, bank, "The user parks on level three")["memory"]
    server.call("memory::delete", {"bank": bank, "id": gone["id"]})
    other = _save(server, bank, "The user parks on level two")["memory"]
    server.call(
        "memory::update", {"bank": bank, "id": other["id"], "text": "The user parks on level three"}
    )
    page = open_tab(bank).page
    row = _restore_row(page, gone["id"])
    row.get_by_role("button", name="Restore").click()
    toast = page.locator(".mw-toast", has_text=other["id"])
    expect(toast).to_contain_text("already live as memory")
    expect(page.locator(".mw-toast", has_text="Memory restored")).to_have_count(0)
    expect(row).to_have_class(re.compile(r"\bmw-retired\b"))


def test_restore_from_a_stale_row_never_brings_back_an_erased_subject(
    server: Server, browser: Any
) -> None:
    """A row still on a page that had not heard of a `forget-subject` (its stream down, the poll
    not come yet): *Restore* saved the erased person's words again, as a new memory about them."""
    bank = _bank(server, "restore-erased")
    about = _save(server, bank, "Rui is allergic to peanuts", subject="rui")["memory"]
    server.call("memory::delete", {"bank": bank, "id": about["id"]})
    context, page = _polling_page(server, browser, bank)
    try:
        row = _restore_row(page, about["id"])
        server.call(
            "memory::forget-subject", {"bank": bank, "subject": "rui", "confirm": "destructive"}
        )
        row.get_by_role("button", name="Restore").click()
        expect(page.locator(".mw-toast", has_text="Not restored")).to_contain_text("erased")
        expect(row).to_have_count(0)
        listed = server.call("memory::list", {"bank": bank, "include_superseded": True})
        assert listed["memories"] == []
    finally:
        context.close()


def test_restore_from_a_stale_row_after_another_tab_changed_it_saves_nothing(
    server: Server, browser: Any
) -> None:
    """Another tab restored the memory and edited its text meanwhile: *Restore* on this tab's
    stale row saved the old text as a second, new memory, and said "Memory restored"."""
    bank = _bank(server, "restore-stale")
    gone = _save(server, bank, "The user's locker is number 12")["memory"]
    server.call("memory::delete", {"bank": bank, "id": gone["id"]})
    context, page = _polling_page(server, browser, bank)
    try:
        row = _restore_row(page, gone["id"])
        _save(server, bank, "The user's locker is number 12")
        server.call("memory::update", {"bank": bank, "id": gone["id"], "text": "Locker 14 now"})
        row.get_by_role("button", name="Restore").click()
        expect(page.locator(".mw-toast", has_text="Not restored")).to_contain_text(
            "changed elsewhere"
        )
        expect(row.locator(".mw-memory-text")).to_have_text("Locker 14 now")
        listed = server.call("memory::list", {"bank": bank})
        assert [m["id"] for m in listed["memories"]] == [gone["id"]]
    finally:
        context.close()


def test_a_refused_token_while_offline_is_not_said_offline(server: Server, browser: Any) -> None:
    """The page went offline (nothing answered), then the server answered again but refused the
    token, and the prompt was cancelled: the header kept saying "offline … reconnects by
    itself" for as long as the page stayed open, though the server answered every call."""
    context = browser.new_context(viewport=DESKTOP)
    refusal = {"error": {"code": "unauthorized", "message": "a bearer token is required"}}
    calls = re.compile(r".*/memory(/.*)?$")
    try:
        context.route("**/console/events", lambda route: route.abort())
        page = context.new_page()
        page.goto(f"{server.url}/#/bank/main/memories")
        indicator = page.locator(".mw-indicator")
        expect(indicator).to_have_attribute("data-mode", "polling")
        context.route(calls, lambda route: route.abort())
        page.get_by_role("button", name="Reload from disk").click()
        expect(indicator).to_have_attribute("data-mode", "offline")
        context.unroute(calls)
        context.route(
            calls,
            lambda route: route.fulfill(
                status=401, content_type="application/json", body=json.dumps(refusal)
            ),
        )
        page.get_by_role("button", name="Reload from disk").click()
        page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
        expect(page.locator(".mw-toast", has_text="memory::reload: unauthorized")).to_have_count(1)
        expect(indicator).to_have_attribute("data-mode", "polling")
    finally:
        context.close()


def test_restore_of_a_superseded_memory_names_its_replacement_and_asks_first(
    server: Server, open_tab: Any
) -> None:
    """A superseded memory was replaced as no longer true: *Restore* brought it back at once,
    without a word that the memory replacing it stays, both then recalled as current."""
    bank = _bank(server, "restore-superseded")
    old = _save(server, bank, "The user lives in Lisbon")["memory"]
    new = _save(server, bank, "The user lives in Porto")["memory"]
    server.call("memory::supersede", {"bank": bank, "id": old["id"], "superseded_by": new["id"]})
    page = open_tab(bank).page
    row = _restore_row(page, old["id"])
    row.get_by_role("button", name="Restore").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"replaced by memory {new['id']}")
    dialog.get_by_role("button", name="Cancel").press("Enter")
    expect(dialog).to_have_count(0)
    expect(row.get_by_role("button", name="Restore")).to_be_focused()
    assert server.call("memory::get", {"bank": bank, "id": old["id"]})["memory"]["invalid_at"]
    row.get_by_role("button", name="Restore").click()
    page.get_by_role("dialog").get_by_role("button", name="Restore it too").click()
    expect(row).not_to_have_class(re.compile(r"\bmw-retired\b"))
    assert (
        server.call("memory::get", {"bank": bank, "id": old["id"]})["memory"].get("invalid_at")
        is None
    )


def test_a_restored_lesson_keeps_its_card_anchors_subject_and_lanes(
    server: Server, open_tab: Any
) -> None:
    """*Restore* saves the text (and subject) again: the record brought back is the one retired,
    its lesson card, anchors, category and context/intention lanes as they were (held)."""
    bank = _bank(server, "restore-lesson")
    anchors = {"files": ["api/alembic.ini"], "keyword_groups": [["alembic", "pytest"]]}
    lesson = _save(
        server,
        bank,
        "Tests fail on a fresh database until migrations ran",
        category="lesson",
        title="Migrate first",
        recommendation="Run alembic upgrade head before pytest.",
        anchors=anchors,
        subject="ana",
        context="Setting up the api service",
        intention="Get the tests green",
    )["memory"]
    server.call("memory::delete", {"bank": bank, "id": lesson["id"]})
    page = open_tab(bank).page
    row = _restore_row(page, lesson["id"])
    row.get_by_role("button", name="Restore").click()
    expect(page.locator(".mw-toast", has_text="Memory restored")).to_have_count(1)
    back = server.call("memory::get", {"bank": bank, "id": lesson["id"]})["memory"]
    kept = ("category", "title", "recommendation", "anchors", "subject", "context", "intention")
    assert {k: back.get(k) for k in kept} == {k: lesson.get(k) for k in kept}
    assert back.get("invalid_at") is None


def test_ctrl_s_in_an_unchanged_memory_edit_writes_nothing_and_says_so(
    server: Server, open_tab: Any
) -> None:
    """Ctrl/⌘-S pressed out of habit on an edit left as it was: the page sent an update that
    changed nothing and said "Memory updated"."""
    bank = _bank(server, "edit-ctrl-s-unchanged")
    saved = _save(server, bank, "The user's dentist is Dr. Reis")["memory"]
    tab = open_tab(bank)
    page = tab.page
    row = page.locator(f".mw-memory[data-id='{saved['id']}']")
    row.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit memory text").press("Control+s")
    expect(page.locator(".mw-toast", has_text="No changes to save")).to_have_count(1)
    expect(page.get_by_label("Edit memory text")).to_have_count(0)
    expect(row.get_by_role("button", name="Edit")).to_be_focused()
    expect(page.locator(".mw-toast", has_text="Memory updated")).to_have_count(0)
    assert not [r for r in tab.requests if r.url.endswith("/memory/update")]


def test_ctrl_s_held_down_in_a_memory_edit_sends_one_update(server: Server, open_tab: Any) -> None:
    """Ctrl/⌘-S held (the key repeats) or pressed again while the save is on its way: each press
    sent another update with the same base revision, all but the first refused as a conflict (a
    "someone changed this memory" notice when one was answered first). The rules editor holds
    its Save while saving; so does a memory edit now."""
    bank = _bank(server, "edit-ctrl-s-held")
    saved = _save(server, bank, "The user's dentist is Dr. Costa")["memory"]
    tab = open_tab(bank)
    page = tab.page
    row = page.locator(f".mw-memory[data-id='{saved['id']}']")
    row.get_by_role("button", name="Edit").click()
    box = page.get_by_label("Edit memory text")
    box.fill("The user's dentist is Dr. Silva")
    # Four presses within one task, as a repeating key lands before any answer can: none of
    # them can have been answered when the next one comes.
    box.evaluate(
        """box => { for (let i = 0; i < 4; i += 1) box.dispatchEvent(new KeyboardEvent('keydown',
        { key: 's', ctrlKey: true, repeat: i > 0, bubbles: true, cancelable: true })) }"""
    )
    expect(box).to_have_count(0)
    expect(row.locator(".mw-memory-text")).to_have_text("The user's dentist is Dr. Silva")
    assert len([r for r in tab.requests if r.url.endswith("/memory/update")]) == 1


def test_a_restore_that_evicts_at_the_banks_cap_says_so(server: Server, open_tab: Any) -> None:
    """Restored into a full bank, the save makes room as any save does, retiring the bank's first
    to go: the toast said only "Memory restored", and the memory it took out went unsaid."""
    bank = _bank(server, "restore-full")
    server.call("memory::bank::configure", {"name": bank, "max_memories": 1})
    first = _save(server, bank, "The user's first car was a Fiat")["memory"]
    second = _save(server, bank, "The user's second car was a Volvo")
    assert second["evicted"] == [first["id"]]
    page = open_tab(bank).page
    row = _restore_row(page, first["id"])
    row.get_by_role("button", name="Restore").click()
    expect(page.locator(".mw-toast", has_text="Memory restored")).to_contain_text(
        "1 memory evicted at the bank's cap"
    )
    expect(row).not_to_have_class(re.compile(r"\bmw-retired\b"))
