"""Framed wire: is_initialized() turns false after a failed broadcast.

The reference keeps ``is_initialized()`` true in its failed state (FRAME-12): a caller
that reads "not initialized" falls back to another collective on that rank alone, and the
group diverges.  This mutant reports false after any failure.
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster

from ._base import FramedDelegating

DEFECT = "framed: is_initialized() is false after a failed broadcast"
KILLS = ("FRAME-12",)
FAST = False  # its KILLS clause runs several group stagings (~1 min)

_break = _broadcaster.CpuTpBroadcaster._break


def _break_uninitialized(self: _broadcaster.CpuTpBroadcaster, exc: BaseException) -> None:
    _break(self, exc)
    self._initialized = False  # the defect


_broadcaster.CpuTpBroadcaster._break = _break_uninitialized  # type: ignore[method-assign]


class UninitializedAfterFailure(FramedDelegating):
    pass


def make() -> UninitializedAfterFailure:
    return UninitializedAfterFailure()
