"""A peer accepts any link probe byte, not only 0x5a.

The peer reads one byte after its announcement as the bootstrap barrier but never
compares it with 0x5a, so a rank 0 that sends anything else is joined (INIT-10).
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "a peer reads the probe byte but does not check that it is 0x5a"
KILLS = ("INIT-10",)
FAST = True


def _handshake_with_root(
    sock: _bootstrap.socket.socket,
    rank: int,
    config: _bootstrap.BroadcasterConfig,
    label: str,
) -> None:
    deadline = _bootstrap.Deadline(config.init_timeout)
    allowed = config.accepted_uids(os.geteuid())
    _pid, uid, _gid = _bootstrap._peer_credentials(sock)
    if allowed is not None and uid not in allowed:
        raise _bootstrap.SecurityError(
            f"the process listening on rank 0's socket (uid {uid}) is not an allowed uid",
            rank=rank,
            peer=0,
            phase="connect",
            path=label,
        )
    _bootstrap.send_all(
        sock,
        memoryview(_bootstrap.pack_rank(rank)),
        deadline,
        _bootstrap.Site(rank=rank, peer=0, phase="handshake", path=label, who="rank 0"),
    )
    probe = bytearray(1)
    _bootstrap.recv_exact(
        sock,
        memoryview(probe),
        deadline,
        _bootstrap.Site(rank=rank, peer=0, phase="probe", path=label, who="rank 0"),
    )
    # The defect: ``probe[0]`` is never compared with 0x5a.


_bootstrap._handshake_with_root = _handshake_with_root


class ProbeUnchecked(Delegating):
    pass


def make() -> ProbeUnchecked:
    return ProbeUnchecked()
