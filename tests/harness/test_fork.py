"""``fork_holding_signals``: the child never unwinds into the caller, the parent's signal
mask always comes back, and a child whose pid the caller would never learn is taken back.

Every test here guards itself too: should the function under test return in the child,
the test's own ``os._exit(99)`` ends that copy of pytest instead of letting it run on.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
from types import FrameType
from typing import Any

import pytest

from tpbcast.harness._proc import fork_holding_signals

_GUARD = 99  # the exit code of a child that came back into this test


def _mask() -> set[int]:
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ())}


def _fork(child: Any, exit_code: int) -> int:
    me = os.getpid()
    try:
        pid = fork_holding_signals(child, exit_code=exit_code)
    finally:
        if os.getpid() != me:  # pragma: no cover - only a wrong implementation gets here
            os._exit(_GUARD)
    return pid


def _exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"status {status:#x}"
    return os.WEXITSTATUS(status)


def test_a_child_that_returns_exits_with_the_given_code() -> None:
    assert _exit_code(_fork(lambda: None, 77)) == 77


def test_a_child_that_raises_exits_with_the_given_code_and_runs_with_signals_held() -> None:
    r, w = os.pipe()

    def child() -> None:
        os.write(w, b"mask:" + b",".join(str(s).encode() for s in sorted(_mask())))
        raise KeyboardInterrupt  # e.g. a handler of a signal that reached the parent

    before = _mask()
    try:
        pid = _fork(child, 78)
        assert _exit_code(pid) == 78
        os.close(w)
        w = -1
        report = os.read(r, 4096)  # the child is gone and w closed: never blocks
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert report.startswith(b"mask:"), report
    held = {int(s) for s in report[5:].split(b",") if s}
    assert {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT} <= held  # held in the child
    assert signal.SIGKILL not in held and signal.SIGSEGV not in held
    assert _mask() == before  # and given back in the parent


def test_the_parents_mask_comes_back_when_fork_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def failing_fork() -> int:
        calls.append(len(_mask()))
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", failing_fork)
    before = _mask()
    with pytest.raises(OSError, match="temporarily unavailable"):
        fork_holding_signals(lambda: None, exit_code=70)
    assert calls and calls[0] > len(before)  # the fork really ran with signals held
    assert _mask() == before


def test_a_child_the_caller_never_learns_of_is_killed_and_reaped() -> None:
    """An exception right after the fork returned in the parent (a signal handler raising
    at the next bytecode) would lose the pid: the function kills and reaps that child
    before re-raising. The exception is injected with a trace function at the line after
    the fork, in both processes (the child must still end in ``os._exit``)."""
    source, first = inspect.getsourcelines(fork_holding_signals)
    line = first + next(i for i, text in enumerate(source) if "if pid == 0:" in text)
    seen: list[int] = []
    previous = sys.gettrace()

    def local(frame: FrameType, event: str, arg: object) -> object:
        if event == "line" and frame.f_lineno == line:
            seen.append(frame.f_locals["pid"])
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> object:
        return local if frame.f_code is fork_holding_signals.__code__ else None

    before = _mask()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            _fork(lambda: None, 70)
    finally:
        sys.settrace(previous)
    (pid,) = seen
    assert pid > 0  # the fault happened in the parent, after the fork returned
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped by the function
    assert _mask() == before


def test_a_rank_fork_that_fails_midway_takes_the_started_ranks_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_ranks forks every rank first and records them after the last fork: when the
    second fork fails (EAGAIN: out of processes), the first rank must still be known to the
    runner, and so killed and reaped before the error reaches the caller."""
    import errno
    import select

    from tpbcast.harness import _runner, run_ranks

    real_fork = _runner._fork
    started: list[int] = []

    def second_fork_fails(child: Any) -> int:
        if started:
            raise BlockingIOError(errno.EAGAIN, "fork: Resource temporarily unavailable")
        pid = real_fork(child)
        started.append(pid)
        return pid

    def blocks(ctx: Any) -> None:
        select.select([], [], [], 60.0)  # runs until the runner kills it

    monkeypatch.setattr(_runner, "_fork", second_fork_fails)
    try:
        with pytest.raises(BlockingIOError, match="Resource temporarily unavailable"):
            run_ranks(blocks, 2, timeout=30.0)
        assert len(started) == 1  # the fault happened: one rank up, the second fork failed
        with pytest.raises(ChildProcessError):  # reaped: no longer our child
            os.waitpid(started[0], os.WNOHANG)
    finally:
        for pid in started:  # a wrong runner left it running: do not leave it behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
