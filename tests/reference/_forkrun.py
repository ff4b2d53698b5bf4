"""A small fork-and-reap runner for the reference self-tests.

Stand-in until the harness's ``run_ranks`` is used here: each callable runs in
its own forked child; its return value (or exception, pickled whole so our
error fields survive) comes back through a pipe; everything has ONE deadline;
every child is reaped, and a child still alive at the deadline is SIGKILLed
and reported as ``timeout``.  Children leave with ``os._exit`` and never
return into pytest.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Event", "Outcome", "fork_all", "run_group", "values"]


@dataclass(frozen=True)
class Outcome:
    index: int
    pid: int
    status: str  # ok | raised | exited | signaled | timeout
    value: Any = None
    exc: BaseException | None = None
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


class Event:
    """A one-way named point between forked processes (a pipe; no sleeps).

    Create it in the parent before forking; ``notify(n)`` releases ``n`` waits.
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def notify(self, times: int = 1) -> None:
        os.write(self.w, b"x" * times)

    def wait(self, timeout: float = 20.0) -> None:
        ready, _, _ = select.select([self.r], [], [], timeout)
        if not ready or os.read(self.r, 1) != b"x":
            raise TimeoutError(f"event not notified within {timeout} s")

    def is_set(self) -> bool:
        """Non-blocking check (consumes one notification when set)."""
        ready, _, _ = select.select([self.r], [], [], 0)
        return bool(ready) and os.read(self.r, 1) == b"x"

    def send(self, data: bytes) -> None:
        """Pass a small message (<= PIPE_BUF, written atomically)."""
        os.write(self.w, len(data).to_bytes(2, "little") + data)

    def receive(self, timeout: float = 20.0) -> bytes:
        self_deadline = time.monotonic() + timeout
        head = self._read_exact(2, self_deadline)
        return self._read_exact(int.from_bytes(head, "little"), self_deadline)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        out = b""
        while len(out) < n:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.r], [], [], left)
            if not ready:
                raise TimeoutError("event message not received in time")
            out += os.read(self.r, n - len(out))
        return out

    def close(self) -> None:
        for fd in (self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(write_fd: int, func: Callable[[], object]) -> None:
    code = 0
    try:
        try:
            payload = ("ok", func())
        except BaseException as exc:  # everything goes back to the parent
            tb = traceback.format_exc()
            try:
                pickle.dumps(exc)
                carried: BaseException | None = exc
            except Exception:
                carried = None
            payload = ("raised", (carried, type(exc).__name__, str(exc), tb))
        try:
            data = pickle.dumps(payload)
        except Exception as exc:
            data = pickle.dumps(("raised", (None, "PicklingError", repr(exc), "")))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def fork_all(funcs: Sequence[Callable[[], object]], *, timeout: float = 20.0) -> list[Outcome]:
    """Run each callable in its own child; wait for all, under one deadline."""
    deadline = time.monotonic() + timeout
    procs: list[tuple[int, int]] = []
    try:
        for func in funcs:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(w, func)
            os.close(w)
            procs.append((pid, r))
    except BaseException:
        for pid, r in procs:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
        raise
    buffers = {r: bytearray() for _, r in procs}
    open_fds = set(buffers)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk:
                buffers[fd] += chunk
            else:
                open_fds.discard(fd)
    outcomes = []
    for index, (pid, r) in enumerate(procs):
        timed_out = r in open_fds
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = _reap(pid, deadline if not timed_out else time.monotonic() + 5)
        os.close(r)
        outcomes.append(_outcome(index, pid, status, bytes(buffers[r]), timed_out=timed_out))
    return outcomes


def _reap(pid: int, deadline: float) -> tuple[int, int]:
    """waitpid with a deadline; SIGKILL when it passes (then a blocking reap)."""
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return got, status
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)
        select.select([], [], [], 0.005)  # a poll interval, not a synchronisation


def _outcome(index: int, pid: int, status: int, data: bytes, *, timed_out: bool) -> Outcome:
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if timed_out:
        return Outcome(index, pid, "timeout", exit_code=exit_code, signal=sig)
    if data:
        kind, body = pickle.loads(data)
        if kind == "ok":
            return Outcome(index, pid, "ok", value=body, exit_code=exit_code, signal=sig)
        exc, exc_type, message, tb = body
        return Outcome(
            index,
            pid,
            "raised",
            exc=exc,
            exc_type=exc_type,
            message=message,
            traceback=tb,
            exit_code=exit_code,
            signal=sig,
        )
    return Outcome(
        index, pid, "signaled" if sig is not None else "exited", exit_code=exit_code, signal=sig
    )


def run_group(
    target: Callable[..., object],
    world_size: int,
    *,
    args: tuple[object, ...] = (),
    timeout: float = 20.0,
) -> list[Outcome]:
    """``target(rank, *args)`` in ``world_size`` children (index = rank)."""
    return fork_all(
        [lambda r=rank: target(r, *args) for rank in range(world_size)], timeout=timeout
    )


def values(outcomes: Sequence[Outcome]) -> list[Any]:
    """The return values, or an AssertionError describing every failed child."""
    bad = [o for o in outcomes if o.status != "ok"]
    if bad:
        raise AssertionError("ranks failed:\n" + "\n".join(o.describe() for o in bad))
    return [o.value for o in outcomes]
