"""Faults against the C broadcaster: rogue wire partners, dead peers, deadlines, paths.

Each test first proves the fault happened (the rogue sent its bytes, the peer
process is gone, the file is there), then judges the reaction.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import stat
import time

import pytest

from tpbcast.conformance.adapters.native import NativeBroadcastError
from tpbcast.harness import Status, run_ranks, wire

from . import _ranks


def _named(details, *, rank):
    """Every error names its rank and never blames errno 0 ("Success")."""
    assert "Success" not in details["message"], details["message"]
    assert details["message"].startswith(f"rank {rank} "), details["message"]
    assert details["rank"] == rank
    return details


def _init_error(rank, world, base, **deadlines):
    b = _ranks.native(**deadlines)
    start = time.monotonic()
    try:
        b.initialize(rank, world, base)
    except NativeBroadcastError as exc:
        details = _ranks.error_details(exc)
        details["wall"] = time.monotonic() - start
        details["initialized"] = b.is_initialized()
        details["socket_left"] = os.path.exists(base + "_0.sock")
        return details
    return None


# -- the C peer against a rogue root -------------------------------------------------


@pytest.mark.parametrize(
    ("probe", "needle"), [(b"\x13", "expected probe 0x5a, got 0x13"), (b"", "peer closed")]
)
def test_peer_rejects_a_wrong_or_missing_probe(probe, needle, base_path):
    path = base_path + "_0.sock"

    def rogue_root(ctx):
        deadline = wire.Deadline.after(_ranks.SHORT)
        with wire.listen(path, 8) as srv, wire.accept(srv, deadline) as conn:
            announced = wire.recv_exact(conn, 4, deadline)
            if probe:
                wire.send_all(conn, probe, deadline)
                return announced, wire.recv_until_eof(conn, deadline)  # peer hangs up
            return announced, b""  # close without a probe

    ranks = {0: rogue_root, 1: lambda ctx: _init_error(1, 2, base_path)}
    (announced, after), details = run_ranks(ranks, **_ranks.RUN).values()
    assert announced == wire.pack_rank(1), "the rogue root never saw the handshake"
    assert details is not None, "the peer accepted a bad probe"
    _named(details, rank=1)
    assert details["type"] == "NativeHandshakeError" and needle in details["message"]
    assert details["phase"] == "probe" and not details["initialized"]
    assert after == b""


def test_peer_times_out_when_the_probe_never_comes(base_path):
    path = base_path + "_0.sock"

    def rogue_root(ctx):
        deadline = wire.Deadline.after(_ranks.SHORT)
        with wire.listen(path, 8) as srv, wire.accept(srv, deadline) as conn:
            return wire.recv_exact(conn, 4, deadline), wire.recv_until_eof(conn, deadline)

    ranks = {0: rogue_root, 1: lambda ctx: _init_error(1, 2, base_path, init=0.3)}
    (announced, _), details = run_ranks(ranks, **_ranks.RUN).values()
    assert announced == wire.pack_rank(1)
    _named(details, rank=1)
    assert details["type"] == "NativeTimeoutError" and "TimeoutError" in details["mro"]
    assert details["errno_name"] == "ETIMEDOUT" and "waiting for probe" in details["message"]
    assert 0.3 <= details["wall"] < 10.0


def test_peer_connect_deadline_names_the_errno(base_path):
    [details] = run_ranks(
        lambda ctx: _init_error(1, 2, base_path, connect=0.3), 1, **_ranks.RUN
    ).values()
    _named(details, rank=1)
    assert details["type"] == "NativeTimeoutError" and details["phase"] == "connect"
    assert details["errno_name"] == "ENOENT" and base_path + "_0.sock" in details["message"]
    assert 0.3 <= details["wall"] < 10.0


# -- the C root against rogue peers --------------------------------------------------


@pytest.mark.parametrize(
    ("world", "sends", "needle"),
    [
        (2, [wire.pack_rank(-1)], "bad peer rank -1"),
        (2, [wire.pack_rank(0)], "bad peer rank 0"),
        (2, [wire.pack_rank(2)], "bad peer rank 2"),
        (3, [wire.pack_rank(1), wire.pack_rank(1)], "duplicate peer rank 1"),
        (2, [b"\x01\x00"], "peer closed"),
    ],
    ids=["minus-one", "zero", "world-size", "duplicate", "truncated"],
)
def test_root_never_accepts_a_bad_peer(world, sends, needle, base_path):
    path = base_path + "_0.sock"

    def rogue_peer(ctx, data, index):
        if index:
            ctx.wait("first_in")  # the duplicate arrives second, after a valid rank 1
        deadline = wire.Deadline.after(_ranks.SHORT)
        with wire.connect(path, deadline) as s:
            wire.send_all(s, data, deadline)
            if not index and len(sends) > 1:
                ctx.notify("first_in")
            if len(data) < 4:
                s.shutdown(socket.SHUT_WR)
            return wire.recv_until_eof(s, deadline)  # no probe may ever arrive

    ranks = {0: lambda ctx: _init_error(0, world, base_path)}
    for i, d in enumerate(sends):
        ranks[i + 1] = lambda ctx, d=d, i=i: rogue_peer(ctx, d, i)
    details, *heard = run_ranks(ranks, **_ranks.RUN).values()
    assert details is not None, "rank 0 accepted a bad peer"
    _named(details, rank=0)
    assert details["type"] == "NativeHandshakeError" and needle in details["message"]
    assert details["wall"] < _ranks.SHORT / 2, "rejection waited for the deadline"
    assert not details["initialized"] and not details["socket_left"]
    assert heard == [b""] * len(sends), "a rogue peer was sent the probe"


def test_root_times_out_waiting_for_peers_and_cleans_up(base_path):
    [details] = run_ranks(
        lambda ctx: _init_error(0, 3, base_path, init=0.3), 1, **_ranks.RUN
    ).values()
    _named(details, rank=0)
    assert details["type"] == "NativeTimeoutError" and "0 of 2 connected" in details["message"]
    assert "missing rank(s) 1, 2" in details["message"], details["message"]
    assert 0.3 <= details["wall"] < 10.0 and not details["socket_left"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_root_rejects_a_peer_of_another_uid(base_path, short_dir):
    path = base_path + "_0.sock"
    os.chmod(short_dir, 0o711)

    def foreign_peer(ctx):
        deadline = time.monotonic() + _ranks.SHORT
        while not (os.path.exists(path) and stat.S_IMODE(os.stat(path).st_mode) == 0o600):
            assert time.monotonic() < deadline, "rank 0 never bound its socket"
            time.sleep(0.01)  # polling a file with a deadline
        os.chmod(path, 0o666)  # open the door the 0600 closed, to reach SO_PEERCRED
        os.setuid(65534)
        deadline = wire.Deadline.after(_ranks.SHORT)
        with wire.connect(path, deadline) as s:
            try:  # rank 0 may hang up before reading the rank: that is the point
                wire.send_all(s, wire.pack_rank(1), deadline)
                return wire.recv_until_eof(s, deadline)
            except wire.WireClosedError as exc:  # EPIPE or ECONNRESET on the send
                if exc.how != "closed":
                    raise
                return b""

    ranks = {0: lambda ctx: _init_error(0, 2, base_path), 1: foreign_peer}
    details, heard = run_ranks(ranks, **_ranks.RUN).values()
    _named(details, rank=0)
    assert details["type"] == "NativeSecurityError" and "PermissionError" in details["mro"]
    assert "uid 65534" in details["message"] and heard == b""


# -- a partner dies ------------------------------------------------------------------


@pytest.mark.parametrize("dying", [1, 2])
def test_dead_peer_gives_epipe_not_sigpipe(dying, base_path):
    data = _ranks.payload(5, 1 << 20)

    def root(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a write must not kill us
        b = _ranks.native()
        b.initialize(0, 3, base_path)
        _ranks.wait_until_a_rank_ends(ctx, "gone")  # the dying peer's process has exited
        try:
            b.broadcast(bytearray(data))
        except NativeBroadcastError as exc:
            details = _ranks.error_details(exc)
        else:
            details = None
        try:
            b.broadcast(bytearray(data))
        except NativeBroadcastError as exc:
            details["again"] = type(exc).__name__
        b.reset()  # survivors see the root hang up
        return details, signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL

    def peer(ctx):
        b = _ranks.native()
        b.initialize(ctx.rank, 3, base_path)
        if ctx.rank == dying:
            return "died"
        buf = bytearray(len(data))
        try:
            b.broadcast(buf)
        except NativeBroadcastError as exc:
            return _ranks.error_details(exc)
        return bytes(buf) == data

    out = run_ranks({0: root, 1: peer, 2: peer}, **_ranks.RUN)
    assert out.outcomes[0].status is Status.OK, out.report()  # not killed by SIGPIPE
    (details, sigpipe_default), first, second = out.values()
    assert sigpipe_default
    assert (first, second)[dying - 1] == "died"
    _named(details, rank=0)
    assert details["type"] == "NativePeerClosedError" and details["peer"] == dying
    assert details["errno_name"] in ("EPIPE", "ECONNRESET")
    assert f"write to peer {dying}" in details["message"]
    assert details["again"] == "NativeBrokenError"
    survivor = (first, second)[2 - dying]
    if dying == 2:
        assert survivor is True, "peer 1 is written before peer 2 and must get the bytes"
    else:
        _named(survivor, rank=2)
        assert survivor["type"] == "NativePeerClosedError" and survivor["errno_name"] is None
        assert "peer closed (EOF)" in survivor["message"]


def test_root_dying_mid_broadcast_gives_peer_closed_with_byte_count(base_path):
    path = base_path + "_0.sock"

    def rogue_root(ctx):
        deadline = wire.Deadline.after(_ranks.SHORT)
        with wire.listen(path, 8) as srv, wire.accept(srv, deadline) as conn:
            announced = wire.recv_exact(conn, 4, deadline)
            # probe, then 1000 of 4096 bytes
            wire.send_all(conn, bytes([wire.PROBE]) + b"p" * 1000, deadline)
            return announced

    def peer(ctx):
        b = _ranks.native()
        b.initialize(1, 2, base_path)
        try:
            b.broadcast(bytearray(4096))
        except NativeBroadcastError as exc:
            return _ranks.error_details(exc)
        return None

    announced, details = run_ranks({0: rogue_root, 1: peer}, **_ranks.RUN).values()
    assert announced == wire.pack_rank(1)
    _named(details, rank=1)
    assert details["type"] == "NativePeerClosedError" and "peer closed" in details["message"]
    assert (details["bytes_done"], details["bytes_total"]) == (1000, 4096)
    assert "1000/4096 bytes" in details["message"] and details["peer"] == 0


def test_io_deadline_on_a_stalled_root(base_path):

    def root(ctx):
        b = _ranks.native()
        b.initialize(0, 2, base_path)
        ctx.wait("peer_done")  # alive but never broadcasting
        b.reset()
        return True

    def peer(ctx):
        b = _ranks.native(io=0.3)
        b.initialize(1, 2, base_path)
        start = time.monotonic()
        try:
            b.broadcast(bytearray(4096))
        except NativeBroadcastError as exc:
            details = _ranks.error_details(exc)
            details["wall"] = time.monotonic() - start
        finally:
            ctx.notify("peer_done")
        return details

    _, details = run_ranks({0: root, 1: peer}, **_ranks.RUN).values()
    _named(details, rank=1)
    assert details["type"] == "NativeTimeoutError" and details["errno_name"] == "ETIMEDOUT"
    assert details["phase"] == "broadcast" and 0.3 <= details["wall"] < 10.0


# -- what is at the socket path ------------------------------------------------------


@pytest.mark.parametrize("kind", ["regular file", "symlink", "directory"])
def test_root_refuses_to_replace_a_non_socket(kind, base_path, short_dir):
    path = base_path + "_0.sock"
    target = os.path.join(short_dir, "precious")
    with open(target, "w") as f:
        f.write("keep me")
    if kind == "regular file":
        with open(path, "w") as f:
            f.write("keep me")
    elif kind == "symlink":
        os.symlink(target, path)
    else:
        os.mkdir(path)
    before = os.lstat(path)
    [details] = run_ranks(lambda ctx: _init_error(0, 2, base_path), 1, **_ranks.RUN).values()
    _named(details, rank=0)
    assert details["type"] == "NativeSecurityError" and f"a {kind} at" in details["message"]
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    with open(target) as f:
        assert f.read() == "keep me"


# -- fd hygiene ----------------------------------------------------------------------


def _socket_fds():
    out = {}
    for fd in _ranks.open_fds():
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out[fd] = target
    return out


def test_every_socket_is_cloexec_and_a_failed_init_leaks_none(base_path):
    def rank(ctx):
        r = ctx.rank
        before = _socket_fds()
        b = _ranks.native()
        b.initialize(r, 2, base_path)
        mine = {fd: fcntl.fcntl(fd, fcntl.F_GETFD) for fd in _socket_fds() if fd not in before}
        b.reset()
        after_reset = set(_socket_fds()) - set(before)
        failed = _init_error(r, 2, f"{base_path}-alone{r}", connect=0.2, init=0.2)
        after_failure = set(_socket_fds()) - set(before)
        return mine, after_reset, failed["type"], after_failure

    (root_fds, *root_rest), (peer_fds, *peer_rest) = run_ranks(rank, 2, **_ranks.RUN).values()
    assert len(root_fds) == 2 and len(peer_fds) == 1, (root_fds, peer_fds)  # listener + link
    assert all(flags & fcntl.FD_CLOEXEC for flags in [*root_fds.values(), *peer_fds.values()])
    assert root_rest == [set(), "NativeTimeoutError", set()]
    assert peer_rest == [set(), "NativeTimeoutError", set()]


def test_control_a_plain_send_to_a_dead_peer_is_killed_by_sigpipe():
    """Shows the SIGPIPE tests above can fail: without MSG_NOSIGNAL the process dies."""

    def body(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        a, b = socket.socketpair()
        b.close()
        a.send(b"x" * 65536)  # Python's send has no MSG_NOSIGNAL
        return "survived"

    [out] = run_ranks(body, 1, **_ranks.RUN).outcomes
    assert out.status is Status.SIGNALED and out.signal == signal.SIGPIPE, out.report()
