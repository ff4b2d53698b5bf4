"""The writer never notices a dead reader: on a full ring it waits until its I/O deadline.

The correct ring tests each reader's lock byte at the start of a broadcast and while it
waits for room.  This mutant never does: once the dead reader's unread chunks fill the
ring, rank 0 waits out its whole I/O deadline, like vLLM's writer spinning in
``acquire_write`` (vLLM PR #45644).
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster, _Segment

DEFECT = "shm ring: the writer never tests a reader's liveness (a full ring waits for the deadline)"
KILLS = ("FAULT-1",)
FAST = True


class NoReaderDeath(ShmRingBroadcaster):
    def _reader_gone(self, seg: _Segment, rank: int) -> bool:
        return False  # the defect: a dead reader looks like a slow one


def make() -> NoReaderDeath:
    return NoReaderDeath()
