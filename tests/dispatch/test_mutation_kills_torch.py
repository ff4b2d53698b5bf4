"""Dispatch and tensor behaviour the self-tests left unchecked, found by mutation testing.

The torch half of tests/reference/test_mutation_kills.py (same origin: mutmut mutants of
``tpbcast.reference_impl`` that no self-test noticed, ``nox -s mutation``): here because
this folder's conftest imports torch once in the pytest process (never running an op), so
the forked ranks start with it loaded instead of importing it each.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    BroadcasterConfig,
    CollectiveError,
    ConfigurationError,
    CpuBroadcastDispatcher,
    CpuTpBroadcaster,
    TorchDistributedEngine,
    UnsupportedDeviceError,
)
from tpbcast.reference_impl.conformance_adapter import make


def test_one_byte_tensors_travel_and_sparse_ones_are_refused_with_the_reason() -> None:
    def rank_main(ctx: RankContext) -> list[int]:
        import torch

        bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=20.0, io_timeout=20.0))
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        try:
            one = torch.tensor([7 if ctx.rank == 0 else 0], dtype=torch.uint8)
            bcast.broadcast([torch.empty(0), one])
            with pytest.raises(ConfigurationError) as info:
                bcast.broadcast(torch.zeros(2, 2).to_sparse())
            assert str(info.value) == (
                "buffer 0 is a torch tensor with layout torch.sparse_coo; only strided "
                "(dense) tensors can be broadcast"
            )
            return one.tolist()
        finally:
            bcast.reset()

    assert run_ranks(rank_main, 2, timeout=60.0).values() == [[7], [7]]


def test_engine_refusals_say_what_is_wrong() -> None:
    """In a forked rank (torch): a closed engine, a missing store dir, a non-tensor."""

    def rank_main(ctx: RankContext) -> list[str]:
        import torch

        closed = TorchDistributedEngine()
        closed.close()
        seen = []
        with pytest.raises(CollectiveError) as info:
            closed.broadcast([], 0, None)
        seen.append(f"{info.value.phase}: {info.value.reason}")
        missing = os.path.join(ctx.workdir, "missing")
        with pytest.raises(ConfigurationError) as info:
            TorchDistributedEngine.create(0, 1, missing)
        seen.append(f"{info.value.path == missing}: {info.value.reason}")
        engine = TorchDistributedEngine.create(0, 1, ctx.workdir, timeout=20.0)
        try:
            with pytest.raises(ConfigurationError) as info:
                engine.broadcast(["not a tensor"], 0, None)
            seen.append(f"{info.value.phase}: {info.value.reason}")
            with pytest.raises(CollectiveError) as info:
                engine.broadcast([torch.zeros(2)], 3, None)  # no rank 3 in a group of 1
            seen.append(f"{info.value.phase}: {info.value.reason.split(':')[0]}")
        finally:
            engine.close()
        return seen

    (seen,) = run_ranks(rank_main, 1, timeout=60.0).values()
    assert seen == [
        "collective: torch.distributed/gloo engine is closed",
        "True: the FileStore directory does not exist",
        "collective: tensor 0 is a str, not a torch.Tensor",
        "collective: torch.distributed/gloo broadcast could not start",
    ]


def test_a_collective_that_cannot_complete_names_its_size() -> None:
    """Rank 0 waits for a broadcast rank 1 never joins (rank 1 leaves): the sync reports it."""

    def rank_main(ctx: RankContext) -> list[object] | None:
        import torch

        engine = TorchDistributedEngine.create(ctx.rank, 2, ctx.workdir, timeout=5.0)
        if ctx.rank == 1:
            ctx.wait("started", timeout=30.0)
            return None  # leaves without joining the collective
        try:
            engine.broadcast([torch.zeros(4)], 1, None)  # 16 bytes from rank 1
            ctx.notify("started")
            with pytest.raises(CollectiveError) as info:
                engine.sync_communication()
            return [info.value.phase, info.value.bytes_done, info.value.bytes_total]
        finally:
            engine.close()

    values = run_ranks(rank_main, 2, timeout=60.0).values()
    assert values[0] == ["sync_communication", 0, 16]


def test_dispatch_errors_name_the_rank_and_the_bytes() -> None:
    """TP=1 in a forked rank (torch): the adapter's dispatcher names its rank in a refusal;
    a non-CPU tensor on the UDS path is refused with its size."""

    def rank_main(ctx: RankContext) -> list[object]:
        import torch

        engine = TorchDistributedEngine.create(0, 1, ctx.workdir, timeout=20.0)
        try:
            adapter: Any = make().make_dispatcher(
                engine=engine, rank=0, world_size=1, workdir=ctx.workdir
            )
            adapter.bootstrap(local_world_size=1, base_path=ctx.base_path)
            with pytest.raises(ConfigurationError) as bad_root:
                adapter.broadcast_cpu([bytearray(1)], root=1)
            up = CpuTpBroadcaster()
            up.initialize(0, 1, ctx.base_path)
            try:
                dispatcher = CpuBroadcastDispatcher(up, engine, rank=0, owns_engine=False)
                with pytest.raises(UnsupportedDeviceError) as meta:
                    dispatcher.broadcast_cpu([torch.empty(3, device="meta")])
            finally:
                up.reset()
            adapter.teardown()
        finally:
            engine.close()
        return [bad_root.value.rank, meta.value.rank, meta.value.bytes_total]

    (seen,) = run_ranks(rank_main, 1, timeout=60.0).values()
    assert seen == [0, 0, 12]
