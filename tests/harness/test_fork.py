"""``fork_holding_signals``: the child never unwinds into the caller, the parent's signal
mask always comes back, and a child whose pid the caller would never learn is taken back.

Every test here guards itself too: should the function under test return in the child,
the test's own ``os._exit(99)`` ends that copy of pytest instead of letting it run on.
"""

from __future__ import annotations

import inspect
import os
import select
import signal
import sys
import threading
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


class _HandlerRaisedError(Exception):
    """What the test's SIGUSR2 handler raises."""


def _raise_from_handler(signum: int, frame: FrameType | None) -> None:
    raise _HandlerRaisedError(f"handler of signal {signum}")


def test_a_handler_that_raises_when_the_mask_comes_back_still_gets_the_child_reaped(
    monkeypatch: pytest.MonkeyPatch, leftover_children: list[int]
) -> None:
    """A signal that reached the parent during the fork is held, and its Python handler
    runs when the parent's mask comes back. If that handler raises, the caller never
    learns the pid: the child must be killed and reaped before the exception leaves."""
    real_fork = os.fork
    children = leftover_children

    def fork_then_signal_the_parent() -> int:
        pid = real_fork()
        if pid != 0:
            children.append(pid)
            # To this thread, which holds it: the handler runs when the mask comes back.
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)
        return pid

    def child() -> None:
        select.select([], [], [], 60.0)  # runs until the parent kills it
        os._exit(0)

    monkeypatch.setattr(os, "fork", fork_then_signal_the_parent)
    old = signal.signal(signal.SIGUSR2, _raise_from_handler)
    try:
        with pytest.raises(_HandlerRaisedError):
            _fork(child, exit_code=3)
        monkeypatch.undo()
        assert len(children) == 1  # the fault happened: forked, then the handler raised
        with pytest.raises(ChildProcessError):  # killed and reaped: no longer our child
            os.waitpid(children[0], os.WNOHANG)
    finally:
        signal.signal(signal.SIGUSR2, old)
