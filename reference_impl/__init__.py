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
from ._dispatch import CpuBroadcastDispatcher as CpuBroadcastDispatcher
from ._dispatch import ParallelMode as ParallelMode
from ._dispatch import UnsupportedDeviceError as UnsupportedDeviceError
from ._dispatch import UnsupportedModeError as UnsupportedModeError
from ._dispatch import UnsupportedRootError as UnsupportedRootError
from ._dispatch_adapter import DispatchAdapter as DispatchAdapter
from ._dispatch_adapter import make_dispatch_adapter as make_dispatch_adapter
from ._dispatch_bootstrap import BootstrapConsensusError as BootstrapConsensusError
from ._dispatch_bootstrap import BootstrapDecision as BootstrapDecision
from ._dispatch_bootstrap import BootstrapFallbackWarning as BootstrapFallbackWarning
from ._dispatch_bootstrap import DispatchPath as DispatchPath
from ._dispatch_bootstrap import bootstrap as bootstrap
from ._dispatch_bootstrap import is_uds_eligible as is_uds_eligible
from ._engines import CollectiveEngine as CollectiveEngine
from ._engines import CollectiveError as CollectiveError
from ._engines import EngineRecorder as EngineRecorder
from ._engines import RecordingEngine as RecordingEngine
from ._engines import TorchDistributedEngine as TorchDistributedEngine
from ._engines import all_gather_status as all_gather_status
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

__all__ = [
    "PROBE_BYTE",
    "RANK_FORMAT",
    "SUN_PATH_MAX",
    "BootstrapConsensusError",
    "BootstrapDecision",
    "BootstrapFallbackWarning",
    "BroadcastError",
    "BroadcastTimeoutError",
    "BroadcasterConfig",
    "BroadcasterStatistics",
    "BrokenBroadcasterError",
    "CollectiveEngine",
    "CollectiveError",
    "ConfigurationError",
    "CpuBroadcastDispatcher",
    "CpuTpBroadcaster",
    "DispatchAdapter",
    "DispatchPath",
    "EngineRecorder",
    "HandshakeError",
    "NotInitializedError",
    "ParallelMode",
    "PeerClosedError",
    "RecordingEngine",
    "ReinitMismatchError",
    "SecurityError",
    "TorchDistributedEngine",
    "UnsupportedDeviceError",
    "UnsupportedModeError",
    "UnsupportedRootError",
    "all_gather_status",
    "bootstrap",
    "instance",
    "is_uds_eligible",
    "make_base_path",
    "make_dispatch_adapter",
    "socket_path",
]
