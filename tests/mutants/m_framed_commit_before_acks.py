"""Framed wire: rank 0 publishes the commit as soon as the frames are written.

The reference commits only after every peer's acknowledgement (FRAME-7): a peer that never
got, or refused, its frame must make the generation abort on every rank.  This mutant
commits first and reads the acknowledgements afterwards, so the peers that did get the
frame return success for a broadcast another peer failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpbcast.reference_impl import _broadcaster, _exchange

from ._base import FramedDelegating

DEFECT = "framed: rank 0 commits before reading every acknowledgement"
KILLS = ("FRAME-7",)
FAST = False  # its KILLS clause runs several group stagings (~1 min)


def _root_exchange(
    links: Sequence[_exchange.Link], views: Sequence[memoryview], total: int, turn: _exchange.Turn
) -> None:
    _exchange.send_frames(links, views, total, turn)
    _exchange.commit(turn)  # the defect: before the acks
    _exchange.collect_acks(links, turn)


_broadcaster.root_exchange = _root_exchange


class CommitBeforeAcks(FramedDelegating):
    pass


def make() -> CommitBeforeAcks:
    return CommitBeforeAcks()
