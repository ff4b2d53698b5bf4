"""Self-tests of tpbcast.harness.wire: the suite's own byte-level wire-v1 speaker."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import sys
import threading
import time

import pytest

from tpbcast.harness import RankContext, Status, run_ranks
from tpbcast.harness import wire as w

MARGIN = 5.0  # generous: a 4x oversubscribed 2-core box must not make these flaky


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


# --------------------------------------------------------------------- constants


def test_constants_match_wire_v1():
    assert w.PROBE == 0x5A
    assert w.PROBE_BYTE == b"Z"
    assert w.RANK_SIZE == 4
    assert w.RANK_STRUCT.format == "=i"
    assert w.SUN_PATH_MAX == 107


def test_rank_is_native_endian_int32():
    native = (1).to_bytes(4, sys.byteorder)
    assert w.pack_rank(1) == native
    assert w.pack_rank(-1) == b"\xff\xff\xff\xff"
    assert w.pack_rank(7) == struct.pack("=i", 7)
    assert w.unpack_rank(w.pack_rank(-123456)) == -123456
    with pytest.raises(ValueError, match="4 bytes, got 3"):
        w.unpack_rank(b"\x01\x00\x00")
    with pytest.raises(struct.error):
        w.pack_rank(2**31)


def test_socket_path_and_abstract_address():
    assert w.socket_path("/tmp/x/g") == "/tmp/x/g_0.sock"
    assert w.address_of("/tmp/x/g") == "/tmp/x/g_0.sock"
    assert w.address_of("/tmp/x/g", abstract=True) == "\0/tmp/x/g_0.sock"
    assert w.describe_address("\0/tmp/x/g_0.sock") == "@/tmp/x/g_0.sock"
    assert w.describe_address("/a") == "/a"


def test_deadline():
    d = w.Deadline.after(60.0)
    assert 59.0 < d.remaining() <= 60.0
    assert not d.expired()
    assert d.poll_ms() >= 59_000
    past = w.Deadline.after(-1.0)
    assert past.expired()
    assert past.remaining() == 0.0
    assert past.poll_ms() == 0


# ------------------------------------------------------------------ connect/listen


def test_connect_times_out_after_retrying_and_names_errno(short_dir):
    start = time.monotonic()
    with pytest.raises(w.WireTimeoutError) as info:
        w.connect(f"{short_dir}/nobody_0.sock", w.Deadline.after(0.3), retry_interval=0.01)
    elapsed = time.monotonic() - start
    err = info.value
    assert 0.3 <= elapsed < 0.3 + MARGIN
    assert err.errno_name == "ENOENT"
    assert "attempt(s)" in str(err)
    attempts = int(str(err).split(" attempt(s)")[0].rsplit("(", 1)[1])
    assert attempts > 1, str(err)  # it retried, it did not give up at once
    assert isinstance(err, TimeoutError)


def test_connect_fails_fast_on_non_retryable_errno(short_dir):
    blocker = f"{short_dir}/file"
    with open(blocker, "w"):
        pass
    start = time.monotonic()
    with pytest.raises(w.WireClosedError) as info:
        w.connect(f"{blocker}/g_0.sock", w.Deadline.after(30.0))
    assert time.monotonic() - start < MARGIN
    assert info.value.errno_name == "ENOTDIR"


def test_connect_fails_fast_on_a_path_too_long_for_sun_path(short_dir):
    start = time.monotonic()
    with pytest.raises(w.WireClosedError, match="too long") as info:
        w.connect(f"{short_dir}/{'x' * 200}_0.sock", w.Deadline.after(30.0))
    assert time.monotonic() - start < MARGIN
    assert info.value.how == "error"


def test_connect_succeeds_when_listener_appears_later(short_dir):
    address = f"{short_dir}/g_0.sock"
    result: dict[str, object] = {}

    def peer():
        try:
            with w.connect(address, w.Deadline.after(30.0), retry_interval=0.01) as sock:
                result["peer"] = sock.getpeername()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()
    listener = w.listen(address, 1)
    with listener, w.accept(listener, w.Deadline.after(30.0)) as conn:
        assert conn.fileno() >= 0
    thread.join(30.0)
    assert not thread.is_alive()
    assert result == {"peer": address}


def test_listen_replaces_a_stale_socket_but_never_a_regular_file(short_dir):
    stale = f"{short_dir}/s_0.sock"
    old = socket.socket(socket.AF_UNIX)
    old.bind(stale)
    old.close()
    with w.listen(stale, 1):
        assert os.path.exists(stale)
    regular = f"{short_dir}/r_0.sock"
    with open(regular, "w") as handle:
        handle.write("keep")
    with pytest.raises(OSError, match="in use"):
        w.listen(regular, 1)
    with open(regular) as handle:
        assert handle.read() == "keep"


def test_abstract_listen_and_connect(short_dir):
    address = w.address_of(f"{short_dir}/g", abstract=True)
    with w.listen(address, 1) as listener:
        assert not os.path.exists(f"{short_dir}/g_0.sock")
        with (
            w.connect(address, w.Deadline.after(10.0)) as sock,
            w.accept(listener, w.Deadline.after(10.0)) as conn,
        ):
            w.send_all(sock, b"\x02\x00\x00\x00", w.Deadline.after(10.0))
            assert w.recv_exact(conn, 4, w.Deadline.after(10.0)) == w.pack_rank(2)


def test_accept_times_out(short_dir):
    with w.listen(f"{short_dir}/g_0.sock", 1) as listener:
        start = time.monotonic()
        with pytest.raises(w.WireTimeoutError, match="no peer connected"):
            w.accept(listener, w.Deadline.after(0.2))
        assert 0.2 <= time.monotonic() - start < 0.2 + MARGIN


# ------------------------------------------------------------------- send / recv


def test_send_all_and_recv_exact_round_trip_with_short_io():
    a, b = _pair()
    for sock in (a, b):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    payload = os.urandom(1 << 20)  # far larger than the buffers: many short writes
    got: dict[str, bytes] = {}
    reader = threading.Thread(
        target=lambda: got.__setitem__("data", w.recv_exact(b, len(payload), w.Deadline.after(60))),
        daemon=True,
    )
    reader.start()
    with a, b:
        assert w.send_all(a, payload, w.Deadline.after(60)) == len(payload)
        reader.join(60)
    assert got["data"] == payload


def test_recv_exact_eof_reports_partial_bytes():
    a, b = _pair()
    with a, b:
        a.sendall(b"\x01\x00")
        a.close()
        with pytest.raises(w.WireClosedError) as info:
            w.recv_exact(b, 4, w.Deadline.after(10.0), what="rank handshake")
    err = info.value
    assert (err.how, err.got, err.expected) == ("eof", b"\x01\x00", 4)
    assert "rank handshake: expected 4 byte(s), got 2 byte(s)" in str(err)
    assert "then eof" in str(err)
    assert "Success" not in str(err)


def test_recv_exact_reset_when_peer_closes_with_unread_data():
    a, b = _pair()
    with a, b:
        b.sendall(b"unread by a")  # queued in a's receive buffer
        a.close()  # closing with unread data makes b's next read ECONNRESET
        with pytest.raises(w.WireClosedError) as info:
            w.recv_exact(b, 1, w.Deadline.after(10.0))
    assert info.value.how == "reset"
    assert info.value.errno_name == "ECONNRESET"


def test_recv_exact_timeout_keeps_partial_bytes():
    a, b = _pair()
    with a, b:
        a.sendall(b"Z")
        start = time.monotonic()
        with pytest.raises(w.WireTimeoutError) as info:
            w.recv_exact(b, 5, w.Deadline.after(0.2), what="payload")
        assert 0.2 <= time.monotonic() - start < 0.2 + MARGIN
    assert info.value.got == b"Z"
    assert info.value.how == "timeout"
    assert "expected 5 byte(s), got 1 byte(s) b'Z', then timeout after" in str(info.value)


def test_recv_until_eof_and_limit():
    a, b = _pair()
    with a, b:
        a.sendall(b"abc")
        a.shutdown(socket.SHUT_WR)
        assert w.recv_until_eof(b, w.Deadline.after(10.0)) == b"abc"
    a, b = _pair()
    with a, b:
        a.sendall(b"abcdef")
        with pytest.raises(w.WireTimeoutError, match="more than 3 byte"):
            w.recv_until_eof(b, w.Deadline.after(10.0), limit=3)
        with pytest.raises(w.WireTimeoutError, match="never closed"):
            w.recv_until_eof(b, w.Deadline.after(0.1))


def _send_to_a_closed_peer(ctx: RankContext) -> tuple[str | None, str, str]:
    a, b = _pair()
    b.close()
    with a, pytest.raises(w.WireClosedError) as info:
        w.send_all(a, b"x" * 100, w.Deadline.after(10.0))
    return info.value.errno_name, info.value.how, str(info.value)


def test_send_all_to_closed_peer_is_epipe_not_sigpipe():
    """A rank with SIGPIPE at its default action: MSG_NOSIGNAL must keep it alive."""
    outcome = run_ranks(_send_to_a_closed_peer, 1, sigpipe="default", timeout=30).outcomes[0]
    assert outcome.status is Status.OK, outcome.report()  # SIGNALED by SIGPIPE if it leaked
    errno_name, how, message = outcome.value  # type: ignore[misc]
    assert (errno_name, how) == ("EPIPE", "closed")
    assert message.startswith("send: closed [EPIPE] after ")
    assert "0 of 100 byte(s) written before the failure" in message


def test_send_all_times_out_when_the_reader_stalls():
    a, b = _pair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        start = time.monotonic()
        with pytest.raises(w.WireTimeoutError) as info:
            w.send_all(a, b"x" * (4 << 20), w.Deadline.after(0.2), what="payload to rank 1")
        assert 0.2 <= time.monotonic() - start < 0.2 + MARGIN
    assert "the reader stopped reading" in str(info.value)
    assert "payload to rank 1" in str(info.value)


# --------------------------------------------------------------------- closing


def test_expect_closed_tells_eof_reset_and_open():
    a, b = _pair()
    with a, b:
        a.sendall(b"late")
        a.close()
        seen = w.expect_closed(b, w.Deadline.after(10.0))
    assert (seen.kind, seen.extra, seen.closed) == (w.CloseKind.EOF, b"late", True)

    a, b = _pair()
    with a, b:
        b.sendall(b"x")
        a.close()
        assert w.expect_closed(b, w.Deadline.after(10.0)).kind is w.CloseKind.RESET

    a, b = _pair()
    with a, b:
        start = time.monotonic()
        seen = w.expect_closed(b, w.Deadline.after(0.2))
        assert seen.kind is w.CloseKind.OPEN
        assert not seen.closed
        assert 0.2 <= time.monotonic() - start < 0.2 + MARGIN


def test_expect_closed_stop_after_never_reads_past_it():
    a, b = _pair()
    with a, b:
        a.sendall(b"Zpayload")
        seen = w.expect_closed(b, w.Deadline.after(10.0), stop_after=1)
        assert (seen.kind, seen.extra) == (w.CloseKind.OPEN, b"Z")
        assert w.recv_exact(b, 7, w.Deadline.after(10.0)) == b"payload"


def test_hang_up_is_seen_without_reading_queued_data():
    a, b = _pair()
    with a, b:
        a.sendall(b"queued")
        assert not w.is_hung_up(b)
        assert not w.wait_hung_up(b, w.Deadline.after(0.05))
        a.close()
        assert w.wait_hung_up(b, w.Deadline.after(10.0))
        assert w.is_hung_up(b)
        assert b.recv(100) == b"queued"  # still there: nothing was consumed


def test_peer_credentials_name_our_process():
    a, b = _pair()
    with a, b:
        creds = w.peer_credentials(a)
    assert creds == w.PeerCredentials(os.getpid(), os.getuid(), os.getgid())


def test_wire_errors_pickle_with_every_field():
    err = w.WireClosedError(
        "handshake", expected=4, got=b"\x01", how="eof", elapsed=0.5, errno_name=None
    )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is w.WireClosedError
    assert (back.what, back.expected, back.got, back.how) == ("handshake", 4, b"\x01", "eof")
    assert str(back) == str(err)
    timeout = w.WireTimeoutError("x", expected=None, got=b"", how="timeout", elapsed=1.0)
    assert isinstance(pickle.loads(pickle.dumps(timeout)), TimeoutError)
