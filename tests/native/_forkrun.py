"""A minimal fork-and-reap runner for the native adapter tests.

Stand-in until the harness's ``run_ranks`` lands: each target runs in its own
forked process, its return value (or exception) comes back pickled through a
pipe, everything has ONE deadline, and every child is reaped; a child still
alive at the deadline is SIGKILLed and reported as ``timeout``.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    index: int
    pid: int
    status: str  # ok | raised | exited | signaled | timeout
    value: object = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    exit_code: int | None = None
    signal: int | None = None

    def describe(self) -> str:
        return (
            f"[{self.index}] pid {self.pid} {self.status} exit={self.exit_code} "
            f"sig={self.signal} {self.exc_type}: {self.message}\n{self.traceback}"
        )


class Signal:
    """A one-way named point between forked processes (a pipe; no sleeps)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def notify(self, times: int = 1) -> None:
        os.write(self.w, b"x" * times)

    def wait(self, timeout: float = 30.0) -> None:
        ready, _, _ = select.select([self.r], [], [], timeout)
        if not ready or os.read(self.r, 1) != b"x":
            raise TimeoutError(f"Signal not notified within {timeout} s")

    def wait_closed(self, timeout: float = 30.0) -> None:
        """Wait until every holder of the write end closed it (e.g. a process died)."""
        os.close(self.w)
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"write end still open after {timeout} s")
            if os.read(self.r, 4096) == b"":
                return

    def fds(self) -> tuple[int, int]:
        return (self.r, self.w)


def _child(target: Callable[[], object], w: int) -> None:
    try:
        try:
            payload = pickle.dumps(("ok", target()))
        except BaseException as exc:
            payload = pickle.dumps(("raised", type(exc).__name__, str(exc), traceback.format_exc()))
        view = memoryview(payload)
        while view:
            view = view[os.write(w, view) :]
    finally:
        os._exit(0)


def run_forked(
    targets: Sequence[Callable[[], object]],
    *,
    timeout: float = 60.0,
    close_in_parent: Sequence[int] = (),
) -> list[Outcome]:
    """Run each target in a forked child; return one Outcome per target, in order."""
    deadline = time.monotonic() + timeout
    children: list[tuple[int, int]] = []
    try:
        for target in targets:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                os.close(r)
                _child(target, w)
            os.close(w)
            children.append((pid, r))
    finally:
        for fd in close_in_parent:
            os.close(fd)
    data = _collect([r for _, r in children], deadline)
    outcomes = []
    for index, (pid, r) in enumerate(children):
        status, timed_out = _reap(pid, deadline)
        os.close(r)
        outcomes.append(_outcome(index, pid, status, data[r], timed_out))
    return outcomes


def _collect(fds: list[int], deadline: float) -> dict[int, bytes]:
    """Read every child's result pipe to EOF, or until the deadline."""
    data: dict[int, bytearray] = {fd: bytearray() for fd in fds}
    open_fds = set(fds)
    while open_fds and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                data[fd] += chunk
            else:
                open_fds.discard(fd)
    return {fd: bytes(buf) for fd, buf in data.items()}


def _reap(pid: int, deadline: float) -> tuple[int, bool]:
    """Wait for pid until the deadline, then SIGKILL it; always reaped."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1], True
        select.select([], [], [], 0.01)  # poll the exit status, bounded by the deadline


def _outcome(index: int, pid: int, status: int, payload: bytes, timed_out: bool) -> Outcome:
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    if timed_out:
        return Outcome(index, pid, "timeout", exit_code=code, signal=sig)
    if sig is not None:
        return Outcome(index, pid, "signaled", signal=sig)
    if not payload:
        return Outcome(index, pid, "exited", exit_code=code)
    result = pickle.loads(payload)
    if result[0] == "ok":
        return Outcome(index, pid, "ok", value=result[1], exit_code=code)
    _, exc_type, message, tb = result
    return Outcome(index, pid, "raised", None, exc_type, message, tb, code)


def values(outcomes: Sequence[Outcome]) -> list[object]:
    """Every value, or an AssertionError describing each rank that did not return."""
    bad = [o for o in outcomes if o.status != "ok"]
    assert not bad, "\n".join(o.describe() for o in bad)
    return [o.value for o in outcomes]
