"""Observing a shared-memory transport from outside: the names a process holds, what is
left of them, their modes, and the helper processes it started (SHM clauses).

Nothing here asks the implementation anything.  A process's *held names* are read from
``/proc/<pid>/fd`` (open files, and socket inodes matched to ``/proc/net/unix`` paths) and
``/proc/<pid>/maps`` (mapped files such as a shared-memory segment, also after its fd is
closed), each keyed by ``(st_dev, st_ino)``; those that were not held before
``initialize`` are the implementation's.  After the group has ended, a held inode that
still has a name in ``/dev/shm``, ``/tmp``, the private TMPDIR, the base path's directory
or the directory it was first seen in is a leftover.  Shared libraries and other files
under the interpreter's prefixes or system directories are never counted.

Also imported by the plain-Python script the normal-exit test runs (no pytest there).
"""

from __future__ import annotations

import os
import pickle
import stat
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Final

SHM_DIR: Final = "/dev/shm"
_SYSTEM: Final = tuple(
    sorted(
        {
            os.path.join(os.path.realpath(p), "")
            for p in (
                sys.prefix,
                sys.base_prefix,
                sys.exec_prefix,
                *sysconfig.get_paths().values(),
            )
            if p
        }
        | {"/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/opt/", "/etc/", "/proc/", "/sys/"}
    )
)


@dataclass(frozen=True)
class Held:
    """One name a process held: an open file, a mapped file or a bound Unix socket."""

    kind: str  # "file", "map" or "socket"
    path: str  # as the kernel shows it, " (deleted)" removed; a socket's bound path
    key: tuple[int, int] | None  # (st_dev, st_ino); None: a socket path already gone
    mode: int | None  # permission bits, None if unknown
    deleted: bool

    def __str__(self) -> str:
        mode = "?" if self.mode is None else oct(self.mode)
        gone = ", unlinked" if self.deleted else ""
        return f"{self.kind} {self.path} (mode {mode}{gone})"


def interesting(path: str) -> bool:
    """A path an implementation may have created for its group (not a library, not /dev)."""
    if path.startswith(SHM_DIR + "/"):
        return True
    if not path.startswith("/") or path.startswith("/dev/"):
        return False
    real = os.path.join(os.path.dirname(path), "")
    return not any(real.startswith(p) or path.startswith(p) for p in _SYSTEM)


def _strip(target: str) -> tuple[str, bool]:
    if target.endswith(" (deleted)"):
        return target[: -len(" (deleted)")], True
    return target, False


def _unix_paths() -> dict[int, str]:
    """Socket inode -> bound path of every Unix socket with a filesystem path."""
    found: dict[int, str] = {}
    try:
        with open("/proc/net/unix") as fh:
            next(fh, None)
            for line in fh:
                fields = line.split()
                if len(fields) >= 8 and fields[7].startswith("/"):
                    found[int(fields[6])] = fields[7]
    except OSError:
        pass
    return found


def held(pid: int | None = None) -> dict[str, Held]:
    """The names process ``pid`` (default: this one) holds now, keyed for diffing."""
    where = "self" if pid is None or pid == os.getpid() else str(pid)
    out: dict[str, Held] = {}
    sockets = _fd_names(where, out)
    _map_names(where, out)
    if sockets:
        _socket_names(sockets, out)
    return out


def _fd_names(where: str, out: dict[str, Held]) -> list[int]:
    """Open files of ``/proc/<where>`` into ``out``; returns its socket inodes."""
    sockets: list[int] = []
    try:
        fds = os.listdir(f"/proc/{where}/fd")
    except OSError:
        return sockets
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{where}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.append(int(target[8:-1]))
            continue
        path, deleted = _strip(target)
        if not interesting(path):
            continue
        try:
            st = os.stat(f"/proc/{where}/fd/{fd}")
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        out[f"{key}"] = Held("file", path, key, stat.S_IMODE(st.st_mode), deleted)
    return sockets


def _map_names(where: str, out: dict[str, Held]) -> None:
    """Mapped files of ``/proc/<where>/maps`` into ``out`` (a segment whose fd is closed)."""
    try:
        with open(f"/proc/{where}/maps") as fh:
            maps = fh.read().splitlines()
    except OSError:
        return
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[4] == "0":
            continue
        path, deleted = _strip(fields[5].strip())
        if not interesting(path):
            continue
        major, minor = (int(x, 16) for x in fields[3].split(":"))
        key = (os.makedev(major, minor), int(fields[4]))
        if f"{key}" not in out:
            probes = [f"/proc/{where}/map_files/{fields[0]}"] + ([] if deleted else [path])
            out[f"{key}"] = Held("map", path, key, _mode_of(key, probes), deleted)


def _mode_of(key: tuple[int, int], probes: list[str]) -> int | None:
    for probe in probes:
        try:
            st = os.stat(probe)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return stat.S_IMODE(st.st_mode)
    return None


def _socket_names(sockets: list[int], out: dict[str, Held]) -> None:
    """Bound paths of the Unix sockets ``sockets`` (inodes) into ``out``."""
    paths = _unix_paths()
    for inode in sockets:
        path = paths.get(inode)
        if path is None or not interesting(path):
            continue
        try:
            st = os.lstat(path)
        except OSError:
            out[f"socket:{path}"] = Held("socket", path, None, None, True)
            continue
        key = (st.st_dev, st.st_ino)
        out[f"socket:{path}"] = Held("socket", path, key, stat.S_IMODE(st.st_mode), False)


def new_held(before: dict[str, Held], now: dict[str, Held]) -> dict[str, Held]:
    """What ``now`` holds that ``before`` did not."""
    return {k: v for k, v in now.items() if k not in before}


def named_now(entries: dict[str, Held], dirs: list[str]) -> list[str]:
    """Held names that still exist: each entry's inode searched in ``dirs`` and in the
    directory it was seen in; a socket path that still exists."""
    return sorted(text for text, _, _ in still_named(entries, dirs))


def still_named(
    entries: dict[str, Held], dirs: list[str]
) -> set[tuple[str, str, tuple[int, int] | None]]:
    """:func:`named_now`'s entries as ``(text, path, key)``: the path and inode a leftover
    has now (to hand to the suite's cleanup)."""
    places = set(dirs)
    places.update(os.path.dirname(e.path) for e in entries.values())
    index: dict[tuple[int, int], str] = {}
    for place in sorted(places):
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            full = os.path.join(place, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            index.setdefault((st.st_dev, st.st_ino), full)
    left: set[tuple[str, str, tuple[int, int] | None]] = set()
    for e in entries.values():
        if e.key is not None and e.key in index:
            left.add((f"{index[e.key]} ({e.kind} the implementation held)", index[e.key], e.key))
        elif e.kind == "socket" and os.path.lexists(e.path):
            left.add((f"{e.path} (socket the implementation bound)", e.path, _key_of(e.path)))
    return left


def _key_of(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def loose(entries: dict[str, Held]) -> list[str]:
    """Held names with a permission bit for group or others."""
    return [str(e) for e in entries.values() if e.mode is not None and e.mode & 0o077]


def modes_in(directory: str, names: list[str]) -> list[str]:
    """``name (mode)`` of each entry of ``directory`` in ``names`` with group/other bits."""
    bad = []
    for name in names:
        try:
            st = os.lstat(os.path.join(directory, name))
        except OSError:
            continue
        if stat.S_IMODE(st.st_mode) & 0o077 and not stat.S_ISLNK(st.st_mode):
            bad.append(f"{os.path.join(directory, name)} (mode {oct(stat.S_IMODE(st.st_mode))})")
    return bad


Proc = tuple[int, int]
"""A process as ``(pid, start time in clock ticks)``: a pid alone may be reused."""


def _start_time(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]), fields[0]


def descendants(pid: int | None = None) -> set[Proc]:
    """Every live descendant of ``pid`` (default: this process), with its start time."""
    root = os.getpid() if pid is None else pid
    found: set[Proc] = set()
    todo = [root]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                continue
            for kid in kids:
                info = _start_time(kid)
                if info is not None and info[1] != "Z":
                    found.add((kid, info[0]))
                    todo.append(kid)
    return found


def alive(procs: set[Proc]) -> list[Proc]:
    """Those of ``procs`` still running (same pid and start time, not a zombie)."""
    out = []
    for pid, start in procs:
        info = _start_time(pid)
        if info is not None and info[0] == start and info[1] not in ("Z", "X"):
            out.append((pid, start))
    return sorted(out)


def describe(procs: list[Proc]) -> str:
    parts = []
    for pid, _ in procs:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        parts.append(f"pid {pid} ({cmd[:120]})")
    return ", ".join(parts)


def dead(pid: int) -> bool:
    """True once ``pid`` has exited (gone, or a zombie not yet reaped)."""
    info = _start_time(pid)
    return info is None or info[1] in ("Z", "X")


def private_tmp(root: str) -> None:
    """Give this process its own TMPDIR (``root``, 0700), so what an implementation leaves
    in "the" temporary directory is seen without other tests' files around it."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = root
    tempfile.tempdir = None


def save(path: str, value: Any) -> None:
    """Pickle ``value`` to ``path`` atomically (observations that must survive a SIGKILL)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(value, fh)
    os.replace(tmp, path)


def load(path: str, default: Any = None) -> Any:
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError):
        return default


def wait_gone(procs: set[Proc], timeout: float) -> list[Proc]:
    """Poll up to ``timeout`` s for ``procs`` to end; those still alive then."""
    deadline = time.monotonic() + timeout
    while True:
        left = alive(procs)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)
