"""A failed initialize moves the rendezvous of every later one: the retry meets nobody.

The shape of torch's ``init_process_group`` (conformance/adapters/torch_gloo/repros/
failed_init.py): a failed attempt advances a process-wide counter that prefixes the
rendezvous keys, so the same process's retry waits at keys a peer on its first attempt
never writes, and the group never forms.  Here the counter suffixes the base path.  Each
call alone is the reference's; only a retry after a failure goes wrong (INIT-11).
"""

from __future__ import annotations

from typing import Any

from ._base import Delegating

DEFECT = "after a failed initialize, every later initialize rendezvous at another path"
KILLS = ("INIT-11",)
FAST = True


class FailedInitMovesRendezvous(Delegating):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def initialize(self, rank: int, world_size: int, base_path: str) -> Any:
        path = f"{base_path}.{self.failures}" if self.failures else base_path  # the defect
        try:
            return self.inner.initialize(rank, world_size, path)
        except Exception:
            self.failures += 1
            raise


def make() -> FailedInitMovesRendezvous:
    return FailedInitMovesRendezvous()
