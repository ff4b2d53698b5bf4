"""The reaper: pidfd + poll when the kernel has it, a bounded waitpid loop otherwise."""

from __future__ import annotations

import os
import select
import signal
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


def test_a_rank_reaped_elsewhere_is_unknown_and_the_others_are_kept(monkeypatch):
    """Someone else in the parent (here a SIGCHLD handler doing ``waitpid(-1)``, as some
    libraries install) reaps rank 1 before the runner can. The runner used to raise
    ChildProcessError from its own waitpid and lose every outcome."""
    from tpbcast.harness import _runner

    forked: list[int] = []
    real_fork = _runner._fork

    def recording_fork(*args, **kwargs):
        pid = real_fork(*args, **kwargs)
        forked.append(pid)
        return pid

    monkeypatch.setattr(_runner, "_fork", recording_fork)
    reaped_by_handler: list[tuple[int, int]] = []
    release_r, release_w = os.pipe()

    def foreign_reaper(signum, frame):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reaped_by_handler.append((pid, status))
            # Rank 1 by its exit status, not by forked[1]: on a loaded machine it may end
            # before the runner's _fork returned its pid (the handler then ran too early to
            # know it and went on to reap rank 0 as well).
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reap rank 1 only
                os.write(release_w, b"x")  # now rank 0 may end (and is ours to reap)
                return

    def target(ctx, release_fd):
        if ctx.rank == 1:
            os._exit(3)  # ends at once; its exit status is what the handler steals
        ready, _, _ = select.select([release_fd], [], [], 60)
        assert ready, "rank 1 was never reaped by the foreign SIGCHLD handler"
        return "kept"

    old = signal.signal(signal.SIGCHLD, foreign_reaper)
    try:
        result = run_ranks(target, 2, timeout=90, args=(release_r,), fail_fast_grace=60)
    finally:
        signal.signal(signal.SIGCHLD, old)
        os.close(release_r)
        os.close(release_w)
    # 1. The race happened: the foreign handler, not the runner, reaped rank 1 (exit 3).
    assert [pid for pid, _ in reaped_by_handler] == [forked[1]], reaped_by_handler
    assert os.WEXITSTATUS(reaped_by_handler[0][1]) == 3
    # 2. Rank 1 is judged for what the runner can know; rank 0 keeps its own outcome.
    lost, kept = result.outcomes[1], result.outcomes[0]
    assert lost.status is Status.UNKNOWN, lost.report()
    assert "exit status unknown (reaped elsewhere" in lost.summary()
    assert lost.exit_code is None and lost.signal is None
    assert kept.status is Status.OK and kept.value == "kept", kept.report()
    assert not result.ok and result.first_failure is lost
    assert result.survivors == ()
