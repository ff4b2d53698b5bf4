"""Wire v1 spoken byte by byte: the one client the suite and the self-tests share.

Everything a test needs to play a peer or a root by hand: the probe byte and the rank
struct, ``connect``/``listen``/``accept`` on a socket path with a :class:`Deadline`,
``send_all``/``recv_exact``/``recv_until_eof``, and the observations of how a link closed
(``expect_closed``, ``wait_hung_up``).  Every call that waits takes a deadline; every
failure is a :class:`WireError` naming the path, the bytes and the errno name.
"""

from __future__ import annotations

from ._wire import (
    PROBE,
    RANK_STRUCT,
    CloseKind,
    CloseObservation,
    Deadline,
    PeerCredentials,
    WireClosedError,
    WireError,
    WireTimeoutError,
    accept,
    address_of,
    connect,
    expect_closed,
    listen,
    pack_rank,
    peer_credentials,
    recv_exact,
    recv_until_eof,
    send_all,
    socket_path,
    unpack_rank,
    unread,
    wait_hung_up,
)

__all__ = [
    "PROBE",
    "RANK_STRUCT",
    "CloseKind",
    "CloseObservation",
    "Deadline",
    "PeerCredentials",
    "WireClosedError",
    "WireError",
    "WireTimeoutError",
    "accept",
    "address_of",
    "connect",
    "expect_closed",
    "listen",
    "pack_rank",
    "peer_credentials",
    "recv_exact",
    "recv_until_eof",
    "send_all",
    "socket_path",
    "unpack_rank",
    "unread",
    "wait_hung_up",
]
