"""WIRE: the bytes on the socket, judged by a byte-level rogue root and rogue peers."""

from __future__ import annotations

import os
import signal
import socket
import struct

import pytest

from tpbcast.conformance.plugin import require

from . import _support as s
from ._support import rogue_peer, rogue_root

PROBE = 0x5A


@pytest.mark.clause("WIRE-1", "WIRE-4", "WIRE-6", "WIRE-9", "WIRE-12")
@pytest.mark.world_size(2, 3)
def test_root_sends_raw_payloads_to_byte_level_peers(tpbcast_run, tpbcast_impl, world_size):
    """The implementation as rank 0, the suite as every peer, reading raw bytes."""
    seed = tpbcast_run.seed
    first, second = s.payload(seed, 1000, "a"), s.payload(seed, 3, "b")

    def target(ctx):
        if ctx.rank == 0:
            before = s.fd_table()
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, ctx.world_size, ctx.base_path)
            listening = s.listening_sockets(before)
            for data in (first, second):
                bcast.broadcast(bytearray(data))
            bcast.reset()
            return listening, s.sock_path(ctx.base_path)
        return rogue_peer(
            "read_payload", rank=ctx.rank, nbytes=len(first) + len(second), observe=s.OBSERVE
        )(ctx)

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    listening, path = result.outcomes[0].value
    assert listening == [path], s.clause(
        "WIRE-1", "rank 0 listens on exactly one socket, <base_path>_0.sock", listening
    )
    # The implementation is rank 0: whatever byte-level peer k saw is rank 0's doing.
    for peer, report in enumerate(s.ok_values(result)[1:], start=1):
        assert report.probe == PROBE, s.clause(
            "WIRE-4", f"peer {peer} gets the probe 0x5a", report.probe, rank=0
        )
        assert report.received == bytes([PROBE]) + first + second, s.clause(
            "WIRE-6",
            f"peer {peer}'s stream is the probe then the raw payloads back to back, no header "
            "(and all on the bootstrap connection, WIRE-9)",
            f"{len(report.received)} bytes {report.received[:16]!r}...",
            rank=0,
        )
        assert report.reaction is not None and report.reaction.value != "open", s.clause(
            "WIRE-9",
            f"peer {peer}'s bootstrap connection carries every broadcast and ends when rank 0 "
            "resets",
            report.reaction,
            rank=0,
        )


@pytest.mark.clause("WIRE-1", "WIRE-2", "WIRE-8", "WIRE-9", "WIRE-12")
@pytest.mark.world_size(2, 4)
def test_peers_speak_wire_v1_to_byte_level_root(tpbcast_run, tpbcast_impl, world_size):
    """The suite as rank 0 records every byte the implementation's peers send."""
    seed = tpbcast_run.seed
    sizes = [1, 1000, 65537]
    payloads = [s.payload(seed, size, ("p", i)) for i, size in enumerate(sizes)]

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=payloads, observe=s.OBSERVE)(ctx)
        before = s.fd_table()
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        listening = s.listening_sockets(before)
        got = []
        for size in sizes:
            buf = bytearray(size)
            bcast.broadcast(buf)
            got.append(s.digest(buf))
        bcast.reset()
        return got, listening

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    root, *peer_values = s.ok_values(result)
    peers = [got for got, _ in peer_values]
    listeners = [listening for _, listening in peer_values if listening]
    assert not listeners, s.clause("WIRE-1", "no rank but rank 0 listens", listeners)
    announced = sorted(link.rank for link in root.links)
    assert announced == list(range(1, world_size)), s.clause(
        "WIRE-12",
        f"every peer 1..{world_size - 1} bootstraps with a byte-level rank 0",
        f"ranks announced: {announced}",
    )
    for link in root.links:
        assert link.announced == struct.pack("=i", link.rank), s.clause(
            "WIRE-2", "a peer announces its rank as 4 native-endian bytes", link.announced
        )
        assert link.received_after == b"", s.clause(
            "WIRE-8", "a peer sends nothing after its announcement", link.received_after[:32]
        )
        assert link.reaction is not None and link.reaction.value != "open", s.clause(
            "WIRE-9", "the peer closes its one connection on reset", link.reaction
        )
    want = [s.digest(p) for p in payloads]
    for rank, got in enumerate(peers, start=1):
        assert got == want, s.clause(
            "WIRE-12", f"peer {rank} receives the byte-level root's payloads", got
        )


@pytest.mark.clause("WIRE-4")
def test_probe_only_after_every_peer_announced(tpbcast_run, tpbcast_impl):
    """Peer 1 is in and announced; while peer 2 stays away, no probe may arrive."""

    def target(ctx):
        path = s.sock_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 3, ctx.base_path)
            ctx.sync("done")
            bcast.reset()
            return None
        if ctx.rank == 1:
            with s.raw_connect(path) as sock:
                s.announce(sock, 1)
                early = s.read_window(sock, 1.0)
                ctx.notify("peer1_checked")
                probe = s.read_exact(sock, 1)
                ctx.sync("done")
                return early, probe
        ctx.wait("peer1_checked", timeout=15)
        with s.raw_connect(path) as sock:
            s.announce(sock, 2)
            probe = s.read_exact(sock, 1)
            ctx.sync("done")
            return None, probe

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    early, probe1 = result.outcomes[1].value
    assert early is None, s.clause(
        "WIRE-4", "no probe before every peer has announced", f"{early!r} while peer 2 was away"
    )
    assert probe1 == bytes([PROBE]) and result.outcomes[2].value[1] == bytes([PROBE]), s.clause(
        "WIRE-4", "every peer gets 0x5a once all are in", (probe1, result.outcomes[2].value)
    )


@pytest.mark.clause("WIRE-3", "WIRE-6")
def test_payload_goes_to_peer_1_first_whatever_the_connect_order(tpbcast_run, tpbcast_impl):
    """Peer 2 connects first; the payload (bigger than a socket buffer) still goes to
    peer 1 first: peer 2 sees no byte while peer 1 is not reading."""
    size = 4 * s.MiB
    data = s.payload(tpbcast_run.seed, size, "order")

    def target(ctx):
        path = s.sock_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 3, ctx.base_path)
            bcast.broadcast(bytearray(data))
            ctx.sync("done")
            bcast.reset()
            return None
        if ctx.rank == 2:
            with s.raw_connect(path) as sock:
                s.announce(sock, 2)
                ctx.notify("peer2_in")
                probe = s.read_exact(sock, 1)
                early = s.read_window(sock, 1.0)
                ctx.notify("peer2_checked")
                rest = s.read_exact(sock, size - len(early or b""), timeout=15)
                ctx.sync("done")
                return probe, early, s.digest((early or b"") + rest)
        ctx.wait("peer2_in", timeout=15)
        with s.raw_connect(path) as sock:
            s.announce(sock, 1)
            probe = s.read_exact(sock, 1)
            ctx.wait("peer2_checked", timeout=15)
            got = s.read_exact(sock, size, timeout=15)
            ctx.sync("done")
            return probe, None, s.digest(got)

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    want = s.digest(data)
    _, early2, digest2 = result.outcomes[2].value
    assert early2 is None, s.clause(
        "WIRE-3/WIRE-6",
        "the root writes the whole payload to announced rank 1 before rank 2, whatever "
        "the accept order",
        f"peer 2 received {len(early2 or b'')} byte(s) while peer 1 was not reading",
    )
    assert digest2 == want and result.outcomes[1].value[2] == want, s.clause(
        "WIRE-6", "both peers get the raw payload", "a digest mismatch"
    )


@pytest.mark.clause("WIRE-5")
def test_peer_initialize_waits_for_the_probe(tpbcast_run, tpbcast_impl):
    """A byte-level root accepts and reads the rank but never probes, then closes."""

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("never_probes", observe=1.5)(ctx)
        bcast = s.make(tpbcast_impl, init=10.0, connect=10.0)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        return raised, bcast.is_initialized()

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report = result.outcomes[0].value
    s.precondition(
        "WIRE-5", report.links and report.links[0].rank == 1, "the rogue root never saw the peer"
    )
    raised, initialized = result.outcomes[1].value
    assert raised is not None and not initialized, s.clause(
        "WIRE-5", "a peer's initialize does not succeed without the probe", (raised, initialized)
    )


@pytest.mark.clause("WIRE-7")
def test_several_buffers_back_to_back_on_the_wire(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "multi_buffer")
    seed = tpbcast_run.seed
    parts = [s.payload(seed, n, ("mb", n)) for n in (7, 4096, 1)]
    joined = b"".join(parts)

    def as_root(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 2, ctx.base_path)
            bcast.broadcast([bytearray(p) for p in parts])
            ctx.sync("done")
            bcast.reset()
            return None
        report = rogue_peer("read_payload", rank=1, nbytes=len(joined))(ctx)
        ctx.sync("done")
        return report

    def as_peer(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=[joined], observe=s.OBSERVE)(ctx)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(1, 2, ctx.base_path)
        bufs = [bytearray(len(p)) for p in parts]
        bcast.broadcast(bufs)
        bcast.reset()
        return [bytes(b) for b in bufs]

    report = tpbcast_run(as_root, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert report.received == bytes([PROBE]) + joined, s.clause(
        "WIRE-7", "a root puts several buffers back to back in list order", report.received[:32]
    )
    got = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert got == parts, s.clause(
        "WIRE-7", "a peer splits one back-to-back stream into its buffers in order", "mismatch"
    )


@pytest.mark.clause("WIRE-10")
def test_backlog_queues_every_peer_while_rank0_is_stopped(tpbcast_run, tpbcast_impl):
    """Rank 0 is stopped (SIGSTOP) right after it listens; the other peers then connect
    without blocking: with a backlog of at least world_size-1 none is refused."""
    world = 5

    def target(ctx):
        path = s.sock_path(ctx.base_path)
        pid_file = os.path.join(ctx.workdir, "pid0")
        if ctx.rank == 0:
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, world, ctx.base_path)
            ctx.sync("done")
            bcast.reset()
            return None
        if ctx.rank == 1:
            s.precondition(
                "WIRE-10",
                s.wait_for(lambda: os.path.exists(pid_file), 10),
                "rank 0 never wrote its pid",
            )
            with open(pid_file) as fh:
                pid0 = int(fh.read())
            sock = s.raw_connect(path)
            os.kill(pid0, signal.SIGSTOP)
            ctx.record("fault", action="SIGSTOP rank 0 after the first connect")
            ctx.notify("stopped")
            for rank in range(2, world):
                ctx.wait(f"tried{rank}", timeout=15)
            os.kill(pid0, signal.SIGCONT)
            with sock:
                s.announce(sock, 1)
                probe = s.read_exact(sock, 1)
                ctx.sync("done")
            return "connected", probe
        ctx.wait("stopped", timeout=15)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
            how = "connected"
        except BlockingIOError:
            how = "EAGAIN (backlog full)"
        except OSError as exc:
            how = f"{type(exc).__name__}: {exc}"
        ctx.notify(f"tried{ctx.rank}")
        if how != "connected":
            sock.close()
            sock = s.raw_connect(path)
        with sock:
            sock.setblocking(True)
            s.announce(sock, ctx.rank)
            probe = s.read_exact(sock, 1)
            ctx.sync("done")
        return how, probe

    result = tpbcast_run(target, world, timeout=s.GROUP_TIMEOUT)
    hows = {o.rank: o.value[0] for o in result.outcomes[1:]}
    assert all(how == "connected" for how in hows.values()), s.clause(
        "WIRE-10",
        f"rank 0 listens with a backlog of at least world_size-1 = {world - 1}",
        hows,
    )
