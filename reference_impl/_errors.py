"""The exception hierarchy of the reference broadcaster.

Every error carries the same fields (rank, peer, phase, bytes done/total, elapsed
time, path, errno name) so that a failure in a forked rank can be read -- and
pickled back to the parent -- without guessing.  The message is composed from
the fields, e.g.::

    rank 0: write to peer 2 failed in phase 'broadcast' after 4096/8388608 bytes,
    0.52 s: peer closed the connection (EPIPE) [path /tmp/x/g_0.sock]

Upstream's "read from rank 0 (96 bytes) failed: Success" incident came from an
errno read after a zero-length read; here a closed peer is always its own type
(:class:`PeerClosedError`) with a reason that says "closed".
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Final

__all__ = [
    "BroadcastError",
    "BroadcastTimeoutError",
    "BrokenBroadcasterError",
    "ConfigurationError",
    "HandshakeError",
    "NotInitializedError",
    "PeerClosedError",
    "ReinitMismatchError",
    "SecurityError",
    "errno_name",
]

_FIELDS: Final = (
    "rank",
    "peer",
    "phase",
    "bytes_done",
    "bytes_total",
    "elapsed",
    "path",
    "errno_name",
    "action",
)


def errno_name(code: int | None) -> str | None:
    """Return the symbolic name of an errno (``EPIPE``), or None for None."""
    if code is None:
        return None
    return _errno.errorcode.get(code, f"errno {code}")


def _rebuild(cls: type[BroadcastError], reason: str, fields: dict[str, Any]) -> BroadcastError:
    """Unpickle helper: rebuild an error from its reason and keyword fields."""
    return cls(reason, **fields)


class BroadcastError(Exception):
    """Root of every error raised by the reference broadcaster.

    :param reason: why it failed, in words ("peer closed the connection").
    :param action: what was being done when it failed ("write to peer 2"); the
        message then reads "<action> failed".
    The other keyword fields are kept as attributes (None when unknown).
    """

    rank: int | None
    peer: int | None
    phase: str | None
    bytes_done: int | None
    bytes_total: int | None
    elapsed: float | None
    path: str | None
    errno_name: str | None
    action: str | None

    def __init__(
        self,
        reason: str,
        *,
        rank: int | None = None,
        peer: int | None = None,
        phase: str | None = None,
        bytes_done: int | None = None,
        bytes_total: int | None = None,
        elapsed: float | None = None,
        path: str | None = None,
        errno_name: str | None = None,
        action: str | None = None,
    ) -> None:
        self.reason = reason
        self.rank = rank
        self.peer = peer
        self.phase = phase
        self.bytes_done = bytes_done
        self.bytes_total = bytes_total
        self.elapsed = elapsed
        self.path = path
        self.errno_name = errno_name
        self.action = action
        super().__init__(self._compose())

    def _compose(self) -> str:
        head = f"rank {self.rank}: " if self.rank is not None else ""
        parts: list[str] = []
        if self.action:
            parts.append(f"{self.action} failed")
        if self.phase:
            parts.append(f"in phase '{self.phase}'")
        if self.bytes_done is not None and self.bytes_total is not None:
            progress = f"after {self.bytes_done}/{self.bytes_total} bytes"
            if self.elapsed is not None:
                progress += f", {self.elapsed:.2f} s"
            parts.append(progress)
        elif self.elapsed is not None:
            parts.append(f"after {self.elapsed:.2f} s")
        what = " ".join(parts)
        text = f"{head}{what}: {self.reason}" if what else f"{head}{self.reason}"
        if self.errno_name:
            text += f" ({self.errno_name})"
        if self.path:
            text += f" [path {self.path}]"
        return text

    def fields(self) -> dict[str, Any]:
        """The keyword fields as a dict (what pickling carries)."""
        return {name: getattr(self, name) for name in _FIELDS}

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's default reduce replays only ``args`` (the composed message),
        # which would lose the fields and double-compose the text.
        return (_rebuild, (type(self), self.reason, self.fields()), self.__dict__.copy())


class ConfigurationError(BroadcastError, ValueError):
    """A bad argument or setting: world size, rank, root, path, buffer kind."""


class ReinitMismatchError(BroadcastError, RuntimeError):
    """``initialize`` was called again with different (rank, world_size, base_path)."""


class NotInitializedError(BroadcastError, RuntimeError):
    """``broadcast`` was called before ``initialize`` (or after ``reset``)."""


class HandshakeError(BroadcastError):
    """The bootstrap bytes were wrong: bad or duplicate rank, truncated rank, bad probe."""


class PeerClosedError(BroadcastError, ConnectionError):
    """The other end closed the connection (EOF, EPIPE or ECONNRESET)."""


class BroadcastTimeoutError(BroadcastError, TimeoutError):
    """A connect, init or broadcast deadline passed."""


class SecurityError(BroadcastError, PermissionError):
    """The socket directory, socket path or a peer's credentials are not trusted."""


class BrokenBroadcasterError(BroadcastError, RuntimeError):
    """A previous broadcast failed; the stream is out of sync until ``reset()``."""
