"""One socket that wakes the parent once, when a whole short group has ended.

Right after the last fork the parent has nothing to do until the ranks end, and every
page it writes while a rank still shares it is a copy-on-write fault (~3.7 us on a 2-core
VM, ~1.1 us once the rank has exited). Waiting on the ranks' pidfds wakes it at each
rank's exit, to reap it and look at its status while the others still run. This socket
wakes it once:

- every rank inherits the write end and holds it until it exits (the rank never uses
  it unless it fails); the parent drops its own copy right after the last fork;
- the read end reports end of file when the last copy is gone: every rank has exited,
  and its memory is already released (the kernel frees a process's address space
  before it closes its files);
- a rank that ends in anything but a clean exit 0 by its own hand (it raised, a
  ``SystemExit`` with a non-zero code, a harness failure) sends one byte first, so
  fail-fast is not delayed;
- a rank killed by a signal cannot send: the parent learns of it when the others have
  ended too, or at the wait's deadline (``_SHORT_GROUP`` after the last fork, 20 ms).

Anything else that keeps a copy of the write end (a rank's forked helper that outlives
it, a process another thread of the parent forked meanwhile) only makes the wait last
until its deadline. A target that closes the fd only ends the wait early. Either way the
group is then supervised through the pidfds as before: this socket decides nothing about
the verdicts, only when the parent wakes.

A socket, not a pipe: the byte goes with ``MSG_NOSIGNAL`` (ranks run with SIGPIPE at its
default action: a write to a pipe nobody reads would kill the rank).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from typing import Literal

__all__ = ["ExitSocket", "WaitEnd", "report_failure"]

WaitEnd = Literal["ended", "failed", "deadline"]
"""How :meth:`ExitSocket.wait` ended: every rank gone, a rank sent its failure byte, or
the deadline passed first."""

_FAILED = b"!"


class ExitSocket:
    """The parent's side: create before the forks, :meth:`wait` after the last one."""

    def __init__(self) -> None:
        read_end, write_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.read_fd: int = read_end.detach()  # CLOEXEC, like every socket Python makes
        self.write_fd: int = write_end.detach()
        # Built before the forks: the wait itself must write as few pages as possible.
        self._poll = select.poll()
        self._poll.register(self.read_fd, select.POLLIN)

    def wait(self, timeout_ms: int) -> WaitEnd:
        """Drop the parent's write end, then sleep until every rank's copy is gone, a rank
        sent its failure byte, or ``timeout_ms`` passed. One ``poll``: no wake-up per rank."""
        self._close_write_end()
        if not self._poll.poll(max(0, timeout_ms)):
            return "deadline"
        try:
            data = os.read(self.read_fd, 1)
        except OSError:  # ECONNRESET and the like: the other end is gone, as at EOF
            return "ended"
        return "failed" if data else "ended"

    def _close_write_end(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        """Close both ends (idempotent)."""
        self._close_write_end()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1


def report_failure(write_fd: int) -> None:
    """In a rank about to end in failure: wake the parent now. Never raises (the rank is
    on its way to ``os._exit``), never SIGPIPE."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=write_fd)
        try:
            sock.send(_FAILED, socket.MSG_NOSIGNAL)
        finally:
            sock.detach()
