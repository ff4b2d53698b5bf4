"""Skip is an outcome; reports read in one line (issue 23).

A rank that raises ``unittest.SkipTest`` / ``pytest.skip`` or exits with a skip code is
SKIPPED with its reason, never a failure (also not for fail-fast); a headline is one line
whatever the message; a stack dump stops at the rank's entry point; a rank stopped by
fail-fast reads "stopped: rank N failed".
"""

from __future__ import annotations

import os
import threading
import unittest

import pytest

from tpbcast.harness import RankContext, RankGroupFailure, Status, run_ranks
from tpbcast.harness._channel import Record
from tpbcast.harness._outcome import one_line, trim_stack
from tpbcast.harness._verdict import failed

SKIP_CODE = 73  # torch's TEST_SKIPS["small_worldsize"]


def _skip_on_rank_1(ctx: RankContext) -> int:
    if ctx.rank == 1:
        raise unittest.SkipTest("needs 4 ranks")
    return ctx.rank


def test_a_rank_raising_skiptest_skips_the_group() -> None:
    result = run_ranks(_skip_on_rank_1, 2, timeout=10)
    skipped = result.outcomes[1]
    assert skipped.status is Status.SKIPPED, skipped.report()
    assert skipped.exc_message == "needs 4 ranks" and skipped.traceback is None
    assert result.ok and result.first_failure is None
    assert result.skipped is skipped
    assert result.headline() == "rank 1 SKIPPED: needs 4 ranks of world_size 2"
    with pytest.raises(unittest.SkipTest, match="rank 1: needs 4 ranks"):
        result.raise_for_failure()
    with pytest.raises(unittest.SkipTest):
        result.values()


def test_pytest_skip_in_a_rank_is_a_skip_too() -> None:
    def rank(ctx: RankContext) -> None:
        pytest.skip("no gloo here")

    result = run_ranks(rank, 2, timeout=10)
    assert [o.status for o in result.outcomes] == [Status.SKIPPED] * 2
    assert result.outcomes[0].exc_message == "no gloo here"


def test_a_skip_exit_code_is_skipped_only_when_the_run_names_it() -> None:
    def rank(ctx: RankContext) -> None:
        os._exit(SKIP_CODE)

    named = run_ranks(rank, 2, timeout=10, skip_exit_codes={SKIP_CODE: "small world size"})
    assert [o.status for o in named.outcomes] == [Status.SKIPPED] * 2
    assert named.skipped is not None and named.skipped.exc_message == "small world size"
    plain = run_ranks(rank, 2, timeout=10)
    assert [o.status for o in plain.outcomes] == [Status.EXITED] * 2
    assert not plain.ok


def test_a_skip_does_not_count_for_fail_fast() -> None:
    """Rank 1 skips at once; rank 0 learns it ended, then works past the fail-fast grace.
    Were the skip a failure, rank 0 would be stopped 0.1 s after rank 1 ended."""

    def rank(ctx: RankContext) -> str:
        if ctx.rank == 1:
            raise unittest.SkipTest("not here")
        try:
            ctx.wait("never")  # raises once rank 1 is gone without notifying
        except Exception as exc:
            seen = type(exc).__name__
        threading.Event().wait(0.6)  # work that outlasts the grace below (not a sync)
        return seen

    result = run_ranks(rank, 2, timeout=10, fail_fast_grace=0.1)
    assert result.outcomes[0].status is Status.OK, result.report()
    assert result.outcomes[0].value == "SyncError"
    assert result.skipped is result.outcomes[1]


def test_failed_ignores_skips() -> None:
    skip = Record("skipped", {"type": "x", "message": "y"})
    assert not failed(0, [skip])
    assert not failed(None, [skip])  # reaped elsewhere: the record says it skipped
    assert not failed(SKIP_CODE << 8, [], {SKIP_CODE: "skip"})
    assert failed(SKIP_CODE << 8, [])
    assert failed(None, [])


def test_a_failure_beats_a_skip() -> None:
    def rank(ctx: RankContext) -> None:
        if ctx.rank == 0:
            raise unittest.SkipTest("skip")
        raise ValueError("real problem")

    result = run_ranks(rank, 2, timeout=10)
    assert not result.ok and result.skipped is None
    with pytest.raises(RankGroupFailure, match="rank 1 RAISED ValueError: real problem"):
        result.raise_for_failure()


def test_the_headline_is_one_line_and_the_message_appears_once() -> None:
    def rank(ctx: RankContext) -> None:
        if ctx.rank == 1:
            raise AssertionError("\n".join(["first-line-" + "7f3", "second-line-" + "9c2", "3"]))

    result = run_ranks(rank, 2, timeout=10)
    headline = result.headline()
    assert "\n" not in headline
    assert headline == "rank 1 RAISED AssertionError: first-line-7f3 [+2 lines] of world_size 2"
    report = result.report()
    assert report.count("second-line-9c2") == 1, report  # the traceback's, nothing else
    assert report.count("first-line-7f3") == 2, report  # the headline, the traceback
    # The traceback starts at the target: the harness frame that called it is cut.
    assert "_rank.py" not in (result.outcomes[1].traceback or "")


def test_one_line_cuts_long_and_multi_line_messages() -> None:
    assert one_line("short") == "short"
    assert one_line("\n\n  a\nb\n") == "a [+1 line]"
    assert one_line("x" * 300, limit=10) == "xxxxxxx... [cut]"


def _hang_in_the_test(ctx: RankContext) -> None:
    if ctx.rank == 1:
        raise ValueError("boom")
    threading.Event().wait(30)  # hangs until the harness stops it


def test_fail_fast_victims_read_stopped_and_their_stack_stops_at_the_entry_point() -> None:
    result = run_ranks(_hang_in_the_test, 2, timeout=20, fail_fast_grace=0.2)
    victim = result.outcomes[0]
    assert victim.status is Status.TIMED_OUT and victim.stopped_by == 1
    assert victim.verdict == "STOPPED"
    assert victim.summary().startswith("rank 0 stopped: rank 1 failed")
    report = result.report()
    assert "TIMED" not in report, report
    stack = victim.stack(full=False) or ""
    assert "_hang_in_the_test" in stack and "frame(s) of the harness" in stack, stack
    assert "_runner.py" not in stack and "pluggy" not in stack, stack
    full = victim.stack(full=True) or ""
    assert "_runner.py" in full and full == victim.stack_dump


def test_a_hang_of_its_own_still_reads_timed_out() -> None:
    result = run_ranks(lambda ctx: threading.Event().wait(30), 1, timeout=0.5, kill_grace=0.5)
    hung = result.outcomes[0]
    assert hung.status is Status.TIMED_OUT and hung.stopped_by is None
    assert hung.summary().startswith("rank 0 TIMED OUT")


def test_trim_stack_cuts_each_thread_below_the_entry_frame() -> None:
    dump = "\n".join(
        [
            "Thread 0x1 (most recent call first):",
            '  File "/x/t.py", line 3 in inner',
            '  File "/site/tpbcast/harness/_rank.py", line 300 in _run',
            '  File "/site/tpbcast/harness/_rank.py", line 190 in rank_main',
            '  File "/site/_pytest/python.py", line 9 in pytest_pyfunc_call',
            "",
            "Thread 0x2 (most recent call first):",
            '  File "/x/worker.py", line 5 in loop',
        ]
    )
    cut = trim_stack(dump, full=False).splitlines()
    assert cut[:2] == dump.splitlines()[:2]
    assert cut[2].startswith("  [3 frame(s) of the harness")
    assert cut[3:] == dump.splitlines()[5:]
    assert trim_stack(dump, full=True) == dump
