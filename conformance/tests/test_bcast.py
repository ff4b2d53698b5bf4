"""BCAST: what a broadcast call does on root and peers."""

from __future__ import annotations

import threading

import pytest

from tpbcast.conformance.plugin import Unsupported, require

from . import _support as s
from ._support import rogue_peer, rogue_root

SIZES = [0, 1, 7, 4097, 8 * s.MiB + 3]


@pytest.mark.clause("BCAST-1")
@pytest.mark.world_size(2, 4, 8)
def test_peers_receive_exactly_the_roots_bytes(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        got = s.group_roundtrip(ctx, bcast, SIZES, salt="b1")
        bcast.reset()
        return got

    result = tpbcast_run(target, timeout=60)
    want = s.expected_digests(result.seed, SIZES, salt="b1")
    for outcome in result.outcomes:
        assert outcome.value == want, s.clause(
            "BCAST-1",
            f"rank {outcome.rank} of {world_size} holds the root's bytes for sizes {SIZES}",
            [g == w for g, w in zip(outcome.value, want, strict=True)],
            rank=outcome.rank,
        )


@pytest.mark.clause("BCAST-2")
def test_broadcast_before_initialize_raises(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl)
        buf = bytearray(b"keep")
        return s.attempt(bcast.broadcast, buf), bytes(buf)

    raised, buf = tpbcast_run(target, 1).outcomes[0].value
    assert raised is not None and buf == b"keep", s.clause(
        "BCAST-2", "broadcast before initialize raises and moves no byte", (raised, buf)
    )
    if tpbcast_impl.supports("error_details"):
        assert raised.is_a("RuntimeError"), s.clause(
            "BCAST-2", "the not-initialized error is a RuntimeError", raised
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
        assert raised is not None and s.mentions(raised, 2), s.clause(
            "BCAST-3",
            "root=2 raises an error naming the root",
            raised,
            rank=outcome.rank,
        )
        if tpbcast_impl.supports("error_details"):
            assert raised.is_a("ValueError"), s.clause(
                "BCAST-3", "a configuration error", raised, rank=outcome.rank
            )
        assert unchanged and digest == want, s.clause(
            "BCAST-3",
            "no byte moved: the next broadcast is intact",
            (unchanged, digest == want),
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
        assert at_tp1 is not None, s.clause(
            "BCAST-4", "root=1 raises at world_size 1", None, rank=outcome.rank
        )
        assert empty is not None, s.clause(
            "BCAST-4", "root=1 raises for 0 bytes", None, rank=outcome.rank
        )


@pytest.mark.clause("BCAST-6")
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
    assert report.received == b"\x5a" + data, s.clause(
        "BCAST-6", "a 0-byte broadcast puts no byte on the stream", report.received[:16]
    )
    empty, buf = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert empty == b"" and buf == data, s.clause(
        "BCAST-6", "a peer's 0-byte broadcast reads nothing; the next one is intact", buf[:16]
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
        assert not bad, s.clause(
            "BCAST-7",
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
        assert all(same) and kept, s.clause(
            "BCAST-8",
            "every buffer of the list is filled in place",
            same,
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
        assert outcome.value == (True, True), s.clause(
            "BCAST-9",
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
            assert content and intact, s.clause(
                "BCAST-10",
                f"a {kind} buffer is filled in place (root: unchanged), "
                "nothing outside it is touched",
                (content, intact),
                rank=outcome.rank,
            )


@pytest.mark.clause("BCAST-11")
def test_read_only_peer_buffer_refused_before_reading(tpbcast_run, tpbcast_impl):
    data = s.payload(tpbcast_run.seed, 200, "b11")

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        if ctx.rank == 0:
            bcast.broadcast(bytearray(data))
            bcast.reset()
            return None
        raised = s.attempt(bcast.broadcast, bytes(len(data)))
        buf = bytearray(len(data))
        after = s.attempt(bcast.broadcast, buf)
        bcast.reset()
        return raised, after, bytes(buf) == data

    raised, after, intact = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert raised is not None, s.clause("BCAST-11", "a read-only peer buffer is refused", None)
    assert after is None and intact, s.clause(
        "BCAST-11", "no byte was consumed: the next broadcast gets the payload", (after, intact)
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
    assert report.received[1:] == data, s.clause(
        "BCAST-12", "a root's writes are looped until done (tiny peer buffers)", "mismatch"
    )
    got = tpbcast_run(as_peer, 2, timeout=s.GROUP_TIMEOUT).outcomes[1].value
    assert got == s.digest(data), s.clause(
        "BCAST-12", "a peer's reads are looped until done (tiny root buffers)", got
    )


@pytest.mark.clause("BCAST-13")
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
    s.precondition("BCAST-13", result.outcomes[1].value.did("close"), "the fault did not happen")
    assert first is not None, s.clause("BCAST-13", "the broadcast to a closed peer fails", None)
    assert second is not None and took < 1.0, s.clause(
        "BCAST-13", "the next broadcast raises at once (broken until reset)", (second, took)
    )
    if tpbcast_impl.supports("error_details"):
        assert "broken" in second.type_name.lower() or "broken" in second.message.lower(), s.clause(
            "BCAST-13", "a broken-broadcaster error", second
        )
    assert third is not None, s.clause("BCAST-13", "after reset: not initialized", third)


@pytest.mark.clause("BCAST-13")
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
    s.precondition("BCAST-13", report.did("die"), f"the fault did not happen: {report.actions}")
    assert first is not None, s.clause("BCAST-13", "a cut-off broadcast fails", None)
    assert second is not None and took < 1.0, s.clause(
        "BCAST-13", "a peer's next broadcast raises at once until reset", (second, took)
    )


@pytest.mark.clause("BCAST-14")
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
    s.precondition(
        "BCAST-14", in_flight, "the fault did not happen: the broadcast never blocked in the kernel"
    )
    assert reset_raised is None and not alive, s.clause(
        "BCAST-14", "reset returns and the in-flight broadcast ends", (reset_raised, alive)
    )
    assert raised is not None, s.clause("BCAST-14", "the in-flight broadcast fails", raised)
    assert left == b"0123456789", s.clause(
        "BCAST-14", "the broadcast never reads a closed or reused fd", left
    )


@pytest.mark.clause("BCAST-15")
def test_concurrent_broadcast_refused_with_a_clear_error(tpbcast_run, tpbcast_impl):
    """MAY: a second broadcast while one is in flight on the same instance; if the
    implementation refuses it, the error must say why.  Not refusing is UNSUPPORTED."""

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
    s.precondition(
        "BCAST-15", seen is not None, "the fault did not happen: the first broadcast never blocked"
    )
    refused, raised = seen
    if not refused or raised is None:
        raise Unsupported("UNSUPPORTED: the implementation does not refuse a concurrent broadcast")
    words = ("concurren", "re-entrant", "reentrant", "in progress", "in flight", "running", "busy")
    assert any(w in raised.message.lower() for w in words), s.clause(
        "BCAST-15", "a refused concurrent broadcast says so", raised
    )
