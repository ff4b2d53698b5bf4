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
