"""A 0-byte broadcast on the root still sends one byte, which the peers never read.

Peers with an empty buffer return at once, so the stray byte is read as the first byte
of the next payload: every later broadcast arrives shifted by one (BCAST-6).
"""

from __future__ import annotations

from typing import Any

from ._base import Delegating

DEFECT = "the root sends one stray byte for a 0-byte broadcast; later payloads arrive shifted"
KILLS = ("BCAST-6",)
FAST = True


class ZeroByteDesync(Delegating):
    rank = -1

    def initialize(self, rank: int, *args: Any, **kwargs: Any) -> Any:
        self.rank = rank
        return self.inner.initialize(rank, *args, **kwargs)

    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        empty = isinstance(buffers, bytearray | memoryview) and len(buffers) == 0
        if self.rank == 0 and empty:
            return self.inner.broadcast(bytearray(b"\x00"), root)
        return self.inner.broadcast(buffers, root)


def make() -> ZeroByteDesync:
    return ZeroByteDesync()
