"""The private, short working directory of a group, and what the ranks left in it.

Short by construction (``/tmp/tpb-XXXXXXXX``): ``<workdir>/g_0.sock`` stays far below the
107-byte ``sun_path`` limit even when TMPDIR is long (pytest's tmp_path often is not).
Mode 0700 (mkdtemp), so no other user can plant or connect to sockets in it.

The harness keeps its own capture files in ``<workdir>/.tpb``; everything else that exists
after the group and did not exist (same inode) before it is a leftover.

Private workdirs are reused: after a clean group (no leftovers) the directory goes back to
a per-process pool instead of being removed, because on ext4 mounted with ``discard`` (the
CI box) one ``rmdir`` costs 1-3 ms, a third of the whole per-group budget. The pool is
emptied at interpreter exit and by :func:`release_workdirs`; a forked child never reuses
its parent's entries (they are tagged with the owner's pid).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass

__all__ = [
    "HARNESS_SUBDIR",
    "WORKDIR_PREFIX",
    "WORKDIR_ROOT_ENV",
    "Workdir",
    "disable_pooling",
    "release_workdirs",
]

WORKDIR_PREFIX = "tpb-"
WORKDIR_ROOT_ENV = "TPBCAST_WORKDIR_ROOT"
HARNESS_SUBDIR = ".tpb"
_SUN_PATH_MAX = 107


_POOL: list[tuple[int, str]] = []  # (owner pid, clean private workdir with an empty .tpb)
_POOL_MAX = [4]  # set to 0 in ranks: they end in os._exit, which skips the atexit cleanup


def disable_pooling() -> None:
    """Called in every rank: a nested group's workdir must not outlive the rank."""
    _POOL_MAX[0] = 0


_atexit_registered: list[bool] = []


def release_workdirs() -> int:
    """Remove this process's pooled (clean, idle) workdirs; returns how many."""
    mine = [path for pid, path in _POOL if pid == os.getpid()]
    _POOL[:] = [(pid, path) for pid, path in _POOL if pid != os.getpid()]
    for path in mine:
        shutil.rmtree(path, ignore_errors=True)
    return len(mine)


def _take_pooled() -> str | None:
    me = os.getpid()
    while _POOL:
        pid, path = _POOL.pop()
        if pid != me:
            continue  # inherited from the parent of a fork: not ours to use
        try:
            entries = os.listdir(path)
            st = os.lstat(path)
        except OSError:
            continue
        if (
            entries == [HARNESS_SUBDIR]
            and not os.listdir(f"{path}/{HARNESS_SUBDIR}")
            and (st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid())
        ):
            return path
        shutil.rmtree(path, ignore_errors=True)
    return None


def _short_tmp_root() -> str:
    """``$TPBCAST_WORKDIR_ROOT`` (a test session's private root, so it can prove that it
    left nothing behind) or ``/tmp`` (short), else the system temp dir."""
    env = os.environ.get(WORKDIR_ROOT_ENV)
    if env:
        os.makedirs(env, mode=0o700, exist_ok=True)
        return env
    for root in ("/tmp", tempfile.gettempdir()):
        if os.access(root, os.W_OK | os.X_OK):
            return root
    return tempfile.gettempdir()  # pragma: no cover


def _own_dir() -> str:
    """A private dir of ours with an empty ``.tpb`` inside: pooled, or made now."""
    pooled = _take_pooled()
    if pooled is not None:
        return pooled
    made = tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=_short_tmp_root())
    os.mkdir(f"{made}/{HARNESS_SUBDIR}", 0o700)
    return made


def _check_length(path: str) -> None:
    sock = f"{path}/g_0.sock"
    if len(sock.encode()) > _SUN_PATH_MAX:
        raise ValueError(
            f"workdir {path!r} is too long for Unix sockets: {sock!r} is "
            f"{len(sock.encode())} bytes, sun_path holds {_SUN_PATH_MAX}; "
            "pass a shorter workdir (or none: the harness makes one under /tmp)"
        )


@dataclass
class Workdir:
    """Where the ranks work (``path``) and where the harness keeps its capture files.

    The capture files always live in a private dir of ours (``own``), even when the caller
    passes a workdir: then the caller's dir sees no harness files at all, and no
    directory is created or removed in it per group.
    """

    path: str
    owned: bool
    own: str
    before: dict[str, int]

    @property
    def harness_dir(self) -> str:
        return f"{self.own}/{HARNESS_SUBDIR}"

    @classmethod
    def open(cls, path: str | None) -> Workdir:
        if path is None:
            own = _own_dir()
            return cls(own, True, own, {})
        made = os.path.abspath(path)
        _check_length(made)
        os.makedirs(made, mode=0o700, exist_ok=True)
        before = _snapshot(made)
        return cls(made, False, _own_dir(), before)

    def file(self, rank: int, kind: str) -> str:
        return f"{self.harness_dir}/{rank}.{kind}"

    def leftovers(self) -> tuple[str, ...]:
        """Relative paths created during the group and still present (harness files aside)."""
        if self.owned:
            entries = os.listdir(self.path)
            if entries == [HARNESS_SUBDIR]:
                return ()  # the common case, without walking
        now = _snapshot(self.path)
        return tuple(sorted(p for p, ino in now.items() if self.before.get(p) != ino))

    def remove(self, *, clean: bool) -> None:
        """Give our own dir back to the pool when the group left it clean (else remove it).

        A caller's workdir is never touched: what the ranks left there is the caller's.
        """
        if (clean or not self.owned) and len(_POOL) < _POOL_MAX[0]:
            try:
                for name in os.listdir(self.harness_dir):
                    os.unlink(f"{self.harness_dir}/{name}")
            except OSError:
                pass
            else:
                if not _atexit_registered:
                    atexit.register(release_workdirs)
                    _atexit_registered.append(True)
                _POOL.append((os.getpid(), self.own))
                return
        shutil.rmtree(self.own, ignore_errors=True)


def _snapshot(root: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            if HARNESS_SUBDIR in dirnames:
                dirnames.remove(HARNESS_SUBDIR)
            rel_dir = ""
        for name in filenames + dirnames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                found[rel] = os.lstat(os.path.join(dirpath, name)).st_ino
            except OSError:
                continue
    return found
