"""tpbcast.reference_impl: the reference CPU TP broadcaster (wire protocol v1).

Byte-compatible with RTP-LLM's ``CpuTpBroadcaster`` (a Python rank and a C++
rank can share a group), with the review findings fixed: deadlines on every
wait, one error hierarchy naming rank/peer/phase/bytes/path/errno, MSG_NOSIGNAL
on every send, a private 0700 socket directory, a 0600 socket, SO_PEERCRED
checks, CLOEXEC fds, and a broken state after a failed broadcast.

Nothing else in tpbcast imports this package; the harness loads it through
``"tpbcast.reference_impl.conformance_adapter:make"``.
"""

from __future__ import annotations

from ._broadcaster import BroadcasterStatistics as BroadcasterStatistics
from ._broadcaster import CpuTpBroadcaster as CpuTpBroadcaster
from ._broadcaster import instance as instance
from ._config import BroadcasterConfig as BroadcasterConfig
from ._errors import BroadcastError as BroadcastError
from ._errors import BroadcastTimeoutError as BroadcastTimeoutError
from ._errors import BrokenBroadcasterError as BrokenBroadcasterError
from ._errors import ConfigurationError as ConfigurationError
from ._errors import HandshakeError as HandshakeError
from ._errors import NotInitializedError as NotInitializedError
from ._errors import PeerClosedError as PeerClosedError
from ._errors import ReinitMismatchError as ReinitMismatchError
from ._errors import SecurityError as SecurityError
from ._paths import make_base_path as make_base_path
from ._wire import PROBE_BYTE as PROBE_BYTE
from ._wire import RANK_FORMAT as RANK_FORMAT
from ._wire import SUN_PATH_MAX as SUN_PATH_MAX
from ._wire import socket_path as socket_path

# --- dispatch (issue 6) ------------------------------------------------------
# Reserved: another helper adds `_dispatch.py` / `_engines.py` and re-exports
# their public names here (e.g. `from ._dispatch import make_dispatcher as
# make_dispatcher`), appending them to __all__ below.
# -----------------------------------------------------------------------------

__all__ = [
    "PROBE_BYTE",
    "RANK_FORMAT",
    "SUN_PATH_MAX",
    "BroadcastError",
    "BroadcastTimeoutError",
    "BroadcasterConfig",
    "BroadcasterStatistics",
    "BrokenBroadcasterError",
    "ConfigurationError",
    "CpuTpBroadcaster",
    "HandshakeError",
    "NotInitializedError",
    "PeerClosedError",
    "ReinitMismatchError",
    "SecurityError",
    "instance",
    "make_base_path",
    "socket_path",
]
