"""``fork_child``: the child never unwinds into the caller and keeps the caller's mask (the
runner holds the asynchronous signals blocked around its forks), a child whose pid the
caller would never learn is taken back, and run_ranks gives the parent its mask back
when a fork fails.

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

from tpbcast.harness import run_ranks
from tpbcast.harness._proc import (
    block_asynchronous_signals,
    fork_child,
    restore_signal_mask,
)

_GUARD = 99  # the exit code of a child that came back into this test


def _mask() -> set[int]:
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ())}


def _fork(child: Any, exit_code: int) -> int:
    me = os.getpid()
    try:
        pid = fork_child(child, exit_code=exit_code)
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


def test_a_child_that_raises_exits_with_the_given_code_and_keeps_the_callers_mask() -> None:
    """The runner blocks the asynchronous signals around its forks; the child must run
    with them still blocked (it unblocks them once its handlers exist), and fork_child
    must leave the parent's mask as the caller set it."""
    r, w = os.pipe()

    def child() -> None:
        os.write(w, b"mask:" + b",".join(str(s).encode() for s in sorted(_mask())))
        raise KeyboardInterrupt  # e.g. a handler of a signal that reached the parent

    before = _mask()
    held_by_caller = block_asynchronous_signals()
    try:
        blocked = _mask()
        pid = _fork(child, 78)
        after_fork = _mask()
    finally:
        restore_signal_mask(held_by_caller)
    try:
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
    assert after_fork == blocked  # the parent's mask untouched by fork_child
    assert _mask() == before


def test_run_ranks_gives_the_parents_mask_back_when_a_fork_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def failing_fork() -> int:
        calls.append(len(_mask()))
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", failing_fork)
    before = _mask()
    with pytest.raises(OSError, match="temporarily unavailable"):
        run_ranks(lambda ctx: None, 1, timeout=30.0)
    assert calls and calls[0] > len(before)  # the fork really ran with signals held
    assert _mask() == before


def test_a_child_the_caller_never_learns_of_is_killed_and_reaped() -> None:
    """An exception right after the fork returned in the parent (a signal handler raising
    at the next bytecode) would lose the pid: the function kills and reaps that child
    before re-raising. The exception is injected with a trace function at the line after
    the fork, in both processes (the child must still end in ``os._exit``)."""
    source, first = inspect.getsourcelines(fork_child)
    line = first + next(i for i, text in enumerate(source) if "if pid == 0:" in text)
    seen: list[int] = []
    previous = sys.gettrace()

    def local(frame: FrameType, event: str, arg: object) -> object:
        if event == "line" and frame.f_lineno == line:
            seen.append(frame.f_locals["pid"])
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> object:
        return local if frame.f_code is fork_child.__code__ else None

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
