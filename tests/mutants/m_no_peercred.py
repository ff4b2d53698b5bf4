"""Rank 0 lets any uid join: no SO_PEERCRED check (and peers do not check rank 0's).

The reference reads each accepted connection's credentials and rejects a uid other than
its own (SEC-6).  This mutant still declares ``peer_credentials`` but never checks.
"""

from __future__ import annotations

from tpbcast.reference_impl import _config

from ._base import Delegating

DEFECT = "no SO_PEERCRED check: a peer of another uid takes a slot and gets the probe"
KILLS = ("SEC-6",)
FAST = True


def _accepted_uids(self: _config.BroadcasterConfig, own_uid: int) -> frozenset[int] | None:
    return None  # the defect: "no credential check applies"


_config.BroadcasterConfig.accepted_uids = _accepted_uids  # type: ignore[method-assign]


class NoPeercred(Delegating):
    pass


def make() -> NoPeercred:
    return NoPeercred()
