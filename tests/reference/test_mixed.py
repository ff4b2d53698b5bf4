"""Mixed groups: a reference rank and raw-socket ranks that speak wire v1 by hand.

The raw side is written here with plain ``socket`` calls following the byte
sequence of the protocol (4-byte native int32 rank, one 0x5a probe, then raw
payload bytes, nothing else) -- not through tpbcast.reference_impl -- so these
tests pin the bytes on the wire in both roles.
"""

from __future__ import annotations

import struct

import pytest

from tpbcast.reference_impl import CpuTpBroadcaster

from ._forkrun import Event, fork_all, values
from ._helpers import (
    RAW_PROBE,
    fast_config,
    payload,
    raw_accept,
    raw_connect,
    raw_expect_eof,
    raw_listen,
    raw_recv_exact,
)

SIZES = (5, 0, 70001)


@pytest.mark.parametrize("world_size", [2, 3])
def test_reference_root_with_raw_peers(base_path: str, world_size: int) -> None:
    expected = b"".join(payload(40 + i, n) for i, n in enumerate(SIZES))

    def root() -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, world_size, base_path)
        b.broadcast([payload(40 + i, n) for i, n in enumerate(SIZES)])
        b.broadcast(bytearray(b"\x01\x02"))
        b.reset()  # the raw peers must then see EOF right after the payload
        return True

    def raw_peer(rank: int):
        def main() -> tuple[bytes, bytes, bytes]:
            sock = raw_connect(base_path + "_0.sock")
            sock.sendall(struct.pack("=i", rank))  # 4 bytes, native-endian int32
            probe = raw_recv_exact(sock, 1)
            data = raw_recv_exact(sock, len(expected))
            tail = raw_recv_exact(sock, 2)
            raw_expect_eof(sock)  # no header, no trailer, nothing else
            sock.close()
            return probe, data, tail

        return main

    # raw peers start in descending rank order: slots follow the announced rank
    results = values(fork_all([root] + [raw_peer(k) for k in range(world_size - 1, 0, -1)]))
    assert results[0] is True
    for probe, data, tail in results[1:]:
        assert probe == RAW_PROBE
        assert data == expected
        assert tail == b"\x01\x02"


def test_probe_only_after_every_peer_announced(base_path: str) -> None:
    """Rank 0 sends 0x5a to nobody before the last peer's rank arrived."""
    peer2_announcing = Event()

    def root() -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 3, base_path)
        b.reset()
        return True

    def raw_peer1() -> tuple[bytes, bool]:
        sock = raw_connect(base_path + "_0.sock")
        sock.sendall(struct.pack("=i", 1))
        probe = raw_recv_exact(sock, 1)
        # peer 2 notified BEFORE sending its rank; the probe can only follow that rank
        announced_before_probe = peer2_announcing.is_set()
        raw_expect_eof(sock)
        return probe, announced_before_probe

    def raw_peer2() -> bytes:
        sock = raw_connect(base_path + "_0.sock")
        peer2_announcing.notify()
        sock.sendall(struct.pack("=i", 2))
        probe = raw_recv_exact(sock, 1)
        raw_expect_eof(sock)
        return probe

    ok, (probe1, ordered), probe2 = values(fork_all([root, raw_peer1, raw_peer2]))
    assert ok and probe1 == probe2 == RAW_PROBE
    assert ordered


@pytest.mark.parametrize("world_size", [2, 4])
def test_raw_root_with_reference_peers(base_path: str, world_size: int) -> None:
    expected = [payload(60 + i, n) for i, n in enumerate(SIZES)]

    def raw_root() -> list[int]:
        listener = raw_listen(base_path + "_0.sock", world_size - 1)
        by_rank = {}
        for _ in range(world_size - 1):
            conn = raw_accept(listener)
            (rank,) = struct.unpack("=i", raw_recv_exact(conn, 4))
            assert 0 < rank < world_size and rank not in by_rank
            by_rank[rank] = conn
        for rank in sorted(by_rank):  # probe in ascending rank order
            by_rank[rank].sendall(RAW_PROBE)
        for rank in sorted(by_rank):  # raw payload, buffers back to back, no header
            by_rank[rank].sendall(b"".join(expected))
        for conn in by_rank.values():
            raw_expect_eof(conn)  # peers send nothing after their rank; reset = EOF
            conn.close()
        listener.close()
        return sorted(by_rank)

    def peer(rank: int):
        def main() -> list[bytes]:
            b = CpuTpBroadcaster(fast_config())
            b.initialize(rank, world_size, base_path)
            bufs = [bytearray(n) for n in SIZES]
            b.broadcast(bufs)
            b.reset()
            return [bytes(x) for x in bufs]

        return main

    # the peers start first: their connect retries until the raw root listens
    outcomes = fork_all([peer(k) for k in range(1, world_size)] + [raw_root])
    results = values(outcomes)
    assert results[-1] == list(range(1, world_size))
    for got in results[:-1]:
        assert got == expected
