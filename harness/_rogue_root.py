"""Rogue roots: bind rank 0's socket and break wire v1 on the root side, on purpose.

See :mod:`.rogue` for the ``timeout``/``observe`` budgets every behaviour takes.
"""

from __future__ import annotations

import os
import select
import socket
import stat
import time
from collections.abc import Sequence
from typing import Self

from ._rogue_report import LinkReport, RogueError, RogueReport, _buffers_of, _Recorder
from .wire import (
    PROBE,
    PROBE_BYTE,
    RANK_SIZE,
    CloseKind,
    Deadline,
    WireError,
    accept,
    address_of,
    expect_closed,
    listen,
    peer_credentials,
    recv_exact,
    send_all,
    unpack_rank,
)


class _Link:
    """One accepted connection on a rogue root, with what was seen on it."""

    def __init__(self, index: int, sock: socket.socket) -> None:
        self.index = index
        self.sock = sock
        self.credentials = peer_credentials(sock)
        self.announced = b""
        self.sent = bytearray()
        self.after = bytearray()
        self.reaction: CloseKind | None = None
        self.reaction_after: float | None = None

    @property
    def rank(self) -> int | None:
        return unpack_rank(self.announced) if len(self.announced) == RANK_SIZE else None

    def freeze(self) -> LinkReport:
        return LinkReport(
            accept_index=self.index,
            announced=self.announced,
            rank=self.rank,
            credentials=self.credentials,
            sent=bytes(self.sent),
            received_after=bytes(self.after),
            reaction=self.reaction,
            reaction_after=self.reaction_after,
        )


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_ino, st.st_ctime_ns)


class _Root:
    """Listener plus accepted links; cleans up its socket file like a real rank 0."""

    def __init__(
        self, behaviour: str, base_path: str, backlog: int, abstract: bool, buffer_size: int | None
    ) -> None:
        self.address = address_of(base_path, abstract=abstract)
        self.rec = _Recorder("root", behaviour, self.address)
        self.buffer_size = buffer_size
        self.links: list[_Link] = []
        try:
            self.listener = listen(self.address, backlog, buffer_size=buffer_size)
        except OSError as exc:
            raise self.rec.fail("could not bind rank 0's socket", exc) from exc
        # (inode, ctime) identifies our socket file: a freed inode is reused at once.
        self.identity = None if abstract else _identity(os.lstat(self.address))
        self.rec.act("bind", note=f"{self.rec.address} backlog={backlog}")

    def accept_all(self, count: int, deadline: Deadline) -> None:
        """Accept ``count`` peers and read each one's 4-byte handshake (raw)."""
        for _ in range(count):
            try:
                sock = accept(self.listener, deadline, what="rogue root accept")
            except WireError as exc:
                raise self.fail(
                    f"only {len(self.links)} of {count} peer(s) connected", exc
                ) from exc
            link = _Link(len(self.links), sock)
            self.links.append(link)
            if self.buffer_size is not None:
                self.rec.buffers = _buffers_of(sock)
            self.rec.act("accept", note=f"pid={link.credentials.pid} uid={link.credentials.uid}")
            try:
                link.announced = recv_exact(sock, RANK_SIZE, deadline, what="rogue root handshake")
            except WireError as exc:
                link.announced = exc.got
                self.rec.received += exc.got
                raise self.fail(f"peer #{link.index} sent an incomplete handshake", exc) from exc
            self.rec.received += link.announced
            self.rec.act("recv", RANK_SIZE, link.announced, note=f"rank {link.rank}")

    def by_rank(self) -> list[_Link]:
        """Links in ascending announced rank (the wire order for probe and payload)."""
        return sorted(self.links, key=lambda link: (link.rank is None, link.rank or 0))

    def send(self, link: _Link, data: bytes, deadline: Deadline, what: str) -> None:
        try:
            send_all(link.sock, data, deadline, what=what)
        except WireError as exc:
            raise self.fail(f"{what} to rank {link.rank} failed", exc) from exc
        link.sent += data
        self.rec.sent += data
        self.rec.act("send", len(data), data, note=f"{what} to rank {link.rank}")

    def watch(self, observe: float) -> None:
        """Watch every link until it closes or ``observe`` s pass (one shared deadline)."""
        deadline = Deadline.after(observe)
        start = time.monotonic()
        open_links = {link.sock.fileno(): link for link in self.links}
        poller = select.poll()
        for fd in open_links:
            poller.register(fd, select.POLLIN)
        while open_links:
            for fd, _ in poller.poll(deadline.poll_ms()):
                link = open_links[fd]
                seen = expect_closed(link.sock, Deadline.after(0.0))
                link.after += seen.extra
                if seen.closed:
                    link.reaction = seen.kind
                    link.reaction_after = time.monotonic() - start
                    self.rec.act("observe", note=f"rank {link.rank}: {seen.kind.value}")
                    poller.unregister(fd)
                    del open_links[fd]
            if deadline.expired():
                break
        for link in open_links.values():
            link.reaction = CloseKind.OPEN
        self.rec.act("observe", note=f"{len(open_links)} link(s) still open after {observe}s")

    def fail(self, why: str, exc: BaseException | None = None) -> RogueError:
        return self.rec.fail(why, exc, links=tuple(link.freeze() for link in self.links))

    def close(self) -> None:
        for link in self.links:
            link.sock.close()
        self.listener.close()
        # Remove our socket file, but never one an implementation put there since.
        if self.identity is not None:
            try:
                st = os.lstat(self.address)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISSOCK(st.st_mode) and _identity(st) == self.identity:
                    os.unlink(self.address)
        self.rec.act("close", note=f"{len(self.links)} link(s) and the listener")

    def report(self) -> RogueReport:
        return self.rec.report(links=tuple(link.freeze() for link in self.links))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def root_never_accepts(
    base_path: str,
    *,
    backlog: int = 1,
    hold: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Bind and listen with a small backlog, never accept, for ``hold`` seconds.

    Afterwards it drains the queue without blocking, so ``links`` shows which peers
    did connect (and what they sent) while nobody accepted: proof the fault was
    felt.  Those links' ``reaction`` is whatever had happened by then.
    """

    with _Root("never_accepts", base_path, backlog, abstract, buffer_size) as root:
        root.rec.act("wait", note=f"never accepts; holds {hold}s")
        # Holding still is the fault itself, not a synchronisation: a bounded sleep.
        time.sleep(hold)
        root.listener.setblocking(False)
        while True:
            try:
                sock, _ = root.listener.accept()
            except BlockingIOError:
                break
            sock.setblocking(True)
            link = _Link(len(root.links), sock)
            root.links.append(link)
            seen = expect_closed(sock, Deadline.after(0.0))
            link.announced = seen.extra[:RANK_SIZE]
            link.after += seen.extra[RANK_SIZE:]
            link.reaction = seen.kind
            root.rec.received += seen.extra
            root.rec.act("drain", len(seen.extra), seen.extra, note=f"queued peer: {seen.kind}")
    return root.report()


def root_never_probes(
    base_path: str,
    world_size: int,
    *,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Accept every peer and read its rank, but never send the probe.

    Watches up to ``observe`` s; each link's ``reaction`` shows whether the peer
    gave up (EOF) within its own init deadline.
    """

    with _Root("never_probes", base_path, world_size - 1, abstract, buffer_size) as root:
        root.accept_all(world_size - 1, Deadline.after(timeout))
        root.rec.act("withhold_probe")
        root.watch(observe)
    return root.report()


def root_wrong_probe(
    base_path: str,
    world_size: int,
    *,
    probe: int = 0x13,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Accept every peer, then send ``probe`` (not 0x5a) in ascending rank order.

    Each link's ``reaction`` shows whether the peer refused it by closing.
    """

    with _Root(
        f"wrong_probe(0x{probe:02x})", base_path, world_size - 1, abstract, buffer_size
    ) as root:
        deadline = Deadline.after(timeout)
        root.accept_all(world_size - 1, deadline)
        for link in root.by_rank():
            root.send(link, bytes([probe]), deadline, "wrong probe")
        root.watch(observe)
    return root.report()


def root_dies_mid_broadcast(
    base_path: str,
    world_size: int,
    payload: bytes,
    after: int,
    *,
    timeout: float = 10.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """Handshake and probe correctly, then send ``payload`` in wire order (peer 1's
    copy, then peer 2's, ...) and close everything after ``after`` bytes in total.

    ``after`` counts payload bytes across links in wire order, so ``after <
    len(payload)`` cuts peer 1's copy and peers 2.. get nothing.
    """

    with _Root(
        f"dies_mid_broadcast(after={after})", base_path, world_size - 1, abstract, buffer_size
    ) as root:
        deadline = Deadline.after(timeout)
        root.accept_all(world_size - 1, deadline)
        for link in root.by_rank():
            root.send(link, PROBE_BYTE, deadline, "probe")
        budget = after
        for link in root.by_rank():
            chunk = payload[: max(0, min(len(payload), budget))]
            if chunk:
                root.send(link, chunk, deadline, "payload")
            budget -= len(chunk)
            if budget <= 0:
                break
        root.rec.act("die", note=f"closes every link after {after} payload byte(s)")
    return root.report()


def root_recording(
    base_path: str,
    world_size: int,
    payloads: Sequence[bytes] = (),
    *,
    probe: int = PROBE,
    timeout: float = 10.0,
    observe: float = 5.0,
    abstract: bool = False,
    buffer_size: int | None = None,
) -> RogueReport:
    """A well-behaved root for byte-exact checks in the peer role.

    Records each peer's raw handshake, sends ``probe`` in ascending rank order,
    then each payload to peers 1..n-1 in order (wire v1 step 5), then watches up to
    ``observe`` s for the peers to close (and for any byte they should not send).

    :raises RogueError: the announced ranks are not exactly ``1..world_size-1``.
    """

    with _Root("recording", base_path, world_size - 1, abstract, buffer_size) as root:
        deadline = Deadline.after(timeout)
        root.accept_all(world_size - 1, deadline)
        ranks = sorted(link.rank for link in root.links if link.rank is not None)
        if ranks != list(range(1, world_size)):
            raise root.fail(f"announced ranks {ranks}, expected 1..{world_size - 1}")
        for link in root.by_rank():
            root.send(link, bytes([probe]), deadline, "probe")
        for index, payload in enumerate(payloads):
            for link in root.by_rank():
                root.send(link, payload, deadline, f"payload #{index}")
        root.watch(observe)
    return root.report()
