"""Self-tests of the environment faults: each is real, proven, and cleaned up."""

from __future__ import annotations

import os
import pickle
import socket
import stat
import struct

import pytest

from tpbcast.harness import RankContext, env, run_ranks

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown/setuid)")


def test_stale_socket_is_a_socket_nobody_listens_on(short_dir):
    path = f"{short_dir}/g_0.sock"
    with env.stale_socket(path) as proof:
        st = os.lstat(path)
        assert stat.S_ISSOCK(st.st_mode)
        assert proof.inode == st.st_ino and proof.still_present()
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with probe, pytest.raises(ConnectionRefusedError):
            probe.connect(path)
    assert not os.path.lexists(path)


def test_cleanup_leaves_alone_what_an_implementation_put_there(short_dir):
    path = f"{short_dir}/g_0.sock"
    with env.stale_socket(path) as proof:
        os.unlink(path)  # what an implementation does: replace the stale socket
        live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        live.bind(path)
        assert not proof.still_present()
    assert os.path.lexists(path)  # not ours: kept
    live.close()


def test_path_faults_refuse_to_overwrite(short_dir):
    path = f"{short_dir}/taken"
    with open(path, "w"):
        pass
    for fault in (env.stale_socket(path), env.regular_file_at(path), env.symlink_at(path, "/")):
        with pytest.raises(FileExistsError, match="not replacing it"), fault:
            pass
    assert stat.S_ISREG(os.lstat(path).st_mode)


def test_regular_file_at(short_dir):
    path = f"{short_dir}/g_0.sock"
    with env.regular_file_at(path, b"keep me") as proof:
        assert stat.S_ISREG(os.lstat(path).st_mode)
        assert proof.kind == "regular_file" and proof.still_present()
        with open(path, "rb") as handle:
            assert handle.read() == b"keep me"
    assert not os.path.lexists(path)


def test_symlink_at(short_dir):
    path = f"{short_dir}/g_0.sock"
    target = f"{short_dir}/elsewhere.sock"
    with env.symlink_at(path, target) as proof:
        assert os.path.islink(path)
        assert proof.target == os.readlink(path) == target
        assert stat.S_ISLNK(proof.mode)
        assert not os.path.exists(target)  # dangling on purpose
    assert not os.path.lexists(path)


@pytest.mark.parametrize("mode", [0o755, 0o777])
def test_loose_dir_ignores_umask_and_is_removed(short_dir, mode):
    path = f"{short_dir}/sock"
    old = os.umask(0o077)
    try:
        with env.loose_dir(path, mode) as proof:
            assert stat.S_IMODE(os.lstat(path).st_mode) == mode
            assert proof.permissions == mode and proof.created
    finally:
        os.umask(old)
    assert not os.path.lexists(path)


def test_loose_dir_restores_an_existing_dir(short_dir):
    os.chmod(short_dir, 0o700)
    with env.loose_dir(short_dir) as proof:
        assert not proof.created
        assert stat.S_IMODE(os.stat(short_dir).st_mode) == 0o777
    assert stat.S_IMODE(os.stat(short_dir).st_mode) == 0o700


def test_loose_dir_keeps_a_dir_with_leftovers_but_restores_nothing_odd(short_dir):
    path = f"{short_dir}/sock"
    with env.loose_dir(path), open(f"{path}/leftover", "w"):
        pass
    assert os.path.isdir(path)  # not empty: not removed (the runner reports leftovers)


def test_loose_dir_requires_loose_bits(short_dir):
    with pytest.raises(ValueError, match="not loose"), env.loose_dir(f"{short_dir}/x", 0o700):
        pass


@needs_root
def test_foreign_owner_dir(short_dir):
    path = f"{short_dir}/sock"
    with env.foreign_owner_dir(path) as proof:
        st = os.lstat(path)
        assert st.st_uid == proof.uid == env.NOBODY
        assert stat.S_IMODE(st.st_mode) == 0o700
    assert not os.path.lexists(path)


@needs_root
def test_foreign_owner_dir_restores_an_existing_owner(short_dir):
    before = os.stat(short_dir)
    with env.foreign_owner_dir(short_dir, uid=12345):
        assert os.stat(short_dir).st_uid == 12345
    after = os.stat(short_dir)
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)


def test_privileged_faults_unavailable_when_not_root(short_dir, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with (
        pytest.raises(env.EnvironmentFaultUnavailable, match="needs root") as info,
        env.foreign_owner_dir(f"{short_dir}/x"),
    ):
        pass
    assert info.value.fault == "foreign_owner_dir"
    assert "uid 1000" in info.value.reason
    assert not os.path.lexists(f"{short_dir}/x")
    with pytest.raises(env.EnvironmentFaultUnavailable, match="as_foreign_uid"):
        env.as_foreign_uid()
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.fault, back.reason) == (info.value.fault, info.value.reason)


def _connect_as_nobody(ctx: RankContext, path: str) -> list[object]:
    proof = env.as_foreign_uid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
    return [proof.uid, proof.euid, proof.gid, list(proof.groups)]


@needs_root
def test_as_foreign_uid_in_a_forked_rank(short_dir):
    """The rank drops to nobody, then the kernel sees its connection as that uid."""
    os.chmod(short_dir, 0o777)
    path = f"{short_dir}/g_0.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        os.chmod(path, 0o777)
        listener.listen(1)
        result = run_ranks(_connect_as_nobody, 1, args=(path,), timeout=30)
        listener.settimeout(30.0)
        conn, _ = listener.accept()
        with conn:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    assert result.values() == [[env.NOBODY, env.NOBODY, env.NOBODY, []]]
    _pid, uid, gid = struct.unpack("3i", creds)
    assert (uid, gid) == (env.NOBODY, env.NOBODY)
    assert os.getuid() == 0  # the parent is untouched


def test_tiny_socket_buffers_force_short_writes():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        default = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        proof = env.tiny_socket_buffers(a, 4096)
        assert proof.sndbuf < default
        assert proof.sndbuf == a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert proof.details()["requested"] == 4096
        a.setblocking(False)
        written = a.send(b"x" * (1 << 20))
        assert 0 < written < (1 << 20)  # a short write: the fault is real


def _foreign_peer_group(ctx):
    from tpbcast.harness import rogue as r

    if ctx.rank == 0:
        return r.root_recording(ctx.base_path, 2, [], abstract=True, observe=30.0)
    proof = env.as_foreign_uid()
    ctx.record("foreign_uid", **proof.details())
    return proof, r.peer_announce(ctx.base_path, 1, abstract=True, observe=30.0).probe


@needs_root
def test_foreign_uid_rank_is_seen_by_so_peercred():
    """In a forked rank under run_ranks: the root sees uid nobody at the other end."""
    from tpbcast.harness import run_ranks

    result = run_ranks(_foreign_peer_group, 2, timeout=60.0)
    result.raise_for_failure()
    proof, probe = result.outcomes[1].value
    assert (proof.uid, proof.before_uid) == (env.NOBODY, 0)
    assert probe == 0x5A
    creds = result.outcomes[0].value.links[0].credentials
    assert (creds.pid, creds.uid, creds.gid) == (result.outcomes[1].pid, env.NOBODY, env.NOBODY)
    assert [f.action for f in result.outcomes[1].faults] == ["foreign_uid"]


def test_stale_socket_that_fails_its_proof_leaves_no_file(short_dir, monkeypatch):
    path = f"{short_dir}/g_0.sock"

    def not_refused(p):
        assert os.path.exists(p)  # the fault did create the socket file first
        raise AssertionError("pretend it accepted")

    monkeypatch.setattr(env, "_prove_refused", not_refused)
    with pytest.raises(AssertionError, match="pretend"), env.stale_socket(path):
        pass
    assert not os.path.lexists(path)
