"""Environment faults: what the machine around a broadcaster can get wrong, set up and proved.

A stale socket file left by a dead rank, a symlink or regular file where the socket
should go, a directory another uid owns or anyone may write, tiny socket buffers, a
foreign uid.

Each fault is a context manager (or, for irreversible ones, a function) that
returns a frozen proof of what it put in place, read back from the filesystem or
the kernel rather than assumed, so a test can show the fault was real before it
judges the implementation.  Cleanup removes only what the fault itself created:
an object an implementation put at the same path since is left alone.

Faults that need privileges raise :class:`EnvironmentFaultUnavailable` with a
reason (the fixtures layer turns it into a skip; this module never imports
pytest).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

__all__ = [
    "BufferProof",
    "EnvironmentFaultUnavailable",
    "PathProof",
    "UidProof",
    "as_foreign_uid",
    "foreign_owner_dir",
    "leave_stale_socket",
    "loose_dir",
    "regular_file_at",
    "stale_socket",
    "symlink_at",
    "tiny_socket_buffers",
]

NOBODY = 65534
"""The conventional ``nobody`` uid/gid: a real uid that owns nothing of ours."""


class EnvironmentFaultUnavailable(Exception):  # noqa: N818 - it is a verdict, not an error
    """This fault cannot be set up here (e.g. it needs root); ``reason`` says why."""

    def __init__(self, fault: str, reason: str) -> None:
        super().__init__(f"environment fault {fault!r} unavailable: {reason}")
        self.fault = fault
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.fault, self.reason))


@dataclass(frozen=True)
class PathProof:
    """What a path fault put at ``path``, as read back with ``lstat``."""

    kind: str
    path: str
    mode: int
    """Full ``st_mode`` (file type and permission bits)."""
    uid: int
    gid: int
    inode: int
    ctime_ns: int
    """With ``inode``, identifies the object: filesystems reuse a freed inode at once."""
    target: str | None = None
    """Symlink target, for ``symlink_at``."""
    created: bool = True
    """False when the fault changed an object that already existed."""

    @property
    def permissions(self) -> int:
        """The permission bits, e.g. ``0o777``."""
        return stat.S_IMODE(self.mode)

    def still_present(self) -> bool:
        """True while the very object the fault created is still at ``path``.

        Lets a test check that an implementation refused the path and left the
        object alone (same inode, change time and type), or replaced it (False).
        """
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return (
            st.st_ino == self.inode
            and st.st_ctime_ns == self.ctime_ns
            and stat.S_IFMT(st.st_mode) == stat.S_IFMT(self.mode)
        )

    def details(self) -> dict[str, object]:
        """A flat summary for ``RankContext.record(kind, **details)``."""
        return {
            "kind": self.kind,
            "path": self.path,
            "mode": oct(self.mode),
            "uid": self.uid,
            "target": self.target,
        }


@dataclass(frozen=True)
class UidProof:
    """The identity a process runs as after :func:`as_foreign_uid`, read back."""

    uid: int
    euid: int
    gid: int
    egid: int
    groups: tuple[int, ...]
    before_uid: int
    before_gid: int

    def details(self) -> dict[str, object]:
        """A flat summary for ``RankContext.record(kind, **details)``."""
        return {"uid": self.uid, "gid": self.gid, "before_uid": self.before_uid}


@dataclass(frozen=True)
class BufferProof:
    """Socket buffer sizes requested and actually in force (the kernel rounds)."""

    fd: int
    requested: int
    sndbuf: int
    rcvbuf: int

    def details(self) -> dict[str, object]:
        """A flat summary for ``RankContext.record(kind, **details)``."""
        return {"requested": self.requested, "sndbuf": self.sndbuf, "rcvbuf": self.rcvbuf}


def _proof(kind: str, path: str, *, created: bool = True) -> PathProof:
    st = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return PathProof(
        kind, path, st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_ctime_ns, target, created
    )


def _refuse_existing(kind: str, path: str) -> None:
    if os.path.lexists(path):
        raise FileExistsError(
            errno.EEXIST,
            f"{kind}: something already exists at the path; not replacing it",
            path,
        )


def _remove_if_ours(proof: PathProof) -> None:
    if proof.still_present():
        with suppress(FileNotFoundError):
            os.unlink(proof.path)


def leave_stale_socket(path: str) -> PathProof:
    """Stage a real stale socket at ``path`` and leave it there: bound, then closed
    without unlink, exactly what a crashed rank 0 leaves behind.

    For a rank that hands the path to the implementation under test, which may replace
    or remove it, and whose workdir the harness removes afterwards.  The proof is
    double: ``lstat`` shows a socket, and connecting to it is refused (nobody listens).
    """
    _refuse_existing("stale_socket", path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    finally:
        sock.close()
    try:
        proof = _proof("stale_socket", path)
        _prove_refused(path)
    except BaseException:  # the socket file is ours: a failed set-up must not leave it
        with suppress(FileNotFoundError):
            os.unlink(path)
        raise
    return proof


@contextmanager
def stale_socket(path: str) -> Iterator[PathProof]:
    """:func:`leave_stale_socket` for the duration of a ``with`` block, removed afterwards
    unless something else replaced it."""
    proof = leave_stale_socket(path)
    try:
        yield proof
    finally:
        _remove_if_ours(proof)


def _prove_refused(path: str) -> None:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        pass
    else:  # pragma: no cover - the kernel guarantees this for a closed listener
        raise AssertionError(f"stale_socket: {path} accepted a connection; it is not stale")
    finally:
        probe.close()


@contextmanager
def regular_file_at(path: str, content: bytes = b"not a socket\n") -> Iterator[PathProof]:
    """A regular file where the socket belongs; an implementation must not delete it."""
    _refuse_existing("regular_file_at", path)
    with open(path, "xb") as handle:
        handle.write(content)
    proof = _proof("regular_file", path)
    try:
        yield proof
    finally:
        _remove_if_ours(proof)


@contextmanager
def symlink_at(path: str, target: str) -> Iterator[PathProof]:
    """A symlink at the socket path (to ``target``, which need not exist).

    An implementation must neither follow it (binding through it) nor remove it.
    """
    _refuse_existing("symlink_at", path)
    os.symlink(target, path)
    proof = _proof("symlink", path)
    try:
        yield proof
    finally:
        _remove_if_ours(proof)


@contextmanager
def _directory(
    kind: str, path: str, mode: int, owner: tuple[int, int] | None
) -> Iterator[PathProof]:
    created = not os.path.lexists(path)
    if created:
        os.mkdir(path)
    before = os.lstat(path)
    if not stat.S_ISDIR(before.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{kind}: not a directory", path)
    try:
        if owner is not None:
            os.chown(path, *owner, follow_symlinks=False)
        os.chmod(path, mode)  # explicit chmod: the umask must not soften the fault
        yield _proof(kind, path, created=created)
    finally:
        if created:
            try:
                os.rmdir(path)
            except OSError:
                # Not empty (an implementation left files); restore instead.
                _restore_dir(path, before)
        else:
            _restore_dir(path, before)


def _restore_dir(path: str, before: os.stat_result) -> None:
    with suppress(FileNotFoundError):
        os.chown(path, before.st_uid, before.st_gid, follow_symlinks=False)
        os.chmod(path, stat.S_IMODE(before.st_mode))


@contextmanager
def loose_dir(path: str, mode: int = 0o777) -> Iterator[PathProof]:
    """A socket directory with group/other permission bits (``0o755`` or ``0o777``).

    Creates ``path`` if missing (and removes it afterwards if empty), otherwise
    changes its mode and restores it afterwards.
    """
    if not mode & 0o077:
        raise ValueError(f"loose_dir: mode {oct(mode)} has no group/other bits; it is not loose")
    with _directory("loose_dir", path, mode, None) as proof:
        yield proof


def _need_root(fault: str) -> None:
    if os.geteuid() != 0:
        raise EnvironmentFaultUnavailable(
            fault, f"needs root to change ownership (running as uid {os.geteuid()})"
        )


@contextmanager
def foreign_owner_dir(path: str, uid: int = NOBODY, mode: int = 0o700) -> Iterator[PathProof]:
    """A socket directory owned by another user (default ``nobody``), mode ``0o700``.

    :raises EnvironmentFaultUnavailable: not running as root.
    """
    _need_root("foreign_owner_dir")
    if uid == os.geteuid():
        raise ValueError(f"foreign_owner_dir: uid {uid} is our own uid, not a foreign one")
    with _directory("foreign_owner_dir", path, mode, (uid, uid)) as proof:
        yield proof


def as_foreign_uid(uid: int = NOBODY, gid: int | None = None) -> UidProof:
    """Permanently become ``uid`` (and ``gid``, default the same) in this process.

    Meant for a forked rank playing a peer of another user: there is no way back,
    so never call it in the test process itself.  Supplementary groups are dropped
    first, the group before the user (after setuid we could no longer setgid).
    Note that the rank then needs search permission on the socket directory to
    reach the socket at all.

    :raises EnvironmentFaultUnavailable: not running as root.
    """
    _need_root("as_foreign_uid")
    group = uid if gid is None else gid
    before_uid, before_gid = os.getuid(), os.getgid()
    os.setgroups([])
    os.setgid(group)
    os.setuid(uid)
    return UidProof(
        uid=os.getuid(),
        euid=os.geteuid(),
        gid=os.getgid(),
        egid=os.getegid(),
        groups=tuple(os.getgroups()),
        before_uid=before_uid,
        before_gid=before_gid,
    )


def tiny_socket_buffers(sock: socket.socket, size: int = 4096) -> BufferProof:
    """Shrink ``SO_SNDBUF``/``SO_RCVBUF`` to force short reads and writes.

    The kernel doubles the request and enforces a floor, so the proof reports the
    sizes actually in force.  Set them before connecting; for a listener, accepted
    sockets inherit them.
    """
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    return BufferProof(
        fd=sock.fileno(),
        requested=size,
        sndbuf=sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        rcvbuf=sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    )
