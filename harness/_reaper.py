"""Wait for any of a set of child pids, with a deadline and without SIGCHLD.

Linux >= 5.3: one pidfd per child in one ``poll``: the parent sleeps in the kernel and
wakes the moment a rank exits (no polling latency; the whole 2-rank group costs a few ms).
Elsewhere: ``waitpid(WNOHANG)`` with short adaptive sleeps bounded by the deadline.
A SIGCHLD handler is never installed: the caller (pytest, an xdist worker) may own it.

The caller may also reap our children itself (a SIGCHLD handler or a ``waitpid(-1)`` in
some library): our own ``waitpid`` then fails with ECHILD. That child has still ended
(its pidfd is readable, or its pid is no longer our child), so it is reported with the
status :data:`REAPED_ELSEWHERE` instead of the exception ending the whole group.
"""

from __future__ import annotations

import os
import select
import time

__all__ = ["REAPED_ELSEWHERE", "Reaper", "WaitStatus"]

#: The status of a child that ended but was reaped by someone else: its exit status is lost.
REAPED_ELSEWHERE = None
WaitStatus = int | None  # a raw wait status, or REAPED_ELSEWHERE


def _reap(pid: int, flags: int) -> tuple[int, WaitStatus]:
    """``waitpid(pid, flags)``; ECHILD means another waiter took the child first."""
    try:
        return os.waitpid(pid, flags)
    except ChildProcessError:
        return pid, REAPED_ELSEWHERE


class Reaper:
    """Tracks live children; :meth:`wait` reaps those that ended, up to a deadline."""

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}  # pidfd -> pid
        self._plain: set[int] = set()  # pids without a pidfd
        self._poll = select.poll()
        self.reaped_at: dict[int, float] = {}

    def add(self, pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._plain.add(pid)
            return
        self._pidfds[fd] = pid
        self._poll.register(fd, select.POLLIN)

    @property
    def live(self) -> set[int]:
        return set(self._pidfds.values()) | self._plain

    def wait(self, deadline: float) -> list[tuple[int, WaitStatus]]:
        """Block until at least one child ended or ``deadline`` passed; return
        ``(pid, wait_status)`` for every child that ended (possibly several, possibly none);
        the status is :data:`REAPED_ELSEWHERE` for a child someone else reaped."""
        done: list[tuple[int, WaitStatus]] = []
        sleep = 0.0002
        while not done:
            left = deadline - time.monotonic()
            if self._pidfds:
                if not self._plain:
                    ms = max(0, int(left * 1000 + 0.999)) if left > 0 else 0
                    ready = self._poll.poll(ms)
                else:
                    ready = self._poll.poll(0)
                for fd, _ in ready:
                    pid = self._pidfds.pop(fd)
                    self._poll.unregister(fd)
                    os.close(fd)
                    _, status = _reap(pid, 0)
                    self.reaped_at[pid] = time.monotonic()
                    done.append((pid, status))
            for pid in list(self._plain):
                got, status = _reap(pid, os.WNOHANG)
                if got:
                    self._plain.discard(pid)
                    self.reaped_at[pid] = time.monotonic()
                    done.append((pid, status))
            if done or left <= 0 or not self.live:
                break
            if self._plain:
                time.sleep(min(sleep, max(0.0, left)))  # polling bounded by the deadline
                sleep = min(sleep * 2, 0.005)
        return done

    def close(self) -> None:
        """Drop pidfds of children that were not reaped (the caller reports them)."""
        for fd in list(self._pidfds):
            self._poll.unregister(fd)
            os.close(fd)
        self._pidfds.clear()
        self._plain.clear()
