"""torch gloo: reset() forgets the group instead of destroying it.

The correct adapter's reset calls ``destroy_process_group()``: gloo's sockets and the
store's listener close, and a new group on the same port forms at once.  This mutant only
drops its own reference: torch's default group (its sockets, rank 0's listener) lives on,
and the next ``initialize`` on the same port is refused by torch.
"""

from __future__ import annotations

from tpbcast.conformance.adapters.torch_gloo.adapter import TorchGlooBroadcaster

DEFECT = "torch gloo: reset() keeps the process group (sockets, listener) alive"
KILLS = ("TCP-2",)
FAST = False


class ResetKeepsGroup(TorchGlooBroadcaster):
    def reset(self) -> None:
        self._store = None  # the defect: destroy_process_group() is never called


def make() -> ResetKeepsGroup:
    return ResetKeepsGroup()
