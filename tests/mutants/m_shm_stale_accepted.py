"""A reader joins whatever segment the rendezvous file names, even a dead group's.

The correct ring checks the segment against the rendezvous (magic, nonce, world size),
refuses one whose root reset or died, refuses a reader record already used, and waits for
rank 0 to see every reader attach.  This mutant checks none of it: a reader that
initializes again after its rank 0 was SIGKILLed during the bootstrap attaches to the dead
root's segment and initialize returns.
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster, _Segment

DEFECT = "shm ring: a reader attaches to a stale segment (dead or reset root)"
KILLS = ("SHM-11",)
FAST = True


class StaleAccepted(ShmRingBroadcaster):
    def _stale_reason(self, seg: _Segment, nonce: int, world_size: int) -> str:
        return ""  # the defect: every segment looks live

    def _slot_free(self, seg: _Segment, rank: int) -> bool:
        return True  # and every reader record reusable

    def _await_group(self, seg: _Segment, rank: int, start: float) -> None:
        return  # and the group complete


def make() -> StaleAccepted:
    return StaleAccepted()
