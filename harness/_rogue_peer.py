"""Rogue peers: connect to rank 0 and break wire v1 on the peer side, on purpose.

See :mod:`.rogue` for the ``timeout``/``observe`` budgets every behaviour takes.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._rogue_report import GARBAGE_HANDSHAKE, RogueReport, Then, _buffers_of, _pending, _Recorder
from .wire import (
    PROBE,
    RANK_SIZE,
    CloseKind,
    Deadline,
    WireError,
    address_of,
    connect,
    expect_closed,
    pack_rank,
    recv_exact,
    send_all,
    wait_hung_up,
)


def _start(
    behaviour: str, base_path: str, *, abstract: bool, timeout: float
) -> tuple[_Recorder, str, Deadline]:
    """What every peer behaviour starts with: its log, rank 0's address and the deadline
    of its set-up (connect, handshake, the payload it must read to reach the fault)."""
    address = address_of(base_path, abstract=abstract)
    return _Recorder("peer", behaviour, address), address, Deadline.after(timeout)


def _peer_connect(
    rec: _Recorder, address: str, deadline: Deadline, buffer_size: int | None
) -> socket.socket:
    try:
        sock = connect(address, deadline, buffer_size=buffer_size, what="rogue peer connect")
    except WireError as exc:
        raise rec.fail("could not connect to rank 0", exc) from exc
    if buffer_size is not None:
        rec.buffers = _buffers_of(sock)
    rec.act("connect", note=rec.address)
    return sock


def _peer_send(rec: _Recorder, sock: socket.socket, data: bytes, deadline: Deadline) -> None:
    try:
        send_all(sock, data, deadline, what="rogue peer send")
    except WireError as exc:
        raise rec.fail(f"could not send {len(data)} byte(s)", exc) from exc
    rec.sent += data
    rec.act("send", len(data), data)


def _send_fault(
    rec: _Recorder, sock: socket.socket, data: bytes, deadline: Deadline
) -> dict[str, Any] | None:
    """Send the fault's bytes; if rank 0 already dropped us, that is its reaction.

    An implementation may refuse a peer before reading it (e.g. on SO_PEERCRED):
    the send then fails with EPIPE/ECONNRESET.  That is an observation, not a
    rogue failure, so the report says ``reaction`` (and ``sent`` is short) instead
    of raising.  Returns the reaction fields, or None when all bytes went out.
    """
    try:
        send_all(sock, data, deadline, what="rogue peer send")
    except WireError as exc:
        if exc.how != "closed":
            raise rec.fail(f"could not send {len(data)} byte(s)", exc) from exc
        rec.act("send_refused", 0, b"", note=str(exc))
        return _watch_peer(rec, sock, 0.0)
    rec.sent += data
    rec.act("send", len(data), data)
    return None


def _watch_peer(
    rec: _Recorder, sock: socket.socket, observe: float, stop_after: int | None = None
) -> dict[str, Any]:
    """Watch the root after the fault; returns the report fields it learned."""
    seen = expect_closed(sock, Deadline.after(observe), stop_after=stop_after)
    if seen.extra:
        rec.received += seen.extra
        rec.act("recv", len(seen.extra), seen.extra)
    rec.act("observe", note=f"{seen.kind.value} after {seen.elapsed:.3f}s")
    return {
        "probe": seen.extra[0] if seen.extra else None,
        "reaction": seen.kind,
        "reaction_after": seen.elapsed if seen.closed else None,
    }


def _finish_then(rec: _Recorder, sock: socket.socket, then: Then, observe: float) -> dict[str, Any]:
    if then == "close":
        sock.close()
        rec.act("close")
        return {}
    if then == "half_close":
        sock.shutdown(socket.SHUT_WR)
        rec.act("shutdown_wr")
    else:
        rec.act("stall", note=f"keeps the connection open, sends nothing, up to {observe}s")
    return _watch_peer(rec, sock, observe)


def peer_send_raw(
    base_path: str,
    data: bytes,
    *,
    then: Then = "stall",
    behaviour: str = "send_raw",
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Connect, send ``data`` as the handshake, then close, half-close or stall.

    :param then: ``"close"`` closes at once (nothing watched); ``"half_close"``
        shuts down writing and watches; ``"stall"`` keeps the link open, silent,
        and watches for up to ``observe`` seconds for rank 0 to drop it.
    """
    rec, address, deadline = _start(behaviour, base_path, abstract=abstract, timeout=timeout)
    with _peer_connect(rec, address, deadline, buffer_size) as sock:
        refused = _send_fault(rec, sock, data, deadline) if data else None
        if refused is not None:
            return rec.report(**refused)
        return rec.report(**_finish_then(rec, sock, then, observe))


def peer_announce(
    base_path: str,
    rank: int,
    *,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Announce ``rank`` (any int32: negative, 0, >= world size, a duplicate).

    Then watch: a probe byte ends the watch at once (``report.probe``), so does a
    close (``report.reaction`` EOF or RESET).  A bad rank must get a close and
    never a probe.
    """
    rec, address, deadline = _start(
        f"announce({rank})", base_path, abstract=abstract, timeout=timeout
    )
    with _peer_connect(rec, address, deadline, buffer_size) as sock:
        refused = _send_fault(rec, sock, pack_rank(rank), deadline)
        if refused is not None:
            return rec.report(**refused)
        return rec.report(**_watch_peer(rec, sock, observe, stop_after=1))


def peer_truncated_handshake(
    base_path: str,
    nbytes: int,
    *,
    rank: int = 1,
    then: Then = "close",
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Send only the first ``nbytes`` (1-3) of a valid rank announcement."""
    if not 0 < nbytes < RANK_SIZE:
        raise ValueError(f"a truncated handshake has 1..{RANK_SIZE - 1} bytes, got {nbytes}")
    return peer_send_raw(
        base_path,
        pack_rank(rank)[:nbytes],
        then=then,
        behaviour=f"truncated_handshake({nbytes}, then={then})",
        timeout=timeout,
        observe=observe,
        abstract=abstract,
        buffer_size=buffer_size,
    )


def peer_garbage_handshake(
    base_path: str,
    data: bytes = GARBAGE_HANDSHAKE,
    *,
    then: Then = "stall",
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Send ``data`` (not a valid rank) where the 4-byte announcement belongs."""
    return peer_send_raw(
        base_path,
        data,
        then=then,
        behaviour=f"garbage_handshake({data.hex()}, then={then})",
        timeout=timeout,
        observe=observe,
        abstract=abstract,
        buffer_size=buffer_size,
    )


def peer_silent(
    base_path: str,
    *,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Connect and never send; watch up to ``observe`` s for rank 0 to give up."""
    return peer_send_raw(
        base_path,
        b"",
        then="stall",
        behaviour="silent",
        timeout=timeout,
        observe=observe,
        abstract=abstract,
        buffer_size=buffer_size,
    )


def peer_absent(base_path: str, *, hold: float = 5.0, abstract: bool = False) -> RogueReport:
    """Never connect: the rank exists but stays away for ``hold`` seconds.

    Proof for the test: the report has no ``connect`` action and lasted ``hold``.
    """
    rec = _Recorder("peer", "absent", address_of(base_path, abstract=abstract))
    rec.act("wait", note=f"never connects; holds {hold}s")
    # Holding still is the fault itself, not a synchronisation: a bounded sleep.
    time.sleep(hold)
    return rec.report()


def _handshake(
    rec: _Recorder,
    address: str,
    rank: int,
    deadline: Deadline,
    buffer_size: int | None,
) -> tuple[socket.socket, int | None]:
    """Connect, announce, read the probe: the well-behaved half of a peer."""
    sock = _peer_connect(rec, address, deadline, buffer_size)
    try:
        _peer_send(rec, sock, pack_rank(rank), deadline)
        seen = expect_closed(sock, deadline, stop_after=1)
    except BaseException:
        sock.close()
        raise
    if seen.extra:
        rec.received += seen.extra
        rec.act("recv", 1, seen.extra, note="probe")
        return sock, seen.extra[0]
    rec.act("observe", note=f"no probe: {seen.kind.value} after {seen.elapsed:.3f}s")
    return sock, None


def _require_probe(rec: _Recorder, sock: socket.socket, probe: int | None) -> None:
    if probe != PROBE:
        sock.close()
        got = "nothing" if probe is None else f"0x{probe:02x}"
        raise rec.fail(f"expected probe 0x{PROBE:02x} before the payload, got {got}", probe=probe)


def peer_handshake(
    base_path: str,
    rank: int,
    *,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Well-behaved handshake, then report the probe (or its absence) and close.

    Waits up to ``observe`` s for the probe after announcing.  Never raises for a
    wrong or missing probe: that is the observation (``report.probe``,
    ``report.reaction``) a test about a rogue or faulty root needs.
    """
    rec, address, deadline = _start(
        f"handshake({rank})", base_path, abstract=abstract, timeout=timeout
    )
    with _peer_connect(rec, address, deadline, buffer_size) as sock:
        refused = _send_fault(rec, sock, pack_rank(rank), deadline)
        fields = refused or _watch_peer(rec, sock, observe, stop_after=1)
        sock.close()
        rec.act("close")
        return rec.report(**fields)


def peer_close_mid_payload(
    base_path: str,
    rank: int,
    after: int,
    *,
    timeout: float = 10.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Handshake, read exactly ``after`` payload bytes, then close mid-broadcast.

    Closing with payload still queued makes the root's next write fail with
    EPIPE or ECONNRESET.
    """
    rec, address, deadline = _start(
        f"close_mid_payload({rank}, after={after})", base_path, abstract=abstract, timeout=timeout
    )
    with _past_payload(rec, address, rank, after, deadline, buffer_size=buffer_size) as (_, probe):
        pass
    rec.act("close", note=f"after {after} payload byte(s)")
    return rec.report(probe=probe)


@contextmanager
def _past_payload(
    rec: _Recorder,
    address: str,
    rank: int,
    nbytes: int,
    deadline: Deadline,
    *,
    buffer_size: int | None,
) -> Iterator[tuple[socket.socket, int | None]]:
    """Handshake, insist on the 0x5a probe, read ``nbytes`` of payload: the well-behaved
    part of a payload-stage rogue. Yields the link (closed on exit) and the probe."""
    sock, probe = _handshake(rec, address, rank, deadline, buffer_size)
    with sock:
        _require_probe(rec, sock, probe)
        _read_payload(rec, sock, nbytes, deadline, probe)
        yield sock, probe


def _read_payload(
    rec: _Recorder, sock: socket.socket, nbytes: int, deadline: Deadline, probe: int | None
) -> bytes:
    try:
        data = recv_exact(sock, nbytes, deadline, what="rogue peer payload")
    except WireError as exc:
        rec.received += exc.got
        raise rec.fail(f"could not read {nbytes} payload byte(s)", exc, probe=probe) from exc
    rec.received += data
    rec.act("recv", len(data), data, note="payload")
    return data


def peer_stall_mid_payload(
    base_path: str,
    rank: int,
    after: int,
    *,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Handshake, read ``after`` payload bytes, then stop reading for ``observe`` s.

    The stall ends early if the root hangs up (``reaction`` EOF).  ``pending``
    is the payload left unread in our receive buffer: proof the root had more to
    send and we did not take it.
    """
    rec, address, deadline = _start(
        f"stall_mid_payload({rank}, after={after})", base_path, abstract=abstract, timeout=timeout
    )
    with _past_payload(rec, address, rank, after, deadline, buffer_size=buffer_size) as (
        sock,
        probe,
    ):
        rec.act("stall", note=f"stops reading for up to {observe}s")
        start = time.monotonic()
        hung_up = wait_hung_up(sock, Deadline.after(observe))
        elapsed = time.monotonic() - start
        pending = _pending(sock)
        rec.act("observe", note=f"{'hang-up' if hung_up else 'open'} after {elapsed:.3f}s")
    rec.act("close")
    return rec.report(
        probe=probe,
        reaction=CloseKind.EOF if hung_up else CloseKind.OPEN,
        reaction_after=elapsed if hung_up else None,
        pending=pending,
    )


def peer_read_payload(
    base_path: str,
    rank: int,
    nbytes: int,
    *,
    timeout: float = 10.0,
    observe: float = 0.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Well-behaved peer that reads exactly ``nbytes`` of payload (byte-exact checks).

    ``received`` is the probe followed by the payload.  With ``observe > 0`` it
    then watches for trailing bytes (a conforming root sends none) until the root
    closes.

    :raises RogueError: no ``0x5a`` probe, or fewer than ``nbytes`` arrived in time.
    """
    rec, address, deadline = _start(
        f"read_payload({rank}, {nbytes})", base_path, abstract=abstract, timeout=timeout
    )
    with _past_payload(rec, address, rank, nbytes, deadline, buffer_size=buffer_size) as (
        sock,
        probe,
    ):
        fields: dict[str, Any] = {"probe": probe}
        if observe > 0:
            fields.update(_watch_peer(rec, sock, observe))
            fields["probe"] = probe
    rec.act("close")
    return rec.report(**fields)
