"""A reader drops the last byte of every full chunk after the first one.

The correct ring copies each chunk whole.  This mutant's reader copies one byte short when
a full-size chunk lands past the start of the payload: payloads of one chunk or less are
intact, every payload of more than two chunks has a stale byte at each later full chunk's
end (the off-by-one a chunked transport hides until a payload crosses its chunk size).
"""

from __future__ import annotations

from .shm_ring import CHUNK, ShmRingBroadcaster

DEFECT = "shm ring: a reader drops the last byte of each full chunk past the first"
KILLS = ("SHM-10",)
FAST = True


class ChunkTail(ShmRingBroadcaster):
    def _copy_out(self, view: memoryview, done: int, chunk: memoryview) -> None:
        if done and len(chunk) == CHUNK:
            chunk = chunk[:-1]  # the defect
        super()._copy_out(view, done, chunk)


def make() -> ChunkTail:
    return ChunkTail()
