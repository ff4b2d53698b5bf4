"""The reaper: pidfd + poll when the kernel has it, a bounded waitpid loop otherwise."""

from __future__ import annotations

import os
import time

import pytest

from tpbcast.harness import Status, run_ranks
from tpbcast.harness._reaper import Reaper


def _no_pidfd(pid):
    raise OSError(38, "Function not implemented")  # ENOSYS, as on kernels < 5.3


def quick_or_hang(ctx):
    if ctx.rank == 1:
        while True:
            time.sleep(0.05)
    return ctx.rank


def test_without_pidfd_the_runner_still_judges_and_stops_ranks(monkeypatch):
    monkeypatch.setattr(os, "pidfd_open", _no_pidfd)
    result = run_ranks(quick_or_hang, 2, timeout=2.0, kill_grace=0.3)
    assert result.outcomes[0].status is Status.OK
    assert result.outcomes[1].status is Status.TIMED_OUT
    assert "quick_or_hang" in result.outcomes[1].stack_dump
    assert result.survivors == ()


@pytest.mark.parametrize("pidfd", [True, False])
def test_wait_returns_at_the_deadline_with_nothing(monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", _no_pidfd)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # until the parent closes its end
        os._exit(0)
    os.close(r)
    reaper = Reaper()
    reaper.add(pid)
    try:
        t0 = time.monotonic()
        assert reaper.wait(time.monotonic() + 0.2) == []
        assert time.monotonic() - t0 >= 0.2
        os.close(w)  # the child may end now
        w = -1
        done = reaper.wait(time.monotonic() + 30)
        assert [p for p, _ in done] == [pid]
        assert os.WIFEXITED(done[0][1]) and os.WEXITSTATUS(done[0][1]) == 0
        assert reaper.live == set()
    finally:
        if reaper.live:  # a failed assertion must not leave the child behind
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        if w != -1:
            os.close(w)
        reaper.close()
