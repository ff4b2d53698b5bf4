"""Private temp directories that name their owner, and the sweep of those whose owner died.

A process that is SIGKILLed (an OOM kill, a CI timeout, ``kill -9`` of pytest) runs no
cleanup, so its ``tpb-*`` directories would stay under ``/tmp`` and ``/dev/shm`` forever.
Every directory made here carries its owner in its name::

    tpb-<pid>.<start>.<scope>-<mkdtemp suffix>      e.g. tpb-48213.1gm5qm.3fa0-k3j9x1a2

- ``pid``: the creating process (decimal, as ``ps`` shows it);
- ``start``: that process's start time (clock ticks since boot, base 36, from
  ``/proc/<pid>/stat``): a later process that reuses the pid has another start time;
- ``scope``: 4 hex digits of a hash of the boot id and the pid namespace: pids and start
  times only mean something within one boot and one pid namespace.

:func:`sweep_stale_dirs` removes a directory only when all of these hold: the name parses,
its scope is ours, it is a real directory (not a symlink) of our uid, and its owner is gone
(no such pid, a zombie, or a pid with another start time). A live owner's directory is never
touched, nor one from another pid namespace sharing ``/tmp`` (a container), nor one named
the old way (``tpb-k3j9x1a2``: no owner to ask), nor another user's. Where ``/proc`` cannot
answer, names carry no owner and nothing is swept.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from functools import cache

from ._observe import stat_fields

__all__ = ["make_private_dir", "owner_alive", "owner_mark", "sweep_stale_dirs"]

# <pid>.<start>.<scope>-<8 chars of mkdtemp's alphabet: a-z, 0-9, _>
_MARKED = re.compile(r"(?P<pid>[0-9]+)\.(?P<start>[0-9a-z]+)\.(?P<scope>[0-9a-f]{4})-[a-z0-9_]{8}")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"

# (root, prefix) pairs this process (or the parent it was forked from: a rank, which must
# not spend its first milliseconds listing /tmp) has swept already.
_SWEPT: set[tuple[str, str]] = set()


def _base36(n: int) -> str:
    out = ""
    while True:
        n, digit = divmod(n, 36)
        out = _DIGITS[digit] + out
        if n == 0:
            return out


def _proc_state_and_start(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None if it does not exist."""
    fields = stat_fields(pid)
    return None if fields is None else (fields[0].decode(), int(fields[19]))


@cache
def _scope() -> str | None:
    """Hash of (boot id, pid namespace); None where /proc cannot tell us."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return hashlib.blake2b(f"{boot}/{pidns}".encode(), digest_size=2).hexdigest()


_MARKS: dict[int, str | None] = {}


def owner_mark() -> str | None:
    """``<pid>.<start>.<scope>`` of this process (recomputed after a fork), or None."""
    pid = os.getpid()
    if pid not in _MARKS:
        scope = _scope()
        try:
            me = _proc_state_and_start(pid) if scope is not None else None
        except (OSError, ValueError, IndexError):
            me = None
        _MARKS[pid] = f"{pid}.{_base36(me[1])}.{scope}" if me is not None else None
    return _MARKS[pid]


def owner_alive(pid: int, start: str) -> bool:
    """Whether the process that made a directory marked ``<pid>.<start>`` still runs.

    A zombie has ended (it will never use the directory again); a pid with another
    start time is a later process that reused the number."""
    try:
        found = _proc_state_and_start(pid)
    except (OSError, ValueError, IndexError):
        return True  # cannot tell: keep the directory
    if found is None:
        return False
    state, started = found
    return state not in ("Z", "X") and _base36(started) == start


def sweep_stale_dirs(root: str, prefix: str) -> tuple[str, ...]:
    """Remove ``root/<prefix><mark>-*`` directories whose owner is gone; return their paths.

    Never raises: a sweep that cannot read ``root`` or remove an entry leaves it alone.
    """
    scope = _scope()
    try:
        names = os.listdir(root) if scope is not None else []
    except OSError:
        return ()
    uid = os.getuid()
    removed = []
    for name in names:
        marked = _MARKED.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        if marked is None or marked["scope"] != scope:
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if owner_alive(int(marked["pid"]), marked["start"]):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(path)
    return tuple(removed)


def make_private_dir(root: str, prefix: str) -> str:
    """A new 0700 directory ``root/<prefix><mark>-XXXXXXXX`` (``mkdtemp``) owned by us.

    The first call per ``(root, prefix)`` in a process first sweeps ``root`` of the
    directories that dead processes left behind (see :func:`sweep_stale_dirs`): each new
    session cleans up after the SIGKILLed ones before it. Forked children inherit the
    "already swept" record, so a rank never repeats the sweep.
    """
    key = (os.path.abspath(root), prefix)
    if key not in _SWEPT:
        _SWEPT.add(key)
        sweep_stale_dirs(root, prefix)
    mark = owner_mark()
    return tempfile.mkdtemp(prefix=f"{prefix}{mark}-" if mark else prefix, dir=root)
