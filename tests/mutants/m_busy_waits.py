"""A rank that waits by spinning: every wait polls without blocking and yields the CPU.

The shape of SGLang 0.5.23's MessageQueue reader (``acquire_read``: ``while True`` over
the ring's flags with ``os.sched_yield()`` and no sleep) and of vLLM 0.33's for its first
second.  Here the reference's ``poll`` waits (bootstrap, exchange, I/O) become that loop:
``poll(0)`` then ``sched_yield`` until something is ready or the wait's own timeout has
passed.  Every event, deadline and error is the reference's; only the CPU a waiting rank
burns differs, which only HYG-6 (a waiting rank uses almost no CPU) can tell.
"""

from __future__ import annotations

import os
import select
import time
import types
from typing import Any

from tpbcast.reference_impl import _bootstrap, _broadcaster, _exchange, _io

from ._base import Delegating

DEFECT = "every wait of a rank is a poll(0) + sched_yield loop (a busy-wait)"
KILLS = ("HYG-6",)
FAST = True  # HYG-6 runs in a few seconds


class _SpinningPoll:
    """``select.poll`` whose ``poll(timeout)`` never blocks in the kernel."""

    def __init__(self) -> None:
        self._inner = select.poll()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]:
        end = None if timeout is None or timeout < 0 else time.monotonic() + timeout / 1000
        while True:
            ready = self._inner.poll(0)
            if ready or (end is not None and time.monotonic() >= end):
                return ready
            os.sched_yield()


_SPINNING_SELECT = types.SimpleNamespace(
    **{name: getattr(select, name) for name in dir(select) if not name.startswith("__")}
)
_SPINNING_SELECT.poll = _SpinningPoll
for _module in (_bootstrap, _broadcaster, _exchange, _io):
    _module.select = _SPINNING_SELECT  # type: ignore[attr-defined]


class BusyWaits(Delegating):
    """The reference, whose waits spin (patched above, at import)."""


def make() -> BusyWaits:
    return BusyWaits()
