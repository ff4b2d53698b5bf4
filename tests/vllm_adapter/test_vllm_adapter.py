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
    """Every refusal the adapter makes without calling vLLM is an EngineNotAsked (the
    suite's UNSUPPORTED, never PASS), and comes at once (a reader rank outside the group
    never waits for the adapter's handle file)."""
    broadcaster = adapter.VllmBroadcaster()
    refusals = {
        "base_path": lambda: broadcaster.initialize(0, 2, ""),
        "int_args": lambda: broadcaster.initialize(0, 2.0, str(tmp_path / "g")),
        "deadline_range": lambda: broadcaster.set_deadlines(io=-1),
        "root": lambda: (
            setattr(broadcaster, "_config", (0, 1, "x")),
            broadcaster.broadcast(bytearray(1), root=1),
        ),
        "reinit": lambda: broadcaster.initialize(0, 1, "x"),
        "rank_range": lambda: adapter.VllmBroadcaster().initialize(5, 2, str(tmp_path / "g")),
    }
    for check, call in refusals.items():
        with pytest.raises(EngineNotAsked) as info:
            call()
        assert info.value.check == check
        assert "vLLM's MessageQueue was never asked" in str(info.value)
    assert issubclass(EngineNotAsked, CapabilityMissing)  # the suite's UNSUPPORTED


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
