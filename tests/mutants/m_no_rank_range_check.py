"""Rank 0 does not range-check the rank a peer announces.

The announced int32 indexes the peer slots directly (as an unchecked C++ array index
would): ``-1`` lands in the last slot and is accepted as that rank, ``0`` fills rank 0's
own slot, a rank past the end fails with an unrelated ``IndexError`` that names no rank
(INIT-7).
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "rank 0 takes an announced rank as a slot index without checking 0 < rank < world_size"
KILLS = ("INIT-7",)
FAST = True


def _take_slot(self: _bootstrap._Handshakes, pending: _bootstrap._Pending) -> None:
    peer = _bootstrap.unpack_rank(pending.raw)
    # The defect: no ``0 < peer < world_size`` check before the slot is used.
    if self.links.peers[peer] is not None:
        raise self._error(
            _bootstrap.HandshakeError,
            f"duplicate peer rank {peer} from pid {pending.pid} (pid {self.pids[peer]} "
            "announced it first)",
            "handshake",
            peer=peer,
        )
    del self.pending[pending.conn.fileno()]
    self.links.peers[peer] = pending.conn
    self.pids[peer] = pending.pid


_bootstrap._Handshakes._take_slot = _take_slot  # type: ignore[method-assign]


class NoRankRangeCheck(Delegating):
    pass


def make() -> NoRankRangeCheck:
    return NoRankRangeCheck()
