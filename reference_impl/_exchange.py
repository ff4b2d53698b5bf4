"""One framed broadcast: frames out, acknowledgements in, one shared decision.

Rank 0 (wire doc §4): for each peer in ascending order, the header then the payload; then
one acknowledgement 0x6b from each peer; then THE COMMIT: the decision word of this
generation goes from the value seen at entry to the generation number.  A peer: the header
(magic and byte count checked), the payload, its acknowledgement, then it waits until the
word changes: the generation means success, the generation with bit 31 means abort.

Whoever fails first publishes the abort (the same compare-and-swap), so the decision is
one value every rank reads: no rank returns success for a broadcast another rank fails.
A peer whose wait fails (rank 0 gone, the deadline passed) tries to publish the abort; if
rank 0's commit is already there, the commit stands and the peer returns success with the
others (the order is the word's, not the peer's clock).

Where ours deliberately differs from upstream: one deadline per CALL (frames, acks and the
decision wait together), not per I/O step, so a call never waits longer than its
deadline and its error says how long it really waited; a zero-byte broadcast is a frame
like any other, so a rank that broadcasts 0 bytes where the others send n is detected
(a size mismatch) instead of shifting the stream by one frame.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ._errors import BroadcastError, BroadcastTimeoutError, HandshakeError, PeerClosedError
from ._framed import ABORT_BIT, ACK, HEADER_SIZE, MAGIC, DecisionBoard, pack_header, unpack_header
from ._io import Deadline, Site, recv_exact, recv_views, send_all

__all__ = [
    "GenerationAbortedError",
    "Link",
    "Turn",
    "check_header",
    "check_not_stale",
    "collect_acks",
    "commit",
    "peer_exchange",
    "root_exchange",
    "send_frames",
]

Link = tuple[socket.socket, Site, select.poll]
"""One link as a route holds it: the socket, its error site, its ``poll`` object."""

# How often a peer waiting for the decision re-reads the word and checks that rank 0 is
# alive: rank 0's death without a decision is noticed within this slice.
_DECISION_SLICE_MS: Final = 10
_ACK_BYTE: Final = bytes([ACK])


class GenerationAbortedError(BroadcastError, RuntimeError):
    """The group's decision for this broadcast is abort (another rank failed it)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One broadcast's place in the group: its generation, the decision word's value at
    entry (the compare of every compare-and-swap), the call's one deadline, and the pipe
    that ``reset()`` from another thread uses to stop it."""

    board: DecisionBoard
    generation: int
    seen: int
    deadline: Deadline
    abort_fd: int | None

    def publish_abort(self) -> int:
        return self.board.publish(self.generation, self.seen, self.generation | ABORT_BIT)


def check_not_stale(board: DecisionBoard, generation: int, rank: int) -> int:
    """The word this generation starts from; refuses a generation already aborted (by a
    peer's failure or ``abort(reason)``) before any I/O."""
    word = board.load(generation)
    if word == generation | ABORT_BIT:
        raise GenerationAbortedError(
            f"generation {generation} was already aborted (decision 0x{word:08x}) by another "
            "rank's failure or abort(); reset() and initialize() again",
            rank=rank,
            phase="decision",
        )
    return word


def root_exchange(
    links: Sequence[Link], views: Sequence[memoryview], total: int, turn: Turn
) -> None:
    """Rank 0's half; returns only once the commit is published."""
    try:
        _nothing_out_of_turn(links, turn.deadline)
        send_frames(links, views, total, turn)
        collect_acks(links, turn)
    except BaseException:
        turn.publish_abort()
        raise
    commit(turn)


def send_frames(links: Sequence[Link], views: Sequence[memoryview], total: int, turn: Turn) -> None:
    """Header then payload to each peer in ascending rank order."""
    deadline, abort_fd = turn.deadline, turn.abort_fd
    header = memoryview(pack_header(total))
    for sock, site, poller in links:
        # Byte counts in errors are the payload's (what the caller asked to move); a
        # failure in the header shows as 0 of them done.
        send_all(sock, header, deadline, site, total=total, abort_fd=abort_fd, poller=poller)
        done = 0
        for view in views:
            done += send_all(
                sock,
                view,
                deadline,
                site,
                offset=done,
                total=total,
                abort_fd=abort_fd,
                poller=poller,
            )


def collect_acks(links: Sequence[Link], turn: Turn) -> None:
    """One acknowledgement 0x6b from each peer, in ascending rank order."""
    for sock, site, _poller in links:
        _read_ack(sock, site, turn.deadline, turn.abort_fd)


def commit(turn: Turn) -> None:
    """THE COMMIT POINT: the word goes from ``seen`` to ``generation``, unless a peer
    published the abort first."""
    generation, deadline = turn.generation, turn.deadline
    decided = turn.board.publish(generation, turn.seen, generation)
    if decided != generation:
        raise GenerationAbortedError(
            f"commit of generation {generation} refused: a peer published abort first "
            f"(decision 0x{decided:08x}), so no rank returns success for it",
            rank=0,
            phase="decision",
            elapsed=deadline.elapsed(),
        )


def _nothing_out_of_turn(links: Sequence[Link], deadline: Deadline) -> None:
    """Between two broadcasts a peer has nothing to say: a byte already waiting (a second
    acknowledgement, a stray token) would be taken for this frame's acknowledgement and
    commit a generation that peer never confirmed."""
    watch = select.poll()
    by_fd = {}
    for sock, site, _poller in links:
        watch.register(sock.fileno(), select.POLLIN)
        by_fd[sock.fileno()] = (sock, site)
    for fd, _events in watch.poll(0):
        sock, site = by_fd[fd]
        try:
            stray = sock.recv(16, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            continue  # closed or reset: the frame's write reports it, with its byte counts
        if not stray:
            continue
        raise HandshakeError(
            f"{site.who} sent {len(stray)} byte(s) out of turn ({stray.hex()}) before this "
            "broadcast's frame; the stream is out of sync",
            rank=site.rank,
            peer=site.peer,
            phase="broadcast",
            elapsed=deadline.elapsed(),
            path=site.path,
        )


def _read_ack(sock: socket.socket, site: Site, deadline: Deadline, abort_fd: int | None) -> None:
    got = bytearray(1)
    ack_site = Site(site.rank, site.peer, "acknowledgement", site.path, site.who)
    recv_exact(sock, memoryview(got), deadline, ack_site, abort_fd=abort_fd)
    if got[0] != ACK:
        raise HandshakeError(
            f"{site.who} acknowledged with 0x{got[0]:02x}, not 0x{ACK:02x}",
            rank=site.rank,
            peer=site.peer,
            phase="acknowledgement",
            elapsed=deadline.elapsed(),
            path=site.path,
        )


def peer_exchange(link: Link, views: Sequence[memoryview], total: int, turn: Turn) -> None:
    """A peer's half; returns only once rank 0's commit is read from the shared word."""
    sock, site, poller = link
    deadline, abort_fd = turn.deadline, turn.abort_fd
    try:
        raw = bytearray(HEADER_SIZE)
        recv_exact(
            sock,
            memoryview(raw),
            deadline,
            site,
            total=total,
            abort_fd=abort_fd,
            poller=poller,
            wait_first=True,
        )
        check_header(raw, total, site, deadline)
        recv_views(sock, views, deadline, site, total=total, abort_fd=abort_fd, poller=poller)
        send_all(
            sock,
            memoryview(_ACK_BYTE),
            deadline,
            Site(site.rank, 0, "acknowledgement", site.path, "rank 0"),
            abort_fd=abort_fd,
        )
    except BaseException:
        turn.publish_abort()
        raise
    _await_decision(sock, site, turn)


def check_header(raw: bytearray, total: int, site: Site, deadline: Deadline) -> None:
    """The header must carry the magic and this rank's own byte count (zero included)."""
    magic, nbytes = unpack_header(raw)
    if magic != MAGIC or nbytes != total:
        raise HandshakeError(
            f"frame header mismatch: magic 0x{magic:016x} (expected 0x{MAGIC:016x}), "
            f"{nbytes} payload bytes announced where this rank broadcasts {total}",
            rank=site.rank,
            peer=0,
            phase="frame header",
            elapsed=deadline.elapsed(),
            path=site.path,
        )


def _await_decision(sock: socket.socket, site: Site, turn: Turn) -> None:
    """Until the word leaves ``seen``.  On a failed wait, the abort is published only if
    the word still holds ``seen``: a commit that is already there wins."""
    board, generation, seen = turn.board, turn.generation, turn.seen
    deadline, abort_fd = turn.deadline, turn.abort_fd
    health = select.poll()
    health.register(sock.fileno(), select.POLLIN)
    sleeper = select.poll()
    if abort_fd is not None:
        sleeper.register(abort_fd, select.POLLIN)
    while True:
        word = board.load(generation)
        if word != seen:
            break
        problem = _wait_problem(sock, health, sleeper, deadline, abort_fd)
        if problem is None:
            continue
        word = turn.publish_abort()
        if word == generation:
            return  # rank 0 committed before our failure: the commit stands
        cls, reason, code = problem
        raise cls(
            f"{reason} while waiting for the decision of generation {generation} "
            f"(decision now 0x{word:08x})",
            rank=site.rank,
            peer=0,
            phase="decision",
            elapsed=deadline.elapsed(),
            path=site.path,
            errno_name=code,
        )
    if word == generation:
        return
    raise GenerationAbortedError(
        f"generation {generation} was aborted by the group (decision 0x{word:08x}): another "
        "rank failed it, so this rank fails it too",
        rank=site.rank,
        phase="decision",
        elapsed=deadline.elapsed(),
        path=site.path,
    )


def _wait_problem(
    sock: socket.socket,
    health: select.poll,
    sleeper: select.poll,
    deadline: Deadline,
    abort_fd: int | None,
) -> tuple[type[BroadcastError], str, str] | None:
    """One slice of the decision wait; what went wrong, or None to look again."""
    if deadline.expired():
        return BroadcastTimeoutError, f"the {deadline.describe()} passed", "ETIMEDOUT"
    for _fd, events in health.poll(0):
        if events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
            return PeerClosedError, "rank 0 closed its connection", "ECONNRESET"
        try:
            alive = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            alive = b"?"
        except OSError:
            alive = b""
        if not alive:
            return PeerClosedError, "rank 0 closed its connection", "ECONNRESET"
    left = deadline.poll_ms()
    slice_ms = _DECISION_SLICE_MS if left is None else min(left, _DECISION_SLICE_MS)
    if sleeper.poll(slice_ms) and abort_fd is not None:
        return BroadcastError, "aborted by reset() from another thread", "ECANCELED"
    return None
