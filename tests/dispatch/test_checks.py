"""root / mode checks come first and are identical on both paths; UDS takes CPU only."""

from __future__ import annotations

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import (
    BroadcastError,
    ConfigurationError,
    CpuBroadcastDispatcher,
    DispatchPath,
    ParallelMode,
    UnsupportedDeviceError,
    UnsupportedModeError,
    UnsupportedRootError,
)

from . import _stack

# (label, root, mode): every bad combination the checks must refuse
BAD_CALLS = [
    ("root=1", 1, ParallelMode.TP),
    ("root=-1", -1, ParallelMode.TP),
    ("root=True", True, ParallelMode.TP),
    ("mode=DP", 0, ParallelMode.DP),
    ("mode=FFN_TP", 0, ParallelMode.FFN_TP),
    ("mode='tp' string", 0, "tp"),
    ("root=1 and mode=DP", 1, ParallelMode.DP),
]


def _errors_on_current_path(stack: _stack.Stack, rank: int) -> list[tuple[str, str, str, bool]]:
    out = []
    for label, root, mode in BAD_CALLS:
        buffers = _stack.payload(rank, 1)
        try:
            stack.dispatcher.broadcast_cpu(buffers, root=root, mode=mode)
        except BroadcastError as exc:
            out.append((label, type(exc).__name__, str(exc), isinstance(exc, ConfigurationError)))
        else:
            out.append((label, "no error", "", False))
    return out


def _checks_rank(ctx: RankContext) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    try:
        # phase 1: cross-node layout -> collective path
        first = _stack.boot(stack, ctx, local_world_size=1)
        collective_errors = _errors_on_current_path(stack, ctx.rank)
        collective_events = stack.recorder.events
        buffers = _stack.payload(ctx.rank, 2)  # the group is still in step afterwards
        assert stack.dispatcher.broadcast_cpu(buffers) is DispatchPath.COLLECTIVE
        assert _stack.payload_bytes(buffers) == _stack.expected(2)
        stack.recorder.clear()
        # phase 2: same dispatcher, intra-node layout -> UDS path
        second = _stack.boot(stack, ctx)
        uds_errors = _errors_on_current_path(stack, ctx.rank)
        uds_events = stack.recorder.events
        buffers = _stack.payload(ctx.rank, 3)
        assert stack.dispatcher.broadcast_cpu(buffers) is DispatchPath.UDS
        assert _stack.payload_bytes(buffers) == _stack.expected(3)
        return {
            "paths": (str(first.path), str(second.path)),
            "collective": collective_errors,
            "uds": uds_errors,
            "events": (collective_events, uds_events),
            "broken": stack.broadcaster.statistics().broken,
        }
    finally:
        stack.dispatcher.teardown()


def test_root_and_mode_checks_identical_on_both_paths():
    results = run_ranks(_checks_rank, 2, **_stack.RUN).values()
    for rank, res in enumerate(results):
        assert res["paths"] == ("collective", "uds"), rank
        assert res["collective"] == res["uds"], f"rank {rank}: paths disagree"
        assert res["events"] == ((), ()), "a refused call must not reach either path"
        assert res["broken"] is False
        by_label = {label: (kind, msg, is_cfg) for label, kind, msg, is_cfg in res["uds"]}
        for label, _, _ in BAD_CALLS:
            kind, msg, is_cfg = by_label[label]
            assert is_cfg, f"{label}: {kind} is not a ConfigurationError"
            assert msg.startswith(f"rank {rank}: "), msg
        root_first = "root=1 and mode=DP"
        assert by_label[root_first][0] == UnsupportedRootError.__name__, "root is checked first"
        assert by_label["root=1"][0] == UnsupportedRootError.__name__
        assert "got root=1" in by_label["root=1"][1]
        assert by_label["mode=DP"][0] == UnsupportedModeError.__name__
        assert "got mode=ParallelMode.DP" in by_label["mode=DP"][1]
        assert by_label["mode='tp' string"][0] == UnsupportedModeError.__name__


def _device_rank(ctx: RankContext) -> dict[str, object]:
    import torch

    stack = _stack.make_stack(ctx)
    try:
        _stack.boot(stack, ctx)
        buffers = [*_stack.payload(ctx.rank, 4), torch.empty(8, device="meta")]
        try:
            stack.dispatcher.broadcast_cpu(buffers)
        except UnsupportedDeviceError as exc:
            error = (type(exc).__name__, str(exc))
        else:
            error = ("no error", "")
        events = stack.recorder.events
        untouched = _stack.payload_bytes(buffers[:-1]) == _stack.payload_bytes(
            _stack.payload(ctx.rank, 4)
        )
        good = _stack.payload(ctx.rank, 5)  # still in step: nothing was sent or read
        stack.dispatcher.broadcast_cpu(good)
        return {
            "error": error,
            "events": events,
            "untouched": untouched,
            "after": _stack.payload_bytes(good) == _stack.expected(5),
        }
    finally:
        stack.dispatcher.teardown()


def test_uds_path_refuses_non_cpu_tensors_before_any_io():
    results = run_ranks(_device_rank, 2, **_stack.RUN).values()
    for rank, res in enumerate(results):
        kind, message = res["error"]
        assert kind == "UnsupportedDeviceError", rank
        assert "buffer 5 is on device meta" in message and "requires CPU tensors" in message
        assert res["events"] == ()
        assert res["untouched"] and res["after"]


# -- pure checks in the pytest process (no torch op runs here) -------------------------


class _NoBroadcaster:
    """Fails the test if the dispatcher gets as far as choosing a path."""

    def is_initialized(self) -> bool:
        raise AssertionError("path chosen before the argument checks")

    def initialize(self, *args, **kwargs):
        raise AssertionError("unexpected")

    def broadcast(self, buffers, root=0):
        raise AssertionError("unexpected")

    def reset(self):
        pass


def _dispatcher():
    return CpuBroadcastDispatcher(_NoBroadcaster(), _stack.UnusedEngine(), rank=3)


def test_root_checked_before_buffers_and_path():
    with pytest.raises(UnsupportedRootError, match=r"^rank 3: .*supports only root=0; got root=2"):
        _dispatcher().broadcast_cpu(object(), root=2)  # type: ignore[arg-type]


def test_mode_checked_before_buffers_and_path():
    with pytest.raises(UnsupportedModeError, match=r"got mode=ParallelMode\.EP"):
        _dispatcher().broadcast_cpu(object(), mode=ParallelMode.EP)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("buffers", "pattern"),
    [
        (bytearray(4), "got a single bytearray; wrap it in a list"),
        ([b"abc"], "buffer 0 \\(bytes\\) is read-only"),
        ([bytearray(2), 17], "buffer 1 \\(int\\) is neither a torch tensor nor"),
        ({1, 2}, "takes a list of buffers, got set"),
    ],
)
def test_bad_buffer_lists_refused_before_path(buffers, pattern):
    with pytest.raises(ConfigurationError, match=pattern):
        _dispatcher().broadcast_cpu(buffers)


def test_errors_pickle_with_their_fields():
    import pickle

    exc = UnsupportedRootError("broadcast_cpu supports only root=0; got root=1", rank=1)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is UnsupportedRootError and str(back) == str(exc) and back.rank == 1
