"""The shared-memory segment's name is never unlinked: every group leaves one in /dev/shm.

The correct ring unlinks the segment (and the rendezvous file) as soon as every reader
has attached, and at reset if the group never completed.  This mutant unlinks the
rendezvous file only: the segment stays in /dev/shm after reset, after a normal exit and
after any SIGKILL, like the 24 MiB vLLM segment issue 22 found after a kill of the
writer's process group.  (Each group of a run against it leaves about 600 KiB behind.)
"""

from __future__ import annotations

from .shm_ring import SHM_DIR, ShmRingBroadcaster

DEFECT = "shm ring: the segment's name in /dev/shm is never unlinked"
KILLS = ("SHM-1", "SHM-2", "SHM-3")
FAST = True


class LeakedSegment(ShmRingBroadcaster):
    def _unlink_names(self) -> None:
        # The defect: forget the segment, remove only the rendezvous file.
        self._named = [p for p in self._named if not p.startswith(SHM_DIR + "/")]
        super()._unlink_names()


def make() -> LeakedSegment:
    return LeakedSegment()
