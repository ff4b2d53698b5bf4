"""Framed wire: no stale-abort check at entry.

The reference refuses, before any I/O, a generation whose decision word already holds its
abort (FRAME-9): a late entrant or a rank told by ``abort()`` learns of it there.  This
mutant goes ahead: it reads and acknowledges a frame of a generation the group aborted.
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster
from tpbcast.reference_impl._framed import DecisionBoard

from ._base import FramedDelegating

DEFECT = "framed: a generation already aborted is not refused at entry"
KILLS = ("FRAME-9",)
FAST = True


def _check_not_stale(board: DecisionBoard, generation: int, rank: int) -> int:
    return board.load(generation)  # the defect: whatever it holds


_broadcaster.check_not_stale = _check_not_stale


class NoStaleCheck(FramedDelegating):
    pass


def make() -> NoStaleCheck:
    return NoStaleCheck()
