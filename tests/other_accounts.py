"""What the tests of another account on the machine share (`adapters.accounts`): the account a
forked child drops to, the mark that only root on Linux can make one, and the kernel's answer
that the checks need at all (`sock_diag`)."""

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
