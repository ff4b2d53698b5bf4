"""FAULT-12, all or nothing: every rank returns the root's bytes, or every rank raises.

Staged with process faults every transport has (a rank SIGKILLed or SIGSTOPped at a point
of its own call, chosen from outside the implementation), so a Unix-socket wire, a
shared-memory ring and vLLM's queue are judged alike.  World 3; rank 2 or rank 0 is the
victim.  Points: before its call, during it (a seeded delay after the call started, a
payload large enough to span several socket or ring buffers), right after its call
returned; a stopped peer against the broadcast deadline of rank 0, of the other peer, or
of both.  The victim writes what its call did before it dies, so a victim that returned
first counts as a rank that returned.

The judgement per staging: if any rank returned, every surviving rank (and the victim, if
it got that far) returned the root's bytes; a rank still blocked when the others returned
is a divergence too (it never got the bytes the others committed to).  A group in which
nobody returned passes (whether every survivor raised promptly is FAULT-1's and FAULT-2's
subject, not this clause's).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from . import _support as s
from . import _watch

BIG = 4 * s.MiB
SMALL = 1000
STOP_IO = 1.0
"""The broadcast deadline of the ranks that have one in the stopped-peer stagings."""

SCENARIOS = [
    ("peer_killed_before", 2, "before", SMALL, None),
    ("peer_killed_during", 2, "during", BIG, None),
    ("peer_killed_after", 2, "after", SMALL, None),
    ("root_killed_before", 0, "before", SMALL, None),
    ("root_killed_during", 0, "during", BIG, None),
    ("root_killed_after", 0, "after", SMALL, None),
    ("peer_stopped_root_deadline_small", 2, "stopped", SMALL, (0,)),
    ("peer_stopped_root_deadline_big", 2, "stopped", BIG, (0,)),
    ("peer_stopped_peer_deadline_big", 2, "stopped", BIG, (1,)),
    ("peer_stopped_both_deadlines_big", 2, "stopped", BIG, (0, 1)),
]


VICTIM: str = "victim's call: "


def _note(ctx, text):
    """What the victim's own call did before it dies, as a fault record (it reaches the
    test body through the group result, whatever the death)."""
    ctx.record(VICTIM + text)


@pytest.mark.clause("FAULT-12")
@pytest.mark.parametrize(
    ("victim", "when", "size", "deadlines"),
    [pytest.param(*row[1:], id=row[0]) for row in SCENARIOS],
)
def test_all_or_nothing_under_process_faults(tpbcast_run, tpbcast_impl, victim, when, size,
                                             deadlines):
    data = s.payload(tpbcast_run.seed, size)
    delay = random.Random(tpbcast_run.seed).uniform(0.0, 0.004)
    if deadlines is not None and not tpbcast_impl.supports("deadlines"):
        s.stageable("FAULT-12", False, "a stopped peer against a deadline needs `deadlines`")
        return
    window = STOP_IO + s.MARGIN if when == "stopped" else s.OBSERVE

    def target(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # surviving SIGPIPE is FAULT-1's
        if deadlines is None:
            io = s.OBSERVE  # nobody may hang the test; the fault is a kill, not a stall
        else:
            io = STOP_IO if ctx.rank in deadlines else None
        bcast = s.make(tpbcast_impl, io=io) if io is not None else s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        s.write_pid(ctx)
        ctx.sync("ready")
        buf = bytearray(data) if ctx.rank == 0 else bytearray(size)
        if ctx.rank == victim:
            if when == "before":
                ctx.record("fault", action=f"SIGKILL of rank {victim} before its broadcast")
                os.kill(os.getpid(), signal.SIGKILL)
            if when == "stopped":
                ctx.record("fault", action=f"SIGSTOP of rank {victim} before its broadcast")
                os.kill(os.getpid(), signal.SIGSTOP)
                return "resumed"  # only if someone sent SIGCONT: never in this test
            call = _watch.Call(bcast.broadcast, buf)
            if when == "during":
                time.sleep(delay)  # the fault point: a seeded moment inside the call
                ended = call.ended()
                _note(ctx, "in flight" if not ended.done else
                      "returned" if ended.raised is None and bytes(buf) == data else "raised")
                ctx.record("fault", action=f"SIGKILL of rank {victim} during its broadcast")
                os.kill(os.getpid(), signal.SIGKILL)
            call.wait(s.PATIENCE)
            ended = call.ended()
            _note(ctx, "returned" if ended.done and ended.raised is None and bytes(buf) == data
                  else "raised" if ended.done else "in flight")
            ctx.record("fault", action=f"SIGKILL of rank {victim} after its broadcast")
            os.kill(os.getpid(), signal.SIGKILL)
        call = _watch.Call(bcast.broadcast, buf)
        call.wait(window)
        first = call.ended()
        if when == "stopped":
            if ctx.rank == 1:
                ctx.notify("observed")
            else:
                _watch.notified(ctx, "observed", window + s.MARGIN)
                os.kill(int(open(s.pid_file(ctx, victim)).read()), signal.SIGKILL)
            call.wait(s.PATIENCE)
        final = call.ended()
        intact = final.done and final.raised is None and bytes(buf) == data
        if final.done:
            bcast.reset()
        return str(first), final.done, final.raised, intact

    result = tpbcast_run(target, 3, fail_fast=False, expect_failure=True,
                         timeout=2 * s.GROUP_TIMEOUT + window)
    dead = result.outcomes[victim]
    s.precondition("FAULT-12", dead.signal_name == "SIGKILL",
                   f"the fault did not happen: {dead.summary()}")
    states = {}
    for outcome in result.outcomes:
        if outcome.rank == victim:
            continue
        if outcome.value is None:
            s.stageable("FAULT-12", False, f"rank {outcome.rank} did not finish: "
                        f"{outcome.summary()}")
            return
        _first, done, raised, intact = outcome.value
        states[outcome.rank] = (
            "returned" if intact else "returned wrong bytes" if done and raised is None
            else "raised" if done else "blocked"
        )
    notes = [f.action[len(VICTIM):] for f in dead.faults if f.action.startswith(VICTIM)]
    states[victim] = f"victim {notes[-1]}" if notes else "victim killed before its call"
    returned = [r for r, st in states.items() if st in ("returned", "victim returned")]
    others = [r for r, st in states.items() if st in ("raised", "blocked", "victim raised")]
    wrong = [r for r, st in states.items() if st == "returned wrong bytes"]
    s.check(
        "FAULT-12",
        not wrong and (not returned or not others),
        f"{when} fault of rank {victim}: every rank returns the root's bytes or none does",
        states,
    )

