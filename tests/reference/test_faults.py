"""Every error path: bad handshakes, wrong probe, missing ranks, deaths, deadlines, SIGPIPE.

Each test first proves the fault happened (the raw counterpart did its thing,
the process died, the signal disposition was SIG_DFL), then judges the
reaction (error type, fields, message, cleanup).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time

import pytest

from tpbcast.harness import RankContext, Status, run_ranks, wire
from tpbcast.harness.rogue import ROOT_BEHAVIOURS
from tpbcast.reference_impl import (
    BroadcastTimeoutError,
    BrokenBroadcasterError,
    CpuTpBroadcaster,
    HandshakeError,
    PeerClosedError,
)

from ._helpers import RAW_WAIT, RUN, fast_config, list_fds, rest_until_closed

MiB = 1 << 20


def _root_expecting_failure(
    base_path: str, world_size: int, *, after: str | None = None, **cfg: object
):
    """A rank-0 target: initialize must fail; returns (error, leftovers); then notifies
    the sync point ``after``, if given."""

    def main(ctx: RankContext) -> tuple[BaseException, bool, bool]:
        before = list_fds()
        b = CpuTpBroadcaster(fast_config(**cfg))
        try:
            b.initialize(0, world_size, base_path)
        except Exception as exc:
            err: BaseException = exc
        else:
            raise AssertionError("initialize succeeded")
        finally:
            if after is not None:
                ctx.notify(after)
        fds_restored = list_fds() == before
        socket_gone = not os.path.exists(base_path + "_0.sock")
        return err, fds_restored, socket_gone and not b.is_initialized()

    return main


def _raw_peer(base_path: str, data: bytes, *, hang_up: bool = False, hold: str | None = None):
    """Connect, send ``data``; then hang up at once, or wait for rank 0 to close (after
    the sync point ``hold``, if given)."""

    def main(ctx: RankContext) -> bytes:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, data, deadline)
        if hang_up:
            sock.close()
            return b""
        if hold is not None:
            ctx.wait(hold)
        rest = rest_until_closed(sock)  # rank 0 closes on us: EOF (b"") or a reset
        sock.close()
        return rest

    return main


@pytest.mark.parametrize(
    ("world_size", "announced", "match"),
    [
        (2, wire.pack_rank(9), "bad peer rank 9 (world_size 2)"),
        (4, wire.pack_rank(-1), "bad peer rank -1 (world_size 4)"),
        (2, wire.pack_rank(0), "bad peer rank 0 (world_size 2)"),
        (2, b"GET ", "bad peer rank 542393671 (world_size 2)"),  # garbage: an HTTP client
    ],
)
def test_rank0_rejects_bad_peer_rank(
    base_path: str, world_size: int, announced: bytes, match: str
) -> None:
    ranks = {0: _root_expecting_failure(base_path, world_size), 1: _raw_peer(base_path, announced)}
    (err, fds_restored, clean), rest = run_ranks(ranks, **RUN).values()
    assert rest == b""  # the raw peer sent its bytes and saw the close
    assert isinstance(err, HandshakeError)
    assert match in str(err)
    assert err.rank == 0 and err.phase == "handshake"
    assert fds_restored and clean  # failed initialize left nothing behind


def test_rank0_rejects_duplicate_peer_rank(base_path: str) -> None:
    def first(ctx: RankContext) -> bytes:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, wire.pack_rank(1), deadline)
        ctx.notify("first_in")
        return rest_until_closed(sock, allow_reset=False)

    def second(ctx: RankContext) -> bytes:
        ctx.wait("first_in")  # the duplicate must be the second to arrive
        return _raw_peer(base_path, wire.pack_rank(1))(ctx)

    ranks = {0: _root_expecting_failure(base_path, 3), 1: first, 2: second}
    (err, fds_restored, clean), *rests = run_ranks(ranks, **RUN).values()
    assert rests == [b"", b""]
    assert isinstance(err, HandshakeError)
    assert "duplicate peer rank 1" in str(err)
    assert fds_restored and clean


def test_truncated_handshake(base_path: str) -> None:
    ranks = {
        0: _root_expecting_failure(base_path, 2),
        1: _raw_peer(base_path, wire.pack_rank(1)[:2], hang_up=True),
    }
    (err, fds_restored, clean), rest = run_ranks(ranks, **RUN).values()
    assert rest == b""
    assert isinstance(err, HandshakeError)
    assert "after 2/4 bytes" in str(err)
    assert (err.bytes_done, err.bytes_total) == (2, 4)
    assert fds_restored and clean


def test_silent_peer_hits_the_init_deadline(base_path: str) -> None:
    ranks = {
        0: _root_expecting_failure(base_path, 2, after="done", init_timeout=0.5),
        1: _raw_peer(base_path, b"", hold="done"),
    }
    (err, fds_restored, clean), _ = run_ranks(ranks, **RUN).values()
    assert isinstance(err, BroadcastTimeoutError)
    assert err.phase == "handshake" and err.errno_name == "ETIMEDOUT"
    assert err.elapsed is not None and 0.5 <= err.elapsed < 5
    assert fds_restored and clean


def _silent_then_bad(base_path: str, announced: bytes, init_timeout: float):
    """Rank 0, a silent connection accepted first, then a peer announcing ``announced``."""

    def silent(ctx: RankContext) -> bytes:
        # connected = in rank 0's accept queue
        sock = wire.connect(wire.socket_path(base_path), wire.Deadline.after(RAW_WAIT))
        ctx.notify("silent_in")
        ctx.wait("done")
        rest = rest_until_closed(sock)  # rank 0 must have closed on us
        sock.close()
        return rest

    def bad(ctx: RankContext) -> tuple[int, float]:
        ctx.wait("silent_in")  # the bad announcement comes second
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, announced, deadline)
        sent_at = time.monotonic()  # CLOCK_MONOTONIC is host-wide
        if len(announced) == 4:  # a short one is only known to be short once it closes
            rest_until_closed(sock)  # rank 0's verdict: EOF or a reset
        sock.close()
        return os.getpid(), sent_at

    def root(ctx: RankContext) -> tuple[BaseException, bool, bool, float]:
        err, fds_restored, clean = _root_expecting_failure(
            base_path, 3, after="done", init_timeout=init_timeout
        )(ctx)
        return err, fds_restored, clean, time.monotonic()

    return run_ranks({0: root, 1: silent, 2: bad}, **RUN)


@pytest.mark.parametrize(
    ("announced", "match"),
    [
        (wire.pack_rank(-1), "bad peer rank -1 (world_size 3)"),
        (wire.pack_rank(3), "bad peer rank 3 (world_size 3)"),
        (wire.pack_rank(1)[:2], "closed the connection after 2/4 bytes"),
        (b"GET ", "bad peer rank 542393671 (world_size 3)"),
    ],
    ids=["rank-1", "rank=world", "truncated-close", "garbage"],
)
def test_silent_connection_does_not_delay_rejecting_a_bad_one(
    base_path: str, announced: bytes, match: str
) -> None:
    """INIT-17: the bad announcement fails initialize at once, naming the bad pid."""
    result = _silent_then_bad(base_path, announced, init_timeout=6.0)
    (err, fds_restored, clean, failed_at), silent_rest, (bad_pid, sent_at) = result.values()
    assert silent_rest == b""  # the silent connection was closed, never probed
    assert isinstance(err, HandshakeError), err
    assert match in str(err) and f"pid {bad_pid}" in str(err), str(err)
    assert err.rank == 0 and err.phase == "handshake"
    assert failed_at - sent_at < 3.0 and err.elapsed is not None and err.elapsed < 3.0, (
        f"rejected {failed_at - sent_at:.3f}s after the announcement ({err.elapsed:.3f}s "
        "into initialize) with a 6 s init deadline"
    )
    assert fds_restored and clean


def test_silent_connection_does_not_delay_rejecting_a_duplicate(base_path: str) -> None:
    """INIT-17 for duplicates: silent first, then rank 1 twice; the second is named."""

    def silent(ctx: RankContext) -> bytes:
        sock = wire.connect(wire.socket_path(base_path), wire.Deadline.after(RAW_WAIT))
        ctx.notify("silent_in")
        ctx.wait("done")
        rest = rest_until_closed(sock, allow_reset=False)
        sock.close()
        return rest

    def first(ctx: RankContext) -> bytes:
        ctx.wait("silent_in")
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, wire.pack_rank(1), deadline)
        ctx.notify("first_in")
        return rest_until_closed(sock, allow_reset=False)

    def second(ctx: RankContext) -> tuple[int, bytes]:
        ctx.wait("first_in")  # the duplicate must be the second to announce
        return os.getpid(), _raw_peer(base_path, wire.pack_rank(1))(ctx)

    root = _root_expecting_failure(base_path, 4, after="done", init_timeout=6.0)
    ranks = {0: root, 1: silent, 2: first, 3: second}
    err_etc, silent_rest, first_rest, (second_pid, second_rest) = run_ranks(ranks, **RUN).values()
    err, fds_restored, clean = err_etc
    assert (silent_rest, first_rest, second_rest) == (b"", b"", b"")  # closed, never probed
    assert isinstance(err, HandshakeError)
    assert f"duplicate peer rank 1 from pid {second_pid}" in str(err), str(err)
    assert err.elapsed is not None and err.elapsed < 3.0, err.elapsed
    assert fds_restored and clean


def test_surplus_silent_connection_is_dropped_once_all_ranks_are_in(base_path: str) -> None:
    """A silent connection accepted first no longer blocks a complete group: once
    ranks 1..n-1 have announced, rank 0 closes it (no probe) and the group forms."""

    def silent(ctx: RankContext) -> bytes:
        sock = wire.connect(wire.socket_path(base_path), wire.Deadline.after(RAW_WAIT))
        ctx.notify("silent_in")
        rest = rest_until_closed(sock, allow_reset=False)  # EOF: never probed
        sock.close()
        return rest

    def root(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config(init_timeout=6.0))
        b.initialize(0, 2, base_path)
        data = bytearray(b"payload")
        b.broadcast(data)
        b.reset()
        return bytes(data)

    def peer(ctx: RankContext) -> tuple[bytes, float]:
        ctx.wait("silent_in")
        b = CpuTpBroadcaster(fast_config())
        start = time.monotonic()
        b.initialize(1, 2, base_path)
        took = time.monotonic() - start
        data = bytearray(7)
        b.broadcast(data)
        b.reset()
        return bytes(data), took

    sent, silent_rest, (got, took) = run_ranks({0: root, 1: silent, 2: peer}, **RUN).values()
    assert silent_rest == b""
    assert got == sent == b"payload"
    assert took < 3.0, took


def test_never_arriving_peer_one_deadline_for_all(base_path: str) -> None:
    """init_timeout is ONE deadline: 1 s total, not 1 s per missing peer."""

    def peer1(ctx: RankContext) -> str:
        b = CpuTpBroadcaster(fast_config(init_timeout=5.0))
        with pytest.raises(PeerClosedError) as info:
            b.initialize(1, 4, base_path)
        return str(info.value)

    ranks = {0: _root_expecting_failure(base_path, 4, init_timeout=1.0), 1: peer1}
    (err, fds_restored, clean), message = run_ranks(ranks, **RUN).values()
    assert isinstance(err, BroadcastTimeoutError)
    assert err.phase == "accept"
    assert "1/3 peers connected; missing rank(s) [2, 3]" in str(err)
    assert err.elapsed is not None and 1.0 <= err.elapsed < 3.0
    assert fds_restored and clean
    # the connected peer learns at once, not at its deadline
    assert "closed the connection before sending the link probe" in message


def test_root_never_listening(base_path: str) -> None:
    b = CpuTpBroadcaster(fast_config(connect_timeout=0.5))
    before = list_fds()
    start = time.monotonic()
    with pytest.raises(BroadcastTimeoutError) as info:
        b.initialize(1, 2, base_path)
    assert 0.5 <= time.monotonic() - start < 3
    err = info.value
    assert err.phase == "connect" and err.peer == 0 and err.rank == 1
    assert err.errno_name == "ENOENT"
    assert "attempts" in str(err) and err.path == base_path + "_0.sock"
    assert list_fds() == before and not b.is_initialized()


def test_stale_socket_without_listener_is_retried_then_times_out(base_path: str) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(base_path + "_0.sock")
    stale.close()  # a leftover file: connect gives ECONNREFUSED
    b = CpuTpBroadcaster(fast_config(connect_timeout=0.3))
    with pytest.raises(BroadcastTimeoutError) as info:
        b.initialize(1, 2, base_path)
    assert info.value.errno_name == "ECONNREFUSED"


def _raw_root(base_path: str, reply: bytes):
    def main(ctx: RankContext) -> bytes:
        deadline = wire.Deadline.after(RAW_WAIT)
        listener = wire.listen(wire.socket_path(base_path), 1)
        conn = wire.accept(listener, deadline)
        rank = wire.recv_exact(conn, 4, deadline)
        wire.send_all(conn, reply, deadline)
        conn.close()
        listener.close()
        return rank

    return main


def test_peer_rejects_wrong_probe_byte(base_path: str) -> None:
    def peer(ctx: RankContext) -> HandshakeError:
        b = CpuTpBroadcaster(fast_config())
        before = list_fds()
        with pytest.raises(HandshakeError) as info:
            b.initialize(1, 2, base_path)
        assert list_fds() == before
        return info.value

    announced, err = run_ranks({0: _raw_root(base_path, b"\x13"), 1: peer}, **RUN).values()
    assert announced == wire.pack_rank(1)
    assert "expected 0x5a, got 0x13" in str(err)
    assert err.errno_name is None and "Success" not in str(err)
    assert err.phase == "probe" and err.peer == 0


def test_root_closes_before_probe(base_path: str) -> None:
    def peer(ctx: RankContext) -> PeerClosedError:
        with pytest.raises(PeerClosedError) as info:
            CpuTpBroadcaster(fast_config()).initialize(1, 2, base_path)
        return info.value

    announced, err = run_ranks({0: _raw_root(base_path, b""), 1: peer}, **RUN).values()
    assert announced == wire.pack_rank(1)
    assert err.phase == "probe" and "closed" in str(err) and "Success" not in str(err)


def test_peer_closing_before_broadcast(base_path: str) -> None:
    """Peer 2 leaves; rank 0 names peer 2, turns broken, and peer 1 learns at once."""

    def root(ctx: RankContext) -> tuple[PeerClosedError, str]:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 3, base_path)
        ctx.wait("gone")
        data = bytearray(os.urandom(MiB))
        with pytest.raises(PeerClosedError) as info:
            b.broadcast(data)
        with pytest.raises(BrokenBroadcasterError) as broken:
            b.broadcast(data)
        assert b.statistics().broken
        b.reset()
        return info.value, str(broken.value)

    def peer1(ctx: RankContext) -> tuple[int, str]:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 3, base_path)
        buf = bytearray(MiB)
        b.broadcast(buf)  # peer 1 is written first: it gets the whole payload
        with pytest.raises(PeerClosedError) as info:
            b.broadcast(buf)  # then rank 0 broke and closed us
        return len(buf), str(info.value)

    def peer2(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(2, 3, base_path)
        b.reset()  # the fault: close the connection
        ctx.notify("gone")
        return True

    r0, r1, r2 = run_ranks({0: root, 1: peer1, 2: peer2}, **RUN).values()
    err, broken_text = r0
    assert r2 is True
    assert err.peer == 2 and err.phase == "broadcast" and err.rank == 0
    assert err.errno_name in {"EPIPE", "ECONNRESET"}
    assert "write to peer 2 failed" in str(err) and "closed" in str(err)
    assert err.bytes_total == MiB
    assert "Success" not in str(err)
    assert "reset()" in broken_text
    assert r1[0] == MiB and "read from rank 0 failed" in r1[1] and "closed" in r1[1]


def test_peer_closing_mid_broadcast(base_path: str) -> None:
    """The peer reads 1 MiB of 8 MiB and closes: rank 0 reports how far it got."""

    def root(ctx: RankContext) -> PeerClosedError:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 2, base_path)
        with pytest.raises(PeerClosedError) as info:
            b.broadcast(bytearray(8 * MiB))
        return info.value

    def peer(ctx: RankContext) -> int:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base_path)
        part = bytearray(MiB)
        b.broadcast(part)  # desynchronised on purpose: reads only 1 MiB
        b.reset()  # closes with unread data pending
        return len(part)

    err, got = run_ranks({0: root, 1: peer}, **RUN).values()
    assert got == MiB
    assert err.bytes_total == 8 * MiB
    assert err.bytes_done is not None and MiB <= err.bytes_done < 8 * MiB
    assert err.errno_name in {"EPIPE", "ECONNRESET"}


def test_root_dying_mid_broadcast(base_path: str) -> None:
    """Rank 0 dies after 1 MiB + 4 KiB of peer 1's 9 MiB: every peer names rank 0, closed.

    Rank 0 is the harness's byte-level root, which stops after exactly ``cut`` payload
    bytes and is then SIGKILLed: a reference root killed from a watcher thread raced the
    kernel (on a loaded machine it could finish peer 1's copy before the kill landed).
    """
    cut = MiB + 4096

    def root(ctx: RankContext) -> None:
        report = ROOT_BEHAVIOURS["dies_mid_broadcast"](base_path, 3, bytes(9 * MiB), cut)
        kinds = [a.kind for a in report.actions]
        sent = sum(a.nbytes for a in report.actions if a.note.startswith("payload"))
        assert "die" in kinds and sent == cut, report.actions
        os.kill(os.getpid(), signal.SIGKILL)

    def peer(ctx: RankContext) -> PeerClosedError:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank, 3, base_path)
        with pytest.raises(PeerClosedError) as info:
            b.broadcast([bytearray(MiB), bytearray(8 * MiB)])
        return info.value

    r0, p1, p2 = run_ranks({0: root, 1: peer, 2: peer}, **RUN).outcomes
    assert r0.status is Status.SIGNALED and r0.signal == signal.SIGKILL  # the fault happened
    assert p1.ok and p2.ok, f"{p1.report()}\n{p2.report()}"
    e1, e2 = p1.value, p2.value
    for err in (e1, e2):
        assert err.peer == 0 and err.phase == "broadcast"
        assert "read from rank 0 failed" in str(err) and "closed" in str(err)
        assert "Success" not in str(err)
        assert err.bytes_total == 9 * MiB
    assert (e1.bytes_done, e2.bytes_done) == (cut, 0)  # peer 1 got exactly what was sent


def test_sigpipe_at_default_does_not_kill_rank0(base_path: str) -> None:
    def control(ctx: RankContext) -> None:
        """Proves the fault is real: without MSG_NOSIGNAL this process dies."""
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        a, b = socket.socketpair()
        b.close()
        a.send(b"x")  # plain send, no MSG_NOSIGNAL

    def root(ctx: RankContext) -> tuple[object, PeerClosedError]:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as in a C++ engine process
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 2, base_path)
        # 4 MiB never fit the socket buffer: rank 0 is still writing when the
        # peer dies (or starts after it died); either way the write hits EPIPE.
        with pytest.raises(PeerClosedError) as info:
            b.broadcast(bytearray(4 * MiB))
        return signal.getsignal(signal.SIGPIPE), info.value

    def peer(ctx: RankContext) -> None:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base_path)
        os.kill(os.getpid(), signal.SIGKILL)  # dies without any teardown

    ctl, r0, r1 = run_ranks({0: control, 1: root, 2: peer}, **RUN).outcomes
    assert ctl.status is Status.SIGNALED and ctl.signal == signal.SIGPIPE
    assert r1.status is Status.SIGNALED and r1.signal == signal.SIGKILL
    assert r0.ok, r0.report()  # rank 0 survived and raised
    disposition, err = r0.value
    assert disposition == signal.SIG_DFL
    assert err.errno_name in {"EPIPE", "ECONNRESET"} and err.peer == 1
    assert "closed" in str(err)


def test_io_deadline_on_rank0(base_path: str) -> None:

    def root(ctx: RankContext) -> BroadcastTimeoutError:
        b = CpuTpBroadcaster(fast_config(io_timeout=0.5))
        b.initialize(0, 2, base_path)
        try:
            with pytest.raises(BroadcastTimeoutError) as info:
                b.broadcast(bytearray(8 * MiB))  # the peer never reads
        finally:
            ctx.notify("root_done")
        with pytest.raises(BrokenBroadcasterError):
            b.broadcast(bytearray(1))
        b.reset()
        b.reset()
        return info.value

    def peer(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base_path)
        ctx.wait("root_done")  # alive, connected, not reading
        b.reset()
        return True

    err, ok = run_ranks({0: root, 1: peer}, **RUN).values()
    assert ok
    assert err.phase == "broadcast" and err.peer == 1 and err.errno_name == "ETIMEDOUT"
    assert err.bytes_total == 8 * MiB
    assert err.bytes_done is not None and 0 < err.bytes_done < 8 * MiB
    assert err.elapsed is not None and 0.5 <= err.elapsed < 3


def test_io_deadline_on_a_peer(base_path: str) -> None:

    def root(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 2, base_path)
        ctx.wait("peer_done")  # alive, connected, not sending
        b.reset()
        return True

    def peer(ctx: RankContext) -> BroadcastTimeoutError:
        b = CpuTpBroadcaster(fast_config(io_timeout=0.5))
        b.initialize(1, 2, base_path)
        try:
            with pytest.raises(BroadcastTimeoutError) as info:
                b.broadcast(bytearray(16 * MiB))
        finally:
            ctx.notify("peer_done")
        assert b.statistics().broken
        return info.value

    ok, err = run_ranks({0: root, 1: peer}, **RUN).values()
    assert ok
    assert err.peer == 0 and err.rank == 1 and err.bytes_done == 0
    assert err.bytes_total == 16 * MiB and "read from rank 0" in str(err)


def test_signal_storm_during_broadcast_is_harmless(base_path: str) -> None:
    """EINTR everywhere: a 1 ms interval timer interrupts every blocking call."""

    def rank_main(ctx: RankContext) -> tuple[int, bool]:
        rank = ctx.rank
        hits = [0]

        def on_alarm(_sig: int, _frame: object) -> None:
            hits[0] += 1

        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
        try:
            b = CpuTpBroadcaster(fast_config())
            b.initialize(rank, 3, base_path)
            expected = bytes(range(256)) * (32 * 1024)  # 8 MiB
            for _ in range(3):
                buf = bytearray(expected) if rank == 0 else bytearray(len(expected))
                b.broadcast(buf)
                assert buf == expected
            b.reset()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
        return hits[0], True

    results = run_ranks(rank_main, 3, **RUN).values()
    assert all(ok for _, ok in results)
    assert sum(h for h, _ in results) > 0  # the signals really arrived


@pytest.mark.skipif(os.geteuid() != 0, reason="a peer of another uid needs setuid (root)")
def test_permission_denied_on_connect_fails_fast(base_path: str) -> None:
    """EACCES does not heal by waiting: no 120 s of retries (upstream retries it)."""

    def root(ctx: RankContext) -> bool:
        listener = wire.listen(wire.socket_path(base_path), 1)  # in our 0700 dir, as root
        ctx.notify("ready")
        ctx.wait("done")
        listener.close()
        return True

    def peer(ctx: RankContext) -> tuple[str, float]:
        ctx.wait("ready")
        os.setgid(65534)
        os.setuid(65534)
        b = CpuTpBroadcaster(fast_config(connect_timeout=30.0))
        start = time.monotonic()
        try:
            b.initialize(1, 2, base_path)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}", time.monotonic() - start
        finally:
            ctx.notify("done")
        return "joined", 0.0

    ok, (text, took) = run_ranks({0: root, 1: peer}, **RUN).values()
    assert ok
    assert text.startswith("SecurityError") and "(EACCES)" in text
    assert took < 5.0


def test_joined_peer_dying_fails_rank0_before_the_init_deadline(base_path: str) -> None:
    """Peer 1 announces itself and dies while rank 0 still waits for peer 2."""

    def raw_peer1(ctx: RankContext) -> bool:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, wire.pack_rank(1), deadline)
        sock.close()  # the fault: gone before the probe
        return True

    ranks = {0: _root_expecting_failure(base_path, 3, init_timeout=6.0), 1: raw_peer1}
    (err, fds_restored, clean), gone = run_ranks(ranks, **RUN).values()
    assert gone is True
    assert isinstance(err, PeerClosedError)
    assert err.peer == 1 and err.phase == "accept"
    assert err.elapsed is not None and err.elapsed < 3.0  # not the 6 s init deadline
    assert "peer 1" in str(err)
    assert fds_restored and clean


def test_joined_peer_talking_before_the_probe_is_refused(base_path: str) -> None:
    def raw_peer1(ctx: RankContext) -> bytes:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, wire.pack_rank(1) + b"junk", deadline)
        return rest_until_closed(sock)

    ranks = {0: _root_expecting_failure(base_path, 3, init_timeout=6.0), 1: raw_peer1}
    (err, fds_restored, clean), rest = run_ranks(ranks, **RUN).values()
    assert rest == b""
    assert isinstance(err, HandshakeError)
    assert "peer 1" in str(err) and "unexpected byte" in str(err)
    assert fds_restored and clean


def test_peer_reconnects_when_a_stale_listener_drops_it(base_path: str) -> None:
    """A previous incarnation's listener closes with our connection still pending:
    the peer connects again (within its connect deadline) and joins the new rank 0."""

    def root(ctx: RankContext) -> bytes:
        old = wire.listen(wire.socket_path(base_path), 1)
        ready, _, _ = select.select([old], [], [], 10)  # the peer is pending in the backlog
        assert ready, "the peer never connected to the old listener"
        old.close()  # the fault: pending connection reset
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 2, base_path)  # replaces the stale socket file
        buf = bytearray(b"second")
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    def peer(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base_path)
        buf = bytearray(6)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    assert run_ranks({0: root, 1: peer}, **RUN).values() == [b"second", b"second"]
