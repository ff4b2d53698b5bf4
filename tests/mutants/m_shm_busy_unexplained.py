"""A second broadcast while one is pending is refused with an error that does not say why.

The correct ring refuses a broadcast started while another call holds the instance with
an error saying another call is in flight (BCAST-15, a MAY clause: if it refuses, it
must say so).  This mutant refuses with a bare "broadcast failed".
"""

from __future__ import annotations

from typing import Any

from .shm_ring import ShmBusyError, ShmRingBroadcaster

DEFECT = "shm ring: a concurrent broadcast is refused with a message that does not say why"
KILLS = ("BCAST-15",)
FAST = True


class BusyUnexplained(ShmRingBroadcaster):
    def broadcast(self, buffer: Any, root: int = 0) -> None:
        try:
            super().broadcast(buffer, root)
        except ShmBusyError:
            raise ShmBusyError("broadcast failed", rank=self._rank) from None  # the defect


def make() -> BusyUnexplained:
    return BusyUnexplained()
