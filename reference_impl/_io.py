"""Deadline-bounded, signal-safe socket I/O on non-blocking sockets.

Why not ``sock.sendall``/``settimeout``: a socket timeout is per call, not per
transfer, so a peer that trickles one byte a second never times out; and we
need the byte count reached when something fails.  Here every transfer is a
loop of ``send``/``recv_into`` on a non-blocking socket, and ``poll`` waits for
readiness with the time left of ONE :class:`Deadline`.

- Every send passes ``MSG_NOSIGNAL``: a dead peer gives EPIPE, never SIGPIPE,
  even when SIGPIPE is at SIG_DFL (as in a C++ engine process).
- Partial reads/writes advance the view; EINTR (``InterruptedError``) retries.
- End of stream, EPIPE, ECONNRESET -> :class:`PeerClosedError` ("closed").
- Deadline passed -> :class:`BroadcastTimeoutError` with bytes done/total.
"""

from __future__ import annotations

import errno
import math
import select
import socket
import time
from dataclasses import dataclass
from typing import Final

from ._errors import (
    BroadcastError,
    BroadcastTimeoutError,
    PeerClosedError,
    errno_name,
)

__all__ = ["Deadline", "Site", "recv_exact", "send_all", "wait_readable"]

_SEND_FLAGS: Final = getattr(socket, "MSG_NOSIGNAL", 0)
_CLOSED_ERRNOS: Final = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN})
_POLL_IN: Final = select.POLLIN | select.POLLPRI
_POLL_OUT: Final = select.POLLOUT
_POLL_BAD: Final = select.POLLNVAL


class Deadline:
    """A point in ``time.monotonic()`` time; ``seconds=None`` never expires."""

    __slots__ = ("_end", "seconds", "started")

    def __init__(self, seconds: float | None, *, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self.seconds = seconds
        self._end = math.inf if seconds is None else self.started + seconds

    def remaining(self) -> float:
        """Seconds left (``inf`` for no deadline, 0.0 once passed)."""
        return max(0.0, self._end - time.monotonic())

    def poll_ms(self) -> int | None:
        """The timeout argument for ``poll``: None waits forever; rounds up."""
        if self._end == math.inf:
            return None
        return math.ceil(self.remaining() * 1000)

    def expired(self) -> bool:
        return time.monotonic() >= self._end

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def describe(self) -> str:
        return "no deadline" if self.seconds is None else f"deadline of {self.seconds:g} s"


@dataclass(frozen=True, slots=True)
class Site:
    """Who talks to whom, for error messages: ``rank`` talks to ``peer`` (``who``)."""

    rank: int
    peer: int | None
    phase: str
    path: str | None
    who: str

    def fail(
        self,
        cls: type[BroadcastError],
        reason: str,
        *,
        verb: str,
        done: int,
        total: int,
        deadline: Deadline,
        code: int | None = None,
    ) -> BroadcastError:
        return cls(
            reason,
            rank=self.rank,
            peer=self.peer,
            phase=self.phase,
            bytes_done=done,
            bytes_total=total,
            elapsed=deadline.elapsed(),
            path=self.path,
            errno_name=errno_name(code),
            action=f"{verb} {self.who}",
        )


def _error_for(
    exc: OSError, site: Site, *, verb: str, done: int, total: int, deadline: Deadline
) -> BroadcastError:
    code = exc.errno
    if code in _CLOSED_ERRNOS:
        return site.fail(
            PeerClosedError,
            "peer closed the connection",
            verb=verb,
            done=done,
            total=total,
            deadline=deadline,
            code=code,
        )
    return site.fail(
        BroadcastError,
        exc.strerror or str(exc),
        verb=verb,
        done=done,
        total=total,
        deadline=deadline,
        code=code,
    )


class _AbortRequestedError(Exception):
    """The abort fd became readable: another thread asked this transfer to stop."""


def _poller(sock: socket.socket, events: int, abort_fd: int | None) -> select.poll:
    poller = select.poll()
    poller.register(sock.fileno(), events)
    if abort_fd is not None:
        poller.register(abort_fd, select.POLLIN)
    return poller


def _aborted(site: Site, verb: str, done: int, total: int, deadline: Deadline) -> BroadcastError:
    return site.fail(
        BroadcastError,
        "aborted: reset() was called from another thread during the transfer",
        verb=verb,
        done=done,
        total=total,
        deadline=deadline,
        code=errno.ECANCELED,
    )


def _wait(poller: select.poll, deadline: Deadline, abort_fd: int | None = None) -> int:
    """Poll the socket (and the abort fd); returns the socket's revents, 0 on timeout.

    :raises _AbortRequestedError: the abort fd is readable.
    """
    while True:
        timeout = deadline.poll_ms()
        if timeout == 0:
            return 0
        try:
            ready = poller.poll(timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
        if any(fd == abort_fd for fd, _ in ready):
            raise _AbortRequestedError
        if ready:
            return ready[0][1]
        if deadline.expired():
            return 0


def _wait_ready(
    poller: select.poll,
    deadline: Deadline,
    abort_fd: int | None,
    site: Site,
    *,
    verb: str,
    done: int,
    total: int,
    idle: str,
) -> None:
    """Wait until the socket can make progress; raise what a failed wait means.

    :raises BroadcastError: aborted by ``reset()`` (ECANCELED) or the fd was
        closed under us (POLLNVAL, EBADF).
    :raises BroadcastTimeoutError: the deadline passed (``idle`` says what the
        peer was not doing).
    """
    try:
        revents = _wait(poller, deadline, abort_fd)
    except _AbortRequestedError:
        raise _aborted(site, verb, done, total, deadline) from None
    if revents == 0:
        raise site.fail(
            BroadcastTimeoutError,
            f"{deadline.describe()} passed ({idle})",
            verb=verb,
            done=done,
            total=total,
            deadline=deadline,
            code=errno.ETIMEDOUT,
        )
    if revents & _POLL_BAD:
        raise site.fail(
            BroadcastError,
            "socket was closed under us",
            verb=verb,
            done=done,
            total=total,
            deadline=deadline,
            code=errno.EBADF,
        )


def wait_readable(sock: socket.socket, deadline: Deadline) -> bool:
    """True when ``sock`` is readable (or hung up) before the deadline."""
    return _wait(_poller(sock, _POLL_IN, None), deadline) != 0


def send_all(
    sock: socket.socket,
    data: memoryview,
    deadline: Deadline,
    site: Site,
    *,
    offset: int = 0,
    total: int | None = None,
    abort_fd: int | None = None,
) -> int:
    """Send every byte of ``data`` before ``deadline``; returns ``len(data)``.

    :param offset: bytes of the same transfer already sent before ``data``
        (several buffers go back to back), only for the error message.
    :param total: bytes of the whole transfer, for the error message.
    :param abort_fd: when it turns readable, stop with a BroadcastError
        (``reset()`` from another thread uses it; see ``_broadcaster``).
    :raises PeerClosedError: the peer closed (EPIPE / ECONNRESET).
    :raises BroadcastTimeoutError: the deadline passed first.
    :raises BroadcastError: any other socket error, errno named.
    """
    size = len(data)
    whole = offset + size if total is None else total
    sent = 0
    poller: select.poll | None = None  # made on the first EAGAIN, then reused
    while sent < size:
        try:
            n = sock.send(data[sent:], _SEND_FLAGS)
        except (BlockingIOError, InterruptedError):
            n = -1
        except OSError as exc:
            raise _error_for(
                exc, site, verb="write to", done=offset + sent, total=whole, deadline=deadline
            ) from exc
        if n > 0:
            sent += n
            continue
        if n == 0:  # never for stream sockets, but never spin on it either
            raise site.fail(
                PeerClosedError,
                "peer closed the connection (send returned 0)",
                verb="write to",
                done=offset + sent,
                total=whole,
                deadline=deadline,
                code=errno.EPIPE,
            )
        if poller is None:
            poller = _poller(sock, _POLL_OUT, abort_fd)
        # POLLOUT, POLLERR or POLLHUP: the next send reports the real errno.
        _wait_ready(
            poller,
            deadline,
            abort_fd,
            site,
            verb="write to",
            done=offset + sent,
            total=whole,
            idle="peer not reading",
        )
    return size


def recv_exact(
    sock: socket.socket,
    view: memoryview,
    deadline: Deadline,
    site: Site,
    *,
    offset: int = 0,
    total: int | None = None,
    abort_fd: int | None = None,
) -> int:
    """Fill all of ``view`` (a writable byte memoryview) before ``deadline``.

    :raises PeerClosedError: end of stream (peer closed) before ``len(view)`` bytes.
    :raises BroadcastTimeoutError: the deadline passed first.
    :raises BroadcastError: any other socket error, errno named.
    """
    size = len(view)
    whole = offset + size if total is None else total
    got = 0
    poller: select.poll | None = None  # made on the first EAGAIN, then reused
    while got < size:
        try:
            n = sock.recv_into(view[got:], size - got)
        except (BlockingIOError, InterruptedError):
            n = -1
        except OSError as exc:
            raise _error_for(
                exc, site, verb="read from", done=offset + got, total=whole, deadline=deadline
            ) from exc
        if n > 0:
            got += n
            continue
        if n == 0:
            raise site.fail(
                PeerClosedError,
                "peer closed the connection (end of stream)",
                verb="read from",
                done=offset + got,
                total=whole,
                deadline=deadline,
            )
        if poller is None:
            poller = _poller(sock, _POLL_IN, abort_fd)
        _wait_ready(
            poller,
            deadline,
            abort_fd,
            site,
            verb="read from",
            done=offset + got,
            total=whole,
            idle="no data from peer",
        )
    return size
