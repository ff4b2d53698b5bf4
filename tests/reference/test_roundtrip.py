"""Happy paths: TP 2/4/8, random payloads of many sizes, several buffers, arrays, tensors."""

from __future__ import annotations

import array
import hashlib

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import ConfigurationError, CpuTpBroadcaster

from ._helpers import RUN, fast_config, needs_numpy, needs_torch, payload

SIZES = (0, 1, 7, 4099, 65537, 8 << 20)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_random_payloads_reach_every_rank(world_size: int, base_path: str) -> None:
    def rank_main(ctx: RankContext) -> list[str]:
        rank = ctx.rank
        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, world_size, base_path)
        digests = []
        for seed, size in enumerate(SIZES):
            expected = payload(seed, size)
            buf = bytearray(expected) if rank == 0 else bytearray(b"\xee" * size)
            b.broadcast(buf)
            assert buf == expected, f"rank {rank}: size {size} differs"
            digests.append(hashlib.sha256(buf).hexdigest())
        stats = b.statistics()
        total = sum(SIZES)
        if rank == 0:
            assert stats.bytes_sent == total * (world_size - 1)
        else:
            assert stats.bytes_received == total
        assert stats.broadcasts == len(SIZES)
        b.reset()
        return digests

    digests = run_ranks(rank_main, world_size, **(RUN | {"timeout": 40.0})).values()
    assert all(d == digests[0] for d in digests)
    assert len(set(digests[0])) == len(SIZES)  # the payloads really differed


def test_several_buffers_go_back_to_back(base_path: str) -> None:
    sizes = (3, 0, 1 << 16, 5)

    def rank_main(ctx: RankContext) -> bool:
        rank = ctx.rank
        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, 3, base_path)
        expected = [payload(10 + i, n) for i, n in enumerate(sizes)]
        if rank == 0:
            # bytes, memoryview and array.array are fine on the root (read-only ok)
            bufs: list[object] = [
                expected[0],
                memoryview(expected[1]),
                bytearray(expected[2]),
                array.array("B", expected[3]),
            ]
        else:
            bufs = [bytearray(n) for n in sizes]
        b.broadcast(bufs)
        b.broadcast(tuple(bufs))  # a tuple is a sequence too
        if rank:
            assert [bytes(x) for x in bufs] == expected  # type: ignore[arg-type]
        b.reset()
        return True

    assert run_ranks(rank_main, 3, **RUN).values() == [True] * 3


@needs_numpy
def test_numpy_arrays_contiguous_and_not(base_path: str) -> None:
    def rank_main(ctx: RankContext) -> bool:
        import numpy as np

        rank = ctx.rank

        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, 2, base_path)
        rng = np.random.default_rng(7)
        src_c = rng.standard_normal((16, 9)).astype(np.float32)
        src_f = np.asfortranarray(rng.integers(0, 1 << 40, (5, 7), dtype=np.int64))
        base = rng.integers(0, 255, (8, 10), dtype=np.uint8)
        src_bool = rng.integers(0, 2, 11).astype(bool)
        if rank == 0:
            c, f, strided, flags = (
                src_c.copy(),
                src_f.copy(order="F"),
                base.copy()[:, ::3],
                src_bool,
            )
        else:
            c = np.zeros_like(src_c)
            f = np.asfortranarray(np.zeros_like(src_f))
            backing = np.zeros_like(base)
            strided = backing[:, ::3]  # a non-contiguous view into backing
            flags = np.zeros_like(src_bool)
        assert not strided.flags.c_contiguous and not f.flags.c_contiguous
        b.broadcast([c, f, strided, flags, np.empty(0, np.float64)])
        assert np.array_equal(c, src_c)
        assert np.array_equal(f, src_f)
        assert np.array_equal(strided, base[:, ::3])
        assert np.array_equal(flags, src_bool)
        if rank:
            # written in place through the view, other columns untouched
            assert np.array_equal(backing[:, ::3], base[:, ::3])
            assert not backing[:, 1].any()
        b.reset()
        return True

    assert run_ranks(rank_main, 2, **RUN).values() == [True, True]


@needs_torch
def test_torch_tensors_contiguous_and_not(base_path: str) -> None:
    # torch is imported only inside the forked ranks: never in the pytest parent.
    def rank_main(ctx: RankContext) -> bool:
        import torch

        rank = ctx.rank

        torch.set_num_threads(1)
        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, 2, base_path)
        g = torch.Generator().manual_seed(3)
        src = torch.randn(6, 10, generator=g)
        src_i = torch.randint(0, 1 << 30, (4, 4), generator=g, dtype=torch.int64)
        if rank == 0:
            contiguous = src.clone()
            transposed = src_i.clone().t()  # non-contiguous
            sliced = src.clone()[:, ::2]  # non-contiguous
            grad = src.clone().requires_grad_(True)
        else:
            contiguous = torch.zeros_like(src)
            transposed = torch.zeros_like(src_i).t()
            backing = torch.zeros_like(src)
            sliced = backing[:, ::2]
            grad = torch.zeros_like(src).requires_grad_(True)
        assert not transposed.is_contiguous() and not sliced.is_contiguous()
        b.broadcast([contiguous, transposed, sliced, grad, torch.empty(0)])
        assert torch.equal(contiguous, src)
        assert torch.equal(transposed, src_i.t())
        assert torch.equal(sliced, src[:, ::2])
        assert torch.equal(grad.detach(), src)
        if rank:
            assert not backing[:, 1::2].any()
        with pytest.raises(ConfigurationError, match="device 'meta'"):
            b.broadcast(torch.empty(3, device="meta"))  # not a CPU tensor
        with pytest.raises(ConfigurationError, match="layout"):
            b.broadcast(torch.zeros(2, 2).to_sparse())
        b.broadcast(contiguous)  # refused calls sent nothing: still in sync
        assert torch.equal(contiguous, src)
        b.reset()
        return True

    assert run_ranks(rank_main, 2, **(RUN | {"timeout": 60.0})).values() == [True, True]


def test_world_size_one_and_zero_bytes_move_nothing(base_path: str) -> None:
    b = CpuTpBroadcaster(fast_config())
    b.initialize(0, 1, base_path)
    buf = bytearray(b"keep")
    b.broadcast(buf)
    b.broadcast([])
    assert buf == b"keep"
    assert b.statistics().bytes_sent == 0
    b.reset()

    def rank_main(ctx: RankContext) -> bytes:
        rank = ctx.rank
        bb = CpuTpBroadcaster(fast_config())
        bb.initialize(rank, 2, base_path)
        empty = bytearray()
        bb.broadcast(empty)
        bb.broadcast([empty, bytearray()])
        seven = bytearray(b"\x07" * 4 if rank else b"\x01" * 4)
        bb.broadcast(seven)  # the stream is still in sync after the no-ops
        bb.reset()
        return bytes(seven)

    assert run_ranks(rank_main, 2, **RUN).values() == [b"\x01" * 4] * 2
