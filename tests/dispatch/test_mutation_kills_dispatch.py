"""Dispatch behaviour the other self-tests left unchecked, found by mutation testing.

The dispatch-side half of tests/reference/test_mutation_kills.py: each test here pins a
behaviour that a mutmut mutant of ``tpbcast.reference_impl``'s dispatch modules
(``_dispatch``, ``_dispatch_adapter``, ``_dispatch_bootstrap``, ``_engines``,
``conformance_adapter``) changed without any other self-test noticing (``nox -s
mutation``; the survivors are listed in reports/mutation/, the equivalent ones in
tools/mutation_equivalents_dispatch.toml).  They check what a user or an operator sees
-- an error's fields and message, the path a call took, what a broadcaster or an engine
was handed, the settings an adapter runs with -- never the source text.  Most run in the
pytest process with stand-in broadcasters and engines (no torch op there: this folder's
conftest imports torch and the ranks are forked); those that need a tensor or a gloo
group fork ranks through tpbcast.harness.run_ranks.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from importlib import metadata
from types import SimpleNamespace
from typing import Any

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    BroadcasterConfig,
    CollectiveError,
    ConfigurationError,
    CpuBroadcastDispatcher,
    CpuTpBroadcaster,
    DispatchPath,
    EngineRecorder,
    NotInitializedError,
    ParallelMode,
    TorchDistributedEngine,
    UnsupportedDeviceError,
    UnsupportedModeError,
    UnsupportedRootError,
    make_dispatch_adapter,
)
from tpbcast.reference_impl._dispatch_adapter import DispatchAdapter
from tpbcast.reference_impl._dispatch_bootstrap import (
    BootstrapConsensusError,
    BootstrapFallbackWarning,
    bootstrap,
    derive_ranks,
)
from tpbcast.reference_impl._engines import all_gather_status
from tpbcast.reference_impl.conformance_adapter import ReferenceAdapter, make

from . import _stack


class _UpBroadcaster:
    """A broadcaster that is up and records what each ``broadcast`` was handed.

    Its ``broadcast`` takes ``root`` without a default, as a duck-typed broadcaster may.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def initialize(self, rank: int, world_size: int, base_path: str, **kwargs: Any) -> None:
        raise AssertionError("not expected")

    def broadcast(self, buffers: Any, root: int) -> None:
        self.calls.append((list(buffers), root))

    def reset(self) -> None:
        pass

    def is_initialized(self) -> bool:
        return True


# -- _dispatch_bootstrap.derive_ranks ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "rank", "text"),
    [
        ((True, 2), {}, None, "in phase 'bootstrap': rank must be an int, got True"),
        ((0, "2"), {}, None, "in phase 'bootstrap': tp_size must be an int, got '2'"),
        ((3, 0), {}, 3, "rank 3: in phase 'bootstrap': invalid layout: rank=3, tp_size=0"),
        (
            (3, 2),
            {"tp_rank": "1"},
            3,
            "rank 3: in phase 'bootstrap': tp_rank must be an int or None, got '1'",
        ),
        (
            (5, 2),
            {"tp_rank": 0, "dp_rank": 7},
            5,
            "rank 5: in phase 'bootstrap': explicit tp_rank=0 disagrees with tp_rank=1 "
            "derived from the layout (rank 5 % tp_size 2); explicit dp_rank=7 disagrees "
            "with dp_rank=2 derived from the layout (rank 5 // tp_size 2); refusing to "
            "overwrite either value: pass the derived rank or none (a mismatch means the "
            "caller and the process group disagree on the layout)",
        ),
    ],
)
def test_derive_ranks_refusals_name_the_setting_the_rank_and_the_phase(
    args: tuple[Any, ...], kwargs: dict[str, Any], rank: int | None, text: str
) -> None:
    """Every refusal of derive_ranks is a ConfigurationError of phase 'bootstrap' whose
    message names the setting and the value (both disagreements at once, joined by
    '; ', and what to do) and whose rank field is the global rank once it is known."""
    with pytest.raises(ConfigurationError) as info:
        derive_ranks(*args, **kwargs)
    assert str(info.value) == text
    assert (info.value.rank, info.value.phase) == (rank, "bootstrap")


# -- _dispatch.CpuBroadcastDispatcher._broadcast_uds -----------------------------------


class _TaggedBytes(bytearray):
    """A writable buffer-protocol object that carries a ``device`` attribute."""

    device = SimpleNamespace(type="cuda")


def test_uds_path_hands_plain_buffers_to_the_broadcaster_with_root_0() -> None:
    """The device check is for torch tensors only: a buffer-protocol object is host
    memory whatever ``device`` attribute it carries.  The broadcaster gets the buffers
    and root 0 explicitly (a duck-typed broadcaster need not default root)."""
    up = _UpBroadcaster()
    dispatcher = CpuBroadcastDispatcher(up, _stack.UnusedEngine(), rank=0)
    tagged = _TaggedBytes(b"abc")
    assert dispatcher.broadcast_cpu([tagged]) is DispatchPath.UDS
    assert len(up.calls) == 1
    ((buffers, root),) = up.calls
    assert buffers == [tagged] and buffers[0] is tagged and root == 0


def _odd_device_rank(ctx: RankContext) -> list[object]:
    import torch

    class NoTypeDevice(torch.Tensor):
        @property
        def device(self) -> Any:  # type: ignore[override]
            return "somewhere"  # a device that names no type

    class NoDevice(torch.Tensor):
        @property
        def device(self) -> Any:  # type: ignore[override]
            raise AttributeError("device")

    up = _UpBroadcaster()
    dispatcher = CpuBroadcastDispatcher(up, _stack.UnusedEngine(), rank=ctx.rank)
    seen: list[object] = []
    for cls in (NoTypeDevice, NoDevice):
        tensor = torch.zeros(2).as_subclass(cls)
        seen.append(str(dispatcher.broadcast_cpu([tensor])))
    with pytest.raises(UnsupportedDeviceError) as info:
        dispatcher.broadcast_cpu([bytearray(5), torch.empty(3, device="meta")])
    error = info.value
    seen += [str(error), error.rank, error.phase, error.bytes_total, len(up.calls)]
    with pytest.raises(ConfigurationError) as single:
        dispatcher.broadcast_cpu(torch.zeros(2))
    seen.append(str(single.value))
    return seen


def test_uds_path_refuses_only_tensors_known_to_be_off_the_cpu() -> None:
    """In a forked rank (torch): a tensor whose device names no type, or that has no
    device at all, is taken as a CPU tensor and goes over UDS; a meta tensor is refused
    before any byte moves, the error naming the buffer, its device and size, the rank,
    the phase 'dispatch' and the call's total bytes; a lone tensor is refused as a
    single buffer, not as a non-list."""
    (seen,) = run_ranks(_odd_device_rank, 1, **_stack.RUN).values()
    assert seen == [
        "uds",
        "uds",
        "rank 0: in phase 'dispatch': broadcast_cpu over UDS requires CPU tensors; "
        "buffer 1 is on device meta (12 bytes)",
        0,
        "dispatch",
        17,
        2,
        "rank 0: in phase 'dispatch': broadcast_cpu takes a list of buffers, got a single "
        "Tensor; wrap it in a list",
    ]


class _DownBroadcaster(_UpBroadcaster):
    """A broadcaster that is not up: the dispatcher takes the collective path."""

    def is_initialized(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("call", "error_type", "text"),
    [
        (
            {"buffers": [bytearray(1)], "root": 1},
            UnsupportedRootError,
            "broadcast_cpu supports only root=0; got root=1",
        ),
        (
            {"buffers": [bytearray(1)], "root": False},
            UnsupportedRootError,
            "broadcast_cpu supports only root=0; got root=False",
        ),
        (
            {"buffers": [bytearray(1)], "mode": ParallelMode.DP},
            UnsupportedModeError,
            "broadcast_cpu supports only ParallelMode.TP; got mode=ParallelMode.DP",
        ),
        (
            {"buffers": [bytearray(1)], "mode": "tp"},
            UnsupportedModeError,
            "broadcast_cpu supports only ParallelMode.TP; got mode='tp'",
        ),
        (
            {"buffers": bytearray(2)},
            ConfigurationError,
            "broadcast_cpu takes a list of buffers, got a single bytearray; wrap it in a list",
        ),
        (
            {"buffers": "numpy"},
            ConfigurationError,
            "broadcast_cpu takes a list of buffers, got a single ndarray; wrap it in a list",
        ),
        (
            {"buffers": 7},
            ConfigurationError,
            "broadcast_cpu takes a list of buffers, got int",
        ),
        (
            {"buffers": [bytearray(1), object()]},
            ConfigurationError,
            "buffer 1 (object) is neither a torch tensor nor a buffer-protocol object",
        ),
        (
            {"buffers": [b"ro"]},
            ConfigurationError,
            "buffer 0 (bytes) is read-only; non-root ranks receive into it, so every rank "
            "must pass writable buffers",
        ),
    ],
)
def test_dispatcher_refusals_name_the_rank_the_phase_and_the_fix(
    call: dict[str, Any], error_type: type[Exception], text: str
) -> None:
    """Each refusal of broadcast_cpu (root, mode, not a list, a single buffer -- also a
    numpy array --, a non-buffer, a read-only buffer) is its own error type, names the
    dispatcher's rank and the phase 'dispatch', says what was given, and reaches
    neither path."""
    import numpy as np

    if call["buffers"] == "numpy":
        call = {**call, "buffers": np.zeros(3)}
    for broadcaster in (_UpBroadcaster(), _DownBroadcaster()):
        dispatcher = CpuBroadcastDispatcher(broadcaster, _stack.UnusedEngine(), rank=3)
        with pytest.raises(ConfigurationError) as info:
            dispatcher.broadcast_cpu(**call)
        assert type(info.value) is error_type
        assert str(info.value) == f"rank 3: in phase 'dispatch': {text}"
        assert (info.value.rank, info.value.phase) == (3, "dispatch")
        assert broadcaster.calls == []


def test_teardown_of_an_engine_without_close_then_broadcast_is_refused() -> None:
    """teardown() closes an owned engine only if it has a close(); afterwards a call is
    refused with NotInitializedError naming the rank, the phase and what to do."""
    dispatcher = CpuBroadcastDispatcher(_UpBroadcaster(), _stack.UnusedEngine(), rank=3)
    dispatcher.teardown()  # UnusedEngine has no close()
    with pytest.raises(NotInitializedError) as info:
        dispatcher.broadcast_cpu([bytearray(1)])
    assert str(info.value) == (
        "rank 3: in phase 'dispatch': broadcast_cpu after teardown(): build a new "
        "dispatcher with a new engine"
    )
    assert (info.value.rank, info.value.phase) == (3, "dispatch")


def test_dispatcher_works_when_torch_is_a_stand_in_without_a_tensor_class(
    monkeypatch: Any,
) -> None:
    """Tensor detection reads torch from sys.modules and never imports it: with no torch
    module, or a stand-in whose Tensor is not a class, plain buffers still go over UDS."""
    for stand_in in (None, SimpleNamespace(Tensor="not a class")):
        monkeypatch.setitem(sys.modules, "torch", stand_in)
        up = _UpBroadcaster()
        dispatcher = CpuBroadcastDispatcher(up, _stack.UnusedEngine(), rank=0)
        assert dispatcher.broadcast_cpu([bytearray(b"ok")]) is DispatchPath.UDS
        assert up.calls == [([bytearray(b"ok")], 0)]


class _BareEngine:
    """An engine with the three calls and nothing else (no group, no timeout)."""

    name = "bare"

    def broadcast(self, tensors: Any, root: int, group: Any) -> None:
        raise AssertionError("not expected")

    def sync_communication(self) -> None:
        raise AssertionError("not expected")

    def device_sync(self) -> None:
        raise AssertionError("not expected")


def test_dispatcher_group_is_the_given_one_else_the_engines() -> None:
    """The collective runs on the group given to the dispatcher, else on the engine's
    group, else on the default group (None); no bootstrap has run yet."""
    engine = _stack.UnusedEngine()
    engine.group = "engine's group"  # type: ignore[misc]
    up = _UpBroadcaster()
    assert CpuBroadcastDispatcher(up, engine, group="mine").group == "mine"
    assert CpuBroadcastDispatcher(up, engine).group == "engine's group"
    bare = CpuBroadcastDispatcher(up, _BareEngine())  # type: ignore[arg-type]
    assert bare.group is None
    assert bare.last_bootstrap is None


def test_engine_settings_and_device_names() -> None:
    """An engine wrapping a group keeps that group and timeout; 'cuda' and 'cuda:N' (any
    case) pick NCCL; anything else is refused naming the value, the choices and the
    phase 'engine-create'."""
    engine = TorchDistributedEngine(group="the group", timeout=7.5)
    assert (engine.group, engine.timeout, engine.device, engine.backend) == (
        "the group",
        7.5,
        "cpu",
        "gloo",
    )
    assert (
        TorchDistributedEngine(device="cuda").device,
        TorchDistributedEngine(device="CUDA:1").device,
    ) == ("cuda", "cuda:1")
    for bad in ("cuda:x", "cudaa1"):
        with pytest.raises(ConfigurationError) as info:
            TorchDistributedEngine(device=bad)
        assert str(info.value) == (
            f"in phase 'engine-create': unsupported engine device {bad!r}: use 'cpu' (gloo) "
            "or 'cuda[:N]' (NCCL)"
        )
        assert info.value.phase == "engine-create"


# -- _dispatch_adapter -----------------------------------------------------------------


def test_dispatch_adapters_default_to_a_10_s_group_timeout(tmp_path: Any) -> None:
    """Without group_timeout every way of building the dispatch capability assumes the
    suite's 10 s group deadline: connect and init a quarter each, io all of it; and
    make_dispatcher hands the adapter the engine it was lent."""
    engine = _stack.UnusedEngine()
    common: dict[str, Any] = {"rank": 0, "world_size": 2, "workdir": str(tmp_path)}
    built = [
        make_dispatch_adapter(CpuTpBroadcaster(), engine=engine, **common),
        DispatchAdapter(CpuTpBroadcaster(), engine=engine, **common),
        make().make_dispatcher(engine=engine, **common),
    ]
    for adapter in built:
        config = adapter.config  # type: ignore[attr-defined]
        assert (config.connect_timeout, config.init_timeout, config.io_timeout) == (2.5, 2.5, 10.0)
        assert adapter.engine is engine  # type: ignore[attr-defined]


def _new_base_path_rank(ctx: RankContext) -> list[object]:
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )
    adapter: Any = make().make_dispatcher(
        engine=engine, rank=ctx.rank, world_size=ctx.world_size, workdir=ctx.workdir
    )
    moved = ctx.base_path + "-moved"
    try:
        first = adapter.bootstrap(local_world_size=2, base_path=ctx.base_path)
        second = adapter.bootstrap(local_world_size=2, base_path=moved)
        data = bytearray(b"moved!" if ctx.rank == 0 else bytes(6))
        path = adapter.broadcast_cpu([data])
        return [
            str(first.path),
            str(second.path),
            second.failed_ranks,
            adapter.incarnation,
            path,
            bytes(data),
        ]
    finally:
        adapter.teardown()
        engine.close()


def test_a_bootstrap_on_a_new_base_path_moves_the_uds_group_there() -> None:
    """Two forked ranks over gloo: bootstrapping the adapter again with another base
    path takes the standing broadcaster down first, so every rank comes up on UDS at the
    new path (no re-init mismatch, no fallback) and the bytes travel there."""
    for seen in run_ranks(_new_base_path_rank, 2, **_stack.RUN).values():
        assert seen == ["uds", "uds", (), 2, "uds", b"moved!"]


# -- _engines ------------------------------------------------------------------------


def test_recorder_engine_calls_are_the_engine_events_and_a_wrapper_forwards_the_rest() -> None:
    """engine_calls() keeps the collective / sync_communication / device_sync events in
    order and drops the dispatcher's own ("uds", n) notes; a wrapped engine's other
    attributes (timeout, group, ...) are the real engine's."""
    recorder = EngineRecorder()
    recorder.note("uds", 8)
    recorder.note("collective", 8)
    recorder.note("sync_communication")
    recorder.note("uds", 4)
    recorder.note("device_sync")
    assert recorder.engine_calls() == (
        ("collective", 8),
        ("sync_communication",),
        ("device_sync",),
    )
    wrapped = recorder.wrap(_stack.UnusedEngine(timeout=4.5))
    assert (wrapped.timeout, wrapped.group) == (4.5, None)  # type: ignore[attr-defined]


# -- conformance_adapter ---------------------------------------------------------------


def test_reference_adapter_runs_with_the_settings_it_was_given(tmp_path: Any) -> None:
    """A ReferenceAdapter made with a config keeps it (its broadcaster too, before any
    initialize); deadlines set afterwards are what initialize uses; broadcast without a
    root sends from rank 0, and a root given is passed on (and refused unless 0)."""
    config = BroadcasterConfig(connect_timeout=4.0, init_timeout=5.0, io_timeout=6.0)
    adapter = ReferenceAdapter(config)
    assert adapter.config == config and adapter.broadcaster.config == config
    adapter.set_deadlines(io=7.0)
    adapter.initialize(0, 1, str(tmp_path / "g"))
    try:
        assert adapter.broadcaster.config == config.replace(io_timeout=7.0)
        adapter.broadcast(bytearray(b"x"))  # a group of one: nothing to send, no error
        with pytest.raises(ConfigurationError) as info:
            adapter.broadcast(bytearray(b"x"), 1)
        assert str(info.value) == (
            "rank 0: in phase 'broadcast': root must be 0 (star topology: only rank 0 sends), got 1"
        )
    finally:
        adapter.reset()


def test_reference_adapter_reports_the_installed_version(monkeypatch: Any) -> None:
    """version is the installed tpbcast distribution's; without one (a bare source
    tree) it reads 0.1.0."""
    real = metadata.version

    def installed(name: str) -> str:
        if name.lower() == "tpbcast":
            return "7.7.7"
        return real(name)

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", installed)
    assert make().version == "7.7.7"
    monkeypatch.setattr(metadata, "version", missing)
    assert make().version == "0.1.0"


# -- _engines.TorchDistributedEngine (gloo, forked ranks) ------------------------------


class _NoTimeoutEngine(_stack.UnusedEngine):
    """An engine that says nothing about its group's timeout."""

    def __getattribute__(self, name: str) -> Any:
        if name == "timeout":
            raise AttributeError(name)
        return super().__getattribute__(name)


def _engine_errors_rank(ctx: RankContext) -> dict[str, object]:
    import torch
    import torch.distributed as dist

    seen: dict[str, object] = {}
    refusals = []
    for rank, world_size, where in ((2, 2, ctx.workdir), (-1, 1, ctx.workdir), (0, 1, "/nx")):
        with pytest.raises(ConfigurationError) as refused:
            TorchDistributedEngine.create(rank, world_size, where)
        refusals.append([str(refused.value), refused.value.rank, refused.value.phase])
    seen["create_refused"] = refusals
    engine = TorchDistributedEngine.create(0, 1, ctx.workdir, timeout=_stack.GROUP_TIMEOUT)
    store = os.path.join(ctx.workdir, "pg.store")
    seen["group"] = [os.path.exists(store), dist.get_backend(), engine.timeout]
    try:
        with pytest.raises(ConfigurationError) as refused:
            TorchDistributedEngine.create(0, 1, ctx.workdir, store_name="second.store")
        seen["second_create"] = [str(refused.value), refused.value.rank, refused.value.phase]
        with pytest.raises(ConfigurationError) as refused:
            engine.broadcast([torch.zeros(1), torch.empty(2, device="meta")], 0, None)
        seen["device"] = [str(refused.value), refused.value.rank, refused.value.phase]
        with pytest.raises(ConfigurationError) as refused:
            engine.broadcast([b"no"], 0, None)
        seen["not_tensor"] = str(refused.value)
        with pytest.raises(CollectiveError) as info:  # no rank 3 in a group of one
            engine.broadcast([torch.zeros(2), torch.zeros(3, dtype=torch.int64)], 3, None)
        error, cause = info.value, info.value.__cause__
        seen["start"] = [
            error.reason == f"torch.distributed/gloo broadcast could not start: "
            f"{type(cause).__name__}: {cause}",
            error.rank,
            error.peer,
            error.phase,
            error.bytes_done,
            error.bytes_total,
        ]
        # a tensor without elements is left out of the collective, whatever its layout
        data = torch.arange(3.0)
        engine.broadcast([torch.zeros(0).to_sparse(), data], 0, None)
        engine.sync_communication()
        seen["empty_sparse"] = data.tolist()
        recorder = EngineRecorder()
        dispatcher = CpuBroadcastDispatcher(
            CpuTpBroadcaster(), engine, recorder=recorder, rank=0, owns_engine=False
        )
        seen["dispatch"] = [
            str(dispatcher.broadcast_cpu([bytearray(), bytearray(b"abc")])),
            recorder.events,
        ]
        # an engine without a timeout: no budget to check; tp_size 1: no UDS
        plain = CpuBroadcastDispatcher(CpuTpBroadcaster(), _NoTimeoutEngine(), rank=0)
        decision = plain.bootstrap(
            tp_rank=0, tp_size=1, local_world_size=1, base_path=ctx.base_path
        )
        seen["no_timeout"] = _fields(decision)
        # the consensus tensors stay on the CPU (gloo) whatever torch's default device
        torch.set_default_device("meta")
        try:
            seen["meta_default"] = [all_gather_status(0, None), all_gather_status(2, "x")]
        finally:
            torch.set_default_device(None)
        if not torch.cuda.is_available():
            with pytest.raises((AssertionError, RuntimeError)):
                TorchDistributedEngine(device="cuda").device_sync()
    finally:
        engine.close()
    # a fresh group (no traceback above holds it): its store file goes with close()
    fresh = TorchDistributedEngine.create(0, 1, ctx.workdir, store_name="fresh.store")
    made = os.path.exists(os.path.join(ctx.workdir, "fresh.store"))
    fresh.close()
    seen["store_left"] = [made, os.path.exists(os.path.join(ctx.workdir, "fresh.store"))]
    if not dist.is_nccl_available():
        # an NCCL engine asks for an NCCL group, which a build without NCCL refuses
        with pytest.raises((RuntimeError, ValueError)):
            TorchDistributedEngine.create(0, 1, ctx.workdir, device="cuda", store_name="n.store")
    seen["group_after"] = dist.is_initialized()
    return seen


def test_engine_errors_carry_every_field_and_sizes_count_every_tensor() -> None:
    """One forked rank over gloo: create refuses a bad rank, a missing store directory
    and a second default group, naming the rank and the phase; the group it makes is gloo
    with the engine's timeout, its store file is <dir>/pg.store and goes with close();
    an NCCL engine's create asks for NCCL; a tensor on the wrong device and a non-tensor are
    refused naming the rank and the phase; a broadcast that cannot start names its rank,
    its root, 0 bytes done of all its tensors' bytes, and the cause's type; a tensor
    without elements stays out of the collective whatever its layout (sparse too); an
    empty buffer next to a full one adds no byte to the collective; a dispatcher over an engine
    without a timeout bootstraps (tp_size 1: every field of the decision); the consensus
    works when torch's default device is not the CPU; an NCCL engine's device_sync really
    calls into CUDA (which, on a machine without it, raises)."""
    (seen,) = run_ranks(_engine_errors_rank, 1, **_stack.RUN).values()
    assert seen["device"] == [
        "rank 0: in phase 'collective': torch.distributed/gloo cannot broadcast tensor 1 on "
        "device meta (expected cpu or cpu)",
        0,
        "collective",
    ]
    assert seen["not_tensor"] == (
        "rank 0: in phase 'collective': tensor 0 is a bytes, not a torch.Tensor"
    )
    assert seen["start"] == [True, 0, 3, "collective", 0, 32]
    assert seen["empty_sparse"] == [0.0, 1.0, 2.0]
    assert seen["create_refused"] == [
        [
            "rank 2: in phase 'engine-create': invalid process group rank 2 for world_size 2",
            2,
            "engine-create",
        ],
        [
            "rank -1: in phase 'engine-create': invalid process group rank -1 for world_size 1",
            -1,
            "engine-create",
        ],
        [
            "rank 0: in phase 'engine-create': the FileStore directory does not exist [path /nx]",
            0,
            "engine-create",
        ],
    ]
    assert seen["group"] == [True, "gloo", _stack.GROUP_TIMEOUT]
    assert seen["second_create"] == [
        "rank 0: in phase 'engine-create': a default process group already exists in this "
        "process; wrap it with TorchDistributedEngine(group=...) instead of create()",
        0,
        "engine-create",
    ]
    assert seen["no_timeout"] == [
        "collective",
        0,
        1,
        1,
        False,
        False,
        "tp_size 1: nobody to broadcast to, UDS not set up",
        (),
        None,
        (),
        None,
        True,
        True,
    ]
    assert (seen["store_left"], seen["group_after"]) == ([True, False], False)
    assert seen["meta_default"] == [((0, None),), ((2, "x"),)]
    assert seen["dispatch"] == [
        "collective",
        (("collective", 3), ("sync_communication",), ("device_sync",)),
    ]


def _subgroup_rank(ctx: RankContext) -> dict[str, object] | None:
    import torch
    import torch.distributed as dist

    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )
    try:
        sub = dist.new_group([1, 2])  # every rank takes part in making it
        if ctx.rank == 0:
            ctx.wait("done")
            return None
        root = ctx.rank == 1  # group rank 0 of the subgroup: global rank 1

        def filled(tensor: Any, value: float) -> Any:
            return tensor.fill_(value) if root else tensor

        seen: dict[str, object] = {}
        # several tensors, one non-contiguous: staged, root 0 of the subgroup
        several = [filled(torch.zeros(3, dtype=torch.int32), 7), filled(torch.zeros(2, 3).t(), 2.5)]
        engine.broadcast(several, 0, sub)
        engine.sync_communication()
        seen["several"] = [t.tolist() for t in several]
        # one non-contiguous tensor alone
        single = filled(torch.zeros(2, 3).t(), 4.0)
        engine.broadcast([single], 0, sub)
        engine.sync_communication()
        seen["single"] = single.tolist()
        # through a recording wrapper, and through a dispatcher on the subgroup
        wrapped = EngineRecorder().wrap(engine)
        one = filled(torch.zeros(2), 3.0)
        wrapped.broadcast([one], 0, sub)
        wrapped.sync_communication()
        seen["wrapped"] = one.tolist()
        dispatcher = CpuBroadcastDispatcher(
            CpuTpBroadcaster(), engine, group=sub, rank=ctx.rank, owns_engine=False
        )
        data = bytearray(b"sub!" if root else bytes(4))
        seen["dispatch"] = [str(dispatcher.broadcast_cpu([data])), bytes(data)]
        # the consensus, a layout check and a UDS bootstrap on the subgroup
        group_rank = ctx.rank - 1
        seen["gathered"] = all_gather_status(ctx.rank, f"r{ctx.rank}", sub)
        with pytest.raises(ConfigurationError) as mismatch:
            bootstrap(
                CpuTpBroadcaster(_stack.FAST),
                tp_rank=1 - group_rank,
                tp_size=2,
                local_world_size=2,
                base_path=ctx.base_path,
                group=sub,
                group_timeout=_stack.GROUP_TIMEOUT,
                config=_stack.FAST,
            )
        seen["mismatch"] = [str(mismatch.value), mismatch.value.rank, mismatch.value.phase]
        on_uds = CpuBroadcastDispatcher(
            CpuTpBroadcaster(_stack.FAST), engine, group=sub, rank=ctx.rank, owns_engine=False
        )
        decision = on_uds.bootstrap(
            tp_rank=group_rank,
            tp_size=2,
            local_world_size=2,
            base_path=ctx.base_path,
            config=_stack.FAST,
        )
        data = bytearray(b"uds!" if root else bytes(4))
        seen["uds"] = [
            str(decision.path),
            on_uds.last_bootstrap is decision,
            str(on_uds.broadcast_cpu([data])),
            bytes(data),
        ]
        on_uds.teardown()
        # a collective the other member never joins: the sync names the subgroup rank
        on_sub = TorchDistributedEngine(group=sub)
        if not root:
            ctx.wait("started")
            return seen  # leaves without joining
        on_sub.broadcast([torch.zeros(4), torch.zeros(2, dtype=torch.float64)], 1, sub)
        ctx.notify("started")
        with pytest.raises(CollectiveError) as info:
            on_sub.sync_communication()
        error, cause = info.value, info.value.__cause__
        seen["failed"] = [
            error.reason == f"torch.distributed/gloo broadcast did not complete: "
            f"{type(cause).__name__}: {cause}",
            error.rank,
            error.phase,
            error.bytes_done,
            error.bytes_total,
            error.elapsed is not None and 0 < error.elapsed < _stack.RUN["timeout"],
        ]
        ctx.notify("done")
        return seen
    finally:
        engine.close()


def test_engine_and_dispatcher_run_on_a_subgroup_whose_ranks_are_not_the_global_ones() -> None:
    """Three forked ranks over gloo, TP group = global ranks 1 and 2: the engine, its
    recording wrapper and the dispatcher broadcast from the subgroup's rank 0 (global 1)
    on that subgroup, one tensor or several, non-contiguous ones too; the consensus
    gathers the subgroup's two ranks; bootstrap checks tp_rank against the subgroup and
    brings UDS up on it; a sync whose peer left names the subgroup rank, 0 of all the
    bytes, the time waited and the cause."""
    values = run_ranks(_subgroup_rank, 3, **_stack.RUN).values()
    assert values[0] is None
    for seen in values[1:]:
        assert seen is not None
        assert seen["several"] == [[7, 7, 7], [[2.5, 2.5], [2.5, 2.5], [2.5, 2.5]]]
        assert seen["single"] == [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
        assert seen["wrapped"] == [3.0, 3.0]
        assert seen["dispatch"] == ["collective", b"sub!"]
        assert seen["gathered"] == ((1, "r1"), (2, "r2"))
        assert seen["uds"] == ["uds", True, "uds", b"uds!"]
    for group_rank, seen in enumerate(values[1:]):
        given = 1 - group_rank
        assert seen["mismatch"] == [  # type: ignore[index]
            f"rank {given}: in phase 'bootstrap': the process group says rank {group_rank} "
            f"of 2, but bootstrap was given tp_rank={given}, tp_size=2",
            given,
            "bootstrap",
        ]
    assert values[1]["failed"] == [True, 0, "sync_communication", 0, 32, True]  # type: ignore[index]


# -- _dispatch_bootstrap: checks before any collective -------------------------------


class _NoConfigBroadcaster:
    """A broadcaster without a ``config`` attribute (none is required of it)."""

    def initialize(self, rank: int, world_size: int, base_path: str, **kwargs: Any) -> None:
        raise AssertionError("not expected")

    def is_initialized(self) -> bool:
        return False

    def reset(self) -> None:
        pass


@pytest.mark.parametrize(
    ("layout", "text"),
    [
        ((True, 2, 2), "in phase 'bootstrap': tp_rank must be an int, got True"),
        ((0, "2", 2), "in phase 'bootstrap': tp_size must be an int, got '2'"),
        ((0, 2, 1.5), "in phase 'bootstrap': local_world_size must be an int, got 1.5"),
        (
            (2, 2, 1),
            "rank 2: in phase 'bootstrap': invalid layout: tp_rank=2, tp_size=2, "
            "local_world_size=1",
        ),
    ],
)
def test_bootstrap_refuses_a_bad_layout_naming_the_setting(
    layout: tuple[Any, Any, Any], text: str
) -> None:
    """In the pytest process (no group needed: nothing is communicated): a non-int or
    inconsistent layout is refused in phase 'bootstrap', naming the setting and value."""
    tp_rank, tp_size, local_world_size = layout
    with pytest.raises(ConfigurationError) as info:
        bootstrap(
            CpuTpBroadcaster(),
            tp_rank=tp_rank,
            tp_size=tp_size,
            local_world_size=local_world_size,
            base_path="/nonexistent/g",
        )
    assert str(info.value) == text
    assert info.value.phase == "bootstrap"


_NO_GROUP = (
    "rank 1: in phase 'bootstrap': bootstrap needs an initialized process group for the "
    "consensus step"
)


@pytest.mark.parametrize(
    ("broadcaster", "group_timeout", "config"),
    [
        (_NoConfigBroadcaster(), 1.0, None),
        (CpuTpBroadcaster(), 1.0, SimpleNamespace(init_timeout=5.0)),
        (CpuTpBroadcaster(), 1.0, SimpleNamespace(connect_timeout=5.0)),
        (CpuTpBroadcaster(), 1.0, SimpleNamespace(connect_timeout=5.0, init_timeout=None)),
        (CpuTpBroadcaster(), None, _stack.FAST),
    ],
)
def test_the_deadline_budget_is_checked_only_when_every_deadline_is_known(
    broadcaster: Any, group_timeout: float | None, config: Any
) -> None:
    """A broadcaster without settings, settings without a connect or init deadline, or
    no group timeout: nothing to compare, so bootstrap goes on to the next check (here:
    no process group in the pytest process, refused naming the rank and the phase)."""
    with pytest.raises(ConfigurationError) as info:
        bootstrap(
            broadcaster,
            tp_rank=1,
            tp_size=2,
            local_world_size=2,
            base_path="/nonexistent/g",
            group_timeout=group_timeout,
            config=config,
        )
    assert str(info.value) == _NO_GROUP
    assert (info.value.rank, info.value.phase) == (1, "bootstrap")


def test_a_group_timeout_equal_to_the_bootstrap_budget_is_refused() -> None:
    """connect 3 s + init 3 s = 6 s: a 6 s group timeout does not exceed it; the error
    says both numbers and which settings to change."""
    with pytest.raises(ConfigurationError) as info:
        bootstrap(
            CpuTpBroadcaster(),
            tp_rank=1,
            tp_size=2,
            local_world_size=2,
            base_path="/nonexistent/g",
            group_timeout=6.0,
            config=_stack.FAST,
        )
    assert str(info.value) == (
        "rank 1: in phase 'bootstrap': process-group timeout 6 s must exceed the "
        "broadcaster's bootstrap budget connect_timeout + init_timeout = 6 s; shorten the "
        "broadcaster deadlines (BroadcasterConfig) or lengthen the group timeout"
    )


def _consensus_lost_rank(ctx: RankContext) -> list[object] | None:
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )
    try:
        if ctx.rank == 1:
            return None  # leaves before the consensus
        with pytest.raises(BootstrapConsensusError) as info:
            bootstrap(
                CpuTpBroadcaster(_stack.FAST),
                tp_rank=0,
                tp_size=2,
                local_world_size=2,
                base_path=ctx.base_path,
                group_timeout=_stack.GROUP_TIMEOUT,
                config=_stack.FAST,
            )
        error, cause = info.value, info.value.__cause__
        return [
            error.reason == f"consensus collective (layout) failed: {type(cause).__name__}: "
            f"{cause}",
            error.rank,
            error.phase,
        ]
    finally:
        engine.close()


def test_a_consensus_that_cannot_complete_names_the_step_the_rank_and_the_cause() -> None:
    """Two forked ranks over gloo, rank 1 gone before the layout consensus: rank 0's
    bootstrap raises BootstrapConsensusError naming the step, its rank, the phase
    'bootstrap-consensus' and the collective's own error."""
    values = run_ranks(_consensus_lost_rank, 2, **_stack.RUN).values()
    assert values == [[True, 0, "bootstrap-consensus"], None]


def _fields(decision: Any) -> list[object]:
    """A decision's fields, its reason with the times as "T" (each checked to be short)."""
    times = [float(t) for t in re.findall(r"after (\d+\.\d\d) s", decision.reason)]
    return [
        str(decision.path),
        decision.tp_rank,
        decision.tp_size,
        decision.local_world_size,
        decision.eligible,
        decision.attempted,
        re.sub(r"after \d+\.\d\d s", "after T s", decision.reason),
        decision.failed_ranks,
        decision.first_failed_rank,
        decision.errors,
        decision.local_error,
        all(0.0 <= t < 60.0 for t in times),
        0.0 < decision.elapsed < 60.0,
    ]


class _Leave(BaseException):
    """Raised by a fake initialize to make its rank leave the group there and then."""


class _FakeBroadcaster:
    """Records initialize/reset; initialize raises ``fail`` if given, else comes up."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.up = False
        self.calls: list[tuple[Any, ...]] = []

    def initialize(self, rank: int, world_size: int, base_path: str, **kwargs: Any) -> None:
        self.calls.append(("initialize", rank, world_size, base_path, kwargs))
        if self.fail is not None:
            raise self.fail
        self.up = True

    def is_initialized(self) -> bool:
        return self.up

    def reset(self) -> None:
        self.calls.append(("reset",))
        self.up = False


def _bootstrap_rounds_rank(ctx: RankContext) -> dict[str, object]:
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )

    def boot(broadcaster: Any, lws: int = 2, config: Any = None, base: str = "") -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BootstrapFallbackWarning)
            return bootstrap(
                broadcaster,
                tp_rank=ctx.rank,
                tp_size=2,
                local_world_size=lws,
                base_path=base or ctx.base_path,
                group_timeout=_stack.GROUP_TIMEOUT,
                config=config,
            )

    seen: dict[str, object] = {}
    try:
        # rank 1's initialize fails at once; no config: initialize gets none
        failing = _FakeBroadcaster(RuntimeError("boom on rank 1") if ctx.rank == 1 else None)
        seen["one_failed"] = [_fields(boot(failing)), list(failing.calls)]
        # both come up, with a config: initialize gets it
        both = _FakeBroadcaster()
        seen["up"] = [_fields(boot(both, config=_stack.FAST)), list(both.calls)]
        # TP spans nodes on every rank: no warning, the broadcaster left up goes down
        seen["spans"] = [_fields(boot(both, lws=1)), both.calls[1:]]
        # both real initializes fail: rank 1 at once (path too long), rank 0 when its
        # init deadline passes (no peer ever connects)
        quick = BroadcasterConfig(connect_timeout=0.5, init_timeout=0.5, io_timeout=5.0)
        base = ctx.base_path if ctx.rank == 0 else "/tmp/" + "p" * 120
        decision = boot(CpuTpBroadcaster(quick), config=quick, base=base)
        texts = dict(decision.errors)
        pattern = (
            r"UDS initialize failed on rank\(s\) 0, 1 of 2; first failure: rank 1 after "
            r"(\d+\.\d\d) s: "
            + re.escape(texts[1])
            + r"; then rank 0 after (\d+\.\d\d) s: "
            + re.escape(texts[0])
            + "; all 2 ranks reset the broadcaster and use the collective fallback"
        )
        match = re.fullmatch(pattern, decision.reason)
        seen["both_failed"] = [
            match is not None and float(match[1]) < float(match[2]),
            decision.failed_ranks,
            decision.first_failed_rank,
            decision.local_error == texts[ctx.rank],
            (str(decision.path), decision.eligible, decision.attempted),
        ]
        # rank 1 leaves inside initialize: rank 0's init consensus fails
        if ctx.rank == 1:
            try:
                boot(_FakeBroadcaster(_Leave()))
            except _Leave:
                return seen
        with pytest.raises(BootstrapConsensusError) as info:
            boot(_FakeBroadcaster())
        seen["lost"] = [
            info.value.reason.startswith("consensus collective (init) failed: "),
            info.value.rank,
            info.value.phase,
        ]
        return seen
    finally:
        engine.close()


def test_bootstrap_decisions_and_calls_in_each_outcome() -> None:
    """Two forked ranks over gloo, one bootstrap after another: every field of the
    decision when rank 1's initialize fails (rank 0's error is None, the failure time is
    short), when both come up (initialize got the config, and none when none was given),
    when TP spans nodes everywhere, and when both fail (the faster failure named first,
    then the other, "; then "); a consensus lost at the init step names rank 0."""
    first, second = run_ranks(_bootstrap_rounds_rank, 2, **_stack.RUN).values()
    failed = (
        "UDS initialize failed on rank(s) 1 of 2; first failure: rank 1 after T s: "
        "RuntimeError: boom on rank 1; all 2 ranks reset the broadcaster and use the "
        "collective fallback"
    )
    up = "1 < tp_size 2 <= local_world_size 2: UDS is up"
    spans = "tp_size 2 > local_world_size 1 (TP spans nodes)"
    for rank, seen in enumerate((first, second)):
        base = seen["one_failed"][1][0][3]  # type: ignore[index]
        mine = None if rank == 0 else "RuntimeError: boom on rank 1"
        assert seen["one_failed"] == [
            [
                "collective",
                rank,
                2,
                2,
                True,
                True,
                failed,
                (1,),
                1,
                ((1, "RuntimeError: boom on rank 1"),),
                mine,
                True,
                True,
            ],
            [("initialize", rank, 2, base, {}), ("reset",)],
        ]
        assert seen["up"] == [
            ["uds", rank, 2, 2, True, True, up, (), None, (), None, True, True],
            [("initialize", rank, 2, base, {"config": _stack.FAST})],
        ]
        assert seen["spans"] == [
            ["collective", rank, 2, 1, False, False, spans, (), None, (), None, True, True],
            [("reset",)],
        ]
        assert seen["both_failed"] == [True, (0, 1), 1, True, ("collective", True, True)]
    assert first["lost"] == [True, 0, "bootstrap-consensus"]


def _group_timeout_rank(ctx: RankContext) -> list[object] | None:
    import torch

    engine = TorchDistributedEngine.create(ctx.rank, 2, ctx.workdir, timeout=2.0)
    try:
        if ctx.rank == 1:
            ctx.wait("timed out")  # alive, but never joins the broadcast
            return None
        engine.broadcast([torch.zeros(4)], 1, None)
        with pytest.raises(CollectiveError) as info:
            engine.sync_communication()
        ctx.notify("timed out")
        elapsed = info.value.elapsed
        return [info.value.phase, elapsed is not None and 1.0 < elapsed < 30.0]
    finally:
        engine.close()


def test_the_group_timeout_given_to_create_bounds_every_collective() -> None:
    """Two forked ranks, create(timeout=2): a broadcast whose root is alive but never
    joins fails its sync after about 2 s, not torch's default of 30 minutes."""
    values = run_ranks(_group_timeout_rank, 2, **_stack.RUN).values()
    assert values == [["sync_communication", True], None]


# -- _dispatch_bootstrap: the fallback warning -----------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _disagreeing_layout_rank(ctx: RankContext) -> dict[str, object]:
    engine = TorchDistributedEngine.create(
        ctx.rank, ctx.world_size, ctx.workdir, timeout=_stack.GROUP_TIMEOUT
    )
    records = _Records()
    logger = logging.getLogger("tpbcast.reference_impl.dispatch")
    logger.addHandler(records)
    broadcaster = CpuTpBroadcaster(_stack.FAST)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision = bootstrap(
                broadcaster,
                tp_rank=ctx.rank,
                tp_size=3,
                local_world_size=3 if ctx.rank == 0 else 1,  # ranks 1 and 2: TP spans nodes
                base_path=ctx.base_path,
                group_timeout=_stack.GROUP_TIMEOUT,
                config=_stack.FAST,
            )
        return {
            "reason": decision.reason,
            "decision": _fields(decision),
            "warnings": [(str(w.message), w.category.__name__) for w in caught],
            "logged": records.messages,
        }
    finally:
        logger.removeHandler(records)
        broadcaster.reset()
        engine.close()


def test_a_layout_disagreement_warns_once_naming_every_ineligible_rank() -> None:
    """Three forked ranks over gloo, two of which see TP spanning nodes: every rank's
    decision, warning and log line name both ranks ("1, 2") and what each reported; the
    decision says nobody attempted UDS, and each rank's own error is its layout, if any."""
    note = "tp_size 3 > local_world_size 1 (TP spans nodes)"
    for rank, seen in enumerate(run_ranks(_disagreeing_layout_rank, 3, **_stack.RUN).values()):
        reason = (
            f"layouts disagree: rank(s) 1, 2 of 3 report rank 1: {note}; rank 2: {note}; "
            "all 3 ranks use the collective fallback"
        )
        assert seen["reason"] == reason
        lws = 3 if rank == 0 else 1
        assert seen["decision"] == [
            "collective",
            rank,
            3,
            lws,
            False,
            False,
            reason,
            (1, 2),
            None,
            ((1, note), (2, note)),
            None if rank == 0 else note,
            True,
            True,
        ]
        message = f"tpbcast UDS bootstrap skipped: {reason}"
        assert seen["warnings"] == [(message, "BootstrapFallbackWarning")]
        assert seen["logged"] == [message]


def _destroyed_group_rank(ctx: RankContext) -> list[object] | None:
    import torch
    import torch.distributed as dist

    engine = TorchDistributedEngine.create(ctx.rank, 2, ctx.workdir, timeout=_stack.GROUP_TIMEOUT)
    try:
        if ctx.rank == 1:
            ctx.wait("started")
            return None  # leaves without joining
        engine.broadcast([torch.zeros(4), torch.zeros(2)], 1, None)
        ctx.notify("started")
        dist.destroy_process_group()  # by its owner's caller, behind the engine's back
        with pytest.raises(CollectiveError) as info:
            engine.sync_communication()
        error = info.value
        return [error.rank, error.phase, error.bytes_done, error.bytes_total]
    finally:
        engine.close()


def test_a_failed_sync_after_the_group_was_destroyed_is_still_a_collective_error() -> None:
    """Two forked ranks over gloo: rank 0's collective fails (its peer left) and its
    default group is destroyed before the sync; the sync still raises CollectiveError
    (no rank: there is no group left to ask), with its phase and sizes."""
    values = run_ranks(_destroyed_group_rank, 2, **_stack.RUN).values()
    assert values == [[None, "sync_communication", 0, 24], None]
