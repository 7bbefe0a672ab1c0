"""The console's server side without a browser: the asset table and `memory::ui-content`, the
rules every asset keeps (no HTML parsing of data, scoped CSS), the bounded live feed, the
standalone routes (page headers, JSON-only POSTs, the event stream), and the settings file edit."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from memory_worker.adapters import console
from memory_worker.adapters.console.feed import RESYNC, ConsoleFeed, FeedFull
from memory_worker.adapters.console.settings_view import describe, validate_changes
from memory_worker.adapters.console.web import CSP
from memory_worker.adapters.settings_file import rewrite, write_values
from memory_worker.adapters.standalone import StandaloneServer
from memory_worker.app.ports import BANK_CHANGED, ITEM_CHANGED
from memory_worker.core.config import Settings
from memory_worker.core.errors import InvalidInput

from .syncs import recorded_syncs

STATIC = Path(console.__file__).parent / "static"


# --- assets ----------------------------------------------------------------------------------


def test_every_file_in_static_is_in_the_asset_table_and_back() -> None:
    assert {p.name for p in STATIC.iterdir()} == set(console.ASSETS)


def test_ui_content_serves_each_console_asset_with_its_type() -> None:
    kinds = dict(console.bus_assets())
    assert kinds["memory/page.js"] == "console:script"
    assert kinds["memory/styles.css"] == "console:style"
    assert kinds["memory/app.js"] == "console:module"
    for path in kinds:
        served = console.ui_content(path)
        assert served["content"] == (STATIC / path.removeprefix("memory/")).read_text()
        expected = "text/css" if path.endswith(".css") else "text/javascript"
        assert served["content_type"].startswith(expected)


@pytest.mark.parametrize(
    "path", ["memory/index.html", "memory/main.js", "memory/../app.js", "other/page.js", "", "x"]
)
def test_ui_content_refuses_anything_else(path: str) -> None:
    with pytest.raises(InvalidInput, match="unknown ui asset"):
        console.ui_content(path)


def test_every_module_the_iii_page_imports_is_a_console_asset() -> None:
    """page.js runs inside the iii console: each relative import must be served there too."""
    served = {name for name, a in console.ASSETS.items() if a.trigger_type}
    for name in served:
        if not name.endswith(".js"):
            continue
        for imported in re.findall(r"from '\./([a-z-]+\.js)'", (STATIC / name).read_text()):
            assert imported in served, f"{name} imports {imported}, which the iii console lacks"


def test_asset_paths_follow_the_consoles_path_rules() -> None:
    for path, kind in console.bus_assets():
        assert re.fullmatch(r"[a-z0-9._-]+(/[a-z0-9._-]+)+", path), path
        assert path.endswith(".css" if kind == "console:style" else ".js"), path


@pytest.mark.parametrize("name", [n for n in console.ASSETS if n.endswith((".js", ".html"))])
def test_no_asset_ever_parses_a_string_as_html_or_code(name: str) -> None:
    source = (STATIC / name).read_text()
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("//"))
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "srcdoc",
        "javascript:",
    ):
        assert sink not in code, f"{name} uses {sink}"
    if name.endswith(".html"):
        assert "<script>" not in source and " on" not in re.sub(
            r"<noscript>.*?</noscript>", "", source, flags=re.S
        )


def _selectors(css: str) -> list[str]:
    """The selectors of every style rule (inside @media too); comments dropped."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    found = []
    for match in re.finditer(r"([^{};]+)\{", css):
        head = match.group(1).strip()
        if head.startswith("@"):
            continue
        found += [s.strip() for s in head.split(",")]
    return found


def test_every_console_style_rule_is_scoped_to_the_memory_page() -> None:
    selectors = _selectors((STATIC / "styles.css").read_text())
    assert len(selectors) > 100
    unscoped = [s for s in selectors if not s.startswith('[data-iii-ui="memory"]')]
    assert unscoped == []
    assert "@font-face" not in (STATIC / "styles.css").read_text()


# --- the feed --------------------------------------------------------------------------------


async def test_the_feed_hands_each_client_every_event_in_order() -> None:
    feed = ConsoleFeed()
    a, b = feed.open(), feed.open()
    feed.emit(ITEM_CHANGED, {"event_type": "created", "bank": "main"})
    feed.emit(BANK_CHANGED, {"event_type": "rules-changed", "bank": "main"})
    feed.emit("something::else", {"ignored": True})
    for client in (a, b):
        first, second = await client.next(), await client.next()
        assert first is not None and second is not None
        assert first[0] == ITEM_CHANGED and json.loads(first[1])["event_type"] == "created"
        assert second[0] == BANK_CHANGED


async def test_a_lagging_client_gets_one_resync_instead_of_an_unbounded_queue() -> None:
    feed = ConsoleFeed(queue_events=4)
    slow = feed.open()
    for i in range(1000):
        feed.emit(ITEM_CHANGED, {"event_type": "created", "bank": "main", "n": i})
    assert slow._queue.qsize() == 1  # bounded: the backlog became one marker
    frame = await slow.next()
    assert frame == (RESYNC, "{}")
    feed.emit(ITEM_CHANGED, {"event_type": "updated", "bank": "main"})  # caught up: events again
    frame = await slow.next()
    assert frame is not None and json.loads(frame[1])["event_type"] == "updated"


def test_the_feed_caps_its_clients_and_frees_a_slot_on_drop() -> None:
    feed = ConsoleFeed(max_clients=2)
    first, _ = feed.open(), feed.open()
    with pytest.raises(FeedFull):
        feed.open()
    feed.drop(first)
    feed.open()


async def test_closing_the_feed_ends_every_stream() -> None:
    feed = ConsoleFeed()
    client = feed.open()
    feed.emit(ITEM_CHANGED, {"bank": "main"})
    feed.close()
    assert await client.next() is None
    with pytest.raises(FeedFull):
        feed.open()


# --- the standalone routes -------------------------------------------------------------------


@pytest.fixture(name="served")
async def _served(tmp_path: Path) -> AsyncIterator[tuple[StandaloneServer, str]]:
    config = tmp_path / "memory.yaml"
    config.write_text("recall_limit: 6\n")
    data = tmp_path / "data"
    # As `serve --data-dir` does: the flag wins over the file, so an applied edit stays in the
    # temp dir (without it the store moved to the file's default, ./data/memory of the cwd).
    server = StandaloneServer(Settings(), data, port=0, config_path=config, data_dir_flag=str(data))
    url = await server.start()
    try:
        yield server, url
    finally:
        await server.close()


async def test_the_page_and_its_assets_carry_a_strict_policy(
    served: tuple[StandaloneServer, str],
) -> None:
    _, url = served
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/") as page:
            assert page.status == 200 and page.content_type == "text/html"
            assert page.headers["Content-Security-Policy"] == CSP
            assert page.headers["X-Frame-Options"] == "DENY"
            assert 'src="/console/main.js"' in await page.text()
        async with http.get(url + "/console/app.js") as app:
            assert app.content_type == "text/javascript"
            assert app.headers["X-Content-Type-Options"] == "nosniff"
        for missing in ("/console/nope.js", "/console/..%2f__init__.py", "/console/"):
            async with http.get(url + missing) as response:
                assert response.status == 404, missing


async def test_console_posts_take_only_json(served: tuple[StandaloneServer, str]) -> None:
    _, url = served
    async with aiohttp.ClientSession() as http:
        for path in ("/console/events", "/console/settings", "/console/settings/set"):
            async with http.post(
                url + path, data="{}", headers={"Content-Type": "text/plain"}
            ) as r:
                assert r.status == 415, path
                assert (await r.json())["error"]["code"] == "unsupported_media_type"


async def test_console_posts_from_another_origin_are_refused(
    served: tuple[StandaloneServer, str],
) -> None:
    _, url = served
    async with aiohttp.ClientSession() as http:
        for origin, status in (("http://evil.example", 403), (url, 200)):
            async with http.post(
                url + "/console/settings", json={}, headers={"Origin": origin}
            ) as r:
                assert r.status == status, origin


async def test_the_event_stream_says_hello_then_carries_each_change(
    served: tuple[StandaloneServer, str],
) -> None:
    server, url = served
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/console/events", json={}) as stream,
    ):
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        hello = await stream.content.readuntil(b"\n\n")
        assert b"event: hello" in hello
        async with http.post(url + "/memory/save", json={"text": "Streamed to the console"}):
            pass
        frames = [await stream.content.readuntil(b"\n\n") for _ in range(2)]
        text = b"".join(frames).decode()
        assert "event: memory::bank-changed" in text  # the default bank materialized
        assert "event: memory::item-changed" in text and "Streamed to the console" in text
        assert server.feed.clients == 1


async def test_settings_view_says_why_it_is_editable_and_an_edit_applies(
    served: tuple[StandaloneServer, str],
) -> None:
    server, url = served
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/console/settings", json={}) as r:
            view = await r.json()
        assert view["editable"] is True and str(server.config_path) in view["reason"]
        async with http.post(
            url + "/console/settings/set", json={"values": {"recall_limit": 0}}
        ) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_input"
        async with http.post(
            url + "/console/settings/set", json={"values": {"data_dir": "/x"}}
        ) as r:
            assert r.status == 400
        async with http.post(
            url + "/console/settings/set", json={"values": {"recall_limit": 3}}
        ) as r:
            assert r.status == 200
    assert server.service is not None and server.service.settings.recall_limit == 3
    assert server.config_path is not None and server.config_path.read_text() == "recall_limit: 3\n"


async def test_the_settings_view_shows_the_data_dir_being_served(
    served: tuple[StandaloneServer, str],
) -> None:
    """`serve --data-dir` (or $MEMORY_DATA_DIR) wins over the file's `data_dir`: the panel showed
    the file's value (here the default, data/memory) as the one in effect, so a person looking
    for their memories was sent to a folder the server never used."""
    server, url = served
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/console/settings", json={}) as r,
    ):
        view = await r.json()
    assert server.service is not None
    [field] = [f for f in view["fields"] if f["name"] == "data_dir"]
    assert field["value"] == str(server.service.store.root)
    assert field["editable"] is False


async def test_two_settings_edits_at_once_both_land(
    served: tuple[StandaloneServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tabs save a setting each at the same moment. Each edit reads the file, changes its
    line and replaces the file: run at once, the second replaced the file with its own reading
    of it, the first edit's line lost (after both were answered 200 and applied)."""
    from memory_worker.adapters import settings_file
    from memory_worker.adapters.console import web as console_web

    server, url = served
    arrived = 0
    both_arrived = threading.Event()
    real_validate, real_rewrite = console_web.validate_changes, settings_file.rewrite

    def counting_validate(*args: Any) -> Any:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_arrived.set()
        return real_validate(*args)

    def held_rewrite(text: str, values: Any) -> str:
        assert both_arrived.wait(10)  # the other edit is under way too
        return real_rewrite(text, values)

    monkeypatch.setattr(console_web, "validate_changes", counting_validate)
    monkeypatch.setattr(settings_file, "rewrite", held_rewrite)
    async with aiohttp.ClientSession() as http:

        async def edit(values: dict[str, Any]) -> int:
            async with http.post(url + "/console/settings/set", json={"values": values}) as r:
                return r.status

        statuses = await asyncio.gather(edit({"recall_limit": 3}), edit({"extraction_model": "m2"}))
    assert statuses == [200, 200]
    assert server.config_path is not None
    text = server.config_path.read_text()
    assert "recall_limit: 3" in text and "extraction_model" in text, text
    assert server.service is not None
    assert server.service.settings.recall_limit == 3
    assert server.service.settings.extraction_model == "m2"


async def test_a_settings_edit_from_a_stale_read_is_refused_and_writes_nothing(
    served: tuple[StandaloneServer, str],
) -> None:
    """Two tabs read the settings; one saves `recall_limit`; the other, still showing the old
    value, saves it too with the revision it read: refused (409 `conflict`), where the later
    save used to write over the first silently. Read again, the save lands."""
    server, url = served
    assert server.config_path is not None
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/console/settings", json={}) as r:
            read = (await r.json())["revision"]
        first = {"values": {"recall_limit": 3}, "expected_revision": read}
        async with http.post(url + "/console/settings/set", json=first) as r:
            assert r.status == 200
            fresh = (await r.json())["revision"]
        assert fresh != read
        written = server.config_path.read_text()
        stale = {"values": {"recall_limit": 9}, "expected_revision": read}
        async with http.post(url + "/console/settings/set", json=stale) as r:
            assert r.status == 409
            assert (await r.json())["error"]["code"] == "conflict"
        assert server.config_path.read_text() == written
        assert server.service is not None and server.service.settings.recall_limit == 3
        again = {"values": {"recall_limit": 9}, "expected_revision": fresh}
        async with http.post(url + "/console/settings/set", json=again) as r:
            assert r.status == 200
        bad = {"values": {"recall_limit": 4}, "expected_revision": 7}
        async with http.post(url + "/console/settings/set", json=bad) as r:
            assert r.status == 400
    assert server.service.settings.recall_limit == 9


async def test_a_settings_edit_from_another_origin_is_refused_whatever_revision_it_carries(
    served: tuple[StandaloneServer, str],
) -> None:
    server, url = served
    assert server.config_path is not None
    before = server.config_path.read_text()
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/console/settings", json={}) as r:
            read = (await r.json())["revision"]
        edit = {"values": {"recall_limit": 3}, "expected_revision": read}
        async with http.post(
            url + "/console/settings/set", json=edit, headers={"Origin": "http://evil.example"}
        ) as r:
            assert r.status == 403
    assert server.config_path.read_text() == before


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
async def test_a_console_edit_cannot_smuggle_in_a_setting_it_may_not_change(
    served: tuple[StandaloneServer, str], separator: str
) -> None:
    """A value holding a character that YAML reads inside quotes but Python's `splitlines` takes
    for a line end: the next edit cut the line there and left the rest as a line of its own, a
    key the console may not set (`allowed_hosts` opens the server to a rebinding page)."""
    server, url = served
    smuggled = f"m{separator}allowed_hosts: [evil.example] #"
    async with aiohttp.ClientSession() as http:
        for value in (smuggled, "m2"):
            async with http.post(
                url + "/console/settings/set", json={"values": {"extraction_model": value}}
            ) as r:
                assert r.status == 200, await r.text()
            assert server.service is not None
            assert server.service.settings.extraction_model == value
        assert server.service.settings.allowed_hosts == []
        async with http.post(
            url + "/memory/bank/list", json={}, headers={"Host": "evil.example"}
        ) as r:
            assert r.status == 403
    assert server.config_path is not None
    assert server.config_path.read_text() == 'recall_limit: 6\nextraction_model: "m2"\n'


# --- settings --------------------------------------------------------------------------------


def test_the_settings_view_lists_every_field_with_its_description() -> None:
    view = describe(Settings(), mode="engine", editable=False, reason="r", source=None)
    assert [f["name"] for f in view["fields"]] == list(Settings.model_fields)
    by_name = {f["name"]: f for f in view["fields"]}
    assert by_name["recall_limit"]["minimum"] == 1 and by_name["recall_limit"]["maximum"] == 100
    assert by_name["inject_rules"]["type"] == "boolean"
    assert all(f["description"] and not f["editable"] for f in view["fields"])
    editable = describe(Settings(), mode="standalone", editable=True, reason="r", source="f")
    fixed = [f["name"] for f in editable["fields"] if not f["editable"]]
    assert fixed == ["data_dir", "allowed_hosts"]


def test_changes_are_checked_against_the_model() -> None:
    assert validate_changes(Settings(), {"recall_limit": 9}) == {"recall_limit": 9}
    for bad in ({"recall_limit": 1000}, {"nope": 1}, {"data_dir": "/elsewhere"}, {}, []):
        with pytest.raises(InvalidInput):
            validate_changes(Settings(), bad)


def test_rewrite_changes_only_the_lines_it_sets() -> None:
    text = (
        "# my settings\n"
        "recall_limit: 6   # per turn\n"
        'extraction_model: "a # b"  # quoted hash\n'
        "description: |\n  several\n  lines\n"
        "default_bank: main\n"
    )
    out = rewrite(
        text,
        {"recall_limit": 9, "extraction_model": "m", "description": "x", "inject_rules": False},
    )
    assert out == (
        "# my settings\n"
        "recall_limit: 9   # per turn\n"
        'extraction_model: "m"  # quoted hash\n'
        'description: "x"\n'
        "default_bank: main\n"
        "inject_rules: false\n"
    )


def test_write_values_refuses_a_file_it_cannot_edit_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.yaml"
    path.write_text("- a\n- list\n")
    with pytest.raises(InvalidInput):
        write_values(path, {"recall_limit": 3})
    assert path.read_text() == "- a\n- list\n"
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_write_values_syncs_the_folder_after_its_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The console answers "saved" once this returns: the rename must be durable by then, or a
    # power loss brings the old settings back (an access level a person had just lowered).
    path = tmp_path / "memory.yaml"
    path.write_text("recall_limit: 9\n")
    events = recorded_syncs(monkeypatch)
    write_values(path, {"recall_limit": 3})
    assert path.read_text() == "recall_limit: 3\n"
    renamed = events.index(("replace", str(path)))
    assert ("fsync", str(tmp_path)) in events[renamed:], events


def test_write_values_edits_the_file_a_symlink_points_to_and_keeps_the_link(
    tmp_path: Path,
) -> None:
    # A settings file kept in a dotfiles checkout and linked into place: replacing the link with
    # a plain file would cut the setting off from where the person keeps (and versions) it.
    (tmp_path / "dotfiles").mkdir()
    target = tmp_path / "dotfiles" / "memory.yaml"
    target.write_text("recall_limit: 9\n")
    link = tmp_path / "memory.yaml"
    link.symlink_to(target)
    write_values(link, {"recall_limit": 3})
    assert link.is_symlink()
    assert target.read_text() == "recall_limit: 3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dotfiles", "memory.yaml"]


async def test_streams_past_the_cap_are_refused_so_the_tab_polls(
    served: tuple[StandaloneServer, str],
) -> None:
    server, url = served
    server.feed.max_clients = 1
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/console/events", json={}) as first,
    ):
        await first.content.readuntil(b"\n\n")
        async with http.post(url + "/console/events", json={}) as second:
            assert second.status == 503
            assert (await second.json())["error"]["code"] == "unavailable"


async def test_stopping_the_server_ends_open_streams_at_once(tmp_path: Path) -> None:
    """A tab holding the stream open never holds the shutdown (`feed.close()` ends it)."""
    server = StandaloneServer(Settings(), tmp_path / "data", port=0, shutdown_timeout_s=30)
    url = await server.start()
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/console/events", json={}) as stream,
    ):
        await stream.content.readuntil(b"\n\n")
        await asyncio.wait_for(server.close(), 15)  # half the 30 s shutdown timeout: told apart
        assert await stream.content.read() == b""  # the stream ended cleanly


async def test_a_data_dir_swapped_under_open_tabs_makes_each_refetch(tmp_path: Path) -> None:
    """A settings edit that moves `data_dir` replaces every bank the tabs show: each open stream
    is told to refetch (`resync`), not left showing the old store's banks and memories."""
    config = tmp_path / "memory.yaml"
    config.write_text(f"data_dir: {tmp_path / 'one'}\n")
    server = StandaloneServer(Settings(), tmp_path / "one", port=0, config_path=config)
    url = await server.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(url + "/console/events", json={}) as stream,
        ):
            await stream.content.readuntil(b"\n\n")  # hello
            config.write_text(f"data_dir: {tmp_path / 'two'}\n")
            watcher = server.settings_watcher
            assert watcher is not None
            await watcher.reload()
            assert server.service is not None and server.service.store.root == tmp_path / "two"
            frame = await asyncio.wait_for(stream.content.readuntil(b"\n\n"), 10)
            assert frame.startswith(f"event: {RESYNC}\n".encode()), frame
    finally:
        await server.close()


async def test_a_settings_edit_refused_because_the_file_does_not_load_writes_nothing(
    served: tuple[StandaloneServer, str],
) -> None:
    """The settings file already holds a value the worker refuses (a hand edit, kept out by the
    hot reload): a console edit of another setting was answered "Not saved" (`invalid_input`,
    naming the broken line) after its line had been written to the file anyway, to apply
    unannounced whenever the file was next fixed."""
    server, url = served
    assert server.config_path is not None
    server.config_path.write_text("recall_limit: 6\nmax_banks: 0\n")
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/console/settings/set", json={"values": {"extraction_window": 13}}) as r,
    ):
        assert r.status == 400
        assert "max_banks" in (await r.json())["error"]["message"]
    assert server.config_path.read_text() == "recall_limit: 6\nmax_banks: 0\n"
