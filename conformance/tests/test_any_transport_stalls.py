"""Core clauses about stalled ranks and racing calls, staged for every transport.

The area files stage TIME-5 and BCAST-14 through uds-v1 rogues and byte-level roots
(``staged_via``), and FAULT-8 through a broadcast that fails on a dead peer at once, which
an implementation that buffers broadcasts in a ring never does.  These stage the same
clauses with what every CPU TP broadcaster has: a rank that is alive but does not call
broadcast, a rank the harness kills, ``reset()`` from another thread; and each releases the
wait it provokes itself once its bound has passed (a reset of the stalled side), so a
missing deadline ends FAIL, not ERROR at the group deadline.
"""

from __future__ import annotations

import os
import signal

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import Status, observe

from . import _support as s
from . import _watch
from .test_time import _follows, _Pair


def _release_note(released):
    return "; the suite released the call after its bound" if released else ""


def _blocked_values(cid, outcomes, stalled, blocked, who):
    """The stalled side's ``released`` flags and the blocked side's values, or None once a
    blocked rank is judged: one the group deadline had to stop waited past its io deadline
    and past the stalled side's reset (an engine whose reset frees nothing, or that has no
    deadline), which is ``cid``'s FAIL with its stack, not an ERROR of the group."""
    for rank in stalled:
        s.fault_happened(cid, outcomes[rank].faults, outcomes[rank].summary())
    hung = [outcomes[r] for r in blocked if outcomes[r].status is Status.TIMED_OUT]
    for outcome in hung:
        stack = "\n".join((outcome.stack_dump or "(no stack dump)").strip().splitlines()[:12])
        s.check(
            cid,
            False,
            f"{who} ends with an error within its io deadline",
            "still blocked when the group deadline stopped it, after its deadline and "
            f"after the stalled side's reset. Stack:\n{stack}",
            rank=outcome.rank,
        )
    if hung:
        return None
    # A stalled rank stopped in its own reset is that reset's defect, not this clause's.
    others = [outcomes[r] for r in stalled if outcomes[r].status is not Status.TIMED_OUT]
    for outcome in (*others, *(outcomes[r] for r in blocked)):
        s.precondition(cid, outcome.status is Status.OK, outcome.summary())
    released = any(outcome.value for outcome in others)
    return released, [outcomes[r].value for r in blocked]


def _names_peer_and_total(raised, ranks, peer, size, who):
    """TIME-5 with error_details: each blocked rank's error names the stalled side and the
    call's byte total."""
    for rank, r in zip(ranks, raised, strict=True):
        if r is not None:
            s.check(
                "TIME-5",
                r.attrs.get("peer") == peer and r.attrs.get("bytes_total") == size,
                f"the error names {who} and bytes total ({size})",
                r.attrs,
                rank=rank,
            )


@pytest.mark.clause("TIME-5")
def test_root_stalled_by_a_peer_that_stops_reading(tpbcast_run, tpbcast_impl):
    """Two groups side by side, the root's io deadline _LOW / _HIGH: rank 1 initializes and
    then reads nothing.  The root broadcasts 1 MiB payloads until one fails (past any ring
    or socket buffer); that call must fail within the deadline and follow the setting.  A
    root still blocked after its bound is released by rank 1's reset."""
    require(tpbcast_impl, "deadlines")
    size = s.MiB

    def target(ctx):
        sub = _Pair(ctx, 2)
        if sub.rank == 1:
            bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=s.PATIENCE)
            bcast.initialize(1, 2, sub.base_path)
            ctx.record("fault", action="rank 1 stops reading after initialize")
            released = not _watch.notified(sub, "root_done", sub.deadline + s.MARGIN + 1)
            bcast.reset()  # ends a root that has no deadline of its own (the fault's end)
            return released
        bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=sub.deadline)
        bcast.initialize(0, 2, sub.base_path)
        raised, sent = None, 0
        for i in range(s.dead_peer_rounds(bcast)):
            raised = s.attempt(bcast.broadcast, bytearray(s.payload(ctx.seed, size, i)))
            if raised is not None:
                break
            sent += 1
        sub.notify("root_done")
        bcast.reset()
        return raised, sent

    result = tpbcast_run(
        target, 4, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT + 10
    )
    judged = _blocked_values(
        "TIME-5", result.outcomes, (1, 3), (0, 2), "a root broadcasting to a stopped reader"
    )
    if judged is None:
        return
    released, values = judged
    raised = tuple(value[0] for value in values)
    _follows(
        "TIME-5",
        "a root broadcasting to a peer that stopped reading" + _release_note(released),
        raised,
        ranks=(0, 2),
    )
    if tpbcast_impl.supports("error_details"):
        _names_peer_and_total(raised, (0, 2), 1, size, "peer 1")


@pytest.mark.clause("TIME-5")
def test_peer_stalled_by_a_root_that_stops_writing(tpbcast_run, tpbcast_impl):
    """Two groups side by side, the peer's io deadline _LOW / _HIGH: the root broadcasts one
    payload, then stops (alive, initialized).  The peer gets the first and its second
    broadcast must fail within the deadline, following the setting.  A peer still blocked
    after its bound is released by the root's reset."""
    require(tpbcast_impl, "deadlines")
    size = 4096

    def target(ctx):
        sub = _Pair(ctx, 2)
        io = sub.deadline if sub.rank == 1 else s.PATIENCE
        bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=io)
        bcast.initialize(sub.rank, 2, sub.base_path)
        data = s.payload(ctx.seed, size, "t5")
        if sub.rank == 0:
            bcast.broadcast(bytearray(data))
            ctx.record("fault", action="rank 0 stops writing after one broadcast")
            released = not _watch.notified(sub, "peer_done", sub.deadline + s.MARGIN + 1)
            bcast.reset()  # ends a peer that has no deadline of its own (the fault's end)
            return released
        first = bytearray(size)
        bcast.broadcast(first)
        raised = s.attempt(bcast.broadcast, bytearray(size))
        sub.notify("peer_done")
        bcast.reset()
        return raised, bytes(first) == data

    result = tpbcast_run(
        target, 4, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT + 10
    )
    judged = _blocked_values(
        "TIME-5", result.outcomes, (0, 2), (1, 3), "a peer whose root stopped writing"
    )
    if judged is None:
        return
    released, values = judged
    for rank, value in zip((1, 3), values, strict=True):
        s.precondition("TIME-5", value[1], f"rank {rank} never got the first payload intact")
    raised = tuple(value[0] for value in values)
    _follows(
        "TIME-5",
        "a peer whose root stopped writing" + _release_note(released),
        raised,
        ranks=(1, 3),
    )
    if tpbcast_impl.supports("error_details"):
        _names_peer_and_total(raised, (1, 3), 0, size, "rank 0")


# How long rank 2 may go on waiting after the root's broadcast failed (the root waits
# that long before its own reset, which would release rank 2 whatever the failure did).
_F8_PROMPT = s.MARGIN


@pytest.mark.clause("FAULT-8")
def test_root_failure_on_a_dead_peer_releases_the_others(tpbcast_run, tpbcast_impl):
    """World 3, rank 1 SIGKILLed after initialize.  Rank 0 (io 1 s) broadcasts until one
    call fails: at once on the dead peer, or at its io deadline once a ring or socket
    buffer is full; rank 2 (io 10 s) reads every broadcast it gets.  Once the root's
    broadcast has failed, and before the root resets, rank 2's pending broadcast must end
    within :data:`_F8_PROMPT` s, not wait out its own io deadline.  (test_fault.py's
    FAULT-8 needs a root that fails on the dead peer at once.)"""
    size = 64 * 1024

    def drain(bcast):
        received = 0
        while True:
            bcast.broadcast(bytearray(size))  # raises once the root is gone or aborted
            received += 1

    def target(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # surviving SIGPIPE is FAULT-1's
        io = 1.0 if ctx.rank == 0 else s.PATIENCE
        bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=io)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        if ctx.rank == 1:
            s.publish_pid(ctx)
            ctx.record("fault", action="SIGKILL of rank 1 after initialize")
            observe.kill(os.getpid())
        if ctx.rank == 2:
            call = _watch.Call(drain, bcast)
            if not _watch.notified(ctx, "root_failed", s.GROUP_TIMEOUT):
                return None  # the root never failed: judged on rank 0's report
            ended = call.wait(_F8_PROMPT)
            if ended:
                ctx.notify("peer2_done")
            return call.ended()
        s.wait_dead(ctx, 1, "FAULT-8")
        rounds = s.dead_peer_rounds(bcast)

        def until_failure():
            for i in range(rounds):
                raised = s.attempt(bcast.broadcast, bytearray(s.payload(ctx.seed, size, i)))
                if raised is not None:
                    return raised
            return None

        call = _watch.Call(until_failure)
        # A root with no deadline on a ring that never notices the death blocks here.
        if not call.wait(s.GROUP_TIMEOUT / 2) or call.ended().value is None:
            return None
        ctx.notify("root_failed")
        before_reset = _watch.notified(ctx, "peer2_done", _F8_PROMPT + 1)
        bcast.reset()
        return call.ended().value, before_reset

    result = tpbcast_run(
        target, 3, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT + 10
    )
    root, victim, peer2 = result.outcomes
    s.killed("FAULT-8", victim)
    if not s.stageable(
        "FAULT-8",
        root.status is Status.OK and root.value is not None,
        "the root's broadcasts to a dead peer never failed (FAULT-1's subject): nothing to "
        f"abort ({root.summary()})",
    ):
        return
    root_raised, before_reset = root.value
    if not s.check(
        "FAULT-8",
        peer2.status is Status.OK and peer2.value is not None,
        "rank 2 neither hangs nor dies when the root's broadcast fails",
        peer2.summary(),
        rank=2,
    ):
        return
    ended = peer2.value
    s.check(
        "FAULT-8",
        ended.done and ended.raised is not None and before_reset,
        f"after the root's broadcast failed ({root_raised}), rank 2's pending broadcast "
        f"fails within {_F8_PROMPT:g} s, before the root's reset (io deadline {s.PATIENCE:g} s)",
        f"rank 2 was still waiting {_F8_PROMPT:g} s later"
        if not ended.done
        else f"rank 2's broadcast ended: {ended.raised or 'it returned'}",
        rank=2,
    )


@pytest.mark.clause("BCAST-14")
def test_reset_racing_a_pending_broadcast(tpbcast_run, tpbcast_impl):
    """Rank 1's broadcast waits in another thread (rank 0 has sent nothing) when rank 1's
    main thread calls reset() and then opens a pipe holding 10 bytes (the fd numbers the
    reset freed are reused).  Only then does rank 0 broadcast, which releases a reset that
    waits for the broadcast.  The reset must return, the broadcast must end, either failed
    or with exactly the root's payload, and it must never read the pipe.  (The uds-v1 test
    holds the root's link open from a byte-level root; this one needs none.)"""
    size = 64 * 1024
    data = s.payload(tpbcast_run.seed, size, "b14")
    bound = s.PATIENCE

    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=s.PATIENCE)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            _watch.notified(ctx, "peer_reset_called", s.GROUP_TIMEOUT / 2)
            sent = s.attempt(bcast.broadcast, bytearray(data))  # may fail: the peer reset
            _watch.notified(ctx, "peer_done", bound + s.MARGIN)
            bcast.reset()
            return sent
        buf = bytearray(size)
        pending = _watch.Call(bcast.broadcast, buf)
        in_flight = not pending.wait(s.SHORT)  # nothing was sent: it must be waiting
        ctx.record("fault", action="reset() while a broadcast waits in another thread")
        reset = _watch.Call(bcast.reset)
        rd, wr = os.pipe()
        os.write(wr, b"0123456789")
        ctx.notify("peer_reset_called")
        reset_ended = reset.wait(bound)
        broadcast_ended = pending.wait(bound)
        ctx.notify("peer_done")
        os.set_blocking(rd, False)
        try:
            left = os.read(rd, 100)
        except BlockingIOError:
            left = b""
        os.close(rd)
        os.close(wr)
        got = bytes(buf)
        return (
            in_flight,
            reset.ended() if reset_ended else None,
            pending.ended() if broadcast_ended else None,
            left,
            got == data,
            got == bytes(size),
        )

    result = tpbcast_run(target, 2, fail_fast=False, expect_failure=True, timeout=3 * bound)
    peer = result.outcomes[1]
    if not s.check(
        "BCAST-14",
        peer.status is Status.OK,
        "the rank whose reset races its broadcast lives on",
        peer.summary(),
        rank=1,
    ):
        return
    in_flight, reset, pending, left, intact, untouched = peer.value
    s.fault_happened("BCAST-14", in_flight, "the broadcast ended before reset() was called")
    s.check(
        "BCAST-14",
        reset is not None and reset.raised is None,
        "reset() returns while (or once) a broadcast is in flight",
        "still blocked after the bound" if reset is None else reset.raised,
        rank=1,
    )
    if not s.check(
        "BCAST-14",
        pending is not None,
        "the in-flight broadcast ends (fails, or completes once the root sends)",
        f"still running {bound:g} s after the reset and the root's broadcast",
        rank=1,
    ):
        return
    s.check(
        "BCAST-14",
        pending.raised is not None or intact,
        "the broadcast fails cleanly or delivers exactly the root's payload",
        "it returned, its buffer "
        + ("untouched" if untouched else "holding bytes that are not the root's payload"),
        rank=1,
    )
    s.check(
        "BCAST-14",
        left == b"0123456789",
        "the broadcast never reads a closed or reused fd",
        f"a pipe opened after reset held {left!r}, not b'0123456789'",
        rank=1,
    )


@pytest.mark.clause("BCAST-15")
def test_second_broadcast_while_one_is_pending(tpbcast_run, tpbcast_impl):
    """MAY: rank 1's first broadcast waits in one thread (rank 0 has sent nothing) when a
    second broadcast on the same instance starts in another.  If the implementation refuses
    the second, the error must say why; a second call that waits its turn instead shows the
    optional refusal absent (the clause holds: reported as absent, not UNSUPPORTED).  Rank 0
    then sends two payloads, which ends whatever still waits.  (The uds-v1 test holds the
    link from a byte-level root.)"""
    refusal = 1.0  # a refusal is immediate; the second call still waiting then is not one

    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=s.PATIENCE, init=s.PATIENCE, io=s.PATIENCE)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            _watch.notified(ctx, "second_tried", s.GROUP_TIMEOUT / 2)
            for i in range(2):
                s.attempt(bcast.broadcast, bytearray(s.payload(ctx.seed, 64, ("b15", i))))
            _watch.notified(ctx, "peer_done", s.PATIENCE + s.MARGIN)
            bcast.reset()
            return None
        first = _watch.Call(bcast.broadcast, bytearray(64))
        in_flight = not first.wait(s.SHORT)  # nothing was sent: it must be waiting
        ctx.record("fault", action="a second broadcast while the first is pending")
        second = _watch.Call(bcast.broadcast, bytearray(64))
        refused = second.wait(refusal) and second.ended().raised is not None
        outcome = second.ended()
        ctx.notify("second_tried")
        ended = first.wait(s.PATIENCE) and second.wait(s.PATIENCE)
        ctx.notify("peer_done")
        if ended:
            bcast.reset()
        return in_flight, refused, outcome

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT + 10)
    in_flight, refused, outcome = result.outcomes[1].value
    s.fault_happened("BCAST-15", in_flight, "the first broadcast was not pending")
    if not s.optional_present(
        "BCAST-15",
        refused,
        "a second broadcast while one is pending "
        + ("waited its turn" if not outcome.done else "returned"),
    ):
        return
    s.check_refusal_says_concurrent(outcome.raised, rank=1)
