"""Which account on this machine holds the other end of a local TCP connection: Linux's
`sock_diag` (the lookup `ss -e` makes), one exact-match query by the connection's four-tuple,
answered with the socket's owner, without any privilege.

Both ends of the standalone server use it. Every account on the machine reaches 127.0.0.1, and
the data dir is `0700` precisely to keep the other accounts out:
- the server (`account_of`): a token-less loopback call is taken only from its own account
  (`access.check` asks any other for the token);
- a forwarding client (`server_account`): its call and token go only to a server its own account
  (or root) runs, never to a program another account started on the port a server let go of;
  and `serve` looking for an engine at its default address takes no other account's program.

Standard library only: a forwarded one-shot call (a coding agent's hook) imports this.
Elsewhere (not Linux, no `sock_diag`) nothing can be told: None, and both ends do as before.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import weakref
from typing import Any, NamedTuple

__all__ = ["NO_OWNER", "OUT_OF_DESCRIPTORS", "account_of", "peer_account", "server_account"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_DIAG_REQUEST = struct.Struct("=BBBBI")  # family, protocol, extensions, pad, states
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
# `inet_diag_msg`: family, state, timer, retransmits (4), the socket id (48), expires,
# rqueue, wqueue (12), then the owner's uid and the socket's inode.
_STATE_OFFSET = _NLMSG_HEADER.size + 1
_TIMER_OFFSET = _NLMSG_HEADER.size + 2
_LISTEN = 10  # TCP_LISTEN
_TIME_WAIT_TIMER = 3  # a time-wait entry: no socket any more, reported as root's
_OWNER = struct.Struct("=II")
_OWNER_OFFSET = _NLMSG_HEADER.size + 4 + 48 + 12
_DIAG_TIMEOUT_S = 0.2
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

# The other end is no process's: gone (reset), or let go of (closed: an orphan, then a time-wait
# entry the kernel reports as root's), or the query failed. Whose it was cannot be told, so it is
# nobody's this account trusts.
NO_OWNER = -1
# The query could not be made for want of file descriptors (the process's or the system's):
# nothing is told either way, so the server answers 503 (retry shortly), neither 401 nor a pass.
OUT_OF_DESCRIPTORS = -2


class _Found(NamedTuple):
    uid: int
    inode: int  # 0: no process holds the socket (yet, or any more)
    listening: bool  # the kernel fell back to a socket listening on the source address


def _diag_address(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host.partition("%")[0]).ljust(16, b"\0")


def _query(source: tuple[Any, ...], destination: tuple[Any, ...]) -> _Found | None:
    """The TCP socket from `source` to `destination` on this machine, None when there is none
    (or only its time-wait entry: it was closed). The inode is 0 for a socket no process holds:
    an orphan (closed, still sending), or one not yet accepted (a full one's uid is its
    listener's, but a request socket's, still in the handshake, is reported as root's). With no
    connection of that four-tuple the kernel's lookup falls back to a socket listening on
    `source` (`listening`). Raises `OSError` or `ValueError` when the query cannot be made."""
    family = socket.AF_INET6 if ":" in str(source[0]) else socket.AF_INET
    sockid = (
        struct.pack("!HH", int(source[1]), int(destination[1]))
        + _diag_address(family, str(source[0]))
        + _diag_address(family, str(destination[0]))
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    )
    body = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    head = _NLMSG_HEADER.pack(
        _NLMSG_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0
    )
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(_DIAG_TIMEOUT_S)
        link.sendto(head + body, (0, 0))
        answer = link.recv(8192)
    # `NLMSG_ERROR` (ENOENT: no such socket) is shorter than an answer and of another type.
    if len(answer) < _OWNER_OFFSET + _OWNER.size:
        return None
    if _NLMSG_HEADER.unpack_from(answer)[1] != _SOCK_DIAG_BY_FAMILY:
        return None
    if answer[_TIMER_OFFSET] == _TIME_WAIT_TIMER:
        return None
    uid, inode = _OWNER.unpack_from(answer, _OWNER_OFFSET)
    return _Found(uid, inode, answer[_STATE_OFFSET] == _LISTEN)


_told: list[bool] = []  # whether `sock_diag` answers here, once known


def _can_tell() -> bool | None:
    """Whether this kernel answers `sock_diag` (asked once, of a connection of this process's
    own): not on another system, nor where the module is missing (its ENOENT reads as a gone
    socket's, so it must be told apart up front). Out of descriptors: None, not known yet, asked
    again by the next call (a False then let every account's call in unchecked)."""
    if _told:
        return _told[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
                client.settimeout(1.0)
                client.connect(listener.getsockname())  # an address: no name lookup
                accepted, peer = listener.accept()
                with accepted:
                    found = _query(peer, accepted.getsockname())
        answer = found is not None and found.uid == os.geteuid()
    except AttributeError:  # no AF_NETLINK: not Linux
        answer = False
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
            return None  # not known yet: asked again by the next call
        answer = False
    _told.append(answer)
    return answer


def _tcp(end: object) -> bool:
    """Whether `end` is a TCP socket address, `(host, port, …)`."""
    return isinstance(end, tuple) and len(end) >= 2


def _pair(peer: object, local: object) -> bool:
    """Whether both are TCP socket addresses."""
    return _tcp(peer) and _tcp(local)


def peer_account(peer: object, local: object) -> int | None:
    """The uid of the process's account that opened the connection `peer` → `local` (a server's
    `peername` and `sockname`); `NO_OWNER` when its socket is no process's any more (closed,
    reset) or the query fails; `OUT_OF_DESCRIPTORS` when it could not be made for want of them;
    None when nothing can be told (not Linux, no `sock_diag`, not TCP addresses)."""
    if not _tcp(local):
        return None
    told = _can_tell()
    if not told:
        return OUT_OF_DESCRIPTORS if told is None else None
    if not _tcp(peer):
        # A TCP connection with no peer address: reset before the server accepted it (the
        # request it sent is still read), so `getpeername` failed. Not "unknown": nobody's.
        return NO_OWNER
    assert isinstance(peer, tuple) and isinstance(local, tuple)
    try:
        found = _query(peer, local)
    except OSError as exc:
        return OUT_OF_DESCRIPTORS if exc.errno in _OUT_OF_DESCRIPTORS else NO_OWNER
    except (ValueError, struct.error):
        return NO_OWNER  # it can tell, so a failed query tells nothing good
    # inode 0: an orphan (a client's socket is always held). A listener: the peer's socket is
    # gone and the lookup fell back to whatever listens on its old address and port, which may
    # be this account's (a program that took the port since, or shares it by SO_REUSEADDR).
    if found is None or not found.inode or found.listening:
        return NO_OWNER
    return found.uid


# The account each open connection was found to be opened by: a keep-alive connection's later
# requests ask the kernel no more (~50 µs a query). Only an account is kept, never "nobody's" or
# "out of descriptors" (which a later request may tell otherwise); gone with the connection.
_known: weakref.WeakKeyDictionary[asyncio.BaseTransport, int] = weakref.WeakKeyDictionary()


def account_of(transport: asyncio.BaseTransport | None) -> int | None:
    """`peer_account` of a request's connection. One whose transport is gone (the client reset
    it before its request was checked: aiohttp drops it) is `NO_OWNER` where it could be told."""
    if transport is None:
        told = _can_tell()
        return NO_OWNER if told else (OUT_OF_DESCRIPTORS if told is None else None)
    known = _known.get(transport)
    if known is not None:
        return known
    found = peer_account(transport.get_extra_info("peername"), transport.get_extra_info("sockname"))
    if found is not None and found >= 0:
        _known[transport] = found
    return found


def server_account(sock: socket.socket) -> int | None:
    """The uid of the account whose listening socket accepted the connection `sock` this process
    opened (a connection not yet accepted is the listener's owner's too); None when it cannot be
    told: not Linux, a server on another machine (no such socket here), a failed query;
    `NO_OWNER` for a connection still in the handshake whose listener is not found."""
    try:
        peer, local = sock.getpeername(), sock.getsockname()
    except OSError:
        return None
    if not _pair(peer, local) or not _can_tell():
        return None
    assert isinstance(peer, tuple) and isinstance(local, tuple)
    try:
        found = _query(peer, local)
        if found is not None and not found.inode:
            # Not accepted yet. A request socket (the handshake's last ACK not taken: a listener
            # with TCP_DEFER_ACCEPT keeps every connection so until data comes) is reported as
            # root's, so another account's listener passed for root's and was sent the call and
            # the token: its listener's owner is asked instead (no remote end: the lookup's
            # fallback to the socket listening on the server's address).
            host = str(peer[0])
            unspecified = "::" if ":" in host else "0.0.0.0"
            if ":" in host and "." in host:  # v4-mapped: the kernel looks it up as IPv4
                unspecified = "::ffff:0.0.0.0"
            listener = _query(peer, (unspecified, 0))
            return listener.uid if listener is not None and listener.listening else NO_OWNER
    except (OSError, ValueError, struct.error):
        return None
    return None if found is None else found.uid
