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
- **open files**: fd tables (:func:`fd_targets`), close-on-exec flags, and whether a Unix
  socket path has a listener (:func:`unix_listening`); the *names* a process holds (open,
  mapped, bound; those under ``/dev/shm``) are :mod:`._held`'s;
- **a private TMPDIR** (:func:`private_tmpdir`), so what an implementation leaves in "the"
  temporary directory is seen without other tests' files around it.

Built on psutil (process state, start time, children, command line, thread count, a
process's bound Unix sockets), imported on first use: the runner and the ranks use only
the raw reads below, and psutil's import costs every interpreter ~60 ms.  Read from
``/proc`` only for what psutil does not expose: the raw ``stat`` fields in one read
(process group and start ticks together, for the runner's stale-directory marks and its
group sweep), per-thread state and wait channel (``task/<tid>/stat``, ``wchan``), an fd's
link target whatever it is (psutil lists regular, not-deleted files only: a shared-memory
segment unlinked while open, a socket inode or a pipe would be missing), ``fdinfo`` flags
of another process's fd, the paths, device and inode of mapped files (psutil's
``memory_maps`` gives no inode, and a segment is judged by inode once its name is gone; it
also reads ``smaps``, 40 times the cost of ``maps``), the listening flag of a Unix socket
(psutil reports no state for Unix sockets) and the signal masks in ``status``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from ._leaks import note_before_kill

if TYPE_CHECKING:
    import psutil


__all__ = [
    "PID_FILE_PREFIX",
    "SHM_DIR",
    "Proc",
    "alive",
    "all_stopped",
    "dead",
    "descendants",
    "describe",
    "describe_fd",
    "fd_cloexec",
    "fd_targets",
    "kill",
    "list_group_members",
    "load_observation",
    "open_fds",
    "pid_path",
    "private_tmpdir",
    "publish_pid",
    "published_pid",
    "save_observation",
    "signal_masks",
    "stat_fields",
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


def kill(pid: int, sig: int = signal.SIGKILL, *, group: bool = False) -> None:
    """Send ``sig`` to ``pid`` (to its whole process group with ``group``), after noting
    what it and its descendants hold outside the workdir.

    The fault a clause test stages is often this kill; once the victim is dead nothing
    maps the segments it created, so only this note proves them the group's and lets the
    suite remove them after the test (``_leaks``).  Inside a rank the group is known; in
    any other process the note is skipped and the kill is a plain ``os.kill``."""
    note_before_kill(pid)
    if group:
        os.killpg(os.getpgid(pid), sig)
    else:
        os.kill(pid, sig)


def dead(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts): from the kernel, never
    from the victim."""
    import psutil

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
    import psutil

    try:
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return proc.pid, proc.create_time()
    except psutil.NoSuchProcess:
        return None


def descendants(pid: int | None = None) -> set[Proc]:
    """Every live descendant of ``pid`` (default: this process), with its start time."""
    import psutil

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {p for p in map(_started, kids) if p is not None}


def alive(procs: Iterable[Proc]) -> list[Proc]:
    """Those of ``procs`` still running (same pid and start time, not a zombie)."""
    import psutil

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
    import psutil

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
    import psutil

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
