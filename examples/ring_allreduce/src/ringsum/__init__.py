"""ringsum: sum a vector across N processes with a ring all-reduce over Unix sockets.

Each process calls :func:`connect` with its rank, the world size and a directory private
to the group, then :meth:`Ring.allreduce`.  Every wait has a deadline; a neighbour that
dies or stops answering raises :class:`RingError` naming the peer, phase and bytes.
"""

from __future__ import annotations

from ._ring import Ring as Ring
from ._ring import RingError as RingError
from ._ring import RingTimeoutError as RingTimeoutError
from ._ring import connect as connect

__all__ = ["Ring", "RingError", "RingTimeoutError", "connect"]

# Reports and tracebacks name the public path (ringsum.RingError), not the private module.
for _name in __all__:
    globals()[_name].__module__ = __name__
