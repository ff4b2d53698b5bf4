"""Python exceptions for the native example, one per error kind of ``cbcast.c``.

The root ``NativeBroadcastError`` is a RuntimeError carrying the C message
verbatim plus its fields (``rank, peer, phase, bytes_done, bytes_total,
elapsed, path, errno_name``), which is what the ``error_details`` capability
promises.  Subclasses also derive from the builtin a caller would naturally
catch (``ValueError`` for bad arguments, ``TimeoutError`` for a passed deadline,
``PermissionError`` for a refused peer or path).
"""

from __future__ import annotations

import errno as _errno

from ._lib import ErrorInfo, Kind

__all__ = [
    "NativeBroadcastError",
    "NativeBrokenError",
    "NativeConfigurationError",
    "NativeHandshakeError",
    "NativeNotInitializedError",
    "NativePeerClosedError",
    "NativeReinitMismatchError",
    "NativeSecurityError",
    "NativeTimeoutError",
    "from_info",
]


class NativeBroadcastError(RuntimeError):
    """A call into libcbcast failed; ``str()`` is the library's own message."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info
        self.rank = info.rank
        self.peer: int | None = info.peer if info.peer >= 0 else None
        self.phase = info.phase
        self.bytes_done = info.bytes_done
        self.bytes_total = info.bytes_total
        self.elapsed = info.elapsed
        self.path = info.path or None
        # EOF is not an errno: None there (the message says "peer closed (EOF)").
        self.errno_name: str | None = _errno.errorcode.get(info.err) if info.err > 0 else None

    def __reduce__(self) -> tuple[type[NativeBroadcastError], tuple[ErrorInfo]]:
        # Ranks are forked processes: errors must pickle back to the parent.
        return (type(self), (self.info,))


class NativeConfigurationError(NativeBroadcastError, ValueError):
    """Bad arguments: rank, world size, base path, root."""


class NativeReinitMismatchError(NativeBroadcastError):
    """initialize() again with different parameters without reset()."""


class NativeNotInitializedError(NativeBroadcastError):
    """broadcast() before initialize()."""


class NativeBrokenError(NativeBroadcastError):
    """A previous broadcast failed; the stream is out of sync until reset()."""


class NativeHandshakeError(NativeBroadcastError):
    """Wire v1 bootstrap violated: bad or duplicate rank, wrong probe, early EOF."""


class NativePeerClosedError(NativeBroadcastError):
    """The other end closed (EOF, EPIPE, ECONNRESET)."""


class NativeTimeoutError(NativeBroadcastError, TimeoutError):
    """A connect, init or io deadline passed."""


class NativeSecurityError(NativeBroadcastError, PermissionError):
    """A foreign-uid peer, or a non-socket file at the socket path."""


_BY_KIND: dict[int, type[NativeBroadcastError]] = {
    Kind.CONFIG: NativeConfigurationError,
    Kind.NOT_INIT: NativeNotInitializedError,
    Kind.BROKEN: NativeBrokenError,
    Kind.HANDSHAKE: NativeHandshakeError,
    Kind.CLOSED: NativePeerClosedError,
    Kind.TIMEOUT: NativeTimeoutError,
    Kind.SECURITY: NativeSecurityError,
    Kind.MISMATCH: NativeReinitMismatchError,
}


def from_info(info: ErrorInfo) -> NativeBroadcastError:
    """The exception for the library's last error."""
    return _BY_KIND.get(info.kind, NativeBroadcastError)(info)
