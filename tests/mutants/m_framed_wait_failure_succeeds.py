"""Framed wire: a peer whose decision wait fails returns success without reading the word.

The reference's peer, when rank 0 goes away or the deadline passes while it waits for the
decision, publishes the abort unless the commit is already there, and raises otherwise
(FRAME-8).  This mutant returns success at once: a rank 0 that died before its commit
leaves its peers with success for a broadcast nobody committed.
"""

from __future__ import annotations

import select
import socket

from tpbcast.reference_impl import _exchange
from tpbcast.reference_impl._framed import ABORT_BIT
from tpbcast.reference_impl._io import Site

from ._base import FramedDelegating

DEFECT = "framed: a failed decision wait returns success without reading the decision"
KILLS = ("FRAME-8",)
FAST = True


def _await_decision(sock: socket.socket, site: Site, turn: _exchange.Turn) -> None:
    health = select.poll()
    health.register(sock.fileno(), select.POLLIN)
    sleeper = select.poll()
    board, generation = turn.board, turn.generation
    while board.load(generation) == turn.seen:
        if _exchange._wait_problem(sock, health, sleeper, turn.deadline, turn.abort_fd):
            return  # the defect: success, whatever the word says
    if board.load(generation) == generation | ABORT_BIT:
        raise _exchange.GenerationAbortedError(f"generation {generation} aborted", rank=site.rank)


_exchange._await_decision = _await_decision


class WaitFailureSucceeds(FramedDelegating):
    pass


def make() -> WaitFailureSucceeds:
    return WaitFailureSucceeds()
