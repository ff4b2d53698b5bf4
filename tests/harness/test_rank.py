"""The rank process environment: dies with its parent, SIGPIPE at default, own process
group, stdin closed off, output captured at the fd level."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tpbcast.harness import Status, run_ranks

T = 30.0

# A runner script's ranks write their pid into the directory argv[1] names, then hang.
RANKS_THAT_HANG = textwrap.dedent(
    """
    import os, sys, time
    from tpbcast.harness import run_ranks

    def target(ctx, piddir):
        with open(f"{piddir}/{os.getpid()}", "w") as f:
            f.write(str(ctx.rank))
        while True:
            time.sleep(0.05)  # the hang the test is about
    """
)
FAKE_PYTEST = RANKS_THAT_HANG + textwrap.dedent(
    """
    run_ranks(target, 3, timeout=300, args=(sys.argv[1],))
    """
)


def _alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper forever)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] not in "ZX"
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def runner_with_hung_ranks(
    tmp_path: Path, script: str, world_size: int, **popen: Any
) -> Iterator[tuple[subprocess.Popen[str], list[int], str]]:
    """Start ``script`` (a run_ranks caller) in a subprocess with a private workdir root;
    yield it, its ranks' pids once all ``world_size`` ranks run, and the root. Whatever
    the test does, the runner is killed and the root removed afterwards."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    root = tempfile.mkdtemp(prefix="tpbk-", dir="/tmp")  # a killed runner cannot clean up
    path = tmp_path / "runner.py"
    path.write_text(script)
    env = dict(os.environ, TPBCAST_WORKDIR_ROOT=root)
    proc = subprocess.Popen([sys.executable, str(path), str(piddir)], env=env, text=True, **popen)
    try:
        deadline = time.monotonic() + 60
        while len(os.listdir(piddir)) < world_size:
            assert proc.poll() is None, "the runner died before its ranks started"
            assert time.monotonic() < deadline, "ranks did not start within 60s"
            time.sleep(0.02)  # polling with a deadline for another process
        yield proc, [int(p) for p in os.listdir(piddir)], root
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def test_ranks_die_when_their_parent_is_sigkilled(tmp_path):
    with runner_with_hung_ranks(tmp_path, FAKE_PYTEST, 3) as (proc, pids, _):
        # 1. The ranks really are alive and are children of the fake pytest.
        assert all(_alive(p) for p in pids)
        for p in pids:
            with open(f"/proc/{p}/stat") as f:
                assert int(f.read().rsplit(") ", 1)[1].split()[1]) == proc.pid
        # 2. SIGKILL the runner: no finally clause, no atexit, nothing of ours runs.
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        # 3. PR_SET_PDEATHSIG takes every rank down.
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        survivors = [p for p in pids if _alive(p)]
        for p in survivors:
            os.kill(p, signal.SIGKILL)
        assert survivors == [], f"ranks outlived their SIGKILLed parent: {survivors}"


def reads_its_pdeathsig(ctx):
    import ctypes

    value = ctypes.c_int(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(2, ctypes.byref(value), 0, 0, 0) == 0, ctypes.get_errno()  # GET
    return value.value


def test_every_rank_has_sigkill_as_its_parent_death_signal():
    """What the bare prctl call set, read back in the rank (PR_GET_PDEATHSIG)."""
    result = run_ranks(reads_its_pdeathsig, 2, timeout=T)
    assert [o.value for o in result.outcomes] == [signal.SIGKILL] * 2, result.report()


def test_a_failing_prctl_names_the_call_the_signal_and_the_errno():
    from tpbcast.harness._proc import set_pdeathsig

    with pytest.raises(OSError, match=r"prctl\(PR_SET_PDEATHSIG, 4242\) failed: EINVAL") as info:
        set_pdeathsig(4242)  # no such signal: the kernel refuses, nothing changes
    assert info.value.errno == errno.EINVAL


def writes_to_closed_pipe(ctx):
    r, w = os.pipe()
    os.close(r)
    os.write(w, b"nobody listens")
    return "unreachable with SIGPIPE at SIG_DFL"


def test_sigpipe_is_default_in_ranks():
    o = run_ranks(writes_to_closed_pipe, 1, timeout=T).outcomes[0]
    assert o.status is Status.SIGNALED
    assert o.signal_name == "SIGPIPE"


def writes_to_closed_pipe_at_sig_dfl(ctx):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # only a blocked SIGPIPE spares us now
    return writes_to_closed_pipe(ctx)


def test_sigpipe_is_default_in_ranks_even_when_the_caller_blocks_it():
    """A caller that blocked SIGPIPE (a library, a leaky test) must not turn the default's
    "dies visibly" into a quiet EPIPE in the ranks; with "inherit" the mask stays."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPIPE])
    try:
        o = run_ranks(writes_to_closed_pipe, 1, timeout=T).outcomes[0]
        kept = run_ranks(writes_to_closed_pipe_at_sig_dfl, 1, timeout=T, sigpipe="inherit")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert o.status is Status.SIGNALED and o.signal_name == "SIGPIPE", o.report()
    inherited = kept.outcomes[0]  # SIG_DFL, so only the inherited block gives EPIPE
    assert inherited.status is Status.RAISED, inherited.report()
    assert inherited.exc_type == "BrokenPipeError"


def test_sigpipe_inherit_keeps_pythons_ignore_and_gives_epipe():
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN  # Python's own default
    o = run_ranks(writes_to_closed_pipe, 1, timeout=T, sigpipe="inherit").outcomes[0]
    assert o.status is Status.RAISED
    assert o.exc_type == "BrokenPipeError"
    assert "Errno 32" in o.exc_message


def test_parent_handlers_do_not_run_in_ranks():
    fired = []
    old = signal.signal(signal.SIGUSR2, lambda *a: fired.append(1))
    try:

        def target(ctx):
            return signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL

        assert run_ranks(target, 1, timeout=T).outcomes[0].value is True
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_a_signal_sent_right_after_fork_waits_for_the_ranks_handlers(monkeypatch):
    """SIGUSR1 (the runner's "dump your stack") sent microseconds after fork, before the
    rank registered its faulthandler, used to kill the rank (SIGUSR1's default action).
    Ranks are now born with signals blocked and unblock them once their handlers exist."""
    import faulthandler

    from tpbcast.harness import _runner

    sent_r, sent_w = os.pipe()
    parent = os.getpid()
    real_register, real_fork = faulthandler.register, _runner._fork

    def register_once_the_signal_was_sent(signum, *args, **kwargs):
        if os.getpid() != parent and signum == signal.SIGUSR1:
            # 1. In the rank, before its SIGUSR1 handler exists: wait for the parent's kill.
            sent = bool(select.select([sent_r], [], [], 60)[0])
            pending = sorted(int(s) for s in signal.sigpending())
            print(f"sent before the handler: {sent}; pending: {pending}")
        return real_register(signum, *args, **kwargs)

    def fork_then_signal(*args, **kwargs):
        pid = real_fork(*args, **kwargs)
        os.kill(pid, signal.SIGUSR1)  # the rank is at most a few steps into its bootstrap
        os.write(sent_w, b"x")
        return pid

    monkeypatch.setattr(faulthandler, "register", register_once_the_signal_was_sent)
    monkeypatch.setattr(_runner, "_fork", fork_then_signal)
    mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        o = run_ranks(returns_pid, 1, timeout=T).outcomes[0]
    finally:
        os.close(sent_r)
        os.close(sent_w)
    # 2. The race happened: the signal was sent, and was pending, before the handler existed...
    assert f"sent before the handler: True; pending: [{int(signal.SIGUSR1)}]" in o.stdout, (
        o.report()
    )
    # 3. ...yet the rank lived, and the held signal reached the handler once it existed.
    assert o.status is Status.OK and o.value == o.pid, o.report()
    assert o.stack_dump and "File " in o.stack_dump, o.report()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask_before  # parent unblocked


def test_a_rank_failing_before_its_capture_starts_reports_in_its_own_stderr(monkeypatch, capfd):
    """A bootstrap step before the rank's output capture (here PR_SET_PDEATHSIG) fails:
    the traceback used to go to fd 2 as inherited, the parent's stderr (pytest's), far
    from the rank's report. It lands in the rank's own stderr capture now."""
    from tpbcast.harness import _rank

    parent = os.getpid()

    def failing_pdeathsig(sig):
        # Prove this runs before capture: fd 2 is still the parent's, not the capture file.
        fd2 = os.readlink("/proc/self/fd/2")
        raise OSError(f"prctl refused in pid {os.getpid()} while fd 2 was still {fd2}")

    monkeypatch.setattr(_rank, "set_pdeathsig", failing_pdeathsig)
    parents_fd2 = os.readlink("/proc/self/fd/2")
    capfd.readouterr()
    o = run_ranks(returns_pid, 1, timeout=T).outcomes[0]
    parent_saw = capfd.readouterr()
    assert os.getpid() == parent
    # 1. The failure happened before capture (fd 2 was the parent's when it raised)...
    assert f"while fd 2 was still {parents_fd2}" in o.stderr, o.report()
    # 2. ...and its traceback is in the rank's report, naming the step, not in ours.
    assert o.status is Status.EXITED and o.exit_code == 70, o.report()
    assert "before its output capture started" in o.stderr
    assert "failing_pdeathsig" in o.stderr and "harness itself failed" in o.note
    assert "prctl refused" not in parent_saw.err + parent_saw.out


def returns_pid(ctx):
    return os.getpid()


def process_facts(ctx):
    return {
        "pgid": os.getpgid(0),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stdout_fd": sys.stdout.fileno(),
    }


def test_each_rank_leads_its_own_process_group():
    result = run_ranks(process_facts, 2, timeout=T)
    for o in result.outcomes:
        facts = o.value
        assert facts["pgid"] == facts["pid"] == o.pid
        assert facts["ppid"] == os.getpid()
        assert facts["stdin"] == "/dev/null"
        assert facts["stdout_fd"] == 1


def test_c_level_output_is_captured():
    def target(ctx):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.printf(b"from C printf\n")
        libc.fflush(None)
        sys.stdout.buffer.write(b"via buffer\n")

    o = run_ranks(target, 1, timeout=T).outcomes[0]
    assert "from C printf" in o.stdout and "via buffer" in o.stdout


def test_a_rank_does_not_flush_the_parents_buffered_stream(monkeypatch):
    """The parent's ``sys.__stdout__`` may hold buffered text when the ranks fork (the
    runner flushes ``sys.stdout``/``sys.stderr``, which pytest replaced). A rank replaces
    the streams but must keep the parent's objects alive: deallocating one flushes its
    buffer in the rank, so the parent's text is written a second time (into fd 1, the
    rank's own capture, for the real ``sys.__stdout__``). Here the stream writes to a
    pipe, so every write of it can be counted."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    # Referenced by sys.__stdout__ only (monkeypatch keeps the OLD value), as the real one
    # is once pytest replaced sys.stdout: replacing it in the rank drops the last reference.
    monkeypatch.setattr(
        sys, "__stdout__", io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w", closefd=False)))
    )
    sys.__stdout__.write("the parent's buffered text\n")
    try:
        result = run_ranks(lambda ctx: None, 1, timeout=T)
        with contextlib.suppress(BlockingIOError):
            assert os.read(r, 4096) == b"", "the rank wrote the parent's buffered text"
        sys.__stdout__.flush()  # the fault was real: the text was still in the buffer
        assert os.read(r, 4096) == b"the parent's buffered text\n"
        assert result.ok, result.report()
    finally:
        sys.__stdout__.flush()  # empty before w closes, whatever failed above
        os.close(r)
        os.close(w)


def test_nested_groups_inside_a_rank():
    def inner(ctx):
        return ctx.rank

    def outer(ctx):
        res = run_ranks(inner, 2, timeout=T)
        return [o.value for o in res.outcomes], res.survivors

    o = run_ranks(outer, 1, timeout=T).outcomes[0]
    assert o.status is Status.OK, o.traceback
    assert o.value == ([0, 1], ())


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open")
def test_group_cost_is_milliseconds_not_seconds():
    """Not a benchmark (that is benchmarks/bench_harness_cost.py, part overhead): a sanity
    bound that would catch a sleep-based supervisor (100 ms polls) on an idle box, with a
    4x oversubscription margin."""
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        run_ranks(process_facts, 2, timeout=T)
        samples.append(time.perf_counter() - t0)
    assert min(samples) < 0.5


INTERRUPTED_RUNNER = RANKS_THAT_HANG + textwrap.dedent(
    """
    import signal
    # Ctrl-C as an interactive shell delivers it: the launcher of this test run may have
    # left SIGINT ignored (nohup, a background job, a CI runner), and we inherit that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run_ranks(target, 2, timeout=300, args=(sys.argv[1],))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(42)
    """
)


def test_an_interrupted_runner_kills_its_ranks_and_cleans_up(tmp_path):
    with runner_with_hung_ranks(tmp_path, INTERRUPTED_RUNNER, 2, stdout=subprocess.PIPE) as (
        proc,
        pids,
        root,
    ):
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)  # KeyboardInterrupt inside run_ranks' wait
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 42, out
        assert "interrupted" in out
        assert not any(_alive(p) for p in pids)  # killed and reaped before the re-raise
        assert os.listdir(root) == []  # workdir removed, pooled capture dir released at exit
