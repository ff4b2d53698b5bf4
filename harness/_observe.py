"""Observing processes from outside: one vocabulary for the harness and the clause tests.

A fault test must prove its fault happened before it judges the reaction, and a hygiene
test must see what an implementation holds without asking it.  Both read the kernel's view
of a process, never the process's word.  This module is the one place that does:

- **pids and deaths**: a rank publishes its pid in its group's workdir
  (:func:`publish_pid`), another rank or the test body reads it (:func:`published_pid`)
  and waits for the death (:func:`wait_dead`: a zombie counts, with a deadline);
- **processes**: state, start time, descendants, command lines (:func:`descendants`,
  :func:`alive`, :func:`describe`, :func:`wait_gone`), the threads of a process
  (:func:`all_stopped`, :func:`thread_count`) and the members of a process group;
- **open files**: fd tables (:func:`fd_targets`), close-on-exec flags, and the *names* a
  process holds (:func:`held`: open files, mapped files, bound Unix sockets), those under
  ``/dev/shm`` in particular (:func:`shm_names`), and whether a Unix socket path has a
  listener (:func:`unix_listening`);
- **a private TMPDIR** (:func:`private_tmpdir`), so what an implementation leaves in "the"
  temporary directory is seen without other tests' files around it.

Built on psutil (process state, start time, children, command line, thread count, a
process's bound Unix sockets).  Read from ``/proc`` only for what psutil does not expose:
the raw ``stat`` fields in one read (process group and start ticks together, for the
runner's stale-directory marks and its group sweep), per-thread state and wait channel
(``task/<tid>/stat``, ``wchan``), an fd's link target whatever it is (psutil lists regular,
not-deleted files only: a shared-memory segment unlinked while open, a socket inode or a
pipe would be missing), ``fdinfo`` flags of another process's fd, the device and inode of
a mapped file (psutil's ``memory_maps`` gives paths only, and a segment is judged by inode
once its name is gone), the listening flag of a Unix socket (psutil reports no state for
Unix sockets) and the signal masks in ``status``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import stat
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import psutil

__all__ = [
    "PID_FILE_PREFIX",
    "SHM_DIR",
    "Held",
    "Proc",
    "alive",
    "all_stopped",
    "dead",
    "descendants",
    "describe",
    "describe_fd",
    "fd_cloexec",
    "fd_targets",
    "held",
    "list_group_members",
    "load_observation",
    "loose",
    "modes_in",
    "named_now",
    "new_held",
    "open_fds",
    "pid_path",
    "private_tmpdir",
    "publish_pid",
    "published_pid",
    "save_observation",
    "shm_names",
    "signal_masks",
    "stat_fields",
    "still_there",
    "thread_count",
    "thread_wait",
    "unix_listening",
    "wait_dead",
    "wait_gone",
    "wait_until",
]

SHM_DIR: Final = "/dev/shm"
PID_FILE_PREFIX: Final = ".pid"
"""Published pid files are hidden names, so a leftover listing can tell them apart."""
_POLL: Final = 0.005
"""Polling interval of the waits below: the observation's pace, never a synchronisation."""


# --------------------------------------------------------------------------- raw /proc


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: state (0), ppid (1),
    pgrp (2), ..., starttime (19); None once the process is gone, or when its stat cannot
    be read (another user's process under ``hidepid``: none of ours, which we can read).

    The name is split off at its LAST ``)``: it may itself hold spaces and parentheses.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()


def list_group_members(pgids: set[int]) -> list[int]:
    """Live (non-zombie) pids whose process group is one of ``pgids``.

    Scans /proc, so only on the bad path. Zombies are dead: an orphan's zombie waits for
    whoever reaps orphans (PID 1 or a subreaper), which in containers may be never.
    """
    members = []
    for name in os.listdir("/proc"):
        fields = stat_fields(int(name)) if name.isdigit() else None
        if fields and len(fields) > 2 and int(fields[2]) in pgids and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return sorted(members)


# --------------------------------------------------------------------------- pids, deaths


def pid_path(directory: str, rank: int) -> str:
    """Where rank ``rank`` publishes its pid in ``directory`` (its group's workdir)."""
    return os.path.join(directory, f"{PID_FILE_PREFIX}{rank}")


def publish_pid(directory: str, rank: int) -> None:
    """Publish this process's pid as rank ``rank``, atomically (a reader never sees half)."""
    path = pid_path(directory, rank)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, path)


def published_pid(directory: str, rank: int, timeout: float) -> int | None:
    """Rank ``rank``'s published pid, waiting up to ``timeout`` s for it; None if never."""
    path = pid_path(directory, rank)
    if not wait_until(lambda: os.path.exists(path), timeout):
        return None
    with open(path) as fh:
        return int(fh.read())


def dead(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts): from the kernel, never
    from the victim."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def wait_dead(pid: int, timeout: float) -> float | None:
    """Poll until ``pid`` has exited; the monotonic time it was seen dead, None at
    ``timeout``."""
    return time.monotonic() if wait_until(lambda: dead(pid), timeout) else None


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = _POLL) -> bool:
    """Poll ``predicate`` until true or ``timeout`` s pass (a deadline, not a sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# --------------------------------------------------------------------------- processes

Proc = tuple[int, float]
"""A process as ``(pid, start time)``: a pid alone may be reused."""


def _started(proc: psutil.Process) -> Proc | None:
    try:
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return proc.pid, proc.create_time()
    except psutil.NoSuchProcess:
        return None


def descendants(pid: int | None = None) -> set[Proc]:
    """Every live descendant of ``pid`` (default: this process), with its start time."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {p for p in map(_started, kids) if p is not None}


def alive(procs: Iterable[Proc]) -> list[Proc]:
    """Those of ``procs`` still running (same pid and start time, not a zombie)."""
    out = []
    for pid, start in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if _started(psutil.Process(pid)) == (pid, start):
                out.append((pid, start))
    return sorted(out)


def wait_gone(procs: set[Proc], timeout: float) -> list[Proc]:
    """Poll up to ``timeout`` s for ``procs`` to end; those still alive then."""
    deadline = time.monotonic() + timeout
    while True:
        left = alive(procs)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL)


def describe(procs: Iterable[Proc]) -> str:
    """``pid 12 (python -m x)``, ... for a report."""
    parts = []
    for pid, _ in procs:
        try:
            cmd = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            cmd = "?"
        parts.append(f"pid {pid} ({cmd[:120]})")
    return ", ".join(parts)


def thread_count() -> int:
    """Threads of this process, native ones included."""
    return int(psutil.Process().num_threads())


def thread_wait(tid: int) -> tuple[str, str] | None:
    """``(state, wchan)`` of thread ``tid`` of this process, None if it is gone."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/self/task/{tid}/wchan") as fh:
            wchan = fh.read().strip()
    except (OSError, IndexError):
        return None
    return state, wchan


def all_stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is stopped (state ``T``: SIGSTOP took effect)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread ended
        if state not in ("T", "t"):
            return False
    return True


def signal_masks(pid: int | None = None) -> dict[str, str]:
    """The kernel's ignored and caught signal masks (``SigIgn``, ``SigCgt``, hex): what a
    native handler installed too, which Python's ``signal.getsignal`` cannot see."""
    masks = {}
    with open(f"/proc/{pid or 'self'}/status") as fh:
        for line in fh:
            if line.startswith(("SigIgn:", "SigCgt:")):
                key, value = line.split(":", 1)
                masks[key] = value.strip()
    return masks


# --------------------------------------------------------------------------- fds


def open_fds() -> set[int]:
    """File descriptors open in this process right now (the listing's own fd excluded)."""
    fds = {int(name) for name in os.listdir("/proc/self/fd")}
    alive_fds = set()
    for fd in fds:
        try:
            os.fstat(fd)
        except OSError:
            continue  # the directory fd used for the listing, already closed
        alive_fds.add(fd)
    return alive_fds


def describe_fd(fd: int) -> str:
    """``fd 7 -> socket:[1234]`` (what a leaked fd points at)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:
        target = f"<{errno.errorcode.get(exc.errno or 0, exc.errno)}>"
    return f"fd {fd} -> {target}"


def fd_targets(pid: int | None = None) -> dict[int, str]:
    """fd -> link target (``socket:[123]``, ``/dev/shm/x (deleted)``, ...) of ``pid``
    (default: this process); empty once it is gone."""
    where = "self" if pid is None or pid == os.getpid() else str(pid)
    directory = f"/proc/{where}/fd"
    table: dict[int, str] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return table
    for name in names:
        try:
            table[int(name)] = os.readlink(f"{directory}/{name}")
        except OSError:
            continue  # the fd of the listdir itself, closed by now
    return table


def fd_cloexec(pid: int, fd: int) -> bool | None:
    """FD_CLOEXEC of another process's fd (``fdinfo`` flags); None if it is gone."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as info:
            for line in info:
                if line.startswith("flags:"):
                    return bool(int(line.split()[1], 8) & os.O_CLOEXEC)
    except OSError:
        return None
    return None


def unix_listening(path: str) -> bool:
    """True if a Unix stream socket bound to ``path`` is listening (any process)."""
    with open("/proc/net/unix") as fh:
        next(fh)  # Num RefCount Protocol Flags Type St Inode Path
        for line in fh:
            fields = line.split(maxsplit=7)
            if len(fields) == 8 and fields[7].strip() == path and int(fields[3], 16) & 0x10000:
                return True
    return False


# --------------------------------------------------------------------------- held names

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


def _interesting(path: str) -> bool:
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


def held(pid: int | None = None) -> dict[str, Held]:
    """The names process ``pid`` (default: this one) holds now, keyed for diffing.

    Open files and mapped files keyed by ``(st_dev, st_ino)`` (a segment whose fd is
    closed is still mapped; one unlinked is still held), bound Unix sockets by path.
    Shared libraries and files under the interpreter's prefixes or system directories
    are never counted."""
    where = "self" if pid is None or pid == os.getpid() else str(pid)
    out: dict[str, Held] = {}
    _fd_names(where, out)
    _map_names(where, out)
    _socket_names(pid, out)
    return out


def _fd_names(where: str, out: dict[str, Held]) -> None:
    """Open files of ``/proc/<where>`` into ``out`` (sockets: :func:`_socket_names`)."""
    try:
        fds = os.listdir(f"/proc/{where}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{where}/fd/{fd}")
        except OSError:
            continue
        path, deleted = _strip(target)
        if not _interesting(path):
            continue
        try:
            st = os.stat(f"/proc/{where}/fd/{fd}")
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        out[f"{key}"] = Held("file", path, key, stat.S_IMODE(st.st_mode), deleted)


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
        if not _interesting(path):
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


def _socket_names(pid: int | None, out: dict[str, Held]) -> None:
    """Bound paths of ``pid``'s Unix sockets into ``out``."""
    try:
        conns = psutil.Process(pid).net_connections(kind="unix")
    except psutil.Error:
        return
    for conn in conns:
        path = conn.laddr
        if not isinstance(path, str) or not path or not _interesting(path):
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
    left = set()
    for e in entries.values():
        if e.key is not None and e.key in index:
            left.add(f"{index[e.key]} ({e.kind} the implementation held)")
        elif e.kind == "socket" and os.path.lexists(e.path):
            left.add(f"{e.path} (socket the implementation bound)")
    return sorted(left)


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


def shm_names(pids: Iterable[int] = (), *, exclude_prefix: str = "") -> set[str]:
    """The ``/dev/shm`` files this process and ``pids`` map or hold open (a segment a call
    created shows here even after its fd is closed; a test beside this one's cannot),
    minus those starting with ``SHM_DIR/exclude_prefix``."""
    names: set[str] = set()
    for pid in (os.getpid(), *pids):
        with contextlib.suppress(psutil.Error):
            for region in psutil.Process(pid).memory_maps(grouped=False):
                if region.path.startswith(SHM_DIR + "/"):
                    names.add(region.path)
        names.update(t for t in fd_targets(pid).values() if t.startswith(SHM_DIR + "/"))
    own = f"{SHM_DIR}/{exclude_prefix}" if exclude_prefix else None
    return {n for n in names if own is None or not n.startswith(own)}


def still_there(names: Iterable[str]) -> list[str]:
    """Which of ``names`` still exist (a segment unlinked while mapped shows as deleted)."""
    return sorted(name for name in names if os.path.exists(name))


# --------------------------------------------------------------------------- TMPDIR


def private_tmpdir(root: str) -> None:
    """Give this process its own TMPDIR (``root``, created 0700 if missing, and
    :mod:`tempfile`'s cache reset), so what an implementation leaves in "the" temporary
    directory is seen without other tests' files around it."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = root
    tempfile.tempdir = None


# --------------------------------------------------------------------------- keeping what was seen


def save_observation(path: str, value: object) -> None:
    """Pickle ``value`` to ``path`` atomically: what a rank observed survives its SIGKILL
    and is read whole or not at all."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(value, fh)
    os.replace(tmp, path)


def load_observation(path: str, default: Any = None) -> Any:
    """What :func:`save_observation` kept at ``path``; ``default`` if nothing was."""
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)  # noqa: S301 - our own ranks' files, in our own tmp dir
    except (OSError, EOFError, pickle.UnpicklingError):
        return default
