"""Readers never notice a dead writer: they wait for the next chunk until their I/O deadline.

The correct ring (``shm_ring``) has each reader test the writer's lock byte while it waits
(the kernel drops the lock when the writer dies, so a SIGKILL is seen in milliseconds).
This mutant never tests it: a reader whose rank 0 was SIGKILLed waits out its whole I/O
deadline (60 s in the suite, 300 s by default), as vLLM's readers wait forever.
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster, _Segment

DEFECT = "shm ring: readers never test the writer's liveness (wait until their I/O deadline)"
KILLS = ("FAULT-2",)
FAST = False


class NoWriterDeath(ShmRingBroadcaster):
    def _root_gone(self, seg: _Segment) -> bool:
        return False  # the defect: a dead writer looks like a slow one


def make() -> NoWriterDeath:
    return NoWriterDeath()
