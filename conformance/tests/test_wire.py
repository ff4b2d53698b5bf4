"""WIRE: the bytes on the socket, judged by a byte-level rogue root and rogue peers.

Every check is soft (``s.check``) and names one clause: a test goes on after a failed
check, so one wrong byte does not hide the test's other observations.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import observe, wire
from tpbcast.harness.rogue import rogue_peer, rogue_root

from . import _support as s
from . import _watch


@pytest.mark.staged_via("uds-v1")  # byte-level wire-v1 ranks (raw payloads, no 0x6a)
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
            listening = s.listening_sockets(before, bcast)
            for data in (first, second):
                bcast.broadcast(bytearray(data))
            bcast.reset()
            return listening, wire.socket_path(ctx.base_path)
        return rogue_peer(
            "read_payload", rank=ctx.rank, nbytes=len(first) + len(second), observe=s.OBSERVE
        )(ctx)

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    listening, path = result.outcomes[0].value
    s.check(
        "WIRE-1",
        listening == [path],
        "rank 0 listens on exactly one socket, <base_path>_0.sock",
        listening,
        rank=0,
    )
    # The implementation is rank 0: whatever byte-level peer k saw is rank 0's doing.
    want = bytes([wire.PROBE]) + first + second
    for peer, report in enumerate(s.ok_values(result)[1:], start=1):
        s.check(
            "WIRE-4",
            report.probe == wire.PROBE,
            f"peer {peer} gets the probe 0x5a",
            report.probe,
            rank=0,
        )
        s.check(
            "WIRE-6",
            report.received == want,
            f"peer {peer}'s stream is the probe then the raw payloads back to back, no header",
            f"{len(report.received)} bytes {report.received[:16]!r}...",
            rank=0,
        )
        s.check(
            "WIRE-9",
            report.reaction is not None and report.reaction.value != "open",
            f"peer {peer}'s bootstrap connection carries every broadcast and ends when rank 0 "
            "resets",
            report.reaction,
            rank=0,
        )
        s.check(
            "WIRE-12",
            report.received == want,
            f"byte-level peer {peer} bootstraps with rank 0 and receives both broadcasts",
            f"{len(report.received)} of {len(want)} bytes",
            rank=0,
        )


@pytest.mark.staged_via("uds-v1")  # byte-level wire-v1 ranks (raw payloads, no 0x6a)
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
        listening = s.listening_sockets(before, bcast)
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
    s.check("WIRE-1", not listeners, "no rank but rank 0 listens", listeners)
    announced = sorted(link.rank for link in root.links)
    s.check(
        "WIRE-12",
        announced == list(range(1, world_size)),
        f"every peer 1..{world_size - 1} bootstraps with a byte-level rank 0",
        f"ranks announced: {announced}",
    )
    for link in root.links:
        who = link.rank if link.rank is not None and 0 < link.rank < world_size else None
        s.check(
            "WIRE-2",
            link.rank is not None and link.announced == struct.pack("=i", link.rank),
            "a peer announces its rank as 4 native-endian bytes",
            link.announced,
            rank=who,
        )
        s.check(
            "WIRE-8",
            link.received_after == b"",
            "a peer sends nothing after its announcement",
            link.received_after[:32],
            rank=who,
        )
        s.check(
            "WIRE-9",
            link.reaction is not None and link.reaction.value != "open",
            "the peer closes its one connection on reset",
            link.reaction,
            rank=who,
        )
    want = [s.digest(p) for p in payloads]
    for rank, got in enumerate(peers, start=1):
        s.check(
            "WIRE-12",
            got == want,
            f"peer {rank} receives the byte-level root's payloads",
            got,
            rank=rank,
        )


@pytest.mark.staged_via("uds-v1")  # byte-level wire-v1 ranks (raw payloads, no 0x6a)
@pytest.mark.clause("WIRE-4")
def test_probe_only_after_every_peer_announced(tpbcast_run, tpbcast_impl):
    """Peer 1 is in and announced; while peer 2 stays away, no probe may arrive."""

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 3, ctx.base_path)
            ctx.sync("done")
            bcast.reset()
            return None
        if ctx.rank == 1:
            with wire.connect(path, wire.Deadline.after(s.PATIENCE)) as sock:
                sock.sendall(wire.pack_rank(1))
                early = s.read_window(sock, 1.0)
                ctx.notify("peer1_checked")
                probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
                ctx.sync("done")
                return early, probe
        ctx.wait("peer1_checked", timeout=15)
        with wire.connect(path, wire.Deadline.after(s.PATIENCE)) as sock:
            sock.sendall(wire.pack_rank(2))
            probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
            ctx.sync("done")
            return None, probe

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    early, probe1 = result.outcomes[1].value
    probe2 = result.outcomes[2].value[1]
    s.check(
        "WIRE-4",
        early is None,
        "no probe before every peer has announced",
        f"{early!r} while peer 2 was away",
        rank=0,
    )
    s.check(
        "WIRE-4",
        probe1 == bytes([wire.PROBE]) and probe2 == bytes([wire.PROBE]),
        "every peer gets 0x5a once all are in",
        {"peer 1": probe1, "peer 2": probe2},
        rank=0,
    )


@pytest.mark.staged_via("uds-v1")  # byte-level wire-v1 ranks (raw payloads, no 0x6a)
@pytest.mark.clause("WIRE-3", "WIRE-6")
def test_payload_goes_to_peer_1_first_whatever_the_connect_order(tpbcast_run, tpbcast_impl):
    """Peer 2 connects first; the payload (bigger than a socket buffer) still goes to
    peer 1 first: peer 2 sees no byte while peer 1 is not reading."""
    size = 4 * s.MiB
    data = s.payload(tpbcast_run.seed, size, "order")

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 3, ctx.base_path)
            bcast.broadcast(bytearray(data))
            ctx.sync("done")
            bcast.reset()
            return None
        if ctx.rank == 2:
            with wire.connect(path, wire.Deadline.after(s.PATIENCE)) as sock:
                sock.sendall(wire.pack_rank(2))
                ctx.notify("peer2_in")
                probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
                early = s.read_window(sock, 1.0)
                ctx.notify("peer2_checked")
                rest = wire.recv_exact(sock, size - len(early or b""), wire.Deadline.after(15))
                ctx.sync("done")
                return probe, early, s.digest((early or b"") + rest)
        ctx.wait("peer2_in", timeout=15)
        with wire.connect(path, wire.Deadline.after(s.PATIENCE)) as sock:
            sock.sendall(wire.pack_rank(1))
            probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
            ctx.wait("peer2_checked", timeout=15)
            got = wire.recv_exact(sock, size, wire.Deadline.after(15))
            ctx.sync("done")
            return probe, None, s.digest(got)

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    want = s.digest(data)
    _, early2, digest2 = result.outcomes[2].value
    digest1 = result.outcomes[1].value[2]
    early = f"peer 2 received {len(early2 or b'')} byte(s) while peer 1 was not reading"
    s.check(
        "WIRE-3",
        early2 is None,
        "slots follow the announced rank, not the accept order: the first connection, which "
        "announced rank 2, is served after rank 1",
        early,
        rank=0,
    )
    s.check(
        "WIRE-6",
        early2 is None,
        "the root writes the whole payload to peer 1 before it writes to peer 2",
        early,
        rank=0,
    )
    s.check(
        "WIRE-6",
        digest1 == want and digest2 == want,
        "both peers get the raw payload",
        f"digest matches: peer 1 {digest1 == want}, peer 2 {digest2 == want}",
        rank=0,
    )
    s.check(
        "WIRE-3",
        digest1 == want and digest2 == want,
        "each peer gets the data for the rank it announced",
        f"digest matches: peer 1 {digest1 == want}, peer 2 {digest2 == want}",
        rank=0,
    )


@pytest.mark.clause("WIRE-5")
def test_peer_initialize_waits_for_the_probe(tpbcast_run, tpbcast_impl):
    """A byte-level root accepts and reads the rank but never probes, then closes."""

    observe = 1.5

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("never_probes", observe=observe)(ctx)
        bcast = s.make(tpbcast_impl, init=10.0, connect=10.0)
        # A peer that keeps waiting (or reconnecting) after the rogue hung up has not
        # returned without the probe either: stop waiting for it after observe + MARGIN.
        call = _watch.Call(bcast.initialize, 1, 2, ctx.base_path)
        done, raised = call.wait(observe + s.MARGIN), call.ended().raised
        return done, raised, s.initialized(bcast) if done else None

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report = result.outcomes[0].value
    s.precondition(
        "WIRE-5", report.links and report.links[0].rank == 1, "the rogue root never saw the peer"
    )
    done, raised, initialized = result.outcomes[1].value
    s.check(
        "WIRE-5",
        not done or (raised is not None and s.says_uninitialized(initialized)),
        "a peer's initialize does not succeed without the probe",
        f"it returned normally; is_initialized() {initialized}",
        rank=1,
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
    s.check(
        "WIRE-7",
        report.received == bytes([wire.PROBE]) + joined,
        "a root puts several buffers back to back in list order",
        report.received[:32],
        rank=0,
    )
    got = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.check(
        "WIRE-7",
        got == parts,
        "a peer splits one back-to-back stream into its buffers in order",
        f"buffer lengths {[len(b) for b in got]}, equal to the parts: "
        f"{[g == p for g, p in zip(got, parts, strict=True)]}",
        rank=1,
    )


def _try_connect(path):
    """One non-blocking connect: ("connected", sock), or (why not, None); never waits."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect(path)
    except BlockingIOError:
        how = "EAGAIN (backlog full)"
    except OSError as exc:
        how = f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
    else:
        sock.setblocking(True)
        return "connected", sock
    sock.close()
    return how, None


@pytest.mark.staged_via("uds-v1")  # byte-level wire-v1 ranks (raw payloads, no 0x6a)
@pytest.mark.clause("WIRE-10")
def test_backlog_queues_every_peer_while_rank0_is_stopped(tpbcast_run, tpbcast_impl):
    """Rank 0 is stopped (SIGSTOP) as soon as it listens, before anyone connects; then
    the world_size-1 peers and one extra connection connect without blocking.

    Linux queues ``backlog + 1`` connections on a Unix stream listener that nobody
    accepts from, so with a backlog of world_size-1 all peers AND the extra connection
    are queued; with world_size-2 the peers still fit but the extra one is refused
    (EAGAIN).  The extra connection comes last and stays silent until the group is up:
    rank 0 needs to accept only the peers queued ahead of it.
    """
    world = 5

    def target(ctx):
        path = wire.socket_path(ctx.base_path)
        if ctx.rank == 0:
            s.publish_pid(ctx)
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, world, ctx.base_path)
            ctx.sync("done")
            bcast.reset()
            return None
        extra_how, extra = None, None
        if ctx.rank == 1:
            pid0 = s.published_pid(ctx, 0, "WIRE-10")
            s.precondition(
                "WIRE-10",
                s.wait_for(lambda: observe.unix_listening(path), 10),
                f"rank 0 never listened at {path} (the kernel's Unix socket table)",
            )
            os.kill(pid0, signal.SIGSTOP)
            try:
                ctx.record("fault", action="SIGSTOP rank 0 once it listens")
                s.precondition(
                    "WIRE-10",
                    s.wait_for(lambda: observe.all_stopped(pid0), 10),
                    "rank 0 did not stop within 10 s of SIGSTOP",
                )
                ctx.notify("stopped")
                how, sock = _try_connect(path)
                for rank in range(2, world):
                    ctx.wait(f"tried{rank}", timeout=15)
                extra_how, extra = _try_connect(path)
            finally:
                os.kill(pid0, signal.SIGCONT)
        else:
            ctx.wait("stopped", timeout=15)
            how, sock = _try_connect(path)
            ctx.notify(f"tried{ctx.rank}")
        if sock is None:
            sock = wire.connect(
                path, wire.Deadline.after(s.PATIENCE)
            )  # refused above (judged); join the group anyway
        with sock:
            sock.sendall(wire.pack_rank(ctx.rank))
            probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.PATIENCE))
            ctx.sync("done")
        if extra is not None:
            extra.close()
        return how, probe, extra_how

    result = tpbcast_run(target, world, timeout=s.GROUP_TIMEOUT)
    hows = {o.rank: o.value[0] for o in result.outcomes[1:]}
    extra = result.outcomes[1].value[2]
    queued = sum(how == "connected" for how in hows.values()) + (extra == "connected")
    s.check(
        "WIRE-10",
        all(how == "connected" for how in hows.values()) and extra == "connected",
        f"rank 0 listens with a backlog of at least world_size-1 = {world - 1}: with rank 0 "
        f"stopped, its queue (backlog + 1 on Linux) takes all {world - 1} peers and one "
        "extra connection",
        f"peers {hows}, extra connection: {extra}; {queued} queued, so the backlog is {queued - 1}",
        rank=0,
    )
