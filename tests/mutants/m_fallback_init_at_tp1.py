"""The bootstrap initializes the broadcaster at TP=1 too (``tp_size <= local_world_size``).

A one-rank broadcaster is a no-op, so the data is right; but the broadcaster is up where
the policy says it must stay down (and the call skips the collective path).
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl._dispatch import CpuBroadcastDispatcher
from tpbcast.reference_impl._dispatch_bootstrap import BootstrapDecision, DispatchPath

from ._base import Delegating

DEFECT = "the bootstrap initializes the broadcaster at TP=1"
KILLS = ("FALLBACK-8",)
FAST = True

_bootstrap = CpuBroadcastDispatcher.bootstrap


def bootstrap(self: CpuBroadcastDispatcher, **kwargs: Any) -> BootstrapDecision:
    if kwargs["tp_size"] != 1:
        return _bootstrap(self, **kwargs)
    # the defect: eligible as soon as tp_size <= local_world_size, 1 included
    self.broadcaster.initialize(0, 1, kwargs["base_path"], config=kwargs.get("config"))
    decision = BootstrapDecision(
        path=DispatchPath.UDS,
        tp_rank=0,
        tp_size=1,
        local_world_size=kwargs["local_world_size"],
        eligible=True,
        attempted=True,
        reason="tp_size 1 <= local_world_size",
    )
    self.last_bootstrap = decision
    return decision


CpuBroadcastDispatcher.bootstrap = bootstrap  # type: ignore[method-assign]


class InitAtTp1(Delegating):
    pass


def make() -> InitAtTp1:
    return InitAtTp1()
