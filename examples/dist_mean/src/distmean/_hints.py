"""A shape-hint channel: rank 0 tells its peers the shape of the next step's batch.

The hints go over tpbcast's reference CPU broadcaster (a Unix socket, no device sync), the
way an LLM engine sends small CPU tensors from TP rank 0 every step.  A hint is fixed size:
a count and up to ``MAX_DIMS`` dimensions, each a native int64.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from tpbcast.reference_impl import BroadcasterConfig, CpuTpBroadcaster

__all__ = ["MAX_DIMS", "HintChannel", "open_hint_channel"]

MAX_DIMS: Final = 8
_HINT: Final = struct.Struct(f"=q{MAX_DIMS}q")


@dataclass
class HintChannel:
    """One rank's end of the channel; ``close()`` (or ``with``) tears it down."""

    rank: int
    broadcaster: CpuTpBroadcaster

    def share(self, shape: tuple[int, ...] = ()) -> tuple[int, ...]:
        """Rank 0 passes the shape; every rank returns rank 0's shape."""
        if len(shape) > MAX_DIMS:
            raise ValueError(f"a hint has at most {MAX_DIMS} dimensions, got {len(shape)}")
        padded = (*shape, *(0,) * (MAX_DIMS - len(shape)))
        buf = bytearray(_HINT.pack(len(shape), *padded) if self.rank == 0 else _HINT.size)
        self.broadcaster.broadcast(buf)
        count, *dims = _HINT.unpack(bytes(buf))
        return tuple(dims[:count])

    def close(self) -> None:
        self.broadcaster.reset()

    def __enter__(self) -> HintChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_hint_channel(
    rank: int, world_size: int, base_path: str, *, timeout: float = 5.0
) -> HintChannel:
    """Join the channel at ``base_path`` (rank 0 listens at ``<base_path>_0.sock``).

    ``timeout`` bounds the connect, the bootstrap and every hint, so a bad peer or a dead
    rank 0 fails the call instead of hanging the engine's startup.
    """
    config = BroadcasterConfig(connect_timeout=timeout, init_timeout=timeout, io_timeout=timeout)
    broadcaster = CpuTpBroadcaster(config)
    broadcaster.initialize(rank, world_size, base_path)
    return HintChannel(rank, broadcaster)
