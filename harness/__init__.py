"""tpbcast.harness: a pytest-free, fork-based multi-rank runner with fault injection.

``run_ranks(target, world_size)`` forks the ranks from this warm process, supervises them
with one deadline, and returns a :class:`GroupResult` with one :class:`RankOutcome` per
rank (status, value or traceback, signal name, fd-level output, stack dump of hung ranks,
faults fired). See DESIGN.md, "Harness public API".

The façade also carries the layers the conformance suite builds on: the adapter contract
(``load_implementation``), wire v1 spoken byte by byte (``_wire``), rogue peers and roots
(``rogue_peer``/``rogue_root``; the ``peer_*``/``root_*`` functions they wrap are exported
too, for use from a thread or a test) and environment faults (``stale_socket``, ...).
"""

from __future__ import annotations

from ._adapter import (
    DEFAULT_IMPLEMENTATION,
    REQUIRED_MEMBERS,
    AdapterError,
    Broadcaster,
    Capability,
    CapabilityMissing,
    Implementation,
    ImplementationLoadError,
    UnknownCapabilityError,
    load_implementation,
    parse_capabilities,
)
from ._context import RankContext, SyncError, SyncTimeoutError
from ._environment import (
    BufferProof,
    EnvironmentFaultUnavailable,
    PathProof,
    UidProof,
    as_foreign_uid,
    foreign_owner_dir,
    loose_dir,
    regular_file_at,
    stale_socket,
    symlink_at,
    tiny_socket_buffers,
)
from ._faults import (
    Delay,
    Exit,
    FaultAction,
    FaultPlan,
    Kill,
    Pause,
    PlannedFault,
    Raise,
    Segfault,
    SignalStorm,
)
from ._forksafety import ForkSafetyError, NativeThread, native_threads
from ._outcome import FaultRecord, GroupResult, RankGroupFailure, RankOutcome, Status
from ._rogue import (
    PEER_BEHAVIOURS,
    ROOT_BEHAVIOURS,
    LinkReport,
    RogueAction,
    RogueError,
    RogueReport,
    RogueTarget,
    peer_absent,
    peer_announce,
    peer_close_mid_payload,
    peer_garbage_handshake,
    peer_handshake,
    peer_read_payload,
    peer_send_raw,
    peer_silent,
    peer_stall_mid_payload,
    peer_truncated_handshake,
    rogue_peer,
    rogue_root,
    root_dies_mid_broadcast,
    root_never_accepts,
    root_never_probes,
    root_recording,
    root_wrong_probe,
)
from ._runner import SEED_ENV, run_ranks
from ._stale import make_private_dir, sweep_stale_dirs
from ._wire import (
    PROBE,
    RANK_STRUCT,
    CloseKind,
    CloseObservation,
    Deadline,
    PeerCredentials,
    WireClosedError,
    WireError,
    WireTimeoutError,
    accept,
    address_of,
    connect,
    expect_closed,
    listen,
    pack_rank,
    peer_credentials,
    recv_exact,
    recv_until_eof,
    send_all,
    socket_path,
    unpack_rank,
    wait_hung_up,
)
from ._workdir import WORKDIR_PREFIX, WORKDIR_ROOT_ENV, release_workdirs

__all__ = [
    "DEFAULT_IMPLEMENTATION",
    "PEER_BEHAVIOURS",
    "PROBE",
    "RANK_STRUCT",
    "REQUIRED_MEMBERS",
    "ROOT_BEHAVIOURS",
    "SEED_ENV",
    "WORKDIR_PREFIX",
    "WORKDIR_ROOT_ENV",
    "AdapterError",
    "Broadcaster",
    "BufferProof",
    "Capability",
    "CapabilityMissing",
    "CloseKind",
    "CloseObservation",
    "Deadline",
    "Delay",
    "EnvironmentFaultUnavailable",
    "Exit",
    "FaultAction",
    "FaultPlan",
    "FaultRecord",
    "ForkSafetyError",
    "GroupResult",
    "Implementation",
    "ImplementationLoadError",
    "Kill",
    "LinkReport",
    "NativeThread",
    "PathProof",
    "Pause",
    "PeerCredentials",
    "PlannedFault",
    "Raise",
    "RankContext",
    "RankGroupFailure",
    "RankOutcome",
    "RogueAction",
    "RogueError",
    "RogueReport",
    "RogueTarget",
    "Segfault",
    "SignalStorm",
    "Status",
    "SyncError",
    "SyncTimeoutError",
    "UidProof",
    "UnknownCapabilityError",
    "WireClosedError",
    "WireError",
    "WireTimeoutError",
    "accept",
    "address_of",
    "as_foreign_uid",
    "connect",
    "expect_closed",
    "foreign_owner_dir",
    "listen",
    "load_implementation",
    "loose_dir",
    "make_private_dir",
    "native_threads",
    "pack_rank",
    "parse_capabilities",
    "peer_absent",
    "peer_announce",
    "peer_close_mid_payload",
    "peer_credentials",
    "peer_garbage_handshake",
    "peer_handshake",
    "peer_read_payload",
    "peer_send_raw",
    "peer_silent",
    "peer_stall_mid_payload",
    "peer_truncated_handshake",
    "recv_exact",
    "recv_until_eof",
    "regular_file_at",
    "release_workdirs",
    "rogue_peer",
    "rogue_root",
    "root_dies_mid_broadcast",
    "root_never_accepts",
    "root_never_probes",
    "root_recording",
    "root_wrong_probe",
    "run_ranks",
    "send_all",
    "socket_path",
    "stale_socket",
    "sweep_stale_dirs",
    "symlink_at",
    "tiny_socket_buffers",
    "unpack_rank",
    "wait_hung_up",
]


def _publish_names() -> None:
    """Show each re-exported class and function under its public name.

    Tracebacks, reprs and a rank's ``exc_type`` print ``cls.__module__``: without this a
    failure read ``tpbcast.harness._outcome.RankGroupFailure``, a private path nobody can
    import from (issue 11; trio's ``fixup_module_metadata`` does the same).  Only objects
    defined under their exported name are rewritten, so pickling by reference, which looks
    ``__module__.__qualname__`` up, finds each one here.
    """
    namespace = globals()
    for name in __all__:
        obj = namespace[name]
        if not (isinstance(obj, type) or callable(obj)):
            continue
        if getattr(obj, "__qualname__", None) != name:
            continue
        if str(getattr(obj, "__module__", "")).startswith(__name__ + "._"):
            obj.__module__ = __name__


_publish_names()
