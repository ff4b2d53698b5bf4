"""Rogue peers and roots of the framed wire: byte-level ranks that break it on purpose.

A framed rogue speaks wire v1's bootstrap, maps (or refuses, or fakes) the state file and
then, frame by frame, does one thing wrong: a peer that never acknowledges, acknowledges
twice, sends a wrong token or maps nothing; a root that sends a wrong magic or count,
commits before every acknowledgement, stops between the acknowledgements and the commit, or
publishes an abort for a generation.  Each returns a :class:`FramedReport` of everything
it sent, saw and read in the decision words: the proof a test needs that the fault
happened before it judges the implementation's reaction.

Hooks (``after_bootstrap``, ``after_acks``) let a rank target synchronise with the other
ranks (``ctx.notify``/``ctx.wait``) at the exact point of the exchange it wants to judge;
they run in the rogue's process, between two steps.  Closing a socket here is, for the
other side, the same as the rogue process dying.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .wire import (
    ABORT_BIT,
    FRAME_ACK,
    FRAME_HEADER,
    FRAME_MAGIC,
    PROBE,
    RANK_SIZE,
    STATE_READY,
    Deadline,
    DecisionWords,
    FileFacts,
    WireError,
    accept,
    connect,
    expect_closed,
    listen,
    pack_frame_header,
    pack_rank,
    recv_exact,
    send_all,
    socket_path,
    state_path,
    unpack_frame_header,
    unpack_rank,
)

__all__ = ["ACK_BEHAVIOURS", "FramedReport", "framed_peer", "framed_root"]

ACK_BEHAVIOURS = ("once", "never", "twice", "wrong")
"""How a rogue peer answers a frame: one 0x6b, nothing, two 0x6b, or a wrong byte."""

Hook = Callable[[], None] | None


@dataclass
class FramedReport:
    """What a framed rogue did and saw; picklable (a rank's value)."""

    role: str
    probe: int | None = None
    state_facts: FileFacts | None = None
    announced: dict[int, bytes] = field(default_factory=dict)
    """Rank 0 only: each connection's raw 4-byte announcement, by the rank it announced."""
    ready: dict[int, int | str] = field(default_factory=dict)
    """Rank 0 only: each peer's state-ready byte, or how its stream ended instead."""
    headers: list[tuple[int, int]] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    acks: list[dict[int, bytes | str]] = field(default_factory=list)
    """Rank 0 only, per frame: the bytes each peer sent as acknowledgement (or how it ended)."""
    decisions: list[int | None] = field(default_factory=list)
    """A peer: per frame, the decision word it saw change to (None: no change in time)."""
    published: list[tuple[int, int]] = field(default_factory=list)
    """(generation, value) the rogue stored in the decision words, in order."""
    reaction: dict[int, str] = field(default_factory=dict)
    """How the other side's stream(s) ended after the fault: eof, reset or open."""
    error: str | None = None
    """The step the rogue could not complete (the fault may then not have happened)."""

    def details(self) -> dict[str, Any]:
        return {"role": self.role, "error": self.error, "published": self.published}


def _watch_decision(
    words: DecisionWords, generation: int, seen: int, deadline: Deadline
) -> int | None:
    while not deadline.expired():
        word = words.load(generation)
        if word != seen:
            return word
        time.sleep(0.002)  # a poll interval: the words have no wait queue we could join
    return None


def framed_peer(
    base_path: str,
    rank: int,
    *,
    frames: int = 1,
    ack: str = "once",
    map_state: bool = True,
    send_ready: bool = True,
    ack_delays: Sequence[float] = (),
    timeout: float = 10.0,
    observe: float = 5.0,
) -> FramedReport:
    """Join as peer ``rank``, then take ``frames`` frames, answering each per ``ack``.

    ``map_state=False``: never open the state file (with ``send_ready=False``: never send
    0x6a either, a peer that maps nothing).  ``ack_delays[i]``: seconds to hold frame i's
    acknowledgement (a slow peer, to time a per-call deadline).  After ``never`` or
    ``wrong``, it watches up to ``observe`` s for rank 0 to close the link and stops.
    """
    if ack not in ACK_BEHAVIOURS:
        raise ValueError(f"ack must be one of {ACK_BEHAVIOURS}, got {ack!r}")
    report = FramedReport(role=f"peer {rank} ack={ack}")
    deadline = Deadline.after(timeout)
    sock = connect(socket_path(base_path), deadline)
    words: DecisionWords | None = None
    generation = 0
    try:
        send_all(sock, pack_rank(rank), deadline, what="rogue framed announce")
        report.probe = recv_exact(sock, 1, deadline, what="rogue framed probe")[0]
        report.state_facts = FileFacts.of(state_path(base_path))
        if map_state:
            words = DecisionWords(state_path(base_path))
        if send_ready:
            send_all(sock, bytes([STATE_READY]), deadline, what="rogue framed state-ready")
        for index in range(frames):
            generation = (generation + 1) & 0x7FFFFFFF
            seen = words.load(generation) if words is not None else 0
            frame_deadline = Deadline.after(timeout)
            header = recv_exact(sock, FRAME_HEADER.size, frame_deadline, what="rogue header")
            report.headers.append(unpack_frame_header(header))
            report.payloads.append(
                recv_exact(sock, report.headers[-1][1], frame_deadline, what="rogue payload")
            )
            if index < len(ack_delays) and ack_delays[index] > 0:
                time.sleep(ack_delays[index])  # the fault: a slow acknowledgement
            if ack in ("never", "wrong"):
                if ack == "wrong":
                    send_all(sock, b"\x13", frame_deadline, what="rogue wrong ack")
                seen_close = expect_closed(sock, Deadline.after(observe))
                report.reaction[0] = seen_close.kind.value
                if words is not None:
                    report.decisions.append(words.load(generation))
                return report
            token = bytes([FRAME_ACK]) * (2 if ack == "twice" else 1)
            send_all(sock, token, frame_deadline, what="rogue ack")
            if words is not None:
                report.decisions.append(
                    _watch_decision(words, generation, seen, Deadline.after(observe))
                )
        report.reaction[0] = expect_closed(sock, Deadline.after(0.05)).kind.value
    except WireError as exc:
        report.error = str(exc)
    finally:
        sock.close()
        if words is not None:
            words.close()
    return report


@dataclass
class _Root:
    listener: socket.socket
    links: list[tuple[int, socket.socket]]


def _bootstrap_root(
    base_path: str,
    world_size: int,
    deadline: Deadline,
    report: FramedReport,
    *,
    state_mode: int,
    state_symlink_to: str | None,
) -> tuple[_Root, DecisionWords]:
    path = state_path(base_path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    if state_symlink_to is not None:
        words = DecisionWords(state_symlink_to, create_mode=0o600)
        os.symlink(state_symlink_to, path)
    else:
        words = DecisionWords(path, create_mode=state_mode)
    report.state_facts = FileFacts.of(path)
    listener = listen(socket_path(base_path), world_size - 1)
    links: list[tuple[int, socket.socket]] = []
    for _ in range(world_size - 1):
        sock = accept(listener, deadline, what="rogue framed root accept")
        raw = recv_exact(sock, RANK_SIZE, deadline, what="rogue framed root announcement")
        report.announced[unpack_rank(raw)] = raw
        links.append((unpack_rank(raw), sock))
    links.sort()
    for _rank, sock in links:
        send_all(sock, bytes([PROBE]), deadline, what="rogue framed probe")
    for rank, sock in links:
        try:
            report.ready[rank] = recv_exact(sock, 1, deadline, what="state-ready")[0]
        except WireError as exc:
            report.ready[rank] = exc.how or "error"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return _Root(listener, links), words


def framed_root(
    base_path: str,
    world_size: int,
    *,
    payloads: Sequence[bytes] = (b"framed",),
    magic: int = FRAME_MAGIC,
    count_delta: int = 0,
    commit: str = "after_acks",
    abort_generation: int | None = None,
    state_mode: int = 0o600,
    state_symlink_to: str | None = None,
    after_bootstrap: Hook = None,
    after_acks: Hook = None,
    timeout: float = 10.0,
    observe: float = 5.0,
) -> FramedReport:
    """Play rank 0 of the framed wire for ``payloads``, wrong in the ways asked.

    :param magic: / ``count_delta``: the header's magic and count error.
    :param commit: ``after_acks`` (correct), ``before_acks`` (publish the commit right
        after the frames), ``never`` (stop between the acknowledgements and the commit:
        close every link, as a rank 0 that died there).
    :param abort_generation: publish this generation's abort after the bootstrap, before
        the first frame (the generation of the first frame is 1).
    :param state_mode: / ``state_symlink_to``: a careless or hostile state file.
    """
    report = FramedReport(role=f"root commit={commit}")
    deadline = Deadline.after(timeout)
    root: _Root | None = None
    words: DecisionWords | None = None
    try:
        root, words = _bootstrap_root(
            base_path,
            world_size,
            deadline,
            report,
            state_mode=state_mode,
            state_symlink_to=state_symlink_to,
        )
        if any(got != STATE_READY for got in report.ready.values()):
            return report  # a peer refused the state file: that is the observation
        if abort_generation is not None:
            words.store(abort_generation, abort_generation | ABORT_BIT)
            report.published.append((abort_generation, abort_generation | ABORT_BIT))
        if after_bootstrap is not None:
            after_bootstrap()
        for index, payload in enumerate(payloads):
            header = pack_frame_header(len(payload) + count_delta, magic=magic)
            frame = _Frame(index + 1, header + payload, commit, timeout, observe)
            if not frame.play(root, words, report, after_acks):
                break
    except WireError as exc:
        report.error = str(exc)
    finally:
        if root is not None:
            for rank, sock in root.links:
                if report.acks or report.error:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_WR)
                    report.reaction[rank] = expect_closed(sock, Deadline.after(0.05)).kind.value
                sock.close()
            root.listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(socket_path(base_path))
        if words is not None:
            words.close()
    return report


@dataclass(frozen=True)
class _Frame:
    """One generation as a rogue root plays it: frame out, acks in, the commit as asked."""

    generation: int
    wire_bytes: bytes
    commit: str
    timeout: float
    observe: float

    def play(
        self, root: _Root, words: DecisionWords, report: FramedReport, after_acks: Hook
    ) -> bool:
        """True if the rogue goes on with the next frame."""
        generation = self.generation
        for _rank, sock in root.links:
            try:
                send_all(sock, self.wire_bytes, Deadline.after(self.timeout), what="frame")
            except WireError as exc:
                report.error = f"frame {generation}: {exc}"
        if self.commit == "before_acks":
            self._publish(words, report)
        acks = {rank: _read_ack(sock, self.observe) for rank, sock in root.links}
        report.acks.append(acks)
        if after_acks is not None:
            after_acks()
        if self.commit != "after_acks":
            return self.commit == "before_acks"
        if any(a != bytes([FRAME_ACK]) for a in acks.values()):
            return False
        self._publish(words, report)
        return True

    def _publish(self, words: DecisionWords, report: FramedReport) -> None:
        words.store(self.generation, self.generation)
        report.published.append((self.generation, self.generation))


def _read_ack(sock: socket.socket, observe: float) -> bytes | str:
    """The acknowledgement bytes of one peer: one byte, plus any that follow at once."""
    try:
        got = recv_exact(sock, 1, Deadline.after(observe), what="ack")
    except WireError as exc:
        return exc.how or "error"
    extra = expect_closed(sock, Deadline.after(0.05), stop_after=1)
    return got + extra.extra
