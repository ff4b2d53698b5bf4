"""The private, short working directory of a group, and what the ranks left in it.

Two private directories per group, both mode 0700 (mkdtemp), both named ``tpb-*``:

- the ranks' workdir (``ctx.workdir``), short by construction (``/tmp/tpb-XXXXXXXX``):
  ``<workdir>/g_0.sock`` stays far below the 107-byte ``sun_path`` limit even when TMPDIR
  is long (pytest's tmp_path often is). Everything in it after the group that did not
  exist (same inode) before it is a leftover;
- the capture dir, where the harness keeps each rank's stdout, stderr, result records and
  stack dump. It lives on tmpfs (``/dev/shm``) when available: creating a file on the
  CI box's ext4 costs ~35 us against ~2 us on tmpfs, and a rank creates four.

Both are reused: after a clean group (no leftovers) a directory goes back to a per-process
pool instead of being removed, because on ext4 mounted with ``discard`` (the CI box) one
``rmdir`` costs 1-3 ms, a third of the per-group budget. The pools are emptied at
interpreter exit and by :func:`release_workdirs`; a forked child never reuses its parent's
entries (they are tagged with the owner's pid), and only the process that imported the
harness pools at all (forked children such as ranks or pytest-forked's per-test process
end in ``os._exit``, which skips atexit).

Both names carry their owner process (``tpb-<pid>.<start>.<scope>-XXXXXXXX``, see
``_stale``), and the first directory a process makes under a root sweeps that root of the
ones whose owner died without cleaning up (a SIGKILLed pytest): never a live owner's.

``TPBCAST_WORKDIR_ROOT`` puts both under one root (a test session uses it to prove that it
left nothing behind).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from ._stale import make_private_dir

__all__ = [
    "CAPTURE_KINDS",
    "WORKDIR_PREFIX",
    "WORKDIR_ROOT_ENV",
    "CaptureFds",
    "Workdir",
    "disable_pooling",
    "release_workdirs",
]

WORKDIR_PREFIX = "tpb-"
WORKDIR_ROOT_ENV = "TPBCAST_WORKDIR_ROOT"
_SUN_PATH_MAX = 107
CAPTURE_KINDS = ("out", "err", "res", "stk")


class CaptureFds(NamedTuple):
    """One rank's capture files, opened by the parent before fork (one per CAPTURE_KINDS)."""

    stdout: int
    stderr: int
    results: int
    """The rank's record channel: faults fired, then its value or exception."""
    stack: int
    """faulthandler's target: the stack dump of a rank the harness had to stop."""


_POOL_MAX = [4]  # per pool; set to 0 in ranks
# Only the process that imported us pools: a forked child (pytest-forked's per-test child,
# a multiprocessing fork worker, a rank) usually ends in os._exit, which skips the atexit
# that empties the pool, so its pooled directories would leak.
_IMPORT_PID = os.getpid()
_POOLS: dict[str, list[tuple[int, str]]] = {"work": [], "capture": []}
_atexit_registered: list[bool] = []


def disable_pooling() -> None:
    """Called in every rank: a nested group's directories must not outlive the rank."""
    _POOL_MAX[0] = 0


def release_workdirs() -> int:
    """Remove this process's pooled (clean, idle) directories; returns how many."""
    me = os.getpid()
    removed = 0
    for pool in _POOLS.values():
        mine = [path for pid, path in pool if pid == me]
        pool[:] = [(pid, path) for pid, path in pool if pid != me]
        for path in mine:
            shutil.rmtree(path, ignore_errors=True)
        removed += len(mine)
    return removed


def _env_root() -> str | None:
    env = os.environ.get(WORKDIR_ROOT_ENV)
    if env:
        os.makedirs(env, mode=0o700, exist_ok=True)
    return env or None


def _work_root() -> str:
    """``$TPBCAST_WORKDIR_ROOT``, else ``/tmp`` (short), else the system temp dir."""
    env = _env_root()
    if env:
        return env
    for root in ("/tmp", tempfile.gettempdir()):
        if os.access(root, os.W_OK | os.X_OK):
            return root
    return tempfile.gettempdir()  # pragma: no cover


@cache
def _tmpfs_root() -> str | None:
    try:
        with open("/proc/mounts") as f:
            mounts = {line.split()[1]: line.split()[2] for line in f if len(line.split()) > 2}
    except OSError:
        return None
    for root in ("/dev/shm", "/run/shm"):
        if mounts.get(root) == "tmpfs" and os.access(root, os.W_OK | os.X_OK):
            return root
    return None


def _capture_root() -> str:
    return _env_root() or _tmpfs_root() or _work_root()


def _take_pooled(kind: str) -> str | None:
    me = os.getpid()
    pool = _POOLS[kind]
    while pool:
        pid, path = pool.pop()
        if pid != me:
            continue  # inherited from the parent of a fork: not ours to use
        try:
            empty = not os.listdir(path)
            st = os.lstat(path)
        except OSError:
            continue
        if empty and st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid():
            return path
        shutil.rmtree(path, ignore_errors=True)
    return None


def _give_back(kind: str, path: str) -> bool:
    if len(_POOLS[kind]) >= _POOL_MAX[0] or os.getpid() != _IMPORT_PID:
        return False
    if not _atexit_registered:
        atexit.register(release_workdirs)
        _atexit_registered.append(True)
    _POOLS[kind].append((os.getpid(), path))
    return True


def _private_dir(kind: str) -> str:
    pooled = _take_pooled(kind)
    if pooled is not None:
        return pooled
    root = _work_root() if kind == "work" else _capture_root()
    return make_private_dir(root, WORKDIR_PREFIX)


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
    """Where the ranks work (``path``) and where the harness captures (``capture``).

    The capture dir is always ours, also when the caller passes a workdir: the caller's
    directory then sees no harness file at all.
    """

    path: str
    owned: bool
    capture: str
    before: dict[str, int]

    @classmethod
    def open(cls, path: str | None) -> Workdir:
        if path is None:
            work = _private_dir("work")
            return cls(work, True, _private_dir("capture"), {})
        made = os.path.abspath(path)
        _check_length(made)
        os.makedirs(made, mode=0o700, exist_ok=True)
        return cls(made, False, _private_dir("capture"), _snapshot(made))

    def file(self, rank: int, kind: str) -> str:
        return f"{self.capture}/{rank}.{kind}"

    def open_capture(self, world_size: int) -> list[CaptureFds]:
        """Create every rank's capture files in the parent, before fork: a rank then only
        dup2()s, and a rank that dies at once still has files."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
        opened: list[CaptureFds] = []
        try:
            for rank in range(world_size):
                fds = [os.open(self.file(rank, kind), flags, 0o600) for kind in CAPTURE_KINDS]
                opened.append(CaptureFds(*fds))
        except BaseException:
            for group in opened:
                for fd in group:
                    os.close(fd)
            raise
        return opened

    def leftovers(self) -> tuple[str, ...]:
        """Relative paths created during the group and still present."""
        if self.owned and not os.listdir(self.path):
            return ()  # the common case, without walking
        now = _snapshot(self.path)
        return tuple(sorted(p for p, ino in now.items() if self.before.get(p) != ino))

    def remove(self, *, clean: bool) -> None:
        """Empty the capture dir and pool it; pool our workdir if the group left it clean,
        else remove it. A caller's workdir is never touched: what is left there is theirs."""
        try:
            for name in os.listdir(self.capture):
                os.unlink(f"{self.capture}/{name}")
        except OSError:
            shutil.rmtree(self.capture, ignore_errors=True)
        else:
            if not _give_back("capture", self.capture):
                shutil.rmtree(self.capture, ignore_errors=True)
        if self.owned and not (clean and _give_back("work", self.path)):
            shutil.rmtree(self.path, ignore_errors=True)


def _snapshot(root: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        for name in filenames + dirnames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                found[rel] = os.lstat(os.path.join(dirpath, name)).st_ino
            except OSError:
                continue
    return found
