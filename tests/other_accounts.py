"""What the tests of another account on the machine share (`adapters.accounts`): the account a
forked child drops to, the mark that only root on Linux can make one, and the kernel's answer
that the checks need at all (`sock_diag`), and a program of that account listening on a port."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from memory_worker.adapters.accounts import peer_account

OTHER_UID = 65534  # `nobody`

as_root_on_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="a process of another account can be made only by root, on Linux",
)


def own_account_told() -> int | None:
    """What `peer_account` says of a loopback connection this process opened (None: this system
    cannot tell a connection's account)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                return peer_account(accepted.getpeername(), accepted.getsockname())


def skip_unless_accounts_are_told() -> None:
    """Skip a test of the checks where the kernel answers no `sock_diag` query (they then do
    nothing, as before them)."""
    if own_account_told() is None:
        pytest.skip("this kernel answers no sock_diag query")


def listening_as_another_account(defer_accept: bool = False) -> tuple[int, int, int]:
    """A forked child dropped to another account (`nobody`) listening on 127.0.0.1, as another
    user's program on the port a server let go of: (its pid, its port, the pipe it reports on).
    It accepts one connection and writes back, on the pipe, every byte it was sent.
    `defer_accept`: TCP_DEFER_ACCEPT, which keeps a connection in the handshake until data
    comes (a request socket, which the kernel reports as root's)."""
    to_parent, from_child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here, then `_exit`
        try:
            os.close(to_parent)
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
                if defer_accept:
                    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 10)
                listener.bind(("127.0.0.1", 0))
                listener.listen()
                os.write(from_child, listener.getsockname()[1].to_bytes(2, "big"))
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(10)
                    received = b""
                    try:
                        while chunk := conn.recv(65536):
                            received += chunk
                            if b"\r\n\r\n" in received:  # a whole head: answer like a server
                                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                                break
                    except OSError:
                        pass
            os.write(from_child, received)
        finally:
            os._exit(0)
    os.close(from_child)
    port = int.from_bytes(os.read(to_parent, 2), "big")
    return pid, port, to_parent
