"""The byte protocol between a rank and its ``exec:`` driver: frames, requests, replies.

Kept apart from the process handling so it can be read (and tested) as the protocol alone;
SPEC.md's adapter section and ``conformance/adapters/exec/tpbcast_driver.h`` describe the
same bytes. Every frame is ``u32 length`` (little-endian, bytes after this field) then the
body; a request body starts with one op byte, a reply body with one status byte.

Replies grow only at their end: a field added later is optional and trailing, a reader
takes its default when the reply ends before it (an older driver) and ignores trailing
bytes it does not know (a newer one). ``PROTOCOL_VERSION`` changes only when an existing
field changes meaning; the hello's ``storm_signals`` was added this way, within version 1.
"""

from __future__ import annotations

import errno as _errno
import signal
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "KEEP",
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "STATUS_ERROR",
    "STATUS_OK",
    "ErrorRecord",
    "Hello",
    "Op",
    "ProtocolError",
    "Reader",
    "broadcast_header",
    "decode_error",
    "decode_hello",
    "decode_storm_signals",
    "frame",
    "initialize_request",
    "request",
]

PROTOCOL_VERSION: Final = 1
KEEP: Final = -2
"""A deadline argument of ``set_deadlines`` left unchanged (``-1`` waits forever)."""
MAX_FRAME: Final = (1 << 32) - 1
"""A frame length is a u32: one broadcast moves at most 4 GiB minus its header."""

STATUS_OK: Final = 0
STATUS_ERROR: Final = 1


class Op:
    """Request op bytes (one ASCII letter each, readable in an strace)."""

    HELLO = b"H"
    INITIALIZE = b"I"
    BROADCAST = b"B"
    RESET = b"R"
    IS_INITIALIZED = b"Q"
    SET_DEADLINES = b"D"
    GENERATION = b"G"


class ProtocolError(ValueError):
    """A frame that does not follow the protocol (short, too long, unknown status)."""


def _string(value: bytes) -> bytes:
    return struct.pack("<I", len(value)) + value


def frame(body: bytes) -> bytes:
    """``u32 length`` + ``body``."""
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a frame holds at most {MAX_FRAME} bytes, got {len(body)}")
    return struct.pack("<I", len(body)) + body


def request(op: bytes, *, ints: tuple[tuple[str, int], ...] = (), tail: bytes = b"") -> bytes:
    """A framed request: op byte, packed ints (``struct`` code, value) then ``tail``.

    ``tail`` is a string (``u32`` length + bytes) for ``initialize``'s base path and the
    raw payload, preceded by its ``u64`` size, for ``broadcast``.
    """
    packed = b"".join(struct.pack("<" + code, value) for code, value in ints)
    return frame(op + packed + tail)


def initialize_request(rank: int, world_size: int, base_path: bytes) -> bytes:
    """``I i32 rank, i32 world_size, str base_path``."""
    return request(Op.INITIALIZE, ints=(("i", rank), ("i", world_size)), tail=_string(base_path))


def broadcast_header(root: int, nbytes: int) -> bytes:
    """``B i32 root, u64 nbytes`` framed; the ``nbytes`` payload bytes follow unframed."""
    body_len = 1 + 4 + 8 + nbytes
    if body_len > MAX_FRAME:
        raise ProtocolError(f"a broadcast over exec: moves at most {MAX_FRAME - 13} bytes")
    return struct.pack("<I", body_len) + Op.BROADCAST + struct.pack("<iQ", root, nbytes)


class Reader:
    """Decode one reply body field by field; a short body is a :class:`ProtocolError`."""

    def __init__(self, body: bytes | bytearray | memoryview, what: str) -> None:
        self._body = memoryview(body)
        self._at = 0
        self._what = what

    def _take(self, n: int) -> memoryview:
        if self._at + n > len(self._body):
            raise ProtocolError(
                f"the {self._what} reply ends after {len(self._body)} bytes; {self._at + n} needed"
            )
        part = self._body[self._at : self._at + n]
        self._at += n
        return part

    def u8(self) -> int:
        return int(self._take(1)[0])

    def i32(self) -> int:
        value: int = struct.unpack("<i", self._take(4))[0]
        return value

    def i64(self) -> int:
        value: int = struct.unpack("<q", self._take(8))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self._take(8))[0]
        return value

    def string(self) -> str:
        return bytes(self._take(struct.unpack("<I", self._take(4))[0])).decode(errors="replace")

    def raw(self, n: int) -> memoryview:
        return self._take(n)

    def remaining(self) -> int:
        """Bytes not read yet (an optional trailing field is present iff > 0)."""
        return len(self._body) - self._at


@dataclass(frozen=True)
class Hello:
    """The driver's answer to ``H``: who it is and what it declares.

    ``storm_signals``: the signals for which the driver installed a handler without
    SA_RESTART, so a signal storm aimed at its rank may be sent to it too (its blocking
    syscalls see EINTR); any other signal would most likely kill it.
    """

    protocol: int
    name: str
    version: str
    capabilities: tuple[str, ...]
    storm_signals: frozenset[int] = frozenset()


# Signals no handler can take: a driver declaring one has misread what it declares.
_UNCATCHABLE: Final = frozenset({signal.SIGKILL, signal.SIGSTOP})


def decode_storm_signals(text: str) -> frozenset[int]:
    """Space-separated signal names (``"SIGUSR1 SIGUSR2"``) as numbers.

    :raises ProtocolError: a name this platform does not know, or SIGKILL / SIGSTOP.
    """
    numbers: set[int] = set()
    for name in text.split():
        try:
            number = signal.Signals[name]
        except KeyError:
            raise ProtocolError(
                f"storm_signals names {name!r}, which is not a signal name (e.g. 'SIGUSR1')"
            ) from None
        if number in _UNCATCHABLE:
            raise ProtocolError(f"storm_signals names {name}, which no handler can take")
        numbers.add(int(number))
    return frozenset(numbers)


def decode_hello(body: Reader) -> Hello:
    """``u32 protocol, str name, str version, str capabilities`` (space-separated), then
    the optional ``str storm_signals`` (space-separated signal names; absent = none).

    :raises ProtocolError: a short reply, or a storm signal that is not a catchable signal.
    """
    protocol = body.i32()
    name, version, capabilities = body.string(), body.string(), tuple(body.string().split())
    storm = decode_storm_signals(body.string()) if body.remaining() else frozenset[int]()
    return Hello(protocol, name, version, capabilities, storm)


@dataclass(frozen=True)
class ErrorRecord:
    """An error reply: a class from the documented vocabulary, the message, the details.

    Unknown numbers are ``-1`` and unknown strings empty on the wire; here they are None.
    """

    error_class: str
    message: str
    rank: int | None
    peer: int | None
    bytes_done: int | None
    bytes_total: int | None
    elapsed: float | None
    phase: str | None
    path: str | None
    errno_name: str | None


def decode_error(body: Reader) -> ErrorRecord:
    """``str class, str message, i32 rank, i32 peer, i32 errno, i64 bytes_done,
    i64 bytes_total, i64 elapsed_us, str phase, str path, str errno_name``.

    An empty ``errno_name`` with ``errno > 0`` is named here (``errno.errorcode``), so a C
    driver need not carry a table of names.
    """

    def num(read: Callable[[], int]) -> int | None:
        value = read()
        return value if value >= 0 else None

    error_class, message = body.string(), body.string()
    rank, peer, err = num(body.i32), num(body.i32), body.i32()
    done, total, elapsed_us = num(body.i64), num(body.i64), num(body.i64)
    phase, path, errno_name = body.string(), body.string(), body.string()
    return ErrorRecord(
        error_class=error_class,
        message=message,
        rank=rank,
        peer=peer,
        bytes_done=done,
        bytes_total=total,
        elapsed=None if elapsed_us is None else elapsed_us / 1e6,
        phase=phase or None,
        path=path or None,
        errno_name=errno_name or (_errno.errorcode.get(err) if err > 0 else None),
    )
