"""Framed wire: a peer does not check the frame header.

The reference's peer refuses a header whose magic or byte count differs from its own call
and publishes the generation's abort (FRAME-5).  This mutant reads the header and ignores
it: a wrong magic (another protocol, a stream out of step) is taken for a frame.
"""

from __future__ import annotations

from tpbcast.reference_impl import _exchange

from ._base import FramedDelegating

DEFECT = "framed: a peer ignores the header's magic and byte count"
KILLS = ("FRAME-5",)
FAST = False  # its KILLS clause runs several group stagings (~1 min)


def _check_header(*_args: object) -> None:
    return  # the defect


_exchange.check_header = _check_header


class NoHeaderCheck(FramedDelegating):
    pass


def make() -> NoHeaderCheck:
    return NoHeaderCheck()
