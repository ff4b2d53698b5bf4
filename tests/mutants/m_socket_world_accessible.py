"""Rank 0's socket file keeps the mode bind() gave it (0777 & ~umask): no chmod 0600.

The reference makes the socket file 0600 right after ``bind`` and before ``listen``
(SEC-5), so no other user can connect even in a directory they can reach.  Under umask 0
this mutant's socket is 0777.
"""

from __future__ import annotations

import os
from typing import Any

from tpbcast.reference_impl import _bootstrap

from ._base import Delegating

DEFECT = "the socket file is not chmod 0600 after bind (world-accessible under umask 0)"
KILLS = ("SEC-5",)
FAST = True


class _OsWithoutSocketChmod:
    """``os`` as ``_bootstrap`` sees it, except that chmod of a socket file is skipped."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def chmod(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith("_0.sock"):
            return  # the defect
        os.chmod(path, mode, *args, **kwargs)


_bootstrap.os = _OsWithoutSocketChmod()  # type: ignore[assignment]


class SocketWorldAccessible(Delegating):
    pass


def make() -> SocketWorldAccessible:
    return SocketWorldAccessible()
