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
