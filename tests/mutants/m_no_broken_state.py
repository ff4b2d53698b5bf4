"""A failed broadcast leaves no trace: no broken state, and the links stay as they are.

After a broadcast fails the byte stream is out of sync; the reference turns broken, closes
its links and refuses every broadcast until ``reset()`` (BCAST-13).  This mutant forgets
the failure: the next broadcast goes down the same connection.  When the fault left a
dead socket (a peer or root that closed) that call fails anyway; only a failure on a
healthy link (an io deadline passed while the other side was alive) shows the defect:
the next broadcast then sends or reads bytes of the wrong payload.
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster

from ._base import Delegating

DEFECT = "no broken state after a failed broadcast: the next one uses the out-of-sync stream"
KILLS = ("BCAST-13",)
FAST = True


def _break(self: _broadcaster.CpuTpBroadcaster, exc: BaseException) -> None:
    return  # the defect: neither marked broken nor closed


_broadcaster.CpuTpBroadcaster._break = _break  # type: ignore[method-assign]


class NoBrokenState(Delegating):
    pass


def make() -> NoBrokenState:
    return NoBrokenState()
