"""Socket directory, socket path and base-path policy.

Upstream creates ``/tmp/rtp_llm_<uid>`` with ``makedirs(0o700, exist_ok=True)``,
which keeps whatever mode and owner an existing directory has, and unlinks
whatever is at the socket path.  Here (like pytest's ``tmpdir`` and anyio's
``setup_unix_local_socket``):

- a missing directory is created 0700; an existing one must be ours, have no
  group/other bits and not be a symlink, else :class:`SecurityError`;
- only a *stale* socket at the path is replaced; a regular file, directory or
  symlink is refused, and so is a socket another process is listening on
  (that is a second group using the same path, not a leftover);
- we unlink only the socket file we bound (same device and inode).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from typing import Final

from ._errors import ConfigurationError, SecurityError, errno_name
from ._wire import check_path_length, socket_path

__all__ = [
    "FileId",
    "ensure_private_dir",
    "file_id",
    "make_base_path",
    "prepare_socket_path",
    "unlink_if_same",
    "verify_private_dir",
]

FileId = tuple[int, int]

_FIX: Final = "Fix this and try again"
_UNSAFE_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]")
_SESSION_MAX: Final = 24
_ACCEPTCON: Final = 0x00010000  # __SO_ACCEPTCON in /proc/net/unix "Flags": a listener


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def verify_private_dir(path: str) -> None:
    """Refuse a socket directory others could write to or swap.

    :raises SecurityError: symlink, not a directory, foreign owner, or any
        group/other permission bit.
    """
    st = os.lstat(path)
    euid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise SecurityError(
            f"socket directory is {_kind(st.st_mode)}, not a directory; refusing to use it. "
            f"{_FIX} with a private directory (mode 0700) you own.",
            path=path,
        )
    if st.st_uid != euid:
        raise SecurityError(
            f"socket directory is owned by uid {st.st_uid}, not by us (uid {euid}); another "
            f"user could replace the socket. {_FIX} with a directory you own.",
            path=path,
        )
    if st.st_mode & 0o077:
        raise SecurityError(
            f"socket directory has mode {stat.S_IMODE(st.st_mode):04o}; group/other bits let "
            f"other users replace the socket. {_FIX}: chmod 700 it or use a private directory.",
            path=path,
        )


def ensure_private_dir(path: str) -> None:
    """Create ``path`` with mode 0700 if missing, then verify it."""
    try:
        os.makedirs(path, mode=0o700)
    except FileExistsError:
        pass
    else:
        # makedirs' mode is filtered by the umask; make the new leaf exactly 0700.
        os.chmod(path, 0o700)
    verify_private_dir(path)


def _live_listener_paths() -> frozenset[bytes]:
    """Pathnames of listening Unix sockets in this network namespace."""
    try:
        with open("/proc/net/unix", "rb") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return frozenset()
    found: set[bytes] = set()
    for line in lines:
        cols = line.split(None, 7)
        if len(cols) == 8 and int(cols[3], 16) & _ACCEPTCON:
            found.add(cols[7])
    return frozenset(found)


def _has_live_listener(path: str, ident: FileId) -> bool:
    """Whether a listening socket is bound at ``path`` (by any process); ``ident`` is the
    (device, inode) of the socket file there.

    /proc/net/unix shows a name as it was spelt at bind time.  An absolute name counts
    when it is the same file as ``path``, however it was spelt ('//dir/g_0.sock',
    '/dir/./g_0.sock', a symlinked directory): comparing strings let a group whose base
    path was spelt differently take a live group's socket over.  A listener that bound a
    relative name shows it relative to ITS cwd, which we cannot know; a relative entry
    whose components end our absolute path counts as live (refusing is the safe side:
    the caller is told to pick another session).
    """
    wanted = os.fsencode(os.path.abspath(path))
    for entry in _live_listener_paths():
        if entry.startswith(b"@"):
            continue  # abstract: names no file
        if entry.startswith(b"/"):
            if file_id(os.fsdecode(entry)) == ident:
                return True
            continue
        tail = [part for part in os.path.normpath(entry).split(b"/") if part not in (b"..", b".")]
        if tail and wanted.endswith(b"/" + b"/".join(tail)):
            return True
    return False


def prepare_socket_path(path: str) -> None:
    """Make ``path`` free for ``bind``: remove a stale socket, refuse anything else.

    :raises SecurityError: a non-socket is at the path, or a live listener owns it.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SecurityError(
            f"{_kind(st.st_mode)} is at the socket path; refusing to replace it. "
            f"{_FIX}: remove it or choose another base path.",
            path=path,
        )
    if _has_live_listener(path, (st.st_dev, st.st_ino)):
        raise SecurityError(
            "another process is listening on this socket path (a second group with the same "
            "base path?); refusing to take it over. Give each group its own session id "
            "(TPBCAST_SESSION_ID or make_base_path(session_id=...)).",
            path=path,
            errno_name=errno_name(errno.EADDRINUSE),
        )
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def file_id(path: str) -> FileId | None:
    """(st_dev, st_ino) of ``path`` without following symlinks, or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def unlink_if_same(path: str, ident: FileId | None) -> bool:
    """Unlink ``path`` only if it is still the file we created; True if removed."""
    if ident is None or file_id(path) != ident:
        return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _sanitise(session: str) -> str:
    clean = _UNSAFE_CHARS.sub("_", session)
    if len(clean) > _SESSION_MAX:
        digest = hashlib.sha256(session.encode()).hexdigest()[:12]
        clean = f"{clean[: _SESSION_MAX - 13]}_{digest}"
    return clean


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name)
        if value:
            return value
    return None


def make_base_path(
    dp_rank: int = 0,
    *,
    session_id: str | None = None,
    key: str | None = None,
    base_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The base path every rank of one TP group computes identically.

    Precedence for the session id: ``session_id``, env ``TPBCAST_SESSION_ID``,
    env ``RTP_LLM_CPU_TP_BROADCASTER_ID``, else ``p<ppid>`` plus a short hash of
    ``key`` when given.  The default relies on the ranks of a group being
    siblings of one launcher (as upstream); two groups started by the SAME
    parent must pass different ``key`` values (e.g. the rendezvous address and
    port) or session ids.  Even then a collision is never silent: rank 0 refuses
    a path another live listener owns.  The directory: ``base_dir``, env
    ``TPBCAST_SOCKET_DIR``, env ``RTP_LLM_CPU_TP_BROADCASTER_DIR``, else
    ``$TMPDIR/tpbcast_<euid>`` (``/tmp`` without TMPDIR).  Pure: it creates
    nothing; rank 0's ``initialize`` creates and checks the directory.

    :returns: ``<dir>/tp_<session>_dp<dp_rank>``.
    :raises ConfigurationError: bad dp_rank, or ``<result>_0.sock`` > 107 bytes.
    """
    if isinstance(dp_rank, bool) or not isinstance(dp_rank, int) or dp_rank < 0:
        raise ConfigurationError(f"dp_rank must be an int >= 0, got {dp_rank!r}")
    env = os.environ if environ is None else environ
    session = session_id or _first(env, "TPBCAST_SESSION_ID", "RTP_LLM_CPU_TP_BROADCASTER_ID")
    if not session:
        session = f"p{os.getppid()}"
        if key:
            session += "_" + hashlib.sha256(key.encode()).hexdigest()[:10]
    directory = base_dir or _first(env, "TPBCAST_SOCKET_DIR", "RTP_LLM_CPU_TP_BROADCASTER_DIR")
    if not directory:
        tmp = env.get("TMPDIR") or "/tmp"
        directory = os.path.join(tmp, f"tpbcast_{os.geteuid()}")
    base = os.path.join(directory, f"tp_{_sanitise(session)}_dp{dp_rank}")
    check_path_length(
        socket_path(base), hint="set TPBCAST_SOCKET_DIR (or base_dir) to a shorter directory"
    )
    return base
