"""The broadcast hot path: what it hands to the socket, and what it must still do.

In-process, over socket pairs (no ranks): ``flat_buffer`` passes a flat byte buffer to
the socket as it is and sends everything else to ``prepare_buffers``; ``send_all`` makes
no syscall for an empty buffer (a send of nothing to a closed peer fails with EPIPE);
``recv_exact(wait_first=True)`` still honours its deadline and the abort pipe; one
``sendmsg`` carries several buffers and a partial one is finished view by view.
"""

from __future__ import annotations

import array
import os
import threading
import time

import pytest

from tpbcast.reference_impl import BroadcastError, BroadcastTimeoutError
from tpbcast.reference_impl._buffers import flat_buffer
from tpbcast.reference_impl._io import Deadline, Site, make_poller, recv_exact, send_all, send_views

SITE = Site(rank=1, peer=0, phase="broadcast", path="/tmp/x_0.sock", who="rank 0")


def test_flat_buffer_passes_byte_buffers_through_and_nothing_else():
    data = bytearray(8)
    view = memoryview(data)
    assert flat_buffer(data, writable=True) is data
    assert flat_buffer(view, writable=True) is view
    assert flat_buffer(b"abc", writable=False) == b"abc"
    # Everything else takes prepare_buffers (which converts or refuses with a reason).
    assert flat_buffer(b"abc", writable=True) is None  # a peer cannot receive into bytes
    assert flat_buffer(memoryview(b"abc"), writable=True) is None  # read-only
    assert flat_buffer(view[::2], writable=True) is None  # strided
    assert flat_buffer(view.cast("I"), writable=True) is None  # len() is not the byte count
    assert flat_buffer(memoryview(array.array("i", [1, 2])), writable=False) is None
    assert flat_buffer([data], writable=True) is None
    released = memoryview(bytearray(4))
    released.release()
    assert flat_buffer(released, writable=True) is None


def test_send_all_of_nothing_makes_no_syscall(pair):
    a, b = pair
    b.close()  # any send to a closed peer fails with EPIPE
    with pytest.raises(BroadcastError):
        send_all(a, memoryview(b"x"), Deadline(5.0), SITE)
    assert send_all(a, memoryview(b""), Deadline(5.0), SITE) == 0


def test_send_views_one_sendmsg_then_view_by_view(pair):
    a, b = pair
    small = [memoryview(bytes([i]) * 100) for i in range(5)]
    assert send_views(a, small, Deadline(5.0), SITE, total=500) == 500
    assert b.recv(1000) == b"".join(bytes(v) for v in small)
    # More than the socket buffer holds: sendmsg sends part, the rest goes view by view
    # while a reader drains the other end.
    big = [memoryview(os.urandom(300_000)), memoryview(b""), memoryview(os.urandom(500_000))]
    got = bytearray()

    def drain() -> None:
        deadline = time.monotonic() + 10
        while len(got) < 800_000 and time.monotonic() < deadline:
            try:
                got.extend(b.recv(1 << 16))
            except BlockingIOError:
                time.sleep(0.001)

    reader = threading.Thread(target=drain)
    reader.start()
    assert send_views(a, big, Deadline(10.0), SITE, total=800_000) == 800_000
    reader.join(15)
    assert bytes(got) == b"".join(bytes(v) for v in big)


def test_recv_wait_first_reads_late_data(pair):
    a, b = pair
    out = bytearray(6)
    timer = threading.Timer(0.05, lambda: b.send(b"abc") and b.send(b"def"))
    timer.start()
    poller = make_poller(a, writing=False, abort_fd=None)
    assert recv_exact(a, out, Deadline(5.0), SITE, poller=poller, wait_first=True) == 6
    timer.join()
    assert out == b"abcdef"


def test_recv_wait_first_keeps_its_deadline(pair):
    a, _b = pair
    start = time.monotonic()
    with pytest.raises(BroadcastTimeoutError) as info:
        recv_exact(a, bytearray(4), Deadline(0.2), SITE, wait_first=True)
    took = time.monotonic() - start
    assert 0.19 <= took < 2.0
    assert info.value.bytes_done == 0 and info.value.bytes_total == 4


def test_recv_wait_first_stops_on_the_abort_pipe(pair):
    a, _b = pair
    r, w = os.pipe()
    try:
        os.write(w, b"!")
        poller = make_poller(a, writing=False, abort_fd=r)
        with pytest.raises(BroadcastError) as info:
            recv_exact(
                a, bytearray(4), Deadline(5.0), SITE, abort_fd=r, poller=poller, wait_first=True
            )
        assert "aborted" in str(info.value) and info.value.errno_name == "ECANCELED"
    finally:
        os.close(r)
        os.close(w)


def test_deadline_restart_starts_the_same_span_again():
    deadline = Deadline(0.05)
    time.sleep(0.06)
    assert deadline.expired()
    assert deadline.restart() is deadline
    assert not deadline.expired() and 0.0 < deadline.remaining() <= 0.05
    forever = Deadline(None).restart()
    assert forever.poll_ms() is None and not forever.expired()
