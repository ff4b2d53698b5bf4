"""A passed deadline raises the root error class, not one that is also a TimeoutError.

The reference raises ``BroadcastTimeoutError`` (``BroadcastError`` and ``TimeoutError``)
when a connect, init or I/O deadline passes, so a caller can catch every timeout with the
standard class (FAULT-10).  This mutant raises a plain ``BroadcastError`` subclass with the
same message instead: still one hierarchy, no standard base.
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl._errors import BroadcastError

from ._base import Delegating

DEFECT = "a passed deadline raises a BroadcastError that is not also a TimeoutError"
KILLS = ("FAULT-10",)
FAST = True


class DeadlinePassedError(BroadcastError):
    """The defect: a timeout without ``TimeoutError`` among its bases."""


def _plain(exc: TimeoutError) -> DeadlinePassedError:
    return DeadlinePassedError(str(exc))


class TimeoutNotATimeoutError(Delegating):
    def initialize(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.inner.initialize(*args, **kwargs)
        except TimeoutError as exc:
            raise _plain(exc) from None

    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        try:
            return self.inner.broadcast(buffers, root)
        except TimeoutError as exc:
            raise _plain(exc) from None


def make() -> TimeoutNotATimeoutError:
    return TimeoutNotATimeoutError()
