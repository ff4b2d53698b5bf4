"""Mixed groups: a reference rank and raw-socket ranks that speak wire v1 by hand.

The raw side is written here with ``tpbcast.harness.wire`` calls following the
byte sequence of the protocol (4-byte native int32 rank, one 0x5a probe, then raw
payload bytes, nothing else) -- not through tpbcast.reference_impl -- so these
tests pin the bytes on the wire in both roles.
"""

from __future__ import annotations

import socket
import struct

import pytest

from tpbcast.harness import RankContext, SyncTimeoutError, run_ranks, wire
from tpbcast.reference_impl import CpuTpBroadcaster

from ._helpers import RAW_WAIT, RUN, fast_config, payload

SIZES = (5, 0, 70001)
RAW_PROBE = bytes([wire.PROBE])


def _ends_here(sock: socket.socket, deadline: wire.Deadline) -> None:
    """The stream must end here with an orderly EOF: no trailing bytes (no header, no
    footer), no reset."""
    seen = wire.expect_closed(sock, deadline)
    assert seen.kind is wire.CloseKind.EOF and seen.extra == b"", seen


@pytest.mark.parametrize("world_size", [2, 3])
def test_reference_root_with_raw_peers(base_path: str, world_size: int) -> None:
    expected = b"".join(payload(40 + i, n) for i, n in enumerate(SIZES))

    def root(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, world_size, base_path)
        b.broadcast([payload(40 + i, n) for i, n in enumerate(SIZES)])
        b.broadcast(bytearray(b"\x01\x02"))
        b.reset()  # the raw peers must then see EOF right after the payload
        return True

    def raw_peer(rank: int):
        def main(ctx: RankContext) -> tuple[bytes, bytes, bytes]:
            deadline = wire.Deadline.after(RAW_WAIT)
            sock = wire.connect(wire.socket_path(base_path), deadline)
            wire.send_all(sock, struct.pack("=i", rank), deadline)  # 4 bytes, native int32
            probe = wire.recv_exact(sock, 1, deadline)
            data = wire.recv_exact(sock, len(expected), deadline)
            tail = wire.recv_exact(sock, 2, deadline)
            _ends_here(sock, deadline)  # no header, no trailer, nothing else
            sock.close()
            return probe, data, tail

        return main

    # raw peers start in descending rank order: slots follow the announced rank
    ranks = {0: root} | {i: raw_peer(world_size - i) for i in range(1, world_size)}
    results = run_ranks(ranks, **RUN).values()
    assert results[0] is True
    for probe, data, tail in results[1:]:
        assert probe == RAW_PROBE
        assert data == expected
        assert tail == b"\x01\x02"


def test_probe_only_after_every_peer_announced(base_path: str) -> None:
    """Rank 0 sends 0x5a to nobody before the last peer's rank arrived."""

    def root(ctx: RankContext) -> bool:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(0, 3, base_path)
        b.reset()
        return True

    def raw_peer1(ctx: RankContext) -> tuple[bytes, bool]:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        wire.send_all(sock, struct.pack("=i", 1), deadline)
        probe = wire.recv_exact(sock, 1, deadline)
        # peer 2 notified BEFORE sending its rank; the probe can only follow that rank, so
        # the notification is already here: look without waiting for it (1 ms poll)
        try:
            ctx.wait("peer2_announcing", timeout=0.001)
            announced_before_probe = True
        except SyncTimeoutError:
            announced_before_probe = False
        _ends_here(sock, deadline)
        return probe, announced_before_probe

    def raw_peer2(ctx: RankContext) -> bytes:
        deadline = wire.Deadline.after(RAW_WAIT)
        sock = wire.connect(wire.socket_path(base_path), deadline)
        ctx.notify("peer2_announcing")
        wire.send_all(sock, struct.pack("=i", 2), deadline)
        probe = wire.recv_exact(sock, 1, deadline)
        _ends_here(sock, deadline)
        return probe

    ranks = {0: root, 1: raw_peer1, 2: raw_peer2}
    ok, (probe1, ordered), probe2 = run_ranks(ranks, **RUN).values()
    assert ok and probe1 == probe2 == RAW_PROBE
    assert ordered


@pytest.mark.parametrize("world_size", [2, 4])
def test_raw_root_with_reference_peers(base_path: str, world_size: int) -> None:
    expected = [payload(60 + i, n) for i, n in enumerate(SIZES)]

    def raw_root(ctx: RankContext) -> list[int]:
        deadline = wire.Deadline.after(RAW_WAIT)
        listener = wire.listen(wire.socket_path(base_path), world_size - 1)
        by_rank = {}
        for _ in range(world_size - 1):
            conn = wire.accept(listener, deadline)
            (rank,) = struct.unpack("=i", wire.recv_exact(conn, 4, deadline))
            assert 0 < rank < world_size and rank not in by_rank
            by_rank[rank] = conn
        for rank in sorted(by_rank):  # probe in ascending rank order
            wire.send_all(by_rank[rank], RAW_PROBE, deadline)
        for rank in sorted(by_rank):  # raw payload, buffers back to back, no header
            wire.send_all(by_rank[rank], b"".join(expected), deadline)
        for conn in by_rank.values():
            _ends_here(conn, deadline)  # peers send nothing after their rank
            conn.close()
        listener.close()
        return sorted(by_rank)

    def peer(ctx: RankContext) -> list[bytes]:
        b = CpuTpBroadcaster(fast_config())
        b.initialize(ctx.rank + 1, world_size, base_path)
        bufs = [bytearray(n) for n in SIZES]
        b.broadcast(bufs)
        b.reset()
        return [bytes(x) for x in bufs]

    # the peers start first: their connect retries until the raw root listens
    ranks = dict.fromkeys(range(world_size - 1), peer) | {world_size - 1: raw_root}
    results = run_ranks(ranks, **RUN).values()
    assert results[-1] == list(range(1, world_size))
    for got in results[:-1]:
        assert got == expected
