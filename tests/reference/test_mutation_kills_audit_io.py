"""Mutants of ``_io``, ``_paths`` and ``_bootstrap`` once listed as equivalent that are not.

An audit of ``tools/mutation_equivalents.toml`` tried to break each written claim; these
tests are the counterexamples it found (each docstring names the mutant, by function and
changed line, that it kills):

- ``_io._wait``: the ``except InterruptedError`` clause is reachable.  PEP 475 makes
  ``poll`` retry EINTR, but not when the signal handler raises: then the handler's
  exception leaves ``poll``, and a handler that raises ``InterruptedError`` lands in that
  clause.  The module promises that EINTR retries; ``break`` there instead makes ``_wait``
  return None and the send fail with a TypeError.
- ``_paths._has_live_listener``: a base path spelt with a leading ``//`` (POSIX leaves it
  as it is: ``abspath("//tmp/x") == "//tmp/x"``) never equalled the ``/tmp/...`` name that
  /proc/net/unix shows for a listener on the same file, and rank 0 took over a live
  group's socket.  A reference bug, now fixed (the check compares files); its test is in
  test_security.py.
- ``_bootstrap.Links.request_abort``: the abort pipe's write end CAN be fd 0.  pipe2
  takes its two fds one after the other; another thread closing fd 0 in between gives
  the write end fd 0 (seen once in 1.5 million pipe2 calls against a thread that kept
  closing fd 0).  ``abort_w > 0`` then never wakes the broadcast that reset() waits for.
- ``send_all`` / ``send_views`` ignoring the caller's ``poller``: a writer given its own
  poller waits in that poller, as ``recv_exact`` does for a reader (the reader's case is
  already pinned by test_mutation_kills_io's time-left test).  Seen only by a caller that
  instruments its poller; the reference's own outcomes do not change.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import SecurityError
from tpbcast.reference_impl import _paths as paths_module
from tpbcast.reference_impl._io import Deadline, Site, send_all, send_views
from tpbcast.reference_impl._paths import prepare_socket_path

from ._helpers import (
    CountingPoller,
    fill_send_buffer,
    peer_of_a_wire_root,
    reset_during_a_broadcast,
)

SITE = Site(rank=0, peer=1, phase="broadcast", path="/tmp/x_0.sock", who="peer 1")

# Syscall numbers of poll/ppoll as /proc/<pid>/task/<tid>/syscall shows them.
_POLL_SYSCALLS = {"x86_64": {"7", "271"}, "aarch64": {"73"}}


def _in_poll(tid: int) -> bool:
    """Whether thread ``tid`` of this process is blocked in poll/ppoll right now."""
    with open(f"/proc/self/task/{tid}/syscall") as fh:
        return fh.read().split(maxsplit=1)[0] in _POLL_SYSCALLS[platform.machine()]


@pytest.mark.skipif(
    platform.machine() not in _POLL_SYSCALLS, reason="poll's syscall number is not known here"
)
def test_an_interrupted_error_raised_by_a_signal_handler_while_waiting_for_room_retries(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Kills ``_io._wait``: ``except InterruptedError: continue`` -> ``break``.

    The writer finds the link full and waits in poll; a signal arrives there and its
    handler raises InterruptedError (the EINTR the module docstring says is retried).
    The wait goes on, the reader drains, and the send completes with every byte once;
    the mutant leaves the loop, ``_wait`` returns None and the send dies of a TypeError.
    White-box (``send_all`` on a socket pair): only a thread blocked in ``_wait`` can
    take the signal there, and nothing public lets a test see when a broadcast is."""
    assert threading.current_thread() is threading.main_thread(), "signals need the main thread"
    a, b = pair
    filled = fill_send_buffer(a)
    data = bytes(range(256)) * 64
    writer_tid, writer = threading.get_native_id(), threading.get_ident()
    seen: list[str] = []  # where the handler ran (the function name of its frame)
    fired = threading.Event()
    drained = bytearray()
    problems: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired.is_set():
            return
        seen.append(frame.f_code.co_name if frame is not None else "?")
        fired.set()
        raise InterruptedError(errno.EINTR, "interrupted by the test's signal handler")

    def reader() -> None:
        end = time.monotonic() + 10.0
        while not _in_poll(writer_tid):  # polling with a deadline: the writer is waiting
            if time.monotonic() > end:
                problems.append("the writer never blocked in poll")
                return
            time.sleep(0.001)
        signal.pthread_kill(writer, signal.SIGUSR1)
        if not fired.wait(10.0):
            problems.append("the signal handler never ran")
            return
        while len(drained) < filled + len(data):
            if not select.select([b], [], [], 10.0)[0]:
                problems.append(f"only {len(drained)}/{filled + len(data)} bytes arrived")
                return
            chunk = b.recv(1 << 20)
            if not chunk:
                return  # the writer's end closed (the send failed)
            drained.extend(chunk)

    old = signal.signal(signal.SIGUSR1, handler)
    thread = threading.Thread(target=reader, daemon=True)
    try:
        thread.start()
        try:
            result = send_all(a, data, Deadline(10.0), SITE)
        finally:
            a.shutdown(socket.SHUT_WR)  # ends the reader's wait if the send failed
            thread.join(30.0)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert not thread.is_alive()
    assert problems == []
    assert fired.is_set() and len(seen) == 1 and "_wait" in seen[0], seen  # the fault happened
    assert result == len(data)
    assert len(drained) == filled + len(data)
    assert bytes(drained[filled:]) == data


def test_reset_from_another_thread_stops_a_broadcast_whose_abort_write_end_is_fd_0(
    base_path: str,
) -> None:
    """Kills ``_bootstrap.Links.request_abort``: ``if self.abort_w >= 0:`` -> ``if
    self.abort_w > 0:`` and -> ``if self.abort_w >= 1:`` (nothing written: the broadcast
    sleeps on, reset() gives up after its 10 s wait).

    The abort pipe's write end is moved to fd 0 (checked: fd 0 is the write end of the
    pipe whose read end the broadcast watches), the state a concurrent close of fd 0
    between pipe2's two allocations leaves; a broadcast waits for rank 0's bytes and
    reset() from this thread must end it at once with ECANCELED.  White-box (the write
    end is moved behind the broadcaster's back): that race cannot be won on demand.
    In a forked rank, whose stdin is the harness's /dev/null: fd 0 is free to take."""

    def rank_main(ctx: RankContext) -> tuple[bool, str]:
        with peer_of_a_wire_root(base_path) as peer:
            links = peer._links
            os.dup2(links.abort_w, 0, inheritable=False)
            os.close(links.abort_w)
            links.abort_w = 0
            write_end_at_0 = (
                os.readlink("/proc/self/fd/0") == os.readlink(f"/proc/self/fd/{links.abort_r}")
                and fcntl.fcntl(0, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            )
            err = reset_during_a_broadcast(peer)
        return write_end_at_0, getattr(err, "errno_name", repr(err))

    assert run_ranks(rank_main, 1, timeout=60.0).values() == [(True, "ECANCELED")]


def _drainer(sock: socket.socket, into: bytearray) -> Callable[[], None]:
    """Read everything ``sock`` holds now into ``into`` (run by the caller's poller)."""

    def drain() -> None:
        with contextlib.suppress(BlockingIOError):
            while chunk := sock.recv(1 << 20):
                into.extend(chunk)

    return drain


def _rest(sock: socket.socket, into: bytearray, size: int) -> bytes:
    while len(into) < size:
        assert select.select([sock], [], [], 10.0)[0], f"only {len(into)}/{size} bytes arrived"
        chunk = sock.recv(size - len(into))
        assert chunk, f"end of stream after {len(into)}/{size} bytes"
        into.extend(chunk)
    return bytes(into)


def test_a_writer_given_its_own_poller_waits_in_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Kills ``_io.send_all``: ``poller=poller,`` -> ``poller=None,`` (the call to
    ``_send_rest``).  The link is full; the caller's poller makes room before each wait
    (the reader drains), so only a send that waits in THAT poller finishes; the mutant
    waits in a poller of its own, where nobody drains, and times out."""
    a, b = pair
    filled = fill_send_buffer(a)
    data = os.urandom(4096)
    got = bytearray()
    poller = CountingPoller(a, writing=True, on_poll=_drainer(b, got))
    assert send_all(a, data, Deadline(3.0), SITE, poller=poller) == len(data)  # type: ignore[arg-type]
    assert poller.polls >= 1
    assert _rest(b, got, filled + len(data))[filled:] == data


def test_buffers_given_their_own_poller_wait_in_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Kills ``_io.send_views``: ``poller=poller,`` -> ``poller=None,`` and the call
    without ``poller=`` (its send_all of each view).  As above for two buffers: the one
    sendmsg finds the link full (EAGAIN), each view then waits in the caller's poller."""
    a, b = pair
    filled = fill_send_buffer(a)
    first, second = os.urandom(1000), os.urandom(3000)
    got = bytearray()
    poller = CountingPoller(a, writing=True, on_poll=_drainer(b, got))
    views = [memoryview(first), memoryview(second)]
    total = len(first) + len(second)
    assert send_views(a, views, Deadline(3.0), SITE, total=total, poller=poller) == total  # type: ignore[arg-type]
    assert poller.polls >= 1
    assert _rest(b, got, filled + total)[filled:] == first + second


def test_every_listener_entry_is_looked_at_until_ours(
    short_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live-listener check goes through ALL of /proc/net/unix's listeners: an abstract
    name or another file's listener before ours must not end the search.  The kernel's
    order is not ours to choose (and the reference keeps the names in a set), so the
    listing is replaced by one in that order: abstract, another live file, ours.

    Kills ``_paths._has_live_listener``: ``continue  # abstract: names no file`` ->
    ``break`` and the ``continue`` after the absolute-name test -> ``break`` (both stop
    before our entry and take a live group's socket over)."""
    ours, other = os.path.join(short_dir, "g_0.sock"), os.path.join(short_dir, "x_0.sock")
    with contextlib.ExitStack() as stack:
        for path in (ours, other):
            sock = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            sock.bind(path)
            sock.listen(1)
        listed = (b"@tpbcast-abstract", os.fsencode(other), os.fsencode(ours))
        monkeypatch.setattr(paths_module, "_live_listener_paths", lambda: listed)
        with pytest.raises(SecurityError, match="another process is listening"):
            prepare_socket_path(ours)
        assert os.path.exists(ours)  # not taken over
