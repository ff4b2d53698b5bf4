"""No local argument checks, and no ``deadlines`` capability (as a bare upstream binding).

``initialize`` goes straight to the bootstrap: world_size < 1 is "initialized" at once,
a rank outside ``0..world_size-1`` connects to rank 0 like a peer, and an empty base path
binds ``_0.sock`` in the working directory and waits in ``accept``, with the default
120 s deadlines that the suite cannot shorten.  INIT-1 must still come out FAIL within
seconds: the suite observes the socket work and releases the blocked call itself.
"""

from __future__ import annotations

from tpbcast.reference_impl import _broadcaster
from tpbcast.reference_impl.conformance_adapter import CAPABILITIES

from ._base import Delegating

DEFECT = (
    "initialize checks neither world_size, rank nor an empty base path before socket work "
    "(the 107-byte limit stays); no deadlines capability"
)
KILLS = ("INIT-1",)
FAST = True


def _check_arguments(rank: object, world_size: object, base_path: object) -> None:
    # The defect: only the sun_path limit is left of the local checks.
    if isinstance(base_path, str):
        _broadcaster.check_path_length(_broadcaster.socket_path(base_path))


_broadcaster._check_arguments = _check_arguments


class InitNoArgCheckNoDeadlines(Delegating):
    capabilities: frozenset[str] = CAPABILITIES - {"deadlines"}


def make() -> InitNoArgCheckNoDeadlines:
    return InitNoArgCheckNoDeadlines()
