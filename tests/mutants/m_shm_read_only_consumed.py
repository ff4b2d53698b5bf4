"""A peer refuses a read-only buffer only after taking the payload meant for it.

The correct ring checks a peer's buffer before it touches the ring, so the refused call
consumes nothing and the next broadcast gets the payload (BCAST-11).  This mutant reads
the payload first (into a scratch buffer, as an adapter that dequeues a message and then
copies it into the caller's buffer would) and only then refuses: the payload is lost and
the stream is one broadcast behind.
"""

from __future__ import annotations

from typing import Any

from .shm_ring import ShmConfigurationError, ShmRingBroadcaster

DEFECT = "shm ring: a read-only peer buffer is refused after its payload was consumed"
KILLS = ("BCAST-11",)
FAST = True


class ReadOnlyConsumed(ShmRingBroadcaster):
    def broadcast(self, buffer: Any, root: int = 0) -> None:
        view = memoryview(buffer) if isinstance(buffer, bytes | bytearray | memoryview) else None
        if view is not None and view.readonly and self.is_initialized() and self._rank > 0:
            super().broadcast(bytearray(view.nbytes), root)  # the defect: consumed first
            raise ShmConfigurationError("a peer's buffer must be writable", rank=self._rank)
        super().broadcast(buffer, root)


def make() -> ReadOnlyConsumed:
    return ReadOnlyConsumed()
