"""The vLLM adapter without vLLM (a clear error naming what to install) and, where vLLM is
installed (``nox -s ecosystem``; CI does not install it), a real two-rank broadcast."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tpbcast.conformance.adapters.vllm import adapter
from tpbcast.harness import CapabilityMissing, EngineNotAsked, load_implementation, run_ranks

SPEC = "tpbcast.conformance.adapters.vllm.adapter:make"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_missing_vllm_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.distributed.device_communicators.shm_broadcast", None)
    with pytest.raises(adapter.VllmMissingError, match=r"--no-deps vllm==0\.33\.0.*ecosystem"):
        adapter.make()


def test_declares_shm_and_honest_deadlines():
    broadcaster = adapter.VllmBroadcaster()
    assert broadcaster.transport == "shm"
    assert broadcaster.default_deadlines() == {"connect": 120.0, "init": None, "io": None}
    with pytest.raises(EngineNotAsked, match="before initialize"):
        broadcaster.broadcast(bytearray(1))


def test_what_the_adapter_decides_itself_is_never_vllms_answer(tmp_path):
    """Where vLLM has no place for what a call carries, the adapter refuses with an
    EngineNotAsked (the suite's UNSUPPORTED, never PASS) naming the surface vLLM lacks, at
    once and without vLLM."""
    broadcaster = adapter.VllmBroadcaster()
    refusals = {
        "base_path": (lambda: broadcaster.initialize(0, 2, ""), "process_group"),
        "int_args": (
            lambda: broadcaster.initialize(0, 2.0, str(tmp_path / "g")),
            "process_group",
        ),
        "deadline_range": (lambda: broadcaster.set_deadlines(io=-1), "deadline_settings"),
        "not_initialized": (lambda: broadcaster.broadcast(bytearray(1), root=1), "lifecycle"),
    }
    for check, (call, surface) in refusals.items():
        with pytest.raises(EngineNotAsked) as info:
            call()
        assert (info.value.check, info.value.surface) == (check, surface)
        assert "vLLM's MessageQueue was never asked" in str(info.value)
        assert "the engine has no" in str(info.value)
    assert issubclass(EngineNotAsked, CapabilityMissing)  # the suite's UNSUPPORTED


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (nox -s ecosystem installs it)")
def test_what_vllm_has_a_place_for_is_vllms_answer(tmp_path):
    """A world size, a root and a world-size-1 broadcast are passed on: vLLM's own
    assertions answer (MessageQueue's reader count, GroupCoordinator.broadcast_object's
    src checks), never the adapter."""
    adapter.make()
    answers = {
        "world_size 0": lambda: adapter.VllmBroadcaster().initialize(0, 0, str(tmp_path / "g")),
        "world_size -1": lambda: adapter.VllmBroadcaster().initialize(0, -1, str(tmp_path / "g")),
    }
    alone = adapter.VllmBroadcaster()
    alone.initialize(0, 1, str(tmp_path / "one"))
    answers["root 1 at world size 1"] = lambda: alone.broadcast(bytearray(1), root=1)
    for what, call in answers.items():
        with pytest.raises(AssertionError) as info:  # vLLM's own assert statements
            call()
        assert not isinstance(info.value, CapabilityMissing), what
    assert "Invalid src rank (1)" in str(info.value)
    alone.broadcast(bytearray(1))  # root 0: vLLM's bypass for a group of one
    alone.initialize(0, 1, str(tmp_path / "one"))  # asked again: built again (nothing at 1)
    alone.broadcast(bytearray(1))  # the re-built group of one still broadcasts
    alone.reset()


def test_is_initialized_is_never_the_adapters_answer():
    """vLLM has no initialized state to ask; the adapter's own bookkeeping would earn vLLM
    INIT-12's PASS, so the contract's member says the engine was never asked."""
    bcast = adapter.VllmBroadcaster()
    with pytest.raises(EngineNotAsked) as info:
        bcast.is_initialized()
    assert info.value.surface == "lifecycle"
    assert "vLLM's MessageQueue has no initialized state" in str(info.value)


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (nox -s ecosystem installs it)")
def test_two_ranks_through_vllm():
    impl = load_implementation(SPEC)
    assert impl.name == "vllm MessageQueue" and impl.version == "0.33.0"

    def rank(ctx):
        b = impl.create()
        b.set_deadlines(connect=10, io=10)
        b.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        small = bytearray(b"hello" if ctx.rank == 0 else bytes(5))
        large = bytearray(os.urandom(1 << 20) if ctx.rank == 0 else bytes(1 << 20))
        b.broadcast([small, large])
        b.reset()
        return bytes(small), bytes(large), os.path.exists(ctx.base_path + "_vllm_handle.json")

    result = run_ranks(rank, 2, timeout=60)
    result.raise_for_failure()
    values = [o.value for o in result.outcomes]
    assert values[0][:2] == values[1][:2] and values[0][0] == b"hello"
    assert values[0][2] is False  # rank 0 removed the handle file once every reader joined


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (nox -s ecosystem installs it)")
def test_root_and_reinit_are_asked_of_vllm():
    """On a live group, root 1 is refused by vLLM's GroupCoordinator assertion on both
    ranks; a second initialize builds a new queue (vLLM has none to keep) that works."""
    impl = load_implementation(SPEC)

    def rank(ctx):
        b = impl.create()
        b.set_deadlines(connect=10, io=10)
        b.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        try:
            b.broadcast(bytearray(4), root=1)
        except AssertionError as exc:
            refused = str(exc)
        ctx.sync("refused")
        b.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        buf = bytearray(b"data" if ctx.rank == 0 else bytes(4))
        b.broadcast(buf)
        b.reset()
        return refused, bytes(buf)

    result = run_ranks(rank, 2, timeout=60)
    result.raise_for_failure()
    for outcome in result.outcomes:
        assert outcome.value == ("Message queue broadcaster only supports src=0", b"data")
