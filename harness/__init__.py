"""tpbcast.harness: a pytest-free, fork-based multi-rank runner with fault injection.

``run_ranks(target, world_size)`` forks the ranks from this warm process, supervises them
with one deadline, and returns a :class:`GroupResult` with one :class:`RankOutcome` per
rank (status, value or traceback, signal name, fd-level output, stack dump of hung ranks,
faults fired). See DESIGN.md, "Harness public API".
"""

from __future__ import annotations

from ._context import RankContext, SyncError, SyncTimeoutError
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
from ._runner import SEED_ENV, run_ranks
from ._workdir import WORKDIR_PREFIX

__all__ = [
    "SEED_ENV",
    "WORKDIR_PREFIX",
    "Delay",
    "Exit",
    "FaultAction",
    "FaultPlan",
    "FaultRecord",
    "ForkSafetyError",
    "GroupResult",
    "Kill",
    "NativeThread",
    "Pause",
    "PlannedFault",
    "Raise",
    "RankContext",
    "RankGroupFailure",
    "RankOutcome",
    "Segfault",
    "SignalStorm",
    "Status",
    "SyncError",
    "SyncTimeoutError",
    "native_threads",
    "run_ranks",
]

# --- begin: wire / rogue / environment / adapter exports (owned by the other helper) ---
# Add `from ._wire import ...` etc. here and extend __all__ with
# `__all__ += [...]` so both halves can be edited without conflicts.
# --- end: wire / rogue / environment / adapter exports ---
