"""INIT: argument checks, bootstrap, handshake validation, re-init, failed initialize."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tpbcast.conformance.plugin import require

from . import _support as s
from ._support import rogue_peer, rogue_root

_CHECK_SIZES = [33]


def _check_group(ctx, bcast):
    """One small broadcast through an initialized group; returns the peer's digest."""
    return s.group_roundtrip(ctx, bcast, _CHECK_SIZES, salt="chk")


def _check_group_want(seed):
    """What :func:`_check_group` returns on every rank of a working group."""
    return s.expected_digests(seed, _CHECK_SIZES, salt="chk")


def _assert_group_works(cid, sentence, digest, seed, *, rank=None):
    """``digest`` (from :func:`_check_group`) shows a working group, else FAIL ``cid``."""
    assert digest == _check_group_want(seed), s.clause(cid, sentence, digest, rank=rank)


@pytest.mark.clause("INIT-1")
@pytest.mark.parametrize(
    ("rank", "world", "path"),
    [(0, 0, "b"), (0, -1, "b"), (-1, 2, "b"), (2, 2, "b"), (5, 2, "b"), (0, 2, "")],
    ids=["world0", "world-1", "rank-1", "rank=world", "rank>world", "empty-path"],
)
def test_bad_arguments_rejected_before_any_socket(tpbcast_run, tpbcast_impl, rank, world, path):
    def target(ctx):
        base = os.path.join(ctx.workdir, path) if path else ""
        before, listing = s.socket_fds(), s.entries(ctx.workdir)
        bcast = s.short(tpbcast_impl)
        raised = s.attempt(bcast.initialize, rank, world, base)
        return raised, s.socket_fds() == before, s.entries(ctx.workdir) == listing, bcast

    result = tpbcast_run(lambda ctx: target(ctx)[:3], 1, timeout=s.GROUP_TIMEOUT)
    raised, same_fds, same_files = result.outcomes[0].value
    args = f"initialize({rank}, {world}, {path!r})"
    assert raised is not None, s.clause("INIT-1", f"{args} raises a configuration error", "none")
    assert raised.elapsed < s.SHORT, s.clause(
        "INIT-1", f"{args} is rejected locally, before any connect attempt", raised
    )
    if tpbcast_impl.supports("error_details"):
        assert raised.is_a("ValueError"), s.clause(
            "INIT-1", "the configuration error is a ValueError", raised
        )
    assert same_fds and same_files, s.clause(
        "INIT-1", "no socket and no file is created", f"fds same={same_fds} files same={same_files}"
    )


def _base_of_length(workdir, total):
    """A base path whose rank-0 socket path is exactly ``total`` bytes."""
    stem = os.path.join(workdir, "")
    fill = total - len(stem) - len("_0.sock")
    s.precondition("INIT-2", fill > 0, f"workdir {workdir!r} too long for a {total}-byte path")
    return stem + "p" * fill


@pytest.mark.clause("INIT-2")
def test_path_of_107_bytes_works_and_108_is_rejected(tpbcast_run, tpbcast_impl):
    def target(ctx):
        good = _base_of_length(ctx.workdir, 107)
        bad = _base_of_length(ctx.workdir, 108)
        bcast = s.short(tpbcast_impl, connect=10.0, init=10.0)
        listing = s.entries(ctx.workdir)
        raised = s.attempt(bcast.initialize, ctx.rank, 2, bad)
        untouched = s.entries(ctx.workdir) == listing
        ctx.sync("bad_done")
        bcast.initialize(ctx.rank, 2, good)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return raised, untouched, digest, bad

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        raised, untouched, digest, bad = outcome.value
        assert raised is not None, s.clause(
            "INIT-2", "a 108-byte path is rejected", None, rank=outcome.rank
        )
        assert raised.elapsed < s.SHORT and untouched, s.clause(
            "INIT-2",
            "the length is checked before bind/connect",
            raised,
            rank=outcome.rank,
        )
        assert s.mentions(raised, 108) and bad in raised.message, s.clause(
            "INIT-2",
            "the error names the path and its length",
            raised.message,
            rank=outcome.rank,
        )
        _assert_group_works(
            "INIT-2", "a 107-byte path works", digest, result.seed, rank=outcome.rank
        )


@pytest.mark.clause("INIT-3", "BCAST-5")
def test_world_size_one_creates_no_socket(tpbcast_run, tpbcast_impl):
    def target(ctx):
        before, listing = s.socket_fds(), s.entries(ctx.workdir)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(0, 1, ctx.base_path)
        initialized = bcast.is_initialized()
        buf = bytearray(b"unchanged")
        raised = s.attempt(bcast.broadcast, buf)
        after = (s.socket_fds() == before, s.entries(ctx.workdir) == listing)
        bcast.reset()
        return initialized, after, raised, bytes(buf)

    initialized, (same_fds, same_files), raised, buf = tpbcast_run(target, 1).outcomes[0].value
    assert initialized, s.clause("INIT-3", "initialize(0, 1, path) leaves it initialized", False)
    assert same_fds and same_files, s.clause(
        "INIT-3", "world_size 1 creates no socket and no file", (same_fds, same_files)
    )
    assert raised is None and buf == b"unchanged", s.clause(
        "BCAST-5", "a world_size 1 broadcast is a no-op", (raised, buf)
    )


@pytest.mark.clause("INIT-4")
@pytest.mark.parametrize("world", [1, 2])
def test_identical_reinit_is_a_noop(tpbcast_run, tpbcast_impl, world):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, world, ctx.base_path)
        fds = s.socket_fds()
        raised = s.attempt(bcast.initialize, ctx.rank, world, ctx.base_path)
        same = s.socket_fds() == fds
        digest = _check_group(ctx, bcast) if world > 1 else None
        initialized = bcast.is_initialized()
        bcast.reset()
        return raised, same, digest, initialized

    result = tpbcast_run(target, world)
    for outcome in result.outcomes:
        raised, same, digest, initialized = outcome.value
        assert raised is None and initialized, s.clause(
            "INIT-4",
            f"identical re-init on rank {outcome.rank} (world {world}) is a no-op",
            raised,
            rank=outcome.rank,
        )
        assert same, s.clause(
            "INIT-4", "identical re-init opens and closes no socket", same, rank=outcome.rank
        )
        if world > 1:
            _assert_group_works(
                "INIT-4",
                "the group still works after the re-init",
                digest,
                result.seed,
                rank=outcome.rank,
            )


@pytest.mark.clause("INIT-5")
def test_different_reinit_raises_and_keeps_the_group(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        other = ctx.base_path + "x"
        tries = [
            s.attempt(bcast.initialize, ctx.rank, 2, other),
            s.attempt(bcast.initialize, ctx.rank, 3, ctx.base_path),
        ]
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return tries, other, digest

    result = tpbcast_run(target, 2)
    for outcome in result.outcomes:
        (path_change, size_change), other, digest = outcome.value
        assert path_change is not None and size_change is not None, s.clause(
            "INIT-5",
            "re-init with other values raises",
            (path_change, size_change),
            rank=outcome.rank,
        )
        assert other in path_change.message and result.workdir in path_change.message, s.clause(
            "INIT-5",
            "the mismatch error names the old and the new base path",
            path_change,
            rank=outcome.rank,
        )
        _assert_group_works(
            "INIT-5", "the existing group stays usable", digest, result.seed, rank=outcome.rank
        )


@pytest.mark.clause("INIT-6")
def test_peer_started_first_retries_until_rank0_listens(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=15.0, init=15.0)
        if ctx.rank == 0:
            ctx.wait("peer_started", timeout=10)
            # The fault: rank 0 arrives late; the peer must have found no socket at first.
            time.sleep(0.3)
            present = os.path.exists(s.sock_path(ctx.base_path))
        else:
            present = None
            ctx.notify("peer_started")
        # CLOCK_MONOTONIC is host-wide: the two ranks' stamps compare.
        entered = time.monotonic()
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return present, digest, entered

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    present, _, root_entered = result.outcomes[0].value
    peer_entered = result.outcomes[1].value[2]
    s.precondition(
        "INIT-6",
        present is False and peer_entered < root_entered,
        "the fault did not happen: the peer must call initialize before rank 0 does and "
        f"find no socket (socket there: {present}, peer entered "
        f"{root_entered - peer_entered:.3f}s before rank 0)",
    )
    for outcome in result.outcomes:
        _assert_group_works(
            "INIT-6",
            "a peer started before rank 0 bootstraps normally",
            outcome.value[1],
            result.seed,
            rank=outcome.rank,
        )


def _rank0_against_rogues(tpbcast_impl, rogues, world, init=3.0):
    """Rank 0 is the implementation; ranks 1.. run the given rogue peer targets."""

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=init)
            raised = s.attempt(bcast.initialize, 0, world, ctx.base_path)
            state = bcast.is_initialized()
            bcast.reset()
            return raised, state
        return rogues[ctx.rank](ctx)

    return target


def _assert_rejected(result, cid, what, *, name=None):
    raised, initialized = result.outcomes[0].value
    reports = [o.value for o in result.outcomes[1:]]
    for report in reports:
        s.precondition(cid, report.did("send"), f"the fault was not delivered: {report.actions}")
    assert raised is not None and not initialized, s.clause(
        cid, f"rank 0's initialize fails on {what}", (raised, initialized)
    )
    probes = [r.probe for r in reports]
    assert 0x5A not in probes, s.clause(cid, f"{what} never gets the probe", probes)
    assert all(r.reaction is None or r.reaction.value != "open" for r in reports), s.clause(
        cid, f"rank 0 closes the connection of {what}", [r.reaction for r in reports]
    )
    if name is not None:
        assert s.mentions(raised, name), s.clause(cid, f"the error names {name}", raised.message)


@pytest.mark.clause("INIT-7")
@pytest.mark.parametrize("bad", [-1, 0, 2, 7, 2**31 - 1])
def test_rank0_rejects_out_of_range_rank(tpbcast_run, tpbcast_impl, bad):
    rogue = rogue_peer("announce", rank=bad, observe=s.OBSERVE)
    result = tpbcast_run(
        _rank0_against_rogues(tpbcast_impl, {1: rogue}, 2), 2, timeout=s.GROUP_TIMEOUT
    )
    _assert_rejected(result, "INIT-7", f"a peer announcing rank {bad}", name=str(bad))


@pytest.mark.clause("INIT-8")
def test_rank0_rejects_duplicate_rank(tpbcast_run, tpbcast_impl):
    rogues = {
        1: rogue_peer("announce", rank=1, observe=s.OBSERVE),
        2: rogue_peer("announce", rank=1, observe=s.OBSERVE),
    }
    result = tpbcast_run(_rank0_against_rogues(tpbcast_impl, rogues, 3), 3, timeout=s.GROUP_TIMEOUT)
    _assert_rejected(result, "INIT-8", "two peers announcing rank 1", name="1")
    assert "duplicate" in result.outcomes[0].value[0].message.lower(), s.clause(
        "INIT-8", "the error says the rank is a duplicate", result.outcomes[0].value[0]
    )


@pytest.mark.clause("INIT-9")
@pytest.mark.parametrize(
    "rogue",
    [
        rogue_peer("truncated_handshake", nbytes=1, then="close"),
        rogue_peer("truncated_handshake", nbytes=3, then="close"),
        rogue_peer("truncated_handshake", nbytes=2, then="stall", observe=s.OBSERVE),
        rogue_peer("garbage_handshake", then="stall", observe=s.OBSERVE),
        rogue_peer("garbage_handshake", data=b"hello, world", then="stall", observe=s.OBSERVE),
        rogue_peer("send_raw", data=b"", then="close"),
    ],
    ids=["trunc1-close", "trunc3-close", "trunc2-stall", "garbage4", "garbage12", "no-bytes"],
)
def test_truncated_or_garbage_handshake_fails_cleanly(tpbcast_run, tpbcast_impl, rogue):
    init = s.SHORT if tpbcast_impl.supports("deadlines") else None
    result = tpbcast_run(
        _rank0_against_rogues(tpbcast_impl, {1: rogue}, 2, init=init or 3.0),
        2,
        timeout=s.GROUP_TIMEOUT,
    )
    raised, initialized = result.outcomes[0].value
    report = result.outcomes[1].value
    s.precondition(
        "INIT-9", report.did("connect"), f"the fault was not delivered: {report.actions}"
    )
    assert raised is not None and not initialized, s.clause(
        "INIT-9", f"a {report.behaviour} peer makes rank 0's initialize fail", (raised, initialized)
    )
    if init is not None:
        assert raised.elapsed <= init + s.MARGIN, s.clause(
            "INIT-9", "no hang past the init deadline", raised
        )
    assert report.probe != 0x5A, s.clause("INIT-9", "the bad peer is never accepted", report)


@pytest.mark.clause("INIT-10", "FAULT-5")
@pytest.mark.parametrize("probe", [0x13, 0x00, 0xA5])
def test_peer_accepts_only_probe_0x5a(tpbcast_run, tpbcast_impl, probe):
    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("wrong_probe", probe=probe, observe=s.OBSERVE)(ctx)
        bcast = s.make(tpbcast_impl, init=10.0, connect=10.0)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        return raised, bcast.is_initialized()

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report = result.outcomes[0].value
    s.precondition(
        "INIT-10",
        report.links and report.links[0].sent == bytes([probe]),
        "wrong probe not delivered",
    )
    raised, initialized = result.outcomes[1].value
    assert raised is not None and not initialized, s.clause(
        "INIT-10", f"a peer given probe 0x{probe:02x} fails and is not initialized", raised
    )
    assert report.links[0].reaction.value != "open", s.clause(
        "INIT-10", "the peer drops the connection", report.links[0].reaction
    )
    text = raised.message.lower()
    assert "0x5a" in text and f"0x{probe:02x}" in text, s.clause(
        "FAULT-5", "a wrong probe error shows the expected 0x5a and the byte received", raised
    )
    assert "success" not in text, s.clause("FAULT-5", "never 'Success'", raised)


@pytest.mark.clause("INIT-11", "INIT-12")
def test_failed_initialize_cleans_up_and_retry_works_root(tpbcast_run, tpbcast_impl):
    """Rank 0 fails on a bad peer, is clean, and the retry (no reset) forms the group."""

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=10.0)
            state0 = bcast.is_initialized()
            before = s.fd_table()
            raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
            clean = (
                bcast.is_initialized(),
                s.new_fds(before),
                s.kind_of(s.sock_path(ctx.base_path)),
            )
            ctx.notify("cleaned")
            bcast.initialize(0, 2, ctx.base_path)
            state1 = bcast.is_initialized()
            digest = _check_group(ctx, bcast)
            bcast.reset()
            return raised, clean, digest, (state0, state1, bcast.is_initialized())
        report = rogue_peer("announce", rank=9, observe=s.OBSERVE)(ctx)
        ctx.wait("cleaned", timeout=15)
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        bcast.initialize(1, 2, ctx.base_path)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return report, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, (initialized, leaked, leftover), digest, states = result.outcomes[0].value
    s.precondition(
        "INIT-11", raised is not None, "the fault did not happen: rank 0 accepted rank 9"
    )
    assert not initialized, s.clause("INIT-12", "false after a failed initialize", initialized)
    assert not leaked, s.clause("INIT-11", "every fd it opened is closed", leaked)
    assert leftover == "missing", s.clause("INIT-11", "the socket file is removed", leftover)
    want = _check_group_want(result.seed)
    assert digest == want and result.outcomes[1].value[1] == want, s.clause(
        "INIT-11", "a retry without reset works", digest
    )
    assert states == (False, True, False), s.clause(
        "INIT-12", "is_initialized: false before, true after, false after reset", states
    )


@pytest.mark.clause("INIT-11")
def test_failed_initialize_cleans_up_and_retry_works_peer(tpbcast_run, tpbcast_impl):
    def target(ctx):
        if ctx.rank == 0:
            report = rogue_root("wrong_probe", observe=s.OBSERVE)(ctx)
            ctx.notify("rogue_gone")
            bcast = s.make(tpbcast_impl, init=10.0)
            bcast.initialize(0, 2, ctx.base_path)
            digest = _check_group(ctx, bcast)
            bcast.reset()
            return report, digest
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        before = s.fd_table()
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        clean = bcast.is_initialized(), s.new_fds(before)
        ctx.wait("rogue_gone", timeout=15)
        bcast.initialize(1, 2, ctx.base_path)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return raised, clean, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, (initialized, leaked), digest = result.outcomes[1].value
    s.precondition(
        "INIT-11", raised is not None, "the fault did not happen: the peer took a wrong probe"
    )
    assert not initialized and not leaked, s.clause(
        "INIT-11", "a failed peer initialize leaves no fd and is uninitialized", leaked
    )
    _assert_group_works(
        "INIT-11", "the peer's retry without reset works", digest, result.seed, rank=1
    )


@pytest.mark.clause("INIT-13")
def test_initialize_lets_other_threads_run(tpbcast_run, tpbcast_impl):
    """Rank 1 joins only after rank 0's helper thread has ticked during initialize."""

    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        if ctx.rank == 0:
            entered = threading.Event()
            ticks: list[float] = []

            def ticker():
                entered.wait(10)
                while len(ticks) < 20:
                    ticks.append(time.monotonic())
                    time.sleep(0.005)
                ctx.notify("thread_ran")

            thread = threading.Thread(target=ticker, daemon=True)
            thread.start()
            entered.set()
            bcast.initialize(0, 2, ctx.base_path)
            thread.join(10)
            bcast.reset()
            return len(ticks)
        try:
            ctx.wait("thread_ran", timeout=8)
        except Exception as exc:
            return f"rank 0's thread did not run during initialize: {exc}"
        bcast.initialize(1, 2, ctx.base_path)
        bcast.reset()
        return "ok"

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT, expect_failure=True)
    assert result.outcomes[1].value == "ok", s.clause(
        "INIT-13", "other threads keep running while initialize waits", result.report()
    )


@pytest.mark.clause("INIT-14")
def test_initialize_on_one_thread_broadcast_on_another(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        out: dict[str, object] = {}

        def run(name, fn):
            thread = threading.Thread(target=lambda: out.setdefault(name, s.attempt(fn)))
            thread.start()
            thread.join(15)

        run("init", lambda: bcast.initialize(ctx.rank, 2, ctx.base_path))
        run("bcast", lambda: out.setdefault("digest", _check_group(ctx, bcast)))
        bcast.reset()
        return out.get("init"), out.get("bcast"), out.get("digest")

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        init, bcast, digest = outcome.value
        assert init is None and bcast is None, s.clause(
            "INIT-14",
            "initialize on one thread, broadcast on another",
            (init, bcast),
            rank=outcome.rank,
        )
        _assert_group_works(
            "INIT-14",
            "the other thread sees the whole initialized state",
            digest,
            result.seed,
            rank=outcome.rank,
        )


@pytest.mark.clause("INIT-15")
def test_late_connection_never_joins(tpbcast_run, tpbcast_impl):
    """After a 2-rank bootstrap, a third process connects and announces rank 1."""
    sizes = [100, 5000]

    def target(ctx):
        if ctx.rank == 2:
            ctx.wait("group_up", timeout=15)
            try:
                sock = s.raw_connect(s.sock_path(ctx.base_path), timeout=0.5)
            except (OSError, TimeoutError) as exc:
                ctx.notify("rogue_in")
                ctx.sync("done")
                return "no listener", type(exc).__name__
            with sock:
                s.announce(sock, 1)
                ctx.notify("rogue_in")
                seen = s.read_window(sock, 1.5)
                ctx.sync("done")
            return "connected", seen
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            ctx.notify("group_up")
        ctx.wait("rogue_in", timeout=15)
        got = s.group_roundtrip(ctx, bcast, sizes, salt="late")
        ctx.sync("done")
        bcast.reset()
        return got

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    how, seen = result.outcomes[2].value
    assert how == "no listener" or seen in (None, b""), s.clause(
        "INIT-15", "a connection after bootstrap gets no probe and no payload", (how, seen)
    )
    want = s.expected_digests(result.seed, sizes, salt="late")
    assert result.outcomes[1].value == want, s.clause(
        "INIT-15", "later broadcasts are not disturbed", result.outcomes[1].value
    )


@pytest.mark.clause("INIT-16")
def test_connect_fails_at_once_on_eacces(tpbcast_run, tpbcast_impl):
    """The socket file denies access (mode 000, and we are not root): waiting cannot
    cure EACCES, so the peer fails at once, naming it, long before its connect deadline."""
    nobody = 65534

    def target(ctx):
        directory = os.path.join(ctx.workdir, "acc")
        os.mkdir(directory, 0o700)
        base = os.path.join(directory, "b")
        s.stale_socket(s.sock_path(base))
        os.chmod(s.sock_path(base), 0)
        if os.geteuid() == 0:
            from tpbcast.harness import as_foreign_uid

            os.chown(directory, nobody, nobody)
            as_foreign_uid(nobody)
        bcast = s.make(tpbcast_impl, connect=5.0, init=5.0)
        raised, took = s.timed(bcast.initialize, 1, 2, base)
        return raised, took  # the harness removes the workdir (we may no longer)

    raised, took = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    assert raised is not None and took < 2.0, s.clause(
        "INIT-16",
        "EACCES fails the connect at once (under 2 s; no retry until the 5 s deadline)",
        f"{raised} after {took:.2f}s",
        rank=1,
    )
    assert "EACCES" in raised.message or raised.attrs.get("errno_name") == "EACCES", s.clause(
        "INIT-16", "the error names EACCES", raised, rank=1
    )


def _connected_to(before, path):
    """True if a socket opened since ``before`` is connected to ``path`` (getpeername)."""
    for fd, what in s.new_fds(before).items():
        if not what.startswith("socket:"):
            continue
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue  # closed meanwhile (a refused connect attempt)
        with sock:
            try:
                if sock.getpeername() == path:
                    return True
            except OSError:
                continue  # not connected yet
    return False


def _silent_first(ctx, observe):
    """Rank 1: the ``silent`` rogue (in a thread) connects and never sends; once a socket
    of this rank is connected to rank 0 (so it is ahead in the accept queue), notify
    ``"silent_in"``.  Returns (connected before the notify, the rogue's report or error)."""
    before = s.fd_table()
    out: dict[str, object] = {}

    def play():
        try:
            out["report"] = rogue_peer("silent", observe=observe)(ctx)
        except Exception as exc:  # a RogueError: no proof, the test reports it
            out["error"] = repr(exc)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    path = s.sock_path(ctx.base_path)
    connected = s.wait_for(lambda: _connected_to(before, path), 10.0)
    ctx.notify("silent_in")
    thread.join(observe + 12)
    return connected, out.get("report", out.get("error"))


@pytest.mark.clause("INIT-17")
@pytest.mark.parametrize("bad", [-1, 3], ids=["rank-1", "rank=world"])
def test_silent_connection_does_not_delay_rejecting_a_bad_one(tpbcast_run, tpbcast_impl, bad):
    """Rank 1 connects first and stays silent; only then rank 2 announces ``bad``.

    Reading announcements one at a time in accept order would wait for the silent one
    until the init deadline (6 s); the bad announcement must fail initialize within
    ``MARGIN`` of being sent, naming what it announced.
    """
    require(tpbcast_impl, "deadlines")
    init = 6.0

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=init)
            entered = time.monotonic()  # CLOCK_MONOTONIC is host-wide: stamps compare
            raised = s.attempt(bcast.initialize, 0, 3, ctx.base_path)
            failed_at = time.monotonic()
            initialized = bcast.is_initialized()
            bcast.reset()
            return raised, initialized, entered, failed_at
        if ctx.rank == 1:
            return _silent_first(ctx, observe=init + s.MARGIN)
        ctx.wait("silent_in", timeout=15)
        started = time.monotonic()
        return started, rogue_peer("announce", rank=bad, observe=init + s.MARGIN)(ctx)

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    raised, initialized, entered, failed_at = result.outcomes[0].value
    connected, silent = result.outcomes[1].value
    started, report = result.outcomes[2].value
    s.precondition(
        "INIT-17",
        connected and hasattr(silent, "did") and silent.did("connect") and not silent.sent,
        f"the silent connection was not in before the bad one (connected={connected}, "
        f"rogue: {silent})",
    )
    sends = [a for a in report.actions if a.kind == "send"]
    s.precondition("INIT-17", sends, f"the bad announcement was not sent: {report.actions}")
    sent_at = started + sends[0].t  # the rogue's clock starts after ``started``
    s.precondition(
        "INIT-17",
        sent_at - entered < init - s.MARGIN,
        f"the bad announcement came {sent_at - entered:.2f}s into rank 0's initialize, too "
        f"late to tell a prompt rejection from the {init:g} s init deadline",
    )
    assert raised is not None and not initialized, s.clause(
        "INIT-17", "rank 0's initialize fails", (raised, initialized), rank=0
    )
    took = failed_at - sent_at
    assert took < s.MARGIN, s.clause(
        "INIT-17",
        f"a bad announcement ({bad}) behind a silent connection fails initialize within "
        f"{s.MARGIN:g} s of being sent (init deadline {init:g} s)",
        f"{raised} {took:.2f}s after the announcement",
        rank=0,
    )
    assert s.mentions(raised, bad), s.clause(
        "INIT-17", f"the error names what the bad connection sent ({bad})", raised, rank=0
    )
    assert report.probe != 0x5A, s.clause(
        "INIT-17", "the bad connection never gets the probe", report, rank=0
    )
