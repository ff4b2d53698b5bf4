"""Pipes between ranks for sync points, and liveness pipes so a wait notices a dead rank.

Created by the parent before forking, pruned in each rank right after fork:

- ``inbox[r]``: every rank writes small messages (``b"S3 name\\n"``: kind, sender, name) to
  rank r's inbox; only rank r reads it. Writes are below PIPE_BUF, so they never interleave.
  The parent keeps every read end open until the group is over: a message to a dead rank
  then lands in a buffer nobody reads instead of raising SIGPIPE in the sender (ranks run
  with SIGPIPE at its default action).
- ``life[r]``: only rank r keeps the write end, everyone else the read end; when rank r
  ends, the read ends see POLLHUP. That is how ``wait`` fails fast and by name instead of
  sleeping until its deadline when the rank it waits for has died.
- ``exits``: the parent's own liveness channel, one pipe for the whole group (every
  rank holds the write end): see ``_exitpipe``.

No sleeps, no polling of files: a rank blocks in ``poll`` until a message, a death, or its
deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import time
from dataclasses import dataclass

from ._exitpipe import ExitPipe, WaitEnd

__all__ = ["Mesh", "MeshEnd"]

_MAX_NAME_BYTES = 512


@dataclass
class Mesh:
    """All pipe fds of one group, as seen by the parent before fork."""

    inbox_r: list[int]
    inbox_w: list[int]
    life_r: list[int]
    life_w: list[int]
    exits: ExitPipe

    @classmethod
    def create(cls, world_size: int) -> Mesh:
        inbox_r, inbox_w, life_r, life_w = [], [], [], []
        try:
            for _ in range(world_size):
                r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                inbox_r.append(r)
                inbox_w.append(w)
                r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                life_r.append(r)
                life_w.append(w)
            exits = ExitPipe()
        except BaseException:
            for fd in inbox_r + inbox_w + life_r + life_w:
                os.close(fd)
            raise
        return cls(inbox_r, inbox_w, life_r, life_w, exits)

    def parent_wait_short(self, timeout_ms: int) -> WaitEnd:
        """Right after the last fork: drop the parent's copies of the life write ends, so
        that a rank's death reaches its peers at once, then sleep until every rank has
        ended, one has failed, or ``timeout_ms`` passed (see _exitpipe)."""
        while self.life_w:  # each fd forgotten before it is closed: never closed twice
            os.close(self.life_w.pop())
        return self.exits.wait(timeout_ms)

    def parent_after_fork(self) -> None:
        """Keep only the inbox read ends (see module docstring) in the parent."""
        for fd in self.inbox_w + self.life_r + self.life_w:
            os.close(fd)
        self.inbox_w, self.life_r, self.life_w = [], [], []

    def parent_close(self) -> None:
        for fd in self.inbox_r + self.inbox_w + self.life_r + self.life_w:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.inbox_r, self.inbox_w, self.life_r, self.life_w = [], [], [], []
        self.exits.close()

    def not_for(self, rank: int) -> tuple[int, ...]:
        """The fds rank ``rank`` must close right after fork (computed in the parent, so
        the rank only runs a tight ``os.close`` loop): above all the other ranks' life
        write ends, or their deaths would go unnoticed while this rank lives."""
        n = len(self.inbox_r)
        others = [fd for j in range(n) if j != rank for fd in (self.inbox_r[j], self.life_w[j])]
        return (*others, self.inbox_w[rank], self.life_r[rank], self.exits.read_fd)

    def for_rank(self, rank: int) -> MeshEnd:
        """Close what rank ``rank`` must not hold and wrap the rest (call in the child)."""
        for fd in self.not_for(rank):
            os.close(fd)
        return self.end_for(rank)

    def end_for(self, rank: int) -> MeshEnd:
        """Wrap rank ``rank``'s fds (after :meth:`not_for` was closed); built lazily on the
        first sync point, since most targets never use one."""
        n = len(self.inbox_r)
        return MeshEnd(
            rank=rank,
            inbox=self.inbox_r[rank],
            peers_w={j: self.inbox_w[j] for j in range(n) if j != rank},
            life_r={j: self.life_r[j] for j in range(n) if j != rank},
            life_w=self.life_w[rank],
        )


class MeshEnd:
    """One rank's end of the mesh: send to peers, receive, and notice peers ending."""

    def __init__(
        self,
        rank: int,
        inbox: int,
        peers_w: dict[int, int],
        life_r: dict[int, int],
        life_w: int,
    ) -> None:
        self.rank = rank
        self.inbox = inbox
        self.peers_w = peers_w
        self.life_r = life_r
        self.life_w = life_w  # held, never written: its closing (our death) is the signal
        self.ended: set[int] = set()
        self.messages: list[tuple[str, int, str]] = []  # (kind, sender, name), drained
        self._buf = b""
        self._poller: select.poll | None = None  # built on first use: most ranks never sync
        self._fd_rank = {fd: j for j, fd in life_r.items()}

    @property
    def _poll(self) -> select.poll:
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.inbox, select.POLLIN)
            for fd in self.life_r.values():
                self._poller.register(fd, select.POLLIN)
        return self._poller

    @staticmethod
    def check_name(name: str) -> bytes:
        raw = name.encode()
        if not name or "\n" in name or len(raw) > _MAX_NAME_BYTES:
            raise ValueError(
                f"sync point names must be non-empty single lines of at most "
                f"{_MAX_NAME_BYTES} bytes, got {name!r}"
            )
        return raw

    def send(self, kind: str, name: str, deadline: float) -> None:
        """Send ``kind`` ``name`` to every peer; a full inbox of a live peer is waited for
        (up to ``deadline``), one of an ended peer is skipped (nobody will read it)."""
        msg = f"{kind}{self.rank} ".encode() + self.check_name(name) + b"\n"
        for j, fd in self.peers_w.items():
            while True:
                try:
                    os.write(fd, msg)
                    break
                except BlockingIOError:
                    self.pump(0)
                    if j in self.ended:
                        break
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            f"rank {self.rank}: inbox of rank {j} stayed full until the "
                            f"deadline while sending {kind} {name!r}"
                        ) from None
                    out = select.poll()
                    out.register(fd, select.POLLOUT)
                    out.poll(10)
                except BrokenPipeError:  # pragma: no cover - parent holds read ends
                    break

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for anything, then drain everything available."""
        try:
            events = self._poll.poll(max(0, int(timeout * 1000 + 0.999)))
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            events = []
        inbox_closed = False
        for fd, ev in events:
            if fd == self.inbox:
                # Every writer is gone (all peers ended): nothing more can arrive, and a
                # hung-up fd left registered would make every later poll return at once.
                inbox_closed = bool(ev & select.POLLHUP)
                continue
            if ev & (select.POLLHUP | select.POLLERR):
                self.ended.add(self._fd_rank[fd])
                self._poll.unregister(fd)
        self._drain()
        if inbox_closed:
            self._poll.unregister(self.inbox)

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.inbox, 65536)
            except BlockingIOError:
                break
            except OSError as exc:  # pragma: no cover - defensive
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not chunk:
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            head, _, name = line.partition(b" ")
            self.messages.append((head[:1].decode(), int(head[1:]), name.decode()))
