"""The runner works inside pytest-xdist workers (execnet threads are alive there)."""

from __future__ import annotations

import pytest

pytest.importorskip("xdist")

INNER = """
import time
from tpbcast.harness import Status, run_ranks

def ok(ctx):
    ctx.sync("together")
    return ctx.rank

def hangs(ctx):
    while True:
        time.sleep(0.05)

def test_ok_a():
    assert [o.value for o in run_ranks(ok, 2, timeout=30).outcomes] == [0, 1]

def test_ok_b():
    assert run_ranks(ok, 4, timeout=30).ok

def test_hang_is_stopped():
    res = run_ranks(hangs, 2, timeout=2.0, kill_grace=0.3)
    assert [o.status for o in res.outcomes] == [Status.TIMED_OUT] * 2
    assert "hangs" in res.outcomes[0].stack_dump

def test_crash():
    import os, signal
    def die(ctx):
        os.kill(os.getpid(), signal.SIGKILL)
    assert run_ranks(die, 2, timeout=30).outcomes[1].signal_name == "SIGKILL"
"""


def test_runs_under_xdist_n2(pytester):
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "-q", timeout=180)
    result.assert_outcomes(passed=4)
