"""The suite releases blocking calls itself, so a missing deadline ends FAIL, not ERROR.

A test that judges a deadline waits for the implementation's call to fail.  Against an
implementation that has no such deadline, that call would block until the harness kills
the group, and the clause would end ERROR ("the harness had to stop a hung rank") although
the violation was plain to see.  So a watcher (another rank of the group) waits for the
call a bounded time -- longer than the deadline under test plus its margin -- and then
releases it the way a real peer or root could: a connection that closes at once wakes a
rank 0 waiting for peers (:func:`poke`), a stand-in rank 0 that accepts and closes wakes
a peer retrying ``connect`` (:func:`stand_in_root`).  The released call then returns or
raises late, and the test judges its elapsed time: FAIL, promptly.

Against a conforming implementation the watcher is never needed: the call fails within
its deadline, the rank notifies, and the watcher returns without touching anything.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import time
from typing import Any

from tpbcast.harness import SyncError, SyncTimeoutError

__all__ = ["notified", "poke", "stand_in_root", "unfinished"]


def notified(ctx: Any, name: str, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``notify(name)``; False if it did not come.

    Also False when every other rank ended without notifying (``SyncError``): whatever
    the watcher does next must be harmless then.
    """
    try:
        ctx.wait(name, timeout=timeout)
    except (SyncTimeoutError, SyncError):
        return False
    return True


def unfinished(ctx: Any, names: list[str], timeout: float) -> list[str]:
    """Those of ``names`` not notified within ``timeout`` s (one deadline for all)."""
    end = time.monotonic() + timeout
    return [name for name in names if not notified(ctx, name, max(0.01, end - time.monotonic()))]


def poke(path: str) -> bool:
    """Connect to the listener at ``path`` and close at once: wakes a rank 0 waiting
    for peers (it sees a connection end before its rank announcement).  True if the
    connection was made."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)
    try:
        sock.connect(path)
    except OSError:
        return False
    finally:
        sock.close()
    return True


def stand_in_root(path: str, timeout: float = 2.0) -> bool:
    """Listen at ``path`` (replacing a socket file there), accept one connection, read
    its announcement and close: wakes a peer retrying ``connect`` (it then sees end of
    stream before the probe).  Removes its socket file.  True if a peer connected."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(path)
    except OSError:
        srv.close()
        return False
    try:
        srv.listen(8)
        srv.settimeout(timeout)
        try:
            conn, _ = srv.accept()
        except OSError:
            return False
        with conn:
            # Read the announcement first: closing with unread bytes would be a reset
            # (ECONNRESET), which a peer may retry; an orderly end of stream is a verdict.
            conn.settimeout(timeout)
            end = time.monotonic() + timeout
            got = b""
            with contextlib.suppress(OSError):
                while len(got) < 4 and time.monotonic() < end:
                    chunk = conn.recv(4 - len(got))
                    if not chunk:
                        break
                    got += chunk
        return True
    finally:
        srv.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
