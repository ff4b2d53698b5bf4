"""TIME: every wait has a deadline, and the deadline follows its setting.

A deadline is judged at two settings side by side (:data:`_LOW` and :data:`_HIGH`, two
groups of one test run at once): the time to fail must lie within
[EARLY * d, d + MARGIN] for each, AND grow with the setting by at least :data:`_FOLLOW` of
the difference.  One window alone admits an implementation that ignores the setting and
uses a constant of its own (3 s passes [0.4 s, 3.5 s]); two settings do not, whatever the
constant.  A wait that an implementation with no such deadline would never leave is
released by the suite itself after the bound it judges (a rogue's observation window
ends, a watcher connects or stands in for rank 0: ``_watch``), so the clause ends FAIL,
promptly, instead of ERROR at the group deadline.
"""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import threading
import time

import pytest

from tpbcast.conformance.plugin import Unsupported, require
from tpbcast.harness import env, wire
from tpbcast.harness.rogue import rogue_peer, rogue_root

from . import _support as s
from . import _watch

# Two settings of one deadline, judged side by side: far enough apart that the time to
# fail must visibly follow the setting, short enough to keep the suite fast.
_LOW, _HIGH = 0.3, 1.5
_DEADLINES = (_LOW, _HIGH)
# The time to fail at _HIGH must exceed that at _LOW by this share of (_HIGH - _LOW):
# 0.6 s here, so a late wake-up of up to 0.6 s at _LOW on a loaded machine still passes.
_FOLLOW = 0.5
# io=inf: the suite's slow root sends only after this long, beyond every deadline a test
# sets here and beyond a 3 s constant an implementation might use instead (1 s of slack).
_FOREVER = 4.0


class _Pair:
    """Rank ``ctx.rank`` of a ``2 * size`` group, seen as rank ``ctx.rank % size`` of
    sub-group ``ctx.rank // size``: two groups side by side in one test, each with its
    own base path and its own sync names, group 0 judged at :data:`_LOW`, group 1 at
    :data:`_HIGH` (``deadline``).  Rogue targets accept it as their context."""

    def __init__(self, ctx, size):
        self.ctx = ctx
        self.group = ctx.rank // size
        self.rank = ctx.rank % size
        self.world_size = size
        self.base_path = f"{ctx.base_path}{self.group}"
        self.workdir = ctx.workdir
        self.seed = ctx.seed
        self.deadline = _DEADLINES[self.group]

    def notify(self, name):
        self.ctx.notify(f"g{self.group}.{name}")

    def wait(self, name, timeout=None):
        self.ctx.wait(f"g{self.group}.{name}", timeout=timeout)

    def record(self, kind, /, **details):
        return self.ctx.record(kind, **details)


def _in_window(raised, deadline, cid, what, *, rank, note=""):
    """``rank``'s call raised within [EARLY * deadline, deadline + MARGIN] (soft checks).

    ``note`` is added to a failure's observation (e.g. that the suite released the call).
    """
    if not s.check(cid, raised is not None, f"{what} fails", f"it returned{note}", rank=rank):
        return False
    low, high = s.EARLY * deadline, deadline + s.MARGIN
    return s.check(
        cid,
        low <= raised.elapsed <= high,
        f"{what} fails within its {deadline}s deadline (+{s.MARGIN}s margin), not before "
        f"{low:.2f}s",
        f"{raised}{note}",
        rank=rank,
    )


def _follows(cid, what, raised, *, ranks):
    """``raised[g]`` (on rank ``ranks[g]``) is what the call raised with its deadline set
    to ``_DEADLINES[g]``: each in its window, and the time to fail follows the setting."""
    inside = [
        _in_window(r, d, cid, f"{what} (deadline {d}s)", rank=rank)
        for r, d, rank in zip(raised, _DEADLINES, ranks, strict=True)
    ]
    if not all(inside):
        return False
    low, high = raised
    need = _FOLLOW * (_HIGH - _LOW)
    return s.check(
        cid,
        high.elapsed - low.elapsed >= need,
        f"{what}: the time to fail follows the configured deadline (with {_HIGH}s it must "
        f"take at least {need:.2f}s longer than with {_LOW}s; a deadline of its own that "
        "ignores the setting does not)",
        f"{low.elapsed:.2f}s with {_LOW}s, {high.elapsed:.2f}s with {_HIGH}s",
        rank=ranks[1],
    )


def _names(raised, text, attr=None):
    """The error names ``text``: in its message, or (error_details) as an attribute."""
    if text in raised.message:
        return True
    return attr is not None and str(raised.attrs.get(attr)) == text


def _released(flag):
    return "; the suite released the call after its bound" if flag else ""


@pytest.mark.clause("TIME-1")
@pytest.mark.staged_via("uds-v1")
def test_peer_that_never_arrives(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "deadlines")
    release_after = s.SHORT + s.MARGIN + 0.5

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 1:
            # Not a peer: the suite's watcher.  A rank 0 with no accept deadline is
            # released by a connection that closes at once, after the bound judged.
            late = _watch.unfinished(ctx, ["root_done"], release_after)
            return bool(late) and _watch.poke(path)
        before = s.fd_table()
        bcast = s.short(tpbcast_impl, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 0, 3, ctx.base_path)
        leaked, sock = s.new_fds(before, bcast), s.kind_of(path)
        ctx.notify("root_done")
        return raised, leaked, sock

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    (raised, leaked, sock), released = (o.value for o in result.outcomes)
    what = "rank 0 waiting for peers 1 and 2"
    _in_window(raised, s.SHORT, "TIME-1", what, rank=0, note=_released(released))
    if raised is None:
        return
    s.check(
        "TIME-1",
        s.mentions(raised, 1) and s.mentions(raised, 2),
        "the error names the missing ranks 1 and 2",
        raised,
        rank=0,
    )
    if tpbcast_impl.supports("error_details"):
        s.check("TIME-1", raised.is_a("TimeoutError"), "a timeout error", raised, rank=0)
    s.check(
        "TIME-1",
        not leaked and sock == "missing",
        "it cleans up as INIT-11 says (no new fd, no socket file)",
        f"new fds {leaked}, a {sock} at the socket path",
        rank=0,
    )


# 0.6: a 0.3 s gap against a 0.5 s per-peer deadline leaves 0.2 s of scheduling
# noise before a per-peer-deadline implementation would time out too (and pass unjudged).
_STAGGER = 0.6


@pytest.mark.clause("TIME-2")
def test_one_init_deadline_not_one_per_peer(tpbcast_run, tpbcast_impl):
    """Peers arrive one by one, each before a fresh per-peer deadline would expire."""
    require(tpbcast_impl, "deadlines")
    init = s.SHORT

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=init)
            raised = s.attempt(bcast.initialize, 0, 4, ctx.base_path)
            bcast.reset()
            return raised
        if not s.wait_for(lambda: os.path.exists(path), 10):
            return "no socket"
        # The fault: peer k arrives STAGGER * k * init late.  Each gap (STAGGER * init)
        # stays inside a fresh per-peer deadline with room for scheduling noise, while
        # the last peer (3 * STAGGER * init) comes after the one shared deadline.
        time.sleep(_STAGGER * init * ctx.rank)
        try:
            return rogue_peer("handshake", rank=ctx.rank, timeout=0.5, observe=init + s.MARGIN)(
                ctx
            ).probe
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    raised = result.outcomes[0].value
    if not s.check(
        "TIME-2",
        raised is not None,
        "accept + handshake + probe share ONE init deadline (peers trickling in just "
        "inside a fresh per-peer deadline must not stretch the bootstrap)",
        f"rank 0 completed the bootstrap at ~{3 * _STAGGER * init:.1f}s with a {init}s init "
        "deadline",
        rank=0,
    ):
        return
    _in_window(raised, init, "TIME-2", "the bootstrap of rank 0", rank=0)


@pytest.mark.clause("TIME-3")
@pytest.mark.parametrize("at_path", ["nothing", "stale socket"])
def test_root_that_never_listens(tpbcast_run, tpbcast_impl, at_path):
    """Ranks 0 and 1 are peers of two groups whose rank 0 never listens, with connect
    deadlines _LOW and _HIGH; rank 2 stands in for a rank 0 where a peer is still
    connecting after the bound (a peer with no connect deadline), so it ends judged."""
    require(tpbcast_impl, "deadlines")
    release_after = _HIGH + s.MARGIN + 0.5

    def target(ctx):
        if ctx.rank == 2:
            late = _watch.unfinished(ctx, ["g0.done", "g1.done"], release_after)
            paths = [wire.socket_path(f"{ctx.base_path}{name[1]}") for name in late]
            return [path for path in paths if _watch.turn_away_peers(path, 1, timeout=2.0) > 0]
        sub = _Pair(ctx, 1)
        path = wire.socket_path(sub.base_path)
        if at_path == "stale socket":
            env.leave_stale_socket(path)
        bcast = s.make(tpbcast_impl, connect=sub.deadline, init=10.0)
        raised = s.attempt(bcast.initialize, 1, 2, sub.base_path)
        sub.notify("done")
        bcast.reset()
        if at_path == "stale socket" and s.kind_of(path) == "socket":
            os.unlink(path)
        return raised, path

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    (low, path0), (high, path1), released = (o.value for o in result.outcomes)
    _follows("TIME-3", f"a peer facing {at_path} at the path", (low, high), ranks=(0, 1))
    errno_name = "ENOENT" if at_path == "nothing" else "ECONNREFUSED"
    for rank, raised, path in ((0, low, path0), (1, high, path1)):
        if raised is None or path in released:
            continue
        s.check("TIME-3", path in raised.message, "the error names the path", raised, rank=rank)
        s.check(
            "TIME-3",
            _names(raised, errno_name, "errno_name"),
            f"the error names the last connect errno ({errno_name})",
            raised,
            rank=rank,
        )


@pytest.mark.clause("TIME-4")
def test_probe_that_never_comes(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "deadlines")

    def target(ctx):
        if ctx.rank == 0:
            # Its observation window ends the wait of a peer with no init deadline (EOF).
            return rogue_root("never_probes", observe=s.SHORT + s.MARGIN + 1)(ctx)
        bcast = s.make(tpbcast_impl, connect=5.0, init=s.SHORT)
        return s.attempt(bcast.initialize, 1, 2, ctx.base_path)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report, raised = result.outcomes[0].value, result.outcomes[1].value
    s.fault_happened("TIME-4", report.did("withhold_probe"), report.actions)
    _in_window(raised, s.SHORT, "TIME-4", "a peer waiting for a probe that never comes", rank=1)
    s.check(
        "TIME-4",
        report.links[0].reaction.value != "open",
        "the peer gives up its connection",
        report.links[0].reaction,
        rank=1,
    )


@pytest.mark.clause("TIME-5")
@pytest.mark.staged_via("uds-v1")
def test_peer_that_stops_reading(tpbcast_run, tpbcast_impl):
    """Two groups side by side: a root with io _LOW / _HIGH writes 8 MiB to a rogue peer
    that stops reading after 1000 bytes.  The rogue's observation window (deadline +
    MARGIN + 1 s) ends the stall, so a root with no deadline fails late, not never."""
    require(tpbcast_impl, "deadlines")
    size = 8 * s.MiB

    def target(ctx):
        sub = _Pair(ctx, 2)
        if sub.rank == 0:
            bcast = s.make(tpbcast_impl, io=sub.deadline)
            failed = s.attempt(bcast.initialize, 0, 2, sub.base_path)
            s.precondition("TIME-5", failed is None, f"rank 0 could not initialize: {failed}")
            raised = s.attempt(bcast.broadcast, bytearray(size))
            bcast.reset()
            return raised
        return rogue_peer(
            "stall_mid_payload", rank=1, after=1000, observe=sub.deadline + s.MARGIN + 1
        )(sub)

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    raised = (result.outcomes[0].value, result.outcomes[2].value)
    for report in (result.outcomes[1].value, result.outcomes[3].value):
        s.fault_happened("TIME-5", report.did("stall"), report.actions)
    _follows("TIME-5", "a root writing to a peer that stopped reading", raised, ranks=(0, 2))
    if tpbcast_impl.supports("error_details"):
        for rank, r in zip((0, 2), raised, strict=True):
            if r is None:
                continue
            s.check("TIME-5", r.is_a("TimeoutError"), "a timeout error", r, rank=rank)
            attrs = r.attrs
            s.check(
                "TIME-5",
                attrs.get("peer") == 1 and attrs.get("bytes_total") == size,
                f"the error names peer 1 and bytes total ({size})",
                attrs,
                rank=rank,
            )


def _raw_root(ctx, first: bytes, hold: float) -> int:
    """Accept one peer, read its rank, send probe + ``first`` payload bytes, then hold
    the link open for up to ``hold`` s (the stall; its end releases a peer that has no
    deadline)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(wire.socket_path(ctx.base_path))
    srv.listen(1)
    srv.settimeout(10)
    try:
        conn, _ = srv.accept()
        with conn:
            rank = wire.recv_exact(conn, 4, wire.Deadline.after(s.PATIENCE))
            conn.sendall(b"\x5a" + first)
            ctx.record("fault", action=f"root stops after {len(first)} payload byte(s)")
            s.read_window(conn, hold)  # the fault: the root stalls, holding the link open
            return len(rank)
    finally:
        srv.close()
        os.unlink(wire.socket_path(ctx.base_path))


@pytest.mark.clause("TIME-5")
@pytest.mark.staged_via("uds-v1")
def test_root_that_stops_writing(tpbcast_run, tpbcast_impl):
    """Two groups side by side: a peer with io _LOW / _HIGH waits for 1000 bytes from a
    byte-level root that sends 100 and stalls."""
    require(tpbcast_impl, "deadlines")

    def target(ctx):
        sub = _Pair(ctx, 2)
        if sub.rank == 0:
            return _raw_root(sub, b"x" * 100, sub.deadline + s.MARGIN + 1)
        bcast = s.make(tpbcast_impl, connect=5.0, init=5.0, io=sub.deadline)
        failed = s.attempt(bcast.initialize, 1, 2, sub.base_path)
        s.precondition("TIME-5", failed is None, f"the peer could not initialize: {failed}")
        raised = s.attempt(bcast.broadcast, bytearray(1000))
        bcast.reset()
        return raised

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    for root in (result.outcomes[0], result.outcomes[2]):
        s.fault_happened("TIME-5", root.value == 4 and root.faults, root.summary())
    raised = (result.outcomes[1].value, result.outcomes[3].value)
    _follows("TIME-5", "a peer whose root stopped writing", raised, ranks=(1, 3))
    if tpbcast_impl.supports("error_details"):
        for rank, r in zip((1, 3), raised, strict=True):
            if r is None:
                continue
            s.check(
                "TIME-5",
                r.attrs.get("peer") == 0 and r.attrs.get("bytes_done") == 100,
                "the error names rank 0 and bytes done (100 of 1000)",
                r.attrs,
                rank=rank,
            )


@pytest.mark.clause("TIME-6")
def test_deadlines_set_before_initialize_and_io_can_be_disabled(tpbcast_run, tpbcast_impl):
    """Two groups side by side, io _LOW / _HIGH set before initialize: each peer's
    broadcast times out on a root that sends nothing, and the time follows the setting.
    Then, on the same instance (a singleton factory is allowed, ADAPT-4), the _LOW peer
    resets, sets io=inf and initializes again: it must wait for a root that sends only
    after _FOREVER s (longer than any deadline set here, or a constant of 3 s)."""
    require(tpbcast_impl, "deadlines")
    data = s.payload(tpbcast_run.seed, 500, "t6")

    def target(ctx):
        sub = _Pair(ctx, 2)
        forever = sub.group == 0  # this group goes on with io=inf
        bcast = s.make(tpbcast_impl, io=sub.deadline)
        failed = s.attempt(bcast.initialize, sub.rank, 2, sub.base_path)
        s.precondition("TIME-6", failed is None, f"rank {ctx.rank} could not initialize: {failed}")
        if sub.rank == 0:
            # Nothing is sent: the peer must time out.  Waiting for it is bounded here,
            # so a peer with no deadline is released by this reset (EOF), late.
            _watch.notified(sub, "peer_reset", sub.deadline + s.MARGIN + 1)
            bcast.reset()
            if not forever:
                return None
            sub.notify("root_reset")
            failed = s.attempt(bcast.initialize, 0, 2, sub.base_path)
            s.precondition("TIME-6", failed is None, f"rank 0 could not initialize: {failed}")
            sub.wait("peer_waiting", timeout=10)
            time.sleep(_FOREVER)  # the fault: a slow root, beyond every deadline set here
            sent = s.attempt(bcast.broadcast, bytearray(data))
            bcast.reset()
            return sent
        timed_out = s.attempt(bcast.broadcast, bytearray(len(data)))
        bcast.reset()
        if not forever:
            sub.notify("peer_reset")
            return timed_out, None, False
        bcast.set_deadlines(io=math.inf)
        sub.notify("peer_reset")
        sub.wait("root_reset", timeout=10)
        failed = s.attempt(bcast.initialize, 1, 2, sub.base_path)
        s.precondition("TIME-6", failed is None, f"the peer could not initialize: {failed}")
        buf = bytearray(len(data))
        sub.notify("peer_waiting")
        waited = s.timed(bcast.broadcast, buf)
        bcast.reset()
        return timed_out, waited, bytes(buf) == data

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    (low, waited, intact), (high, _, _) = result.outcomes[1].value, result.outcomes[3].value
    _follows(
        "TIME-6", "a peer's broadcast with io set before initialize", (low, high), ranks=(1, 3)
    )
    raised, took = waited
    s.check(
        "TIME-6",
        raised is None and intact,
        f"with io disabled (inf) after reset, before the next initialize, the peer waits "
        f"for a root that sends only after {_FOREVER}s",
        raised if raised is not None else f"it returned after {took:.2f}s with a wrong payload",
        rank=1,
    )


@pytest.mark.clause("TIME-7")
def test_documented_default_deadlines(tpbcast_run, tpbcast_impl):
    """``default_deadlines()`` (an optional member of ``deadlines``) reports finite defaults.

    Waiting out a 120 s default is not a test, so the implementation reports its defaults;
    the reference's documented values (120/120/300) are checked by its own tests.
    """
    require(tpbcast_impl, "deadlines")
    names = ("connect", "init", "io")

    def target(ctx):
        bcast = tpbcast_impl.create()
        report = getattr(bcast, "default_deadlines", None)
        if not callable(report):
            return None
        before = dict(report())
        bcast.set_deadlines(connect=s.SHORT, init=s.SHORT, io=s.SHORT)
        after = dict(report())
        bcast.reset()
        return before, after

    seen = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    if seen is None:
        raise Unsupported(
            f"UNSUPPORTED: implementation {tpbcast_impl.name!r} declares 'deadlines' but has "
            "no default_deadlines() member (optional in that capability), so its defaults "
            "cannot be read through the adapter contract"
        )
    defaults, after = seen
    missing = set(names) - set(defaults)
    s.check(
        "TIME-7",
        not missing,
        "default_deadlines() reports connect, init and io",
        f"missing {missing}",
    )
    for name in set(names) & set(defaults):
        value = defaults[name]
        finite = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        )
        s.check(
            "TIME-7", finite, f"the {name} deadline has a finite default > 0 s", f"{name}={value!r}"
        )
    s.check(
        "TIME-7",
        {n: after.get(n) for n in names} == {n: defaults.get(n) for n in names},
        "set_deadlines changes the deadlines, not the reported defaults",
        after,
    )


def _trickle(base_path, hold):
    """A byte-level peer 1 that reads 4 KiB every 50 ms (the fault: a slow reader) for up
    to ``hold`` s after the probe, then closes; that also releases a root with no
    deadline (EPIPE), which then fails late.  Returns the payload bytes it read."""
    path = wire.socket_path(base_path)
    end = time.monotonic() + 10
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            sock.connect(path)
            break
        except OSError:
            sock.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.01)  # connect retry interval (rank 0 may not listen yet)
    got = 0
    with sock:
        sock.sendall(wire.pack_rank(1))
        wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
        stop = time.monotonic() + hold
        sock.settimeout(hold)
        hangup = select.poll()
        hangup.register(sock, select.POLLIN)
        while time.monotonic() < stop:
            try:
                chunk = sock.recv(4096)
            except OSError:
                break
            if not chunk:
                break
            got += len(chunk)
            # Rank 0 hung up: what is still queued for us is not worth trickling through.
            if any(events & select.POLLHUP for _, events in hangup.poll(0)):
                break
            time.sleep(0.05)  # the fault: a slow reader
    return got


@pytest.mark.clause("TIME-8")
def test_io_deadline_bounds_the_whole_call(tpbcast_run, tpbcast_impl):
    """A peer that reads a trickle (4 KiB every 50 ms) must not stretch one broadcast;
    two groups side by side with io _LOW / _HIGH."""
    require(tpbcast_impl, "deadlines")

    def target(ctx):
        sub = _Pair(ctx, 2)
        if sub.rank == 0:
            bcast = s.make(tpbcast_impl, io=sub.deadline)
            failed = s.attempt(bcast.initialize, 0, 2, sub.base_path)
            s.precondition("TIME-8", failed is None, f"rank 0 could not initialize: {failed}")
            raised = s.attempt(bcast.broadcast, bytearray(8 * s.MiB))
            bcast.reset()
            return raised
        return _trickle(sub.base_path, sub.deadline + s.MARGIN + 1)

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    for got in (result.outcomes[1].value, result.outcomes[3].value):
        s.precondition("TIME-8", got > 0, "the trickle never started")
    raised = (result.outcomes[0].value, result.outcomes[2].value)
    _follows("TIME-8", "a broadcast to a trickling reader", raised, ranks=(0, 2))


@pytest.mark.clause("TIME-9")
@pytest.mark.staged_via("uds-v1")
def test_signals_neither_break_nor_extend_waits(tpbcast_run, tpbcast_impl):
    data = s.payload(tpbcast_run.seed, 3000, "t9")

    def storm(pid, seconds):
        end = time.monotonic() + seconds
        sent = 0
        while time.monotonic() < end:
            os.kill(pid, signal.SIGUSR1)
            sent += 1
            time.sleep(0.002)
        return sent

    def target(ctx):
        signal.signal(signal.SIGUSR1, lambda *_: None)
        s.publish_pid(ctx)
        ctx.sync("pids")
        other_pid = s.published_pid(ctx, 1 - ctx.rank, "TIME-9")
        bcast = s.make(tpbcast_impl, connect=20.0, init=20.0, io=20.0)
        if ctx.rank == 1:
            # Rank 0 is inside initialize once its socket exists (it waits to accept):
            # storm it only then, so the signals land in the wait under test.
            listening = s.wait_for(lambda: os.path.exists(wire.socket_path(ctx.base_path)), 10)
            s.precondition(
                "TIME-9", listening, "rank 0 never listened: the storm would hit nothing"
            )
            sent = storm(other_pid, 0.5)
            bcast.initialize(1, 2, ctx.base_path)
            buf = bytearray(len(data))
            ctx.notify("peer_in_broadcast")
            bcast.broadcast(buf)
            bcast.reset()
            return sent, bytes(buf) == data
        bcast.initialize(0, 2, ctx.base_path)
        ctx.wait("peer_in_broadcast", timeout=10)
        sent = storm(other_pid, 0.5)  # rank 1 waits in broadcast meanwhile
        bcast.broadcast(bytearray(data))
        bcast.reset()
        return sent, True

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        sent, intact = outcome.value
        s.precondition("TIME-9", sent > 10, "the signal storm did not happen")
        s.check(
            "TIME-9",
            intact,
            "initialize and broadcast survive a SIGUSR1 storm (EINTR)",
            outcome,
            rank=outcome.rank,
        )


@pytest.mark.clause("TIME-9")
@pytest.mark.staged_via("uds-v1")
def test_signals_do_not_extend_the_deadline(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "deadlines")
    release_after = s.SHORT + s.MARGIN + 0.5

    def target(ctx):
        if ctx.rank == 1:
            # Not a peer: the suite's watcher, releasing a rank 0 whose wait has no end.
            late = _watch.unfinished(ctx, ["root_done"], release_after)
            return bool(late) and _watch.poke(wire.socket_path(ctx.base_path))
        signal.signal(signal.SIGUSR1, lambda *_: None)
        main = threading.main_thread().ident or 0
        stop = threading.Event()
        sent = []

        def storm():
            while not stop.is_set():
                signal.pthread_kill(main, signal.SIGUSR1)
                sent.append(1)
                time.sleep(0.002)

        thread = threading.Thread(target=storm, daemon=True)
        thread.start()
        bcast = s.short(tpbcast_impl, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        stop.set()
        thread.join(5)
        ctx.notify("root_done")
        return raised, len(sent)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    (raised, sent), released = (o.value for o in result.outcomes)
    s.precondition("TIME-9", sent > 10, "the signal storm did not happen")
    _in_window(
        raised,
        s.SHORT,
        "TIME-9",
        "an initialize under a signal storm",
        rank=0,
        note=_released(released),
    )


def _full_backlog_root(ctx, release_after):
    """Rank 0 that listens with backlog 0 and never accepts, its accept queue filled by
    the suite's own connections until a further non-blocking connect gets EAGAIN.

    Waits up to ``release_after`` s for the peer to finish, then closes the listener: that
    is also the suite's release of a ``connect`` blocked with no deadline (it wakes with
    ECONNREFUSED).  Returns ``(connections queued, the queue was full, released)``.
    """
    path = wire.socket_path(ctx.base_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    fillers: list[socket.socket] = []
    full = released = False
    try:
        for _ in range(16):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            try:
                sock.connect(path)
            except BlockingIOError:  # EAGAIN: the accept queue is full
                sock.close()
                full = True
                break
            fillers.append(sock)
        ctx.record("fault", action=f"never accepts; {len(fillers)} connection(s) fill the backlog")
        ctx.notify("backlog_full")
        released = not _watch.notified(ctx, "peer_done", release_after)
    finally:
        srv.close()
        for sock in fillers:
            sock.close()
        os.unlink(path)
    return len(fillers), full, released


@pytest.mark.clause("TIME-10")
def test_peer_bootstrap_bounded_when_the_backlog_is_full(tpbcast_run, tpbcast_impl):
    """Rank 0 listens but never accepts, and its listen backlog is already full: the
    peer's ``connect`` cannot complete (a blocking one would sleep in the kernel), and
    no announcement write or probe read follows.  Every bootstrap wait being bounded,
    the peer's initialize fails within its connect + init deadlines."""
    require(tpbcast_impl, "deadlines")
    bound = 2 * s.SHORT + s.MARGIN

    def target(ctx):
        if ctx.rank == 0:
            return _full_backlog_root(ctx, bound + 0.5)
        ctx.wait("backlog_full", timeout=10)
        bcast = s.make(tpbcast_impl, connect=s.SHORT, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        ctx.notify("peer_done")
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    (queued, full, released), raised = (o.value for o in result.outcomes)
    s.precondition(
        "TIME-10",
        full,
        f"rank 0's listen backlog could not be filled ({queued} connection(s) queued, and "
        "a further connect did not get EAGAIN)",
    )
    sentence = (
        "a peer whose rank 0 never accepts, with a full listen backlog, fails its "
        f"initialize within its connect + init deadlines ({2 * s.SHORT}s, +{s.MARGIN}s "
        "margin): no bootstrap wait (connect, the announcement write) is unbounded"
    )
    if not s.check("TIME-10", raised is not None, sentence, "it returned", rank=1):
        return
    s.check("TIME-10", raised.elapsed <= bound, sentence, f"{raised}{_released(released)}", rank=1)
