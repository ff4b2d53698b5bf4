"""SEC: private socket directory and file, peer uid checks, nothing at the path followed."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import stat

import pytest

from tpbcast.conformance.plugin import Unsupported, require
from tpbcast.harness import env, wire
from tpbcast.harness.rogue import rogue_peer

from . import _support as s
from . import _watch

NOBODY = 65534


def _need_root(what):
    if os.geteuid() != 0:
        raise Unsupported(f"UNSUPPORTED (precondition): {what} needs root to stage")


def _judge_refusal(cid, seen, impl, what, path):
    """``seen`` (a :class:`_watch.Watched` initialize) refused ``what`` with a security
    error naming ``path``.  Soft checks; False if it did not refuse at all."""
    if not s.check(
        cid,
        seen.refused,
        f"{what} is refused before anything is created or replaced",
        seen.describe(),
        rank=0,
    ):
        return False
    raised = seen.raised
    s.check(cid, path in raised.message, f"the error names the path {path}", raised, rank=0)
    if impl.supports("error_details"):
        s.check(cid, raised.is_a("PermissionError"), "a security error", raised, rank=0)
    return True


def _roundtrip(ctx, bcast, sizes):
    """``group_roundtrip``'s digests, or what it raised (observed, not a rank crash)."""
    box = []
    raised = s.attempt(lambda: box.extend(s.group_roundtrip(ctx, bcast, sizes)))
    return box if raised is None else raised


def _initialize_watched(bcast, base, changed):
    """Rank 0's initialize (world size 2) while the suite watches ``changed``: a call
    that goes on to wait for peers after a change is released by the suite joining."""
    path = wire.socket_path(base)
    return _watch.watched(
        lambda: bcast.initialize(0, 2, base), changed, lambda: _watch.join_as_peers(path)
    )


@pytest.mark.clause("SEC-1")
@pytest.mark.staged_via("uds-v1")
def test_missing_socket_dir_created_0700(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        os.umask(0)
        directory = os.path.join(ctx.workdir, "sub")
        base = os.path.join(directory, "b")
        bcast = s.make(tpbcast_impl)
        raised = s.attempt(bcast.initialize, ctx.rank, 2, base)
        mode = None
        if ctx.rank == 0 and os.path.isdir(directory):
            mode = stat.S_IMODE(os.stat(directory).st_mode)
        digest = None
        if raised is None:
            digest = s.group_roundtrip(ctx, bcast, [10])
            ctx.sync("done")
        elif ctx.rank == 0:
            # Rank 1 waits in connect for a rank 0 that failed: turn it away.
            _watch.turn_away_peers(wire.socket_path(base))
        bcast.reset()
        if ctx.rank == 0:
            ctx.wait("peer_reset", timeout=s.GROUP_TIMEOUT / 2)
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        else:
            ctx.notify("peer_reset")
        return raised, mode, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, mode, _ = result.outcomes[0].value
    s.check(
        "SEC-1",
        mode == 0o700,
        "a missing socket dir is created 0700 (umask 0)",
        f"mode {oct(mode)}" if mode is not None else f"no dir was created (initialize: {raised})",
        rank=0,
    )
    want = s.expected_digests(result.seed, [10])
    for outcome in result.outcomes:
        raised, _, digest = outcome.value
        s.check(
            "SEC-1",
            digest == want,
            "the group bootstraps and broadcasts in the dir it created",
            raised if raised is not None else f"digests {digest}, want {want}",
            rank=outcome.rank,
        )


@pytest.mark.clause("SEC-2")
@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701, 0o777])
def test_loose_socket_dir_refused(tpbcast_run, tpbcast_impl, mode):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        directory = os.path.join(ctx.workdir, "loose")
        os.mkdir(directory)
        os.chmod(directory, mode)
        base = os.path.join(directory, "b")
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        seen = _initialize_watched(bcast, base, _watch.dir_filled(directory))
        bcast.reset()
        after = stat.S_IMODE(os.stat(directory).st_mode), s.entries(directory)
        _empty_and_remove(directory)
        return seen, after, directory

    seen, after, directory = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    what = f"a socket dir of mode {oct(mode)}"
    if _judge_refusal("SEC-2", seen, tpbcast_impl, what, directory):
        spellings = (oct(mode)[2:], "0" + oct(mode)[2:], oct(mode))
        s.check(
            "SEC-2",
            any(s.mentions(seen.raised, m) for m in spellings),
            "the error names the mode",
            seen.raised,
            rank=0,
        )
    s.check("SEC-2", after == (mode, []), "the dir is left untouched", after, rank=0)


def _empty_and_remove(directory):
    """Remove a dir the test made, with whatever a wrong implementation left in it."""
    for name in s.entries(directory):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
    with contextlib.suppress(OSError):
        os.rmdir(directory)


@pytest.mark.clause("SEC-3")
def test_foreign_socket_dir_refused(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")
    _need_root("a socket dir owned by another user")

    def target(ctx):
        directory = os.path.join(ctx.workdir, "foreign")
        os.mkdir(directory, 0o700)
        os.chown(directory, NOBODY, NOBODY)
        base = os.path.join(directory, "b")
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        seen = _initialize_watched(bcast, base, _watch.dir_filled(directory))
        bcast.reset()
        left = s.entries(directory)
        _empty_and_remove(directory)
        return seen, left, directory

    seen, left, directory = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    what = "a socket dir owned by uid 65534"
    if _judge_refusal("SEC-3", seen, tpbcast_impl, what, directory):
        s.check(
            "SEC-3",
            s.mentions(seen.raised, NOBODY) or s.mentions(seen.raised, "nobody"),
            "the error names the owner",
            seen.raised,
            rank=0,
        )
    s.check("SEC-3", left == [], "nothing is created in it", left, rank=0)


@pytest.mark.clause("SEC-4")
def test_symlinked_socket_dir_refused(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        real = os.path.join(ctx.workdir, "real")
        link = os.path.join(ctx.workdir, "link")
        os.mkdir(real, 0o700)
        os.symlink(real, link)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        seen = _initialize_watched(bcast, os.path.join(link, "b"), _watch.dir_filled(real))
        bcast.reset()
        left = s.entries(real)
        os.unlink(link)
        _empty_and_remove(real)
        return seen, left, link

    seen, left, link = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _judge_refusal("SEC-4", seen, tpbcast_impl, "a symlinked socket dir", link)
    s.check("SEC-4", left == [], "nothing is created behind the link", left, rank=0)


@pytest.mark.clause("SEC-5")
def test_socket_file_is_private_before_any_accept(tpbcast_run, tpbcast_impl):
    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        failed = os.path.join(ctx.workdir, ".rank0-failed")
        if ctx.rank == 0:
            os.umask(0)
            bcast = s.make(tpbcast_impl)
            raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
            bcast.reset()
            if raised is not None:
                open(failed, "w").close()  # stops the peer's connect loop
                ctx.wait("peer_done", timeout=s.OBSERVE + 1.0)
                os.unlink(failed)
            return raised
        # A byte-level peer: it stats the file while its connection waits in the
        # backlog, i.e. before rank 0 accepted anyone, then completes the handshake.
        try:
            stop = lambda: os.path.exists(failed)  # noqa: E731
            try:
                sock = _watch.connect_unless(path, stop, wire.Deadline.after(s.OBSERVE))
            except wire.WireTimeoutError:
                return "rank 0 never listened"
            with sock:
                mode = stat.S_IMODE(os.stat(path).st_mode)
                sock.sendall(wire.pack_rank(1))
                wire.recv_exact(sock, 1, wire.Deadline.after(s.OBSERVE))
        except (OSError, TimeoutError) as exc:
            return f"the byte-level peer could not stat rank 0's socket: {exc!r}"
        finally:
            ctx.notify("peer_done")
        return mode

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    mode = result.outcomes[1].value
    s.precondition("SEC-5", isinstance(mode, int), f"{mode} (rank 0: {result.outcomes[0].value})")
    s.check(
        "SEC-5",
        mode & 0o077 == 0,
        "the socket file has no group/other bits once it accepts (umask 0)",
        oct(mode),
        rank=0,
    )


def _become_foreign_keep_fs_access(uid):
    """euid/ruid = ``uid`` (what SO_PEERCRED reports) but fsuid 0, so the rank can still
    reach a socket in the root-owned 0700 directory: only the uid check can stop it."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    os.setgroups([])
    if libc.setresgid(uid, uid, 0) != 0 or libc.setresuid(uid, uid, 0) != 0:
        raise OSError(ctypes.get_errno(), "setresuid")
    libc.setfsuid(0)
    if libc.setfsuid(-1) != 0:
        raise OSError(ctypes.get_errno(), "setfsuid(0) did not stick")
    return os.geteuid()


@pytest.mark.clause("SEC-6")
def test_peer_of_another_uid_is_rejected(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "peer_credentials")
    _need_root("a peer of another uid")

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=8.0)
            raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
            digest = _roundtrip(ctx, bcast, [50]) if raised is None else None
            bcast.reset()
            if raised is not None:
                # Rank 2 (the real peer) comes after the foreign one: turn it away.
                ctx.wait("foreign_done", timeout=15)
                _watch.turn_away_peers(path)
            return raised, digest
        if ctx.rank == 1:
            euid = _become_foreign_keep_fs_access(NOBODY)
            report = rogue_peer("announce", rank=1, observe=s.OBSERVE)(ctx)
            ctx.notify("foreign_done")
            return euid, report
        ctx.wait("foreign_done", timeout=15)
        bcast = s.make(tpbcast_impl, connect=1.0, init=3.0)  # rank 0 may have failed
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        digest = None
        if raised is None:
            digest = _roundtrip(type("Ctx", (), {"rank": 1, "seed": ctx.seed})(), bcast, [50])
        bcast.reset()
        return raised, digest

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    euid, report = result.outcomes[1].value
    s.fault_happened("SEC-6", euid == NOBODY and report.did("connect"), report.actions)
    s.check(
        "SEC-6",
        report.probe != wire.PROBE and report.reaction.value != "open",
        "a peer of uid 65534 is dropped and never gets the probe",
        f"the foreign peer got {'no probe' if report.probe is None else hex(report.probe)} "
        f"and saw the link {report.reaction.value if report.reaction else 'unwatched'}",
        rank=0,
    )
    raised, digest = result.outcomes[0].value
    if raised is None:
        want = s.expected_digests(result.seed, [50])
        s.check(
            "SEC-6",
            digest == result.outcomes[2].value[1] == want,
            "the slot stays free for the real peer: it joins and receives the payload",
            f"rank 0: {digest}; the real peer: {result.outcomes[2].value}",
            rank=0,
        )
    else:
        s.check("SEC-6", s.mentions(raised, NOBODY), "rank 0's error names the foreign uid", raised)


@pytest.mark.clause("SEC-7")
def test_stale_socket_replaced(tpbcast_run, tpbcast_impl):
    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            env.leave_stale_socket(path)
            s.precondition(
                "SEC-7",
                s.connect_refused(path) and s.kind_of(path) == "socket",
                f"no stale socket could be staged at {path}",
            )
            ctx.notify("stale")
        else:
            ctx.wait("stale", timeout=10)
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        raised = s.attempt(bcast.initialize, ctx.rank, 2, ctx.base_path)
        digest = None
        if raised is None:
            digest = s.group_roundtrip(ctx, bcast, [100])
            ctx.sync("done")
        elif ctx.rank == 0:
            # Rank 1 retries connect on a path rank 0 never listened at: turn it away
            # (replacing the stale socket the implementation kept, as it should have).
            _watch.turn_away_peers(path)
        bcast.reset()
        return raised, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    want = s.expected_digests(result.seed, [100])
    for outcome in result.outcomes:
        raised, digest = outcome.value
        s.check(
            "SEC-7",
            raised is None and digest == want,
            "rank 0 replaces a stale socket and the group bootstraps and broadcasts normally",
            raised if raised is not None else f"digests {digest}, want {want}",
            rank=outcome.rank,
        )


@pytest.mark.clause("SEC-8")
@pytest.mark.parametrize("kind", ["file", "dir", "symlink"])
def test_non_socket_at_path_refused_and_untouched(tpbcast_run, tpbcast_impl, kind):
    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        victim = os.path.join(ctx.workdir, "victim")
        with open(victim, "w") as fh:
            fh.write("precious")
        if kind == "file":
            with open(path, "w") as fh:
                fh.write("precious")
        elif kind == "dir":
            os.mkdir(path, 0o700)
        else:
            os.symlink(victim, path)
        before = os.lstat(path)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        # An implementation that removes the thing and waits in accept (with no
        # deadline, for ever) is released by the suite joining as its peer.
        seen = _initialize_watched(bcast, ctx.base_path, _watch.path_changed(path, before))
        bcast.reset()
        try:
            after = os.lstat(path)
        except FileNotFoundError:
            after = None
        with open(victim) as fh:
            intact = fh.read() == "precious"
        same = after is not None and (before.st_ino, before.st_mode) == (
            after.st_ino,
            after.st_mode,
        )
        return seen, same and intact, s.kind_of(path), path

    seen, same, now, path = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _judge_refusal("SEC-8", seen, tpbcast_impl, f"a {kind} at the socket path", path)
    s.check(
        "SEC-8",
        same and seen.change is None,
        f"the {kind} is left untouched",
        f"{seen.change or 'it changed after initialize'}; after reset: "
        f"{'nothing' if now == 'missing' else 'a ' + now} at the path",
        rank=0,
    )


@pytest.mark.clause("SEC-9")
@pytest.mark.parametrize("spelling", ["as listened", "with a leading //"])
def test_live_listener_not_stolen(tpbcast_run, tpbcast_impl, spelling):
    """Rank 0 is given the base path the other listener used, or the same path spelt with
    a leading ``//`` (one file to the kernel, which lists the name as it was bound): a
    check that compares spellings, not files, takes the live socket over."""
    import socket

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        base = "/" + ctx.base_path if spelling.endswith("//") else ctx.base_path
        if ctx.rank == 1:
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(path)
            srv.listen(4)
            ino = os.stat(path).st_ino
            ctx.notify("listening")
            ctx.wait("root_done", timeout=15)
            still = os.path.exists(path) and os.stat(path).st_ino == ino
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                reachable = probe.connect_ex(path) == 0
            srv.close()
            if still:
                os.unlink(path)
            return still, reachable
        ctx.wait("listening", timeout=10)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        # A rank 0 that takes the path over and waits for peers (with no deadline, for
        # ever) is released by the suite joining as its peer.
        seen = _initialize_watched(bcast, base, _watch.path_changed(path, os.lstat(path)))
        bcast.reset()
        ctx.notify("root_done")
        return seen

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    seen = result.outcomes[0].value
    still, reachable = result.outcomes[1].value
    s.check(
        "SEC-9",
        seen.refused and still and reachable,
        f"rank 0, given the base path {spelling}, refuses a path with a live listener "
        "instead of unlinking it",
        f"{seen.describe()}; the other listener's socket file "
        f"{'is still there' if still else 'was removed'} and "
        f"{'still' if reachable else 'no longer'} reachable",
        rank=0,
    )


@pytest.mark.clause("SEC-11")
@pytest.mark.world_size(2, 3)
def test_every_fd_is_close_on_exec(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        before = s.fd_table()
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        opened = s.new_fds(before, bcast)  # sockets, pipes, shared-memory fds: every kind
        bad = [f"pid {k[0]} fd {k[1]} ({w})" for k, w in opened.items() if s.cloexec(k) is False]
        ctx.sync("checked")
        bcast.reset()
        return len(opened), bad

    for outcome in tpbcast_run(target, timeout=s.GROUP_TIMEOUT).outcomes:
        count, bad = outcome.value
        if s.stageable("SEC-11", count >= 1, f"rank {outcome.rank} holds no fd after initialize"):
            s.check("SEC-11", not bad, "every fd is CLOEXEC", bad, rank=outcome.rank)


@pytest.mark.clause("SEC-12")
def test_two_groups_in_one_directory(tpbcast_run, tpbcast_impl):
    sizes = [1, 1000, 70000]

    def target(ctx):
        group, rank = divmod(ctx.rank, 2)
        base = os.path.join(ctx.workdir, f"group{group}")
        bcast = s.make(tpbcast_impl)
        ctx.sync("start")
        bcast.initialize(rank, 2, base)
        sub = type("Ctx", (), {"rank": rank, "seed": ctx.seed})()
        got = s.group_roundtrip(sub, bcast, sizes, salt=("g", group))
        bcast.reset()
        return got

    result = tpbcast_run(target, 4, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        group = outcome.rank // 2
        want = s.expected_digests(result.seed, sizes, salt=("g", group))
        s.check(
            "SEC-12",
            outcome.value == want,
            f"group {group} in the shared dir sees only its own bytes",
            f"digests {outcome.value}, want {want}",
            rank=outcome.rank,
        )


@pytest.mark.staged_via("uds-v1")  # a byte-level wire-v1 peer
@pytest.mark.clause("SEC-10")
def test_abstract_namespace_mode(tpbcast_run, tpbcast_impl):
    """MAY: with abstract mode on, the address is NUL + path and no file is created; a
    byte-level peer reaches rank 0 at that abstract address."""
    require(tpbcast_impl, "abstract_namespace")
    data = s.payload(tpbcast_run.seed, 500, "abs")

    def target(ctx):
        if ctx.rank == 1:
            return rogue_peer("read_payload", rank=1, nbytes=len(data), abstract=True)(ctx)
        bcast = s.make(tpbcast_impl)
        bcast.set_abstract_namespace(True)
        listing = s.entries(ctx.workdir)
        bcast.initialize(0, 2, ctx.base_path)
        created = sorted(set(s.entries(ctx.workdir)) - set(listing))
        bcast.broadcast(bytearray(data))
        bcast.reset()
        return created

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    created = result.outcomes[0].value
    s.check("SEC-10", created == [], "abstract mode creates no file", created, rank=0)
    s.check(
        "SEC-10",
        result.outcomes[1].value.received == b"\x5a" + data,
        "rank 0 listens at NUL + <base_path>_0.sock",
        "a byte-level peer got no data",
        rank=0,
    )
