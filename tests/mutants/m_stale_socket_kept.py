"""Rank 0 leaves a stale socket file at its path instead of replacing it.

A crashed run leaves ``<base>_0.sock`` behind with nobody listening; the reference
removes it and binds (SEC-7).  This mutant never unlinks it, so ``bind`` fails with
EADDRINUSE and every restart on that path fails until someone removes the file.
"""

from __future__ import annotations

import os
import stat

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "a stale socket file (no listener) at the rank-0 path is not replaced"
KILLS = ("SEC-7",)
FAST = True

_original = _bootstrap.prepare_socket_path


def _prepare_socket_path(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode):
        return  # the defect: the stale socket stays, bind() then fails
    _original(path)


_bootstrap.prepare_socket_path = _prepare_socket_path


class StaleSocketKept(Delegating):
    pass


def make() -> StaleSocketKept:
    return StaleSocketKept()
