"""The collective fallback runs the device sync BEFORE the collective, not after.

Order: device_sync, collective, sync_communication (the device sync then waits for
nothing of this call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpbcast.reference_impl import _dispatch
from tpbcast.reference_impl._buffers import prepare_buffers

from ._base import Delegating

DEFECT = "the collective fallback calls device_sync before the collective broadcast"
KILLS = ("FALLBACK-2",)
FAST = True


def _broadcast_collective(self: _dispatch.CpuBroadcastDispatcher, items: Sequence[Any]) -> None:
    import torch

    plain = prepare_buffers(
        [bytearray() if item.is_tensor else item.buffer for item in items], writable=True
    )
    try:
        tensors = [
            item.buffer if item.is_tensor else _dispatch._byte_tensor(torch, view)
            for item, view in zip(items, plain.views, strict=True)
        ]
        self._engine.device_sync()  # the defect: first instead of last
        self._engine.broadcast(tensors, 0, self._group)
        self._engine.sync_communication()
        del tensors
        plain.finish()
    finally:
        plain.release()


_dispatch.CpuBroadcastDispatcher._broadcast_collective = _broadcast_collective  # type: ignore[method-assign]


class DeviceSyncFirst(Delegating):
    pass


def make() -> DeviceSyncFirst:
    return DeviceSyncFirst()
