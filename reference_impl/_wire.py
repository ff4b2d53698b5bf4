"""Wire protocol v1 constants, byte-compatible with RTP-LLM's CpuTpBroadcaster.

1. Rank 0 listens on ``<base_path>_0.sock`` (backlog world_size-1).
2. Peer k connects and sends ``struct.pack("=i", k)`` (native-endian int32).
3. When every peer is in, rank 0 sends ``PROBE_BYTE`` to peers 1..n-1 ascending.
4. Broadcast: raw payload bytes, no header; rank 0 writes peer 1, then 2, ...
"""

from __future__ import annotations

import os
import struct
from typing import Final

from ._errors import ConfigurationError

__all__ = [
    "PROBE",
    "PROBE_BYTE",
    "RANK_FORMAT",
    "RANK_SIZE",
    "SUN_PATH_MAX",
    "check_path_length",
    "pack_rank",
    "socket_address",
    "socket_path",
    "unpack_rank",
]

PROBE_BYTE: Final = 0x5A
PROBE: Final = bytes([PROBE_BYTE])
RANK_FORMAT: Final = "=i"
RANK_SIZE: Final = struct.calcsize(RANK_FORMAT)
# sizeof(sockaddr_un.sun_path) is 108 on Linux; upstream requires strlen < 108
# so that the path stays NUL-terminated.  The abstract name ("\0" + path) obeys
# the same limit so that one base path works in both modes.
SUN_PATH_MAX: Final = 107
_SUFFIX: Final = "_0.sock"


def socket_path(base_path: str) -> str:
    """The one socket path of a group: ``<base_path>_0.sock`` (only rank 0 binds)."""
    return f"{base_path}{_SUFFIX}"


def check_path_length(
    path: str,
    *,
    hint: str = "use a shorter base path or set TPBCAST_SOCKET_DIR to a short directory",
) -> None:
    """Raise :class:`ConfigurationError` when ``path`` does not fit ``sun_path``."""
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise ConfigurationError(
            f"socket path is {size} bytes, the limit is {SUN_PATH_MAX} (sun_path); {hint}",
            path=path,
        )


def socket_address(path: str, *, abstract: bool) -> bytes:
    """The address to bind/connect: the path, or ``"\\0" + path`` when abstract."""
    raw = os.fsencode(path)
    return b"\0" + raw if abstract else raw


def pack_rank(rank: int) -> bytes:
    """The 4-byte handshake a peer sends."""
    return struct.pack(RANK_FORMAT, rank)


def unpack_rank(data: bytes | bytearray | memoryview) -> int:
    """Decode the 4-byte handshake."""
    (rank,) = struct.unpack(RANK_FORMAT, data)
    return int(rank)
