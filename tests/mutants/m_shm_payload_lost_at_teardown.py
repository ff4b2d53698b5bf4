"""A payload broadcast just before the root's reset is lost, and the reader is not told.

The correct ring's reader copies every chunk published before the writer's teardown and
only then looks at the shutdown word.  This mutant looks first, and takes a shut-down
ring for a clean end: its broadcast returns at once, the buffer unfilled, as if the
payload had arrived (issue 22: vLLM loses a payload sent just before the writer's
teardown; its reader then blocks forever instead).
"""

from __future__ import annotations

from typing import Any

from .shm_ring import _H_SHUTDOWN, ShmRingBroadcaster

DEFECT = "shm ring: after the root's reset a reader returns success without the last payload"
KILLS = ("SHM-9",)
FAST = True


class PayloadLost(ShmRingBroadcaster):
    def _read(self, seg: Any, view: memoryview) -> None:
        if seg.get(_H_SHUTDOWN):
            return  # the defect: the root has reset, so "nothing more to read"
        super()._read(seg, view)


def make() -> PayloadLost:
    return PayloadLost()
