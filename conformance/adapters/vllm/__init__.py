"""Adapter: vLLM's shared-memory ``MessageQueue`` (vLLM 0.33) as a broadcaster under test.

``adapter.make`` is the factory the suite loads with
``--tpbcast-impl tpbcast.conformance.adapters.vllm.adapter:make``; vLLM is imported only
then (it is not a dependency of tpbcast: see README.md for installing it).  ``repros/``
holds standalone scripts (vLLM + stdlib, no tpbcast) for each vLLM defect the suite finds.
"""

from __future__ import annotations

from ._handle import HandleFileError, handle_path
from .adapter import CAPABILITIES, NAME, TRANSPORT, VllmBroadcaster, VllmMissingError, make

__all__ = [
    "CAPABILITIES",
    "NAME",
    "TRANSPORT",
    "HandleFileError",
    "VllmBroadcaster",
    "VllmMissingError",
    "handle_path",
    "make",
]
