"""`memory-worker serve` (standalone REST): the real CLI as a subprocess, plus in-process checks of
the error mapping. Readiness is the `memory-worker serving on URL` line on stdout, read with a
deadline, never a sleep."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import http_exceptions, http_parser, web, web_protocol

from memory_worker.adapters import standalone
from memory_worker.adapters.standalone import STATUS_BY_CODE, StandaloneServer
from memory_worker.app import catalog
from memory_worker.core.config import Settings
from memory_worker.core.errors import ERROR_CODES
from memory_worker.storage.store import Store

from .processes import read_line
from .rawhttp import request

START_TIMEOUT_S = 60.0  # a cold interpreter: ~2 s alone, 15 s and more on a loaded 2-core machine
EXIT_TIMEOUT_S = 30.0  # a clean stop with nothing in flight: well under a second alone
_ISOLATED = ("MEMORY_DATA_DIR", "MEMORY_CONFIG", "III_COMPOSE_DIR", "III_URL")
_ENV = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
# Straight to 127.0.0.1 even when the environment sets an http proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    data_dir: Path
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "memory_worker", *args]


def _start(data_dir: Path, stderr_path: Path, *extra: str) -> Served:
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            # `--standalone`: without it `serve` looks for an engine at its default port, which
            # another test's server bound to port 0 may hold by chance (the kernel's pick).
            _cli("serve", "--standalone", "--port", "0", "--data-dir", str(data_dir), *extra),
            stdout=subprocess.PIPE,
            stderr=err,
            env=_ENV,
            bufsize=0,
        )
    try:
        line = read_line(proc, time.monotonic() + START_TIMEOUT_S)
    except AssertionError as exc:
        _kill(proc)
        raise AssertionError(f"{exc}; stderr: {stderr_path.read_text()}") from None
    prefix = "memory-worker serving on "
    assert line.startswith(prefix), line
    return Served(proc, line.removeprefix(prefix), data_dir, stderr_path)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=EXIT_TIMEOUT_S)
    if proc.stdout is not None:
        proc.stdout.close()


def _post(
    url: str, path: str, body: object = None, *, raw: bytes | None = None, method: str = "POST"
) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"} if method == "POST" else {}
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def _send_raw(served: Served, raw: bytes) -> bytes:
    """`raw` on a fresh connection, and everything the server answers until it closes."""
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _split_answer(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _trigger(data_dir: Path, function: str, *pairs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli("trigger", function, *pairs, "--data-dir", str(data_dir)),
        capture_output=True,
        text=True,
        env=_ENV,
        timeout=30,
        check=False,
    )


@pytest.fixture(name="served", scope="module")
def _served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("serve")
    served = _start(root / "data", root / "serve.stderr")
    try:
        yield served
    finally:
        _kill(served.proc)


class TestRest:
    def test_save_then_recall_ranks_the_saved_memory_first(self, served: Served) -> None:
        """A memory saved over REST is the first hit of a recall on its words."""
        status, saved = _post(
            served.url,
            "/memory/save",
            {"text": "The user drinks green tea every morning", "tags": "drinks"},
        )
        assert status == 200 and saved["created"] is True
        _post(served.url, "/memory/save", {"text": "The deploy target is a staging cluster"})
        status, recalled = _post(served.url, "/memory/recall", {"query": "green tea"})
        assert status == 200
        assert recalled["memories"][0]["memory"]["id"] == saved["memory"]["id"]

    def test_bank_list_and_nested_paths(self, served: Served) -> None:
        """Nested function ids map to nested paths, and an empty body is `{}`."""
        assert _post(served.url, "/memory/bank/create", {"name": "blog"})[0] == 200
        status, banks = _post(served.url, "/memory/bank/list")
        assert status == 200
        assert {"blog", "main"} <= {bank["name"] for bank in banks["banks"]}
        status, result = _post(
            served.url, "/memory/rule/set", {"bank": "blog", "name": "tone", "content": "Be brief."}
        )
        assert (status, result["exists"]) == (200, True)

    def test_domain_errors_carry_code_and_status(self, served: Served) -> None:
        """invalid_input is 400 (bad field, non-object, non-JSON); memory_not_found is 404."""
        status, body = _post(served.url, "/memory/save", {"text": 42, "pinned": "maybe"})
        assert (status, body["error"]["code"]) == (400, "invalid_input")
        status, body = _post(served.url, "/memory/save", [1, 2])
        assert (status, body["error"]["code"]) == (400, "invalid_input")
        status, body = _post(served.url, "/memory/save", raw=b"{not json")
        assert (status, body["error"]["code"]) == (400, "invalid_input")
        assert "not valid JSON" in body["error"]["message"]
        status, body = _post(served.url, "/memory/get", {"id": "fp-nope"})
        assert (status, body["error"]["code"]) == (404, "memory_not_found")
        status, body = _post(served.url, "/memory/list", {"bank": "no-such-bank"})
        assert (status, body["error"]["code"]) == (404, "bank_not_found")

    def test_unknown_path_and_wrong_method(self, served: Served) -> None:
        """No route is 404 `not_found`; GET on a function is 405; both in the error shape."""
        status, body = _post(served.url, "/memory/nope", {})
        assert (status, body["error"]["code"]) == (404, "not_found")
        status, body = _post(served.url, "/memory/save", method="GET")
        assert (status, body["error"]["code"]) == (405, "method_not_allowed")

    def test_a_malformed_request_is_one_log_line_not_a_traceback(self, served: Served) -> None:
        """What aiohttp's parser refuses (a bad request line, header, length, chunk, a line past
        its limit) is answered 400 and logged as one line: each was aiohttp's own error with a
        full traceback, so any client could fill the log at will."""
        host, port = served.url.removeprefix("http://").rsplit(":", 1)
        malformed = [
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
            b"GET /healthz HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
            b"GET /healthz HTTP/1.1 junk\r\n\r\n",
            b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
            b"POST /memory/recall HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /x\x00 HTTP/1.1\r\n\r\n",
        ]
        before = len(served.stderr())
        for raw in malformed:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(raw)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.split(b" ", 2)[1] == b"400", (raw[:60], answer[:200])
        logged = served.stderr()[before:]
        assert "Traceback" not in logged
        # The banks' boot may finish meanwhile when this test is the first to reach the server.
        lines = [line for line in logged.splitlines() if '"banks_booted"' not in line]
        refused = [json.loads(line) for line in lines if "bad_http_request" in line]
        assert len(refused) == len(malformed) == len(lines), logged
        assert all(entry["level"] == "info" and "\n" not in entry["error"] for entry in refused)

    def test_what_the_parser_refuses_is_answered_in_the_error_shape(self, served: Served) -> None:
        """A request aiohttp's parser refuses (a bad header line, a bad method, a bad chunk, a
        line past its limit) gets `400 invalid_input` as JSON like every other refusal, on every
        route (`/mcp` too: the parser runs before any route): it was aiohttp's plain text,
        which quoted the refused bytes back."""
        malformed = [
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
            b"G(T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Key: a\x00b\r\n\r\n",
            b"GET /?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            b"POST /memory/recall HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        ]
        for raw in malformed:
            status, headers, body = _split_answer(_send_raw(served, raw))
            assert status == 400, (raw[:60], body)
            assert headers.get("content-type", "").startswith("application/json"), headers
            error = json.loads(body)["error"]
            assert error["code"] == "invalid_input", error
            assert error["message"].startswith("the request cannot be read as HTTP: "), error

    def test_the_bytes_of_a_refused_request_never_reach_the_log(self, served: Served) -> None:
        """The `bad_http_request` line gives the parser's reason, never the bytes it quoted: a
        refused header line is often a person's cookies or a token. Nor does the answer echo
        them back."""
        secret = "sk-live-" + "Zq7" * 8
        head = "POST /memory/recall HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        malformed = [
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: session={secret}"
            + "x" * 17_000
            + "\r\n\r\n",
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization Bearer {secret}\r\n\r\n",
            f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: {secret}\x00\r\n\r\n",
            f"GET /?token={secret}" + "a" * 9000 + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            f"{head}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            f"2\r\n{{}}\r\n{secret}\r\n0\r\n\r\n",
        ]
        before = len(served.stderr())
        for raw in malformed:
            answer = _send_raw(served, raw.encode("latin-1"))
            assert answer.split(b" ", 2)[1] == b"400", answer[:300]
            assert secret.encode() not in answer, answer[:300]
        logged = served.stderr()[before:]
        refused = [json.loads(line) for line in logged.splitlines() if "bad_http_request" in line]
        assert len(refused) == len(malformed), logged
        assert secret not in logged, logged
        assert all(entry["error"] for entry in refused), refused
        assert "longer than 16384 bytes" in refused[0]["error"], refused[0]

    def test_a_browser_with_many_cookies_for_localhost_opens_the_console(
        self, served: Served
    ) -> None:
        """Cookies are sent to every port of localhost, so a browser that other local apps gave
        more than 8 KB of them could not open the console (aiohttp's 8,190-byte cap per header):
        one header may now be 16 KiB. The head as a whole stays bounded as before: at most 64
        headers (a browser sends about 20), so 1 MiB."""
        cookies = "; ".join(f"app{i}=" + "v" * 3000 for i in range(5))  # 15 KB
        answer = request(served.url, "GET", "/", headers={"Cookie": cookies})
        assert answer.status == 200 and b"<html" in answer.body.lower()
        assert request(served.url, "GET", "/healthz", headers={"Cookie": cookies}).status == 200
        too_long = request(served.url, "GET", "/", headers={"Cookie": "a=" + "v" * 17_000})
        assert (too_long.status, too_long.code) == (400, "invalid_input")
        many = {f"X-Header-{i}": "1" for i in range(70)}
        too_many = request(served.url, "GET", "/healthz", headers=many)
        assert (too_many.status, too_many.code) == (400, "invalid_input")

    def test_a_body_that_cannot_be_decoded_is_invalid_input_not_a_bug(self, served: Served) -> None:
        """A body aiohttp cannot read (a `Content-Encoding` it is not in) is the client's error:
        `400 invalid_input` and one log line. It was a `500 internal` with a traceback logged as
        a server bug, and a second one as aiohttp drained the body."""
        host, port = served.url.removeprefix("http://").rsplit(":", 1)
        head = (
            b"POST /memory/save HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n"
        )
        bodies = [
            (head + b"Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\n", b"abcd"),
            (
                head + b"Content-Encoding: gzip\r\nContent-Length: 20\r\n\r\n",
                b"\x1f\x8b" + b"!" * 18,
            ),
        ]
        before = len(served.stderr())
        for sent_head, body in bodies:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(sent_head)
                sock.sendall(body)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.split(b" ", 2)[1] == b"400", (body, answer[:300])
            assert b'"code": "invalid_input"' in answer, answer
        logged = served.stderr()[before:]
        assert "Traceback" not in logged and "request_failed" not in logged, logged

    def test_healthz_names_mode_and_data_dir(self, served: Served) -> None:
        """`GET /healthz` reports the standalone mode and the resolved data dir."""
        status, body = _post(served.url, "/healthz", method="GET")
        assert status == 200
        data_dir = str(served.data_dir.resolve())
        assert body == {"ok": True, "mode": "standalone", "data_dir": data_dir}

    def test_start_log_line_says_mode_and_why(self, served: Served) -> None:
        """One structured `serving` line on stderr names the mode, the reason and the URL."""
        events = [json.loads(line) for line in served.stderr().splitlines() if line.startswith("{")]
        serving = [e for e in events if e["event"] == "serving"]
        assert len(serving) == 1
        assert serving[0]["mode"] == "standalone" and serving[0]["url"] == served.url
        assert serving[0]["reason"] == "--standalone was given"  # (auto-detection: test_serve_mode)


@dataclass
class Refused:
    returncode: int
    stdout: str
    error: dict[str, str]


@pytest.fixture(name="refusals", scope="module")
def _refusals(served: Served, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Refused]:
    """The commands that must not start, run side by side (each is a cold interpreter start)."""
    blocker = tmp_path_factory.mktemp("unwritable") / "file"
    blocker.write_text("not a dir")
    commands = {
        "second_serve": _cli(
            "serve", "--standalone", "--port", "0", "--data-dir", str(served.data_dir)
        ),
        "unwritable": _cli(
            "serve", "--standalone", "--port", "0", "--data-dir", str(blocker / "data")
        ),
    }
    procs = {
        name: subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_ENV
        )
        for name, argv in commands.items()
    }
    results: dict[str, Refused] = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=30)
            results[name] = Refused(proc.returncode, out, json.loads(err.strip().splitlines()[-1]))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


class TestOneWriter:
    def test_second_serve_is_refused_naming_the_first(
        self, served: Served, refusals: dict[str, Refused]
    ) -> None:
        """A second `serve` on the same data dir exits 1 with `conflict`, naming pid and URL."""
        result = refusals["second_serve"]
        assert (result.returncode, result.stdout, result.error["code"]) == (1, "", "conflict")
        assert f"pid {served.proc.pid}" in result.error["message"]
        assert served.url in result.error["message"]

    def test_trigger_is_forwarded_to_the_server_and_answers_as_rest_does(
        self, served: Served
    ) -> None:
        """A `trigger` never becomes a second writer: it forwards to the server holding the data
        dir (its URL is in the lock) and prints what the REST call answers."""
        result = _trigger(served.data_dir, "memory::bank::list")
        assert result.returncode == 0, result.stderr
        status, direct = _post(served.url, "/memory/bank/list", {})
        assert status == 200 and json.loads(result.stdout) == direct

    def test_unwritable_data_dir_refuses_to_start(self, refusals: dict[str, Refused]) -> None:
        """A data dir that cannot be created: exit 1 with `storage`, and no readiness line."""
        result = refusals["unwritable"]
        assert (result.returncode, result.stdout, result.error["code"]) == (1, "", "storage")


class TestShutdown:
    def test_sigterm_exits_zero_and_releases_the_lock(self, tmp_path: Path) -> None:
        """SIGTERM: exit 0 within seconds; the next `trigger` opens the dir and sees the memory
        saved over REST."""
        served = _start(tmp_path / "data", tmp_path / "serve.stderr")
        try:
            text = "Shutdown keeps this memory"
            status, saved = _post(served.url, "/memory/save", {"text": text})
            assert status == 200
            served.proc.send_signal(signal.SIGTERM)
            assert served.proc.wait(timeout=EXIT_TIMEOUT_S) == 0, served.stderr()
        finally:
            _kill(served.proc)
        assert "Traceback" not in served.stderr()
        result = _trigger(served.data_dir, "memory::get", f"id={saved['memory']['id']}")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["memory"]["text"] == text

    def test_a_log_pipe_its_reader_closed_neither_fails_calls_nor_holds_off_sigterm(
        self, tmp_path: Path
    ) -> None:
        """`memory-worker serve 2>&1 | head`, or a log collector that died: every log line
        raised `BrokenPipeError` where it was written. A refused call that logs was answered a
        plain-text 500, and SIGTERM never stopped the server (the handler logs `stopping` before
        it stops). What cannot be written to stderr is dropped; the server goes on."""
        data = tmp_path / "data"
        proc = subprocess.Popen(
            _cli("serve", "--standalone", "--port", "0", "--data-dir", str(data)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_ENV,
            bufsize=0,
        )
        try:
            line = read_line(proc, time.monotonic() + START_TIMEOUT_S)
            url = line.removeprefix("memory-worker serving on ")
            assert proc.stderr is not None
            proc.stderr.close()  # the log's reader is gone
            refused = request(
                url, "POST", "/memory/recall", b'{"query": "x"}', headers={"Content-Type": "text"}
            )
            assert refused.status == 415, refused.body
            assert refused.json()["error"]["code"] == "unsupported_media_type"
            status, saved = _post(url, "/memory/save", {"text": "The log pipe closed early"})
            assert status == 200, saved
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=EXIT_TIMEOUT_S) == 0
        finally:
            _kill(proc)

    def test_sigint_exits_zero_and_clears_the_holder(self, tmp_path: Path) -> None:
        """SIGINT (Ctrl-C) is the same clean stop: exit 0 and the lock file names nobody."""
        served = _start(tmp_path / "data", tmp_path / "serve.stderr")
        try:
            assert json.loads((served.data_dir / ".lock").read_text())["url"] == served.url
            served.proc.send_signal(signal.SIGINT)
            assert served.proc.wait(timeout=EXIT_TIMEOUT_S) == 0, served.stderr()
        finally:
            _kill(served.proc)
        assert (served.data_dir / ".lock").read_text() == ""
        assert "Traceback" not in served.stderr()


class TestInProcess:
    def test_every_domain_code_has_a_status(self) -> None:
        """The status table covers every error code the core can raise."""
        assert set(STATUS_BY_CODE) == set(ERROR_CODES)

    def test_every_catalog_function_has_a_route(self) -> None:
        """`build_app` routes POST /<http_path> for each catalog entry, and nothing else POSTs
        but the capture queue's door."""
        app = standalone.build_app(object())  # type: ignore[arg-type]
        routes = [r for r in app.router.routes() if r.method == "POST"]
        posts = {r.resource.canonical for r in routes if r.resource is not None}
        expected = {f"/{spec.http_path}" for spec in catalog.CATALOG}
        assert posts == expected | {f"/{standalone.CAPTURE_PATH}"}

    async def test_a_bug_is_logged_and_answered_500_without_detail(
        self, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An unexpected exception is logged with its traceback; the client gets `internal` only."""

        async def broken(*_: object) -> dict[str, Any]:
            raise RuntimeError("secret internals")

        server = StandaloneServer(Settings(), data_dir, port=0)
        url = await server.start()
        monkeypatch.setattr(catalog, "call", broken)
        try:
            with structlog.testing.capture_logs() as logs:
                status, body = await asyncio.to_thread(_post, url, "/memory/bank/list", {})
        finally:
            await server.close()
        assert (status, body["error"]["code"]) == (500, "internal")
        assert "secret" not in body["error"]["message"]
        failed = [e for e in logs if e["event"] == "request_failed"]
        assert failed and failed[0]["exc_info"] is True and failed[0]["log_level"] == "error"

    @pytest.mark.parametrize(
        "exc",
        [
            http_exceptions.LineTooLong(b"Cookie: sid=SECRET...", 16384),
            http_exceptions.InvalidHeader(b"X-Key: SECRET\x00"),
            http_exceptions.BadStatusLine("GET /?t=SECRET HTTP/9"),
            http_exceptions.BadHttpMethod("SECRET /"),
            http_exceptions.InvalidURLError("/?token=SECRET"),
            http_exceptions.TransferEncodingError("SECRETzz"),  # the pure-Python parser's chunk
            http_exceptions.BadHttpMessage("Invalid header value char:\n\n  b'SECRET'\n  ^"),
            http_exceptions.BadHttpMessage("SECRET=abc; b'SECRET'"),
            web.RequestPayloadError("400, message:\n  SECRETzz"),
        ],
        ids=lambda exc: type(exc).__name__,
    )
    def test_a_refusal_s_reason_never_quotes_the_request(self, exc: Exception) -> None:
        """Whichever parser refused (llhttp or aiohttp's pure-Python one, under
        `AIOHTTP_NO_EXTENSIONS`), the reason logged and answered is words, not the bytes."""
        reason = standalone.refusal_reason(exc)
        assert reason and "SECRET" not in reason, reason

    def test_aiohttp_s_other_errors_keep_their_traceback(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Only what aiohttp's parser refuses is shortened: any other error aiohttp logs (one
        past the routes' own handling) still reaches its logger with the traceback."""
        server_log = standalone._ProtocolLog()
        with caplog.at_level(logging.ERROR, logger="aiohttp.server"):
            try:
                raise RuntimeError("a bug")
            except RuntimeError as exc:
                server_log.exception("Error handling request from %s", "127.0.0.1", exc_info=exc)
        (record,) = caplog.records
        assert record.name == "aiohttp.server" and record.exc_info is not None
        assert record.getMessage() == "Error handling request from 127.0.0.1"

    @pytest.mark.parametrize("parser", ["llhttp", "python"])
    async def test_a_malformed_chunk_after_the_head_is_refused_at_once(
        self, data_dir: Path, parser: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A chunked body the parser refuses once its request is being handled (a client that
        streams the body after the head) is `400 invalid_input` at once, with one log line. With
        llhttp the request was left waiting for a body that would never end, held its connection
        the whole body timeout and was answered `408`, the body "did not arrive"; with aiohttp's
        pure-Python parser (`AIOHTTP_NO_EXTENSIONS`) it was a `500 internal` whose logged
        traceback quoted the chunk line."""
        if parser == "python":
            monkeypatch.setattr(web_protocol, "HttpRequestParser", http_parser.HttpRequestParserPy)
        server = StandaloneServer(Settings(), data_dir, port=0, body_timeout_s=5.0)
        url = await server.start()
        host, port = url.removeprefix("http://").rsplit(":", 1)

        def send() -> bytes:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(
                    b"POST /memory/recall HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                    b"Expect: 100-continue\r\n\r\n"
                )
                # The server says so once the request is being handled and reads its body.
                assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
                sock.sendall(b"zz-not-a-size\r\n{}\r\n0\r\n\r\n")
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            return answer

        try:
            with structlog.testing.capture_logs() as logs:
                answer = await asyncio.to_thread(send)
        finally:
            await server.close()
        status, _, body = _split_answer(answer)
        error = json.loads(body)["error"]
        assert (status, error["code"]) == (400, "invalid_input"), error
        assert error["message"].startswith("the request body cannot be read: "), error
        assert "zz" not in error["message"], error
        refused = [e for e in logs if e["event"] == "bad_http_request"]
        assert len(refused) == 1 and "zz" not in refused[0]["error"], refused
        assert not [e for e in logs if e["event"] == "request_failed"], logs

    async def test_a_malformed_chunk_read_before_its_handler_starts_is_refused_at_once(
        self, data_dir: Path
    ) -> None:
        """The head and a malformed chunk read one after the other before the request's handler
        task has begun (a busy loop runs both reads first): the refusal was tied to the request
        being handled, there was none yet, and the body waited out the body timeout for `408`.
        It is `400 invalid_input` at once, whenever the chunk is read."""
        server = StandaloneServer(Settings(), data_dir, port=0, body_timeout_s=5.0)
        url = await server.start()
        host, port = url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            # A first request answered: the connection's protocol is there, and idle.
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            assert server._runner is not None and server._runner.server is not None
            [protocol] = server._runner.server.connections
            # The two reads in one go, as the loop delivers them when both wait for it.
            protocol.data_received(
                b"POST /memory/recall HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            protocol.data_received(b"zz-not-a-size\r\n{}\r\n0\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
            await server.close()
        status, _, body = _split_answer(answer)
        error = json.loads(body)["error"]
        assert (status, error["code"]) == (400, "invalid_input"), error
        assert error["message"].startswith("the request body cannot be read: "), error

    async def test_close_is_idempotent_and_releases_the_lock(self, data_dir: Path) -> None:
        """`close()` twice is fine, and the data dir can be opened again afterwards."""
        server = StandaloneServer(Settings(), data_dir, port=0)
        await server.start()
        assert "running" in repr(server)
        await server.close()
        await server.close()
        store = Store.open(data_dir, holder={"pid": os.getpid()})
        await store.close()
