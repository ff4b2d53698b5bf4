"""No empty guard: an empty buffer list still runs an empty collective plus its syncs.

PR #960 review round 1 P2: the final execBroadcast of an empty packed_buffers list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpbcast.reference_impl import _dispatch

from ._base import Delegating

DEFECT = "an empty buffer list runs an (empty) collective, sync_communication and device_sync"
KILLS = ("FALLBACK-4",)
FAST = True


def broadcast_cpu(
    self: _dispatch.CpuBroadcastDispatcher,
    buffers: Sequence[Any],
    root: int = 0,
    mode: _dispatch.ParallelMode = _dispatch.ParallelMode.TP,
) -> _dispatch.DispatchPath:
    self._check_root(root)
    self._check_mode(mode)
    items = self._validate(buffers)
    total = sum(item.nbytes for item in items)  # the defect: no "total == 0: skip"
    if self._broadcaster.is_initialized():
        self._broadcast_uds(items, total)
        return _dispatch.DispatchPath.UDS
    self._broadcast_collective(items)
    return _dispatch.DispatchPath.COLLECTIVE


_dispatch.CpuBroadcastDispatcher.broadcast_cpu = broadcast_cpu  # type: ignore[method-assign]


class EmptyListSyncs(Delegating):
    pass


def make() -> EmptyListSyncs:
    return EmptyListSyncs()
