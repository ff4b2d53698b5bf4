"""One pipe that wakes the parent once, when a whole short group has ended.

Right after the last fork the parent has nothing to do until the ranks end, and every
page it writes while a rank still shares it is a copy-on-write fault (~3.7 us on a 2-core
VM, ~1.1 us once the rank has exited). Waiting on the ranks' pidfds wakes it at each
rank's exit, to reap it and look at its status while the others still run. This pipe
wakes it once:

- every rank inherits the write end and holds it until it exits (the rank never uses
  it unless it fails); the parent drops its own copy right after the last fork;
- the read end reports end of file when the last copy is gone: every rank has exited,
  and its memory is already released (the kernel frees a process's address space
  before it closes its files);
- a rank that ends in anything but a clean exit 0 by its own hand (it raised, a
  ``SystemExit`` with a non-zero code, a harness failure) writes one byte first, so
  fail-fast is not delayed;
- a rank killed by a signal cannot write: the parent learns of it when the others have
  ended too, or at the wait's deadline (``_SHORT_GROUP`` after the last fork, 20 ms).

Anything else that keeps a copy of the write end (a rank's forked helper that outlives
it, a process another thread of the parent forked meanwhile) only makes the wait last
until its deadline; a target that closes the fd only ends it early. Either way the group
is then supervised through the pidfds as before: this pipe decides no verdict, only when
the parent wakes.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import os
import select
import signal
from typing import Literal

__all__ = ["ExitPipe", "WaitEnd", "report_failure"]

WaitEnd = Literal["ended", "failed", "deadline"]
"""How :meth:`ExitPipe.wait` ended: every rank gone, a rank wrote its failure byte, or
the deadline passed first."""

_FAILED = b"!"
_SIGPIPE = int(signal.SIGPIPE)
_SIG_IGN = int(signal.SIG_IGN)


class ExitPipe:
    """The parent's side: create before the forks, :meth:`wait` after the last one."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        # Built before the forks: the wait itself must write as few pages as possible.
        self._poll = select.poll()
        self._poll.register(self.read_fd, select.POLLIN)

    def wait(self, timeout_ms: int) -> WaitEnd:
        """Drop the parent's write end, then sleep until every rank's copy is gone, a rank
        wrote its failure byte, or ``timeout_ms`` passed. One ``poll``: no wake-up per rank."""
        self._close_write_end()
        if not self._poll.poll(max(0, timeout_ms)):
            return "deadline"
        return "failed" if os.read(self.read_fd, 1) else "ended"

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
    on its way to ``os._exit``). SIGPIPE is ignored first: ranks run with it at its default
    action, and a parent that is gone must not turn this rank's exit code into a signal."""
    try:
        _signal.signal(_SIGPIPE, _SIG_IGN)  # this process is about to exit: no one to restore for
        os.write(write_fd, _FAILED)
    except OSError:
        pass
