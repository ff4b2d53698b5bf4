"""Dispatch and engine behaviour that survivors listed as equivalent really change.

An audit of tools/mutation_equivalents_dispatch.toml and
tools/mutation_equivalents_engines.toml: each test here shows a difference that a
mutmut mutant listed there as equivalent (or "untestable": needs a GPU) makes on this
CPU-only machine, and names that mutant (function + changed line).  Every torch op runs
in ranks forked by tpbcast.harness.run_ranks (this folder's conftest imports torch in
the pytest process and never runs an op there).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import pytest
import torch

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    BootstrapFallbackWarning,
    CpuBroadcastDispatcher,
    CpuTpBroadcaster,
    TorchDistributedEngine,
    bootstrap,
)

from . import _stack

_NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the difference shows only where CUDA is missing"
)


def _create(ctx: RankContext) -> TorchDistributedEngine:
    return TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )


# -- a cuda engine stages CPU tensors onto its own device ------------------------------


def _cuda_engine_rank(ctx: RankContext) -> list[object]:
    gloo = _create(ctx)
    seen: list[object] = []
    try:
        cases = (
            [torch.arange(4, dtype=torch.uint8)],
            [torch.arange(2, dtype=torch.uint8), torch.arange(3, dtype=torch.int16)],
        )
        for tensors in cases:
            cuda = TorchDistributedEngine(device="cuda")  # over the default (gloo) group
            try:
                cuda.broadcast(tensors, 0, None)
                seen.append(["started", cuda.pending])
            except Exception as exc:
                seen.append([type(exc).__name__, str(exc), cuda.pending])
            finally:
                cuda.close()
    finally:
        gloo.close()
    return seen


@_NO_CUDA
def test_a_cuda_engine_stages_cpu_tensors_onto_its_device_before_the_collective() -> None:
    """A "cuda" engine accepts CPU tensors and stages them onto its device before the
    collective starts, a lone contiguous one too; without CUDA that staging is what fails,
    inside broadcast() with torch's own error, nothing pending.  The engine wraps the
    default gloo group here (the constructor takes any group), so no GPU is needed to see
    it.  Kills _engines TorchDistributedEngine.broadcast
    `not in ("cpu", ...)` -> "XXcpuXX" / "CPU" (a CPU tensor refused with
    ConfigurationError) and TorchDistributedEngine._stage `comm_device =
    torch.device(self._device)` -> None, `only.device == comm_device` -> `!=`,
    `torch.empty(total, dtype=torch.uint8, device=comm_device)` -> device=None / device
    left out (each lets the collective start on the CPU)."""
    (seen,) = run_ranks(_cuda_engine_rank, 1, **_stack.RUN).values()
    refused = ["AssertionError", "Torch not compiled with CUDA enabled", 0]
    assert seen == [refused, refused]


# -- create() binds an NCCL group to the engine's device --------------------------------


def _nccl_create_rank(ctx: RankContext) -> list[object]:
    import torch.distributed as dist

    try:
        TorchDistributedEngine.create(0, 1, ctx.workdir, device="cuda:1", store_name="n.store")
    except Exception as exc:
        return [type(exc).__name__, str(exc), dist.is_initialized()]
    return ["created"]


@_NO_CUDA
def test_create_binds_an_nccl_group_to_the_engines_device() -> None:
    """create() of a "cuda:1" engine asks torch for an NCCL group bound to device_id
    cuda:1; a build without CUDA refuses that device by name (ValueError), before it
    even looks for NCCL, and no group is left.  Without the device_id (or with another
    one) the refusal is a different one ("doesn't have NCCL built in", or a TypeError).
    Kills _engines TorchDistributedEngine.create `if engine._backend == "nccl"` ->
    "XXncclXX" / "NCCL", `kwargs["device_id"] = torch.device(engine._device)` -> None /
    torch.device(None), and `**kwargs,` left out of init_process_group."""
    (seen,) = run_ranks(_nccl_create_rank, 1, **_stack.RUN).values()
    assert isinstance(seen, list) and seen[0] == "ValueError", seen
    assert str(seen[1]).startswith("device_id cuda:1 does not match"), seen
    assert seen[2] is False


# -- staging and scratch stay on the engine's device ----------------------------------


def _meta_default_rank(ctx: RankContext) -> list[object]:
    engine = _create(ctx)
    try:
        if ctx.rank == 0:
            lone = torch.arange(6, dtype=torch.int16, device="cpu")
            strided = torch.arange(12, dtype=torch.int32, device="cpu").reshape(3, 4).t()
        else:
            lone = torch.zeros(6, dtype=torch.int16, device="cpu")
            strided = torch.zeros(3, 4, dtype=torch.int32, device="cpu").t()
        assert not strided.is_contiguous()
        # torch's default device is not the CPU (as inside `with torch.device("meta"):`)
        torch.set_default_device("meta")
        try:
            for tensors in ([lone], [strided]):
                engine.broadcast(tensors, 0, None)
                engine.sync_communication()
        finally:
            torch.set_default_device(None)
        return [lone.tolist(), strided.tolist()]
    finally:
        engine.close()


def test_staging_and_scratch_stay_on_the_engines_device_whatever_torchs_default() -> None:
    """Two gloo ranks broadcast a lone contiguous tensor and a non-contiguous one while
    torch's default device is "meta": every staging and scratch tensor is made on the
    engine's device (the CPU), never on torch's default, so the peer gets both.
    Kills _engines _unpack_into `torch.empty(tensor.shape, dtype=tensor.dtype,
    device=staging.device)` -> device=None / device left out, and (again)
    TorchDistributedEngine._stage `comm_device = torch.device(self._device)` -> None."""
    seen = run_ranks(_meta_default_rank, 2, **_stack.RUN).values()
    expected = [list(range(6)), [[c + 4 * r for r in range(3)] for c in range(4)]]
    assert list(seen) == [expected, expected]


# -- the packed staging tensor is uint8 on the wire ------------------------------------


def _raw_peer_rank(ctx: RankContext) -> list[object]:
    import torch.distributed as dist

    engine = _create(ctx)
    try:
        seen: list[object] = []
        # round 1: the engine's rank 0 sends two tensors, a raw rank 1 receives 7 bytes
        if ctx.rank == 0:
            engine.broadcast(
                [
                    torch.tensor([1, 2, 3], dtype=torch.uint8),
                    torch.tensor([0x0102, -2], dtype=torch.int16),
                ],
                0,
                None,
            )
            engine.sync_communication()
        else:
            raw = torch.zeros(7, dtype=torch.uint8)
            dist.broadcast(raw, src=0)
            seen.append(raw.tolist())
        # round 2: a raw rank 0 sends 7 bytes, the engine's rank 1 unpacks them
        if ctx.rank == 0:
            dist.broadcast(torch.tensor([9, 8, 7, 4, 3, 2, 1], dtype=torch.uint8), src=0)
        else:
            first = torch.zeros(3, dtype=torch.uint8)
            second = torch.zeros(2, dtype=torch.int16)
            engine.broadcast([first, second], 0, None)
            engine.sync_communication()
            seen.extend([first.tolist(), second.view(torch.uint8).tolist()])
        return seen
    finally:
        engine.close()


def test_several_tensors_travel_as_one_packed_uint8_tensor() -> None:
    """The engine's wire format (the _engines module docstring): several tensors go as
    ONE uint8 tensor, their bytes back to back in list order without padding, so a
    rank that runs a plain torch.distributed broadcast of that many bytes exchanges
    with it both ways.  Kills _engines TorchDistributedEngine._stage
    `torch.empty(total, dtype=torch.uint8, device=comm_device)` -> dtype=None / dtype
    left out (a float32 staging tensor: four bytes per byte on the wire)."""
    root, peer = run_ranks(_raw_peer_rank, 2, **_stack.RUN).values()
    assert root == []
    assert peer == [[1, 2, 3, 2, 1, 0xFE, 0xFF], [9, 8, 7], [4, 3, 2, 1]]


# -- the dispatcher hands plain buffers to the engine as bytes -------------------------


class _PackingEngine:
    """A collective engine that packs its tensors with torch.cat, as a simple one would,
    and keeps what it was handed (it runs no collective: one rank)."""

    name = "packing"

    def __init__(self) -> None:
        self.handed: list[object] = []

    def broadcast(self, tensors: Any, root: int, group: Any) -> None:
        packed = torch.cat([t.reshape(-1) for t in tensors])
        self.handed.append(
            [[str(t.dtype), t.numel()] for t in tensors]
            + [[str(packed.dtype), packed.numel() * packed.element_size()]]
        )

    def sync_communication(self) -> None:
        pass

    def device_sync(self) -> None:
        pass


def _plain_buffers_rank(ctx: RankContext) -> list[object]:
    engine = _PackingEngine()
    dispatcher = CpuBroadcastDispatcher(CpuTpBroadcaster(), engine, rank=ctx.rank)
    path = dispatcher.broadcast_cpu([bytearray(), bytearray(b"ab")])
    return [str(path), engine.handed]


def test_the_dispatcher_hands_every_plain_buffer_to_the_engine_as_bytes() -> None:
    """On the collective path each non-tensor buffer reaches the engine as a uint8
    tensor, an empty one too, so an engine that packs what it is handed (torch.cat)
    packs bytes: 2 bytes here, not 2 float32 elements.  Kills _dispatch _byte_tensor
    `return torch.empty(0, dtype=torch.uint8)` -> dtype=None / dtype left out (an empty
    float32 tensor, which promotes the packed tensor to float32)."""
    (seen,) = run_ranks(_plain_buffers_rank, 1, **_stack.RUN).values()
    assert seen == [
        "collective",
        [[["torch.uint8", 0], ["torch.uint8", 2], ["torch.uint8", 2]]],
    ]


# -- the fallback warning points at the caller of bootstrap() -------------------------

_TRAMPOLINE = os.path.join("mutmut", "mutation", "trampoline.py")


def _warning_location_rank(ctx: RankContext) -> list[object]:
    engine = _create(ctx)
    real = warnings.warn
    picked: list[object] = []

    def spy(message: Any, category: Any = None, stacklevel: int = 1, **kwargs: Any) -> None:
        frames, skipped, frame = [], 0, sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.endswith(_TRAMPOLINE):
                skipped += 1
            else:
                frames.append(frame)
            frame = frame.f_back
        target = frames[stacklevel - 1]
        picked.append([category.__name__, target.f_code.co_filename, target.f_lineno, skipped])
        if not skipped:  # plain run: Python's own warning lands on the same line
            real(message, category, stacklevel + 1)

    arguments: dict[str, Any] = {
        "tp_rank": ctx.rank,
        "tp_size": 2,
        "local_world_size": 2 - ctx.rank,  # rank 1 is alone on its node
        "base_path": ctx.base_path,
        "group_timeout": _stack.GROUP_TIMEOUT,
        "config": _stack.FAST,
    }
    broadcaster = CpuTpBroadcaster(_stack.FAST)
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            warnings.warn = spy  # type: ignore[assignment]
            try:
                line = sys._getframe().f_lineno + 1
                decision = bootstrap(broadcaster, **arguments)
            finally:
                warnings.warn = real
        here = sys._getframe().f_code.co_filename
        python = [[w.category.__name__, w.filename, w.lineno] for w in shown]
        return [str(decision.path), picked, here, line, python]
    finally:
        broadcaster.reset()
        engine.close()


def test_the_fallback_warning_points_at_the_caller_of_bootstrap() -> None:
    """A layout disagreement warns on every rank, and the warning names the line that
    called bootstrap() (stacklevel 3: past _warn_fallback and bootstrap), not a line of
    the reference.  White-box on purpose: warnings.warn is replaced by a spy that applies
    the stacklevel to the call stack without mutmut's trampoline frames (none in a plain
    run, where Python's own warning is checked to land on the same line), because those
    frames shift the real warning's location even for the unmutated code.
    Kills _dispatch_bootstrap _warn_fallback `warnings.warn(message,
    BootstrapFallbackWarning, stacklevel=3)` -> stacklevel=4 / stacklevel left out."""
    for seen in run_ranks(_warning_location_rank, 2, **_stack.RUN).values():
        path, picked, here, line, python = seen
        assert path == "collective"
        assert [p[:3] for p in picked] == [["BootstrapFallbackWarning", here, line]]
        if not picked[0][3]:
            assert python == [[BootstrapFallbackWarning.__name__, here, line]]
