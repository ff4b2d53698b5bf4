"""A root's failed broadcast leaves the other readers waiting.

The correct ring sets the segment's shutdown word when a broadcast fails on rank 0 (a
dead reader, an I/O deadline), so every other reader stops waiting for a payload that
will never come (FAULT-8).  In this mutant the root only raises: the remaining readers
wait until their own I/O deadline (or the root's reset).
"""

from __future__ import annotations

from typing import Any

from .shm_ring import ShmError, ShmRingBroadcaster

DEFECT = "shm ring: a broadcast that fails on rank 0 does not abort the other readers"
KILLS = ("FAULT-8",)
FAST = True


class _QuietError(Exception):
    """Carries the root's error past the ring's abort (which catches ``ShmError`` only)."""

    def __init__(self, error: ShmError) -> None:
        super().__init__(str(error))
        self.error = error


class FailureNotAborting(ShmRingBroadcaster):
    def _write(self, seg: Any, view: memoryview) -> None:
        try:
            super()._write(seg, view)
        except ShmError as exc:
            raise _QuietError(exc) from exc

    def _check_readers(self, *args: Any) -> None:
        try:
            super()._check_readers(*args)
        except ShmError as exc:
            raise _QuietError(exc) from exc

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        try:
            super().broadcast(buffer, root)
        except _QuietError as quiet:
            self._broken = str(quiet.error)  # the defect: no shutdown word for the readers
            raise quiet.error from None


def make() -> FailureNotAborting:
    return FailureNotAborting()
