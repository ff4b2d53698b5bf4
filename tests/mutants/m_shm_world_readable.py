"""The shared-memory segment is created 0644: every user can read every broadcast.

The correct ring creates its segment ``O_EXCL`` with mode 0600.  This mutant uses 0644,
the mode a umask of 022 gives a file created 0666 (vLLM's IPC socket files are 0755,
issue 22).
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: the segment is created 0644 (readable by every user)"
KILLS = ("SHM-4",)
FAST = True


class WorldReadable(ShmRingBroadcaster):
    segment_mode = 0o644  # the defect


def make() -> WorldReadable:
    return WorldReadable()
