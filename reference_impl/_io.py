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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from ._errors import (
    BroadcastError,
    BroadcastTimeoutError,
    PeerClosedError,
    errno_name,
)

__all__ = [
    "ByteBuffer",
    "Deadline",
    "Site",
    "make_poller",
    "recv_exact",
    "recv_views",
    "send_all",
    "send_views",
]

#: sendmsg takes at most IOV_MAX (1024 on Linux) buffers per call.
_IOV_MAX: Final = 1024

#: What the transfer functions take: a 1-D byte buffer whose ``len`` is its byte count
#: (bytes, bytearray, a ``B``-format memoryview); ``recv_exact`` needs it writable.
ByteBuffer: TypeAlias = bytes | bytearray | memoryview

_SEND_FLAGS: Final = getattr(socket, "MSG_NOSIGNAL", 0)
_CLOSED_ERRNOS: Final = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN})
_POLL_IN: Final = select.POLLIN | select.POLLPRI
_POLL_OUT: Final = select.POLLOUT
_POLL_BAD: Final = select.POLLNVAL
_monotonic: Final = time.monotonic


class Deadline:
    """A point in ``time.monotonic()`` time; ``seconds=None`` never expires."""

    __slots__ = ("_end", "seconds", "started")

    def __init__(self, seconds: float | None, *, started: float | None = None) -> None:
        # One clock read per broadcast call (a vDSO call, not a syscall).
        self.started = start = _monotonic() if started is None else started
        self.seconds = seconds
        self._end = math.inf if seconds is None else start + seconds

    def restart(self) -> Deadline:
        """Start the same span again from now: a broadcaster keeps one deadline per
        initialize and restarts it per call instead of building one (cheaper)."""
        self.started = start = _monotonic()
        seconds = self.seconds
        self._end = math.inf if seconds is None else start + seconds
        return self

    def remaining(self) -> float:
        """Seconds left (``inf`` for no deadline, 0.0 once passed)."""
        return max(0.0, self._end - time.monotonic())

    def poll_ms(self) -> int | None:
        """The timeout argument for ``poll``: None waits forever; rounds up."""
        end = self._end
        if end == math.inf:
            return None
        left = end - _monotonic()
        return math.ceil(left * 1000) if left > 0 else 0

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


def make_poller(sock: socket.socket, *, writing: bool, abort_fd: int | None) -> select.poll:
    """The ``poller`` argument of :func:`send_all` (``writing``) / :func:`recv_exact`:
    made once per connection by a caller that transfers many times."""
    return _poller(sock, _POLL_OUT if writing else _POLL_IN, abort_fd)


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
        revents = 0
        for fd, events in ready:
            if fd == abort_fd:
                raise _AbortRequestedError
            revents = events
        if revents:
            return revents
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


def send_all(
    sock: socket.socket,
    data: ByteBuffer,
    deadline: Deadline,
    site: Site,
    *,
    offset: int = 0,
    total: int | None = None,
    abort_fd: int | None = None,
    poller: select.poll | None = None,
) -> int:
    """Send every byte of ``data`` before ``deadline``; returns ``len(data)``.

    The common case costs one ``send`` and nothing else: the whole buffer goes in one
    call (no slice, no poll).  Only a partial send (the socket buffer filled) or EAGAIN
    takes :func:`_send_rest`, which waits for POLLOUT with the time left.

    :param data: a 1-D byte buffer whose ``len`` is its byte count (bytes, bytearray, a
        ``B``-format memoryview).
    :param offset: bytes of the same transfer already sent before ``data``
        (several buffers go back to back), only for the error message.
    :param total: bytes of the whole transfer, for the error message.
    :param abort_fd: when it turns readable, stop with a BroadcastError
        (``reset()`` from another thread uses it; see ``_broadcaster``).
    :param poller: a ``poll`` object with the socket (POLLOUT) and ``abort_fd`` (POLLIN)
        registered, kept by the caller across calls; made on demand when None.
    :raises PeerClosedError: the peer closed (EPIPE / ECONNRESET).
    :raises BroadcastTimeoutError: the deadline passed first.
    :raises BroadcastError: any other socket error, errno named.
    """
    size = len(data)
    if size == 0:  # no syscall: a send of nothing to a closed peer would fail (EPIPE)
        return 0
    try:
        sent = sock.send(data, _SEND_FLAGS)
    except (BlockingIOError, InterruptedError):
        sent = -1
    except OSError as exc:
        whole = offset + size if total is None else total
        raise _error_for(
            exc, site, verb="write to", done=offset, total=whole, deadline=deadline
        ) from exc
    if sent == size:
        return size
    return _send_rest(
        sock,
        data,
        sent,
        deadline,
        site,
        offset=offset,
        total=total,
        abort_fd=abort_fd,
        poller=poller,
    )


def _send_rest(
    sock: socket.socket,
    data: ByteBuffer,
    first: int,
    deadline: Deadline,
    site: Site,
    *,
    offset: int,
    total: int | None,
    abort_fd: int | None,
    poller: select.poll | None,
) -> int:
    """The rest of :func:`send_all` after a first ``send`` that sent ``first`` bytes
    (-1: EAGAIN/EINTR): wait for room, send the rest, repeat."""
    size = len(data)
    whole = offset + size if total is None else total
    sent = 0
    n = first
    with memoryview(data) as view:
        while True:
            if n > 0:
                sent += n
                if sent >= size:
                    return size
            elif n == 0:  # never for stream sockets, but never spin on it either
                raise site.fail(
                    PeerClosedError,
                    "peer closed the connection (send returned 0)",
                    verb="write to",
                    done=offset + sent,
                    total=whole,
                    deadline=deadline,
                    code=errno.EPIPE,
                )
            else:
                # EAGAIN: wait for room.  After progress we try again at once instead:
                # the reader drains concurrently, and POLLOUT waits until most of the
                # buffer to be free.
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
            try:
                n = sock.send(view[sent:], _SEND_FLAGS)
            except (BlockingIOError, InterruptedError):
                n = -1
            except OSError as exc:
                raise _error_for(
                    exc, site, verb="write to", done=offset + sent, total=whole, deadline=deadline
                ) from exc


def send_views(
    sock: socket.socket,
    views: Sequence[memoryview],
    deadline: Deadline,
    site: Site,
    *,
    total: int,
    abort_fd: int | None = None,
    poller: select.poll | None = None,
) -> int:
    """Send several buffers back to back (``total`` bytes) before ``deadline``.

    One ``sendmsg`` carries them all when the socket buffer has room (the common case
    for a few small buffers); whatever it did not take goes view by view through
    :func:`send_all`.  Same errors as :func:`send_all`.
    """
    sent = 0
    if len(views) <= _IOV_MAX:
        try:
            sent = sock.sendmsg(views, (), _SEND_FLAGS)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            raise _error_for(
                exc, site, verb="write to", done=0, total=total, deadline=deadline
            ) from exc
        if sent == total:
            return total
    done = 0
    for view in views:
        size = len(view)
        skip = min(size, max(0, sent - done))
        if skip < size:
            send_all(
                sock,
                view[skip:] if skip else view,
                deadline,
                site,
                offset=done + skip,
                total=total,
                abort_fd=abort_fd,
                poller=poller,
            )
        done += size
    return total


def recv_views(
    sock: socket.socket,
    views: Sequence[memoryview],
    deadline: Deadline,
    site: Site,
    *,
    total: int,
    abort_fd: int | None = None,
    poller: select.poll | None = None,
    wait_first: bool = False,
) -> int:
    """Fill several buffers back to back (``total`` bytes) before ``deadline``; the
    receiving half of :func:`send_views`.  ``wait_first`` polls before the first read
    only (see :func:`recv_exact`); errors name the byte offset within the whole call."""
    done = 0
    for view in views:
        done += recv_exact(
            sock,
            view,
            deadline,
            site,
            offset=done,
            total=total,
            abort_fd=abort_fd,
            poller=poller,
            wait_first=wait_first and done == 0,
        )
    return done


def recv_exact(
    sock: socket.socket,
    view: ByteBuffer,
    deadline: Deadline,
    site: Site,
    *,
    offset: int = 0,
    total: int | None = None,
    abort_fd: int | None = None,
    poller: select.poll | None = None,
    wait_first: bool = False,
) -> int:
    """Fill all of ``view`` (a writable 1-D byte buffer) before ``deadline``.

    The common case costs one ``recv_into`` of the whole buffer (after one ``poll``
    with ``wait_first``); a short read or EAGAIN takes :func:`_recv_rest` (poll with
    the time left, then read the rest).

    :param poller: as for :func:`send_all`, with the socket registered for POLLIN.
    :param wait_first: poll before the first read -- for a reader that usually
        arrives before the data (a peer waiting for rank 0): a failed non-blocking
        read raises BlockingIOError, which costs more than the poll.
    :raises PeerClosedError: end of stream (peer closed) before ``len(view)`` bytes.
    :raises BroadcastTimeoutError: the deadline passed first.
    :raises BroadcastError: any other socket error, errno named.
    """
    size = len(view)
    if size == 0:
        return 0
    if wait_first:
        if poller is None:
            poller = _poller(sock, _POLL_IN, abort_fd)
        # The usual wake-up (the socket alone, readable) is judged here; anything else
        # -- timeout, abort, POLLNVAL -- goes through _wait_ready, which polls again
        # (at once: what it reports is still pending) and raises what it means.
        ready = poller.poll(deadline.poll_ms())
        if len(ready) != 1 or ready[0][0] == abort_fd or ready[0][1] & _POLL_BAD:
            _wait_ready(
                poller,
                deadline,
                abort_fd,
                site,
                verb="read from",
                done=offset,
                total=offset + size if total is None else total,
                idle="no data from peer",
            )
    try:
        got = sock.recv_into(view)
    except (BlockingIOError, InterruptedError):
        got = -1
    except OSError as exc:
        whole = offset + size if total is None else total
        raise _error_for(
            exc, site, verb="read from", done=offset, total=whole, deadline=deadline
        ) from exc
    if got == size:
        return size
    return _recv_rest(
        sock,
        view,
        got,
        deadline,
        site,
        offset=offset,
        total=total,
        abort_fd=abort_fd,
        poller=poller,
    )


def _recv_rest(
    sock: socket.socket,
    data: ByteBuffer,
    first: int,
    deadline: Deadline,
    site: Site,
    *,
    offset: int,
    total: int | None,
    abort_fd: int | None,
    poller: select.poll | None,
) -> int:
    """The rest of :func:`recv_exact` after a first ``recv_into`` that read ``first``
    bytes (-1: EAGAIN/EINTR): wait for data, read the rest, repeat."""
    size = len(data)
    whole = offset + size if total is None else total
    got = 0
    n = first
    with memoryview(data) as view:
        while True:
            if n > 0:
                got += n
                if got >= size:
                    return size
            elif n == 0:
                raise site.fail(
                    PeerClosedError,
                    "peer closed the connection (end of stream)",
                    verb="read from",
                    done=offset + got,
                    total=whole,
                    deadline=deadline,
                )
            # Poll before every read, progress or not: a short read drained the socket,
            # and a read that finds nothing raises BlockingIOError, dearer than a poll
            # that returns at once when the writer has filled the socket meanwhile.
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
            try:
                n = sock.recv_into(view[got:], size - got)
            except (BlockingIOError, InterruptedError):
                n = -1
            except OSError as exc:
                raise _error_for(
                    exc, site, verb="read from", done=offset + got, total=whole, deadline=deadline
                ) from exc
