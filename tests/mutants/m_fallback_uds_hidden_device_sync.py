"""The UDS path ends with a device sync on the engine, and leaves it out of its own record.

The stall the UDS path exists to avoid (NCCL's device-wide sync, PR #960), hidden from
``calls()``: only the suite's engine sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpbcast.reference_impl import _dispatch

from ._base import Delegating

DEFECT = "the UDS path runs the engine's device_sync (unrecorded in calls())"
KILLS = ("FALLBACK-3", "FALLBACK-12")
FAST = True

_broadcast_uds = _dispatch.CpuBroadcastDispatcher._broadcast_uds


def _broadcast_uds_then_sync(
    self: _dispatch.CpuBroadcastDispatcher, items: Sequence[Any], total: int
) -> None:
    _broadcast_uds(self, items, total)
    self.engine.device_sync()  # the defect: the raw engine, past the recorder


_dispatch.CpuBroadcastDispatcher._broadcast_uds = _broadcast_uds_then_sync  # type: ignore[method-assign]


class UdsHiddenDeviceSync(Delegating):
    pass


def make() -> UdsHiddenDeviceSync:
    return UdsHiddenDeviceSync()
