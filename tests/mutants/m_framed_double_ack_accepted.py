"""Framed wire: rank 0 takes a stray byte for the next frame's acknowledgement.

The reference refuses a broadcast when a peer has bytes waiting before the frame (a second
acknowledgement of the previous one): read as this frame's acknowledgement it would commit
a generation that peer never confirmed (FRAME-7).  This mutant does not look.
"""

from __future__ import annotations

from tpbcast.reference_impl import _exchange

from ._base import FramedDelegating

DEFECT = "framed: a doubled acknowledgement is taken for the next frame's"
KILLS = ("FRAME-7",)
FAST = False  # its KILLS clause runs several group stagings (~1 min)


def _nothing_out_of_turn(*_args: object) -> None:
    return  # the defect


_exchange._nothing_out_of_turn = _nothing_out_of_turn


class DoubleAckAccepted(FramedDelegating):
    pass


def make() -> DoubleAckAccepted:
    return DoubleAckAccepted()
