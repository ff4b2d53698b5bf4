"""Self-tests of the rogue peers and roots.

Each rogue is run against a minimal well-behaved counterpart written here with
plain sockets (independent of ``wire``), and against other rogues, to prove it
emits exactly the bytes it claims and reports what the other side did.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from tpbcast.harness import rogue as r
from tpbcast.harness.wire import CloseKind

MARGIN = 5.0
JOIN = 60.0


@pytest.fixture
def base(short_dir):
    return f"{short_dir}/g"


def run_all(*fns: Callable[[], object]) -> list[object]:
    """Run each callable in a thread; return its value or the exception it raised."""
    results: list[object] = [None] * len(fns)

    def wrap(i: int, fn: Callable[[], object]) -> None:
        try:
            results[i] = fn()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=wrap, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive(), "a rogue or counterpart thread hung"
    return results


# ------------------------------------------------ minimal well-behaved counterparts


def rank_bytes(k: int) -> bytes:
    return struct.pack("=i", k)


class MiniRoot:
    """Binds <base>_0.sock; accepts; reads; replies. Plain sockets, wire v1 by hand."""

    def __init__(self, base: str, backlog: int = 8) -> None:
        self.path = f"{base}_0.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(backlog)
        self.listener.settimeout(JOIN)

    def accept(self, timeout: float = JOIN) -> socket.socket:
        self.listener.settimeout(timeout)
        conn, _ = self.listener.accept()
        conn.settimeout(JOIN)
        return conn

    def close(self) -> None:
        self.listener.close()
        os.unlink(self.path)


def read_some(conn: socket.socket, n: int, timeout: float) -> bytes:
    """Read up to n bytes until EOF or timeout (no error on either)."""
    conn.settimeout(timeout)
    buf = b""
    try:
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                break
            buf += chunk
    except TimeoutError:
        pass
    conn.settimeout(JOIN)
    return buf


def mini_connect(base: str) -> socket.socket:
    """Connect to rank 0, retrying until it listens, like a real peer."""
    deadline = time.monotonic() + JOIN
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(f"{base}_0.sock")
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            assert time.monotonic() < deadline
            time.sleep(0.01)  # connect retry back-off, like a real peer


def mini_peer(base: str, rank: int, nbytes: int) -> bytes:
    """Connect (retrying), announce, read the probe and nbytes of payload."""
    sock = mini_connect(base)
    with sock:
        sock.settimeout(JOIN)
        sock.sendall(rank_bytes(rank))
        return read_some(sock, 1 + nbytes, JOIN)


# -------------------------------------------------------------- roots vs mini peers


def test_recording_root_speaks_exact_wire_bytes(base):
    payloads = [b"hello", os.urandom(70_000), b""]
    total = sum(map(len, payloads))
    root, p2, p1 = run_all(
        lambda: r.root_recording(base, 3, payloads, observe=JOIN),
        lambda: mini_peer(base, 2, total),
        lambda: mini_peer(base, 1, total),
    )
    expected = b"Z" + b"".join(payloads)
    assert p1 == expected
    assert p2 == expected
    assert isinstance(root, r.RogueReport)
    by_rank = {link.rank: link for link in root.links}
    assert sorted(by_rank) == [1, 2]
    assert by_rank[1].announced == rank_bytes(1)
    assert by_rank[2].announced == rank_bytes(2)
    assert by_rank[1].sent == expected
    assert by_rank[1].received_after == b""
    assert by_rank[1].credentials.pid == os.getpid()
    # Wire order: probes to 1 then 2, then each payload to 1 then 2.
    order = b"ZZ" + b"".join(p + p for p in payloads)
    assert root.sent == order
    assert {link.reaction for link in root.links} == {CloseKind.EOF}
    assert root.received == b"".join(link.announced for link in root.links)


def test_wrong_probe_root_sends_that_byte(base):
    root, seen = run_all(
        lambda: r.root_wrong_probe(base, 2, probe=0x13, observe=JOIN),
        lambda: mini_peer(base, 1, 0),
    )
    assert seen == b"\x13"
    assert root.links[0].sent == b"\x13"
    assert root.links[0].reaction is CloseKind.EOF  # mini peer closed after reading


def test_never_probes_root_sends_nothing(base):
    root, seen = run_all(
        lambda: r.root_never_probes(base, 2, observe=0.3),
        lambda: mini_peer(base, 1, 0),
    )
    assert seen == b""  # EOF when the rogue gave up, never a probe
    assert root.did("withhold_probe")
    assert root.sent == b""
    assert root.links[0].announced == rank_bytes(1)
    assert root.links[0].reaction is CloseKind.OPEN


def test_never_accepts_root_still_sees_queued_peers(base):
    def peer():
        with mini_connect(base) as sock:  # succeeds into the backlog
            sock.sendall(rank_bytes(1))
            return read_some(sock, 1, JOIN)

    root, seen = run_all(lambda: r.root_never_accepts(base, hold=0.5), peer)
    assert seen == b""
    assert root.did("wait") and not root.did("accept")
    assert len(root.links) == 1
    assert root.links[0].announced == rank_bytes(1)
    assert root.duration >= 0.5
    assert not os.path.exists(f"{base}_0.sock")  # cleaned up


def test_dies_mid_broadcast_cuts_the_stream_in_wire_order(base):
    payload = bytes(range(256)) * 4  # 1024 bytes
    root, p1, p2 = run_all(
        lambda: r.root_dies_mid_broadcast(base, 3, payload, 1024 + 300),
        lambda: mini_peer(base, 1, 1024),
        lambda: mini_peer(base, 2, 1024),
    )
    assert p1 == b"Z" + payload
    assert p2 == b"Z" + payload[:300]  # then EOF
    by_rank = {link.rank: link for link in root.links}
    assert by_rank[1].sent == b"Z" + payload
    assert by_rank[2].sent == b"Z" + payload[:300]
    assert root.did("die") and root.did("close")


# -------------------------------------------------------------- peers vs mini root


def test_read_payload_peer_speaks_exact_wire_bytes(base):
    payload = os.urandom(100_000)
    mini = MiniRoot(base)

    def root():
        conn = mini.accept()
        with conn:
            announced = read_some(conn, 4, JOIN)
            conn.sendall(b"Z" + payload)
            trailing = read_some(conn, 1, JOIN)  # the peer must send nothing more
        return announced, trailing

    try:
        (announced, trailing), peer = run_all(
            root, lambda: r.peer_read_payload(base, 1, len(payload))
        )
    finally:
        mini.close()
    assert announced == rank_bytes(1)
    assert trailing == b""
    assert peer.sent == rank_bytes(1)
    assert peer.probe == 0x5A
    assert peer.received == b"Z" + payload


@pytest.mark.parametrize("rank", [-1, 0, 2, 2**31 - 1])
def test_announce_sends_exactly_the_rank(base, rank):
    mini = MiniRoot(base)

    def strict_root():
        with mini.accept() as conn:
            got = read_some(conn, 4, JOIN)
        return got  # a bad rank: close without probe

    try:
        got, peer = run_all(strict_root, lambda: r.peer_announce(base, rank, observe=JOIN))
    finally:
        mini.close()
    assert got == rank_bytes(rank)
    assert peer.sent == rank_bytes(rank)
    assert peer.probe is None
    assert peer.reaction is CloseKind.EOF
    assert peer.reaction_after is not None and peer.reaction_after < JOIN


def test_announce_reports_a_probe_when_accepted(base):
    mini = MiniRoot(base)

    def root():
        with mini.accept() as conn:
            read_some(conn, 4, JOIN)
            conn.sendall(b"Z")
            return read_some(conn, 1, JOIN)

    try:
        _, peer = run_all(root, lambda: r.peer_announce(base, 1, observe=JOIN))
    finally:
        mini.close()
    assert peer.probe == 0x5A
    assert peer.reaction is CloseKind.OPEN  # the watch ended at the probe


@pytest.mark.parametrize("nbytes", [1, 2, 3])
@pytest.mark.parametrize("then", ["close", "half_close", "stall"])
def test_truncated_handshake(base, nbytes, then):
    mini = MiniRoot(base)

    def root():
        with mini.accept() as conn:
            return read_some(conn, 4, 0.3)  # a real root would wait for byte 4

    try:
        got, peer = run_all(
            root, lambda: r.peer_truncated_handshake(base, nbytes, then=then, observe=JOIN)
        )
    finally:
        mini.close()
    assert got == rank_bytes(1)[:nbytes]
    assert peer.sent == rank_bytes(1)[:nbytes]
    if then == "close":
        assert peer.did("close")
        assert peer.reaction is None
    else:
        assert peer.reaction is CloseKind.EOF
        assert peer.did("shutdown_wr" if then == "half_close" else "stall")


def test_truncated_handshake_rejects_bad_length(base):
    with pytest.raises(ValueError, match=r"1\.\.3 bytes"):
        r.peer_truncated_handshake(base, 4)


def test_garbage_handshake(base):
    mini = MiniRoot(base)

    def root():
        with mini.accept() as conn:
            return read_some(conn, 64, 0.3)

    try:
        got, peer = run_all(root, lambda: r.peer_garbage_handshake(base, b"GET / HTTP/1.0\r\n"))
    finally:
        mini.close()
    assert got == b"GET / HTTP/1.0\r\n"
    assert peer.sent == got
    assert peer.reaction is CloseKind.EOF


def test_silent_peer_sends_nothing(base):
    mini = MiniRoot(base)

    def root():
        with mini.accept() as conn:
            return read_some(conn, 4, 0.3)

    try:
        got, peer = run_all(root, lambda: r.peer_silent(base, observe=JOIN))
    finally:
        mini.close()
    assert got == b""
    assert peer.sent == b""
    assert peer.did("connect")
    assert peer.reaction is CloseKind.EOF


def test_absent_peer_never_connects(base):
    mini = MiniRoot(base)

    def root():
        try:
            mini.accept(timeout=0.5)
        except TimeoutError:
            return "nobody came"
        return "someone came"

    try:
        got, peer = run_all(root, lambda: r.peer_absent(base, hold=0.2))
    finally:
        mini.close()
    assert got == "nobody came"
    assert not peer.did("connect")
    assert peer.duration >= 0.2


def test_close_mid_payload_breaks_the_root_write(base):
    mini = MiniRoot(base)
    payload = os.urandom(4 << 20)

    def root():
        with mini.accept() as conn:
            read_some(conn, 4, JOIN)
            try:
                conn.sendall(b"Z" + payload)
            except (BrokenPipeError, ConnectionResetError) as exc:
                return type(exc).__name__
            return "no error"

    try:
        outcome, peer = run_all(root, lambda: r.peer_close_mid_payload(base, 1, 100))
    finally:
        mini.close()
    assert outcome in {"BrokenPipeError", "ConnectionResetError"}
    assert peer.received == b"Z" + payload[:100]
    assert peer.did("close")


def test_stall_mid_payload_leaves_bytes_pending(base):
    mini = MiniRoot(base)
    payload = os.urandom(1 << 20)

    def root():
        with mini.accept() as conn:
            read_some(conn, 4, JOIN)
            conn.settimeout(0.5)
            sent = 0
            try:
                conn.sendall(b"Z" + payload)
                sent = -1
            except TimeoutError:
                sent = 1  # blocked: the peer stopped reading
            return sent

    try:
        sent, peer = run_all(
            root, lambda: r.peer_stall_mid_payload(base, 1, 10, observe=JOIN, buffer_size=4096)
        )
    finally:
        mini.close()
    assert sent == 1
    assert peer.received == b"Z" + payload[:10]
    assert peer.reaction is CloseKind.EOF  # the root hung up while we stalled
    assert peer.pending is not None and peer.pending > 0
    assert peer.buffers is not None


# ------------------------------------------------------------ rogue vs rogue


def test_rogue_peer_meets_rogue_root(base):
    root, peer = run_all(
        lambda: r.root_wrong_probe(base, 2, probe=0x13, observe=JOIN),
        lambda: r.peer_handshake(base, 1, observe=JOIN),
    )
    assert peer.probe == 0x13
    assert root.links[0].announced == peer.sent == rank_bytes(1)
    assert root.links[0].sent == bytes([peer.probe])
    assert root.links[0].reaction is CloseKind.EOF


def test_handshake_peer_sees_no_probe_from_never_probes(base):
    root, peer = run_all(
        lambda: r.root_never_probes(base, 2, observe=JOIN),
        lambda: r.peer_handshake(base, 1, observe=0.3),
    )
    assert peer.probe is None
    assert peer.reaction is CloseKind.OPEN
    assert root.links[0].reaction is CloseKind.EOF
    assert root.links[0].reaction_after is not None and root.links[0].reaction_after < JOIN


def test_dies_mid_broadcast_vs_read_payload_peers(base):
    payload = os.urandom(1000)
    root, p1, p2 = run_all(
        lambda: r.root_dies_mid_broadcast(base, 3, payload, 1500),
        lambda: r.peer_read_payload(base, 1, 1000),
        lambda: r.peer_read_payload(base, 2, 1000),
    )
    assert isinstance(root, r.RogueReport)
    assert p1.received == b"Z" + payload
    assert isinstance(p2, r.RogueError)
    assert "could not read 1000 payload byte(s)" in str(p2)
    assert "then eof" in str(p2)
    assert p2.report.received == b"Z" + payload[:500]


def test_recording_root_rejects_bad_ranks_with_partial_report(base):
    root, peer = run_all(
        lambda: r.root_recording(base, 2, [b"x"]),
        lambda: r.peer_announce(base, 5, observe=JOIN),
    )
    assert isinstance(root, r.RogueError)
    assert "announced ranks [5]" in str(root)
    assert root.report.links[0].announced == rank_bytes(5)
    assert peer.probe is None and peer.reaction is CloseKind.EOF


def test_truncated_peer_vs_rogue_root_is_reported_as_setup_failure(base):
    root, peer = run_all(
        lambda: r.root_never_probes(base, 2),
        lambda: r.peer_truncated_handshake(base, 2, then="close"),
    )
    assert isinstance(root, r.RogueError)
    assert root.report.links[0].announced == rank_bytes(1)[:2]
    assert peer.sent == rank_bytes(1)[:2]


def test_stall_peer_vs_recording_root(base):
    payload = os.urandom(1 << 20)
    root, peer = run_all(
        lambda: r.root_recording(base, 2, [payload], timeout=1.0, buffer_size=4096),
        lambda: r.peer_stall_mid_payload(base, 1, 10, observe=JOIN, buffer_size=4096),
    )
    assert isinstance(root, r.RogueError)  # its send timed out: the stall was real
    assert "payload #0 to rank 1 failed" in str(root)
    assert peer.reaction is CloseKind.EOF
    assert peer.pending and peer.pending > 0


def test_abstract_namespace(base):
    root, peer = run_all(
        lambda: r.root_recording(base, 2, [b"abc"], abstract=True, observe=JOIN),
        lambda: r.peer_read_payload(base, 1, 3, abstract=True),
    )
    assert peer.received == b"Zabc"
    assert root.address.startswith("@")
    assert not os.path.exists(f"{base}_0.sock")


def test_connect_failure_raises_with_report(base):
    with pytest.raises(r.RogueError, match="could not connect to rank 0") as info:
        r.peer_announce(base, 1, timeout=0.2)
    assert info.value.report.did("error")
    assert not info.value.report.did("connect")


# ------------------------------------------------------------- as rank targets


class FakeCtx:
    def __init__(self, base: str, world_size: int) -> None:
        self.base_path = base
        self.world_size = world_size
        self.records: list[tuple[str, dict[str, object]]] = []

    def record(self, kind: str, /, **details: object) -> None:
        self.records.append((kind, details))


def test_rogue_targets_use_the_context_and_record_the_fault(base):
    root_ctx, peer_ctx = FakeCtx(base, 2), FakeCtx(base, 2)
    root_target = r.rogue_root("wrong_probe", probe=0x01, observe=JOIN)
    peer_target = r.rogue_peer("handshake", rank=1, observe=JOIN)
    root, peer = run_all(lambda: root_target(root_ctx), lambda: peer_target(peer_ctx))
    assert peer.probe == 0x01
    kind, details = peer_ctx.records[0]
    assert kind == "rogue_peer"
    assert details["probe"] == 0x01 and details["bytes_sent"] == 4
    assert root_ctx.records[0][0] == "rogue_root"
    assert root.links[0].sent == b"\x01"


def test_unknown_behaviour_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown rogue peer behaviour 'anounce'; known: absent"):
        r.rogue_peer("anounce")
    with pytest.raises(ValueError, match="never_accepts"):
        r.rogue_root("nope")


def test_reports_and_errors_pickle(base):
    _, peer = run_all(
        lambda: r.root_recording(base, 2, [b"q"], observe=JOIN),
        lambda: r.peer_read_payload(base, 1, 1),
    )
    assert pickle.loads(pickle.dumps(peer)) == peer
    err = r.RogueError("boom", peer)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == "boom" and back.report == peer


def _rogue_group(ctx):
    if ctx.rank == 0:
        return r.rogue_root("recording", payloads=[b"abc", b"de"], observe=JOIN)(ctx)
    return r.rogue_peer("read_payload", rank=ctx.rank, nbytes=5)(ctx)


def test_rogues_as_forked_rank_targets():
    from tpbcast.harness import run_ranks

    result = run_ranks(_rogue_group, 3, timeout=JOIN)
    result.raise_for_failure()
    root = result.outcomes[0].value
    assert root.sent == b"ZZabcabcdede"
    for rank in (1, 2):
        outcome = result.outcomes[rank]
        assert outcome.value.received == b"Zabcde"
        assert [f.action for f in outcome.faults] == ["rogue_peer"]
        assert "bytes_sent=4" in outcome.faults[0].detail
    assert [f.action for f in result.outcomes[0].faults] == ["rogue_root"]
    assert {link.credentials.pid for link in root.links} == {
        result.outcomes[1].pid,
        result.outcomes[2].pid,
    }
    assert not result.survivors
    assert not result.leftover_files


def test_root_that_cannot_bind_raises_rogue_error(base):
    with open(f"{base}_0.sock", "w") as handle:
        handle.write("a regular file: never replaced")
    with pytest.raises(r.RogueError, match="could not bind rank 0's socket") as info:
        r.root_recording(base, 2)
    assert info.value.report.did("error")
    with open(f"{base}_0.sock") as handle:
        assert handle.read() == "a regular file: never replaced"


def test_duplicate_rank_peers(base):
    root, p1, p2 = run_all(
        lambda: r.root_never_probes(base, 3, observe=0.3),
        lambda: r.peer_announce(base, 1, observe=JOIN),
        lambda: r.peer_announce(base, 1, observe=JOIN),
    )
    assert [link.announced for link in root.links] == [rank_bytes(1), rank_bytes(1)]
    assert p1.sent == p2.sent == rank_bytes(1)
    assert p1.reaction is p2.reaction is CloseKind.EOF


def test_a_refused_send_is_a_reaction_not_a_rogue_failure():
    from tpbcast.harness import _rogue_peer, _rogue_report
    from tpbcast.harness.wire import Deadline

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b.close()  # rank 0 dropped us before reading anything
    rec = _rogue_report._Recorder("peer", "announce(1)", "/x_0.sock")
    with a:
        fields = _rogue_peer._send_fault(rec, a, rank_bytes(1), Deadline.after(10.0))
    assert fields is not None
    assert fields["reaction"] in {CloseKind.EOF, CloseKind.RESET}
    report = rec.report(**fields)
    assert report.did("send_refused") and report.sent == b""
    assert "EPIPE" in report.actions[0].note


def test_peer_announce_to_a_root_that_drops_it_unread(base):
    mini = MiniRoot(base)

    def rude_root():
        mini.accept().close()  # no read: the announcement may or may not be sent yet

    try:
        _, peer = run_all(rude_root, lambda: r.peer_announce(base, 1, observe=JOIN))
    finally:
        mini.close()
    assert isinstance(peer, r.RogueReport)  # never a RogueError: this is the reaction
    assert peer.reaction in {CloseKind.EOF, CloseKind.RESET}
    assert peer.probe is None


def test_rogue_kwargs_are_checked_in_the_test_not_in_the_rank():
    with pytest.raises(TypeError, match=r"rogue peer 'announce': .*'rnak'.*signature is announce"):
        r.rogue_peer("announce", rnak=1)
    with pytest.raises(TypeError, match="rogue root 'wrong_probe'"):
        r.rogue_root("wrong_probe", probe_byte=0x13)
    assert r.rogue_root("never_accepts", hold=0.1).kwargs == {"hold": 0.1}
