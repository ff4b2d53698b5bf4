"""Process faults fire at named points, are recorded before they act, and replay by seed."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from tpbcast.harness import (
    Delay,
    Exit,
    FaultPlan,
    Kill,
    Pause,
    Raise,
    Segfault,
    SignalStorm,
    Status,
    run_ranks,
)

T = 30.0


def walks_points(ctx):
    ctx.point("before_init")
    ctx.point("after_handshake")
    return "survived"


def _only_fault(outcome):
    (rec,) = outcome.faults
    return rec


@pytest.mark.parametrize(
    ("action", "status", "check"),
    [
        (Kill(), Status.SIGNALED, lambda o: o.signal_name == "SIGKILL"),
        (Kill(signal.SIGTERM), Status.SIGNALED, lambda o: o.signal_name == "SIGTERM"),
        (Exit(5), Status.EXITED, lambda o: o.exit_code == 5),
        (Segfault(), Status.SIGNALED, lambda o: o.signal_name == "SIGSEGV"),
        (
            Raise(BrokenPipeError(errno.EPIPE, "x")),
            Status.RAISED,
            lambda o: "BrokenPipe" in o.exc_type,
        ),
    ],
    ids=["kill", "term", "exit", "segv", "raise"],
)
def test_fault_fires_at_its_point_and_is_recorded_first(action, status, check):
    plan = FaultPlan().at(1, "after_handshake", action)
    result = run_ranks(walks_points, 2, timeout=T, faults=plan)
    victim = result.outcomes[1]
    # 1. The fault happened (recorded before it acted, so it survives the death).
    rec = _only_fault(victim)
    assert (rec.rank, rec.point, rec.action) == (1, "after_handshake", action.describe())
    # 2. The reaction.
    assert victim.status is status, result.report()
    assert check(victim)
    assert result.outcomes[0].status is Status.OK
    assert result.outcomes[0].faults == ()
    assert action.describe() in result.report()


def test_raise_fault_carries_the_exception():
    plan = FaultPlan().at(0, "before_init", Raise(ConnectionResetError("peer vanished")))
    o = run_ranks(walks_points, 1, timeout=T, faults=plan).outcomes[0]
    assert o.exc_type == "ConnectionResetError" and o.exc_message == "peer vanished"


def test_fault_fires_on_the_planned_hit_only():
    def target(ctx):
        for _ in range(5):
            ctx.point("loop")
        return "done"

    plan = FaultPlan().at(0, "loop", Exit(9), hit=3)
    o = run_ranks(target, 1, timeout=T, faults=plan).outcomes[0]
    assert o.exit_code == 9
    assert _only_fault(o).detail == "hit 3"


def paused_and_timed(ctx):
    t0 = time.monotonic()
    ctx.point("mid")
    return time.monotonic() - t0


def test_pause_stops_the_rank_and_resumes_it():
    plan = FaultPlan().at(0, "mid", Pause(0.4))
    result = run_ranks(paused_and_timed, 1, timeout=T, faults=plan)
    o = result.outcomes[0]
    assert _only_fault(o).action == "Pause(0.4s)"
    assert o.status is Status.OK, result.report()
    assert o.value >= 0.4  # it really was stopped that long
    assert result.survivors == ()  # the SIGCONT helper was reaped


def test_pause_helper_waits_for_the_stop_before_it_counts():
    """The SIGCONT helper starts its clock only once the rank is stopped: a SIGCONT that
    overtook the rank's own SIGSTOP (a loaded box) would strand it until the deadline."""
    from tpbcast.harness._faults import _wait_until_stopped

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(w)
        os.read(r, 1)  # until the parent closes its end
        os._exit(0)
    os.close(r)
    try:
        # 1. A running (blocked, not stopped) process is not "stopped": bounded wait fails.
        assert _wait_until_stopped(pid, 0.2) is False
        # 2. Once it really is stopped, the wait says so.
        os.kill(pid, signal.SIGSTOP)
        assert _wait_until_stopped(pid, 30.0) is True
    finally:
        os.kill(pid, signal.SIGCONT)
        os.close(w)
        os.waitpid(pid, 0)


def test_pauses_of_zero_seconds_never_strand_the_rank():
    def target(ctx):
        for _ in range(5):
            ctx.point("p")
        return "resumed"

    plan = FaultPlan()
    for hit in range(1, 6):
        plan.at(0, "p", Pause(0), hit=hit)
    result = run_ranks(target, 1, timeout=T, faults=plan)
    o = result.outcomes[0]
    assert [f.action for f in o.faults] == ["Pause(0s)"] * 5
    assert o.status is Status.OK, result.report()
    assert o.duration < T / 2


def test_paused_rank_past_the_deadline_is_still_stopped_and_reaped():
    plan = FaultPlan().at(0, "mid", Pause(60))
    result = run_ranks(paused_and_timed, 1, timeout=2.0, kill_grace=0.3, faults=plan)
    o = result.outcomes[0]
    assert _only_fault(o).action == "Pause(60s)"
    assert o.status is Status.TIMED_OUT
    assert result.survivors == ()


def eintr_reads(ctx):
    """Block in libc read() (C level: no PEP 475 retry) and count EINTR returns."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    buf = ctypes.create_string_buffer(1)
    ctx.point("storm")
    eintr = 0
    while eintr < 3:  # bounded by the group deadline; the storm outlasts any scheduling delay
        if libc.read(r, buf, 1) == -1 and ctypes.get_errno() == errno.EINTR:
            eintr += 1
    os.close(r)
    os.close(w)
    return eintr


def test_signal_storm_interrupts_blocking_syscalls_with_eintr():
    # A long storm (up to 20 s; the rank returns after 3 EINTRs and the daemon thread dies
    # with it): a short one could be over before a descheduled rank reaches read().
    plan = FaultPlan().at(0, "storm", SignalStorm(count=10_000, interval=0.002))
    result = run_ranks(eintr_reads, 1, timeout=T, faults=plan)
    o = result.outcomes[0]
    assert o.faults[0].action == "SignalStorm(SIGUSR2, count=10000, interval=0.002s)"
    assert o.status is Status.OK, result.report()
    assert o.value == 3


def test_signal_storm_reaches_a_rank_whose_caller_blocked_the_signal():
    """A storm the rank never receives is no fault: one the caller of run_ranks blocked
    must still interrupt the rank's blocking calls."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        plan = FaultPlan().at(0, "storm", SignalStorm(count=10_000, interval=0.002))
        result = run_ranks(eintr_reads, 1, timeout=T, faults=plan)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    o = result.outcomes[0]
    assert o.status is Status.OK and o.value == 3, result.report()


def test_signal_storm_delivers_signals_that_interrupt_blocking_calls():
    def target(ctx):
        ctx.point("storm")
        # The storm's own handler is a no-op; wrap it to observe the interruptions.
        old = signal.getsignal(signal.SIGUSR2)
        hits = []

        def observe(signum, frame):
            hits.append(signum)
            if callable(old):
                old(signum, frame)

        signal.signal(signal.SIGUSR2, observe)
        signal.siginterrupt(signal.SIGUSR2, True)
        deadline = time.monotonic() + 10
        while len(hits) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # a blocking call for the signals to interrupt
        return len(hits)

    # Long enough that signals still arrive after the observer is installed, however late.
    plan = FaultPlan().at(0, "storm", SignalStorm(count=10_000, interval=0.001))
    o = run_ranks(target, 1, timeout=T, faults=plan).outcomes[0]
    rec = o.faults[0]
    assert rec.action.startswith("SignalStorm(SIGUSR2, count=10000")
    assert o.status is Status.OK, o.stderr
    assert o.value >= 5


def test_signal_storm_reports_when_done():
    def target(ctx):
        ctx.point("storm")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.01)  # polling with a deadline for the storm thread to end
            if len(os.listdir(f"/proc/{os.getpid()}/task")) == 1:
                return "storm thread finished"
        return "storm thread still running"

    plan = FaultPlan().at(0, "storm", SignalStorm(count=10, interval=0.001))
    o = run_ranks(target, 1, timeout=T, faults=plan).outcomes[0]
    assert o.value == "storm thread finished", o.stderr
    actions = [f.action for f in o.faults]
    assert actions[0].startswith("SignalStorm") and actions[1] == "signal-storm-done"
    assert "sent=10" in o.faults[1].detail


def test_delay_slows_the_rank():
    plan = FaultPlan().at(0, "mid", Delay(0.2))
    o = run_ranks(paused_and_timed, 1, timeout=T, faults=plan).outcomes[0]
    assert o.value >= 0.2 and _only_fault(o).action == "Delay(0.2s)"


def test_plan_for_a_missing_rank_is_refused():
    with pytest.raises(ValueError, match="rank 3 but world_size is 2"):
        run_ranks(walks_points, 2, timeout=T, faults=FaultPlan().at(3, "x", Kill()))


def test_plan_rejects_non_actions():
    with pytest.raises(TypeError, match="expected a FaultAction"):
        FaultPlan().at(0, "x", "kill")  # type: ignore[arg-type]


def test_plan_is_chainable_and_per_rank():
    plan = FaultPlan().at(0, "a", Kill()).at(1, "a", Exit(1)).at(0, "b", Delay(0.1))
    assert len(plan) == 3
    assert set(plan.for_rank(0)) == {"a", "b"}
    assert plan.for_rank(1)["a"][0].action == Exit(1)
    assert plan.for_rank(2) == {}
    assert "rank 1 at 'a': Exit(1)" in plan.describe()


def test_random_plans_are_reproducible_from_the_seed():
    points = ["before_init", "after_handshake", "mid_broadcast"]
    a = FaultPlan.random(42, 4, points=points, count=5)
    b = FaultPlan.random(42, 4, points=points, count=5)
    c = FaultPlan.random(43, 4, points=points, count=5)
    assert a.describe() == b.describe()
    assert a.describe() != c.describe()
    assert a.seed == 42 and len(a) == 5
    assert all(0 <= f.rank < 4 and f.point in points for f in a)


def test_random_plan_seed_is_the_group_seed_with_a_replay_line():
    plan = FaultPlan.random(7, 2, points=["after_handshake"], actions=[Exit(4)])
    result = run_ranks(walks_points, 2, timeout=T, faults=plan)
    assert result.seed == 7
    assert "replay: TPBCAST_SEED=7 (pytest: --tpbcast-seed=7)" in result.report()
    fired = [o for o in result.outcomes if o.faults]
    assert len(fired) == 1 and fired[0].exit_code == 4
