"""Sends without ``MSG_NOSIGNAL``: a write to a dead peer raises SIGPIPE.

Python ignores SIGPIPE by default, but a C++ engine runs with SIG_DFL, where the signal
kills rank 0.  The suite runs ranks with SIGPIPE at SIG_DFL (FAULT-1); a process that dies
of a signal instead of raising also breaks FAULT-6.
"""

from __future__ import annotations

from tpbcast.reference_impl import _io

from ._base import Delegating

DEFECT = "plain send() without MSG_NOSIGNAL: SIGPIPE at SIG_DFL kills rank 0 on a dead peer"
KILLS = ("FAULT-1", "FAULT-6")
FAST = True

_io._SEND_FLAGS = 0  # type: ignore[misc]  # the defect


class Sigpipe(Delegating):
    pass


def make() -> Sigpipe:
    return Sigpipe()
