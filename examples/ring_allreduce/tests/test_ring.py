"""ringsum's own tests, written with tpbcast's fixtures (no harness code of our own).

``tpbcast_run`` forks the ranks, bounds each group with a deadline and fails the test with
one report section per rank; ``tpbcast_faults`` kills a rank at a named step.
"""

from __future__ import annotations

import os
import signal
import socket

import pytest
import ringsum

from tpbcast.harness import Kill, Pause, RankContext, Status

RING_TIMEOUT = 10.0  # ringsum's own per-step deadline in these tests


def vector_of(rank: int) -> list[float]:
    return [float(rank * 100 + i) for i in range(10)]


def expected_sum(world_size: int) -> list[float]:
    return [sum(vector_of(r)[i] for r in range(world_size)) for i in range(10)]


def allreduce_rank(ctx: RankContext, timeout: float = RING_TIMEOUT) -> list[float]:
    """One rank: join the ring in the group's private workdir and sum.

    Every step passes ``ctx.point`` as ``on_step``, so a fault plan can act at
    ``reduce_scatter.1`` or ``all_gather.0``.
    """
    with ringsum.connect(ctx.rank, ctx.world_size, ctx.workdir, timeout=timeout) as ring:
        return ring.allreduce(vector_of(ctx.rank), on_step=ctx.point)


@pytest.mark.world_size(1, 2, 3, 4, 5)
def test_every_rank_gets_the_sum(tpbcast_run, world_size):
    result = tpbcast_run(allreduce_rank)

    assert [o.value for o in result.outcomes] == [expected_sum(world_size)] * world_size
    assert result.leftover_files == ()  # ringsum unlinks its listening sockets


@pytest.mark.world_size(3, 4)
def test_rank_killed_mid_ring_fails_the_others_cleanly(tpbcast_run, tpbcast_faults, world_size):
    tpbcast_faults.at(1, "reduce_scatter.1", Kill(signal.SIGKILL))

    result = tpbcast_run(allreduce_rank, faults=tpbcast_faults, expect_failure=True)

    # 1. The fault happened: rank 1 died by SIGKILL exactly at the planned step.
    victim = result.outcomes[1]
    assert victim.status is Status.SIGNALED and victim.signal_name == "SIGKILL"
    assert [(f.point, f.action) for f in victim.faults] == [("reduce_scatter.1", "Kill(SIGKILL)")]
    # 2. Every other rank failed on its own, with ringsum's error naming a closed neighbour,
    #    long before ringsum's step deadline (no rank needed the harness to stop it).
    for outcome in result.outcomes:
        if outcome.rank == 1:
            continue
        assert outcome.status is Status.RAISED, outcome.summary()
        assert outcome.exc_type == "ringsum.RingError", outcome.summary()
        assert "closed the connection" in (outcome.exc_message or "")
        assert outcome.duration < RING_TIMEOUT
    # 3. Nothing survived the group.
    assert result.survivors == ()


@pytest.mark.tpbcast_timeout(30)
def test_stalled_rank_times_out_its_neighbours(tpbcast_run, tpbcast_faults):
    """A rank that stops answering (SIGSTOP) is detected by ringsum's deadline.

    ``fail_fast=False``: the harness must not stop the paused rank when its neighbour
    fails; it resumes after the pause and finds its ring closed, like a real straggler.
    """
    tpbcast_faults.at(1, "reduce_scatter.0", Pause(3.0))

    result = tpbcast_run(
        allreduce_rank, 3, args=(1.0,), faults=tpbcast_faults, fail_fast=False, expect_failure=True
    )

    assert [f.point for f in result.outcomes[1].faults] == ["reduce_scatter.0"]
    timed_out = [o for o in result.outcomes if o.exc_type == "ringsum.RingTimeoutError"]
    assert timed_out, result.report()
    assert all("timed out after 1s" in (o.exc_message or "") for o in timed_out)
    assert result.survivors == ()


def test_bad_rank_is_refused_before_any_socket(tmp_path):
    with pytest.raises(ValueError, match="rank 3 is outside world size 2"):
        ringsum.connect(3, 2, str(tmp_path))


def connect_to_a_full_backlog(ctx: RankContext) -> str:
    """Rank 0 of a ring of 2 whose right neighbour listens but never accepts (its backlog
    is full); returns ringsum's error. Runs in a rank: a regression hangs in connect(),
    and the group deadline turns that into a failure instead of a hung test."""
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        stuck.bind(f"{ctx.workdir}/r1.sock")
        stuck.listen(0)
        while True:  # fill the backlog: a blocking connect now waits for ever
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            fillers.append(filler)
            try:
                filler.connect(f"{ctx.workdir}/r1.sock")
            except BlockingIOError:
                break
        ctx.record("full-backlog", queued=len(fillers) - 1)
        try:
            ringsum.connect(0, 2, ctx.workdir, timeout=0.5)
        except ringsum.RingTimeoutError as exc:
            return str(exc)
        return "connected"
    finally:
        for sock in (stuck, *fillers):
            sock.close()
        os.unlink(f"{ctx.workdir}/r1.sock")


@pytest.mark.tpbcast_timeout(15)
def test_connect_to_a_full_backlog_times_out(tpbcast_run):
    result = tpbcast_run(connect_to_a_full_backlog, 1)

    outcome = result.outcomes[0]
    assert [f.action for f in outcome.faults] == ["full-backlog"]  # the fault was in place
    assert "no listener after 0.5s" in outcome.value
    assert outcome.duration < 10.0
