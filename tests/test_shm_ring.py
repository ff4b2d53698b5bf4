"""Self-tests of ``tests/mutants/shm_ring.py``, the shared-memory ring the mutant matrix
judges as its ``shm`` baseline (the conformance suite's SHM clauses judge it in full:
``nox -s mutants``; these only keep it working between matrix runs, in about a second).

The module is loaded under its matrix name ``mutants.shm_ring`` with ``tests/`` on
``sys.path``; no ``m_shm_*`` mutant is imported here (they subclass it, never patch it,
but a run of the suite against them is the matrix's business).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tpbcast.harness import FaultPlan, Kill, load_implementation, run_ranks

TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

SPEC = "mutants.shm_ring:make"


@pytest.fixture(scope="module")
def impl():
    return load_implementation(SPEC)


def _segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("tpbshm-")}


def test_declares_transport_and_capabilities(impl):
    assert impl.transport == "shm"
    assert {"deadlines", "generation"} <= impl.capabilities
    bcast = impl.create()
    assert bcast.chunk_size() > 0 and bcast.buffered_broadcasts > 1
    assert bcast.default_deadlines()["io"] is not None  # every wait is bounded by default


@pytest.mark.parametrize("world_size", [2, 3])
def test_payloads_around_the_chunk_size_arrive_and_nothing_is_left(impl, world_size):
    chunk = impl.create().chunk_size()
    sizes = [0, 1, chunk - 1, chunk, chunk + 1, 9 * chunk + 5, 100]

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

    mine = _segments()
    result = run_ranks(target, world_size, timeout=30)
    result.raise_for_failure()
    digests = [o.value[0] for o in result.outcomes]
    assert all(d == digests[0] for d in digests)
    assert all(o.value[1] + 1 == o.value[2] and not o.value[3] for o in result.outcomes)
    assert not result.leftover_files
    assert _segments() <= mine  # the segment's name was unlinked


def test_a_dead_reader_is_an_error_naming_it(impl):
    """Rank 1 is SIGKILLed; rank 0's next broadcast fails at once (not at its 30 s I/O
    deadline) and names peer 1."""

    def target(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=30)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        ctx.point("initialized")
        while True:  # rank 1 dies above; rank 0 waits until its death is visible
            start = time.monotonic()
            try:
                bcast.broadcast(bytearray(1000))
            except ConnectionError as exc:
                return str(exc), time.monotonic() - start
            if time.monotonic() - start > 5:
                return None

    faults = FaultPlan().at(1, "initialized", Kill(signal.SIGKILL))
    result = run_ranks(target, 2, timeout=30, faults=faults, fail_fast=False)
    assert result.outcomes[1].signal_name == "SIGKILL"
    message, took = result.outcomes[0].value
    assert "peer 1" in message and took < 5, message
