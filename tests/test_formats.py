"""Moving between systems (adapters.formats): mem0's export and a folder of markdown memory
files come in through `memory-worker import --from`, and what `export` then writes imports back
to the same bank, history included."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from memory_worker.adapters import cli
from memory_worker.adapters.formats import read_foreign
from memory_worker.core.errors import InvalidInput

MEM0 = {
    "results": [
        {
            "id": "7a8f9c2e-1b3d-4e5f-8a9b-0c1d2e3f4a5b",
            "memory": "Prefers morning meetings and async communication",
            "hash": "3c5e…",
            "metadata": {"type": "preference"},
            "categories": ["work", "Preferences"],
            "user_id": "arjun",
            "created_at": "2026-03-02T09:15:00.000000-08:00",
            "updated_at": "2026-04-11T12:00:00.000000-07:00",
        },
        {
            "id": "0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e",
            "memory": "Is leading the API redesign, targeting a Q2 launch",
            "categories": None,
            "user_id": "arjun",
            "created_at": "2026-05-20T08:00:00",
            "updated_at": None,
        },
        {"id": "x", "memory": "ok"},  # too short to be a memory: left out, counted
    ],
    "count": 3,
}

NOTES = """---
title: project notes
---
# Shop

- The shop ships on Tuesdays and Fridays
- Glazes are fired at cone 6
  - never above cone 7, the kiln's limit
- [x] Photos go in the `media/` folder

```
- not a memory: inside code
```
"""

DIARY = """Customers in Lisbon prefer the blue mugs.

The studio is closed in August
for the holidays.
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert cli.main(list(argv)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    return json.loads(out) if out.strip().startswith("{") else out


def test_mem0s_export_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0))
    foreign = read_foreign(path, "mem0")
    assert foreign.skipped == {"too_short": 1}
    first, second = foreign.records
    assert first["text"] == "Prefers morning meetings and async communication"
    assert first["tags"] == ["work", "preferences"]
    assert first["created_at"] == 1772471700000  # 2026-03-02T17:15:00Z
    assert first["updated_at"] == 1775934000000
    assert first["source"] == {"entry_id": MEM0["results"][0]["id"], "agent": "mem0"}
    assert second["created_at"] == 1779264000000  # a naive time is UTC
    assert second["updated_at"] == second["created_at"]
    path.write_text(json.dumps([{"memory": "A plain list of mem0 items works too"}]))
    assert len(read_foreign(path, "mem0").records) == 1
    path.write_text('{"results": [{"id": 1}]}')
    with pytest.raises(InvalidInput, match="no `memory`"):
        read_foreign(path, "mem0")


@pytest.mark.parametrize(
    "stamp",
    ["1e400", "1e300", '"0001-01-01T00:00:00"', '"1900-01-01T00:00:00Z"'],
    ids=["past-a-float", "past-9999", "year-1", "before-1970"],
)
def test_a_mem0_time_a_record_cannot_hold_is_left_out_like_an_unreadable_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stamp: str
) -> None:
    """The memory comes in without that time, as with a time that does not parse; it used to
    be a traceback (`1e400` reads as infinity) or the whole import refused."""
    path = tmp_path / "mem0.json"
    path.write_text(
        '[{"id": "m1", "memory": "The user likes green tea", "created_at": ' + stamp + "}]"
    )
    (record,) = read_foreign(path, "mem0").records
    assert not {"created_at", "stated_at", "updated_at"} & set(record)
    data = str(tmp_path / "data")
    report = _run(
        capsys, "import", str(path), "--from", "mem0", "--bank", "main", "--data-dir", data
    )
    assert report["imported"] == 1


def test_a_markdown_memory_folder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "memory"
    (folder / "old").mkdir(parents=True)
    (folder / "shop-notes.md").write_text(NOTES)
    (folder / "old" / "Diary 2025.md").write_text(DIARY)
    (folder / "ignored.txt").write_text("- not markdown")
    os.utime(folder / "shop-notes.md", (1_780_000_000, 1_780_000_000))
    foreign = read_foreign(folder, "markdown")
    texts = [(r["text"], r["tags"]) for r in foreign.records]
    assert texts == [
        ("Customers in Lisbon prefer the blue mugs.", ["diary-2025"]),
        ("The studio is closed in August for the holidays.", ["diary-2025"]),
        ("The shop ships on Tuesdays and Fridays", ["shop-notes"]),
        ("Glazes are fired at cone 6 never above cone 7, the kiln's limit", ["shop-notes"]),
        ("Photos go in the `media/` folder", ["shop-notes"]),
    ]
    assert foreign.records[2]["created_at"] == 1_780_000_000_000


def test_a_paragraph_beside_a_files_lists_is_counted_as_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file's list items are its memories, and its paragraphs only when it has no list. The
    paragraphs beside a list were dropped without a word: the report said `imported: 1` and
    nothing of the note's other facts (an item too short was counted, a paragraph was not)."""
    notes = tmp_path / "notes.md"
    notes.write_text(
        "# Travel\n\nThe user books the window seat on long flights.\n\n"
        "- Passport expires in March 2027\n- ok\n\n"
        "Hotel loyalty numbers are in the blue folder\nin the study.\n"
    )
    foreign = read_foreign(notes, "markdown")
    assert [r["text"] for r in foreign.records] == ["Passport expires in March 2027"]
    assert foreign.skipped == {"too_short": 1, "not_a_list_item": 2}
    data = str(tmp_path / "data")
    report = _run(
        capsys, "import", str(notes), "--from", "markdown", "--bank", "main", "--data-dir", data
    )
    assert (report["imported"], report["skipped"]) == (1, {"too_short": 1, "not_a_list_item": 2})


def test_mem0_then_export_then_import_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0))
    report = _run(
        capsys, "import", str(path), "--from", "mem0", "--bank", "moved", "--data-dir", data
    )
    assert (report["imported"], report["skipped"]) == (2, {"too_short": 1})
    saved = _run(
        capsys,
        "trigger",
        "memory::save",
        "bank=moved",
        "text=Prefers morning meetings and async communication",
        "--data-dir",
        data,
    )
    assert saved["created"] is False  # the same fact from mem0 is one memory: reinforced
    exported = tmp_path / "moved.jsonl"
    _run(capsys, "export", "--bank", "moved", "-o", str(exported), "--data-dir", data)
    _run(capsys, "import", str(exported), "--bank", "copy", "--data-dir", data)
    listings = [
        _run(
            capsys,
            "trigger",
            "memory::list",
            f"bank={bank}",
            "include_superseded=true",
            "--data-dir",
            data,
        )
        for bank in ("moved", "copy")
    ]
    assert listings[0]["memories"] == listings[1]["memories"]
    assert listings[0]["total"] == 2
    again = tmp_path / "copy.jsonl"
    _run(capsys, "export", "--bank", "copy", "-o", str(again), "--data-dir", data)
    assert again.read_text() == exported.read_text()  # every revision, in log order


def test_markdown_import_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "notes.md").write_text(NOTES)
    data = str(tmp_path / "data")
    report = _run(
        capsys, "import", str(folder), "--from", "markdown", "--bank", "notes", "--data-dir", data
    )
    assert report["imported"] == 3
    found = _run(
        capsys, "trigger", "memory::recall", "bank=notes", "query=kiln limit", "--data-dir", data
    )
    assert found["memories"][0]["memory"]["text"].startswith("Glazes are fired at cone 6")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        cli.main(["import", str(empty), "--from", "markdown", "--bank", "x", "--data-dir", data])
        == 1
    )
    assert "no memory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fmt", "text", "imported"),
    [("mem0", json.dumps(MEM0), 2), ("markdown", NOTES, 3)],
)
def test_another_systems_export_is_read_from_stdin_as_dash(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
    text: str,
    imported: int,
) -> None:
    """`FILE` is `-` for the standard input, with `--from` too (`mem0 … | memory-worker import -
    --from mem0`): it was read as a file named `-`."""
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    data = str(tmp_path / "data")
    report = _run(capsys, "import", "-", "--from", fmt, "--bank", "moved", "--data-dir", data)
    assert report["imported"] == imported


def test_a_markdown_file_dated_before_1970_is_imported_without_its_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file whose time reads before 1970 (a restored backup, a bad clock) is no time a record
    can hold: its memories are imported undated, and the other files' keep their dates."""
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "notes.md").write_text(NOTES)
    (folder / "diary.md").write_text(DIARY)
    os.utime(folder / "notes.md", (-86_400, -86_400))
    os.utime(folder / "diary.md", (1_780_000_000, 1_780_000_000))
    dated = {r["created_at"] for r in read_foreign(folder, "markdown").records}
    assert dated == {None, 1_780_000_000_000}
    data = str(tmp_path / "data")
    report = _run(
        capsys, "import", str(folder), "--from", "markdown", "--bank", "notes", "--data-dir", data
    )
    assert report["imported"] == 5


def test_a_mem0_file_nested_past_the_decoders_depth_is_one_json_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`json.loads` raises `RecursionError` (not `ValueError`) on it: the import was a
    traceback instead of the `{code, message}` every other unreadable file gets."""
    nested = tmp_path / "mem0.json"
    nested.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    data = str(tmp_path / "data")
    argv = ["import", str(nested), "--from", "mem0", "--bank", "x", "--data-dir", data]
    assert cli.main(argv) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input" and "is not JSON" in error["message"]
    assert not (tmp_path / "data").exists()


BOM = "\ufeff"  # what Windows editors (Notepad, PowerShell 5's `-Encoding utf8`) write first


def test_a_byte_order_mark_at_the_start_of_a_markdown_file_changes_nothing(
    tmp_path: Path,
) -> None:
    """A markdown note saved with a UTF-8 byte order mark lost its first list item (the mark
    hid the `- `, so the line was read as a paragraph, and paragraphs are left out once a file
    has list items) and kept its front matter as a memory."""
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "list.md").write_text(BOM + "- The user drinks oolong tea\n- Second fact\n")
    (folder / "front.md").write_text(BOM + "---\ntitle: x\n---\nThe user rides a bike.\n")
    texts = [r["text"] for r in read_foreign(folder, "markdown").records]
    assert texts == ["The user rides a bike.", "The user drinks oolong tea", "Second fact"]


@pytest.mark.parametrize("fmt", ["mem0", "memory-worker"])
def test_a_byte_order_mark_at_the_start_of_a_json_import_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """A mem0 export or a JSON-lines file saved with a UTF-8 byte order mark was refused whole
    (`Unexpected UTF-8 BOM`)."""
    source = tmp_path / "export.json"
    if fmt == "mem0":
        source.write_text(BOM + json.dumps(MEM0), encoding="utf-8")
    else:
        source.write_text(BOM + '{"text": "The user drinks oolong tea"}\r\n', encoding="utf-8")
    data = str(tmp_path / "data")
    report = _run(capsys, "import", str(source), "--from", fmt, "--bank", "b", "--data-dir", data)
    assert report["imported"] == (2 if fmt == "mem0" else 1)


def test_markdown_headings_code_and_markup_of_every_form_are_not_memories(
    tmp_path: Path,
) -> None:
    """README: "headings, code and front matter are not" memories. A setext heading (a line
    underlined with `===` or `---`), an indented code block, a thematic break (`***`) and an
    HTML comment each became one."""
    notes = tmp_path / "notes.md"
    notes.write_text(
        "Setext heading\n==============\n\n"
        "The user works from Lisbon most weeks.\n\n"
        "<!-- TODO: move this\n  somewhere else -->\n\n"
        "    make test  # an indented code block\n\n"
        "***\n\n"
        "Another heading\n---\n\n"
        "The user drinks oolong tea,\n    every afternoon.\n"
    )
    texts = [r["text"] for r in read_foreign(notes, "markdown").records]
    assert texts == [
        "The user works from Lisbon most weeks.",
        "The user drinks oolong tea, every afternoon.",
    ]
    listed = tmp_path / "listed.md"
    listed.write_text("- The user keeps bees\n\n---\n\n- The user sells honey\n")
    texts = [r["text"] for r in read_foreign(listed, "markdown").records]
    assert texts == ["The user keeps bees", "The user sells honey"]
    continued = tmp_path / "continued.md"
    continued.write_text("- The user keeps bees\n  on the roof\n---\n- The user sells honey\n")
    texts = [r["text"] for r in read_foreign(continued, "markdown").records]
    assert texts == ["The user keeps bees on the roof", "The user sells honey"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A comment closed on its own line, the text after it kept.
        (
            "<!-- note --> - The user likes tea\n- The user lives in Porto\n",
            ["The user likes tea", "The user lives in Porto"],
        ),
        # A comment closed on a later line, mid-line.
        (
            "<!-- draft\nold --> The user likes tea.\n\nThe user lives in Porto.\n",
            ["The user likes tea.", "The user lives in Porto."],
        ),
        (
            "- The user cycles\n<!-- x -->- The user likes tea\n",
            ["The user cycles", "The user likes tea"],
        ),
        # `<!-->` is a whole (empty) comment: it hid everything after it.
        ("<!-->\nThe user likes tea.\n", ["The user likes tea."]),
        # A second comment opened after the first is one too.
        ("<!-- a --> <!-- b\nc --> The user likes tea.\n", ["The user likes tea."]),
        # A list item's continuation after a comment stays the item's.
        ("- The user keeps bees\n  <!-- x --> on the roof\n", ["The user keeps bees on the roof"]),
        # `-->` with no comment open is text.
        ("- The user writes a --> b\n", ["The user writes a --> b"]),
    ],
)
def test_markdown_text_after_a_comment_closes_is_kept(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    """An HTML comment is no memory, but what follows its `-->` on the same line is what the
    person wrote (a browser shows it): the whole line was dropped with the comment."""
    notes = tmp_path / "notes.md"
    notes.write_text(text)
    assert [r["text"] for r in read_foreign(notes, "markdown").records] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A list item hard-wrapped without an indent (CommonMark's lazy continuation): its
        # memory ended at the wrap and said the opposite ("The user never eats").
        (
            "- The user never eats\nmeat or fish.\n- The user lives in Porto\n",
            ["The user never eats meat or fish.", "The user lives in Porto"],
        ),
        # A heading, a code block or a break between two paragraphs ends the first one: the
        # two facts were one memory.
        (
            "The user likes tea.\n# Work\nThe user works at Acme.\n",
            ["The user likes tea.", "The user works at Acme."],
        ),
        (
            "The user likes tea.\n```\nmake test\n```\nThe user works at Acme.\n",
            ["The user likes tea.", "The user works at Acme."],
        ),
        (
            "The user likes tea.\n***\nThe user works at Acme.\n",
            ["The user likes tea.", "The user works at Acme."],
        ),
        # ... and a list item: what follows the heading is no continuation of it.
        (
            "- The user likes tea\n## Work\nSome notes.\n- The user works at Acme.\n",
            ["The user likes tea", "The user works at Acme."],
        ),
        # Code inside an item is still the item's: the text after it goes on with the item.
        (
            "- The user deploys with\n  ```\n  make deploy\n  ```\n  every Friday\n",
            ["The user deploys with every Friday"],
        ),
    ],
)
def test_markdown_items_and_paragraphs_end_where_markdown_ends_them(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text(text)
    assert [r["text"] for r in read_foreign(notes, "markdown").records] == expected


def test_a_vaults_hidden_folders_and_files_are_not_memories(tmp_path: Path) -> None:
    """An Obsidian vault keeps deleted notes in `.trash/` and its own files in `.obsidian/` (a
    git clone has `.git/`): importing the vault made every deleted note a memory again. What a
    file browser hides is not the person's notes; a hidden folder named as the source itself
    (`~/.claude/memory`) is still read."""
    vault = tmp_path / ".notes"
    for hidden in (".trash", ".obsidian", "daily/.git"):
        (vault / hidden).mkdir(parents=True)
    (vault / "coffee.md").write_text("- The user prefers dark roast coffee\n")
    (vault / ".trash" / "old.md").write_text("- A note the user deleted on purpose\n")
    (vault / ".obsidian" / "template.md").write_text("- A template placeholder line\n")
    (vault / "daily" / ".git" / "notes.md").write_text("- Something inside a git folder\n")
    (vault / ".hidden-note.md").write_text("- A hidden note of the vault app\n")
    texts = [r["text"] for r in read_foreign(vault, "markdown").records]
    assert texts == ["The user prefers dark roast coffee"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # An Obsidian tag opening a line is text: a heading's `#` is followed by a space.
        (
            "#todo Call the plumber about the kitchen leak\n\n# Home\n\nThe boiler is serviced.\n",
            ["#todo Call the plumber about the kitchen leak", "The boiler is serviced."],
        ),
        ("#2 on the list is painting the fence\n", ["#2 on the list is painting the fence"]),
        # Seven `#` are no heading either (CommonMark: one to six).
        ("####### The user likes tea\n", ["####### The user likes tea"]),
        # A heading with nothing after its `#` is still one.
        ("#\nThe user likes tea.\n", ["The user likes tea."]),
    ],
)
def test_a_line_that_starts_with_a_tag_is_no_heading(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    """Every line starting with `#` was dropped as a heading: a vault's `#todo Call the
    plumber` (Obsidian's tags, `#2 on the list`) never arrived, and nothing counted it."""
    notes = tmp_path / "notes.md"
    notes.write_text(text)
    assert [r["text"] for r in read_foreign(notes, "markdown").records] == expected


def test_a_refused_item_of_another_systems_export_is_named_where_it_is_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One item the import refuses refuses them all, and the error must say which: it said
    `record 2`, counting only the items kept — mem0's third item (its first was left out as too
    short), and in a folder of notes no file at all."""
    data = tmp_path / "data"
    mem0 = tmp_path / "mem0.json"
    mem0.write_text(
        json.dumps(
            [
                {"id": "x", "memory": "ok"},
                {"id": "y", "memory": "The user likes green tea"},
                {"id": "z", "memory": "The user \u0000 plays chess"},
            ]
        )
    )
    argv = ["import", str(mem0), "--from", "mem0", "--bank", "main", "--data-dir", str(data)]
    assert cli.main(argv) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["code"] == "invalid_input"
    assert error["message"] == f"{mem0}: item 3: text contains a NUL character"
    vault = tmp_path / "vault"
    (vault / "home").mkdir(parents=True)
    (vault / "a.md").write_text("- The user likes green tea\n")
    (vault / "home" / "b.md").write_text("- The user keeps bees\n- The user \u0000 plays chess\n")
    argv = ["import", str(vault), "--from", "markdown", "--bank", "main", "--data-dir", str(data)]
    assert cli.main(argv) == 1
    error = json.loads(capsys.readouterr().err)
    assert error["message"] == f"{vault / 'home' / 'b.md'}: item 2: text contains a NUL character"
    assert not (data / "main").exists()


def test_a_tag_from_a_name_in_another_alphabet_keeps_its_letters(tmp_path: Path) -> None:
    """A note's file name and a mem0 category became tags of ASCII letters only: `Reunião.md`
    was tagged `reuni-o` (on macOS, whose names are decomposed, `reuna-o`), `日記.md` not at
    all, a category `saúde` became `sa-de` — no filter a person would type finds them."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Reunião de equipa.md").write_text("- The team meets on Mondays\n")
    (vault / "Reunia\u0303o 2.md").write_text("- The team meets on Fridays too\n")
    (vault / "日記.md").write_text("- The user walked to the park\n")
    tags = sorted(tuple(r["tags"]) for r in read_foreign(vault, "markdown").records)
    assert tags == [("reunião-2",), ("reunião-de-equipa",), ("日記",)]
    mem0 = tmp_path / "mem0.json"
    mem0.write_text(json.dumps([{"memory": "Runs five km every day", "categories": ["Saúde"]}]))
    assert read_foreign(mem0, "mem0").records[0]["tags"] == ["saúde"]


def test_a_mem0_memory_updated_since_it_was_created_was_last_stated_when_updated(
    tmp_path: Path,
) -> None:
    """mem0 sets `updated_at` when it rewrites a memory's text (its UPDATE event): that is when
    the fact as it now reads was stated. It was dated by `created_at`, so "the user moved to
    Porto" (updated this year) read as two years old, behind what it replaced in time."""
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0))
    first, second = read_foreign(path, "mem0").records
    assert first["stated_at"] == first["updated_at"] == 1775934000000
    assert first["created_at"] == 1772471700000
    assert second["stated_at"] == second["created_at"]  # `updated_at: null`: never rewritten


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "The user likes tea. %%ask about the brand%%\n\n"
            "%%\nA hidden draft\n- over two lines\n%%\n\n"
            "The user lives in Porto.\n",
            ["The user likes tea.", "The user lives in Porto."],
        ),
        (
            "- The user keeps bees %%on the roof?%%\n- The user sells honey\n",
            ["The user keeps bees", "The user sells honey"],
        ),
        # In code, `%%` is code: no comment opens there.
        (
            '```\nprintf("100%%");\n```\n\nThe user likes tea.\n\nThe user lives in Porto.\n',
            ["The user likes tea.", "The user lives in Porto."],
        ),
    ],
)
def test_an_obsidian_comment_is_no_memory(tmp_path: Path, text: str, expected: list[str]) -> None:
    """Obsidian's `%%…%%` is a comment, hidden from the note as an HTML comment is (which is no
    memory): what a person hid from their own notes became memories an agent is shown."""
    notes = tmp_path / "notes.md"
    notes.write_text(text)
    assert [r["text"] for r in read_foreign(notes, "markdown").records] == expected
