"""Re-init with different values is accepted silently (the old group stays in place).

Any ``initialize`` on an initialized instance returns without an error, whatever its
rank, world size or base path (INIT-5: a mismatch must raise, naming both values).
"""

from __future__ import annotations

from typing import Any

from ._base import Delegating

DEFECT = "re-init with different (rank, world_size, base_path) returns quietly instead of raising"
KILLS = ("INIT-5",)
FAST = True


class ReinitMismatchAccepted(Delegating):
    def initialize(self, rank: int, world_size: int, base_path: str) -> Any:
        if self.inner.is_initialized():
            return None  # the defect: no comparison at all
        return self.inner.initialize(rank, world_size, base_path)


def make() -> ReinitMismatchAccepted:
    return ReinitMismatchAccepted()
