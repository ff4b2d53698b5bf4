"""reset() from another thread does not release a blocked broadcast; it waits for it.

The correct ring's reset sets a flag every waiting loop checks, so a broadcast blocked on
a full ring (writer) or an empty one (reader) raises within milliseconds and reset goes
on.  In this mutant the flag never reads true: reset waits until the blocked broadcast's
I/O deadline (vLLM's ``shutdown()`` does not release ``acquire_write``, issue 22).  A
reset by the root still releases its readers (the segment's shutdown word).
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: reset() does not release a broadcast blocked in another thread"
KILLS = ("SHM-7", "SHM-8")
FAST = False


class ResetIgnored(ShmRingBroadcaster):
    @property  # type: ignore[override]
    def _closing(self) -> bool:
        return False  # the defect: nobody ever sees a reset coming

    @_closing.setter
    def _closing(self, value: bool) -> None:
        del value


def make() -> ResetIgnored:
    return ResetIgnored()
