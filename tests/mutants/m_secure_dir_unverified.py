"""An existing socket directory is used as it is: mode, owner and symlink unchecked.

The reference refuses an existing socket dir with group/other bits (SEC-2), owned by
another user (SEC-3) or that is a symlink (SEC-4).  This mutant still declares
``secure_dir`` and creates a missing one 0700, but trusts any existing one: it binds
there and waits for peers.
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "an existing socket dir is not verified (loose mode, foreign owner, symlink accepted)"
KILLS = ("SEC-2", "SEC-3", "SEC-4")
FAST = True


def _ensure_private_dir(path: str) -> None:
    try:
        os.makedirs(path, mode=0o700)
    except FileExistsError:
        return  # the defect: no verify_private_dir
    os.chmod(path, 0o700)


_bootstrap.ensure_private_dir = _ensure_private_dir


class SecureDirUnverified(Delegating):
    pass


def make() -> SecureDirUnverified:
    return SecureDirUnverified()
