"""Framed wire: rank 0 returns once every peer acknowledged, without publishing the commit.

The reference publishes the generation in the shared decision word, then returns; the
peers return only once they read it (FRAME-7, FRAME-8).  This mutant's rank 0 skips the
publication: it returns success while its peers wait for a decision that never comes.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Sequence

from tpbcast.reference_impl import _broadcaster, _exchange
from tpbcast.reference_impl._framed import DecisionBoard
from tpbcast.reference_impl._io import Deadline, Site

from ._base import FramedDelegating

DEFECT = "framed: rank 0 returns after the acknowledgements without publishing the commit"
KILLS = ("FRAME-7",)
FAST = True


def _root_exchange(
    links: Sequence[tuple[socket.socket, Site, select.poll]],
    views: Sequence[memoryview],
    total: int,
    deadline: Deadline,
    board: DecisionBoard,
    generation: int,
    seen: int,
    abort_fd: int | None,
) -> None:
    _exchange.send_frames(links, views, total, deadline, abort_fd)
    _exchange.collect_acks(links, deadline, abort_fd)  # the defect: no commit follows


_broadcaster.root_exchange = _root_exchange


class ReturnsBeforeCommit(FramedDelegating):
    pass


def make() -> ReturnsBeforeCommit:
    return ReturnsBeforeCommit()
