"""Python exceptions for an ``exec:`` implementation: its error replies, and its driver's faults.

A driver answers a failed call with an error class from a small vocabulary (SPEC.md,
adapter section) and its message; each class maps to one exception here, derived from the
builtin a caller would catch (``ValueError`` for bad arguments, ``TimeoutError`` for a
passed deadline, ``PermissionError`` for a refused peer or path), all under one root
:class:`ExecBroadcastError`. The ``error_details`` attributes (``rank, peer, phase,
bytes_done, bytes_total, elapsed, path, errno_name``) carry what the driver sent.

:class:`ExecDriverError` is different: the driver process itself failed (it could not
start, died mid-call, broke the protocol), so the message names the rank and the command.

:class:`ExecNotAsked` is not an error of the implementation at all: the adapter refused a
call itself, before any request reached the driver (an argument the protocol cannot carry,
or a check only Python can make, such as a read-only buffer).  It is a
:class:`EngineNotAsked` (the contract's general form: any adapter's own decision), so the
suite reports the clause UNSUPPORTED instead of judging the adapter's refusal as the
implementation's.
"""

from __future__ import annotations

from typing import Final

from ._contract import AdapterError, EngineNotAsked
from ._exec_protocol import ErrorRecord

__all__ = [
    "ERROR_CLASSES",
    "ExecBroadcastError",
    "ExecBrokenError",
    "ExecConfigurationError",
    "ExecDriverError",
    "ExecHandshakeError",
    "ExecNotAsked",
    "ExecNotInitializedError",
    "ExecPeerClosedError",
    "ExecReinitMismatchError",
    "ExecSecurityError",
    "ExecTimeoutError",
    "from_record",
]


class ExecBroadcastError(RuntimeError):
    """A call the driver answered with an error; ``str()`` is the driver's own message."""

    def __init__(self, record: ErrorRecord) -> None:
        super().__init__(record.message)
        self.record = record
        self.error_class = record.error_class
        self.rank = record.rank
        self.peer = record.peer
        self.phase = record.phase
        self.bytes_done = record.bytes_done
        self.bytes_total = record.bytes_total
        self.elapsed = record.elapsed
        self.path = record.path
        self.errno_name = record.errno_name

    def __reduce__(self) -> tuple[type[ExecBroadcastError], tuple[ErrorRecord]]:
        # Ranks are forked processes: errors must pickle back to the parent.
        return (type(self), (self.record,))


class ExecConfigurationError(ExecBroadcastError, ValueError):
    """``config``: bad rank, world size, base path or root."""


class ExecNotInitializedError(ExecBroadcastError):
    """``not_initialized``: broadcast before initialize."""


class ExecReinitMismatchError(ExecBroadcastError):
    """``reinit_mismatch``: initialize again with other parameters, without reset."""


class ExecBrokenError(ExecBroadcastError):
    """``broken``: an earlier broadcast failed; out of sync until reset."""


class ExecHandshakeError(ExecBroadcastError):
    """``handshake``: the bootstrap was violated (bad or duplicate rank, wrong probe)."""


class ExecPeerClosedError(ExecBroadcastError):
    """``peer_closed``: the other end closed (EOF, EPIPE, ECONNRESET)."""


class ExecTimeoutError(ExecBroadcastError, TimeoutError):
    """``timeout``: a connect, init or io deadline passed."""


class ExecSecurityError(ExecBroadcastError, PermissionError):
    """``security``: a foreign-uid peer, or a non-socket file at the socket path."""


ERROR_CLASSES: Final[dict[str, type[ExecBroadcastError]]] = {
    "config": ExecConfigurationError,
    "not_initialized": ExecNotInitializedError,
    "reinit_mismatch": ExecReinitMismatchError,
    "broken": ExecBrokenError,
    "handshake": ExecHandshakeError,
    "peer_closed": ExecPeerClosedError,
    "timeout": ExecTimeoutError,
    "security": ExecSecurityError,
}
"""The error class vocabulary; any other class (``os``, ``error``, ...) is the root."""


def from_record(record: ErrorRecord) -> ExecBroadcastError:
    """The exception for one error reply."""
    return ERROR_CLASSES.get(record.error_class, ExecBroadcastError)(record)


class ExecDriverError(AdapterError, RuntimeError):
    """The driver process failed, not the call: it did not start, died, or broke protocol.

    ``rank`` is the rank it served (None before ``initialize``), ``command`` its argv.
    """

    def __init__(self, message: str, *, rank: int | None, command: tuple[str, ...]) -> None:
        super().__init__(message)
        self.rank = rank
        self.command = command

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_driver_error, (str(self), self.rank, self.command))


def _rebuild_driver_error(
    message: str, rank: int | None, command: tuple[str, ...]
) -> ExecDriverError:
    return ExecDriverError(message, rank=rank, command=command)


class ExecNotAsked(EngineNotAsked):
    """The ``exec:`` adapter refused a call before any request reached the driver.

    ``check`` names what the adapter checked (``read_only_buffer``, ``nul_in_path``,
    ``int_range``, ...), ``detail`` what it saw.  An :class:`EngineNotAsked` (the capability
    is ``exec:<check>``): the suite reports UNSUPPORTED, never PASS, because the driver was
    never asked (conformance/adapters/exec/README.md, "Checked before the driver").
    """

    def __init__(self, check: str, detail: str, command: tuple[str, ...]) -> None:
        AdapterError.__init__(
            self,
            f"UNSUPPORTED ({check}): {detail}. This is checked by the exec adapter "
            "before the driver; the driver was never asked, so nothing about the "
            f"implementation was judged (driver: {' '.join(command)})",
        )
        self.capability = f"exec:{check}"
        self.implementation = " ".join(command)
        self.engine = self.implementation
        self.check = check
        self.detail = detail
        self.command = command

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.check, self.detail, self.command))
