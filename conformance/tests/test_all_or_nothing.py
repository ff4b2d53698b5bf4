"""FAULT-12, all or nothing: every rank returns the root's bytes, or every rank raises.

Staged with process faults every transport has (a rank SIGKILLed or SIGSTOPped at a point
of its own call, chosen from outside the implementation), so a Unix-socket wire, a
shared-memory ring and vLLM's queue are judged alike.  World 3; rank 2 or rank 0 is the
victim.  Points: before its call, during it (a seeded delay after the call started, a
payload large enough to span several socket or ring buffers), right after its call
returned (killed by the call's own thread the moment it returned); rank 0 while both
readers, already in their call, are SIGSTOPped: killed the moment its 32 MiB broadcast
returns (a root that returns before its bytes left it: its readers, continued as it dies,
can never get them), or in flight after 2 s if it waits for its readers; a stopped peer
against the broadcast deadline of rank 0, of the other peer, or of both.  The victim
records what its own call did before it dies, so a victim that returned first counts as a
rank that returned.

"During" is proved, not hoped for: the victim closes its call's gate (``_watch.Call.hold``)
and SIGKILLs itself while holding it, so a call it saw unfinished never returned.  A call
that returned before the kill point (a root whose 4 MiB left in a millisecond) is not a
fault during the call: every rank broadcasts again, the kill point earlier each time
(the last one at once); if the victim's call still returned first every time, the
staging is not staged (UNSUPPORTED), never judged as a fault during the call.

The judgement per staging: if any rank returned, every surviving rank (and the victim, if
it got that far) returned the root's bytes; a rank still blocked when the others returned
is a divergence too (it never got what the others committed to).  A group in which nobody
returned passes: whether every survivor raised promptly is FAULT-1's and FAULT-2's subject.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass

import pytest

from tpbcast.harness import SyncError, observe

from . import _support as s
from . import _watch

BIG = 4 * s.MiB
HUGE = 32 * s.MiB
"""More than the kernel buffers of any connection can hold for two readers: a root whose
broadcast returns while its readers are stopped has not handed its bytes over."""
HOLD = 2.0
"""How long rank 0 waits for its broadcast to its stopped readers before it is killed in
flight (a root that needs its readers to take the bytes never returns)."""
SMALL = 1000
STOP_IO = 1.0
"""The broadcast deadline of the ranks that have one in the stopped-peer stagings."""
VICTIM = "victim's call: "
ATTEMPTS = 6
"""Broadcasts a "during" staging tries before it gives up (kill point halved each time,
the last at once)."""
EARLY = "returned before every kill point"


@dataclass(frozen=True)
class Staging:
    """Who is hit (rank), when (before/during/after its call, or stopped), the payload
    size, and which ranks have a broadcast deadline (None: every rank, OBSERVE)."""

    victim: int
    when: str
    size: int
    deadlines: tuple[int, ...] | None = None

    def io(self, rank: int) -> float | None:
        if self.deadlines is None:
            return s.OBSERVE  # nobody may hang the test: the fault is a kill, not a stall
        return STOP_IO if rank in self.deadlines else None

    @property
    def window(self) -> float:
        return STOP_IO + s.MARGIN if self.when == "stopped" else s.OBSERVE


STAGINGS = {
    "peer_killed_before": Staging(2, "before", SMALL),
    "peer_killed_during": Staging(2, "during", BIG),
    "peer_killed_after": Staging(2, "after", SMALL),
    "root_killed_before": Staging(0, "before", SMALL),
    "root_killed_during": Staging(0, "during", BIG),
    "root_killed_after": Staging(0, "after", SMALL),
    "root_killed_after_readers_stopped": Staging(0, "readers_stopped", HUGE),
    "peer_stopped_root_deadline_small": Staging(2, "stopped", SMALL, (0,)),
    "peer_stopped_root_deadline_big": Staging(2, "stopped", BIG, (0,)),
    "peer_stopped_peer_deadline_big": Staging(2, "stopped", BIG, (1,)),
    "peer_stopped_both_deadlines_big": Staging(2, "stopped", BIG, (0, 1)),
}


def _note(ctx, text):
    """What the victim's own call did before it dies, as a fault record (it reaches the
    test body through the group result, whatever the death)."""
    ctx.record(VICTIM + text)


def _state(ended, buf, data):
    if not ended.done:
        return "in flight"
    if ended.raised is not None:
        return "raised"
    return "returned" if bytes(buf) == data else "returned wrong bytes"


def _data(seed, size, attempt):
    """The root's bytes of a staging's ``attempt``-th broadcast (distinct per attempt, so a
    rank that returns an earlier attempt's bytes is caught)."""
    return s.payload(seed, size) if attempt == 0 else s.payload(seed, size, ("again", attempt))


def _buffer(ctx, data):
    return bytearray(data) if ctx.rank == 0 else bytearray(len(data))


def _again(ctx, attempt):
    """Every rank returned the attempt's bytes: all go on to the next attempt.  False if a
    rank ended instead (the victim died, a survivor gave up)."""
    try:
        ctx.sync(f"again{attempt}", timeout=s.PATIENCE + s.MARGIN)
    except SyncError:
        return False
    return True


def _die(ctx, staging, action):
    ctx.record("fault", action=f"SIGKILL of rank {staging.victim} {action}")
    observe.kill(os.getpid())


def _play_victim(ctx, bcast, seed, staging, *, delay):
    """The victim's part; it never returns (SIGKILL, or SIGSTOP until rank 0 kills it)."""
    what = f"rank {staging.victim}"
    if staging.when == "before":
        ctx.record("fault", action=f"SIGKILL of {what} before its broadcast")
        observe.kill(os.getpid())
    if staging.when == "stopped":
        ctx.record("fault", action=f"SIGSTOP of {what} before its broadcast")
        os.kill(os.getpid(), signal.SIGSTOP)
    if staging.when == "during":
        _victim_during(ctx, bcast, seed, staging, delay=delay)
    if staging.when == "readers_stopped":
        _root_with_readers_stopped(ctx, bcast, seed, staging)
    data = _data(seed, staging.size, 0)
    buf = _buffer(ctx, data)

    def right_after(end):  # in the call's thread, the moment the call ended
        _note(ctx, _state(end, buf, data))
        _die(ctx, staging, "right after its broadcast ended")

    call = _watch.Call(bcast.broadcast, buf, on_end=right_after)
    call.wait(s.PATIENCE)
    _note(ctx, _state(call.ended(), buf, data))  # still in flight after PATIENCE
    _die(ctx, staging, "after waiting for its broadcast")


def _victim_during(ctx, bcast, seed, staging, *, delay):
    for attempt in range(ATTEMPTS):
        data = _data(seed, staging.size, attempt)
        buf = _buffer(ctx, data)
        call = _watch.Call(bcast.broadcast, buf)
        if attempt < ATTEMPTS - 1:
            time.sleep(delay / 2**attempt)  # the fault point: a seeded moment inside the call
        if call.hold():  # not returned, and now it cannot: the kill lands inside the call
            _note(ctx, "in flight")
            _die(ctx, staging, f"inside its broadcast (attempt {attempt + 1}, call held)")
        call.release()
        call.wait(s.PATIENCE)
        state = _state(call.ended(), buf, data)
        if state != "returned" or attempt == ATTEMPTS - 1 or not _again(ctx, attempt):
            _note(ctx, EARLY if state == "returned" else state)
            _die(ctx, staging, f"after its broadcast (attempt {attempt + 1}: it {state} first)")


def _root_with_readers_stopped(ctx, bcast, seed, staging):
    readers = [1, 2]
    for rank in readers:
        ctx.wait(f"reading{rank}", timeout=s.PATIENCE)
    pids = [s.published_pid(ctx, rank, "FAULT-12") for rank in readers]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped = observe.wait_until(lambda: all(map(observe.all_stopped, pids)), s.PATIENCE)
    ctx.record("fault", action=f"SIGSTOP of ranks 1 and 2 inside their broadcast: {stopped}")
    data = _data(seed, staging.size, 0)
    buf = _buffer(ctx, data)
    fate = threading.Lock()  # one of the two ends below notes and kills, never both

    def end(state, action):
        fate.acquire()
        _note(ctx, state)
        ctx.record("fault", action=f"SIGCONT of ranks 1 and 2, SIGKILL of rank 0 {action}")
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        observe.kill(os.getpid())

    call = _watch.Call(
        bcast.broadcast,
        buf,
        on_end=lambda ended: end(_state(ended, buf, data), "the moment its broadcast ended"),
    )
    call.wait(HOLD)
    if call.hold():  # still in flight, and now it cannot return
        end("in flight", f"inside its broadcast after {HOLD:g} s (call held)")
    call.release()
    call.wait(s.PATIENCE)  # its end is being noted in the call's thread: the kill comes


def _play_survivor(ctx, bcast, seed, staging):
    attempts = ATTEMPTS if staging.when == "during" else 1
    for attempt in range(attempts):
        data = _data(seed, staging.size, attempt)
        buf = _buffer(ctx, data)
        call = _watch.Call(bcast.broadcast, buf)
        if staging.when == "readers_stopped":
            ctx.notify(f"reading{ctx.rank}")  # rank 0 stops this rank inside its call
        call.wait(staging.window)
        if staging.when == "stopped":
            if ctx.rank == 1:
                ctx.notify("observed")
            else:  # rank 0 ends the stopped victim once both survivors were watched
                _watch.notified(ctx, "observed", staging.window + s.MARGIN)
                observe.kill(s.published_pid(ctx, staging.victim, "FAULT-12"))
        # A call still running gets PATIENCE more (a loaded machine, a slow second path):
        # "blocked" must mean blocked, not slow.
        call.wait(s.PATIENCE)
        final = call.ended()
        state = _state(final, buf, data)
        if state != "returned" or attempt == attempts - 1 or not _again(ctx, attempt):
            break
    if final.done:
        bcast.reset()
    return state


@pytest.mark.clause("FAULT-12")
@pytest.mark.parametrize("staging", STAGINGS.values(), ids=STAGINGS.keys())
def test_all_or_nothing_under_process_faults(tpbcast_run, tpbcast_impl, staging):
    delay = random.Random(tpbcast_run.seed).uniform(0.0, 0.004)
    if staging.deadlines is not None and not tpbcast_impl.supports("deadlines"):
        s.stageable("FAULT-12", False, "a stopped peer against a deadline needs `deadlines`")
        return

    def target(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # surviving SIGPIPE is FAULT-1's
        io = staging.io(ctx.rank)
        bcast = s.make(tpbcast_impl, io=io) if io is not None else s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        s.publish_pid(ctx)
        ctx.sync("ready")
        if ctx.rank == staging.victim:
            _play_victim(ctx, bcast, tpbcast_run.seed, staging, delay=delay)
        return _play_survivor(ctx, bcast, tpbcast_run.seed, staging)

    result = tpbcast_run(
        target,
        3,
        fail_fast=False,
        expect_failure=True,
        timeout=2 * s.GROUP_TIMEOUT + staging.window,
    )
    _judge(result, staging)


def _judge(result, staging):
    dead = result.outcomes[staging.victim]
    s.killed("FAULT-12", dead)
    if staging.when == "readers_stopped":
        s.fault_happened(
            "FAULT-12",
            any("inside their broadcast: True" in f.detail for f in dead.faults),
            f"ranks 1 and 2 were not seen stopped: {dead.summary()}",
        )
    states = {}
    for outcome in result.outcomes:
        if outcome.rank == staging.victim:
            continue
        if outcome.value is None:
            s.stageable(
                "FAULT-12", False, f"rank {outcome.rank} did not finish: {outcome.summary()}"
            )
            return
        states[outcome.rank] = outcome.value
    notes = [f.action[len(VICTIM) :] for f in dead.faults if f.action.startswith(VICTIM)]
    if notes and notes[-1] == EARLY:
        s.stageable(
            "FAULT-12",
            False,
            f"rank {staging.victim}'s broadcast returned before each of "
            f"{ATTEMPTS} kill points (the last at once), so no kill landed during it",
        )
        return
    states[staging.victim] = f"victim {notes[-1]}" if notes else "victim killed before its call"
    returned = [r for r, st in states.items() if st in ("returned", "victim returned")]
    others = [r for r, st in states.items() if st in ("raised", "in flight", "victim raised")]
    wrong = [r for r, st in states.items() if st.endswith("wrong bytes")]
    s.check(
        "FAULT-12",
        not wrong and (not returned or not others),
        f"{staging.when} fault of rank {staging.victim} ({staging.size} bytes, deadlines "
        f"{staging.deadlines or 'all'}): every rank returns the root's bytes or none does",
        states,
    )
