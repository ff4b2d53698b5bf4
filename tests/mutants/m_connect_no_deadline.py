"""A peer's ``connect`` blocks without a deadline when rank 0's listen backlog is full.

The reference connects on a non-blocking socket and retries EAGAIN until its connect
deadline.  This mutant connects on a blocking socket: while rank 0 never accepts and its
backlog is full, ``connect`` sleeps in the kernel and no deadline applies (TIME-10).
Everything else (retries on ENOENT/ECONNREFUSED, the handshake) is the reference's.
"""

from __future__ import annotations

import socket
from typing import Any

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "peer connect is a blocking call with no deadline (a full listen backlog hangs it)"
KILLS = ("TIME-10",)
FAST = True

_RealSocket = socket.socket


class _BlockingConnect(_RealSocket):
    """A socket whose ``connect_ex`` blocks (the defect), then turns non-blocking again."""

    def connect_ex(self, address: Any) -> int:
        self.setblocking(True)
        try:
            return super().connect_ex(address)
        finally:
            self.setblocking(False)


class _SocketModule:
    """``socket`` as _bootstrap sees it, with the blocking-connect socket class."""

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

    socket = _BlockingConnect


_bootstrap.socket = _SocketModule()  # type: ignore[assignment]


class ConnectNoDeadline(Delegating):
    pass


def make() -> ConnectNoDeadline:
    return ConnectNoDeadline()
