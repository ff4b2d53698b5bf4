"""The bootstrap-failure warning names no rank (only a duration), so nobody knows who failed.

The decision's ``failed_ranks`` is still right; only the warning is wrong.  Its
"after 1.00 s" and any path in it contain a "1": a plain ``"1" in message`` passed it.
"""

from __future__ import annotations

import warnings

from tpbcast.reference_impl import _dispatch_bootstrap

from ._base import Delegating

DEFECT = "the fallback warning after a failed bootstrap does not name the failing rank"
KILLS = ("FALLBACK-9",)
FAST = True


def _warn_fallback(message: str) -> None:
    warnings.warn(  # the defect: the reason (which names the ranks) is dropped
        "tpbcast UDS bootstrap failed after 1.00 s; every rank uses the collective fallback",
        _dispatch_bootstrap.BootstrapFallbackWarning,
        stacklevel=3,
    )


_dispatch_bootstrap._warn_fallback = _warn_fallback


class WarningNamesNoRank(Delegating):
    pass


def make() -> WarningNamesNoRank:
    return WarningNamesNoRank()
