"""A bare HTTP/1.1 client over a socket, for tests and the campaign that must send what a browser
or an attacker sends: any `Host`, `Origin`, content type or a half-written request."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Answer", "request", "split_url"]


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def code(self) -> str | None:
        try:
            value = self.json()
        except ValueError:
            return None
        error = value.get("error") if isinstance(value, dict) else None
        return error.get("code") if isinstance(error, dict) else None


def split_url(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    return parts.hostname, parts.port


def request(
    url: str,
    method: str,
    path: str,
    body: bytes | str | dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Answer:
    """Send one request with exactly `headers` (a `Host` is added only when absent; a dict body
    is JSON-encoded but its content type is the caller's to set) and read the answer to the end
    (`Connection: close`)."""
    host, port = split_url(url)
    if isinstance(body, dict):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else (body or b"")
    sent = {"Host": f"{host}:{port}", "Connection": "close", **(headers or {})}
    if data or method in ("POST", "PUT"):
        sent.setdefault("Content-Length", str(len(data)))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items())
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + data)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    status_line, _, rest = raw.partition(b"\r\n")
    head_bytes, _, payload = rest.partition(b"\r\n\r\n")
    parsed: dict[str, str] = {}
    for line in head_bytes.split(b"\r\n"):
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        payload = _unchunk(payload)
    return Answer(int(status_line.split()[1]), parsed, payload)


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out
