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


@dataclass
class Workdir:
    path: str
    owned: bool
    harness_dir: str
    before: dict[str, int]

    @classmethod
    def open(cls, path: str | None) -> Workdir:
        if path is None:
            pooled = _take_pooled()
            if pooled is not None:
                return cls(pooled, True, f"{pooled}/{HARNESS_SUBDIR}", {})
            made = tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=_short_tmp_root())
            owned, before = True, {}
        else:
            made = os.path.abspath(path)
            os.makedirs(made, mode=0o700, exist_ok=True)
            owned, before = False, _snapshot(made)
        sock = f"{made}/g_0.sock"
        if len(sock.encode()) > _SUN_PATH_MAX:
            if owned:
                shutil.rmtree(made, ignore_errors=True)
            raise ValueError(
                f"workdir {made!r} is too long for Unix sockets: {sock!r} is "
                f"{len(sock.encode())} bytes, sun_path holds {_SUN_PATH_MAX}; "
                "pass a shorter workdir (or none: the harness makes one under /tmp)"
            )
        harness_dir = f"{made}/{HARNESS_SUBDIR}"
        os.mkdir(harness_dir, 0o700)
        return cls(made, owned, harness_dir, before)

    def file(self, rank: int, kind: str) -> str:
        return f"{self.harness_dir}/{rank}.{kind}"

    def leftovers(self) -> tuple[str, ...]:
        """Relative paths created during the group and still present (harness files aside)."""
        if not self.before:
            entries = os.listdir(self.path)
            if entries == [HARNESS_SUBDIR]:
                return ()  # the common case, without walking
        now = _snapshot(self.path)
        return tuple(sorted(p for p, ino in now.items() if self.before.get(p) != ino))

    def remove(self, *, clean: bool) -> None:
        """Remove what we made: our subdir in a caller's workdir; our own workdir goes
        back to the pool when the group left it ``clean``, else it is removed."""
        if not self.owned:
            shutil.rmtree(self.harness_dir, ignore_errors=True)
            return
        if clean and len(_POOL) < _POOL_MAX[0]:
            try:
                for name in os.listdir(self.harness_dir):
                    os.unlink(f"{self.harness_dir}/{name}")
            except OSError:
                pass
            else:
                if not _atexit_registered:
                    atexit.register(release_workdirs)
                    _atexit_registered.append(True)
                _POOL.append((os.getpid(), self.path))
                return
        shutil.rmtree(self.path, ignore_errors=True)


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
