"""Both paths move the right bytes; only the collective path touches the engine.

Every test forks real ranks, builds a real gloo group over a FileStore and the
real UDS broadcaster; the recorder only observes the real engine.
"""

from __future__ import annotations

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import DispatchPath

from . import _stack

CALLS = 3  # several calls per group: the per-call count must not drift


def _run_calls(ctx: RankContext, stack: _stack.Stack) -> list[tuple[str, int]]:
    """Broadcast CALLS payloads; assert local correctness; return (path, nbytes) per call."""
    done = []
    for seed in range(CALLS):
        buffers = _stack.payload(ctx.rank, seed)
        path = stack.dispatcher.broadcast_cpu(buffers)
        got = _stack.payload_bytes(buffers)
        assert got == _stack.expected(seed), f"rank {ctx.rank} call {seed}: wrong bytes"
        done.append((str(path), _stack.payload_nbytes(buffers)))
    return done


def _collective_rank(ctx: RankContext, local_world_size: int) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    try:
        decision = _stack.boot(stack, ctx, local_world_size=local_world_size)
        calls = _run_calls(ctx, stack)
        return {
            "decision": (str(decision.path), decision.attempted, decision.failed_ranks),
            "initialized": stack.broadcaster.is_initialized(),
            "socket_exists": _stack.exists(_stack.socket_file(ctx)),
            "calls": calls,
            "events": stack.recorder.events,
            "pending": stack.engine.pending,
        }
    finally:
        stack.dispatcher.teardown()


@pytest.mark.parametrize(
    ("tp_size", "local_world_size"),
    [(1, 1), (2, 1), (4, 2), (4, 1)],
    ids=["tp1", "tp2-cross-node", "tp4-two-nodes-of-2", "tp4-cross-node"],
)
def test_collective_path_data_and_exact_sync_order(tp_size, local_world_size):
    """Cross-node layout (or TP=1): collective, sync_communication, device_sync, once each."""
    results = run_ranks(_collective_rank, tp_size, args=(local_world_size,), **_stack.RUN).values()
    for rank, res in enumerate(results):
        assert res["decision"] == ("collective", False, ()), rank
        assert res["initialized"] is False
        assert res["socket_exists"] is False, "UDS must not even be attempted"
        assert all(path == DispatchPath.COLLECTIVE for path, _ in res["calls"])
        want = []
        for _, nbytes in res["calls"]:
            want += [("collective", nbytes), ("sync_communication",), ("device_sync",)]
        assert res["events"] == tuple(want), f"rank {rank}: {res['events']}"
        assert res["pending"] == 0


def _uds_rank(ctx: RankContext) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    try:
        decision = _stack.boot(stack, ctx)
        before = stack.broadcaster.statistics()
        calls = _run_calls(ctx, stack)
        after = stack.broadcaster.statistics()
        return {
            "decision": (str(decision.path), decision.attempted, decision.failed_ranks),
            "calls": calls,
            "events": stack.recorder.events,
            "engine_calls": stack.recorder.engine_calls(),
            "uds_bytes": (after.bytes_sent - before.bytes_sent)
            + (after.bytes_received - before.bytes_received),
            "pending": stack.engine.pending,
        }
    finally:
        stack.dispatcher.teardown()


@pytest.mark.parametrize("tp_size", [2, 4])
def test_uds_path_data_and_no_engine_calls(tp_size):
    """Intra-node: bytes go over UDS; no collective, no sync, no device sync."""
    results = run_ranks(_uds_rank, tp_size, **_stack.RUN).values()
    for rank, res in enumerate(results):
        assert res["decision"] == ("uds", True, ()), rank
        assert all(path == DispatchPath.UDS for path, _ in res["calls"])
        assert res["events"] == tuple(("uds", nbytes) for _, nbytes in res["calls"])
        assert res["engine_calls"] == ()
        assert res["pending"] == 0
        total = sum(nbytes for _, nbytes in res["calls"])
        # rank 0 sends every byte to each peer; a peer receives every byte once
        assert res["uds_bytes"] == (total * (tp_size - 1) if rank == 0 else total)


def _empty_rank(ctx: RankContext, local_world_size: int) -> dict[str, object]:
    import torch

    stack = _stack.make_stack(ctx)
    try:
        decision = _stack.boot(stack, ctx, local_world_size=local_world_size)
        skipped = [
            stack.dispatcher.broadcast_cpu([]),
            stack.dispatcher.broadcast_cpu(()),
            stack.dispatcher.broadcast_cpu([torch.empty(0), bytearray(), torch.empty(3, 0)]),
        ]
        events_after_empty = stack.recorder.events
        # the same recorder does see a real call right after: the guard, not a deaf
        # recorder, is why the list above is empty
        buffers = _stack.payload(ctx.rank, 7)
        path = stack.dispatcher.broadcast_cpu(buffers)
        assert _stack.payload_bytes(buffers) == _stack.expected(7)
        return {
            "path": str(decision.path),
            "skipped": [str(s) for s in skipped],
            "events_after_empty": events_after_empty,
            "real_path": str(path),
            "events_after_real": stack.recorder.events,
        }
    finally:
        stack.dispatcher.teardown()


@pytest.mark.parametrize("local_world_size", [2, 1], ids=["uds", "collective"])
def test_empty_list_guard_on_both_paths(local_world_size):
    """An empty list (or 0 bytes in total) runs nothing at all, on either path."""
    results = run_ranks(_empty_rank, 2, args=(local_world_size,), **_stack.RUN).values()
    want_path = "uds" if local_world_size == 2 else "collective"
    for res in results:
        assert res["path"] == want_path
        assert res["skipped"] == ["skipped"] * 3
        assert res["events_after_empty"] == ()
        assert res["real_path"] == want_path
        assert len(res["events_after_real"]) == (1 if want_path == "uds" else 3)


def _large_rank(ctx: RankContext, local_world_size: int) -> tuple[str, bool, tuple]:
    import torch

    stack = _stack.make_stack(ctx)
    try:
        _stack.boot(stack, ctx, local_world_size=local_world_size)
        gen = torch.Generator().manual_seed(42)
        truth = [
            torch.randint(0, 1 << 30, (3 << 18,), generator=gen, dtype=torch.int32),  # 3 MiB
            torch.rand(1001, 3, generator=gen, dtype=torch.float64).t(),  # non-contiguous
        ]
        buffers = [t.clone() if ctx.rank == 0 else torch.zeros_like(t) for t in truth]
        path = stack.dispatcher.broadcast_cpu(buffers)
        ok = all(torch.equal(b, t) for b, t in zip(buffers, truth, strict=True))
        return str(path), ok, stack.recorder.events
    finally:
        stack.dispatcher.teardown()


@pytest.mark.parametrize("local_world_size", [3, 1], ids=["uds", "collective"])
def test_megabyte_payloads_on_both_paths(local_world_size):
    nbytes = (3 << 20) + 1001 * 3 * 8
    results = run_ranks(_large_rank, 3, args=(local_world_size,), **_stack.RUN).values()
    for path, ok, events in results:
        assert ok
        if local_world_size == 3:
            assert (path, events) == ("uds", (("uds", nbytes),))
        else:
            assert path == "collective"
            assert events == (("collective", nbytes), ("sync_communication",), ("device_sync",))


NAMES = [b"ab", b"cdef", b"g"]


def _odd_buffers_rank(ctx: RankContext, local_world_size: int) -> tuple[str, list[bytes]]:
    import numpy as np

    stack = _stack.make_stack(ctx)
    try:
        _stack.boot(stack, ctx, local_world_size=local_world_size)
        root = ctx.rank == 0
        truth = bytes(range(1, 41))
        backing = bytearray(truth) if root else bytearray(len(truth))
        shorts = np.arange(1, 9, dtype=np.int16) if root else np.zeros(8, np.int16)
        names = np.array(NAMES if root else [b""] * 3, dtype="S4")  # torch has no such dtype
        buffers: list[object] = [
            bytearray(),  # an empty buffer between full ones
            bytearray(truth[:7]) if root else bytearray(7),
            memoryview(backing)[::3],  # a strided (non-contiguous) memoryview
            shorts[::-2],  # negative strides: torch.from_numpy refuses them
            names,
        ]
        path = stack.dispatcher.broadcast_cpu(buffers)
        return str(path), [bytes(buffers[1]), bytes(backing), shorts.tobytes(), names.tobytes()]
    finally:
        stack.dispatcher.teardown()


@pytest.mark.parametrize("local_world_size", [2, 1], ids=["uds", "collective"])
def test_odd_buffers_work_on_both_paths(local_world_size):
    """What the UDS path takes, the collective path takes too.

    torch.frombuffer refuses an empty buffer and a strided memoryview;
    torch.from_numpy refuses negative strides and dtypes torch lacks.
    """
    import numpy as np

    truth = bytes(range(1, 41))
    strided = bytearray(len(truth))
    strided[::3] = truth[::3]  # what a peer's backing holds after the call
    shorts = np.zeros(8, np.int16)
    shorts[::-2] = np.arange(1, 9, dtype=np.int16)[::-2]
    names = np.array(NAMES, dtype="S4").tobytes()
    want_path = "uds" if local_world_size == 2 else "collective"
    results = run_ranks(_odd_buffers_rank, 2, args=(local_world_size,), **_stack.RUN).values()
    every = np.arange(1, 9, dtype=np.int16).tobytes()
    assert results[0] == (want_path, [truth[:7], truth, every, names])
    assert results[1] == (want_path, [truth[:7], bytes(strided), shorts.tobytes(), names])
