"""Bounded waits for every transport: a dead peer or a dead root ends a call with an error.

Whatever the transport (socket fan-out, shared-memory ring), a call
blocked by a dead or vanished peer or root must end with an error within the bound the SPEC
states (:data:`DEAD_BOUND`, FAULT-1 and FAULT-2), with the implementation's *default*
deadlines: no deadline is a FAIL here, not UNSUPPORTED.  The faults are process faults (the
rank, or its whole process group, SIGKILLed), observed from outside: the suite proves the
victim is gone (/proc) before it starts the clock.  The root keeps broadcasting past any
plausible ring or socket buffer (``_support.dead_peer_rounds``: at least 64 broadcasts, and more
than the ``buffered_broadcasts`` the adapter declares), so a ring that absorbs a few
broadcasts for a dead reader cannot hide the death.

A call that is still blocked when the group's deadline fires is *judged*, not waited out:
the harness stops the rank with its stack dumped, and the test turns that into the clause's
FAIL ("rank 0 still blocked 15.2 s after the death, in broadcast 7 of 64", with the stack),
if more than the bound has passed since the death (else it is inconclusive).
The group deadline is :data:`DEAD_BOUND` plus a wide margin, so a correct implementation
on a loaded machine is never near it.
"""

from __future__ import annotations

import os
import time

import pytest

from tpbcast.harness import Status, observe

from . import _support as s

DEAD_BOUND = 10.0
"""FAULT-1 and FAULT-2's bound (SPEC): seconds from the death to the error."""
GROUP_DEADLINE = DEAD_BOUND + 8.0
"""A correct implementation is done in milliseconds; a call still blocked here is judged:
FAIL if more than DEAD_BOUND has passed since the death, else inconclusive."""
PAYLOAD = 1024
"""Small on purpose: a socket buffer or a ring slot holds many, so only detection helps."""

# Every test here waits out the bound against an engine that does not meet it: they
# overlap on the run's extra workers (conformance/_overlap.py).
pytestmark = pytest.mark.idle_wait


def _die(ctx, how: str) -> None:
    """SIGKILL this rank, or its whole process group (helper processes included)."""
    ctx.record("fault", action=f"SIGKILL of the rank's {how}")
    if how == "process group":
        observe.kill(os.getpid(), group=True)
    observe.kill(os.getpid())


def _progress(ctx, text: str) -> None:
    with open(os.path.join(ctx.workdir, f"progress{ctx.rank}"), "w") as fh:
        fh.write(text)


def _read_progress(workdir: str, rank: int) -> str:
    try:
        with open(os.path.join(workdir, f"progress{rank}")) as fh:
            return fh.read()
    except FileNotFoundError:
        return "before its first broadcast"


def _stack_head(outcome) -> str:
    """The innermost frames of the hung rank's dump (faulthandler prints them first)."""
    lines = (outcome.stack_dump or "").strip().splitlines()
    return "\n".join(lines[:12]) if lines else "(no stack dump)"


def _mark_death(ctx) -> None:
    """Record, on the wall clock the test body shares, when the death was seen or caused."""
    with open(os.path.join(ctx.workdir, "death"), "w") as fh:
        fh.write(repr(time.time()))


def _since_death(workdir: str) -> float | None:
    try:
        with open(os.path.join(workdir, "death")) as fh:
            return time.time() - float(fh.read())
    except (OSError, ValueError):
        return None


def _check_not_hung(cid: str, outcome, workdir: str, who: str) -> bool:
    """FAIL ``cid`` if the harness had to stop ``outcome``'s rank more than DEAD_BOUND after
    the death: it waited past the bound.  Stopped sooner (a slow start on a loaded machine
    ate the group's margin) it is inconclusive: :func:`_support.precondition`, ERROR."""
    if outcome.status is not Status.TIMED_OUT:
        return True
    since = _since_death(workdir)
    s.precondition(
        cid,
        since is not None and since > DEAD_BOUND,
        f"rank {outcome.rank} was stopped by the group deadline "
        f"{'before the death' if since is None else f'{since:.1f} s after the death'}, "
        f"not past the {DEAD_BOUND:g} s bound: inconclusive",
    )
    s.check(
        cid,
        False,
        f"{who} ends with an error within {DEAD_BOUND:.0f} s",
        f"still blocked {since:.1f} s after the death, "
        f"{_read_progress(workdir, outcome.rank)}; the harness stopped it. Stack:\n"
        f"{_stack_head(outcome)}",
        rank=outcome.rank,
    )
    return False


KILLS = pytest.mark.parametrize("how", ["process", "process group"])


@pytest.mark.clause("FAULT-1")
@KILLS
def test_dead_peer_ends_the_roots_broadcasts_within_the_bound(tpbcast_run, tpbcast_impl, how):
    def target(ctx):
        bcast = s.make(tpbcast_impl)  # default deadlines: the bound holds for everyone
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 1:
            s.publish_pid(ctx)
            _die(ctx, how)
        died = s.wait_dead(ctx, 1, "FAULT-1")
        _mark_death(ctx)
        rounds = s.dead_peer_rounds(bcast)
        buf = bytearray(PAYLOAD)
        for i in range(rounds):
            _progress(ctx, f"in broadcast {i + 1} of {rounds}")
            raised = s.attempt(bcast.broadcast, buf)
            if raised is not None:
                return i + 1, rounds, raised, time.monotonic() - died
        return rounds, rounds, None, time.monotonic() - died

    result = tpbcast_run(
        target, 2, sigpipe="default", fail_fast=False, expect_failure=True, timeout=GROUP_DEADLINE
    )
    root, victim = result.outcomes
    s.killed("FAULT-1", victim)
    if not _check_not_hung("FAULT-1", root, result.workdir, "rank 0's broadcast to a dead peer"):
        return
    if root.status is not Status.OK and _since_death(result.workdir) is None:
        result.raise_for_failure()  # rank 0 failed before the fault: the group's own failure
    if not s.check(
        "FAULT-1",
        root.status is Status.OK,
        "rank 0 survives a dead peer (SIGPIPE at its default action)",
        root.summary(),
        rank=0,
    ):
        return
    done, rounds, raised, after = root.value
    if not s.check(
        "FAULT-1",
        raised is not None,
        f"one of {rounds} broadcasts to a dead peer raises",
        f"all {rounds} returned although peer 1 was dead",
        rank=0,
    ):
        return
    s.check(
        "FAULT-1",
        after <= DEAD_BOUND,
        f"the error comes within {DEAD_BOUND:.0f} s of the death",
        f"after {after:.1f} s, in broadcast {done}: {raised}",
        rank=0,
    )
    s.check("FAULT-1", s.mentions(raised, 1), "the error names peer 1", raised, rank=0)


@pytest.mark.clause("FAULT-2")
@KILLS
def test_dead_root_ends_every_peers_broadcast_within_the_bound(tpbcast_run, tpbcast_impl, how):
    def target(ctx):
        bcast = s.make(tpbcast_impl)  # default deadlines: the bound holds for everyone
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        buf = bytearray(s.payload(7, PAYLOAD) if ctx.rank == 0 else PAYLOAD)
        bcast.broadcast(buf)  # one good round: the group works before the fault
        if ctx.rank == 0:
            s.publish_pid(ctx)
            ctx.wait("pending1", timeout=s.PATIENCE)
            ctx.wait("pending2", timeout=s.PATIENCE)
            _mark_death(ctx)
            _die(ctx, how)
        ctx.notify(f"pending{ctx.rank}")
        _progress(ctx, "in its second broadcast (rank 0 dies meanwhile)")
        return s.attempt(bcast.broadcast, bytearray(PAYLOAD))

    result = tpbcast_run(target, 3, fail_fast=False, expect_failure=True, timeout=GROUP_DEADLINE)
    root, *peers = result.outcomes
    s.killed("FAULT-2", root)
    for peer in peers:
        who = f"peer {peer.rank}'s pending broadcast after rank 0 died"
        if not _check_not_hung("FAULT-2", peer, result.workdir, who):
            continue
        if not s.check(
            "FAULT-2",
            peer.status is Status.OK,
            f"peer {peer.rank} lives on",
            peer.summary(),
            rank=peer.rank,
        ):
            continue
        raised = peer.value
        if s.check(
            "FAULT-2",
            raised is not None,
            f"{who} raises",
            "it returned as if rank 0 had sent a payload",
            rank=peer.rank,
        ):
            s.check(
                "FAULT-2",
                raised.elapsed <= DEAD_BOUND,  # the call began just before the death
                f"{who} ends within {DEAD_BOUND:.0f} s of the death",
                raised,
                rank=peer.rank,
            )
