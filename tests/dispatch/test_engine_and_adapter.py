"""The engine on its own (gloo now, NCCL where a GPU exists) and the conformance hook."""

from __future__ import annotations

import functools
import math

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    CollectiveEngine,
    ConfigurationError,
    CpuTpBroadcaster,
    EngineRecorder,
    TorchDistributedEngine,
    make_dispatch_adapter,
)

from . import _stack


def _engine_rank(ctx: RankContext, device: str) -> dict[str, object]:
    import torch

    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, device=device, timeout=_stack.GROUP_TIMEOUT
    )
    recorder = EngineRecorder()
    observed = recorder.wrap(engine)
    try:
        # several tensors, one of them non-contiguous: ONE collective, results
        # visible only after sync_communication
        src = [torch.arange(6, dtype=torch.int32) + 1, torch.ones(2, 3).t() * 2.5]
        tensors = [t.clone() if ctx.rank == 0 else torch.zeros_like(t) for t in src]
        if device != "cpu":
            tensors[0] = tensors[0].to(device)
        observed.broadcast(tensors, 0, None)
        pending = engine.pending
        observed.sync_communication()
        observed.device_sync()
        ok = all(torch.equal(t.cpu(), s) for t, s in zip(tensors, src, strict=True))
        return {
            "protocol": isinstance(engine, CollectiveEngine),
            "name": engine.name,
            "pending_before_sync": pending,
            "pending_after_sync": engine.pending,
            "ok": ok,
            "events": recorder.events,
        }
    finally:
        engine.close()


def test_gloo_engine_one_collective_for_several_tensors():
    for res in run_ranks(_engine_rank, 2, args=("cpu",), **_stack.RUN).values():
        assert res["protocol"] and res["name"] == "torch.distributed/gloo"
        assert (res["pending_before_sync"], res["pending_after_sync"]) == (1, 0)
        assert res["ok"]
        assert res["events"] == (("collective", 24 + 24), ("sync_communication",), ("device_sync",))


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(
    _cuda_devices() < 2,
    reason="NCCL path (backend nccl + torch.cuda.synchronize) needs 2 CUDA devices; "
    "this machine has none, so only its code path is type-checked here",
)
def test_nccl_engine_on_two_gpus():  # pragma: no cover - needs GPUs
    def target(ctx: RankContext) -> dict[str, object]:
        return _engine_rank(ctx, f"cuda:{ctx.rank}")

    for res in run_ranks(target, 2, **_stack.RUN).values():
        assert res["name"] == "torch.distributed/nccl" and res["ok"]
        assert res["events"] == (("collective", 48), ("sync_communication",), ("device_sync",))


def test_engine_device_names_are_checked():
    with pytest.raises(ConfigurationError, match="unsupported engine device 'tpu'"):
        TorchDistributedEngine(device="tpu")
    assert TorchDistributedEngine(device="cuda:1").backend == "nccl"
    assert TorchDistributedEngine(device="CPU").backend == "gloo"


def _lent_engine(ctx: RankContext) -> tuple[TorchDistributedEngine, EngineRecorder, object]:
    """A caller-owned engine (as the suite lends one) and the caller's own recorder on it."""
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )
    lender = EngineRecorder()
    return engine, lender, lender.wrap(engine)


def _adapter_rank(ctx: RankContext) -> dict[str, object]:
    engine, lender, lent = _lent_engine(ctx)
    adapter = make_dispatch_adapter(
        CpuTpBroadcaster(),
        engine=lent,  # type: ignore[arg-type]
        rank=ctx.rank,
        world_size=ctx.world_size,
        workdir=ctx.workdir,
    )
    seen: dict[str, object] = {}
    try:
        for label, lws in (("uds", ctx.world_size), ("collective", 1)):
            decision = adapter.bootstrap(local_world_size=lws, base_path=ctx.base_path)
            adapter.clear_calls()
            lender.clear()
            buffers = _stack.payload(ctx.rank, 11)
            path = adapter.broadcast_cpu(buffers, root=0, mode="tp")
            errors = []
            for root, mode in ((1, "tp"), (0, "dp"), (0, "bogus")):
                try:
                    adapter.broadcast_cpu(_stack.payload(ctx.rank, 1), root=root, mode=mode)
                except ConfigurationError as exc:
                    errors.append((type(exc).__name__, str(exc)))
            seen[label] = {
                "decision": str(decision.path),
                "path": path,
                "adapter_path": adapter.path,
                "ok": _stack.payload_bytes(buffers) == _stack.expected(11),
                "calls": [c[0] for c in adapter.calls()],
                "lender_saw": [c[0] for c in lender.events],
                "errors": errors,
            }
        adapter.teardown()
        # the lent engine outlives the adapter's teardown: its group still works
        seen["engine_open_after_teardown"] = engine.owns_group
        adapter.bootstrap(local_world_size=1, base_path=ctx.base_path)
        lender.clear()
        buffers = _stack.payload(ctx.rank, 12)
        seen["after_teardown"] = (
            adapter.broadcast_cpu(buffers),
            _stack.payload_bytes(buffers) == _stack.expected(12),
            [c[0] for c in lender.events],
        )
    finally:
        adapter.teardown()
        engine.close()
    return seen


def test_dispatch_adapter_drives_both_paths_with_plain_types():
    for res in run_ranks(_adapter_rank, 2, **_stack.RUN).values():
        uds, coll = res["uds"], res["collective"]
        assert (uds["decision"], uds["path"], uds["adapter_path"]) == ("uds",) * 3
        assert (coll["decision"], coll["path"], coll["adapter_path"]) == ("collective",) * 3
        assert uds["ok"] and coll["ok"]
        assert uds["calls"] == ["uds"] and uds["lender_saw"] == []
        sequence = ["collective", "sync_communication", "device_sync"]
        # the dispatcher runs the engine it was lent: the lender sees what calls() says
        assert coll["calls"] == coll["lender_saw"] == sequence
        assert res["engine_open_after_teardown"] is True
        assert res["after_teardown"] == ("collective", True, sequence)
        assert uds["errors"] == coll["errors"]
        assert [kind for kind, _ in uds["errors"]] == [
            "UnsupportedRootError",
            "UnsupportedModeError",
            "UnsupportedModeError",
        ]


def test_dispatch_adapter_deadlines_follow_the_adapter_contract():
    """None = the default (a quarter of the group timeout; io: the group timeout),
    math.inf = no broadcast deadline, as set_deadlines does (a bare inf used to be refused)."""
    make = functools.partial(
        make_dispatch_adapter,
        CpuTpBroadcaster(),
        engine=_stack.UnusedEngine(),
        rank=0,
        world_size=1,
        workdir="/nonexistent",
    )
    default = make(group_timeout=8.0).config
    assert (default.connect_timeout, default.init_timeout, default.io_timeout) == (2.0, 2.0, 8.0)
    assert make(io=math.inf).config.io_timeout is None
    assert make(connect=1.5, io=3.0).config.connect_timeout == 1.5
    with pytest.raises(ConfigurationError):
        make(connect=math.inf)  # only io may be unbounded


def test_derive_ranks_checks_explicit_ranks_and_never_overwrites_them():
    from tpbcast.reference_impl._dispatch_bootstrap import derive_ranks

    assert derive_ranks(5, 2) == (1, 2)
    assert derive_ranks(5, 2, tp_rank=1, dp_rank=2) == (1, 2)
    with pytest.raises(ConfigurationError, match=r"explicit tp_rank=0 disagrees with tp_rank=1"):
        derive_ranks(5, 2, tp_rank=0)
    with pytest.raises(ConfigurationError) as info:
        derive_ranks(5, 2, tp_rank=0, dp_rank=7)
    text = str(info.value)
    assert "dp_rank=7" in text and "dp_rank=2" in text and "rank 5 // tp_size 2" in text
    for bad in ({"tp_rank": True}, {"dp_rank": "1"}):
        with pytest.raises(ConfigurationError, match="must be an int or None"):
            derive_ranks(0, 2, **bad)
    with pytest.raises(ConfigurationError, match="invalid layout"):
        derive_ranks(0, 0)


def _repeat_rank(ctx: RankContext) -> dict[str, object]:
    import os

    engine, lender, lent = _lent_engine(ctx)
    adapter = make_dispatch_adapter(
        CpuTpBroadcaster(),
        engine=lent,  # type: ignore[arg-type]
        rank=ctx.rank,
        world_size=ctx.world_size,
        workdir=ctx.workdir,
    )
    out: dict[str, object] = {}
    try:
        # refused before anything: no dispatcher is built, nothing communicated
        try:
            adapter.bootstrap(local_world_size=2, base_path=ctx.base_path, dp_rank=1)
        except ConfigurationError as exc:
            out["fresh_error"] = str(exc)
        out["fresh_incarnation"] = adapter.incarnation
        first = adapter.bootstrap(local_world_size=2, base_path=ctx.base_path)
        files = sorted(os.listdir(ctx.workdir))
        lender.clear()
        again = adapter.bootstrap(local_world_size=2, base_path=ctx.base_path)
        agreeing = adapter.bootstrap(
            local_world_size=2, base_path=ctx.base_path, tp_rank=ctx.rank, dp_rank=0
        )
        out["quiet"] = lender.events == ()
        out["same"] = again is first and agreeing is first
        out["incarnation"] = adapter.incarnation
        out["files_same"] = sorted(os.listdir(ctx.workdir)) == files
        try:
            adapter.bootstrap(local_world_size=2, base_path=ctx.base_path, tp_rank=1 - ctx.rank)
        except ConfigurationError as exc:
            out["standing_error"] = str(exc)
        out["still"] = adapter.path
        # other arguments: a new bootstrap (this one cross-node: collective)
        other = adapter.bootstrap(local_world_size=1, base_path=ctx.base_path)
        out["other"] = (str(other.path), adapter.incarnation)
    finally:
        adapter.teardown()
        engine.close()
    return out


def test_dispatch_adapter_repeated_bootstrap_and_explicit_ranks():
    for rank, res in enumerate(run_ranks(_repeat_rank, 2, **_stack.RUN).values()):
        assert "explicit dp_rank=1 disagrees with dp_rank=0" in str(res["fresh_error"])
        assert res["fresh_incarnation"] == 0
        assert res["same"] and res["incarnation"] == 1 and res["files_same"] and res["quiet"]
        assert f"explicit tp_rank={1 - rank} disagrees with tp_rank={rank}" in str(
            res["standing_error"]
        )
        assert res["still"] == "uds"
        assert res["other"] == ("collective", 2)
