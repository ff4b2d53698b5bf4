"""global_mean's own tests: tpbcast's fixtures give each rank a ready gloo group.

The module never imports torch: the ranks do, and ``tpbcast_preload = "torch"`` in
pyproject.toml has the test process import it once before the first fork, so no rank
pays for the import (3.3 s per 2-rank test without it, 0.10 s with it).
"""

from __future__ import annotations

import signal
import threading

import distmean
import pytest

from tpbcast.fixtures import process_group
from tpbcast.harness import Kill, RankContext, Status


def mean_rank(ctx: RankContext) -> list[float]:
    """One rank: its values are ``rank * 10 + i``; the mean is checked by the test."""
    import torch

    with process_group(ctx) as group:
        values = torch.tensor([float(ctx.rank * 10 + i) for i in range(4)])
        ctx.point("joined")  # a fault plan kills a rank here, after the group formed
        return distmean.global_mean(values, group).tolist()


def expected_mean(world_size: int) -> list[float]:
    return [sum(r * 10 + i for r in range(world_size)) / world_size for i in range(4)]


@pytest.mark.world_size(2, 4)
def test_every_rank_gets_the_mean(tpbcast_run, world_size):
    result = tpbcast_run(mean_rank)

    assert [o.value for o in result.outcomes] == [expected_mean(world_size)] * world_size


def test_killed_rank_fails_the_others_without_waiting(tpbcast_run, tpbcast_faults):
    tpbcast_faults.at(1, "joined", Kill(signal.SIGKILL))

    # fail_fast=False: the survivors must fail by themselves, not be stopped by the harness.
    result = tpbcast_run(mean_rank, 3, faults=tpbcast_faults, fail_fast=False, expect_failure=True)

    # 1. The fault happened: rank 1 died by SIGKILL once the group had formed.
    assert result.outcomes[1].signal_name == "SIGKILL"
    assert [f.point for f in result.outcomes[1].faults] == ["joined"]
    # 2. The survivors' all_reduce failed (gloo saw the closed connection) well before the
    #    group deadline: nobody needed the harness to stop them.
    for rank in (0, 2):
        outcome = result.outcomes[rank]
        assert outcome.status is Status.RAISED, outcome.summary()
        assert outcome.duration < result.timeout / 2, outcome.summary()


@pytest.mark.tpbcast_timeout(8)
def test_hung_rank_times_out_the_collective_not_the_test(tpbcast_run):
    """Rank 1 never joins the all_reduce.  process_group's collective timeout ends before
    the group deadline, so rank 0 raises gloo's timeout (its own traceback), and the
    harness then stops rank 1 and shows where it hung."""

    def rank(ctx: RankContext) -> list[float]:
        if ctx.rank == 1:
            with process_group(ctx):
                threading.Event().wait()  # hangs here, inside the group
        return mean_rank(ctx)

    result = tpbcast_run(rank, 2, expect_failure=True)

    hung, waiter = result.outcomes[1], result.outcomes[0]
    assert hung.status is Status.TIMED_OUT
    assert "threading.Event().wait()" in hung.stack_dump or "in wait" in hung.stack_dump
    assert waiter.status is Status.RAISED, waiter.summary()
    assert waiter.duration < result.timeout
