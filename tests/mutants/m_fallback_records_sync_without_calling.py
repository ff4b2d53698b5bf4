"""The fallback's own record lists ``sync_communication``, but the engine's is never called.

The dispatcher's recorder is testimony, not observation: the suite lends the dispatcher
its own engine and judges what that engine saw, so a record that lies must fail.
"""

from __future__ import annotations

from tpbcast.reference_impl import _engines

from ._base import Delegating

DEFECT = "the fallback records sync_communication in calls() without calling the engine's"
KILLS = ("FALLBACK-2", "FALLBACK-12")
FAST = True


def _sync_communication(self: _engines.RecordingEngine) -> None:
    self.recorder.note(_engines.SYNC_COMMUNICATION)  # the defect: inner never called


_engines.RecordingEngine.sync_communication = _sync_communication  # type: ignore[method-assign]


class RecordsSyncWithoutCalling(Delegating):
    pass


def make() -> RecordsSyncWithoutCalling:
    return RecordsSyncWithoutCalling()
