"""BCAST: what a broadcast call does on root and peers."""

from __future__ import annotations

import contextlib
import os
import struct
import threading

import pytest

from tpbcast.conformance.plugin import Unsupported, require
from tpbcast.harness import wire
from tpbcast.harness.rogue import rogue_peer, rogue_root

from . import _support as s
from . import _watch

SIZES = [0, 1, 7, 4097, 8 * s.MiB + 3]


@pytest.mark.clause("BCAST-1")
@pytest.mark.world_size(2, 4, 8)
def test_peers_receive_exactly_the_roots_bytes(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        got = s.group_roundtrip(ctx, bcast, SIZES, salt="b1")
        ctx.sync("received")  # data only: a payload lost at the root's teardown is SHM's
        bcast.reset()
        return got

    result = tpbcast_run(target, timeout=60)
    want = s.expected_digests(result.seed, SIZES, salt="b1")
    for outcome in result.outcomes:
        s.check(
            "BCAST-1",
            outcome.value == want,
            f"rank {outcome.rank} of {world_size} holds the root's bytes for sizes {SIZES}",
            [g == w for g, w in zip(outcome.value, want, strict=False)],
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-2")
def test_broadcast_before_initialize_raises(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        buf = bytearray(b"keep")
        return s.attempt(bcast.broadcast, buf), bytes(buf)

    raised, buf = tpbcast_run(target, 1).outcomes[0].value
    s.check("BCAST-2", raised is not None, "broadcast before initialize raises", raised, rank=0)
    s.check("BCAST-2", buf == b"keep", "it moves no byte: the buffer is unchanged", buf, rank=0)
    if raised is not None and tpbcast_impl.supports("error_details"):
        s.check(
            "BCAST-2",
            raised.is_a("RuntimeError"),
            "the not-initialized error is a RuntimeError",
            raised,
            rank=0,
        )


@pytest.mark.clause("BCAST-3")
def test_root_other_than_zero_raises_and_moves_nothing(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        buf = bytearray(b"\x11" * 64)
        raised = s.attempt(bcast.broadcast, buf, 2)
        unchanged = bytes(buf) == b"\x11" * 64
        digest = s.group_roundtrip(ctx, bcast, [100], salt="b3")
        bcast.reset()
        return raised, unchanged, digest

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    want = s.expected_digests(result.seed, [100], salt="b3")
    for outcome in result.outcomes:
        raised, unchanged, digest = outcome.value
        if s.check(
            "BCAST-3", raised is not None, "root=2 raises", "it returned", rank=outcome.rank
        ):
            s.check(
                "BCAST-3",
                s.mentions(raised, 2),
                "the error names the root",
                raised,
                rank=outcome.rank,
            )
            if tpbcast_impl.supports("error_details"):
                s.check(
                    "BCAST-3",
                    raised.is_a("ValueError"),
                    "a configuration error",
                    raised,
                    rank=outcome.rank,
                )
        s.check(
            "BCAST-3",
            unchanged and digest == want,
            "no byte moved: the buffer is unchanged and the next broadcast is intact",
            f"buffer unchanged: {unchanged}, next broadcast intact: {digest == want}",
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-4")
def test_root_check_comes_before_the_noop_cases(tpbcast_run, tpbcast_impl):
    def target(ctx):
        alone = s.make(tpbcast_impl)
        alone.initialize(0, 1, ctx.base_path + "one")
        at_tp1 = s.attempt(alone.broadcast, bytearray(8), 1)
        alone.reset()
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        empty = s.attempt(bcast.broadcast, bytearray(), 1)
        digest = s.group_roundtrip(ctx, bcast, [10], salt="b4")
        bcast.reset()
        return at_tp1, empty, digest

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        at_tp1, empty, _ = outcome.value
        s.check(
            "BCAST-4",
            at_tp1 is not None,
            "root=1 raises at world_size 1",
            "it returned",
            rank=outcome.rank,
        )
        s.check(
            "BCAST-4",
            empty is not None,
            "root=1 raises for 0 bytes",
            "it returned",
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-6")
@pytest.mark.staged_via("uds-v1")
def test_zero_byte_broadcast_puts_nothing_on_the_wire(tpbcast_run, tpbcast_impl):
    data = s.payload(tpbcast_run.seed, 300, "b6")

    def as_root(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 2, ctx.base_path)
            bcast.broadcast(bytearray())
            bcast.broadcast(bytearray(data))
            bcast.reset()
            return None
        return rogue_peer("read_payload", rank=1, nbytes=len(data), observe=s.OBSERVE)(ctx)

    def as_peer(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=[data], observe=s.OBSERVE)(ctx)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(1, 2, ctx.base_path)
        empty = bytearray()
        bcast.broadcast(empty)
        buf = bytearray(len(data))
        bcast.broadcast(buf)
        bcast.reset()
        return bytes(empty), bytes(buf)

    report = tpbcast_run(as_root, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.check(
        "BCAST-6",
        report.received == wire.PROBE_BYTE + data,
        "a 0-byte broadcast puts no byte on the stream",
        f"the byte-level peer read {report.received[:16]!r}...",
        rank=0,
    )
    empty, buf = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.check(
        "BCAST-6",
        empty == b"" and buf == data,
        "a peer's 0-byte broadcast reads nothing; the next one is intact",
        f"{buf[:16]!r}...",
        rank=1,
    )


@pytest.mark.clause("BCAST-7")
def test_hundreds_of_broadcasts_stay_in_order(tpbcast_run, tpbcast_impl):
    import random

    sizes = [random.Random(f"{tpbcast_run.seed}:b7:{i}").randrange(0, 6000) for i in range(300)]

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        got = s.group_roundtrip(ctx, bcast, sizes, salt="b7")
        bcast.reset()
        return got

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    want = s.expected_digests(result.seed, sizes, salt="b7")
    for outcome in result.outcomes:
        bad = [i for i, (g, w) in enumerate(zip(outcome.value, want, strict=True)) if g != w]
        s.check(
            "BCAST-7",
            not bad,
            f"300 broadcasts arrive intact and in order on rank {outcome.rank}",
            bad[:5],
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-8")
def test_several_buffers_filled_in_place(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "multi_buffer")
    sizes = [5, 0, 70000, 1]

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        datas = [s.payload(ctx.seed, n, ("b8", i)) for i, n in enumerate(sizes)]
        bufs = [bytearray(d) if ctx.rank == 0 else bytearray(len(d)) for d in datas]
        ids = [id(b) for b in bufs]
        bcast.broadcast(bufs)
        bcast.reset()
        return [bytes(b) == d for b, d in zip(bufs, datas, strict=True)], ids == [
            id(b) for b in bufs
        ]

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        same, kept = outcome.value
        s.check(
            "BCAST-8",
            all(same) and kept,
            "every buffer of the list is filled in place",
            f"contents match: {same}, same objects: {kept}",
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-9")
def test_torch_cpu_tensors_contiguous_or_not(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "tensors")
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # never import torch in the forking parent
        raise Unsupported("UNSUPPORTED (precondition): torch is not installed")

    def target(ctx):
        import torch

        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        gen = torch.Generator().manual_seed(ctx.seed % (2**31))
        want_c = torch.randint(0, 2**31, (64, 33), generator=gen, dtype=torch.int64)
        want_t = torch.randn(16, 24, generator=gen).t()  # non-contiguous view
        if ctx.rank == 0:
            contiguous, strided = want_c.clone(), want_t.clone().t().contiguous().t()
        else:
            contiguous = torch.zeros_like(want_c)
            strided = torch.zeros(16, 24).t()
        s.precondition(
            "BCAST-9", not strided.is_contiguous(), "the strided tensor came out contiguous"
        )
        bcast.broadcast(contiguous)
        bcast.broadcast(strided)
        bcast.reset()
        return bool(torch.equal(contiguous, want_c)), bool(torch.equal(strided, want_t))

    result = tpbcast_run(target, 2, timeout=60)
    for outcome in result.outcomes:
        s.check(
            "BCAST-9",
            outcome.value == (True, True),
            "contiguous and non-contiguous CPU tensors filled in place",
            outcome.value,
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-10")
def test_in_place_on_peers_root_payload_untouched(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        data = s.payload(ctx.seed, 4096, "b10")
        results = {}
        # A memoryview of the middle of a larger buffer: only that window may change.
        outer = bytearray(b"\xee" * 6000)
        if ctx.rank == 0:
            outer[1000:5096] = data
        window = memoryview(outer)[1000:5096]
        bcast.broadcast(window)
        results["memoryview"] = (
            bytes(outer[1000:5096]) == data and outer[:1000] == b"\xee" * 1000,
            outer[5096:] == b"\xee" * 904,
        )
        buf = bytearray(data) if ctx.rank == 0 else bytearray(len(data))
        before = id(buf)
        bcast.broadcast(buf)
        results["bytearray"] = (bytes(buf) == data, id(buf) == before)
        import importlib.util

        if importlib.util.find_spec("numpy") is not None:
            import numpy as np

            arr = np.frombuffer(data, dtype=np.float32).copy()
            if ctx.rank:
                arr[:] = 0
            bcast.broadcast(arr)
            results["numpy"] = (arr.tobytes() == data, True)
        bcast.reset()
        return results

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        for kind, (content, intact) in outcome.value.items():
            s.check(
                "BCAST-10",
                content and intact,
                f"a {kind} buffer is filled in place (root: unchanged), "
                "nothing outside it is touched",
                (content, intact),
                rank=outcome.rank,
            )


@pytest.mark.clause("BCAST-11")
def test_read_only_peer_buffer_refused_before_reading(tpbcast_run, tpbcast_impl):
    """The root sends the payload, then a marker of the same size.  A peer that consumed
    the payload while refusing its read-only buffer gets the marker next, not a wait for
    bytes that never come (an ERROR at the group deadline would judge nothing)."""
    data = s.payload(tpbcast_run.seed, 200, "b11")
    marker = b"\x77" * len(data)

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            # Either may fail once the peer has given up (reset): judged on the peer's side.
            s.attempt(bcast.broadcast, bytearray(data))
            s.attempt(bcast.broadcast, bytearray(marker))
            # The peer reads both before the root's teardown (delivery at teardown is SHM's).
            _watch.notified(ctx, "peer_done", s.GROUP_TIMEOUT / 2)
            bcast.reset()
            return None
        raised = s.attempt(bcast.broadcast, bytes(len(data)))
        buf = bytearray(len(data))
        after = s.attempt(bcast.broadcast, buf)
        got = bytes(buf)
        if after is None and got == data:
            s.attempt(bcast.broadcast, bytearray(len(marker)))  # the marker, so none is left
        ctx.notify("peer_done")
        bcast.reset()
        return raised, after, got == data, got == marker

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    raised, after, intact, got_marker = result.outcomes[1].value
    s.check(
        "BCAST-11", raised is not None, "a read-only peer buffer is refused", "it returned", rank=1
    )
    s.check(
        "BCAST-11",
        after is None and intact,
        "no byte was consumed: the next broadcast gets the payload",
        after
        if after is not None
        else (
            "the next broadcast got the root's following payload: the refused call had "
            "consumed this one"
            if got_marker
            else "the next broadcast's buffer does not hold the payload"
        ),
        rank=1,
    )


@pytest.mark.clause("BCAST-12")
def test_payload_moved_in_small_pieces_arrives_intact(tpbcast_run, tpbcast_impl):
    data = s.payload(tpbcast_run.seed, 1 * s.MiB + 17, "b12")

    def as_root(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl)
            bcast.initialize(0, 2, ctx.base_path)
            bcast.broadcast(bytearray(data))
            bcast.reset()
            return None
        return rogue_peer("read_payload", rank=1, nbytes=len(data), buffer_size=4096)(ctx)

    def as_peer(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=[data], buffer_size=4096)(ctx)
        bcast = s.make(tpbcast_impl)
        bcast.initialize(1, 2, ctx.base_path)
        buf = bytearray(len(data))
        bcast.broadcast(buf)
        bcast.reset()
        return s.digest(buf)

    report = tpbcast_run(as_root, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.precondition(
        "BCAST-12",
        report.buffers is not None and max(report.buffers) < 64 * 1024,
        f"the peer's socket buffers were not made tiny: {report.buffers}",
    )
    s.check(
        "BCAST-12",
        report.received[1:] == data,
        "a root's writes are looped until done (tiny peer buffers)",
        f"the peer read {len(report.received) - 1} of {len(data)} bytes, not the payload",
        rank=0,
    )
    got = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.check(
        "BCAST-12",
        got == s.digest(data),
        "a peer's reads are looped until done (tiny root buffers)",
        f"digest {got}",
        rank=1,
    )


# How long a broken broadcaster may take to refuse: it touches no socket, so this is
# scheduling noise only (the deadline of the call that failed is SHORT).
AT_ONCE = 1.0


def _judge_broken(second, took, impl, what, *, rank):
    """BCAST-13's checks of the call after a failed broadcast (``s.timed``'s pair)."""
    if not s.check(
        "BCAST-13",
        second is not None,
        f"{what}: the next broadcast raises (broken until reset)",
        "it returned",
        rank=rank,
    ):
        return
    s.check(
        "BCAST-13",
        took < AT_ONCE,
        f"{what}: the next broadcast raises at once (under {AT_ONCE:g} s)",
        f"{second}, after {took:.3f}s",
        rank=rank,
    )
    if impl.supports("error_details"):
        s.check(
            "BCAST-13",
            "broken" in second.type_name.lower() or "broken" in second.message.lower(),
            f"{what}: a broken-broadcaster error",
            second,
            rank=rank,
        )


@pytest.mark.clause("BCAST-13")
@pytest.mark.staged_via("uds-v1")
def test_failed_broadcast_poisons_until_reset(tpbcast_run, tpbcast_impl):
    size = 4 * s.MiB

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, io=10.0)
            bcast.initialize(0, 2, ctx.base_path)
            first = s.attempt(bcast.broadcast, bytearray(size))
            second, took = s.timed(bcast.broadcast, bytearray(10))
            bcast.reset()
            third = s.attempt(bcast.broadcast, bytearray(10))
            return first, second, took, third
        return rogue_peer("close_mid_payload", rank=1, after=1000)(ctx)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    first, second, took, third = result.outcomes[0].value
    s.rogue_did("BCAST-13", result.outcomes[1], "close")
    s.check(
        "BCAST-13", first is not None, "the broadcast to a closed peer fails", "it returned", rank=0
    )
    _judge_broken(second, took, tpbcast_impl, "peer closed", rank=0)
    s.check(
        "BCAST-13",
        third is not None,
        "after reset the broadcaster is not initialized: broadcast raises",
        "it returned",
        rank=0,
    )


@pytest.mark.clause("BCAST-13")
@pytest.mark.staged_via("uds-v1")
def test_failed_peer_broadcast_poisons_until_reset(tpbcast_run, tpbcast_impl):
    data = s.payload(tpbcast_run.seed, 1000, "b13")

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("dies_mid_broadcast", payload=data, after=100)(ctx)
        bcast = s.make(tpbcast_impl, io=10.0)
        bcast.initialize(1, 2, ctx.base_path)
        first = s.attempt(bcast.broadcast, bytearray(len(data)))
        second, took = s.timed(bcast.broadcast, bytearray(10))
        bcast.reset()
        return first, second, took

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report, (first, second, took) = result.outcomes[0].value, result.outcomes[1].value
    s.fault_happened("BCAST-13", report.did("die"), report.actions)
    s.check("BCAST-13", first is not None, "a cut-off broadcast fails", "it returned", rank=1)
    _judge_broken(second, took, tpbcast_impl, "root died", rank=1)


def _send(sock, data):
    """Send all of ``data`` (MSG_NOSIGNAL: SIGPIPE is at SIG_DFL in ranks); False if the
    other side had closed."""
    import socket

    view = memoryview(data)
    try:
        while view:
            view = view[sock.send(view, socket.MSG_NOSIGNAL) :]
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def _drain(sock):
    """Read whatever is queued, without waiting: (bytes read, whether the stream ended)."""
    sock.setblocking(False)
    total = 0
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return total, False
        except ConnectionResetError:
            return total, True
        if not chunk:
            return total, True
        total += len(chunk)


@pytest.mark.clause("BCAST-13")
@pytest.mark.staged_via("uds-v1")
def test_root_timed_out_on_a_live_link_stays_broken(tpbcast_run, tpbcast_impl):
    """Only a broken state can make the next call fail: the link stays healthy.

    A byte-level peer stops reading, so the root's broadcast fails on its io deadline
    while the connection is alive; the peer then drains what arrived, so the socket would
    take another payload.  A root that forgot the failure sends its next broadcast down
    the out-of-sync stream, and the peer sees those bytes.
    """
    require(tpbcast_impl, "deadlines")
    size = 4 * s.MiB
    io = s.SHORT

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.make(tpbcast_impl, io=io)
            bcast.initialize(0, 2, ctx.base_path)
            first = s.attempt(bcast.broadcast, bytearray(size))
            ctx.notify("first_done")
            ctx.wait("drained", timeout=s.OBSERVE)
            second, took = s.timed(bcast.broadcast, bytearray(b"\x77" * 10))
            ctx.notify("second_done")
            ctx.wait("peer_looked", timeout=s.OBSERVE)
            bcast.reset()
            third = s.attempt(bcast.broadcast, bytearray(10))
            return first, second, took, third
        with wire.connect(wire.socket_path(ctx.base_path), wire.Deadline.after(s.OBSERVE)) as sock:
            _send(sock, struct.pack("=i", 1))
            probe = wire.recv_exact(sock, 1, wire.Deadline.after(s.OBSERVE))
            # The fault: stop reading until the root's broadcast has failed.  A root that
            # ignores its io deadline is released by reading the whole payload.
            if not _watch.notified(ctx, "first_done", io + s.MARGIN):
                with contextlib.suppress(OSError, TimeoutError):
                    wire.recv_exact(sock, size, wire.Deadline.after(s.OBSERVE))
            queued = _drain(sock)
            ctx.notify("drained")
            ctx.wait("second_done", timeout=s.OBSERVE)
            after = _drain(sock)
            ctx.notify("peer_looked")
        return probe, queued, after

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    first, second, took, third = result.outcomes[0].value
    probe, (queued, _), (after, ended) = result.outcomes[1].value
    s.fault_happened(
        "BCAST-13",
        probe == wire.PROBE_BYTE and first is not None and queued < size,
        "the root's broadcast to a peer that stopped reading "
        f"did not fail on its {io:g} s io deadline ({first or 'it returned'})",
    )
    _judge_broken(second, took, tpbcast_impl, "root timed out, link alive", rank=0)
    s.check(
        "BCAST-13",
        after == 0,
        "a broken broadcaster does not touch its sockets: no byte reaches the peer after the "
        "failed broadcast",
        f"the peer received {after} more byte(s) after draining the failed broadcast "
        f"({'then EOF' if ended else 'link still open'})",
        rank=0,
    )
    s.check(
        "BCAST-13",
        third is not None,
        "after reset the broadcaster is not initialized: broadcast raises",
        "it returned",
        rank=0,
    )


@pytest.mark.clause("BCAST-13")
@pytest.mark.staged_via("uds-v1")
def test_peer_timed_out_on_a_live_link_stays_broken(tpbcast_run, tpbcast_impl):
    """Only a broken state can make the next call fail: the link stays healthy.

    A byte-level root sends part of a payload and pauses, so the peer's broadcast fails on
    its io deadline while the connection is alive; the root then sends the rest and the
    next payload.  A peer that forgot the failure reads them as its next broadcast.
    """
    require(tpbcast_impl, "deadlines")
    data = s.payload(tpbcast_run.seed, 1000, "b13-live")
    following = s.payload(tpbcast_run.seed, 10, "b13-next")
    io = s.SHORT

    def target(ctx):
        import socket

        if ctx.rank == 1:
            bcast = s.make(tpbcast_impl, io=io)
            bcast.initialize(1, 2, ctx.base_path)
            first = s.attempt(bcast.broadcast, bytearray(len(data)))
            ctx.notify("first_done")
            ctx.wait("resent", timeout=s.OBSERVE)
            buf = bytearray(len(following))
            second, took = s.timed(bcast.broadcast, buf)
            ctx.notify("second_done")
            bcast.reset()
            return first, second, took, bytes(buf)
        path = wire.socket_path(ctx.base_path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(s.OBSERVE)
            conn, _ = listener.accept()
            with conn:
                announced = wire.recv_exact(conn, 4, wire.Deadline.after(s.OBSERVE))
                _send(conn, b"\x5a" + data[:100])
                # The fault: pause mid-payload until the peer's broadcast has failed; a
                # peer that ignores its io deadline is released by the rest of it.
                _watch.notified(ctx, "first_done", io + s.MARGIN)
                open_after = _send(conn, data[100:] + following)
                ctx.notify("resent")
                ctx.wait("second_done", timeout=s.OBSERVE)
            os.unlink(path)
        return announced, open_after

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    announced, open_after = result.outcomes[0].value
    first, second, took, buf = result.outcomes[1].value
    s.fault_happened(
        "BCAST-13",
        announced == struct.pack("=i", 1) and first is not None,
        "the peer's broadcast from a root that paused mid-payload "
        f"did not fail on its {io:g} s io deadline ({first or 'it returned'})",
    )
    _judge_broken(second, took, tpbcast_impl, "peer timed out, link alive", rank=1)
    s.check(
        "BCAST-13",
        buf == bytes(len(following)),
        "a broken broadcaster does not touch its sockets: the next broadcast reads nothing",
        f"its buffer holds {buf!r} (the root's link was "
        f"{'still open' if open_after else 'closed'} when it sent the rest)",
        rank=1,
    )


@pytest.mark.clause("BCAST-14")
@pytest.mark.staged_via("uds-v1")
def test_reset_from_another_thread_during_broadcast(tpbcast_run, tpbcast_impl):
    """A peer blocked in broadcast is reset from another thread; the broadcast must end
    cleanly and must not read from a reused fd number (a pipe opened after reset)."""
    import os

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=[], observe=s.OBSERVE)(ctx)
        bcast = s.make(tpbcast_impl, io=s.OBSERVE + 5)
        bcast.initialize(1, 2, ctx.base_path)
        out = {}

        def blocked():
            out["raised"] = s.attempt(bcast.broadcast, bytearray(1 << 16))

        thread = threading.Thread(target=blocked, daemon=True)
        thread.start()
        # The fault: reset lands while the broadcast is blocked reading from the root.
        in_flight = s.wait_until_blocked(thread, 10)
        reset_raised = s.attempt(bcast.reset)
        rd, wr = os.pipe()
        os.write(wr, b"0123456789")
        thread.join(s.OBSERVE + 10)
        alive = thread.is_alive()
        os.set_blocking(rd, False)
        try:
            left = os.read(rd, 100)
        except BlockingIOError:
            left = b""
        os.close(rd)
        os.close(wr)
        return in_flight, reset_raised, alive, out.get("raised"), left

    in_flight, reset_raised, alive, raised, left = (
        tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT + 10).outcomes[1].value
    )
    s.fault_happened("BCAST-14", in_flight, "the broadcast never blocked in the kernel")
    s.check(
        "BCAST-14",
        reset_raised is None and not alive,
        "reset returns and the in-flight broadcast ends",
        f"reset: {reset_raised or 'returned'}; broadcast still running: {alive}",
        rank=1,
    )
    s.check("BCAST-14", raised is not None, "the in-flight broadcast fails", "it returned", rank=1)
    s.check(
        "BCAST-14",
        left == b"0123456789",
        "the broadcast never reads a closed or reused fd",
        f"a pipe opened after reset held {left!r}, not b'0123456789'",
        rank=1,
    )


@pytest.mark.clause("BCAST-15")
@pytest.mark.staged_via("uds-v1")
def test_concurrent_broadcast_refused_with_a_clear_error(tpbcast_run, tpbcast_impl):
    """MAY: a second broadcast while one is in flight on the same instance; if the
    implementation refuses it, the error must say why.  Not refusing shows the optional
    refusal absent (the clause holds: reported as absent, not UNSUPPORTED)."""

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("recording", payloads=[], observe=1.5)(ctx)
        bcast = s.make(tpbcast_impl, io=10.0)
        bcast.initialize(1, 2, ctx.base_path)

        def blocked():
            s.attempt(bcast.broadcast, bytearray(64))

        first = threading.Thread(target=blocked, daemon=True)
        first.start()
        # The fault: the second call lands while the first is blocked.
        if not s.wait_until_blocked(first, 10):
            return None
        second: dict[str, object] = {}
        racer = threading.Thread(
            target=lambda: second.setdefault("raised", s.attempt(bcast.broadcast, bytearray(8))),
            daemon=True,
        )
        racer.start()
        racer.join(1.0)
        refused = not racer.is_alive()
        first.join(10)
        racer.join(10)
        bcast.reset()
        return refused, second.get("raised")

    seen = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    s.fault_happened("BCAST-15", seen is not None, "the first broadcast never blocked")
    refused, raised = seen
    if not s.optional_present(
        "BCAST-15",
        refused and raised is not None,
        "a second broadcast while one was in flight " + ("returned" if refused else "waited"),
    ):
        return
    s.check_refusal_says_concurrent(raised, rank=1)
