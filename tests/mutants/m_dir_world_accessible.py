"""A missing socket directory is created with the process umask (0777 & ~umask), not 0700.

The reference creates it 0700 whatever the umask (SEC-1).  This mutant calls a plain
``makedirs`` and trusts the directory it just made, so under umask 0 every user can
write into it (replace the socket, or race the bind).
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _bootstrap, _paths

from ._base import Delegating

DEFECT = "a missing socket dir is created with the umask's mode (0777 under umask 0), not 0700"
KILLS = ("SEC-1",)
FAST = True


def _ensure_private_dir(path: str) -> None:
    try:
        os.makedirs(path)  # the defect: mode 0777 & ~umask
    except FileExistsError:
        _paths.verify_private_dir(path)  # an existing dir is still verified


_bootstrap.ensure_private_dir = _ensure_private_dir


class DirWorldAccessible(Delegating):
    pass


def make() -> DirWorldAccessible:
    return DirWorldAccessible()
