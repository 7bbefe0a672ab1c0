"""Whether an iii engine listens at a URL: a WebSocket opening handshake (RFC 6455 §4), not a
bare TCP connect.

`serve` without `--engine` or `$III_URL` looks for an engine at its default port (49134). Any
program can hold that port; a bare connect took whatever answered for an engine, and the worker
then waited 30 s in engine mode for a handshake that never came instead of serving standalone.
Only a listener that completes the handshake (status 101 and the `Sec-WebSocket-Accept` the key
asks for) counts; the connection is then closed at once with a close frame. Nor does one that
another account on this machine runs (`accounts.server_account`, Linux): any account can listen
on 127.0.0.1:49134, and a worker that took its program for the engine served it every memory
and took every rule it wrote, from a user whose data dir is `0700` to keep that account out.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import time
from enum import StrEnum
from urllib.parse import urlsplit

from memory_worker.adapters.accounts import server_account
from memory_worker.core.errors import InvalidInput

__all__ = ["Probe", "engine_url", "probe_engine"]

_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3
_MAX_HEAD = 16 * 1024  # a handshake answer is a few hundred bytes; more is not a WebSocket server
_NORMAL_CLOSE = (1000).to_bytes(2, "big")


class Probe(StrEnum):
    ENGINE = "engine"  # a WebSocket server completed the handshake
    NOTHING = "nothing"  # no listener (refused, unreachable, timed out connecting)
    OTHER = "other"  # a listener that is not a WebSocket server
    FOREIGN = "foreign"  # a listener another account on this machine runs (not root)


def engine_url(url: str, source: str) -> str:
    """`url` (given as `source`: `--engine`, `III_URL`) when a WebSocket can reach it. Another
    form (`127.0.0.1:49134`, `http://…`) never connects: the client refuses it, the SDK retried
    for 30 s, and the worker then said no engine answers there, an engine listening or not."""
    try:
        parsed = urlsplit(url)
        reachable = parsed.scheme.lower() in ("ws", "wss") and bool(parsed.hostname)
        parsed.port  # noqa: B018 - a port that is no number raises here
    except ValueError:  # `ws://[::1` (an unclosed bracket), `ws://host:http`
        reachable = False
    if not reachable:
        raise InvalidInput(
            f"{source} must be the engine's WebSocket URL, ws://HOST:PORT (e.g. "
            f"ws://127.0.0.1:49134), not {url!r}"
        )
    return url


def probe_engine(url: str, timeout_s: float) -> Probe:
    """What answers at `url` (`ws://host:port[/path]`), within `timeout_s` in all."""
    parsed = urlsplit(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or 80
    deadline = time.monotonic() + timeout_s
    try:
        conn = socket.create_connection((host, port), timeout_s)
    except OSError:
        return Probe.NOTHING
    with conn:
        owner = server_account(conn)  # nothing is sent to another account's program
        if owner is not None and owner not in (0, os.geteuid()):
            return Probe.FOREIGN
        key = base64.b64encode(os.urandom(16))
        request = (
            f"GET {parsed.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key.decode()}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        )
        try:
            conn.sendall(request.encode())
            head = _read_head(conn, deadline)
        except OSError:
            return Probe.OTHER
        if head is None or not _accepts(head, key):
            return Probe.OTHER
        _close_politely(conn)
        return Probe.ENGINE


def _read_head(conn: socket.socket, deadline: float) -> bytes | None:
    """The answer's status line and headers, or None when it does not come whole in time."""
    head = b""
    while b"\r\n\r\n" not in head:
        left = deadline - time.monotonic()
        if left <= 0 or len(head) > _MAX_HEAD:
            return None
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            return None
        head += chunk
    return head.split(b"\r\n\r\n", 1)[0]


def _accepts(head: bytes, key: bytes) -> bool:
    lines = head.split(b"\r\n")
    status = lines[0].split()
    if len(status) < 2 or status[1] != b"101":
        return False
    # SHA-1 is the protocol's own choice here, not a security measure.
    expected = base64.b64encode(hashlib.sha1(key + _ACCEPT_GUID).digest())
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-accept":
            return value.strip() == expected
    return False


def _close_politely(conn: socket.socket) -> None:
    """A masked close frame (a client's frames are masked, RFC 6455 §5.3), so the engine sees a
    normal goodbye rather than a dropped connection; failing to send it changes nothing."""
    mask = os.urandom(4)
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(_NORMAL_CLOSE))
    with contextlib.suppress(OSError):
        conn.sendall(bytes([0x88, 0x80 | len(_NORMAL_CLOSE)]) + mask + payload)
