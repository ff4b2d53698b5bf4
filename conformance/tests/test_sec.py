"""SEC: private socket directory and file, peer uid checks, nothing at the path followed."""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import stat

import pytest

from tpbcast.conformance.plugin import Unsupported, require

from . import _support as s
from ._support import rogue_peer

NOBODY = 65534


def _need_root(what):
    if os.geteuid() != 0:
        raise Unsupported(f"UNSUPPORTED (precondition): {what} needs root to stage")


def _security_error(raised, impl, cid, what, path):
    assert raised is not None, s.clause(cid, f"{what} is refused", "initialize succeeded")
    assert path in raised.message, s.clause(cid, f"the error names the path {path}", raised)
    if impl.supports("error_details"):
        assert raised.is_a("PermissionError"), s.clause(cid, "a security error", raised)


@pytest.mark.clause("SEC-1")
def test_missing_socket_dir_created_0700(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        os.umask(0)
        directory = os.path.join(ctx.workdir, "sub")
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, os.path.join(directory, "b"))
        mode = stat.S_IMODE(os.stat(directory).st_mode) if ctx.rank == 0 else None
        s.group_roundtrip(ctx, bcast, [10])
        ctx.sync("done")
        bcast.reset()
        if ctx.rank == 0:
            os.rmdir(directory)
        return mode

    mode = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    assert mode == 0o700, s.clause(
        "SEC-1", "a missing socket dir is created 0700 (umask 0)", oct(mode)
    )


@pytest.mark.clause("SEC-2")
@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701, 0o777])
def test_loose_socket_dir_refused(tpbcast_run, tpbcast_impl, mode):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        directory = os.path.join(ctx.workdir, "loose")
        os.mkdir(directory)
        os.chmod(directory, mode)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 0, 2, os.path.join(directory, "b"))
        after = stat.S_IMODE(os.stat(directory).st_mode), s.entries(directory)
        os.rmdir(directory)
        return raised, after, directory

    raised, after, directory = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _security_error(raised, tpbcast_impl, "SEC-2", f"a socket dir of mode {oct(mode)}", directory)
    spellings = (oct(mode)[2:], "0" + oct(mode)[2:], oct(mode))
    assert any(s.mentions(raised, m) for m in spellings), s.clause(
        "SEC-2", "the error names the mode", raised
    )
    assert after == (mode, []), s.clause("SEC-2", "the dir is left untouched", after)


@pytest.mark.clause("SEC-3")
def test_foreign_socket_dir_refused(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")
    _need_root("a socket dir owned by another user")

    def target(ctx):
        directory = os.path.join(ctx.workdir, "foreign")
        os.mkdir(directory, 0o700)
        os.chown(directory, NOBODY, NOBODY)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 0, 2, os.path.join(directory, "b"))
        left = s.entries(directory)
        os.rmdir(directory)
        return raised, left, directory

    raised, left, directory = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _security_error(raised, tpbcast_impl, "SEC-3", "a socket dir owned by uid 65534", directory)
    assert s.mentions(raised, NOBODY) or s.mentions(raised, "nobody"), s.clause(
        "SEC-3", "the error names the owner", raised
    )
    assert left == [], s.clause("SEC-3", "nothing is created in it", left)


@pytest.mark.clause("SEC-4")
def test_symlinked_socket_dir_refused(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "secure_dir")

    def target(ctx):
        real = os.path.join(ctx.workdir, "real")
        link = os.path.join(ctx.workdir, "link")
        os.mkdir(real, 0o700)
        os.symlink(real, link)
        bcast = s.make(tpbcast_impl, init=s.SHORT)
        raised = s.attempt(bcast.initialize, 0, 2, os.path.join(link, "b"))
        left = s.entries(real)
        os.unlink(link)
        os.rmdir(real)
        return raised, left, link

    raised, left, link = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _security_error(raised, tpbcast_impl, "SEC-4", "a symlinked socket dir", link)
    assert left == [], s.clause("SEC-4", "nothing is created behind the link", left)


@pytest.mark.clause("SEC-5")
def test_socket_file_is_private_before_any_accept(tpbcast_run, tpbcast_impl):
    def target(ctx):
        path = s.sock_path(ctx.base_path)
        if ctx.rank == 0:
            os.umask(0)
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 2, ctx.base_path)
            bcast.reset()
            return None
        with s.raw_connect(path) as sock:
            mode = stat.S_IMODE(os.stat(path).st_mode)
            s.announce(sock, 1)
            s.read_exact(sock, 1)
        return mode

    mode = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert mode & 0o077 == 0, s.clause(
        "SEC-5", "the socket file has no group/other bits once it accepts (umask 0)", oct(mode)
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
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, init=8.0)
            raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
            digest = None
            if raised is None:
                digest = s.group_roundtrip(ctx, bcast, [50])
            bcast.reset()
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
            ctx_rank = type("Ctx", (), {"rank": 1, "seed": ctx.seed})()
            digest = s.group_roundtrip(ctx_rank, bcast, [50])
        bcast.reset()
        return raised, digest

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    euid, report = result.outcomes[1].value
    s.precondition(
        "SEC-6",
        euid == NOBODY and report.did("connect"),
        f"the fault did not happen: {report.actions}",
    )
    assert report.probe != 0x5A and report.reaction.value != "open", s.clause(
        "SEC-6", "a peer of uid 65534 is dropped and never gets the probe", report
    )
    raised, digest = result.outcomes[0].value
    if raised is None:
        assert digest == result.outcomes[2].value[1] == s.expected_digests(result.seed, [50]), (
            s.clause("SEC-6", "the slot stays free for the real peer", digest)
        )
    else:
        assert s.mentions(raised, NOBODY), s.clause(
            "SEC-6", "rank 0's error names the foreign uid", raised
        )


@pytest.mark.clause("SEC-7")
def test_stale_socket_replaced(tpbcast_run, tpbcast_impl):
    def target(ctx):
        path = s.sock_path(ctx.base_path)
        if ctx.rank == 0:
            s.stale_socket(path)
            s.precondition(
                "SEC-7",
                s.connect_refused(path) and s.kind_of(path) == "socket",
                f"no stale socket could be staged at {path}",
            )
            ctx.notify("stale")
        else:
            ctx.wait("stale", timeout=10)
        bcast = s.make(tpbcast_impl, connect=10.0, init=10.0)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        digest = s.group_roundtrip(ctx, bcast, [100])
        ctx.sync("done")
        bcast.reset()
        return digest, s.kind_of(path)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    want = s.expected_digests(result.seed, [100])
    assert all(o.value[0] == want for o in result.outcomes), s.clause(
        "SEC-7", "rank 0 replaces a stale socket and bootstraps normally", result.outcomes
    )


@pytest.mark.clause("SEC-8")
@pytest.mark.parametrize("kind", ["file", "dir", "symlink"])
def test_non_socket_at_path_refused_and_untouched(tpbcast_run, tpbcast_impl, kind):
    def target(ctx):
        path = s.sock_path(ctx.base_path)
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
        raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        bcast.reset()
        after = os.lstat(path)
        with open(victim) as fh:
            intact = fh.read() == "precious"
        same = (before.st_ino, before.st_mode) == (after.st_ino, after.st_mode) and intact
        return raised, same, path

    raised, same, path = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    _security_error(raised, tpbcast_impl, "SEC-8", f"a {kind} at the socket path", path)
    assert same, s.clause("SEC-8", f"the {kind} is left untouched", same)


@pytest.mark.clause("SEC-9")
def test_live_listener_not_stolen(tpbcast_run, tpbcast_impl):
    import socket

    def target(ctx):
        path = s.sock_path(ctx.base_path)
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
        raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        bcast.reset()
        ctx.notify("root_done")
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised = result.outcomes[0].value
    still, reachable = result.outcomes[1].value
    assert raised is not None and still and reachable, s.clause(
        "SEC-9",
        "rank 0 refuses a path with a live listener instead of unlinking it",
        f"initialize {'raised ' + str(raised) if raised else 'returned'}; the other "
        f"listener's socket file {'is still there' if still else 'was removed'} and "
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
        opened = {fd: w for fd, w in s.new_fds(before).items() if w.startswith("socket:")}
        bad = [
            f"fd {fd} ({w})"
            for fd, w in opened.items()
            if not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        ]
        ctx.sync("checked")
        bcast.reset()
        return len(opened), bad

    for outcome in tpbcast_run(target, timeout=s.GROUP_TIMEOUT).outcomes:
        count, bad = outcome.value
        s.precondition(
            "SEC-11", count >= 1, f"rank {outcome.rank} opened no socket: nothing to judge"
        )
        assert not bad, s.clause("SEC-11", "every fd is CLOEXEC", bad, rank=outcome.rank)


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
        assert outcome.value == want, s.clause(
            "SEC-12",
            f"group {group} in the shared dir sees only its own bytes",
            f"digests {outcome.value}, want {want}",
            rank=outcome.rank,
        )


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
    assert result.outcomes[0].value == [], s.clause(
        "SEC-10", "abstract mode creates no file", result.outcomes[0].value
    )
    assert result.outcomes[1].value.received == b"\x5a" + data, s.clause(
        "SEC-10", "rank 0 listens at NUL + <base_path>_0.sock", "a byte-level peer got no data"
    )
