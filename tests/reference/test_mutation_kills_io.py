"""The socket I/O layer's failures as a caller sees them, found by mutation testing.

Like test_mutation_kills.py (same purpose, same rules), for ``reference_impl._io``: the
fields of the error every failed send carries (what was being done, to whom, bytes done
of the transfer's total, errno), partial sends that deliver each byte once, the abort
pipe honoured while waiting for room, and one ``sendmsg`` for up to IOV_MAX buffers.
In-process over socket pairs; where the kernel cannot be made to do something on
demand (``send`` returning 0, an OSError without an errno) a ``socket.socket`` subclass
stands in for that one call and hands every other call to the real socket.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import BroadcastError, BroadcastTimeoutError, PeerClosedError
from tpbcast.reference_impl._io import (
    Deadline,
    Site,
    recv_exact,
    send_all,
    send_views,
)

from ._helpers import CountingPoller, fill_send_buffer

# Rank 0 writing to peer 2 (``who`` is how the message names the other end).
SITE = Site(rank=0, peer=2, phase="broadcast", path="/tmp/x_0.sock", who="peer 2")


class _ShimSocket(socket.socket):
    """A real socket with scripted ``send`` calls: each number in ``limits`` caps what
    one call passes on (0: pass nothing on and return 0, as a send may in theory);
    ``fail`` is raised by the next send instead; ``msg_limit`` caps what the next
    ``sendmsg`` passes on (a partial sendmsg); each entry of ``reads`` caps one
    ``recv_into`` (a number) or is raised by it.  Every call is counted by name."""

    def __init__(self, real: socket.socket) -> None:
        super().__init__(fileno=real.detach())
        self.limits: list[int] = []
        self.fail: OSError | None = None
        self.msg_limit: int | None = None
        self.reads: list[int | OSError] = []
        self.calls: Counter[str] = Counter()

    def send(self, data: Any, flags: int = 0, /) -> int:
        self.calls["send"] += 1
        if self.fail is not None:
            raise self.fail
        if self.limits:
            limit = self.limits.pop(0)
            if limit == 0:
                return 0
            data = memoryview(data)[:limit]
        return super().send(data, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0, /) -> int:
        self.calls["recv_into"] += 1
        if self.reads:
            step = self.reads.pop(0)
            if isinstance(step, OSError):
                raise step
            nbytes = min(nbytes or len(buffer), step)
        return super().recv_into(buffer, nbytes, flags)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        self.calls["sendmsg"] += 1
        if self.msg_limit is not None:
            limit, self.msg_limit = self.msg_limit, None
            return super().sendmsg([b"".join(buffers)[:limit]], *args)
        return super().sendmsg(buffers, *args)


@pytest.fixture
def pair(pair: tuple[socket.socket, socket.socket]) -> Iterator[tuple[_ShimSocket, socket.socket]]:
    """conftest's non-blocking pair with rank 0's end a shim (scriptable); the shim takes
    over that end's fd, so the pair's own teardown closes only the peer's."""
    a, b = pair
    shim = _ShimSocket(a)
    shim.setblocking(False)
    try:
        yield shim, b
    finally:
        shim.close()


def _recv_all(sock: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        assert select.select([sock], [], [], 10.0)[0], f"only {len(got)}/{size} bytes arrived"
        chunk = sock.recv(size - len(got))
        assert chunk, f"end of stream after {len(got)}/{size} bytes"
        got += chunk
    return bytes(got)


@contextlib.contextmanager
def _abort_requested() -> Iterator[int]:
    """The read end of an abort pipe that already holds a byte: reset() asked to stop."""
    r, w = os.pipe()
    try:
        os.write(w, b"!")
        yield r
    finally:
        os.close(r)
        os.close(w)


def _where(err: BroadcastError) -> tuple[Any, ...]:
    return (err.rank, err.peer, err.phase, err.path, err.action)


_WRITING = (0, 2, "broadcast", "/tmp/x_0.sock", "write to peer 2")
# Peer 2 reading from rank 0.
READER = Site(rank=2, peer=0, phase="broadcast", path="/tmp/x_0.sock", who="rank 0")
_READING = (2, 0, "broadcast", "/tmp/x_0.sock", "read from rank 0")


def test_a_send_that_returns_zero_is_the_peer_closing_after_the_bytes_sent(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """A send that takes nothing (never on a stream socket, but never spin on it) ends the
    transfer as a closed peer, EPIPE, counting the bytes an earlier partial send took."""
    a, b = pair
    a.limits = [3, 0]  # 3 bytes, then nothing
    with pytest.raises(PeerClosedError) as info:
        send_all(a, b"abcdefgh", Deadline(5.0), SITE, offset=5, total=100)
    err = info.value
    assert err.reason == "peer closed the connection (send returned 0)"
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5 + 3, 100, "EPIPE")
    assert err.elapsed is not None and 0.0 <= err.elapsed < 5.0
    assert b.recv(16) == b"abc"


def test_partial_sends_of_any_size_deliver_each_byte_once(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    a.limits = [1, 2, 1]  # then the rest in one call
    assert send_all(a, b"abcdefgh", Deadline(5.0), SITE) == 8
    assert b.recv(16) == b"abcdefgh"


def test_waiting_for_room_times_out_naming_the_peer_not_reading(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    fill_send_buffer(a)
    with pytest.raises(BroadcastTimeoutError) as info:
        send_all(a, b"x" * 10, Deadline(0.1), SITE, offset=5, total=100)
    err = info.value
    assert err.reason == "deadline of 0.1 s passed (peer not reading)"
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5, 100, "ETIMEDOUT")


def test_the_abort_pipe_stops_a_send_waiting_for_room_without_a_caller_poller(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """send_all without a poller builds its own, with the abort pipe in it: an abort
    already requested ends the wait at once (ECANCELED), not at the deadline."""
    a, _b = pair
    fill_send_buffer(a)
    with _abort_requested() as r, pytest.raises(BroadcastError) as info:
        send_all(a, b"x" * 10, Deadline(3.0), SITE, offset=5, total=100, abort_fd=r)
    err = info.value
    assert type(err) is BroadcastError
    assert err.reason == "aborted: reset() was called from another thread during the transfer"
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5, 100, "ECANCELED")


def test_a_peer_leaving_mid_transfer_is_named_with_the_bytes_sent(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """More than the socket holds: the first send is partial; the peer reads a byte and
    closes; the next send fails with the transfer's progress and who was written to."""
    a, b = pair
    payload = bytes(4 << 20)

    def read_one_then_leave() -> None:
        assert select.select([b], [], [], 10.0)[0]
        b.recv(1)
        b.close()

    thread = threading.Thread(target=read_one_then_leave, daemon=True)
    thread.start()
    try:
        with pytest.raises(PeerClosedError) as info:
            send_all(a, payload, Deadline(10.0), SITE, offset=5, total=5 + len(payload))
    finally:
        thread.join(10.0)
    err = info.value
    assert _where(err) == _WRITING
    assert err.errno_name in {"EPIPE", "ECONNRESET"}
    assert err.bytes_done is not None and 5 < err.bytes_done < 5 + len(payload)
    assert err.bytes_total == 5 + len(payload)


def test_a_send_error_other_than_closing_keeps_its_errno_and_the_progress(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    a.fail = OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))
    with pytest.raises(BroadcastError) as info:
        send_all(a, b"abc", Deadline(5.0), SITE, offset=5, total=100)
    err = info.value
    assert type(err) is BroadcastError
    assert err.reason == os.strerror(errno.ENOBUFS)
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5, 100, "ENOBUFS")


def test_an_os_error_without_an_errno_is_reported_by_its_message(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    a.fail = OSError("the interposer refused the write")
    with pytest.raises(BroadcastError) as info:
        send_all(a, b"abc", Deadline(5.0), SITE)
    assert info.value.reason == "the interposer refused the write"
    assert info.value.errno_name is None


def test_several_buffers_to_a_closed_peer_fail_at_byte_0_of_the_total(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    b.close()
    views = [memoryview(b"abc"), memoryview(b"de")]
    with pytest.raises(PeerClosedError) as info:
        send_views(a, views, Deadline(5.0), SITE, total=5)
    err = info.value
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (0, 5, "EPIPE")


def test_up_to_iov_max_buffers_go_in_one_sendmsg(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """1024 (IOV_MAX) buffers with room for them: one syscall, not one per buffer."""
    a, b = pair
    views = [memoryview(bytes([i % 251])) for i in range(1024)]
    assert send_views(a, views, Deadline(5.0), SITE, total=1024) == 1024
    assert a.calls == Counter(sendmsg=1)
    assert _recv_all(b, 1024) == b"".join(views)


def test_the_rest_after_a_partial_sendmsg_reports_progress_in_the_whole_transfer(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """sendmsg takes 4 of 9 bytes (all of buffer 0, one byte of buffer 1); the rest of
    buffer 1 then fails: the error counts 4/9, not bytes of that one buffer."""
    a, b = pair
    a.msg_limit = 4
    a.limits = [0]  # the next send takes nothing: the peer is taken as gone
    views = [memoryview(b"abc"), memoryview(b"defg"), memoryview(b"hi")]
    with pytest.raises(PeerClosedError) as info:
        send_views(a, views, Deadline(5.0), SITE, total=9)
    err = info.value
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total) == (4, 9)
    assert b.recv(16) == b"abcd"


def test_buffers_that_find_the_link_full_time_out_counting_the_whole_transfer(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    fill_send_buffer(a)
    views = [memoryview(b"abc"), memoryview(b"de")]
    with pytest.raises(BroadcastTimeoutError) as info:
        send_views(a, views, Deadline(0.1), SITE, total=5)
    err = info.value
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (0, 5, "ETIMEDOUT")
    assert err.reason == "deadline of 0.1 s passed (peer not reading)"


def test_waiting_for_data_sleeps_in_poll_instead_of_spinning(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """A reader whose peer sends nothing waits in poll for data only (not for room to
    write, which a socket nearly always has): one failed read, then the deadline."""
    a, _b = pair
    with pytest.raises(BroadcastTimeoutError):
        recv_exact(a, bytearray(4), Deadline(0.2), SITE)
    assert a.calls["recv_into"] == 1


def test_waiting_for_room_sleeps_in_poll_even_when_the_peer_talks(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """A writer waits in poll for room only: bytes the peer sends meanwhile (rank 0 never
    reads during a broadcast) do not wake it into a loop of failed sends."""
    a, b = pair
    fill_send_buffer(a)
    b.send(b"unexpected")
    with pytest.raises(BroadcastTimeoutError):
        send_all(a, b"x" * 10, Deadline(0.2), SITE)
    assert a.calls["send"] == 1


def test_a_peer_closing_mid_read_is_named_with_the_bytes_read(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    b.send(b"abc")
    b.shutdown(socket.SHUT_WR)  # end of stream after 3 of the 8 bytes
    with pytest.raises(PeerClosedError) as info:
        recv_exact(a, bytearray(8), Deadline(5.0), READER, offset=5, total=100)
    err = info.value
    assert err.reason == "peer closed the connection (end of stream)"
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5 + 3, 100, None)


def test_waiting_for_the_rest_times_out_naming_the_silent_peer(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    b.send(b"abc")
    with pytest.raises(BroadcastTimeoutError) as info:
        recv_exact(a, bytearray(8), Deadline(0.1), READER, offset=5, total=100)
    err = info.value
    assert err.reason == "deadline of 0.1 s passed (no data from peer)"
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5 + 3, 100, "ETIMEDOUT")


def test_the_abort_pipe_stops_a_read_without_a_caller_poller(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """recv_exact without a poller builds its own, with the abort pipe in it: an abort
    already requested ends the wait for data at once (ECANCELED), not at the deadline."""
    a, _b = pair
    with _abort_requested() as r, pytest.raises(BroadcastError) as info:
        recv_exact(a, bytearray(8), Deadline(3.0), READER, offset=5, total=100, abort_fd=r)
    err = info.value
    assert type(err) is BroadcastError
    assert err.reason == "aborted: reset() was called from another thread during the transfer"
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5, 100, "ECANCELED")


def test_a_read_that_finds_nothing_after_a_wake_up_waits_again(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """A spurious wake-up (poll said readable, the read finds nothing: EAGAIN) is not
    progress: the reader waits again and every byte lands in its place."""
    a, b = pair
    b.send(b"abcd")
    a.reads = [2, BlockingIOError(errno.EAGAIN, "spurious")]  # then real reads
    out = bytearray(4)
    assert recv_exact(a, out, Deadline(5.0), READER) == 4
    assert out == b"abcd"


def test_a_reader_that_waits_first_costs_one_poll_and_one_read(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """recv_exact(wait_first=True) when the data is there: one poll, one recv_into."""
    a, b = pair
    b.send(b"abcd")
    poller = CountingPoller(a)
    out = bytearray(4)
    assert recv_exact(a, out, Deadline(5.0), READER, poller=poller, wait_first=True) == 4  # type: ignore[arg-type]
    assert (out, poller.polls, a.calls["recv_into"]) == (b"abcd", 1, 1)


def test_a_reader_that_waits_first_stops_on_an_abort_without_reading(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    with _abort_requested() as r, pytest.raises(BroadcastError) as info:
        recv_exact(
            a, bytearray(8), Deadline(3.0), READER, offset=5, total=100, abort_fd=r,
            wait_first=True,
        )  # fmt: skip
    err = info.value
    assert (type(err), err.errno_name, a.calls["recv_into"]) == (BroadcastError, "ECANCELED", 0)
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total) == (5, 100)


def test_a_reader_that_waits_first_times_out_naming_the_silent_peer(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, _b = pair
    with pytest.raises(BroadcastTimeoutError) as info:
        recv_exact(a, bytearray(8), Deadline(0.1), READER, offset=5, total=100, wait_first=True)
    err = info.value
    assert err.reason == "deadline of 0.1 s passed (no data from peer)"
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (5, 100, "ETIMEDOUT")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS)), BroadcastError),
        (ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)), PeerClosedError),
    ],
    ids=["ENOBUFS", "ECONNRESET"],
)
def test_a_failed_first_read_keeps_its_errno_and_the_progress(
    pair: tuple[_ShimSocket, socket.socket], error: OSError, kind: type[BroadcastError]
) -> None:
    a, _b = pair
    a.reads = [error]
    with pytest.raises(BroadcastError) as info:
        recv_exact(a, bytearray(8), Deadline(5.0), READER, offset=5, total=100)
    err = info.value
    assert type(err) is kind
    assert _where(err) == _READING
    assert (err.bytes_done, err.bytes_total) == (5, 100)
    assert err.errno_name == errno.errorcode[error.errno]


def test_a_reader_polls_with_the_time_left_and_not_once_it_passed(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """poll gets the time left in ms, rounded up and never more (the data is sent as the
    reader starts to wait, so nothing waits that long); with the deadline already passed,
    no poll at all."""
    a, b = pair
    poller = CountingPoller(a, on_poll=lambda: b.send(b"abcd"))
    out = bytearray(4)
    assert recv_exact(a, out, Deadline(10.0), READER, poller=poller) == 4  # type: ignore[arg-type]
    first = poller.timeouts[0]
    assert out == b"abcd" and first is not None and 9000 <= first <= 10000
    late = CountingPoller(a)
    with pytest.raises(BroadcastTimeoutError):
        recv_exact(a, bytearray(4), Deadline(0.0), READER, poller=late)  # type: ignore[arg-type]
    assert late.polls == 0


def test_a_reader_with_its_own_poller_waits_for_data_only(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """make_poller(writing=False) watches for data, not for room: no data, one read."""
    a, _b = pair
    poller = CountingPoller(a)
    with pytest.raises(BroadcastTimeoutError):
        recv_exact(a, bytearray(4), Deadline(0.2), READER, poller=poller)  # type: ignore[arg-type]
    assert a.calls["recv_into"] == 1


def test_a_writer_with_its_own_poller_wakes_when_the_reader_makes_room(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    payload = os.urandom(1 << 20)  # more than the socket holds
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(_recv_all(b, len(payload))), daemon=True)
    thread.start()
    poller = CountingPoller(a, writing=True)
    assert send_all(a, payload, Deadline(10.0), SITE, poller=poller) == len(payload)  # type: ignore[arg-type]
    thread.join(10.0)
    assert got == [payload]


def test_a_timeout_is_never_reported_before_its_deadline(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    """With under a millisecond left the writer still waits it out (poll's 1 ms), so a
    timeout's elapsed time is never short of the deadline."""
    a, _b = pair
    fill_send_buffer(a)
    for _ in range(5):
        with pytest.raises(BroadcastTimeoutError) as info:
            send_all(a, b"x", Deadline(0.0008), SITE)
        assert info.value.elapsed is not None and info.value.elapsed >= 0.0008 - 1e-9


def test_a_deadline_counts_from_the_start_it_is_given() -> None:
    deadline = Deadline(1.0, started=time.monotonic() - 0.6)
    assert deadline.remaining() <= 0.4 and deadline.elapsed() >= 0.6


def test_one_buffer_to_a_closed_peer_fails_at_byte_0_of_its_size(
    pair: tuple[_ShimSocket, socket.socket],
) -> None:
    a, b = pair
    b.close()
    with pytest.raises(PeerClosedError) as info:
        send_all(a, b"abc", Deadline(5.0), SITE)
    err = info.value
    assert _where(err) == _WRITING
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (0, 3, "EPIPE")


def test_one_buffer_to_a_departed_peer_raises_even_with_sigpipe_at_default() -> None:
    """send_all's first send passes MSG_NOSIGNAL: EPIPE, not death by SIGPIPE (a C++
    engine process keeps SIGPIPE at its default)."""

    def rank_main(ctx: RankContext) -> str | None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        b.close()
        with a, pytest.raises(PeerClosedError) as info:
            send_all(a, b"x", Deadline(5.0), SITE)
        return info.value.errno_name

    assert run_ranks(rank_main, 1, timeout=30.0, sigpipe="default").values() == ["EPIPE"]
