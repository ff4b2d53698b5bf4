"""Framed wire: rank 0 leaves <base>.state in place after the bootstrap.

The reference unlinks the state file once every peer mapped it (FRAME-2): afterwards the
decision words exist only as the group's mappings, and nothing is left for another process
to open or for a crash to leave behind.  This mutant never unlinks it.
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap_framed
from tpbcast.reference_impl._paths import FileId

from ._base import FramedDelegating

DEFECT = "framed: the state file stays after the bootstrap (and after a failed one)"
KILLS = ("FRAME-2",)
FAST = True


def _keep(path: str, ident: FileId | None) -> bool:
    return False  # the defect


_bootstrap_framed.unlink_if_same = _keep


class StateLeft(FramedDelegating):
    pass


def make() -> StateLeft:
    return StateLeft()
