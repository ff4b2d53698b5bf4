"""UDS only when ``tp_size == local_world_size`` (not ``<=``): spare local ranks fall back."""

from __future__ import annotations

from tpbcast.reference_impl import _dispatch_bootstrap

from ._base import Delegating

DEFECT = "the bootstrap eligibility rule is 1 < tp_size == local_world_size"
KILLS = ("FALLBACK-8",)
FAST = True


def _is_uds_eligible(tp_size: int, local_world_size: int) -> bool:
    return 1 < tp_size == local_world_size  # the defect


_dispatch_bootstrap.is_uds_eligible = _is_uds_eligible


class EligibilityEqual(Delegating):
    pass


def make() -> EligibilityEqual:
    return EligibilityEqual()
