"""The I/O deadline set before initialize is ignored: broadcasts wait the 300 s default.

The correct ring bounds every broadcast by the ``io`` deadline the caller set, so a rank
stalled by a peer that stops reading (or a root that stops writing) fails at that
deadline (TIME-5).  This mutant accepts ``set_deadlines(io=...)`` and keeps its own
default instead, as an adapter would that forgets to pass the setting on.
"""

from __future__ import annotations

from typing import Any

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: set_deadlines(io=...) is accepted and ignored (the 300 s default stays)"
KILLS = ("TIME-5",)
FAST = True


class IoDeadlineIgnored(ShmRingBroadcaster):
    def set_deadlines(self, **deadlines: Any) -> None:
        deadlines.pop("io", None)  # the defect: the I/O setting never reaches the ring
        super().set_deadlines(**deadlines)


def make() -> IoDeadlineIgnored:
    return IoDeadlineIgnored()
