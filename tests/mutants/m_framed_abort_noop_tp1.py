"""Framed wire: abort() at world size 1 has no effect.

Upstream's abort sets its failed flag at world size 1, but broadcast returns before it
checks it (framed §14.7): the validation failure is swallowed.  The reference's next
broadcast raises (FRAME-10); this mutant copies upstream.
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster

from ._base import FramedDelegating

DEFECT = "framed: abort() at world size 1 is a silent no-op"
KILLS = ("FRAME-10",)
FAST = True

_abort = _broadcaster.CpuTpBroadcaster.abort


def _abort_tp1_noop(self: _broadcaster.CpuTpBroadcaster, reason: str) -> None:
    if self._world_size == 1:
        return  # the defect
    _abort(self, reason)


_broadcaster.CpuTpBroadcaster.abort = _abort_tp1_noop  # type: ignore[method-assign]


class AbortNoopTp1(FramedDelegating):
    pass


def make() -> AbortNoopTp1:
    return AbortNoopTp1()
