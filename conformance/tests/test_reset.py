"""RESET: teardown, what other ranks see, re-init after reset, the generation counter."""

from __future__ import annotations

import pytest

from tpbcast.conformance._checks import record_unjudged
from tpbcast.conformance._results import Verdict
from tpbcast.conformance.plugin import require
from tpbcast.harness import wire

from . import _support as s
from . import _watch

WANT = [64]
# RESET-7: how soon the other rank's pending broadcast must fail after a reset (its own
# io deadline is IO, well above this, so only the reset can end it in time).  A reset
# closes at once: PROMPT is scheduling margin only.
PROMPT = s.MARGIN
IO = 10.0


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
        s.check(
            "RESET-1",
            fresh == [None] * 3,
            "reset succeeds three times on a fresh instance",
            fresh,
            rank=outcome.rank,
        )
        s.check(
            "RESET-1",
            again == [None] * 3,
            "reset succeeds three times in a row after initialize",
            again,
            rank=outcome.rank,
        )


@pytest.mark.clause("RESET-2", "RESET-3", "RESET-4", "HYG-3")
@pytest.mark.world_size(2, 3)
def test_reset_closes_fds_removes_socket_and_uninitializes(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        before = s.fd_table()
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        opened = s.new_fds(before, bcast)
        s.group_roundtrip(ctx, bcast, WANT)
        ctx.sync("done")
        bcast.reset()
        observed = (
            opened,
            s.new_fds(before, bcast),
            s.kind_of(wire.socket_path(ctx.base_path)),
            s.initialized(bcast),
        )
        # An adapter answering for its engine costs only RESET-4's checks: the fds and
        # the socket above are still the engine's.
        return (*observed, s.asked(bcast.broadcast, bytearray(8)))

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        opened, leaked, _, initialized, raised = outcome.value
        s.precondition(
            "RESET-2", opened, f"rank {outcome.rank} opened no fd at all: nothing to judge"
        )
        s.check(
            "RESET-2",
            not leaked,
            "reset closes every fd the instance opened",
            f"still open: {leaked}",
            rank=outcome.rank,
        )
        s.check(
            "HYG-3",
            not leaked,
            "after reset the process's fds are those before initialize",
            f"new since before initialize: {leaked}",
            rank=outcome.rank,
        )
        s.check(
            "RESET-4",
            initialized is False,
            "after reset is_initialized() is false",
            initialized,
            rank=outcome.rank,
        )
        if isinstance(raised, s.NotAsked):
            # The engine has no not-initialized state, RESET-4's subject: a FAIL of it, as
            # the clause registry says (``about``), never a PASS of the adapter's answer.
            record_unjudged(
                "RESET-4", Verdict.UNSUPPORTED, f"rank {outcome.rank}: {raised.message}"
            )
        elif s.check(
            "RESET-4",
            raised is not None,
            "after reset broadcast raises",
            "it returned",
            rank=outcome.rank,
        ) and tpbcast_impl.supports("error_details"):
            s.check(
                "RESET-4",
                raised.is_a("RuntimeError"),
                "a not-initialized error (RuntimeError)",
                raised,
                rank=outcome.rank,
            )
    left = result.outcomes[0].value[2]
    s.check(
        "RESET-3",
        left == "missing",
        "no file remains at the rank-0 socket path",
        f"a {left} is still there",
        rank=0,
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
        got = outcome.value
        if outcome.rank < 2:
            s.check(
                "RESET-5",
                got[:2] == pair,
                "re-init with the same arguments after reset works",
                got[:2],
                rank=outcome.rank,
            )
        s.check(
            "RESET-6",
            got[-1:] == trio,
            "re-init with a new path and world size after reset works",
            got,
            rank=outcome.rank,
        )


@pytest.mark.idle_wait
@pytest.mark.clause("RESET-7", "FAULT-3")
def test_peer_sees_root_reset_as_closed(tpbcast_run, tpbcast_impl):
    def target(ctx):
        before = s.fd_table()
        bcast = s.make(tpbcast_impl, io=IO)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            ctx.wait("peer_waiting", timeout=10)
            bcast.reset()
            # A reset that leaves the link open would leave the peer waiting (for ever
            # without an io deadline): release it once PROMPT has passed.
            if _watch.notified(ctx, "peer_done", PROMPT + 1.0):
                return 0
            return _watch.shutdown_leaked(before, bcast)
        ctx.notify("peer_waiting")
        # A transport the suite cannot release (a ring without teardown notice and without
        # an io deadline) would hold this call past the group deadline: watch it for a
        # bounded time instead, so the clause is judged, not the harness's deadline.
        call = _watch.Call(bcast.broadcast, bytearray(1000))
        if not call.wait(PROMPT + 2.0 + s.MARGIN):
            ctx.notify("peer_done")
            return "blocked"  # never touch a busy instance again
        raised = call.ended().raised
        ctx.notify("peer_done")
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    released, raised = result.outcomes[0].value, result.outcomes[1].value
    blocked = raised == "blocked"
    s.check(
        "RESET-7",
        not blocked and raised is not None and raised.elapsed < PROMPT and not released,
        f"a pending broadcast fails within {PROMPT:g} s when rank 0 resets (io deadline {IO:g} s)",
        ("still blocked " + f"{PROMPT + 2.0 + s.MARGIN:g} s after it started" if blocked else "")
        or f"{raised or 'it returned'}"
        + (
            f"; rank 0's reset left {released} link(s) open: the suite shut them down"
            if released
            else ""
        ),
        rank=1,
    )
    if not s.staged_elsewhere(
        "FAULT-3",
        not blocked,
        "the pending broadcast never ended: no error to read",
        "test_fault.py::test_dead_peer_never_kills_rank0_during_broadcast",
    ):
        return
    s.precondition("FAULT-3", raised is not None, "the broadcast did not fail: no error to read")
    s.check("FAULT-3", "success" not in raised.message.lower(), "never 'Success'", raised, rank=1)
    s.check(
        "FAULT-3",
        "clos" in raised.message.lower() or "eof" in raised.message.lower(),
        "an EOF is reported as the peer having closed",
        raised,
        rank=1,
    )


@pytest.mark.clause("RESET-7")
def test_root_sees_peer_reset_as_closed(tpbcast_run, tpbcast_impl):
    def target(ctx):
        before = s.fd_table()
        bcast = s.make(tpbcast_impl, io=IO)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 1:
            bcast.reset()
            ctx.notify("peer_reset")
            # A reset that leaves the link open would leave the root blocked writing
            # (for ever without an io deadline): release it once PROMPT has passed.
            if _watch.notified(ctx, "root_done", PROMPT + 1.0):
                return 0
            return _watch.shutdown_leaked(before, bcast)
        ctx.wait("peer_reset", timeout=10)
        raised = s.attempt(bcast.broadcast, bytearray(8 * s.MiB))
        ctx.notify("root_done")
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, released = result.outcomes[0].value, result.outcomes[1].value
    s.check(
        "RESET-7",
        raised is not None and raised.elapsed < PROMPT and not released,
        f"the root's broadcast fails within {PROMPT:g} s when a peer has reset "
        f"(io deadline {IO:g} s)",
        f"{raised or 'it returned'}"
        + (
            f"; the peer's reset left {released} link(s) open: the suite shut them down"
            if released
            else ""
        ),
        rank=0,
    )


@pytest.mark.clause("RESET-8")
@pytest.mark.staged_via("uds-v1")  # s.fail_init_then_broadcast: a rogue peer
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
    for rank, got in ((0, digest), (1, result.outcomes[1].value)):
        s.check(
            "RESET-8",
            got == want,
            "after a failed initialize and a failed broadcast, reset + initialize works",
            f"digests {got}, want {want}",
            rank=rank,
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
        s.check(
            "RESET-9",
            isinstance(g0, int) and outcome.value == [g0, g0 + 1, g0 + 1, g0 + 2, g0 + 3],
            "generation: +1 per reset (also uninitialized), unchanged by initialize "
            "(fresh, reset, initialize, reset, reset)",
            outcome.value,
            rank=outcome.rank,
        )
