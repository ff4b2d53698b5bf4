"""Engine behaviour the other self-tests left unchecked, found by mutation testing.

The ``_engines`` share of tests/dispatch/test_mutation_kills_dispatch.py: each test here
pins a behaviour that a mutmut mutant of ``tpbcast.reference_impl._engines`` (the
``torch.distributed`` engine of the fallback path and its recorder) changed without any
other self-test noticing (``nox -s mutation``; the survivors are listed in
reports/mutation/, the equivalent ones in tools/mutation_equivalents_engines.toml).  They
check what a user or an operator sees -- the device and backend an engine reports, an
error's type, fields and message, the group ``create`` builds (its backend, ranks, store
file and deadline), the calls a recorder saw -- never the source text.  Building an
engine and refusing a device need no torch op, so those run in the pytest process; a
real process group is made only in ranks forked by tpbcast.harness.run_ranks (this
folder's conftest imports torch in the pytest process and never runs an op there).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    CollectiveError,
    ConfigurationError,
    EngineRecorder,
    TorchDistributedEngine,
    all_gather_status,
)

# -- TorchDistributedEngine.__init__ and the device names ------------------------------


def test_engine_devices_are_normalised_and_pick_the_backend() -> None:
    """The device name is trimmed and lower-cased: cpu -> gloo, cuda and cuda:N -> NCCL
    (no GPU needed to build one); anything else, "cuda:" followed by a non-number
    included, is refused with ConfigurationError in phase 'engine-create' naming the
    device given and the two accepted forms."""
    accepted = {
        "cpu": ("cpu", "gloo"),
        " CPU\n": ("cpu", "gloo"),
        "cuda": ("cuda", "nccl"),
        "Cuda": ("cuda", "nccl"),
        "cuda:0": ("cuda:0", "nccl"),
        "CUDA:12": ("cuda:12", "nccl"),
    }
    for given, (device, backend) in accepted.items():
        engine = TorchDistributedEngine(device=given)
        assert (engine.device, engine.backend, engine.name) == (
            device,
            backend,
            f"torch.distributed/{backend}",
        ), given
    for refused in ("tpu", "cuda:", "cuda:x", "cuda:1x", "gpu:1", "cudas", "cpu:0"):
        with pytest.raises(ConfigurationError) as info:
            TorchDistributedEngine(device=refused)
        assert str(info.value) == (
            f"in phase 'engine-create': unsupported engine device {refused!r}: use 'cpu' "
            "(gloo) or 'cuda[:N]' (NCCL)"
        )
        assert (info.value.rank, info.value.phase) == (None, "engine-create")


def test_an_engine_keeps_what_it_was_given_and_refuses_work_once_closed() -> None:
    """A bare engine is a CPU/gloo one wrapping the default group, not owning it, with no
    timeout and nothing pending; given a group, ownership and a timeout it reports them.
    close() is idempotent, ends ownership and makes broadcast fail with CollectiveError
    naming the backend and the phase 'collective'."""
    bare = TorchDistributedEngine()
    assert (bare.device, bare.backend, bare.group, bare.timeout) == ("cpu", "gloo", None, None)
    assert (bare.owns_group, bare.pending) == (False, 0)
    group = object()
    owner = TorchDistributedEngine(group=group, owns_group=True, timeout=4.5)
    assert (owner.group, owner.timeout, owner.owns_group, owner.pending) == (group, 4.5, True, 0)
    for _ in range(2):  # no default group in this process: nothing to destroy
        owner.close()
        assert owner.owns_group is False
    with pytest.raises(CollectiveError) as info:
        owner.broadcast([], 0, None)  # refused before any torch op
    assert str(info.value) == "in phase 'collective': torch.distributed/gloo engine is closed"


# -- EngineRecorder.wrap ---------------------------------------------------------------


class _Inner:
    """A stand-in engine that logs the calls that reach it."""

    name = "inner"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def broadcast(self, tensors: Any, root: int, group: Any) -> None:
        self.calls.append(("broadcast", list(tensors), root, group))

    def sync_communication(self) -> None:
        self.calls.append(("sync_communication",))

    def device_sync(self) -> None:
        self.calls.append(("device_sync",))


def test_a_recorder_wraps_an_engine_once_and_another_recorder_wraps_the_wrapper() -> None:
    """wrap() of a wrapper made by the same recorder returns it (no double recording);
    another recorder's wrap() stacks on it, so each call reaches the engine once with
    its arguments and is recorded once by each recorder."""
    inner = _Inner()
    first, second = EngineRecorder(), EngineRecorder()
    wrapped = first.wrap(inner)  # type: ignore[arg-type]
    assert (wrapped.inner, wrapped.recorder, wrapped.name) == (inner, first, "inner")
    assert first.wrap(wrapped) is wrapped
    outer = second.wrap(wrapped)
    assert outer is not wrapped
    assert (outer.inner, outer.recorder) == (wrapped, second)
    group = object()
    outer.broadcast([bytearray(3)], 0, group)
    outer.sync_communication()
    outer.device_sync()
    calls = (("collective", 0), ("sync_communication",), ("device_sync",))
    assert first.events == calls and second.events == calls
    assert inner.calls == [
        ("broadcast", [bytearray(3)], 0, group),
        ("sync_communication",),
        ("device_sync",),
    ]


# -- TorchDistributedEngine.create (forked ranks) --------------------------------------

#: The deadline create() is given below: a collective whose peer never joins must fail
#: after about this long (torch's own default would be 30 minutes).
_SHORT = 1.5
_PHASE = "engine-create"


def _refused(call: Any, workdir: str) -> list[object]:
    """The refusal's message, rank, phase and path (the rank's workdir shown as <w>)."""
    with pytest.raises(ConfigurationError) as info:
        call()
    error = info.value
    path = None if error.path is None else error.path.replace(workdir, "<w>")
    return [str(error).replace(workdir, "<w>"), error.rank, error.phase, path]


def _waited_for_a_missing_peer(engine: TorchDistributedEngine) -> float | None:
    """Broadcast from rank 1, which never joins; return how long the sync waited.

    Only the time is kept, and the error's reference cycle (its traceback holds this
    frame) is collected: the traceback holds the work, and so the group's store, which
    must go when the engine is closed.
    """
    import gc

    import torch

    engine.broadcast([torch.zeros(2)], 1, None)
    with pytest.raises(CollectiveError) as info:
        engine.sync_communication()
    elapsed = info.value.elapsed
    del info
    gc.collect()
    return elapsed


def _create_rank(ctx: RankContext) -> dict[str, object]:
    import numpy as np
    import torch
    import torch.distributed as dist

    create = TorchDistributedEngine.create
    seen: dict[str, object] = {}
    missing = os.path.join(ctx.workdir, "missing")
    # refusals before any group exists (a short timeout bounds a mutant that goes on)
    seen["refused"] = [
        _refused(lambda: create(2, 2, ctx.workdir, timeout=_SHORT), ctx.workdir),
        _refused(lambda: create(-1, 2, ctx.workdir, timeout=_SHORT), ctx.workdir),
        _refused(lambda: create(0, 0, ctx.workdir, timeout=_SHORT), ctx.workdir),
        _refused(lambda: create(1, 3, missing, timeout=_SHORT), ctx.workdir),
    ]
    store = os.path.join(ctx.workdir, "pg.store")  # the default store_name
    engine = create(ctx.rank, ctx.world_size, ctx.workdir, timeout=_SHORT)
    try:
        seen["engine"] = [engine.device, engine.name, engine.owns_group, engine.timeout]
        seen["group"] = [dist.get_backend(), dist.get_rank(), dist.get_world_size()]
        seen["store_file"] = os.path.exists(store)
        seen["again"] = _refused(
            lambda: create(ctx.rank, ctx.world_size, ctx.workdir, timeout=_SHORT), ctx.workdir
        )
        # the consensus on it takes any int-like status: a bool, a numpy integer
        seen["int_like"] = [
            all_gather_status(True, f"b{ctx.rank}"),
            all_gather_status(np.int16(-3 * ctx.rank), ctx.rank),
        ]
        # the group's deadline: rank 0 broadcasts from rank 1, which stays but never joins
        if ctx.rank == 0:
            elapsed = _waited_for_a_missing_peer(engine)
            seen["deadline"] = elapsed is not None and _SHORT * 0.9 < elapsed < _SHORT + 8.0
            ctx.notify("timed out")
        else:
            ctx.wait("timed out")
    finally:
        engine.close()
    ctx.sync("closed")  # the store file goes when the last rank lets it go
    seen["closed"] = [dist.is_initialized(), engine.owns_group, os.path.exists(store)]
    engine.close()  # idempotent
    # a group of one is a group: each rank makes its own
    solo = create(0, 1, ctx.workdir, store_name=f"solo{ctx.rank}.store", timeout=_SHORT)
    seen["solo"] = [dist.get_rank(), dist.get_world_size(), solo.owns_group]
    solo.close()
    if not torch.cuda.is_available():
        # a CUDA engine asks for NCCL on its device: here that fails, and no group is left
        with pytest.raises(Exception) as info:
            create(ctx.rank, ctx.world_size, ctx.workdir, device="cuda", store_name="cuda.store")
        seen["cuda"] = [isinstance(info.value, ConfigurationError), dist.is_initialized()]
    return seen


def test_create_checks_its_arguments_and_builds_the_group_it_owns() -> None:
    """Two forked ranks: create() refuses a rank outside 0..world_size-1, a world size
    below 1, a missing store directory and a second default group, each with
    ConfigurationError naming the rank, the phase 'engine-create' (and the directory).
    Otherwise it builds the gloo default group with the ranks given, on a FileStore at
    <store_dir>/pg.store by default, and owns it with the timeout given: a collective
    whose peer never joins fails after that long, and all_gather_status over it gathers
    a bool or numpy-integer status as an int; close() destroys the group and the
    store file, and a group of one can be made next.  Without CUDA, a create() for
    device cuda fails and leaves no group."""
    values = run_ranks(_create_rank, 2, timeout=45.0, fail_fast_grace=15.0).values()
    for rank, seen in enumerate(values):
        head = "in phase 'engine-create'"
        assert seen["refused"] == [
            [
                f"rank {r}: {head}: invalid process group rank {r} for world_size {w}",
                r,
                _PHASE,
                None,
            ]
            for r, w in ((2, 2), (-1, 2), (0, 0))
        ] + [
            [
                f"rank 1: {head}: the FileStore directory does not exist [path <w>/missing]",
                1,
                _PHASE,
                "<w>/missing",
            ]
        ], rank
        assert seen["engine"] == ["cpu", "torch.distributed/gloo", True, _SHORT]
        assert seen["group"] == ["gloo", rank, 2]
        assert seen["store_file"] is True
        assert seen["solo"] == [0, 1, True]
        assert seen["int_like"] == [((1, "b0"), (1, "b1")), ((0, 0), (-3, 1))]
        assert seen["again"] == [
            f"rank {rank}: {head}: a default process group already exists in this process; "
            "wrap it with TorchDistributedEngine(group=...) instead of create()",
            rank,
            _PHASE,
            None,
        ]
        assert seen["closed"] == [False, False, False]
        assert seen.get("cuda", [False, False]) == [False, False]
    assert values[0]["deadline"] is True
