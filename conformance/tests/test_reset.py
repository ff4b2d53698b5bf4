"""RESET: teardown, what other ranks see, re-init after reset, the generation counter."""

from __future__ import annotations

import pytest

from tpbcast.conformance.plugin import require

from . import _support as s

WANT = [64]


@pytest.mark.clause("RESET-1")
def test_reset_is_idempotent(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        fresh = [s.attempt(bcast.reset) for _ in range(3)]
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        again = [s.attempt(bcast.reset) for _ in range(3)]
        return fresh, again

    for outcome in tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes:
        fresh, again = outcome.value
        assert fresh == [None] * 3, s.clause(
            "RESET-1", "reset on a fresh instance", fresh, rank=outcome.rank
        )
        assert again == [None] * 3, s.clause(
            "RESET-1", "reset three times in a row", again, rank=outcome.rank
        )


@pytest.mark.clause("RESET-2", "RESET-3", "RESET-4", "HYG-3")
@pytest.mark.world_size(2, 3)
def test_reset_closes_fds_removes_socket_and_uninitializes(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        before = s.fd_table()
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        opened = s.new_fds(before)
        s.group_roundtrip(ctx, bcast, WANT)
        ctx.sync("done")
        bcast.reset()
        return (
            opened,
            s.new_fds(before),
            s.kind_of(s.sock_path(ctx.base_path)),
            bcast.is_initialized(),
            s.attempt(bcast.broadcast, bytearray(8)),
        )

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        opened, leaked, _, initialized, raised = outcome.value
        s.precondition(
            "RESET-2", opened, f"rank {outcome.rank} opened no fd at all: nothing to judge"
        )
        assert not leaked, s.clause(
            "RESET-2",
            "reset closes every fd it opened",
            leaked,
            rank=outcome.rank,
        )
        assert not initialized and raised is not None, s.clause(
            "RESET-4",
            "after reset: not initialized, broadcast raises",
            (initialized, raised),
            rank=outcome.rank,
        )
        if tpbcast_impl.supports("error_details"):
            assert raised.is_a("RuntimeError"), s.clause(
                "RESET-4", "not-initialized", raised, rank=outcome.rank
            )
    assert result.outcomes[0].value[2] == "missing", s.clause(
        "RESET-3", "no file remains at the rank-0 socket path", result.outcomes[0].value[2]
    )


@pytest.mark.clause("RESET-5", "RESET-6")
def test_reinit_after_reset_same_and_new_path(tpbcast_run, tpbcast_impl):
    """Round 1: ranks 0-1 at path A; round 2: same path; round 3: all 3 ranks at path B."""

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        digests = []
        if ctx.rank < 2:
            for round_ in (1, 2):
                if ctx.rank == 1 and round_ == 2:
                    # Never connect to rank 0's old listener before it has reset.
                    ctx.wait("rank0_reset", timeout=15)
                bcast.initialize(ctx.rank, 2, ctx.base_path)
                digests += s.group_roundtrip(ctx, bcast, WANT, salt=round_)
                bcast.reset()
                if ctx.rank == 0 and round_ == 1:
                    ctx.notify("rank0_reset")
        ctx.sync("round3")
        bcast.initialize(ctx.rank, 3, ctx.base_path + "B")
        digests += s.group_roundtrip(ctx, bcast, WANT, salt=3)
        bcast.reset()
        return digests

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    seed = result.seed
    pair = s.expected_digests(seed, WANT, salt=1) + s.expected_digests(seed, WANT, salt=2)
    trio = s.expected_digests(seed, WANT, salt=3)
    for outcome in result.outcomes:
        want = (pair if outcome.rank < 2 else []) + trio
        got = outcome.value
        if outcome.rank < 2:
            assert got[:2] == pair, s.clause(
                "RESET-5",
                "re-init with the same arguments after reset works",
                got[:2],
                rank=outcome.rank,
            )
        assert got == want, s.clause(
            "RESET-6",
            "re-init with a new path and world size after reset works",
            got,
            rank=outcome.rank,
        )


@pytest.mark.clause("RESET-7", "FAULT-3")
def test_peer_sees_root_reset_as_closed(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl, io=10.0)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            ctx.wait("peer_waiting", timeout=10)
            bcast.reset()
            return None
        ctx.notify("peer_waiting")
        raised = s.attempt(bcast.broadcast, bytearray(1000))
        bcast.reset()
        return raised

    raised = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert raised is not None and raised.elapsed < 5.0, s.clause(
        "RESET-7", "a pending broadcast fails promptly when rank 0 resets", raised
    )
    assert "success" not in raised.message.lower(), s.clause("FAULT-3", "never 'Success'", raised)
    assert "clos" in raised.message.lower() or "eof" in raised.message.lower(), s.clause(
        "FAULT-3", "an EOF is reported as the peer having closed", raised
    )


@pytest.mark.clause("RESET-7")
def test_root_sees_peer_reset_as_closed(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl, io=10.0)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 1:
            bcast.reset()
            ctx.notify("peer_reset")
            return None
        ctx.wait("peer_reset", timeout=10)
        raised = s.attempt(bcast.broadcast, bytearray(8 * s.MiB))
        bcast.reset()
        return raised

    raised = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    assert raised is not None and raised.elapsed < 5.0, s.clause(
        "RESET-7", "the root's broadcast fails promptly when a peer has reset", raised
    )


@pytest.mark.clause("RESET-8")
def test_reset_then_reinit_after_failed_initialize_and_broadcast(tpbcast_run, tpbcast_impl):
    def target(ctx):
        failed_init, failed_bcast, bcast = s.fail_init_then_broadcast(
            ctx, tpbcast_impl, bad_rank=5, after=10
        )
        if ctx.rank == 0:
            bcast.initialize(0, 2, ctx.base_path)
            digest = s.group_roundtrip(ctx, bcast, WANT)
            bcast.reset()
            return failed_init, failed_bcast, digest
        ctx.wait("failures_done", timeout=15)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(1, 2, ctx.base_path)
        digest = s.group_roundtrip(ctx, bcast, WANT)
        bcast.reset()
        return digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    failed_init, failed_bcast, digest = result.outcomes[0].value
    s.precondition(
        "RESET-8", failed_init is not None and failed_bcast is not None, "the faults did not happen"
    )
    want = s.expected_digests(result.seed, WANT)
    assert digest == want and result.outcomes[1].value == want, s.clause(
        "RESET-8", "after a failed initialize and a failed broadcast, reset + init works", digest
    )


@pytest.mark.clause("RESET-9")
def test_generation_counts_every_reset(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "generation")

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        seen = [bcast.generation]
        bcast.reset()
        seen.append(bcast.generation)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        seen.append(bcast.generation)
        bcast.reset()
        seen.append(bcast.generation)
        bcast.reset()
        seen.append(bcast.generation)
        return seen

    for outcome in tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes:
        g0 = outcome.value[0]
        assert isinstance(g0, int) and outcome.value == [g0, g0 + 1, g0 + 1, g0 + 2, g0 + 3], (
            s.clause(
                "RESET-9",
                "generation: +1 per reset (also uninitialized), unchanged by initialize",
                outcome.value,
                rank=outcome.rank,
            )
        )
