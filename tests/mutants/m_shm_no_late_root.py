"""A reader that finds no rendezvous fails at once instead of waiting for rank 0.

The correct ring's reader keeps looking for rank 0's rendezvous file until its connect
deadline, so a peer whose initialize starts before rank 0's bootstraps normally (INIT-6).
This mutant looks once: no file yet, and the reader's initialize fails.
"""

from __future__ import annotations

import os

from .shm_ring import ShmPeerClosedError, ShmRingBroadcaster, rendezvous_path

DEFECT = "shm ring: a reader started before rank 0 fails at once (no wait for the rendezvous)"
KILLS = ("INIT-6",)
FAST = True


class NoLateRoot(ShmRingBroadcaster):
    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        if rank > 0 and not os.path.exists(rendezvous_path(base_path)):
            # The defect: rank 0 has not set the group up yet, so give up.
            raise ShmPeerClosedError(
                f"rank {rank}: no rendezvous at {rendezvous_path(base_path)}", rank=rank
            )
        super().initialize(rank, world_size, base_path)


def make() -> NoLateRoot:
    return NoLateRoot()
