"""The dispatch bootstrap ignores the kill switch: UDS comes up although the operator set
``RTP_LLM_CPU_TP_BROADCASTER_DISABLE=1`` on every rank.

The data still arrives (over UDS), so only the clause that asks for the switch sees it.
"""

from __future__ import annotations

from tpbcast.reference_impl import _dispatch_bootstrap

DEFECT = "the dispatch bootstrap ignores RTP_LLM_CPU_TP_BROADCASTER_DISABLE"
KILLS = ("FALLBACK-18",)
FAST = True

# the defect: the switch never reads as on
_dispatch_bootstrap.kill_switch = lambda environ=None: None  # type: ignore[assignment]

from tpbcast.reference_impl.conformance_adapter import make as _make  # noqa: E402


def make() -> object:
    return _make()
