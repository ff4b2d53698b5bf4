"""No argument is checked anywhere: an implementation that accepts any rank and trusts its caller.

A bare binding of a C++ class that range-checks nothing looks like this: ``initialize``
goes straight to the bootstrap whatever ``rank``, ``world_size`` and ``base_path`` are
(a rank outside ``0..world_size-1`` connects to rank 0 like a peer and waits), rank 0
takes an announced rank as a slot index, ``broadcast`` ignores ``root`` (rank 0 always
sends) and hands a peer's buffer to the socket without asking whether it is writable.
The deadlines stay (the suite can shorten every wait).

It breaks the clauses about those checks (``KILLS``), and the suite must stage
everything else without them: a test that needs the implementation to refuse something
it accepts must report that clause UNSUPPORTED ("not stageable on this implementation")
or stage it another way, never end in ERROR after a group deadline.
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl import _broadcaster, _buffers

from . import m_no_rank_range_check  # noqa: F401  (its patch: announced ranks unchecked)
from ._base import Delegating

DEFECT = (
    "no argument check anywhere: initialize's rank/world_size/base_path, the announced "
    "rank, broadcast's root and a peer buffer's writability are all trusted"
)
KILLS = ("INIT-1", "INIT-7", "BCAST-3", "BCAST-11")
FAST = False


def _check_arguments(rank: object, world_size: object, base_path: object) -> None:
    # The defect: only the sun_path limit is left, as the socket call itself enforces it.
    if isinstance(base_path, str):
        _broadcaster.check_path_length(_broadcaster.socket_path(base_path))


_broadcaster._check_arguments = _check_arguments
_original_add_buffer = _buffers._add_buffer


def _add_buffer(
    index: int, obj: Any, prepared: _buffers.PreparedBuffers, *, writable: bool
) -> None:
    # The defect: a peer's read-only buffer goes to the socket as it is.
    _original_add_buffer(index, obj, prepared, writable=False)


_buffers._add_buffer = _add_buffer


class NoArgumentChecks(Delegating):
    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        return self.inner.broadcast(buffers, 0)  # the defect: root is never checked


def make() -> NoArgumentChecks:
    return NoArgumentChecks()
