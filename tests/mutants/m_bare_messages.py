"""Broadcast errors carry upstream's bare wording: the peer and the total, nothing else.

RTP-LLM's class (PR #960 head) says "read from rank 0 (N bytes) failed: ..." and "write to
rank k (N bytes) failed: ...": no bytes done, no phase, no elapsed time.  Here every error
of a broadcast is re-raised with that wording (the closed-peer type and "closed" kept, so
FAULT-3 still holds); FAULT-2 wants bytes done/total and FAULT-4 the phase, bytes and
elapsed time in the message.
"""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl import _errors

from ._base import Delegating

DEFECT = "broadcast errors name only the peer and the total (upstream's wording): no bytes done"
KILLS = ("FAULT-2", "FAULT-4")
FAST = True


class BareMessages(Delegating):
    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        try:
            return self.inner.broadcast(buffers, root)
        except _errors.PeerClosedError as exc:
            total = exc.bytes_total
            raise _errors.PeerClosedError(
                f"read from rank {exc.peer} ({total} bytes) failed: peer closed"
            ) from None


def make() -> BareMessages:
    return BareMessages()
