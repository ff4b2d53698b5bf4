"""A failed broadcast poisons the instance for good: reset() and initialize keep it broken.

The correct ring forgets a failed broadcast at ``reset`` (and at the next
``initialize``): the group built again after it works (RESET-8).  In this mutant the
broken state, once set, is never cleared, so every broadcast after a failure raises
"a previous broadcast failed" however often the rank resets and initializes.
"""

from __future__ import annotations

from .shm_ring import ShmRingBroadcaster

DEFECT = "shm ring: after a failed broadcast, reset() and initialize never clear the broken state"
KILLS = ("RESET-8",)
FAST = True


class BrokenSurvivesReset(ShmRingBroadcaster):
    _sticky: str | None = None

    @property  # type: ignore[override]
    def _broken(self) -> str | None:
        return self._sticky

    @_broken.setter
    def _broken(self, value: str | None) -> None:
        if value is not None:  # the defect: clearing it (None) is ignored
            self._sticky = value


def make() -> BrokenSurvivesReset:
    return BrokenSurvivesReset()
