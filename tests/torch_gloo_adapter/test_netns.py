"""The suite's two-host staging (conformance/tests/_netns.py): namespaces made, linked,
taken down and always removed; and the fault it stages is real: a gloo group whose peer's
host vanished stalls for its configured timeout (here 1.5 s), then raises."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time

import pytest

from tpbcast.conformance.tests import _netns
from tpbcast.harness import load_implementation, run_ranks

CAN = os.geteuid() == 0 and shutil.which("ip") is not None
needs_netns = pytest.mark.skipif(not CAN, reason="network namespaces need root and `ip`")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@needs_netns
def test_two_hosts_are_linked_taken_down_and_always_removed():
    with pytest.raises(RuntimeError, match="boom"), _netns.two_hosts() as hosts:
        assert set(hosts.names) <= _namespaces()
        assert all(str(os.getpid()) in name for name in hosts.names)  # unique under -n auto
        assert hosts.link_up(0) and hosts.link_up(1)
        hosts.vanish(1)
        assert not hosts.link_up(1)
        raise RuntimeError("boom")
    assert not set(hosts.names) & _namespaces()


def test_unavailable_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(_netns.NetnsUnavailableError, match="needs root"), _netns.two_hosts():
        pass


@needs_netns
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_a_vanished_host_stalls_gloo_for_its_timeout():
    impl = load_implementation("tpbcast.conformance.adapters.torch_gloo.adapter:make")
    timeout = 1.5

    def rank(ctx, hosts):
        host = min(ctx.rank, 1)
        _netns.enter(hosts.names[host])
        b = impl.create()
        b.set_deadlines(connect=20, io=timeout)
        b.set_endpoint(_netns.ADDRESSES[0], 29500, _netns.ADDRESSES[host])
        b.initialize(ctx.rank, 2, ctx.base_path)
        b.broadcast(bytearray(8))
        ctx.sync("up")
        if ctx.rank == 1:
            hosts.vanish(0)
            assert not hosts.link_up(0)  # the fault happened before the clock starts
        ctx.sync("vanished")
        if ctx.rank == 0:
            return None  # alive on a host that is gone: it sends nothing
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="Timed out waiting 1500ms"):
            b.broadcast(bytearray(8))
        return time.monotonic() - start

    with _netns.two_hosts() as hosts:
        result = run_ranks(rank, 2, args=(hosts,), timeout=30)
    result.raise_for_failure()
    assert timeout - 0.1 <= result.outcomes[1].value < timeout + 3.0
