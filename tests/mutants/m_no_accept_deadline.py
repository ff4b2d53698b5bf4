"""Rank 0 waits for its peers without a deadline (upstream's poll-less ``accept``).

A peer that never arrives leaves rank 0 in ``initialize`` forever (TIME-1), and peers
that trickle in are always waited for (TIME-2).  The suite releases the wait itself (a
connection that closes at once) so TIME-1 ends FAIL instead of a hang.
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "rank 0 accepts and reads handshakes without a deadline (init deadline ignored)"
KILLS = ("TIME-1", "TIME-2")
FAST = True

_original = _bootstrap._Handshakes._wait_and_read


def _wait_and_read(self: _bootstrap._Handshakes) -> None:
    kept = self.deadline
    self.deadline = _bootstrap.Deadline(None, started=kept.started)  # the defect
    try:
        _original(self)
    finally:
        self.deadline = kept


_bootstrap._Handshakes._wait_and_read = _wait_and_read  # type: ignore[method-assign]


class NoAcceptDeadline(Delegating):
    pass


def make() -> NoAcceptDeadline:
    return NoAcceptDeadline()
