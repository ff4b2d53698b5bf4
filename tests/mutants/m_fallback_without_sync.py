"""The collective fallback drops ``sync_communication`` (PR #960 review round 4 P1).

The dispatcher's call to it goes nowhere, and honestly so: its own record lacks it too.
"""

from __future__ import annotations

from tpbcast.reference_impl import _engines

from ._base import Delegating

DEFECT = "the collective fallback never calls sync_communication"
KILLS = ("FALLBACK-2",)
FAST = True


def _sync_communication(self: _engines.RecordingEngine) -> None:
    return None  # the defect: neither recorded nor called


_engines.RecordingEngine.sync_communication = _sync_communication  # type: ignore[method-assign]


class WithoutSync(Delegating):
    pass


def make() -> WithoutSync:
    return WithoutSync()
