"""The UDS path ignores ``mode``: a DP broadcast silently goes to the TP group.

PR #960 review round 3 P2 (the UDS branch silently ignores params.mode); the collective
path still refuses it, so the two paths disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpbcast.reference_impl import _dispatch

from ._base import Delegating

DEFECT = "mode is ignored on the UDS path (a non-TP mode broadcasts over UDS)"
KILLS = ("FALLBACK-6",)
FAST = True


def broadcast_cpu(
    self: _dispatch.CpuBroadcastDispatcher,
    buffers: Sequence[Any],
    root: int = 0,
    mode: _dispatch.ParallelMode = _dispatch.ParallelMode.TP,
) -> _dispatch.DispatchPath:
    self._check_root(root)
    if not self._broadcaster.is_initialized():  # the defect: only the fallback checks mode
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


class ModeIgnored(Delegating):
    pass


def make() -> ModeIgnored:
    return ModeIgnored()
