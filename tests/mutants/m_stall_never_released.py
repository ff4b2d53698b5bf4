"""A stalled broadcast is never released: no I/O deadline, and a closed link spins.

The shape of an engine whose waits have no deadline and whose reset frees nothing for the
other side (SGLang's MessageQueue: no timeout anywhere, a dead or departed peer is never
noticed).  A stall test's own release, the stalled side's reset, then ends nothing: the
blocked call is still waiting when the group deadline stops it, which must be TIME-5's
FAIL with the rank's stack, never an ERROR of the group.
"""

from __future__ import annotations

import threading
from typing import Any

from tpbcast.reference_impl import _errors

from . import m_no_broadcast_deadline as _no_deadline
from ._base import Delegating

DEFECT = "no broadcast I/O deadline, and a closed link waits forever instead of failing"
KILLS = ("TIME-5",)
FAST = False  # every stall is judged at its group deadline: ~100 s

assert _no_deadline.DEFECT  # importing it removes the reference's broadcast deadline


class StallNeverReleased(Delegating):
    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        try:
            return self.inner.broadcast(buffers, root)
        except _errors.PeerClosedError:
            threading.Event().wait()  # nothing ever releases this call
            raise


def make() -> StallNeverReleased:
    return StallNeverReleased()
