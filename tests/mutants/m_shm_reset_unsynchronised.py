"""reset() tears the ring down under a broadcast running in another thread.

The correct ring's reset raises a flag the waiting broadcast sees at its next poll and
then takes the instance's lock, so it tears down only once that broadcast has ended
(BCAST-14).  This mutant's reset takes no lock and raises no flag: it unmaps and closes
the segment while the other thread still waits on it, as upstream's reset closes the
socket fds under a blocked read().
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: reset() tears down under an in-flight broadcast (no lock, no flag)"
KILLS = ("BCAST-14",)
FAST = True


class ResetUnsynchronised(ShmRingBroadcaster):
    def reset(self) -> None:
        # The defect: neither the flag nor the lock; the teardown runs at once.
        self._teardown()
        self._initialized = False
        self._broken = None
        self._generation += 1


def make() -> ResetUnsynchronised:
    return ResetUnsynchronised()
