"""WarmGroup: one forked group runs many targets; each failure is isolated and re-forks.

Every test proves the state it judges: the same pids across targets (the group was
warm), a new pid after a failure (it was re-forked), the per-rank report of the failing
target.  Targets live at module level: a warm group runs them by reference.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tpbcast.harness import FaultPlan, Kill, Status, SyncTimeoutError, WarmGroup
from tpbcast.harness.runtime import TargetRef

_STATE: dict[str, int] = {}


def setup_counter(ctx: object) -> None:
    _STATE["n"] = 0


def count(ctx: object) -> tuple[int, int]:
    _STATE["n"] = _STATE.get("n", 0) + 1
    print(f"target {_STATE['n']}")
    return os.getpid(), _STATE["n"]


def fail_in_rank_1(ctx: object) -> None:
    if getattr(ctx, "rank", 0) == 1:
        raise ValueError("rank 1 fails on purpose")


def exit_in_rank_0(ctx: object) -> None:
    if getattr(ctx, "rank", 0) == 0:
        os._exit(3)


def hang_in_rank_0(ctx: object) -> None:
    if getattr(ctx, "rank", 0) == 0:
        threading.Event().wait(60)  # stopped by the group deadline


def change_state(ctx: object) -> None:
    os.environ["TPBCAST_WARM_LEAK"] = "1"
    os.chdir("/")
    os.umask(0o077)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def read_state(ctx: object) -> tuple[str | None, str, int, object]:
    mask = os.umask(0o022)
    os.umask(mask)
    return (
        os.environ.get("TPBCAST_WARM_LEAK"),
        os.getcwd(),
        mask,
        signal.getsignal(signal.SIGUSR2),
    )


def leave_thread(ctx: object) -> None:
    threading.Thread(target=threading.Event().wait, args=(30,), daemon=True).start()


def skip_everywhere(ctx: object) -> None:
    pytest.skip("not here")


def sync_twice(ctx: object) -> int:
    sync = ctx.sync
    sync("same-name")
    return getattr(ctx, "rank", -1)


def test_targets_share_the_warm_ranks() -> None:
    with WarmGroup(2, setup=setup_counter, timeout=20) as group:
        first = group.run(count).values()
        second = group.run(count).values()
    assert [pid for pid, _ in first] == [pid for pid, _ in second]
    assert [n for _, n in second] == [2, 2]  # setup ran once, state kept
    assert group.forks == 1


def test_output_is_per_target() -> None:
    with WarmGroup(2, setup=setup_counter, timeout=20) as group:
        group.run(count)
        result = group.run(count)
    assert [o.stdout for o in result.outcomes] == ["target 2\n", "target 2\n"]


def test_failure_is_reported_per_rank_and_the_next_target_gets_a_new_group() -> None:
    with WarmGroup(2, setup=setup_counter, timeout=20) as group:
        before = group.run(count).values()
        failed = group.run(fail_in_rank_1)
        after = group.run(count).values()
    assert not failed.ok
    assert failed.outcomes[1].status is Status.RAISED
    assert "rank 1 fails on purpose" in (failed.outcomes[1].traceback or "")
    assert "in serve" not in (failed.outcomes[1].traceback or "")  # dispatch frames are cut
    assert failed.outcomes[0].status is Status.OK
    assert [n for _, n in after] == [1, 1]  # no poison pill: a fresh, set-up group
    assert {pid for pid, _ in after}.isdisjoint({pid for pid, _ in before})
    assert group.forks == 2


def test_an_exit_is_reported_and_isolated() -> None:
    with WarmGroup(2, timeout=20) as group:
        result = group.run(exit_in_rank_0)
        assert group.run(count).ok
    assert result.outcomes[0].status is Status.EXITED
    assert result.outcomes[0].exit_code == 3


def test_a_hang_is_stopped_at_its_deadline_with_its_stack() -> None:
    with WarmGroup(2, timeout=20, kill_grace=0.5) as group:
        group.run(count)
        started = time.monotonic()
        result = group.run(hang_in_rank_0, timeout=1.0)
        took = time.monotonic() - started
        assert group.run(count).ok
    assert result.outcomes[0].status is Status.TIMED_OUT
    assert "hang_in_rank_0" in (result.outcomes[0].stack_dump or "")
    assert result.outcomes[1].status is Status.OK
    assert took < 1.0 + 0.5 + 5.0  # deadline, kill grace, slack for a loaded machine
    assert result.survivors == ()


def test_environment_cwd_umask_and_signals_are_reset_between_targets() -> None:
    with WarmGroup(1, timeout=20) as group:
        baseline = group.run(read_state).values()[0]
        group.run(change_state).values()
        after = group.run(read_state).values()[0]
        assert group.forks == 1  # reset in place, not by re-forking
    assert after == baseline
    assert after[0] is None


def test_a_thread_left_running_re_forks_the_group() -> None:
    with WarmGroup(1, timeout=20) as group:
        pid = group.run(count).values()[0][0]
        result = group.run(leave_thread)
        again = group.run(count).values()[0][0]
    assert result.ok
    assert "thread" in result.outcomes[0].note
    assert again != pid and group.forks == 2


def test_a_skip_keeps_the_group_warm() -> None:
    with WarmGroup(2, timeout=20) as group:
        pid = group.run(count).values()[0][0]
        skipped = group.run(skip_everywhere)
        again = group.run(count).values()[0][0]
    assert [o.status for o in skipped.outcomes] == [Status.SKIPPED, Status.SKIPPED]
    assert again == pid


def sync_alone(ctx: object) -> str:
    """Rank 0 syncs on the name of the previous target; rank 1 does not come."""
    if getattr(ctx, "rank", 0) == 1:
        return "away"
    try:
        ctx.sync("same-name", timeout=0.5)
    except SyncTimeoutError:
        return "waited"
    return "passed without rank 1"


def test_sync_names_are_scoped_per_target() -> None:
    with WarmGroup(2, timeout=20) as group:
        assert group.run(sync_twice).values() == [0, 1]
        assert group.run(sync_twice).values() == [0, 1]
        # The earlier targets' sync messages must not satisfy this target's sync point.
        assert group.run(sync_alone).values() == ["waited", "away"]


def test_close_reaps_every_rank() -> None:
    group = WarmGroup(2, timeout=20)
    group.run(count)
    pids = group.pids
    result = group.close()
    assert result is not None and result.ok
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert group.close() is None


def test_targets_go_by_reference_only() -> None:
    with pytest.raises(TypeError, match="by reference"):
        TargetRef.of(lambda ctx: None)
    assert str(TargetRef.of(count)).endswith(":count")


def wait_for_kill(ctx: object) -> None:
    ctx.point("die")  # type: ignore[attr-defined]


def test_a_fault_plan_belongs_to_its_target() -> None:
    plan = FaultPlan().at(1, "die", Kill(signal.SIGKILL))
    with WarmGroup(2, timeout=20) as group:
        killed = group.run(wait_for_kill, faults=plan)
        after = group.run(wait_for_kill)  # same point, no plan: nothing fires
    assert killed.outcomes[1].signal_name == "SIGKILL"
    assert [f.point for f in killed.outcomes[1].faults] == ["die"]  # proof it fired
    assert after.ok and after.outcomes[1].faults == ()


def test_an_interrupted_run_leaves_no_rank() -> None:
    group = WarmGroup(2, timeout=20)
    group.run(count)
    pids = group.pids

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            group.run(hang_in_rank_0, timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert group.pids == ()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
