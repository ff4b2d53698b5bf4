"""run_ranks: every rank's fate is judged, hung ranks are stopped with their stacks, the
deadline and fail-fast work, and nothing of ours survives a group."""

from __future__ import annotations

import errno
import gc
import os
import select
import signal
import threading
import time

import pytest

from tpbcast.harness import RankGroupFailure, Status, run_ranks

# Generous: the CI box has 2 cores shared by several sessions.
T = 30.0


def returns_rank(ctx):
    return {"rank": ctx.rank, "world": ctx.world_size}


def test_ok_values_come_back_per_rank():
    result = run_ranks(returns_rank, 3, timeout=T)
    assert result.ok, result.report()
    assert [o.value for o in result.outcomes] == [{"rank": r, "world": 3} for r in range(3)]
    assert [o.status for o in result.outcomes] == [Status.OK] * 3
    assert len({o.pid for o in result.outcomes}) == 3
    assert os.getpid() not in {o.pid for o in result.outcomes}
    assert result.survivors == ()
    assert result.first_failure is None
    result.raise_for_failure()  # no-op when ok


def _inner():
    raise KeyError("deep")


def raises_chained(ctx):
    if ctx.rank == 1:
        try:
            _inner()
        except KeyError as exc:
            raise ValueError(f"rank {ctx.rank} broke") from exc
    return "fine"


def test_raised_has_type_message_and_full_chained_traceback():
    result = run_ranks(raises_chained, 2, timeout=T)
    bad = result.outcomes[1]
    assert bad.status is Status.RAISED
    assert bad.exc_type == "ValueError"
    assert bad.exc_message == "rank 1 broke"
    assert "_inner" in bad.traceback and "KeyError: 'deep'" in bad.traceback
    assert "raises_chained" in bad.traceback
    assert "direct cause" in bad.traceback
    assert result.outcomes[0].status is Status.OK
    assert result.first_failure is bad
    with pytest.raises(RankGroupFailure) as info:
        result.raise_for_failure()
    first_line = str(info.value).splitlines()[0]
    assert "rank 1 RAISED ValueError: rank 1 broke" in first_line
    assert info.value.result is result


def custom_exc_raiser(ctx):
    raise TimeoutError("took too long")


def test_exception_type_is_qualified_for_non_builtins():
    class LocalError(Exception):
        pass

    def target(ctx):
        raise LocalError("x")

    result = run_ranks(target, 1, timeout=T)
    assert result.outcomes[0].exc_type.endswith("LocalError")
    assert "." in result.outcomes[0].exc_type


def exits_with(ctx, code):
    if ctx.rank == 0:
        os._exit(code)


def test_exited_reports_code_and_means_no_result():
    result = run_ranks(exits_with, 2, timeout=T, args=(7,))
    o = result.outcomes[0]
    assert o.status is Status.EXITED
    assert o.exit_code == 7
    assert o.signal is None
    assert "EXITED with code 7" in result.report().splitlines()[0]


def sys_exits(ctx):
    raise SystemExit(3)


def test_system_exit_is_an_exit_code():
    o = run_ranks(sys_exits, 1, timeout=T).outcomes[0]
    assert (o.status, o.exit_code) == (Status.EXITED, 3)


def kills_self(ctx, sig):
    if ctx.rank == 1:
        os.kill(os.getpid(), sig)
        time.sleep(T)  # not reached for a fatal signal
    return "ok"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGABRT])
def test_signaled_reports_signal_by_name(sig):
    result = run_ranks(kills_self, 2, timeout=T, args=(sig,))
    o = result.outcomes[1]
    assert o.status is Status.SIGNALED
    assert o.signal == sig
    assert o.signal_name == signal.Signals(sig).name
    assert f"SIGNALED by {o.signal_name}" in str(RankGroupFailure(result)).splitlines()[0]


def segfaults(ctx):
    import ctypes

    print("before the crash", flush=True)
    ctypes.string_at(0)


def test_segfault_is_sigsegv_with_python_stack_on_stderr():
    o = run_ranks(segfaults, 1, timeout=T).outcomes[0]
    assert o.status is Status.SIGNALED
    assert o.signal_name == "SIGSEGV"
    assert "before the crash" in o.stdout
    assert "Segmentation fault" in o.stderr and "segfaults" in o.stderr


def hangs_in_a_named_function(ctx):
    if ctx.rank == 0:
        return "done"
    while True:
        time.sleep(0.05)


def test_hang_is_killed_with_its_python_stack():
    t0 = time.monotonic()
    result = run_ranks(hangs_in_a_named_function, 2, timeout=1.5, kill_grace=1.0)
    elapsed = time.monotonic() - t0
    hung = result.outcomes[1]
    assert hung.status is Status.TIMED_OUT, result.report()
    assert hung.signal_name == "SIGTERM"
    assert "hangs_in_a_named_function" in (hung.stack_dump or "")
    assert "group deadline of 1.5s" in hung.note
    assert result.outcomes[0].status is Status.OK
    assert result.survivors == ()
    assert 1.5 <= elapsed < 1.5 + 1.0 + 1.0 + 10.0  # deadline + dump + grace, loose top
    report = result.report()
    assert "stack dump" in report and "hangs_in_a_named_function" in report


def ignores_sigterm(ctx):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctx.notify("armed")
    while True:
        time.sleep(0.05)


def test_a_caller_that_blocks_sigusr1_and_sigterm_still_gets_stack_and_stop():
    """The harness's own signals reach a hung rank whatever the caller blocked (a library
    thread that blocks everything, a leaky test): the stack dump, then the SIGTERM."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGTERM])
    try:
        result = run_ranks(hangs_in_a_named_function, 2, timeout=1.0, kill_grace=5.0)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    hung = result.outcomes[1]
    assert hung.status is Status.TIMED_OUT, result.report()
    assert "hangs_in_a_named_function" in (hung.stack_dump or ""), result.report()
    assert hung.signal_name == "SIGTERM", result.report()


def test_sigterm_ignoring_rank_escalates_to_sigkill():
    result = run_ranks(ignores_sigterm, 1, timeout=2.0, kill_grace=0.3)
    o = result.outcomes[0]
    assert o.status is Status.TIMED_OUT
    assert o.signal_name == "SIGKILL"
    assert "ignored SIGTERM" in o.note and "SIGKILLed" in o.note
    assert "ignores_sigterm" in (o.stack_dump or "")
    assert result.survivors == ()


def one_fails_others_hang(ctx):
    if ctx.rank == 2:
        raise RuntimeError("rank 2 gives up")
    while True:
        time.sleep(0.05)


def test_fail_fast_cuts_the_others_to_the_grace():
    t0 = time.monotonic()
    result = run_ranks(one_fails_others_hang, 3, timeout=T, fail_fast_grace=0.2, kill_grace=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < T / 2, f"fail-fast did not cut the group short: {elapsed:.1f}s"
    assert result.first_failure.rank == 2
    assert result.first_failure.status is Status.RAISED
    for r in (0, 1):
        o = result.outcomes[r]
        assert o.status is Status.TIMED_OUT
        assert "fail-fast: rank 2 failed" in o.note
    assert result.report().splitlines()[0].startswith("rank 2 RAISED RuntimeError")


def test_without_fail_fast_the_others_run_to_the_deadline():
    t0 = time.monotonic()
    result = run_ranks(
        one_fails_others_hang,
        2,
        timeout=1.0,
        fail_fast=False,
        fail_fast_grace=0.0,
        kill_grace=0.3,
    )
    assert time.monotonic() - t0 >= 1.0
    assert "group deadline" in result.outcomes[0].note


def prints_then_dies(ctx):
    print(f"stdout line of rank {ctx.rank}")
    os.write(2, b"raw stderr bytes\n")
    os.write(1, b"raw stdout bytes\n")
    os.kill(os.getpid(), signal.SIGKILL)


def test_captured_output_survives_sigkill():
    o = run_ranks(prints_then_dies, 1, timeout=T).outcomes[0]
    assert o.signal_name == "SIGKILL"
    assert "stdout line of rank 0" in o.stdout
    assert "raw stdout bytes" in o.stdout
    assert "raw stderr bytes" in o.stderr


def test_output_is_per_rank():
    def target(ctx):
        print(f"I am {ctx.rank}")

    result = run_ranks(target, 2, timeout=T)
    assert result.outcomes[0].stdout == "I am 0\n"
    assert result.outcomes[1].stdout == "I am 1\n"


def leaks_an_fd(ctx):
    if ctx.rank == 1:
        r, w = os.pipe()
        os.close(r)
        return w
    return None


def test_fd_leak_check_names_the_fd():
    result = run_ranks(leaks_an_fd, 2, timeout=T, check_fds=True)
    assert result.outcomes[0].leaked_fds == ()
    leaked = result.outcomes[1].leaked_fds
    assert len(leaked) == 1 and "pipe:" in leaked[0]
    assert result.outcomes[1].status is Status.OK
    assert not result.ok
    assert "leaked 1 fd" in result.report().splitlines()[0]


def test_fd_leak_check_is_off_by_default():
    assert run_ranks(leaks_an_fd, 2, timeout=T).ok


def makes_files(ctx):
    if ctx.rank == 0:
        with open(ctx.base_path + "_0.sock", "w") as f:
            f.write("pretend socket")
        os.mkdir(f"{ctx.workdir}/sub")
        with open(f"{ctx.workdir}/sub/x", "w"):
            pass


def test_leftover_files_are_reported_and_cleaned():
    result = run_ranks(makes_files, 2, timeout=T)
    assert result.leftover_files == ("g_0.sock", "sub", "sub/x")
    assert result.ok  # leftovers are judged by the caller (conformance), not here
    assert "leftover files in workdir: g_0.sock" in result.report()
    assert not os.path.exists(result.workdir)


def test_no_leftovers_and_no_harness_files_reported():
    result = run_ranks(returns_rank, 2, timeout=T)
    assert result.leftover_files == ()


def test_caller_workdir_is_kept_and_only_new_files_count(tmp_path):
    wd = tempfile_short()
    try:
        with open(f"{wd}/old", "w"):
            pass
        result = run_ranks(makes_files, 1, timeout=T, workdir=wd)
        assert result.leftover_files == ("g_0.sock", "sub", "sub/x")
        assert sorted(os.listdir(wd)) == ["g_0.sock", "old", "sub"]  # .tpb removed
    finally:
        import shutil

        shutil.rmtree(wd)


def tempfile_short():
    import tempfile

    return tempfile.mkdtemp(prefix="tpbt-", dir=os.environ.get("TPBCAST_WORKDIR_ROOT", "/tmp"))


def forks_a_grandchild(ctx):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.05)
    return pid


def test_a_surviving_grandchild_is_reported_and_killed():
    result = run_ranks(forks_a_grandchild, 1, timeout=T)
    grandchild = result.outcomes[0].value
    assert result.survivors == (grandchild,)
    assert not result.ok
    assert "survived" in result.report().splitlines()[0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                if f.read().split(") ")[1][0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    else:
        pytest.fail(f"grandchild {grandchild} still alive after the harness SIGKILLed it")


def test_unpicklable_return_value_is_a_clear_failure():
    def target(ctx):
        return lambda: None

    o = run_ranks(target, 1, timeout=T).outcomes[0]
    assert o.status is Status.RAISED
    assert "cannot be pickled" in o.exc_message and "function" in o.exc_message


def test_args_are_passed_after_ctx():
    def target(ctx, a, b):
        return (ctx.rank, a, b)

    result = run_ranks(target, 2, timeout=T, args=("x", 2))
    assert [o.value for o in result.outcomes] == [(0, "x", 2), (1, "x", 2)]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"world_size": 0}, "world_size"),
        ({"world_size": 2, "timeout": 0}, "timeout"),
        ({"world_size": 2, "kill_grace": -1}, "kill_grace"),
        ({"world_size": 2, "sigpipe": "ignore"}, "sigpipe"),
        ({"world_size": 2, "workdir": "/tmp/" + "x" * 120}, "too long"),
    ],
)
def test_bad_arguments_are_refused_before_forking(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        run_ranks(returns_rank, **kwargs)


def test_seed_is_reported_and_shared_with_ranks(monkeypatch):
    def target(ctx):
        return ctx.seed

    result = run_ranks(target, 2, timeout=T, seed=1234)
    assert result.seed == 1234
    assert [o.value for o in result.outcomes] == [1234, 1234]
    assert "TPBCAST_SEED=1234" in result.report()
    monkeypatch.setenv("TPBCAST_SEED", "99")
    assert run_ranks(target, 1, timeout=T).seed == 99


def test_duration_and_label_in_report():
    result = run_ranks(returns_rank, 1, timeout=T, label="my-test")
    assert result.duration > 0
    assert result.outcomes[0].duration > 0
    assert result.report().startswith("[my-test] all 1 ranks OK")


def test_rank_group_failure_pickles():
    import pickle

    result = run_ranks(raises_chained, 2, timeout=T)
    exc = RankGroupFailure(result)
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc)
    assert again.result.first_failure.rank == 1


def closes_every_fd(ctx):
    os.closerange(3, 1024)  # also the harness's result channel


def test_a_target_that_breaks_the_harness_is_reported_as_such():
    o = run_ranks(closes_every_fd, 1, timeout=T).outcomes[0]
    assert o.status is Status.EXITED
    assert o.exit_code == 70
    assert "the harness itself failed inside the rank" in o.note
    assert "Bad file descriptor" in o.stderr


def floods_stdout(ctx):
    chunk = b"x" * (1 << 20)
    for _ in range(10):
        os.write(1, chunk)
    os.write(1, b"\nlast line\n")


def test_huge_output_keeps_its_tail():
    o = run_ranks(floods_stdout, 1, timeout=T).outcomes[0]
    assert o.stdout.startswith("[... first ")
    assert o.stdout.endswith("last line\n")
    assert len(o.stdout) < (9 << 20)


def waits_forever(ctx):
    ctx.wait("never_notified")  # bounded by the group deadline


@pytest.mark.usefixtures("python_sigint")
def test_an_interrupt_right_after_a_fork_still_kills_and_reaps_that_rank(monkeypatch):
    """Ctrl-C (or pytest-timeout's SIGALRM) landing between ``os.fork()`` and the
    bookkeeping of the pid used to lose the rank: nobody killed or reaped it."""
    from tpbcast.harness import _runner

    forked: list[int] = []
    real_fork = _runner._fork

    def fork_then_interrupt(*args, **kwargs):
        pid = real_fork(*args, **kwargs)
        forked.append(pid)
        os.kill(os.getpid(), signal.SIGINT)  # the handler would run right here
        return pid

    monkeypatch.setattr(_runner, "_fork", fork_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_ranks(waits_forever, 2, timeout=T)
    # 1. The interrupt hit after the forks (the fault happened)...
    assert len(forked) == 2
    # 2. ...and every forked rank was killed and reaped before it propagated.
    for pid in forked:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _parents_sigint_handler(signum, frame):
    raise KeyboardInterrupt


def test_ranks_get_the_parents_handlers_back_not_the_deferral():
    """Whatever SIGINT handler the parent has (its own here: the launcher may have left
    SIGINT ignored), the ranks get that one, not run_ranks' deferring stand-in."""

    def target(ctx):
        return signal.getsignal(signal.SIGINT) is _parents_sigint_handler

    old = signal.signal(signal.SIGINT, _parents_sigint_handler)
    try:
        assert run_ranks(target, 1, timeout=T).outcomes[0].value is True
        assert signal.getsignal(signal.SIGINT) is _parents_sigint_handler
    finally:
        signal.signal(signal.SIGINT, old)


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def raises_unprintable(ctx):
    raise _UnprintableError()


def test_an_exception_whose_str_fails_is_still_reported():
    o = run_ranks(raises_unprintable, 1, timeout=T).outcomes[0]
    assert o.status is Status.RAISED, o.stderr
    assert o.exc_type.endswith("_UnprintableError")
    assert "str() of the exception failed: RuntimeError: no str for you" in o.exc_message
    assert "raises_unprintable" in o.traceback


def blocks_until_killed(ctx):
    select.select([], [], [], 60.0)  # runs until the runner kills it


def test_a_rank_fork_that_fails_midway_takes_the_started_ranks_down(monkeypatch, leftover_children):
    """run_ranks forks every rank first and records them after the last fork: when the
    second fork fails (EAGAIN: out of processes), the first rank must still be known to the
    runner, and so killed and reaped before the error reaches the caller."""
    from tpbcast.harness import _runner

    real_fork = _runner._fork
    started = leftover_children

    def second_fork_fails(child):
        if started:
            raise BlockingIOError(errno.EAGAIN, "fork: Resource temporarily unavailable")
        pid = real_fork(child)
        started.append(pid)
        return pid

    monkeypatch.setattr(_runner, "_fork", second_fork_fails)
    with pytest.raises(BlockingIOError, match="Resource temporarily unavailable"):
        run_ranks(blocks_until_killed, 2, timeout=T)
    assert len(started) == 1  # the fault happened: one rank up, the second fork failed
    with pytest.raises(ChildProcessError):  # reaped: no longer our child
        os.waitpid(started[0], os.WNOHANG)


class _HandlerRaisedError(Exception):
    """What the test's SIGUSR2 handler raises."""


def _raise_from_handler(signum, frame):
    raise _HandlerRaisedError(f"handler of signal {signum}")


def test_a_raising_handler_of_a_signal_sent_during_the_forks_loses_no_rank(
    monkeypatch, leftover_children
):
    """SIGUSR2 (not one DeferredSignals holds back) reaches the parent right after each
    fork, and its Python handler raises. The signals stay blocked until every rank is
    recorded, so the handler runs only then, and every rank is killed and reaped."""
    from tpbcast.harness import _runner

    real_fork = _runner._fork
    forked = leftover_children

    def fork_then_signal(child):
        pid = real_fork(child)
        forked.append(pid)
        # To this thread (a process-directed signal may go to another thread, whose
        # mask is not ours): unblocked, the handler would raise right here.
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)
        return pid

    monkeypatch.setattr(_runner, "_fork", fork_then_signal)
    old = signal.signal(signal.SIGUSR2, _raise_from_handler)
    try:
        with pytest.raises(_HandlerRaisedError):
            run_ranks(blocks_until_killed, 3, timeout=T)
        assert len(forked) == 3  # the fault happened after every fork...
        for pid in forked:  # ...and no rank was lost
            with pytest.raises(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    finally:
        signal.signal(signal.SIGUSR2, old)


def _fork_exiting_on(pipe: tuple[int, int] | None, code: int) -> int:
    """A child that exits with ``code`` at once, or once the test closes ``pipe``'s write
    end (the child drops its own copy first)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        if pipe is not None:
            os.close(pipe[1])
            os.read(pipe[0], 1)  # EOF once the test closed the write end
        os._exit(code)
    return pid


def _reaped(pid: int, leftover_children: list[int]) -> int:
    """The wait status of a child the test forked and put in ``leftover_children``; once
    reaped it leaves the list (the fixture must not kill a pid that may be reused)."""
    _, status = os.waitpid(pid, 0)
    leftover_children.remove(pid)
    return status


def test_the_exit_pipe_wakes_the_parent_once_every_holder_has_ended(leftover_children):
    """The short-group wait: one wake-up when the last rank is gone, not at the first."""
    from tpbcast.harness._exitpipe import ExitPipe

    exits = ExitPipe()
    r, w = os.pipe()
    try:
        first = _fork_exiting_on(None, 0)
        second = _fork_exiting_on((r, w), 0)  # both hold the write end, inherited
        leftover_children.extend([first, second])
        _reaped(first, leftover_children)  # the fault: one holder is really gone...
        assert exits.wait(50) == "deadline"  # ...and the wait goes on for the other
        os.close(w)
        w = -1
        assert exits.wait(60_000) == "ended"
        _reaped(second, leftover_children)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
        exits.close()


def _fork_failing_on(exits, code: int) -> int:
    from tpbcast.harness._exitpipe import report_failure

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            report_failure(exits.end)
        finally:
            os._exit(code)
    return pid


def test_a_failure_byte_ends_the_exit_pipe_wait_at_once(leftover_children):
    """A rank that fails must reach fail-fast without the 20 ms delay: its byte wakes the
    parent while the other rank still runs."""
    from tpbcast.harness._exitpipe import ExitPipe

    exits = ExitPipe()
    r, w = os.pipe()
    try:
        runs_on = _fork_exiting_on((r, w), 0)
        fails = _fork_failing_on(exits, 3)
        leftover_children.extend([runs_on, fails])
        assert exits.wait(60_000) == "failed"
        assert os.waitpid(runs_on, os.WNOHANG) == (0, 0)  # the other was not waited for
        assert os.WEXITSTATUS(_reaped(fails, leftover_children)) == 3
    finally:
        os.close(r)
        os.close(w)
        exits.close()


def test_a_failure_byte_goes_only_to_the_exit_pipe(leftover_children):
    """A target may close the exit fd, and another file may get its number: the failing
    rank must not write there (a full pipe would block it until the group deadline).
    In a forked child: report_failure blocks SIGPIPE in its thread for good."""
    from tpbcast.harness._exitpipe import ExitEnd, ExitPipe, report_failure

    exits = ExitPipe()
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        impostor = ExitEnd(w, exits.end.dev, exits.end.ino)  # the number, not the pipe
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                report_failure(impostor)
                report_failure(exits.end)
            finally:
                os._exit(0)
        leftover_children.append(pid)
        assert exits.wait(60_000) == "failed"  # the real end got the byte...
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # ...and nothing was written into the other pipe
        _reaped(pid, leftover_children)
    finally:
        os.close(r)
        os.close(w)
        exits.close()


def test_a_failure_byte_spares_only_its_own_thread_from_sigpipe(leftover_children):
    """report_failure blocks SIGPIPE in its own thread, not process-wide: another thread
    of the rank that writes to a dead peer in the rank's last moments still dies of it."""
    from tpbcast.harness._exitpipe import ExitPipe, report_failure

    exits = ExitPipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            r, w = os.pipe()
            os.close(r)
            go = threading.Event()

            def write_when_told():  # started before: a thread inherits its creator's mask
                go.wait()
                os.write(w, b"nobody listens")

            writer = threading.Thread(target=write_when_told)
            writer.start()
            report_failure(exits.end)
            go.set()
            writer.join()
        finally:
            os._exit(7)
    leftover_children.append(pid)
    try:
        status = _reaped(pid, leftover_children)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGPIPE, status
    finally:
        exits.close()


def test_a_failure_byte_is_never_a_sigpipe(leftover_children):
    """report_failure after the parent closed its end: the rank (SIGPIPE at its default
    action, as ranks run) must not die of SIGPIPE, and must end with its own code."""
    from tpbcast.harness._exitpipe import ExitPipe, report_failure

    exits = ExitPipe()
    end = exits.end
    os.close(exits.read_fd)  # nobody reads any more
    exits.read_fd = -1
    with pytest.raises(BrokenPipeError):  # the fault is real (this process ignores SIGPIPE)
        os.write(end.fd, b"x")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            report_failure(end)  # EPIPE: swallowed, no SIGPIPE death
        finally:
            os._exit(7)
    leftover_children.append(pid)
    try:
        status = _reaped(pid, leftover_children)
        assert os.WIFEXITED(status), f"died of signal {os.WTERMSIG(status)}"
        assert os.WEXITSTATUS(status) == 7
    finally:
        exits.close()


def test_the_parent_keeps_no_fd_of_a_group():
    """Every group fd the parent opened (the mesh, the exit pipe, the capture files) is
    closed when run_ranks returns, passing or failing.  (No new fd, rather than the same
    set: a collection may close a file an earlier test leaked.)"""
    run_ranks(returns_rank, 2, timeout=T)  # once-per-process fds (/dev/null) exist now
    gc.collect()
    before = set(os.listdir("/proc/self/fd"))
    run_ranks(returns_rank, 2, timeout=T)
    run_ranks(raises_or_blocks, 2, timeout=T, fail_fast_grace=0.0, kill_grace=0.5)
    assert set(os.listdir("/proc/self/fd")) - before == set()


def test_a_rank_holds_the_exit_pipe_write_end_only():
    """The read end is among the fds each rank closes first thing; the write end is not."""
    from tpbcast.harness._mesh import Mesh

    mesh = Mesh.create(3)
    try:
        for rank in range(3):
            closes = mesh.not_for(rank)
            assert mesh.exits.read_fd in closes
            assert mesh.exits.write_fd not in closes
    finally:
        mesh.parent_close()


@pytest.fixture
def short_group_waits(monkeypatch):
    """How each run_ranks short-group wait ended (white box: the wait decides nothing
    the result shows, only when the parent wakes)."""
    from tpbcast.harness import _runner
    from tpbcast.harness._exitpipe import ExitPipe

    ends: list[str] = []
    real = ExitPipe.wait

    def recorded(self, timeout_ms):
        ends.append(real(self, timeout_ms))
        return ends[-1]

    monkeypatch.setattr(ExitPipe, "wait", recorded)
    monkeypatch.setattr(_runner, "_SHORT_GROUP", 3600.0)  # only the group deadline bounds it
    return ends


def test_a_passing_group_ends_the_short_group_wait_by_itself(short_group_waits):
    result = run_ranks(returns_rank, 3, timeout=T)
    assert result.ok, result.report()
    assert short_group_waits == ["ended"]


def raises_or_blocks(ctx):
    if ctx.rank == 0:
        raise RuntimeError("rank 0 gives up")
    blocks_until_killed(ctx)


def test_a_rank_that_raises_wakes_the_parent_for_fail_fast(short_group_waits):
    """The failing rank's byte ends the wait: fail-fast stops the other rank, long
    before the group deadline that would otherwise end the wait."""
    result = run_ranks(raises_or_blocks, 2, timeout=T, fail_fast_grace=0.0, kill_grace=0.5)
    assert short_group_waits == ["failed"]
    assert result.outcomes[0].status is Status.RAISED
    assert result.outcomes[1].status is Status.TIMED_OUT
    assert "fail-fast: rank 0 failed" in result.outcomes[1].note


def killed_or_waits(ctx):
    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.wait("never notified")  # raises SyncError once rank 0 is gone


def test_a_killed_rank_reaches_its_peers_during_the_short_group_wait(short_group_waits):
    """A rank killed by a signal cannot send its byte; its peers must still see it gone
    at once (the parent dropped its copies of the life pipes before it went to sleep):
    rank 1's wait ends in SyncError naming rank 0, and its failure wakes the parent."""
    result = run_ranks(killed_or_waits, 2, timeout=T)
    assert result.outcomes[0].signal_name == "SIGKILL"  # the fault happened
    assert short_group_waits == ["failed"]  # rank 1's byte, not the group deadline
    peer = result.outcomes[1]
    assert peer.status is Status.RAISED and "SyncError" in peer.exc_type, result.report()
    assert "every other rank (0) ended" in peer.exc_message
