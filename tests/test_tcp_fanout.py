"""Self-tests of ``tests/mutants/tcp_fanout.py``, the TCP broadcaster the mutant matrix judges
as its ``tcp`` baseline (the conformance suite judges it in full: ``nox -s mutants``; these
keep it working between matrix runs, on loopback, in a few seconds), and of the suite's
TCP-2 blame: a group that fails the first time is never TCP-2's FAIL.

The module is loaded under its matrix name ``mutants.tcp_fanout`` with ``tests/`` on
``sys.path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tpbcast.harness import FaultPlan, Kill, load_implementation, run_ranks

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

SPEC = "mutants.tcp_fanout:make"
CAN_NETNS = os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture(scope="module")
def impl():
    return load_implementation(SPEC)


def test_declares_transport_and_capabilities(impl):
    assert impl.transport == "tcp"
    assert {"deadlines", "endpoint", "error_details"} <= impl.capabilities
    bcast = impl.create()
    assert all(v is not None for v in bcast.default_deadlines().values())  # every wait bounded


@pytest.mark.parametrize("world_size", [2, 3])
def test_payloads_arrive_and_nothing_is_left(impl, world_size):
    sizes = [0, 1, 1000, 3 * 1024 * 1024 + 7, 5]

    def target(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=10)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        got = []
        for index, size in enumerate(sizes):
            data = bytes((index + i) % 251 for i in range(size))
            buf = bytearray(data) if ctx.rank == 0 else bytearray(size)
            bcast.broadcast(buf)
            got.append(hashlib.sha256(buf).hexdigest())
        generation = bcast.generation
        bcast.reset()
        return got, generation, bcast.generation, bcast.is_initialized()

    result = run_ranks(target, world_size, timeout=30)
    result.raise_for_failure()
    digests = [o.value[0] for o in result.outcomes]
    assert all(d == digests[0] for d in digests)
    assert all(o.value[1] + 1 == o.value[2] and not o.value[3] for o in result.outcomes)
    assert not result.leftover_files  # the rendezvous file is gone


def test_strangers_at_the_loopback_port_are_refused(impl):
    """Garbage, a connection closed at once and a silent one reach rank 0's port before
    the peer connects: the group forms and broadcasts as if they were not there."""

    def member(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=10)
        if ctx.rank == 1:
            ctx.wait("strangers in", timeout=20)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        buf = bytearray(b"x" * 64) if ctx.rank == 0 else bytearray(64)
        bcast.broadcast(buf)
        bcast.reset()
        if ctx.rank == 1:
            ctx.notify("done")
        return bytes(buf)

    def stranger(ctx):
        from mutants.tcp_fanout import rendezvous_path

        path = rendezvous_path(ctx.base_path)
        deadline = time.monotonic() + 20
        while not os.path.exists(path):  # rank 0 publishes its port inside initialize
            assert time.monotonic() < deadline, f"rank 0 never published {path}"
            time.sleep(0.01)
        with open(path) as fh:
            port = json.load(fh)["port"]
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]
        socks[0].sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\xff" * 64)
        socks[1].close()
        ctx.notify("strangers in")
        ctx.wait("done", timeout=20)
        for sock in socks:
            sock.close()
        return len(socks)

    result = run_ranks({0: member, 1: member, 2: stranger}, timeout=30)
    result.raise_for_failure()
    assert [o.value for o in result.outcomes] == [b"x" * 64, b"x" * 64, 3]


def test_a_dead_peer_is_an_error_naming_it(impl):
    """Rank 1 is SIGKILLed; rank 0's next broadcast fails at once (its kernel closed the
    connection), naming peer 1, its address and the errno, not at the 30 s deadline."""

    def target(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=30)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        ctx.point("after_init")
        if ctx.rank == 1:
            return None
        start = time.monotonic()
        try:
            for _ in range(64):
                bcast.broadcast(bytearray(8 * 1024 * 1024))
        except ConnectionError as exc:
            return time.monotonic() - start, str(exc), exc.peer, exc.errno_name
        return None

    faults = FaultPlan().at(1, "after_init", Kill(signal.SIGKILL))
    result = run_ranks(target, 2, faults=faults, timeout=30, fail_fast=False)
    root = result.outcomes[0]
    assert root.value is not None, root.summary()
    elapsed, message, peer, errno_name = root.value
    assert elapsed < 5 and peer == 1, root.value
    assert "peer 1 at 127.0.0.1:" in message and (errno_name is None or errno_name in message)


# ------------------------------------------------------------------------------ TCP-2 blame

_FAILING = '''
from mutants.tcp_fanout import TcpFanoutBroadcaster, TcpPeerClosedError

FAILS_IN = {group!r}  # which group's first broadcast fails on rank 1


class FailsInOneGroup(TcpFanoutBroadcaster):
    """The correct fan-out, except that rank 1 drops its connection in one group's first
    broadcast (as a peer that crashes would): that group's broadcast fails on both ranks."""

    groups = 0

    def initialize(self, rank, world_size, base_path):
        super().initialize(rank, world_size, base_path)
        self.groups += 1

    def _take(self, view):
        if self.groups == FAILS_IN:
            self._close_sockets()
            raise TcpPeerClosedError(f"rank 1: injected failure in group {{FAILS_IN}}")
        super()._take(view)


def make():
    return FailsInOneGroup()
'''


@pytest.mark.skipif(not CAN_NETNS, reason="TCP-2 runs in network namespaces: root and `ip`")
@pytest.mark.parametrize(
    ("group", "verdict"),
    [(1, "ERROR"), (2, "FAIL")],
    ids=["first-group-fails-is-not-tcp2s", "second-group-fails-is-tcp2s"],
)
def test_tcp2_blames_only_what_follows_the_first_group(tmp_path, group, verdict):
    """A group that fails the first time leaves TCP-2 inconclusive (ERROR, the first
    group's failure named); the same failure in the group re-made on the port after reset
    is TCP-2's FAIL."""
    (tmp_path / "failing_tcp.py").write_text(textwrap.dedent(_FAILING.format(group=group)))
    out = tmp_path / "out"
    path = os.pathsep.join([str(tmp_path), TESTS_DIR, os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpbcast.conformance",
            "--tpbcast-impl=failing_tcp:make",
            "--clauses=TCP-2",
            f"--report-dir={out}",
            "-n",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
        check=False,
    )
    report = out / "conformance.json"
    assert report.exists(), proc.stdout + proc.stderr
    clause = next(c for c in json.loads(report.read_text())["clauses"] if c["id"] == "TCP-2")
    assert clause["verdict"] == verdict, clause
    if verdict == "ERROR":
        assert "first group on the port did not form" in clause["message"], clause
        assert "injected failure in group 1" in clause["message"], clause
