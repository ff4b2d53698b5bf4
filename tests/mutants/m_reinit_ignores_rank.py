"""Re-init compares only world_size and base_path: a rank change is taken as identical.

``initialize(1, 2, P)`` on an instance initialized as rank 0 of the same group returns
quietly and keeps the rank-0 group (INIT-5: any difference must raise).
"""

from __future__ import annotations

from typing import Any

from ._base import Delegating

DEFECT = "re-init compares only world_size and base_path (a different rank is a no-op)"
KILLS = ("INIT-5",)
FAST = True


class ReinitIgnoresRank(Delegating):
    def initialize(self, rank: int, world_size: int, base_path: str) -> Any:
        if self.inner.is_initialized():
            stats = self.inner.statistics()
            if (world_size, base_path) == (stats.world_size, stats.base_path):
                return None  # the defect: the rank is not compared
        return self.inner.initialize(rank, world_size, base_path)


def make() -> ReinitIgnoresRank:
    return ReinitIgnoresRank()
