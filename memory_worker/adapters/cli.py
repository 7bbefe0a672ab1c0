"""`memory-worker`: the embedded CLI. A thin layer over the catalog.

Commands go through the data dir's door (`adapters.doors`): opened in-process (taking its lock),
run, and closed — or, when a server holds the data dir, forwarded to it. Results go to stdout as
JSON; errors go to stderr as JSON `{code, message}` with exit status 1.

Past 500 lines on purpose: one module per command would scatter a parser that must read as one
(`memory-worker --help`); each command body is a few lines over a door, the hooks and
memory-consolidate's commands live in their own modules.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import codecs
import contextlib
import functools
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO

from memory_worker.adapters.doors import Door, LocalDoor, open_door, request_body, serving_url
from memory_worker.adapters.logs import configure_logging, log_level
from memory_worker.app import functions
from memory_worker.app.caller import Caller
from memory_worker.core.data_dir import resolve_data_dir
from memory_worker.core.errors import InvalidInput, WorkerError
from memory_worker.core.payload import loads
from memory_worker.storage.logger import get_logger

# The catalog (every request and response model, the whole service), the embedders and numpy
# are imported where a command needs them: a call forwarded to the server holding the data dir
# (a coding agent's hook runs one per prompt) needs none of them.
if TYPE_CHECKING:
    from memory_worker.app.ports import Embedder
    from memory_worker.core.config import Settings

log = get_logger(__name__)

__all__ = ["embedder_choice", "main", "parse_assignments"]

CONFIG_ENV = "MEMORY_CONFIG"
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
PYDANTIC_PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"
EMBEDDER_ENV = "MEMORY_EMBEDDER"
DEFAULT_ENGINE_URL = "ws://127.0.0.1:49134"  # the engine's worker port, as the SDK defaults
DEFAULT_COMPACT_HORIZON_DAYS = 30.0  # a month of history stays readable in memory::history
CLI_CALLER = Caller.human("cli")  # a person at the machine: the owner of the data dir
ENGINE_PROBE_TIMEOUT_S = 1.0  # a local engine answers its handshake in milliseconds
CLI_LOCK_WAIT_S = 10.0  # another short CLI call holding the dir is waited for, a server is not
# How long an in-process recall (a one-shot command, a tool call of `memory-worker mcp`) may embed
# what its bank lacks before its query, when no server holds the data dir
# (`MemoryService.catch_up_s`): ~20 memory-sized texts a second with the local e5 model on one
# core. It holds the data dir meanwhile: a hook waits for it (`agent_hooks.HOOK_LOCK_WAIT_S`).
CATCH_UP_S = 1.0
PIPE_CLOSED_EXIT = 141  # what a shell reports for a command ended by SIGPIPE (128 + 13)
HOOK_EXIT_GRACE_S = 0.5  # a hook past its budget: what a blocked worker thread may still hold it
# A forwarded import is sent in requests of at most this much JSON (the server refuses bodies
# past 1 MiB; half of it leaves room for a record's escaping).
FORWARD_CHUNK_BYTES = 512 * 1024
_BOM = "\ufeff"  # `formats.BOM`, not imported: `formats` is `import`'s, not every command's


def parse_assignments(pairs: Sequence[str], base: str | None = None) -> dict[str, Any]:
    """`iii trigger` argument rules: `--json` (or a first argument that is a JSON object) gives a
    base object that `k=v` pairs override; each
    value is JSON-decoded when possible, else kept as a string. A number with a fraction that JSON
    would write otherwise than it was typed (`text=1.10`) is kept as typed: decoded, a text field
    would store "1.1", which the person never said; a float field reads the typed text as the same
    number, and an integer field refuses both. (A whole number stays a number: `as_of=1.7e12`
    must still read as an integer.)"""
    payload: dict[str, Any] = {}
    label = "--json"
    # A byte order mark is no JSON: `--json "$(cat payload.json)"` of a file a Windows editor
    # saved starts with one (`import` and `call --batch` read past it too).
    base = base.removeprefix(_BOM) if base else base
    if pairs and pairs[0].startswith(_BOM):
        pairs = [pairs[0].removeprefix(_BOM), *pairs[1:]]
    if pairs and pairs[0].lstrip().startswith("{"):
        # The payload as one JSON object, as many CLIs take it (`trigger memory::save '{"text":
        # …}'`): read as `--json` would be. No key starts with "{", so nothing else reads so.
        if base:
            raise InvalidInput("give the JSON payload once: as --json or as the first argument")
        base, pairs, label = pairs[0], pairs[1:], "the JSON argument"
    # Values are counted by the call, with the function's own budget (`catalog.check_size`: an
    # import's records each), as the REST door counts them; nesting is still refused here.
    if base:
        decoded = loads(base, label, max_values=None)
        if not isinstance(decoded, dict):
            raise InvalidInput(f"{label} must be a JSON object")
        payload.update(decoded)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"expected key=value, got {pair!r}")
        try:
            value = loads(raw, key, max_values=None)
        except InvalidInput as err:
            if "nested" in err.message:
                raise  # JSON, but too deep to take: refused like every other edge refuses it
            value = raw
        if _retyped_number(value, raw):
            value = raw
        payload[key] = value
    return payload


def _retyped_number(value: object, raw: str) -> bool:
    """Whether `value`, decoded from `raw`, is a number with a fraction that JSON writes
    otherwise than `raw`."""
    if not isinstance(value, float) or value.is_integer():
        return False
    return json.dumps(value) != raw.strip()


def _json_text(value: object, stream: TextIO, *, indent: int | None = None) -> str:
    """`value` as JSON for `stream`: as it reads when the stream can carry every character, else
    escaped (`\\u00e9`, the same JSON). A lone surrogate echoed from the input has no UTF-8 form;
    a stream in another encoding (`PYTHONIOENCODING`, a non-UTF-8 locale) cannot carry "São"
    or "你好": written as they are, the answer crashed after the call had done its work."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    try:
        text.encode("utf-8")
        encoding = getattr(stream, "encoding", None) or "utf-8"
        if codecs.lookup(encoding).name != "utf-8":
            text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(value, indent=indent)
    return text


def _dump(value: object, stream: TextIO, *, pretty: bool = False) -> None:
    with _writing(stream):
        stream.write(_json_text(value, stream, indent=2 if pretty else None) + "\n")
        stream.flush()


@contextlib.contextmanager
def _writing(stream: TextIO) -> Iterator[None]:
    """Writes to a standard stream: a full disk or an I/O error there (`> /dev/full`) is one coded
    error, not a traceback. A closed pipe passes through: the reader's choice (`main`)."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        name = str(getattr(stream, "name", None) or "the output").strip("<>")  # "<stdout>"
        raise InvalidInput(f"cannot write to {name}: {exc.strerror or exc}") from None


def _fail(err: WorkerError) -> int:
    _dump(err.to_dict(), sys.stderr)
    return 1


def _settings(args: argparse.Namespace) -> Settings:
    from memory_worker.core.config import load_settings  # pydantic: see `_configured`

    path = args.config or os.environ.get(CONFIG_ENV)
    return load_settings(Path(path) if path else None)


def _configured(args: argparse.Namespace) -> Settings | None:
    """The settings of the configuration file `--config` or `$MEMORY_CONFIG` names, or None when
    there is none (the defaults, not built here: a call forwarded to the server holding the data
    dir never needs them, and building them imports pydantic, ~50 ms of a hook's process)."""
    return _settings(args) if args.config or os.environ.get(CONFIG_ENV) else None


def embedder_choice(default: str) -> str:
    choice = os.environ.get(EMBEDDER_ENV, default).strip().lower()
    if choice not in ("local", "router", "none"):
        raise InvalidInput(f"${EMBEDDER_ENV} must be local, router or none, not {choice!r}")
    return choice


def _embedder(settings: Settings, *, default: str, lazy: bool = False) -> Embedder | None:
    """The local embedder when chosen: `$MEMORY_EMBEDDER` = `local`, `router` or `none`; by default
    a standalone server and one-shot commands use the local model `embedding_model` names (empty:
    the default), engine mode asks `router::embed` (returns None here: the bus adapter builds it).
    `lazy`: loaded on first use, so a one-shot command that embeds nothing never pays for it. A
    name the local embedder does not have gets an `UnavailableEmbedder` saying so (recall
    lexical, doctor explains), never another model."""
    choice = embedder_choice(default)
    if choice != "local" or not settings.embeddings_enabled:
        return None
    from memory_worker.adapters.embedders import (
        EmbedderUnavailable,
        LazyEmbedder,
        UnavailableEmbedder,
        load_local,
        resolve_local,
    )

    try:
        resolve_local(settings.embedding_model)
    except EmbedderUnavailable as exc:
        log.error("embedding_model_refused", detail=str(exc), retrieval="bm25-entity")
        return UnavailableEmbedder(settings.embedding_model, str(exc))
    try:
        if lazy:
            return LazyEmbedder(settings.embedding_model)
        return load_local(settings.embedding_model)
    except EmbedderUnavailable as exc:
        log.warning("embedder_unavailable", detail=str(exc), retrieval="bm25-entity")
        return None


def _embedder_for(default: str) -> Callable[[Settings], Embedder | None] | None:
    """What a settings change loads (`Reconfigurer`): the local model it names, when the local
    embedder is the one in use; None when the embedder follows the settings itself."""
    if embedder_choice(default) != "local":
        return None
    return lambda settings: _embedder(settings, default=default)


async def _with_door(
    args: argparse.Namespace,
    command: str,
    work: Callable[[Door], Awaitable[int]],
    *,
    caller: Caller = CLI_CALLER,
    lock_wait_s: float | None = None,
    catch_up_s: float = CATCH_UP_S,
) -> int:
    """Run `work` through the data dir's door: opened in-process, or forwarded to the server
    that holds it. `lock_wait_s` defaults to `CLI_LOCK_WAIT_S` as it is at the call (read then,
    not when this was defined, so a test can shorten it). `catch_up_s`: how long an in-process
    recall may embed what its bank lacks (a hook passes 0: its budget is the turn's)."""
    configured = _configured(args)
    root = resolve_data_dir(args.data_dir, configured)

    @functools.cache  # built once, for the service and the embedder alike
    def settings() -> Settings:  # what the door serves with, when it opens the data dir here
        return configured if configured is not None else _settings(args)

    # A one-shot command never embeds what it writes (a server embeds those in the background):
    # an import stays fast. Its recall embeds the query, after a bounded catch-up on what the
    # bank lacks, so a data dir no server ever held gets the semantic arm too.
    embedder_choice("local")  # a bad $MEMORY_EMBEDDER fails whichever door opens
    async with open_door(
        root,
        settings,
        caller,
        command=command,
        lock_wait_s=CLI_LOCK_WAIT_S if lock_wait_s is None else lock_wait_s,
        # Loaded only in-process (and lazily there): a forwarded call lets the server embed.
        make_embedder=lambda: _embedder(settings(), default="local", lazy=True),
        embed_writes=False,
        catch_up_s=catch_up_s,
        short_lived=True,  # one command, then the process exits
    ) as door:
        return await work(door)


# --- commands ----------------------------------------------------------------------------------


def _trigger_help(function_id: str) -> int:
    from memory_worker.app import catalog

    spec = catalog.find(function_id)
    print(f"{spec.id}\n\n{spec.description}\n\nRequest schema:")
    _dump(catalog.json_schema(spec.request), sys.stdout, pretty=True)
    return 0


async def _trigger(args: argparse.Namespace) -> int:
    if args.function is None:  # optional only so that a bare `trigger -h` reaches this
        if args.help_function:
            sys.stdout.write(args.command_help())
            return 0
        raise InvalidInput(
            "memory-worker trigger: the following arguments are required: function "
            "(see `memory-worker trigger -h`)"
        )
    if args.help_function:
        return _trigger_help(args.function)
    functions.check_known(args.function)  # an unknown function fails before the dir is opened
    payload = parse_assignments(args.pairs, args.json)

    async def work(door: Door) -> int:
        _dump(await door.call(args.function, payload), sys.stdout, pretty=True)
        return 0

    return await _with_door(args, f"memory-worker trigger {args.function}", work)


async def _batch_line(door: Door, line: bytes | str) -> dict[str, Any]:
    try:
        # Bytes that are not UTF-8 are `invalid_input` here; the payload's values are counted by
        # the call, with the function's own budget (an import's records each), as over REST.
        item = loads(line, "the line", max_values=None)
        if not isinstance(item, dict) or not isinstance(item.get("function_id"), str):
            raise InvalidInput('each line must be {"function_id": "...", "payload": {...}}')
        return {"result": await door.call(item["function_id"], item.get("payload"))}
    except WorkerError as err:
        return {"error": err.to_dict()}


async def _call(args: argparse.Namespace) -> int:
    # Read as bytes, decoded line by line: a line that is not UTF-8 is answered like any other
    # bad line, where a decoding reader would end the whole batch at it.
    source: IO[Any] | None = None
    if args.batch == "-":
        source = getattr(sys.stdin, "buffer", sys.stdin)  # a test's StringIO has no bytes

    async def work(door: Door) -> int:
        stream = source or Path(args.batch).open("rb")  # noqa: SIM115 - closed below
        try:
            while True:
                # One line at a time, answered before the next is read: a pipe can drive it.
                line = await asyncio.to_thread(stream.readline)
                if not line:
                    return 0
                if line.strip():
                    _dump(await _batch_line(door, line), sys.stdout)
        finally:
            if source is None:
                stream.close()

    # Not "a regular file": `--batch <(make-requests)` names a pipe (/dev/fd/63).
    if source is None and not Path(args.batch).exists():
        raise InvalidInput(f"batch file {args.batch} does not exist")
    if source is None and Path(args.batch).is_dir():
        raise InvalidInput(f"batch file {args.batch} is a directory")
    return await _with_door(args, "memory-worker call --batch", work)


def _read_records(path: str) -> list[dict[str, Any]]:
    from memory_worker.adapters.formats import BOM  # `import`'s: not on every command's path

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        text = text.removeprefix(BOM)  # a Windows editor's first character: not JSON
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None
    rows: list[dict[str, Any]] = []
    # JSON lines end at "\n" only: U+2028, U+0085 or a form feed inside a string are valid JSON
    # (`str.splitlines` would cut a record there); a "\r" before the "\n" is JSON whitespace.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        row = loads(line, f"{path}:{number}")
        if not isinstance(row, dict):
            raise InvalidInput(f"{path}:{number} is not a JSON object")
        rows.append(row)
    return rows


async def _import(args: argparse.Namespace) -> int:
    skipped: dict[str, int] = {}
    origins: list[str] | None = None
    carried: dict[str, Any] = {}
    if args.source_format == "memory-worker":
        carried, rows = split_bank_line(_read_records(args.file))
    else:
        from memory_worker.adapters.formats import read_foreign

        foreign = read_foreign(Path(args.file), args.source_format)
        rows, skipped, origins = foreign.records, foreign.skipped, foreign.origins
        if not rows:
            raise InvalidInput(f"{args.file} holds no memory in the {args.source_format} format")

    async def work(door: Door) -> int:
        try:
            report = await import_rows(door, args.bank, rows, carried)
        except InvalidInput as exc:
            if origins is None:
                raise
            raise _record_in_export(exc, origins) from None
        _dump({**report, "skipped": skipped} if skipped else report, sys.stdout, pretty=True)
        return 0

    return await _with_door(args, f"memory-worker import --bank {args.bank}", work)


async def import_rows(
    door: Door, bank: str, rows: list[dict[str, Any]], carried: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`memory::import` of `rows`: one call in-process; forwarded, in requests of at most
    `FORWARD_CHUNK_BYTES` (the server caps a request's body), every one validated by the server
    (`dry_run`) before the first is written, so a bad record still writes nothing. `carried`:
    the bank's description, settings and rules from an export's first line: the first two
    with the first request (the bank is made with them before its records land), the rules with
    it too when all fits in one request, else in requests of their own after the records."""
    carried = dict(carried or {})
    whole = {"bank": bank, "records": rows, **carried}
    chunks = [list(range(len(rows)))] if door.remote is None else _chunks(rows, FORWARD_CHUNK_BYTES)
    if len(chunks) == 1 and (
        door.remote is None or len(request_body(whole)) <= FORWARD_CHUNK_BYTES
    ):
        return await door.call("memory::import", whole)
    # The rules go in requests of their own, after the records (the first of which makes the
    # bank with its description and settings): with them, the first request outgrew the body a
    # server takes (1 MiB) once a bank's rules added up to more, and no import got through.
    requests: list[tuple[list[int], list[Any] | None, int]] = [
        (positions, None, 0) for positions in chunks
    ]
    if isinstance(carried.get("rules"), list):
        requests += _rule_requests(carried.pop("rules"))
    total: dict[str, Any] = {}
    for dry_run in (True, False):
        total = {"bank": bank, "imported": 0, "live": 0, "redacted": 0}
        for number, (positions, rules, before) in enumerate(requests):
            payload = {"bank": bank, "records": [rows[i] for i in positions], "dry_run": dry_run}
            if number == 0:
                payload.update(carried)
            if rules is not None:
                payload["rules"] = rules
            try:
                result = await door.call("memory::import", payload)
            except InvalidInput as exc:
                if rules is not None:
                    raise _rule_in_file(exc, before) from None
                raise _record_in_file(exc, positions) from None
            total["bank"] = result["bank"]
            for key in ("imported", "live", "redacted"):
                total[key] += result[key]
            for key in ("rules_written", "kept_rules", "kept_settings"):
                if key in result:
                    total[key] = [*total.get(key, []), *result[key]]
    return total


def _rule_requests(rules: list[Any]) -> list[tuple[list[int], list[Any] | None, int]]:
    """`rules` in requests of about `FORWARD_CHUNK_BYTES` each (one rule at least), in their
    order, each with how many rules went before it. A name given twice is refused here, as one
    request holding them all refuses it."""
    names = [str(rule.get("name")) for rule in rules if isinstance(rule, dict)]
    if len(set(names)) != len(names):
        raise InvalidInput("rules: a rule name is given twice")
    requests: list[tuple[list[int], list[Any] | None, int]] = []
    group: list[Any] = []
    size = before = 0
    for rule in rules:
        rule_size = len(request_body(rule)) + 1
        if group and size + rule_size > FORWARD_CHUNK_BYTES:
            requests.append(([], group, before))
            before, group, size = before + len(group), [], 0
        group.append(rule)
        size += rule_size
    if group:
        requests.append(([], group, before))
    return requests


_RULE_NUMBER = re.compile(r"rules\[(\d+)\]: ")


def _rule_in_file(error: InvalidInput, before: int) -> InvalidInput:
    """A request's refusal of its `rules[N]` as that rule's place among all the export's."""
    found = _RULE_NUMBER.match(error.message)
    if found is None:
        return error
    return InvalidInput(f"rules[{int(found.group(1)) + before}]: {error.message[found.end() :]}")


_RECORD_NUMBER = re.compile(r"record (\d+): ")


def _record_in_file(error: InvalidInput, positions: list[int]) -> InvalidInput:
    """A request's refusal of its `record N` (1-based in that request) as the place of that row
    in the whole import, which is what the same import run directly says: requests hold a part
    of the rows, regrouped by memory."""
    found = _RECORD_NUMBER.match(error.message)
    if found is None or not 1 <= int(found.group(1)) <= len(positions):
        return error
    number = positions[int(found.group(1)) - 1] + 1
    return InvalidInput(f"record {number}: {error.message[found.end() :]}")


def _record_in_export(error: InvalidInput, origins: list[str]) -> InvalidInput:
    """A refusal of `record N` of an import read from another system's export, as the place in
    that export (`FILE: item 3`, a note's file and item): the records skip what was left out."""
    found = _RECORD_NUMBER.match(error.message)
    if found is None or not 1 <= int(found.group(1)) <= len(origins):
        return error
    return InvalidInput(f"{origins[int(found.group(1)) - 1]}: {error.message[found.end() :]}")


def _chunks(rows: list[dict[str, Any]], limit_bytes: int) -> list[list[int]]:
    """The positions of `rows` in requests of about `limit_bytes`, every record of one memory in
    the same one (in their order): the server decides which revision wins, and counts live
    memories, per request; a memory split across two would be counted in both."""
    memories: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        memories.setdefault(_memory_key(row), []).append(position)
    chunks: list[list[int]] = [[]]
    size = 0
    for group in memories.values():
        group_size = sum(len(request_body(rows[i])) + 1 for i in group)
        if chunks[-1] and size + group_size > limit_bytes:
            chunks.append([])
            size = 0
        chunks[-1].extend(group)
        size += group_size
    return chunks


def _memory_key(row: Mapping[str, Any]) -> str:
    """Which memory a row is a record of: its id, else its text's fingerprint (the id the server
    gives it), else the row itself (a row the server will refuse)."""
    # Here, not at the top: the tokenizer and its stemmers would load for every command, and a
    # forwarded call (a hook on every prompt) uses neither.
    from memory_worker.core.text import fingerprint

    memory_id, text = row.get("id"), row.get("text")
    if isinstance(memory_id, str) and memory_id:
        return f"id:{memory_id}"
    if isinstance(text, str):
        return f"fp:{fingerprint(text)}"
    return f"row:{id(row)}"


# The key of an export's first line when it carries the bank itself (description, the settings
# its bank.yaml chose, its rules) besides the records: a record always has a `text`, never this.
BANK_LINE = "bank_export"


def export_lines(result: Mapping[str, Any]) -> list[object]:
    """The lines of an export file: the bank line when there is something of the bank to carry
    (an export without one reads as before, and imports as before), then every record."""
    carried = {
        "bank": result["bank"],
        "description": result.get("description") or "",
        "settings": result.get("settings") or {},
        "rules": [{"name": r["name"], "content": r["content"]} for r in result.get("rules") or []],
    }
    head: list[object] = []
    if carried["description"] or carried["settings"] or carried["rules"]:
        head.append({BANK_LINE: carried})
    return [*head, *result["records"]]


def split_bank_line(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An export's rows as (what `memory::import` takes of the bank, the records): the first
    line's bank, when it has one; an older export (records alone) carries nothing."""
    for number, row in enumerate(rows[1:], start=2):
        if BANK_LINE in row:
            # Two exports joined into one file (`cat a.jsonl b.jsonl`): read as a record, the
            # line was refused as "text: Field required", naming no bank line at all.
            raise InvalidInput(
                f"JSON line {number} is a {BANK_LINE} line: only an export's first line is one "
                "(two exports joined into one file?) — import each export on its own"
            )
    if not rows or BANK_LINE not in rows[0]:
        return {}, rows
    bank = rows[0][BANK_LINE]
    if not isinstance(bank, dict):
        raise InvalidInput(f"line 1: {BANK_LINE} must be a JSON object")
    carried = {key: bank[key] for key in ("description", "settings", "rules") if key in bank}
    return carried, rows[1:]


async def _export(args: argparse.Namespace) -> int:
    async def work(door: Door) -> int:
        result = await door.call("memory::export", {"bank": args.bank})
        lines = export_lines(result)
        if args.output == "-" or _is_stdout(args.output):
            with _writing(sys.stdout):
                for line in lines:
                    sys.stdout.write(_json_text(line, sys.stdout) + "\n")
                sys.stdout.flush()
            return 0
        target = Path(args.output)
        try:
            if target.is_symlink() or (target.exists() and not target.is_file()):
                # A link, a device or a pipe (`-o /dev/stdout`, `-o >(gzip > x.gz)`): written
                # into; a temp file renamed over the name would replace the link or the device.
                with target.open("w", encoding="utf-8") as stream:
                    for line in lines:
                        stream.write(_json_text(line, stream) + "\n")
            else:
                _write_whole(target, lines)
        except OSError as exc:  # a missing folder, a full disk: one JSON error, not a traceback
            raise InvalidInput(f"cannot write {args.output}: {exc.strerror or exc}") from None
        summary = {"bank": result["bank"], "records": len(result["records"])}
        if len(lines) > len(result["records"]):
            summary["rules"] = len(result.get("rules") or [])
        _dump(summary, sys.stdout)
        return 0

    return await _with_door(args, f"memory-worker export --bank {args.bank}", work)


def _is_stdout(path: str) -> bool:
    """Whether `path` is the file stdout writes to (`-o /dev/stdout`): the records alone go there,
    as for `-o -`; opened again it would be truncated, and the summary line written over them."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # no such file; a stdout without a descriptor (a test's)
        return False


def _write_whole(path: Path, records: Sequence[object]) -> None:
    """`records` as JSON lines at `path`, whole or not at all: written to a hidden file beside it
    and renamed over it (a full disk halfway through must not leave an export that imports as a
    partial bank). Private to its owner (0600), as the data dir's files are."""
    import tempfile  # only an export to a file needs it: every other command starts faster

    from memory_worker.storage.files import fsync_dir

    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            for record in records:
                stream.write(_json_text(record, stream) + "\n")
            # Reported written on return (and often taken just before a bank is deleted): the
            # bytes durable before the rename, the rename durable after it.
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


async def _compact(args: argparse.Namespace) -> int:
    async def work(door: Door) -> int:
        payload = {"bank": args.bank, "horizon_days": args.horizon_days}
        _dump(await door.call("memory::compact", payload), sys.stdout, pretty=True)
        return 0

    return await _with_door(args, f"memory-worker compact --bank {args.bank}", work)


def choose_mode(
    standalone: bool, engine: str | None, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """(engine URL or None for standalone, why): `--standalone` → `--engine` → `$III_URL` → an
    engine answering at the default address → standalone."""
    from memory_worker.adapters.engine_probe import Probe, engine_url, probe_engine

    if standalone:
        return None, "--standalone was given"
    if engine:
        return engine_url(engine, "--engine"), "--engine was given"
    if url := env.get("III_URL", "").strip():
        return engine_url(url, "III_URL"), "III_URL is set"

    found = probe_engine(DEFAULT_ENGINE_URL, ENGINE_PROBE_TIMEOUT_S)
    if found is Probe.ENGINE:
        return DEFAULT_ENGINE_URL, f"an engine answers at {DEFAULT_ENGINE_URL}"
    if found is Probe.OTHER:
        return None, (
            f"{DEFAULT_ENGINE_URL} is held by a program that is not an iii engine "
            "(no WebSocket handshake; and no --engine or III_URL)"
        )
    if found is Probe.FOREIGN:
        return None, (
            f"{DEFAULT_ENGINE_URL} is held by a program of another account on this machine, "
            "never taken for the engine unasked (--engine or III_URL chooses it)"
        )
    return None, f"no engine answers at {DEFAULT_ENGINE_URL} (and no --engine or III_URL)"


async def _serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    url, reason = choose_mode(args.standalone, args.engine, os.environ)
    if url is not None:
        from memory_worker.adapters.bus.worker import (
            serve_engine,  # the SDK is imported only in engine mode
        )

        return await serve_engine(
            url,
            settings,
            data_dir_flag=args.data_dir,
            embedder=_embedder(settings, default="router"),
            embedder_for=_embedder_for("router"),
            router_embeddings=embedder_choice("router") == "router",
            reason=reason,
        )
    from memory_worker.adapters.standalone import (
        serve,  # aiohttp is imported only by the command that serves
    )

    data_dir = resolve_data_dir(args.data_dir, settings)
    embedder = _embedder(settings, default="local")
    config_path = args.config or os.environ.get(CONFIG_ENV)
    return await serve(
        settings,
        data_dir,
        host=args.host,
        port=args.port,
        embedder=embedder,
        embedder_for=_embedder_for("local"),
        reason=reason,
        config_path=Path(config_path) if config_path else None,
        data_dir_flag=args.data_dir,
    )


async def _consolidate(args: argparse.Namespace) -> int:
    from memory_worker.adapters.consolidate.cli import run_once  # httpx only for this command

    return await run_once(args)


# --- parser ------------------------------------------------------------------------------------


def _given(value: str) -> str:
    """A path option's value: an empty one (`--data-dir "$DIR"` with DIR unset) is refused, not
    read as absent, which fell through to `$MEMORY_DATA_DIR` or the default data dir."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty; leave the option out for the default")
    return value


class _UsageError(Exception):
    """A command line the parser refused (`_Parser.error`)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a refused command line answered as every other error is (SPEC §3: JSON
    `{code, message}` on stderr, exit status 1) instead of usage text and status 2, which a
    coding agent's hook runner reads as "block this action"."""

    # Each command's own parser (`_parser` fills it on the top one): an option a command does
    # not know is refused in its name, so the hint is its `-h`, which lists its options.
    commands: Mapping[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message} (see `{self.prog} -h`)")


if TYPE_CHECKING:
    # What each command's part of `_parser` is handed: the top parser's subcommands.
    _Commands = argparse._SubParsersAction[Any]


def _parser(command: str | None = None) -> _Parser:
    """The command line's parser; given `command` (a command line's first word, one of
    `_COMMAND_PARSERS`), with that command's parser only. Every parser argparse builds costs a
    few hundred µs (each looks up translation files for its own strings, and gettext never
    remembers a miss): all eleven were ~4-5 ms of CPU of every process, a coding agent's hook's
    on every prompt. A command line naming its command parses the same either way — the top
    parser only reads that name and hands the rest to its parser — and one that does not (`-h`,
    a mistyped command, an option first) gets the whole parser, which lists every command."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=_given,
        help="data dir (default: $MEMORY_DATA_DIR, config, "
        "$III_COMPOSE_DIR/data/memory, ./data/memory)",
    )
    common.add_argument(
        "--config", type=_given, help=f"YAML settings file (default: ${CONFIG_ENV})"
    )
    common.add_argument(
        "--log-level", type=log_level, default="warning", help="debug, info, warning, error"
    )

    parser = _Parser(
        prog="memory-worker",
        description="Durable cross-session memory for AI agents: banks of rules and memories.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices
    for name, add in _COMMAND_PARSERS.items():
        if command is None or name == command:
            add(sub, common)
    return parser


def _add_trigger(sub: _Commands, common: _Parser) -> None:
    trigger = sub.add_parser(
        "trigger",
        parents=[common],
        add_help=False,
        help="call one memory function, like `iii trigger`",
        description="Call one function: memory-worker trigger FUNCTION [k=v ...] [--json '{...}'] "
        "(or FUNCTION '{...}' [k=v ...])",
    )
    # Optional to argparse: `trigger -h` with no function prints this usage (`_trigger`), and
    # `trigger` alone is still refused there.
    trigger.add_argument("function", nargs="?", help="function id, e.g. memory::save")
    trigger.add_argument("pairs", nargs="*", help="payload fields as key=value (JSON values)")
    trigger.add_argument("--json", help="base payload as a JSON object; key=value pairs override")
    trigger.add_argument(
        "-h",
        "--help",
        dest="help_function",
        action="store_true",
        help="print the function's description and request schema",
    )
    trigger.set_defaults(command_help=trigger.format_help)


def _add_call(sub: _Commands, common: _Parser) -> None:
    call = sub.add_parser("call", parents=[common], help="run many calls in one process")
    call.add_argument(
        "--batch",
        required=True,
        metavar="FILE|-",
        help='JSON lines {"function_id", "payload"}; one answer line per input',
    )


def _add_import(sub: _Commands, common: _Parser) -> None:
    # Here, not at the top: the other systems' readers compile their patterns at import, and
    # only this command reads them.
    from memory_worker.adapters.formats import FORMATS

    imp = sub.add_parser("import", parents=[common], help="bulk import whole memory records")
    imp.add_argument(
        "file",
        metavar="FILE",
        help="records, one JSON object a line (- = stdin); with --from: the other system's export",
    )
    imp.add_argument("--bank", required=True, help="bank to import into (created when missing)")
    imp.add_argument(
        "--from",
        dest="source_format",
        choices=FORMATS,
        default="memory-worker",
        help="what FILE is: memory-worker (JSON lines, what export writes; default), mem0 (its "
        "get_all/export JSON), markdown (a folder of .md memory files, or one file)",
    )


def _add_export(sub: _Commands, common: _Parser) -> None:
    export = sub.add_parser(
        "export",
        parents=[common],
        help="write a bank's whole records, history included, as JSON lines (the import format)",
        description="Write every record of a bank's log — every revision of every memory, "
        "tombstones included, in log order — one JSON object a line: what `memory-worker "
        "import` reads back.",
    )
    export.add_argument("--bank", required=True, help="bank to export")
    export.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="file to write (default: stdout)"
    )


def _add_mcp(sub: _Commands, common: _Parser) -> None:
    mcp = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve the memory functions to an MCP client over stdio",
        description="An MCP server on stdin/stdout (what an MCP client such as Claude Code or "
        "Codex launches). Tools are the catalog's functions agents may call, with their "
        "descriptions, schemas and read-only/destructive/idempotent hints. Each call opens the "
        "data dir for itself, or is forwarded to the server holding it.",
    )
    from memory_worker.adapters.agent_hooks import bank_option  # the hooks' check of it

    mcp.add_argument(
        "--bank", type=bank_option, help="pin every call to this bank (bank leaves the schemas)"
    )
    mcp.add_argument(
        "--tools",
        choices=("agents", "approval"),
        default="agents",
        help="agents: the functions agents may call (default); approval: also those an operator "
        "approves per use (bank list and get, stats, tags, rules, history, preview, lessons, "
        "doctor, export)",
    )


def _add_capture(sub: _Commands, common: _Parser) -> None:
    sub.add_parser(
        "capture",
        parents=[common],
        help="extract the queued turns (the Stop hook's) when no server runs",
        description="Run the capture queue's due jobs in this process through the configured "
        "extraction_endpoint, then exit. A running server does this by itself; this command is "
        "for a data dir nobody serves.",
    )


def _add_consolidate(sub: _Commands, common: _Parser) -> None:
    consolidate = sub.add_parser(
        "consolidate",
        parents=[common],
        help="run one memory-consolidate pass now (dedup, supersede-only)",
        description="One consolidation pass over the local data dir (or through the standalone "
        "server that holds it, or --server URL): exact duplicates merge, reorders and guarded "
        "near-duplicates are reported, pinned memories are never retired. Prints the report.",
    )
    from memory_worker.adapters.consolidate.options import add_run_arguments

    add_run_arguments(consolidate)


def _add_compact(sub: _Commands, common: _Parser) -> None:
    compact = sub.add_parser(
        "compact",
        parents=[common],
        help="drop a bank's old superseded revisions from its log (crash-safe rewrite)",
        description="Rewrite a bank's memories.jsonl without the superseded revisions written "
        "before the horizon. Every memory keeps its latest revision or tombstone, so recall, list "
        "and get answer the same; memory::history gets shorter. A log with damaged lines is "
        "refused (repair them first).",
    )
    compact.add_argument("--bank", required=True, help="bank to compact")
    compact.add_argument(
        "--horizon-days",
        type=float,
        default=DEFAULT_COMPACT_HORIZON_DAYS,
        help="keep every revision written within this many days "
        f"(default {DEFAULT_COMPACT_HORIZON_DAYS:g}; 0 keeps only the latest of each memory)",
    )


def _add_permissions(sub: _Commands, common: _Parser) -> None:
    sub.add_parser(
        "permissions",
        parents=[common],  # it reads no data dir, but every command takes the option (README)
        help="print iii-permissions.yaml as the function catalog decides it",
        description="Print the agent permission manifest generated from the function catalog "
        "(each function's policy: allowed to agents, human-owned, internal, or approval).",
    )


def _add_serve(sub: _Commands, common: _Parser) -> None:
    # Not `parents=[common]`: argparse shares parent actions, so a serve-only default of
    # --log-level would change every command's.
    serve = sub.add_parser(
        "serve",
        help="run the worker as a long-lived local service",
        description="Serve the memory functions until SIGTERM/SIGINT. Engine mode (an engine is "
        "given or answers): every function on the iii bus, the harness hooks and events. "
        "Standalone mode: REST on 127.0.0.1, POST /memory/<function path> (e.g. /memory/save) "
        "and GET /healthz.",
    )
    serve.add_argument(
        "--data-dir",
        type=_given,
        help="data dir (default: $MEMORY_DATA_DIR, config, "
        "$III_COMPOSE_DIR/data/memory, ./data/memory)",
    )
    serve.add_argument("--config", type=_given, help=f"YAML settings file (default: ${CONFIG_ENV})")
    serve.add_argument(
        "--log-level", type=log_level, default="info", help="debug, info, warning, error"
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, default=8765, help="port to listen on (default 8765; 0 = any free)"
    )
    serve.add_argument(
        "--engine",
        metavar="URL",
        help=f"engine WebSocket URL (default: $III_URL, then {DEFAULT_ENGINE_URL} if it answers)",
    )
    serve.add_argument(
        "--standalone", action="store_true", help="serve local REST even when an engine answers"
    )


def _add_hook(commands: _Commands, parent: _Parser) -> None:
    # The hooks' module, imported by the commands that run a hook (or list every command's
    # parser) only: ~1.5 ms of every other command's start.
    from memory_worker.adapters import agent_hooks

    agent_hooks.add_parser(commands, parent)


# Each command's parser, in the order `memory-worker -h` lists them.
_COMMAND_PARSERS: dict[str, Callable[[_Commands, _Parser], None]] = {
    "trigger": _add_trigger,
    "call": _add_call,
    "import": _add_import,
    "export": _add_export,
    "mcp": _add_mcp,
    "capture": _add_capture,
    "hook": _add_hook,
    "consolidate": _add_consolidate,
    "compact": _add_compact,
    "permissions": _add_permissions,
    "serve": _add_serve,
}


async def _capture(args: argparse.Namespace) -> int:
    """Run the capture queue's due jobs in-process (no server holds the data dir; a server
    runs them itself): each through the extraction endpoint the settings name."""
    from memory_worker.adapters.openai_chat import OpenAIChatCompleter
    from memory_worker.harness.capture import CaptureRunner
    from memory_worker.storage.capture import CaptureQueue

    settings = _settings(args)
    root = resolve_data_dir(args.data_dir, settings)
    unconfigured = InvalidInput("no extraction_endpoint is configured: turns stay queued")
    # A server holding the data dir runs the queue with its own settings' endpoint: refused for
    # want of one here only when the queue would run here (checked before the data dir is opened
    # when no server is recorded in its lock, so the refusal changes nothing).
    if not settings.extraction_endpoint and serving_url(root.resolve()) is None:
        raise unconfigured

    async def work(door: Door) -> int:
        if not isinstance(door, LocalDoor):
            _dump({"forwarded": door.remote, "detail": "the server runs the queue"}, sys.stdout)
            return 0
        if not settings.extraction_endpoint:  # the server recorded has stopped since
            raise unconfigured
        service = door.service
        completer = OpenAIChatCompleter(lambda: service.settings)
        queue = await asyncio.to_thread(CaptureQueue, root)
        runner = CaptureRunner(service, queue, completer)
        try:
            finished = await runner.run_once()
            waiting = queue.pending()
            _dump(
                {
                    "finished": finished,
                    "pending": len(waiting),
                    "dead": queue.dead,
                    "next_retry_at": runner.next_due_ms(),  # a session's head job's retry
                },
                sys.stdout,
                pretty=True,
            )
        finally:
            await runner.close()
            await completer.aclose()
        return 0

    return await _with_door(args, "memory-worker capture", work)


async def _mcp(args: argparse.Namespace) -> int:
    """MCP over stdio: each tool call goes through the data dir's door, opened for that call
    (so hooks, the CLI and other agents' MCP processes get their turn between calls) or
    forwarded to the server holding it."""
    try:
        from memory_worker.adapters.mcp_server import McpTools, serve_stdio
    except ImportError as exc:
        raise InvalidInput(
            f"the mcp extra is not installed ({exc}); pip install 'memory-worker[mcp]'"
        ) from None
    settings = _settings(args)
    root = resolve_data_dir(args.data_dir, settings)
    # As a one-shot command's: what is written here is not embedded then; a recall catches its
    # bank up first (`CATCH_UP_S`), so an agent whose only door is this one gets the
    # semantic arm. Loaded once, on the first in-process recall, and kept: this process lives as
    # long as its client.
    embedder_choice("local")  # a bad $MEMORY_EMBEDDER fails at start, not on every call
    embedders: list[Embedder | None] = []

    def make_embedder() -> Embedder | None:
        if not embedders:
            embedders.append(_embedder(settings, default="local", lazy=True))
        return embedders[0]

    # A client sends tool calls at once (an agent's parallel tool uses): they take the data dir
    # in turn here. Each waiting on the file lock in a thread of its own starved the pool the
    # holder's own work needs, and all but one were refused `conflict` naming this very process.
    turn = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def door_for(caller: Caller) -> AsyncIterator[Door]:
        async with (
            turn,
            open_door(
                root,
                lambda: settings,
                caller,
                command="memory-worker mcp",
                lock_wait_s=CLI_LOCK_WAIT_S,
                make_embedder=make_embedder,
                embed_writes=False,
                catch_up_s=CATCH_UP_S,
            ) as door,
        ):
            yield door

    tools = McpTools(door_for, tools=args.tools, bank=args.bank)
    return await serve_stdio(tools, version=_version())


def _version() -> str:
    import importlib.metadata  # only `mcp` says its version: not on every command's path

    try:
        return importlib.metadata.version("memory-worker")
    except importlib.metadata.PackageNotFoundError:
        return ""


async def _hook(args: argparse.Namespace) -> int:
    own = getattr(args, "own_process", False)
    from memory_worker.adapters import agent_hooks

    return await agent_hooks.run(args, _with_door, abandon=_abandon if own else None)


def _abandon() -> None:
    """A hook past its budget: its work was cancelled, but a worker thread still blocked (a read
    of a stalled file) cannot be, and a normal exit waits for every such thread, holding the
    agent. The process ends `HOOK_EXIT_GRACE_S` from now at the latest, with status 0; a write
    still landing gets that long to finish."""

    def end() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
                stream.flush()
        os._exit(0)

    timer = threading.Timer(HOOK_EXIT_GRACE_S, end)
    timer.daemon = True  # never what holds the exit itself
    timer.start()


async def _permissions(args: argparse.Namespace) -> int:
    """Print `iii-permissions.yaml` as the catalog decides it."""
    from memory_worker.app import catalog

    sys.stdout.write(catalog.render_permissions())
    return 0


_COMMANDS = {
    "trigger": _trigger,
    "call": _call,
    "import": _import,
    "export": _export,
    "hook": _hook,
    "mcp": _mcp,
    "capture": _capture,
    "serve": _serve,
    "consolidate": _consolidate,
    "permissions": _permissions,
    "compact": _compact,
}


# Commands that run one call or batch through a door and exit, and run no memory-consolidate code
# (`consolidate` does; `serve` and `mcp` stay up).
_ONE_SHOT = frozenset({"trigger", "call", "import", "export", "hook", "capture", "compact"})


# The options every command takes, each after the command's name (`_parser`'s `common`).
_COMMON_OPTIONS = ("--data-dir", "--config", "--log-level")


def _misplaced(argv: Sequence[str]) -> str | None:
    """What to say of a command line that starts with one of every command's options (`git -C`
    style): argparse took its value for the command's name ("invalid choice: '/home/…'")."""
    option = argv[0].split("=", 1)[0] if argv else ""
    if option not in _COMMON_OPTIONS:
        return None
    return (
        f"memory-worker: {option} goes after the command, as every command's options do "
        f"(`memory-worker trigger memory::doctor {option} …`; see `memory-worker -h`)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    parser = _parser(given[0] if given and given[0] in _COMMAND_PARSERS else None)
    try:
        args, extra = parser.parse_known_args(argv)
        if (
            extra
            and args.command == "trigger"
            and all("=" in e and not e.startswith("-") for e in extra)
        ):
            args.pairs = [*args.pairs, *extra]  # key=value pairs given after an option
        elif extra:
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except _UsageError as exc:
        return _fail(InvalidInput(_misplaced(given) or str(exc)))
    one_shot = args.command in _ONE_SHOT
    # One-shot commands log only through `storage.logger`: structlog is loaded on their first
    # record at that level, if any (a save logs none at warning).
    configure_logging(getattr(args, "log_level", "warning"), lazy=one_shot)
    # OpenBLAS starts a thread per core when numpy loads, and they spin a while: ~60 ms of CPU of
    # every local one-shot process (a second core's worth on two), for a process that multiplies
    # one query vector at most. In a server the cores are shared with the event loop and the
    # embedder's thread: with one of two cores busy, a 10,000 × 384 product took p90 4.4 ms and
    # p99 8 ms with a thread per core, 0.9 and 1.3 ms with one (its median 0.2 against 0.7 ms:
    # the tail is what a hook's budget meets). Read when numpy loads, which comes later; a choice
    # already in the environment is kept.
    os.environ.setdefault(BLAS_THREADS_ENV, "1")
    if one_shot:
        # pydantic looks for plugins through every installed distribution's entry points when it
        # builds its first model (~20 ms, measured); this package uses none. Read at that build,
        # which the door does later; a choice already in the environment is kept.
        os.environ.setdefault(PYDANTIC_PLUGINS_ENV, "__all__")
    args.own_process = argv is None  # the program itself, not a caller passing argv (a test)
    try:
        code = asyncio.run(_COMMANDS[args.command](args))
    except WorkerError as err:
        code = _fail(err)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout's reader went away (`export | head -1`): its choice, not a failure of the
        # command, so no traceback. (A forwarded call's socket errors are `SiblingUnavailable`.)
        if argv is None:
            # What is still buffered can never be written: the interpreter's last flush would
            # report the same broken pipe.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = PIPE_CLOSED_EXIT
    if argv is None and one_shot:  # the program itself (a caller passing argv gets the code)
        _end_at_once(code)
    return code


def _end_at_once(code: int) -> None:
    """End a one-shot process whose command is over — its loop and worker threads shut down by
    `asyncio.run`, its data dir closed, its answer written — without tearing the interpreter
    down: freeing every module and object one by one is 50-90 ms of CPU once a 10,000-memory
    bank was loaded, for memory the OS takes back at once. As at a normal exit, the exit
    handlers run and the standard streams are flushed first. Returns (a normal exit follows)
    while another thread is alive: a normal exit waits for it."""
    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
