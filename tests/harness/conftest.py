"""Fixtures shared by the harness self-tests (one copy instead of one per test file)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest


def _reap_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)  # polling a child with a deadline, not synchronisation
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """SIGINT at Python's own ``default_int_handler`` (KeyboardInterrupt) for one test.

    The launcher decides what a test process inherits: ``nohup``, ``cmd &`` in a script
    and many CI runners start it with SIGINT ignored, and Python then leaves it ignored.
    A test about Ctrl-C must install the handler it is about instead of assuming it.
    """
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def reap_child() -> Callable[[int, float], int]:
    """``reap_child(pid, timeout) -> wait status`` for a child the test forked itself;
    SIGKILLs it at the deadline, so a hung child never outlives the test."""
    return _reap_child


@pytest.fixture
def leftover_children() -> Iterator[list[int]]:
    """The pids a test forked, or had the harness fork, for its checks: whatever a wrong
    implementation left running is killed and reaped when the test ends."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # the implementation under test took it back already
