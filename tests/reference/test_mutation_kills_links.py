"""Rank 0's failed accept and ``Links.close`` as a caller sees them, found by mutation testing.

Like test_mutation_kills.py (same purpose, same rules): each test names the mutants of
``reference_impl._bootstrap`` it detects.  Every test runs in a rank forked by
``run_ranks``: they exhaust, close or fork the process's file descriptors, which must
not happen in the pytest process.  The rank's stdin is the harness's ``/dev/null``, so
closing fd 0 there loses nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import threading
import time

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.harness.env import NOBODY, as_foreign_uid
from tpbcast.reference_impl import (
    BroadcasterConfig,
    BroadcastError,
    BroadcastTimeoutError,
    CpuTpBroadcaster,
)

from ._helpers import peer_of_a_wire_root, reset_during_a_broadcast

_CONFIG = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0, io_timeout=10.0)


def _open_fds() -> dict[int, str]:
    """This process's open fds and what each is (``pipe:[...]``, ``socket:[...]``, a path);
    the directory fd that lists them is gone by the time it is read, so it is skipped."""
    fds: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return fds


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True


def test_a_retry_out_of_file_descriptors_names_the_failed_accept(base_path: str) -> None:
    """Rank 0 times out once (no peer), then retries with the process at its fd limit:
    the listener takes the last fd and accept fails at once with EMFILE.  The error is a
    BroadcastError of rank 0 in phase 'accept', naming the path, the errno name and the
    reason.  (Why the first try: a rank whose accept path first runs with no fd to
    spare loses its coverage hit -- tools/mutmut_fork_stats.py writes each hit to a
    file -- so mutmut would never run the test against these mutants.  An older test
    without it, in test_mutation_kills.py, had that blind spot; this one replaces it.)

    Kills _Handshakes._accept_ready 3 (no class), 4 (no reason), 5/9/11 (phase None,
    dropped, renamed), 6/10 (errno None, dropped), 7/8 (class or reason dropped)."""

    def rank_main(ctx: RankContext) -> tuple[object, ...]:
        bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=0.05))
        with pytest.raises(BroadcastTimeoutError) as first:
            bcast.initialize(0, 2, base_path)
        assert (first.value.phase, first.value.errno_name) == ("accept", "ETIMEDOUT")
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(_open_fds()) + 16, hard))
        fillers: list[int] = []
        try:
            with contextlib.suppress(OSError):
                while True:
                    fillers.append(os.open("/dev/null", os.O_RDONLY))
            os.close(fillers.pop())  # exactly one left: rank 0's listening socket
            with pytest.raises(BroadcastError) as info:
                bcast.initialize(0, 2, base_path)
        finally:
            for fd in fillers:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            bcast.reset()
        err = info.value
        return (type(err).__name__, err.rank, err.phase, err.errno_name, err.reason, err.path)

    (seen,) = run_ranks(rank_main, 1, timeout=30.0).values()
    assert seen == (
        "BroadcastError", 0, "accept", "EMFILE", f"accept failed: {os.strerror(errno.EMFILE)}",
        base_path + "_0.sock",
    )  # fmt: skip


def test_reset_closes_an_abort_pipe_at_fd_0(base_path: str) -> None:
    """A process without stdin (a daemon) gets its abort pipe's read end at fd 0: here fd
    0 is closed while rank 1 waits for the probe, so the pipe it opens next lands there
    (checked: fd 0 is a pipe).  reset() closes it like any other fd.

    Kills Links.close 1 and 2 ('fd > 0' / 'fd >= 1': fd 0 left open)."""

    def rank_main(ctx: RankContext) -> tuple[str, bool]:
        with peer_of_a_wire_root(base_path, before_probe=lambda: os.close(0)) as peer:
            at_0 = os.readlink("/proc/self/fd/0")
            peer.reset()
            still_open = _is_open(0)
        return at_0.split(":")[0], still_open

    assert run_ranks(rank_main, 1, timeout=30.0).values() == [("pipe", False)]


def test_reset_from_another_thread_stops_a_broadcast_whose_abort_pipe_is_fd_0(
    base_path: str,
) -> None:
    """With the abort pipe's read end at fd 0 (as above), a broadcast waiting for rank 0's
    bytes still watches it: reset() from another thread ends the broadcast at once with
    ECANCELED, not after its 10 s io_timeout with ETIMEDOUT.  The pipe is placed at fd 0
    without patching the reference, so the test also runs in mutmut's stats pass (where
    patching open_abort_pipe failed: the pass's own hit file took fd 0 first).

    Kills _Route.build 4 and 5 ('abort_r > 0' / '>= 1': no abort fd for the broadcast)."""

    def rank_main(ctx: RankContext) -> tuple[str, str]:
        with peer_of_a_wire_root(base_path, before_probe=lambda: os.close(0)) as peer:
            at_0 = os.readlink("/proc/self/fd/0").split(":")[0]
            err = reset_during_a_broadcast(peer)
        return at_0, getattr(err, "errno_name", repr(err))

    assert run_ranks(rank_main, 1, timeout=60.0).values() == [("pipe", "ECANCELED")]


def test_reset_completes_when_the_abort_pipe_was_closed_under_it(base_path: str) -> None:
    """Something closed the broadcaster's abort pipe behind its back (a library that
    closes every fd it does not know): reset() still completes, closing the rest and
    forgetting the group, instead of failing on the already-closed fds.

    Kills Links.close 3 (contextlib.suppress(None): the EBADF becomes a TypeError)."""

    def rank_main(ctx: RankContext) -> tuple[int, bool]:
        before = _open_fds()
        with peer_of_a_wire_root(base_path) as peer:
            pipes = [
                fd
                for fd, what in _open_fds().items()
                if fd not in before and what.startswith("pipe:")
            ]
            for fd in pipes:
                os.close(fd)
            peer.reset()
            return len(pipes), peer.is_initialized()

    assert run_ranks(rank_main, 1, timeout=30.0).values() == [(2, False)]


def test_a_reset_that_could_not_remove_the_socket_file_can_be_retried(short_dir: str) -> None:
    """Rank 0's socket directory turned read-only under it (0500; rank 0 runs as nobody
    when the test runs as root, who would be let through): reset() fails with the
    PermissionError of the unlink, after closing every fd.  With the directory writable
    again a second reset() removes the file and closes nothing more -- above all not fd
    1, which the first reset must not have left behind as an "open" abort pipe.

    Kills Links.close 6 (closed abort fds marked +1: the retry closes stdout)."""
    own = os.path.join(short_dir, "own")
    os.mkdir(own, 0o700)
    base = os.path.join(own, "g")
    if os.geteuid() == 0:
        os.chown(own, NOBODY, NOBODY)
        os.chmod(short_dir, 0o711)  # nobody may enter, to reach its own directory

    def rank_0(ctx: RankContext) -> tuple[bool, bool, bool]:
        if os.geteuid() == 0:
            as_foreign_uid()
        root, peer = CpuTpBroadcaster(_CONFIG), CpuTpBroadcaster(_CONFIG)
        thread = threading.Thread(target=peer.initialize, args=(1, 2, base), daemon=True)
        thread.start()
        root.initialize(0, 2, base)
        thread.join(15.0)
        peer.reset()
        os.chmod(own, 0o500)
        try:
            with pytest.raises(PermissionError):
                root.reset()
        finally:
            os.chmod(own, 0o700)
        stdout = os.dup(1)
        try:
            root.reset()
            stdout_open = _is_open(1)
        finally:
            os.dup2(stdout, 1)
            os.close(stdout)
        return stdout_open, os.path.lexists(base + "_0.sock"), root.is_initialized()

    try:
        result = run_ranks(rank_0, 1, timeout=30.0)
    finally:
        os.chmod(short_dir, 0o700)
    assert result.values() == [(True, False, False)]


def _reap(pid: int, seconds: float) -> int:
    """The child's exit status, polled with a deadline (SIGKILL once it passes)."""
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError(f"child {pid} did not exit within {seconds} s")
        time.sleep(0.001)  # polling with a deadline: the child is resetting


def test_a_child_forked_without_python_hooks_keeps_rank_0s_socket_file(base_path: str) -> None:
    """A child forked by native code (libc fork: Python's at-fork hooks do not run, so
    the inherited broadcaster is not forgotten) that resets it closes its copies of the
    links but leaves rank 0's socket file alone: only the process that bound it unlinks
    it (DESIGN.md, and the guard in Links.close).

    Kills Links.close 15 and 16 (the 'and' of the unlink test turned into 'or': the
    child unlinks the file of the still-running rank 0)."""
    path = base_path + "_0.sock"

    def rank_0(ctx: RankContext) -> tuple[int, bool, bool]:
        bcast = CpuTpBroadcaster(_CONFIG)
        bcast.initialize(0, 2, base_path)
        try:
            fork = ctypes.PyDLL(None).fork  # holds the GIL across fork(): the child has it
            fork.restype = ctypes.c_int
            pid = fork()
            if pid == 0:
                code = 1
                try:
                    bcast.reset()
                    code = 0
                finally:
                    os._exit(code)
            assert pid > 0, ctypes.get_errno()
            status = _reap(pid, 10.0)
            kept = os.path.lexists(path)
        finally:
            bcast.reset()
        return status, kept, os.path.lexists(path)

    def rank_1(ctx: RankContext) -> None:
        CpuTpBroadcaster(_CONFIG).initialize(1, 2, base_path)

    result = run_ranks({0: rank_0, 1: rank_1}, timeout=30.0)
    assert result.values() == [(0, True, False), None]
