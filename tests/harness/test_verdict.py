"""Judging rules: what counts as a failure for fail-fast."""

from __future__ import annotations

import signal

from tpbcast.harness._channel import Record
from tpbcast.harness._verdict import failed


def _exited(code: int) -> int:
    return code << 8  # a wait status as os.waitpid returns it


def test_signal_is_a_failure_even_after_an_ok_record():
    assert failed(int(signal.SIGKILL), [Record("ok", {"value": 1})])


def test_records_decide_for_normal_exits():
    assert failed(_exited(1), [Record("raised", {})])
    assert not failed(_exited(0), [Record("ok", {})])
    assert not failed(_exited(0), [Record("fault", None), Record("ok", {})])


def test_without_records_the_exit_code_decides():
    assert failed(_exited(3), [])
    assert not failed(_exited(0), [])  # EXITED 0: reported, but strands nobody


def test_a_rank_reaped_elsewhere_fails_unless_its_record_says_it_returned():
    assert failed(None, [])  # no record: it may have crashed, and it strands the others
    assert failed(None, [Record("raised", {})])
    assert not failed(None, [Record("ok", {})])


def test_a_rank_reaped_elsewhere_stays_unknown_but_keeps_its_record(tmp_path):
    """The record predates the exit nobody saw: it is reported, the status is not guessed."""
    from tpbcast.harness import Status
    from tpbcast.harness._verdict import RankState, judge
    from tpbcast.harness._workdir import Workdir

    wd = Workdir(str(tmp_path), False, str(tmp_path), {})
    state = RankState(1, 4242, 0.0, status=None, ended_at=0.5, records=[Record("ok", {"value": 7})])
    o = judge(state, wd)
    assert o.status is Status.UNKNOWN and o.value == 7 and not o.ok
    assert o.exit_code is None and o.signal is None
    assert o.summary().startswith("rank 1 UNKNOWN: exit status unknown (reaped elsewhere")
    assert "pid 4242" in o.summary() and "its result record says it returned" in o.summary()


def _judged(tmp_path, status, records, **state):
    from tpbcast.harness._verdict import RankState, judge
    from tpbcast.harness._workdir import Workdir

    wd = Workdir(str(tmp_path), False, str(tmp_path), {})
    return judge(RankState(0, 4242, 0.0, status=status, ended_at=0.5, records=records, **state), wd)


def test_judge_a_signal_beats_an_ok_record(tmp_path):
    """The rank died after writing its record (a crash on its way out): SIGNALED."""
    from tpbcast.harness import Status

    o = _judged(tmp_path, int(signal.SIGSEGV), [Record("ok", {"value": 1})])
    assert o.status is Status.SIGNALED and o.signal_name == "SIGSEGV"
    assert o.value is None  # the record does not make it look like a return


def test_judge_a_harness_kill_is_timed_out_whatever_the_rank_wrote(tmp_path):
    from tpbcast.harness import Status

    o = _judged(tmp_path, int(signal.SIGKILL), [Record("ok", {"value": 1})], killed_by_harness=True)
    assert o.status is Status.TIMED_OUT and o.value is None


def test_judge_the_last_result_record_decides_a_normal_exit(tmp_path):
    from tpbcast.harness import Status

    ok = _judged(tmp_path, _exited(0), [Record("fault", None), Record("ok", {"value": 3})])
    assert ok.status is Status.OK and ok.value == 3
    raised = _judged(
        tmp_path,
        _exited(1),
        [Record("raised", {"type": "ValueError", "message": "bad", "traceback": "tb"})],
    )
    assert raised.status is Status.RAISED
    assert (raised.exc_type, raised.exc_message, raised.traceback) == ("ValueError", "bad", "tb")
    odd = _judged(tmp_path, _exited(0), [Record("ok", "not a dict")])
    assert odd.status is Status.EXITED and odd.exit_code == 0  # judged by its exit alone


def test_judge_an_unloadable_result_is_raised_unless_the_rank_was_reaped_elsewhere(tmp_path):
    from tpbcast.harness import Status

    bad = [Record("unloadable", "UnpicklingError: truncated")]
    o = _judged(tmp_path, _exited(0), bad)
    assert o.status is Status.RAISED and o.exc_type == "tpbcast.harness.UnloadableResult"
    assert o.exc_message == "rank 0's result could not be unpickled: UnpicklingError: truncated"
    elsewhere = _judged(tmp_path, None, bad)
    assert elsewhere.status is Status.UNKNOWN  # the record may predate a crash
    assert elsewhere.exc_type == "tpbcast.harness.UnloadableResult"
    assert "its result record could not be unpickled" in elsewhere.note


def test_judge_a_rank_that_never_ended_is_timed_out(tmp_path):
    """Not reaped at all (the kill did not take within its bound): TIMED_OUT, not EXITED."""
    from tpbcast.harness import Status
    from tpbcast.harness._verdict import RankState, judge
    from tpbcast.harness._workdir import Workdir

    wd = Workdir(str(tmp_path), False, str(tmp_path), {})
    o = judge(RankState(0, 4242, 0.0, records=[Record("ok", {"value": 1})]), wd)
    assert o.status is Status.TIMED_OUT and o.value is None
