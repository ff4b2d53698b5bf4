"""Rank 0's bootstrap, pinned where mutation testing found it unchecked (``nox -s mutation``).

What an operator sees: the probe write's error fields, a bind failure that is not a
name in use, the listen backlog (how many connections wait while rank 0 is stopped),
and a reset that survives a link fd closed behind the broadcaster's back.  Peers are
threads speaking wire v1 (tpbcast.harness.wire); where a rank must run as another uid
or be stopped by a signal it is forked with tpbcast.harness.run_ranks.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import time
from collections.abc import Callable

import pytest

from tpbcast.harness import RankContext, run_ranks, wire
from tpbcast.harness.env import as_foreign_uid
from tpbcast.reference_impl import (
    BroadcasterConfig,
    BroadcastError,
    CpuTpBroadcaster,
    HandshakeError,
    PeerClosedError,
)

from ._helpers import in_thread


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout:g} s"
        time.sleep(0.005)  # polling with a deadline: another process must get there


def test_a_probe_rank_0_cannot_write_names_the_peer_and_the_probe_phase(base_path: str) -> None:
    """Peer 1 shuts down its reading side, then announces its rank: rank 0 sees no hang-up
    while it waits (SHUT_RD wakes no POLLIN on its end) but its probe write fails (EPIPE).
    The error names rank 0, peer 1, the probe phase, the path and what was written to whom.

    Kills _bootstrap.x_bootstrap_root mutants 87 (no deadline), 88 (no Site), 94 and 104
    (rank), 95 (peer), 96, 105, 106 (phase), 97 (path), 98 (who).
    """
    path = base_path + "_0.sock"
    done = threading.Event()

    def deaf_peer() -> None:
        sock = wire.connect(path, wire.Deadline.after(10.0))
        with sock:
            sock.shutdown(socket.SHUT_RD)  # the fault, before rank 0 can read our rank
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(10.0))
            done.wait(10.0)  # keep the write side open until rank 0 has failed

    thread = in_thread(deaf_peer)
    root = CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0))
    try:
        with pytest.raises(BroadcastError) as info:
            root.initialize(0, 2, base_path)
    finally:
        done.set()
        thread.join(10.0)
        root.reset()
    err = info.value
    assert type(err) is PeerClosedError, repr(err)
    assert (err.rank, err.peer, err.phase, err.errno_name) == (0, 1, "probe", "EPIPE")
    assert (err.path, err.action) == (path, "write to peer 1")
    assert (err.bytes_done, err.bytes_total) == (0, 1) and err.elapsed is not None
    assert not os.path.lexists(path)


def test_a_bind_that_fails_for_another_reason_than_a_name_in_use_says_so(
    short_dir: str, base_path: str
) -> None:
    """Rank 0 in a directory it may enter but not write (mode 0511; run as root, the rank
    becomes nobody, since root may write anywhere): bind fails with EACCES, a plain
    BroadcastError quoting strerror -- not the SecurityError "another process holds this
    socket name" of EADDRINUSE.

    Kills _bootstrap.x_bootstrap_root mutants 46 (always SecurityError) and 48 (always the
    name-in-use message).
    """
    os.chmod(short_dir, 0o511)

    def rank_0(ctx: RankContext) -> tuple[object, ...]:
        if os.geteuid() == 0:
            as_foreign_uid()
        config = BroadcasterConfig(init_timeout=5.0, verify_socket_dir=False)
        try:
            CpuTpBroadcaster(config).initialize(0, 2, base_path)
        except BroadcastError as exc:
            return (type(exc).__name__, exc.reason, exc.rank, exc.phase, exc.errno_name, exc.path)
        return ("no error",)

    try:
        (seen,) = run_ranks(rank_0, 1, timeout=30.0).values()
    finally:
        os.chmod(short_dir, 0o700)
    assert seen == (
        "BroadcastError",
        f"bind failed: {os.strerror(errno.EACCES)}",
        0,
        "bind",
        "EACCES",
        base_path + "_0.sock",
    )
    assert os.listdir(short_dir) == []


def _listening(path: str) -> bool:
    """A listening socket (flag __SO_ACCEPTCON, 0x10000) is bound at ``path`` (/proc/net/unix)."""
    with open("/proc/net/unix") as fh:
        for line in fh:
            fields = line.split(maxsplit=7)
            if len(fields) == 8 and fields[7].strip() == path and int(fields[3], 16) & 0x10000:
                return True
    return False


def _stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (state T)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                return False
    return True


def _queued(path: str, limit: int) -> int:
    """How many non-blocking connects to ``path`` succeed before one fails (EAGAIN)."""
    socks: list[socket.socket] = []
    try:
        while len(socks) < limit:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            try:
                sock.connect(path)
            except BlockingIOError:
                sock.close()
                break
            socks.append(sock)
        return len(socks)
    finally:
        for sock in socks:
            sock.close()


def test_rank_0_listens_with_a_backlog_of_world_size_minus_1() -> None:
    """DESIGN.md wire step 1 / WIRE-10: listen(world_size - 1).  Rank 0 of a world of 3 is
    stopped (SIGSTOP) as soon as it listens, before anyone connects; Linux then queues
    backlog + 1 connections on the Unix listener (measured: listen(n) queues n + 1), so
    exactly 3 non-blocking connects succeed and the 4th fails with EAGAIN.  Resumed, rank
    0 reads EOF on the first (closed) connection and fails naming it.

    Kills _bootstrap.x_bootstrap_root mutants 66 (world_size + 1: 5 queued) and 67
    (world_size - 2: 2 queued).
    """
    world = 3

    def root(ctx: RankContext) -> str:
        pid_file = os.path.join(ctx.workdir, "pid0")
        with open(pid_file + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=20.0))
        try:
            bcast.initialize(0, world, ctx.base_path)
        except BroadcastError as exc:
            return type(exc).__name__
        finally:
            bcast.reset()
        return "initialized"

    def measurer(ctx: RankContext) -> int:
        pid_file = os.path.join(ctx.workdir, "pid0")
        path = ctx.base_path + "_0.sock"
        _wait_until(lambda: os.path.exists(pid_file), "rank 0 wrote no pid file")
        with open(pid_file) as fh:
            pid0 = int(fh.read())
        os.unlink(pid_file)
        _wait_until(lambda: _listening(path), f"rank 0 did not listen at {path}")
        os.kill(pid0, signal.SIGSTOP)
        try:
            _wait_until(lambda: _stopped(pid0), "rank 0 did not stop")
            return _queued(path, limit=2 * world + 2)
        finally:
            os.kill(pid0, signal.SIGCONT)

    result = run_ranks({0: root, 1: measurer}, timeout=60.0)
    assert result.values() == [HandshakeError.__name__, world], result


def test_reset_survives_a_link_fd_closed_behind_the_broadcasters_back(base_path: str) -> None:
    """The process closed rank 0's link fd itself (white-box: os.close on its fileno, as a
    close-every-fd helper would): reset() still succeeds -- the EBADF of closing that
    socket again is swallowed -- and releases the socket file and the abort pipe.

    Kills _bootstrap.x_close_quietly mutant 1 (suppress(None): TypeError on the EBADF).
    """
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0)
    root, peer = CpuTpBroadcaster(config), CpuTpBroadcaster(config)
    thread = in_thread(lambda: root.initialize(0, 2, base_path))
    try:
        peer.initialize(1, 2, base_path)
        thread.join(10.0)
        assert root.is_initialized()
        links = root._links
        link = links.peers[1]
        assert link is not None
        os.close(link.fileno())  # the fault: the fd is gone, the socket object does not know
        root.reset()
        assert not root.is_initialized() and not os.path.lexists(base_path + "_0.sock")
        assert (links.peers, links.abort_r, links.abort_w) == ([None, None], -1, -1)
    finally:
        peer.reset()
        root.reset()
