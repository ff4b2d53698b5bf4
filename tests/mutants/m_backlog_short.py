"""Rank 0 listens with a backlog of ``world_size - 2`` instead of ``world_size - 1``.

Linux queues ``backlog + 1`` connections on a Unix stream listener, so the
``world_size - 1`` peers of a simultaneous start still all fit: only one connection
more (a surplus one) is refused.  WIRE-10 (SHOULD) must see it anyway.
"""

from __future__ import annotations

import socket
import types

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "rank 0 listens with backlog world_size-2 (one short of world_size-1)"
KILLS = ("WIRE-10",)
FAST = True


class _ShortBacklogSocket(socket.socket):
    def listen(self, backlog: int = 0, /) -> None:
        super().listen(max(backlog - 1, 0))  # the defect


# The reference's bootstrap module sees a socket module whose socket class listens short;
# everything else (constants, other modules) is the real one.
_proxy = types.ModuleType("socket")
_proxy.__dict__.update(socket.__dict__)
_proxy.socket = _ShortBacklogSocket  # type: ignore[attr-defined]
_bootstrap.socket = _proxy  # type: ignore[attr-defined]


class BacklogShort(Delegating):
    pass


def make() -> BacklogShort:
    return BacklogShort()
