"""Framed wire: rank 0 publishes the commit as soon as the frames are written.

The reference commits only after every peer's acknowledgement (FRAME-7): a peer that never
got, or refused, its frame must make the generation abort on every rank.  This mutant
commits first and reads the acknowledgements afterwards, so the peers that did get the
frame return success for a broadcast another peer failed.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Sequence

from tpbcast.reference_impl import _broadcaster, _exchange
from tpbcast.reference_impl._framed import DecisionBoard
from tpbcast.reference_impl._io import Deadline, Site

from ._base import FramedDelegating

DEFECT = "framed: rank 0 commits before reading every acknowledgement"
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
    _exchange.commit(board, generation, seen, deadline)  # the defect: before the acks
    _exchange.collect_acks(links, deadline, abort_fd)


_broadcaster.root_exchange = _root_exchange


class CommitBeforeAcks(FramedDelegating):
    pass


def make() -> CommitBeforeAcks:
    return CommitBeforeAcks()
