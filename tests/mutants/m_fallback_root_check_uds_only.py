"""``root`` is checked on the UDS path only; the collective fallback ignores it.

PR #960 review round 4 P2: a configuration error masked by the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpbcast.reference_impl import _dispatch

from ._base import Delegating

DEFECT = "root != 0 is refused on the UDS path only; the collective path ignores root"
KILLS = ("FALLBACK-5",)
FAST = True


def broadcast_cpu(
    self: _dispatch.CpuBroadcastDispatcher,
    buffers: Sequence[Any],
    root: int = 0,
    mode: _dispatch.ParallelMode = _dispatch.ParallelMode.TP,
) -> _dispatch.DispatchPath:
    if self._broadcaster.is_initialized():  # the defect: the check depends on the path
        self._check_root(root)
    self._check_mode(mode)
    items = self._validate(buffers)
    total = sum(item.nbytes for item in items)
    if total == 0:
        return _dispatch.DispatchPath.SKIPPED
    if self._broadcaster.is_initialized():
        self._broadcast_uds(items, total)
        return _dispatch.DispatchPath.UDS
    self._broadcast_collective(items)
    return _dispatch.DispatchPath.COLLECTIVE


_dispatch.CpuBroadcastDispatcher.broadcast_cpu = broadcast_cpu  # type: ignore[method-assign]


class RootCheckUdsOnly(Delegating):
    pass


def make() -> RootCheckUdsOnly:
    return RootCheckUdsOnly()
