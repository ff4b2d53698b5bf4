"""Framed wire: the state file's descriptor is inheritable across exec.

The reference opens every descriptor close-on-exec (FRAME-13): an exec'd child of a rank
must hold nothing of the group.  This mutant clears FD_CLOEXEC on the state file's fd.
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _framed

from ._base import FramedDelegating

DEFECT = "framed: the state file's descriptor is inherited by exec'd children"
KILLS = ("FRAME-13",)
FAST = True

_init = _framed.DecisionBoard.__init__


def _init_inheritable(self: _framed.DecisionBoard, fd: int, path: str) -> None:
    _init(self, fd, path)
    os.set_inheritable(fd, True)  # the defect


_framed.DecisionBoard.__init__ = _init_inheritable  # type: ignore[method-assign]


class InheritableState(FramedDelegating):
    pass


def make() -> InheritableState:
    return InheritableState()
