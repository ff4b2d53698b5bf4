"""The names a process holds, observed from outside: open files, mapped files, bound Unix
sockets, and those under ``/dev/shm`` in particular.

A hygiene check must see what an implementation created without asking it: a name held
after ``initialize`` that was not held before is the implementation's, and after the group
has ended a held inode that still has a name somewhere is a leftover.  Files are keyed by
``(st_dev, st_ino)`` (a segment whose fd is closed is still mapped; one unlinked is still
held), sockets by their bound path.  Which reads come from psutil and which from
``/proc``, and why, is said in :mod:`._observe`.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ._observe import SHM_DIR, fd_targets

__all__ = [
    "Held",
    "held",
    "loose",
    "modes_in",
    "named_now",
    "new_held",
    "shm_names",
    "still_named",
    "still_there",
]


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
    import psutil

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
    return sorted(text for text, _, _ in still_named(entries, dirs))


def still_named(
    entries: dict[str, Held], dirs: list[str]
) -> set[tuple[str, str, tuple[int, int] | None]]:
    """:func:`named_now` as ``(text, path, key)``: the path and inode each leftover has
    now, so a suite can hand it to the run's cleanup (``runtime.claim``)."""
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
            path = index[e.key]
            left.add((f"{path} ({e.kind} the implementation held)", path, e.key))
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


def shm_names(pids: Iterable[int] = (), *, exclude_prefix: str = "") -> set[str]:
    """The ``/dev/shm`` files this process and ``pids`` map or hold open (a segment a call
    created shows here even after its fd is closed; a test beside this one's cannot),
    minus those starting with ``SHM_DIR/exclude_prefix``."""
    names: set[str] = set()
    for pid in (os.getpid(), *pids):
        names.update(_mapped_paths(pid, SHM_DIR + "/"))
        names.update(t for t in fd_targets(pid).values() if t.startswith(SHM_DIR + "/"))
    own = f"{SHM_DIR}/{exclude_prefix}" if exclude_prefix else None
    return {n for n in names if own is None or not n.startswith(own)}


def _mapped_paths(pid: int, prefix: str) -> set[str]:
    """Paths under ``prefix`` that ``pid`` maps, as ``maps`` shows them (an unlinked one
    ends in `` (deleted)``, so it never counts as still there)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return set()
    fields = (line.split(maxsplit=5) for line in lines)
    return {f[5].strip() for f in fields if len(f) == 6 and f[5].startswith(prefix)}


def still_there(names: Iterable[str]) -> list[str]:
    """Which of ``names`` still exist (a segment unlinked while mapped shows as deleted)."""
    return sorted(name for name in names if os.path.exists(name))
