"""An identical re-init raises a re-init mismatch instead of being a no-op.

Upstream raises for ``initialize(0, 1, P)`` twice (it does not store the base path at
TP=1); this mutant raises for every second ``initialize`` with the same values (INIT-4).
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl._errors import ReinitMismatchError

from ._base import Delegating

DEFECT = "an identical re-init raises ReinitMismatchError instead of returning"
KILLS = ("INIT-4",)
FAST = True


class ReinitIdenticalRaises(Delegating):
    def initialize(self, rank: int, world_size: int, base_path: str) -> Any:
        if self.inner.is_initialized():
            was = self.inner.statistics()
            raise ReinitMismatchError(  # the defect: even identical values are refused
                f"re-init mismatch: was rank={was.rank} world_size={was.world_size} "
                f"base_path={was.base_path!r}, now rank={rank} world_size={world_size} "
                f"base_path={base_path!r}; call reset() first",
                rank=was.rank,
                phase="initialize",
            )
        return self.inner.initialize(rank, world_size, base_path)


def make() -> ReinitIdenticalRaises:
    return ReinitIdenticalRaises()
