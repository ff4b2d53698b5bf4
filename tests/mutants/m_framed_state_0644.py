"""Framed wire: rank 0's state file is 0644.

The reference creates ``<base>.state`` exclusively with mode 0600 (FRAME-1): the decision
words are the group's commit, so a file every user can read (and a careless chmod away
from writable) lets another user observe or forge decisions.  This mutant creates it 0644.
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _framed

from ._base import FramedDelegating

DEFECT = "framed: the shared state file is created 0644"
KILLS = ("FRAME-1",)
FAST = True

_create = _framed.DecisionBoard.create.__func__  # type: ignore[attr-defined]


def _create_0644(
    cls: type[_framed.DecisionBoard], path: str, *, rank: int
) -> _framed.DecisionBoard:
    board = _create(cls, path, rank=rank)
    os.fchmod(board.fd, 0o644)  # the defect
    return board


_framed.DecisionBoard.create = classmethod(_create_0644)  # type: ignore[method-assign,assignment]


class State0644(FramedDelegating):
    pass


def make() -> State0644:
    return State0644()
