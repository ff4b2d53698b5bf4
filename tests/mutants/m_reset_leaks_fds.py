"""reset() closes the peer connections but forgets rank 0's listening socket.

The reference closes every fd the instance opened (RESET-2): listener, peer links and
its abort pipe.  This mutant leaks the listener on every reset (the socket file is still
removed), so a long-lived engine that re-initializes runs out of fds.
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "reset leaks rank 0's listening socket fd (the file is removed, the fd stays open)"
KILLS = ("RESET-2", "HYG-3")
FAST = True

_original = _bootstrap.Links.close
_LEAKED: list[object] = []  # keeps the leaked listeners referenced (never closed)


def _close(self: _bootstrap.Links, *, unlink: bool) -> None:
    if self.listener is not None:
        _LEAKED.append(self.listener)  # the defect: not closed
        self.listener = None
    _original(self, unlink=unlink)


_bootstrap.Links.close = _close  # type: ignore[method-assign]


class ResetLeaksFds(Delegating):
    pass


def make() -> ResetLeaksFds:
    return ResetLeaksFds()
