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
- a rank whose target raised (``SystemExit`` with a non-zero code included), or whose
  bootstrap failed, writes one byte on its way out of ``rank_main``, so fail-fast is
  not delayed;
- a rank that ends any other way writes nothing: killed by a signal (SIGKILL, SIGSEGV,
  ``abort()``), stopped (SIGSTOP), or leaving through the target's own ``os._exit(n)``
  or a C ``exit()``. The parent then learns of it when the others have ended too, or
  at the wait's deadline (``_SHORT_GROUP`` after the last fork, 20 ms). Its peers are
  not delayed: they see it gone through the life pipes, which the parent dropped
  before it went to sleep.

Anything else that keeps a copy of the write end (a rank's forked helper that outlives
it, a process another thread of the parent forked meanwhile) only makes the wait last
until its deadline; a target that closes the fd only ends it early (and a failing rank
then writes nothing: the fd number is checked to still be this pipe). Either way the
group is then supervised through the pidfds as before: this pipe decides no verdict, only
when the parent wakes.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import os
import select
import signal
from typing import Literal, NamedTuple

__all__ = ["ExitEnd", "ExitPipe", "WaitEnd", "report_failure"]

WaitEnd = Literal["ended", "failed", "deadline"]
"""How :meth:`ExitPipe.wait` ended: every rank gone, a rank wrote its failure byte, or
the deadline passed first."""

_FAILED = b"!"
_SIGPIPE = int(signal.SIGPIPE)


class ExitEnd(NamedTuple):
    """The write end as a rank inherits it: the fd number, and the pipe's identity
    (``st_dev``, ``st_ino``), so that a rank never writes into another file that got the
    number after its target closed ours."""

    fd: int
    dev: int
    ino: int


class ExitPipe:
    """The parent's side: create before the forks, :meth:`wait` after the last one."""

    def __init__(self) -> None:
        # The poll object first: nothing to leak if it fails. Built before the forks: the
        # wait itself must write as few pages as possible.
        # Non-blocking: a rank's one write must never wait (the parent reads only after
        # poll said there is something to read).
        self._poll = select.poll()
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            self._poll.register(self.read_fd, select.POLLIN)
            st = os.fstat(self.write_fd)
        except BaseException:
            self.close()
            raise
        self.end = ExitEnd(self.write_fd, st.st_dev, st.st_ino)

    def wait(self, timeout_ms: int) -> WaitEnd:
        """Drop the parent's write end, then sleep until every rank's copy is gone, a rank
        wrote its failure byte, or ``timeout_ms`` passed. One ``poll``: no wake-up per rank."""
        self._close_write_end()
        if not self._poll.poll(max(0, timeout_ms)):
            return "deadline"
        return "failed" if os.read(self.read_fd, 1) else "ended"

    def _close_write_end(self) -> None:
        fd, self.write_fd = self.write_fd, -1  # forgotten first: never closed twice
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        """Close both ends (idempotent)."""
        self._close_write_end()
        fd, self.read_fd = self.read_fd, -1
        if fd >= 0:
            os.close(fd)


def report_failure(end: ExitEnd) -> None:
    """In a rank about to end in failure: wake the parent now.

    Writes only if ``end.fd`` is still the exit pipe (a target may have closed it, and
    another file got the number). SIGPIPE is blocked in this thread first, not ignored
    process-wide: ranks run with it at its default action, a parent that is gone must not
    turn this rank's exit code into a signal, and another thread of the rank that writes
    to a dead peer must still die of it. The rank is on its way to ``os._exit``, which
    drops a SIGPIPE left pending. OSError is swallowed; anything else propagates, and
    ``rank_main``'s ``finally`` still ends in ``os._exit``."""
    try:
        st = os.fstat(end.fd)
        if (st.st_dev, st.st_ino) != (end.dev, end.ino):
            return
        _signal.pthread_sigmask(_signal.SIG_BLOCK, (_SIGPIPE,))
        os.write(end.fd, _FAILED)
    except OSError:
        pass
