"""The suite's fuzzed byte-level ranks: a peer and a root that follow a drawn script.

A script says which bytes go out, cut into which chunks (with a short pause after some),
and how the rank ends: close, half-close, stall (keep the link open and silent, watching
for the other side to give up), or go on to the payload.  The players are compositions
of :mod:`tpbcast.harness.wire` (connect, listen, accept, send_all, recv_exact,
expect_closed, wait_hung_up, all bounded by a ``Deadline``); what they saw comes back as
small frozen records for the test to judge.  Pauses between chunks and stalls are the
fault itself (a slow or silent rank), never synchronisation.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from tpbcast.harness.wire import (
    PROBE,
    Deadline,
    WireError,
    accept,
    address_of,
    expect_closed,
    listen,
    pack_rank,
    recv_exact,
    send_all,
    unpack_rank,
    unread,
    wait_hung_up,
)

from . import _support as s
from . import _watch

GAP: Final = 0.002
"""Pause after a chunk marked slow (the fault: a rank that dribbles its bytes)."""
SETUP: Final = 10.0
"""Bound of a player's own set-up (connect, accept, reading a handshake)."""
POLL: Final = 0.005
"""How often a bounded wait of a player looks again (a socket's send queue, a flag)."""

Ending = Literal["close", "half_close", "stall", "proceed"]


@dataclass(frozen=True)
class Chunked:
    """Bytes cut into chunks; ``slow[i]`` pauses :data:`GAP` after chunk ``i``."""

    data: bytes
    cuts: tuple[int, ...] = ()
    slow: tuple[bool, ...] = ()

    def chunks(self) -> list[tuple[bytes, bool]]:
        """The chunks in order, each with its slow flag (empty data: no chunk)."""
        inner = sorted({c for c in self.cuts if 0 < c < len(self.data)})
        bounds = [0, *inner, len(self.data)]
        return [
            (self.data[a:b], index < len(self.slow) and self.slow[index])
            for index, (a, b) in enumerate(itertools.pairwise(bounds))
            if b > a
        ]


def _send_chunks(sock: socket.socket, chunked: Chunked, deadline: Deadline) -> tuple[int, str]:
    """Send every chunk; returns (bytes sent, "" or how sending ended early)."""
    done = 0
    for chunk, slow in chunked.chunks():
        try:
            send_all(sock, chunk, deadline, what="fuzz send")
        except WireError as exc:
            return done, f"{exc.how} after {done} byte(s)"
        done += len(chunk)
        if slow:
            time.sleep(GAP)  # the fault itself: a slow rank, not a synchronisation
    return done, ""


# ---------------------------------------------------------------- the fuzzed peer


@dataclass(frozen=True)
class PeerScript:
    """What the fuzzed peer does: its handshake bytes, then its ending.

    ``proceed`` (only after a valid announcement): read the probe and ``read`` payload
    bytes; then ``after`` says what follows: ``"close"``, ``"stall"`` (stop reading,
    watch for rank 0 to hang up), or ``"eof"`` (watch for rank 0's close on reset).
    """

    handshake: Chunked
    ending: Ending
    read: int = 0
    after: Literal["close", "stall", "eof"] = "eof"


@dataclass(frozen=True)
class PeerSeen:
    """What the fuzzed peer saw."""

    connected: bool
    sent: int
    send_ended: str
    probe: int | None = None
    received: bytes = b""
    reaction: str | None = None  # eof / reset / open (None: not watched)
    reaction_after: float | None = None
    error: str = ""


def play_peer(
    base_path: str,
    script: PeerScript,
    observe: float,
    give_up: Callable[[], bool],
    on_read: Callable[[], None] | None = None,
) -> PeerSeen:
    """Run ``script`` against rank 0 at ``base_path``; never raises for what rank 0 does.
    Stops trying to connect once ``give_up()`` says rank 0 will not listen any more;
    ``on_read()`` is called once rank 0 has read the handshake bytes (or dropped them)."""
    deadline = Deadline.after(SETUP)
    try:
        sock = _watch.connect_unless(address_of(base_path), give_up, deadline)
    except WireError as exc:
        return PeerSeen(False, 0, "", error=f"connect: {exc}")
    with sock:
        sent, ended = _send_chunks(sock, script.handshake, deadline)
        if on_read is not None:
            s.wait_for(lambda: unread(sock) == 0 or give_up(), deadline.remaining(), POLL)
            on_read()
        if ended:
            seen = expect_closed(sock, Deadline.after(0.0))
            return PeerSeen(True, sent, ended, reaction=seen.kind.value)
        if script.ending == "close":
            return PeerSeen(True, sent, "")
        if script.ending in ("half_close", "stall"):
            if script.ending == "half_close":
                sock.shutdown(socket.SHUT_WR)
            seen = expect_closed(sock, Deadline.after(observe), stop_after=1)
            probe = seen.extra[0] if seen.extra else None
            return PeerSeen(
                True,
                sent,
                "",
                probe=probe,
                received=seen.extra,
                reaction=seen.kind.value,
                reaction_after=seen.elapsed,
            )
        return _proceed(sock, sent, script, observe)


def play_twin(
    base_path: str,
    rank: int,
    script: PeerScript,
    *,
    observe: float,
    give_up: Callable[[], bool],
    on_read: Callable[[], None],
) -> tuple[PeerSeen, int | None]:
    """Announce ``rank`` on a first connection, wait until rank 0 has read it, then play
    ``script`` on a second connection (announcing ``rank`` again: a duplicate).  Returns
    what the second saw and the first byte the first connection got (None: none)."""
    deadline = Deadline.after(SETUP)
    try:
        first = _watch.connect_unless(address_of(base_path), give_up, deadline)
        send_all(first, pack_rank(rank), deadline, what="fuzz twin announce")
    except WireError as exc:
        on_read()
        return PeerSeen(False, 0, "", error=f"first connection: {exc}"), None
    with first:
        s.wait_for(lambda: unread(first) == 0 or give_up(), deadline.remaining(), POLL)
        seen = play_peer(base_path, script, observe, give_up, on_read)
        early = expect_closed(first, Deadline.after(0.0), stop_after=1)
    return seen, early.extra[0] if early.extra else None


def _proceed(sock: socket.socket, sent: int, script: PeerScript, observe: float) -> PeerSeen:
    """A valid peer: the probe, ``script.read`` payload bytes, then ``script.after``."""
    first = expect_closed(sock, Deadline.after(observe), stop_after=1)
    if not first.extra:
        return PeerSeen(True, sent, "", reaction=first.kind.value, reaction_after=first.elapsed)
    probe = first.extra[0]
    try:
        payload = recv_exact(sock, script.read, Deadline.after(observe), what="fuzz payload")
    except WireError as exc:
        return PeerSeen(True, sent, "", probe, exc.got, exc.how, exc.elapsed, f"payload: {exc}")
    if script.after == "close":
        return PeerSeen(True, sent, "", probe, payload)
    if script.after == "stall":
        start = time.monotonic()
        hung_up = wait_hung_up(sock, Deadline.after(observe))
        took = time.monotonic() - start
        return PeerSeen(True, sent, "", probe, payload, "eof" if hung_up else "open", took)
    seen = expect_closed(sock, Deadline.after(observe))
    return PeerSeen(True, sent, "", probe, payload + seen.extra, seen.kind.value, seen.elapsed)


# ---------------------------------------------------------------- the fuzzed root


@dataclass(frozen=True)
class LinkScript:
    """What the fuzzed root sends one peer after every peer announced: ``stream`` (the
    probe byte, if any, then payload bytes), then ``close`` or ``stall``."""

    stream: Chunked
    ending: Literal["close", "stall"]


@dataclass(frozen=True)
class RootSeen:
    """What the fuzzed root saw, per link in ascending announced rank."""

    ranks: tuple[int | None, ...] = ()
    sent: tuple[int, ...] = ()
    send_ended: tuple[str, ...] = ()
    reaction: tuple[str, ...] = ()
    error: str = ""
    extra: tuple[bytes, ...] = field(default=())


def play_root(base_path: str, peers: int, links: dict[int, LinkScript], observe: float) -> RootSeen:
    """Bind rank 0's socket, accept ``peers`` peers, read their announcements, then play
    ``links[rank]`` to each in ascending rank order; stalled links are watched up to
    ``observe`` s for the peer to give up."""
    address = address_of(base_path)
    deadline = Deadline.after(SETUP)
    listener = listen(address, peers)
    inode = os.lstat(address).st_ino
    socks: dict[int, socket.socket] = {}
    try:
        ranks: list[int | None] = []
        for _ in range(peers):
            try:
                sock = accept(listener, deadline, what="fuzz root accept")
            except WireError as exc:
                return RootSeen(tuple(ranks), error=f"accept: {exc}")
            try:
                rank = unpack_rank(recv_exact(sock, 4, deadline, what="fuzz root handshake"))
            except WireError as exc:
                sock.close()
                return RootSeen(tuple(ranks), error=f"handshake: {exc}")
            ranks.append(rank)
            if rank in socks or rank not in links:
                sock.close()
                return RootSeen(tuple(ranks), error=f"announced rank {rank}")
            socks[rank] = sock
        order = sorted(socks)
        sent, ended = [], []
        for rank in order:
            count, how = _send_chunks(socks[rank], links[rank].stream, deadline)
            sent.append(count)
            ended.append(how)
        for rank in order:
            if links[rank].ending == "close":
                socks.pop(rank).close()
        return _watch_stalls(
            tuple(ranks), order=order, socks=socks, sent=sent, ended=ended, observe=observe
        )
    finally:
        for sock in socks.values():
            sock.close()
        listener.close()
        with contextlib.suppress(OSError):
            st = os.lstat(address)
            if stat.S_ISSOCK(st.st_mode) and st.st_ino == inode:
                os.unlink(address)


def _watch_stalls(
    ranks: tuple[int | None, ...],
    *,
    order: list[int],
    socks: dict[int, socket.socket],
    sent: list[int],
    ended: list[str],
    observe: float,
) -> RootSeen:
    deadline = Deadline.after(observe)
    reaction, extra = [], []
    for rank in order:
        if rank not in socks:
            reaction.append("closed by us")
            extra.append(b"")
            continue
        seen = expect_closed(socks[rank], deadline)
        reaction.append(seen.kind.value)
        extra.append(seen.extra)
    return RootSeen(ranks, tuple(sent), tuple(ended), tuple(reaction), extra=tuple(extra))


def probe_and(payload: bytes, probe: int | None = PROBE) -> bytes:
    """The stream a root sends one peer: the probe byte (if any), then ``payload``."""
    return (b"" if probe is None else bytes([probe])) + payload
