"""Child-side helpers: build the dispatch stack and deterministic payloads.

Everything here runs inside a forked rank (torch ops are allowed there, never
in the pytest process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tpbcast.harness import RankContext
from tpbcast.reference_impl import (
    BootstrapDecision,
    BroadcasterConfig,
    CpuBroadcastDispatcher,
    CpuTpBroadcaster,
    EngineRecorder,
    TorchDistributedEngine,
)

#: ``run_ranks`` keywords of every dispatch group: one 60 s deadline, and once a rank
#: failed the others get 15 s more, since a gloo peer learns of a dead rank only when
#: its own collective fails.
RUN = {"timeout": 60.0, "fail_fast_grace": 15.0}
#: gloo deadline for every collective: a bug fails in seconds instead of hanging.
GROUP_TIMEOUT = 10.0
#: Broadcaster deadlines whose bootstrap budget (3 + 3 s) fits inside GROUP_TIMEOUT.
FAST = BroadcasterConfig(connect_timeout=3.0, init_timeout=3.0, io_timeout=GROUP_TIMEOUT)


@dataclass
class Stack:
    dispatcher: CpuBroadcastDispatcher
    recorder: EngineRecorder
    engine: TorchDistributedEngine
    broadcaster: CpuTpBroadcaster


def make_stack(
    ctx: RankContext, *, store_name: str = "pg.store", broadcaster: CpuTpBroadcaster | None = None
) -> Stack:
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, store_name=store_name, timeout=GROUP_TIMEOUT
    )
    recorder = EngineRecorder()
    bcast = broadcaster if broadcaster is not None else CpuTpBroadcaster(FAST)
    dispatcher = CpuBroadcastDispatcher(bcast, engine, recorder=recorder, rank=ctx.rank)
    return Stack(dispatcher, recorder, engine, bcast)


def boot(
    stack: Stack,
    ctx: RankContext,
    *,
    local_world_size: int | None = None,
    base_path: str | None = None,
) -> BootstrapDecision:
    """``bootstrap`` of this rank's dispatcher with the test deadlines (:data:`FAST`).

    ``local_world_size`` defaults to the world size (intra-node: UDS eligible),
    ``base_path`` to the rank context's.
    """
    return stack.dispatcher.bootstrap(
        tp_rank=ctx.rank,
        tp_size=ctx.world_size,
        local_world_size=ctx.world_size if local_world_size is None else local_world_size,
        base_path=ctx.base_path if base_path is None else base_path,
        config=FAST,
    )


class UnusedEngine:
    """A collective engine that fails the test if the dispatcher ever calls it.

    For the pure checks that run in the pytest process (no torch op there).
    """

    name = "unused"
    group = None

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout

    def broadcast(self, tensors: Any, root: int, group: Any) -> None:
        raise AssertionError("the engine must not be reached")

    def sync_communication(self) -> None:
        raise AssertionError("the engine must not be reached")

    def device_sync(self) -> None:
        raise AssertionError("the engine must not be reached")


def socket_file(ctx: RankContext) -> str:
    return ctx.base_path + "_0.sock"


def payload(rank: int, seed: int) -> list[Any]:
    """Mixed buffers: rank 0 fills them from ``seed``, other ranks pass zeros.

    int64 matrix, a NON-contiguous float32 view, a 0-dim float64, a bytearray of
    odd length and a numpy uint16 vector: every kind the dispatcher accepts.
    """
    import numpy as np
    import torch

    gen = torch.Generator().manual_seed(seed)
    mat = torch.randint(1, 1 << 40, (3, 5), generator=gen, dtype=torch.int64)
    base = torch.rand(4, 6, generator=gen, dtype=torch.float32) + 1.0
    scalar = torch.tensor(float(seed) + 0.5, dtype=torch.float64)
    raw = bytearray(bytes((seed * 7 + i) % 251 + 1 for i in range(37)))
    vec = np.arange(1, 12, dtype=np.uint16) * (seed + 3)
    if rank != 0:
        mat.zero_()
        base.zero_()
        scalar.zero_()
        raw[:] = bytes(len(raw))
        vec[:] = 0
    return [mat, base.t(), scalar, raw, vec]


def payload_bytes(buffers: list[Any]) -> list[bytes]:
    """Each buffer's logical content as bytes (element order, not memory order)."""
    import torch

    out: list[bytes] = []
    for buf in buffers:
        if isinstance(buf, torch.Tensor):
            out.append(buf.contiguous().numpy().tobytes())
        elif hasattr(buf, "tobytes"):
            out.append(buf.tobytes())
        else:
            out.append(bytes(buf))
    return out


def payload_nbytes(buffers: list[Any]) -> int:
    import torch

    total = 0
    for buf in buffers:
        if isinstance(buf, torch.Tensor):
            total += buf.numel() * buf.element_size()
        else:
            total += memoryview(buf).nbytes
    return total


def expected(seed: int) -> list[bytes]:
    return payload_bytes(payload(0, seed))


def exists(path: str) -> bool:
    return os.path.lexists(path)
