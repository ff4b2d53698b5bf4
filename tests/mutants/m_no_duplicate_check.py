"""Rank 0 does not check for a duplicate announced rank.

A second connection announcing a rank already taken replaces the first one in that
slot (the first connection is dropped), and bootstrap goes on: once the missing rank
arrives, the duplicate gets the probe and joins the group (INIT-8).
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "rank 0 lets a second peer announcing a taken rank replace the first (no duplicate check)"
KILLS = ("INIT-8",)
FAST = True


def _take_slot(self: _bootstrap._Handshakes, pending: _bootstrap._Pending) -> None:
    peer = _bootstrap.unpack_rank(pending.raw)
    world_size, pid = self.world_size, pending.pid
    if not 0 < peer < world_size:
        raise self._error(
            _bootstrap.HandshakeError,
            f"bad peer rank {peer} (world_size {world_size}) from pid {pid}; a peer "
            f"must announce 0 < rank < {world_size}",
            "handshake",
        )
    # The defect: no "slot already taken" check; the newcomer replaces the first one.
    del self.pending[pending.conn.fileno()]
    replaced = self.links.peers[peer]
    if replaced is not None:
        _bootstrap.close_quietly(replaced)
    self.links.peers[peer] = pending.conn
    self.pids[peer] = pid


_bootstrap._Handshakes._take_slot = _take_slot  # type: ignore[method-assign]


class NoDuplicateCheck(Delegating):
    pass


def make() -> NoDuplicateCheck:
    return NoDuplicateCheck()
