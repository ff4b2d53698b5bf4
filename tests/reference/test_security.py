"""Socket directory and file modes, refused paths, path length, abstract namespace,
SO_PEERCRED, CLOEXEC and fd hygiene, and concurrent groups on one host."""

from __future__ import annotations

import fcntl
import os
import socket
import stat

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    BroadcastTimeoutError,
    ConfigurationError,
    CpuTpBroadcaster,
    PeerClosedError,
    SecurityError,
    make_base_path,
)

from ._helpers import RUN, Event, fast_config, list_fds

is_root = os.geteuid() == 0
NOBODY = 65534


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_socket_file_0600_and_new_dir_0700(short_dir: str) -> None:
    base = os.path.join(short_dir, "new", "g")  # the directory does not exist yet

    def root(ctx: RankContext) -> tuple[int, int]:
        old_umask = os.umask(0)  # the widest umask must not widen our modes
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 2, base)
        ctx.notify("ready")
        modes = (_mode(os.path.dirname(base)), _mode(base + "_0.sock"))
        ctx.wait("checked")
        b.reset()
        os.umask(old_umask)
        return modes

    def peer(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base)
        ctx.wait("ready")
        ctx.notify("checked")
        b.reset()
        return True

    (dir_mode, sock_mode), _ = run_ranks({0: root, 1: peer}, **RUN).values()
    assert dir_mode == 0o700
    assert sock_mode == 0o600
    assert not os.path.exists(base + "_0.sock")  # reset removed it


def _init_root_alone(base: str, **cfg: object) -> BaseException:
    b = CpuTpBroadcaster(fast_config(init_timeout=0.2, **cfg))
    before = list_fds()
    with pytest.raises(Exception) as info:
        b.initialize(0, 2, base)
    assert list_fds() == before and not b.is_initialized()
    return info.value


def test_loose_dir_is_refused(short_dir: str) -> None:
    os.chmod(short_dir, 0o755)
    err = _init_root_alone(os.path.join(short_dir, "g"))
    assert isinstance(err, SecurityError)
    assert "mode 0755" in str(err) and "Fix this and try again" in str(err)
    assert err.path == short_dir
    assert os.listdir(short_dir) == []  # nothing was bound
    os.chmod(short_dir, 0o700)
    # the opt-out exists for callers who manage the directory themselves
    os.chmod(short_dir, 0o755)
    err = _init_root_alone(os.path.join(short_dir, "g"), verify_socket_dir=False)
    assert err.phase == "accept"  # got past the dir check, timed out waiting for peers


@pytest.mark.skipif(not is_root, reason="chown to another user needs root")
def test_foreign_owner_dir_is_refused(short_dir: str) -> None:
    os.chown(short_dir, NOBODY, NOBODY)
    assert os.stat(short_dir).st_uid == NOBODY
    err = _init_root_alone(os.path.join(short_dir, "g"))
    assert isinstance(err, SecurityError)
    assert f"owned by uid {NOBODY}" in str(err)


def test_symlinked_dir_is_refused(short_dir: str) -> None:
    real = os.path.join(short_dir, "real")
    os.mkdir(real, 0o700)
    link = os.path.join(short_dir, "l")
    os.symlink(real, link)
    err = _init_root_alone(os.path.join(link, "g"))
    assert isinstance(err, SecurityError)
    assert "a symlink" in str(err)
    assert os.listdir(real) == []


@pytest.mark.parametrize("kind", ["file", "dir", "symlink"])
def test_non_socket_at_socket_path_is_refused(base_path: str, kind: str) -> None:
    path = base_path + "_0.sock"
    if kind == "file":
        with open(path, "w") as fh:
            fh.write("precious")
    elif kind == "dir":
        os.mkdir(path)
    else:
        os.symlink("/etc/hostname", path)
    err = _init_root_alone(base_path)
    assert isinstance(err, SecurityError)
    assert "refusing to replace it" in str(err) and err.path == path
    assert os.path.lexists(path)  # untouched
    if kind == "file":
        with open(path) as fh:
            assert fh.read() == "precious"


def test_stale_socket_is_replaced(base_path: str) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(base_path + "_0.sock")
    stale.close()
    os.chmod(base_path + "_0.sock", 0o640)  # marks the leftover (inodes get reused)

    def rank_main(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank, 2, base_path)
        if ctx.rank == 0:
            assert _mode(base_path + "_0.sock") == 0o600  # a fresh socket replaced it
        buf = bytearray(b"new!" if ctx.rank == 0 else 4)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    assert run_ranks(rank_main, 2, **RUN).values() == [b"new!", b"new!"]


def test_live_listener_is_not_taken_over(base_path: str) -> None:
    """A socket someone listens on is a second group, not a leftover."""
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(base_path + "_0.sock")
    other.listen(1)
    try:
        err = _init_root_alone(base_path)
        assert isinstance(err, SecurityError)
        assert "another process is listening" in str(err)
        assert err.errno_name == "EADDRINUSE"
        assert os.path.exists(base_path + "_0.sock")
    finally:
        other.close()


def test_a_live_listener_is_not_taken_over_through_a_leading_double_slash(
    base_path: str,
) -> None:
    """Another group listens at ``<dir>/g_0.sock``; rank 0 is given the same base path spelt
    ``//<dir>/g``, the same file to the kernel.  It must refuse the path as it refuses the
    plain spelling (test_security.test_live_listener_is_not_taken_over) and leave the
    other group's socket file where it is.  (Found by an audit of the mutation
    equivalents: the check compared spellings, and ``abspath`` keeps a leading ``//``.)"""
    path = base_path + "_0.sock"
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(path)
        other.listen(1)
        ident = os.lstat(path).st_ino
        with open("/proc/net/unix", "rb") as fh:
            assert path.encode() in fh.read().split()  # listed as bound, single slash
        twin = "/" + base_path
        assert os.path.abspath(twin).startswith("//")  # the spelling survives abspath
        b = CpuTpBroadcaster(fast_config(init_timeout=0.2))
        before = list_fds()
        try:
            with pytest.raises(SecurityError) as info:
                b.initialize(0, 2, twin)
        finally:
            b.reset()
        assert list_fds() == before
        assert "another process is listening" in str(info.value)
        assert info.value.errno_name == "EADDRINUSE"
        assert os.lstat(path).st_ino == ident  # the other group's socket file is untouched
    finally:
        other.close()


def test_a_stale_socket_is_replaced_beside_an_unrelated_live_listener(base_path: str) -> None:
    """The listener check compares files, not names: a live listener on ANOTHER file in
    the same directory does not make our stale socket live.  Rank 0 takes the stale path
    over and then waits for its missing peer (ETIMEDOUT), instead of refusing."""
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(base_path + "_0.sock")
    stale.close()  # bound, never listened: a leftover
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(base_path + "_other.sock")
        other.listen(1)
        with open("/proc/net/unix", "rb") as fh:  # the unrelated listener is really there
            assert (base_path + "_other.sock").encode() in fh.read().split()
        err = _init_root_alone(base_path)
    finally:
        other.close()
    assert isinstance(err, BroadcastTimeoutError), repr(err)
    assert (err.phase, err.errno_name) == ("accept", "ETIMEDOUT")


def test_live_listener_bound_by_a_relative_name_is_not_taken_over(base_path: str) -> None:
    """/proc/net/unix shows a relative bind as given; it still counts as live."""

    def other_group(ctx: RankContext) -> str:
        os.chdir(os.path.dirname(base_path))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = os.path.basename(base_path) + "_0.sock"
        sock.bind(name)  # relative: /proc/net/unix lists "g_0.sock"
        sock.listen(1)
        with open("/proc/net/unix", "rb") as fh:
            listed = name.encode() in fh.read().split()
        ctx.notify("listening")
        ctx.wait("done")
        sock.close()
        return "listed" if listed else "not listed"

    def intruder(ctx: RankContext) -> BaseException:
        ctx.wait("listening")
        try:
            return _init_root_alone(base_path)
        finally:
            ctx.notify("done")

    listed, err = run_ranks({0: other_group, 1: intruder}, **RUN).values()
    assert listed == "listed"  # the fault: a live listener known only by a relative name
    assert isinstance(err, SecurityError), err
    assert "another process is listening" in str(err)


def _dir_for_length(short_dir: str, total: int) -> str:
    """A base path whose socket path is exactly ``total`` bytes."""
    prefix = os.path.join(short_dir, "d")
    name_len = total - len(prefix) - 1 - len("g_0.sock")
    directory = prefix + "x" * (name_len - 1) if name_len > 1 else prefix
    base = os.path.join(directory, "g" + "y" * (total - len(directory) - 1 - len("g_0.sock")))
    assert len((base + "_0.sock").encode()) == total
    return base


def test_path_of_107_bytes_works_and_108_is_refused(short_dir: str) -> None:
    base107 = _dir_for_length(short_dir, 107)
    base108 = _dir_for_length(short_dir, 108)

    def rank_main(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank, 2, base107)
        buf = bytearray(b"107" if ctx.rank == 0 else 3)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    assert run_ranks(rank_main, 2, **RUN).values() == [b"107", b"107"]
    for rank in (0, 1):
        with pytest.raises(ConfigurationError, match="108 bytes, the limit is 107"):
            CpuTpBroadcaster(fast_config()).initialize(rank, 2, base108)
    assert not os.path.exists(os.path.dirname(base108))  # refused before any mkdir/bind


@pytest.mark.parametrize("world_size", [2, 4])
def test_abstract_namespace(short_dir: str, world_size: int) -> None:
    base = os.path.join(short_dir, "abs")

    def rank_main(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config(abstract_namespace=True))
        b.initialize(ctx.rank, world_size, base)
        if ctx.rank == 0:
            with open("/proc/net/unix", "rb") as fh:
                assert b"@" + (base + "_0.sock").encode() in fh.read()
        buf = bytearray(b"abstract" if ctx.rank == 0 else 8)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    assert run_ranks(rank_main, world_size, **RUN).values() == [b"abstract"] * world_size
    assert os.listdir(short_dir) == []  # no file, no stale socket


@pytest.mark.skipif(not is_root, reason="a peer of another uid needs setuid (root)")
@pytest.mark.parametrize("allowed", [False, True])
def test_so_peercred_rejects_other_uid(short_dir: str, allowed: bool) -> None:
    base = os.path.join(short_dir, "cred")  # abstract: no file permission in the way
    root_cfg = fast_config(abstract_namespace=True, allowed_uids=(NOBODY,) if allowed else ())
    peer_cfg = fast_config(abstract_namespace=True, allowed_uids=(0,) if allowed else ())

    def root(ctx: RankContext) -> object:
        b = CpuTpBroadcaster(root_cfg)
        try:
            b.initialize(0, 2, base)
        except SecurityError as exc:
            return exc
        b.reset()
        return "joined"

    def peer(ctx: RankContext) -> object:
        os.setgid(NOBODY)
        os.setuid(NOBODY)  # the fault: a process of another user
        assert os.geteuid() == NOBODY
        b = CpuTpBroadcaster(peer_cfg)
        try:
            b.initialize(1, 2, base)
        except (SecurityError, PeerClosedError) as exc:
            return type(exc).__name__
        b.reset()
        return "joined"

    r0, r1 = run_ranks({0: root, 1: peer}, **RUN).values()
    if allowed:  # the control: the same setuid peer joins when its uid is allowed
        assert (r0, r1) == ("joined", "joined")
        return
    assert isinstance(r0, SecurityError)
    assert f"uid {NOBODY}" in str(r0) and "pid " in str(r0)
    assert r1 in {"SecurityError", "PeerClosedError"}


def test_all_fds_cloexec_and_closed_after_reset(base_path: str) -> None:
    def rank_main(ctx: RankContext) -> tuple[int, bool]:
        before = list_fds()
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank, 3, base_path)
        new = list_fds() - before
        # listener + 2 peers, or 1 link; plus the abort self-pipe (2 fds)
        assert len(new) == (3 if ctx.rank == 0 else 1) + 2
        cloexec = all(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC for fd in new)
        b.broadcast(bytearray(b"x" if ctx.rank == 0 else 1))
        b.reset()
        assert list_fds() == before
        b.reset()  # idempotent: nothing left to close
        assert list_fds() == before
        return len(new), cloexec

    assert run_ranks(rank_main, 3, **RUN).values() == [(5, True), (3, True), (3, True)]
    assert not os.path.exists(base_path + "_0.sock")


def test_failed_initialize_then_retry_works(base_path: str) -> None:
    """A rank-0 init that timed out leaves nothing behind; the retry succeeds."""

    def root(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config(init_timeout=0.3))
        before = list_fds()
        with pytest.raises(Exception):  # noqa: B017  (BroadcastTimeoutError)
            b.initialize(0, 2, base_path)
        assert list_fds() == before and not os.path.exists(base_path + "_0.sock")
        ctx.notify("first_failed")
        b.initialize(0, 2, base_path, config=fast_config())
        buf = bytearray(b"retry")
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    def peer(ctx: RankContext) -> bytes:
        ctx.wait("first_failed")
        b = CpuTpBroadcaster(fast_config())
        b.initialize(1, 2, base_path)
        buf = bytearray(5)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    assert run_ranks({0: root, 1: peer}, **RUN).values() == [b"retry", b"retry"]


def test_two_concurrent_groups_with_make_base_path(short_dir: str) -> None:
    """Two launchers each start a TP=2 group; the default session ids differ.

    The two groups order themselves with :class:`Event` pipes: they have no sync point
    in common (each is its own ``run_ranks``, inside a launcher rank)."""
    both_up = [Event(), Event()]

    def launcher(ctx: RankContext) -> list[tuple[str, bytes]]:
        group = ctx.rank
        other = both_up[1 - group]
        mine = both_up[group]

        def rank_main(ctx: RankContext) -> tuple[str, bytes]:
            # the ranks are siblings under this launcher: same ppid, same path
            base = make_base_path(base_dir=short_dir, environ={})
            b = CpuTpBroadcaster(fast_config())
            b.initialize(ctx.rank, 2, base)
            mine.notify()
            other.wait()  # the other group is initialized at the same time
            buf = bytearray(f"group{group}".encode() if ctx.rank == 0 else 6)
            b.broadcast(buf)
            b.reset()
            return base, bytes(buf)

        return run_ranks(rank_main, 2, **RUN).values()

    try:
        group_a, group_b = run_ranks(launcher, 2, **(RUN | {"timeout": 30.0})).values()
    finally:
        for event in both_up:
            event.close()
    (base_a, _), (base_b, _) = group_a[0], group_b[0]
    assert {base for base, _ in group_a} == {base_a}
    assert {base for base, _ in group_b} == {base_b}
    assert base_a != base_b
    assert [data for _, data in group_a] == [b"group0"] * 2
    assert [data for _, data in group_b] == [b"group1"] * 2


def test_second_group_on_the_same_path_is_refused_not_hijacking(base_path: str) -> None:
    """Same ppid and no key: the collision is loud, and the first group keeps working."""

    def rank_main(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank, 2, base_path)
        if ctx.rank == 0:
            ctx.notify("up")
        ctx.wait("refused")
        buf = bytearray(b"still ok" if ctx.rank == 0 else 8)
        b.broadcast(buf)
        b.reset()
        return bytes(buf)

    def intruder(ctx: RankContext) -> SecurityError:
        ctx.wait("up")
        try:
            err = _init_root_alone(base_path)
            assert os.path.exists(base_path + "_0.sock")  # the first group's file survives
        finally:
            ctx.notify("refused")
        assert isinstance(err, SecurityError)
        return err

    r0, r1, bad = run_ranks({0: rank_main, 1: rank_main, 2: intruder}, **RUN).values()
    assert r0 == r1 == b"still ok"
    assert "another process is listening" in str(bad)
