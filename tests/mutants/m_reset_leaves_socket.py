"""reset() closes everything but leaves rank 0's socket file behind.

The reference unlinks its own socket file (same inode) on reset and after a failed
initialize (RESET-3, HYG-2).  This mutant never unlinks it: every group leaves a stale
``<base>_0.sock`` in the socket directory.
"""

from __future__ import annotations

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "reset (and a failed initialize) leaves rank 0's socket file behind"
KILLS = ("RESET-3", "HYG-2", "INIT-11")
FAST = True


def _unlink_if_same(path: str, ident: object) -> bool:
    return False  # the defect: nothing is ever unlinked


_bootstrap.unlink_if_same = _unlink_if_same


class ResetLeavesSocket(Delegating):
    pass


def make() -> ResetLeavesSocket:
    return ResetLeavesSocket()
