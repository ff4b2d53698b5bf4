"""initialize starts a helper process that outlives reset and the rank itself.

The correct ring starts no process.  This mutant starts a "janitor" (a ``sleep 20`` in
its own session, like a resource tracker that lingers) at every initialize and never
stops it (issue 22: vLLM's resource tracker outlives the rank).
"""

from __future__ import annotations

import subprocess

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: initialize starts a helper process that outlives reset and its rank"
KILLS = ("SHM-12",)
FAST = False


class HelperOutlives(ShmRingBroadcaster):
    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        super().initialize(rank, world_size, base_path)
        # The defect: a helper nobody stops (its own session: a kill of the rank's
        # process group misses it too).
        subprocess.Popen(["sleep", "20"], start_new_session=True)


def make() -> HelperOutlives:
    return HelperOutlives()
