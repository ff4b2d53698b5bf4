"""What a group's processes left outside its workdir, proven theirs, and its removal.

The workdir (the ranks' TMPDIR too, see ``_tempenv``) is removed with the group; what an
implementation leaves elsewhere would stay on the machine: shared-memory segments and
POSIX semaphores in ``/dev/shm``, IPC socket files in ``/tmp``, and helper processes that
left the rank's process group (the runner already kills the ones inside it).  Each group
notes what it leaked; the suite reports it with the test that caused it and then removes
it (:func:`remove_leaks`; a test plugin calls it after each test, everything else at
interpreter exit).

Other sessions (another xdist worker, another user of the machine) create and remove
their own entries at the same time, so an entry is only ever taken as the group's with a
proof that names one of the group's processes:

- ``held``: a rank or its descendant held it (mapped, open or bound: ``/proc/<pid>/maps``,
  ``fd``, ``net/unix``) when the rank's target ended, or right before the suite killed it
  (:func:`note_before_kill`: a fault's SIGKILL, the runner stopping a hung rank); a rank
  looks only if /dev/shm or /tmp changed since the group began: otherwise two ``stat``
  calls;
- ``name``: its name carries the pid of one of the group's processes (a ring naming its
  segment ``<prefix>-<creator pid>-<random>``), and it was created during the group;
- ``descendant``: a process that was a descendant of a rank when its target ended
  (``/proc/<pid>/task/*/children``, with its start time against pid reuse) and still
  runs after the group: a helper that left the rank's process group;
- ``observed``: a test saw a process of its group hold it (:func:`claim`): the suite's
  own observation of processes that were gone before the group ended (an interpreter a
  rank started and let exit).

Removal checks identity again (same device and inode, same pid and start time): what
changed hands since it was recorded is left alone.  A foreign entry is never touched.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "Leak",
    "LeakWatch",
    "claim",
    "collect_leaks",
    "note_before_kill",
    "note_held",
    "pending_leaks",
    "remove_leaks",
    "size_text",
    "take_leaks",
    "watch_this_rank",
]

SHM_DIR = "/dev/shm"
TMP_DIR = "/tmp"
_HARNESS_PREFIX = "tpb-"  # the harness's own workdirs and capture dirs (``_workdir``)
_HELD_KIND = "held"  # the capture file each rank writes its held names to


@dataclass(frozen=True)
class Leak:
    """One entry a group left outside its workdir, with the proof that it was the group's."""

    kind: str  # "segment", "semaphore", "socket", "process"; in the workdir "file", "dir"
    path: str  # the entry's path; for a process its command line
    size: int  # bytes (0 for a socket, a directory or a process)
    creator: int  # pid of the group's process that made (held, named) it; 0: unknown
    proof: str  # "held", "name", "descendant", "observed"; in the workdir "workdir", "caller"
    key: tuple[int, int]  # (st_dev, st_ino), or (pid, start time) for a process
    group: str = ""  # the group's label, if it had one

    @property
    def in_workdir(self) -> bool:
        """Left in the group's workdir (which goes as a whole), not elsewhere."""
        return self.proof in ("workdir", "caller")

    def describe(self) -> str:
        if self.in_workdir:
            size = f", {size_text(self.size)}" if self.size else ""
            whose = "removed with it" if self.proof == "workdir" else "the caller removes it"
            return f"{self.kind} {self.path}{size} (in the group's workdir, {whose})"
        if self.kind == "process":
            return f"process pid {self.key[0]} ({self.path}): {_PROOFS[self.proof]}"
        size = f", {size_text(self.size)}" if self.size else ""
        return f"{self.kind} {self.path}{size}, creator pid {self.creator} ({_PROOFS[self.proof]})"


_PROOFS = {
    "held": "held by it when its rank ended",
    "name": "its pid is in the name",
    "descendant": "started by a rank: its descendant when the rank's target ended",
    "observed": "the test saw a process of the group hold it",
}


def size_text(n: int) -> str:
    """``216.0 MiB``: a size as people read it."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _mtime(directory: str) -> int:
    try:
        return os.stat(directory).st_mtime_ns
    except OSError:
        return -1


def _created_since(directory: str, since_ns: int) -> list[str]:
    """Entries of ``directory`` whose inode changed (was created) at or after ``since_ns``
    (ctime: an entry that existed before only shows if it was changed meanwhile, and is
    then still taken only with a proof), minus the harness's own directories."""
    found = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.startswith(_HARNESS_PREFIX) or entry.is_dir(follow_symlinks=False):
                    continue
                try:
                    if entry.stat(follow_symlinks=False).st_ctime_ns >= since_ns:
                        found.append(entry.path)
                except OSError:
                    continue
    except OSError:
        pass
    return sorted(found)


@dataclass(frozen=True)
class LeakWatch:
    """When a group began (taken in the parent before the first fork): the wall clock and
    the modification times of /dev/shm and /tmp, so that a group during which neither
    changed costs two ``stat`` calls per rank and nothing else."""

    since_ns: int
    mtimes: tuple[int, int]  # /dev/shm, /tmp
    capture_dir: str  # where each rank writes what it held (the harness's capture dir)

    @classmethod
    def start(cls, capture_dir: str) -> LeakWatch:
        # A second of slack: a ctime is the filesystem's clock tick, not this call's.
        since = time.time_ns() - 1_000_000_000
        return cls(since, (_mtime(SHM_DIR), _mtime(TMP_DIR)), capture_dir)

    def new_paths(self) -> list[str]:
        """Entries of /dev/shm and /tmp created since the group began (any session's: the
        proofs decide which are the group's); only a directory that changed is read."""
        found = []
        for directory, before in zip((SHM_DIR, TMP_DIR), self.mtimes, strict=True):
            if _mtime(directory) != before:
                found += _created_since(directory, self.since_ns)
        return found


# ------------------------------------------------------------------ in the rank, at its end


def note_held(watch: LeakWatch | None, rank: int) -> None:
    """In a rank, right after its target: its live descendants (``proc<TAB>pid<TAB>start``:
    a helper it started, also in a session of its own) and which new /dev/shm and /tmp
    entries this process or a descendant holds (``pid<TAB>path``), in the rank's capture
    dir.  Costs two ``stat`` calls and one read per thread when the rank started nothing
    and neither directory changed (the common case)."""
    if watch is None:
        return
    _write_notes(watch, str(rank), _held_lines(watch, os.getpid()))


def watch_this_rank(watch: LeakWatch | None) -> None:
    """In a rank, at its start: the group's watch, for :func:`note_before_kill` calls made
    in this process (a rank that kills itself or a peer as its fault)."""
    _RANK_WATCH[:] = [watch] if watch is not None else []


def note_before_kill(pid: int, watch: LeakWatch | None = None) -> None:
    """Right before a process of the group is killed: what it and its descendants hold
    now, noted as a rank's end would note it.

    A SIGKILLed rank never reaches its own :func:`note_held`, and once it is dead nothing
    maps its segments any more, so without this a segment it created would be no one's
    (a random name like ``psm_1f2e3d4c`` carries no pid) and stay in /dev/shm.  In a rank
    the group's watch is known (:func:`watch_this_rank`); the runner passes its own.
    Noting nothing costs two ``stat`` calls when neither directory changed."""
    if watch is None:
        if not _RANK_WATCH:
            return
        watch = _RANK_WATCH[0]
    with contextlib.suppress(OSError):
        _write_notes(watch, f"killed-{pid}", _held_lines(watch, pid))


_RANK_WATCH: list[LeakWatch] = []


def _held_lines(watch: LeakWatch, root: int) -> list[str]:
    """``root``'s live descendants and the new entries it or a descendant holds."""
    kids = _descendants(root)
    lines = [f"proc\t{pid}\t{start}\n" for pid, start in kids]
    new = watch.new_paths()
    if new:
        keys: dict[tuple[int, int], str] = {}
        for path in new:
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                keys[(st.st_dev, st.st_ino)] = path
        unix = _unix_paths()
        for pid in (root, *(pid for pid, _ in kids)):
            lines += [f"{pid}\t{path}\n" for path in _held_by(pid, keys, set(new), unix)]
    return lines


def _write_notes(watch: LeakWatch, name: str, lines: list[str]) -> None:
    if lines:
        with open(f"{watch.capture_dir}/{name}.{_HELD_KIND}", "w") as fh:
            fh.writelines(lines)


def _descendants(root: int) -> list[tuple[int, int]]:
    """Live descendants of ``root`` as ``(pid, start time)``, from each thread's
    ``children`` list (setsid does not change a parent: a detached helper is here too)."""
    found: list[tuple[int, int]] = []
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
            except (OSError, ValueError):
                continue
            for kid in kids:
                start = _start_time(kid)
                if start is not None:
                    found.append((kid, start))
                    todo.append(kid)
    return found


def _unix_paths() -> dict[int, str]:
    """Socket inode -> bound path, for every Unix socket with a path."""
    found: dict[int, str] = {}
    with contextlib.suppress(OSError), open("/proc/net/unix") as fh:
        next(fh, None)
        for line in fh:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith("/"):
                found[int(fields[6])] = fields[7]
    return found


def _held_by(
    pid: int, keys: dict[tuple[int, int], str], paths: set[str], unix: dict[int, str]
) -> set[str]:
    held: set[str] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[4] != "0" and fields[5].startswith(SHM_DIR):
                major, minor = (int(x, 16) for x in fields[3].split(":"))
                path = keys.get((os.makedev(major, minor), int(fields[4])))
                if path is not None:
                    held.add(path)
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    bound = unix.get(int(target[8:-1]))
                    if bound in paths:
                        held.add(bound)
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except (OSError, ValueError):
                continue
            path = keys.get((st.st_dev, st.st_ino))
            if path is not None:
                held.add(path)
    return held


# ------------------------------------------------------------- in the parent, after the group


def collect_leaks(
    watch: LeakWatch,
    pids: Iterable[int],
    workdir: str,
    in_workdir: Iterable[str] = (),
    label: str = "",
    *,
    workdir_owned: bool = True,
) -> tuple[Leak, ...]:
    """After the group (every rank reaped, the survivors of its process groups killed):
    what it left in /dev/shm and /tmp and which helper processes of it still run, each
    with its proof; recorded for :func:`remove_leaks`.  ``in_workdir`` are the leftovers
    of the workdir: listed too, so a run can say how much it cleaned up after an
    implementation (proof "workdir": the harness removes it right after; "caller": a
    workdir the caller passed, which the caller removes, e.g. the pytest fixture's
    session directory)."""
    held, kids = _read_notes(watch.capture_dir)
    ours = set(pids) | set(held.values()) | {pid for pid, _ in kids}
    whose = "workdir" if workdir_owned else "caller"
    leaks: list[Leak] = [_workdir_entry(workdir, rel, label, whose) for rel in in_workdir]
    for path in watch.new_paths():
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone again
        kind = _kind(path, st)
        if kind is None:
            continue
        creator, proof = held.get(path), "held"
        if creator is None:
            creator, proof = _pid_in_name(os.path.basename(path), ours), "name"
        if creator is None:
            continue  # not proven ours: never touched
        size = st.st_size if kind != "socket" else 0
        leaks.append(Leak(kind, path, size, creator, proof, (st.st_dev, st.st_ino), label))
    leaks.extend(_escaped(kids, label))
    _PENDING.extend(leaks)
    if leaks:
        _register_atexit()
    return tuple(leaks)


def _workdir_entry(workdir: str, rel: str, label: str, whose: str) -> Leak:
    path = f"{workdir}/{rel}"
    try:
        st = os.lstat(path)
    except OSError:
        return Leak("file", path, 0, 0, whose, (0, 0), label)
    kind = "socket" if stat.S_ISSOCK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
    size = st.st_size if kind == "file" else 0
    return Leak(kind, path, size, 0, whose, (st.st_dev, st.st_ino), label)


def claim(path: str, key: tuple[int, int], creator: int, label: str = "") -> Leak | None:
    """Record an entry the caller saw a process of its group hold (a test's own
    observation, e.g. of an interpreter a rank started and that has exited since): the
    proof is that observation, ``key`` (st_dev, st_ino) must still match.  None when the
    entry is gone, is another file now, or is recorded already."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (st.st_dev, st.st_ino) != tuple(key):
        return None
    if any(leak.path == path and leak.key == tuple(key) for leak in _PENDING):
        return None
    kind = _kind(path, st) or "file"
    size = st.st_size if kind in ("segment", "semaphore", "file") else 0
    leak = Leak(kind, path, size, creator, "observed", (st.st_dev, st.st_ino), label)
    _PENDING.append(leak)
    _register_atexit()
    return leak


def _read_notes(capture_dir: str) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """What the ranks noted (``note_held``): path -> holder pid, and their descendants."""
    held: dict[str, int] = {}
    kids: list[tuple[int, int]] = []
    with contextlib.suppress(OSError):
        for name in os.listdir(capture_dir):
            if not name.endswith(f".{_HELD_KIND}"):
                continue
            with contextlib.suppress(OSError), open(f"{capture_dir}/{name}") as fh:
                for line in fh:
                    fields = line.rstrip("\n").split("\t")
                    if fields[0] == "proc" and len(fields) == 3:
                        kids.append((int(fields[1]), int(fields[2])))
                    elif len(fields) == 2 and fields[0].isdigit():
                        held.setdefault(fields[1], int(fields[0]))
    return held, kids


def _kind(path: str, st: os.stat_result) -> str | None:
    if path.startswith(f"{TMP_DIR}/"):
        return "socket" if stat.S_ISSOCK(st.st_mode) else None  # /tmp: IPC sockets only
    if not stat.S_ISREG(st.st_mode):
        return None
    return "semaphore" if os.path.basename(path).startswith("sem.") else "segment"


def _pid_in_name(name: str, pids: set[int]) -> int | None:
    """A pid of the group written in ``name`` as a whole field: digits between the name's
    ends or the separators ``-``, ``_``, ``.`` (``psm_1234``, ``tpbshm-1234-0``), never a
    run of digits inside a hex or random token that only happens to equal one."""
    for field in re.split(r"[-_.]", name):
        if field.isdigit() and int(field) in pids:
            return int(field)
    return None


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _escaped(kids: list[tuple[int, int]], label: str) -> list[Leak]:
    """The ranks' descendants (as each rank saw them at its end) still running now: what
    the runner's kill of the ranks' process groups missed (a helper in its own session)."""
    found: list[Leak] = []
    for pid, start in kids:
        if _start_time(pid) != start:
            continue  # gone (or its pid is another process's now)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
        except OSError:
            cmd = "?"
        found.append(Leak("process", cmd, 0, pid, "descendant", (pid, start), label))
    return found


# ------------------------------------------------------------------------------- removal

_PENDING: list[Leak] = []
_OWNER = [os.getpid()]  # a forked child inherits the list but removes none of it
_ATEXIT: list[bool] = []


def _register_atexit() -> None:
    if not _ATEXIT:
        atexit.register(_remove_pending_at_exit)
        _ATEXIT.append(True)


def pending_leaks() -> tuple[Leak, ...]:
    """Recorded in this process and not removed yet."""
    return tuple(_PENDING) if os.getpid() == _OWNER[0] else ()


def take_leaks() -> tuple[Leak, ...]:
    """Hand over (and forget) what this process recorded: the caller removes it."""
    if os.getpid() != _OWNER[0]:
        return ()
    taken = tuple(_PENDING)
    _PENDING.clear()
    return taken


def remove_leaks(leaks: Iterable[Leak]) -> list[tuple[Leak, str]]:
    """Remove each entry if it is still the one recorded; returns ``(leak, problem)`` for
    those left in place ("" for removed ones is not returned: only problems)."""
    problems: list[tuple[Leak, str]] = []
    for leak in leaks:
        problem = _kill(leak) if leak.kind == "process" else _unlink(leak)
        if problem:
            problems.append((leak, problem))
    return problems


def _unlink(leak: Leak) -> str:
    if leak.in_workdir:
        return ""  # goes with the workdir (the runner's, or the caller's own)
    step = "lstat"
    try:
        st = os.lstat(leak.path)
        if (st.st_dev, st.st_ino) != leak.key:
            return f"{leak.path} is another file now (inode changed): left alone"
        step = "unlink"
        os.unlink(leak.path)
    except FileNotFoundError:
        return ""  # removed meanwhile (by the implementation, or a later group's sweep)
    except OSError as exc:
        return f"{step} {leak.path}: {exc.strerror} ({_errno_name(exc)})"
    return ""


def _kill(leak: Leak) -> str:
    pid, start = leak.key
    if _start_time(pid) != start:
        return ""  # gone already (or its pid belongs to another process now)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return ""
    except OSError as exc:
        return f"kill pid {pid}: {exc.strerror} ({_errno_name(exc)})"
    return ""


def _errno_name(exc: OSError) -> str:
    import errno

    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def _remove_pending_at_exit() -> None:
    if os.getpid() == _OWNER[0]:
        remove_leaks(take_leaks())
