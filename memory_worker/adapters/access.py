"""Who may call the standalone server, and how a client proves it may.

The server listens on a port that every local process and every web page the user visits can
reach (a page's `fetch` to 127.0.0.1 is sent; only reading the answer is up to CORS). So a request
passes only when it is not from a web page of another site, and carries the token when one is due:

- `Host` must be a name this server answers to: localhost, 127.0.0.1, [::1], the address it
  listens on (any IP literal when that is a wildcard address) or a configured `allowed_hosts`
  name. A DNS-rebinding page reaches us under its own name and is refused here.
- `Origin`, when sent, must be this server's own origin (the console page it serves), and
  `Sec-Fetch-Site`, when sent, `same-origin` or `none`.
- A call (any method but GET/HEAD/DELETE) must be `application/json`: a cross-site page can send
  that only after a CORS preflight, and an `OPTIONS` request has no route here and no response
  carries an `Access-Control-*` header. An HTML form or a "simple" `text/plain` POST is refused.
  A DELETE (an MCP client ending its session) has no body, and is never sent without a preflight.
- The token (`<data_dir>/.token`, owner-only, made at the first start) rides as `Authorization:
  Bearer <token>`. It is required on every request when the server listens beyond loopback (or
  `require_token` says so) and optional on loopback, where a wrong one is still refused. The page
  and its static assets (`GET /`, `GET /console/…`) need none: they hold no data.
- Optional on loopback for this account only: another account on the machine (a shared host's
  other users, a service account) reaches 127.0.0.1 too, and the data dir is `0700` precisely to
  keep it out, so a connection another account opened (`peer_account`: Linux's `sock_diag`) needs
  the token like a request from beyond loopback. Root's too: a proxy running as root (a tunnel's
  daemon) brings in calls from beyond the machine. Out of file descriptors the account cannot be
  asked: `503 unavailable`, to retry (neither let in unchecked nor told it is another account).

`check()` is pure (headers in, refusal out) so every rule is tested with values; the client half
(`client_token`, `request_headers`) is what the CLI, MCP and console forwarders use.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from memory_worker.adapters.accounts import OUT_OF_DESCRIPTORS
from memory_worker.storage import files

__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILE",
    "Policy",
    "Refusal",
    "browser_refusal",
    "check",
    "client_token",
    "ensure_token",
    "host_name",
    "is_loopback",
    "request_headers",
]

TOKEN_FILE = ".token"  # a dot name: never taken for a bank, never watched
TOKEN_ENV = "MEMORY_TOKEN"  # a client that cannot read the data dir (another machine) passes it
_TOKEN_BYTES = 32
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_SAME_SITE = frozenset({"same-origin", "none"})
# Methods held to no content type: GET/HEAD, and DELETE, which has no body to type (an MCP client
# ends its session with a bare `DELETE /mcp`) and which a page can send only after a preflight,
# refused here like every other: the JSON rule exists to stop the "simple" requests a page can
# send unasked, and a DELETE never is one.
_UNTYPED_METHODS = _SAFE_METHODS | {"DELETE"}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: HTTP status, stable code, and a sentence for the caller."""

    status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Policy:
    """What this server accepts. `hosts`: lower-case names and IP literals it answers to;
    `any_ip`: it listens on a wildcard address, so any IP literal is one of its own (a rebinding
    page can only send a name); `token_required`: every request but the public pages needs it."""

    token: str
    hosts: frozenset[str]
    any_ip: bool = False
    token_required: bool = False

    @classmethod
    def build(
        cls,
        token: str,
        listen_host: str,
        bound_address: str,
        extra_hosts: Iterable[str] = (),
        *,
        require_token: bool = False,
    ) -> Policy:
        wildcard = _is_wildcard(bound_address)
        hosts = {*_LOOPBACK_NAMES, *(_normal(h) for h in extra_hosts)}
        if not wildcard:
            hosts.update((_normal(listen_host), _normal(bound_address)))
        return cls(
            token=token,
            hosts=frozenset(h for h in hosts if h),
            any_ip=wildcard,
            token_required=require_token or not is_loopback(bound_address),
        )


def _normal(name: str) -> str:
    """`Localhost.` → `localhost`; `[::1]` → `::1`."""
    return name.strip().strip("[]").rstrip(".").lower()


def host_name(header: str) -> str | None:
    """The name part of a `Host` header (`[::1]:8765` → `::1`), or None when it is malformed."""
    header = header.strip()
    if not header:
        return None
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1 :] if end >= 0 else None
        if rest is None or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return _normal(header[1:end]) or None
    name, _, port = header.partition(":")
    if port and not port.isdigit():
        return None
    return _normal(name) or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_wildcard(address: str) -> bool:
    try:
        return ipaddress.ip_address(_normal(address)).is_unspecified
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """Whether a listening address is reachable from this machine only."""
    name = _normal(address)
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name == "localhost"


def _is_public(method: str, path: str) -> bool:
    """The console's page and static assets: readable without a token (they hold no data)."""
    return method in _SAFE_METHODS and (path == "/" or path.startswith("/console/"))


def check(
    policy: Policy,
    method: str,
    path: str,
    headers: Mapping[str, str],
    *,
    peer_account: Callable[[], int | None] | None = None,
) -> Refusal | None:
    """None when the request may go on, else why not. `headers` is case-insensitive (aiohttp's
    `CIMultiDict`, or a dict with the canonical names). `peer_account`: the uid of the account
    that opened the connection (None: not known), asked only of a loopback request without a
    token, the one whose answer it changes."""
    refusal = _foreign(policy, headers.get("Host", ""), headers)
    if refusal is not None:
        return refusal
    if method not in _UNTYPED_METHODS and _media_type(headers.get("Content-Type", "")) != (
        "application/json"
    ):
        return Refusal(
            415,
            "unsupported_media_type",
            "calls must be sent as Content-Type: application/json",
        )
    return _token_refusal(policy, method, path, headers.get("Authorization"), peer_account)


def _foreign(policy: Policy, host: str, headers: Mapping[str, str]) -> Refusal | None:
    """A `Host` this server does not answer to, a foreign `Origin`, a cross-site fetch."""
    name = host_name(host)
    if name is None or not (name in policy.hosts or (policy.any_ip and _is_ip(name))):
        return Refusal(
            403,
            "forbidden",
            f"this server does not answer to host {host[:100]!r}; use "
            f"http://127.0.0.1 or a name listed in allowed_hosts",
        )
    origin = headers.get("Origin")
    if origin is not None and not _same_origin(origin, host):
        return Refusal(
            403, "forbidden", f"cross-origin requests are refused (Origin {origin[:100]!r})"
        )
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.lower() not in _SAME_SITE:
        return Refusal(403, "forbidden", f"cross-site requests are refused ({site[:40]})")
    return None


def browser_refusal(
    headers: Mapping[str, str], allowed_hosts: Iterable[str] = ()
) -> Refusal | None:
    """`check`'s web-page rules for a door whose listener is not ours: the engine's http worker
    (0.0.0.0:3111 by default) hands us each request's headers, and any page the user visits can
    post to it. Only a request a browser marked (`Origin`, `Sec-Fetch-Site`) is held to them, so
    a program reaching the engine under any name (a compose service) still gets through; a page
    is refused unless it is same-origin under a loopback name, an IP literal or `allowed_hosts`
    (a DNS-rebinding page is same-origin under its own name). No token: the engine's listener
    is not one this worker can require it on."""
    origin, site = headers.get("Origin"), headers.get("Sec-Fetch-Site")
    if origin is None and site is None:
        return None
    host = headers.get("Host")
    if host is None and origin is not None:  # a listener that does not pass `Host` on
        try:
            host = urlsplit(origin.strip()).netloc
        except ValueError:
            host = ""
    policy = Policy.build("", "0.0.0.0", "0.0.0.0", allowed_hosts)  # any IP literal: the engine's
    return _foreign(policy, host or "", headers)


def _token_refusal(
    policy: Policy,
    method: str,
    path: str,
    authorization: str | None,
    peer_account: Callable[[], int | None] | None = None,
) -> Refusal | None:
    if authorization is None:
        if _is_public(method, path):
            return None
        if not policy.token_required:
            account = peer_account() if peer_account is not None else None
            if account is None or account == os.geteuid():
                return None
            if account == OUT_OF_DESCRIPTORS:  # neither let in unchecked nor told it is foreign
                return Refusal(
                    503,
                    "unavailable",
                    "the server is out of file descriptors and cannot tell which account opened "
                    "this connection; retry shortly (or send the bearer token)",
                )
            # Negative: the peer let go of its socket (closed or reset it) before the check.
            who = f"uid {account}" if account >= 0 else "a socket no process holds any more"
            return Refusal(
                401,
                "unauthorized",
                f"a call from another account on this machine ({who}) needs the bearer token "
                f"(Authorization: Bearer <token>); it is in the data dir's {TOKEN_FILE} file, "
                "readable by the server's account only",
            )
        return Refusal(
            401,
            "unauthorized",
            "a bearer token is required (Authorization: Bearer <token>); it is in the data "
            f"dir's {TOKEN_FILE} file",
        )
    scheme, _, given = authorization.strip().partition(" ")
    # `replace`: a header of bytes that are not UTF-8 reaches us with surrogates, and a token
    # is plain ASCII, so what cannot be encoded can only be wrong (never a 500).
    valid = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "replace"), policy.token.encode()
    )
    if valid:
        return None
    return Refusal(
        401, "unauthorized", f"the bearer token is wrong; it is in the data dir's {TOKEN_FILE} file"
    )


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _same_origin(origin: str, host: str) -> bool:
    try:
        parts = urlsplit(origin.strip())
    except ValueError:  # `http://[::1`: not a URL, so not ours
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # `null` (a sandboxed page, a file://) included
    return parts.netloc.lower() == host.strip().lower()


# --- the token ----------------------------------------------------------------------------------


def _valid(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    token = raw.decode("ascii", "replace").strip()
    if len(token) < 32 or not token.replace("-", "").replace("_", "").isalnum():
        return None
    return token


def ensure_token(root: Path) -> str:
    """The server token of the data dir `root`, made (owner-only, atomic) when there is none or
    the file is not one only its owner can read (blocking)."""
    path = root / TOKEN_FILE
    token = _valid(files.read_private(path))
    if token is None:
        token = secrets.token_urlsafe(_TOKEN_BYTES)
        files.atomic_write(path, token.encode() + b"\n", within=root, mode=0o600)
    return token


def client_token(data_dir: Path | None, env: Mapping[str, str] | None = None) -> str | None:
    """The token a client sends: the token file of the data dir it forwards for (when this user
    can read it: exactly what the server holding that dir checks), else `$MEMORY_TOKEN` (a server
    whose data dir is not readable here, e.g. another machine's), else None (a loopback server
    takes calls without one). `$MEMORY_TOKEN` set for a remote server used to win over the file
    and have the user's own local server refuse every forwarded call (401)."""
    if data_dir is not None and (own := _valid(files.read_private(data_dir / TOKEN_FILE))):
        return own
    env = os.environ if env is None else env
    return env.get(TOKEN_ENV, "").strip() or None


def request_headers(token: str | None) -> dict[str, str]:
    """The headers of a call to the standalone server: JSON, and the token when there is one."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
