"""INIT: argument checks, bootstrap, handshake validation, re-init, failed initialize.

Every check names one clause and is soft (``s.check``): a failed check never hides the
test's later ones.  A call that a wrong implementation could leave blocked (one with no
deadline, or a bootstrap it should never have started) runs in a :class:`_watch.Call` thread
that the rank stops waiting for after a bounded time, releasing it the way a peer or a
rank 0 could: the test then judges what it saw, FAIL within seconds, instead of the
harness stopping a hung rank (ERROR) after the group deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import threading
import time

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import env, wire
from tpbcast.harness.rogue import rogue_peer, rogue_root

from . import _support as s
from . import _watch

_CHECK_SIZES = [33]


def _check_group(ctx, bcast):
    """One small broadcast through an initialized group; returns the peer's digest."""
    return s.group_roundtrip(ctx, bcast, _CHECK_SIZES, salt="chk")


def _check_group_want(seed):
    """What :func:`_check_group` returns on every rank of a working group."""
    return s.expected_digests(seed, _CHECK_SIZES, salt="chk")


def _check_group_works(cid, sentence, digest, seed, *, rank=None):
    """``digest`` (from :func:`_check_group`) shows a working group: a check of ``cid``."""
    return s.check(cid, digest == _check_group_want(seed), sentence, digest, rank=rank)


def _has_pending_connection(listener):
    return bool(select.select([listener], [], [], 0)[0])


def _read_then_close(listener, timeout=1.0):
    """Accept the connection waiting at ``listener``, read its announcement and close:
    a peer waiting for the probe sees end of stream (an orderly verdict, not a reset)."""
    listener.settimeout(timeout)
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn, contextlib.suppress(OSError, ConnectionError, TimeoutError):
        wire.recv_exact(conn, 4, wire.Deadline.after(timeout))


@pytest.mark.clause("INIT-1")
@pytest.mark.parametrize(
    ("rank", "world", "path"),
    [(0, 0, "b"), (0, -1, "b"), (-1, 2, "b"), (2, 2, "b"), (5, 2, "b"), (0, 2, "")],
    ids=["world0", "world-1", "rank-1", "rank=world", "rank>world", "empty-path"],
)
@pytest.mark.staged_via("uds-v1")
def test_bad_arguments_rejected_before_any_socket(tpbcast_run, tpbcast_impl, rank, world, path):
    """A bad rank meets a listening rank 0 at the group's path (if it went on like a peer
    it would connect, and the listener sees it at once); a bad world size or an empty path
    on rank 0 would bind a socket file in the socket directory (watched).  A call still
    blocked after ``SHORT + MARGIN`` is released (the listener answers and closes, or a
    connection pokes the socket that rank 0 made) and judged: it did not raise at once."""
    budget = s.SHORT + s.MARGIN

    def target(ctx):
        # An empty base path names "_0.sock" in the working directory: the workdir here.
        os.chdir(ctx.workdir)
        base = os.path.join(ctx.workdir, path) if path else ""
        address = wire.socket_path(base)
        listener = None
        if rank != 0:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            listener.listen(1)
        bcast = s.short(tpbcast_impl)
        before, listing = s.socket_fds(bcast), s.entries(ctx.workdir)
        seen: list[str] = []

        def socket_work():
            found = []
            if listener is not None and _has_pending_connection(listener):
                found.append("connected to the listening rank 0")
            fds = {k: what for k, what in s.socket_fds(bcast).items() if before.get(k) != what}
            if fds:
                found.append(f"opened socket fd(s) {sorted(fds)}")
            files = sorted(set(s.entries(ctx.workdir)) - set(listing))
            if files:
                found.append(f"created {files} in the socket directory")
            if found and not seen:
                seen.extend(found)
            return bool(found)

        call = _watch.Call(bcast.initialize, rank, world, base)
        call.wait(budget, until=socket_work)
        socket_work()
        if not call.done:
            if listener is not None and _has_pending_connection(listener):
                _read_then_close(listener)
            elif listener is None and s.kind_of(address) == "socket":
                _watch.poke(address)
            call.wait(s.MARGIN)
        if listener is not None:
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(address)
        return call.ended(), seen

    ended, seen = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    args = f"initialize({rank}, {world}, {path!r})"
    if s.check("INIT-1", ended.failed, f"{args} raises a configuration error", ended):
        s.check(
            "INIT-1",
            ended.raised.elapsed < s.SHORT,
            f"{args} is rejected locally, at once (under {s.SHORT:g} s)",
            ended.raised,
        )
        if tpbcast_impl.supports("error_details"):
            s.check(
                "INIT-1",
                ended.raised.is_a("ValueError"),
                "the configuration error is a ValueError",
                ended.raised,
            )
    s.check(
        "INIT-1",
        not seen,
        f"{args} creates no socket and no file, and connects nowhere",
        "; ".join(seen),
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
        if raised is None:
            bcast.reset()  # judged below; the 107-byte group still gets its chance
        ctx.sync("bad_done")
        bcast.initialize(ctx.rank, 2, good)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return raised, untouched, digest, bad

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        raised, untouched, digest, bad = outcome.value
        rank = outcome.rank
        if s.check("INIT-2", raised is not None, "a 108-byte path is rejected", None, rank=rank):
            s.check(
                "INIT-2",
                raised.elapsed < s.SHORT and untouched,
                "the length is checked before bind/connect (at once, nothing created)",
                f"{raised}; socket directory unchanged: {untouched}",
                rank=rank,
            )
            s.check(
                "INIT-2",
                s.mentions(raised, 108) and bad in raised.message,
                "the error names the path and its length",
                raised.message,
                rank=rank,
            )
        _check_group_works("INIT-2", "a 107-byte path works", digest, result.seed, rank=rank)


@pytest.mark.clause("INIT-3", "BCAST-5")
def test_world_size_one_creates_no_socket(tpbcast_run, tpbcast_impl):
    def target(ctx):
        before, listing = s.socket_fds(), s.entries(ctx.workdir)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(0, 1, ctx.base_path)
        initialized = s.initialized(bcast)
        buf = bytearray(b"unchanged")
        raised = s.attempt(bcast.broadcast, buf)
        after = (s.socket_fds(bcast) == before, s.entries(ctx.workdir) == listing)
        bcast.reset()
        return initialized, after, raised, bytes(buf)

    initialized, (same_fds, same_files), raised, buf = tpbcast_run(target, 1).outcomes[0].value
    s.check_state("INIT-3", initialized, True, "initialize(0, 1, path) leaves it initialized")
    s.check(
        "INIT-3",
        same_fds and same_files,
        "world_size 1 creates no socket and no file",
        f"fds unchanged: {same_fds}, files unchanged: {same_files}",
    )
    s.check(
        "BCAST-5",
        raised is None and buf == b"unchanged",
        "a world_size 1 broadcast is a no-op",
        (raised, buf),
    )


@pytest.mark.clause("INIT-4")
@pytest.mark.parametrize("world", [1, 2])
def test_identical_reinit_is_a_noop(tpbcast_run, tpbcast_impl, world):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, world, ctx.base_path)
        fds = s.socket_fds(bcast)
        call = _watch.Call(bcast.initialize, ctx.rank, world, ctx.base_path)
        if not call.wait(s.SHORT + s.MARGIN):
            return call.ended(), None, None, None  # busy in a bootstrap: nothing more to ask
        after = s.socket_fds(bcast)
        same = after == fds
        # Sockets that change with no call at all (an engine's background I/O thread) cannot
        # tell a re-init's side effect apart: observe 0.3 s of no call before judging.
        churns = not same and s.wait_for(lambda: s.socket_fds(bcast) != after, 0.3)
        digest = _check_group(ctx, bcast) if world > 1 else None
        initialized = s.initialized(bcast)
        bcast.reset()
        return call.ended(), None if churns else same, digest, initialized

    result = tpbcast_run(target, world, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        ended, same, digest, initialized = outcome.value
        rank = outcome.rank
        s.check(
            "INIT-4",
            ended.done and ended.raised is None and s.says_initialized(initialized),
            f"identical re-init on rank {rank} (world {world}) returns and keeps it initialized",
            f"{ended}; is_initialized() {initialized}",
            rank=rank,
        )
        if not ended.done:
            continue
        if s.stageable(
            "INIT-4",
            same is not None,
            f"rank {rank}'s sockets change with no call at all (a background thread): a "
            "re-init's side effect cannot be told apart",
        ):
            s.check(
                "INIT-4",
                same,
                "identical re-init opens and closes no socket",
                f"socket fds unchanged: {same}",
                rank=rank,
            )
        if world > 1:
            _check_group_works(
                "INIT-4", "the group still works after the re-init", digest, result.seed, rank=rank
            )


def _names_both(raised, old, new):
    """The error text names ``old`` and ``new`` (paths as substrings, numbers as words)."""
    if isinstance(old, str):
        return old in raised.message and new in raised.message
    return s.mentions(raised, old) and s.mentions(raised, new)


@pytest.mark.clause("INIT-5")
def test_different_reinit_raises_and_keeps_the_group(tpbcast_run, tpbcast_impl):
    """Each of rank, world size and base path changed alone, on both ranks of a live
    group.  The new base path is no extension of the old one, so a message that names
    only the new path cannot pass for naming both."""
    budget = s.SHORT + s.MARGIN

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        other = os.path.join(ctx.workdir, "other")
        changes = [
            ("rank", ctx.rank, 1 - ctx.rank, (1 - ctx.rank, 2, ctx.base_path)),
            ("world_size", 2, 3, (ctx.rank, 3, ctx.base_path)),
            ("base_path", ctx.base_path, other, (ctx.rank, 2, other)),
        ]
        tries = []
        for what, old, new, args in changes:
            call = _watch.Call(bcast.initialize, *args)
            call.wait(budget)
            tries.append((what, old, new, call.ended()))
            if not call.done:
                # Busy in a bootstrap it should never have started: it cannot be asked
                # anything more (the other rank's broadcast then ends at our exit).
                return tries, None, None
        initialized = s.initialized(bcast)
        group = _watch.Call(_check_group, ctx, bcast)
        group.wait(s.GROUP_TIMEOUT / 2)
        digest = group.ended().value
        if group.done:
            bcast.reset()
        return tries, initialized, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        tries, initialized, digest = outcome.value
        rank = outcome.rank
        for what, old, new, ended in tries:
            change = f"re-init with another {what} ({old!r} -> {new!r})"
            if s.check("INIT-5", ended.failed, f"{change} raises", ended, rank=rank):
                s.check(
                    "INIT-5",
                    _names_both(ended.raised, old, new),
                    f"the mismatch error names the old and the new {what} ({old!r}, {new!r})",
                    ended.raised,
                    rank=rank,
                )
        if initialized is None:
            continue  # a re-init was left blocked: judged above
        s.check_state(
            "INIT-5", initialized, True, "the existing group stays initialized", rank=rank
        )
        _check_group_works(
            "INIT-5", "the existing group stays usable", digest, result.seed, rank=rank
        )


@pytest.mark.clause("INIT-6")
@pytest.mark.staged_via("uds-v1")
def test_peer_started_first_retries_until_rank0_listens(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=15.0, init=15.0)
        if ctx.rank == 0:
            ctx.wait("peer_started", timeout=10)
            # The fault: rank 0 arrives late; the peer must have found no socket at first.
            time.sleep(0.3)
            present = os.path.exists(wire.socket_path(ctx.base_path))
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
    s.fault_happened(
        "INIT-6",
        present is False and peer_entered < root_entered,
        "the peer must call initialize before rank 0 does and "
        f"find no socket (socket there: {present}, peer entered "
        f"{root_entered - peer_entered:.3f}s before rank 0)",
    )
    for outcome in result.outcomes:
        _check_group_works(
            "INIT-6",
            "a peer started before rank 0 bootstraps normally",
            outcome.value[1],
            result.seed,
            rank=outcome.rank,
        )


def _rank0_against_rogues(tpbcast_impl, rogues, world, init=3.0):
    """Rank 0 is the implementation; ranks 1.. run the given rogue peer targets.

    Rank 0 waits for its initialize as long as the rogues watch (``OBSERVE``, after which
    they hang up) plus ``MARGIN``; a call still blocked then is judged as not failing.
    """

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=init)
            call = _watch.Call(bcast.initialize, 0, world, ctx.base_path)
            if not call.wait(s.OBSERVE + s.MARGIN):
                return call.ended(), None
            state = s.initialized(bcast)
            bcast.reset()
            return call.ended(), state
        return rogues[ctx.rank](ctx)

    return target


def _check_rejected(result, cid, what, *, name=None):
    ended, initialized = result.outcomes[0].value
    reports = [o.value for o in result.outcomes[1:]]
    for report in reports:
        s.fault_happened(cid, report.did("send"), report.actions)
    s.check(
        cid,
        ended.failed and s.says_uninitialized(initialized),
        f"rank 0's initialize fails on {what}",
        f"{ended}; is_initialized() {initialized}",
        rank=0,
    )
    probes = [r.probe for r in reports]
    s.check(cid, wire.PROBE not in probes, f"{what} never gets the probe", probes, rank=0)
    s.check(
        cid,
        all(r.reaction is None or r.reaction.value != "open" for r in reports),
        f"rank 0 closes the connection of {what}",
        [r.reaction for r in reports],
        rank=0,
    )
    if name is not None and ended.failed:
        s.check(
            cid, s.mentions(ended.raised, name), f"the error names {name}", ended.raised, rank=0
        )


@pytest.mark.clause("INIT-7")
@pytest.mark.parametrize("bad", [-1, 0, 2, 7, 2**31 - 1])
def test_rank0_rejects_out_of_range_rank(tpbcast_run, tpbcast_impl, bad):
    rogue = rogue_peer("announce", rank=bad, observe=s.OBSERVE)
    result = tpbcast_run(
        _rank0_against_rogues(tpbcast_impl, {1: rogue}, 2), 2, timeout=s.GROUP_TIMEOUT
    )
    _check_rejected(result, "INIT-7", f"a peer announcing rank {bad}", name=str(bad))


def _announce_and_watch(ctx, rank, *, notify_in=None):
    """Connect, announce ``rank``, wait until rank 0 has read it (or closed), notify
    ``read<ctx.rank>``, then watch: (read in time, first bytes seen: None = nothing,
    b"" = closed, else what rank 0 sent)."""
    with wire.connect(wire.socket_path(ctx.base_path), wire.Deadline.after(s.PATIENCE)) as sock:
        sock.sendall(wire.pack_rank(rank))
        if notify_in:
            ctx.notify(notify_in)
        read = s.wait_for(lambda: wire.unread(sock) == 0, s.MARGIN)
        ctx.notify(f"read{ctx.rank}")
        return read, s.read_window(sock, s.OBSERVE)


def _connect_once_and_watch(ctx, rank):
    """One connect (no retry), announce ``rank``, watch: (how it went, bytes seen)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with sock:
        try:
            sock.connect(wire.socket_path(ctx.base_path))
            sock.sendall(wire.pack_rank(rank))
        except OSError as exc:
            return f"no listener ({errno.errorcode.get(exc.errno or 0, exc.errno)})", None
        return "connected", s.read_window(sock, s.OBSERVE)


@pytest.mark.clause("INIT-8")
def test_rank0_rejects_duplicate_rank(tpbcast_run, tpbcast_impl):
    """Rank 0 of world_size 3 against three raw connections: two announce rank 1 (the
    second after the first), and only once rank 0 has read both does the third announce
    the missing rank 2.  An implementation that let the second rank-1 connection take
    the slot would complete the group with it now; a conforming one has already failed."""

    def target(ctx):
        if ctx.rank == 0:
            return _rank0_against_rogues(tpbcast_impl, {}, 3, init=10.0)(ctx)
        if ctx.rank == 1:
            return _announce_and_watch(ctx, 1, notify_in="first_in")
        if ctx.rank == 2:
            ctx.wait("first_in", timeout=15)
            return _announce_and_watch(ctx, 1)
        ctx.wait("read1", timeout=15)
        ctx.wait("read2", timeout=15)
        return _connect_once_and_watch(ctx, 2)

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    ended, initialized = result.outcomes[0].value
    (read1, first), (read2, second) = result.outcomes[1].value, result.outcomes[2].value
    joined, third = result.outcomes[3].value
    s.precondition(
        "INIT-8",
        read1 and read2,
        f"rank 0 did not read both rank-1 announcements within {s.MARGIN:g} s (first: "
        f"{read1}, second: {read2}), so rank 2 could not be held back until it had",
    )
    s.check(
        "INIT-8",
        ended.failed and s.says_uninitialized(initialized),
        "rank 0's initialize fails once a second connection announces rank 1",
        f"{ended}; is_initialized() {initialized}",
        rank=0,
    )
    seen = {"first rank 1": first, "second rank 1": second, f"rank 2 ({joined})": third}
    s.check(
        "INIT-8",
        not any(seen.values()),
        "no connection gets the probe or any byte: a duplicate rank never joins the group",
        {who: got for who, got in seen.items() if got},
        rank=0,
    )
    s.check(
        "INIT-8",
        first == b"" and second == b"",
        "rank 0 closes both connections that announced rank 1",
        {"first": first, "second": second},
        rank=0,
    )
    if ended.failed:
        s.check(
            "INIT-8",
            s.mentions(ended.raised, 1),
            "the error names the duplicated rank 1",
            ended.raised,
            rank=0,
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
    ended, initialized = result.outcomes[0].value
    report = result.outcomes[1].value
    s.fault_happened("INIT-9", report.did("connect"), report.actions)
    s.check(
        "INIT-9",
        ended.failed and s.says_uninitialized(initialized),
        f"a {report.behaviour} peer makes rank 0's initialize fail",
        f"{ended}; is_initialized() {initialized}",
        rank=0,
    )
    if init is not None and ended.failed:
        s.check(
            "INIT-9",
            ended.raised.elapsed <= init + s.MARGIN,
            f"no hang past the init deadline ({init:g} s + {s.MARGIN:g} s)",
            ended.raised,
            rank=0,
        )
    s.check("INIT-9", report.probe != wire.PROBE, "the bad peer is never accepted", report, rank=0)


@pytest.mark.clause("INIT-10", "FAULT-5")
@pytest.mark.parametrize("probe", [0x13, 0x00, 0xA5])
def test_peer_accepts_only_probe_0x5a(tpbcast_run, tpbcast_impl, probe):
    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("wrong_probe", probe=probe, observe=s.OBSERVE)(ctx)
        bcast = s.make(tpbcast_impl, init=10.0, connect=10.0)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        return raised, s.initialized(bcast)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report = result.outcomes[0].value
    s.precondition(
        "INIT-10",
        report.links and report.links[0].sent == bytes([probe]),
        "wrong probe not delivered",
    )
    raised, initialized = result.outcomes[1].value
    s.check(
        "INIT-10",
        raised is not None and s.says_uninitialized(initialized),
        f"a peer given probe 0x{probe:02x} fails and is not initialized",
        f"{raised}; is_initialized() {initialized}",
        rank=1,
    )
    s.check(
        "INIT-10",
        report.links[0].reaction is not None and report.links[0].reaction.value != "open",
        "the peer drops the connection",
        report.links[0].reaction,
        rank=1,
    )
    s.precondition(
        "FAULT-5", raised is not None, "the peer raised no error whose wording could be judged"
    )
    text = raised.message.lower()
    s.check(
        "FAULT-5",
        "0x5a" in text and f"0x{probe:02x}" in text,
        "a wrong probe error shows the expected 0x5a and the byte received",
        raised,
        rank=1,
    )
    s.check("FAULT-5", "success" not in text, "never 'Success'", raised, rank=1)


@pytest.mark.clause("INIT-11", "INIT-12")
@pytest.mark.staged_via("uds-v1")
def test_failed_initialize_cleans_up_and_retry_works_root(tpbcast_run, tpbcast_impl):
    """Rank 0 fails on a bad peer, is clean, and the retry (no reset) forms the group."""

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=10.0)
            state0 = s.initialized(bcast)
            before = s.fd_table()
            call = _watch.Call(bcast.initialize, 0, 2, ctx.base_path)
            if not call.wait(s.OBSERVE + s.MARGIN):
                # Neither failed nor joined: no retry is possible (tell rank 1 first).
                open(os.path.join(ctx.workdir, "no_retry"), "w").close()
                ctx.notify("cleaned")
                return call.ended(), None, None, None
            clean = (
                s.initialized(bcast),
                s.new_fds(before, bcast),
                s.kind_of(wire.socket_path(ctx.base_path)),
            )
            if not call.ended().failed:
                bcast.reset()  # it took rank 9: no fault to clean up after (judged below)
            ctx.notify("cleaned")
            bcast.initialize(0, 2, ctx.base_path)
            state1 = s.initialized(bcast)
            digest = _check_group(ctx, bcast)
            bcast.reset()
            return call.ended(), clean, digest, (state0, state1, s.initialized(bcast))
        report = rogue_peer("announce", rank=9, observe=s.OBSERVE)(ctx)
        ctx.wait("cleaned", timeout=s.OBSERVE + s.MARGIN + 5)
        if os.path.exists(os.path.join(ctx.workdir, "no_retry")):
            return report, None
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        bcast.initialize(1, 2, ctx.base_path)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return report, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    ended, clean, digest, states = result.outcomes[0].value
    s.fault_happened(
        "INIT-11",
        ended.failed,
        f"rank 0's initialize against a peer announcing rank 9 did not fail ({ended})",
    )
    initialized, leaked, leftover = clean
    s.check("INIT-12", initialized is False, "false after a failed initialize", initialized, rank=0)
    s.check("INIT-11", not leaked, "every fd it opened is closed", leaked, rank=0)
    s.check("INIT-11", leftover == "missing", "the socket file is removed", leftover, rank=0)
    want = _check_group_want(result.seed)
    s.check(
        "INIT-11",
        digest == want and result.outcomes[1].value[1] == want,
        "a retry without reset works",
        (digest, result.outcomes[1].value[1]),
        rank=0,
    )
    s.check(
        "INIT-12",
        states == (False, True, False),
        "is_initialized: false before, true after, false after reset",
        states,
        rank=0,
    )


@pytest.mark.clause("INIT-11")
@pytest.mark.staged_via("uds-v1")
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
        clean = s.initialized(bcast), s.new_fds(before, bcast)
        if raised is None:
            bcast.reset()  # it took the wrong probe: no fault to clean up after
        ctx.wait("rogue_gone", timeout=15)
        bcast.initialize(1, 2, ctx.base_path)
        digest = _check_group(ctx, bcast)
        bcast.reset()
        return raised, clean, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, (initialized, leaked), digest = result.outcomes[1].value
    s.fault_happened("INIT-11", raised is not None, "the peer took a wrong probe")
    s.check(
        "INIT-11",
        s.says_uninitialized(initialized) and not leaked,
        "a failed peer initialize leaves no fd and is uninitialized",
        f"is_initialized() {initialized}, fds left open {leaked}",
        rank=1,
    )
    _check_group_works(
        "INIT-11", "the peer's retry without reset works", digest, result.seed, rank=1
    )


@pytest.mark.clause("INIT-13")
def test_initialize_lets_other_threads_run(tpbcast_run, tpbcast_impl):
    """Rank 1 joins only after rank 0's helper thread has ticked during initialize (and
    joins anyway after 8 s, so a rank 0 that starves its threads is released, not hung)."""

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
            verdict = "ok"
        except Exception as exc:
            verdict = f"rank 0's thread did not run during initialize: {exc}"
        bcast.initialize(1, 2, ctx.base_path)  # releases rank 0 either way
        bcast.reset()
        return verdict

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT, expect_failure=True)
    s.check(
        "INIT-13",
        result.outcomes[1].value == "ok",
        "other threads keep running while initialize waits",
        result.report(),
        rank=0,
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
        s.check(
            "INIT-14",
            init is None and bcast is None,
            "initialize on one thread, broadcast on another",
            (init, bcast),
            rank=outcome.rank,
        )
        _check_group_works(
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
                sock = wire.connect(wire.socket_path(ctx.base_path), wire.Deadline.after(0.5))
            except (OSError, TimeoutError) as exc:
                ctx.notify("rogue_in")
                ctx.sync("done")
                return "no listener", type(exc).__name__
            with sock:
                sock.sendall(wire.pack_rank(1))
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
    s.check(
        "INIT-15",
        how == "no listener" or seen in (None, b""),
        "a connection after bootstrap gets no probe and no payload",
        (how, seen),
        rank=0,
    )
    want = s.expected_digests(result.seed, sizes, salt="late")
    s.check(
        "INIT-15",
        result.outcomes[1].value == want,
        "later broadcasts are not disturbed",
        result.outcomes[1].value,
        rank=1,
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
        env.leave_stale_socket(wire.socket_path(base))
        os.chmod(wire.socket_path(base), 0)
        if os.geteuid() == 0:
            os.chown(directory, nobody, nobody)
            env.as_foreign_uid(nobody)
        bcast = s.make(tpbcast_impl, connect=5.0, init=5.0)
        # Waited for as long as the connect deadline: an implementation without one that
        # retries EACCES is left retrying (the rank's exit ends it), judged as not failing.
        call = _watch.Call(bcast.initialize, 1, 2, base)
        call.wait(5.0)
        return call.ended()  # the harness removes the workdir (we may no longer)

    ended = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    if s.check(
        "INIT-16",
        ended.failed and ended.raised.elapsed < 2.0,
        "EACCES fails the connect at once (under 2 s; no retry until the 5 s deadline)",
        ended,
        rank=1,
    ):
        raised = ended.raised
        s.check(
            "INIT-16",
            "EACCES" in raised.message or raised.attrs.get("errno_name") == "EACCES",
            "the error names EACCES",
            raised,
            rank=1,
        )


def _connected_to(before, path, bcast=None):
    """True if a socket opened since ``before`` is connected to ``path`` (getpeername)."""
    for _, sock in s.new_sockets(before, bcast):
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
    path = wire.socket_path(ctx.base_path)
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
            initialized = s.initialized(bcast)
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
    if not s.check(
        "INIT-17",
        raised is not None and s.says_uninitialized(initialized),
        "rank 0's initialize fails",
        (raised, initialized),
        rank=0,
    ):
        return
    took = failed_at - sent_at
    s.check(
        "INIT-17",
        took < s.MARGIN,
        f"a bad announcement ({bad}) behind a silent connection fails initialize within "
        f"{s.MARGIN:g} s of being sent (init deadline {init:g} s)",
        f"{raised} {took:.2f}s after the announcement",
        rank=0,
    )
    s.check(
        "INIT-17",
        s.mentions(raised, bad),
        f"the error names what the bad connection sent ({bad})",
        raised,
        rank=0,
    )
    s.check(
        "INIT-17",
        report.probe != wire.PROBE,
        "the bad connection never gets the probe",
        report,
        rank=0,
    )
