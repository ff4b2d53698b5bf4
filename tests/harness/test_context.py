"""RankContext: identity, paths, and sync points that force an order without sleeps."""

from __future__ import annotations

import os
import stat
import time

import pytest

from tpbcast.harness import Status, run_ranks

T = 30.0


def identity(ctx):
    st = os.stat(ctx.workdir)
    return (ctx.rank, ctx.world_size, ctx.workdir, ctx.base_path, stat.S_IMODE(st.st_mode))


def test_identity_and_short_private_paths():
    result = run_ranks(identity, 3, timeout=T)
    assert result.ok, result.report()
    workdirs = {o.value[2] for o in result.outcomes}
    assert len(workdirs) == 1
    for r, o in enumerate(result.outcomes):
        rank, world, workdir, base, mode = o.value
        assert (rank, world) == (r, 3)
        assert base == f"{workdir}/g"
        assert mode == 0o700
        assert len((base + "_0.sock").encode()) < 107


def _append(path: str, line: str) -> None:
    # O_APPEND writes below PIPE_BUF from different processes do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def ordered_by_notify(ctx, log):
    # Required order: rank 2, then rank 1, then rank 0 - the reverse of any natural bias.
    if ctx.rank == 2:
        _append(log, "2")
        ctx.notify("two_done")
    elif ctx.rank == 1:
        ctx.wait("two_done")
        _append(log, "1")
        ctx.notify("one_done")
    else:
        ctx.wait("one_done")
        _append(log, "0")


def test_notify_wait_forces_an_order(tmp_path):
    for attempt in range(5):  # repeated: the order must hold every time, not by luck
        log = str(tmp_path / f"log{attempt}")
        result = run_ranks(ordered_by_notify, 3, timeout=T, args=(log,))
        assert result.ok, result.report()
        with open(log) as f:
            assert f.read().split() == ["2", "1", "0"]


def barrier_phases(ctx, log):
    for phase in range(3):
        _append(log, f"{phase} {ctx.rank} in")
        ctx.sync(f"phase-{phase}")


def test_sync_is_a_barrier(tmp_path):
    log = str(tmp_path / "log")
    result = run_ranks(barrier_phases, 4, timeout=T, args=(log,))
    assert result.ok, result.report()
    with open(log) as f:
        phases = [int(line.split()[0]) for line in f.read().splitlines()]
    # No rank enters phase p+1 before every rank has entered phase p.
    assert phases == sorted(phases), phases
    assert len(phases) == 12


def reuses_a_name(ctx):
    ctx.sync("once")
    ctx.sync("once")


def test_reusing_a_sync_name_is_an_error():
    result = run_ranks(reuses_a_name, 2, timeout=T)
    for o in result.outcomes:
        assert o.status is Status.RAISED
        assert o.exc_type == "ValueError"
        assert "sync('once') was already used" in o.exc_message


def notifies_twice(ctx):
    ctx.notify("x")
    ctx.notify("x")


def test_reusing_a_notify_name_is_an_error():
    o = run_ranks(notifies_twice, 1, timeout=T).outcomes[0]
    assert o.exc_type == "ValueError" and "notify('x')" in o.exc_message


def peer_dies_before_barrier(ctx):
    if ctx.rank == 1:
        os._exit(0)
    ctx.sync("never")


def test_barrier_with_a_dead_rank_fails_at_once_naming_it():
    t0 = time.monotonic()
    result = run_ranks(peer_dies_before_barrier, 3, timeout=T)
    assert time.monotonic() - t0 < T / 2
    for r in (0, 2):
        o = result.outcomes[r]
        assert o.status is Status.RAISED, result.report()
        assert o.exc_type == "tpbcast.harness.SyncError"  # the public name
        assert "sync('never') can never finish: rank(s) 1 ended" in o.exc_message


def waits_for_nobody(ctx):
    if ctx.rank == 0:
        ctx.wait("nobody_notifies", timeout=0.3)
    else:
        ctx.sync("keep_alive_until_rank0_done", timeout=5)


def test_wait_that_can_never_finish_fails_at_its_deadline_naming_the_point():
    result = run_ranks(waits_for_nobody, 2, timeout=T, fail_fast_grace=5)
    o = result.outcomes[0]
    assert o.status is Status.RAISED
    assert "TimeoutError" in o.traceback or "SyncTimeoutError" in o.exc_type
    assert "wait('nobody_notifies') timed out after 0.300s" in o.exc_message
    assert "still running: 1" in o.exc_message


def waits_while_others_end(ctx):
    if ctx.rank == 0:
        ctx.wait("from_dead")


def test_wait_fails_fast_when_every_other_rank_ended():
    t0 = time.monotonic()
    result = run_ranks(waits_while_others_end, 3, timeout=T)
    assert time.monotonic() - t0 < T / 2
    o = result.outcomes[0]
    assert o.status is Status.RAISED
    assert "every other rank (1, 2) ended without notify('from_dead')" in o.exc_message


def notify_then_exit(ctx):
    if ctx.rank == 1:
        ctx.notify("early")
        return "gone"
    ctx.wait("early")
    return "got it"


def test_notify_from_a_rank_that_already_ended_still_counts():
    result = run_ranks(notify_then_exit, 2, timeout=T)
    assert result.ok, result.report()


def test_bad_sync_names_are_refused():
    def target(ctx):
        ctx.sync("two\nlines")

    o = run_ranks(target, 1, timeout=T).outcomes[0]
    assert o.exc_type == "ValueError" and "single lines" in o.exc_message


def many_notifies(ctx):
    if ctx.rank == 0:
        for i in range(3000):  # more than a pipe buffer of messages to each peer
            ctx.notify(f"n{i}")
        ctx.sync("done")
    else:
        ctx.wait("n2999")
        ctx.sync("done")


def test_a_full_inbox_blocks_briefly_instead_of_failing():
    result = run_ranks(many_notifies, 2, timeout=T)
    assert result.ok, result.report()


def test_record_adds_a_fault_record():
    def target(ctx):
        ctx.record("rogue-bytes", point="handshake", sent=b"\xff", count=3)

    o = run_ranks(target, 1, timeout=T).outcomes[0]
    (rec,) = o.faults
    assert (rec.rank, rec.point, rec.action) == (0, "handshake", "rogue-bytes")
    assert rec.detail == "sent=b'\\xff', count=3"
    assert rec.time >= 0


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_world_sizes(world_size):
    def target(ctx):
        ctx.sync("all")
        return ctx.rank

    result = run_ranks(target, world_size, timeout=T)
    assert [o.value for o in result.outcomes] == list(range(world_size))


def test_wait_alone_in_the_group_fails_at_once():
    """world_size 1: nobody else can ever notify. (It used to spin on a hung-up inbox
    until its deadline, burning a core.)"""

    def target(ctx):
        ctx.notify("mine")
        ctx.wait("mine")  # its own notify counts
        t0 = time.process_time()
        try:
            ctx.wait("nobody", timeout=T)
        except Exception as exc:
            return type(exc).__name__, str(exc), time.process_time() - t0
        return "returned", "", 0.0

    t0 = time.monotonic()
    o = run_ranks(target, 1, timeout=T).outcomes[0]
    assert time.monotonic() - t0 < T / 2
    kind, message, cpu = o.value
    assert kind == "SyncError"
    assert "wait('nobody') can never finish: world_size is 1" in message
    assert cpu < 1.0
