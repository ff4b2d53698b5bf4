"""GroupResult / RankOutcome: who failed first, and a report a human can act on."""

from __future__ import annotations

import pickle

import pytest

from tpbcast.harness import (
    FaultRecord,
    GroupResult,
    RankContext,
    RankGroupFailure,
    RankOutcome,
    Status,
    run_ranks,
)


def _o(rank, status, **kw):
    return RankOutcome(rank=rank, pid=1000 + rank, status=status, **kw)


def test_first_failure_prefers_the_earliest_real_failure_over_timeouts():
    result = GroupResult(
        outcomes=(
            _o(0, Status.TIMED_OUT, signal=15, signal_name="SIGTERM", note="fail-fast"),
            _o(1, Status.SIGNALED, signal=9, signal_name="SIGKILL"),
            _o(2, Status.RAISED, exc_type="ValueError", exc_message="late"),
        ),
        duration=1.0,
        seed=5,
        failure_order=(2, 1, 0),
    )
    assert result.first_failure.rank == 2
    assert result.headline() == (
        "rank 2 RAISED ValueError: late of world_size 3 (+2 more failed rank(s))"
    )
    only_timeouts = GroupResult(
        outcomes=(_o(0, Status.OK), _o(1, Status.TIMED_OUT)), duration=1.0, seed=1
    )
    assert only_timeouts.first_failure.rank == 1


def test_report_has_a_section_per_rank_with_everything():
    fault = FaultRecord(1, "after_handshake", "Kill(SIGKILL)", "", 0.0123)
    result = GroupResult(
        outcomes=(
            _o(0, Status.OK, value=[1, 2], stdout="hello\n"),
            _o(
                1,
                Status.SIGNALED,
                signal=9,
                signal_name="SIGKILL",
                faults=(fault,),
                stderr="x\n" * 100,
                duration=0.5,
            ),
        ),
        duration=0.6,
        seed=77,
        label="lbl",
        leftover_files=("g_0.sock",),
    )
    text = result.report()
    first = text.splitlines()[0]
    assert first == "[lbl] rank 1 SIGNALED by SIGKILL of world_size 2"
    assert "replay: TPBCAST_SEED=77 (pytest: --tpbcast-seed=77)" in text
    # the OK rank is one line, after the failing one; its output is counted, not shown
    assert "----- rank 0 (pid 1000): OK in 0.000s (value [1, 2], stdout 1 line(s))" in text
    assert "hello" not in text and "hello" in result.outcomes[0].report()
    assert text.index("----- rank 1") < text.index("----- rank 0")
    assert "----- rank 1 (pid 1001): SIGNALED in 0.500s" in text
    assert "signal: SIGKILL (9)" in text
    assert "t=+0.012s rank 1 at 'after_handshake': Kill(SIGKILL)" in text
    assert "earlier lines cut" in text  # long output is tailed
    assert "leftover files in workdir: g_0.sock" in text
    # each rank's section is also available on its own, e.g. for a test's assert message
    assert result.outcomes[1].report() in text
    assert result.outcomes[1].report().startswith("----- rank 1 (pid 1001): SIGNALED")


def test_ok_group_and_raise_for_failure():
    ok = GroupResult(outcomes=(_o(0, Status.OK),), duration=0.1, seed=1)
    assert ok.ok and ok.first_failure is None
    ok.raise_for_failure()
    bad = GroupResult(outcomes=(_o(0, Status.EXITED, exit_code=3),), duration=0.1, seed=1)
    with pytest.raises(RankGroupFailure, match=r"^rank 0 EXITED with code 3"):
        bad.raise_for_failure()


def test_survivors_fail_the_group():
    result = GroupResult(outcomes=(_o(0, Status.OK),), duration=0.1, seed=1, survivors=(42,))
    assert not result.ok
    assert "survived" in result.headline()
    assert "SURVIVORS" in result.report()


def test_failure_pickles_with_its_result():
    result = GroupResult(
        outcomes=(_o(0, Status.RAISED, exc_type="E", exc_message="m", traceback="tb"),),
        duration=0.1,
        seed=3,
    )
    exc = pickle.loads(pickle.dumps(RankGroupFailure(result)))
    assert isinstance(exc, AssertionError)
    assert exc.result == result
    assert str(exc).splitlines()[0] == "rank 0 RAISED E: m of world_size 1"


def test_status_and_signal_names():
    from tpbcast.harness._outcome import signal_name

    assert signal_name(11) == "SIGSEGV"
    assert signal_name(None) is None
    assert signal_name(999) == "signal 999"
    assert Status.TIMED_OUT.value == "timed out"


def test_real_time_signals_are_named_like_kill_l():
    """No enum member exists between SIGRTMIN and SIGRTMAX: they used to read
    "signal 36", and ``Kill(SIGRTMIN+2).describe()`` raised inside the rank."""
    import signal

    from tpbcast.harness import Kill, SignalStorm
    from tpbcast.harness._outcome import signal_name

    low, high = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
    assert signal_name(low) == "SIGRTMIN" and signal_name(high) == "SIGRTMAX"
    assert signal_name(low + 2) == "SIGRTMIN+2"
    assert signal_name(high - 1) == "SIGRTMAX-1"
    assert Kill(low + 2).describe() == "Kill(SIGRTMIN+2)"
    assert SignalStorm(high - 1).describe().startswith("SignalStorm(SIGRTMAX-1,")


def test_report_leads_with_the_first_failing_rank_and_collapses_ok_ranks():
    """A four-rank cascade used to read rank 0..3 in order, ten lines per OK rank."""
    fault = FaultRecord(3, "go", "Delay(0.1)", "", 0.001)
    result = GroupResult(
        outcomes=(
            _o(0, Status.TIMED_OUT, signal=15, signal_name="SIGTERM", stack_dump="hang\n"),
            _o(1, Status.OK, stdout="a\nb\n", stderr="c\n", duration=0.25),
            _o(2, Status.SIGNALED, signal=9, signal_name="SIGKILL"),
            _o(3, Status.OK, faults=(fault,)),
            _o(4, Status.RAISED, exc_type="PeerClosedError", exc_message="peer 2 closed"),
        ),
        duration=1.0,
        seed=1,
        failure_order=(2, 4, 0),
    )
    assert [o.rank for o in result.failures_first()] == [2, 4, 0, 1, 3]
    lines = result.report().splitlines()
    sections = [line for line in lines if line.startswith("----- rank ")]
    assert [line.split()[2] for line in sections] == ["2", "4", "0", "1", "3"]
    assert sections[3] == (
        "----- rank 1 (pid 1001): OK in 0.250s (stdout 2 line(s), stderr 1 line(s))"
    )
    assert sections[4] == "----- rank 3 (pid 1003): OK in 0.000s (1 fault(s) fired: Delay(0.1))"
    ok_at = lines.index(sections[3])
    assert lines[ok_at + 1] == sections[4], "an OK rank is one line, nothing under it"
    assert lines[ok_at + 2 :] == []


def test_exported_names_show_their_public_module():
    """Tracebacks print ``__module__``: a private ``tpbcast.harness._outcome`` path there
    cannot be imported from; the façade's name can (and pickles by it)."""
    import traceback

    from tpbcast import harness

    private = [
        name
        for name in harness.__all__
        if isinstance(getattr(harness, name), type)
        and getattr(harness, name).__module__.startswith("tpbcast.harness._")
    ]
    assert private == []
    assert harness.run_ranks.__module__ == "tpbcast.harness"
    bad = GroupResult(outcomes=(_o(0, Status.EXITED, exit_code=3),), duration=0.1, seed=1)
    try:
        bad.raise_for_failure()
    except RankGroupFailure as exc:
        shown = traceback.format_exception_only(exc)[0]
    assert shown.startswith("tpbcast.harness.RankGroupFailure: rank 0 EXITED with code 3")
    assert pickle.loads(pickle.dumps(Status.RAISED)) is Status.RAISED


def test_values_hands_back_every_rank_value_in_rank_order() -> None:
    result = run_ranks(lambda ctx: ctx.rank * 10, 3, timeout=10)
    assert result.values() == [0, 10, 20]


def test_values_of_a_failed_group_raises_with_the_report_naming_the_rank() -> None:
    def target(ctx: RankContext) -> int:
        if ctx.rank == 1:
            raise ValueError("rank one refuses")
        return ctx.rank

    result = run_ranks(target, 2, timeout=10)
    assert result.outcomes[1].status is Status.RAISED  # the fault really happened
    with pytest.raises(RankGroupFailure, match=r"rank 1 RAISED ValueError"):
        result.values()


class _RefusalError(Exception):
    def __init__(self, clause: str, rank: int) -> None:
        super().__init__(f"{clause} refused by rank {rank}")
        self.clause = clause
        self.rank = rank

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.clause, self.rank))


def _raise_refusal(ctx: RankContext) -> None:
    raise _RefusalError("INIT-1", ctx.rank)


def test_a_raised_exception_travels_as_an_object_with_its_fields() -> None:
    outcome = run_ranks(_raise_refusal, 1, timeout=10).outcomes[0]
    assert outcome.status is Status.RAISED
    assert isinstance(outcome.exception, _RefusalError)
    assert (outcome.exception.clause, outcome.exception.rank) == ("INIT-1", 0)


def test_an_exception_that_does_not_pickle_still_reports_type_and_message() -> None:
    def target(ctx: RankContext) -> None:
        error = ValueError("carries a lock")
        error.lock = __import__("threading").Lock()  # type: ignore[attr-defined]
        raise error

    outcome = run_ranks(target, 1, timeout=10).outcomes[0]
    assert outcome.status is Status.RAISED
    assert outcome.exception is None
    assert (outcome.exc_type, outcome.exc_message) == ("ValueError", "carries a lock")
