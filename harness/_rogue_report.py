"""What a rogue did and saw: the frozen reports that prove a fault happened."""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import time
from dataclasses import dataclass
from typing import Any, Final, Literal

from .wire import (
    CloseKind,
    PeerCredentials,
    describe_address,
)

GARBAGE_HANDSHAKE: Final = b"\xde\xad\xbe\xef"
"""Default garbage: as a native int32 this is a large negative rank on x86/arm."""

Then = Literal["close", "half_close", "stall"]


@dataclass(frozen=True)
class RogueAction:
    """One thing a rogue did or saw, ``t`` seconds after it started."""

    t: float
    kind: str
    nbytes: int = 0
    data: bytes = b""
    note: str = ""


@dataclass(frozen=True)
class LinkReport:
    """A rogue root's view of one accepted peer connection."""

    accept_index: int
    announced: bytes
    """Raw handshake bytes read from the peer (fewer than 4 if it closed early)."""
    rank: int | None
    """``announced`` decoded as a native int32, or None if incomplete."""
    credentials: PeerCredentials
    sent: bytes
    """Everything the rogue root sent on this link after the handshake."""
    received_after: bytes
    """Bytes the peer sent after its handshake (a conforming peer sends none)."""
    reaction: CloseKind | None
    reaction_after: float | None
    """Seconds from the start of the watch until the peer closed (None if open)."""


@dataclass(frozen=True)
class RogueReport:
    """Proof of what a rogue did and how the other side reacted."""

    role: Literal["peer", "root"]
    behaviour: str
    address: str
    actions: tuple[RogueAction, ...]
    sent: bytes
    """Peer: every byte sent.  Root: every byte sent, all links, in wire order."""
    received: bytes
    """Peer: every byte received.  Root: the handshakes, in accept order."""
    probe: int | None = None
    """Peer: the first byte after the handshake, if one arrived."""
    reaction: CloseKind | None = None
    """Peer: how the root ended the stream during the watch (None = not watched)."""
    reaction_after: float | None = None
    pending: int | None = None
    """Peer (stall): bytes queued unread in our receive buffer at the end of the stall."""
    links: tuple[LinkReport, ...] = ()
    buffers: tuple[int, int] | None = None
    """(SO_SNDBUF, SO_RCVBUF) actually in force when tiny buffers were asked for."""
    duration: float = 0.0

    @property
    def bytes_sent(self) -> int:
        """Number of bytes this rogue sent."""
        return len(self.sent)

    @property
    def bytes_received(self) -> int:
        """Number of bytes this rogue received."""
        return len(self.received)

    def did(self, kind: str) -> bool:
        """True if an action of ``kind`` was recorded (e.g. ``"close"``)."""
        return any(a.kind == kind for a in self.actions)

    def details(self) -> dict[str, object]:
        """A flat summary for ``RankContext.record(kind, **details)``."""
        return {
            "role": self.role,
            "behaviour": self.behaviour,
            "address": self.address,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "probe": self.probe,
            "reaction": None if self.reaction is None else self.reaction.value,
            "links": len(self.links),
            "duration": round(self.duration, 4),
        }


class RogueError(Exception):
    """The rogue could not set up its fault; ``report`` shows how far it got."""

    def __init__(self, message: str, report: RogueReport) -> None:
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.report))


class _Recorder:
    """Mutable log behind a :class:`RogueReport`; one per rogue run."""

    def __init__(self, role: Literal["peer", "root"], behaviour: str, address: str) -> None:
        self.role: Literal["peer", "root"] = role
        self.behaviour = behaviour
        self.address = describe_address(address)
        self.start = time.monotonic()
        self.actions: list[RogueAction] = []
        self.sent = bytearray()
        self.received = bytearray()
        self.buffers: tuple[int, int] | None = None

    def act(self, kind: str, nbytes: int = 0, data: bytes = b"", note: str = "") -> None:
        self.actions.append(RogueAction(self.elapsed(), kind, nbytes, data[:64], note))

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def report(self, **extra: Any) -> RogueReport:
        return RogueReport(
            role=self.role,
            behaviour=self.behaviour,
            address=self.address,
            actions=tuple(self.actions),
            sent=bytes(self.sent),
            received=bytes(self.received),
            buffers=self.buffers,
            duration=self.elapsed(),
            **extra,
        )

    def fail(self, why: str, exc: BaseException | None = None, **extra: Any) -> RogueError:
        self.act("error", note=why if exc is None else f"{why}: {exc}")
        detail = "" if exc is None else f": {exc}"
        return RogueError(
            f"rogue {self.role} '{self.behaviour}' at {self.address}: {why}{detail}",
            self.report(**extra),
        )


def _buffers_of(sock: socket.socket) -> tuple[int, int]:
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    )


def _pending(sock: socket.socket) -> int:
    """Bytes queued in our receive buffer, unread (FIONREAD)."""
    raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])
