"""Framed wire: rank 0 returns once every peer acknowledged, without publishing the commit.

The reference publishes the generation in the shared decision word, then returns; the
peers return only once they read it (FRAME-7, FRAME-8).  This mutant's rank 0 skips the
publication: it returns success while its peers wait for a decision that never comes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpbcast.reference_impl import _broadcaster, _exchange

from ._base import FramedDelegating

DEFECT = "framed: rank 0 returns after the acknowledgements without publishing the commit"
KILLS = ("FRAME-7",)
FAST = False  # its KILLS clause runs several group stagings (~1 min)


def _root_exchange(
    links: Sequence[_exchange.Link], views: Sequence[memoryview], total: int, turn: _exchange.Turn
) -> None:
    _exchange.send_frames(links, views, total, turn)
    _exchange.collect_acks(links, turn)  # the defect: no commit follows


_broadcaster.root_exchange = _root_exchange


class ReturnsBeforeCommit(FramedDelegating):
    pass


def make() -> ReturnsBeforeCommit:
    return ReturnsBeforeCommit()
