"""Framed wire: the broadcast deadline restarts at every I/O step.

The reference bounds each whole call (frames, acknowledgements, decision wait) by one
deadline (FRAME-11).  This mutant restarts it before every send and receive, as upstream's
per-phase timeout does (framed §14.2): a call whose every step is a little under the
deadline waits several times the deadline in total.
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl import _exchange
from tpbcast.reference_impl._io import Deadline

from ._base import FramedDelegating

DEFECT = "framed: the broadcast deadline restarts at every I/O step"
KILLS = ("FRAME-11",)
FAST = True

_send_all = _exchange.send_all
_recv_exact = _exchange.recv_exact


def _send_all_restarted(sock: Any, data: Any, deadline: Deadline, *args: Any, **kw: Any) -> int:
    return _send_all(sock, data, deadline.restart(), *args, **kw)  # the defect


def _recv_exact_restarted(sock: Any, view: Any, deadline: Deadline, *args: Any, **kw: Any) -> int:
    return _recv_exact(sock, view, deadline.restart(), *args, **kw)  # the defect


_exchange.send_all = _send_all_restarted
_exchange.recv_exact = _recv_exact_restarted


class TimeoutPerStep(FramedDelegating):
    pass


def make() -> TimeoutPerStep:
    return TimeoutPerStep()
