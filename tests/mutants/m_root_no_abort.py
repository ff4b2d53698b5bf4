"""When its broadcast fails on one peer, rank 0 keeps the other peers' connections open.

The reference closes every link at once after a failed broadcast, so the remaining peers
see EOF promptly.  This mutant only marks itself broken; the others keep waiting until
rank 0's ``reset()`` (FAULT-8 judges the peers before that reset).
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster

from ._base import Delegating

DEFECT = "a failed broadcast does not close the remaining peers' links (no abort)"
KILLS = ("FAULT-8",)
FAST = True

_REASON_MAX = 300


def _break(self: _broadcaster.CpuTpBroadcaster, exc: BaseException) -> None:
    reason = str(exc) or type(exc).__name__
    self._broken = reason[:_REASON_MAX]  # the defect: the links stay open


_broadcaster.CpuTpBroadcaster._break = _break  # type: ignore[method-assign]


class RootNoAbort(Delegating):
    pass


def make() -> RootNoAbort:
    return RootNoAbort()
