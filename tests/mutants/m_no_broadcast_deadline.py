"""``broadcast`` waits without a deadline: ``io`` is accepted and never applied.

A rank stalled longer than the I/O deadline (SIGSTOP, a peer that stops reading) leaves
the others waiting until it resumes.  Short pauses in random crash schedules never show
it; a pause longer than the I/O deadline does (FAULT-9), as do the stall tests (TIME-5,
TIME-6, TIME-8), which release the stalled wait themselves so the verdict is FAIL, not a
hang.
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl import _broadcaster, _io

from ._base import Delegating

DEFECT = "broadcast I/O has no deadline (the io setting is accepted and ignored)"
KILLS = ("TIME-5", "TIME-6", "TIME-8", "FAULT-9")
FAST = False


def _no_deadline(seconds: float | None, **kwargs: Any) -> _io.Deadline:
    del seconds  # the defect: whatever io_timeout says, wait forever
    return _io.Deadline(None, **kwargs)


# _broadcaster builds the whole-call deadline of broadcast() from its own name.
_broadcaster.Deadline = _no_deadline  # type: ignore[assignment,misc]


class NoBroadcastDeadline(Delegating):
    pass


def make() -> NoBroadcastDeadline:
    return NoBroadcastDeadline()
