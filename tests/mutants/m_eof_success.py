"""A broadcast that hits end of stream reports a stale errno: "... failed: Success".

Upstream's incident (read from rank 0 (96 bytes) failed: Success): the untimed read loop
returned -1 on a zero-length read without setting errno.  Here the reference's "peer
closed the connection" for an EOF during a broadcast becomes that message, a plain
BroadcastError with no errno name (FAULT-3).
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl import _broadcaster, _errors

from ._base import Delegating

DEFECT = "EOF during a broadcast is reported as 'failed: Success' (stale errno), not closed"
KILLS = ("FAULT-3",)
FAST = True

_recv_exact = _broadcaster.recv_exact


def _stale_errno_recv_exact(*args: Any, **kwargs: Any) -> int:
    try:
        return _recv_exact(*args, **kwargs)
    except _errors.PeerClosedError as exc:
        if exc.errno_name is not None:
            raise
        fields = {**exc.fields(), "action": None}
        total = fields["bytes_total"]
        raise _errors.BroadcastError(
            f"read from rank 0 ({total} bytes) failed: Success", **fields
        ) from None


_broadcaster.recv_exact = _stale_errno_recv_exact  # type: ignore[assignment]


class EofSuccess(Delegating):
    pass


def make() -> EofSuccess:
    return EofSuccess()
