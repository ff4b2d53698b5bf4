"""Rank 0 takes over any socket at its path, a live group's too.

The reference asks /proc/net/unix whether someone listens on the socket file at its path
and refuses if so (SEC-9); only a stale socket (nobody listening) is replaced (SEC-7).
This mutant treats every socket as stale: a second group started on the same base path
unlinks the first group's live socket and binds its own, and the first group's late
peers connect to the wrong rank 0.
"""

from __future__ import annotations

from tpbcast.reference_impl import _paths

from ._base import Delegating

DEFECT = "a socket at the rank-0 path is replaced even when another process listens on it"
KILLS = ("SEC-9",)
FAST = True


def _never_live(path: str, ident: object) -> bool:
    return False  # the defect: no live-listener check at all


_paths._has_live_listener = _never_live


class LiveListenerTakenOver(Delegating):
    pass


def make() -> LiveListenerTakenOver:
    return LiveListenerTakenOver()
