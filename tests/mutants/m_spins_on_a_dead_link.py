"""A broadcast that meets a dead peer or root keeps waiting for it instead of failing.

The shape of vLLM 0.33's MessageQueue (issue 22): its writer spins in ``acquire_write``
once the ring is full of blocks a dead reader will never read, and its readers spin
waiting for a block a dead writer will never write; neither has a deadline.  Here the
reference's closed-link errors during a broadcast become that spin (a poll on nothing,
forever), so only the suite's own bound on a call blocked by a dead rank can catch it
(FAULT-1, FAULT-2: "no deadline" is a FAIL, not UNSUPPORTED).
"""

from __future__ import annotations

import threading
from typing import Any

from tpbcast.reference_impl import _errors

from ._base import Delegating

DEFECT = "a broadcast blocked by a dead peer or root waits forever (no detection, no deadline)"
KILLS = ("FAULT-1", "FAULT-2")
FAST = False  # every hang is judged at its group deadline: ~100 s


class SpinsOnADeadLink(Delegating):
    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        try:
            return self.inner.broadcast(buffers, root)
        except _errors.PeerClosedError:
            threading.Event().wait()  # the ring never frees: wait for ever
            raise


def make() -> SpinsOnADeadLink:
    return SpinsOnADeadLink()
