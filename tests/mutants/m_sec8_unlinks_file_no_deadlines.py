"""Rank 0 unlinks a regular file it finds at its socket path, and declares no deadlines.

The reference refuses a regular file at the path (SEC-8: it may be a user's data, or a
trap).  This mutant removes it, binds, and waits in ``accept`` with its default 120 s
init deadline, which the suite cannot shorten (no ``deadlines`` capability).  The suite
watches the path while ``initialize`` runs, sees the file go, and releases the wait by
joining as the peer: SEC-8 is FAIL within a second instead of ERROR at the group deadline.
"""

from __future__ import annotations

import contextlib
import os
import stat

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "a regular file at the socket path is unlinked (and the adapter declares no deadlines)"
KILLS = ("SEC-8",)
FAST = True

_original = _bootstrap.prepare_socket_path


def _prepare_socket_path(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)  # the defect
            return
    _original(path)


_bootstrap.prepare_socket_path = _prepare_socket_path


class UnlinksFileNoDeadlines(Delegating):
    capabilities = Delegating.capabilities - {"deadlines"}


def make() -> UnlinksFileNoDeadlines:
    return UnlinksFileNoDeadlines()
