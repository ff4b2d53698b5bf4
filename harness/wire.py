"""Wire v1 spoken byte by byte: the one client the suite and the self-tests share.

Everything a test needs to play a peer or a root by hand: the probe byte and the rank
struct, ``connect``/``listen``/``accept`` on a socket path with a :class:`Deadline`,
``send_all``/``recv_exact``/``recv_until_eof``, and the observations of how a link closed
(``expect_closed``, ``wait_hung_up``).

The suite judges implementations, so it must not share their bugs: nothing here
imports ``tpbcast.reference_impl`` (nor anything else of ours: the rogue modules build
on this one).  Every helper takes an explicit :class:`Deadline` and raises a
:class:`WireError` that says what was expected, what arrived, how the stream ended
(EOF, reset, timeout) and after how long, with the path and the errno name.

Sockets are left in blocking mode; each operation waits with ``poll`` for the
remaining time and then does one non-blocking call (``MSG_DONTWAIT``), so a
deadline bounds every wait without mutating the socket's own timeout.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import mmap
import os
import select
import socket
import stat
import struct
import termios
import time
from dataclasses import dataclass
from typing import Any, Final, Self

__all__ = [
    "ABORT_BIT",
    "FRAME_ACK",
    "FRAME_HEADER",
    "FRAME_MAGIC",
    "PROBE",
    "RANK_STRUCT",
    "STATE_READY",
    "STATE_SIZE",
    "CloseKind",
    "CloseObservation",
    "Deadline",
    "DecisionWords",
    "FileFacts",
    "PeerCredentials",
    "WireClosedError",
    "WireError",
    "WireTimeoutError",
    "accept",
    "address_of",
    "connect",
    "expect_closed",
    "listen",
    "pack_frame_header",
    "pack_rank",
    "peer_credentials",
    "recv_exact",
    "recv_until_eof",
    "send_all",
    "socket_path",
    "state_path",
    "unpack_frame_header",
    "unpack_rank",
    "unread",
    "wait_hung_up",
]

PROBE: Final = 0x5A
"""The link-probe byte rank 0 sends each peer once all peers are in (wire v1 step 4)."""
PROBE_BYTE: Final = bytes([PROBE])
RANK_STRUCT: Final = struct.Struct("=i")
"""A peer's rank announcement: native-endian C int, no magic, version or length."""
RANK_SIZE: Final = RANK_STRUCT.size
SUN_PATH_MAX: Final = 107
"""Longest pathname (bytes) that fits ``sun_path`` with its terminating NUL on Linux."""

_POLL_IN: Final = select.POLLIN | select.POLLPRI
_POLL_BAD: Final = select.POLLERR | select.POLLHUP | select.POLLNVAL
_CONNECT_RETRY: Final = frozenset(
    {errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT}
)


def socket_path(base_path: str) -> str:
    """Rank 0's socket path for a group: ``<base_path>_0.sock`` (wire v1 step 1)."""
    return f"{base_path}_0.sock"


def address_of(base_path: str, *, abstract: bool = False) -> str:
    """The ``AF_UNIX`` address for a group; abstract mode prefixes a NUL byte."""
    path = socket_path(base_path)
    return "\0" + path if abstract else path


def describe_address(address: str) -> str:
    """Printable form of an address (abstract ones shown as ``@name``, like ``ss``)."""
    return "@" + address[1:] if address.startswith("\0") else address


def pack_rank(rank: int) -> bytes:
    """Encode a rank announcement; any C int is allowed (rogues announce bad ones)."""
    return RANK_STRUCT.pack(rank)


def unpack_rank(data: bytes) -> int:
    """Decode a 4-byte rank announcement.

    :raises ValueError: if ``data`` is not exactly :data:`RANK_SIZE` bytes.
    """
    if len(data) != RANK_SIZE:
        raise ValueError(f"a rank announcement is {RANK_SIZE} bytes, got {len(data)}: {data!r}")
    return int(RANK_STRUCT.unpack(data)[0])


@dataclass(frozen=True)
class Deadline:
    """An absolute point on the monotonic clock; every wait in this module takes one."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Self:
        """The deadline ``seconds`` from now."""
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return time.monotonic() >= self.at

    def poll_ms(self) -> int:
        """Remaining time for ``poll()``, rounded up so a wait never ends early."""
        return int(self.remaining() * 1000.0 + 0.999)


class CloseKind(enum.StrEnum):
    """How the other end of a stream ended, as seen by a reader."""

    EOF = "eof"
    """Orderly close: ``recv`` returned 0 bytes."""
    RESET = "reset"
    """``ECONNRESET``: on Unix sockets, the peer closed with unread data in its queue."""
    OPEN = "open"
    """Nothing ended the stream before the deadline."""


def _errno_name(code: int | None) -> str | None:
    return None if code is None else errno.errorcode.get(code, str(code))


class WireError(Exception):
    """A wire operation did not get what it expected.

    Carries ``what`` (the operation, e.g. "rank handshake from peer"), ``expected``
    (bytes to read, when known), ``got`` (the bytes that did arrive), ``how``
    (``"eof"``, ``"reset"``, ``"closed"`` for a send to a closed peer, ``"timeout"``
    or ``"error"``), ``elapsed`` and ``errno_name``.
    """

    def __init__(
        self,
        what: str,
        *,
        expected: int | None,
        got: bytes,
        how: str,
        elapsed: float,
        errno_name: str | None = None,
        detail: str = "",
    ) -> None:
        self.what = what
        self.expected = expected
        self.got = got
        self.how = how
        self.elapsed = elapsed
        self.errno_name = errno_name
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        err = f" [{self.errno_name}]" if self.errno_name else ""
        extra = f"; {self.detail}" if self.detail else ""
        ending = f"{self.how}{err} after {self.elapsed:.3f}s{extra}"
        if self.expected is None and not self.got:
            return f"{self.what}: {ending}"
        want = "" if self.expected is None else f"expected {self.expected} byte(s), "
        shown = self.got[:32]
        more = "..." if len(self.got) > len(shown) else ""
        return f"{self.what}: {want}got {len(self.got)} byte(s) {shown!r}{more}, then {ending}"

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (rank -> parent); keep every field.
        fields = {
            "expected": self.expected,
            "got": self.got,
            "how": self.how,
            "elapsed": self.elapsed,
            "errno_name": self.errno_name,
            "detail": self.detail,
        }
        return (_rebuild_wire_error, (type(self), self.what, fields))


def _rebuild_wire_error(cls: type[WireError], what: str, fields: dict[str, Any]) -> WireError:
    return cls(what, **fields)


class WireTimeoutError(WireError, TimeoutError):
    """The deadline passed before the operation completed (``how == "timeout"``)."""


class WireClosedError(WireError, ConnectionError):
    """The other end closed (``how``: ``"eof"``, ``"reset"``, ``"closed"``) or another
    socket error ended the operation (``"error"``, see ``errno_name``)."""


@dataclass(frozen=True)
class CloseObservation:
    """What :func:`expect_closed` saw: how the stream ended, stray bytes, and when."""

    kind: CloseKind
    extra: bytes
    elapsed: float

    @property
    def closed(self) -> bool:
        """True for EOF or reset, False when the stream stayed open."""
        return self.kind is not CloseKind.OPEN


@dataclass(frozen=True)
class PeerCredentials:
    """``SO_PEERCRED`` of a connected Unix socket: the process at the other end."""

    pid: int
    uid: int
    gid: int


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """Read ``SO_PEERCRED`` (Linux): who is at the other end of ``sock``."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerCredentials(pid, uid, gid)


def _wait(sock: socket.socket, events: int, deadline: Deadline) -> int:
    """Poll one fd until ``events`` (or an error/hang-up) or the deadline; 0 = timed out."""
    poller = select.poll()
    poller.register(sock.fileno(), events)
    while True:
        ready = poller.poll(deadline.poll_ms())
        if ready:
            return ready[0][1]
        if deadline.expired():
            return 0


def connect(
    address: str,
    deadline: Deadline,
    *,
    retry_interval: float = 0.02,
    buffer_size: int | None = None,
    what: str = "connect",
) -> socket.socket:
    """Connect to a Unix stream socket, retrying until ``deadline``.

    Retries ENOENT and ECONNREFUSED (rank 0 not listening yet) like a real peer;
    EACCES and other errors fail at once, because a harness that retries them would
    hide a permission fault the test is trying to provoke.

    :param buffer_size: set ``SO_SNDBUF``/``SO_RCVBUF`` before connecting.
    :raises WireTimeoutError: rank 0 never accepted the connection in time.
    :raises WireClosedError: a non-retryable connect error (``errno_name`` says which).
    """
    start = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if buffer_size is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        sock.settimeout(max(deadline.remaining(), 0.001))
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            # A socket timeout has no errno; "AF_UNIX path too long" has none either,
            # and must fail at once rather than be retried until the deadline.
            timed_out = isinstance(exc, TimeoutError) and exc.errno is None
            code = errno.ETIMEDOUT if timed_out else exc.errno
            label = f"{what} {describe_address(address)} ({attempts} attempt(s))"
            if code not in _CONNECT_RETRY:
                raise WireClosedError(
                    label,
                    expected=None,
                    got=b"",
                    how="error",
                    elapsed=time.monotonic() - start,
                    errno_name=_errno_name(code),
                    detail="" if code is not None else str(exc),
                ) from exc
            if deadline.expired():
                raise WireTimeoutError(
                    label,
                    expected=None,
                    got=b"",
                    how="timeout",
                    elapsed=time.monotonic() - start,
                    errno_name=_errno_name(code),
                    detail="deadline passed while retrying",
                ) from exc
            _pause(min(retry_interval, deadline.remaining()))
            continue
        sock.settimeout(None)
        return sock


def _pause(seconds: float) -> None:
    # A bounded back-off between connect attempts, not synchronisation.
    if seconds > 0:
        time.sleep(seconds)


def listen(
    address: str,
    backlog: int,
    *,
    replace_stale: bool = True,
    buffer_size: int | None = None,
) -> socket.socket:
    """Bind and listen like rank 0 does (wire v1 step 1).

    :param replace_stale: unlink an existing *socket* file at the path first; a
        regular file, directory or symlink is never removed.
    :param buffer_size: ``SO_SNDBUF``/``SO_RCVBUF`` on the listener (inherited by
        accepted sockets).
    """
    if replace_stale and not address.startswith("\0"):
        try:
            st = os.lstat(address)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISSOCK(st.st_mode):
                os.unlink(address)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if buffer_size is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def accept(listener: socket.socket, deadline: Deadline, *, what: str = "accept") -> socket.socket:
    """Accept one connection before ``deadline``.

    :raises WireTimeoutError: no peer connected in time.
    """
    start = time.monotonic()
    while True:
        if not _wait(listener, select.POLLIN, deadline):
            raise WireTimeoutError(
                f"{what} on {describe_address(str(listener.getsockname()))}",
                expected=None,
                got=b"",
                how="timeout",
                elapsed=time.monotonic() - start,
                detail="no peer connected before the deadline",
            )
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            continue
        conn.setblocking(True)
        return conn


def send_all(
    sock: socket.socket, data: bytes | memoryview, deadline: Deadline, *, what: str = "send"
) -> int:
    """Write every byte before ``deadline`` with ``MSG_NOSIGNAL`` (never SIGPIPE).

    :returns: the number of bytes written (always ``len(data)``).
    :raises WireClosedError: the peer closed (EPIPE/ECONNRESET); ``got`` holds nothing,
        ``detail`` says how many bytes went out first.
    :raises WireTimeoutError: the peer stopped reading and the deadline passed.
    """
    view = memoryview(data).cast("B")
    total = len(view)
    done = 0
    start = time.monotonic()
    flags = socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT
    while done < total:
        try:
            done += sock.send(view[done:], flags)
            continue
        except BlockingIOError:
            pass
        except OSError as exc:
            closed = exc.errno in {errno.EPIPE, errno.ECONNRESET}
            raise WireClosedError(
                what,
                expected=None,
                got=b"",
                how="closed" if closed else "error",
                elapsed=time.monotonic() - start,
                errno_name=_errno_name(exc.errno),
                detail=f"{done} of {total} byte(s) written before the failure",
            ) from exc
        if not _wait(sock, select.POLLOUT, deadline):
            raise WireTimeoutError(
                what,
                expected=None,
                got=b"",
                how="timeout",
                elapsed=time.monotonic() - start,
                detail=f"{done} of {total} byte(s) written; the reader stopped reading",
            )
    return total


def _recv_some(sock: socket.socket, limit: int) -> bytes | CloseKind:
    """One non-blocking read: bytes, EOF, RESET, or OPEN meaning 'nothing yet'."""
    try:
        chunk = sock.recv(limit, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return CloseKind.OPEN
    except ConnectionResetError:
        return CloseKind.RESET
    return chunk if chunk else CloseKind.EOF


def recv_exact(
    sock: socket.socket, nbytes: int, deadline: Deadline, *, what: str = "recv"
) -> bytes:
    """Read exactly ``nbytes`` before ``deadline``.

    :raises WireClosedError: EOF or reset first (``how`` says which, ``got`` holds
        the partial bytes).
    :raises WireTimeoutError: the deadline passed (``got`` holds the partial bytes).
    """
    buf = bytearray(nbytes)
    view = memoryview(buf)
    done = 0
    start = time.monotonic()
    while done < nbytes:
        # recv_into a preallocated buffer: no per-chunk allocation or copy (8 MiB checks).
        ended: CloseKind | None = None
        try:
            count = sock.recv_into(view[done:], nbytes - done, socket.MSG_DONTWAIT)
        except BlockingIOError:
            count = -1
        except ConnectionResetError:
            ended = CloseKind.RESET
        else:
            if count == 0:
                ended = CloseKind.EOF
        if ended is not None:
            raise WireClosedError(
                what,
                expected=nbytes,
                got=bytes(buf[:done]),
                how=ended.value,
                elapsed=time.monotonic() - start,
                errno_name="ECONNRESET" if ended is CloseKind.RESET else None,
            )
        if count > 0:
            done += count
            continue
        if not _wait(sock, _POLL_IN, deadline):
            raise WireTimeoutError(
                what,
                expected=nbytes,
                got=bytes(buf[:done]),
                how="timeout",
                elapsed=time.monotonic() - start,
            )
    view.release()
    return bytes(buf)


def recv_until_eof(
    sock: socket.socket, deadline: Deadline, *, limit: int = 1 << 30, what: str = "recv to EOF"
) -> bytes:
    """Read until the other end closes (EOF or reset) and return everything read.

    :raises WireTimeoutError: the stream was still open at the deadline, or more than
        ``limit`` bytes arrived (``got`` holds what was read).
    """
    buf = bytearray()
    start = time.monotonic()
    while True:
        got = _recv_some(sock, 1 << 20)
        if isinstance(got, bytes):
            buf += got
            if len(buf) > limit:
                raise WireTimeoutError(
                    what,
                    expected=limit,
                    got=bytes(buf),
                    how="timeout",
                    elapsed=time.monotonic() - start,
                    detail=f"more than {limit} byte(s) and still no EOF",
                )
            continue
        if got is not CloseKind.OPEN:
            return bytes(buf)
        if not _wait(sock, _POLL_IN, deadline):
            raise WireTimeoutError(
                what,
                expected=None,
                got=bytes(buf),
                how="timeout",
                elapsed=time.monotonic() - start,
                detail="the other end never closed",
            )


def expect_closed(
    sock: socket.socket, deadline: Deadline, *, stop_after: int | None = None
) -> CloseObservation:
    """Watch ``sock`` until the other end closes or ``deadline`` passes; never raises.

    Tells an orderly close (EOF) from a reset (ECONNRESET) from "stayed open".  Any
    bytes that arrive meanwhile are kept in ``extra`` (a test decides whether they
    were allowed, e.g. a probe byte sent to a peer that should have been refused).

    :param stop_after: return (as ``OPEN``) as soon as this many extra bytes arrived,
        instead of waiting for the deadline.
    """
    start = time.monotonic()
    extra = bytearray()
    while True:
        # Never read past ``stop_after``: the bytes after it belong to the caller.
        limit = 1 << 16 if stop_after is None else max(1, stop_after - len(extra))
        got = _recv_some(sock, limit)
        if isinstance(got, bytes):
            extra += got
            if stop_after is not None and len(extra) >= stop_after:
                return CloseObservation(CloseKind.OPEN, bytes(extra), time.monotonic() - start)
            continue
        if got is not CloseKind.OPEN:
            return CloseObservation(got, bytes(extra), time.monotonic() - start)
        if not _wait(sock, _POLL_IN, deadline):
            return CloseObservation(CloseKind.OPEN, bytes(extra), time.monotonic() - start)


def unread(sock: socket.socket) -> int:
    """Bytes ``sock`` sent that the other end has not read yet (SIOCOUTQ): 0 once the
    other end read them, or once it closed.  How a byte-level rank proves the implementation
    really read what it sent, without a read on the other side to observe."""
    raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
    return int(struct.unpack("i", raw)[0])


def is_hung_up(sock: socket.socket) -> bool:
    """True when the other end has closed, without reading queued bytes (POLLHUP)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    ready = poller.poll(0)
    return bool(ready and ready[0][1] & _POLL_BAD)


def wait_hung_up(sock: socket.socket, deadline: Deadline) -> bool:
    """Wait for POLLHUP without consuming data (a stalled reader watching its writer)."""
    poller = select.poll()
    # POLLIN is not requested: queued payload must not end the wait.
    poller.register(sock.fileno(), select.POLLHUP | select.POLLRDHUP)
    while True:
        ready = poller.poll(deadline.poll_ms())
        if ready:
            return bool(ready[0][1] & (select.POLLHUP | select.POLLRDHUP | select.POLLERR))
        if deadline.expired():
            return False


# --------------------------------------------------------------------------- framed wire
# RTP-LLM's framed wire (PR #1119; shared/reference/rtp_llm_framed_wire.md): wire v1's
# bootstrap plus a state file of two decision words, a 16-byte header per payload, a 1-byte
# acknowledgement from every peer and one commit-or-abort decision per generation.

FRAME_MAGIC: Final = 0x5254504C4C4D5450
"""The header's first 8 bytes as a native u64 ("RTPLLMTP" read big-endian)."""
FRAME_HEADER: Final = struct.Struct("=QQ")
"""Magic, then the payload's byte count: native-order u64s, 16 bytes."""
STATE_READY: Final = 0x6A
"""A framed peer's byte once it has mapped the state file (bootstrap)."""
FRAME_ACK: Final = 0x6B
"""A framed peer's acknowledgement of one whole frame."""
ABORT_BIT: Final = 0x80000000
"""Bit 31 of a decision word: the generation below it was aborted."""
STATE_SIZE: Final = 8
_DECISION: Final = struct.Struct("=I")


def state_path(base_path: str) -> str:
    """The framed wire's decision file of a group: ``<base_path>.state``."""
    return f"{base_path}.state"


def pack_frame_header(nbytes: int, *, magic: int = FRAME_MAGIC) -> bytes:
    """A 16-byte header (a rogue passes another ``magic`` or ``nbytes`` on purpose)."""
    return FRAME_HEADER.pack(magic, nbytes)


def unpack_frame_header(data: bytes) -> tuple[int, int]:
    """(magic, nbytes) of a 16-byte header."""
    magic, nbytes = FRAME_HEADER.unpack(data)
    return int(magic), int(nbytes)


@dataclass(frozen=True)
class FileFacts:
    """What ``lstat`` said about a file: how a byte-level rank judges the state file."""

    kind: str
    mode: int
    uid: int
    size: int

    @classmethod
    def of(cls, path: str) -> FileFacts | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        kind = (
            "regular"
            if stat.S_ISREG(st.st_mode)
            else "symlink"
            if stat.S_ISLNK(st.st_mode)
            else "other"
        )
        return cls(kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_size)


class DecisionWords:
    """The two decision words of a framed group, mapped by a byte-level rank.

    Reads and plain writes only: a rogue publishes with a store, not a compare-and-swap,
    because it plays one rank at a time and means to race nobody.
    """

    def __init__(self, path: str, *, create_mode: int | None = None) -> None:
        """Open ``path`` (``create_mode``: create it exclusively with that mode, 8 bytes)."""
        if create_mode is None:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        else:
            fd = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, create_mode
            )
            os.fchmod(fd, create_mode)
            os.ftruncate(fd, STATE_SIZE)
        try:
            self._map = mmap.mmap(fd, STATE_SIZE, mmap.MAP_SHARED)
        finally:
            os.close(fd)

    def load(self, generation: int) -> int:
        return int(_DECISION.unpack_from(self._map, 4 * (generation & 1))[0])

    def store(self, generation: int, value: int) -> None:
        _DECISION.pack_into(self._map, 4 * (generation & 1), value)

    def words(self) -> tuple[int, int]:
        return self.load(0), self.load(1)

    def close(self) -> None:
        self._map.close()
