"""broadcast ignores its ``root`` argument: any root is treated as rank 0.

The wire protocol is a star from rank 0; the reference raises a configuration error
naming the root for ``root != 0`` (BCAST-3), also at world size 1 and for 0 bytes
(BCAST-4).  This mutant broadcasts from rank 0 whatever root the caller named.
"""

from __future__ import annotations

from typing import Any

from ._base import Delegating

DEFECT = "root != 0 is accepted (broadcast from rank 0 regardless of root)"
KILLS = ("BCAST-3", "BCAST-4")
FAST = True


class RootAccepted(Delegating):
    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        return self.inner.broadcast(buffers, 0)  # the defect: root is never checked


def make() -> RootAccepted:
    return RootAccepted()
